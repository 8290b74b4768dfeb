"""Cross-fitted choice of gamma (and policy): no reported interval rests on a choice made on its own data.

The campaign (:mod:`specdec.experiments.campaign`) times, on the same prompts, several plain decoders and many
speculative configurations; a *family* is one method on one engine (e.g. prompt lookup on the
lean engine at 1 thread) and its configurations differ only in gamma (or the adaptive policy's
start). Picking the best gamma after the fact and reporting its interval on the same prompts
overstates it (the winner's curse). This module reports instead, torch-free (numpy only):

* **Halves fixed in advance.** A prompt's fold is its position in its task's evaluation list
  modulo 2 (:func:`fold_of`), so each half holds the same number of prompts of every task.
* **Cross-fitting.** For each family: choose the configuration with the highest geometric-mean
  tokens/s on half 0, report it on half 1; choose on half 1, report on half 0 (ties go to the
  first configuration in the family's order). Every prompt's number comes from a choice made
  without it.
* **The fastest plain decoder**, the baseline of "faster than what?", is chosen the same way,
  by the same rule (highest geometric-mean tokens/s on the other half): it is no hindsight
  pick either, so a noisy plain decoder that wins by luck on the reported prompts does not
  deflate (and a lucky speculative run does not inflate) the ratios.
* **Intervals.** 95 % percentile bootstrap over prompts (:func:`specdec.theory.intervals.bootstrap_ci`)
  resampling prompts jointly for every configuration (paired), within each half (and task,
  when tasks are pooled) so the halves keep their sizes, and re-making both choices on every
  resample: the interval covers the choice's own variability. Verdicts only from intervals
  (:func:`specdec.theory.intervals.verdict`): faster, slower, or not distinguishable; "too few prompts"
  where a stratum of the bootstrap holds one prompt (its interval cannot vary: a --quick run).
* **Timings stay raw.** Every input is a run's ``decode_s`` and ``new_tokens``; a prompt's
  tokens/s is the median over repetitions of new_tokens / decode_s (:func:`prompt_rates`; the mean
  and the fastest repetition, and end-to-end time with the prefill, on request), so every ratio can
  be recomputed from the stored runs.

Reported per stratum (temperature x task, and temperature with the tasks pooled): each plain
decoder's tokens/s and its ratio to the fastest plain; each family (cross-fitted) and each
fixed configuration (no choice: each gamma is a setting stated in advance): tokens/s, speedup
over the same engine's plain decoding and over the fastest plain decoder, with intervals and
verdicts; and ``any_speculative``, every speculative configuration of every engine as one
family (method, engine and gamma chosen on the other half) against the fastest plain decoder:
the answer to "does speculating, configured without hindsight, beat the best plain decoder?".
The hindsight pick (best on all prompts, reported on all) is kept beside each
family, labelled, only to show what cross-fitting removes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from specdec.theory.intervals import bootstrap_ci, paired_speedup, verdict

__all__ = [
    "ESTIMATORS", "TIE", "TIMINGS", "TOO_FEW", "analyse", "any_speculative", "crossfit_family", "fold_of",
    "prompt_rates",
]  # fmt: skip

#: The verdict when an interval contains 1.
TIE = "not distinguishable"
#: The verdict when a bootstrap stratum holds a single prompt (its resamples cannot vary).
TOO_FEW = "too few prompts"


def fold_of(index: int) -> int:
    """The half of a prompt at position ``index`` in its task's evaluation list: index mod 2."""
    return int(index) % 2


#: How a prompt's repetitions become one tokens/s (:func:`prompt_rates`). ``median`` is the book's
#: estimator: robust to the odd repetition a background task slows, without favouring the luckiest
#: one. ``mean`` (of the repetitions' tokens/s) and ``min_time`` (the fastest repetition: the least
#: disturbed, llama-bench's and pytest-benchmark's "min") are there to show that a verdict does not
#: hang on that choice.
ESTIMATORS = ("median", "mean", "min_time")
#: What a run's time covers: ``decode`` (new_tokens / decode_s: tokens/s after the prompt) or
#: ``end_to_end`` (new_tokens / (prefill_s + decode_s): the latency a user waits for the whole reply).
TIMINGS = ("decode", "end_to_end")


