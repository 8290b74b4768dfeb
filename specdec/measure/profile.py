"""Where one forward's time goes: the torch profiler's buckets, and the C forwards' own phase clocks.

* :func:`profile_step` -- one forward under ``torch.profiler``, its self CPU time grouped into
  buckets (linear layers, attention, other ops, framework overhead), and by the blocks of the
  model when the forward is labelled (:func:`label_modules`).
* :func:`profile_native_step` -- the same result for the C forwards (:mod:`specdec.engine.native`),
  from the phase clocks they keep.

Both time their calls with the one timer, :func:`specdec.measure.core.time_once`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

import numpy as np

from specdec.measure.core import time_once
from specdec.theory.checks import check_int

__all__ = [
    "BUCKETS",
    "LABELS",
    "LLAMA_LABELS",
    "label_modules",
    "profile_native_step",
    "profile_step",
    "timed_call",
]

#: The ``record_function`` labels :func:`profile_step` buckets by (see :func:`label_modules`).
LABELS = ("embedding", "attention", "mlp", "norm", "lm_head")

#: Op-name buckets: an op belongs to the first bucket one of whose names it contains
#: (``aten::`` names; ``matmul`` catches ``aten::matmul``; ``bmm`` is in attention, because a
#: Llama's linear layers call ``mm``/``addmm`` and its eager attention calls ``bmm``).
BUCKETS: dict[str, tuple[str, ...]] = {
    "attention": ("scaled_dot_product", "softmax", "bmm", "flash_attention", "baddbmm"),
    "linear": (
        "aten::mm",
        "aten::addmm",
        "aten::linear",
        "aten::matmul",
        "_weight_int4pack_mm",
        "_weight_int8pack_mm",
        "mkldnn_linear",
        "onednn",
    ),
}

#: Module-name suffixes -> labels for a transformers Llama (``model.layers.3.self_attn``...).
LLAMA_LABELS: dict[str, str] = {
    "embed_tokens": "embedding",
    "self_attn": "attention",
    "mlp": "mlp",
    "input_layernorm": "norm",
    "post_attention_layernorm": "norm",
    "norm": "norm",
    "lm_head": "lm_head",
}


@contextlib.contextmanager
def label_modules(model: Any, labels: Mapping[str, str] | None = None) -> Iterator[list[str]]:
    """Wrap each labelled submodule's forward in ``torch.profiler.record_function(label)``.

    ``labels`` maps the last component of a module's name to a label in :data:`LABELS`
    (default :data:`LLAMA_LABELS`: ``embed_tokens``, ``self_attn``, ``mlp``, the norms,
    ``lm_head``). Forward hooks open and close the scopes; they are removed on exit. Yields
    the names of the labelled modules. Note that ``attention`` then holds the whole attention
    block (q/k/v/o projections included), ``mlp`` the whole MLP.
    """
    import torch

    table = dict(LLAMA_LABELS if labels is None else labels)
    bad = {v for v in table.values() if v not in LABELS}
    if bad:
        raise ValueError(f"labels must map to {', '.join(map(repr, LABELS))}; got {sorted(bad)}")
    stack: list[Any] = []
    handles = []
    named = []

    def pre(label: str) -> Callable[..., None]:
        def hook(module: Any, args: Any) -> None:
            scope = torch.profiler.record_function(label)
            scope.__enter__()
            stack.append(scope)

        return hook

    def post(module: Any, args: Any, output: Any) -> None:
        if stack:
            stack.pop().__exit__(None, None, None)

    for name, module in model.named_modules():
        label = table.get(name.rsplit(".", 1)[-1])
        if label is None or not name:
            continue
        handles.append(module.register_forward_pre_hook(pre(label)))
        handles.append(module.register_forward_hook(post))
        named.append(name)
    try:
        yield named
    finally:
        for h in handles:
            h.remove()
        while stack:  # a forward that raised left its scopes open
            stack.pop().__exit__(None, None, None)


def _op_bucket(name: str) -> str | None:
    for bucket, keys in BUCKETS.items():
        if any(key in name for key in keys):
            return bucket
    return None


def timed_call(
    forward_fn: Callable[[int], object], k: int, reset: Callable[[], object] | None = None
) -> Callable[[], float]:
    """A function that runs ``forward_fn(k)`` once and returns its wall time in seconds, then
    runs ``reset`` (if given) outside the clock; shared by the profilers here and in
    :mod:`specdec.engine.native`."""

    def call() -> float:
        elapsed = time_once(partial(forward_fn, k))
        if reset is not None:
            reset()
        return elapsed

    return call


def profile_step(
    forward_fn: Callable[[int], object],
    k: int = 1,
    repeats: int = 5,
    *,
    warmup: int = 1,
    reset: Callable[[], object] | None = None,
    top: int = 10,
) -> dict[str, Any]:
    """Where one forward's CPU time goes: ``forward_fn(k)`` under ``torch.profiler``, bucketed.

    ``forward_fn(k)`` runs one forward over ``k`` new tokens (e.g. a model fed ``k`` tokens
    on top of a KV cache); ``reset``, if given, runs after each call outside the clock and the
    profiler (e.g. cropping the cache back, so every call sees the same cache length). Each of the
    ``repeats`` calls (after ``warmup`` unprofiled ones) is profiled alone (CPU activity).
    Times are per call, in milliseconds, averaged over the profiled calls: ``wall_ms`` is the
    mean wall time of the profiled calls (the buckets add up to it), ``wall_ms_unprofiled``
    the median of as many calls without the profiler (the profiler's own cost shows in the
    difference).

    Buckets, from the operators' *self* CPU time (time in an op, not in the ops it calls),
    each op counted in the bucket of its nearest ancestor-or-self that has one:

    * ``by_op_ms``: ``linear`` (mm, addmm, linear, matmul, the int4/int8 weight-only kernels),
      ``attention`` (scaled_dot_product*, softmax, bmm), ``other ops`` (everything else:
      norms, rotary, activations, copies, indexing); :data:`BUCKETS` lists the names. By op
      name the LM head is a linear layer like the others.
    * ``by_label_ms`` (None if the forward opened none of these scopes): ops under a
      ``record_function`` scope named in :data:`LABELS` (``lm_head``, ``attention``, ``mlp``,
      ``norm``, ``embedding``; :func:`label_modules` opens them on a transformers Llama) go to
      that label, the rest to ``other ops``.
    * ``framework overhead`` (in both): mean wall time minus the ops' summed self time --
      Python, module calls and hooks, and whatever the profiler itself adds (0 if negative).

    ``buckets_ms`` is ``by_label_ms`` when there are labels, else ``by_op_ms``. ``top_ops``
    lists the ``top`` ops by self time.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not callable(forward_fn):
        raise ValueError(f"forward_fn must be callable; got {type(forward_fn).__name__}")
    k = check_int("k", k, low=1)
    repeats = check_int("repeats", repeats, low=1)
    warmup = check_int("warmup", warmup, low=0)
    top = check_int("top", top, low=0)
    if reset is not None and not callable(reset):
        raise ValueError(f"reset must be callable or None; got {type(reset).__name__}")
    call = timed_call(forward_fn, k, reset)
    for _ in range(warmup):
        call()
    unprofiled = [call() for _ in range(repeats)]
    walls: list[float] = []
    by_op: dict[str, float] = dict.fromkeys(("linear", "attention", "other ops"), 0.0)
    by_label: dict[str, float] = dict.fromkeys((*LABELS, "other ops"), 0.0)
    ops: dict[str, float] = {}
    labelled = False
    for _ in range(repeats):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            walls.append(time_once(partial(forward_fn, k)))
        if reset is not None:
            reset()
        for event in prof.events():
            if getattr(event, "is_user_annotation", False) or event.name in LABELS:
                labelled = labelled or event.name in LABELS
                continue
            self_us = float(event.self_cpu_time_total)
            ops[event.name] = ops.get(event.name, 0.0) + self_us
            op_bucket, label, node = None, None, event
            while node is not None:
                if label is None and node.name in LABELS:
                    label = node.name
                if op_bucket is None and node.name not in LABELS:
                    op_bucket = _op_bucket(node.name)
                node = node.cpu_parent
            by_op[op_bucket or "other ops"] += self_us
            by_label[label or "other ops"] += self_us
    scale = 1e-3 / repeats  # microseconds summed over the repeats -> milliseconds per call
    op_ms = sum(ops.values()) * scale
    wall_ms = 1e3 * float(np.mean(walls))
    overhead = max(0.0, wall_ms - op_ms)
    by_op_ms = {b: v * scale for b, v in by_op.items()} | {"framework overhead": overhead}
    by_label_ms = (
        ({b: v * scale for b, v in by_label.items()} | {"framework overhead": overhead}) if labelled else None
    )
    top_ops = sorted(ops.items(), key=lambda kv: -kv[1])[:top]
    return {
        "k": k,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "wall_ms": wall_ms,
        "wall_ms_unprofiled": 1e3 * float(np.median(unprofiled)),
        "ops_ms": op_ms,
        "bucketing": "labels" if labelled else "op names",
        "buckets_ms": by_label_ms if labelled else by_op_ms,
        "by_op_ms": by_op_ms,
        "by_label_ms": by_label_ms,
        "top_ops": [{"name": name, "self_ms": v * scale} for name, v in top_ops],
    }


