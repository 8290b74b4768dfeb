"""specdec.theory.checks: the one argument checker names the argument, its range and the value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specdec.theory.checks import (
    check_array,
    check_float,
    check_int,
    check_ints,
    check_optional_float,
    check_optional_int,
    check_probability,
    is_int,
)


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


def test_optional_int_and_float_let_none_through():
    assert check_optional_int("top_k", None, low=1) is None and check_optional_int("top_k", 3, low=1) == 3
    assert check_optional_float("top_p", None, low=0.0) is None
    with pytest.raises(ValueError, match=r"^top_k must be an integer >= 1 \(or None\); got 0$"):
        check_optional_int("top_k", 0, low=1)
    with pytest.raises(ValueError, match=r"^t must be an integer in \[1, 8\] \(or None: all\); got 9$"):
        check_optional_int("t", 9, low=1, high=8, note="or None: all")
    with pytest.raises(
        ValueError, match=r"^top_p must be a finite number in \(0.0, 1.0\] \(or None\); got 0$"
    ):
        check_optional_float("top_p", 0, low=0.0, high=1.0, open_low=True)


def test_check_array_applies_the_scalar_rules_to_every_entry():
    assert check_array("a", [0.0, 1], low=0.0, high=1.0).dtype == np.float64
    g = check_array("g", np.array([0, 3.0]), low=0, integer=True)
    assert g.dtype == np.int64 and g.tolist() == [0, 3]
    assert check_array("g", 2, low=0, integer=True).ndim == 0
    assert check_array("a", np.array([0.5, 1], dtype=object), low=0.0).tolist() == [
        0.5,
        1.0,
    ]  # pandas' object
    assert check_array("g", np.array([1, 2], dtype=object), integer=True).dtype == np.int64
    for bad, integer, msg in [
        (-1, True, r"^g must be an integer >= 0; got -1$"),
        (True, True, r"^g must be an integer >= 0; got True$"),
        ("3", True, r"^g must be an integer >= 0; got '3'$"),
        ([1, 2.5], True, r"^g must be integers >= 0; got \[1, 2.5\]$"),
        ([1.0, math.nan], False, r"^g must be finite numbers >= 0; got \[1.0, nan\]$"),
        (np.array([1, None], dtype=object), False, r"^g must be finite numbers >= 0; got array"),
        (np.array([1, True], dtype=object), True, r"^g must be integers >= 0; got array"),
    ]:
        with pytest.raises(ValueError, match=msg):
            check_array("g", bad, low=0, integer=integer)
    with pytest.raises(ValueError, match=r"^v must be a finite number > 0.0 \(T\(k\)\); got 0.0$"):
        check_array("v", 0.0, low=0.0, open_low=True, note="T(k)")


def test_open_upper_bounds():
    assert check_float("a", 0.0, low=0.0, high=1.0, open_high=True) == 0.0
    with pytest.raises(ValueError, match=r"^a must be a finite number in \[0.0, 1.0\); got 1.0$"):
        check_float("a", 1.0, low=0.0, high=1.0, open_high=True)
    with pytest.raises(ValueError, match=r"^a must be a finite number < 2; got 2$"):
        check_float("a", 2, high=2, open_high=True)
    with pytest.raises(ValueError, match=r"^a must be finite numbers in \(0, 1\); got \[0.5, 1\]$"):
        check_array("a", [0.5, 1], low=0, high=1, open_low=True, open_high=True)


@pytest.mark.parametrize(
    "value",
    [2**63, [1, 2**63], 2.0**63, np.float64(1e20), [2.0, 2**65], np.array([2**64 - 1, 4], dtype=np.uint64)],
)
def test_check_array_refuses_integers_beyond_64_bits_instead_of_wrapping(value):
    """numpy wraps 2**63 to -2**63 on the way to int64 (and a float list reaches it as 9.2e18)."""
    with pytest.raises(ValueError, match=r"within 64 bits"):
        check_array("gamma", value, integer=True, low=0)


def test_check_array_refuses_booleans_inside_a_list_and_floats_beyond_range():
    with pytest.raises(ValueError, match="gamma must be integers >= 0; got"):
        check_array("gamma", [True, 2], integer=True, low=0)  # numpy alone reads it as [1, 2]
    with pytest.raises(ValueError, match="c must be finite numbers >= 0; got"):
        check_array("c", [1, 1.5, 10**400], low=0)  # was an OverflowError, a traceback in the CLI
    assert check_array("gamma", [2**63 - 1], integer=True).tolist() == [2**63 - 1]  # the largest int64
    assert check_array("c", [1, 2**63]).tolist() == [1.0, 2.0**63]  # real numbers: any size a float holds
