"""A run program's options: the :class:`Program` base class, :func:`option`, the generated parser.

A run program (the campaigns, the trees, Part IV's real decoding, the batch surface, the GPU runs, the
self-generated data ...) is a frozen dataclass subclassing :class:`Program`:

* its fields are the program's options, each declared with :func:`option` (a default, one line of
  help, and where it has one a set of choices); the command line ``specdec run NAME --field value``
  is generated from them (:func:`parser`), so there is no hand-written argument parser anywhere;
* its ``check()`` checks the fields (:mod:`specdec.theory.checks`): the same checks whether the
  program is called from Python or from the command line, where a refused value is reported as the
  option that carries it (``--new-tokens must be an integer >= 2; got 1``) before anything loads
  (:func:`build`);
* its ``run()`` builds engines and drafters (the one builder and the one registry), hands its cells to
  the one runner (:mod:`specdec.measure.runner`: resume by done cells, load checks, atomic saves),
  writes the record at the path the program sets, and returns the exit status (0: complete; 3: a
  budget or a deadline stopped it, and the same command resumes it);
* :meth:`Program.command` is the command line that reproduces the options (the record keeps it).

The table of programs is :mod:`specdec.experiments.programs` (which imports the programs' modules;
this module imports none of them). Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from specdec.theory.checks import Refused

__all__ = [
    "INCOMPLETE",
    "Program",
    "Refused",
    "as_options",
    "build",
    "option",
    "option_name",
    "parser",
    "read_record",
]


def read_record(path: str | Any) -> dict[str, Any]:
    """The JSON object of a record a program was given (to re-analyse, summarise, reopen): a missing,
    unreadable or non-object file is :class:`Refused`, naming it."""
    import json
    from pathlib import Path

    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise Refused(f"{path} cannot be read as a record ({' '.join(str(exc).split())})") from None
    if not isinstance(record, dict):
        raise Refused(f"{path} holds a JSON {type(record).__name__}, not a record object")
    return record


#: Exit status of a run that a budget or a deadline stopped before its last cell (rerun to resume).
INCOMPLETE = 3


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    choices: Sequence[Any] | None = None,
    metavar: str | None = None,
    once: bool = False,
) -> Any:
    """A program's option: a dataclass field with its ``help`` (one line, shown by ``--help``), its
    allowed ``choices`` (checked by the command line and by :meth:`Program.__post_init__`) and ``once``
    (True: an action of this invocation only, such as discarding a partial record or re-analysing a
    finished one, which :meth:`Program.command` leaves out, so that the command a record keeps resumes
    the run instead of repeating the action). What a record stores as its settings (its resume key) is
    the program's own :class:`specdec.measure.runner.RunSettings`, built in ``run()``."""
    if not help:
        raise ValueError("option needs its help: one line saying what the field sets")
    meta = {"help": help, "choices": tuple(choices) if choices is not None else None, "metavar": metavar}
    if once:
        meta["once"] = True
    if isinstance(default, (list, dict, set)):
        raise ValueError("option default must be immutable (a tuple, not a list)")
    return dataclasses.field(default=default, metadata=meta)


def option_name(field: str) -> str:
    """The command line's name of a field: ``new_tokens`` -> ``--new-tokens``."""
    return "--" + field.replace("_", "-")


