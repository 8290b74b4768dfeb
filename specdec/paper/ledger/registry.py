"""The claims ledger's vocabulary: its verdicts, what a check returns, and how a claim is judged.

A *check* is a function of one claim's printed values (``printed_values`` of its ``printed``
field) and a :class:`Context`; it returns a :class:`Result`: the recomputed values keyed like
the printed ones, comparisons built by hand, and optionally a judgement (``category``) with
its reason (``note``). :func:`evaluate` turns claim + check into a :class:`LedgerRow` by the
book's rules:

* every printed number is judged by :func:`specdec.paper.audit.verdict` (agrees within half a unit
  of its last printed digit, else differs), through :func:`specdec.paper.article.compare_printed`;
* without a category the claim's verdict is that of its numbers (all agree -> agrees);
* a category may say more than the numbers (``imprecise``, ``differs``) but can never turn a
  differing number into ``agrees``;
* a judgement ``differs`` or ``imprecise`` needs a one-line explanation (a differing number
  explains itself: the row shows it against ours);
* a claim marked ``none`` in ``article_claims.csv`` is *not checkable here*, with its stored
  reason, and must have no check;
* a claim marked ``target`` (section 7's methods, whose papers the book does not hold) has no check
  either: its verdict is the one :func:`specdec.paper.ledger.section7.section7_rows` gives it on the
  newest campaign record, campaign v3 (``holds for this target``, ``fails for this target``,
  ``undecided for this target``, one per temperature where they differ, or ``not recorded on this
  machine`` without the record), the same verdict the chapter "Beyond the paper" shows; the ledger
  counts these claims together, as *judged on this target* (:data:`ON_TARGET`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specdec.paper.article import ArticleClaim, Comparison, compare_printed, printed_values
from specdec.paper.audit import AGREES, DIFFERS
from specdec.theory.checks import check_int

__all__ = [
    "IMPRECISE",
    "NOT_CHECKABLE",
    "ON_TARGET",
    "SEED",
    "SOURCE_VERDICTS",
    "TOL",
    "VERDICTS",
    "Check",
    "Context",
    "LedgerRow",
    "Result",
    "evaluate",
    "fmt",
]

IMPRECISE = "imprecise"
NOT_CHECKABLE = "not checkable here"
#: The group of the claims judged on the book's own target instead of their source (``check_kind``
#: ``target``); each carries its own verdict from :mod:`specdec.paper.ledger.section7`.
ON_TARGET = "judged on this target"
#: The groups the ledger counts a claim in, in order: a claim's verdict, or :data:`ON_TARGET` for a claim
#: judged on the target (whose verdict says how it was judged there).
VERDICTS = (AGREES, DIFFERS, IMPRECISE, NOT_CHECKABLE, ON_TARGET)
#: The verdicts a check may give a claim against its source (a judgement's ``category``).
SOURCE_VERDICTS = VERDICTS[:4]
#: Tolerance of exact identities evaluated in floating point.
TOL = 1e-12
#: The seed of the ledger's one generator (random distribution pairs, simulations).
SEED = 20261006


@dataclass
class Result:
    """What a check returns: how it checks, its values, and an optional judgement."""

    how: str  # how the claim is checked
    values: dict[str, Any] = field(default_factory=dict)  # printed key -> recomputed value(s)
    extra: list[Comparison] = field(default_factory=list)  # Comparison rows built by hand
    category: str | None = None  # a judgement beyond the numbers, with `note` as its reason
    note: str = ""


@dataclass(frozen=True)
class LedgerRow:
    """One claim with its check, its comparisons and its verdict."""

    claim: ArticleClaim
    how: str
    comparisons: tuple[Comparison, ...]
    verdict: str
    note: str

    @property
    def group(self) -> str:
        """The group the ledger counts the claim in (one of :data:`VERDICTS`): its verdict, or
        :data:`ON_TARGET` for a claim judged on the book's target."""
        return ON_TARGET if self.claim.check_kind == "target" else self.verdict

    @property
    def n_agree(self) -> int:
        """How many of the claim's printed numbers agree with the book's value."""
        return sum(c.verdict == AGREES for c in self.comparisons)


