"""specdec.paper.ledger: the claims ledger's checks, verdict rules, counts and CSV export."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("sympy")
pytest.importorskip("pandas")

from specdec.analysis import records  # noqa: E402
from specdec.paper.article import ArticleClaim, load_article_claims, load_article_readings  # noqa: E402
from specdec.paper.audit import AGREES, DIFFERS  # noqa: E402
from specdec.paper.ledger import (  # noqa: E402  # noqa: E402
    IMPRECISE,
    NOT_CHECKABLE,
    ON_TARGET,
    VERDICTS,
    Result,
    build_ledger,
    checks_closing,
    checks_intro,
    ledger_records,
    section_html,
    summary_frame,
    write_ledger_csv,
)
from specdec.paper.ledger.checks import CHECKS, gather_checks  # noqa: E402
from specdec.paper.ledger.readings import reading_checks  # noqa: E402
from specdec.paper.ledger.registry import Context, evaluate  # noqa: E402
from specdec.paper.ledger.render import values_cell  # noqa: E402
from specdec.paper.reproduce import csv_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "results" / "ledger" / "claims-ledger.csv"


@pytest.fixture(scope="module")
def campaign():
    """The campaign record (v3) both the ledger chapter and the Beyond chapter read."""
    return records.newest(ROOT / "results", "campaign-v3", note=False)


@pytest.fixture(scope="module")
def ledger(campaign):
    return build_ledger(campaign=campaign)


def _planted(claim_id: str, printed: str) -> list[ArticleClaim]:
    """All claims, with one claim's printed numbers replaced."""
    return [c._replace(printed=printed) if c.id == claim_id else c for c in load_article_claims()]


# --------------------------------------------------------------------------- the whole ledger
def test_committed_csv_is_current(ledger):
    """results/ledger/claims-ledger.csv holds exactly what the ledger exports (rerun the chapter if not)."""
    assert COMMITTED.read_text(encoding="utf-8") == csv_text(ledger_records(ledger))


def test_every_checkable_claim_has_one_check_and_every_claim_one_row(ledger):
    claims = load_article_claims()
    assert set(CHECKS) == {c.id for c in claims if c.check_kind not in ("none", "target")}
    assert [row.claim.id for row in ledger.rows] == [c.id for c in claims]
    for row in ledger.rows:
        assert row.group in VERDICTS
        assert (row.group == ON_TARGET) == (row.claim.check_kind == "target")
        assert (row.verdict == NOT_CHECKABLE) == (row.claim.check_kind == "none") or row.claim.id == "十-1"
        if row.verdict in (DIFFERS, IMPRECISE):
            assert row.note


def test_the_verdicts_the_chapter_describes(ledger):
    by_id = ledger.verdicts()
    assert ledger.differing_ids() == ["二-3", "三-2", "八-5", "八-7", "D4b"]
    assert by_id["二-5"] == IMPRECISE  # the glossary's acceptance rate: imprecise, not an error
    assert by_id["九-6"] == AGREES  # the article cites the paper's ~60 % faithfully
    assert by_id["D4a"] == AGREES and by_id["D4b"] == DIFFERS  # right numbers, wrong model
    assert all(c.verdict == AGREES for row in ledger.section("四") for c in row.comparisons)


def test_build_is_deterministic_and_seeded(ledger, campaign):
    again = build_ledger(campaign=campaign)
    assert ledger_records(again) == ledger_records(ledger)
    assert again.facts == ledger.facts
    other = build_ledger(seed=1, campaign=campaign)
    # the simulations move (their notes quote them), the verdicts do not
    assert other.verdicts() == ledger.verdicts()
    assert other.facts["gl_share_mc"] != ledger.facts["gl_share_mc"]


# --------------------------------------------------------------------------- planted errors
def test_a_planted_wrong_number_flips_a_verdict(ledger, campaign):
    assert ledger.verdicts()["一-7"] == AGREES
    planted = build_ledger(_planted("一-7", "params_b=70; weights_gb=150"), campaign=campaign)
    row = next(r for r in planted.rows if r.claim.id == "一-7")
    assert row.verdict == DIFFERS
    assert [(c.key, c.printed, c.verdict) for c in row.comparisons] == [("weights_gb", "150", DIFFERS)]
    # nothing else moves
    others = {k: v for k, v in planted.verdicts().items() if k != "一-7"}
    assert others == {k: v for k, v in ledger.verdicts().items() if k != "一-7"}
    assert planted.counts()[DIFFERS] == ledger.counts()[DIFFERS] + 1


