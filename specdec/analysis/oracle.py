"""The oracle of Section 3.5: draft lengths chosen with hindsight, replayed on real drafts.

Section 3.5 of Leviathan et al. bounds what adapting gamma can gain: an oracle that knows in
advance how many drafts the target will accept drafts exactly that many, so no draft step
and no verified position is wasted. Under the i.i.d. model the accepted run before the first
rejection is geometric, a round then yields 1 / (1 - alpha) tokens on average, and the
speedup is :func:`specdec.theory.speedup.oracle_speedup`.

This module computes the same bound without the i.i.d. model, from what a drafter really
proposes along the target's greedy output (temperature 0, so "accepted" is "equal to the
target's token"). :func:`specdec.experiments.oraclegamma.draft_runs` asks the drafter, at every
position of a generation, for a draft of up to ``max_gamma`` tokens and records how many of them
match the target's next tokens (its *run*) and how many it proposed. :func:`replay` then walks the generation
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

The record (``specdec run oracle-gamma``, :class:`specdec.experiments.oraclegamma.OracleGammaRun`) is
made by :func:`specdec.experiments.oraclegamma.record_runs` (the target's greedy continuation and every
drafter's runs along it, :func:`specdec.experiments.oraclegamma.draft_runs`) and
:func:`specdec.experiments.oraclegamma.measure_costs` (each drafter's c from speculative calls paired with
plain ones, :func:`specdec.measure.pairedrun.paired_block`). This module only reads records: it runs no
model and imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from specdec.theory.checks import check_float, check_int
from specdec.theory.intervals import geomean

__all__ = [
    "iid_fixed_best",
    "iid_oracle_on_curve",
    "replay",
    "replay_record",
    "summarize_record",
    "verify_cost_at",
]


def verify_cost_at(curve: Mapping[int, float], k: int) -> float:
    """v(k) = T(k) / T(1) from a measured curve, linear between the measured k (v(1) = 1).

    Raises ValueError for k outside the measured range.
    """
    k = check_int("k", k, low=1)
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
    rule: int | str | Any,
    c: float,
    curve: Mapping[int, float],
) -> dict[str, float]:
    """Walk one generation round by round under ``rule`` and add up its cost in target steps.

    ``rule`` is a fixed gamma (an integer >= 1: each round drafts ``min(gamma, lengths[s])``
    tokens and accepts ``min(gamma, runs[s])``), ``"oracle"`` (each round drafts exactly
    ``runs[s]`` tokens: none wasted), or a draft-length policy of :mod:`specdec.theory.policies`
    (e.g. ``HeuristicGamma()``: its gamma per round, updated with the round's outcome, as in
    :func:`specdec.engine.decoding.speculative`). As the decoder does, no round drafts past the end of
    the generation (at most the tokens left minus one). A round emits its accepted drafts and
    one token of the target's own. Returns tokens, rounds, drafted, ``verify`` (the sum of
    ``v(drafted + 1)`` over rounds), cost (``drafted * c + verify``, in target steps) and
    ``speedup`` = tokens / cost, plain decoding costing one step per token.
    """
    from specdec.theory.policies import DraftPolicy

    if len(runs) != len(lengths) or not runs:
        raise ValueError(
            f"runs and lengths must be non-empty and of equal length; got {len(runs)}, {len(lengths)}"
        )
    if any(r < 0 or r > n for r, n in zip(runs, lengths, strict=True)):
        raise ValueError("every run must lie in [0, its draft's length]")
    policy = rule if isinstance(rule, DraftPolicy) else None
    if policy is None and rule != "oracle":
        rule = check_int("rule (a fixed gamma, 'oracle' or a DraftPolicy)", rule, low=1)
    c = check_float("c", c, low=0.0)
    if policy is not None:
        policy.reset()
    n = len(runs)
    s, tokens, rounds, drafted_total, verify = 0, 0, 0, 0, 0.0
    while s < n:
        left = n - s - 1  # drafts that still fit: the round's own token takes the last place
        if rule == "oracle":
            drafted = accepted = min(runs[s], left)
        else:
            gamma = policy.next() if policy is not None else rule
            drafted = min(gamma, lengths[s], left)
            accepted = min(drafted, runs[s])
            if policy is not None:
                policy.update(drafted, accepted)
        verify += verify_cost_at(curve, drafted + 1)
        tokens, rounds, drafted_total, s = (
            tokens + accepted + 1,
            rounds + 1,
            drafted_total + drafted,
            s + accepted + 1,
        )
    cost = drafted_total * c + verify
    return {
        "tokens": float(tokens),
        "rounds": float(rounds),
        "drafted": float(drafted_total),
        "verify": verify,
        "cost": cost,
        "speedup": tokens / cost,
    }


def iid_oracle_on_curve(alpha: float, c: float, curve: Mapping[int, float], max_gamma: int) -> float:
    """Section 3.5's oracle under the i.i.d. model, with a measured verify curve.

    The run R of acceptances before the first rejection is geometric, capped at ``max_gamma``
    (P(R = r) = alpha^r (1 - alpha) for r < max_gamma, P(R = max_gamma) = alpha^max_gamma);
    the oracle drafts R and emits R + 1 tokens for R c + v(R + 1) steps, so by renewal-reward
    the speedup is E[R + 1] / E[R c + v(R + 1)]. With ``v = 1`` and no cap this is
    :func:`specdec.theory.speedup.oracle_speedup`.
    """
    g = check_int("max_gamma", max_gamma, low=1)
    alpha = check_float("alpha", alpha, low=0, high=1, open_high=True)
    c = check_float("c", c, low=0.0)
    r = np.arange(g + 1)
    prob = alpha**r * (1 - alpha)
    prob[-1] = alpha**g
    v = np.array([verify_cost_at(curve, int(k) + 1) for k in r])
    return float((prob * (r + 1)).sum() / (prob * (r * c + v)).sum())


def iid_fixed_best(alpha: float, c: float, curve: Mapping[int, float], max_gamma: int) -> tuple[int, float]:
    """The best fixed gamma in 1..``max_gamma`` under the i.i.d. model with the verify curve:
    :func:`specdec.theory.speedup.best_gamma_on_curve` on the curve read at every k
    (:func:`verify_cost_at`)."""
    from specdec.theory.speedup import best_gamma_on_curve

    g = check_int("max_gamma", max_gamma, low=1)
    return best_gamma_on_curve(alpha, c, {k: verify_cost_at(curve, k) for k in range(2, g + 2)})


def _parts(
    rows: Sequence[Mapping[str, Any]], drafter: str, rule: Any, curve: Mapping[int, float]
) -> np.ndarray:
    """Per prompt (tokens, drafted, verify) of :func:`replay`, shape (prompts, 3): the speedup
    at any c is tokens / (drafted c + verify), so a bootstrap over c needs no new replay."""
    if not rows:
        raise ValueError("rows must hold at least one prompt")
    missing = [r.get("prompt") for r in rows if drafter not in r["drafters"]]
    if missing:
        raise ValueError(f"drafter {drafter!r} is missing from the record's prompts {missing}")
    out = []
    for r in rows:
        d = r["drafters"][drafter]
        res = replay(d["runs"], d["lengths"], rule, 0.0, curve)
        out.append((res["tokens"], res["drafted"], res["verify"]))
    return np.array(out)


def _speed(parts: np.ndarray, c: Any) -> np.ndarray:
    """Speedups from :func:`_parts` at the draft cost ``c``."""
    return parts[..., 0] / (parts[..., 1] * c + parts[..., 2])


def replay_record(
    rows: Sequence[Mapping[str, Any]],
    drafter: str,
    c: float,
    curve: Mapping[int, float],
    rules: Sequence[int | str],
) -> dict[int | str, np.ndarray]:
    """:func:`replay` of every prompt of an oracle record (``specdec run oracle-gamma``).

    ``rows`` are the record's rows (one per prompt, with ``drafters[drafter]["runs"]`` and
    ``["lengths"]``); returns, per rule, the speedup of each prompt in row order.
    """
    c = check_float("c", c, low=0.0)
    return {rule: _speed(_parts(rows, drafter, rule, curve), c) for rule in rules}


def summarize_record(
    record: Mapping[str, Any], *, n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> list[dict[str, Any]]:
    """Per drafter of an oracle record: the best fixed gamma, the heuristic schedule and the
    oracle, replayed on the same drafts, with intervals.

    Each rule's speedup on a prompt is tokens / (drafted c + verify) (:func:`replay`). For each
    drafter: ``c`` (the median of its measured samples), ``alpha`` (the share of positions
    whose first draft token equals the target's, a position without a draft counting as a
    rejection), ``best_gamma`` (the fixed gamma with the highest geometric-mean speedup over
    prompts; ties to the smaller), ``best_fixed`` and ``oracle`` (geometric means), ``gain``
    (geometric mean over prompts of oracle over best fixed) and ``heuristic`` (transformers'
    heuristic schedule, :class:`specdec.theory.policies.HeuristicGamma` with the same largest gamma,
    over best fixed), each with a percentile bootstrap interval (``gain_low``/``gain_high``,
    ``heuristic_low``/``heuristic_high``) that resamples the prompts *and* re-estimates c as
    the median of the resampled prompts' c samples (the record keeps them in pass-major,
    prompt order) and re-chooses the best gamma in every replicate. For comparison, with the
    same alpha and c: ``iid_gain`` (the i.i.d. oracle over the i.i.d. best fixed gamma on the
    same verify curve, :func:`iid_oracle_on_curve`, :func:`iid_fixed_best`), and the same two
    ratios with a free verify, ``flat_gain`` (real drafts) and ``iid_flat_gain`` (i.i.d.):
    Section 3.5's setting. The verify curve is taken as measured (its own noise is not in the
    intervals).
    """
    from specdec.theory.policies import HeuristicGamma

    # Not paired_speedup: these speedups are replayed (tokens / modelled cost per prompt, no timed runs),
    # and the intervals re-estimate c and re-choose the best gamma on every resample.
    check_int("n_boot", n_boot, low=1)
    curve = {int(k): float(v) for k, v in record["curve"].items()}
    max_gamma = check_int("max_gamma", record["settings"]["max_gamma"], low=1)
    flat = dict.fromkeys(range(1, max_gamma + 2), 1.0)
    rows = record["rows"]
    n = len(rows)
    if n == 0:
        raise ValueError("the record holds no prompts")
    gammas = list(range(1, max_gamma + 1))
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(n_boot, n))
    tail = (1 - level) / 2
    out = []
    for name, cost in record["costs"].items():
        samples = np.asarray(cost["samples"], dtype=float)
        if samples.size % n:
            raise ValueError(f"the c samples of {name!r} must be whole passes over the {n} prompts")
        by_prompt = samples.reshape(-1, n).T  # (prompt, pass)
        c = float(np.median(samples))

        fixed = np.stack([_parts(rows, name, g, curve) for g in gammas])  # (gamma, prompt, 3)
        oracle = _parts(rows, name, "oracle", curve)
        heur = _parts(rows, name, HeuristicGamma(max_gamma=max_gamma), curve)  # replay resets it per prompt
        sf = _speed(fixed, c)
        best = int(np.argmax(geomean(sf, axis=1)))
        so, sh = _speed(oracle, c), _speed(heur, c)
        gains, heurs = [], []
        for idx in picks:
            cb = float(np.median(by_prompt[idx]))
            fb = _speed(fixed[:, idx], cb)
            bb = int(np.argmax(geomean(fb, axis=1)))
            gains.append(geomean(_speed(oracle[idx], cb) / fb[bb]))
            heurs.append(geomean(_speed(heur[idx], cb) / fb[bb]))
        flat_fixed = np.stack([_speed(_parts(rows, name, g, flat), c) for g in gammas])
        flat_best = int(np.argmax(geomean(flat_fixed, axis=1)))
        flat_oracle = _speed(_parts(rows, name, "oracle", flat), c)
        runs = np.concatenate([r["drafters"][name]["runs"] for r in rows])
        alpha = float((np.asarray(runs) >= 1).mean())
        out.append(
            {
                "drafter": name,
                "c": c,
                "alpha": alpha,
                "best_gamma": gammas[best],
                "best_fixed": float(geomean(sf[best])),
                "oracle": float(geomean(so)),
                "gain": float(geomean(so / sf[best])),
                "gain_low": float(np.quantile(gains, tail)),
                "gain_high": float(np.quantile(gains, 1 - tail)),
                "heuristic": float(geomean(sh / sf[best])),
                "heuristic_low": float(np.quantile(heurs, tail)),
                "heuristic_high": float(np.quantile(heurs, 1 - tail)),
                "flat_gain": float(geomean(flat_oracle / flat_fixed[flat_best])),
                "iid_gain": iid_oracle_on_curve(alpha, c, curve, max_gamma)
                / iid_fixed_best(alpha, c, curve, max_gamma)[1],
                "iid_flat_gain": iid_oracle_on_curve(alpha, c, flat, max_gamma)
                / iid_fixed_best(alpha, c, flat, max_gamma)[1],
            }
        )
    return out
