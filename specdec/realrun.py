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
* :func:`slower_accurate_pairs` finds the paper's counterexample in a record's table: two
  drafters of one task and temperature where the one with the higher alpha is the slower on
  the wall clock; :func:`same_family`, :func:`fastest_pair`, :func:`widest_win` and
  :func:`family_scaling` pick the pairs and the family-wide pattern that the chapter shows.
  Each returns ``None`` (or an empty list) when the record holds no such pair.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from specdec.stats import Stats
from specdec.theory import expected_tokens, walltime_speedup, walltime_speedup_measured

__all__ = [
    "drafter_family",
    "family_scaling",
    "fastest_pair",
    "load_records",
    "pool_rounds",
    "same_family",
    "slower_accurate_pairs",
    "speedup_gap",
    "widest_win",
]

#: Columns a table row must have for the pair search.
PAIR_COLUMNS = ("temperature", "task", "drafter", "alpha", "c", "measured")


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


# -- the counterexample: a more accurate draft that is slower -------------------------------------


def _rows(table: Any) -> list[dict[str, Any]]:
    """Rows as dicts from a list of mappings or a pandas DataFrame; checks the columns."""
    rows = table.to_dict("records") if hasattr(table, "to_dict") else [dict(r) for r in table]
    for i, row in enumerate(rows):
        missing = [k for k in PAIR_COLUMNS if k not in row]
        if missing:
            raise ValueError(f"table row {i} lacks the columns {missing} (needs {list(PAIR_COLUMNS)})")
    return rows


def drafter_family(name: str) -> str | None:
    """The model family of a drafter name: ``"ee"`` (early exits ``ee-N``), ``"draft"``
    (distilled drafts ``draft-...``), or ``None`` for drafters that are not models
    (prompt lookup, n-grams)."""
    head = name.split("-", 1)[0]
    return head if head in ("ee", "draft") and "-" in name else None


def slower_accurate_pairs(table: Any, *, margin: float = 0.05) -> list[dict[str, Any]]:
    """Every pair in one (temperature, task) group whose more accurate drafter is the slower.

    ``table``: rows (mappings or a DataFrame) with the columns of :data:`PAIR_COLUMNS`
    (``measured`` is the measured speedup). A pair counts when ``alpha`` exceeds the other's
    by more than ``margin`` while ``measured`` is lower. Each pair is a dict with
    ``temperature``, ``task`` and, for the two drafters, ``accurate``/``faster`` (names),
    ``accurate_alpha``/``faster_alpha``, ``accurate_c``/``faster_c`` and
    ``accurate_speedup``/``faster_speedup``; in table order. An empty list when none.
    """
    if not (np.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite number >= 0; got {margin!r}")
    rows = _rows(table)
    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["temperature"], row["task"]), []).append(row)
    pairs = []
    for (temperature, task), grp in groups.items():
        for a in grp:
            for b in grp:
                if a["alpha"] > b["alpha"] + margin and a["measured"] < b["measured"]:
                    pairs.append(
                        {
                            "temperature": temperature,
                            "task": task,
                            "accurate": a["drafter"],
                            "accurate_alpha": float(a["alpha"]),
                            "accurate_c": float(a["c"]),
                            "accurate_speedup": float(a["measured"]),
                            "faster": b["drafter"],
                            "faster_alpha": float(b["alpha"]),
                            "faster_c": float(b["c"]),
                            "faster_speedup": float(b["measured"]),
                        }
                    )
    return pairs


def same_family(pairs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pairs whose two drafters are models of one family (two early exits, two distilled drafts)."""
    out = []
    for pair in pairs:
        family = drafter_family(pair["accurate"])
        if family is not None and family == drafter_family(pair["faster"]):
            out.append(pair)
    return out


def fastest_pair(pairs: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The pair whose faster drafter is the fastest (ties: the widest gap in alpha); ``None`` if none."""
    pairs = list(pairs)
    if not pairs:
        return None
    return max(pairs, key=lambda q: (q["faster_speedup"], q["accurate_alpha"] - q["faster_alpha"]))


def widest_win(pairs: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The pair with the largest ``faster_speedup / accurate_speedup``, that ratio under
    ``"win"``; ``None`` if there is no pair."""
    pairs = list(pairs)
    if not pairs:
        return None
    best = max(pairs, key=lambda q: q["faster_speedup"] / q["accurate_speedup"])
    return {**best, "win": best["faster_speedup"] / best["accurate_speedup"]}


def family_scaling(table: Any, family: str = "draft") -> dict[str, Any] | None:
    """How alpha, c and the speedup change from the smallest to the largest draft of a family.

    Members are ordered by the number after their last ``l`` (``draft-distil-l4`` -> 4) for
    ``"draft"``, after ``ee-`` for ``"ee"``. Over the (temperature, task) groups that hold
    both: the median ratios ``c_ratio`` and ``alpha_ratio`` (largest / smallest), the count
    ``slower`` of groups where the largest is slower, and ``groups``. ``None`` when the
    table holds fewer than two members of the family or no group holds both.
    """
    if family not in ("ee", "draft"):
        raise ValueError(f"family must be 'ee' or 'draft'; got {family!r}")
    rows = _rows(table)
    members = sorted({r["drafter"] for r in rows if drafter_family(r["drafter"]) == family}, key=_member_size)
    if len(members) < 2:
        return None
    small, large = members[0], members[-1]
    by_group: dict[tuple[Any, Any], dict[str, dict[str, Any]]] = {}
    for r in rows:
        if r["drafter"] in (small, large):
            by_group.setdefault((r["temperature"], r["task"]), {})[r["drafter"]] = r
    both = [g for g in by_group.values() if small in g and large in g]
    if not both:
        return None
    return {
        "small": small,
        "large": large,
        "c_ratio": float(np.median([g[large]["c"] / g[small]["c"] for g in both])),
        "alpha_ratio": float(np.median([g[large]["alpha"] / g[small]["alpha"] for g in both])),
        "slower": int(sum(g[large]["measured"] < g[small]["measured"] for g in both)),
        "groups": len(both),
    }


def _member_size(name: str) -> tuple[int, str]:
    tail = name.rsplit("l", 1)[-1] if name.startswith("draft") else name.split("-", 1)[-1]
    digits = "".join(ch for ch in tail if ch.isdigit())
    return (int(digits) if digits else 0, name)
