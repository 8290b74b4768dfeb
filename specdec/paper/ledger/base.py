"""What the claims ledger's modules of checks share: a registry per module, the paper's printed tables
and the lookups in them.

* :func:`registrar` -- the decorator that registers a check in a module's ``CHECKS`` by claim id
  (a second check of one claim is a ValueError);
* the paper's printed tables (:mod:`specdec.paper.published`): ``T1`` to ``T5`` and ``A5``
  (Appendix A.5), and :func:`t4`, :func:`t3`, :func:`t4_speedup`, :func:`model_size` on them.

The checks themselves are in :mod:`specdec.paper.ledger.checks_intro` (引言 to 三),
:mod:`~specdec.paper.ledger.checks_speedup` (四, 五), :mod:`~specdec.paper.ledger.checks_tables`
(六 to 八) and :mod:`~specdec.paper.ledger.checks_closing` (九, 十, 来源, D); the claims judged by
reading alone have their verdicts as data (:mod:`specdec.paper.ledger.readings`).
"""

from __future__ import annotations

from collections.abc import Callable

from specdec.paper import published
from specdec.paper.ledger.registry import Check
from specdec.theory.speedup import walltime_speedup

__all__ = [
    "A5",
    "A5_STANDARD",
    "T1",
    "T2",
    "T3",
    "T4",
    "T5",
    "T5_SMALL_LENIENCE",
    "T5_SMALL_ROW",
    "model_size",
    "registrar",
    "t3",
    "t4",
    "t4_speedup",
    "value",
]

value = published.value  # a printed string of the paper -> its number


def registrar(registry: dict[str, Check]) -> Callable[[str], Callable[[Check], Check]]:
    """The decorator ``@check(claim_id)`` that registers a check (a function of the claim's printed
    values and the context) in ``registry``; a claim registered twice is a ValueError."""

    def check(claim_id: str) -> Callable[[Check], Check]:
        def register(fn: Check) -> Check:
            if claim_id in registry:
                raise ValueError(f"claim {claim_id!r} has two checks")
            registry[claim_id] = fn
            return fn

        return register

    return check


def model_size(name):
    """Parameters in millions from a paper's model name such as 'T5-small (77M)'."""
    return float(name.rsplit("(", 1)[1].rstrip("M)"))


# ---------------------------------------------------------------- the paper's printed values
T1 = published.load_table("table1")
T2 = published.load_table("table2")
T3 = published.load_table("table3")
T4 = published.load_table("table4")
T5 = published.load_table("table5")
A5 = published.load_table("appendix_a5")


def t4(task, draft, temp):
    """The one Table 4 row (= Table 2 row plus c, EXP, EMP) of a task, draft and temperature."""
    (row,) = [r for r in T4 if (r["task"], r["M_q"], r["temp"]) == (task, draft, str(temp))]
    return row


def t4_speedup(row):
    """Theorem 3.8 at a Table 4 row's printed alpha, gamma and c."""
    return float(walltime_speedup(value(row["alpha"]), int(row["gamma"]), value(row["c"])))


def t3(target, draft):
    (row,) = [r for r in T3 if (r["M_p"], r["M_q"]) == (target, draft)]
    return row


T5_SMALL_LENIENCE = {"1": "l_1", "0.5": "l_0.5", "0.3": "l_0.3", "0.1": "l_0.1"}
(T5_SMALL_ROW,) = [r for r in T5 if r["M_q"].startswith("T5-small")]
A5_STANDARD = [r for r in A5 if r["sampling"] == "standard"]
