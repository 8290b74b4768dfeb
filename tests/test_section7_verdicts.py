"""One verdict per section-7 claim (issue 43): the claims ledger and the "Beyond the paper" chapter state
the same verdict for each claim judged on the book's target, both read from
:func:`specdec.paper.ledger.section7.section7_rows` on the same campaign record (v3); and 七-9, judged at
each temperature, is never stated as an unqualified "holds" where it holds at one temperature only.

The checks read what a reader sees: the executed notebooks' glued values and tables
(``notebooks/beyond.ipynb``, ``notebooks/claims-ledger.ipynb``) and the exported ledger
(``results/ledger/claims-ledger.csv``), against the verdicts recomputed from the newest record.
"""

from __future__ import annotations

import ast
import copy
import csv
import html
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("sympy")

from specdec.analysis import records  # noqa: E402
from specdec.paper.article import load_article_claims  # noqa: E402
from specdec.paper.ledger import ON_TARGET, build_ledger  # noqa: E402
from specdec.paper.ledger.section7 import (  # noqa: E402
    COPYING,
    FAILS,
    HOLDS,
    OPEN_TASK,
    RULES7,
    UNDECIDED,
    per_temperature_verdict,
    section7_rows,
)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
LEDGER_CSV = ROOT / "results" / "ledger" / "claims-ledger.csv"


@pytest.fixture(scope="module")
def campaign():
    return records.newest(ROOT / "results", "campaign-v3", note=False)


@pytest.fixture(scope="module")
def rows(campaign):
    return {r["claim"]: r for r in section7_rows(campaign)}


def _outputs(name: str) -> list[dict]:
    cells = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))["cells"]
    return [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])]


def glued(name: str) -> dict[str, object]:
    """The values an executed notebook glued, by name (as myst-nb stores them: their repr)."""
    out = {}
    for o in _outputs(name):
        key = o.get("metadata", {}).get("scrapbook", {}).get("name")
        text = o.get("data", {}).get("application/papermill.record/text/plain")
        if key is not None and text is not None and not text.startswith("<"):  # a figure is no value
            out[key] = ast.literal_eval(text)
    return out


def ledger_html_verdicts() -> dict[str, str]:
    """Claim id -> the verdict the claims-ledger chapter's tables show for a claim judged on the target."""
    out = {}
    for o in _outputs("claims-ledger"):
        page = "".join(o.get("data", {}).get("text/html", ""))
        for row in page.split("<tr>")[1:]:
            cells = re.findall(r"<td>(.*?)</td>", row, flags=re.S)
            shown = re.search(r"<span class='v-target'>(.*?)</span>", row, flags=re.S)
            if cells and shown:
                out[html.unescape(cells[0])] = html.unescape(shown.group(1))
    return out


def manifest_campaign(name: str) -> str:
    """The campaign file (v3) an executed chapter's provenance cell says it read."""
    for o in _outputs(name):
        text = "".join(o.get("text", ""))
        if text.startswith("records read: "):
            read = json.loads(text.splitlines()[0].removeprefix("records read: "))
            (found,) = [r["file"] for r in read if r["kind"] == "campaign-v3"]
            return found
    raise AssertionError(f"{name}.ipynb prints no provenance manifest")


# --------------------------------------------------------------------------- one verdict per claim
def test_the_claims_judged_on_the_target_are_section_7s(rows):
    """The claims file marks as ``target`` exactly the claims section 7's rules judge."""
    target = {c.id for c in load_article_claims() if c.check_kind == "target"}
    assert target == set(rows) == {claim for claim, _ in RULES7.values()}


def test_the_ledger_gives_each_claim_section_7s_verdict(campaign, rows):
    ledger = build_ledger(campaign=campaign)
    judged = {row.claim.id: row for row in ledger.rows if row.group == ON_TARGET}
    assert {c: row.verdict for c, row in judged.items()} == {c: r["verdict"] for c, r in rows.items()}
    for c, row in judged.items():  # the evidence (with any caveat) goes with the verdict
        assert row.note.startswith(rows[c]["evidence"]), c
    assert ledger.summary_facts()["n_target"] == len(rows)


def test_the_executed_chapters_and_the_export_state_the_records_verdicts(campaign, rows):
    """What a reader sees in each place -- the Beyond chapter's glued verdicts, the ledger chapter's
    tables and its CSV -- is the verdict the record gives now, the same in all three; and both chapters
    read the same record."""
    assert manifest_campaign("beyond") == manifest_campaign("claims-ledger") == f"campaign/{campaign['file']}"
    beyond = glued("beyond")
    stated = {item: beyond[f"by-v-{item}"] for item in RULES7}
    assert stated == {item: rows[claim]["verdict"] for item, (claim, _) in RULES7.items()}
    assert ledger_html_verdicts() == {c: r["verdict"] for c, r in rows.items()}
    with LEDGER_CSV.open(encoding="utf-8", newline="") as handle:
        exported = {r["id"]: r for r in csv.DictReader(handle)}
    assert {c: exported[c]["verdict"] for c in rows} == {c: r["verdict"] for c, r in rows.items()}
    assert {c: exported[c]["check_kind"] for c in rows} == dict.fromkeys(rows, "target")
    ledger = glued("claims-ledger")
    assert all(r["verdict"] in ledger["l7-verdicts"] for c, r in rows.items() if c.startswith("七"))


