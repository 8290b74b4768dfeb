"""The engine-verify-kernels record the hardware chapter reads (issue 40): its summary recomputed from its
raw samples, its floor recomputed from its own inputs, and the chapter's readers on hand-made records."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from specdec.analysis import records
from specdec.analysis.hardware import (
    KERNEL_GOALS,
    kernel_curves,
    kernel_decode,
    kernel_floor_parts,
    kernel_floors,
    kernel_goals,
    kernel_v_from_samples,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def record():
    return records.newest(ROOT / "results", "engine-verify-kernels", note=False)


def threads_of(record):
    return sorted(record["settings"]["threads"])


def test_the_summary_is_the_raw_samples_recomputed(record):
    """v(2), v(4), v(8), v(16) and their intervals, per curve and thread count, from T(k) samples."""
    for t in threads_of(record):
        summary = record["summary"][f"{t}t"]
        for name in ("before-chain", "before-tree", "after-chain", "after-tree"):
            for k in (2, 4, 8, 16):
                again = kernel_v_from_samples(record, t, name, k)
                assert again == pytest.approx(summary[name][str(k)], rel=1e-9), (t, name, k)
                assert again == pytest.approx(kernel_curves(record, t)[name][k], rel=1e-9)


def test_a_changed_sample_is_caught(record):
    changed = copy.deepcopy(record)
    cell = next(c for c in changed["cells"]["verify-2t"]["curves"]["after-chain"] if c["k"] == 4)
    cell["samples_s"] = [2 * s for s in cell["samples_s"]]
    again = kernel_v_from_samples(changed, 2, "after-chain", 4)
    assert again[0] == pytest.approx(2 * record["summary"]["2t"]["after-chain"]["4"][0], rel=1e-9)


def test_the_floor_is_its_inputs_recomputed(record):
    """floor(k) = max(weight bytes / bandwidth, k MACs / int8 peak) + attention(k), attention interpolated
    between the profiled k of the after library; the register tiles' adds the epilogue to the products,
    AMX's sets its products beside it; each over its own k = 1."""
    model = record["model"]
    for t in threads_of(record):
        cells = record["cells"]
        bw = cells[f"bandwidth-{t}t"]["weights"]["bandwidth_gbps"]
        assert record["floor"][f"{t}t"]["bandwidth_gbps"] == bw
        peaks = cells[f"peaks-{t}t"]
        prof = cells[f"profile-{t}t"]["after"]
        w = model["weight_bytes"] / (bw * 1e9)
        int8 = model["macs"] / peaks["int8"]["median_per_s"]
        amx = model["macs"] / peaks["amx_int8"]["median_per_s"] if "amx_int8" in peaks else None
        epi = model["epilogue_vector_ops"] / peaks["float32_vector"]["median_per_s"]

        def att(k, prof=prof):
            return np.interp(k, [p["k"] for p in prof], [p["buckets_ms"]["attention"] for p in prof]) / 1e3

        ks = record["settings"]["ks"]
        floor = {k: max(w, k * int8) + att(k) for k in ks}
        registers = {k: max(w, k * (int8 + epi)) + att(k) for k in ks}
        tiles = {k: max(w, k * amx, k * epi) + att(k) for k in ks} if amx else None
        got = kernel_floors(record, t)
        for k in ks:
            assert got["floor"][k] == pytest.approx(floor[k] / floor[1], rel=1e-9), (t, k)
            assert got["registers"][k] == pytest.approx(registers[k] / registers[1], rel=1e-9), (t, k)
            if tiles:
                assert got["amx"][k] == pytest.approx(tiles[k] / tiles[1], rel=1e-9), (t, k)
            else:  # no AMX on the record's machine: no AMX floor
                assert "amx" not in got
        for k in (2, 4, 8, 16):
            assert record["summary"][f"{t}t"]["floor_v"][str(k)] == pytest.approx(
                floor[k] / floor[1], rel=1e-9
            )
        parts = kernel_floor_parts(record, t)
        assert parts["weights_ms"] == pytest.approx(w * 1e3, rel=1e-9)
        assert parts["row_ms"]["int8"] == pytest.approx(int8 * 1e3, rel=1e-9)
        cross = parts["first_k_compute_bound"]["int8"]
        assert cross * int8 > w and (cross - 1) * int8 <= w


def test_the_decode_cells_read_back(record):
    for t in threads_of(record):
        d = kernel_decode(record, t)
        assert d["time_per_token"][0] == pytest.approx(
            record["summary"][f"{t}t"]["plain_decode_after_over_before"][0]
        )
        assert d["step"] == pytest.approx(tuple(record["summary"][f"{t}t"]["plain_step_after_over_before"]))
        lo, hi = d["time_per_token"][1:]
        assert lo <= d["time_per_token"][0] <= hi


def tiny(after_v, floor_v):
    """A hand-made record: one after-chain cell at k = 1 and 2 on 2 threads, with its floor."""
    return {
        "kind": "engine-verify-kernels",
        "cells": {
            "verify-2t": {
                "curves": {
                    "after-chain": [
                        {"k": 1, "v": 1.0, "v_ci": [1.0, 1.0], "samples_s": [1.0, 1.0]},
                        {"k": 2, "v": after_v[0], "v_ci": list(after_v[1:]), "samples_s": [1.2, 1.3]},
                    ]
                }
            }
        },
        "floor": {"2t": {"rows": [{"k": 1, "floor_v": 1.0}, {"k": 2, "floor_v": floor_v}]}},
    }


@pytest.mark.parametrize(
    "after_v, floor_v, said, above",
    [
        ((1.05, 1.02, 1.07), 1.01, "met", False),
        ((1.25, 1.2, 1.3), 1.1, "missed", True),
        ((1.08, 1.05, 1.11), 1.02, "undecided", False),
    ],
)
def test_goals_are_judged_by_the_interval_and_against_the_floor(after_v, floor_v, said, above):
    goal = ({"threads": 2, "k": 2, "goal": 1.08, "floor": "floor_v", "what": "v(2)"},)
    (row,) = kernel_goals(tiny(after_v, floor_v), goal)
    assert row["verdict"] == said and row["floor_above"] is above and row["after"] == after_v


def test_an_amx_goal_is_judged_only_where_the_record_has_amx():
    amx = {"threads": 2, "k": 2, "goal": 1.3, "floor": "floor_amx_v", "what": "v(2) with AMX"}
    plain = {"threads": 2, "k": 2, "goal": 1.08, "floor": "floor_v", "what": "v(2)"}
    record = tiny((1.05, 1.02, 1.07), 1.01)
    assert [g["what"] for g in kernel_goals(record, (plain, amx))] == ["v(2)"]
    record["floor"]["2t"]["rows"][1]["floor_amx_v"] = 1.01
    assert [g["what"] for g in kernel_goals(record, (plain, amx))] == ["v(2)", "v(2) with AMX"]


def test_the_readers_refuse_another_kind():
    for reader in (kernel_curves, kernel_floors, kernel_decode, kernel_floor_parts):
        with pytest.raises(ValueError, match="engine-verify-kernels"):
            reader({"kind": "engine-modes"}, 2)
    with pytest.raises(ValueError, match="engine-verify-kernels"):
        kernel_goals({"kind": "engine-modes"})


def test_the_goals_are_issue_40s():
    assert [(g["k"], g["goal"]) for g in KERNEL_GOALS] == [
        (2, 1.08),
        (4, 1.2),
        (8, 1.5),
        (16, 2.1),
        (16, 1.3),
    ]
    assert all(g["threads"] == 2 for g in KERNEL_GOALS)
