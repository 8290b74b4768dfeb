"""specdec.enginebench: which engines a run measures."""

from __future__ import annotations

import pytest

from specdec.enginebench import ALL_ENGINES, VARIANTS, resolve_engines
from specdec.lean import int4_supported


def test_variants_run_only_when_named():
    default = resolve_engines(None, log=lambda line: None)
    assert not set(default) & set(VARIANTS)
    assert set(default) <= set(ALL_ENGINES)
    if int4_supported():
        named = resolve_engines("lean-int4,lean-int4-bf16head,lean-int4-blockattn")
        assert named == ("lean-int4", "lean-int4-bf16head", "lean-int4-blockattn")


def test_unknown_engines_are_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="lean-int4-bf16head"):
        resolve_engines("lean-int8")


def test_int4_engines_named_without_the_kernels_are_refused(monkeypatch):
    import specdec.lean

    monkeypatch.setattr(specdec.lean, "int4_supported", lambda: False)
    with pytest.raises(ValueError, match="lacks the CPU int4 kernels"):
        resolve_engines("lean-float32,lean-int4-bf16head")
    assert "lean-int4" not in resolve_engines(None, log=lambda line: None)
    said = []
    assert resolve_engines("lean-float32,lean-int4", log=said.append, strict=False) == ("lean-float32",)
    assert said and "lean-int4" in said[0]


def test_a_default_list_leaves_out_what_cannot_run(monkeypatch):
    from specdec import llamacpp, native

    monkeypatch.setattr(native, "available", lambda: False)
    monkeypatch.setattr(native, "unavailable_reason", lambda: "no C compiler (test)")
    monkeypatch.setattr(llamacpp, "available", lambda: False)
    with pytest.raises(ValueError, match="no C compiler"):
        resolve_engines("lean-float32,lean-q4_1")
    with pytest.raises(ValueError, match="llama_cpp is not importable"):
        resolve_engines("llama.cpp")
    said = []
    kept = resolve_engines("lean-float32,lean-q4_1,llama.cpp", log=said.append, strict=False)
    assert kept == ("lean-float32",)
    assert any("no C compiler" in line for line in said) and any("llama_cpp" in line for line in said)
