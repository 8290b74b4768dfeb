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
