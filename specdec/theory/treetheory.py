"""Draft trees under the i.i.d. model: expected tokens, the best static tree, its speedup.

The model generalises Section 3.1 of Leviathan et al. (2023). A node at depth ``d`` (a child of
the root has depth 1) that is the ``j``-th child of its parent (rank ``j``, 0 for the first) is
accepted, given that its parent was accepted and its earlier siblings rejected, with probability
``profile[d - 1, j]``, independently of everything else: the measured per-depth, per-rank
acceptance profile (for the i.i.d. chain, ``alpha`` in column 0).

* :func:`path_probabilities` -- P(node on the accepted path): the product along its path of
  ``prod_{k < j} (1 - profile[d-1, k]) * profile[d-1, j]``.
* :func:`expected_accepted`, :func:`tree_expected_tokens` -- E[A] is the sum of those
  (linearity: A counts the nodes on the accepted path); a round emits E[T] = E[A] + 1 tokens.
  For a chain this is Eq. (1), ``(1 - alpha^(gamma+1)) / (1 - alpha)``.
* :func:`best_tree` -- the static tree of N nodes with the highest E[A] (greedy on path
  probability, as in the static trees of SpecInfer, Sequoia and EAGLE-2).
* :func:`tree_speedup`, :func:`best_tree_size` -- Theorem 3.8 generalised:
  ``E[T] / (c * draft_calls + v(N + 1))``, with ``v(n)`` the verify cost of a target call over
  ``n`` rows relative to a one-row step.
* :func:`simulate_tree_accepted` -- the model simulated, one uniform per node.

Pure numpy.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from specdec.theory.checks import check_array, check_float, check_int, check_optional_int
from specdec.theory.trees import DraftTree, check_parents

__all__ = [
    "best_tree",
    "best_tree_size",
    "chain_profile",
    "expected_accepted",
    "path_probabilities",
    "profile_from_marginals",
    "simulate_tree_accepted",
    "tree_expected_tokens",
    "tree_shape",
    "tree_speedup",
]


def _check_profile(profile: ArrayLike) -> NDArray[np.float64]:
    a = check_array("profile", profile, low=0.0, high=1.0)
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(
            f"profile must be a 2-D array (depth d - 1, sibling rank j) of probabilities with at least "
            f"one row and one column; got shape {a.shape}"
        )
    return a


def tree_shape(parents: DraftTree | Sequence[object]) -> tuple[list[int], list[int], list[int]]:
    """parents (checked), depths (1 for a child of the root) and sibling ranks (0 for a first child)."""
    checked = list(parents.parents) if isinstance(parents, DraftTree) else check_parents(parents)
    depths: list[int] = []
    ranks: list[int] = []
    seen: dict[int, int] = {}
    for parent in checked:
        depths.append(1 if parent < 0 else depths[parent] + 1)
        ranks.append(seen.get(parent, 0))
        seen[parent] = ranks[-1] + 1
    return checked, depths, ranks


def _conditional(a: NDArray[np.float64]) -> NDArray[np.float64]:
    """P(rank j accepted | parent accepted) = prod_{k < j} (1 - a[:, k]) * a[:, j], per depth."""
    survive = np.cumprod(np.hstack([np.ones((a.shape[0], 1)), 1.0 - a[:, :-1]]), axis=1)
    return survive * a


def profile_from_marginals(marginal: ArrayLike) -> NDArray[np.float64]:
    """The profile (P(rank j accepted | parent accepted, ranks < j rejected)) from per-rank marginals
    ``marginal[d, j]`` = P(rank j is accepted | parent accepted), e.g. a drafter's measured hit rates:
    ``marginal_j / (1 - sum_{k < j} marginal_k)``, clipped to [0, 1]; the inverse of the product that
    turns a profile into marginals (:func:`path_probabilities` uses it)."""
    h = _check_profile(marginal)
    left = 1.0 - np.hstack([np.zeros((h.shape[0], 1)), np.cumsum(h, axis=1)[:, :-1]])
    return np.clip(h / np.maximum(left, 1e-12), 0.0, 1.0)


def chain_profile(alpha: float, gamma: int) -> NDArray[np.float64]:
    """The profile of the paper's i.i.d. chain: ``gamma`` rows, one column, every entry ``alpha``."""
    alpha = check_float("alpha", alpha, low=0.0, high=1.0)
    g = check_int("gamma", gamma, low=1)
    return np.full((g, 1), alpha)


def path_probabilities(parents: DraftTree | Sequence[object], profile: ArrayLike) -> NDArray[np.float64]:
    """P(node ``i`` is on the accepted path), for every node of the tree ``parents`` (a
    :class:`~specdec.theory.trees.DraftTree` or its parents list) under the i.i.d. tree model."""
    a = _check_profile(profile)
    checked, depths, ranks = tree_shape(parents)
    for i, (d, j) in enumerate(zip(depths, ranks, strict=True)):
        if d > a.shape[0] or j >= a.shape[1]:
            raise ValueError(
                f"profile must cover every node: node {i} has depth {d} and sibling rank {j}, but profile "
                f"has shape {a.shape} (depths 1..{a.shape[0]}, ranks 0..{a.shape[1] - 1})"
            )
    cond = _conditional(a)
    out = np.empty(len(checked))
    for i, (parent, d, j) in enumerate(zip(checked, depths, ranks, strict=True)):
        out[i] = (1.0 if parent < 0 else out[parent]) * cond[d - 1, j]
    return out


