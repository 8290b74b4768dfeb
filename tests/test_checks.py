"""specdec.theory.checks: the one argument checker names the argument, its range and the value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specdec.theory.checks import check_float, check_int, check_ints, check_probability, is_int


def test_check_int():
    assert check_int("n", 3, low=1) == 3 and type(check_int("n", np.int64(3), low=1)) is int
    assert check_int("n", 5, low=1, high=5) == 5 and check_int("seed", -7) == -7
    for bad, msg in [
        (0, r"n must be an integer >= 1; got 0"),
        (True, r"n must be an integer >= 1; got True"),
        (2.0, r"n must be an integer >= 1; got 2.0"),
        ("3", r"n must be an integer >= 1; got '3'"),
    ]:
        with pytest.raises(ValueError, match=f"^{msg}$"):
            check_int("n", bad, low=1)
    with pytest.raises(ValueError, match=r"^k must be an integer in \[1, 4\] \(the depth\); got 5$"):
        check_int("k", 5, low=1, high=4, note="the depth")
    assert is_int(np.int8(1)) and not is_int(False) and not is_int(1.0)


def test_check_ints():
    assert check_ints("ks", [1, np.int32(2)], low=1, distinct=True) == (1, 2)
    for bad in ([], [0, 1], [1, True], "12"):
        with pytest.raises(ValueError, match=r"ks must be a non-empty list of integers >= 1"):
            check_ints("ks", bad, low=1)
    with pytest.raises(ValueError, match="must not repeat"):
        check_ints("ks", [1, 1], low=1, distinct=True)


def test_check_float_and_probability():
    assert check_float("c", np.float32(0.5), low=0.0) == 0.5 and check_probability("p", 1) == 1.0
    for bad in (-0.1, math.nan, math.inf, True, "0.5"):
        with pytest.raises(ValueError, match=r"^c must be a finite number >= 0.0; got"):
            check_float("c", bad, low=0.0)
    with pytest.raises(ValueError, match=r"l must be a finite number in \(0.0, 1.0\]; got 0.0"):
        check_float("l", 0.0, low=0.0, high=1.0, open_low=True)
    with pytest.raises(ValueError, match=r"p must be a finite number in \[0.0, 1.0\]"):
        check_probability("p", 1.5)