# --------------------------------------------------------------------------- 七-9, per temperature
def test_a_verdict_that_holds_at_one_temperature_only_says_so():
    both = {0.0: HOLDS, 1.0: HOLDS}
    all_copying = {0.0: list(COPYING), 1.0: list(COPYING)}
    assert per_temperature_verdict(both, all_copying) == HOLDS  # unqualified only when it holds throughout
    for other in (UNDECIDED, FAILS):
        said = per_temperature_verdict({0.0: HOLDS, 1.0: other}, all_copying)
        assert said != HOLDS and said.startswith(HOLDS + " at temperature 0")
        assert f"{other.removesuffix(' for this target')} at temperature 1" in said
    one = per_temperature_verdict(both, {0.0: ["extract"], 1.0: list(COPYING)})
    assert one == f"{HOLDS} at temperature 0 (on extract alone), holds at temperature 1"


def test_79_is_stated_with_its_temperatures_its_carriers_and_its_caveat(rows):
    """On the record, 七-9's rule gives each temperature its verdict; where they differ neither place
    states a bare "holds": the verdict names the temperatures and the tasks that carry it, and the note
    says when code, not counted as repetitive, gains like the copying tasks."""
    r = rows["七-9"]
    per = r["per_temperature"]
    assert set(per) == {0.0, 1.0}
    if len(set(per.values())) > 1:
        assert r["verdict"] != HOLDS and not r["verdict"].endswith("for this target")
        assert all(f"temperature {temp:g}" in r["verdict"] for temp in per)
    for temp, tasks in r["carriers"].items():
        if per[temp] == HOLDS and set(tasks) < set(COPYING):
            assert f"(on {' and '.join(tasks)}" in r["verdict"]
    beyond = glued("beyond")
    assert beyond["by-v-七-9"] == r["verdict"]
    with LEDGER_CSV.open(encoding="utf-8", newline="") as handle:
        (exported,) = [row for row in csv.DictReader(handle) if row["id"] == "七-9"]
    x = {task: r["values"][f"{task}_t0"] for task in (*COPYING, OPEN_TASK, "code")}  # greedy estimates
    like = per[0.0] == HOLDS and min(abs(x["code"] - x[c]) for c in COPYING) < abs(x["code"] - x[OPEN_TASK])
    if like:
        assert "code, not counted as repetitive, gains like the copying tasks" in r["caveat"]
        assert r["caveat"] in beyond["by-79-caveat"] and r["caveat"] in exported["explanation"]
        assert r["caveat"] in glued("claims-ledger")["l7-note"]
    else:
        assert "code" not in r["caveat"]


def _planted(campaign, temp: float, task: str, estimate: float, low: float, high: float) -> dict:
    """The record with suffix decoding's simultaneous interval on one task and temperature replaced."""
    sim = copy.deepcopy(campaign["analyses"]["simultaneous"])
    for s in sim["strata"]:
        if float(s["temperature"]) == temp and s["task"] == task:
            for f in s["families"]:
                if f["family"].split("/", 1)[1] == "suffix":
                    f["vs_fastest_plain"] |= {"estimate": estimate, "low": low, "high": high}
    return {**campaign, "analyses": {**campaign["analyses"], "simultaneous": sim}}


def test_79_follows_the_record_at_each_temperature(campaign):
    """Plant numbers in the record: the verdict and its caveat move with them, and the ledger follows."""
    # summarize also faster at temperature 0, and both copying tasks faster at temperature 1: unqualified
    up = _planted(campaign, 0.0, "summarize", 1.5, 1.1, 2.0)
    for task in COPYING:
        up = _planted(up, 1.0, task, 1.5, 1.1, 2.0)
    r = next(r for r in section7_rows(up) if r["claim"] == "七-9")
    assert r["verdict"] == HOLDS and r["per_temperature"] == {0.0: HOLDS, 1.0: HOLDS}
    assert build_ledger(campaign=up).verdicts()["七-9"] == HOLDS
    # code drops to chat's level: no caveat
    flat = _planted(campaign, 0.0, "code", 0.96, 0.9, 1.05)
    assert next(r for r in section7_rows(flat) if r["claim"] == "七-9")["caveat"] == ""
    # the copying tasks below chat at temperature 0 and no faster: it fails there
    down = _planted(campaign, 0.0, "summarize", 0.8, 0.7, 0.9)
    down = _planted(down, 0.0, "extract", 0.8, 0.7, 0.9)
    r = next(r for r in section7_rows(down) if r["claim"] == "七-9")
    assert r["per_temperature"][0.0] == FAILS and r["verdict"].startswith(FAILS + " at temperature 0")
