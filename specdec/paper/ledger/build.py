"""The claims ledger built: every claim of the article judged by its check, in the article's order.

:func:`build_ledger` loads the claims (``specdec/data/article_claims.csv`` through
:func:`specdec.paper.article.load_article_claims`), makes one :class:`~specdec.paper.ledger.registry.Context`
(one generator, seeded once), computes the facts the chapter quotes, and evaluates each claim
with its check from :data:`specdec.paper.ledger.checks.CHECKS`; the claims judged on the book's target
(``check_kind`` ``target``: section 7's methods) take their verdicts from
:func:`specdec.paper.ledger.section7.section7_rows` on the campaign record passed in (campaign v3), the
function the "Beyond the paper" chapter shows. The result, a :class:`Ledger`, holds the rows, the
facts, and the counts the chapter glues.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specdec.paper.article import ArticleClaim, load_article_claims
from specdec.paper.audit import DIFFERS
from specdec.paper.ledger.checks import CHECKS, section_facts
from specdec.paper.ledger.registry import ON_TARGET, SEED, VERDICTS, Check, Context, LedgerRow, evaluate
from specdec.paper.ledger.section7 import section7_rows

__all__ = ["Ledger", "build_ledger"]


@dataclass(frozen=True)
class Ledger:
    """The judged claims (``rows``, in the article's order) and the facts the prose quotes."""

    rows: tuple[LedgerRow, ...]
    facts: Mapping[str, Any]

    def sections(self) -> list[str]:
        """The article's sections, in order of first appearance (引言, 一, ..., 来源, D)."""
        return list(dict.fromkeys(row.claim.section for row in self.rows))

    def section(self, name: str) -> list[LedgerRow]:
        """The rows of one section; raises ValueError for a section the ledger does not have."""
        if name not in self.sections():
            raise ValueError(f"section must be one of {', '.join(self.sections())}; got {name!r}")
        return [row for row in self.rows if row.claim.section == name]

    def verdicts(self) -> dict[str, str]:
        """Claim id -> verdict (for a claim judged on the target, section 7's verdict)."""
        return {row.claim.id: row.verdict for row in self.rows}

    def counts(self) -> dict[str, int]:
        """Claims per group (a claim's verdict, or ``judged on this target``), every group of
        :data:`~specdec.paper.ledger.registry.VERDICTS` present."""
        return {name: sum(row.group == name for row in self.rows) for name in VERDICTS}

    def counts_by_section(self) -> dict[str, dict[str, int]]:
        """Claims per section and group, plus an ``"all"`` entry (the totals of :meth:`counts`)."""
        out = {
            sec: {name: sum(row.group == name for row in self.section(sec)) for name in VERDICTS}
            for sec in self.sections()
        }
        out["all"] = self.counts()
        return out

    def differing_ids(self) -> list[str]:
        """Ids of the claims that differ, in order."""
        return [row.claim.id for row in self.rows if row.verdict == DIFFERS]

    def numbers(self) -> tuple[int, int]:
        """(printed numbers judged, of which agree), over all claims."""
        return sum(len(r.comparisons) for r in self.rows), sum(r.n_agree for r in self.rows)

    def summary_facts(self) -> dict[str, Any]:
        """The ledger's counts under the keys the chapter glues."""
        n_numbers, n_agree = self.numbers()
        counts = self.counts()
        return {
            "n_claims": len(self.rows),
            "n_agrees": counts[VERDICTS[0]],
            "n_differs": counts[VERDICTS[1]],
            "n_imprecise": counts[VERDICTS[2]],
            "n_unchecked": counts[VERDICTS[3]],
            "n_target": counts[ON_TARGET],
            "n_numbers": n_numbers,
            "n_numbers_agree": n_agree,
            "differs_ids": ", ".join(self.differing_ids()),
        }


def build_ledger(
    claims: Sequence[ArticleClaim] | None = None,
    *,
    seed: int = SEED,
    checks: Mapping[str, Check] | None = None,
    campaign: Mapping[str, Any] | None = None,
) -> Ledger:
    """Judge every claim with its check; returns the :class:`Ledger`.

    ``claims`` defaults to all claims of the article; a modified copy of that list (a claim
    with another printed number, say) is judged by the same checks, which is how the tests
    plant errors. ``checks`` defaults to :data:`specdec.paper.ledger.checks.CHECKS`. With the
    default claims, every checkable claim must have a check and every check a claim;
    otherwise ValueError. Claims ids must be unique. ``campaign`` is the newest campaign record
    (``specdec.analysis.records.newest(results, "campaign-v3")``) that judges the claims of
    ``check_kind`` ``target`` through :func:`~specdec.paper.ledger.section7.section7_rows`; without it
    they are "not recorded on this machine" (the counts do not depend on it).
    """
    default = claims is None
    claims = load_article_claims() if claims is None else list(claims)
    checks = CHECKS if checks is None else checks
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise ValueError("claims must have unique ids")
    if default:
        checkable = {c.id for c in claims if c.check_kind not in ("none", "target")}
        stray = set(checks) ^ checkable
        if stray:
            raise ValueError(f"claims without a check, or checks without a claim: {sorted(stray)}")
    ctx = Context(claims, seed, target={row["claim"]: row for row in section7_rows(campaign)})
    section_facts(ctx)
    rows = tuple(evaluate(c, checks.get(c.id), ctx) for c in claims)
    return Ledger(rows=rows, facts=dict(ctx.facts))
