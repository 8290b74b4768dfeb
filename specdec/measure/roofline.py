"""The roofline of the running machine, what one forward of a model costs on it, and where it goes.

A decode step reads every weight once to produce one token; a verify call over k tokens reads
them once too, and does k times the arithmetic. The roofline model turns that into times:
a call takes at least ``bytes / bandwidth`` and at least ``flops / throughput``, and the
larger of the two is its prediction. Below the *ridge point* (FLOPs per byte =
throughput / bandwidth) a call is bound by memory and more tokens per call are nearly free;
above it they cost in proportion. Every number here is measured on the running machine,
never carried over from another one.

Measuring (torch, CPU; each call sets torch's intra-op threads for its duration and restores
them afterwards):

* :func:`measure_bandwidth` -- memory bandwidth in GB/s (1 GB = 1e9 bytes) by two methods, a
  read stream (``x.sum()`` over a float32 array far larger than the last-level cache) and a
  copy (``y.copy_(x)``, counted as read + write).
* :func:`measure_matmul` -- matmul throughput in GFLOP/s per dtype (square n x n by n x n,
  2 n^3 FLOPs), and the decode-shaped product: M = 1 or 4 rows by a weight matrix several
  times larger than the last-level cache, which streams the weights from DRAM as a decode
  step does.
* :func:`machine_roofline` -- both, for one thread and for all threads, with the ridge point
  per dtype and the CPU's identity (name, caches, torch's and numpy's SIMD levels).

Accounting (pure arithmetic, no torch):

* :func:`step_cost` -- the bytes moved and the FLOPs of one forward over k new tokens per
  sequence on a KV cache of ``context`` tokens, for a Llama-shaped config, per part
  (embedding, attention projections, attention over the cache, MLP, norms, LM head) and per
  weight format (:data:`WEIGHT_FORMATS`: float32, bfloat16, int8, int4 group-32, GGUF blocks).
* :func:`predict_step_time` -- the roofline time of such a forward and the bound that sets it;
  :func:`predict_verify_curve` -- the predicted T(k)/T(1).

Profiling:

* :func:`profile_step` -- one forward under ``torch.profiler``, its self CPU time grouped into
  buckets (linear layers, attention, other ops, framework overhead), and by the blocks of the
  model when the forward is labelled (:func:`label_modules`).

A *roofline entry*, what the predictions take, is a dict with ``bandwidth_gbps`` (a number)
and ``peak_gflops`` (dtype name -> number); :func:`machine_roofline` returns one per thread
count under ``"rooflines"``, and a hand-made one (another machine's published numbers, a GPU's
from :func:`specdec.measure.gpurecord.device_roofline`) works as well.

No function here asserts or assumes a speed; timing thresholds belong in benchmarks.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import numbers
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from specdec.engine.machine import cpu_flags
from specdec.measure.core import cpu_name, environment, summarize_times, time_once
from specdec.theory.checks import check_int

__all__ = [
    "BUCKETS",
    "LABELS",
    "MATMUL_DTYPES",
    "WEIGHT_FORMATS",
    "WeightFormat",
    "cpu_flags",
    "cpu_identity",
    "label_modules",
    "machine_roofline",
    "measure_bandwidth",
    "measure_matmul",
    "numpy_simd",
    "predict_step_time",
    "predict_verify_curve",
    "profile_native_step",
    "profile_step",
    "step_cost",
]

GB = 1e9  # bytes per GB: bandwidths are in GB/s = 1e9 bytes per second
MIB = 2**20

#: The dtypes :func:`measure_matmul` times, by name.
MATMUL_DTYPES = ("float32", "bfloat16", "float16")


# --------------------------------------------------------------------------- arguments
def _check_positive(name: str, value: Any) -> float:
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real)
    if ok and math.isfinite(value) and value > 0:
        return float(value)
    raise ValueError(f"{name} must be a finite number > 0; got {value!r}")


def _available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _check_threads(threads: Any) -> int:
    """``None``: torch's current intra-op thread count; else an integer in 1..available CPUs."""
    if threads is None:
        import torch

        return torch.get_num_threads()
    return check_int("threads", threads, low=1, high=max(_available_cpus(), 1))


def _check_dtype(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in MATMUL_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(map(repr, MATMUL_DTYPES))}; got {dtype!r}")
    return name


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Set torch's intra-op thread count to ``n`` for the block; restore it afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _time(fn: Callable[[], object], repeats: int, budget_s: float) -> dict[str, Any]:
    """One warm-up call (timed, not kept), then up to ``repeats`` timed calls within ``budget_s``.

    A slow call is not repeated past the budget: at least one timed call always runs, so a
    call slower than the budget costs about twice its time. Returns the median and quartiles
    in seconds and the number of timed calls (``timed_calls``).
    """
    first = time_once(fn)
    n = repeats
    if first > 0 and math.isfinite(budget_s):
        n = max(1, min(repeats, int(budget_s / first) - 1))
    t = summarize_times(time_once(fn) for _ in range(n))
    return {"median_s": t.median_s, "iqr_s": t.iqr_s, "timed_calls": t.n, "warmup_s": first}


