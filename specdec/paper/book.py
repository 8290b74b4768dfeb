"""What the book's notebooks share: portable values and the one glue helper, :func:`keep`.

A stored notebook output is compared by nbval with the output of a rerun on the reader's
machine. numpy's vectorised ``exp``/``log``/``power`` and torch's CPU kernels dispatch on the
CPU's SIMD level (AVX2, AVX-512, or none), so the last bits of a float differ between CPUs:
a value printed at full precision, or glued as ``1.392211162481``, fails on some machine.
The rule of the book is therefore: **every float that a stored output shows is rounded to
:data:`SIGNIFICANT` significant digits** (cross-CPU noise seen so far is below 1e-7
relative; the prose never formats a glued value with more digits than that), and counts
that depend on comparing floats are decided by exact arithmetic or by a tolerance far from
the data.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from specdec.theory.checks import check_int

__all__ = ["SIGNIFICANT", "keep", "portable"]

#: Significant digits of every float glued or printed by a notebook.
SIGNIFICANT = 6


def portable(value: Any, sig: int = SIGNIFICANT) -> Any:
    """``value`` as a plain Python object whose text is the same on every CPU.

    Floats (Python or numpy) are rounded to ``sig`` significant digits; numpy integers and
    booleans become ``int``/``bool``; strings and other objects pass unchanged. Non-finite
    floats stay as they are.
    """
    check_int("sig", sig, low=1, high=15)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        x = float(value)
        if x == 0.0 or not math.isfinite(x):
            return x
        return float(f"{x:.{sig - 1}e}")
    return value


def keep(key: str, value: Any, sig: int = SIGNIFICANT) -> None:
    """Glue ``value`` for the prose under ``key``; nothing is displayed, nothing returned.

    The value goes through :func:`portable` first, so a glued float carries ``sig``
    significant digits whatever the machine. Needs ``myst_nb`` (the book's extra).
    """
    from myst_nb import glue

    if not isinstance(key, str) or not key:
        raise ValueError(f"key must be a non-empty string; got {key!r}")
    glue(key, portable(value, sig), display=False)
