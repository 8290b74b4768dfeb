"""Unit tests of specdec.theory.speedup: closed forms, edges, vectorisation and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specdec.theory import speedup as th


def brute_expected_tokens(alpha: float, gamma: int) -> float:
    # E[T] = sum_{j=0}^{gamma} alpha^j (tail-sum form of Eq. 1), written independently.
    return sum(alpha**j for j in range(gamma + 1))


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.4, 0.6, 0.75, 0.8, 0.9, 0.99, 1.0])
@pytest.mark.parametrize("gamma", [0, 1, 2, 3, 7, 10, 40])
def test_expected_tokens_matches_geometric_sum(alpha, gamma):
    assert th.expected_tokens(alpha, gamma) == pytest.approx(brute_expected_tokens(alpha, gamma), rel=1e-12)


def test_expected_tokens_known_values_and_edges():
    assert th.expected_tokens(0.8, 4) == pytest.approx(3.3616, abs=1e-12)  # (1 - 0.8^5) / 0.2
    assert th.expected_tokens(1.0, 5) == 6.0  # the alpha -> 1 limit, gamma + 1
    assert th.expected_tokens(0.0, 9) == 1.0
    assert th.expected_tokens(0.37, 0) == 1.0
    # Continuity at alpha -> 1 without cancellation.
    assert th.expected_tokens(1 - 1e-12, 5) == pytest.approx(6.0, rel=1e-9)
    assert th.expected_tokens(1 - 1e-6, 5) == pytest.approx(6.0 - 15e-6, rel=1e-9)


def test_vectorised_broadcasting_and_scalar_types():
    out = th.expected_tokens(np.array([0.4, 0.8]), np.array([[1], [2]]))
    assert out.shape == (2, 2)
    assert out[1, 1] == pytest.approx(1 + 0.8 + 0.64)
    assert np.ndim(th.walltime_speedup(0.8, 3, 0.1)) == 0
    assert th.walltime_speedup([0.5, 0.9], 2, [0.0, 0.1]).shape == (2,)


def test_walltime_speedup_theorem_3_8():
    # The source article's counterexample rows (Table 4 of the paper).
    assert th.walltime_speedup(0.75, 7, 0.02) == pytest.approx((1 - 0.75**8) / (0.25 * 1.14))
    assert th.walltime_speedup(0.82, 7, 0.11) == pytest.approx((1 - 0.82**8) / (0.18 * 1.77))
    # c = 0 gives E[T]; gamma = 1 gives Corollary 3.9's (1 + alpha) / (1 + c).
    assert th.walltime_speedup(0.6, 4, 0.0) == pytest.approx(th.expected_tokens(0.6, 4))
    assert th.walltime_speedup(0.3, 1, 0.2) == pytest.approx(1.3 / 1.2)
    assert th.walltime_speedup(1.0, 3, 0.0) == 4.0
    assert th.walltime_speedup(0.5, 0, 5.0) == 1.0  # gamma = 0 is plain decoding


def test_ops_factor_theorem_3_11():
    assert th.ops_factor(0.6, 2) == pytest.approx(3 / th.expected_tokens(0.6, 2))
    assert th.ops_factor(0.9, 10, 0.0) == pytest.approx(11 * 0.1 / (1 - 0.9**11))
    alpha, gamma, c_hat = 0.7, 3, 0.05
    want = (1 - alpha) * (gamma * c_hat + gamma + 1) / (1 - alpha ** (gamma + 1))
    assert th.ops_factor(alpha, gamma, c_hat) == pytest.approx(want)
    assert th.ops_factor(1.0, 4, 0.0) == 1.0  # everything accepted: gamma + 1 ops for gamma + 1 tokens


def test_optimal_gamma_is_the_integer_argmax():
    for alpha in [0.2, 0.5, 0.62, 0.75, 0.9]:
        for c in [0.005, 0.02, 0.1, 0.3]:
            g = th.optimal_gamma(alpha, c, max_gamma=60)
            scan = [th.walltime_speedup(alpha, k, c) for k in range(61)]
            assert g == int(np.argmax(scan))
            assert scan[g] >= max(scan) - 1e-15


def test_optimal_gamma_ties_and_limits():
    assert th.optimal_gamma(0.0, 0.0) == 0  # every gamma gives 1: ties go to the smaller gamma
    assert th.optimal_gamma(0.3, 0.5) == 0  # alpha <= c: speculation never pays at gamma = 1
    assert th.optimal_gamma(1.0, 0.0, max_gamma=12) == 12  # unbounded: the grid's end
    out = th.optimal_gamma(np.array([0.6, 0.8, 0.9]), 0.02)
    assert out.shape == (3,) and np.all(np.diff(out) >= 0)
    assert th.optimal_gamma(0.8, np.array([0.0, 0.01, 0.1]), max_gamma=30).tolist()[0] == 30


def test_speedup_ceiling():
    assert th.speedup_ceiling(0.5) == 2.0
    assert th.speedup_ceiling(1.0) == math.inf
    assert th.walltime_speedup(0.75, 200, 0.0) == pytest.approx(th.speedup_ceiling(0.75))


def test_accepted_pmf_truncated_geometric():
    pmf = th.accepted_pmf(0.7, 4)
    assert pmf.sum() == pytest.approx(1.0)
    assert pmf[0] == pytest.approx(0.3) and pmf[4] == pytest.approx(0.7**4)
    mean_tokens = (np.arange(5) * pmf).sum() + 1  # T = A + 1
    assert mean_tokens == pytest.approx(th.expected_tokens(0.7, 4))
    assert th.accepted_pmf(1.0, 3).tolist() == [0, 0, 0, 1]
    assert th.accepted_pmf(0.0, 3).tolist() == [1, 0, 0, 0]


def test_acceptance_rate_corollary_3_6():
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([0.2, 0.6, 0.2])
    assert th.acceptance_rate(p, q) == pytest.approx(0.2 + 0.3 + 0.2)
    assert th.acceptance_rate(p, q) == pytest.approx(1 - 0.5 * np.abs(p - q).sum())  # 1 - TV
    assert th.acceptance_rate(p, p) == pytest.approx(1.0)
    assert th.acceptance_rate([1.0, 0.0], [0.0, 1.0]) == 0.0
    rows = th.acceptance_rate(np.stack([p, q]), np.stack([q, q]))
    assert rows.shape == (2,) and rows[1] == pytest.approx(1.0)
    # Lenience (Appendix A.5): sum_x min(q, p / l) grows as l falls.
    assert th.acceptance_rate(p, q, lenience=0.5) == pytest.approx(0.2 + 0.6 + 0.2)
    assert th.acceptance_rate(p, q, lenience=0.9) > th.acceptance_rate(p, q)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: th.expected_tokens(-0.1, 2), "alpha"),
        (lambda: th.expected_tokens(1.1, 2), "alpha"),
        (lambda: th.expected_tokens(float("nan"), 2), "alpha"),
        (lambda: th.expected_tokens(0.5, -1), "gamma"),
        (lambda: th.expected_tokens(0.5, 1.5), "gamma"),
        (lambda: th.expected_tokens(0.5, True), "gamma"),
        (lambda: th.expected_tokens(0.5, "3"), "gamma"),
        (lambda: th.walltime_speedup(0.5, 2, -0.01), "c must"),
        (lambda: th.walltime_speedup(0.5, 2, float("inf")), "c must"),
        (lambda: th.ops_factor(0.5, 2, -1.0), "c_hat"),
        (lambda: th.optimal_gamma(0.5, 0.1, max_gamma=-1), "max_gamma"),
        (lambda: th.optimal_gamma(0.5, 0.1, max_gamma=2.5), "max_gamma"),
        (lambda: th.acceptance_rate([0.5, 0.6], [0.5, 0.5]), "p must sum"),
        (lambda: th.acceptance_rate([0.5, 0.5], [-0.5, 1.5]), "q must"),
        (lambda: th.acceptance_rate([0.5, 0.5], [0.2, 0.3, 0.5]), "same shape"),
        (lambda: th.acceptance_rate([0.5, 0.5], [0.5, 0.5], lenience=0.0), "lenience"),
        (lambda: th.accepted_pmf(0.5, -2), "gamma"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_walltime_speedup_measured_reduces_to_theorem_3_8():
    # verify_cost = 1 (the default) is Theorem 3.8 exactly, for scalars and arrays alike.
    alphas, gammas, cs = np.array([0.0, 0.35, 0.8, 1.0]), np.array([[1], [3], [10]]), 0.05
    assert np.array_equal(
        th.walltime_speedup_measured(alphas, gammas, cs), th.walltime_speedup(alphas, gammas, cs)
    )
    assert th.walltime_speedup_measured(0.7, 4, 0.1, 1.0) == th.walltime_speedup(0.7, 4, 0.1)
    assert np.ndim(th.walltime_speedup_measured(0.7, 4, 0.1, 1.3)) == 0


def test_walltime_speedup_measured_prices_the_verify_pass():
    # E[T] / (gamma c + T(gamma+1)/T(1)), written out by hand.
    alpha, gamma, c, v = 0.6, 3, 0.02, 1.7
    want = (1 + 0.6 + 0.36 + 0.216) / (3 * 0.02 + 1.7)
    assert th.walltime_speedup_measured(alpha, gamma, c, v) == pytest.approx(want, rel=1e-12)
    # A dearer verify pass lowers the prediction in proportion when c = 0.
    assert th.walltime_speedup_measured(0.8, 5, 0.0, 2.0) == pytest.approx(th.expected_tokens(0.8, 5) / 2)
    # One verify cost per gamma, broadcast.
    out = th.walltime_speedup_measured(0.5, np.array([1, 2]), 0.0, np.array([1.0, 1.5]))
    assert out == pytest.approx([1.5, 1.75 / 1.5])


def test_walltime_speedup_rounds_equals_fixed_gamma_when_rounds_are_full():
    full = np.full(17, 4)
    assert th.walltime_speedup_rounds(0.7, full, 0.1) == pytest.approx(th.walltime_speedup(0.7, 4, 0.1))
    assert th.walltime_speedup_rounds(0.7, full, 0.1, 1.4) == pytest.approx(
        th.walltime_speedup_measured(0.7, 4, 0.1, 1.4)
    )


def test_walltime_speedup_rounds_ratio_of_sums():
    # Two rounds: k = 0 (a plain step, one token, cost s c + v(1)) and k = 3.
    alpha, c = 0.5, 0.01
    drafted, steps, verify = [0, 3], [1, 1], [1.0, 1.2]  # prompt lookup: one lookup per round
    tokens = 1.0 + (1 + 0.5 + 0.25 + 0.125)
    cost = (1 * c + 1.0) + (1 * c + 1.2)
    got = th.walltime_speedup_rounds(alpha, drafted, c, verify, draft_steps=steps)
    assert got == pytest.approx(tokens / cost, rel=1e-12)
    assert np.ndim(got) == 0
    # Default draft steps = k per round; a scalar verify cost applies to every round.
    assert th.walltime_speedup_rounds(alpha, drafted, c, 1.1) == pytest.approx(tokens / (3 * c + 2 * 1.1))
    # Only k = 0 rounds: plain decoding slowed by the lookups.
    assert th.walltime_speedup_rounds(0.9, [0, 0], 0.5, draft_steps=[1, 1]) == pytest.approx(1 / 1.5)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: th.walltime_speedup_measured(0.5, 2, 0.1, 0.0), "verify_cost"),
        (lambda: th.walltime_speedup_measured(0.5, 2, 0.1, -1.0), "verify_cost"),
        (lambda: th.walltime_speedup_measured(0.5, 2, 0.1, float("nan")), "verify_cost"),
        (lambda: th.walltime_speedup_measured(0.5, 2.5, 0.1), "gamma"),
        (lambda: th.walltime_speedup_rounds([0.5, 0.6], [1, 2], 0.1), "alpha must be a scalar"),
        (lambda: th.walltime_speedup_rounds(0.5, [], 0.1), "drafted"),
        (lambda: th.walltime_speedup_rounds(0.5, [[1, 2]], 0.1), "drafted"),
        (lambda: th.walltime_speedup_rounds(0.5, [1, -2], 0.1), "gamma"),
        (lambda: th.walltime_speedup_rounds(0.5, [1, 2], [0.1, 0.2]), "c must be a scalar"),
        (lambda: th.walltime_speedup_rounds(0.5, [1, 2], 0.1, [1.0, 1.1, 1.2]), "verify_cost must be"),
        (lambda: th.walltime_speedup_rounds(0.5, [1, 2], 0.1, draft_steps=[1]), "draft_steps must be"),
        (lambda: th.walltime_speedup_rounds(0.5, [1, 2], 0.1, draft_steps=[1, -1]), "draft_steps"),
    ],
)
def test_walltime_speedup_measured_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_optimal_gamma_at_c_0_is_the_limit_exactly_as_plan_says():
    """With a free draft E[T] rises strictly in gamma: the optimum is max_gamma, not the floating
    tie a scan finds where alpha^(gamma+1) stops changing the sum (53 for alpha = 0.5 before)."""
    from specdec.theory.plan import plan
    from specdec.theory.speedup import optimal_gamma

    for alpha in (0.3, 0.5, 0.9):
        assert int(optimal_gamma(alpha, 0.0, 64)) == 64 == plan(alpha, 0.0)["optimal_gamma"]
    assert int(optimal_gamma(0.0, 0.0, 64)) == 0  # nothing accepted: no gamma helps
    assert list(optimal_gamma([0.5, 0.5], [0.0, 0.05], 64)) == [64, int(optimal_gamma(0.5, 0.05, 64))]


def test_per_gamma_arrays_are_bounded_before_they_are_built():
    """accepted_pmf and optimal_gamma build one value per gamma: an absurd gamma is refused at once,
    naming the argument and the bound, instead of exhausting memory."""
    from specdec.theory.speedup import MAX_GAMMA, accepted_pmf, optimal_gamma

    with pytest.raises(ValueError, match=rf"gamma must be an integer in \[0, {MAX_GAMMA}\]"):
        accepted_pmf(0.5, 10**9)
    with pytest.raises(ValueError, match=rf"max_gamma must be an integer in \[0, {MAX_GAMMA}\]"):
        optimal_gamma(0.5, 0.1, max_gamma=10**9)
    assert len(accepted_pmf(0.5, MAX_GAMMA)) == MAX_GAMMA + 1
