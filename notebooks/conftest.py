"""nbval settings for the chapters.

nbval already leaves PNG images out of its comparison (``image/png``: pixels change with
the CPU's floating-point kernels and the matplotlib build). A figure *glued* for the prose is
stored under ``application/papermill.record/image/png`` instead, which nbval would compare
byte for byte; leave it out in the same way. The numbers a figure shows are glued or
printed separately and compared, rounded (``specdec.paper.book``).
"""

from __future__ import annotations

import os

import pytest

GLUED_IMAGES = (
    "application/papermill.record/image/png",
    "application/papermill.record/image/jpeg",
    "application/papermill.record/image/svg+xml",
)


def pytest_collectstart(collector):
    if hasattr(collector, "skip_compare"):  # nbval's notebook collector (IPyNbFile)
        collector.skip_compare = tuple(collector.skip_compare) + GLUED_IMAGES


# -- the CPU the notebooks run on ----------------------------------------------------------------
# `make test` runs nbval three times: natively, and on two emulated CPUs (see the Makefile):
# numpy's dispatch capped by NPY_DISABLE_CPU_FEATURES and torch's by ATEN_CPU_CAPABILITY.
# SPECDEC_EMULATED_CPU names the emulation; the check below fails the run if it did not
# take effect (a misspelt variable would otherwise pass silently on the native kernels).
EMULATIONS = {
    # name: (numpy dispatch targets that may stay on, torch capabilities allowed)
    "avx2": (("X86_V3",), ("AVX2", "DEFAULT")),
    "baseline": ((), ("DEFAULT",)),
}


def _cpu_dispatch() -> tuple[list[str], str]:
    """numpy's dispatch targets in use on this CPU (after NPY_DISABLE_CPU_FEATURES), torch's level."""
    import torch

    from specdec.engine.machine import numpy_simd

    return list(numpy_simd()["dispatch"] or []), str(torch.backends.cpu.get_cpu_capability())


def pytest_report_header(config):
    active, capability = _cpu_dispatch()
    name = os.environ.get("SPECDEC_EMULATED_CPU", "native")
    return f"CPU dispatch ({name}): numpy {'/'.join(active) or 'baseline only'}, torch {capability}"


def pytest_configure(config):
    name = os.environ.get("SPECDEC_EMULATED_CPU")
    if name is None:
        return
    if name not in EMULATIONS:
        raise pytest.UsageError(f"SPECDEC_EMULATED_CPU must be one of {sorted(EMULATIONS)}; got {name!r}")
    may_stay, allowed = EMULATIONS[name]
    active, capability = _cpu_dispatch()
    still_on = [t for t in active if t not in may_stay]
    if still_on or capability not in allowed:
        raise pytest.UsageError(
            f"emulated CPU {name!r} did not take effect: numpy still dispatches {still_on}, "
            f"torch capability {capability} (allowed {allowed}); check NPY_DISABLE_CPU_FEATURES "
            "and ATEN_CPU_CAPABILITY"
        )
