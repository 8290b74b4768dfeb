"""specdec.theory.intervals: bootstrap intervals and the win/loss rule."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.theory.intervals import bootstrap_ci, geomean, per_unit_medians, ratio_ci, verdict


def test_geomean():
    assert geomean([1, 4]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        geomean([1, 0])


def test_bootstrap_covers_the_mean_and_shrinks_with_n():
    rng = np.random.default_rng(1)
    small, large = rng.normal(10, 1, 10), rng.normal(10, 1, 1000)
    est, lo, hi = bootstrap_ci(small)
    assert est == pytest.approx(small.mean()) and lo < est < hi
    _, lo2, hi2 = bootstrap_ci(large)
    assert hi2 - lo2 < (hi - lo) / 4  # about 1/sqrt(100) as wide
    # a 95 % interval of a mean: about +-1.96 standard errors
    se = large.std(ddof=1) / np.sqrt(large.size)
    assert (hi2 - lo2) / (2 * 1.96 * se) == pytest.approx(1.0, abs=0.1)
    assert bootstrap_ci(small) == bootstrap_ci(small)  # seeded


def test_ratio_ci_is_reciprocal_and_verdicts():
    a, b = np.array([2.0, 2.2, 1.9, 2.1]), np.array([1.0, 1.0, 1.0, 1.1])
    est, lo, hi = ratio_ci(a, b)
    est2, lo2, hi2 = ratio_ci(b, a)
    assert (
        est * est2 == pytest.approx(1.0) and lo * hi2 == pytest.approx(1.0) and hi * lo2 == pytest.approx(1.0)
    )
    assert verdict(lo, hi) == "faster" and verdict(lo2, hi2) == "slower" and verdict(0.9, 1.1) == "tie"
    with pytest.raises(ValueError):
        ratio_ci([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        bootstrap_ci([1.0])
    with pytest.raises(ValueError):
        verdict(2, 1)


def test_per_unit_medians_pairs_by_prompt():
    rows = [
        {"config": "a", "prompt": "p2", "t": 3.0},
        {"config": "a", "prompt": "p1", "t": 1.0},
        {"config": "a", "prompt": "p1", "t": 5.0},
        {"config": "b", "prompt": "p1", "t": 2.0},
        {"config": "b", "prompt": "p2", "t": 4.0},
    ]
    units, med = per_unit_medians(rows, "t")
    assert units == ["p1", "p2"] and med["a"].tolist() == [3.0, 3.0] and med["b"].tolist() == [2.0, 4.0]
    with pytest.raises(ValueError, match="unpaired"):
        per_unit_medians(rows[:-1], "t")


def test_paired_speedup_is_the_geomean_of_ratios_of_per_unit_medians():
    """The book's one speedup estimator: per prompt the median of each side's repetitions, then the
    geometric mean of base / other over prompts with the bootstrap interval of ratio_ci; one prompt gives
    the ratio without an interval; it is not the median of per-repetition ratios."""
    from specdec.theory.intervals import paired_speedup

    base = [[1.0, 3.0, 2.0], [4.0, 4.0, 5.0], [2.0, 2.5, 2.2]]
    other = [[1.0, 1.0, 4.0], [2.0, 3.0, 2.0], [2.0, 1.1, 1.0]]
    est, lo, hi = paired_speedup(base, other)
    med_b, med_o = np.median(base, axis=1), np.median(other, axis=1)
    assert (est, lo, hi) == ratio_ci(med_b, med_o)
    per_rep = [np.median(np.asarray(b) / np.asarray(o)) for b, o in zip(base, other, strict=True)]
    assert est != pytest.approx(geomean(per_rep))  # the other estimator gives another number here
    inv = paired_speedup(other, base)
    assert inv[0] == pytest.approx(1 / est)
    assert paired_speedup(list(med_b), list(med_o)) == (est, lo, hi)  # medians given directly
    assert paired_speedup([[2.0, 4.0]], [[1.0, 1.0]]) == (3.0, None, None)
    with pytest.raises(ValueError, match="pair up unit by unit"):
        paired_speedup(base, other[:2])
