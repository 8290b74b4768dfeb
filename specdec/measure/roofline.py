"""The roofline of the running machine, measured: memory bandwidth and matmul throughput.

Every number here is measured on the running machine, never carried over from another one
(torch, CPU; each call sets torch's intra-op threads for its duration and restores them
afterwards). What a forward costs against these roofs is pure arithmetic and lives in the
theory layer, :mod:`specdec.theory.cost` (:func:`~specdec.theory.cost.step_cost`,
:func:`~specdec.theory.cost.predict_step_time`, :func:`~specdec.theory.cost.predict_verify_curve`);
where a forward's time goes is :mod:`specdec.measure.profile`; the machine's identity is
:mod:`specdec.engine.machine`.

* :func:`measure_bandwidth` -- memory bandwidth in GB/s (1 GB = 1e9 bytes) by two methods, a
  read stream (``x.sum()`` over a float32 array far larger than the last-level cache) and a
  copy (``y.copy_(x)``, counted as read + write).
* :func:`measure_matmul` -- matmul throughput in GFLOP/s per dtype (square n x n by n x n,
  2 n^3 FLOPs), and the decode-shaped product: M = 1 or 4 rows by a weight matrix several
  times larger than the last-level cache, which streams the weights from DRAM as a decode
  step does.
* :func:`machine_roofline` -- both, for one thread and for all threads, with the ridge point
  per dtype and the CPU's identity (:func:`specdec.engine.machine.cpu_identity`).

Every call is timed by :func:`specdec.measure.core.time_calls` (the one timer, with a time budget).
No function here asserts or assumes a speed; timing thresholds belong in benchmarks.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from specdec.engine.machine import available_cpus, cpu_identity, last_level_cache
from specdec.measure.core import environment, time_calls
from specdec.theory.checks import check_float, check_int
from specdec.theory.cost import GB

__all__ = ["MATMUL_DTYPES", "machine_roofline", "measure_bandwidth", "measure_matmul"]

MIB = 2**20

#: The dtypes :func:`measure_matmul` times, by name.
MATMUL_DTYPES = ("float32", "bfloat16", "float16")


# --------------------------------------------------------------------------- arguments
def _check_threads(threads: Any) -> int:
    """``None``: torch's current intra-op thread count; else an integer in 1..available CPUs."""
    if threads is None:
        import torch

        return torch.get_num_threads()
    return check_int("threads", threads, low=1, high=max(available_cpus(), 1))


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
    """:func:`specdec.measure.core.time_calls` with one warm-up call and ``budget_s``, as a record's dict."""
    t = time_calls(fn, warmup=1, repeats=repeats, sync=False, budget_s=budget_s)
    return {"median_s": t.median_s, "iqr_s": t.iqr_s, "timed_calls": t.n}


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
    llc = last_level_cache()
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
    budget_s = check_float("budget_s", budget_s, low=0, open_low=True)
    llc = last_level_cache()
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

    ``"cpu"`` is :func:`specdec.engine.machine.cpu_identity`, ``"environment"`` is
    :func:`specdec.measure.core.environment`.
    Torch's thread count is restored afterwards. Takes a few seconds per thread count.
    """
    import torch

    if threads is None:
        counts = sorted({1, available_cpus()})
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
