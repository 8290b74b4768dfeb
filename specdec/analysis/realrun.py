"""Analysing real decoding runs: pooled counts, the i.i.d. checks, the gap to Theorem 3.8, pairs.

One definition each of the quantities the real-decoding benchmark and chapter share (the draft
cost c is :func:`specdec.engine.stats.cost_coefficient`):

* :func:`first_divergence` -- where two generations first differ (None: identical).
* :func:`pool_rounds` adds up the per-round counts of several calls with one gamma (one per
  prompt): how many rounds drafted gamma, fewer, or nothing (prompt lookup's *coverage*), and,
  from the rounds that drafted the full gamma only, the histogram of accepted drafts A, the
  acceptance by draft position and the acceptance rate. The i.i.d. model of Section 3.1 is
  fitted to, and compared with, those same rounds (:func:`iid_fit`): the truncated geometric
  (:func:`specdec.theory.speedup.accepted_pmf`) is the law of A for rounds of gamma drafts; shorter
  rounds test coverage, not dependence between positions.
* :func:`position_rates` -- the acceptance rate at each draft position of the full rounds with
  a 95 % bootstrap interval over prompts, and the rise from the first position to the last
  with its own interval (a rise counts only when that interval lies above 0).
* :func:`observed_verify_cost` -- the mean verify cost T(k_r+1)/T(1) of rounds at their own
  draft lengths k_r.
* :func:`speedup_gap` writes measured / predicted as a product of four factors, each the ratio
  of two consecutive models of a round (see its docstring); the product is exact.
* :func:`unit_bootstrap` -- the percentile bootstrap of :mod:`specdec.theory.intervals` (same
  resamples) for any statistic of resampled units (prompts), e.g. a measured/expected ratio
  whose alpha and c are re-estimated on each resample.
* :func:`load_records` lists the result files of ``specdec run real-decoding``, every drafter named by
  the registry's spec (``early-exit:8``, ``draft:distil-l1``): the older records' names (``ee-8``,
  ``draft-distil-l1``) are mapped once, here (:func:`registry_spec`, :func:`registry_names`), and the
  committed files are left as they were written.
* :func:`slower_accurate_pairs` finds the paper's counterexample in a record's table: two
  drafters of one task and temperature where the one with the higher alpha is the slower on
  the wall clock (with intervals: the two speedup intervals separate); :func:`same_family`,
  :func:`fastest_pair`, :func:`widest_win` and :func:`family_scaling` pick the pairs and the
  family-wide pattern that the chapter shows. Each returns ``None`` (or an empty list) when the
  record holds no such pair.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specdec.theory.checks import check_float, check_int
from specdec.theory.speedup import (
    accepted_pmf,
    expected_tokens,
    walltime_speedup,
    walltime_speedup_measured,
    walltime_speedup_rounds,
)
from specdec.theory.tokens import first_divergence  # re-exported: Part IV's readers use it here

__all__ = [
    "RECORD_FORMAT",
    "machine_probe",
    "main_record",
    "drafter_family",
    "family_scaling",
    "fastest_pair",
    "first_divergence",
    "iid_fit",
    "load_records",
    "observed_verify_cost",
    "pool_rounds",
    "position_rates",
    "registry_names",
    "registry_spec",
    "same_family",
    "slower_accurate_pairs",
    "speedup_gap",
    "unit_bootstrap",
    "widest_win",
]

#: The format of the records that ``specdec run real-decoding`` writes now (repeated,
#: interleaved timings with bootstrap intervals). Older records have no ``"format"`` field.
RECORD_FORMAT = 2

#: Columns a table row must have for the pair search.
PAIR_COLUMNS = ("temperature", "task", "drafter", "alpha", "c", "measured")

#: The drafter registry's kinds (:mod:`specdec.drafting.registry`) of the model drafters a real-decoding
#: record holds, each a family (:func:`drafter_family`).
MODEL_FAMILIES = ("early-exit", "draft")

#: Where a real-decoding record names drafters (:func:`registry_names`): keys whose value is one name or
#: a list of names, keys whose mapping is keyed by names, and settings that are comma lists of names.
_NAME_KEYS = frozenset({"drafter", "drafters", "timed_drafters", "alpha_only_drafters", "timed_names",
                        "alpha_names"})  # fmt: skip
_KEYED_BY_NAME = frozenset({"draft_modes", "c_forward"})
_LIST_SETTINGS = frozenset({"timed", "alpha_only", "sweep_drafters"})


def registry_spec(name: str) -> str:
    """The drafter registry's spec of a drafter name in a real-decoding record: the older names ``ee-N``
    (early exit) -> ``early-exit:N`` and ``draft-NAME`` (a distilled draft) -> ``draft:NAME``; any other
    name (``lookup``, ``bigram``, ``unigram``, ``plain``, a spec) as it is."""
    if name.startswith("ee-") and name[3:].isdigit():
        return f"early-exit:{name[3:]}"
    if name.startswith("draft-") and ":" not in name and "," not in name:
        return f"draft:{name.removeprefix('draft-')}"
    return name


def registry_names(record: Any, key: str | None = None) -> Any:
    """``record`` (a real-decoding record, or a part of it under ``key``) with every drafter named by its
    registry spec (:func:`registry_spec`): the values under ``drafter``, ``drafters``, ``timed_drafters``,
    ``alpha_only_drafters``, ``timed_names`` and ``alpha_names``, the keys of ``draft_modes`` and
    ``c_forward``, and the settings ``timed``, ``alpha_only`` and ``sweep_drafters`` (comma lists).
    A new dict; records already named by specs come back equal."""
    if isinstance(record, Mapping):
        out = {}
        for k, v in record.items():
            if k in _KEYED_BY_NAME and isinstance(v, Mapping):
                out[k] = {registry_spec(str(n)): registry_names(x) for n, x in v.items()}
            elif k in _NAME_KEYS and isinstance(v, str):
                out[k] = registry_spec(v)
            elif k in _NAME_KEYS and isinstance(v, list) and all(isinstance(n, str) for n in v):
                out[k] = [registry_spec(n) for n in v]
            elif k in _LIST_SETTINGS and key == "settings" and isinstance(v, str):
                out[k] = ",".join(registry_spec(n) for n in v.split(","))
            else:
                out[k] = registry_names(v, k)
        return out
    if isinstance(record, list):
        return [registry_names(v, key) for v in record]
    return record


def _counts(s: Any) -> tuple[int, list[int], list[int], int]:
    """gamma, drafted, accepted, new_tokens of a :class:`specdec.engine.stats.Stats` or of its
    ``summary()`` dict (read by attribute or by key: this module imports no torch)."""
    if not isinstance(s, Mapping):
        return s.gamma, list(s.drafted), list(s.accepted), s.new_tokens
    return int(s["gamma"]), list(s["drafted"]), list(s["accepted"]), int(s["new_tokens"])


def full_round_counts(drafted: Sequence[int], accepted: Sequence[int], gamma: int) -> dict[str, np.ndarray]:
    """Counts over the rounds that drafted all ``gamma`` tokens: ``hist`` (index a: rounds with
    A = a), ``examined_at`` and ``accepted_at`` per draft position (position i, 0-based, is
    examined when drafts 0..i-1 were accepted; accepted when A > i)."""
    hist = np.zeros(gamma + 1, dtype=np.int64)
    for k, a in zip(drafted, accepted, strict=True):
        if k == gamma:
            hist[a] += 1
    at_least = np.cumsum(hist[::-1])[::-1]  # index i: full rounds with A >= i (one pass, not gamma)
    return {"hist": hist, "examined_at": at_least[:gamma].copy(), "accepted_at": at_least[1:].copy()}


def pool_rounds(stats: Iterable[Any]) -> dict[str, Any]:
    """Pooled counts of several calls with one gamma (Stats, or their ``summary()`` dicts).

    All rounds: ``rounds``, ``new_tokens``, ``tokens_per_round`` (new tokens / rounds),
    ``mean_drafted``, ``drafted`` (every round's k), ``alpha_accept_rate`` (accepted / examined)
    and the coverage counts ``rounds_none`` (k = 0), ``rounds_short`` (0 < k < gamma) and
    ``full_rounds`` (k = gamma). Full rounds only: ``accepted_hist`` (index a: full rounds with
    A = a), ``examined_at`` / ``accepted_at`` per draft position, ``accept_at`` (their ratio,
    NaN where never examined) and ``full_accept_rate`` (accepted over examined drafts of those
    same rounds: the rate to fit the i.i.d. law to, :func:`iid_fit`).
    """
    counts = [_counts(s) for s in stats]
    if not counts:
        raise ValueError("stats must hold at least one Stats")
    gammas = {g for g, _, _, _ in counts}
    if len(gammas) != 1 or 0 in gammas:
        raise ValueError(f"stats must share one gamma >= 1; got {sorted(gammas)}")
    gamma = gammas.pop()
    drafted = [k for _, ks, _, _ in counts for k in ks]
    accepted = [a for _, _, acc, _ in counts for a in acc]
    full = full_round_counts(drafted, accepted, gamma)
    rounds, new_tokens = len(drafted), sum(n for _, _, _, n in counts)
    examined_all = sum(min(a + 1, k) for k, a in zip(drafted, accepted, strict=True))
    ex, ac = full["examined_at"], full["accepted_at"]
    with np.errstate(invalid="ignore", divide="ignore"):
        accept_at = np.where(ex > 0, ac / np.maximum(ex, 1), np.nan)
    nan = float("nan")
    return {
        "gamma": gamma,
        "rounds": rounds,
        "new_tokens": new_tokens,
        "tokens_per_round": new_tokens / rounds if rounds else nan,
        "mean_drafted": sum(drafted) / rounds if rounds else nan,
        "drafted": drafted,
        "alpha_accept_rate": sum(accepted) / examined_all if examined_all else nan,
        "rounds_none": sum(k == 0 for k in drafted),
        "rounds_short": sum(0 < k < gamma for k in drafted),
        "full_rounds": int(full["hist"].sum()),
        "accepted_hist": full["hist"].tolist(),
        "examined_at": ex.tolist(),
        "accepted_at": ac.tolist(),
        "accept_at": accept_at.tolist(),
        "full_accept_rate": float(ac.sum() / ex.sum()) if ex.sum() else nan,
    }


def iid_fit(accepted_hist: Sequence[int]) -> dict[str, Any]:
    """The i.i.d. law of A fitted to a histogram of full rounds, and how far the histogram is from it.

    ``accepted_hist[a]``: rounds of gamma = len - 1 drafts with A = a. The rate is the
    maximum-likelihood alpha of the truncated geometric on those very rounds (accepted drafts
    over examined ones: a round with A = a < gamma examined a + 1 positions, one with A = gamma
    examined gamma). Returns ``rate``, ``observed`` (the histogram as fractions), ``iid``
    (:func:`specdec.theory.speedup.accepted_pmf` at the rate), ``tv`` (their total-variation
    distance), the observed and i.i.d. E[A] and P(A = 0), and ``rounds``.
    """
    hist = np.asarray(accepted_hist, dtype=float)
    if hist.ndim != 1 or hist.size < 2 or np.any(hist < 0) or hist.sum() <= 0:
        raise ValueError(
            f"accepted_hist must hold gamma + 1 >= 2 counts >= 0, not all 0; got {accepted_hist!r}"
        )
    gamma = hist.size - 1
    a = np.arange(gamma + 1)
    examined = float((np.minimum(a + 1, gamma) * hist).sum())
    rate = float((a * hist).sum() / examined)
    observed = hist / hist.sum()
    iid = np.asarray(accepted_pmf(rate, gamma), dtype=float)
    return {
        "rounds": int(hist.sum()),
        "rate": rate,
        "observed": observed.tolist(),
        "iid": iid.tolist(),
        "tv": float(0.5 * np.abs(observed - iid).sum()),
        "mean_observed": float(a @ observed),
        "mean_iid": float(expected_tokens(rate, gamma) - 1),
        "p0_observed": float(observed[0]),
        "p0_iid": 1.0 - rate,
    }


def unit_bootstrap(
    n_units: int,
    statistic: Callable[[np.ndarray], float],
    *,
    level: float = 0.95,
    n_boot: int = 4000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``statistic`` of all units and its percentile-bootstrap interval over resampled units.

    ``statistic`` maps an integer array of unit indices (with repeats) to a number. The
    resampling is :func:`specdec.theory.intervals.bootstrap_ci`'s (one generator seeded with ``seed``,
    ``n_boot`` resamples of the indices 0..n_units-1, the ``level`` percentile interval), so
    a statistic that is a function of resampled values gives bootstrap_ci's interval exactly.
    A resample on which the statistic is undefined (NaN, e.g. a rate over no examined drafts)
    is left out of the percentiles. Returns (estimate, low, high); NaN bounds if every
    resample is undefined.
    """
    check_int("n_units", n_units, low=2)
    check_float("level", level, low=0.0, high=1.0, open_low=True, open_high=True)
    check_int("n_boot", n_boot, low=100)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n_units, size=(n_boot, n_units))
    boots = np.array([statistic(row) for row in idx], dtype=float)
    boots = boots[np.isfinite(boots)]
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(boots, [tail, 100 - tail]) if boots.size else (np.nan, np.nan)
    return float(statistic(np.arange(n_units))), float(low), float(high)