@dataclass(frozen=True)
class Program:
    """The base of a run program: its subclass's fields are the options, ``run()`` the program.

    Subclasses set :attr:`name` (its key in :data:`specdec.experiments.programs.PROGRAMS`) and write a
    docstring whose first line is the program's one-line summary (``specdec run --list``) and whose rest
    is its ``--help``.
    """

    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            allowed = f.metadata.get("choices")
            value = getattr(self, f.name)
            if allowed is not None and value not in allowed:
                raise ValueError(f"{f.name} must be one of {', '.join(map(str, allowed))}; got {value!r}")
        self.check()

    def check(self) -> None:
        """The program's own checks of its fields (raise ValueError naming the field); none here."""

    def run(self) -> int:
        """Make the record; return the exit status (0, or :data:`INCOMPLETE` to be resumed)."""
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        """Every field's value."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def command(self) -> str:
        """``specdec run NAME`` with every option that differs from its default, but the actions of this
        invocation (``once``): reruns (resumes) this program with these options; the record keeps it."""
        words = ["specdec", "run", self.name]
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("once") or (f.default is not dataclasses.MISSING and value == f.default):
                continue
            flag = option_name(f.name)
            if isinstance(value, bool):
                words.append(flag if value else "--no-" + flag[2:])
            elif isinstance(value, tuple):
                words += [flag, ",".join(map(str, value))]
            else:
                words += [flag, "none" if value is None else str(value)]
        return shlex.join(words)


def _kind(hint: Any) -> tuple[type, bool, bool]:
    """``(scalar type, optional, tuple)`` of a field's type hint: int, float, str, bool, those or None,
    and tuples of them."""
    optional = False
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        if len(args) != 1:
            raise TypeError(f"an option's type must be one type or that type or None; got {hint}")
        hint = args[0]
        origin = typing.get_origin(hint)
    if origin is tuple:
        inner = typing.get_args(hint)
        if len(inner) != 2 or inner[1] is not Ellipsis or inner[0] not in (int, float, str):
            raise TypeError(f"a tuple option must be tuple[int | float | str, ...]; got {hint}")
        return inner[0], optional, True
    if hint not in (int, float, str, bool):
        raise TypeError(f"an option's type must be int, float, str, bool or a tuple of one; got {hint}")
    return hint, optional, False


def _converter(scalar: type, is_tuple: bool, optional: bool) -> Any:
    def one(text: str) -> Any:
        try:
            return scalar(text)
        except ValueError:
            raise ValueError(f"not {'an integer' if scalar is int else 'a number'}: {text!r}") from None

    def convert(text: str) -> Any:
        if optional and text.lower() == "none":
            return None
        if is_tuple:
            return tuple(one(part.strip()) for part in text.split(",") if part.strip())
        return one(text)

    convert.__name__ = scalar.__name__  # argparse's message: "invalid int value: 'x'"
    return convert


def parser(cls: type[Program], prog: str | None = None, parser_class: Any = None) -> Any:
    """The command-line parser of the program ``cls``, generated from its fields: ``--field-name`` for
    each (``--flag`` / ``--no-flag`` for a bool, ``A,B,C`` for a tuple, the word ``none`` for None where
    a field may be None), help from :func:`option`, the default shown."""
    import argparse

    factory = parser_class or argparse.ArgumentParser
    doc = (cls.__doc__ or "").strip()
    first, _, rest = doc.partition("\n")
    ap = factory(
        prog=prog or f"specdec run {cls.name}",
        description=first + ("\n\n" + _dedent(rest) if rest.strip() else ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        argument_default=argparse.SUPPRESS,  # what is not given keeps the dataclass's default
    )
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        scalar, optional, is_tuple = _kind(hints[f.name])
        meta = f.metadata
        shown = f.default is not dataclasses.MISSING and "default" not in meta.get("help", "")
        default = f" (default: {_shown(f.default)})" if shown else ""
        help_text = meta.get("help", "") + default + (" ('none' unsets it)" if optional else "")
        if scalar is bool and not is_tuple:
            ap.add_argument(option_name(f.name), action=argparse.BooleanOptionalAction, help=help_text)
            continue
        kwargs: dict[str, Any] = {"type": _converter(scalar, is_tuple, optional), "help": help_text}
        if meta.get("metavar"):
            kwargs["metavar"] = meta["metavar"]
        elif meta.get("choices"):
            kwargs["metavar"] = "{" + ",".join(map(str, meta["choices"])) + "}"
        if f.default is dataclasses.MISSING:
            kwargs["required"] = True
        ap.add_argument(option_name(f.name), **kwargs)
    return ap


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    return str(value)


def _dedent(text: str) -> str:
    import textwrap

    return textwrap.dedent(text).strip()


def build(cls: type[Program], given: Mapping[str, Any]) -> Program:
    """``cls(**given)``; a ValueError of its checks comes back with the fields it names written as
    their options (``new_tokens must ...`` -> ``--new-tokens must ...``), for the command line."""
    try:
        return cls(**given)
    except ValueError as exc:
        raise ValueError(as_options(cls, str(exc))) from None


def as_options(cls: type, message: str) -> str:
    """``message`` with the names of ``cls``'s fields (its first word, and any other with an underscore:
    a plain word such as 'drafts' may be prose) written as their options."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    head, _, rest = message.partition(" ")
    head = (
        option_name(head.rstrip(":")) + head[len(head.rstrip(":")) :] if head.rstrip(":") in names else head
    )
    rest = re.sub(r"\b[a-z]+(?:_[a-z0-9]+)+\b", lambda m: option_name(m[0]) if m[0] in names else m[0], rest)
    return f"{head} {rest}"
