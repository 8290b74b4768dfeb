"""What the scripts in ``benchmarks/`` share: their common arguments, checks, loading and paths.

A benchmark script is its arguments and its paths; the measurement is in the package. The parts
every script repeated live here once:

* :func:`add_lean_args` -- ``--threads``, ``--mode``, ``--prompts-per-task``, ``--new-tokens``,
  ``--draft`` and ``--out`` of the scripts that time the lean target (dynamic and oracle gamma);
* :func:`check_counts` -- integer arguments that must be >= a bound, checked by
  :func:`specdec.theory.checks.check_int` (one message: "--repeats must be an integer >= 1; got 0");
* :func:`check_draft` -- a named distilled draft must be saved
  (:func:`specdec.train.draftnets.require_drafts`);
* :func:`command_line`, :func:`bench_path` and :func:`report` -- the command a record keeps, the
  default record path ``results/bench/<kind>-<cpu>-<threads>t.json``, the closing line;
* :func:`load_lean_with_draft` -- the default target in the lean mode of this machine
  (:func:`specdec.measure.modes.lean_model`), the base model and a distilled draft;
  :func:`start_lean_run` -- that, the evaluation prompts and the environment for a script's run;
  :func:`write_bench_record` -- the record written to its path, and the closing line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.theory.checks import check_int

__all__ = [
    "ROOT",
    "add_lean_args",
    "bench_path",
    "build_settings",
    "check_counts",
    "check_draft",
    "command_line",
    "load_lean_with_draft",
    "report",
    "start_lean_run",
    "write_bench_record",
]

#: The repository root (the default records live under ``results/``).
ROOT = Path(__file__).resolve().parents[2]


def add_lean_args(ap: argparse.ArgumentParser, *, prompts_per_task: int = 3, new_tokens: int = 64) -> None:
    """``--threads``, ``--mode``, ``--prompts-per-task``, ``--new-tokens``, ``--draft`` and ``--out``."""
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mode", default="auto", help="lean mode, or auto (measured on this machine)")
    ap.add_argument("--prompts-per-task", type=int, default=prompts_per_task)
    ap.add_argument("--new-tokens", type=int, default=new_tokens)
    ap.add_argument("--draft", default="distil-l1")
    ap.add_argument("--out", default=None)


def check_counts(
    ap: argparse.ArgumentParser, args: argparse.Namespace, names: Sequence[str], low: int = 1
) -> None:
    """Each of ``names`` (attribute names of ``args``) an integer >= ``low``, else the parser's error
    naming the option: "--new-tokens must be an integer >= 1; got 0"."""
    for name in names:
        try:
            check_int("--" + name.replace("_", "-"), getattr(args, name), low=low)
        except ValueError as exc:
            ap.error(str(exc))


def build_settings(cls: Any, given: Mapping[str, Any], error: Callable[[str], Any]) -> Any:
    """A run program's settings dataclass (:class:`specdec.measure.runner.RunSettings`) from a script's
    parsed ``given`` values; the dataclass checks them, and its ValueError becomes ``error`` (the
    parser's: one line, exit status 2) with the fields it names written as their options (``new_tokens``
    -> ``--new-tokens``)."""
    import dataclasses
    import re

    try:
        return cls(**given)
    except ValueError as exc:
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        head, _, rest = str(exc).partition(" ")
        head = f"--{head.replace('_', '-')}" if head.rstrip(":") in names else head
        # the other fields the message names, as their options (those with an underscore: a plain word
        # such as 'drafts' may be prose)
        rest = re.sub(
            r"\b[a-z]+(?:_[a-z0-9]+)+\b",
            lambda m: f"--{m[0].replace('_', '-')}" if m[0] in names else m[0],
            rest,
        )
        return error(f"{head} {rest}")


def check_draft(ap: argparse.ArgumentParser, name: str) -> None:
    """The parser's error unless the distilled draft ``name`` is saved (before anything loads)."""
    from specdec.train.draftnets import require_drafts

    try:
        require_drafts([name])
    except (ValueError, FileNotFoundError) as exc:
        ap.error(str(exc))


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """The command a record keeps: ``python benchmarks/<script> <arguments>``."""
    return f"python benchmarks/{script} " + " ".join(sys.argv[1:] if argv is None else argv)


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


def start_lean_run(args: argparse.Namespace, script: str, argv: Sequence[str] | None) -> LeanRun:
    """Load the lean target in ``args.mode`` at ``args.threads`` (torch pinned to them too) and the
    draft ``args.draft`` (:func:`load_lean_with_draft`), say so in one line, and take
    ``args.prompts_per_task`` evaluation prompts per task; with the command line and the environment."""
    from specdec.measure.core import environment
    from specdec.train.workloads import evaluation_prompts

    command = command_line(script, argv)
    target, probe, base, draft_model = load_lean_with_draft(args.mode, args.draft, args.threads)
    print(f"target: lean {target.mode}; draft {args.draft}; threads {args.threads}", flush=True)
    prompts = evaluation_prompts(base.tokenizer, args.prompts_per_task)
    env = environment(dtype=target.mode, device="cpu")
    return LeanRun(command, target, probe, base, draft_model, prompts, env)


def write_bench_record(
    record: Mapping[str, Any], env: Mapping[str, Any], out: str | None, kind: str, threads: int
) -> Path:
    """Write ``record`` with ``env`` (:func:`specdec.measure.core.write_result`) to ``out`` or the
    default :func:`bench_path`, say where, and return the path."""
    from specdec.measure.core import write_result

    path = write_result(bench_path(out, kind, env["device_name"], threads), dict(record), env=env)
    report(path)
    return path
