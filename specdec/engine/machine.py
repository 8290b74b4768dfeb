"""The running CPU's feature flags (engine level: the C forwards' build key needs them, and the
measurement layer's machine identity, :mod:`specdec.measure.roofline`, re-exports them)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["cpu_flags"]


def cpu_flags() -> set[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where there is no such file)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()
