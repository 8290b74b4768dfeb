"""The one argument checker: integers, integer lists, real numbers and probabilities.

Every public function of the package checks its integer and real arguments with these (the C
forwards' own error codes aside, which :mod:`specdec.engine.native` maps to ValueError). Each raises
:class:`ValueError` naming the argument, the valid range and the value it got, e.g.
``repeats must be an integer >= 1; got 0``. Booleans are refused where a number is asked
(``True`` is an ``int`` in Python). :func:`check_optional_int` and :func:`check_optional_float`
let None through (their message says "or None"); :func:`check_array` applies the same rules to
every entry of a scalar or array argument (the theory's vectorised formulas). Pure Python and
numpy: the theory layer uses it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "Refused",
    "check_array",
    "check_choice",
    "check_float",
    "check_int",
    "check_ints",
    "check_optional_float",
    "check_optional_int",
    "check_probability",
    "check_seed",
    "is_int",
]


class Refused(ValueError):
    """What a run was given is refused, found when it starts but before it measures or trains anything (a
    record or folder made with other settings, an incomplete record to re-analyse, a dirty working tree,
    a missing side, an option that does not fit the data): ``specdec run`` reports it as one line with
    the usage status 2 (:mod:`specdec.cli.run`). Any other error of a run is a failure and keeps its
    traceback. A ValueError, so that a caller catching argument errors catches it too."""


#: The 64-bit integer range, inclusive: what an array of integers holds without wrapping.
_INT64 = (-(2**63), 2**63 - 1)


def is_int(value: object) -> bool:
    """True for an integer (Python's or numpy's), False for anything else, bool included."""
    return type(value) is int or (not isinstance(value, bool) and isinstance(value, numbers.Integral))


def _is_real(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Real)


def _range(low: float | None, high: float | None, *, open_low: bool = False, open_high: bool = False) -> str:
    if low is not None and high is not None:
        return f"in {'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"
    if low is not None:
        return f"> {low}" if open_low else f">= {low}"
    if high is not None:
        return f"< {high}" if open_high else f"<= {high}"
    return ""


def _within(v: float, low: float | None, high: float | None, open_low: bool, open_high: bool) -> bool:
    above = low is None or (v > low if open_low else v >= low)
    return above and (high is None or (v < high if open_high else v <= high))


def _fail(name: str, kind: str, where: str, note: str | None, value: object) -> ValueError:
    return ValueError(
        f"{name} must be {kind}{' ' + where if where else ''}{f' ({note})' if note else ''}; got {value!r}"
    )


def check_int(
    name: str, value: object, *, low: int | None = None, high: int | None = None, note: str | None = None
) -> int:
    """``value`` as an ``int`` when it is an integer (numpy's included, bool not) in ``[low, high]``;
    otherwise ValueError ``"<name> must be an integer >= <low>; got <value>"`` (``in [low, high]``
    with both bounds; ``note``, e.g. what the bound is, in parentheses before ``; got``)."""
    if is_int(value) and (low is None or value >= low) and (high is None or value <= high):
        return int(value)
    raise _fail(name, "an integer", _range(low, high), note, value)


def check_choice(name: str, value: object, choices: Iterable[object]) -> object:
    """``value`` when it is one of ``choices``; otherwise ValueError ``"<name> must be one of (...); got
    <value>"``."""
    allowed = tuple(choices)
    if isinstance(value, str | int | float | type(None)) and value in allowed:
        return value
    raise ValueError(f"{name} must be one of {allowed}; got {value!r}")


#: The largest seed: numpy's generators take any non-negative integer, torch's manual_seed at most
#: 2**64 - 1, and the seeds are stored in int64 arrays and JSON; a negative one is refused by both.
SEED_MAX = 2**63 - 1


def check_seed(name: str, value: object) -> int:
    """A sampling seed: an integer in [0, :data:`SEED_MAX`] (a ValueError naming ``name`` otherwise)."""
    return check_int(name, value, low=0, high=SEED_MAX, note="the seed of numpy's and torch's generators")


def check_ints(
    name: str, values: Iterable[object], *, low: int | None = None, distinct: bool = False
) -> tuple[int, ...]:
    """A non-empty list of integers >= ``low`` (and without repeats when ``distinct``) as a tuple."""
    out = tuple(values)
    ok = not isinstance(out, str) and all(is_int(v) and (low is None or v >= low) for v in out)
    if not out or not ok:
        where = _range(low, None)
        raise ValueError(
            f"{name} must be a non-empty list of integers{' ' + where if where else ''}; got {out!r}"
        )
    if distinct and len(set(out)) != len(out):
        raise ValueError(f"{name} must not repeat a value; got {out!r}")
    return tuple(int(v) for v in out)


def check_float(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = False,
    open_high: bool = False,
    note: str | None = None,
) -> float:
    """``value`` as a finite ``float`` in ``[low, high]`` (``open_low`` / ``open_high`` leave that
    bound out: ``(low, high]``, ``[low, high)``); otherwise ValueError
    ``"<name> must be a finite number ...; got <value>"``."""
    ok = _is_real(value) and math.isfinite(float(value))
    if ok and _within(float(value), low, high, open_low, open_high):
        return float(value)
    where = _range(low, high, open_low=open_low, open_high=open_high)
    raise _fail(name, "a finite number", where, note, value)


def check_probability(name: str, value: object) -> float:
    """A probability: a finite number in [0, 1]."""
    return check_float(name, value, low=0.0, high=1.0)


def check_optional_int(
    name: str, value: object, *, note: str = "or None", **bounds: int | None
) -> int | None:
    """None as None, otherwise :func:`check_int` with the bounds ``low`` / ``high`` (the message's
    ``note`` says None is allowed too)."""
    return None if value is None else check_int(name, value, note=note, **bounds)


def check_optional_float(
    name: str, value: object, *, note: str = "or None", **bounds: float | bool | None
) -> float | None:
    """None as None, otherwise :func:`check_float` with its bounds (``low``, ``high``, ``open_low``,
    ``open_high``; the message's ``note`` says None is allowed too)."""
    return None if value is None else check_float(name, value, note=note, **bounds)


def check_array(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = False,
    open_high: bool = False,
    integer: bool = False,
    note: str | None = None,
) -> NDArray:
    """``value`` (a number or an array of them) as a numpy array whose every entry follows the
    scalar rules: finite, in ``[low, high]`` (``open_low`` / ``open_high`` as :func:`check_float`), whole with
    ``integer`` (int64 then, float64 otherwise), booleans and strings refused. Otherwise
    ValueError ``"<name> must be a finite number ...; got <value>"`` (``an integer``; ``integers``
    or ``finite numbers`` for an array), as :func:`check_int` and :func:`check_float` word it."""
    arr = np.asarray(value)
    where = _range(low, high, open_low=open_low, open_high=open_high)
    scalar = arr.ndim == 0
    kind = (
        ("an integer" if scalar else "integers")
        if integer
        else ("a finite number" if scalar else "finite numbers")
    )

    def fail(why: str | None = note) -> ValueError:
        return _fail(name, kind, where, why, value)

    if not isinstance(value, np.ndarray) and arr.dtype != bool:  # numpy reads [True, 2] as [1, 2]
        if any(isinstance(v, (bool, np.bool_)) for v in np.asarray(value, dtype=object).flat):
            raise fail()
    if arr.dtype == object:  # e.g. a pandas column, or Python ints beyond 64 bits
        if not all(is_int(v) or _is_real(v) for v in arr.flat):
            raise fail()
        ints = all(is_int(v) for v in arr.flat)
        if ints and any(not _INT64[0] <= int(v) <= _INT64[1] for v in arr.flat):
            if integer:
                raise fail("within 64 bits")
            ints = False
        try:
            arr = arr.astype(np.int64 if ints else float)
        except OverflowError:  # an integer beyond float's range
            raise fail() from None
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise fail()
    if integer and np.issubdtype(arr.dtype, np.unsignedinteger) and arr.size and int(arr.max()) > _INT64[1]:
        raise fail("within 64 bits")  # uint64 beyond int64 would wrap
    f = arr.astype(float)
    if not bool(np.all(np.isfinite(f))) or (integer and not bool(np.all(f == np.round(f)))):
        raise fail()
    if integer and np.issubdtype(arr.dtype, np.floating) and f.size:
        if float(f.max()) >= 2.0**63 or float(f.min()) < -(2.0**63):  # whole floats beyond int64
            raise fail("within 64 bits")
    if f.size and not (
        _within(float(f.min()), low, None, open_low, open_high)
        and _within(float(f.max()), None, high, open_low, open_high)
    ):
        raise fail()
    return arr.astype(np.int64) if integer else f