def position_rates(
    examined_at: Sequence[Sequence[int]], accepted_at: Sequence[Sequence[int]], **kw: Any
) -> dict[str, Any]:
    """Acceptance rate at each draft position, pooled over units (prompts), with bootstrap intervals.

    ``examined_at[u][i]`` / ``accepted_at[u][i]``: unit u's full-round counts at position i
    (:func:`full_round_counts`). Returns per position ``rate``, ``low``, ``high`` (pooled
    accepted over examined; the interval resamples units) and ``rise`` = (estimate, low, high)
    of the last position's rate minus the first's, from the same resamples. A resample that
    examined a position nowhere leaves that position's rate undefined and is dropped from its
    interval (:func:`unit_bootstrap`).
    """
    ex = np.asarray(examined_at, dtype=float)
    ac = np.asarray(accepted_at, dtype=float)
    if ex.ndim != 2 or ex.shape != ac.shape or ex.shape[0] < 2 or ex.shape[1] < 1:
        raise ValueError(
            "examined_at and accepted_at must be equal (units >= 2, positions) arrays; "
            f"got {ex.shape}, {ac.shape}"
        )
    if np.any(ac > ex) or np.any(ac < 0):
        raise ValueError("need 0 <= accepted_at <= examined_at everywhere")

    def rate(idx: np.ndarray, i: int) -> float:
        e = ex[idx, i].sum()
        return float(ac[idx, i].sum() / e) if e > 0 else float("nan")

    out: dict[str, Any] = {"rate": [], "low": [], "high": []}
    n = ex.shape[0]
    for i in range(ex.shape[1]):
        est, lo, hi = unit_bootstrap(n, lambda idx, i=i: rate(idx, i), **kw)
        out["rate"].append(est)
        out["low"].append(lo)
        out["high"].append(hi)
    last = ex.shape[1] - 1
    out["rise"] = unit_bootstrap(n, lambda idx: rate(idx, last) - rate(idx, 0), **kw)
    return out


