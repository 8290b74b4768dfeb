"""Issue 41, item 7: the theory's functions do bounded work and hold bounded memory, with the same
answers as before for ordinary inputs.

Measured by what the functions do, never by the clock: the largest grid of speedups
:func:`~specdec.theory.speedup.optimal_gamma` asks for, and how many trees
:func:`~specdec.theory.treetheory.best_tree_size` scores.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from specdec.theory import speedup, treetheory
from specdec.theory.speedup import expected_tokens, optimal_gamma
from specdec.theory.treetheory import best_tree, best_tree_size, tree_speedup


def test_expected_tokens_at_the_largest_gamma_is_the_limit():
    """gamma + 1 wrapped to -2**63 in int64: -inf and an overflow warning; now the gamma -> infinity
    limit 1 / (1 - alpha) (and gamma + 1 at alpha = 1), with no warning."""
    big = 2**63 - 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert expected_tokens(0.5, big) == 2.0
        assert expected_tokens(0.0, big) == 1.0
        assert expected_tokens(1.0, big) == 2.0**63
        assert np.array_equal(expected_tokens([0.5, 0.9], [big, 10**18]), 1.0 / (1.0 - np.array([0.5, 0.9])))
    gammas = np.arange(0, 200)
    assert np.array_equal(  # ordinary gammas: the same digits as gamma + 1 in integers
        expected_tokens(0.8, gammas), -np.expm1((gammas + 1) * np.log(0.8)) / (1.0 - 0.8)
    )


def _recording_largest_grid(monkeypatch) -> list[int]:
    """Patch optimal_gamma's Theorem 3.8 to note the size of each grid it is asked for, refusing (before
    allocating) one beyond the scan's budget."""
    sizes: list[int] = []
    real = speedup.walltime_speedup

    def recording(alpha, gamma, c):
        size = int(np.prod(np.broadcast_shapes(np.shape(alpha), np.shape(gamma), np.shape(c))))
        sizes.append(size)
        assert size <= 2**22, f"a grid of {size} speedups at once"
        return real(alpha, gamma, c)

    monkeypatch.setattr(speedup, "walltime_speedup", recording)
    return sizes


def test_optimal_gamma_over_many_alphas_and_a_large_max_gamma_holds_a_bounded_grid(monkeypatch):
    """The issue's case tried to allocate 100,001 x 20,000 float64 (14.9 GiB) at once."""
    sizes = _recording_largest_grid(monkeypatch)
    best = optimal_gamma(np.full(20000, 0.5), 0.1, max_gamma=100_000)
    assert best.shape == (20000,) and np.all(best == optimal_gamma(0.5, 0.1))
    assert max(sizes) <= 2**22 and sum(sizes) <= 2 * 2**22  # it stops once no larger gamma can win


@pytest.mark.parametrize("seed", range(4))
def test_optimal_gamma_in_blocks_answers_as_the_whole_grid(monkeypatch, seed):
    """The block scan (forced by a small budget) finds the first maximum of the whole grid, ties to
    the smaller gamma, at alpha = 0, alpha = 1 and c = 0 too."""
    rng = np.random.default_rng(seed)
    alpha = np.concatenate([rng.random(300), [0.0, 1.0, 1.0, 1.0, 0.999, 0.5]])
    c = np.concatenate([rng.random(300) * rng.choice([0.01, 0.3, 2.0]), [0.5, 0.5, 1.0, 3.0, 1e-6, 0.0]])
    whole = optimal_gamma(alpha, c, max_gamma=500)
    monkeypatch.setattr(speedup, "SCAN_VALUES", 1000)
    sizes = _recording_largest_grid(monkeypatch)
    assert np.array_equal(optimal_gamma(alpha, c, max_gamma=500), whole)
    assert max(sizes) <= 1000


def _scan_every_size_and_depth(profile, c, curve, draft_calls=None):
    """The definition, as best_tree_size once computed it: every (N, depth limit), ties to the smaller N,
    then the shallower tree."""
    best = (0, [], tree_speedup([], profile, c, curve, draft_calls))
    for n in range(1, len(curve)):
        for depth in range(1, len(profile) + 1):
            tree = best_tree(profile[:depth], n)
            if len(tree) == n and (s := tree_speedup(tree, profile, c, curve, draft_calls)) > best[2]:
                best = (n, tree, s)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_best_tree_size_answers_as_the_scan_of_every_size_and_depth(seed):
    rng = np.random.default_rng(seed)
    rows, width = int(rng.integers(1, 6)), int(rng.integers(1, 4))
    profile = np.sort(rng.random((rows, width)), axis=1)[:, ::-1] * 0.9
    curve = np.concatenate([[1.0], 1.0 + np.cumsum(rng.random(30) * rng.choice([0.0, 0.02, 0.2]))])
    c = float(rng.choice([0.0, 0.02, 0.3]))
    for calls in (None, 0, 2):
        expected = _scan_every_size_and_depth(profile, c, curve, calls)
        assert best_tree_size(profile, c, curve, calls) == expected


def test_best_tree_size_scores_few_trees_on_a_long_curve(monkeypatch):
    """The issue's case (a verify curve of 4,000 entries) took over 120 s: one greedy tree and one
    scoring per (N, depth limit), quadratic in N. Now one greedy construction per depth limit, and
    a few exact scorings of the candidates nearest the best."""
    scored = []
    real = treetheory.tree_speedup
    monkeypatch.setattr(treetheory, "tree_speedup", lambda *a, **k: scored.append(1) or real(*a, **k))
    profile = np.clip(0.9 * 0.97 ** np.arange(8)[:, None] * 0.5 ** np.arange(8)[None, :], 0, 1)
    n, tree, s = best_tree_size(profile, 0.05, np.linspace(1, 2, 4000))
    assert len(tree) == n > 100 and s == real(tree, profile, 0.05, np.linspace(1, 2, 4000))
    assert len(scored) <= 1 + 64