class Context:
    """What the checks share: the claims by id, the one seeded generator, random (p, q) pairs, facts.

    ``pairs`` are the random distribution pairs of the identities of sections 二, 三 and 八
    (vocabularies 2-50, Dirichlet concentrations 0.1-10, some with near-zeros), drawn first
    from the generator; checks then draw from the same generator in claim order, so a ledger
    built twice with one seed is identical. ``facts`` collects the values the chapter glues
    into its prose (:meth:`keep`). ``target`` holds the section-7 rows
    (:func:`specdec.paper.ledger.section7.section7_rows`) by claim id, for the claims judged on the
    book's target.
    """

    def __init__(
        self,
        claims: Sequence[ArticleClaim],
        seed: int = SEED,
        target: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        check_int("seed", seed)
        self.target: dict[str, Mapping[str, Any]] = dict(target or {})
        self.claims: dict[str, ArticleClaim] = {c.id: c for c in claims}
        self.rng = np.random.default_rng(int(seed))
        self.pairs: list[tuple[np.ndarray, np.ndarray]] = []
        for vocab in (2, 3, 5, 10, 50):
            for conc in (0.1, 1.0, 10.0):
                for _ in range(20):
                    self.pairs.append(
                        (self.rng.dirichlet(np.full(vocab, conc)), self.rng.dirichlet(np.full(vocab, conc)))
                    )
        self.facts: dict[str, Any] = {}

    def keep(self, key: str, value: Any) -> None:
        """Record a value for the chapter's prose under ``key`` (glued by the chapter)."""
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty string; got {key!r}")
        self.facts[key] = value

    def max_error(self, fn: Callable[[np.ndarray, np.ndarray], Any]) -> float:
        """The largest |fn(p, q)| over the random pairs (an identity holds when this is ~0)."""
        return max(float(np.max(np.abs(fn(p, q)))) for p, q in self.pairs)


#: A check: the claim's printed values and the shared context -> a Result.
Check = Callable[[Mapping[str, Sequence[str]], Context], Result]


def fmt(x: Any) -> str:
    """A computed number for the ledger: integers as such, otherwise 4 significant digits."""
    x = float(x)
    if x == round(x) and abs(x) < 1e6:
        return str(int(round(x)))
    return f"{x:.4g}"


def evaluate(claim: ArticleClaim, check: Check | None, ctx: Context) -> LedgerRow:
    """Judge one claim with its check (None for a claim marked not checkable).

    Raises ValueError when the claim and the check do not fit the rules of the module
    docstring: a check for a claim marked ``none``, no check for a checkable claim, a check
    that yields neither numbers nor a category, an unknown category, a category ``agrees``
    over a differing number, or a ``differs``/``imprecise`` judgement without a reason.
    """
    printed = printed_values(claim.printed)
    if claim.check_kind == "none":
        if check is not None:
            raise ValueError(f"claim {claim.id} is marked not checkable but has a check")
        return LedgerRow(claim, NOT_CHECKABLE, (), NOT_CHECKABLE, claim.reason)
    if claim.check_kind == "target":
        if check is not None:
            raise ValueError(f"claim {claim.id} is judged on the target (section 7) but has a check")
        if claim.id not in ctx.target:
            raise ValueError(f"claim {claim.id} is judged on the target but section 7 has no row for it")
        row = ctx.target[claim.id]
        how = (
            "judged on the book's target (SmolLM2-135M) by the newest campaign record (campaign v3), "
            "by section 7's rule (specdec.paper.ledger.section7; the chapter 'Beyond the paper')"
        )
        return LedgerRow(
            claim, how, (), row["verdict"], f"{row['evidence']}. Why not the source: {claim.reason}"
        )
    if check is None:
        raise ValueError(f"claim {claim.id} is checkable ({claim.check_kind}) but has no check")
    res = check(printed, ctx)
    comparisons = tuple(compare_printed(printed, res.values)) + tuple(res.extra)
    numbers = None
    if comparisons:
        numbers = AGREES if all(c.verdict == AGREES for c in comparisons) else DIFFERS
    if res.category is None:
        if numbers is None:
            raise ValueError(f"claim {claim.id}: its check gives neither numbers nor a category")
        final = numbers
    else:
        if res.category not in SOURCE_VERDICTS:
            raise ValueError(
                f"claim {claim.id}: category must be one of {SOURCE_VERDICTS}; got {res.category!r}"
            )
        if res.category == AGREES and numbers == DIFFERS:
            raise ValueError(f"claim {claim.id}: a number differs, so the claim cannot agree")
        final = res.category
    if res.category in (DIFFERS, IMPRECISE) and not res.note:
        raise ValueError(f"claim {claim.id}: a '{final}' judgement needs an explanation")
    return LedgerRow(claim, res.how, comparisons, final, res.note)
