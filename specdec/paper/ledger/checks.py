"""The checks of the claims ledger, one per checkable claim of the source article, keyed by id.

Each check recomputes a claim's numbers with ``specdec`` (Eq. (1), Theorem 3.8, Theorem 3.11,
the sampling rules of Algorithm 1, sympy for identities) or reads them from the paper's data
(:mod:`specdec.paper.published`), and returns them keyed like the printed ones in a
:class:`~specdec.paper.ledger.registry.Result`; judgements beyond the numbers carry a reason built
from computed values. A claim judged by reading alone, whose verdict no computation can change, has
it as data beside the claims (``specdec/data/article_readings.csv``,
:mod:`specdec.paper.ledger.readings`). Checks draw randomness only from the context's one generator.

This module gathers them: :data:`CHECKS` maps claim ids to checks, from the modules of checks by
section of the article (:mod:`~specdec.paper.ledger.checks_intro`: 引言 to 三;
:mod:`~specdec.paper.ledger.checks_speedup`: 四, 五; :mod:`~specdec.paper.ledger.checks_tables`:
六 to 八; :mod:`~specdec.paper.ledger.checks_closing`: 九, 十, 来源, D) and the readings; a claim
with two checks is a ValueError. :func:`section_facts` computes the values the chapter's prose
quotes outside any one check (section 八's lenience setting, D4's two models), and
:func:`d4_models_table` is D4's table of the two models.

Needs sympy (the ``book`` extra).
"""

from __future__ import annotations

from collections.abc import Mapping

from specdec.paper.ledger import checks_closing, checks_intro, checks_speedup, checks_tables
from specdec.paper.ledger.checks_closing import d4_facts, d4_models_table
from specdec.paper.ledger.checks_tables import lenience_facts
from specdec.paper.ledger.readings import reading_checks
from specdec.paper.ledger.registry import Check, Context

__all__ = ["CHECKS", "d4_models_table", "gather_checks", "section_facts"]


def gather_checks(*parts: Mapping[str, Check]) -> dict[str, Check]:
    """One mapping of claim id -> check from ``parts``; a claim in two of them is a ValueError."""
    out: dict[str, Check] = {}
    for part in parts:
        twice = sorted(set(out) & set(part))
        if twice:
            raise ValueError(f"claims with two checks: {twice}")
        out.update(part)
    return out


#: The check of each checkable claim, by claim id.
CHECKS: dict[str, Check] = gather_checks(
    checks_intro.CHECKS, checks_speedup.CHECKS, checks_tables.CHECKS, checks_closing.CHECKS, reading_checks()
)


def section_facts(ctx: Context) -> None:
    """The values the chapter quotes outside any one check (section 八's setting, D4's models)."""
    lenience_facts(ctx)
    d4_facts(ctx)
