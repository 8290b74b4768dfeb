"""The one runner (specdec.measure.runner): settings as the resume key, cells with their seconds and load,
a loaded cell timed again, a budget, resume by done ids, atomic saves. No timing thresholds."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specdec.measure import runner
from specdec.measure.runner import RunSettings, not_key, open_partial, run_cells
from specdec.theory.checks import Refused


@dataclasses.dataclass(frozen=True)
class Design(RunSettings):
    repeats: int
    gammas: tuple[int, ...] = (1, 2)
    out: str = not_key("somewhere")
    fresh: bool = not_key(False)


def test_to_record_is_the_settings_without_the_not_key_fields_as_stored():
    d = Design(3)
    assert d.to_record() == {"repeats": 3, "gammas": [1, 2]}  # tuples stored as lists, out/fresh left out
    assert Design(3, out="elsewhere", fresh=True).to_record() == d.to_record()


def test_open_partial_resumes_equal_settings_and_names_the_ones_that_differ(tmp_path):
    path = tmp_path / "p.json"
    assert open_partial(path, Design(3)) is None
    path.write_text(json.dumps({"settings": Design(3).to_record(), "done": ["a"]}))
    assert open_partial(path, Design(3, out="x"))["done"] == ["a"]
    with pytest.raises(Refused, match=r"other settings \(repeats\)"):
        open_partial(path, Design(4))
    assert open_partial(path, Design(4), fresh=True) is None


def _cells(log, n=3):
    def make(i):
        def run():
            log.append(i)
            return [{"cell": i}]

        return run

    return [(f"c{i}", make(i)) for i in range(n)]


def test_cells_run_once_each_with_seconds_and_load_and_a_save_after_each(tmp_path):
    path, ran = tmp_path / "r.json", []
    record = {"settings": {}, "runs": []}
    saved = []

    def keep(cid, rows):
        record["runs"] += rows

    assert run_cells(record, _cells(ran), path, keep=keep, after=lambda cid, s: saved.append(cid))
    assert ran == [0, 1, 2] and record["done"] == ["c0", "c1", "c2"] and saved == record["done"]
    assert set(record["cell_seconds"]) == set(record["cell_load"]) == {"c0", "c1", "c2"}
    assert all(load["threads"] == 1 and "loaded" in load for load in record["cell_load"].values())
    assert json.loads(path.read_text()) == json.loads(json.dumps(record))  # what is on disk is the record
    # resumed: the done ids are skipped
    assert run_cells(record, _cells(ran), path, keep=keep) and ran == [0, 1, 2]


def test_a_budget_stops_after_the_cell_that_spends_it_and_a_rerun_continues(tmp_path):
    path, ran = tmp_path / "r.json", []
    record: dict = {}
    assert run_cells(record, _cells(ran), path, budget_s=0.0) is False
    assert ran == [0] and record["done"] == ["c0"]
    assert run_cells(record, _cells(ran), path) and ran == [0, 1, 2]


def test_a_loaded_cell_is_run_again_and_its_first_results_kept_as_discarded(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = runner.load_during

    def first_loaded(before, after, wall, threads):
        calls["n"] += 1
        return real(before, after, wall, threads) | {"loaded": calls["n"] == 1, "others_busy_cpus": 1.5}

    monkeypatch.setattr(runner, "load_during", first_loaded)
    ran, record = [], {"runs": []}
    run_cells(record, _cells(ran, 2), tmp_path / "r.json", keep=lambda c, r: record["runs"].extend(r),
              threads=2, retry_loaded=1, log=lambda line: None)  # fmt: skip
    assert ran == [0, 0, 1] and record["runs"] == [{"cell": 0}, {"cell": 1}]
    (gone,) = record["discarded"]
    assert gone["cell"] == "c0" and gone["runs"] == [{"cell": 0}] and "1.50 CPUs busy" in gone["why"]


def test_bad_arguments_are_refused_before_any_cell_runs(tmp_path):
    ran = []
    for kw, match in (
        ({"threads": 0}, "threads"),
        ({"retry_loaded": 11}, "retry_loaded"),
        ({"retry_loaded": 1}, "needs keep"),
        ({"budget_s": -1.0}, "budget_s"),
    ):
        with pytest.raises(ValueError, match=match):
            run_cells({}, _cells(ran), tmp_path / "r.json", **kw)
    assert ran == []


def test_a_done_list_elsewhere_and_a_save_of_the_programs_own(tmp_path):
    """The batch surface keeps its finished steps in status.steps_done and saves its own way."""
    record = {"status": {"steps_done": ["c0"]}}
    saves, ran = [], []
    run_cells(record, _cells(ran), tmp_path / "never.json", done=record["status"]["steps_done"],
              save=lambda: saves.append(1))  # fmt: skip
    assert ran == [1, 2] and record["status"]["steps_done"] == ["c0", "c1", "c2"] and len(saves) == 2
    assert "done" not in record and not (tmp_path / "never.json").exists()
