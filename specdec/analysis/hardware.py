"""Part V's analysis of hardware records: verify-cost curves, GPU cost surfaces, and what they do to speedups.

Reads the records of ``benchmarks/engine_modes.py`` (CPU engines side by side; the verify
curves with their intervals), ``benchmarks/gpu_record.py`` (a GPU's T(b, k)) and
``benchmarks/dynamic_gamma.py`` (adaptive draft lengths against fixed ones,
:func:`adaptive_vs_fixed`); computes nothing by timing. The one model of a speedup used here
is Theorem 3.8 with the verify pass priced at its measured cost,
``E[T](alpha, gamma) / (gamma c + v(gamma + 1))`` with ``v(k) = T(k) / T(1)``
(:func:`specdec.theory.speedup.walltime_speedup_measured`), maximised over the gammas whose verify
cost was measured (:func:`best_gamma_on_curve`; per batch of a cost surface,
:func:`batch_gains`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specdec.theory.intervals import paired_speedup, per_unit_medians, verdict
from specdec.theory.speedup import (  # Theorem 3.8 on a curve lives in theory; re-exported here
    best_gamma_on_curve,
    break_even_alpha,
)

__all__ = [
    "adaptive_vs_fixed",
    "batch_gains",
    "best_gamma_on_curve",
    "break_even_alpha",
    "gpu_shapes",
    "gpu_surface",
    "load_record",
    "verify_curves",
    "verify_intervals",
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


def verify_intervals(record: Mapping[str, Any]) -> dict[str, dict[int, tuple[float, float, float]]]:
    """Per engine of an engine-modes record: ``{k: (T(k)/T(1), low, high)}`` with the record's
    95 % interval over passes (``ratio_ci``)."""
    if record.get("kind") != "engine-modes":
        raise ValueError(f"record must be an engine-modes record; got kind {record.get('kind')!r}")
    return {
        name: {int(c["k"]): (float(c["ratio_to_k1"]), *map(float, c["ratio_ci"])) for c in cells}
        for name, cells in record["verify"]["engines"].items()
    }


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


def batch_gains(
    surface: Mapping[tuple[int, int], float], alpha: float, c: float = 0.0
) -> dict[int, tuple[int, float]]:
    """Per batch b of a cost surface T(b, k): the best gamma and its predicted speedup over plain
    decoding at the same batch, ``max E[T] / (gamma c + T(b, gamma + 1) / T(b, 1))``.

    Only the k measured at every batch count, so that all batches choose from the same gammas;
    ``c = 0`` (a free draft, e.g. prompt lookup) isolates what the target's verify premium does.
    Raises ValueError when a batch lacks T(b, 1) or no k >= 2 is common to all batches.
    """
    batches = sorted({b for b, _ in surface})
    if not batches:
        raise ValueError("surface must hold at least one cell")
    common = set.intersection(*({k for bb, k in surface if bb == b} for b in batches))
    missing = [b for b in batches if (b, 1) not in surface]
    if missing:
        raise ValueError(f"surface must hold T(b, 1) for every batch; missing for b = {missing}")
    if not any(k >= 2 for k in common):
        raise ValueError("surface must hold one k >= 2 measured at every batch")
    return {
        b: best_gamma_on_curve(alpha, c, {k: surface[(b, k)] / surface[(b, 1)] for k in sorted(common)})
        for b in batches
    }


def adaptive_vs_fixed(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each adaptive draft-length rule of a dynamic-gamma record against the best fixed gamma.

    Per drafter (prompt lookup and the record's draft model), the best fixed gamma is the
    configuration ``"<drafter> g=<n>"`` with the highest speedup over plain (chosen after the
    fact); every other configuration of that drafter is an adaptive rule. Each row gives the
    geometric mean over prompts of (best fixed decode time / rule's decode time), > 1 when the
    rule is faster, with its 95 % bootstrap interval and :func:`specdec.theory.intervals.verdict`.
    """
    if record.get("kind") != "dynamic-gamma":
        raise ValueError(f"record must be a dynamic-gamma record; got kind {record.get('kind')!r}")
    configs = record["summary"]["configs"]
    _, decode = per_unit_medians(record["rows"], "decode_s")
    rows = []
    for drafter in ("lookup", record["settings"]["draft"]):
        fixed = [name for name in configs if name.startswith(drafter + " g=")]
        if not fixed:
            raise ValueError(f"record has no fixed-gamma configuration of {drafter!r}")
        best = max(fixed, key=lambda name: configs[name]["speedup"][0])
        for rule in (name for name in configs if name.startswith(drafter + " ") and name not in fixed):
            est, low, high = paired_speedup(decode[best], decode[rule])
            rows.append(
                {
                    "drafter": drafter,
                    "rule": rule.removeprefix(drafter + " "),
                    "best_fixed": best.removeprefix(drafter + " "),
                    "best_fixed_speedup": configs[best]["speedup"],
                    "ratio": est,
                    "low": low,
                    "high": high,
                    "verdict": verdict(low, high),
                }
            )
    return rows
