"""The claims ledger shown and exported: one HTML table per section, the counts, the CSV.

* :func:`section_html` -- one section's claims as an HTML table (claim, Chinese excerpt, how it
  is checked, each printed number against ours, the verdict and its reason).
* :func:`summary_frame` -- claims per section and verdict (a pandas crosstab with totals).
* :func:`ledger_records` / :func:`write_ledger_csv` -- one CSV row per claim, with every printed
  number, our value and the verdict (``results/ledger/claims-ledger.csv``).
* :func:`measured_html`, :func:`measured_counts`, :func:`measured_records` -- the measured
  verdicts of :mod:`specdec.paper.ledger.measured`, as a table, counted, and as CSV rows
  (``results/ledger/claims-measured.csv``).

Needs pandas (the ``book`` extra) for the tables.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specdec.paper.article import Comparison
from specdec.paper.audit import AGREES, DIFFERS, parse_printed
from specdec.paper.ledger.build import Ledger
from specdec.paper.ledger.measured import MEASURED_VERDICTS, RULES, Measured
from specdec.paper.ledger.registry import NOT_CHECKABLE, ON_TARGET, VERDICTS, LedgerRow, fmt
from specdec.paper.reproduce import write_csv

__all__ = [
    "CSS",
    "ledger_records",
    "measured_counts",
    "measured_html",
    "measured_records",
    "rules_html",
    "section_html",
    "summary_frame",
    "values_cell",
    "write_ledger_csv",
    "write_measured_csv",
]

CSS = """<style>
table.ledger {table-layout: fixed; width: 100%; border-collapse: collapse; font-size: 0.82em;}
table.ledger th, table.ledger td {white-space: normal; overflow-wrap: break-word; vertical-align: top;
  text-align: left !important; padding: 4px 6px; border-bottom: 1px solid #ddd;}
table.ledger th:nth-child(1) {width: 6%;}  table.ledger th:nth-child(2) {width: 33%;}
table.ledger th:nth-child(3) {width: 17%;} table.ledger th:nth-child(4) {width: 19%;}
table.ledger th:nth-child(5) {width: 25%;}
table.ledger .zh {color: #666;}
table.ledger .why {display: block; margin-top: 2px; font-size: 0.95em;}
table.ledger .v-agrees {color: #1a7f37; font-weight: bold;}
table.ledger .v-differs {color: #cf222e; font-weight: bold;}
table.ledger .v-imprecise {color: #9a6700; font-weight: bold;}
table.ledger .v-not {color: #57606a;}
table.ledger .v-target {color: #0550ae; font-weight: bold;}
</style>"""


def values_cell(comparisons: Sequence[Comparison]) -> str:
    """The "printed -> ours" cell: each number with a tick or a cross, or a tally past eight."""
    if not comparisons:
        return "—"
    if len(comparisons) > 8:
        n_ok = sum(c.verdict == AGREES for c in comparisons)
        worst = max(abs(c.value - parse_printed(c.printed)[0]) for c in comparisons)
        return f"{n_ok}/{len(comparisons)} printed numbers agree; largest |difference| {fmt(worst)}"
    mark = {AGREES: "✓", DIFFERS: "✗"}
    return "<br>".join(
        html.escape(f"{c.key}: {c.printed} → {fmt(c.value)} {mark[c.verdict]}") for c in comparisons
    )


def _html_row(row: LedgerRow) -> dict[str, str]:
    claim = row.claim
    v_class = {NOT_CHECKABLE: "v-not", ON_TARGET: "v-target"}.get(row.group, f"v-{row.verdict}")
    tally = f" ({row.n_agree}/{len(row.comparisons)} numbers)" if row.comparisons else ""
    how = "—" if row.how == NOT_CHECKABLE else html.escape(row.how)
    return {
        "ID": html.escape(claim.id),
        "Claim": f"{html.escape(claim.claim_en)}<br>"
        f"<span class='zh'>「{html.escape(claim.claim_zh)}」</span>",
        "How we check it": how,
        "Printed → ours": values_cell(row.comparisons),
        "Verdict and explanation": f"<span class='{v_class}'>{html.escape(row.verdict)}</span>{tally}"
        f"<span class='why'>{html.escape(row.note)}</span>",
    }


def section_html(ledger: Ledger, section: str) -> str:
    """One section of the ledger as an HTML table (with the ledger's CSS), claims in order."""
    import pandas as pd

    frame = pd.DataFrame([_html_row(row) for row in ledger.section(section)])
    return CSS + frame.to_html(escape=False, index=False, border=0, classes="ledger")


def summary_frame(ledger: Ledger) -> Any:
    """Claims per section (rows, in the article's order) and group (columns: a claim's verdict, or
    ``judged on this target`` for the claims section 7's rules judge on the book's target), with totals."""
    import pandas as pd

    summary = pd.crosstab(
        pd.Categorical([row.claim.section for row in ledger.rows], categories=ledger.sections()),
        pd.Categorical([row.group for row in ledger.rows], categories=VERDICTS),
        margins=True,
        margins_name="all",
    )
    summary.index.name, summary.columns.name = "section", "verdict"
    return summary


def ledger_records(ledger: Ledger) -> list[dict[str, Any]]:
    """One record per claim, in order: the claim, how it is checked, the numbers, the verdict."""
    return [
        {
            "id": row.claim.id,
            "section": row.claim.section,
            "check_kind": row.claim.check_kind,
            "claim_en": row.claim.claim_en,
            "claim_zh": row.claim.claim_zh,
            "cites": row.claim.cites,
            "check": row.how,
            "printed_vs_ours": "; ".join(
                f"{c.key}: {c.printed} -> {fmt(c.value)} ({c.verdict})" for c in row.comparisons
            ),
            "numbers_agree": row.n_agree,
            "numbers_total": len(row.comparisons),
            "verdict": row.verdict,
            "explanation": row.note,
        }
        for row in ledger.rows
    ]


def _existing_folder(path: str | Path) -> Path:
    path = Path(path)
    if not path.parent.is_dir():
        raise ValueError(f"path must lie in an existing folder; {path.parent} does not exist")
    return path


def write_ledger_csv(ledger: Ledger, path: str | Path) -> Path:
    """Write :func:`ledger_records` to ``path`` (the book's CSV format); returns the path.

    The folder must exist, so that a call from the wrong working directory fails instead of
    writing somewhere unexpected.
    """
    return write_csv(ledger_records(ledger), _existing_folder(path))


MEASURED_CSS = """<style>
table.measured {width: 100%; border-collapse: collapse; font-size: 0.82em;}
table.measured th, table.measured td {white-space: normal; vertical-align: top; text-align: left !important;
  padding: 4px 6px; border-bottom: 1px solid #ddd;}
table.measured .v-holds {color: #1a7f37; font-weight: bold;}
table.measured .v-fails {color: #cf222e; font-weight: bold;}
table.measured .v-undecided {color: #9a6700; font-weight: bold;}
table.measured .v-not {color: #57606a;}
</style>"""


def measured_html(rows: Sequence[Measured]) -> str:
    """The measured verdicts as an HTML table: item and claim, machine, engine, target, evidence, verdict."""
    import pandas as pd

    def cell(m: Measured) -> dict[str, str]:
        v_class = {
            MEASURED_VERDICTS[0]: "v-holds",
            MEASURED_VERDICTS[1]: "v-fails",
            MEASURED_VERDICTS[2]: "v-undecided",
        }
        return {
            "Item (claim)": html.escape(f"{m.item} ({m.claim})"),
            "Machine": html.escape(m.machine),
            "Engine": html.escape(m.engine),
            "Target": html.escape(m.target),
            "Evidence": html.escape(m.evidence),
            "Verdict": f"<span class='{v_class.get(m.verdict, 'v-not')}'>{html.escape(m.verdict)}</span>",
        }

    frame = pd.DataFrame([cell(m) for m in rows])
    return MEASURED_CSS + frame.to_html(escape=False, index=False, border=0, classes="measured")


def rules_html() -> str:
    """The rule of each measured item (:data:`~specdec.paper.ledger.measured.RULES`) as an HTML table."""
    import pandas as pd

    frame = pd.DataFrame(
        [{"Item": item, "Claim": claim, "Rule": html.escape(rule)} for item, (claim, rule) in RULES.items()]
    )
    return MEASURED_CSS + frame.to_html(escape=False, index=False, border=0, classes="measured")


def measured_counts(rows: Sequence[Measured]) -> dict[str, dict[str, int]]:
    """Measured verdicts per item (in the order of :data:`~specdec.paper.ledger.measured.RULES`) and
    verdict, with the totals under ``"all"``."""
    out = {
        item: {v: sum(m.item == item and m.verdict == v for m in rows) for v in MEASURED_VERDICTS}
        for item in RULES
        if any(m.item == item for m in rows)
    }
    out["all"] = {v: sum(m.verdict == v for m in rows) for v in MEASURED_VERDICTS}
    return out


def measured_records(rows: Sequence[Measured]) -> list[dict[str, Any]]:
    """One CSV record per measured verdict, with the rule that decided it."""
    return [
        {
            "item": m.item,
            "claim": m.claim,
            "machine": m.machine,
            "engine": m.engine,
            "target": m.target,
            "record": m.record,
            "evidence": m.evidence,
            "verdict": m.verdict,
            "rule": RULES[m.item][1],
        }
        for m in rows
    ]


def write_measured_csv(rows: Sequence[Measured], path: str | Path) -> Path:
    """Write :func:`measured_records` to ``path`` (the folder must exist); returns the path."""
    return write_csv(measured_records(rows), _existing_folder(path))
