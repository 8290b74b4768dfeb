"""The verdict rule of the book: does a recomputed value reproduce a printed one?

A printed number carries its own precision: "2.5" promises the true value lies in
[2.45, 2.55], "0.8" in [0.75, 0.85], "1.53X" in [1.525, 1.535]. A recomputation *agrees*
when it rounds to the printed value, i.e. when it lies within half a unit of the last printed
digit (plus a hair for binary floating point); otherwise it *differs*. The rule is stated
once here and applied by code everywhere in the book.
"""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = ["AGREES", "DIFFERS", "agrees", "half_unit", "parse_printed", "verdict"]

AGREES = "agrees"
DIFFERS = "differs"

_NUMBER = re.compile(r"^\s*[~≈]?\s*([-+]?\d+(?:\.\d*)?|[-+]?\.\d+)\s*[xX×%]?\s*$")
_EPS = 1e-9


def parse_printed(printed: str | float | int) -> tuple[float, float]:
    """Value and half-unit of a printed number such as ``"1.53X"``, ``"0.8"`` or ``"3"``.

    Strings may carry a leading ``~`` and a trailing ``X``/``×``; a float or int is taken
    at the precision of its shortest decimal representation.
    """
    text = printed if isinstance(printed, str) else repr(printed)
    match = _NUMBER.match(text)
    if not match:
        raise ValueError(f"printed must be a decimal number such as '1.53X' or '0.8'; got {printed!r}")
    number = Decimal(match.group(1))
    exponent = number.as_tuple().exponent
    if not isinstance(exponent, int):  # "n", "N" or "F": not a finite decimal (the pattern admits none)
        raise ValueError(f"printed must be a finite decimal number; got {printed!r}")
    return float(number), 0.5 * 10.0**exponent


def half_unit(printed: str | float | int) -> float:
    """Half a unit of the last printed digit: 0.05 for "2.5", 0.005 for "1.53X"."""
    return parse_printed(printed)[1]


def agrees(printed: str | float | int, value: float) -> bool:
    """True when ``value`` rounds to ``printed`` (within half a unit of its last digit)."""
    target, half = parse_printed(printed)
    return abs(float(value) - target) <= half + _EPS


def verdict(printed: str | float | int, value: float) -> str:
    """``"agrees"`` or ``"differs"`` by :func:`agrees`."""
    return AGREES if agrees(printed, value) else DIFFERS
