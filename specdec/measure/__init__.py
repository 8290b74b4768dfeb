"""Measurement: the one timer and T(k) loop (:mod:`.core`), the paired-run driver, the roofline, the mode
probe, alpha by teacher forcing, the engine benchmark and the GPU records."""

from typing import Any as _Any


def __getattr__(name: str) -> _Any:
    """The public names of the flat module specdec/measure.py (now :mod:`.core`), still importable
    from here, their old path."""
    import importlib

    module = importlib.import_module("specdec.measure.core")
    if name in getattr(module, "__all__", ()):
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
