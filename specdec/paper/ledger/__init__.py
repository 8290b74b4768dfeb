"""The claims ledger of the source article: every claim checked, judged, shown and exported.

The article's claims and printed tables are data (:mod:`specdec.paper.article`); this subpackage
judges them. One job per module:

* :mod:`specdec.paper.ledger.registry` -- the verdicts, what a check returns, and how one claim is
  judged (:func:`~specdec.paper.ledger.registry.evaluate`).
* :mod:`specdec.paper.ledger.checks`   -- the check of each checkable claim, keyed by claim id, gathered
  from the modules of checks by section (``checks_intro``, ``checks_speedup``, ``checks_tables``,
  ``checks_closing``, sharing :mod:`~specdec.paper.ledger.base`) and the readings.
* :mod:`specdec.paper.ledger.readings` -- the claims judged by reading alone: their verdicts are data
  (``specdec/data/article_readings.csv``).
* :mod:`specdec.paper.ledger.build`    -- the whole ledger, in the article's order, with its counts.
* :mod:`specdec.paper.ledger.render`   -- the HTML tables, the summary table and the CSV export.
* :mod:`specdec.paper.ledger.measured` -- measured verdicts of the article's hardware and load claims
  (一, D1, D2, 第三, 第六) from the book's benchmark records.
* :mod:`specdec.paper.ledger.section7` -- the verdicts of the claims about section 7's methods (and 引-4,
  三-7), judged on the book's own target by the newest campaign record (campaign v3): the one place
  both the ledger (their rows, ``check_kind`` ``target``) and the chapter "Beyond the paper" read them
  from.

Needs sympy and pandas (the ``book`` extra). Used by the chapter "Claims ledger of the source
article" (``notebooks/src/claims-ledger.md``), which writes ``results/ledger/``.
"""

from __future__ import annotations

from specdec.paper.ledger.build import Ledger, build_ledger
from specdec.paper.ledger.registry import (
    IMPRECISE,
    NOT_CHECKABLE,
    ON_TARGET,
    SEED,
    VERDICTS,
    LedgerRow,
    Result,
)
from specdec.paper.ledger.render import ledger_records, section_html, summary_frame, write_ledger_csv

__all__ = [
    "IMPRECISE",
    "NOT_CHECKABLE",
    "ON_TARGET",
    "SEED",
    "VERDICTS",
    "Ledger",
    "LedgerRow",
    "Result",
    "build_ledger",
    "ledger_records",
    "section_html",
    "summary_frame",
    "write_ledger_csv",
]
