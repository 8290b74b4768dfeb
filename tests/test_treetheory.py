"""Draft trees under the i.i.d. model (specdec.theory.treetheory): closed forms, best trees, speedups.

The chain case equals the paper's closed forms (Eq. 1, Theorem 3.8) and the chain simulator draw
for draw; closed forms and simulation agree within 5 standard errors on trees; the greedy tree
is the best of all trees by brute force on small budgets; bad inputs raise ValueError.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from specdec.theory.iid import simulate_accepted
from specdec.theory.speedup import expected_tokens, walltime_speedup, walltime_speedup_measured
from specdec.theory.trees import DraftTree, chain_tree
from specdec.theory.treetheory import (
    best_tree,
    best_tree_size,
    chain_profile,
    expected_accepted,
    path_probabilities,
    simulate_tree_accepted,
    tree_expected_tokens,
    tree_speedup,
)

# illustrative profile: rows are depths 1..4, columns sibling ranks 0..2
PROFILE = np.array([[0.7, 0.4, 0.3], [0.6, 0.35, 0.2], [0.55, 0.3, 0.2], [0.5, 0.25, 0.15]])


def chain(gamma: int) -> list[int]:
    return list(range(-1, gamma - 1))


@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.6, 0.8, 0.95, 1.0])
@pytest.mark.parametrize("gamma", [1, 2, 5, 10])
def test_a_chain_is_the_papers_closed_forms(alpha, gamma):
    profile = chain_profile(alpha, gamma)
    np.testing.assert_allclose(path_probabilities(chain(gamma), profile), alpha ** np.arange(1, gamma + 1))
    np.testing.assert_allclose(
        tree_expected_tokens(chain(gamma), profile), expected_tokens(alpha, gamma), rtol=1e-14
    )
    for c in (0.0, 0.05, 0.5):
        np.testing.assert_allclose(
            tree_speedup(chain(gamma), profile, c), walltime_speedup(alpha, gamma, c), rtol=1e-14
        )
        curve = 1.0 + 0.03 * np.arange(gamma + 1)
        np.testing.assert_allclose(
            tree_speedup(chain_tree([0] * gamma), profile, c, curve),
            walltime_speedup_measured(alpha, gamma, c, curve[gamma]),
            rtol=1e-14,
        )


def test_a_chain_simulates_as_the_papers_model_draw_for_draw():
    got = simulate_tree_accepted(chain(6), chain_profile(0.7, 6), 5000, np.random.default_rng(3))
    want = simulate_accepted(0.7, 6, 5000, np.random.default_rng(3))
    assert np.array_equal(got, want)


def test_path_probabilities_by_hand():
    # root -> 0 (rank 0), 1 (rank 1); 0 -> 2 (rank 0), 3 (rank 1); 1 -> 4 (rank 0)
    tree = DraftTree([0, 0, 0, 0, 0], [-1, -1, 0, 0, 1])
    a = PROFILE
    want = [
        a[0, 0],
        (1 - a[0, 0]) * a[0, 1],
        a[0, 0] * a[1, 0],
        a[0, 0] * (1 - a[1, 0]) * a[1, 1],
        (1 - a[0, 0]) * a[0, 1] * a[1, 0],
    ]
    np.testing.assert_allclose(path_probabilities(tree, a), want, rtol=1e-15)
    assert expected_accepted(tree, a) == pytest.approx(sum(want), rel=1e-15)


@pytest.mark.parametrize("n_nodes", [3, 8, 15])
def test_closed_form_and_simulation_agree_within_5_standard_errors(n_nodes):
    tree = best_tree(PROFILE, n_nodes)
    accepted = simulate_tree_accepted(tree, PROFILE, 50_000, np.random.default_rng(n_nodes))
    se = accepted.std(ddof=1) / np.sqrt(accepted.size)
    assert abs(accepted.mean() - expected_accepted(tree, PROFILE)) < 5 * se
    # a round accepts at most one node per depth
    assert accepted.max() <= max(DraftTree([0] * n_nodes, tree).depths)


def _all_trees(n: int, depth: int, width: int):
    """Every parents list of n nodes within depth and width (isomorphic orderings included)."""
    for parents in itertools.product(*[range(-1, i) for i in range(n)]):
        tree = DraftTree([0] * n, parents)
        counts = [parents.count(k) for k in range(-1, n)]
        if tree.depth <= depth and max(counts) <= width:
            yield list(parents)


@pytest.mark.parametrize("n_nodes", range(0, 7))
def test_greedy_is_the_best_tree_by_brute_force(n_nodes):
    profile = PROFILE[:3]
    best = max(
        (expected_accepted(t, profile) for t in _all_trees(n_nodes, 3, 3)),
        default=0.0,
    )
    got = best_tree(profile, n_nodes)
    assert len(got) == n_nodes
    assert expected_accepted(got, profile) == pytest.approx(best, rel=1e-12)


def test_best_tree_is_a_chain_for_a_chain_profile_and_stops_when_full():
    assert best_tree(chain_profile(0.8, 5), 3) == [-1, 0, 1]
    assert best_tree(chain_profile(0.8, 5), 9) == chain(5)  # only 5 slots exist
    assert best_tree(PROFILE, 0) == []


def test_best_tree_refuses_a_profile_where_greedy_is_not_optimal():
    # the second sibling is on the path more often than the first: (1 - 0.1) * 0.9 > 0.1
    with pytest.raises(ValueError, match="profile must satisfy"):
        best_tree([[0.1, 0.9]], 2)


def test_best_tree_size_maximises_the_speedup_over_sizes_and_depths():
    c = 0.05
    curve = 1.0 + 0.004 * np.arange(40) ** 1.5  # an illustrative verify curve
    n, tree, speedup = best_tree_size(PROFILE, c, curve)
    assert speedup == pytest.approx(tree_speedup(tree, PROFILE, c, curve), rel=1e-15)
    assert len(tree) == n
    # brute force over sizes and depth limits with the same greedy trees
    for m in range(0, 40):
        for d in range(1, 5):
            assert tree_speedup(best_tree(PROFILE[:d], m), PROFILE, c, curve) <= speedup * (1 + 1e-12)
    # a flat verify curve and free drafts: more nodes never hurt, the largest budget wins
    n_flat, _, _ = best_tree_size(PROFILE, 0.0, np.ones(10))
    assert n_flat == 9
    # a lookup drafter (no draft calls) at a steep curve stops early
    n_steep, _, s_steep = best_tree_size(PROFILE, 0.5, 1.0 + 0.5 * np.arange(30), draft_calls=0)
    assert 1 <= n_steep < 29 and s_steep > 1.0
    assert best_tree_size(PROFILE, c, curve, max_nodes=2)[0] <= 2


BAD = [
    (lambda: path_probabilities([-1, 0], [[0.5, 0.2]]), "profile must cover every node"),
    (lambda: path_probabilities([-1], [0.5]), "profile must be a 2-D array"),
    (lambda: path_probabilities([-1], [[1.5]]), "profile must be"),
    (lambda: path_probabilities([0], [[0.5]]), r"parents\[0\]"),
    (lambda: best_tree(PROFILE, -1), "n_nodes must be"),
    (lambda: chain_profile(1.2, 3), "alpha must be"),
    (lambda: chain_profile(0.5, 0), "gamma must be"),
    (lambda: tree_speedup([-1], PROFILE, -0.1), "c must be"),
    (lambda: tree_speedup([-1], PROFILE, 0.1, [1.0]), "verify_curve must be a 1-D array"),
    (lambda: tree_speedup([-1], PROFILE, 0.1, [1.2, 1.3]), "v\\(1\\) = 1"),
    (lambda: tree_speedup([-1], PROFILE, 0.1, None, -1), "draft_calls must be"),
    (lambda: best_tree_size(PROFILE, 0.1, None), "verify_curve must be"),
    (lambda: best_tree_size(PROFILE, 0.1, [1.0, 1.1], max_nodes=-1), "max_nodes must be"),
    (lambda: simulate_tree_accepted([-1], PROFILE, 0, np.random.default_rng(0)), "n_rounds must be"),
    (lambda: simulate_tree_accepted([-1], PROFILE, 10, 0), "rng must be"),
]


@pytest.mark.parametrize("call, match", BAD)
def test_bad_inputs_raise_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_profile_from_marginals_inverts_the_per_rank_product_and_tree_shape_reads_a_tree():
    from specdec.theory.treetheory import profile_from_marginals, tree_shape

    marginal = np.array([[0.4, 0.2, 0.1], [0.3, 0.3, 0.05]])
    a = profile_from_marginals(marginal)
    survive = np.cumprod(np.hstack([np.ones((2, 1)), 1.0 - a[:, :-1]]), axis=1)
    np.testing.assert_allclose(survive * a, marginal, rtol=1e-12)  # P(rank j accepted | parent accepted)
    assert a[0, 1] == pytest.approx(0.2 / 0.6)
    assert tree_shape([-1, -1, 0, 2]) == ([-1, -1, 0, 2], [1, 1, 2, 3], [0, 1, 0, 0])