def profile_native_step(
    forward_fn: Callable[[int], object],
    k: int = 1,
    repeats: int = 5,
    *,
    warmup: int = 1,
    reset: Callable[[], object] | None = None,
    clocks: Any,
    threads: int = 1,
) -> dict[str, Any]:
    """Where one C forward's time goes, from its own phase clocks (the torch profiler sees one call).

    The C counterpart of :func:`profile_step` (the C forwards only keep the clocks), with the same
    arguments and result keys: ``buckets_ms`` per call holds ``linear`` (the decoder's Q4_1 layers),
    ``lm_head`` (the Q8_0 head), ``attention`` (rotary, cache writes, attention), ``other ops``
    (embedding, norms, SiLU) and ``framework overhead`` (the call's wall time minus the phases:
    Python, ctypes, the session's bookkeeping); ``wall_ms_unprofiled`` is the median of as many
    calls with the clocks off. ``clocks``: the model's own clocks, a ``"q4q8"`` model's
    :class:`~specdec.engine.native.Q8Forward` (``model.q8_forward()``) or a ``"q4_1"`` model's
    :class:`~specdec.engine.native.PhaseClocks` (:func:`specdec.engine.leannative.phase_clocks`);
    ``threads``: what the record names.
    """
    for name, value, low in (("k", k, 1), ("repeats", repeats, 1), ("warmup", warmup, 0)):
        check_int(name, value, low=low)
    from specdec.engine.native import PHASES

    call = timed_call(forward_fn, k, reset)
    for _ in range(warmup):
        call()
    unprofiled = [call() for _ in range(repeats)]
    clocks.read_clocks()  # clears them
    clocks.set_profiling(True)
    try:
        walls = [call() for _ in range(repeats)]
        out = clocks.read_clocks()
    finally:
        clocks.set_profiling(False)
    phases = {name: 1e3 * out[i] / repeats for i, name in enumerate(PHASES)}
    wall_ms = 1e3 * float(np.mean(walls))
    buckets = phases | {"framework overhead": max(0.0, wall_ms - sum(phases.values()))}
    return {
        "k": k,
        "repeats": repeats,
        "threads": threads,
        "wall_ms": wall_ms,
        "wall_ms_unprofiled": 1e3 * float(np.median(unprofiled)),
        "bucketing": "C phase clocks",
        "buckets_ms": buckets,
        "top_ops": [],
    }
