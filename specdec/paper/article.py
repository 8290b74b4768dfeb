"""Numbers printed in the source article audited by the book, loaded from ``specdec/data``.

The article is "投机解码到底能加速多少：把接受率、草稿成本与墙钟收益算清楚" (bib key
``seedarticle2026``). Its numbers are stored exactly as printed, as text, so that the printed
precision survives and :func:`specdec.paper.audit.verdict` can judge a recomputation against it.

* :func:`load_article_et_table` -- the E[T] lookup table of its section 四 (gamma x alpha).
* :func:`load_article_numbers`  -- worked numbers stated in its prose, one row each, with the
  sentence they come from.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specdec.paper.audit import verdict
from specdec.theory.checks import check_array
from specdec.theory.speedup import expected_tokens

__all__ = ["ArticleNumber", "EtCell", "load_article_et_table", "load_article_numbers"]

ET_TABLE_FILE = "article_et_table.csv"
NUMBERS_FILE = "article_worked_numbers.csv"


class EtCell(NamedTuple):
    """One cell of the article's E[T] table: E[T] at (alpha, gamma), as printed."""

    gamma: int
    alpha: float
    printed: str


class ArticleNumber(NamedTuple):
    """One number stated in the article's prose; inputs not used by ``quantity`` are None."""

    id: str
    section: str
    quantity: str
    alpha: float | None
    gamma: int | None
    gamma_ref: int | None
    target: float | None
    printed: str
    quote: str


