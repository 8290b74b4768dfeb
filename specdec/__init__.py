"""specdec: the shared package of the book *How much does speculative decoding really gain?*

Modules, one job each:

* :mod:`specdec.theory`   -- closed forms of Leviathan et al. (2023): E[T], Theorem 3.8,
  Theorem 3.11, the optimal gamma, the acceptance rate (pure numpy).
* :mod:`specdec.sampling` -- Algorithm 1 on probability rows: warp, verify, residual.
"""

from specdec.theory import (
    acceptance_rate,
    accepted_pmf,
    expected_tokens,
    ops_factor,
    optimal_gamma,
    speedup_ceiling,
    walltime_speedup,
)

__version__ = "0.1.0"

__all__ = [
    "acceptance_rate",
    "accepted_pmf",
    "expected_tokens",
    "ops_factor",
    "optimal_gamma",
    "speedup_ceiling",
    "walltime_speedup",
]