def test_a_planted_digit_is_judged_at_its_printed_precision():
    # T5-small's worked speedup is printed 3.16; 3.2 still agrees (half a unit of 0.1), 3.26 does not
    row = next(
        r
        for r in build_ledger(_planted("五-9", _swap("五-9", "speedup", "3.2"))).rows
        if r.claim.id == "五-9"
    )
    assert row.verdict == AGREES
    row = next(
        r
        for r in build_ledger(_planted("五-9", _swap("五-9", "speedup", "3.26"))).rows
        if r.claim.id == "五-9"
    )
    assert row.verdict == DIFFERS


def _swap(claim_id: str, key: str, new: str) -> str:
    (claim,) = [c for c in load_article_claims() if c.id == claim_id]
    items = [part.strip() for part in claim.printed.split(";")]
    return "; ".join(f"{key}={new}" if item.startswith(key + "=") else item for item in items)


def test_a_judgement_cannot_overrule_a_differing_number():
    # 引-2's check says "agrees" (the article quotes the paper's headline); plant a wrong bound
    with pytest.raises(ValueError, match="cannot agree"):
        build_ledger(_planted("引-2", _swap("引-2", "high", "4")))


# --------------------------------------------------------------------------- the rules of evaluate
def _claim(kind: str = "compute", printed: str = "x=2.5", reason: str = "") -> ArticleClaim:
    return ArticleClaim("T-1", "T", "a claim", "一个说法", printed, kind, "", reason)


def test_evaluate_rules():
    ctx = Context([_claim()])
    numbers = evaluate(_claim(), lambda v, c: Result(how="h", values={"x": 2.54}), ctx)
    assert numbers.verdict == AGREES and numbers.n_agree == 1
    assert evaluate(_claim(), lambda v, c: Result(how="h", values={"x": 2.56}), ctx).verdict == DIFFERS
    unchecked = evaluate(_claim("none", "", "no source"), None, ctx)
    assert (unchecked.verdict, unchecked.note) == (NOT_CHECKABLE, "no source")
    with pytest.raises(ValueError, match="marked not checkable"):
        evaluate(_claim("none", "", "no source"), lambda v, c: Result(how="h"), ctx)
    with pytest.raises(ValueError, match="has no check"):
        evaluate(_claim(), None, ctx)
    with pytest.raises(ValueError, match="neither numbers nor a category"):
        evaluate(_claim(printed=""), lambda v, c: Result(how="h"), ctx)
    with pytest.raises(ValueError, match="category must be one of"):
        evaluate(_claim(), lambda v, c: Result(how="h", category="wrong"), ctx)
    with pytest.raises(ValueError, match="category must be one of"):  # a group, not a verdict
        evaluate(_claim(), lambda v, c: Result(how="h", category=ON_TARGET, note="n"), ctx)
    # a claim judged on the target takes section 7's row: its verdict, and its evidence with the reason
    target = _claim("target", "", "no source")
    row = {"verdict": "fails for this target", "evidence": "0.7x"}
    judged = evaluate(target, None, Context([target], target={"T-1": row}))
    assert (judged.verdict, judged.group, judged.comparisons) == ("fails for this target", ON_TARGET, ())
    assert judged.note.startswith("0.7x") and "no source" in judged.note
    with pytest.raises(ValueError, match="but has a check"):
        evaluate(target, lambda v, c: Result(how="h"), Context([target], target={"T-1": row}))
    with pytest.raises(ValueError, match="section 7 has no row"):
        evaluate(target, None, ctx)
    with pytest.raises(ValueError, match="judgement needs an explanation"):
        evaluate(_claim(), lambda v, c: Result(how="h", category=IMPRECISE), ctx)


def test_build_refuses_duplicate_ids_and_stray_checks():
    claims = load_article_claims()
    with pytest.raises(ValueError, match="unique"):
        build_ledger([*claims, claims[0]])
    with pytest.raises(ValueError, match="without a check"):
        build_ledger(checks={k: v for k, v in CHECKS.items() if k != "五-9"})


