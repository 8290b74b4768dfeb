"""What the run programs (:mod:`specdec.experiments`) share: the repository root, record paths, loading.

Their options and checks are their own dataclasses (:mod:`specdec.experiments.options`); what several
programs repeated lives here once:

* :data:`ROOT` -- the repository (the default records live under ``results/``);
* :func:`bench_path` and :func:`report` -- the default record path
  ``results/bench/<kind>-<cpu>-<threads>t.json`` and the closing line;
* :func:`load_lean_with_draft` -- the default target in the lean mode of this machine
  (:func:`specdec.measure.modes.open_target`), the base model and a distilled draft, and
  :class:`LeanRun`, what a lean-target program's run starts with;
* :func:`write_bench_record` -- the record written to its path, and the closing line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ROOT",
    "LeanRun",
    "bench_path",
    "load_lean_with_draft",
    "report",
    "write_bench_record",
]

#: The repository root (the default records live under ``results/``).
ROOT = Path(__file__).resolve().parents[2]


def bench_path(out: str | None, kind: str, device_name: str, threads: int) -> Path:
    """``out``, or ``results/bench/<kind>-<cpu>-<threads>t.json`` (the CPU as
    :func:`specdec.measure.device.device_slug` names it)."""
    from specdec.measure.device import device_slug

    if out:
        return Path(out)
    return ROOT / "results" / "bench" / f"{kind}-{device_slug(device_name)}-{threads}t.json"


def report(path: Path) -> None:
    """The closing line: where the record went (relative to the repository when under it)."""
    print(f"-> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)


def load_lean_with_draft(mode: str, draft: str, threads: int | None = None) -> tuple[Any, Any, Any, Any]:
    """The default target in the lean ``mode`` (``auto``: measured on this machine) at ``threads``,
    opened by the engine builder (:func:`specdec.measure.modes.open_target`), the mode probe (None for
    a named mode), the loaded base target (its ``model`` and ``tokenizer``) and the distilled ``draft``
    model on it."""
    from specdec.engine.builder import EngineSpec
    from specdec.measure.modes import open_target
    from specdec.train.draftnets import load_draft

    opened = open_target(EngineSpec("lean", mode, threads))
    return opened.model, opened.probe, opened.base, load_draft(draft, opened.base.model)


@dataclass
class LeanRun:
    """What a lean-target script's run starts with (:func:`start_lean_run`)."""

    command: str
    target: Any
    probe: Any
    base: Any
    draft_model: Any
    prompts: list[dict[str, Any]]
    env: dict[str, Any]


def write_bench_record(
    record: Mapping[str, Any], env: Mapping[str, Any], out: str | None, kind: str, threads: int
) -> Path:
    """Write ``record`` with ``env`` (:func:`specdec.measure.core.write_result`) to ``out`` or the
    default :func:`bench_path`, say where, and return the path."""
    from specdec.measure.core import write_result

    path = write_result(bench_path(out, kind, env["device_name"], threads), dict(record), env=env)
    report(path)
    return path
