"""Prompt lookup as a tree: every earlier match of the context's last n-gram, merged into a trie.

:class:`~specdec.engine.drafters.PromptLookupDrafter` (transformers' ``prompt_lookup_num_tokens``)
copies what followed the *first* earlier occurrence of the prefix's last n-gram. The tree version
looks at *all* of them: for n from ``max_ngram`` down to ``min_ngram``, it finds every earlier
occurrence of the last n tokens (one that ends before the last token, so that it has a
continuation) and stops at the first n with any. The continuations of those matches (each up to
``min(budget, max_depth)`` tokens, fewer where the prefix ends first) are merged into a trie whose
nodes count how many matches pass through them. The tree keeps the ``budget`` nodes of highest
count, taken best-first: a node's count never exceeds its parent's, so the selection is a tree.
Siblings come in decreasing count (the most frequent continuation first); equal counts keep the
order of the matches (the leftmost match first, as transformers), and equal counts across
branches are taken breadth-first. With a single match every count is 1 and the tree is the chain
that ``PromptLookupDrafter`` proposes. Deterministic: ``q`` is None.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from specdec.engine.drafters import TreeDrafter, TreeProposal, WarpFn, check_budget, check_token_ids
from specdec.theory.checks import check_int, check_optional_int
from specdec.theory.trees import DraftTree

__all__ = ["LookupTreeDrafter"]


class _Node:
    __slots__ = ("children", "count", "token")

    def __init__(self, token: int) -> None:
        self.token, self.count, self.children = token, 0, {}


class LookupTreeDrafter(TreeDrafter):
    """Prompt lookup over all earlier matches of the longest matching suffix n-gram (q = None).

    ``max_ngram`` / ``min_ngram``: the n-gram lengths tried, longest first (as
    ``PromptLookupDrafter``). ``max_depth``: the deepest a node may be (None: only the budget
    caps the depth).
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, max_depth: int | None = None) -> None:
        check_int("min_ngram", min_ngram, low=1)
        check_int("max_ngram", max_ngram, low=min_ngram, note="min_ngram")
        check_optional_int("max_depth", max_depth, low=1)
        self.max_ngram, self.min_ngram = int(max_ngram), int(min_ngram)
        self.max_depth = None if max_depth is None else int(max_depth)

    def matches(self, prefix_ids: Sequence[int]) -> tuple[int, list[int]]:
        """``(n, starts)``: the longest n-gram length with an earlier match of the prefix's last n
        tokens, and where each match's continuation starts, leftmost first (``(0, [])``: none)."""
        ids = np.asarray(check_token_ids("prefix_ids", prefix_ids), dtype=np.int64)
        for n in range(min(self.max_ngram, len(ids) - 1), self.min_ngram - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(ids[:-1], n)
            hits = np.flatnonzero((windows == ids[-n:]).all(axis=1))
            if hits.size:
                return n, (hits + n).tolist()
        return 0, []

    def lookup_counted(self, prefix_ids: Sequence[int], budget: int) -> tuple[DraftTree, tuple[int, ...]]:
        """The draft tree and each node's count (how many matches continue through it)."""
        budget = check_budget(budget)
        ids = check_token_ids("prefix_ids", prefix_ids)
        depth = budget if self.max_depth is None else min(budget, self.max_depth)
        if depth == 0:
            return DraftTree([], []), ()
        _, starts = self.matches(ids)
        root = _Node(-1)
        for start in starts:
            node = root
            for token in ids[start : start + depth]:
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = _Node(token)
                child.count += 1
                node = child
        tokens: list[int] = []
        parents: list[int] = []
        counts: list[int] = []
        order = 0
        heap: list[tuple[int, int, int, _Node]] = []

        def push_children(node: _Node, index: int) -> None:
            nonlocal order
            # stable sort: equal counts keep the leftmost match's continuation first
            for child in sorted(node.children.values(), key=lambda c: -c.count):
                heapq.heappush(heap, (-child.count, order, index, child))
                order += 1

        push_children(root, -1)
        while heap and len(tokens) < budget:
            _, _, parent, node = heapq.heappop(heap)
            tokens.append(node.token)
            parents.append(parent)
            counts.append(node.count)
            push_children(node, len(tokens) - 1)
        return DraftTree(tokens, parents), tuple(counts)

    def lookup_tree(self, prefix_ids: Sequence[int], budget: int) -> DraftTree:
        """The draft tree of at most ``budget`` nodes (see the module docstring)."""
        return self.lookup_counted(prefix_ids, budget)[0]

    def propose_tree(
        self, prefix_ids: Sequence[int], budget: int, warp_fn: WarpFn, rng: np.random.Generator
    ) -> TreeProposal:
        if check_budget(budget) == 0:
            return TreeProposal(DraftTree([], []))
        return TreeProposal(self.lookup_tree(prefix_ids, budget), None, calls=1)
