"""specdec.measure.enginebench: which engines a run measures."""

from __future__ import annotations

import pytest

from specdec.engine.lean import int4_supported
from specdec.measure.enginebench import ALL_ENGINES, VARIANTS, resolve_engines


def machine(monkeypatch, *, llama: bool = True, c: bool = True, int4: bool = True) -> None:
    """Pretend the machine runs (or lacks) llama.cpp, the C forward and torch's int4 kernels, so that
    each test checks exact lists whatever this machine has."""
    import specdec.engine.lean
    from specdec.engine import llamacpp, native

    monkeypatch.setattr(llamacpp, "available", lambda: llama)
    monkeypatch.setattr(native, "available", lambda *_: c)
    monkeypatch.setattr(native, "unavailable_reason", lambda *_: "no C compiler (test)")
    monkeypatch.setattr(specdec.engine.lean, "int4_supported", lambda: int4)


def test_variants_run_only_when_named(monkeypatch):
    machine(monkeypatch)
    said = []
    assert resolve_engines(None, log=said.append) == ALL_ENGINES and not said  # every engine, no variant
    named = resolve_engines("lean-int4,lean-int4-bf16head,lean-int4-blockattn")
    assert named == ("lean-int4", "lean-int4-bf16head", "lean-int4-blockattn")
    assert resolve_engines(["llama.cpp", "hf-float32"]) == ("llama.cpp", "hf-float32")  # the order asked


def test_the_default_list_on_a_machine_without_the_optional_engines(monkeypatch):
    machine(monkeypatch, llama=False, c=False, int4=False)
    said = []
    assert resolve_engines(None, log=said.append) == (
        "hf-float32",
        "hf-bfloat16",
        "lean-float32",
        "lean-bfloat16",
    )
    assert len(said) == 4 and all("left out" in line for line in said)  # llama.cpp, q4_1, q4q8, int4


def test_this_machines_default_list_is_what_it_runs():
    from specdec.engine import llamacpp, native

    runs = {
        "llama.cpp": llamacpp.available(),
        "llama.cpp-q4_0": llamacpp.available(),
        "lean-q4_1": native.available(),
        "lean-q4q8": native.available("q4q8"),
        "lean-int4": int4_supported(),
    }
    default = resolve_engines(None, log=lambda line: None)
    assert default == tuple(e for e in ALL_ENGINES if runs.get(e, True))
    assert not set(default) & set(VARIANTS)


def test_unknown_engines_are_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="lean-int4-bf16head"):
        resolve_engines("lean-int8")


def test_int4_engines_named_without_the_kernels_are_refused(monkeypatch):
    import specdec.engine.lean

    monkeypatch.setattr(specdec.engine.lean, "int4_supported", lambda: False)
    with pytest.raises(ValueError, match="lacks the CPU int4 kernels"):
        resolve_engines("lean-float32,lean-int4-bf16head")
    assert "lean-int4" not in resolve_engines(None, log=lambda line: None)
    said = []
    assert resolve_engines("lean-float32,lean-int4", log=said.append, strict=False) == ("lean-float32",)
    assert said and "lean-int4" in said[0]


def test_a_default_list_leaves_out_what_cannot_run(monkeypatch):
    from specdec.engine import llamacpp, native

    monkeypatch.setattr(native, "available", lambda: False)
    monkeypatch.setattr(native, "unavailable_reason", lambda *_: "no C compiler (test)")
    monkeypatch.setattr(llamacpp, "available", lambda: False)
    with pytest.raises(ValueError, match="no C compiler"):
        resolve_engines("lean-float32,lean-q4_1")
    with pytest.raises(ValueError, match="llama_cpp is not importable"):
        resolve_engines("llama.cpp")
    said = []
    kept = resolve_engines("lean-float32,lean-q4_1,llama.cpp", log=said.append, strict=False)
    assert kept == ("lean-float32",)
    assert any("no C compiler" in line for line in said) and any("llama_cpp" in line for line in said)


def test_draft_costs_time_each_draft_mode_against_the_target_and_keep_the_samples(monkeypatch):
    """c of every draft in every mode that keeps its weights (q4q8 only for int8 rows) and of the
    early exit, each recomputable from the stored paired samples."""
    import numpy as np
    from test_native_q8 import int8_rows, needs_q8, wide_model

    import specdec.train.draftnets as dn
    from specdec.engine.lean import LeanLlama
    from specdec.measure import enginebench

    needs_q8()
    drafts = {"int8": int8_rows(wide_model(seed=7)), "float": wide_model(seed=8)}
    monkeypatch.setattr(dn, "list_drafts", lambda: list(drafts))
    monkeypatch.setattr(dn, "load_draft", lambda name, target: drafts[name])
    target = LeanLlama(wide_model(), "q4q8", threads=1)
    res = enginebench.draft_costs(target, None, list(range(1, 20)), 1, repeats=3, early_exit=(1,), log=None)
    assert set(res["drafts"]) == {"draft:int8/float32", "draft:int8/bfloat16", "draft:int8/q4q8",
                                  "draft:float/float32", "draft:float/bfloat16",
                                  "early-exit:1/q4q8"}  # fmt: skip
    assert {r["group"] for r in res["drafts"].values()} == {"C forward", "torch"}
    assert (
        res["drafts"]["draft:int8/q4q8"]["group"]
        == res["drafts"]["early-exit:1/q4q8"]["group"]
        == "C forward"
    )
    for row in res["drafts"].values():
        base = np.asarray(res["groups"][row["group"]]["target_samples_s"])
        t = np.asarray(row["samples_s"])
        assert len(t) == len(base) == 3
        assert row["c"] == pytest.approx(float(np.exp(np.log(t / base).mean())))
        assert row["c_ci"][0] <= row["c"] <= row["c_ci"][1]


def test_an_older_records_draft_names_are_read_as_registry_specs():
    """The engine records made before the registry names (``distil-l1/q4q8``, ``ee-8/q4q8``) are read
    with the specs the benchmark writes now; a record already named by specs comes back equal."""
    from specdec.analysis.hardware import draft_cost_drafts

    old = {"drafts": {"distil-l1/q4q8": {"c": 0.1}, "ee-8/q4q8": {"c": 0.4}, "distil-l2/bfloat16": {"c": 1}}}
    new = draft_cost_drafts(old)
    assert new == {"draft:distil-l1/q4q8": {"c": 0.1}, "early-exit:8/q4q8": {"c": 0.4},
                   "draft:distil-l2/bfloat16": {"c": 1}}  # fmt: skip
    assert draft_cost_drafts({"drafts": new}) == new and draft_cost_drafts(None) == {}