def _data_lines(name: str) -> list[str]:
    """Lines of a data file of this package, without its ``#`` comment header."""
    text = resources.files("specdec").joinpath("data", name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def load_article_et_table() -> list[EtCell]:
    """The E[T] table of the article's section 四, one :class:`EtCell` per printed cell.

    Rows are gamma in {1, 2, 4, 6, 8, 10}, columns alpha in {0.4, 0.6, 0.8, 0.9}; cells come
    back row by row, ``printed`` exactly as in the article (e.g. ``"1.40"``).
    """
    rows = list(csv.reader(_data_lines(ET_TABLE_FILE)))
    header, body = rows[0], rows[1:]
    alphas = [float(a) for a in header[1:]]
    return [
        EtCell(gamma=int(row[0]), alpha=alpha, printed=cell)
        for row in body
        for alpha, cell in zip(alphas, row[1:], strict=True)
    ]


def _opt(text: str, kind: type) -> float | int | None:
    return kind(text) if text.strip() else None


def load_article_numbers() -> list[ArticleNumber]:
    """Worked numbers of the article's prose (sections 四, 五, 九), one :class:`ArticleNumber` each."""
    return [
        ArticleNumber(
            id=row["id"],
            section=row["section"],
            quantity=row["quantity"],
            alpha=_opt(row["alpha"], float),
            gamma=_opt(row["gamma"], int),
            gamma_ref=_opt(row["gamma_ref"], int),
            target=_opt(row["target"], float),
            printed=row["printed"],
            quote=row["quote"],
        )
        for row in csv.DictReader(_data_lines(NUMBERS_FILE))
    ]


# --------------------------------------------------------------------------------------------
# The claims ledger: every claim of the article, its printed tables, and the article's own
# operations model (D4). Used by the chapter "Claims ledger of the source article".
# --------------------------------------------------------------------------------------------

CLAIMS_FILE = "article_claims.csv"
#: The verdicts of the claims judged by reading alone (constant judgements, data beside the claims).
READINGS_FILE = "article_readings.csv"

#: The article's printed tables other than the E[T] table, by name (file ``article_<name>.csv``):
#: its section 六 comparison table, its section 六 excerpt of the paper's Table 3, its section 八
#: lenience table and its section 九 reprint of the paper's Table 1.
ARTICLE_TABLES = ("speedup_table", "alpha_table", "lenience_table", "ops_table", "sources_table")

#: How a claim is checked (column ``check_kind`` of ``article_claims.csv``).
CHECK_KINDS = ("compute", "paper", "reading", "none", "target")
#: The kinds of a claim the book cannot check against its source (``reason`` says why); ``target``: judged
#: instead on the book's own target (:mod:`specdec.paper.ledger.section7`).
UNSOURCED_KINDS = ("none", "target")


class ArticleClaim(NamedTuple):
    """One claim of the article, as stored in ``article_claims.csv`` (all fields text)."""

    id: str
    section: str
    claim_en: str
    claim_zh: str
    printed: str
    check_kind: str
    cites: str
    reason: str


class ArticleReading(NamedTuple):
    """The book's judgement of one claim judged by reading alone, as stored in ``article_readings.csv``
    (all fields text): its verdict, how it was read, and the reason."""

    id: str
    verdict: str
    how: str
    note: str


class Comparison(NamedTuple):
    """One printed number of a claim against the book's recomputation of it."""

    key: str
    printed: str
    value: float
    verdict: str


def load_article_table(name: str) -> list[dict[str, str]]:
    """One of the article's printed tables (:data:`ARTICLE_TABLES`), rows as dicts of strings.

    Cells come back exactly as printed (``"0.80"``, ``"≈0"``, ``"1.53×"``; ``"—"`` where the
    article leaves a cell empty).
    """
    if name not in ARTICLE_TABLES:
        raise ValueError(f"name must be one of {', '.join(ARTICLE_TABLES)}; got {name!r}")
    return [dict(row) for row in csv.DictReader(_data_lines(f"article_{name}.csv"))]


def load_article_claims() -> list[ArticleClaim]:
    """Every claim of the article, in its order (``article_claims.csv``).

    Raises ``ValueError`` if an id repeats, a ``check_kind`` is not one of
    :data:`CHECK_KINDS`, or a claim marked ``none`` (not checkable) or ``target`` (judged on the book's
    target instead) gives no reason, or another claim gives one.
    """
    claims = [ArticleClaim(**row) for row in csv.DictReader(_data_lines(CLAIMS_FILE))]
    seen: set[str] = set()
    for claim in claims:
        if claim.id in seen:
            raise ValueError(f"claim ids must be unique; {claim.id!r} repeats")
        seen.add(claim.id)
        if claim.check_kind not in CHECK_KINDS:
            raise ValueError(f"check_kind must be one of {CHECK_KINDS}; got {claim.check_kind!r}")
        if (claim.check_kind in UNSOURCED_KINDS) != bool(claim.reason.strip()):
            raise ValueError(
                f"claim {claim.id}: a reason is given exactly when check_kind is 'none' or 'target'"
            )
    return claims


def load_article_readings() -> list[ArticleReading]:
    """The verdicts of the claims judged by reading alone (``article_readings.csv``), in its order.

    Raises ``ValueError`` if an id repeats or a row says nothing of how the claim was read; the
    ledger checks the rest (a known verdict, a reading claim, no check in code as well).
    """
    readings = [ArticleReading(**row) for row in csv.DictReader(_data_lines(READINGS_FILE))]
    seen: set[str] = set()
    for reading in readings:
        if reading.id in seen:
            raise ValueError(f"reading ids must be unique; {reading.id!r} repeats")
        seen.add(reading.id)
        if not reading.how.strip():
            raise ValueError(f"reading {reading.id}: 'how' must say what was read")
    return readings


def printed_values(printed: str) -> dict[str, list[str]]:
    """Parse a claim's ``printed`` field into a dict of key to the values printed under it.

    ``"alpha=0.8; gamma=4|5"`` gives ``{"alpha": ["0.8"], "gamma": ["4", "5"]}``. Keys keep
    their order; values stay text, as printed. An empty field gives ``{}``.
    """
    out: dict[str, list[str]] = {}
    for item in (part.strip() for part in printed.split(";")):
        if not item:
            continue
        key, sep, values = (s.strip() for s in item.partition("="))
        if not sep or not key or not values:
            raise ValueError(f"printed must read 'key=value; key=v1|v2'; got item {item!r}")
        if key in out:
            raise ValueError(f"printed repeats the key {key!r}")
        out[key] = [v.strip() for v in values.split("|")]
    return out


def compare_printed(
    printed: Mapping[str, Sequence[str]], computed: Mapping[str, float | Sequence[float]]
) -> list[Comparison]:
    """Judge each recomputed value against the printed one of the same key (the book's verdict rule).

    ``computed`` maps keys of ``printed`` to one value, or to as many values as were printed
    under that key; each pair gets :func:`specdec.paper.audit.verdict`. Keys of ``printed`` that are
    not in ``computed`` (inputs of the claim) are not judged.
    """
    out = []
    for key, value in computed.items():
        if key not in printed:
            raise ValueError(f"computed key {key!r} is not among the printed keys {list(printed)}")
        values = [float(v) for v in value] if isinstance(value, (list, tuple, np.ndarray)) else [float(value)]
        if len(values) != len(printed[key]):
            raise ValueError(
                f"computed[{key!r}] must hold {len(printed[key])} value(s), as printed; got {len(values)}"
            )
        out.extend(Comparison(key, p, v, verdict(p, v)) for p, v in zip(printed[key], values, strict=True))
    return out


def article_ops_factor(alpha: ArrayLike, gamma: ArrayLike, r: ArrayLike) -> NDArray | np.floating:
    """The article's operations model of its D4, ``(gamma r + 1) / E[T]`` -- not the paper's.

    The article counts gamma draft steps of relative cost r and *one* target step per round.
    Theorem 3.11 counts gamma draft positions at relative cost c_hat and gamma + 1 target
    positions: ``(gamma c_hat + gamma + 1) / E[T]`` (:func:`specdec.theory.speedup.ops_factor`). The two
    are equal exactly when r = c_hat + 1, which is why the article needs r = 1 to reproduce
    Table 1 (c_hat = 0). Kept here so the book can show where the two models part.
    """
    rr = check_array("r", r, low=0)
    g = np.asarray(gamma)
    out = (g * rr + 1.0) / np.asarray(expected_tokens(alpha, gamma))
    return out[()] if np.ndim(out) == 0 else out


__all__ += [
    "ARTICLE_TABLES",
    "CHECK_KINDS",
    "ArticleClaim",
    "ArticleReading",
    "Comparison",
    "article_ops_factor",
    "compare_printed",
    "load_article_claims",
    "load_article_readings",
    "load_article_table",
    "printed_values",
]
