"""LookupTreeDrafter: every earlier match of the longest matching n-gram, merged into a count trie."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.drafting.lookuptree import LookupTreeDrafter
from specdec.engine.drafters import PromptLookupDrafter, TreeProposal
from specdec.theory.trees import DraftTree, chain_tree


def paths(tree: DraftTree) -> list[tuple[int, ...]]:
    return [tuple(tree.tokens[j] for j in tree.path(i)) for i in range(len(tree))]


def brute_counts(ids: list[int], starts: list[int], depth: int) -> dict[tuple[int, ...], int]:
    """How many matches' continuations (each cut at ``depth`` tokens) start with each string."""
    out: dict[tuple[int, ...], int] = {}
    for s in starts:
        cont = ids[s : s + depth]
        for k in range(1, len(cont) + 1):
            out[tuple(cont[:k])] = out.get(tuple(cont[:k]), 0) + 1
    return out


def random_prefixes(seed: int, n: int, vocab: int, length: tuple[int, int]):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield rng.integers(0, vocab, size=int(rng.integers(*length))).tolist()


@pytest.mark.parametrize("max_ngram, min_ngram", [(3, 1), (2, 2), (4, 2)])
def test_one_match_is_transformers_prompt_lookup_chain(max_ngram, min_ngram):
    tree_drafter = LookupTreeDrafter(max_ngram, min_ngram)
    chain_drafter = PromptLookupDrafter(max_ngram, min_ngram)
    single = 0
    for ids in random_prefixes(0, 400, vocab=12, length=(2, 60)):
        _, starts = tree_drafter.matches(ids)
        if len(starts) != 1:
            continue
        single += 1
        for gamma in (1, 3, 8, 40):
            assert tree_drafter.lookup_tree(ids, gamma) == chain_tree(chain_drafter.lookup(ids, gamma))
    assert single > 50


def test_the_matches_are_every_earlier_occurrence_of_the_longest_ngram():
    drafter = LookupTreeDrafter(3, 1)
    ids = [5, 1, 2, 7, 1, 2, 8, 1, 2, 7, 9, 1, 2]
    n, starts = drafter.matches(ids)
    assert (n, starts) == (2, [3, 6, 9])
    # the continuations 7 1 2 ..., 8 1 2 ..., 7 9 1 2: "7" twice comes first, then "8"
    tree, counts = drafter.lookup_counted(ids, 4)
    assert paths(tree) == [(7,), (8,), (7, 1), (7, 9)]
    assert counts == (2, 1, 1, 1)
    assert tree.parents == (-1, -1, 0, 0)
    assert drafter.matches([1, 2, 3]) == (0, []) and len(drafter.lookup_tree([1, 2, 3], 5)) == 0


@pytest.mark.parametrize("max_depth", [None, 1, 3])
def test_trees_are_the_budget_most_frequent_continuations(max_depth):
    drafter = LookupTreeDrafter(3, 1, max_depth=max_depth)
    for ids in random_prefixes(1, 150, vocab=4, length=(2, 80)):
        for budget in (0, 1, 2, 5, 16):
            tree, counts = drafter.lookup_counted(ids, budget)
            assert isinstance(tree, DraftTree)
            assert len(tree) <= budget
            if max_depth is not None:
                assert tree.depth <= max_depth
            _, starts = drafter.matches(ids)
            depth = budget if max_depth is None else min(budget, max_depth)
            brute = brute_counts(ids, starts, depth)
            got = paths(tree)
            assert len(set(got)) == len(got)  # no string twice
            assert [brute[p] for p in got] == list(counts)
            assert len(tree) == min(budget, len(brute))
            for node in [-1, *range(len(tree))]:  # siblings: the most frequent first
                sib = [counts[c] for c in tree.children(node)]
                assert sib == sorted(sib, reverse=True)
            if got:  # best-first: nothing left out is more frequent than what was kept
                left_out = [c for p, c in brute.items() if p not in set(got)]
                assert max(left_out, default=0) <= min(counts)
            assert drafter.lookup_counted(ids, budget) == (tree, counts)  # deterministic


def test_propose_tree_is_deterministic_with_no_q():
    drafter = LookupTreeDrafter()
    ids = [1, 2, 3, 1, 2, 4, 1, 2]
    rng = np.random.default_rng(0)
    proposal = drafter.propose_tree(ids, 4, lambda x: x, rng)
    assert isinstance(proposal, TreeProposal) and proposal.q is None and proposal.calls == 1
    assert proposal.tree == drafter.lookup_tree(ids, 4) == DraftTree([3, 4, 1, 1], [-1, -1, 0, 1])
    empty = drafter.propose_tree(ids, 0, lambda x: x, rng)
    assert len(empty.tree) == 0 and empty.calls == 0


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"min_ngram": 0}, "min_ngram"),
        ({"max_ngram": 1, "min_ngram": 2}, "max_ngram"),
        ({"max_depth": 0}, "max_depth"),
        ({"max_ngram": 2.0}, "max_ngram"),
    ],
)
def test_bad_constructor_arguments_are_refused(kwargs, name):
    with pytest.raises(ValueError, match=name):
        LookupTreeDrafter(**kwargs)


def test_bad_call_arguments_are_refused():
    drafter = LookupTreeDrafter()
    with pytest.raises(ValueError, match="budget"):
        drafter.lookup_tree([1, 2, 1], -1)
    with pytest.raises(ValueError, match="budget"):
        drafter.propose_tree([1, 2, 1], True, lambda x: x, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"prefix_ids\[1\]"):
        drafter.lookup_tree([1, -2, 1], 3)
    with pytest.raises(ValueError, match="prefix_ids"):
        drafter.lookup_tree("abc", 3)
