"""The accelerator a measurement runs on: its identity, its memory, and its two roofline numbers.

* :func:`device_slug` -- a file-name slug of a device's name (the records' file names).
* :func:`device_info` -- the device's name and properties and the stack's versions.
* :func:`free_memory` -- garbage collected, CUDA's cache emptied; the peak allocation so far.
* :func:`device_roofline` -- memory bandwidth and matmul throughput measured on the device, and
  the ridge point (the CPU's roofline, by thread count, is :mod:`specdec.measure.roofline`'s).

torch is imported inside the functions that need it: importing this module stays torch-free.
"""

from __future__ import annotations

import gc
import re
import sys
from functools import partial
from importlib import metadata
from typing import Any

import numpy as np

from specdec.measure.core import cpu_name, summarize_times, sync_hook, time_once

__all__ = ["device_info", "device_roofline", "device_slug", "free_memory"]


def device_slug(name: str) -> str:
    """A file-name slug of a device name: 'NVIDIA H200' -> 'nvidia-h200'."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "device"


def device_info(device: str) -> dict[str, Any]:
    """The accelerator's name and properties and the stack's versions (a CPU: its name and threads).

    transformers' version is read from its metadata, without importing it (the real-weights run
    works without transformers); None where it is not installed.
    """
    import torch

    info: dict[str, Any] = {
        "device": device,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": _version("transformers"),
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "cpu_name": cpu_name(),
    }
    if torch.device(device).type == "cuda":
        dev = torch.device(device)
        props = torch.cuda.get_device_properties(dev)
        info.update(
            name=torch.cuda.get_device_name(dev),
            total_memory_gib=round(props.total_memory / 2**30, 2),
            multiprocessors=props.multi_processor_count,
            capability=f"{props.major}.{props.minor}",
            cudnn=torch.backends.cudnn.version(),
            tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32),
            flash_sdp=bool(torch.backends.cuda.flash_sdp_enabled()),
            mem_efficient_sdp=bool(torch.backends.cuda.mem_efficient_sdp_enabled()),
        )
    else:
        info.update(name=info["cpu_name"], threads=torch.get_num_threads())
    return info


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def free_memory(device: str) -> dict[str, float] | None:
    """Collect garbage and empty CUDA's cache; return the peak and current allocation (GiB)."""
    import torch

    gc.collect()
    if torch.device(device).type != "cuda":
        return None
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2**30
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return {
        "peak_allocated_gib": round(peak, 3),
        "allocated_after_gib": torch.cuda.memory_allocated() / 2**30,
    }


def device_roofline(
    device: str,
    dtype: Any,
    *,
    copy_mib: int = 1024,
    matmul_n: tuple[int, ...] = (4096, 8192),
    repeats: int = 10,
) -> dict[str, Any]:
    """The device's two roofline numbers, measured: memory bandwidth and matmul throughput.

    Bandwidth: ``y.copy_(x)`` of a ``copy_mib`` MiB tensor, which reads and writes it
    (2 x bytes moved), median of ``repeats`` timed calls after one warm-up. Throughput:
    an n x n by n x n matmul in ``dtype`` (2 n^3 FLOPs) for each n. The ridge point
    (FLOPs per byte at which a kernel stops being bandwidth-bound) is their ratio.
    """
    import torch

    sync = sync_hook(device=device)
    x = torch.empty(copy_mib * 2**20, dtype=torch.uint8, device=device).random_(0, 255)
    y = torch.empty_like(x)
    times = [time_once(partial(y.copy_, x), sync) for _ in range(repeats + 1)][1:]
    moved = 2 * x.numel()
    bandwidth = moved / float(np.median(times))
    del x, y
    out: dict[str, Any] = {
        "copy_bytes_moved": moved,
        "copy": summarize_times(times).to_dict(),
        "bandwidth_gb_s": bandwidth / 1e9,
        "matmul": [],
    }
    for n in matmul_n:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        times = [time_once(partial(torch.matmul, a, b), sync) for _ in range(repeats + 1)][1:]
        flops = 2.0 * n**3
        out["matmul"].append(
            {"n": n, **summarize_times(times).to_dict(), "tflop_s": flops / float(np.median(times)) / 1e12}
        )
        del a, b
    best = max(m["tflop_s"] for m in out["matmul"])
    out["peak_tflop_s"] = best
    out["ridge_flop_per_byte"] = best * 1e12 / bandwidth
    return out
