"""The decoding loop's cost over the bare C step, before and after a change of its Python (issue 40).

A plain step of the lean q4q8 engine is one C forward; everything else in :func:`autoregressive`'s step
is Python, numpy and torch between two forwards. Each torch operation there cost about 20 us in dev
probes on a 2-core EPYC (1 us when timed alone: the forward's weight stream leaves the interpreter's and
torch's code and data cold), so the loop's overhead is measured where it runs, not by timeit.

The design, per thread count: ``repeats`` repetitions (after one that warms up and is dropped), each
running two worker processes in a fresh random order, one on the package of the ``before`` commit (its
``specdec`` extracted from git into a temporary folder) and one on this checkout's
(:func:`specdec.measure.sides.run_side`). A worker (:data:`WORKER`, :mod:`specdec.measure.loopworker`, a
file of this checkout that uses only the API both share) opens the lean q4q8 target at that thread count and,
for each prompt (the development prompts of :func:`specdec.measure.draftcost.dev_texts`, in a fresh order)
runs ``rounds`` rounds, each running its arms once in a fresh order (so that a drift of the
machine's speed over a worker's seconds falls on every arm alike):

* ``bare`` -- the C forward of one token and numpy's argmax, nothing else: ids and logits in arrays made
  once, the cache's address read once (:meth:`specdec.engine.native.Q8Forward.forward`, the one Python
  call that any loop must make), ``tokens`` greedy steps after the prompt's prefill;
* ``loop-0`` and ``loop-1`` -- :func:`specdec.engine.decoding.autoregressive` at temperature 0 and 1
  (seed ``seed``, no EOS stop, so exactly ``tokens`` tokens), its time less its prefill's;
* with a drafter (``drafter``, ``SPEC@BUDGET``), ``spec-0`` and ``spec-1`` --
  :func:`specdec.engine.decoding.speculative_tree` with that drafter at that node budget, at temperature
  0 and 1, its time per token less its prefill's and its verification's seconds per round (``verify_s``
  over rounds: the target's rows to the round's tokens, what a change of verification moves).

Seconds per token per (prompt, arm, round). The loop's time is its whole generation less its prefill, so
it includes what :func:`autoregressive` does once per generation (a session and its cache), spread over
``tokens`` tokens; the bare arm's cache is made outside its clock. The summary is :func:`summarize`'s: the
loop's overhead over the bare step within each worker (paired by round), its change from before to after
(paired by repetition and prompt), and after over before per arm across the two processes, where the
bare arm (the same forward code, built by each version from its sources) shows what two processes differ
by alone; intervals resample prompts and repetitions both (:func:`crossed_ci`). A worker's own load is in its
repetition's ``loads`` (the cells' ``cell_load`` counts the workers as other processes).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specdec.measure.runner import RunSettings, not_key
from specdec.measure.sides import package_at, run_side
from specdec.theory.checks import check_int

__all__ = [
    "ARMS",
    "SPEC_ARMS",
    "LoopCost",
    "arms_of",
    "crossed_ci",
    "run_record",
    "summarize",
]

ROOT = Path(__file__).resolve().parents[2]
#: The worker, a file of this checkout run on either version's package (:mod:`specdec.measure.loopworker`).
WORKER = Path(__file__).resolve().with_name("loopworker.py")
#: The arms a worker times per prompt.
ARMS = ("bare", "loop-0", "loop-1")
#: The speculative loop's arms, with a drafter (``LoopCost.drafter``): greedy and at temperature 1.
SPEC_ARMS = ("spec-0", "spec-1")
Log = Callable[[str], None]


@dataclass
class LoopCost(RunSettings):
    """The run's design (its record's ``settings``): the ``before`` commit, thread counts, prompts,
    tokens per arm, repetitions and seed; ``drafter`` (``SPEC@BUDGET``, a registry spec and its node
    budget, or None) adds the speculative loop's arms :data:`SPEC_ARMS`. ``out`` is where the record goes."""

    before: str = "bd13e7a"
    threads: tuple[int, ...] = (1, 2)
    prompts: int = 8
    tokens: int = 32
    rounds: int = 3
    repeats: int = 5
    seed: int = 0
    drafter: str | None = None
    out: str | None = not_key()

    def __post_init__(self) -> None:
        if not isinstance(self.before, str) or not self.before.strip():
            raise ValueError(f"before must name a git commit; got {self.before!r}")
        check_int("prompts", self.prompts, low=2)
        check_int("tokens", self.tokens, low=2)
        check_int("rounds", self.rounds, low=1)
        check_int("repeats", self.repeats, low=1)
        check_int("seed", self.seed, low=0)
        if self.drafter is not None:
            from specdec.drafting.registry import parse_spec

            name, at, budget = str(self.drafter).rpartition("@")
            if not at or not budget.isdigit() or int(budget) < 1:
                raise ValueError(f"drafter must be SPEC@BUDGET with a budget >= 1; got {self.drafter!r}")
            parse_spec(name)  # a spec the registry refuses is refused here, naming itself
        values = tuple(sorted({check_int("each of threads", v, low=1) for v in self.threads}))
        if not values:
            raise ValueError("threads must hold at least one value")
        self.threads = values


