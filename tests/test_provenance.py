"""One truth across chapters (issue #22): every chapter that reads measurement records reads the
newest of its kind, and says so when the records it shows come from several machine identities.

Each such chapter ends with a provenance cell that prints ``records.manifest`` (the records it read
and the query that found each) and ``records.machines_note``. This test reads those stored outputs
from the executed notebooks and re-runs every query against ``results/``: it fails when a newer
record of the same kind now exists (the chapter must be re-executed, or the record is superseded),
when a named file is gone, or when the printed machine note no longer matches the records. It also
fails when a chapter's source reads a results file another way than through
``specdec.analysis.records``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specdec.analysis import records

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
NOTEBOOKS = ROOT / "notebooks"
#: Chapters that read records through their own, older readers (records.OWN_READERS).
OWN_READERS = set(records.OWN_READERS)


def manifests():
    return [(name, entries, note) for name, (entries, note) in records.chapter_manifests(NOTEBOOKS).items()]


def test_the_chapters_that_read_records_show_their_provenance():
    names = {name for name, _, _ in manifests()}
    assert {"answer", "beyond", "dynamic-gamma", "command-line", "hardware", "claims-ledger"} <= names


@pytest.mark.parametrize("name,entries,note", manifests(), ids=[m[0] for m in manifests()])
def test_each_chapter_reads_the_newest_record_of_its_kind(name, entries, note):
    assert entries, f"{name} read no record"
    for e in entries:
        path = RESULTS / e["file"]
        assert path.exists(), f"{name} shows {e['file']}, which is gone: re-execute the chapter"
        if "path" in e:  # a fixed file, read by name
            continue
        if e.get("every"):  # one of every record of its kind (records.every): still among them
            files = {f"{Path(r['path']).parent.name}/{r['file']}"
                     for r in records.every(RESULTS, e["kind"], threads=e.get("threads"))}  # fmt: skip
            assert e["file"] in files, f"{name} reads {e['file']}, no longer a record of kind {e['kind']!r}"
            continue
        found = records.newest(RESULTS, e["kind"], threads=e.get("threads"), stem=e.get("stem"), note=False)
        now = f"{Path(found['path']).parent.name}/{found['file']}"
        assert now == e["file"], (
            f"{name} reads {e['file']}, but the newest record of kind {e['kind']!r}"
            f"{' at ' + str(e['threads']) + ' thread(s)' if e.get('threads') else ''} is {now}: re-execute it"
        )


@pytest.mark.parametrize("name,entries,note", manifests(), ids=[m[0] for m in manifests()])
def test_each_chapter_says_when_its_records_come_from_several_machines(name, entries, note):
    rows = [records.describe(RESULTS / e["file"]) for e in entries]
    assert note == records.machines_note(rows)
    ids = {(r["machine"], r["machine_id"]) for r in rows}
    if len(ids) > 1:
        assert note.startswith(f"These records come from {len(ids)} machine identities")


def test_no_chapter_reads_a_results_file_around_the_records_module():
    bad = []
    for src in sorted((NOTEBOOKS / "src").glob("*.md")):
        if src.stem in OWN_READERS:
            continue
        code = "\n".join(
            re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", src.read_text(encoding="utf-8"), re.S)
        )
        for line in code.splitlines():
            around = "results" in line and ("glob(" in line or "read_text(" in line)
            if around or "load_record(" in line:
                bad.append(f"{src.name}: {line.strip()}")
    assert not bad, "read records through specdec.analysis.records:\n" + "\n".join(bad)