def expected_accepted(parents: DraftTree | Sequence[object], profile: ArrayLike) -> float:
    """E[A], the expected accepted drafts per round: the sum of :func:`path_probabilities`."""
    return float(path_probabilities(parents, profile).sum())


def tree_expected_tokens(parents: DraftTree | Sequence[object], profile: ArrayLike) -> float:
    """E[T] = E[A] + 1, the expected tokens per round (the +1: the token drawn after the path)."""
    return expected_accepted(parents, profile) + 1.0


def best_tree(profile: ArrayLike, n_nodes: int) -> list[int]:
    """The parents of the static tree of ``n_nodes`` nodes with the highest E[A] under ``profile``
    (depth at most ``profile``'s rows, ranks below its columns; fewer nodes when no slot is left).

    Greedy: start from the root and add, one at a time, the free slot (the next child of a node
    in the tree, within the profile) with the highest path probability; ties go to the slot
    opened first. E[A] is a sum over the chosen nodes of a value that depends only on the slot,
    and a slot's value never exceeds that of its parent (a factor <= 1) nor, when
    ``(1 - a[d, j]) a[d, j+1] <= a[d, j]`` for every depth and rank, that of its previous
    sibling. Under that condition the greedy set is the N slots of highest value, hence
    optimal; it is checked and a profile that breaks it is refused (ValueError). Nodes come out
    in the order added, which is a topological order (parents first, siblings by rank).
    """
    a = _check_profile(profile)
    n = check_int("n_nodes", n_nodes, low=0)
    if a.shape[1] > 1 and np.any((1.0 - a[:, :-1]) * a[:, 1:] > a[:, :-1] * (1.0 + 1e-12)):
        raise ValueError(
            "profile must satisfy (1 - a[d, j]) a[d, j + 1] <= a[d, j] for every depth d and rank j "
            "(a later sibling never more likely to be on the path than an earlier one), where "
            "greedy construction is optimal"
        )
    return _greedy(a, n)[0]


def _greedy(a: NDArray[np.float64], n: int) -> tuple[list[int], list[float], list[int]]:
    """:func:`best_tree`'s construction on a checked profile: the parents, path probabilities and
    depths of the nodes in the order added. The first ``k`` nodes are the best tree of ``k`` nodes."""
    cond = _conditional(a)
    parents: list[int] = []
    probs: list[float] = []
    depths: list[int] = []
    heap: list[tuple[float, int, int, int]] = []  # (-value, opened, parent, rank)
    opened = 0

    def open_slot(parent: int, rank: int) -> None:
        nonlocal opened
        depth = 1 if parent < 0 else depths[parent] + 1
        if depth <= a.shape[0] and rank < a.shape[1]:
            base = 1.0 if parent < 0 else probs[parent]
            heapq.heappush(heap, (-base * cond[depth - 1, rank], opened, parent, rank))
            opened += 1

    open_slot(-1, 0)
    while heap and len(parents) < n:
        value, _, parent, rank = heapq.heappop(heap)
        parents.append(parent)
        probs.append(-value)
        depths.append(1 if parent < 0 else depths[parent] + 1)
        open_slot(parent, rank + 1)
        open_slot(len(parents) - 1, 0)
    return parents, probs, depths


def _check_curve(verify_curve: ArrayLike | None, rows: int) -> NDArray[np.float64] | None:
    if verify_curve is None:
        return None
    v = check_array("verify_curve", verify_curve, low=0.0, open_low=True, note="v(n) = T(n)/T(1)")
    if v.ndim != 1 or v.size < rows or abs(v[0] - 1.0) > 1e-9:
        raise ValueError(
            f"verify_curve must be a 1-D array of v(1), v(2), ... with v(1) = 1 and at least {rows} entries "
            f"(a call over N + 1 rows); got {v!r}"
        )
    return v


def tree_speedup(
    parents: DraftTree | Sequence[object],
    profile: ArrayLike,
    c: float,
    verify_curve: ArrayLike | None = None,
    draft_calls: int | None = None,
) -> float:
    """Theorem 3.8 for a tree: ``E[T] / (c * draft_calls + v(N + 1))``.

    ``c`` is the cost of one draft call over one target step (Definition 3.7); ``draft_calls``
    the draft calls per round (default: the tree's depth, a model drafter that drafts one
    level per call; 0 for a lookup drafter); ``verify_curve`` the measured ``v(n) = T(n)/T(1)``
    for n = 1, 2, ... (entry ``n - 1``; v(1) = 1), or None for v = 1 (the theorem's assumption).
    For a chain of gamma nodes with v = 1 this is ``(1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))``.
    """
    checked, depths, _ = tree_shape(parents)
    c = check_float("c", c, low=0.0)
    calls = max(depths, default=0) if draft_calls is None else check_int("draft_calls", draft_calls, low=0)
    v = _check_curve(verify_curve, len(checked) + 1)
    verify = 1.0 if v is None else float(v[len(checked)])
    return tree_expected_tokens(checked, profile) / (c * calls + verify)