def observed_verify_cost(drafted: Iterable[int], curve: Mapping[int, float]) -> float:
    """Mean of T(k_r+1)/T(1) over rounds that drafted k_r tokens: the verify cost the rounds paid.

    ``curve`` maps a call size k to T(k)/T(1) (e.g. a :class:`specdec.measure.core.VerifyCost` as
    ``dict(zip(ks, ratios))``); it must hold k_r + 1 for every round.
    """
    ks = [int(k) for k in drafted]
    if not ks:
        raise ValueError("drafted must hold at least one round")
    missing = sorted({k + 1 for k in ks} - {int(k) for k in curve})
    if missing:
        raise ValueError(f"curve lacks the call sizes {missing} (k_r + 1 of the rounds)")
    return float(np.mean([curve[k + 1] for k in ks]))


def speedup_gap(
    *,
    alpha: float,
    gamma: int,
    c: float,
    curve: Mapping[int, float],
    drafted: Sequence[int],
    tokens_per_round: float,
    measured: float,
    alpha_theorem: float | None = None,
) -> dict[str, float]:
    """Predicted speedups under four models of a round and the factors that take Theorem 3.8 to ``measured``.

    Times in single-token target steps; a round drafts for ``gamma c`` (``c`` from
    :func:`specdec.engine.stats.cost_coefficient`) and verifies k + 1 tokens at T(k+1)/T(1) from
    ``curve``; ``drafted`` holds the k_r of the rounds as run.

    1. ``theorem``: Theorem 3.8, E[T](alpha', gamma) / (gamma c + 1), at ``alpha_theorem``
       (default ``alpha``; for prompt lookup the alpha over all positions, see the chapter);
    2. ``with_verify``: the verify pass at its measured cost v = T(gamma+1)/T(1):
       E[T](alpha', gamma) / (gamma c + v) -> ``factor_verify``;
    3. ``with_drafts``: the rounds as drafted, still i.i.d. at ``alpha``: sum_r E[T](alpha, k_r) /
       sum_r (gamma c + T(k_r+1)/T(1)) (:func:`specdec.theory.speedup.walltime_speedup_rounds`) ->
       ``factor_drafts``: shorter drafts (prompt lookup's coverage, the end of a generation) and
       the alpha of the positions drafted;
    4. ``with_observed_T``: the observed tokens per round instead of the i.i.d. E[T]:
       T_obs / (gamma c + v_obs), v_obs = :func:`observed_verify_cost` -> ``factor_acceptance``:
       how far the accepted counts are from the i.i.d. law at alpha (dependence between
       positions, and alpha measured by teacher forcing instead of in the runs);
    5. the measured speedup -> ``factor_overhead``: what the cost model leaves out (sampling and
       the accept/reject test, cache bookkeeping, Python per round).

    measured = theorem * factor_verify * factor_drafts * factor_acceptance * factor_overhead
    exactly; ``ratio`` = measured / theorem.
    """
    check_float("measured", measured, low=0.0, open_low=True, note="a speedup")
    check_float("tokens_per_round", tokens_per_round, low=1.0)
    a_thm = float(alpha) if alpha_theorem is None else float(alpha_theorem)
    if gamma + 1 not in curve:
        raise ValueError(f"curve lacks the call size gamma + 1 = {gamma + 1}")
    v = float(curve[gamma + 1])
    v_obs = observed_verify_cost(drafted, curve)
    ks = np.asarray(drafted, dtype=int)
    v_rounds = np.asarray([curve[int(k) + 1] for k in ks], dtype=float)
    theorem = float(walltime_speedup(a_thm, gamma, c))
    with_verify = float(walltime_speedup_measured(a_thm, gamma, c, v))
    with_drafts = float(walltime_speedup_rounds(alpha, ks, c, v_rounds, np.full(ks.shape, float(gamma))))
    with_observed = float(tokens_per_round) / (gamma * float(c) + v_obs)
    return {
        "verify_cost": v,
        "verify_cost_observed": v_obs,
        "theorem": theorem,
        "with_verify": with_verify,
        "with_drafts": with_drafts,
        "with_observed_T": with_observed,
        "measured": float(measured),
        "factor_verify": with_verify / theorem,
        "factor_drafts": with_drafts / with_verify,
        "factor_acceptance": with_observed / with_drafts,
        "factor_overhead": float(measured) / with_observed,
        "ratio": float(measured) / theorem,
    }


