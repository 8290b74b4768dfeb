"""The running machine's identity: its CPU's name, feature flags, caches, usable CPUs and SIMD levels.

Engine level: the C forwards' build key needs the flags (:mod:`specdec.engine.native`); the
measurement layer stamps records with :func:`cpu_identity` (:mod:`specdec.measure.roofline`,
:mod:`specdec.measure.core`). Nothing here measures a speed.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

__all__ = [
    "available_cpus",
    "cache_sizes",
    "cpu_flags",
    "cpu_identity",
    "cpu_name",
    "last_level_cache",
    "numpy_simd",
]


def cpu_flags() -> set[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where there is no such file)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cache_sizes() -> dict[str, int]:
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


def last_level_cache() -> int | None:
    """The largest cache's size in bytes, or None where the OS does not say."""
    sizes = cache_sizes()
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
        "available_cpus": available_cpus(),
        "caches_bytes": cache_sizes(),
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "numpy_simd": numpy_simd(),
        "bf16_instructions": (bool(bf16) if flags else None),
        "bf16_flags": bf16,
        "avx512": (any(f.startswith("avx512") for f in flags) if flags else None),
        "avx2": ("avx2" in flags if flags else None),
    }
