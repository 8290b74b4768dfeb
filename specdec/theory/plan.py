"""``specdec plan``'s numbers: Theorem 3.8 for an alpha, a c, a gamma and optionally a measured verify cost.

:func:`plan` returns E[T] (Eq. 1), the speedup by Theorem 3.8 (and with the verify pass priced as
measured), the optimal gamma, the break-even bars (Corollary 3.9, and priced) and the ceiling
1 / (1 - alpha), each from :mod:`specdec.theory.speedup`. The search for the optimal gamma costs the
same for any ``max_gamma`` (up to :data:`MAX_GAMMA`). numpy only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from specdec.theory.checks import check_float, check_int
from specdec.theory.speedup import (
    best_gamma_on_curve,
    break_even_alpha,
    expected_tokens,
    optimal_gamma,
    speedup_ceiling,
    walltime_speedup,
    walltime_speedup_measured,
)

__all__ = ["MAX_GAMMA", "plan"]

#: The largest --gamma / --max-gamma ``plan`` takes (any larger one is refused in one line).
MAX_GAMMA = 10**15
#: Up to this many gammas the optimum is found by scanning them all; beyond, by bisection.
_SCAN = 4096
_DIGITS = "10**15: beyond it gamma + 1 loses digits in the formulas"


def _checked_curve(curve: Mapping[int, float]) -> dict[int, float]:
    """{k: T(k)/T(1)}: k integers >= 1 (k = 1 only as 1:1), values finite and > 0, some k >= 2."""
    out: dict[int, float] = {}
    for k, v in dict(curve).items():
        k = check_int("each k of verify_curve", k, low=1, note="k = gamma + 1")
        out[k] = check_float(f"verify_curve[{k}]", v, low=0, open_low=True, note="T(k)/T(1)")
        if k == 1 and out[k] != 1.0:
            raise ValueError(f"verify_curve[1] must be 1 (T(1)/T(1)); got {v!r}")
    if not any(k >= 2 for k in out):
        raise ValueError(f"verify_curve must hold some k = gamma + 1 >= 2; got {sorted(out)}")
    return out


def plan(
    alpha: float,
    c: float,
    gamma: int | None = None,
    *,
    verify_cost: float | None = None,
    verify_curve: dict[int, float] | None = None,
    max_gamma: int = 64,
    names: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The numbers ``specdec plan`` prints, each from :mod:`specdec.theory.speedup`.

    The optimal gamma is Theorem 3.8's (:func:`~specdec.theory.speedup.optimal_gamma`, gamma in
    0..max_gamma) without a verify cost; with one, it is the best gamma in 1..max_gamma of
    the verify-priced speedup (:func:`~specdec.theory.speedup.best_gamma_on_curve`), on the given
    curve or with ``verify_cost`` for every gamma, and 0 (plain decoding, speedup 1) when no
    gamma beats 1. Without ``gamma`` the report is for the optimal gamma.

    The search costs the same for any ``max_gamma`` (:func:`_best_gamma`): with c = 0 and
    alpha > 0 the speedup rises with gamma, so the optimum is ``max_gamma`` exactly (not a
    floating-point tie below it); with c > 0 no gamma with gamma c + V > 1 / (1 - alpha) beats
    plain decoding, which bounds the gammas searched. Arguments are checked first: alpha in [0, 1]
    (1: every draft accepted), c >= 0, gamma and max_gamma integers in 1..:data:`MAX_GAMMA`,
    ``verify_cost`` > 0, ``verify_curve`` {k: T(k)/T(1)} with k >= 1 and some k >= 2 (the curve
    wins when both are given), holding k = gamma + 1 for a given gamma and some k <= max_gamma + 1.
    ``names`` maps ``gamma``, ``max_gamma`` and ``verify_curve`` to what the caller calls them in
    those two messages (the command line: ``--gamma``, ...).
    """
    say = {"gamma": "gamma", "max_gamma": "max_gamma", "verify_curve": "verify_curve", **(names or {})}
    alpha = check_float("alpha", alpha, low=0, high=1, note="the acceptance rate, Corollary 3.6")
    c = check_float("c", c, low=0, note="a draft step's time in target steps, Definition 3.7")
    max_gamma = check_int("max_gamma", max_gamma, low=1, high=MAX_GAMMA, note=_DIGITS)
    if gamma is not None:
        gamma = check_int("gamma", gamma, low=1, high=MAX_GAMMA, note=_DIGITS)
    if verify_cost is not None:
        verify_cost = check_float(
            "verify_cost", verify_cost, low=0, open_low=True, note="V = T(gamma+1)/T(1)"
        )
    if verify_curve is not None:
        verify_curve = _checked_curve(verify_curve)
    priced = verify_cost is not None or verify_curve is not None
    if (
        verify_curve is not None
        and verify_cost is None
        and gamma is not None
        and gamma + 1 not in verify_curve
    ):
        raise ValueError(
            f"{say['gamma']} {gamma} needs T({gamma + 1})/T(1) in {say['verify_curve']}; it holds k = "
            f"{', '.join(str(k) for k in sorted(verify_curve))}"
        )
    if verify_curve is not None:
        curve = {k: v for k, v in verify_curve.items() if k <= max_gamma + 1}
        if not any(k >= 2 for k in curve):
            raise ValueError(
                f"{say['verify_curve']} holds no k = gamma + 1 <= {say['max_gamma']} + 1 = {max_gamma + 1}; "
                f"its k are {sorted(verify_curve)}"
            )
    elif verify_cost is not None:  # beyond gamma c + V > 1/(1-alpha) the speedup is below 1
        reach = (
            max_gamma
            if c == 0 or alpha >= 1  # alpha = 1: every draft is accepted, no bound below --max-gamma
            else max(1, int(min(max_gamma, (1 / (1 - alpha) - verify_cost) / c + 1)))
        )
        curve = {g + 1: verify_cost for g in range(1, min(reach, _SCAN) + 1)}
    else:
        curve = {}

    def cost_of(g: int) -> float | None:
        """V at gamma = g: T(g+1)/T(1); 1 at g = 0 (plain decoding: one T(1) step)."""
        if not priced:
            return None
        if g == 0:
            return 1.0
        if verify_cost is not None:
            return verify_cost
        return verify_curve[g + 1]  # a given gamma is checked above; the optimum is one of the curve's

    if verify_curve is None and verify_cost is not None and (reach > _SCAN or (c == 0 and alpha > 0)):
        if c == 0 and alpha > 0:  # E[T] / V rises with gamma: the limit, exactly
            best_g = reach
        else:
            best_g = _best_gamma(
                lambda g: float(walltime_speedup_measured(alpha, g, c, verify_cost)), 1, reach
            )
        best_s = float(walltime_speedup_measured(alpha, best_g, c, verify_cost))
        if best_s <= 1.0:
            best_g, best_s = 0, float(walltime_speedup(alpha, 0, c))
        rule = f"verify-priced speedup, assuming V = {verify_cost:g} for every gamma"
    elif priced:
        best_g, best_s = best_gamma_on_curve(alpha, c, curve)
        if best_s <= 1.0:  # no gamma >= 1 gains: plain decoding (gamma = 0) is the optimum
            best_g, best_s = 0, float(walltime_speedup(alpha, 0, c))
        rule = (
            "verify-priced speedup, gamma from the measured verify curve"
            if verify_curve is not None
            else f"verify-priced speedup, assuming V = {verify_cost:g} for every gamma"
        )
    else:  # beyond gamma c + 1 > 1/(1-alpha) the speedup is below gamma = 0's
        reach = max_gamma if c == 0 or alpha >= 1 else int(min(max_gamma, alpha / (1 - alpha) / c))
        if c == 0 and alpha > 0:  # E[T] rises with gamma: the limit, exactly (not a floating tie)
            best_g = reach
        elif reach <= _SCAN:
            best_g = int(optimal_gamma(alpha, c, reach))
        else:
            best_g = _best_gamma(lambda g: float(walltime_speedup(alpha, g, c)), 0, reach)
        best_s = float(walltime_speedup(alpha, best_g, c))
        rule = "Theorem 3.8"
    g = best_g if gamma is None else gamma
    v = cost_of(g)
    # the bar alpha must clear when the verify pass is priced as measured (Corollary 3.9's alpha > c
    # is the bar for V = 1): over the measured curve, or at the one gamma a scalar V was measured at
    priced_bar = None
    if verify_curve is not None:
        priced_bar = float(break_even_alpha(c, curve))
    elif verify_cost is not None and g >= 1:
        priced_bar = float(break_even_alpha(c, {g + 1: verify_cost}))
    return {
        "alpha": alpha,
        "c": c,
        "gamma": g,
        "gamma_given": gamma is not None,
        "expected_tokens": float(expected_tokens(alpha, g)),
        "speedup": float(walltime_speedup(alpha, g, c)),
        "verify_cost": v,
        "verify_curve": {str(k): x for k, x in sorted(verify_curve.items())} if verify_curve else None,
        "speedup_with_verify": None if v is None else float(walltime_speedup_measured(alpha, g, c, v)),
        "optimal_gamma": best_g,
        "optimal_speedup": best_s,
        "optimal_rule": rule,
        "max_gamma": max_gamma,
        "optimal_at_max_gamma": best_g == max_gamma,
        "break_even": alpha > c,
        "break_even_priced_alpha": priced_bar,
        "break_even_gamma1_speedup": float(walltime_speedup(alpha, 1, c)),
        "ceiling": float(speedup_ceiling(alpha)),
    }


def _best_gamma(speedup: Callable[[int], float], low: int, high: int) -> int:
    """The gamma in low..high with the highest ``speedup(gamma)``, in O(log(high - low)) calls.

    E[T] is concave in gamma and the round's price gamma c + V is affine, so the speedup is
    quasi-concave: it rises (strictly, for alpha > 0) and then falls. The optimum is the first
    gamma whose successor is no faster (high if none): found by bisection on that condition.
    """
    while low < high:
        mid = (low + high) // 2
        if speedup(mid + 1) > speedup(mid):
            low = mid + 1
        else:
            high = mid
    return low