def test_the_reading_verdicts_are_data_beside_the_claims(ledger):
    """A claim judged by reading alone gets its stored verdict, how and note (article_readings.csv), by
    the same rules as a computed one; a bad verdict, an id that is not a reading claim or a reading
    claim also checked in code are refused."""
    readings = load_article_readings()
    rows = {row.claim.id: row for row in ledger.rows}
    kinds = {c.id: c.check_kind for c in load_article_claims()}
    assert readings and all(kinds[r.id] == "reading" for r in readings)
    for r in readings:
        assert (rows[r.id].verdict, rows[r.id].how, rows[r.id].note) == (r.verdict, r.how, r.note)
        assert rows[r.id].comparisons == ()
    first = readings[0]
    with pytest.raises(ValueError, match="verdict must be one of"):
        reading_checks([first._replace(verdict="fits")])
    with pytest.raises(ValueError, match="check_kind 'reading'"):
        reading_checks([first._replace(id="五-9")])
    with pytest.raises(ValueError, match="two checks"):
        source = reading_checks([first._replace(id="来源-1")])  # 来源-1 is checked in code
        gather_checks(checks_intro.CHECKS, source, checks_closing.CHECKS)


def test_context_refuses_a_bad_seed():
    with pytest.raises(ValueError, match="seed"):
        Context([], seed=1.5)


# --------------------------------------------------------------------------- counts, tables, CSV
def test_counts_table_matches_the_rows(ledger):
    counted = Counter(row.group for row in ledger.rows)
    assert ledger.counts() == {v: counted[v] for v in VERDICTS}
    assert sum(ledger.counts().values()) == len(ledger.rows)
    table = summary_frame(ledger)
    assert list(table.columns) == [*VERDICTS, "all"]
    assert table.loc["all", "all"] == len(ledger.rows)
    assert {v: int(table.loc["all", v]) for v in VERDICTS} == ledger.counts()
    by_section = ledger.counts_by_section()
    for section in ledger.sections():
        assert {v: int(table.loc[section, v]) for v in VERDICTS} == by_section[section]
        assert int(table.loc[section, "all"]) == len(ledger.section(section))
    facts = ledger.summary_facts()
    assert facts["n_claims"] == len(ledger.rows)
    assert (
        facts["n_agrees"],
        facts["n_differs"],
        facts["n_imprecise"],
        facts["n_unchecked"],
        facts["n_target"],
    ) == tuple(ledger.counts().values())
    # the counts do not depend on the record: a claim judged on the target is counted so without one
    assert build_ledger().counts() == ledger.counts()
    n_numbers, n_agree = ledger.numbers()
    assert n_numbers == sum(len(r.comparisons) for r in ledger.rows) and 0 < n_agree <= n_numbers


def test_csv_export_round_trips(ledger, tmp_path):
    path = write_ledger_csv(ledger, tmp_path / "ledger.csv")
    with path.open(encoding="utf-8", newline="") as handle:
        back = list(csv.DictReader(handle))
    assert back == [{k: str(v) for k, v in rec.items()} for rec in ledger_records(ledger)]
    assert [r["verdict"] for r in back] == [row.verdict for row in ledger.rows]
    with pytest.raises(ValueError, match="existing folder"):
        write_ledger_csv(ledger, tmp_path / "missing" / "ledger.csv")


def test_section_html_shows_every_claim_of_the_section(ledger):
    text = section_html(ledger, "D")
    for row in ledger.section("D"):
        assert f"<td>{row.claim.id}</td>" in text
    assert "v-differs" in text and "v-agrees" in text
    with pytest.raises(ValueError, match="section must be one of"):
        section_html(ledger, "十一")


def test_values_cell_tallies_long_lists(ledger):
    row = next(r for r in ledger.rows if r.claim.id == "四-6")  # the 24 cells of the E[T] table
    assert len(row.comparisons) > 8
    assert values_cell(row.comparisons).startswith(f"{len(row.comparisons)}/{len(row.comparisons)} printed")
    assert values_cell(()) == "—"


def test_the_ledger_imports_without_torch():
    code = (
        "import sys, specdec.paper.ledger, specdec.paper.ledger.measured; assert 'torch' not in sys.modules"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
