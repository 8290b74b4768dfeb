"""Pearson's chi-square test of observed counts against a law, with its one p-value path.

* :func:`chi_square_pvalue` -- the statistic after pooling rare cells, its degrees of freedom and
  its p-value (the test suite's losslessness checks and the GPU record use it).
* :func:`chi2_pvalue` -- the one choice of the p-value: ``scipy.stats.chi2.sf`` where scipy
  imports, else :func:`chi2_sf` (the GPU machine may lack scipy); it returns which one it used
  (:data:`SCIPY_METHOD` or :data:`FALLBACK_METHOD`), and every result carries that as ``method``.
* :func:`chi2_sf` -- the chi-square survival function in plain Python (tested against scipy).

numpy only (scipy optional): no torch.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["FALLBACK_METHOD", "SCIPY_METHOD", "chi2_pvalue", "chi2_sf", "chi_square_pvalue"]

#: The ``method`` of a p-value from scipy, and from the plain-Python fallback.
SCIPY_METHOD = "scipy.stats.chi2.sf"
FALLBACK_METHOD = "specdec.theory.chisquare.chi2_sf"


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square(df): the regularised upper incomplete gamma Q(df/2, x/2).

    Series for x/2 < df/2 + 1, Lentz's continued fraction otherwise (Numerical Recipes 6.2);
    relative accuracy about 1e-12. Used by :func:`chi2_pvalue` only where scipy is missing.
    """
    if df < 1:
        raise ValueError(f"df must be >= 1; got {df!r}")
    if x <= 0:
        return 1.0
    a, z = df / 2.0, x / 2.0
    log_front = a * math.log(z) - z - math.lgamma(a)
    if z < a + 1.0:  # P(a, z) by its series; Q = 1 - P
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1.0
            term *= z / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = z + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return min(1.0, math.exp(log_front) * h)


def chi2_pvalue(statistic: float, df: int) -> tuple[float, str]:
    """P(X >= statistic) for X ~ chi-square(df), and the method that computed it: scipy's
    ``chi2.sf`` where scipy imports (:data:`SCIPY_METHOD`), else :func:`chi2_sf`
    (:data:`FALLBACK_METHOD`). The only place that chooses."""
    try:
        import scipy.stats
    except ImportError:
        return chi2_sf(statistic, df), FALLBACK_METHOD
    return float(scipy.stats.chi2.sf(statistic, df)), SCIPY_METHOD


def chi_square_pvalue(counts: np.ndarray, law: np.ndarray, min_expected: float = 5.0) -> dict[str, Any]:
    """Pearson's chi-square of observed counts against a law (the test suite's checks use it too).

    Cells expected fewer than ``min_expected`` times are pooled into one; if the pool itself is
    expected fewer times, it joins the smallest other cell. An observation in a cell of
    probability 0 gives p-value 0. The p-value is :func:`chi2_pvalue`'s; ``method`` says which
    way it was computed.
    """
    obs, expected = np.asarray(counts, float).ravel(), np.asarray(law, float).ravel() * float(np.sum(counts))
    if obs[np.asarray(law).ravel() == 0].sum() > 0:
        return {"pvalue": 0.0, "statistic": math.inf, "df": None, "cells": None, "method": "impossible cell"}
    big = expected >= min_expected
    order = np.argsort(expected[big])
    obs_big, exp_big = obs[big][order], expected[big][order]
    pool_obs, pool_exp = obs[~big].sum(), expected[~big].sum()
    if pool_exp >= min_expected:
        obs_big, exp_big = np.append(obs_big, pool_obs), np.append(exp_big, pool_exp)
    else:
        obs_big[0] += pool_obs
        exp_big[0] += pool_exp
    stat = float(np.sum((obs_big - exp_big) ** 2 / exp_big))
    df = len(obs_big) - 1
    pvalue, method = chi2_pvalue(stat, df)
    return {"pvalue": pvalue, "statistic": stat, "df": df, "cells": len(obs_big), "method": method}
