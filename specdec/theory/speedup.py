"""Closed forms of Leviathan, Kalman & Matias (2023), "Fast Inference from Transformers via
Speculative Decoding" (ICML 2023, arXiv:2211.17192).

Pure numpy, vectorised: every function takes scalars or arrays that broadcast together and
returns a numpy float (or int) scalar or array (except :func:`walltime_speedup_rounds`, which
sums over the rounds of one run and returns a scalar). Names follow the paper:

* ``alpha`` -- the acceptance rate (Definition 3.1, Corollary 3.6),
* ``gamma`` -- the number of drafted tokens per round,
* ``c``     -- the cost coefficient: time of one draft step over one target step (Definition 3.7),
* ``c_hat`` -- arithmetic operations per token of the draft over those of the target (Thm 3.11),
* ``verify_cost`` -- T(gamma+1)/T(1), a target forward over gamma + 1 new tokens over one single-token
  step; the theorem assumes 1, a measurement replaces it (:func:`walltime_speedup_measured`);
  on a measured curve ``{k: T(k)/T(1)}``, :func:`best_gamma_on_curve` and
  :func:`break_even_alpha` maximise it over the measured gammas.

Invalid input raises :class:`ValueError` naming the argument and its valid range; nothing is
clamped.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specdec.theory.checks import check_array, check_float, check_int

__all__ = [
    "MAX_GAMMA",
    "SCAN_VALUES",
    "acceptance_rate",
    "accepted_pmf",
    "best_gamma_on_curve",
    "break_even_alpha",
    "cost_coefficient",
    "expected_tokens",
    "ops_factor",
    "optimal_gamma",
    "oracle_speedup",
    "speedup_ceiling",
    "walltime_speedup",
    "walltime_speedup_measured",
    "walltime_speedup_rounds",
]

#: Tolerance used to decide that a row of probabilities sums to one.
SUM_TOL = 1e-6
#: The largest gamma a function that builds one value per gamma takes (accepted_pmf, optimal_gamma's
#: max_gamma): Theorem 3.8 is flat long before it, and beyond it the arrays only exhaust memory.
MAX_GAMMA = 100_000


def _check_alpha(alpha: ArrayLike) -> NDArray[np.float64]:
    return check_array("alpha", alpha, low=0.0, high=1.0)


def _check_gamma(gamma: ArrayLike) -> NDArray[np.int64]:
    return check_array("gamma", gamma, low=0, integer=True)


def _check_cost(value: ArrayLike, name: str) -> NDArray[np.float64]:
    return check_array(name, value, low=0.0)


def _scalar_or_array(x: NDArray) -> NDArray | np.floating | np.integer:
    return x[()] if x.ndim == 0 else x


def expected_tokens(alpha: ArrayLike, gamma: ArrayLike) -> NDArray | np.floating:
    """Expected tokens per round, E[T] = (1 - alpha^(gamma+1)) / (1 - alpha).

    Equation (1) of the paper: the number of accepted drafts A is a geometric variable
    truncated at gamma, and a round emits T = A + 1 tokens (the +1 is the target's own
    token: the correction after a rejection, or the bonus token after a full accept).
    The limit alpha -> 1 is gamma + 1, returned exactly. Computed as
    ``-expm1((gamma+1) log alpha) / (1 - alpha)`` so that alpha close to 1 keeps its digits, with
    gamma + 1 in floating point: any gamma up to 2**63 - 1 is taken, and a huge one gives the
    gamma -> infinity limit 1 / (1 - alpha) (an integer gamma + 1 would wrap at 2**63 - 1).
    """
    a, g = np.broadcast_arrays(_check_alpha(alpha), _check_gamma(gamma))
    with np.errstate(divide="ignore", invalid="ignore"):
        geometric = -np.expm1((g + 1.0) * np.log(a)) / (1.0 - a)
    out = np.where(a == 1.0, g + 1.0, geometric)
    return _scalar_or_array(out)


def accepted_pmf(alpha: float, gamma: int) -> NDArray[np.float64]:
    """P(A = k) for k = 0..gamma: the truncated geometric law of accepted drafts per round.

    Section 3.1 of the paper, under its i.i.d. assumption: ``alpha^k (1 - alpha)`` for
    k < gamma and ``alpha^gamma`` for k = gamma. Tokens per round are T = A + 1.
    """
    if np.ndim(alpha) or np.ndim(gamma):
        raise ValueError("accepted_pmf takes a scalar alpha and a scalar gamma")
    a = float(_check_alpha(alpha))
    g = int(check_int("gamma", gamma, low=0, high=MAX_GAMMA, note="one probability per accepted count"))
    k = np.arange(g + 1)
    pmf = a**k * (1.0 - a)
    pmf[g] = a**g
    return pmf


def walltime_speedup(alpha: ArrayLike, gamma: ArrayLike, c: ArrayLike) -> NDArray | np.floating:
    """Expected wall-time improvement factor, Theorem 3.8.

    ``(1 - alpha^(gamma+1)) / ((1 - alpha) (gamma c + 1))``: E[T] tokens per round, for the
    price of gamma draft steps (cost c each) and one target step that verifies gamma + 1
    positions in parallel (assumed to cost the same as one decoding step).
    """
    g = _check_gamma(gamma)
    cc = _check_cost(c, "c")
    return _scalar_or_array(np.asarray(expected_tokens(alpha, g) / (g * cc + 1.0)))


def _check_verify_cost(verify_cost: ArrayLike) -> NDArray[np.float64]:
    return check_array("verify_cost", verify_cost, low=0.0, open_low=True, note="T(gamma+1)/T(1)")


def walltime_speedup_measured(
    alpha: ArrayLike, gamma: ArrayLike, c: ArrayLike, verify_cost: ArrayLike = 1.0
) -> NDArray | np.floating:
    """Theorem 3.8 with the verify pass priced at its measured cost.

    ``E[T] / (gamma c + verify_cost)`` with E[T] = (1 - alpha^(gamma+1)) / (1 - alpha) (Eq. 1)
    and ``verify_cost`` = T(gamma+1)/T(1), the time of one target forward over gamma + 1 new
    tokens over that of a single-token step (:func:`specdec.measure.core.verify_cost_curve`).
    The theorem's proof assumes the verify pass costs one target step; ``verify_cost = 1``
    (the default) gives :func:`walltime_speedup` exactly. Broadcasts like the other functions.
    """
    g = _check_gamma(gamma)
    cc = _check_cost(c, "c")
    v = _check_verify_cost(verify_cost)
    return _scalar_or_array(np.asarray(expected_tokens(alpha, g) / (g * cc + v)))


def walltime_speedup_rounds(
    alpha: float,
    drafted: ArrayLike,
    c: float,
    verify_cost: ArrayLike = 1.0,
    draft_steps: ArrayLike | None = None,
) -> np.floating:
    """Theorem 3.8's expected speedup for rounds whose draft length k_r varies (k_r <= gamma).

    A drafter such as prompt lookup proposes k_r drafts in round r, sometimes fewer than gamma
    (none when no n-gram matches). Under the paper's i.i.d. assumption a round with k_r drafts
    emits E[T](alpha, k_r) tokens (Eq. 1) and costs ``s_r c + v_r`` target steps: s_r draft
    steps of relative cost c (Definition 3.7) and one verify pass over k_r + 1 tokens of
    relative cost v_r = T(k_r+1)/T(1). Over the rounds, the expected tokens per unit of time
    against plain decoding (one token per target step) is the ratio of sums

        sum_r E[T](alpha, k_r) / sum_r (s_r c + v_r).

    ``drafted`` holds the k_r (1-D, at least one round); ``draft_steps`` the s_r (default k_r,
    one step per drafted token as in the theorem; prompt lookup does one lookup per round);
    ``verify_cost`` is a scalar or one v_r per round. With every k_r = s_r = gamma this equals
    :func:`walltime_speedup_measured` (and :func:`walltime_speedup` when v_r = 1).
    """
    a = _check_alpha(alpha)
    if a.ndim:
        raise ValueError(f"alpha must be a scalar; got {alpha!r}")
    k = _check_gamma(drafted)
    if k.ndim != 1 or k.size == 0:
        raise ValueError(
            f"drafted must be a 1-D array of draft lengths with at least one round; got {drafted!r}"
        )
    cc = _check_cost(c, "c")
    if cc.ndim:
        raise ValueError(f"c must be a scalar; got {c!r}")
    steps = k if draft_steps is None else _check_cost(draft_steps, "draft_steps")
    v = _check_verify_cost(verify_cost)
    for name, arr in (("draft_steps", steps), ("verify_cost", v)):
        if arr.ndim and arr.shape != k.shape:
            raise ValueError(
                f"{name} must be a scalar or hold one value per round ({k.size}); got {arr.shape}"
            )
    tokens = np.sum(expected_tokens(a, k))
    cost = np.sum(np.broadcast_to(steps * cc + v, k.shape))
    return np.float64(tokens / cost)


def ops_factor(alpha: ArrayLike, gamma: ArrayLike, c_hat: ArrayLike = 0.0) -> NDArray | np.floating:
    """Expected factor increase in arithmetic operations, Theorem 3.11.

    ``(1 - alpha) (gamma c_hat + gamma + 1) / (1 - alpha^(gamma+1))``: per round the target
    processes gamma + 1 positions and the draft gamma positions at relative cost c_hat,
    and the round yields E[T] tokens, against one target position per token without
    speculation.
    """
    g = _check_gamma(gamma)
    ch = _check_cost(c_hat, "c_hat")
    return _scalar_or_array(np.asarray((g * ch + g + 1.0) / expected_tokens(alpha, g)))


def optimal_gamma(alpha: ArrayLike, c: ArrayLike, max_gamma: int = 64) -> NDArray | np.integer:
    """The integer gamma in [0, max_gamma] that maximises Theorem 3.8 (Section 3.5).

    Found by scanning the integers from 0; ties (equal speedups in floating point) go to the
    smaller gamma. When c = 0 and 0 < alpha the speedup E[T] rises strictly with gamma, so
    the answer is ``max_gamma`` exactly (not a floating-point tie below it, as a scan would
    find where alpha^(gamma+1) underflows the last digit; ``specdec plan`` says the same).

    The scan holds at most :data:`SCAN_VALUES` speedups at a time: a grid of alphas times gammas
    beyond that is scanned in blocks of gammas, and stops once no larger gamma can do better
    (the speedup never exceeds ``1 / ((1 - alpha)(gamma c + 1))``, which falls with gamma, nor 1 at
    alpha = 1 with c >= 1), so a large ``max_gamma`` costs time only where the optimum is that far out.
    """
    check_int("max_gamma", max_gamma, low=0, high=MAX_GAMMA, note="every gamma up to it is scanned")
    a, cc = np.broadcast_arrays(_check_alpha(alpha), _check_cost(c, "c"))
    rising = (cc == 0) & (a > 0)
    if (max_gamma + 1) * max(a.size, 1) <= SCAN_VALUES:  # one block: the whole grid at once
        grid = np.arange(max_gamma + 1).reshape((-1,) + (1,) * a.ndim)
        speedups = walltime_speedup(a[None, ...], grid, cc[None, ...])
        best = np.argmax(speedups, axis=0)
    else:
        best = _scan_in_blocks(a.ravel(), cc.ravel(), max_gamma, rising.ravel()).reshape(a.shape)
    best = np.where(rising, max_gamma, best)
    return _scalar_or_array(best)


#: The most speedups :func:`optimal_gamma` holds at once (32 MB of float64 per array): a larger grid
#: of alphas times gammas is scanned in blocks of gammas.
SCAN_VALUES = 2**22


def _scan_in_blocks(a: NDArray, cc: NDArray, max_gamma: int, decided: NDArray) -> NDArray[np.int64]:
    """:func:`optimal_gamma`'s scan over gammas in blocks of at most :data:`SCAN_VALUES` values, for the
    1-D ``a`` and ``cc`` whose answer is not ``decided`` by a closed form; first maximum, as argmax."""
    best_g = np.zeros(a.shape, dtype=np.int64)
    best_s = np.full(a.shape, -np.inf)
    with np.errstate(divide="ignore"):  # the most the speedup can reach, in floating point too:
        ceiling = 1.0 / (1.0 - a)  # E[T] <= 1 / (1 - alpha) (-expm1 <= 1); at alpha = 1, E[T] = gamma + 1
    ceiling[(a == 1) & (cc >= 1)] = 1.0  # ... and (gamma + 1) / (gamma c + 1) <= 1 when c >= 1
    active = np.flatnonzero(~decided)
    start = 0
    while active.size and start <= max_gamma:
        stop = min(max_gamma, start + max(1, SCAN_VALUES // active.size) - 1)
        grid = np.arange(start, stop + 1).reshape(-1, 1)
        speedups = walltime_speedup(a[active][None, :], grid, cc[active][None, :])
        at = np.argmax(speedups, axis=0)
        value = speedups[at, np.arange(active.size)]
        better = value > best_s[active]  # strictly: an earlier gamma keeps a tie
        best_s[active[better]] = value[better]
        best_g[active[better]] = start + at[better]
        start = stop + 1
        # no gamma >= start beats the best so far once the ceiling over start's cost is below it
        active = active[ceiling[active] / (start * cc[active] + 1.0) > best_s[active]]
    return best_g


def speedup_ceiling(alpha: ArrayLike) -> NDArray | np.floating:
    """The c -> 0, gamma -> infinity limit of Theorem 3.8: 1 / (1 - alpha) (Section 3.6).

    Returns ``inf`` at alpha = 1.
    """
    a = _check_alpha(alpha)
    with np.errstate(divide="ignore"):
        return _scalar_or_array(np.asarray(1.0 / (1.0 - a)))


def oracle_speedup(alpha: ArrayLike, c: ArrayLike) -> NDArray | np.floating:
    """Section 3.5's oracle: each round drafts exactly the tokens that will be accepted.

    Under the i.i.d. model the accepted run is geometric, so a round yields 1 / (1 - alpha)
    tokens on average for alpha / (1 - alpha) draft steps and one target call:
    1 / (1 - alpha + alpha c). At c = 0 it is :func:`speedup_ceiling`. Returns ``inf`` at
    alpha = 1 and c = 0.
    """
    a = _check_alpha(alpha)
    cc = _check_cost(c, "c")
    with np.errstate(divide="ignore"):
        return _scalar_or_array(np.asarray(1.0 / (1.0 - a + a * cc)))


def _check_distribution(x: ArrayLike, name: str) -> NDArray[np.float64]:
    arr = np.asarray(x, dtype=float)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(f"{name} must be an array of probabilities over a vocabulary (last axis)")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must hold finite probabilities >= 0")
    sums = arr.sum(axis=-1)
    if np.any(np.abs(sums - 1.0) > SUM_TOL):
        raise ValueError(f"{name} must sum to 1 along its last axis (within {SUM_TOL}); sums are {sums!r}")
    return arr


def acceptance_rate(p: ArrayLike, q: ArrayLike, lenience: float = 1.0) -> NDArray | np.floating:
    """Acceptance rate of one drafted token, over the last axis (Corollary 3.6).

    With lenience l = 1 this is ``sum_x min(p(x), q(x)) = 1 - TV(p, q)``, the paper's alpha
    for one position. With lenience l in (0, 1] (Appendix A.5) a draft x ~ q is accepted
    with probability min(1, p(x) / (l q(x))), so the rate is ``sum_x min(q(x), p(x) / l)``.
    """
    pp = _check_distribution(p, "p")
    qq = _check_distribution(q, "q")
    if pp.shape != qq.shape:
        raise ValueError(f"p and q must have the same shape; got {pp.shape} and {qq.shape}")
    lenience = check_float("lenience", lenience, low=0.0, high=1.0, open_low=True)
    return _scalar_or_array(np.asarray(np.minimum(qq, pp / lenience).sum(axis=-1)))


# --------------------------------------------------------------------------- Theorem 3.8 on a measured curve
def best_gamma_on_curve(alpha: float, c: float, curve: Mapping[int, float]) -> tuple[int, float]:
    """The gamma >= 1 with the highest ``E[T] / (gamma c + v(gamma + 1))`` among those whose
    verify cost ``v(gamma + 1) = curve[gamma + 1]`` was measured; returns (gamma, speedup).

    Ties go to the smaller gamma. Raises ValueError when the curve has no k >= 2.
    """
    gammas = sorted(k - 1 for k in curve if k >= 2)
    if not gammas:
        raise ValueError("curve must hold T(k)/T(1) for at least one k >= 2")
    speedups = [float(walltime_speedup_measured(alpha, g, c, curve[g + 1])) for g in gammas]
    i = int(np.argmax(speedups))
    return gammas[i], speedups[i]


def break_even_alpha(c: float, curve: Mapping[int, float], tol: float = 1e-9) -> float:
    """The smallest alpha at which some measured gamma gives a speedup above 1.

    With a free verify (``v(k) = 1`` for every k) this is ``c``: the converse of Corollary
    3.9. A verify premium raises it: at gamma = 1 the speedup ``(1 + alpha) / (c + v(2))``
    exceeds 1 only when ``alpha > c + v(2) - 1``. Found by bisection on :func:`best_gamma_on_curve`
    (whose best speedup rises with alpha); returns 1.0 when no alpha below 1 suffices.
    """
    c = check_float("c", c, low=0.0)
    check_float("tol", tol, low=0.0, high=0.5, open_low=True, open_high=True)

    def wins(alpha: float) -> bool:
        return best_gamma_on_curve(alpha, c, curve)[1] > 1.0

    low, high = 0.0, 1.0 - 1e-12
    if wins(low):
        return 0.0
    if not wins(high):
        return 1.0
    while high - low > tol:
        mid = 0.5 * (low + high)
        low, high = (low, mid) if wins(mid) else (mid, high)
    return high


def cost_coefficient(draft_s: float, rounds: int, gamma: int, step_s: float) -> float:
    """The paper's c (Definition 3.7) of a speculative call: draft time per round / gamma / step_s.

    Theorem 3.8 prices a round at ``gamma c + 1`` target steps, so c is measured as the time a
    round spends drafting (``draft_s / rounds``) per drafted position (over ``gamma``), in
    units of one single-token target step ``step_s`` (T(1), measured by plain decoding: the
    ``step_s`` of an autoregressive call's :class:`specdec.engine.stats.Stats`). For a model drafter
    that runs gamma steps a round this is the time of one draft step over one target step; for prompt
    lookup (one lookup a round) it is that lookup's time spread over the gamma positions, so that
    ``gamma c`` is the drafting time of a round either way. 0 when nothing was drafted.

    The unit is part of the number, so every caller states which of two it measures:

    * **a loop step** (the default reading): ``draft_s`` and ``rounds`` from a speculative call's
      Stats and ``step_s`` a plain decoding's time per step (its Stats' ``step_s``, or a plain
      run's decode time per token), so both sides carry the loop's own work (sampling,
      bookkeeping); this is the c that Theorem 3.8 prices a round with;
    * **a bare forward**: ``draft_s`` one timed draft forward of one token and ``step_s`` one timed
      target forward of one token after the same context, ``rounds = gamma = 1`` (the engines'
      T_draft(1) / T_target(1), no loop around either): the models' own cost ratio, which a loop
      step's c exceeds by the loop's work.

    ``gamma = 1`` with a loop's ``draft_s`` and ``rounds`` gives c per round (a round's whole drafting
    in steps: ``gamma c``, or a tree's draft time per round).
    """
    check_float("draft_s", draft_s, low=0.0, note="a time in seconds")
    check_float("step_s", step_s, low=0.0, open_low=True, note="a measured target step in seconds")
    for name, value in (("rounds", rounds), ("gamma", gamma)):
        check_int(name, value, low=1)
    return draft_s / rounds / gamma / step_s