# --------------------------------------------------------------------------- the machine
def _cache_sizes() -> dict[str, int]:
    """CPU cache sizes in bytes from Linux sysfs (cpu0), e.g. ``{"L1d": ..., "L2": ..., "L3": ...}``."""
    out: dict[str, int] = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        entries = sorted(base.glob("index*"))
    except OSError:
        return out
    for entry in entries:
        try:
            level = (entry / "level").read_text().strip()
            kind = (entry / "type").read_text().strip()
            size = (entry / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        try:
            value = int(size.rstrip("KMG")) * scale
        except ValueError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        out[f"L{level}{suffix}"] = value
    return out


def _last_level_cache() -> int | None:
    """The largest cache's size in bytes, or None where the OS does not say."""
    sizes = _cache_sizes()
    return max(sizes.values()) if sizes else None


def numpy_simd() -> dict[str, Any]:
    """numpy's SIMD baseline and the dispatch targets this CPU supports (numpy's own detection)."""
    try:
        from numpy._core import _multiarray_umath as umath  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        try:
            from numpy.core import _multiarray_umath as umath
        except ImportError:
            return {"baseline": None, "dispatch": None}
    features = getattr(umath, "__cpu_features__", {})
    return {
        "baseline": list(getattr(umath, "__cpu_baseline__", [])),
        "dispatch": [f for f in getattr(umath, "__cpu_dispatch__", []) if features.get(f)],
    }


def cpu_identity() -> dict[str, Any]:
    """What the CPU is and what it offers: name, CPUs, caches, SIMD levels, BF16 instructions.

    ``torch_capability`` is the SIMD level torch's CPU kernels dispatch to
    (``torch.backends.cpu.get_cpu_capability()``, e.g. ``"AVX2"``, ``"AVX512"``);
    ``numpy_simd`` is numpy's baseline and supported dispatch targets; ``bf16_instructions``
    says whether ``/proc/cpuinfo`` lists native BF16 arithmetic (``avx512_bf16``, ``amx_bf16``
    on x86; ``bf16`` on Arm), None where there is no such file. Cache sizes are in bytes.
    """
    import torch

    flags = cpu_flags()
    bf16 = sorted(flags & {"avx512_bf16", "amx_bf16", "bf16"})
    return {
        "name": cpu_name(),
        "cpu_count": os.cpu_count(),
        "available_cpus": _available_cpus(),
        "caches_bytes": _cache_sizes(),
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "numpy_simd": numpy_simd(),
        "bf16_instructions": (bool(bf16) if flags else None),
        "bf16_flags": bf16,
        "avx512": (any(f.startswith("avx512") for f in flags) if flags else None),
        "avx2": ("avx2" in flags if flags else None),
    }


# --------------------------------------------------------------------------- bandwidth
def measure_bandwidth(threads: int | None = None, size_mib: int = 256, repeats: int = 5) -> dict[str, Any]:
    """Memory bandwidth of the running machine, in GB/s (1e9 bytes per second), by two methods.

    * ``read``: ``x.sum()`` over a float32 array of ``size_mib`` MiB; bytes moved = its size.
      Read-dominated, as a decode step's weight stream is: this is the roof the predictions use.
    * ``copy``: ``y.copy_(x)`` between two such arrays; bytes counted = 2 x size (one read,
      one write). A CPU that allocates a cache line before writing it moves a third share it
      is not credited with, so ``copy`` is usually below ``read``.

    Both arrays are written before timing (their pages are mapped). Each method runs one
    warm-up call, then ``repeats`` timed calls; the result is the median. Torch's intra-op
    threads are set to ``threads`` (default: the current count) during the measurement and
    restored afterwards. ``exceeds_llc`` says whether the array is at least 4 times the
    last-level cache (false means the number may measure a cache, not DRAM).
    """
    import torch

    n_threads = _check_threads(threads)
    size_mib = check_int("size_mib", size_mib, low=1)
    repeats = check_int("repeats", repeats, low=1)
    numel = size_mib * MIB // 4
    nbytes = numel * 4
    llc = _last_level_cache()
    with _torch_threads(n_threads), torch.inference_mode():
        x = torch.ones(numel, dtype=torch.float32)
        y = torch.zeros_like(x)
        read = _time(x.sum, repeats, budget_s=math.inf)
        copy = _time(lambda x=x, y=y: y.copy_(x), repeats, budget_s=math.inf)
        del x, y
    read_gbps = nbytes / read["median_s"] / GB
    copy_gbps = 2 * nbytes / copy["median_s"] / GB
    return {
        "threads": n_threads,
        "size_mib": size_mib,
        "bytes": nbytes,
        "llc_bytes": llc,
        "exceeds_llc": (nbytes >= 4 * llc) if llc else None,
        "read_gbps": read_gbps,
        "copy_gbps": copy_gbps,
        "bandwidth_gbps": read_gbps,
        "read": {**read, "bytes_moved": nbytes, "method": "x.sum() over a float32 array"},
        "copy": {**copy, "bytes_moved": 2 * nbytes, "method": "y.copy_(x), read + write counted"},
        "method": "median of repeats after one warm-up; bandwidth_gbps is the read stream",
    }


# --------------------------------------------------------------------------- matmul
def _gemv_shape(target_bytes: int, itemsize: int) -> int:
    """A square side n (multiple of 64) whose n x n matrix of ``itemsize`` bytes holds >= target."""
    n = math.isqrt(max(target_bytes // itemsize, 1))
    n = max(64, -(-n // 64) * 64)
    return n


def measure_matmul(
    dtype: str = "float32",
    threads: int | None = None,
    sizes: Sequence[int] = (256, 512, 1024),
    repeats: int = 5,
    *,
    gemv_rows: Sequence[int] = (1, 4),
    gemv_mib: int | None = None,
    budget_s: float = 2.0,
) -> dict[str, Any]:
    """Matmul throughput on the CPU in GFLOP/s (1e9 FLOPs per second), for one dtype.

    * Square: ``torch.mm(a, b, out=c)`` with n x n operands for each n in ``sizes``,
      2 n^3 FLOPs. ``peak_gflops`` is the best of the sizes: the compute roof.
    * Decode-shaped: ``torch.nn.functional.linear(x, w)`` with x of M rows (each M in
      ``gemv_rows``) and a square weight w of ``gemv_mib`` MiB (default: 4 x the last-level
      cache, at least 64 MiB; 256 MiB where the cache size is unknown), 2 M K N FLOPs. The
      weight does not fit in the cache, so this streams it from DRAM as a decode step (M = 1)
      or a small verify call (M = 4) does; ``gbps`` is its weight bytes over the time.

    Each shape runs one warm-up call, then up to ``repeats`` timed calls; the median counts.
    ``budget_s`` bounds the seconds spent (split evenly among the shapes): a slow shape is
    timed fewer times, and a square size whose predicted time (from the previous size,
    scaled by n^3) exceeds its share is skipped and listed under ``skipped``. Torch's
    intra-op threads are set to ``threads`` for the measurement and restored afterwards.
    """
    import torch

    name = _check_dtype(dtype)
    n_threads = _check_threads(threads)
    repeats = check_int("repeats", repeats, low=1)
    sizes = tuple(check_int("each size in sizes", n, low=1) for n in sizes)
    rows = tuple(check_int("each M in gemv_rows", m, low=1) for m in gemv_rows)
    if not sizes:
        raise ValueError("sizes must hold at least one matrix size n >= 1")
    budget_s = _check_positive("budget_s", budget_s)
    llc = _last_level_cache()
    if gemv_mib is None:
        gemv_bytes = max(4 * llc, 64 * MIB) if llc else 256 * MIB
    else:
        gemv_bytes = check_int("gemv_mib", gemv_mib, low=1) * MIB
    tdtype = getattr(torch, name)
    share = budget_s / (len(sizes) + len(rows))
    gen = torch.Generator().manual_seed(0)
    square: list[dict[str, Any]] = []
    skipped: list[int] = []
    gemv: list[dict[str, Any]] = []
    with _torch_threads(n_threads), torch.inference_mode():
        last: tuple[int, float] | None = None
        for n in sorted(sizes):
            if last is not None and last[1] * (n / last[0]) ** 3 > share:
                skipped.append(n)
                continue
            a = torch.randn(n, n, generator=gen).to(tdtype)
            b = torch.randn(n, n, generator=gen).to(tdtype)
            c = torch.empty(n, n, dtype=tdtype)
            t = _time(lambda a=a, b=b, c=c: torch.mm(a, b, out=c), repeats, share)
            last = (n, t["median_s"])
            square.append({"n": n, "flops": 2.0 * n**3, **t, "gflops": 2.0 * n**3 / t["median_s"] / GB})
            del a, b, c
        side = _gemv_shape(gemv_bytes, tdtype.itemsize)
        w = torch.randn(side, side, generator=gen).to(tdtype)
        wbytes = w.numel() * w.element_size()
        for m in rows:
            x = torch.randn(m, side, generator=gen).to(tdtype)
            t = _time(lambda x=x, w=w: torch.nn.functional.linear(x, w), repeats, share)
            flops = 2.0 * m * side * side
            gemv.append(
                {
                    "m": m,
                    "k": side,
                    "n": side,
                    "weight_bytes": wbytes,
                    "flops": flops,
                    **t,
                    "gflops": flops / t["median_s"] / GB,
                    "gbps": wbytes / t["median_s"] / GB,
                }
            )
        del w
    return {
        "dtype": name,
        "threads": n_threads,
        "square": square,
        "skipped": skipped,
        "peak_gflops": max(s["gflops"] for s in square),
        "gemv": gemv,
        "llc_bytes": llc,
        "method": "square: torch.mm, 2 n^3 FLOPs; gemv: F.linear(x[M, K], w[N, K]), 2 M K N FLOPs; "
        "median of timed calls after one warm-up",
    }


# --------------------------------------------------------------------------- the roofline
def machine_roofline(
    threads: int | Sequence[int] | None = None,
    dtypes: Sequence[str] = ("float32", "bfloat16"),
    *,
    size_mib: int = 256,
    sizes: Sequence[int] = (256, 512, 1024),
    repeats: int = 5,
    gemv_mib: int | None = None,
    budget_s: float = 2.0,
) -> dict[str, Any]:
    """The roofline of the running machine: bandwidth, throughput per dtype, ridge per dtype.

    ``threads``: None measures one thread and all available CPUs (one entry if they are the
    same); an integer or a sequence of integers measures those counts. For each count,
    :func:`measure_bandwidth` and :func:`measure_matmul` (per dtype) are run, and the entry
    under ``"rooflines"`` holds:

    * ``bandwidth_gbps`` -- the read-stream bandwidth, GB/s (the memory roof);
    * ``peak_gflops[dtype]`` -- the best square-matmul throughput, GFLOP/s (the compute roof);
    * ``ridge_flop_per_byte[dtype]`` -- peak_gflops / bandwidth_gbps: a call with fewer FLOPs
      per byte moved is bound by memory;
    * ``gemv_gbps[dtype]`` -- the weight-streaming rate of the decode-shaped product per M,
      for comparison with the roof (how close a real decode kernel comes to it);
    * ``bandwidth`` and ``matmul`` -- the full measurements.

    ``"cpu"`` is :func:`cpu_identity`, ``"environment"`` is :func:`specdec.measure.core.environment`.
    Torch's thread count is restored afterwards. Takes a few seconds per thread count.
    """
    import torch

    if threads is None:
        counts = sorted({1, _available_cpus()})
    elif isinstance(threads, Sequence) and not isinstance(threads, str):
        counts = [_check_threads(t) for t in threads]
        if not counts:
            raise ValueError("threads must hold at least one thread count")
    else:
        counts = [_check_threads(threads)]
    names = [_check_dtype(d) for d in dtypes]
    if not names:
        raise ValueError(f"dtypes must hold at least one of {', '.join(map(repr, MATMUL_DTYPES))}")
    entries = []
    for n in counts:
        bw = measure_bandwidth(n, size_mib=size_mib, repeats=repeats)
        mm = {d: measure_matmul(d, n, sizes, repeats, gemv_mib=gemv_mib, budget_s=budget_s) for d in names}
        roof = bw["bandwidth_gbps"]
        entries.append(
            {
                "threads": n,
                "bandwidth_gbps": roof,
                "peak_gflops": {d: mm[d]["peak_gflops"] for d in names},
                "ridge_flop_per_byte": {d: mm[d]["peak_gflops"] / roof for d in names},
                "gemv_gbps": {d: {str(g["m"]): g["gbps"] for g in mm[d]["gemv"]} for d in names},
                "bandwidth": bw,
                "matmul": mm,
            }
        )
    return {
        "cpu": cpu_identity(),
        "environment": environment(device="cpu"),
        "torch_threads": torch.get_num_threads(),
        "rooflines": entries,
    }


def _roofline_entry(roofline: Mapping[str, Any], threads: int | None) -> Mapping[str, Any]:
    """The entry for ``threads`` from :func:`machine_roofline`'s result, or ``roofline`` itself."""
    if not isinstance(roofline, Mapping):
        raise ValueError(f"roofline must be a mapping; got {type(roofline).__name__}")
    if "rooflines" in roofline:
        entries = list(roofline["rooflines"])
        available = [e["threads"] for e in entries]
        if threads is None:
            if len(entries) != 1:
                raise ValueError(f"threads must name one of the measured thread counts {available}; got None")
            return entries[0]
        for e in entries:
            if e["threads"] == threads:
                return e
        raise ValueError(f"threads must be one of the measured thread counts {available}; got {threads!r}")
    if "bandwidth_gbps" not in roofline or "peak_gflops" not in roofline:
        raise ValueError("roofline must hold 'bandwidth_gbps' and 'peak_gflops' (or 'rooflines')")
    return roofline


# --------------------------------------------------------------------------- weight formats
@dataclass(frozen=True)
class WeightFormat:
    """How a weight matrix is stored: bits per weight plus scale bytes per group of weights.

    Groups run along the input dimension of each output row; ``group_size`` None means one
    group per row (per-channel scales).
    """

    name: str
    bits: float
    group_size: int | None
    group_bytes: float
    description: str

    def matrix_bytes(self, out_features: int, in_features: int) -> float:
        """Bytes of an ``out_features`` x ``in_features`` weight (nn.Linear layout) in this format."""
        groups_per_row = 1 if self.group_size is None else -(-in_features // self.group_size)
        return out_features * (in_features * self.bits / 8 + groups_per_row * self.group_bytes)

    def bytes_per_param(self, in_features: int) -> float:
        """Average bytes per weight for rows of ``in_features`` weights."""
        return self.matrix_bytes(1, in_features) / in_features


#: Weight formats by name. int4 is torch's CPU int4 weight-only layout with group size 32
#: (``_weight_int4pack_mm_for_cpu``: a bf16 scale and a bf16 zero per group, 0.5 + 4/32 =
#: 0.625 bytes per weight); int8 is ``_weight_int8pack_mm`` (one bf16 scale per output row);
#: q4_0, q4_1 and q8_0 are GGUF's blocks of 32 (fp16 scale; q4_1 adds an fp16 minimum);
#: q4_1_f32 and q8_0_f32 are the same codes with float32 scales (and minimums), as the lean
#: engine's ``"q4_1"`` mode stores them for its C forward.
WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("float32", 32, None, 0, "IEEE float32, 4 bytes"),
        WeightFormat("bfloat16", 16, None, 0, "bfloat16, 2 bytes"),
        WeightFormat("float16", 16, None, 0, "float16, 2 bytes"),
        WeightFormat("int8", 8, None, 2, "int8 per output channel + one bf16 scale per row"),
        WeightFormat("int4", 4, 32, 4, "int4 in groups of 32 + bf16 scale and bf16 zero per group"),
        WeightFormat("q4_0", 4, 32, 2, "GGUF Q4_0: blocks of 32 4-bit weights + fp16 scale (18 bytes)"),
        WeightFormat("q4_1", 4, 32, 4, "GGUF Q4_1: blocks of 32 4-bit weights + fp16 scale, min (20 bytes)"),
        WeightFormat("q8_0", 8, 32, 2, "GGUF Q8_0: blocks of 32 int8 weights + fp16 scale (34 bytes)"),
        WeightFormat("q4_1_f32", 4, 32, 8, "Q4_1 codes + float32 scale, minimum per block of 32 (24 bytes)"),
        WeightFormat("q8_0_f32", 8, 32, 4, "Q8_0 codes + float32 scale per block of 32 (36 bytes)"),
    )
}

#: The parts of a forward that hold weights, as :func:`step_cost` names them.
WEIGHT_PARTS = ("embedding", "attention", "mlp", "lm_head")


def _weight_format(value: Any, name: str = "weight_format") -> WeightFormat:
    if isinstance(value, WeightFormat):
        return value
    if isinstance(value, str):
        if value in WEIGHT_FORMATS:
            return WEIGHT_FORMATS[value]
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        if math.isfinite(value) and value > 0:
            return WeightFormat(
                f"{float(value):g} bytes", 8 * float(value), None, 0, "bytes per weight, given"
            )
    raise ValueError(
        f"{name} must be one of {', '.join(map(repr, WEIGHT_FORMATS))}, a number of bytes per "
        f"weight > 0, or a mapping of {', '.join(WEIGHT_PARTS)} (or 'default') to those; got {value!r}"
    )


def _formats(weight_format: Any) -> dict[str, WeightFormat]:
    if isinstance(weight_format, Mapping):
        unknown = set(weight_format) - {*WEIGHT_PARTS, "default"}
        if unknown:
            raise ValueError(
                f"weight_format keys must be among {', '.join(WEIGHT_PARTS)}, 'default'; "
                f"got {sorted(unknown)}"
            )
        out = {}
        for part in WEIGHT_PARTS:
            if part in weight_format:
                out[part] = _weight_format(weight_format[part], f"weight_format[{part!r}]")
            elif "default" in weight_format:
                out[part] = _weight_format(weight_format["default"], "weight_format['default']")
            else:
                raise ValueError(f"weight_format must give a format for {part!r} (or a 'default')")
        return out
    fmt = _weight_format(weight_format)
    return dict.fromkeys(WEIGHT_PARTS, fmt)


# --------------------------------------------------------------------------- model accounting
_CONFIG_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
)


def _shapes(config: Any) -> dict[str, Any]:
    """The Llama shape fields of a transformers config or a plain mapping, checked."""

    def get(key: str, default: Any = None) -> Any:
        if isinstance(config, Mapping):
            return config.get(key, default)
        return getattr(config, key, default)

    out: dict[str, Any] = {}
    for key in _CONFIG_FIELDS:
        value = get(key)
        if value is None:
            raise ValueError(f"config must give {key} (an integer >= 1)")
        out[key] = check_int(f"config {key}", value, low=1)
    heads = out["num_attention_heads"]
    kv = get("num_key_value_heads")
    out["num_key_value_heads"] = (
        heads if kv is None else check_int("config num_key_value_heads", kv, low=1, high=heads)
    )
    if heads % out["num_key_value_heads"]:
        raise ValueError(
            f"config num_key_value_heads must divide num_attention_heads ({heads}); "
            f"got {out['num_key_value_heads']}"
        )
    head_dim = get("head_dim")
    if head_dim is None:
        if out["hidden_size"] % heads:
            raise ValueError(
                f"config hidden_size ({out['hidden_size']}) must be a multiple of num_attention_heads "
                f"({heads}) when head_dim is not given"
            )
        head_dim = out["hidden_size"] // heads
    out["head_dim"] = check_int("config head_dim", head_dim, low=1)
    out["tie_word_embeddings"] = bool(get("tie_word_embeddings", False))
    return out


def _default_activation_bytes(formats: Mapping[str, WeightFormat]) -> float:
    """4 (float32 activations) when the layers' weights are float32, else 2 (bf16/fp16)."""
    return 4.0 if formats["mlp"].bits >= 32 else 2.0


def step_cost(
    config: Any,
    *,
    k: int = 1,
    context: int,
    batch: int = 1,
    weight_format: str | float | Mapping[str, str | float] = "float32",
    activation_bytes: float | None = None,
    kv_bytes: float | None = None,
) -> dict[str, Any]:
    """Bytes moved and FLOPs of one forward over ``k`` new tokens per sequence, by part.

    ``config``: a transformers ``LlamaConfig`` (or any config with the same fields) or a
    mapping with ``hidden_size``, ``intermediate_size``, ``num_hidden_layers``,
    ``num_attention_heads``, ``num_key_value_heads`` (default: the heads), ``vocab_size``,
    ``tie_word_embeddings`` (default False) and optionally ``head_dim`` (default hidden /
    heads). A Llama layer: q, k, v, o projections and a gated MLP (gate, up, down), no biases,
    two RMSNorms; one final norm; an embedding table and an LM head (the same matrix if tied).

    ``context`` tokens are already in the KV cache; the call feeds ``k`` more per sequence for
    ``batch`` sequences (``tokens = k * batch``). ``weight_format``: a name in
    :data:`WEIGHT_FORMATS`, bytes per weight as a number, or a mapping from the parts
    ``embedding``, ``attention``, ``mlp``, ``lm_head`` (or ``default``) to those; a tied
    embedding is stored as the LM head is. ``activation_bytes`` (default: 4 when the MLP
    weights are float32, else 2) and ``kv_bytes`` (default: the activations') are bytes per
    value.

    What is counted, per part (``parts[name]`` has ``params``, ``weight_bytes``,
    ``kv_bytes``, ``activation_bytes``, ``bytes`` = their sum, ``flops``):

    * weights are read once per call, whatever ``k`` and ``batch`` (they are reused across
      the tokens of the call), except the embedding, whose lookup reads only ``tokens`` rows;
      the LM head reads its whole vocab x hidden matrix;
    * matmul FLOPs are 2 x weights x tokens (``attention_projections``, ``mlp``, ``lm_head``);
    * ``attention_cache``: per layer and sequence, the K and V of ``context + k`` positions
      read and of ``k`` positions written; FLOPs 4 x heads x head_dim per (query, key) pair
      (scores and weighted sum) over the causal pairs, ``k * context + k (k + 1) / 2``;
    * activations: each matmul reads its input rows and writes its output rows once (logits
      included); norms read their weights. Elementwise work (norms, rotary, SiLU, residual
      adds, softmax) is not counted in FLOPs: O(hidden) per token, far below the matmuls.

    Totals: ``bytes``, ``flops``, ``weight_bytes``, ``kv_bytes``, ``activation_bytes``,
    ``intensity_flop_per_byte``; ``weight_format`` and ``bytes_per_weight`` per weight part,
    ``activation_bytes_per_value``, ``kv_bytes_per_value``; ``matmul_params`` (weights
    multiplied per token, the LM head included) and ``params`` (distinct parameters, a tied
    matrix once, as a model's ``num_parameters()`` counts them).
    """
    s = _shapes(config)
    k = check_int("k", k, low=1)
    context = check_int("context", context, low=0)
    batch = check_int("batch", batch, low=1)
    formats = _formats(weight_format)
    if s["tie_word_embeddings"]:
        formats["embedding"] = formats["lm_head"]
    act = (
        _default_activation_bytes(formats)
        if activation_bytes is None
        else _check_positive("activation_bytes", activation_bytes)
    )
    kvb = act if kv_bytes is None else _check_positive("kv_bytes", kv_bytes)

    d, inter, layers = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"]
    heads, kv_heads, hd, vocab = (
        s["num_attention_heads"],
        s["num_key_value_heads"],
        s["head_dim"],
        s["vocab_size"],
    )
    tokens = k * batch
    q_dim, kv_dim = heads * hd, kv_heads * hd

    def matmuls(fmt: WeightFormat, shapes: Sequence[tuple[int, int]], count: int) -> dict[str, float]:
        """``count`` copies of nn.Linear weights of the given (out, in) shapes, fed ``tokens`` rows."""
        params = count * sum(o * i for o, i in shapes)
        return {
            "params": params,
            "weight_bytes": count * sum(fmt.matrix_bytes(o, i) for o, i in shapes),
            "kv_bytes": 0.0,
            "activation_bytes": count * tokens * act * sum(o + i for o, i in shapes),
            "flops": 2.0 * params * tokens,
        }

    attn_shapes = [(q_dim, d), (kv_dim, d), (kv_dim, d), (d, q_dim)]
    mlp_shapes = [(inter, d), (inter, d), (d, inter)]
    pairs = k * context + k * (k + 1) // 2
    parts: dict[str, dict[str, float]] = {
        "embedding": {
            "params": vocab * d,
            "weight_bytes": tokens * formats["embedding"].matrix_bytes(1, d),
            "kv_bytes": 0.0,
            "activation_bytes": tokens * d * act,
            "flops": 0.0,
        },
        "attention_projections": matmuls(formats["attention"], attn_shapes, layers),
        "attention_cache": {
            "params": 0,
            "weight_bytes": 0.0,
            "kv_bytes": layers * batch * 2 * kv_dim * kvb * ((context + k) + k),
            "activation_bytes": layers * tokens * 2 * q_dim * act,
            "flops": 4.0 * layers * batch * heads * hd * pairs,
        },
        "mlp": matmuls(formats["mlp"], mlp_shapes, layers),
        "norm": {
            "params": (2 * layers + 1) * d,
            "weight_bytes": (2 * layers + 1) * d * act,
            "kv_bytes": 0.0,
            "activation_bytes": (2 * layers + 1) * tokens * 2 * d * act,
            "flops": 0.0,
        },
        "lm_head": matmuls(formats["lm_head"], [(vocab, d)], 1),
    }
    for part in parts.values():
        part["bytes"] = part["weight_bytes"] + part["kv_bytes"] + part["activation_bytes"]
    total = {
        key: sum(p[key] for p in parts.values()) for key in ("weight_bytes", "kv_bytes", "activation_bytes")
    }
    nbytes = sum(p["bytes"] for p in parts.values())
    flops = sum(p["flops"] for p in parts.values())
    distinct = sum(p["params"] for p in parts.values()) - (vocab * d if s["tie_word_embeddings"] else 0)
    return {
        "config": s,
        "k": k,
        "context": context,
        "batch": batch,
        "tokens": tokens,
        "weight_format": {p: f.name for p, f in formats.items()},
        "bytes_per_weight": {
            "embedding": formats["embedding"].bytes_per_param(d),
            "attention": parts["attention_projections"]["weight_bytes"]
            / parts["attention_projections"]["params"],
            "mlp": parts["mlp"]["weight_bytes"] / parts["mlp"]["params"],
            "lm_head": parts["lm_head"]["weight_bytes"] / parts["lm_head"]["params"],
        },
        "activation_bytes_per_value": act,
        "kv_bytes_per_value": kvb,
        "parts": parts,
        "bytes": nbytes,
        "flops": flops,
        **total,
        "intensity_flop_per_byte": flops / nbytes,
        "matmul_params": sum(parts[p]["params"] for p in ("attention_projections", "mlp", "lm_head")),
        "params": distinct,
    }


# --------------------------------------------------------------------------- predictions
def predict_step_time(
    cost: Mapping[str, Any],
    roofline: Mapping[str, Any],
    dtype: str = "float32",
    *,
    threads: int | None = None,
) -> dict[str, Any]:
    """The roofline time of a forward: max(bytes / bandwidth, FLOPs / throughput), in seconds.

    ``cost`` is a :func:`step_cost` result; ``roofline`` a roofline entry (``bandwidth_gbps``,
    ``peak_gflops[dtype]``) or :func:`machine_roofline`'s result, in which case ``threads``
    picks the entry (required when it holds several). ``dtype`` is the dtype the matmuls run
    in (int4 weights with bf16 activations compute in bfloat16). ``bound`` is ``"memory"``
    when the bytes take longer, i.e. when the call's FLOPs per byte fall below the ridge
    point, else ``"compute"``. ``parts_s`` gives each part's own roofline time (their sum is
    at least ``time_s``: a part may be bound differently from the whole). A lower bound: real
    kernels reach neither roof, and framework overhead comes on top.
    """
    entry = _roofline_entry(roofline, threads)
    for key in ("bytes", "flops", "parts"):
        if key not in cost:
            raise ValueError(f"cost must be a step_cost result (missing {key!r})")
    peaks = entry["peak_gflops"]
    if dtype not in peaks:
        raise ValueError(
            f"dtype must be one of the roofline's dtypes {', '.join(map(repr, peaks))}; got {dtype!r}"
        )
    bandwidth = _check_positive("roofline bandwidth_gbps", entry["bandwidth_gbps"]) * GB
    throughput = _check_positive(f"roofline peak_gflops[{dtype!r}]", peaks[dtype]) * GB
    memory_s = cost["bytes"] / bandwidth
    compute_s = cost["flops"] / throughput
    return {
        "time_s": max(memory_s, compute_s),
        "memory_time_s": memory_s,
        "compute_time_s": compute_s,
        "bound": "memory" if memory_s >= compute_s else "compute",
        "intensity_flop_per_byte": cost["flops"] / cost["bytes"],
        "ridge_flop_per_byte": throughput / bandwidth,
        "parts_s": {
            name: max(p["bytes"] / bandwidth, p["flops"] / throughput) for name, p in cost["parts"].items()
        },
        "dtype": dtype,
        "threads": entry.get("threads"),
        "bandwidth_gbps": bandwidth / GB,
        "peak_gflops": throughput / GB,
    }


def predict_verify_curve(
    config: Any,
    ks: Iterable[int],
    roofline: Mapping[str, Any],
    *,
    dtype: str = "float32",
    context: int,
    batch: int = 1,
    weight_format: str | float | Mapping[str, str | float] | None = None,
    activation_bytes: float | None = None,
    kv_bytes: float | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """The roofline's T(k)/T(1): the predicted cost of a verify call over k tokens per decode step.

    For each k in ``ks`` (e.g. ``range(1, 33)``; k = 1 is always computed), T(k) is
    :func:`predict_step_time` of :func:`step_cost` with that k. ``weight_format`` defaults to
    ``dtype``. While the call stays memory-bound, T(k)/T(1) grows only by the extra
    activation and KV bytes; past the ridge it grows like k. ``knee_k`` is the first k
    predicted compute-bound (None if none is).
    """
    ks = tuple(check_int("each k in ks", k, low=1) for k in ks)
    if not ks:
        raise ValueError("ks must hold at least one k >= 1")
    fmt = dtype if weight_format is None else weight_format

    def predict(k: int) -> dict[str, Any]:
        cost = step_cost(
            config,
            k=k,
            context=context,
            batch=batch,
            weight_format=fmt,
            activation_bytes=activation_bytes,
            kv_bytes=kv_bytes,
        )
        return predict_step_time(cost, roofline, dtype, threads=threads)

    one = predict(1)
    ordered = sorted(set(ks))
    preds = [predict(k) for k in ordered]
    knee = next((k for k, p in zip(ordered, preds, strict=True) if p["bound"] == "compute"), None)
    return {
        "ks": ordered,
        "times_s": [p["time_s"] for p in preds],
        "ratios": [p["time_s"] / one["time_s"] for p in preds],
        "bounds": [p["bound"] for p in preds],
        "knee_k": knee,
        "t1_s": one["time_s"],
        "dtype": dtype,
        "context": context,
        "batch": batch,
        "threads": one["threads"],
        "ridge_flop_per_byte": one["ridge_flop_per_byte"],
    }


# --------------------------------------------------------------------------- profiling
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
    clocks: Any = None,
    threads: int = 1,
) -> dict[str, Any]:
    """Where one C forward's time goes, from its own phase clocks (the torch profiler sees one call).

    The C counterpart of :func:`profile_step` (it lives here, in the measurement layer, beside the
    timer it shares; the C forwards only keep the clocks), with the same arguments and
    result keys: ``buckets_ms`` per call holds ``linear`` (the decoder's Q4_1 layers),
    ``lm_head`` (the Q8_0 head), ``attention`` (rotary, cache writes, attention), ``other ops``
    (embedding, norms, SiLU) and ``framework overhead`` (the call's wall time minus the phases:
    Python, ctypes, the session's bookkeeping); ``wall_ms_unprofiled`` is the median of as many
    calls with the clocks off. ``clocks``: a ``"q4q8"`` model's :class:`Q8Forward`, whose own
    clocks are read (default: the ``"q4_1"`` library's); ``threads``: what the record names.
    """
    for name, value, low in (("k", k, 1), ("repeats", repeats, 1), ("warmup", warmup, 0)):
        check_int(name, value, low=low)
    from specdec.engine.native import PHASES, library

    call = timed_call(forward_fn, k, reset)
    for _ in range(warmup):
        call()
    unprofiled = [call() for _ in range(repeats)]
    if clocks is not None:
        clocks.read_clocks()  # clears them
        clocks.set_profiling(True)
        try:
            walls = [call() for _ in range(repeats)]
            out = clocks.read_clocks()
        finally:
            clocks.set_profiling(False)
    else:
        lib = library()
        out = (ctypes.c_double * len(PHASES))()
        lib.specdec_q4_profile(out)  # clears the clocks
        lib.specdec_q4_set_profiling(1)
        try:
            walls = [call() for _ in range(repeats)]
            lib.specdec_q4_profile(out)
        finally:
            lib.specdec_q4_set_profiling(0)
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