def run_record(
    settings: LoopCost, *, command: str, fresh: bool = False, log: Log = print
) -> tuple[dict[str, Any], Path]:
    """Run every cell (one per thread count and repetition; resuming a partial record with the same
    settings unless ``fresh``) and write the record; returns it and its path."""
    from specdec.engine.machine import cpu_identity
    from specdec.measure.core import environment
    from specdec.measure.device import device_slug
    from specdec.measure.draftcost import dev_texts
    from specdec.measure.modes import machine_identity
    from specdec.measure.runner import open_partial, run_cells
    from specdec.theory.recordio import write_record
    from specdec.train.workloads import chat_prompt_ids

    env = environment(dtype="q4q8", device="cpu")
    path = (
        Path(settings.out)
        if settings.out
        else ROOT
        / "results"
        / "bench"
        / f"engine-loop-cost-{device_slug(env['device_name'])}{'-spec' if settings.drafter else ''}.json"
    )
    record = open_partial(path, settings, fresh=fresh, what="loop-cost run") or {
        "kind": "engine-loop-cost",
        "command": command,
        "settings": settings.to_record(),
    }
    from specdec.engine.builder import EngineSpec, open_engine

    tokenizer = open_engine(EngineSpec("lean", "q4q8", 1)).tokenizer  # the target's, as the workers open it
    prompts = [chat_prompt_ids(tokenizer, t[:1500]) for t in dev_texts(settings.prompts)]
    with tempfile.TemporaryDirectory() as tmp:
        before_id = package_at(settings.before, Path(tmp), ROOT)
        record |= {
            "machine": machine_identity(),
            "cpu": cpu_identity(),
            "environment": env,
            "versions": {"before": before_id, "after": env.get("git_commit")},
            "prompt_tokens": [len(p) for p in prompts],
            "arms": {
                "bare": "the C forward of one token and numpy's argmax, arrays made once (the loop's floor)",
                "loop-0": "autoregressive() greedy, its time less its prefill's",
                "loop-1": "autoregressive() at temperature 1, its time less its prefill's",
            }
            | (
                {
                    f"spec-{t}": f"speculative_tree() with {settings.drafter} at temperature {t}, its time "
                    "less its prefill's, and its verification's seconds per round (verify_s / rounds)"
                    for t in (0, 1)
                }
                if settings.drafter
                else {}
            ),
        }
        roots = {"before": Path(tmp), "after": ROOT}
        cells = []
        for threads in settings.threads:
            for rep in range(settings.repeats + 1):
                cells.append(
                    (
                        f"{threads}t-{rep}",
                        lambda t=threads, r=rep: _repetition(settings, prompts, roots, t, r),
                    )
                )

        def keep(cid: str, result: Any) -> None:
            record.setdefault("cells", {})[cid] = result
            log(f"{cid}: done")

        run_cells(record, cells, path, keep=keep, threads=max(settings.threads), log=log,
                  save=lambda: write_record(path, record))  # fmt: skip
    record["summary"] = summarize(record["cells"], settings)
    write_record(path, record)
    return record, path


def _repetition(
    settings: LoopCost, prompts: Sequence[Sequence[int]], roots: Mapping[str, Path], threads: int, rep: int
) -> dict[str, Any]:
    """One repetition: both versions' workers in a fresh order, each on every prompt in a fresh order,
    each prompt's rounds of the arms in fresh orders."""
    rng = np.random.default_rng([settings.seed, threads, rep])
    versions = [str(v) for v in rng.permutation(sorted(roots))]
    out: dict[str, Any] = {"order": versions, "loads": {}}
    for version in versions:
        job = {
            "threads": threads,
            "prompts": [list(p) for p in prompts],
            "tokens": settings.tokens,
            "seed": settings.seed,
            "drafter": settings.drafter,
            "order": [int(i) for i in rng.permutation(len(prompts))],
            "arms": [
                [[str(a) for a in rng.permutation(arms_of(settings))] for _ in range(settings.rounds)]
                for _ in prompts
            ],
        }
        result, load = run_side(
            roots[version], WORKER, threads=threads, job=job, timeout_s=1800, what="loop-cost worker"
        )
        out[version] = [result["prompts"][str(i)] for i in range(len(prompts))]
        out["loads"][version] = load
    return out


def arms_of(settings: LoopCost) -> tuple[str, ...]:
    """The arms a worker times: :data:`ARMS`, and :data:`SPEC_ARMS` with a drafter."""
    return ARMS + (SPEC_ARMS if settings.drafter else ())


def _table(reps: Sequence[Any], value: Callable[[Any, int], float]) -> np.ndarray:
    """value(repetition, prompt index) as a (prompts, repetitions) array."""
    n = len(reps[0]["after"])
    return np.array([[value(rep, i) for rep in reps] for i in range(n)], dtype=float)


