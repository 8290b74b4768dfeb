"""What the ``specdec`` commands share: the one-line usage error, the parser class, the paper's names,
and the printing and argument helpers (each command's module is :mod:`specdec.cli.plan`,
:mod:`specdec.cli.modes`, :mod:`specdec.cli.measure`, :mod:`specdec.cli.bench`)."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "COUNTS",
    "COUNT_MAX",
    "MAX_THREADS",
    "NAMES",
    "USAGE_ERROR",
    "Parser",
    "UsageError",
    "alpha_arg",
    "at_least",
    "c_arg",
    "checked",
    "fmt",
    "interval",
    "json_out",
    "lean_modes",
    "log",
    "needs_models",
    "one_line",
    "para",
    "out_path",
    "progress",
    "read_record",
    "require_fields",
    "threads_arg",
    "threads_help",
]

#: Exit status of every usage error (argparse's convention).
USAGE_ERROR = 2

NAMES = """\
The paper's names (Leviathan, Kalman & Matias, ICML 2023, arXiv:2211.17192):
  alpha  acceptance rate: the chance that the target accepts one drafted token
         (Corollary 3.6: alpha = E[sum_x min(p(x), q(x))]); 0 <= alpha < 1
  c      cost coefficient: the time of one draft step over one target step (Definition 3.7)
  gamma  drafted tokens per round; a round emits E[T] tokens on average (Eq. 1)
  V      verify cost T(gamma+1)/T(1): one target call over gamma + 1 tokens over one
         single-token step; Theorem 3.8 assumes V = 1, real hardware measures more
Theorem 3.8 gives the expected wall-clock speedup over plain decoding:
  E[T] / (gamma c + 1), with E[T] = (1 - alpha^(gamma+1)) / (1 - alpha);
with a verify cost V the denominator is gamma c + V.
"""


class UsageError(Exception):
    """A bad argument: reported as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def checked(check: Callable[..., Any], name: str, value: Any, **bounds: Any) -> Any:
    """``check(name, value, **bounds)`` (one of :mod:`specdec.theory.checks`), its ValueError as a
    :class:`UsageError` (one line, exit status 2)."""
    try:
        return check(name, value, **bounds)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def alpha_arg(value: float) -> float:
    """--alpha: the acceptance rate, in [0, 1)."""
    from specdec.theory.checks import check_float

    return checked(
        check_float,
        "--alpha",
        value,
        low=0,
        high=1,
        open_high=True,
        note="the acceptance rate, Corollary 3.6",
    )


def c_arg(value: float) -> float:
    """--c: a draft step's time in target steps, >= 0."""
    from specdec.theory.checks import check_float

    return checked(
        check_float, "--c", value, low=0, note="a draft step's time in target steps, Definition 3.7"
    )


def at_least(name: str, value: int | None, low: int, what: str, high: int | None = None) -> None:
    """An integer option in ``low`` .. ``high`` (None: no upper bound; a None value: not given)."""
    from specdec.theory.checks import check_int

    if value is not None:
        checked(check_int, name, value, low=low, high=high, note=what)


#: What each count means, for the error messages.
COUNTS = {
    "gamma": "drafted tokens per round",
    "new_tokens": "tokens to generate per prompt",
    "repeats": "passes over the prompts",
    "verify_repeats": "timed passes of the verify curve",
    "prompts_per_task": "prompts per task",
}
#: The largest value each count takes: beyond it a run would only exhaust memory or time (a round of
#: more than 64 drafts is never chosen; SmolLM2's context is 8192 tokens, prompt included).
COUNT_MAX = {
    "gamma": 64,
    "new_tokens": 4096,
    "repeats": 1000,
    "verify_repeats": 1000,
    "prompts_per_task": 1000,
}

#: The most threads a command takes: the bound of the C forward's pool
#: (``specdec.engine.native.check_threads``, which holds it as a literal; tests/test_cli.py checks that
#: the two agree). The commands check it as argparse reads ``--threads``, before torch, OpenBLAS or the
#: C pool starts a thread (beyond it OpenBLAS cannot create the threads and the process dies).
MAX_THREADS = 1024

#: What --threads means, for the messages and the help.
THREADS_NOTE = "torch threads and q4q8's C threads"


#: Kernel pseudo-filesystems: a file created there is not a file on a disk (or cannot be created at all).
PSEUDO_FILESYSTEMS = ("/proc", "/sys")


def out_path(text: str | None, option: str = "--out") -> Path | None:
    """``--out FILE`` checked before anything runs (a run must not end in an unwritable path); a
    :class:`UsageError` naming the option otherwise. The record is written as a new regular file (a
    temporary file in the same folder, then :func:`os.replace`: :func:`specdec.theory.recordio.write_record`),
    so the path must be a regular file or nothing yet: a folder, a device, a pipe or a socket is refused,
    and so is a symbolic link (it is not followed: replacing it would replace the link, not its target;
    give the target's own path). Its folder must exist, lie outside ``/proc`` and ``/sys``, and take a
    new file: checked by creating (and removing) an empty temporary file there, since permission bits
    say nothing for root."""
    import os
    import tempfile

    if text is None:
        return None
    if not text:
        raise UsageError(f"{option} must name a file; got an empty path")
    out = Path(text)
    if out.is_symlink():
        raise UsageError(
            f"{option} {text!r} is a symbolic link; a record is written as a new regular file, which would "
            "replace the link, not its target: give the target's own path"
        )
    if out.is_dir():
        raise UsageError(f"{option} {text!r} is a folder; give a file name")
    if out.exists() and not out.is_file():
        raise UsageError(
            f"{option} {text!r} exists and is not a regular file (a device, a pipe or a socket); a record "
            "is written only as a regular file"
        )
    parent = out.parent
    if not parent.is_dir():
        raise UsageError(f"{option} {text!r}: its folder {str(parent)!r} does not exist or is not writable")
    real = str(parent.resolve())
    for root in PSEUDO_FILESYSTEMS:
        if real == root or real.startswith(root + "/"):
            raise UsageError(
                f"{option} {text!r} lies on {root}, a kernel pseudo-filesystem, not a disk; give a file "
                "in a folder on a disk"
            )
    try:  # the one honest test of "can a file be created here"
        fd, probe = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".probe", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(
            f"{option} {text!r}: its folder {str(parent)!r} does not exist or is not writable "
            f"(creating a file there failed: {exc.strerror or exc})"
        ) from None
    return out


