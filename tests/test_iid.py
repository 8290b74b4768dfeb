"""The i.i.d. model of Section 3.1: simulation follows accepted_pmf, and Eq. (1) inverts."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.theory.iid import alpha_from_mean_tokens, simulate_accepted
from specdec.theory.speedup import accepted_pmf, expected_tokens


@pytest.mark.parametrize(("alpha", "gamma"), [(0.3, 3), (0.8, 5), (0.95, 12)])
def test_simulation_matches_truncated_geometric(alpha, gamma):
    rng = np.random.default_rng(20230518)
    n = 200_000
    a = simulate_accepted(alpha, gamma, n, rng)
    assert a.shape == (n,) and a.dtype == np.int64
    assert a.min() >= 0 and a.max() <= gamma
    freq = np.bincount(a, minlength=gamma + 1) / n
    pmf = accepted_pmf(alpha, gamma)
    se = np.sqrt(pmf * (1 - pmf) / n)
    assert np.all(np.abs(freq - pmf) <= 5 * se + 1e-12)
    se_mean = (a + 1).std() / np.sqrt(n)
    assert abs((a + 1).mean() - expected_tokens(alpha, gamma)) <= 5 * se_mean


def test_simulation_edge_cases_and_determinism():
    assert np.all(simulate_accepted(1.0, 4, 10, np.random.default_rng(0)) == 4)
    assert np.all(simulate_accepted(0.0, 4, 10, np.random.default_rng(0)) == 0)
    assert np.all(simulate_accepted(0.7, 0, 10, np.random.default_rng(0)) == 0)
    one = simulate_accepted(0.6, 7, 1000, np.random.default_rng(5))
    two = simulate_accepted(0.6, 7, 1000, np.random.default_rng(5))
    assert np.array_equal(one, two)


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"alpha": 1.5}, "alpha"),
        ({"alpha": -0.1}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"alpha": True}, "alpha"),
        ({"alpha": np.array([0.5, 0.6])}, "alpha"),
        ({"gamma": -1}, "gamma"),
        ({"gamma": 2.5}, "gamma"),
        ({"n_rounds": 0}, "n_rounds"),
        ({"rng": 3}, "rng"),
    ],
)
def test_simulation_rejects_bad_input(kwargs, word):
    args = {"alpha": 0.5, "gamma": 3, "n_rounds": 10, "rng": np.random.default_rng(0)} | kwargs
    with pytest.raises(ValueError, match=word):
        simulate_accepted(**args)


@pytest.mark.parametrize("gamma", [1, 2, 5, 20])
@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.5, 0.83, 0.999, 1.0])
def test_alpha_from_mean_tokens_inverts_eq1(alpha, gamma):
    got = alpha_from_mean_tokens(float(expected_tokens(alpha, gamma)), gamma)
    assert got == pytest.approx(alpha, abs=1e-9)


def test_alpha_from_mean_tokens_known_value():
    # gamma = 1: E[T] = 1 + alpha
    assert alpha_from_mean_tokens(1.7, 1) == pytest.approx(0.7, abs=1e-12)


@pytest.mark.parametrize(
    ("mean", "gamma", "word"),
    [(0.9, 3, "mean_tokens"), (4.5, 3, "mean_tokens"), (2.0, 0, "gamma"), (float("nan"), 3, "mean_tokens")],
)
def test_alpha_from_mean_tokens_rejects_bad_input(mean, gamma, word):
    with pytest.raises(ValueError, match=word):
        alpha_from_mean_tokens(mean, gamma)
