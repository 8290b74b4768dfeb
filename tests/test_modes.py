"""specdec.measure.modes: the lean mode chosen by a cached per-machine probe (no timing thresholds)."""

from __future__ import annotations

import json

import pytest
from tiny_models import tiny_llama

from specdec.engine.lean import MODES, LeanLlama
from specdec.measure import modes

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return tiny_llama(0)


def test_probe_structure(model):
    probe = modes.probe_modes(
        model, ("float32", "bfloat16"), ks=(1, 2, 5), k=3, context=8, repeats=2, warmup=1
    )
    assert set(probe["modes"]) == {"float32", "bfloat16"} and probe["ks"] == [1, 2, 3, 5]
    for m in probe["modes"].values():
        assert all(len(v) == 2 for v in m["samples_s"].values()) and set(m["samples_s"]) == {
            "1",
            "2",
            "3",
            "5",
        }
        assert (
            m["verify_cost"] == pytest.approx(m["verify_s"] / m["step_s"]) == pytest.approx(m["curve"]["3"])
        )
        assert m["curve"]["1"] == 1.0
    assert probe["machine"]["threads"] == 1 and probe["model"]["hidden_size"] == 32


def test_draft_length_follows_the_measured_curve():
    flat = {str(k): 1.0 for k in range(1, 17)}
    steep = {str(k): float(k) for k in range(1, 17)}  # no batching gain: every token costs a step
    probe = {"mode": "int4", "modes": {"int4": {"curve": flat}, "float32": {"curve": steep}}}
    long = modes.draft_length(probe, alpha=0.8)
    assert long["mode"] == "int4" and long["gamma"] == 15  # free verification: draft as much as measured
    short = modes.draft_length(probe, alpha=0.8, mode="float32")
    assert short["gamma"] == 1 and short["speedup"] == pytest.approx((1 + 0.8) / 2)
    with pytest.raises(ValueError, match="alpha"):
        modes.draft_length(probe, alpha=1.0)
    with pytest.raises(ValueError, match="mode"):
        modes.draft_length(probe, alpha=0.5, mode="bfloat16")


def test_choice_is_the_fastest_step_and_is_cached(model, tmp_path, monkeypatch):
    calls = []
    # a tie: bfloat16 is the more precise
    fake = {"float32": 3.0, "q4_1": 2.0, "q4q8": 2.0, "bfloat16": 1.0, "int4": 1.0}

    def fake_probe(model, wanted, threads=None):
        calls.append(wanted)
        return {"modes": {m: {"step_s": fake[m], "verify_s": 2 * fake[m]} for m in wanted}, "machine": {}}

    monkeypatch.setattr(modes, "probe_modes", fake_probe)
    first = modes.choose_mode(model, cache=tmp_path, modes=MODES)
    assert first["mode"] == "bfloat16" and first["cached"] is False
    again = modes.choose_mode(model, cache=tmp_path, modes=MODES)
    assert again["mode"] == "bfloat16" and again["cached"] is True and len(calls) == 1
    # another machine (a different identity) measures anew
    monkeypatch.setattr(modes, "machine_identity", lambda: {"cpu": "another"})
    fake["int4"] = 0.5
    other = modes.choose_mode(model, cache=tmp_path, modes=MODES)
    assert other["mode"] == "int4" and other["cached"] is False and len(calls) == 2
    assert len(json.loads((tmp_path / "mode-probes.json").read_text())) == 2
    # a damaged cache file is kept aside (one line names it) and a new one written
    (tmp_path / "mode-probes.json").write_text("{not json")
    with pytest.warns(UserWarning, match="mode-probe cache .* is damaged"):
        assert modes.choose_mode(model, cache=tmp_path, modes=MODES)["cached"] is False
    assert (tmp_path / "mode-probes.json.damaged").read_text() == "{not json"


def test_lean_model_and_bad_input(model, tmp_path):
    lean, probe = modes.lean_model(model, "float32")
    assert isinstance(lean, LeanLlama) and lean.mode == "float32" and probe is None
    lean, probe = modes.lean_model(model, "auto", cache=tmp_path, modes=("float32", "bfloat16"))
    assert lean.mode == probe["mode"] in ("float32", "bfloat16")
    with pytest.raises(ValueError, match=r"mode \(a lean engine's\) must be one of \('auto'"):
        modes.lean_model(model, "fp16")
    with pytest.raises(ValueError, match="modes must be"):
        modes.probe_modes(model, ("int8",))
    with pytest.raises(ValueError, match="k must be"):
        modes.probe_modes(model, ("float32",), k=1)


def test_the_measure_commands_engines_are_the_lean_modes():
    """usermeasure spells its engines out (importing it must not import torch): they must be
    'auto', every lean mode in MODES' order, and transformers' two."""
    from specdec.experiments.usermeasure import ENGINES

    assert ENGINES == ("auto", *MODES, "hf-float32", "hf-bfloat16")


def test_the_probe_times_q4q8_with_torch_on_one_thread(model, monkeypatch):
    """The probe times each mode as it decodes: q4q8 (its own C threads) with torch on one thread,
    torch's modes on torch's threads (a probe with torch's workers spinning beside the C pool chose
    q4_1 at 2 threads where q4q8 is twice as fast)."""
    import torch

    class Stub:  # as a LeanLlama: runs_outside_torch in q4q8 only
        def __init__(self, model, mode, threads=None):
            self.mode = mode
            self.runs_outside_torch = mode == "q4q8"

        def verify_matches_steps(self, k):
            return True

        def session(self):
            class S:
                def forward(self, ids, keep=1):
                    return None

            return S()

    seen = {}

    def fake_time_forwards(sessions, ids, sizes, *, around, **kw):
        for name in sessions:
            with around[name]():
                seen[name] = torch.get_num_threads()
        return {name: {n: [1e-3] * 2 for n in sizes} for name in sessions}

    monkeypatch.setattr(modes, "LeanLlama", Stub)
    monkeypatch.setattr(modes, "time_forwards", fake_time_forwards)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        modes.probe_modes(model, ("float32", "q4q8"), ks=(1, 2), k=2, context=4, repeats=2, warmup=0)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen == {"float32": 2, "q4q8": 1}


def test_timing_groups_split_c_forward_modes_from_torch_modes():
    """The one split probe_modes and enginebench.draft_costs time in (C forwards first, then torch)."""
    from specdec.measure.modes import TIMING_GROUPS, timing_groups

    named = {"a/float32": "float32", "a/q4q8": "q4q8", "b/bfloat16": "bfloat16", "ee-1/q4_1": "q4_1"}
    assert timing_groups(named) == [
        ("C forward", ["a/q4q8", "ee-1/q4_1"]),
        ("torch", ["a/float32", "b/bfloat16"]),
    ]
    assert timing_groups({"int4": "int4"}) == [("torch", ["int4"])] and timing_groups({}) == []
    assert TIMING_GROUPS == ("C forward", "torch")
