"""Bootstrap confidence intervals: the one rule behind every "faster", "slower" or "differs".

Timing on a shared machine is noisy, so a comparison is reported as a ratio with a 95 %
percentile-bootstrap interval over the units that vary independently (prompts), and called
a win or a loss only when the interval excludes 1 (:func:`verdict`). Ratios are summarised
by their geometric mean, so that a over b and b over a give reciprocal intervals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from specdec.theory.checks import check_float, check_int

__all__ = ["bootstrap_ci", "geomean", "paired_speedup", "per_unit_medians", "ratio_ci", "verdict"]


def geomean(x: Sequence[float] | np.ndarray, axis: int | None = None) -> Any:
    """Geometric mean of positive numbers."""
    arr = np.asarray(x, dtype=float)
    if arr.size == 0 or np.any(~np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError("geomean needs a non-empty array of finite numbers > 0")
    return np.exp(np.log(arr).mean(axis=axis))


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    stat: Callable[..., Any] = np.mean,
    *,
    level: float = 0.95,
    n_boot: int = 4000,
    seed: int = 0,
    strata: Sequence[Any] | np.ndarray | None = None,
) -> tuple[float, float, float]:
    """``stat`` of ``values`` and its percentile-bootstrap interval: (estimate, low, high).

    Resamples the values with replacement ``n_boot`` times (one seeded generator, so the
    interval is reproducible); ``stat`` must accept ``axis=1`` on the (n_boot, n) resamples.
    With ``strata`` (one label per value) each stratum is resampled within itself, so every
    resample keeps the strata's sizes (e.g. the two halves of a cross-fit); the resampled
    values are grouped by stratum, strata in order of first appearance.
    """
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"values must be a 1-D sequence of at least 2 numbers; got shape {arr.shape}")
    check_float("level", level, low=0, high=1, open_low=True, open_high=True)
    check_int("n_boot", n_boot, low=100)
    rng = np.random.default_rng(seed)
    if strata is None:
        idx = rng.integers(0, arr.size, size=(n_boot, arr.size))
    else:
        labels = list(strata)
        if len(labels) != arr.size:
            raise ValueError(f"strata must give one label per value; got {len(labels)} for {arr.size}")
        groups = [np.flatnonzero([x == s for x in labels]) for s in dict.fromkeys(labels)]
        idx = np.concatenate([g[rng.integers(0, g.size, size=(n_boot, g.size))] for g in groups], axis=1)
    boots = np.asarray(stat(arr[idx], axis=1), dtype=float)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(boots, [tail, 100 - tail])
    return float(stat(arr)), float(low), float(high)


def ratio_ci(
    numerator: Sequence[float] | np.ndarray, denominator: Sequence[float] | np.ndarray, **kw: Any
) -> tuple[float, float, float]:
    """Geometric mean of paired ratios ``numerator[i] / denominator[i]`` with its bootstrap interval."""
    a, b = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"numerator and denominator must pair up; got shapes {a.shape} and {b.shape}")
    return bootstrap_ci(a / b, geomean, **kw)


def paired_speedup(
    base: Sequence[Any], other: Sequence[Any], **kw: Any
) -> tuple[float, float | None, float | None]:
    """THE book's measured speedup of ``other`` over ``base`` (every chapter, record and command uses it).

    ``base`` and ``other`` pair up unit by unit (a unit is a prompt); each item is that unit's time
    (per token, or per run of equal work), either one number (already a median) or its repetitions'
    times, of which the median is taken. The speedup is the geometric mean over units of
    base / other, with its percentile-bootstrap interval over units (:func:`ratio_ci`; ``kw`` goes to
    :func:`bootstrap_ci`); with one unit, the ratio and no interval (None, None).

    Why this estimator: the median over a unit's repetitions resists a repetition slowed by another
    job on a shared machine; pairing by prompt removes the prompts' own spread (a long reply is slow
    under both decoders); the geometric mean makes the speedup of a over b the reciprocal of b over a;
    and the interval varies what varies independently, the prompts.
    """
    if len(base) != len(other) or len(base) == 0:
        raise ValueError(f"base and other must pair up unit by unit; got {len(base)} and {len(other)} units")

    def medians(side: Sequence[Any]) -> np.ndarray:
        return np.asarray([float(np.median(x)) if np.ndim(x) else float(x) for x in side], dtype=float)

    b, o = medians(base), medians(other)
    if len(b) == 1:
        return float(b[0] / o[0]), None, None
    return ratio_ci(b, o, **kw)


def verdict(
    low: float,
    high: float,
    *,
    above: str = "faster",
    below: str = "slower",
    tie: str = "tie",
    at: float = 1.0,
) -> str:
    """``above`` when the interval lies above ``at`` (1: a ratio; 0: a difference), ``below`` when below it,
    else ``tie``."""
    if low > high:
        raise ValueError(f"low must not exceed high; got {low!r} > {high!r}")
    if low > at:
        return above
    if high < at:
        return below
    return tie


def per_unit_medians(
    rows: Sequence[dict[str, Any]], value: str, *, group: str = "config", unit: str = "prompt"
) -> tuple[list[str], dict[str, np.ndarray]]:
    """Median of ``value`` over repeats for each (group, unit): the paired table intervals need.

    Returns the sorted units and, per group, an array of medians in that unit order. Raises
    ValueError when a group lacks a unit (an unpaired comparison).
    """
    units = sorted({r[unit] for r in rows})
    out: dict[str, np.ndarray] = {}
    for g in dict.fromkeys(r[group] for r in rows):
        vals = []
        for u in units:
            sample = [r[value] for r in rows if r[group] == g and r[unit] == u]
            if not sample:
                raise ValueError(
                    f"{group} {g!r} has no row for {unit} {u!r}: the comparison would be unpaired"
                )
            vals.append(float(np.median(sample)))
        out[g] = np.asarray(vals)
    return units, out
