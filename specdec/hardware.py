"""Part V's analysis of hardware records: verify-cost curves, GPU cost surfaces, and what they do to speedups.

Reads the records of ``benchmarks/engine_modes.py`` (CPU engines side by side) and
``benchmarks/gpu_record.py`` (a GPU's T(b, k)); computes nothing by timing. The one model of
a speedup used here is Theorem 3.8 with the verify pass priced at its measured cost,
``E[T](alpha, gamma) / (gamma c + v(gamma + 1))`` with ``v(k) = T(k) / T(1)``
(:func:`specdec.theory.walltime_speedup_measured`), maximised over the gammas whose verify
cost was measured (:func:`best_gamma_on_curve`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from specdec.theory import walltime_speedup_measured

__all__ = [
    "best_gamma_on_curve",
    "gpu_shapes",
    "gpu_surface",
    "load_record",
    "verify_curves",
]


def load_record(path: str | Path) -> dict[str, Any]:
    """A JSON record, with its file name under ``"file"``."""
    p = Path(path)
    return {**json.loads(p.read_text(encoding="utf-8")), "file": p.name}


def verify_curves(record: Mapping[str, Any]) -> dict[str, dict[int, float]]:
    """Per engine of an engine-modes record: ``{k: T(k) / T(1)}`` (geometric mean over passes)."""
    if record.get("kind") != "engine-modes":
        raise ValueError(f"record must be an engine-modes record; got kind {record.get('kind')!r}")
    return {
        name: {int(c["k"]): float(c["ratio_to_k1"]) for c in cells}
        for name, cells in record["verify"]["engines"].items()
    }


def best_gamma_on_curve(alpha: float, c: float, curve: Mapping[int, float]) -> tuple[int, float]:
    """The gamma >= 1 with the highest ``E[T] / (gamma c + v(gamma + 1))`` among those whose
    verify cost ``v(gamma + 1) = curve[gamma + 1]`` was measured; returns (gamma, speedup).

    Ties go to the smaller gamma. Raises ValueError when the curve has no k >= 2.
    """
    gammas = sorted(k - 1 for k in curve if k >= 2)
    if not gammas:
        raise ValueError("curve must hold T(k)/T(1) for at least one k >= 2")
    speedups = [float(walltime_speedup_measured(alpha, g, c, curve[g + 1])) for g in gammas]
    i = int(np.argmax(speedups))
    return gammas[i], speedups[i]


def gpu_shapes(record: Mapping[str, Any]) -> list[str]:
    """The shape names measured in a GPU record, in record order."""
    return [key.removeprefix("shape:") for key in record if key.startswith("shape:")]


def gpu_surface(
    record: Mapping[str, Any], shape: str, source: str = "kernel"
) -> dict[tuple[int, int], float]:
    """T(b, k) in seconds of one shape of a GPU record: ``"wall"`` (eager wall clock, median)
    or ``"kernel"`` (the GPU's summed kernel time per call: what a launch-free engine nears)."""
    key = f"shape:{shape}"
    if key not in record:
        raise ValueError(f"shape must be one of {gpu_shapes(record)}; got {shape!r}")
    section = record[key]
    if source == "wall":
        return {(int(c["b"]), int(c["k"])): float(c["median_s"]) for c in section["surface"]["cells"]}
    if source == "kernel":
        kernels = section.get("kernels")
        if not kernels or "cells" not in kernels:
            raise ValueError(f"the record holds no kernel times for {shape!r}")
        return {(int(c["b"]), int(c["k"])): float(c["kernel_s"]) for c in kernels["cells"]}
    raise ValueError(f"source must be 'wall' or 'kernel'; got {source!r}")
