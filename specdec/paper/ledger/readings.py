"""The checks of the claims judged by reading alone: their verdicts are data, not code.

A claim of ``check_kind`` ``reading`` whose judgement no computation can change has its verdict,
how it was read and its reason stored beside the claims, in ``specdec/data/article_readings.csv``
(:func:`specdec.paper.article.load_article_readings`). :func:`reading_checks` turns each row into the
claim's check (one that returns the stored judgement), so that the ledger judges these claims by
the same rules (:func:`specdec.paper.ledger.registry.evaluate`) as the computed ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

from specdec.paper.article import ArticleReading, load_article_claims, load_article_readings
from specdec.paper.audit import AGREES, DIFFERS
from specdec.paper.ledger.registry import IMPRECISE, Check, Context, Result

__all__ = ["READING_VERDICTS", "reading_checks"]

#: The verdicts a reading may give (a claim not checkable here is marked so in the claims file).
READING_VERDICTS = (AGREES, DIFFERS, IMPRECISE)


def _stored(reading: ArticleReading, printed: Mapping[str, Sequence[str]], ctx: Context) -> Result:
    """The stored judgement of ``reading`` (a reading claim prints no number to recompute)."""
    return Result(how=reading.how, category=reading.verdict, note=reading.note)


def reading_checks(readings: Sequence[ArticleReading] | None = None) -> dict[str, Check]:
    """Claim id -> its check, for every row of ``article_readings.csv`` (or of ``readings``).

    Raises ValueError for a verdict outside :data:`READING_VERDICTS` or an id that is not a claim of
    ``check_kind`` ``reading``.
    """
    readings = load_article_readings() if readings is None else list(readings)
    kinds = {c.id: c.check_kind for c in load_article_claims()}
    out: dict[str, Check] = {}
    for reading in readings:
        if reading.verdict not in READING_VERDICTS:
            raise ValueError(
                f"reading {reading.id}: verdict must be one of {READING_VERDICTS}; got {reading.verdict!r}"
            )
        if kinds.get(reading.id) != "reading":
            raise ValueError(
                f"reading {reading.id}: not a claim of check_kind 'reading' in article_claims.csv"
            )
        out[reading.id] = partial(_stored, reading)
    return out