def best_tree_size(
    profile: ArrayLike,
    c: float,
    verify_curve: ArrayLike,
    draft_calls: int | None = None,
    max_nodes: int | None = None,
) -> tuple[int, list[int], float]:
    """The node budget N, and the tree, with the highest :func:`tree_speedup`; returns
    ``(N, parents, speedup)``.

    Every N with ``N + 1 <= len(verify_curve)`` (and ``N <= max_nodes``) is tried, and for each
    every depth limit ``1..len(profile)``: the best tree of depth at most that limit
    (:func:`best_tree` on the profile's first rows) has the highest E[T] among trees that cost
    no more draft calls, so the scan finds the best tree of the model. Ties go to the smaller
    N, then the shallower tree.

    The scan costs one greedy construction per depth limit (at most N of them), not one per (N,
    depth): the best tree of N nodes is the first N nodes of the greedy order, so the speedup of
    every N is read from running sums. Those sums may differ from a tree's own E[T] in the last
    digits, so the candidates within :data:`_NEAR` of the best are scored again exactly, by
    :func:`tree_speedup` (the first :data:`_RESCORED` of them in the order of the scan), which also
    gives the speedup returned.
    """
    a = _check_profile(profile)
    if verify_curve is None:
        raise ValueError("verify_curve must be a 1-D array of v(1), v(2), ...; got None")
    v = _check_curve(verify_curve, 1)
    cap = check_optional_int("max_nodes", max_nodes, low=0)
    limit = v.size - 1 if cap is None else min(v.size - 1, cap)
    c = check_float("c", c, low=0.0)
    empty = tree_speedup([], a, c, v, draft_calls)  # checks draft_calls too
    top = empty
    found: list[tuple[int, int, float]] = []  # (N, depth limit, running-sum speedup) near the top
    for depth in range(1, min(a.shape[0], limit) + 1):  # a deeper limit builds the same trees
        _, probs, depths = _greedy(a[:depth], limit)
        if not probs:
            continue
        calls = np.maximum.accumulate(depths) if draft_calls is None else draft_calls
        s = (np.cumsum(probs) + 1.0) / (c * calls + v[1 : len(probs) + 1])
        top = max(top, float(s.max()))
        near = np.flatnonzero(s >= top * (1.0 - _NEAR))[:_RESCORED]
        found = [f for f in found if f[2] >= top * (1.0 - _NEAR)]
        found += [(int(k) + 1, depth, float(s[k])) for k in near]
    best: tuple[int, list[int], float] = (0, [], empty)
    for n, depth, _ in sorted(f for f in found if f[2] >= top * (1.0 - _NEAR))[:_RESCORED]:
        tree = _greedy(a[:depth], n)[0]
        exact = tree_speedup(tree, a, c, v, draft_calls)
        if exact > best[2]:
            best = (n, tree, exact)
    return best


#: :func:`best_tree_size`'s rescoring: candidates whose running-sum speedup is within this relative
#: distance of the best (far above the sums' rounding, ~N * 1.1e-16) are scored exactly, at most
#: :data:`_RESCORED` of them.
_NEAR = 1e-9
_RESCORED = 64


def simulate_tree_accepted(
    parents: DraftTree | Sequence[object], profile: ArrayLike, n_rounds: int, rng: np.random.Generator
) -> NDArray[np.int64]:
    """Accepted drafts A of ``n_rounds`` rounds of the i.i.d. tree model, one uniform per node.

    Node ``i`` at depth d and rank j is accepted when its parent was, its earlier siblings were
    not, and its uniform is below ``profile[d - 1, j]``; A counts the accepted nodes. The
    uniforms are one ``rng.random((n_rounds, N))`` draw, so a chain gives
    :func:`specdec.theory.iid.simulate_accepted`'s draws exactly.
    """
    a = _check_profile(profile)
    n = check_int("n_rounds", n_rounds, low=1)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator; got {type(rng).__name__}")
    path_probabilities(parents, a)  # checks that the profile covers the tree
    checked, depths, ranks = tree_shape(parents)
    if not checked:
        return np.zeros(n, dtype=np.int64)
    u = rng.random((n, len(checked)))
    passed = u < np.array([a[d - 1, j] for d, j in zip(depths, ranks, strict=True)])
    on_path = np.zeros((n, len(checked)), dtype=bool)
    open_: dict[int, NDArray[np.bool_]] = {-1: np.ones(n, dtype=bool)}  # parent on path, no child yet
    for i, parent in enumerate(checked):
        on_path[:, i] = open_[parent] & passed[:, i]
        open_[parent] = open_[parent] & ~passed[:, i]
        open_[i] = on_path[:, i].copy()
    return on_path.sum(axis=1).astype(np.int64)
