"""``specdec run``: the book's run programs (:mod:`specdec.experiments.programs`), each from its options
(:mod:`specdec.experiments.options`).

``specdec run --list`` names them; ``specdec run NAME --help`` gives a program's options, generated
from its dataclass; ``specdec run NAME [--field value ...]`` checks them (before anything loads) and
runs it. The exit status is the program's: 0 when its record is complete, 3 when a budget or a deadline
stopped it (the same command resumes it), 2 for a refused option or a refusal found when it starts
(:class:`specdec.experiments.options.Refused`: a record that is not complete, a dirty working tree);
any other error of a run keeps its traceback (status 1).
"""

from __future__ import annotations

import argparse
from typing import Any

from specdec.cli.common import USAGE_ERROR, Parser, UsageError, para

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, formatter: Any) -> None:
    """Add this command's parser to ``sub`` (the subparsers of :func:`specdec.cli.app.parser`)."""
    p = sub.add_parser(
        "run",
        help="run one of the book's measurement programs (specdec run --list)",
        description=para(
            "Run one of the book's programs: the campaigns, the trees, the self-generated data and "
            "the other measurements whose records the chapters read. Each program's options come "
            "from its settings dataclass; its record says the command that made it, and rerunning "
            "that command resumes an interrupted run."
        ),
        epilog="Examples:\n  specdec run --list\n  specdec run trees --help\n  specdec run trees --quick",
        formatter_class=formatter,
        add_help=False,
    )
    p.add_argument("-h", "--help", action="store_true", help="this help, or a program's with its name")
    p.add_argument("--list", action="store_true", help="the programs and what each measures")
    p.add_argument("program", nargs="?", metavar="PROGRAM", help="the program's name (see --list)")
    p.add_argument("options", nargs=argparse.REMAINDER, help="the program's options (PROGRAM --help)")
    p.set_defaults(run=run, parser=p)


def run(args: argparse.Namespace) -> int:
    from specdec.experiments import options, programs

    if args.list:
        if args.program:
            raise UsageError("--list takes no program")
        listed = programs.describe()
        width = max(len(name) for name, _ in listed)
        for name, summary in listed:
            print(f"{name:{width}s}  {summary}")
        return 0
    if args.program is None:
        if args.help:
            args.parser.print_help()
            return 0
        raise UsageError("a program is needed: specdec run PROGRAM [options] (specdec run --list)")
    try:
        cls = programs.load(args.program)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    ap = options.parser(cls, parser_class=Parser)
    try:  # argparse's own errors and --help end in SystemExit, already reported
        given = vars(ap.parse_args([*args.options, *(["--help"] if args.help else [])]))
        try:
            program = options.build(cls, given)
        except ValueError as exc:  # the program's checks, before anything loads
            ap.error(str(exc))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else USAGE_ERROR)
    try:
        return program.run()
    except options.Refused as exc:  # found when it ran, before it measured: one line, status 2
        raise UsageError(str(exc)) from None
    except ValueError as exc:  # a failure of the run itself: its traceback, not a usage line
        raise RuntimeError(f"specdec run {args.program} failed: {exc}") from exc