def crossed_ci(values: np.ndarray, *, log: bool = False, n_boot: int = 4000, seed: int = 0) -> list[float]:
    """The mean over prompts (rows) of each prompt's median over repetitions (columns), geometric with
    ``log``, and its 95 % percentile-bootstrap interval resampling prompts and repetitions both (crossed):
    the two processes of a repetition share its luck (where their memory landed, the machine's speed at
    the time) across every prompt, so a bootstrap over prompts alone would not see it."""
    v = np.log(values) if log else np.asarray(values, dtype=float)
    n_p, n_r = v.shape
    rng = np.random.default_rng(seed)
    boots = np.empty(n_boot)
    for b in range(n_boot):
        rows, cols = rng.integers(0, n_p, n_p), rng.integers(0, n_r, n_r)
        boots[b] = np.mean(np.median(v[np.ix_(rows, cols)], axis=1))
    out = [float(np.mean(np.median(v, axis=1))), *map(float, np.quantile(boots, [0.025, 0.975]))]
    return [float(np.exp(x)) for x in out] if log else out


def summarize(cells: Mapping[str, Any], settings: LoopCost) -> dict[str, Any]:
    """Per thread count and version: the bare step's ms per token; each loop's overhead over the bare step
    in the same round (loop - bare, ms per token) and its time ratio loop / bare in the same round, each
    the median over a prompt's rounds; then after minus before of that overhead, paired by repetition
    (the two workers of one repetition) and prompt; and after over before per arm (a time ratio across
    processes: the bare arm, the same forward code built by each version, shows what two processes
    differ by). With a drafter, each speculative arm's verification ms per round per version and their
    difference after - before, paired by repetition and prompt. Each value the mean (ratios: geometric)
    over prompts of the median over repetitions, with :func:`crossed_ci`'s interval. Also whether the
    greedy loop's tokens equal the bare step's, and whether the versions' tokens agree, per arm
    (``versions_agree_by_arm``) and in every arm (``versions_agree``)."""

    def rounds(arms: Any, arm: str) -> np.ndarray:
        return np.asarray(arms[arm]["s_per_token"], dtype=float)

    def over(arms: Any, arm: str) -> float:  # the loop's overhead in ms per token, paired by round
        return 1e3 * float(np.median(rounds(arms, arm) - rounds(arms, "bare")))

    def ratio(arms: Any, arm: str) -> float:  # the loop's time over the bare step's, paired by round
        return float(np.median(rounds(arms, arm) / rounds(arms, "bare")))

    def ms(arms: Any, arm: str) -> float:
        return 1e3 * float(np.median(rounds(arms, arm)))

    def verify(arms: Any, arm: str) -> float:  # a speculative arm's verification, ms per round
        return 1e3 * float(np.median(np.asarray(arms[arm]["verify_s_per_round"], dtype=float)))

    out: dict[str, Any] = {}
    for threads in settings.threads:
        reps = [cells[f"{threads}t-{r}"] for r in range(1, settings.repeats + 1)]  # repetition 0 warms up
        entry: dict[str, Any] = {}
        for version in ("before", "after"):
            bare = _table(reps, lambda rep, i, v=version: ms(rep[v][i], "bare"))
            entry[version] = {"bare_ms": float(np.mean(np.median(bare, axis=1)))}
            for arm in ARMS[1:]:
                entry[version][f"{arm}_minus_bare_ms"] = crossed_ci(
                    _table(reps, lambda rep, i, v=version, a=arm: over(rep[v][i], a))
                )
                entry[version][f"{arm}_over_bare"] = crossed_ci(
                    _table(reps, lambda rep, i, v=version, a=arm: ratio(rep[v][i], a)), log=True
                )
        entry["overhead_after_minus_before_ms"] = {
            arm: crossed_ci(
                _table(reps, lambda rep, i, a=arm: over(rep["after"][i], a) - over(rep["before"][i], a))
            )
            for arm in ARMS[1:]
        }
        entry["after_over_before"] = {
            arm: crossed_ci(
                _table(reps, lambda rep, i, a=arm: ms(rep["after"][i], a) / ms(rep["before"][i], a)), log=True
            )
            for arm in arms_of(settings)
        }
        for arm in SPEC_ARMS if settings.drafter else ():  # verification's ms per round, within each worker
            for version in ("before", "after"):
                entry[version][f"{arm}_verify_ms_per_round"] = crossed_ci(
                    _table(reps, lambda rep, i, v=version, a=arm: verify(rep[v][i], a))
                )
            entry.setdefault("verify_after_minus_before_ms", {})[arm] = crossed_ci(
                _table(reps, lambda rep, i, a=arm: verify(rep["after"][i], a) - verify(rep["before"][i], a))
            )
        every = [rep[v][i] for rep in reps for v in ("before", "after") for i in range(len(rep[v]))]
        entry["greedy_loop_equals_bare"] = all(a["loop-0"]["tokens"] == a["bare"]["tokens"] for a in every)
        entry["versions_agree_by_arm"] = {
            arm: all(
                rep["before"][i][arm]["tokens"] == rep["after"][i][arm]["tokens"]
                for rep in reps
                for i in range(len(rep["before"]))
            )
            for arm in arms_of(settings)
        }
        entry["versions_agree"] = all(entry["versions_agree_by_arm"].values())
        out[f"{threads}t"] = entry
    return out
