"""specdec.analysis.records: the newest record of a kind, provenance rows, the machine note (made-up
files in a temporary folder; no timing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.analysis import records


def write(path, kind=None, ts="2026-12-01T00:00:00Z", threads=1, flags="aaaa", **extra):
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = {"environment": {"timestamp_utc": ts, "threads": threads, "git_commit": "0123456789ab",
                           "git_dirty": False, "device_name": "CPU X"}, **extra}  # fmt: skip
    if kind:
        rec["kind"] = kind
    if flags:
        rec["machine"] = {"cpu": "CPU X", "cpu_flags_sha256": flags, "threads": threads}
    path.write_text(json.dumps(rec))
    return path


def test_newest_is_by_timestamp_not_name_and_skips_history_and_partials(tmp_path):
    records.clear()
    write(tmp_path / "bench" / "a-old.json", "engine-modes", "2026-11-30T00:00:00Z")
    write(tmp_path / "bench" / "z-new.json", "engine-modes", "2026-12-01T10:00:00Z")
    write(tmp_path / "bench" / "history" / "b.json", "engine-modes", "2027-01-01T00:00:00Z")
    write(tmp_path / "bench" / "c.partial.json", "engine-modes", "2027-01-01T00:00:00Z")
    write(tmp_path / "bench" / "m.json", "dynamic-gamma", "2027-01-01T00:00:00Z")
    rec = records.newest(tmp_path, "engine-modes")
    assert rec["file"] == "z-new.json"
    write(tmp_path / "bench" / "b-newer.json", "engine-modes", "2026-12-01T11:00:00Z", threads=2)
    assert records.newest(tmp_path, "engine-modes")["file"] == "b-newer.json"
    assert records.newest(tmp_path, "engine-modes", threads=1)["file"] == "z-new.json"
    assert [r["file"] for r in records.provenance()] == ["bench/z-new.json", "bench/b-newer.json"]
    with pytest.raises(FileNotFoundError, match="no record of kind 'oracle'"):
        records.newest(tmp_path, "oracle")


def test_a_smoke_run_is_its_own_kind_and_folders_name_unlabelled_kinds(tmp_path):
    write(tmp_path / "campaign" / "x-2t-quick.json", settings={"quick": True})
    write(tmp_path / "campaign" / "x-2t.json", settings={"quick": False}, ts="2026-11-01T00:00:00Z")
    write(tmp_path / "gpu" / "h200.json")
    assert records.newest(tmp_path, "campaign", note=False)["file"] == "x-2t.json"
    assert records.newest(tmp_path, "campaign-quick", note=False)["file"] == "x-2t-quick.json"
    assert records.newest(tmp_path, "gpu", note=False)["file"] == "h200.json"


def test_describe_and_the_machines_note(tmp_path):
    a = records.describe(write(tmp_path / "bench" / "a.json", "engine-modes", flags="aaaa"))
    b = records.describe(write(tmp_path / "bench" / "b.json", "engine-modes", flags="bbbb"))
    c = records.describe(write(tmp_path / "bench" / "c.json", "oracle-gamma", flags=None))
    assert a["machine_id"] == "aaaa" and a["commit"] == "01234567" and a["dirty"] is False
    assert c["machine_id"] == "not recorded" and c["machine"] == "CPU X"
    assert records.machines_note([a, dict(a, file="bench/a2.json")]).startswith(
        "All 2 records come from one machine identity (CPU X, CPU flags aaaa)."
    )
    note = records.machines_note([a, b, c])
    assert note.startswith("These records come from 3 machine identities")
    assert "bench/a.json" in note and "bench/b.json" in note and "flags not recorded): bench/c.json" in note


def test_machine_of_reads_the_mode_probes_machine():
    """Issue 41: the dynamic-gamma and Part IV records keep their CPU-flags digest only in ``mode_probe``;
    machine_of said "not recorded" for them."""
    probe = {"machine": {"cpu": "AMD EPYC", "cpu_flags_sha256": "0c31b8d624ec310b"}}
    rec = {"environment": {"device_name": "AMD EPYC"}, "mode_probe": probe}
    assert records.machine_of(rec) == {"name": "AMD EPYC", "flags_sha256": "0c31b8d624ec310b"}
    assert records.machine_of({**rec, "mode_probe": None})["flags_sha256"] is None
    mine = {"cpu": "Intel", "cpu_flags_sha256": "86d9ce9c09e486e0"}
    assert records.machine_of({**rec, "machine": mine})["flags_sha256"] == "86d9ce9c09e486e0"  # its own first
    stored = json.loads(
        (Path(__file__).resolve().parents[1] / "results/bench/dynamic-gamma-amd-epyc-1t.json").read_text()
    )
    assert records.machine_of(stored)["flags_sha256"] == "0c31b8d624ec310b"


def test_every_lists_a_kinds_records_oldest_first_on_one_machine_identity(tmp_path):
    records.clear()
    write(tmp_path / "bench" / "b.json", "engine-draft-cost", "2026-12-02T00:00:00Z", threads=2)
    write(tmp_path / "bench" / "a.json", "engine-draft-cost", "2026-12-01T00:00:00Z", threads=2)
    write(tmp_path / "bench" / "c.json", "engine-draft-cost", "2026-12-03T00:00:00Z", threads=2, flags="bbbb")
    write(tmp_path / "bench" / "d.json", "engine-draft-cost", "2026-12-04T00:00:00Z", threads=1)
    assert [r["file"] for r in records.every(tmp_path, "engine-draft-cost", threads=2)] == [
        "a.json",
        "b.json",
        "c.json",
    ]
    like = records.newest(tmp_path, "engine-draft-cost", threads=2, note=False)  # c.json, machine bbbb
    assert [r["file"] for r in records.every(tmp_path, "engine-draft-cost", threads=2, like=like)] == [
        "c.json"
    ]
    a = records.read(tmp_path / "bench" / "a.json")
    assert [r["file"] for r in records.every(tmp_path, "engine-draft-cost", like=a)] == [
        "a.json",
        "b.json",
        "d.json",
    ]
    assert all(r["query"].get("every") for r in records.provenance() if r["file"] != "bench/a.json")
    with pytest.raises(FileNotFoundError, match="no record of kind 'oracle'"):
        records.every(tmp_path, "oracle")
    # where: only the records it accepts are listed, and only they are noted
    records.clear()
    late = records.every(
        tmp_path,
        "engine-draft-cost",
        threads=2,
        where=lambda r: r["environment"]["timestamp_utc"] != "2026-12-02T00:00:00Z",
    )  # b.json left out
    assert [r["file"] for r in late] == ["a.json", "c.json"]
    assert sorted(r["file"] for r in records.provenance()) == ["bench/a.json", "bench/c.json"]
    records.clear()
    assert len(records.every(tmp_path, "engine-draft-cost", note=False)) == 4 and not records.provenance()


def test_draft_cost_of_change_is_the_newest_record_whose_change_names_it(tmp_path):
    from specdec.analysis import hardware

    records.clear()
    write(tmp_path / "bench" / "a.json", "engine-draft-cost", "2026-12-01T00:00:00Z", threads=2,
          change="EAGLE-2's expansion skips nodes")  # fmt: skip
    write(tmp_path / "bench" / "b.json", "engine-draft-cost", "2026-12-02T00:00:00Z", threads=2,
          change="EAGLE-2's expansion skips nodes, again", flags="bbbb")  # fmt: skip
    write(tmp_path / "bench" / "c.json", "engine-draft-cost", "2026-12-03T00:00:00Z", threads=2,
          change="heads in C")  # fmt: skip
    write(tmp_path / "bench" / "d.json", "engine-draft-cost", "2026-12-04T00:00:00Z", threads=1,
          change="EAGLE-2's expansion skips nodes")  # fmt: skip
    assert hardware.draft_cost_of_change(tmp_path, hardware.EAGLE2_PRUNING)["file"] == "b.json"
    assert hardware.draft_cost_of_change(tmp_path, hardware.EAGLE2_PRUNING, threads=1)["file"] == "d.json"
    assert sorted(r["file"] for r in records.provenance()) == ["bench/a.json", "bench/b.json", "bench/d.json"]
    with pytest.raises(FileNotFoundError):
        hardware.draft_cost_of_change(tmp_path, "no such change")
