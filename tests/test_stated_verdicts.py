"""What the executed answer chapter states (its glued values) agrees with what its record gives now.

The chapter glues its verdicts from the campaign record; this test recomputes them from the newest record
of the kind, so a chapter executed against another record, or a reader that changed since, fails here
(issue 43: "a test that fails if a chapter's stated verdict and the record's disagree")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.analysis import answer, records

ROOT = Path(__file__).resolve().parent.parent


def glued(notebook: str) -> dict[str, str]:
    """The text/plain value of every glue key in an executed notebook."""
    nb = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text(encoding="utf-8"))
    out = {}
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is not None:
                out[name] = o["data"].get("application/papermill.record/text/plain", "")
    return out


@pytest.fixture(scope="module")
def camp():
    records.clear()
    return records.newest(ROOT / "results", "campaign-v3")


@pytest.fixture(scope="module")
def stated():
    return glued("answer")


def _text(value: str) -> str:
    return value.strip("'\"")


def test_the_headline_verdicts_stated_are_the_records(camp, stated):
    for t, tag in ((0.0, "t0"), (1.0, "t1")):
        h = answer.headline(camp, t)
        assert _text(stated[f"ans-{tag}-verdict"]) == answer.VERDICT_WORDS[h["spec_verdict"]]
        sim = answer.stratum(camp, t, analysis="simultaneous")["any_speculative"]["vs_fastest_plain"]
        assert _text(stated[f"ans-{tag}-sim-verdict"]) == sim["verdict"]
        assert float(stated[f"ans-{tag}-spec-x"]) == pytest.approx(h["spec_vs_fastest"][0], rel=1e-5)
        loo = answer.leave_one_task_out(camp, t)
        for r in loo:
            assert f"without {r['left out']} {r['x']:.2f}x" in stated[f"ans-{tag}-loo"]
            assert f"{r['verdict']}" in stated[f"ans-{tag}-loo"].split(f"without {r['left out']}")[1]
        verdicts = {h["spec_verdict"], sim["verdict"], *(r["verdict"] for r in loo)}
        firm = _text(stated[f"ans-{tag}-firm"])
        assert firm.startswith("So the verdict") == (len(verdicts) == 1)
        ratios = answer.prompt_ratios(camp, t)
        assert int(stated[f"ans-{tag}-prompt-slower"]) == sum(x < 1 for x in ratios)


def test_the_families_stated_faster_are_the_records(camp, stated):
    for t, tag in ((0.0, "t0"), (1.0, "t1")):
        fams = answer.stratum(camp, t, analysis="simultaneous")["families"]
        faster = [f for f in fams if f["vs_fastest_plain"]["verdict"] == "faster"]
        assert int(stated[f"ans-{tag}-fams-fastest"]) == len(faster)
        assert int(stated[f"ans-{tag}-fams-slower"]) == sum(
            f["vs_fastest_plain"]["verdict"] == "slower" for f in fams
        )
