"""What batch size does to speculative decoding: the cost surface T(b, k) measured, and the gain it predicts.

``specdec run batch-surface`` runs the two measurements as named steps and saves a record
after every finished block, so that an interrupted run resumes where it stopped; the book's
hardware chapter reads the record. Issue #12, item 2. The timed runs are
:mod:`specdec.measure.batchruns`'s; everything here is a pure function of a record (no torch).

* :func:`specdec.measure.batchruns.measure_surface` -- T(b, k): the time of ONE forward call that
  feeds k new tokens to each of b sequences after a cached context, the convention of the GPU record
  (:func:`specdec.measure.surfaces.cost_surface`: every position's logits, the cache cropped back
  after each call), measured for several models (target and draft, each mode) in *passes*:
  a pass visits every (model, b) block once in a fresh seeded order, and times every k once in
  a fresh order inside the block, so slow phases of a shared machine hit every cell alike.
  The passes are the units of the bootstrap intervals.
* :func:`surface_cells` -- per cell the median time, T(b, k)/T(b, 1) with its interval.
* :func:`predicted_gains` -- per batch b, Theorem 3.8 with the verify pass priced at its
  measured cost, ``E[T](alpha, gamma) / (gamma c(b) + T(b, gamma + 1) / T(b, 1))``
  (:func:`specdec.theory.speedup.walltime_speedup_measured`), for each gamma and the best one; the
  draft's cost c(b) = T_draft(b, 1) / T(b, 1) at the same batch. For any surface: the CPU
  record's or a GPU record's (:func:`specdec.analysis.hardware.gpu_surface`).
* :func:`gain_intervals` -- the same from a CPU record, with bootstrap intervals over passes,
  and :func:`vanishing_batch`, the batch at which the predicted gain stops exceeding 1.
* :func:`specdec.measure.batchruns.decode_units` and :func:`summarize_decoding` -- batched speculative
  decoding (:mod:`specdec.engine.batched`) against batched plain decoding, interleaved, per batch size, with
  bootstrap intervals over batches of prompts.

Speed thresholds belong in benchmarks, never in tests: these functions only measure and
summarise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from specdec.measure.core import summarize_times
from specdec.theory.checks import check_float
from specdec.theory.intervals import geomean, paired_speedup, ratio_ci
from specdec.theory.speedup import best_gamma_on_curve, cost_coefficient, walltime_speedup_measured

__all__ = [
    "gain_intervals",
    "pooled_alpha",
    "round_decomposition",
    "straggler_factor",
    "predicted_gains",
    "surface",
    "surface_cells",
    "summarize_decoding",
    "vanishing_batch",
]


def _times(blocks: Sequence[Mapping[str, Any]], model: str) -> dict[tuple[int, int], dict[int, float]]:
    """(b, k) -> {pass: seconds} for one model."""
    out: dict[tuple[int, int], dict[int, float]] = {}
    for blk in blocks:
        if blk["model"] != model:
            continue
        for k, t in blk["times_s"].items():
            out.setdefault((int(blk["b"]), int(k)), {})[int(blk["pass"])] = float(t)
    if not out:
        raise ValueError(f"the record holds no blocks of model {model!r}")
    return out


def surface(blocks: Sequence[Mapping[str, Any]], model: str) -> dict[tuple[int, int], float]:
    """T(b, k) in seconds, the median over passes, of one model of a record's blocks."""
    return {cell: float(np.median(list(t.values()))) for cell, t in _times(blocks, model).items()}


