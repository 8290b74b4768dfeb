"""A plain step's token choice between two C forwards: the greedy argmax and one draw from a row.

The decoding loop's plain step (:func:`specdec.engine.decoding.autoregressive`'s, and the speculative
loop's rounds with nothing to verify) runs between two C forwards, where each torch operation cost about
20 us and numpy's accumulate over a 49,152-entry row 0.35 ms (dev probes on a 2-core EPYC: the forward's
weight stream leaves the interpreter's, torch's and numpy's code and data cold). :func:`draw_at` draws
by :func:`specdec.theory.sampling.sample`'s rule (the first index whose running float64 sum exceeds
u times the total, one uniform from ``rng``) in C (``csrc/leanq8_sample.h``, ``specdec_sample_cdf``), or
by ``sample`` itself where the q4q8 library does not build. The C draw gives the rule's index always: a
vectorised sum in blocks decides where the rounding of any order of additions cannot move the index (the
header's proof: a margin of 8 (n + 1) 2^-53 times the total around u times the total), and the rule's own
running sum decides the rest (a uniform within the margin of a boundary, 4.4e-11 of the total for
49,152 entries; a row with a negative, infinite or NaN entry; a row shorter than 512); tested on uniforms
placed on the boundaries, where a version without the margin picks a neighbour (only the proof guards
the margin's size). ~12 us a draw over 49,152 entries warm on a 2-core EPYC Zen 4, against ~70-90 us for
the rule's running sums (dev timing, not a record). The greedy choice is
:func:`specdec.theory.sampling.argmax_at`.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Any

import numpy as np

from specdec.theory.sampling import float32_view, sample

__all__ = ["draw_at", "draw_row", "prepare_draw"]


@lru_cache(maxsize=1)
def _sample_cdf() -> Any:
    """leanq8's ``specdec_sample_cdf`` (ABI 13) declared, or None where the library does not build."""
    from specdec.engine import native

    if not native.available("q4q8"):
        return None
    function = native.library("q4q8").specdec_sample_cdf
    function.argtypes = [
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.POINTER(ctypes.c_double),
        ctypes.POINTER(ctypes.c_int32),
    ]  # fmt: skip
    function.restype = ctypes.c_int64
    return function


def prepare_draw() -> bool:
    """Load the C draw (building the q4q8 library on first use) before a generation's timers start;
    whether it is there (else :func:`draw_at` falls back to :func:`~specdec.theory.sampling.sample`)."""
    return _sample_cdf() is not None


def draw_at(probs: Any, row: int, rng: np.random.Generator) -> int:
    """One index drawn from row ``row`` of ``probs`` (non-negative weights, 2-D: a torch tensor or numpy
    array) with one uniform from ``rng``: ``sample(probs[row], rng)``, the same index. A float32 CPU row
    goes to C, read in place; anything else to :func:`~specdec.theory.sampling.sample`. A row whose total
    is not positive raises ValueError, as ``sample`` does (here after its uniform was drawn)."""
    values, function = float32_view(probs), _sample_cdf()
    if function is None or values is None:  # off the CPU, with grad, another dtype: sample's own path
        return sample(probs[row], rng)
    x = np.ascontiguousarray(values[row])
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"probs must be 2-D with non-empty rows; got shape {values.shape}")
    return _draw_c(function, x, rng)


def draw_row(row: Any, rng: np.random.Generator) -> int:
    """One index drawn from ``row`` (non-negative weights, one row: a torch tensor or numpy array) with
    one uniform from ``rng``: ``sample(row, rng)``, the same index, in C for a float32 CPU row. The last
    draw of a speculative round (:func:`specdec.theory.treeverify.verify_tree`'s ``draw``)."""
    values, function = float32_view(row), _sample_cdf()
    if function is None or values is None:
        return sample(row, rng)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"row must be one non-empty row (1-D); got shape {values.shape}")
    return _draw_c(function, np.ascontiguousarray(values), rng)


def _draw_c(function: Any, x: np.ndarray, rng: np.random.Generator) -> int:
    """The C draw on a contiguous float32 row, with sample's errors and guard."""
    total = ctypes.c_double()
    idx = int(function(x.ctypes.data, x.size, rng.random(), ctypes.byref(total), None))
    if not total.value > 0:
        raise ValueError("cannot sample from a row whose total mass is 0")
    if idx >= x.size:  # never reached for u < 1; sample's guard
        idx = int(np.flatnonzero(x > 0)[-1])
    return idx
