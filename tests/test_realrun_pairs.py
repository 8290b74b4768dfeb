"""The counterexample search of specdec.analysis.realrun on hand-made tables, with and without pairs."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from specdec.analysis.realrun import (
    drafter_family,
    family_scaling,
    fastest_pair,
    same_family,
    slower_accurate_pairs,
    widest_win,
)


def row(drafter, alpha, c, measured, task="code", temperature=0.0):
    return {
        "temperature": temperature,
        "task": task,
        "drafter": drafter,
        "alpha": alpha,
        "c": c,
        "measured": measured,
    }


WITH_PAIRS = [
    row("lookup", 0.30, 0.01, 1.40),
    row("draft:distil-l1", 0.40, 0.10, 1.10),
    row("draft:distil-l4", 0.50, 0.20, 0.90),
    row("early-exit:28", 0.90, 0.96, 0.60),
    # another group: the more accurate draft is also the faster one, so no pair here
    row("draft:distil-l1", 0.30, 0.10, 1.00, task="chat"),
    row("draft:distil-l4", 0.60, 0.20, 1.30, task="chat"),
]


def test_pairs_found_and_named():
    pairs = slower_accurate_pairs(WITH_PAIRS)
    found = {(q["accurate"], q["faster"]) for q in pairs}
    assert found == {
        ("draft:distil-l1", "lookup"),
        ("draft:distil-l4", "lookup"),
        ("draft:distil-l4", "draft:distil-l1"),
        ("early-exit:28", "lookup"),
        ("early-exit:28", "draft:distil-l1"),
        ("early-exit:28", "draft:distil-l4"),
    }
    l4_l1 = next(q for q in pairs if (q["accurate"], q["faster"]) == ("draft:distil-l4", "draft:distil-l1"))
    assert (l4_l1["accurate_alpha"], l4_l1["accurate_c"], l4_l1["accurate_speedup"]) == (0.5, 0.2, 0.9)
    assert (l4_l1["faster_alpha"], l4_l1["faster_c"], l4_l1["faster_speedup"]) == (0.4, 0.1, 1.1)
    assert all(q["task"] == "code" for q in pairs)


def test_margin_is_strict_and_dataframes_work():
    # alpha 0.40 vs 0.30 differs by 0.10: a pair at margin 0.05, none at margin 0.10 (strict)
    table = pd.DataFrame(WITH_PAIRS[:2])
    assert len(slower_accurate_pairs(table, margin=0.05)) == 1
    assert slower_accurate_pairs(table, margin=0.10 + 1e-12) == []


def test_headline_and_family_pairs():
    pairs = slower_accurate_pairs(WITH_PAIRS)
    top = fastest_pair(pairs)  # the fastest faster drafter is lookup; widest alpha gap: early-exit:28
    assert (top["accurate"], top["faster"]) == ("early-exit:28", "lookup")
    fam = same_family(pairs)
    assert [(q["accurate"], q["faster"]) for q in fam] == [("draft:distil-l4", "draft:distil-l1")]
    win = widest_win(fam)
    assert win["win"] == pytest.approx(1.1 / 0.9)


def test_family_scaling():
    s = family_scaling(WITH_PAIRS, "draft")
    assert (s["small"], s["large"], s["groups"], s["slower"]) == ("draft:distil-l1", "draft:distil-l4", 2, 1)
    assert s["c_ratio"] == pytest.approx(2.0)
    assert s["alpha_ratio"] == pytest.approx((0.5 / 0.4 + 0.6 / 0.3) / 2)  # median of two groups


def test_a_record_without_pairs():
    table = [
        row("lookup", 0.3, 0.01, 1.2),
        row("draft:distil-l1", 0.5, 0.1, 1.5),
        row("unigram", 0.1, 0.0, 0.8),
    ]
    pairs = slower_accurate_pairs(table)
    assert pairs == []
    assert fastest_pair(pairs) is None
    assert widest_win(same_family(pairs)) is None
    assert family_scaling(table, "draft") is None  # one distilled draft only


def test_families_and_bad_input():
    assert drafter_family("early-exit:28") == "early-exit" and drafter_family("draft:distil-l2") == "draft"
    assert drafter_family("lookup") is None and drafter_family("bigram") is None
    assert drafter_family("ee-28") is None  # an older name: the reader maps it first (registry_names)
    with pytest.raises(ValueError, match="lacks the columns"):
        slower_accurate_pairs([{"task": "code", "drafter": "x"}])
    with pytest.raises(ValueError, match="margin"):
        slower_accurate_pairs(WITH_PAIRS, margin=-1)
    with pytest.raises(ValueError, match="family"):
        family_scaling(WITH_PAIRS, "lookup")
    assert math.isfinite(family_scaling(WITH_PAIRS, "draft")["c_ratio"])


def test_intervals_must_separate():
    """With intervals, the more accurate draft is slower only when its interval lies below the other's."""

    def with_ci(r, low, high):
        return r | {"measured_low": low, "measured_high": high}

    overlapping = [
        with_ci(row("lookup", 0.30, 0.01, 1.21), 1.10, 1.30),
        with_ci(row("draft:distil-l4", 0.50, 0.20, 1.20), 1.05, 1.35),
    ]
    assert slower_accurate_pairs(overlapping) == []  # a tie: 1.20 vs 1.21 with overlapping intervals
    separated = [
        with_ci(row("lookup", 0.30, 0.01, 1.40), 1.30, 1.50),
        with_ci(row("draft:distil-l4", 0.50, 0.20, 0.90), 0.85, 0.95),
    ]
    (pair,) = slower_accurate_pairs(separated)
    assert (pair["accurate_low"], pair["accurate_high"], pair["faster_low"], pair["faster_high"]) == (
        0.85,
        0.95,
        1.30,
        1.50,
    )
    # family scaling counts a slower largest draft only where the intervals separate
    fam = [
        with_ci(row("draft:distil-l1", 0.4, 0.1, 1.1), 1.0, 1.2),
        with_ci(row("draft:distil-l4", 0.5, 0.2, 0.9), 0.8, 1.05),  # overlaps: not counted
        with_ci(row("draft:distil-l1", 0.3, 0.1, 1.1, task="chat"), 1.05, 1.15),
        with_ci(row("draft:distil-l4", 0.6, 0.2, 0.9, task="chat"), 0.85, 0.95),  # separated
    ]
    assert family_scaling(fam, "draft")["slower"] == 1


