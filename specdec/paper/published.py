"""The printed numbers of Leviathan, Kalman & Matias (2023), loaded as data.

Source: Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via Speculative
Decoding", ICML 2023, arXiv:2211.17192 v2. The CSV files in ``specdec/data/leviathan2023/``
hold Tables 1-5, the lenience results of Appendix A.5 and a few numbers stated in the text,
each value a string exactly as printed ("1.53X", "0.8", "~0.2"); ``SOURCE.md`` there gives
the citation and the transcription notes.

:func:`load_table` returns the rows as dicts of strings; :func:`value` and :func:`numbers`
turn printed strings into floats through :func:`specdec.paper.audit.parse_printed`, the same parser
the verdict rule uses, so a printed number and its precision are read in one place.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

from specdec.paper.audit import parse_printed

__all__ = [
    "CITATION",
    "DATA_DIR",
    "TABLES",
    "columns",
    "load_table",
    "numbers",
    "statement",
    "value",
]

#: Folder of the published data files.
DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "leviathan2023"

#: The data files, by name (file name without ``.csv``).
TABLES = ("table1", "table2", "table3", "table4", "table5", "appendix_a5", "statements")

#: The citation of the source of every value in :data:`DATA_DIR`.
CITATION = (
    "Leviathan, Y., Kalman, M., Matias, Y. Fast Inference from Transformers via Speculative "
    "Decoding. ICML 2023. arXiv:2211.17192 v2."
)


def _path(name: str) -> Path:
    if name not in TABLES:
        raise ValueError(f"name must be one of {', '.join(TABLES)}; got {name!r}")
    return DATA_DIR / f"{name}.csv"


def load_table(name: str) -> list[dict[str, str]]:
    """The rows of one published table, each a dict of column name to printed string.

    ``name`` is one of :data:`TABLES` (``"table1"`` ... ``"table5"``, ``"appendix_a5"``,
    ``"statements"``). Values are returned exactly as stored: no stripping, no conversion;
    an empty string marks a value the paper does not print.
    """
    with _path(name).open(newline="", encoding="utf-8") as handle:
        return [dict(row) for row in csv.DictReader(handle)]


def columns(name: str) -> list[str]:
    """The column names of one published table, in file order."""
    with _path(name).open(newline="", encoding="utf-8") as handle:
        return next(csv.reader(handle))


def value(printed: str) -> float:
    """The number a printed string stands for: ``"1.53X"`` -> 1.53, ``"~0.2"`` -> 0.2.

    Delegates to :func:`specdec.paper.audit.parse_printed`; raises ``ValueError`` for a string that
    is not a printed decimal number (an empty cell included).
    """
    return parse_printed(printed)[0]


def numbers(row: dict[str, str], keys: Iterable[str]) -> dict[str, float]:
    """The values of the named columns of one row, as floats (see :func:`value`)."""
    out = {}
    for key in keys:
        if key not in row:
            raise ValueError(f"keys must name columns of the row ({', '.join(row)}); got {key!r}")
        out[key] = value(row[key])
    return out


def statement(key: str) -> str:
    """The printed value of one statement of the text (``statements.csv``), by its key."""
    rows = {row["key"]: row["value"] for row in load_table("statements")}
    if key not in rows:
        raise ValueError(f"key must be one of {', '.join(rows)}; got {key!r}")
    return rows[key]