def threads_arg(text: str) -> int:
    """``--threads N`` as argparse reads it (its ``type``): an integer in 1 .. :data:`MAX_THREADS`, else
    one line (argparse's, exit status 2) before anything else runs."""
    from specdec.theory.checks import check_int

    shown = text if len(text) <= 40 else text[:37] + "..."
    try:
        value = int(text)
    except ValueError:  # not an integer, or too many digits for int()
        raise argparse.ArgumentTypeError(f"must be an integer in [1, {MAX_THREADS}]; got {shown!r}") from None
    try:
        return check_int("--threads", value, low=1, high=MAX_THREADS, note=THREADS_NOTE)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--threads ")) from None


def threads_help(default: str) -> str:
    """``--threads``'s help: its meaning, its bound and ``default``."""
    return f"{THREADS_NOTE}, 1 .. {MAX_THREADS} (default {default})"


def lean_modes() -> list[str]:
    """The lean engine's modes as the commands name them (:data:`specdec.experiments.usermeasure.ENGINES`
    without ``auto`` and transformers' ``hf-`` engines: :data:`specdec.engine.lean.MODES`)."""
    from specdec.experiments.usermeasure import ENGINES

    return [e for e in ENGINES if e != "auto" and not e.startswith("hf-")]


def para(text: str) -> str:
    """A description paragraph, wrapped (the raw formatter keeps NAMES's layout as written)."""
    return textwrap.fill(text, 88) + "\n\n"


def needs_models(command: str, exc: BaseException) -> int:
    """One line for a missing 'models' extra (ImportError) or default target (FileNotFoundError)."""
    if isinstance(exc, ImportError):
        missing = f" ({exc.name} is missing)" if getattr(exc, "name", None) else f" ({exc})"
        message = (
            f"needs torch and transformers, the 'models' extra{missing}; "
            "install them with: pip install 'specdec[models]'"
        )
    else:
        message = str(exc)
    print(f"specdec {command}: error: {one_line(message)}", file=sys.stderr)
    return USAGE_ERROR


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def progress(items: Any, desc: str) -> Any:
    """A progress bar on stderr (tqdm, a dependency of the 'models' extra; off when stderr is no terminal)."""
    from tqdm import tqdm

    items = list(items)
    return tqdm(items, desc=desc, total=len(items), file=sys.stderr, leave=False, disable=None)


def json_out(record: Any) -> str:
    from specdec.theory.recordio import jsonable

    return json.dumps(jsonable(record), indent=1, allow_nan=False)  # the records' rule: NaN -> null


def fmt(value: Any, spec: str = ".4f", missing: str = "n/a") -> str:
    return missing if value is None else format(value, spec)


def interval(triple: Any) -> str:
    est, lo, hi = triple
    ci = "" if lo is None else f"  [{lo:.3f}, {hi:.3f}] (95% bootstrap interval over prompts)"
    return f"{est:.3f}x{ci}"


def read_record(path: str, kind: str, command: str) -> dict[str, Any]:
    """A JSON record of ``kind`` saved by ``specdec COMMAND --json`` (or its benchmark script)."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--from-json: no such file {path!r}")
    try:
        record = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UsageError(f"--from-json: {path!r} is not JSON ({exc})") from None
    if not isinstance(record, dict) or record.get("kind") != kind:
        raise UsageError(f"--from-json: {path!r} is not a record of 'specdec {command} --json'")
    return record


def require_fields(record: dict[str, Any], fields: Sequence[str], path: str, command: str) -> None:
    """Every field a command prints from a record read by :func:`read_record`, checked before it prints
    a line: each of ``fields`` is a dotted path (``"target.name"``; ``*`` stands for every value of a
    mapping, ``"summary.engines.*.step_ms"``); the first one missing (or under a value that is not a
    mapping) is a :class:`UsageError` naming the file and the field."""

    def missing(value: Any, parts: list[str], at: str) -> str | None:
        if not parts:
            return None
        head, rest = parts[0], parts[1:]
        if not isinstance(value, dict):
            return f"{at}.{head}" if at else head
        if head == "*":
            for key, item in value.items():
                found = missing(item, rest, f"{at}.{key}" if at else str(key))
                if found is not None:
                    return found
            return None
        here = f"{at}.{head}" if at else head
        return here if head not in value else missing(value[head], rest, here)

    for field_path in fields:
        lacking = missing(record, field_path.split("."), "")
        if lacking is not None:
            raise UsageError(
                f"--from-json: {path!r} lacks the field {lacking!r} (a record of 'specdec {command} --json' "
                "has it): a damaged or hand-made record"
            )
