"""Pooling real decoding runs, and splitting the gap between Theorem 3.8 and a measured speedup.

* :func:`pool_rounds` adds up the per-round counts of several :class:`specdec.stats.Stats`
  (one per prompt): acceptance by draft position, and the histogram of accepted drafts A over
  the rounds that drafted the full gamma (the truncated geometric of Section 3.1,
  :func:`specdec.theory.accepted_pmf`, is the law of A for those rounds under the i.i.d.
  assumption; shorter rounds near the end of a generation or from prompt lookup are left out).
* :func:`speedup_gap` writes measured / predicted as a product of three factors, each the
  ratio of two consecutive models of a round:

  1. Theorem 3.8, ``E[T](alpha, gamma) / (gamma c + 1)``;
  2. with the verify pass at its measured cost v = T(gamma+1)/T(1):
     ``E[T](alpha, gamma) / (gamma c + v)``  -> factor ``verify = (gamma c + 1) / (gamma c + v)``;
  3. with the *observed* tokens per round instead of the i.i.d. E[T]:
     ``T_obs / (d_obs + v_obs)``, the rounds as they were: observed tokens and draft time per
     round, and the verify cost at each round's actual draft length k_r (v_obs = mean of
     T(k_r+1)/T(1); fewer than gamma drafts cost less to verify) -> factor ``iid``: how far the
     i.i.d. law of A (and the fixed draft length) is off;
  4. the measured speedup -> factor ``overhead``: what the cost model leaves out (time in
     verify and sampling, Python per round, prefill, drafts cut short near the end).

  measured = theorem * verify * iid * overhead exactly (each factor is a ratio of neighbours).
* :func:`load_records` lists the result files of ``benchmarks/real_decoding.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from specdec.stats import Stats
from specdec.theory import expected_tokens, walltime_speedup, walltime_speedup_measured

__all__ = ["load_records", "pool_rounds", "speedup_gap"]


def pool_rounds(stats: Iterable[Stats]) -> dict[str, Any]:
    """Pooled counts of several calls with one gamma.

    Returns ``gamma``; ``examined_at`` / ``accepted_at`` (summed per draft position) and
    ``accept_at`` (their ratio, NaN where never examined); ``full_rounds`` (rounds with k =
    gamma) and ``accepted_hist`` (index a: full rounds with A = a); ``rounds``,
    ``new_tokens``, ``tokens_per_round`` (new tokens / rounds, all rounds), ``mean_drafted``
    and ``alpha_accept_rate`` (accepted / examined, all rounds).
    """
    stats = list(stats)
    if not stats:
        raise ValueError("stats must hold at least one Stats")
    gammas = {s.gamma for s in stats}
    if len(gammas) != 1 or 0 in gammas:
        raise ValueError(f"stats must share one gamma >= 1; got {sorted(gammas)}")
    gamma = gammas.pop()
    examined = np.sum([s.examined_at for s in stats], axis=0)
    accepted = np.sum([s.accepted_at for s in stats], axis=0)
    hist = np.zeros(gamma + 1, dtype=int)
    for s in stats:
        for k, a in zip(s.drafted, s.accepted, strict=True):
            if k == gamma:
                hist[a] += 1
    rounds = sum(s.rounds for s in stats)
    with np.errstate(invalid="ignore", divide="ignore"):
        accept_at = np.where(examined > 0, accepted / np.maximum(examined, 1), np.nan)
    return {
        "gamma": gamma,
        "examined_at": examined.tolist(),
        "accepted_at": accepted.tolist(),
        "accept_at": accept_at.tolist(),
        "full_rounds": int(hist.sum()),
        "accepted_hist": hist.tolist(),
        "rounds": rounds,
        "new_tokens": sum(s.new_tokens for s in stats),
        "tokens_per_round": sum(s.new_tokens for s in stats) / rounds if rounds else float("nan"),
        "mean_drafted": sum(s.drafted_tokens for s in stats) / rounds if rounds else float("nan"),
        "alpha_accept_rate": float(accepted.sum() / examined.sum()) if examined.sum() else float("nan"),
    }


def speedup_gap(
    alpha: float,
    gamma: int,
    c: float,
    verify_cost: float,
    tokens_per_round: float,
    measured: float,
    draft_cost: float | None = None,
    verify_cost_observed: float | None = None,
) -> dict[str, float]:
    """Predicted speedups under three cost models and the factors that take Theorem 3.8 to ``measured``.

    ``alpha`` the paper's alpha (e.g. teacher-forced), ``gamma`` the draft length, ``c`` the
    measured cost coefficient, ``verify_cost`` T(gamma+1)/T(1), ``tokens_per_round`` the
    observed mean T, ``measured`` the measured speedup; ``draft_cost`` the observed draft time
    per round in target steps (default gamma c) and ``verify_cost_observed`` the mean verify
    cost of the rounds at their actual draft lengths (default ``verify_cost``) price model 3. All times are
    in units of one single-token target step. See the module docstring.
    """
    for name, value in (("verify_cost", verify_cost), ("tokens_per_round", tokens_per_round)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0; got {value!r}")
    if not (np.isfinite(measured) and measured > 0):
        raise ValueError(f"measured must be a finite speedup > 0; got {measured!r}")
    d = float(gamma) * float(c) if draft_cost is None else float(draft_cost)
    if not (np.isfinite(d) and d >= 0):
        raise ValueError(f"draft_cost must be a finite number >= 0; got {draft_cost!r}")
    theorem = float(walltime_speedup(alpha, gamma, c))
    with_verify = float(walltime_speedup_measured(alpha, gamma, c, verify_cost))
    vo = float(verify_cost) if verify_cost_observed is None else float(verify_cost_observed)
    if not (np.isfinite(vo) and vo > 0):
        raise ValueError(f"verify_cost_observed must be a finite number > 0; got {verify_cost_observed!r}")
    observed_t = float(tokens_per_round) / (d + vo)
    return {
        "expected_tokens": float(expected_tokens(alpha, gamma)),
        "theorem": theorem,
        "with_verify": with_verify,
        "with_observed_T": observed_t,
        "measured": float(measured),
        "factor_verify": with_verify / theorem,
        "factor_iid": observed_t / with_verify,
        "factor_overhead": float(measured) / observed_t,
        "ratio": float(measured) / theorem,
    }


def load_records(folder: str | Path) -> list[dict[str, Any]]:
    """Every ``*.json`` result record of ``benchmarks/real_decoding.py`` in ``folder``, by file name.

    A record is recognised by its ``"kind": "real-decoding"`` field (generation files and
    others are skipped); each gets its file name under ``"file"``.
    """
    out = []
    for path in sorted(Path(folder).glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(record, dict) and record.get("kind") == "real-decoding":
            out.append({**record, "file": path.name})
    return out