def surface_cells(blocks: Sequence[Mapping[str, Any]], model: str) -> list[dict[str, Any]]:
    """Per cell: b, k, the time's median / quartiles / samples (:meth:`specdec.measure.core.Timing.to_dict`,
    as the GPU record),
    ``per_token_s`` (median / (b k)), ``ratio_to_k1`` (median T(b, k) over median T(b, 1)) and
    ``ratio_ci``: the geometric mean over passes of T(b, k) / T(b, 1) within a pass, with its 95 %
    bootstrap interval over passes (None with a single pass)."""
    times = _times(blocks, model)
    cells = []
    for (b, k), by_pass in sorted(times.items()):
        one = times.get((b, 1), {})
        common = sorted(set(by_pass) & set(one))
        cell = {"b": b, "k": k, **summarize_times(list(by_pass.values())).to_dict()}
        cell["per_token_s"] = cell["median_s"] / (b * k)
        cell["ratio_to_k1"] = cell["median_s"] / float(np.median(list(one.values()))) if one else None
        if k == 1 or len(common) < 2:
            cell["ratio_ci"] = None if k != 1 else [1.0, 1.0, 1.0]
        else:  # a verify-cost ratio T(b, k)/T(b, 1) of one model, not a speedup: ratio_ci, not paired_speedup
            cell["ratio_ci"] = list(ratio_ci([by_pass[p] for p in common], [one[p] for p in common]))
        cells.append(cell)
    return cells


# --------------------------------------------------------------------------- the gain it predicts
def predicted_gains(
    target: Mapping[tuple[int, int], float],
    alpha: float,
    c: float | Mapping[int, float] = 0.0,
    gammas: Iterable[int] | None = None,
) -> dict[int, dict[str, Any]]:
    """Per batch b of a target's cost surface: the predicted speedup of speculative over plain decoding.

    For each gamma with T(b, gamma + 1) measured (or each of ``gammas``), Theorem 3.8 with the
    verify pass at its measured cost: ``E[T](alpha, gamma) / (gamma c(b) + T(b, gamma+1)/T(b, 1))``.
    ``c`` is the draft's cost per step in target steps, one number for every b or ``{b: c(b)}``.
    Returns ``{b: {"c", "per_gamma": {gamma: gain}, "best_gamma", "gain"}}``; the best gamma is
    :func:`specdec.theory.speedup.best_gamma_on_curve`'s (ties to the smaller). Each row is its own
    batch: rows accept independently (:mod:`specdec.engine.batched`, ragged cut), so E[T] is per row.
    """
    check_float("alpha", alpha, low=0.0, high=1.0, open_high=True)
    batches = sorted({b for b, _ in target})
    out: dict[int, dict[str, Any]] = {}
    for b in batches:
        if (b, 1) not in target:
            raise ValueError(f"the surface must hold T(b, 1) for every batch; missing for b = {b}")
        c_b = check_float("c", c[b] if isinstance(c, Mapping) else c, low=0.0, note=f"for b = {b}")
        curve = {k: target[(bb, k)] / target[(b, 1)] for bb, k in target if bb == b}
        if gammas is not None:
            curve = {k: v for k, v in curve.items() if k == 1 or k - 1 in set(gammas)}
        g, gain = best_gamma_on_curve(alpha, c_b, curve)
        per = {
            k - 1: float(walltime_speedup_measured(alpha, k - 1, c_b, v))
            for k, v in sorted(curve.items())
            if k >= 2
        }
        out[b] = {"c": float(c_b), "per_gamma": per, "best_gamma": g, "gain": gain}
    return out


def vanishing_batch(gains: Mapping[int, float]) -> int | None:
    """The smallest batch whose gain is <= 1 and stays <= 1 at every larger batch measured; None if
    the gain still exceeds 1 at the largest batch. ``gains``: {b: predicted gain}."""
    batches = sorted(gains)
    for i, b in enumerate(batches):
        if all(gains[bb] <= 1.0 for bb in batches[i:]):
            return b
    return None


