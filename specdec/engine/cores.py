"""One owner of the cores: while an engine whose forward runs on threads of its own decodes, torch
runs on one thread.

Two engines compute on threads that torch does not own: the lean engine's ``"q4q8"`` C forward (its
own pool, ``threads`` of them) and llama.cpp (``n_threads``); each marks itself ``runs_outside_torch``.
Their decoding loops still call torch between forwards (warp, sampling, argmax, verify), and torch's
OpenMP workers spin for a while after each op on several threads, holding the very cores the C pool
needs next. On a 2-core Xeon (AVX-512 + VNNI + AMX) the README's ``lean_model(t.model, "q4q8")``
decoded at 109 tok/s with torch at its default two threads and at 187 with torch on one (issue 40).

So this module decides, in one place, how many threads torch has while such an engine decodes:

* :func:`torch_threads_for` -- a context manager: torch on one thread inside it when the model runs
  outside torch, the caller's count restored after; any other model (a torch mode, transformers):
  nothing changes;
* :func:`engine_owns_cores` -- the decorator every decoding loop wears
  (:mod:`specdec.engine.decoding`, :mod:`specdec.engine.batched`): the loop runs inside
  :func:`torch_threads_for` of its target, so every path that decodes (the builder's engines,
  :func:`specdec.measure.modes.lean_model`, the command line, the runner's timed generations) gets it
  without doing anything.

Memory, the other thing a decoding loop shares with the process: a step allocates and frees tensors of
a few hundred kilobytes (the logits, and at temperature 1 warp's and the draw's rows), above glibc's
thresholds for giving memory back to the OS, so each step faulted fresh pages in again: 8 minor page
faults a token greedy and 22 at temperature 1 in plain decoding on the 2-core EPYC, 34 in a do-no-harm
loop that never drafted (dev probe), a percent or two of a step and not the same for the two loops.
:func:`keep_freed_memory` (glibc's ``mallopt``: no trimming below 256 MiB, no mmap below 32 MiB; once
per process, where the C library is glibc) runs on entering :func:`torch_threads_for`, so every loop
and timing that does keeps its freed memory for the next step; after a first generation both loops
fault about none. It changes the whole process's allocator for good (up to 256 MiB of freed memory
stays with it); ``SPECDEC_KEEP_FREED_MEMORY=0`` turns it off, and a process whose environment sets
glibc's own knobs (``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``GLIBC_TUNABLES``) keeps
them. Timings made before commit b825da2 ran with glibc's defaults.

The timing loops that call bare forwards (:func:`specdec.measure.core.time_forwards`' ``around``, the
mode probe, the verify curves) enter :func:`torch_threads_for` themselves. The engine's own thread count
is untouched: it is the C pool's (or llama.cpp's), set when the engine is opened.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

__all__ = ["engine_owns_cores", "keep_freed_memory", "runs_outside_torch", "torch_threads_for"]

F = TypeVar("F", bound=Callable[..., Any])


_MEMORY: dict[str, bool] = {}  # keep_freed_memory's outcome, once per process

# glibc's mallopt parameters (malloc.h) and the values set: freed memory up to 256 MiB stays with the
# process, and blocks up to 32 MiB (glibc's largest mmap threshold on 64-bit) come from the heap
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_TRIM_BYTES, _MMAP_BYTES = 256 << 20, 32 << 20


#: glibc's own allocator knobs: a process whose environment sets one keeps its choice
_GLIBC_KNOBS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES")


def keep_freed_memory() -> bool:
    """Where the C library is glibc, ask it (``mallopt``) to keep freed memory for the process instead of
    returning it to the OS between decoding steps (module docstring); once per process. True when both
    settings took; False where the C library is not glibc, where ``SPECDEC_KEEP_FREED_MEMORY=0`` or one
    of glibc's own knobs is set in the environment (nothing changed then), or where glibc refused the
    second setting (the first, the trim threshold, then stays)."""
    if "done" not in _MEMORY:
        import ctypes
        import os
        import platform

        ok = False
        wanted = os.environ.get("SPECDEC_KEEP_FREED_MEMORY", "1") != "0"
        if wanted and platform.libc_ver()[0] == "glibc" and not any(k in os.environ for k in _GLIBC_KNOBS):
            try:
                libc = ctypes.CDLL(None)  # the process's own C library, already loaded (no ldconfig)
                ok = bool(libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_BYTES)) and bool(
                    libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_BYTES)
                )
            except (OSError, AttributeError):
                ok = False
        _MEMORY["done"] = ok
    return _MEMORY["done"]


def runs_outside_torch(model: Any) -> bool:
    """True when ``model``'s forward computes on threads of its own, not torch's (a model marked
    ``runs_outside_torch``: a ``"q4q8"`` :class:`~specdec.engine.lean.LeanLlama`, llama.cpp)."""
    return bool(getattr(model, "runs_outside_torch", False))


@contextlib.contextmanager
def torch_threads_for(model: Any) -> Iterator[None]:
    """Run torch on one thread inside the block when ``model`` runs outside torch
    (:func:`runs_outside_torch`), and give the caller's count back after it; any other model:
    nothing changes. Nested blocks are free (the inner one finds torch on one thread already). Freed
    memory stays with the process from the first block on (:func:`keep_freed_memory`)."""
    keep_freed_memory()
    if not runs_outside_torch(model) or torch.get_num_threads() == 1:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def engine_owns_cores(loop: F) -> F:
    """Run the decoding ``loop`` (whose first argument is the target) inside
    :func:`torch_threads_for` of its target: the engine's threads have the cores while it decodes."""

    @functools.wraps(loop)
    def run(target: Any, *args: Any, **kwargs: Any) -> Any:
        with torch_threads_for(target):
            return loop(target, *args, **kwargs)

    return run  # type: ignore[return-value]
