"""results/INDEX.md names, for every chapter, the records it reads (from its executed provenance cell),
and lists the records no chapter reads (issue 41, item 5: results/ self-describing). It is generated
(`python -m specdec.analysis.records --index`); this test fails when it is stale."""

from __future__ import annotations

from pathlib import Path

from specdec.analysis import records

ROOT = Path(__file__).resolve().parents[1]


def test_the_results_index_is_current():
    want = records.index_text(ROOT / "results", ROOT / "notebooks")
    have = (ROOT / "results" / "INDEX.md").read_text(encoding="utf-8")
    assert have == want, "results/INDEX.md is stale: run python -m specdec.analysis.records --index"


def test_the_index_names_every_chapter_that_reads_records_and_no_chapter_twice():
    text = records.index_text(ROOT / "results", ROOT / "notebooks")
    chapters = records.chapter_manifests(ROOT / "notebooks")
    assert {"answer", "hardware", "beyond"} <= set(chapters)
    for chapter, (entries, _) in chapters.items():
        for e in entries:
            assert f"| {chapter} | `{e['file']}` |" in text
        files = [e["file"] for e in entries]
        assert len(files) == len(set(files)), chapter
    unread = text.split("## Records no chapter's manifest names")[1]
    assert all(f"`{e['file'].split('/')[-1]}`" not in unread for es, _ in chapters.values() for e in es)