def test_the_reader_maps_the_older_records_names_once(tmp_path):
    """Issue 41, item 2: the committed records name drafters ee-N and draft-NAME; the reader that the
    chapters use (load_records, main_record) hands every chapter the registry's specs, and leaves the
    files as they were written."""
    import json

    from specdec.analysis.realrun import (
        RECORD_FORMAT,
        load_records,
        main_record,
        registry_names,
        registry_spec,
    )

    assert registry_spec("ee-8") == "early-exit:8" and registry_spec("draft-distil-l1") == "draft:distil-l1"
    for same in (
        "lookup",
        "plain",
        "bigram",
        "early-exit:8",
        "draft:distil-l1",
        "draft-tree:distil-l1,branch=2",
    ):
        assert registry_spec(same) == same
    old = {
        "kind": "real-decoding", "format": RECORD_FORMAT, "tag": "cpu-x", "command": "python old.py",
        "timed_drafters": ["lookup", "draft-distil-l1"], "alpha_only_drafters": ["ee-8", "unigram"],
        "table": [{"drafter": "draft-distil-l1", "task": "code"}, {"drafter": "lookup", "task": "code"}],
        "runs": [{"drafter": "plain"}, {"drafter": "ee-8"}], "draft_modes": {"draft-distil-l1": "q4q8"},
        "c_forward": {"ee-8": {"c": 0.5}},
        "sweep": {"drafters": ["draft-distil-l1"], "rows": [{"drafter": "ee-8"}]},
        "settings": {"timed": "lookup,drafts", "alpha_only": "ee-8,unigram", "sweep_drafters": "auto",
                     "timed_names": ["draft-distil-l1"], "alpha_names": ["ee-8"], "out": "ee-8"},
        "environment": {"timestamp_utc": "2025-01-01T00:00:00"},
    }  # fmt: skip
    path = tmp_path / "cpu-x.json"
    path.write_text(json.dumps(old))
    (rec,) = load_records(tmp_path)
    assert rec == main_record(tmp_path)
    assert rec["timed_drafters"] == ["lookup", "draft:distil-l1"]
    assert rec["alpha_only_drafters"] == ["early-exit:8", "unigram"]
    assert [r["drafter"] for r in rec["table"]] == ["draft:distil-l1", "lookup"]
    assert [r["drafter"] for r in rec["runs"]] == ["plain", "early-exit:8"]
    assert rec["draft_modes"] == {"draft:distil-l1": "q4q8"} and rec["c_forward"] == {
        "early-exit:8": {"c": 0.5}
    }
    assert rec["sweep"] == {"drafters": ["draft:distil-l1"], "rows": [{"drafter": "early-exit:8"}]}
    assert rec["settings"] == {
        "timed": "lookup,drafts", "alpha_only": "early-exit:8,unigram", "sweep_drafters": "auto",
        "timed_names": ["draft:distil-l1"], "alpha_names": ["early-exit:8"], "out": "ee-8",
    }  # fmt: skip
    assert rec["command"] == "python old.py" and json.loads(path.read_text()) == old  # the file as written
    assert registry_names(rec) == rec  # a record already named by specs comes back equal