def gain_intervals(
    blocks: Sequence[Mapping[str, Any]],
    target: str,
    alpha: float,
    *,
    draft: str | None = None,
    gammas: Iterable[int] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """:func:`predicted_gains` from a CPU record's blocks, with 95 % bootstrap intervals over passes.

    ``draft`` names the draft model's blocks (its T(b, 1) gives c(b) = T_draft(b, 1) / T(b, 1));
    None prices drafting at c = 0 (a free draft, e.g. prompt lookup), which isolates what the
    target's own verify premium does. Each bootstrap draw resamples whole passes (the same
    passes for every cell and both models: a slow phase of the machine hits a pass as a whole)
    and recomputes the medians, c(b) and the best gain per b over the same gammas. Returns per b
    the best gamma and the gain of the medians with its interval, c(b), and the vanishing batch
    of the estimate, of the intervals' lower ends (the gain is not shown to exceed 1 from there
    on) and of their upper ends (shown not to exceed 1).
    """
    t_times = _times(blocks, target)
    d_times = _times(blocks, draft) if draft is not None else None
    passes = sorted({p for by_pass in t_times.values() for p in by_pass})
    surf = {cell: float(np.median(list(t.values()))) for cell, t in t_times.items()}
    c: float | dict[int, float] = 0.0
    if d_times is not None:  # c in cost_coefficient's bare-forward unit (rounds = gamma = 1)
        c = {
            b: cost_coefficient(float(np.median(list(d_times[(b, 1)].values()))), 1, 1, surf[(b, 1)])
            for b, k in surf
            if k == 1
        }
    point = predicted_gains(surf, alpha, c, gammas)
    rows = {b: {**v, "gain": [v["gain"], None, None]} for b, v in point.items()}
    if len(passes) >= 2:
        # the draws, vectorised: times (cell, pass) -> medians (cell, draw) over resampled passes
        idx = np.random.default_rng(seed).integers(0, len(passes), size=(n_boot, len(passes)))

        def boot(by_pass: Mapping[int, float]) -> np.ndarray:
            row = np.array([by_pass.get(p, np.nan) for p in passes])
            return np.nanmedian(row[idx], axis=1)

        t_boot = {cell: boot(t) for cell, t in t_times.items()}
        for b, v in point.items():
            # the c above, per draw
            c_b = boot(d_times[(b, 1)]) / t_boot[(b, 1)] if d_times is not None else 0.0
            gains = [
                walltime_speedup_measured(alpha, g, c_b, t_boot[(b, g + 1)] / t_boot[(b, 1)])
                for g in v["per_gamma"]
            ]
            lo, hi = np.percentile(np.max(gains, axis=0), [2.5, 97.5])
            rows[b]["gain"] = [v["gain"], float(lo), float(hi)]
    est = {b: v["gain"][0] for b, v in rows.items()}
    low = {b: v["gain"][1] for b, v in rows.items() if v["gain"][1] is not None}
    high = {b: v["gain"][2] for b, v in rows.items() if v["gain"][2] is not None}
    return {
        "alpha": alpha,
        "draft": draft,
        "passes": len(passes),
        "batches": rows,
        "vanishes_at": vanishing_batch(est),
        "vanishes_at_low": vanishing_batch(low) if low else None,
        "vanishes_at_high": vanishing_batch(high) if high else None,
    }


# --------------------------------------------------------------------------- batched decoding
def summarize_decoding(units: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per batch size and configuration: the speedup over plain decoding of the same unit.

    ``speedup``: the geometric mean over units of plain decode time / the configuration's, with
    its 95 % bootstrap interval over units (None with one unit); ``tok_s``: tokens per second of
    decoding (median over units); ``alpha``: accepted / examined drafts pooled over rows and
    units; ``tokens_per_round``: the mean tokens a row kept per round; ``rows_equal_plain``: the
    fraction of rows whose greedy tokens equal plain decoding's.
    """
    batches = sorted({int(u["b"]) for u in units})
    names = sorted({n for u in units for n in u["runs"]} - {"plain"})
    out: dict[str, Any] = {}
    for b in batches:
        us = [u for u in units if int(u["b"]) == b]
        plain = np.array([u["runs"]["plain"]["decode_s"] for u in us])
        row: dict[str, Any] = {
            "units": len(us),
            "plain_tok_s": float(
                np.median([u["runs"]["plain"]["tokens"] / u["runs"]["plain"]["decode_s"] for u in us])
            ),
        }
        for name in names:
            runs = [u["runs"][name] for u in us]
            spec = np.array([r["decode_s"] for r in runs])
            speedup = list(paired_speedup(plain, spec))  # the book's one estimator (one unit: no interval)
            examined = sum(sum(r["examined"]) for r in runs)
            row[name] = {
                "speedup": speedup,
                "tok_s": float(np.median([r["tokens"] / r["decode_s"] for r in runs])),
                "alpha": sum(sum(r["accepted"]) for r in runs) / examined if examined else None,
                "tokens_per_round": float(np.mean([t for r in runs for t in r["kept_per_round"]])),
                "rounds": float(np.mean([r["rounds"] for r in runs])),
                "rows_equal_plain": sum(r["rows_equal_plain"] for r in runs) / (b * len(us)),
            }
        out[str(b)] = row
    return out


def pooled_alpha(units: Sequence[Mapping[str, Any]], config: str) -> float:
    """alpha of one configuration: accepted over examined drafts, pooled over every unit and row."""
    runs = [u["runs"][config] for u in units if config in u["runs"]]
    examined = sum(sum(r["examined"]) for r in runs)
    if not examined:
        raise ValueError(f"no examined drafts for configuration {config!r}")
    return sum(sum(r["accepted"]) for r in runs) / examined


def straggler_factor(units: Sequence[Mapping[str, Any]], config: str) -> dict[int, float]:
    """Per batch size: the rounds a static batch ran over the rounds its average row needed.

    A batch decodes until its slowest row is done, so with rows of unequal acceptance it runs
    more rounds than the mean row: the mean over units of ``rounds / mean_i(n / kept_i)``, with
    n the tokens per row and kept_i row i's mean tokens per round (n / kept_i is row i's rounds).
    1 for plain decoding and for a common cut, whose rows all keep the same count.
    """
    out: dict[int, list[float]] = {}
    for u in units:
        run = u["runs"][config]
        n = run["tokens"] / len(run["kept_per_round"])
        out.setdefault(int(u["b"]), []).append(
            run["rounds"] / float(np.mean([n / k for k in run["kept_per_round"]]))
        )
    if not out:
        raise ValueError(f"no units of configuration {config!r}")
    return {b: float(np.mean(v)) for b, v in sorted(out.items())}


def round_decomposition(units: Sequence[Mapping[str, Any]], config: str) -> dict[int, dict[str, float]]:
    """Per batch size: a configuration's speedup over plain decoding, split into two measured factors.

    ``tokens_per_batch_round``: the tokens per row over the rounds the batch ran (what a round
    delivered to each row, the slowest row setting the pace); ``round_cost_steps``: a round's decode
    time in plain steps of the same prompts (plain decode time per token of a row). Per unit their
    ratio is the unit's speedup exactly, so with geometric means over units (as here) the ratio of
    the two is :func:`summarize_decoding`'s speedup estimate.
    """
    tpr: dict[int, list[float]] = {}
    cost: dict[int, list[float]] = {}
    for u in units:
        run, plain = u["runs"][config], u["runs"]["plain"]
        n = plain["tokens"] / int(u["b"])
        tpr.setdefault(int(u["b"]), []).append(n / run["rounds"])
        cost.setdefault(int(u["b"]), []).append((run["decode_s"] / run["rounds"]) / (plain["decode_s"] / n))
    if not tpr:
        raise ValueError(f"no units of configuration {config!r}")
    return {
        b: {"tokens_per_batch_round": float(geomean(tpr[b])), "round_cost_steps": float(geomean(cost[b]))}
        for b in sorted(tpr)
    }
