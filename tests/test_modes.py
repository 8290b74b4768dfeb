"""specdec.modes: the lean mode chosen by a cached per-machine probe (no timing thresholds)."""

from __future__ import annotations

import json

import pytest
from tiny_models import tiny_llama

from specdec import modes
from specdec.lean import MODES, LeanLlama

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return tiny_llama(0)


def test_probe_structure(model):
    probe = modes.probe_modes(model, ("float32", "bfloat16"), k=3, context=8, repeats=2, warmup=1)
    assert set(probe["modes"]) == {"float32", "bfloat16"}
    for m in probe["modes"].values():
        assert len(m["step_samples_s"]) == len(m["verify_samples_s"]) == 2
        assert m["verify_cost"] == pytest.approx(m["verify_s"] / m["step_s"])
    assert probe["machine"]["threads"] == 1 and probe["model"]["hidden_size"] == 32


def test_choice_is_the_fastest_step_and_is_cached(model, tmp_path, monkeypatch):
    calls = []
    fake = {"float32": 3.0, "bfloat16": 1.0, "int4": 1.0}  # a tie: bfloat16 is the more precise

    def fake_probe(model, wanted):
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
    # a damaged cache file is ignored and rewritten
    (tmp_path / "mode-probes.json").write_text("{not json")
    assert modes.choose_mode(model, cache=tmp_path, modes=MODES)["cached"] is False


def test_lean_model_and_bad_input(model, tmp_path):
    lean, probe = modes.lean_model(model, "float32")
    assert isinstance(lean, LeanLlama) and lean.mode == "float32" and probe is None
    lean, probe = modes.lean_model(model, "auto", cache=tmp_path, modes=("float32", "bfloat16"))
    assert lean.mode == probe["mode"] in ("float32", "bfloat16")
    with pytest.raises(ValueError, match="mode must be 'auto'"):
        modes.lean_model(model, "fp16")
    with pytest.raises(ValueError, match="modes must be"):
        modes.probe_modes(model, ("int8",))
    with pytest.raises(ValueError, match="k must be"):
        modes.probe_modes(model, ("float32",), k=1)
