"""nbval settings for the chapters.

nbval already leaves PNG images out of its comparison (``image/png``: pixels change with
the CPU's floating-point kernels and the matplotlib build). A figure *glued* for the prose is
stored under ``application/papermill.record/image/png`` instead, which nbval would compare
byte for byte; leave it out in the same way. The numbers a figure shows are glued or
printed separately and compared, rounded (``specdec.book``).
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
    # name: (numpy dispatch groups that must be off, torch capabilities allowed)
    "avx2": (("X86_V4",), ("AVX2", "DEFAULT")),
    "baseline": (("X86_V3", "X86_V4"), ("DEFAULT",)),
}


def _cpu_dispatch() -> tuple[dict[str, bool], str]:
    import numpy._core._multiarray_umath as umath
    import torch

    return dict(umath.__cpu_features__), str(torch.backends.cpu.get_cpu_capability())


def pytest_report_header(config):
    features, capability = _cpu_dispatch()
    groups = [g for g in ("X86_V2", "X86_V3", "X86_V4") if features.get(g)]
    name = os.environ.get("SPECDEC_EMULATED_CPU", "native")
    return f"CPU dispatch ({name}): numpy {'/'.join(groups) or 'baseline'}, torch {capability}"


def pytest_configure(config):
    name = os.environ.get("SPECDEC_EMULATED_CPU")
    if name is None:
        return
    if name not in EMULATIONS:
        raise pytest.UsageError(f"SPECDEC_EMULATED_CPU must be one of {sorted(EMULATIONS)}; got {name!r}")
    off, allowed = EMULATIONS[name]
    features, capability = _cpu_dispatch()
    still_on = [g for g in off if features.get(g)]
    if still_on or capability not in allowed:
        raise pytest.UsageError(
            f"emulated CPU {name!r} did not take effect: numpy still dispatches {still_on}, "
            f"torch capability {capability} (allowed {allowed}); check NPY_DISABLE_CPU_FEATURES "
            "and ATEN_CPU_CAPABILITY"
        )
