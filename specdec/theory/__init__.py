"""Theory (numpy only, no torch): the closed forms of Leviathan et al. (2023) (:mod:`.speedup`), the i.i.d.
model, Algorithm 1 on probability rows, draft-length policies, intervals, the one argument checker
and token comparisons."""

from typing import Any as _Any


def __getattr__(name: str) -> _Any:
    """The public names of the flat module specdec/theory.py (now :mod:`.speedup`), still importable
    from here, their old path."""
    import importlib

    module = importlib.import_module("specdec.theory.speedup")
    if name in getattr(module, "__all__", ()):
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
