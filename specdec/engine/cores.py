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

__all__ = ["engine_owns_cores", "runs_outside_torch", "torch_threads_for"]

F = TypeVar("F", bound=Callable[..., Any])


def runs_outside_torch(model: Any) -> bool:
    """True when ``model``'s forward computes on threads of its own, not torch's (a model marked
    ``runs_outside_torch``: a ``"q4q8"`` :class:`~specdec.engine.lean.LeanLlama`, llama.cpp)."""
    return bool(getattr(model, "runs_outside_torch", False))


@contextlib.contextmanager
def torch_threads_for(model: Any) -> Iterator[None]:
    """Run torch on one thread inside the block when ``model`` runs outside torch
    (:func:`runs_outside_torch`), and give the caller's count back after it; any other model:
    nothing changes. Nested blocks are free (the inner one finds torch on one thread already)."""
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
