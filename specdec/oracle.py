"""The oracle of Section 3.5: draft lengths chosen with hindsight, replayed on real drafts.

Section 3.5 of Leviathan et al. bounds what adapting gamma can gain: an oracle that knows in
advance how many drafts the target will accept drafts exactly that many, so no draft step
and no verified position is wasted. Under the i.i.d. model the accepted run before the first
rejection is geometric, a round then yields 1 / (1 - alpha) tokens on average, and the
speedup is :func:`specdec.theory.oracle_speedup`.

This module computes the same bound without the i.i.d. model, from what a drafter really
proposes along the target's greedy output (temperature 0, so "accepted" is "equal to the
target's token"). :func:`draft_runs` asks the drafter, at every position of a generation,
for a draft of up to ``max_gamma`` tokens and records how many of them match the target's
next tokens (its *run*) and how many it proposed. :func:`replay` then walks the generation
round by round under a rule -- a fixed gamma, or the oracle -- and adds up the cost of each
round in target steps: ``drafted * c`` for the draft and ``v(drafted + 1)`` for the verify
call, with ``v(k) = T(k) / T(1)`` from a measured verify-cost curve. Tokens over cost is the
rule's speedup over plain decoding (which pays ``v(1) = 1`` per token), in the units of
Theorem 3.8: it leaves out per-round overheads, so compare rules with each other, not with
a wall clock.

Two properties make the replay exact for greedy decoding: a greedy model drafter's first j
tokens do not depend on how many it is asked for, and prompt lookup's continuation is a
prefix of the longer one; so a round from position s with gamma accepts ``min(run[s], gamma)``
drafts, whatever rule chose gamma.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from specdec.theory import optimal_gamma, oracle_speedup, walltime_speedup, walltime_speedup_measured

__all__ = ["draft_runs", "iid_fixed_best", "replay", "replay_record", "summarize_record", "verify_cost_at"]


def _check_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}; got {value!r}")
    return int(value)


def draft_runs(
    drafter: Any, prompt_ids: Sequence[int], tokens: Sequence[int], max_gamma: int
) -> tuple[list[int], list[int]]:
    """Per position s of ``tokens`` (the target's greedy continuation of ``prompt_ids``): the
    drafter's greedy draft of up to ``max_gamma`` tokens after ``prompt_ids + tokens[:s]``.

    Returns ``runs`` (how many leading draft tokens equal ``tokens[s:]``) and ``lengths`` (how
    many tokens the drafter proposed; prompt lookup may propose fewer, or none).
    """
    import torch

    from specdec.sampling import warp

    max_gamma = _check_int("max_gamma", max_gamma, 1)
    if len(prompt_ids) < 1:
        raise ValueError("prompt_ids must hold at least one token")
    if len(tokens) < 1:
        raise ValueError("tokens must hold at least one generated token")
    greedy = partial(warp, temperature=0.0)
    rng = np.random.default_rng(0)  # unused by greedy drafts; the protocol asks for one
    ids = [int(t) for t in prompt_ids] + [int(t) for t in tokens]
    drafter.start(ids[: len(prompt_ids)])
    runs, lengths = [], []
    with torch.inference_mode():
        for s in range(len(tokens)):
            prefix = ids[: len(prompt_ids) + s]
            draft = drafter.propose(prefix, max_gamma, greedy, rng).tokens
            truth = tokens[s : s + len(draft)]
            run = 0
            while run < min(len(draft), len(truth)) and int(draft[run]) == int(truth[run]):
                run += 1
            runs.append(run)
            lengths.append(len(draft))
    return runs, lengths


def verify_cost_at(curve: Mapping[int, float], k: int) -> float:
    """v(k) = T(k) / T(1) from a measured curve, linear between the measured k (v(1) = 1).

    Raises ValueError for k outside the measured range.
    """
    k = _check_int("k", k, 1)
    points = {int(n): float(v) for n, v in curve.items()} | {1: 1.0}
    if k in points:
        return points[k]
    ks = sorted(points)
    if k > ks[-1]:
        raise ValueError(f"k must lie within the measured curve (1 .. {ks[-1]}); got {k}")
    return float(np.interp(k, ks, [points[n] for n in ks]))


def replay(
    runs: Sequence[int],
    lengths: Sequence[int],
    rule: int | str,
    c: float,
    curve: Mapping[int, float],
) -> dict[str, float]:
    """Walk one generation round by round under ``rule`` and add up its cost in target steps.

    ``rule`` is a fixed gamma (an integer >= 1: each round drafts ``min(gamma, lengths[s])``
    tokens and accepts ``min(gamma, runs[s])``) or ``"oracle"`` (each round drafts exactly
    ``runs[s]`` tokens: none wasted). A round emits its accepted drafts and one token of the
    target's own. Returns tokens, rounds, drafted, cost (in target steps: ``drafted * c +
    v(drafted + 1)`` per round) and ``speedup`` = tokens / cost, plain decoding costing one
    step per token.
    """
    if len(runs) != len(lengths) or not runs:
        raise ValueError(
            f"runs and lengths must be non-empty and of equal length; got {len(runs)}, {len(lengths)}"
        )
    if any(r < 0 or r > n for r, n in zip(runs, lengths, strict=True)):
        raise ValueError("every run must lie in [0, its draft's length]")
    if rule != "oracle":
        rule = _check_int("rule (a fixed gamma, or 'oracle')", rule, 1)
    if not c >= 0.0:
        raise ValueError(f"c must be >= 0; got {c!r}")
    n = len(runs)
    s, tokens, rounds, drafted_total, cost = 0, 0, 0, 0, 0.0
    while s < n:
        if rule == "oracle":
            drafted = accepted = runs[s]
        else:
            drafted, accepted = min(rule, lengths[s]), min(rule, runs[s])
        accepted = min(accepted, n - s - 1)  # the generation ends: the last token is the target's
        emitted = accepted + 1
        cost += drafted * c + verify_cost_at(curve, drafted + 1)
        tokens, rounds, drafted_total, s = tokens + emitted, rounds + 1, drafted_total + drafted, s + emitted
    return {
        "tokens": float(tokens),
        "rounds": float(rounds),
        "drafted": float(drafted_total),
        "cost": cost,
        "speedup": tokens / cost,
    }


def iid_fixed_best(alpha: float, c: float, curve: Mapping[int, float], max_gamma: int) -> tuple[int, float]:
    """The best fixed gamma in 1..``max_gamma`` under the i.i.d. model with the verify curve."""
    best = max(
        range(1, _check_int("max_gamma", max_gamma, 1) + 1),
        key=lambda g: (float(walltime_speedup_measured(alpha, g, c, verify_cost_at(curve, g + 1))), -g),
    )
    return best, float(walltime_speedup_measured(alpha, best, c, verify_cost_at(curve, best + 1)))


def replay_record(
    rows: Sequence[Mapping[str, Any]],
    drafter: str,
    c: float,
    curve: Mapping[int, float],
    rules: Sequence[int | str],
) -> dict[int | str, np.ndarray]:
    """:func:`replay` of every prompt of an oracle record (``benchmarks/oracle_gamma.py``).

    ``rows`` are the record's rows (one per prompt, with ``drafters[drafter]["runs"]`` and
    ``["lengths"]``); returns, per rule, the speedup of each prompt in row order.
    """
    if not rows:
        raise ValueError("rows must hold at least one prompt")
    missing = [r.get("prompt") for r in rows if drafter not in r["drafters"]]
    if missing:
        raise ValueError(f"drafter {drafter!r} is missing from the record's prompts {missing}")
    out: dict[int | str, np.ndarray] = {}
    for rule in rules:
        out[rule] = np.array(
            [
                replay(r["drafters"][drafter]["runs"], r["drafters"][drafter]["lengths"], rule, c, curve)[
                    "speedup"
                ]
                for r in rows
            ]
        )
    return out


def _geomean(x: np.ndarray) -> float:
    return float(np.exp(np.log(x).mean()))


def summarize_record(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per drafter of an oracle record: the best fixed gamma and the oracle, replayed.

    For each drafter (with its measured ``c`` and the record's verify curve): ``best_gamma``
    (the fixed gamma with the highest geometric-mean speedup over prompts; ties to the
    smaller), ``best_fixed`` and ``oracle`` (geometric means over prompts), ``gain`` with
    its 95 % bootstrap interval ``low``/``high`` (geometric mean over prompts of oracle over
    best fixed, :func:`specdec.intervals.ratio_ci`), ``alpha`` (the share of positions whose
    first draft token matches the target's) and ``iid_gain`` (the i.i.d. oracle over the best
    fixed gamma by Theorem 3.8 at that alpha and c, verify costing one step: Section 3.5's
    argument).
    """
    from specdec.intervals import ratio_ci

    curve = {int(k): float(v) for k, v in record["curve"].items()}
    max_gamma = _check_int("max_gamma", record["settings"]["max_gamma"], 1)
    gammas = list(range(1, max_gamma + 1))
    out = []
    for name, cost in record["costs"].items():
        c = float(cost["c"])
        per = replay_record(record["rows"], name, c, curve, [*gammas, "oracle"])
        best = max(gammas, key=lambda g: (_geomean(per[g]), -g))
        gain, low, high = ratio_ci(per["oracle"], per[best])
        runs = np.concatenate([r["drafters"][name]["runs"] for r in record["rows"]])
        alpha = float((np.asarray(runs) >= 1).mean())
        iid_best = float(walltime_speedup(alpha, optimal_gamma(alpha, c, max_gamma), c))
        out.append(
            {
                "drafter": name,
                "c": c,
                "alpha": alpha,
                "best_gamma": best,
                "best_fixed": _geomean(per[best]),
                "oracle": _geomean(per["oracle"]),
                "gain": gain,
                "low": low,
                "high": high,
                "iid_gain": float(oracle_speedup(alpha, c)) / iid_best,
            }
        )
    return out