def load_records(folder: str | Path, record_format: int | None = None) -> list[dict[str, Any]]:
    """Every ``*.json`` result record of ``specdec run real-decoding`` in ``folder``, by file name.

    A record is recognised by its ``"kind": "real-decoding"`` field (generation files, partial
    runs and others are skipped); each gets its file name under ``"file"``. With
    ``record_format`` only records of that format are kept (:data:`RECORD_FORMAT` is the
    current one; records without the field are format 1). Every drafter is named by its registry
    spec (:func:`registry_names`: the one place the older records' names are mapped).
    """
    out = []
    for path in sorted(Path(folder).glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(record, dict) and record.get("kind") == "real-decoding":
            if record_format is None or record.get("format", 1) == record_format:
                out.append({**registry_names(record), "file": path.name})
    return out


def main_record(folder: str | Path) -> dict[str, Any]:
    """The Part IV record the book reads: of the current format, the full run if there is one,
    else the CI-sized quick run (tags ending in ``-quick``); among those the newest
    (``environment.timestamp_utc``, taken when the record is written; ISO strings sort as text),
    ties by file name."""
    current = load_records(folder, RECORD_FORMAT)
    if not current:
        raise ValueError(f"no real-decoding record of format {RECORD_FORMAT} in {str(folder)!r}")
    ranked = sorted(current, key=lambda r: r["file"])
    ranked.sort(key=lambda r: str((r.get("environment") or {}).get("timestamp_utc", "")), reverse=True)
    ranked.sort(key=lambda r: str(r.get("tag", "")).endswith("-quick"))
    return ranked[0]


def machine_probe(record: dict[str, Any], bench_folder: str | Path) -> tuple[dict[str, Any], str] | None:
    """The mode probe behind a Part IV record: its own (``mode_probe``), else, for a run whose
    mode was named on the command line, the probe that was current when the run was made: of the
    engine benchmark records (``engine-modes*.json`` in ``bench_folder``) made on a machine of the
    same name with the same thread count, the newest by its stored timestamp that is no later than
    the run's (any, when the run stored none; name order breaks a tie). Returns ``(summary, source)``
    (:func:`specdec.measure.core.probe_summary`'s form; source ``"this run"`` or the benchmark's
    file name), or None."""
    from specdec.measure.core import probe_summary

    if record.get("mode_probe"):
        return record["mode_probe"], "this run"
    env = record["environment"]
    found = []
    for path in sorted(Path(bench_folder).glob("engine-modes*.json")):
        bench = json.loads(path.read_text(encoding="utf-8"))
        probe = bench.get("chosen_mode")
        same = bench.get("environment", {}).get("device_name") == env["device_name"]
        if probe and same and probe.get("machine", {}).get("threads") == env["threads"]:
            found.append((str(bench["environment"].get("timestamp_utc") or ""), path.name, probe))
    made = str(env.get("timestamp_utc") or "")
    found = [f for f in found if not made or f[0] <= made]  # ISO timestamps in UTC sort as text
    if not found:
        return None
    _, name, probe = max(found, key=lambda f: (f[0], f[1]))
    return probe_summary(probe), name


# -- the counterexample: a more accurate draft that is slower -------------------------------------


def _rows(table: Any) -> list[dict[str, Any]]:
    """Rows as dicts from a list of mappings or a pandas DataFrame; checks the columns."""
    rows = table.to_dict("records") if hasattr(table, "to_dict") else [dict(r) for r in table]
    for i, row in enumerate(rows):
        missing = [k for k in PAIR_COLUMNS if k not in row]
        if missing:
            raise ValueError(f"table row {i} lacks the columns {missing} (needs {list(PAIR_COLUMNS)})")
    return rows


def drafter_family(name: str) -> str | None:
    """The model family of a drafter's registry spec: ``"early-exit"`` (``early-exit:N``), ``"draft"``
    (distilled drafts, ``draft:NAME``), or ``None`` for drafters that are not models (prompt lookup,
    n-grams): :data:`MODEL_FAMILIES`."""
    kind = name.partition(":")[0].partition(",")[0]
    return kind if kind in MODEL_FAMILIES and ":" in name else None


def slower_accurate_pairs(table: Any, *, margin: float = 0.05) -> list[dict[str, Any]]:
    """Every pair in one (temperature, task) group whose more accurate drafter is the slower.

    ``table``: rows (mappings or a DataFrame) with the columns of :data:`PAIR_COLUMNS`
    (``measured`` is the measured speedup). A pair counts when ``alpha`` exceeds the other's
    by more than ``margin`` while the drafter is the slower: when the rows carry the speedup's
    interval (``measured_low``, ``measured_high``), its interval must lie wholly below the
    other's (``measured_high`` < the other's ``measured_low``); without intervals, a lower
    ``measured`` suffices (a point comparison: use it only for exact, hand-made tables). Each
    pair is a dict with ``temperature``, ``task`` and, for the two drafters,
    ``accurate``/``faster`` (names), ``accurate_alpha``/``faster_alpha``,
    ``accurate_c``/``faster_c``, ``accurate_speedup``/``faster_speedup`` and, with intervals,
    ``accurate_low``/``accurate_high``/``faster_low``/``faster_high``; in table order.
    An empty list when none.
    """
    check_float("margin", margin, low=0.0)
    rows = _rows(table)
    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["temperature"], row["task"]), []).append(row)
    pairs = []
    for (temperature, task), grp in groups.items():
        for a in grp:
            for b in grp:
                if a["alpha"] > b["alpha"] + margin and _slower(a, b):
                    pairs.append(
                        {
                            "temperature": temperature,
                            "task": task,
                            "accurate": a["drafter"],
                            "accurate_alpha": float(a["alpha"]),
                            "accurate_c": float(a["c"]),
                            "accurate_speedup": float(a["measured"]),
                            "faster": b["drafter"],
                            "faster_alpha": float(b["alpha"]),
                            "faster_c": float(b["c"]),
                            "faster_speedup": float(b["measured"]),
                        }
                        | _interval_fields(a, "accurate")
                        | _interval_fields(b, "faster")
                    )
    return pairs


