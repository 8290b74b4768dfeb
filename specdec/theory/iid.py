"""The i.i.d. acceptance model of Leviathan et al. (2023), Section 3.1: simulate it, invert it.

Under the model every drafted token is accepted independently with the same probability
``alpha``, and a round stops at its first rejection, so the number of accepted drafts ``A`` is
a geometric variable truncated at ``gamma`` and a round emits ``T = A + 1`` tokens
(:func:`specdec.theory.speedup.accepted_pmf`, :func:`specdec.theory.speedup.expected_tokens`).

* :func:`simulate_accepted`       -- draw ``A`` for many rounds, one uniform per draft position.
* :func:`alpha_from_mean_tokens`  -- the alpha at which Eq. (1) gives a measured mean of ``T``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import brentq

from specdec.theory.checks import check_float, check_int, check_probability
from specdec.theory.speedup import expected_tokens

__all__ = ["alpha_from_mean_tokens", "simulate_accepted"]


def simulate_accepted(alpha: float, gamma: int, n_rounds: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """Accepted drafts ``A`` of ``n_rounds`` independent rounds of the i.i.d. model (Section 3.1).

    Each round draws one uniform ``u_i`` per drafted position i = 1..gamma and accepts draft i
    when ``u_i < alpha``; ``A`` counts the acceptances before the first rejection (all gamma
    when there is none), so ``P(A = k) = alpha^k (1 - alpha)`` for k < gamma and ``alpha^gamma``
    at k = gamma. Tokens per round are ``A + 1``. The caller's generator is used as is (seed it
    once; it is never reseeded here).
    """
    alpha = check_probability("alpha", alpha)
    g = check_int("gamma", gamma, low=0)
    n = check_int("n_rounds", n_rounds, low=1)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator; got {type(rng).__name__}")
    if g == 0:
        return np.zeros(n, dtype=np.int64)
    accepted = rng.random((n, g)) < float(alpha)
    first_rejection = np.argmin(accepted, axis=1)
    return np.where(accepted.all(axis=1), g, first_rejection).astype(np.int64)


def alpha_from_mean_tokens(mean_tokens: float, gamma: int) -> float:
    """The alpha in [0, 1] at which Eq. (1) equals ``mean_tokens``: solve E[T](alpha) = mean_tokens.

    ``mean_tokens`` is a mean of T = A + 1 (tokens per round, bonus or correction token
    included), so it must lie in [1, gamma + 1]; a mean of accepted drafts A must have 1 added
    first. E[T] is strictly increasing in alpha for gamma >= 1, so the root is unique.
    """
    g = check_int("gamma", gamma, low=1)
    m = check_float("mean_tokens", mean_tokens, low=1.0, high=g + 1.0, note="gamma + 1: a mean of T = A + 1")
    if m == 1.0:
        return 0.0
    if m == g + 1.0:
        return 1.0
    return float(brentq(lambda a: float(expected_tokens(a, g)) - m, 0.0, 1.0, xtol=1e-14, rtol=1e-14))
