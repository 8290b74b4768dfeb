"""The one NaN rule and the one atomic writer (specdec.theory.recordio), for JSON and CSV alike."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from specdec.paper import reproduce
from specdec.theory.recordio import csv_cell, jsonable, write_record, write_text_atomic

PACKAGE = Path(__file__).resolve().parents[1] / "specdec"

#: Modules that write JSON with json.dumps into a temporary folder renamed into place (atomic already;
#: engine/ is edited elsewhere): the model cache's checksums and key, the C library's check record.
#: Each must still do so (remove it here when it moves to write_record).
KNOWN_BARE = {"specdec/engine/models.py", "specdec/engine/native.py"}


def test_jsonable_and_csv_cell_share_the_nan_rule():
    values = [math.nan, math.inf, -math.inf, np.float32("nan"), np.float64("-inf")]
    assert jsonable(values) == [None] * 5
    assert [csv_cell(v) for v in values] == [""] * 5
    assert [csv_cell(v) for v in (1.5, 0, "nan", True, None)] == [1.5, 0, "nan", True, None]


def test_csv_text_writes_nan_as_the_empty_cell():
    text = reproduce.csv_text([{"a": math.nan, "b": 1.0}, {"a": np.float64("inf"), "b": -math.inf}])
    assert text == "a,b\n,1.0000\n,\n"


def test_write_record_and_write_text_atomic_leave_no_temporary(tmp_path):
    path = write_record(tmp_path / "new" / "r.json", {"x": math.nan, "y": (1, 2)}, indent=None)
    assert path.read_text() == '{"x": null, "y": [1, 2]}\n'
    with pytest.raises(TypeError):
        write_record(path, {"x": object()})
    assert json.loads(path.read_text())["x"] is None  # the old record is whole
    write_text_atomic(tmp_path / "new" / "t.csv", "a\r\n1\r\n")
    assert (tmp_path / "new" / "t.csv").read_bytes() == b"a\r\n1\r\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["r.json", "t.csv"]


def test_no_module_writes_json_but_through_the_one_writer():
    """Every JSON file the package writes goes through write_record (atomic, NaN -> null): no bare
    ``json.dump(`` to a file and no ``write_text(json.dumps(...))``."""
    bare = re.compile(r"json\.dump\(|write_text\(\s*json\.dumps|write_bytes\(\s*json\.dumps")
    found = {
        p.relative_to(PACKAGE.parent).as_posix()
        for p in sorted(PACKAGE.rglob("*.py"))
        if bare.search(p.read_text(encoding="utf-8"))
    }
    assert found - KNOWN_BARE == set(), f"JSON written outside specdec.theory.recordio.write_record: {found}"
    assert KNOWN_BARE <= found, f"no longer writing bare JSON (drop from KNOWN_BARE): {KNOWN_BARE - found}"