def _interval_fields(row: dict[str, Any], role: str) -> dict[str, float]:
    if "measured_low" in row and "measured_high" in row:
        return {f"{role}_low": float(row["measured_low"]), f"{role}_high": float(row["measured_high"])}
    return {}


def _slower(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Row a is slower than row b: separated intervals when both rows have them, else a lower point."""
    if all(k in r for r in (a, b) for k in ("measured_low", "measured_high")):
        return bool(a["measured_high"] < b["measured_low"])
    return bool(a["measured"] < b["measured"])


def same_family(pairs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pairs whose two drafters are models of one family (two early exits, two distilled drafts)."""
    out = []
    for pair in pairs:
        family = drafter_family(pair["accurate"])
        if family is not None and family == drafter_family(pair["faster"]):
            out.append(pair)
    return out


def fastest_pair(pairs: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The pair whose faster drafter is the fastest (ties: the widest gap in alpha); ``None`` if none."""
    pairs = list(pairs)
    if not pairs:
        return None
    return max(pairs, key=lambda q: (q["faster_speedup"], q["accurate_alpha"] - q["faster_alpha"]))


def widest_win(pairs: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The pair with the largest ``faster_speedup / accurate_speedup``, that ratio under
    ``"win"``; ``None`` if there is no pair."""
    pairs = list(pairs)
    if not pairs:
        return None
    best = max(pairs, key=lambda q: q["faster_speedup"] / q["accurate_speedup"])
    return {**best, "win": best["faster_speedup"] / best["accurate_speedup"]}


def family_scaling(table: Any, family: str = "draft") -> dict[str, Any] | None:
    """How alpha, c and the speedup change from the smallest to the largest draft of a family.

    Members are ordered by the number after their last ``l`` (``draft:distil-l4`` -> 4) for
    ``"draft"``, by their layers (``early-exit:8`` -> 8) for ``"early-exit"``. Over the (temperature,
    task) groups that hold
    both: the median ratios ``c_ratio`` and ``alpha_ratio`` (largest / smallest), the count
    ``slower`` of groups where the largest is slower (by separated intervals when the rows
    carry them, see :func:`slower_accurate_pairs`), and ``groups``. ``None`` when the
    table holds fewer than two members of the family or no group holds both.
    """
    if family not in MODEL_FAMILIES:
        raise ValueError(f"family must be one of {MODEL_FAMILIES}; got {family!r}")
    rows = _rows(table)
    members = sorted({r["drafter"] for r in rows if drafter_family(r["drafter"]) == family}, key=_member_size)
    if len(members) < 2:
        return None
    small, large = members[0], members[-1]
    by_group: dict[tuple[Any, Any], dict[str, dict[str, Any]]] = {}
    for r in rows:
        if r["drafter"] in (small, large):
            by_group.setdefault((r["temperature"], r["task"]), {})[r["drafter"]] = r
    both = [g for g in by_group.values() if small in g and large in g]
    if not both:
        return None
    return {
        "small": small,
        "large": large,
        "c_ratio": float(np.median([g[large]["c"] / g[small]["c"] for g in both])),
        "alpha_ratio": float(np.median([g[large]["alpha"] / g[small]["alpha"] for g in both])),
        "slower": int(sum(_slower(g[large], g[small]) for g in both)),
        "groups": len(both),
    }


def _member_size(name: str) -> tuple[int, str]:
    tail = name.rsplit("l", 1)[-1] if name.startswith("draft") else name.partition(":")[2]
    digits = "".join(ch for ch in tail if ch.isdigit())
    return (int(digits) if digits else 0, name)