def prompt_rates(
    runs: Iterable[Mapping[str, Any]], *, estimator: str = "median", timing: str = "decode"
) -> dict[tuple[Any, ...], float]:
    """Per (temperature, task, prompt, config): the ``estimator`` (:data:`ESTIMATORS`) over
    repetitions of each run's tokens/s under ``timing`` (:data:`TIMINGS`)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}; got {estimator!r}")
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS}; got {timing!r}")
    samples: dict[tuple[Any, ...], list[float]] = {}
    for r in runs:
        key = (float(r["temperature"]), r["task"], r["prompt"], r["config"])
        seconds = float(r["decode_s"]) + (float(r["prefill_s"]) if timing == "end_to_end" else 0.0)
        samples.setdefault(key, []).append(float(r["new_tokens"]) / seconds)
    reduce = {"median": np.median, "mean": np.mean, "min_time": np.max}[estimator]
    return {k: float(reduce(v)) for k, v in samples.items()}


def _choose(logs: np.ndarray, train: np.ndarray) -> np.ndarray:
    """Index of the row of ``logs`` (m, B, n) with the highest mean over the prompts where ``train``
    (B, n) holds, per resample: (B,). Ties to the lowest index (argmax's first)."""
    counts = train.sum(axis=-1)
    if np.any(counts == 0):
        raise ValueError("a half has no prompt: cross-fitting needs prompts in both halves")
    means = (logs * train).sum(axis=-1) / counts
    return np.argmax(means, axis=0)


def _oof(logs: np.ndarray, folds: np.ndarray) -> np.ndarray:
    """Out-of-fold log rates (B, n): each prompt gets the row chosen on the other half."""
    pick0 = _choose(logs, folds == 0)  # chosen on half 0, reported on half 1
    pick1 = _choose(logs, folds == 1)
    chosen = np.where(folds == 1, pick0[:, None], pick1[:, None])  # (B, n)
    return np.take_along_axis(logs, chosen[None], axis=0)[0]


def crossfit_family(
    family: np.ndarray,
    same_plain: np.ndarray,
    plains: np.ndarray,
    folds: Sequence[int] | np.ndarray,
    *,
    strata: Sequence[Any] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """Cross-fitted tokens/s and speedups of one family.

    ``family`` (m, n): tokens/s of its m configurations on n prompts; ``same_plain`` (n,): the same
    engine's plain decoding; ``plains`` (k, n): every plain decoder (the fastest is chosen among
    them, cross-fitted); ``folds`` (n,) 0/1; ``strata`` the bootstrap's strata (default: the
    folds). Returns the estimates with (low, high) intervals, verdicts, the choices made on each
    half (indices), the per-prompt out-of-fold values, and the hindsight pick for contrast.
    """
    fam = np.log(np.asarray(family, dtype=float))
    own = np.log(np.asarray(same_plain, dtype=float))
    pls = np.log(np.asarray(plains, dtype=float))
    f = np.asarray(folds, dtype=int)
    n = f.size
    if fam.ndim != 2 or fam.shape[1] != n or own.shape != (n,) or pls.ndim != 2 or pls.shape[1] != n:
        raise ValueError(f"shapes must pair up over {n} prompts; got {fam.shape}, {own.shape}, {pls.shape}")
    if not set(f.tolist()) <= {0, 1}:
        raise ValueError(f"folds must be 0 or 1; got {sorted(set(f.tolist()))}")
    labels = list(strata) if strata is not None else f.tolist()
    too_few = min(labels.count(x) for x in set(labels)) < 2

    def parts(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ix = np.atleast_2d(np.asarray(idx)).astype(int)  # (B, n) resampled prompt indices
        fi = f[ix]
        spec = _oof(fam[:, ix], fi)
        base = _oof(pls[:, ix], fi)
        return spec, own[ix], base

    # Not paired_speedup: each resample re-makes both choices (configuration, fastest plain) on its halves
    def stat(which: str):
        def s(idx: np.ndarray, axis: int | None = None) -> Any:
            spec, o, base = parts(idx)
            val = {"tok_s": spec, "vs_same_plain": spec - o, "vs_fastest_plain": spec - base}[which]
            out = np.exp(val.mean(axis=-1))
            return out if axis is not None else float(out[0])

        return s

    out: dict[str, Any] = {}
    idx = np.arange(n, dtype=float)
    for which in ("tok_s", "vs_same_plain", "vs_fastest_plain"):
        est, low, high = bootstrap_ci(idx, stat(which), level=level, n_boot=n_boot, seed=seed, strata=labels)
        out[which] = {"estimate": est, "low": low, "high": high}
        if which != "tok_s":
            out[which]["verdict"] = TOO_FEW if too_few else verdict(low, high, tie=TIE)
    full = np.arange(n)[None]
    spec, o, base = parts(full)
    out["chosen_on_half"] = {
        "0": int(_choose(fam[:, full], f[full] == 0)[0]),
        "1": int(_choose(fam[:, full], f[full] == 1)[0]),
    }
    out["fastest_plain_on_half"] = {
        "0": int(_choose(pls[:, full], f[full] == 0)[0]),
        "1": int(_choose(pls[:, full], f[full] == 1)[0]),
    }
    out["per_prompt"] = {
        "tok_s": np.exp(spec[0]).tolist(),
        "same_plain_tok_s": np.exp(o[0]).tolist(),
        "fastest_plain_tok_s": np.exp(base[0]).tolist(),
    }
    best = int(np.argmax(fam.mean(axis=1)))  # the hindsight contrast: deliberately no estimate, no interval
    out["hindsight"] = {
        "chosen": best,
        "vs_same_plain": float(np.exp((fam[best] - own).mean())),
        "note": "best on all prompts, reported on all: NOT an estimate (shown to size the winner's curse)",
    }
    return out


def _ratio(num: np.ndarray, den: np.ndarray, strata: list[Any], n_boot: int, seed: int, level: float):
    """The speedup of tokens/s ``num`` over tokens/s ``den`` (per prompt) with its verdict: no choice is
    made, so it is :func:`specdec.theory.intervals.paired_speedup` of the time per token, its bootstrap
    stratified (within halves and tasks) like the cross-fit's."""
    est, low, high = paired_speedup(
        1.0 / np.asarray(den), 1.0 / np.asarray(num), level=level, n_boot=n_boot, seed=seed, strata=strata
    )
    too_few = min(strata.count(x) for x in set(strata)) < 2
    return {
        "estimate": est,
        "low": low,
        "high": high,
        "verdict": TOO_FEW if too_few else verdict(low, high, tie=TIE),
    }


def analyse(
    runs: Sequence[Mapping[str, Any]],
    configs: Sequence[Mapping[str, Any]],
    folds: Mapping[tuple[str, str], int],
    *,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    estimator: str = "median",
    timing: str = "decode",
) -> dict[str, Any]:
    """The campaign's tables from its stored runs (a prompt's tokens/s: :func:`prompt_rates` with
    ``estimator`` and ``timing``).

    ``runs``: rows with ``temperature``, ``task``, ``prompt``, ``config``, ``decode_s``,
    ``new_tokens``; ``configs``: the configurations in their stated order, each with ``id``,
    ``engine``, ``family`` and ``plain`` (True for an engine's plain decoding); ``folds``:
    (task, prompt) -> 0/1 (:func:`fold_of`). Returns ``{"rule": ..., "strata": [...]}``, one
    stratum per temperature x task and per temperature with the tasks pooled ("all").
    """
    rates = prompt_rates(runs, estimator=estimator, timing=timing)
    plain_ids = [c["id"] for c in configs if c["plain"]]
    plain_of = {c["engine"]: c["id"] for c in configs if c["plain"]}
    families: dict[str, list[Mapping[str, Any]]] = {}
    for c in configs:
        if not c["plain"]:
            families.setdefault(c["family"], []).append(c)
    temps = sorted({float(r["temperature"]) for r in runs})
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    strata_out = []
    for temp in temps:
        for task in [*tasks, "all"]:
            units = sorted(
                {(t, p) for (tt, t, p, _) in rates if tt == temp and (task == "all" or t == task)},
                key=lambda u: (tasks.index(u[0]), folds[u], str(u[1])),
            )
            if len(units) < 2 or {folds[u] for u in units} != {0, 1}:
                continue
            fold = np.array([folds[u] for u in units])
            strata = [(u[0], folds[u]) for u in units]

            def mat(ids: Sequence[str], temp: float = temp, units: list = units) -> np.ndarray:
                return np.array([[rates[(temp, t, p, i)] for (t, p) in units] for i in ids])

            plains = mat(plain_ids)
            fastest = crossfit_family(
                plains, plains[0], plains, fold, strata=strata, n_boot=n_boot, seed=seed, level=level
            )
            entry: dict[str, Any] = {
                "temperature": temp,
                "task": task,
                "prompts": [list(u) for u in units],
                "folds": fold.tolist(),
                "fastest_plain_chosen_on_half": {
                    h: plain_ids[i] for h, i in fastest["fastest_plain_on_half"].items()
                },
                "fastest_plain_tok_s": fastest["tok_s"],
                "plain": [],
                "families": [],
                "fixed": [],
            }
            for i, pid in enumerate(plain_ids):
                one = crossfit_family(
                    plains[i : i + 1], plains[i], plains, fold, strata=strata, n_boot=n_boot, seed=seed,
                    level=level,
                )  # fmt: skip
                entry["plain"].append(
                    {"config": pid, "tok_s": one["tok_s"], "vs_fastest_plain": one["vs_fastest_plain"]}
                )
            for fam, members in families.items():
                ids = [c["id"] for c in members]
                own = mat([plain_of[members[0]["engine"]]])[0]
                res = crossfit_family(
                    mat(ids), own, plains, fold, strata=strata, n_boot=n_boot, seed=seed, level=level
                )
                entry["families"].append(
                    {
                        "family": fam,
                        "engine": members[0]["engine"],
                        "configs": ids,
                        "chosen_on_half": {h: ids[j] for h, j in res.pop("chosen_on_half").items()},
                        "fastest_plain_on_half": {
                            h: plain_ids[j] for h, j in res.pop("fastest_plain_on_half").items()
                        },
                        **res,
                        "hindsight": res["hindsight"] | {"chosen": ids[res["hindsight"]["chosen"]]},
                    }
                )
                for c in members:
                    spec = mat([c["id"]])
                    fx = crossfit_family(
                        spec, own, plains, fold, strata=strata, n_boot=n_boot, seed=seed, level=level
                    )
                    entry["fixed"].append(
                        {
                            "config": c["id"],
                            "family": fam,
                            "tok_s": fx["tok_s"],
                            "vs_same_plain": _ratio(spec[0], own, strata, n_boot, seed, level),
                            "vs_fastest_plain": fx["vs_fastest_plain"],
                        }
                    )
            # the reader's question: speculate at all, and how? Every speculative configuration of
            # every engine as one family, chosen on the other half like the rest, against the
            # fastest plain decoder (also chosen on the other half)
            spec_ids = [c["id"] for c in configs if not c["plain"]]
            if spec_ids:
                res = crossfit_family(
                    mat(spec_ids), plains[0], plains, fold, strata=strata, n_boot=n_boot, seed=seed,
                    level=level,
                )  # fmt: skip
                entry["any_speculative"] = {
                    "configs": len(spec_ids),
                    "chosen_on_half": {h: spec_ids[j] for h, j in res["chosen_on_half"].items()},
                    "tok_s": res["tok_s"],
                    "vs_fastest_plain": res["vs_fastest_plain"],
                    "per_prompt": {k: res["per_prompt"][k] for k in ("tok_s", "fastest_plain_tok_s")},
                    "hindsight": {
                        "chosen": spec_ids[res["hindsight"]["chosen"]],
                        "note": res["hindsight"]["note"],
                    },
                }
            strata_out.append(entry)
    return {
        "rule": (
            "halves: a prompt's position in its task's list mod 2; per family, the configuration with the "
            "highest geometric-mean tokens/s on one half is reported on the other, and vice versa; the "
            "fastest plain decoder is chosen by the same rule; 95 % percentile bootstrap over prompts "
            "(jointly for every configuration, within halves and tasks), re-choosing on every resample; "
            "verdicts from the interval only; any_speculative: every speculative configuration as one family"
        ),
        "n_boot": n_boot,
        "level": level,
        "estimator": estimator,
        "timing": timing,
        "strata": strata_out,
    }


def any_speculative(
    runs: Sequence[Mapping[str, Any]],
    configs: Sequence[Mapping[str, Any]],
    folds: Mapping[tuple[str, str], int],
    *,
    temperature: float,
    tasks: Sequence[str],
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """The headline of :func:`analyse` (``any_speculative``: every speculative configuration as one
    family, against the fastest plain decoder, both chosen on the other half) on the prompts of ``tasks``
    only, at ``temperature``, by the book's estimator (the median of a prompt's repetitions, decode time):
    the same choice and the same stratified bootstrap (within task and half), for a reader who asks
    whether the verdict rests on one task. Returns ``vs_fastest_plain`` (estimate, low, high, verdict),
    ``chosen_on_half`` and ``prompts``."""
    if not tasks:
        raise ValueError("tasks must name at least one task")
    rates = prompt_rates(runs)
    units = sorted(
        {(t, p) for (tt, t, p, _) in rates if tt == float(temperature) and t in tasks},
        key=lambda u: (list(tasks).index(u[0]), folds[u], str(u[1])),
    )
    if not units or {folds[u] for u in units} != {0, 1}:
        raise ValueError(f"tasks {list(tasks)} at temperature {temperature} hold no prompts in both halves")
    plain_ids = [c["id"] for c in configs if c["plain"]]
    spec_ids = [c["id"] for c in configs if not c["plain"]]

    def mat(ids: Sequence[str]) -> np.ndarray:
        return np.array([[rates[(float(temperature), t, p, i)] for (t, p) in units] for i in ids])

    plains = mat(plain_ids)
    fold = np.array([folds[u] for u in units])
    res = crossfit_family(
        mat(spec_ids), plains[0], plains, fold, strata=[(u[0], folds[u]) for u in units], n_boot=n_boot,
        seed=seed, level=level,
    )  # fmt: skip
    return {
        "vs_fastest_plain": res["vs_fastest_plain"],
        "chosen_on_half": {h: spec_ids[j] for h, j in res["chosen_on_half"].items()},
        "prompts": len(units),
    }
