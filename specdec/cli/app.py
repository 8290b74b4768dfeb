"""The ``specdec`` command line: the book's practical question, answered for your own numbers.

Installed with the package (``[project.scripts]``), also runnable as ``python -m specdec``:

* ``specdec plan``  -- what Theorem 3.8 predicts for an acceptance rate alpha, a draft cost c,
  a draft length gamma and, optionally, a measured verify cost: E[T] (Eq. 1), the speedup,
  the optimal gamma, the break-even condition (Corollary 3.9) and the ceiling 1 / (1 - alpha).
  numpy only: it works without torch (:mod:`specdec.cli.plan`, the numbers from
  :func:`specdec.theory.plan.plan`).
* ``specdec modes`` -- which lean mode (:data:`specdec.engine.lean.MODES`, those this machine can run;
  the others are listed with the reason) decodes fastest on this machine, each mode's step
  time and verify cost, and the draft length for a given alpha (needs the ``models`` extra;
  :mod:`specdec.cli.modes`).
* ``specdec measure`` -- alpha, c, the verify cost and the real speedup of a draft on your
  prompts, against Theorem 3.8's prediction (engines: :data:`specdec.experiments.usermeasure.ENGINES`;
  :mod:`specdec.cli.measure`).
* ``specdec bench`` -- the engine benchmark (:data:`specdec.measure.enginebench.ALL_ENGINES`) on this
  machine, quick or ``--full`` (:mod:`specdec.cli.bench`).
* ``specdec run`` -- the book's run programs (:data:`specdec.experiments.programs.PROGRAMS`), each
  from its options dataclass (:mod:`specdec.cli.run`).

Every number is computed by the theory, measurement and analysis layers; the command modules only
parse, check (with :mod:`specdec.theory.checks`) and print. This module builds the parser from the
commands' own parts and runs one. A bad argument is answered with one line on stderr and exit
status 2, never a traceback; a warning the library raises (e.g. a lean mode left out, a cache that
cannot be written) is printed as one line too. When the reader of stdout goes away (``specdec ... |
head``) the command stops quietly with status 141, as a program ended by SIGPIPE does.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from specdec.cli import bench, measure, modes, run
from specdec.cli import plan as plan_command
from specdec.cli.common import NAMES, USAGE_ERROR, Parser, UsageError, one_line, para

__all__ = ["main", "parser", "subparser"]


def parser() -> Parser:
    """The ``specdec`` parser: the top level and each command's own (``add_parser`` of its module)."""
    from specdec import __version__

    fmt = argparse.RawDescriptionHelpFormatter
    parser = Parser(
        prog="specdec",
        description=para(
            "How much does speculative decoding gain on your numbers? Theorem 3.8 of "
            "Leviathan et al. (2023), priced with your measurements."
        )
        + NAMES,
        epilog="Examples:\n  specdec plan --alpha 0.8 --c 0.05\n"
        "  specdec plan --alpha 0.6 --c 0 --verify-curve 2:1.1,3:1.2,5:1.4 --json\n"
        "  specdec modes --alpha 0.4",
        formatter_class=fmt,
    )
    parser.add_argument("--version", action="version", version=f"specdec {__version__}")
    # not required=True: with it, "specdec --bogus" would be told a COMMAND is missing; main() says which
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    for command in (plan_command, modes, measure, bench, run):
        command.add_parser(sub, fmt)
    return parser


def subparser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    """The parser of ``command`` (``parser`` itself when there is none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return parser


def warning_line(command: str) -> Any:
    """``warnings.showwarning`` for the command line: one line on stderr, no source line."""

    def show(
        message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        print(f"specdec {command}: warning: {one_line(str(message))}", file=sys.stderr, flush=True)

    return show


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so that the interpreter's last flush at exit
    does not raise again (the recipe of Python's documentation of SIGPIPE)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # a stdout without a file descriptor (e.g. in a test)
        pass


#: Exit status after the reader of stdout went away (``specdec ... | head``): 128 + SIGPIPE, the status
#: of a program the signal ends, as ``yes | head`` leaves it.
BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``specdec`` with ``argv`` (default: the process's arguments); returns the exit status."""
    top = parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args, extra = top.parse_known_args(argv)
        if args.command is None:  # "specdec --bogus": name the option, not a missing COMMAND
            top.error(
                f"unknown option {extra[0]}" if extra else "the following arguments are required: COMMAND"
            )
        if extra:  # after the command, its own parser reports them: "specdec plan: error: ..."
            after = argv.index(extra[0]) > argv.index(args.command)
            if after:
                subparser(top, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
            top.error(f"unknown option {extra[0]}")
        args.argv = argv
    except SystemExit as exc:  # --help, --version, argparse's own errors (already reported)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else USAGE_ERROR)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = warning_line(args.command)
            code = args.run(args)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's flush at exit
            return code
    except (UsageError, ValueError) as exc:  # ValueError: the library's own argument checks
        print(f"specdec {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return USAGE_ERROR
    except BrokenPipeError:  # the reader of stdout went away (| head): stop quietly, as SIGPIPE would
        _quiet_stdout()
        return BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"specdec {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
