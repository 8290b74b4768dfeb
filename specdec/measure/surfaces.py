"""Cost surfaces: the time of ONE forward over k new tokens per sequence, b sequences, on a cached context.

Every surface here is timed by the one T(k) loop, :func:`specdec.measure.core.time_forwards`
(the cache cut back after every call, outside the clock, and its length checked):

* :func:`cost_surface` -- T(b, k) of a transformers model by the wall clock between two device
  synchronisations, for a grid of (b, k); T(1, 1) is the plain decode step and T(1, k) / T(1, 1)
  the verify-cost curve of Theorem 3.8.
* :func:`kernel_seconds` -- the GPU's busy time per forward call: the sum of its kernels'
  durations (torch.profiler) around the same loop, for any session; :func:`kernel_time_surface`
  is that for the grid of a transformers model.
* :func:`engine_forward_times` -- T(1, k) through the engine's own
  :class:`~specdec.engine.lm.CachedLM`.

Everything is eager Hugging Face transformers (attention "sdpa"), no CUDA graphs, no compilation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

import numpy as np

from specdec.measure.core import summarize_times, sync_hook, time_forwards
from specdec.measure.runner import Deadline

__all__ = [
    "B1_EXTRA_KS",
    "GRID_BATCHES",
    "GRID_KS",
    "cost_surface",
    "engine_forward_times",
    "kernel_seconds",
    "kernel_time_surface",
]


#: Batch sizes b and tokens per sequence k of the cost surface T(b, k).
GRID_BATCHES = (1, 2, 4, 8, 16, 32, 64)
GRID_KS = (1, 2, 3, 4, 5, 6, 8)
#: Extra k at b = 1 only: the verify-cost curve T(k)/T(1) up to k = 32.
B1_EXTRA_KS = (7, 10, 12, 16, 20, 24, 32)


def cost_surface(
    model: Any,
    *,
    batches: Iterable[int] = GRID_BATCHES,
    ks: Iterable[int] = GRID_KS,
    b1_extra_ks: Iterable[int] = B1_EXTRA_KS,
    context: int = 128,
    repeats: int = 20,
    warmup: int = 3,
    seed: int = 0,
    deadline: Deadline | None = None,
    on_block: Callable[[dict[str, Any]], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """T(b, k): one forward over k new tokens per sequence, b sequences, on a cache of ``context`` tokens.

    For each b (in order): one prefill of b random sequences of ``context`` tokens, then
    ``warmup`` untimed and ``repeats`` timed passes over the ks (a fresh seeded order each
    pass, so drift affects every k alike); b = 1 also gets ``b1_extra_ks``. A timed call is the
    forward alone, every position's logits included (a verify pass needs every row), between
    two device synchronisations; the cache is cropped back to ``context`` after each call,
    outside the clock, and its length checked. The deadline is checked before each b: the
    batches it leaves out are listed in ``skipped``. ``on_block`` gets the result so far after
    each b (to save it). Cells: b, k, the median / quartiles / IQR / samples of the time,
    ``per_token_s`` (median / (b k)), ``ratio_to_k1`` (median over T(b, 1)) and
    ``cache_len_after`` (the cache's length after the cell's last crop: ``context``).
    """
    import torch

    from specdec.engine.lm import TensorSession

    batches, ks, extra = tuple(batches), tuple(ks), tuple(b1_extra_ks)
    if not batches or not ks or 1 not in ks:
        raise ValueError(f"batches must be non-empty and ks must hold 1; got {batches}, {ks}")
    device = next(model.parameters()).device
    sync = sync_hook(device=device)
    vocab = int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    order = np.random.default_rng(seed)
    result: dict[str, Any] = {
        "context": context,
        "repeats": repeats,
        "warmup": warmup,
        "batches": list(batches),
        "ks": list(ks),
        "b1_extra_ks": list(extra),
        "timer": "time.perf_counter between device synchronisations",
        "cells": [],
        "skipped": [],
        "finite_logits": True,
    }
    for b in batches:
        cell_ks = tuple(sorted(set(ks) | set(extra))) if b == 1 else ks
        if deadline is not None and not deadline.allows():
            result["skipped"] += [{"b": b, "k": k} for k in cell_ks]
            continue
        block_start = time.monotonic()
        prefix = torch.randint(0, vocab, (b, context), generator=gen).to(device)
        new = torch.randint(0, vocab, (b, max(cell_ks)), generator=gen).to(device)
        session = TensorSession(model, prefix)
        result["finite_logits"] &= bool(torch.isfinite(session.prefill_logits).all())
        session.prefill_logits = None
        times = time_forwards(
            {"model": session},
            {"model": new},
            cell_ks,
            repeats=repeats,
            warmup=warmup,
            order="pairs",
            rng=order,
            synchronize=sync,
        )["model"]
        one = float(np.median(times[1]))
        for k in cell_ks:
            cell = {"b": b, "k": k, **summarize_times(times[k]).to_dict()}
            cell["per_token_s"] = cell["median_s"] / (b * k)
            cell["ratio_to_k1"] = cell["median_s"] / one
            cell["cache_len_after"] = int(session.cache.get_seq_length())
            result["cells"].append(cell)
        del session, prefix, new
        if log is not None:
            line = " ".join(f"k={k}:{1e3 * np.median(times[k]):.2f}" for k in cell_ks)
            log(f"  b={b:<3} ({time.monotonic() - block_start:.1f} s) ms  {line}")
        if on_block is not None:
            on_block(result)
    return result


def kernel_seconds(
    session: Any,
    new_ids: Any,
    ks: Sequence[int],
    *,
    calls: int = 3,
    synchronize: Callable[[], None] | None = None,
) -> dict[int, float]:
    """Per k: the device time of one forward over k new tokens, the sum of its kernels' durations.

    For each k, one untimed warm-up call (allocator, kernel selection), then ``calls`` calls of the
    one T(k) loop (:func:`specdec.measure.core.time_forwards` on ``session``, fed the first k of
    ``new_ids`` and cut back after each call) under ``torch.profiler`` with CUDA activity; the
    self device time of every profiled event, summed, divided by ``calls``. Needs a CUDA device
    (``synchronize``: its synchronise, so every call's kernels finish inside the profile).
    """
    from torch.profiler import ProfilerActivity, profile

    out = {}
    for k in ks:
        loop = partial(
            time_forwards, {"s": session}, {"s": new_ids}, [k], order="fixed", synchronize=synchronize
        )
        loop(repeats=0, warmup=1)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            loop(repeats=calls)
        out[k] = _device_us(prof) / calls / 1e6
    return out


def _device_us(prof: Any) -> float:
    """The self device time of all of a profile's events, in microseconds (torch 2.x's names)."""
    total = 0.0
    for evt in prof.key_averages():
        value = getattr(evt, "self_device_time_total", None)
        if value is None:
            value = getattr(evt, "self_cuda_time_total", 0.0)
        total += float(value)
    return total


def kernel_time_surface(
    model: Any,
    *,
    batches: Iterable[int] = (1, 4, 16, 64),
    ks: Iterable[int] = (1, 2, 4, 8),
    b1_extra_ks: Iterable[int] = (3, 5, 6, 12, 16, 32),
    context: int = 128,
    calls: int = 3,
    seed: int = 0,
    deadline: Deadline | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The GPU's busy time per forward call over a (b, k) grid: :func:`kernel_seconds` of a model.

    Eager transformers launches hundreds of small kernels per call; when the CPU cannot
    launch them as fast as the GPU runs them, the wall clock of :func:`cost_surface` measures
    the launcher, not the hardware. The kernels' own time is what a launch-free engine
    (CUDA graphs, a compiled step) approaches: the hardware's T(b, k). Same set-up as
    :func:`cost_surface` (a cached context of ``context`` random tokens per sequence, every row's
    logits, the cache cut back after each call). Needs a CUDA device.
    """
    import torch

    from specdec.engine.lm import TensorSession

    device = next(model.parameters()).device
    if device.type != "cuda":
        raise ValueError(f"kernel_time_surface needs a model on a CUDA device; got {device}")
    sync = sync_hook(device=device)
    vocab = int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    batches, ks, extra = tuple(batches), tuple(ks), tuple(b1_extra_ks)
    result: dict[str, Any] = {
        "context": context,
        "calls": calls,
        "timer": "sum of self device time of all profiled events (torch.profiler, CUDA activity) / calls",
        "cells": [],
        "skipped": [],
    }
    for b in batches:
        cell_ks = tuple(sorted(set(ks) | set(extra))) if b == 1 else ks
        if deadline is not None and not deadline.allows():
            result["skipped"] += [{"b": b, "k": k} for k in cell_ks]
            continue
        prefix = torch.randint(0, vocab, (b, context), generator=gen).to(device)
        new = torch.randint(0, vocab, (b, max(cell_ks)), generator=gen).to(device)
        session = TensorSession(model, prefix)
        session.prefill_logits = None
        per_call = kernel_seconds(session, new, cell_ks, calls=calls, synchronize=sync)
        result["cells"] += [{"b": b, "k": k, "kernel_s": per_call[k]} for k in cell_ks]
        del session, prefix, new
        if log is not None:
            log(f"  kernels b={b:<3} ms  {' '.join(f'k={k}:{1e3 * per_call[k]:.2f}' for k in cell_ks)}")
    return result


def engine_forward_times(
    model: Any, *, context: int = 128, ks: Iterable[int] = (1, 4, 8), repeats: int = 20, warmup: int = 3
) -> dict[str, Any]:
    """T(1, k) through the engine's :class:`~specdec.engine.lm.CachedLM` (tensor building, float32 logits).

    What ``autoregressive`` (k = 1) and ``speculative`` (k = gamma + 1) pay per target call,
    on a cache of ``context`` random tokens, cropped back after each call.
    """
    import torch

    from specdec.engine.lm import CachedLM

    lm = CachedLM(model)
    gen = torch.Generator().manual_seed(1)
    ks = tuple(ks)
    ids = torch.randint(0, lm.vocab_size, (context + max(ks),), generator=gen).tolist()
    lm.forward(ids[:context], keep=1)
    times = time_forwards(
        {"lm": lm},
        {"lm": ids[context:]},
        ks,
        repeats=repeats,
        warmup=warmup,
        order="fixed",
        synchronize=sync_hook(device=lm.device),
    )["lm"]
    cells = [{"k": k, **summarize_times(times[k]).to_dict()} for k in ks]
    return {"context": context, "path": "specdec.engine.lm.CachedLM.forward", "cells": cells}
