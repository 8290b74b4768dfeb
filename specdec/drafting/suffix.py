"""Suffix decoding (SuffixDecoding, Oliaro et al., arXiv:2411.04975) with arctic-inference's semantics.

**The tree.** :class:`SuffixTree` counts, for every token string ``s`` of at most ``max_depth``
tokens, how many times ``s`` occurs in the sequences it holds (a suffix trie truncated at depth
``max_depth``; occurrences never cross from one sequence into another; the root counts the held
tokens). Appending a token to a sequence extends the at most ``max_depth`` suffixes that end at
its end: one child lookup and one count increment each, ``O(max_depth)`` dict operations per
token, kept in the sequence's list of *active* nodes (arctic-inference's ``_active_nodes``). The
trie is not path-compressed (arctic's is): each token appended adds up to ``max_depth`` nodes (one per
suffix it extends that the text has not held before), kept in flat integer arrays rather than as one
Python object per node, so that Python's cyclic garbage collector has nothing to walk in it, and in C
where the q4q8 library builds (:class:`SuffixTree`).

**Speculation** (:meth:`SuffixTree.speculate`, arctic's ``SuffixTree::speculate``): for every
match length ``m = 1, 2, ...`` while the last ``m`` tokens of the context occur in the tree (and
``m < len(context)``), grow a draft below that match and keep the draft of highest *score*, the
sum of its nodes' probabilities (ties go to the longer match). A node's probability is the product
along its path of the conditional frequencies ``count(child) / count(parent)`` (1 for the first
token's parent, the match). The draft of match length ``m`` has at most
``min(max_spec_tokens, int(max_spec_factor * m + max_spec_offset))`` nodes (the paper's
adaptive size, ``MAX_SPEC = alpha * p``) and only nodes of probability ``>= min_token_prob``. With
``use_tree_spec`` the nodes are taken best-first by probability (a priority queue; a child is
never likelier than its parent, so the taken nodes are the most probable ones and form a tree);
without, the draft is the path that always follows the most frequent child. Probabilities and
scores are computed in float32 in arctic's order of operations, so that they agree bit for bit.
``match="longest"`` instead drafts only below the longest match that has a continuation (the
simpler reading: one match length, no comparison of scores).

**The drafter.** :class:`SuffixDecodingDrafter` keeps, as arctic's ``SuffixDecodingCache``, a
per-request tree over the prompt and the tokens generated so far (one sequence; :meth:`start`
builds it, each :meth:`propose_tree` appends the newly committed tokens) and a global tree over
the responses of earlier generations when ``use_global=True`` (:meth:`finish` adds one;
:meth:`clear_global` forgets them). It is off by default: a measurement that repeats a prompt
would otherwise draft from that prompt's own earlier output. The context is
the prefix's last ``max_depth`` tokens; each tree proposes its best draft and the per-request
tree's wins ties. Deterministic: ``q`` is None.

**Against arctic-inference 0.3.0** (``csrc/suffix_decoding/suffix_tree.cc``, ``cache.py``), which
``tests/test_suffix_reference.py`` runs when it is importable and whose recorded outputs
``specdec/data/arctic/suffix_reference.json`` holds:

* the same: counts (every substring up to ``max_depth``, per sequence), the match-length loop and
  its choice by score, ``max_spec_factor`` / ``max_spec_offset`` (``int(f * m + o + 1e-6)``, at
  least 0), ``min_token_prob``, the float32 probabilities and scores, best-first tree growth,
  path speculation, context truncation to ``max_tree_depth``, local-over-global on equal scores;
* ties broken the same way: equal-count siblings keep the order of arctic's sibling lists (a
  new child joins the end, an incremented one moves as ``_increment_count`` moves it: kept in
  the linked sibling lists of :class:`SuffixTree`), and equal probabilities leave the queue in
  ``std::priority_queue`` order
  (libstdc++'s ``push_heap`` / ``pop_heap``, emulated by ``_StdHeap``, with arctic's
  emit / expand items). A standard library whose heap differs from libstdc++'s could order
  equal-probability nodes differently (never different probabilities, scores or match lengths);
* the global tree: arctic appends a running request's response to the global tree *as it is
  generated* (so the global tree also sees the current response); here the global tree holds
  only *finished* generations (:meth:`finish`). Arctic can disable its global tree
  (``max_cached_requests=0``) or evict a response; here ``use_global`` / :meth:`clear_global`.
  Arctic's ``max_cached_requests`` FIFO eviction is not reproduced (the global tree grows until
  cleared);
* arctic defaults to path speculation (``use_tree_spec=False``) and ``max_spec_tokens`` = the
  tree depth (its ``speculate(max_spec_tokens=None)`` reads a missing ``self.max_depth``: pass it
  explicitly); the drafter here defaults to tree speculation and takes ``budget`` as
  ``max_spec_tokens``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import numpy as np

from specdec.engine.drafters import TreeDrafter, TreeProposal, WarpFn, check_budget, check_token_ids
from specdec.theory.checks import check_float, check_int
from specdec.theory.trees import DraftTree

__all__ = ["SuffixDecodingDrafter", "SuffixDraft", "SuffixTree"]

_F32 = np.float32
_MAX_TOKEN = 2**32 - 1
_ONE = np.float32(1.0)


@dataclass
class SuffixDraft:
    """A speculation: tokens, parents (-1: below the root), each node's probability, their sum
    (float32, as arctic) and the match length that produced it (0: no match)."""

    token_ids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0
    match_len: int = 0

    @property
    def tree(self) -> DraftTree:
        return DraftTree(self.token_ids, self.parents)


def _check_spec_args(max_spec_factor: float, max_spec_offset: float, min_token_prob: float) -> None:
    check_float("max_spec_factor", max_spec_factor, low=0.0)
    check_float("max_spec_offset", max_spec_offset)
    check_float("min_token_prob", min_token_prob, low=0.0, high=1.0)


def _check_match(match: str) -> None:
    if match not in ("best", "longest"):
        raise ValueError(f"match must be 'best' or 'longest'; got {match!r}")


class SuffixTree:
    """Occurrence counts of every token string of at most ``max_depth`` tokens in the held
    sequences, updated incrementally (see the module docstring).

    The trie is held in flat integer arrays, not one Python object per node: node 0 is the root, and
    node ``n`` has ``_count[n]``, ``_token[n]``, ``_nchild[n]`` and a doubly linked list of its
    children in arctic's sibling order (``_first``, ``_last``, ``_next``, ``_prev``); ``_edge`` maps
    ``(parent << 32) | token`` to the child. Integers are not tracked by Python's cyclic garbage
    collector, so a tree of a few hundred thousand nodes neither triggers collections as it grows nor
    lengthens them (the earlier trie of ``__slots__`` objects made the collector take 0.27-0.33 ms
    per generated token in ``results/bench/noharm-amd-epyc-2t.json``). Where the q4q8 C library builds,
    the same arrays, edge table and speculation live in C (``csrc/leanq8_suffix.h``, ``native``): the
    appends and the best-first growth then cost no Python per node, and the tests check that the C trie
    gives the Python one's nodes, sibling orders and drafts bit for bit."""

    def __init__(self, max_depth: int = 64, *, native: bool | None = None) -> None:
        """``native``: hold the trie in C (``csrc/leanq8_suffix.h``: the same arrays, sibling order and
        float32 arithmetic, so the same drafts bit for bit) where the q4q8 library builds (None: where
        it does, else in Python; True: refuse without it), or in Python (False: the reference the
        tests compare the C trie with)."""
        self.max_depth = check_int("max_depth", max_depth, low=1)
        if native is not None and not isinstance(native, bool):
            raise ValueError(f"native must be None, True or False; got {native!r}")
        self._c = _CTrie(self.max_depth) if native or (native is None and _native_ok()) else None
        self._last_token: dict[int, int] = {}  # per sequence: its last token
        self._lengths: dict[int, int] = {}
        if self._c is not None:  # the C trie holds its sequences' suffix nodes
            return
        self._active: dict[int, list[int]] = {}  # per sequence: suffix nodes, longest first
        self._count = [0]
        self._token = [-1]
        self._nchild = [0]
        self._first = [-1]
        self._last = [-1]
        self._next = [-1]
        self._prev = [-1]
        self._edge: dict[int, int] = {}

    @property
    def num_seqs(self) -> int:
        return len(self._lengths)

    @property
    def native(self) -> bool:
        """Whether the trie is held in C."""
        return self._c is not None

    @property
    def total(self) -> int:
        """The root's count: how many tokens the held sequences hold together."""
        return self._c.node(0)[0] if self._c is not None else self._count[0]

    def length(self, seq_id: int) -> int:
        """How many tokens sequence ``seq_id`` holds (0 for an unknown id)."""
        return self._lengths.get(seq_id, 0)

    def last_token(self, seq_id: int) -> int | None:
        return self._last_token.get(seq_id)

    def append(self, seq_id: int, token: int) -> None:
        """Append ``token`` to sequence ``seq_id`` (a new one if unknown): O(max_depth)."""
        check_int("seq_id", seq_id, low=0)
        check_int("token", token, low=0, high=_MAX_TOKEN, note="a token id")
        self._append(seq_id, [int(token)])

    def extend(self, seq_id: int, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to sequence ``seq_id`` (a new one if unknown)."""
        check_int("seq_id", seq_id, low=0)
        self._append(seq_id, _token_ids("tokens", tokens))

    def _append(self, seq_id: int, tokens: list[int]) -> None:
        if not tokens:
            return
        if self._c is not None:
            self._c.append(seq_id, tokens)
            self._last_token[seq_id] = tokens[-1]
            self._lengths[seq_id] = self._lengths.get(seq_id, 0) + len(tokens)
            return
        active = self._active.setdefault(seq_id, [])
        depth = self.max_depth
        count, edge, nchild = self._count, self._edge, self._nchild
        first, last, nxt, prev = self._first, self._last, self._next, self._prev
        for token in tokens:
            if len(active) == depth:
                del active[0]  # a suffix of max_depth tokens is not extended further
            active.append(0)
            count[0] += 1
            for i, node in enumerate(active):
                key = (node << 32) | token
                child = edge.get(key)
                if child is None:  # a new child joins the end of the sibling list
                    child = edge[key] = len(count)
                    count.append(1)
                    self._token.append(token)
                    nchild.append(0)
                    first.append(-1)
                    last.append(-1)
                    nxt.append(-1)
                    tail = last[node]
                    prev.append(tail)
                    if tail < 0:
                        first[node] = child
                    else:
                        nxt[tail] = child
                    last[node] = child
                    nchild[node] += 1
                else:
                    before = prev[child]
                    # arctic's _increment_count: an incremented child moves before the first sibling
                    # of its previous sibling's count when that count is at most its new count (equal
                    # counts keep arctic's order, not first-seen order); the root's order is never read
                    if node and before >= 0 and count[before] <= count[child] + 1:
                        head = count[before]
                        j = before
                        while prev[j] >= 0 and count[prev[j]] == head:
                            j = prev[j]
                        after = nxt[child]  # unlink the child ...
                        nxt[before] = after
                        if after >= 0:
                            prev[after] = before
                        else:
                            last[node] = before
                        ahead = prev[j]  # ... and put it before j
                        prev[child], nxt[child], prev[j] = ahead, j, child
                        if ahead >= 0:
                            nxt[ahead] = child
                        else:
                            first[node] = child
                    count[child] += 1
                active[i] = child
        self._last_token[seq_id] = tokens[-1]
        self._lengths[seq_id] = self._lengths.get(seq_id, 0) + len(tokens)

    def count(self, ngram: Sequence[int]) -> int:
        """How many times ``ngram`` (1 to max_depth tokens) occurs in the held sequences."""
        ids = _token_ids("ngram", ngram)
        check_int("len(ngram)", len(ids), low=1, high=self.max_depth, note="max_depth")
        node = self._walk(ids)
        if node is None:
            return 0
        return self._c.node(node)[0] if self._c is not None else self._count[node]

    def children(self, node: int) -> list[int]:
        """A node's children in arctic's sibling order (decreasing count; node 0 is the root, whose
        children are in first-seen order)."""
        if self._c is not None:
            out, child = [], self._c.node(node)[3]
            while child >= 0:
                out.append(child)
                child = self._c.node(child)[5]
            return out
        out, child = [], self._first[node]
        while child >= 0:
            out.append(child)
            child = self._next[child]
        return out

    def counts(self) -> dict[tuple[int, ...], int]:
        """Every string in the trie and its count (for checks: it walks the whole trie)."""
        out: dict[tuple[int, ...], int] = {}
        stack: list[tuple[tuple[int, ...], int]] = [((), 0)]
        while stack:
            path, node = stack.pop()
            for child in self.children(node):
                count, token = self._c.node(child)[:2] if self._c is not None else (
                    self._count[child], self._token[child])  # fmt: skip
                key = (*path, token)
                out[key] = count
                stack.append((key, child))
        return out

    def num_nodes(self) -> int:
        """The nodes below the root: the distinct strings the trie holds."""
        return self._c.size() - 1 if self._c is not None else len(self._count) - 1

    def _walk(self, ids: Iterable[int]) -> int | None:
        if self._c is not None:
            return self._c.walk(list(ids))
        node, edge = 0, self._edge
        for token in ids:
            node = edge.get((node << 32) | token)
            if node is None:
                return None
        return node

    def suffix_nodes(self, seq_id: int) -> list[int]:
        """The nodes of the sequence's last 1, 2, ... min(length, max_depth) tokens, in that order."""
        if self._c is not None:
            return self._c.suffix_nodes(seq_id)
        return self._active.get(seq_id, [])[::-1]

    def match_nodes(self, context: Sequence[int]) -> list[int]:
        """The nodes of the context's last 1, 2, ... tokens, while they occur (shortest first)."""
        return self._match_nodes(_token_ids("context", context))

    def _match_nodes(self, ids: list[int]) -> list[int]:
        out = []
        for m in range(1, min(len(ids), self.max_depth) + 1):
            node = self._walk(ids[len(ids) - m :])
            if node is None:
                break
            out.append(node)
        return out

    def speculate(
        self,
        context: Sequence[int],
        max_spec_tokens: int,
        max_spec_factor: float = 1.0,
        max_spec_offset: float = 0.0,
        min_token_prob: float = 0.1,
        use_tree_spec: bool = True,
        match: Literal["best", "longest"] = "best",
    ) -> SuffixDraft:
        """Arctic's ``SuffixTree::speculate`` (see the module docstring): ``context`` as given
        (the drafter truncates it to max_depth tokens first, as arctic's cache does)."""
        check_int("max_spec_tokens", max_spec_tokens, low=0)
        _check_spec_args(max_spec_factor, max_spec_offset, min_token_prob)
        _check_match(match)
        ids = _token_ids("context", context)
        return self.speculate_at(
            self._match_nodes(ids[1:]),  # arctic matches lengths m < len(context) only
            max_spec_tokens,
            max_spec_factor,
            max_spec_offset,
            min_token_prob,
            use_tree_spec,
            match,
        )

    def speculate_at(
        self,
        nodes: Sequence[int],
        max_spec_tokens: int,
        max_spec_factor: float,
        max_spec_offset: float,
        min_token_prob: float,
        use_tree_spec: bool,
        match: str,
    ) -> SuffixDraft:
        """Speculation from given match nodes (``nodes[m - 1]``: the match of length m), e.g. a
        sequence's own :meth:`suffix_nodes` (arguments are the caller's to check)."""
        factor, offset, threshold = _F32(max_spec_factor), _F32(max_spec_offset), _F32(min_token_prob)
        if self._c is not None:
            return self._c.speculate(nodes, max_spec_tokens, factor, offset, threshold, use_tree_spec, match)
        grow = self._grow_tree if use_tree_spec else self._grow_path
        nchild = self._nchild
        if match == "longest":
            for m in range(len(nodes), 0, -1):
                if nchild[nodes[m - 1]]:
                    draft = grow(nodes[m - 1], _max_tokens(m, factor, offset, max_spec_tokens), threshold)
                    draft.match_len = m
                    return draft
            return SuffixDraft()
        # Arctic walks m = 1, 2, ... and keeps a draft whose score is >= the best so far: the highest
        # score, the longest match among equal ones (and the longest m when every draft is empty). The
        # same choice, walked from the longest match down: a draft replaces the best only with a higher
        # score, and a match whose draft cannot score more than the best is not grown at all (a draft of
        # at most n nodes, each of probability <= 1 in float32, scores <= n).
        best: SuffixDraft | None = None
        best_m, best_score = 0, 0.0
        for m in range(len(nodes), 0, -1):
            node = nodes[m - 1]
            max_tokens = 0 if not nchild[node] else _max_tokens(m, factor, offset, max_spec_tokens)
            if max_tokens <= best_score:  # cannot beat the best; an empty draft while none scored
                if not best_m:
                    best_m = m
                continue
            draft = grow(node, max_tokens, threshold)
            if draft.score > best_score or not best_m:
                best, best_m, best_score = draft, m, draft.score
        out = SuffixDraft() if best is None else best
        out.match_len = best_m
        return out

    def speculate_seq(
        self,
        seq_id: int,
        count: int,
        max_spec_tokens: int,
        max_spec_factor: float,
        max_spec_offset: float,
        min_token_prob: float,
        use_tree_spec: bool,
        match: str,
    ) -> SuffixDraft:
        """:meth:`speculate_at` from the sequence's own ``count`` shortest suffix nodes (the C trie reads
        them in place; arguments are the caller's to check)."""
        if self._c is not None and seq_id in self._c.active:
            args = (_F32(max_spec_factor), _F32(max_spec_offset), _F32(min_token_prob), use_tree_spec, match)
            return self._c.speculate(count, max_spec_tokens, *args, seq_id=seq_id)
        nodes = self.suffix_nodes(seq_id)[:count]
        args = (max_spec_factor, max_spec_offset, min_token_prob, use_tree_spec, match)
        return self.speculate_at(nodes, max_spec_tokens, *args)

    def _next_in_node(self, node: int) -> int:
        """The child that arctic keeps in the same (path-compressed) node: the only child, of equal
        count; -1 when there is none."""
        if self._nchild[node] == 1:
            child = self._first[node]
            if self._count[child] == self._count[node]:
                return child
        return -1

    def _grow_tree(self, node: int, max_tokens: int, threshold: np.float32) -> SuffixDraft:
        """Arctic's ``_speculate_tree``: a queue of (prob, node, emit?, parent); an *emit* item drafts
        its node's token, then queues the next token of the same compressed node (emit) or the node's
        children (an expand item); an *expand* item queues every child whose probability reaches the
        threshold, in sibling order."""
        count, token, first, nxt = self._count, self._token, self._first, self._next
        draft = SuffixDraft()
        score = _F32(0.0)
        heap = _StdHeap()
        after = self._next_in_node(node)
        heap.push((1.0, _ONE, node, False, -1) if after < 0 else (1.0, _ONE, after, True, -1))
        while heap and len(draft.token_ids) < max_tokens:
            _, prob, at, emit, parent = heap.pop()
            if emit:
                while True:
                    draft.token_ids.append(token[at])
                    draft.parents.append(parent)
                    draft.probs.append(float(prob))
                    score = score + prob
                    index = len(draft.token_ids) - 1
                    after = self._next_in_node(at)
                    # a lone item would be pushed and popped at once: walk the compressed node directly
                    if after < 0 or len(heap) or len(draft.token_ids) >= max_tokens:
                        break
                    at, parent = after, index
                heap.push(
                    (float(prob), prob, at, False, index)
                    if after < 0
                    else (float(prob), prob, after, True, index)
                )
            else:
                child, here = first[at], _F32(count[at])
                while child >= 0:  # in sibling order
                    p = prob * _F32(count[child]) / here
                    if p < threshold:
                        break
                    heap.push((float(p), p, child, True, parent))
                    child = nxt[child]
        draft.score = float(score)
        return draft

    def _grow_path(self, node: int, max_tokens: int, threshold: np.float32) -> SuffixDraft:
        count, first = self._count, self._first
        draft = SuffixDraft()
        score, prob = _F32(0.0), _ONE
        while len(draft.token_ids) < max_tokens:
            child = first[node]  # the most frequent child
            if child < 0:
                break
            # Arctic multiplies only across a compressed node's boundary; a chain of equal counts is
            # one node there, so its tokens keep the probability unchanged (not prob * c / c, which
            # rounds). Its path growth rounds prob * (c / p), its tree growth (prob * c) / p.
            if count[child] != count[node]:
                prob = prob * (_F32(count[child]) / _F32(count[node]))
            if prob < threshold:
                break
            node = child
            draft.parents.append(len(draft.token_ids) - 1)
            draft.token_ids.append(self._token[node])
            draft.probs.append(float(prob))
            score = score + prob
        draft.score = float(score)
        return draft


@lru_cache(maxsize=1)
def _native_ok() -> bool:
    """Whether the q4q8 library (which holds the C trie) builds and loads on this machine."""
    from specdec.engine import native

    return native.available("q4q8")


def _declared(lib: Any) -> Any:
    """The q4q8 library with the C trie's entry points declared (ABI 11; ctypes' declarations are the
    library object's, so declaring again is harmless)."""
    import ctypes

    p, i32, f32, i64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_float, ctypes.c_int64
    signatures = {
        "specdec_sfx_new": ([i32], p),
        "specdec_sfx_free": ([p], None),
        "specdec_sfx_append": ([p, p, p, p, i64], i64),
        "specdec_sfx_walk": ([p, p, i64], i32),
        "specdec_sfx_node": ([p, i64, p], i64),
        "specdec_sfx_speculate": ([p, p, i32, i32, f32, f32, f32, i32, i32, p, p, p, p, p], i32),
    }
    for name, (args, result) in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = args, result
    return lib


class _CTrie:
    """A trie in C (``csrc/leanq8_suffix.h``): the handle, freed when dropped, and each sequence's active
    nodes (longest first) in an int32 array of ``max_depth`` entries with its length. The buffers a call
    passes are allocated once (and grown), their addresses kept: a call costs its C work and one ctypes
    call, not an allocation per argument."""

    def __init__(self, max_depth: int) -> None:
        import weakref

        from specdec.engine import native

        lib = _declared(native.library("q4q8"))
        self.handle = lib.specdec_sfx_new(max_depth)
        if not self.handle:
            raise MemoryError("the C suffix trie could not be allocated")
        self._free = weakref.finalize(self, lib.specdec_sfx_free, self.handle)
        self._append_c, self._walk_c = lib.specdec_sfx_append, lib.specdec_sfx_walk
        self._node_c, self._speculate_c = lib.specdec_sfx_node, lib.specdec_sfx_speculate
        self.max_depth = max_depth
        self.active: dict[int, tuple[np.ndarray, np.ndarray, int, int]] = {}  # nodes, length, addresses
        self.out = np.zeros(7, np.int64)
        self.out_at = self.out.ctypes.data
        self._ids(64)
        self._draft(64)

    def _ids(self, n: int) -> None:  # room for n token ids
        self.ids = np.zeros(max(n, 64), np.int64)
        self.ids_at = self.ids.ctypes.data

    def _draft(self, n: int) -> None:  # room for a draft of n nodes and n match nodes
        n = max(n, 64)
        self.tok, self.par = np.zeros(n, np.int64), np.zeros(n, np.int32)
        self.prob, self.nodes = np.zeros(n, np.float32), np.zeros(n, np.int32)
        self.score, self.m = np.zeros(1, np.float32), np.zeros(1, np.int32)
        self.draft_at = [a.ctypes.data for a in (self.tok, self.par, self.prob, self.score, self.m)]
        self.nodes_at = self.nodes.ctypes.data

    def _check(self, code: int, what: str) -> None:
        if code < 0:
            raise MemoryError("the C suffix trie ran out of memory") if code == -3 else ValueError(
                f"the C suffix trie refused {what} (code {code})")  # fmt: skip

    def append(self, seq_id: int, tokens: list[int]) -> None:
        if seq_id not in self.active:
            nodes, n = np.zeros(self.max_depth, np.int32), np.zeros(1, np.int32)
            self.active[seq_id] = (nodes, n, nodes.ctypes.data, n.ctypes.data)
        _, _, nodes_at, n_at = self.active[seq_id]
        if len(tokens) > len(self.ids):
            self._ids(2 * len(tokens))
        self.ids[: len(tokens)] = tokens
        self._check(self._append_c(self.handle, nodes_at, n_at, self.ids_at, len(tokens)), "the tokens")

    def node(self, node: int) -> list[int]:
        """(count, token, children, first, last, next, prev) of ``node``."""
        if self._node_c(self.handle, node, self.out_at) < 0:
            raise ValueError(f"node must be a node of the trie (0 .. {self.size() - 1}); got {node}")
        return self.out.tolist()

    def size(self) -> int:
        return int(self._node_c(self.handle, 0, self.out_at))

    def walk(self, ids: list[int]) -> int | None:
        if len(ids) > len(self.ids):
            self._ids(2 * len(ids))
        self.ids[: len(ids)] = ids
        node = self._walk_c(self.handle, self.ids_at, len(ids))
        return None if node < 0 else int(node)

    def suffix_nodes(self, seq_id: int) -> list[int]:
        if seq_id not in self.active:
            return []
        nodes, n = self.active[seq_id][:2]
        return nodes[: int(n[0])][::-1].tolist()

    def speculate(
        self, nodes: Sequence[int], max_spec: int, factor: np.float32, offset: np.float32,
        threshold: np.float32, tree: bool, match: str, *, seq_id: int | None = None,
    ) -> SuffixDraft:  # fmt: skip
        """A draft from the match nodes ``nodes`` (shortest first); ``seq_id``: from that sequence's own
        suffix nodes instead, the ``nodes`` shortest of them (an int), read in place."""
        if max_spec > len(self.tok) or (seq_id is None and len(nodes) > len(self.nodes)):
            self._draft(2 * max(int(max_spec), 0 if seq_id is not None else len(nodes)))
        if seq_id is None:
            count, at, longest_first = len(nodes), self.nodes_at, 0
            self.nodes[:count] = nodes
        else:
            held, n, held_at, _ = self.active[seq_id]
            have = int(n[0])
            count = min(int(nodes), have)  # the count of matches wanted: held[have - count .. have - 1]
            at, longest_first = held_at + 4 * (have - count), 1
        k = self._speculate_c(
            self.handle, at, count, int(max_spec), float(factor), float(offset), float(threshold), int(tree),
            int(match == "longest") | 2 * longest_first, *self.draft_at,
        )  # fmt: skip
        self._check(k, "the speculation's arguments")
        return SuffixDraft(self.tok[:k].tolist(), self.par[:k].tolist(), self.prob[:k].astype(float).tolist(),
                           float(self.score[0]), int(self.m[0]))  # fmt: skip


@lru_cache(maxsize=4096)
def _max_tokens(m: int, factor: np.float32, offset: np.float32, cap: int) -> int:
    """``max(min(cap, int(m * factor + offset + 1e-6)), 0)`` with arctic's float32 / double steps."""
    return max(min(cap, int(float(_F32(m) * factor + offset) + 1e-6)), 0)


def _token_ids(name: str, ids: Sequence[object]) -> list[int]:
    """:func:`~specdec.engine.drafters.check_token_ids`, and below 2**32 (the trie's edge keys hold a
    token in 32 bits)."""
    out = check_token_ids(name, ids)
    if out and max(out) > _MAX_TOKEN:
        raise ValueError(f"{name} must hold token ids below 2**32; got {max(out)}")
    return out


class _StdHeap:
    """``std::priority_queue`` of libstdc++ (``push_heap`` / ``pop_heap``), largest ``key`` on top:
    the same layout, so equal keys come out in the same order as arctic's queue."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[tuple] = []

    def __len__(self) -> int:
        return len(self.items)

    def push(self, item: tuple) -> None:
        heap = self.items
        heap.append(item)
        self._sift_up(len(heap) - 1, 0, item)

    def _sift_up(self, hole: int, top: int, item: tuple) -> None:
        heap, key = self.items, item[0]
        parent = (hole - 1) // 2
        while hole > top and heap[parent][0] < key:
            heap[hole] = heap[parent]
            hole = parent
            parent = (hole - 1) // 2
        heap[hole] = item

    def pop(self) -> tuple:
        heap = self.items
        n = len(heap)
        if n == 1:
            return heap.pop()
        top, value = heap[0], heap[n - 1]
        heap[n - 1] = top
        length, hole, child = n - 1, 0, 0  # libstdc++'s __adjust_heap over the first n - 1
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if heap[child][0] < heap[child - 1][0]:
                child -= 1
            heap[hole] = heap[child]
            hole = child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            heap[hole] = heap[child - 1]
            hole = child - 1
        self._sift_up(hole, 0, value)
        return heap.pop()


class SuffixDecodingDrafter(TreeDrafter):
    """Suffix decoding as a tree drafter: a per-request suffix tree and a global one over earlier
    generations (see the module docstring). ``budget`` plays arctic's ``max_spec_tokens``."""

    def __init__(
        self,
        max_depth: int = 64,
        *,
        max_spec_factor: float = 1.0,
        max_spec_offset: float = 0.0,
        min_token_prob: float = 0.1,
        use_tree_spec: bool = True,
        use_global: bool = False,
        match: Literal["best", "longest"] = "best",
    ) -> None:
        self.max_depth = check_int("max_depth", max_depth, low=1)
        _check_spec_args(max_spec_factor, max_spec_offset, min_token_prob)
        _check_match(match)
        for name, flag in (("use_tree_spec", use_tree_spec), ("use_global", use_global)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be True or False; got {flag!r}")
        self.max_spec_factor, self.max_spec_offset = float(max_spec_factor), float(max_spec_offset)
        self.min_token_prob = float(min_token_prob)
        self.use_tree_spec, self.use_global, self.match = use_tree_spec, use_global, match
        self.global_tree = SuffixTree(self.max_depth)
        self.local_tree: SuffixTree | None = None
        self._next_seq = 0

    def clear_global(self) -> None:
        """Forget every earlier generation."""
        self.global_tree = SuffixTree(self.max_depth)
        self._next_seq = 0

    def start(self, prompt_ids: Sequence[int]) -> None:
        self.local_tree = SuffixTree(self.max_depth)
        self.local_tree.extend(0, _token_ids("prompt_ids", prompt_ids))

    def _sync(self, prefix_ids: Sequence[int]) -> list[int]:
        """Append the prefix's tokens beyond what the per-request tree holds; return the context."""
        if self.local_tree is None:
            raise RuntimeError("call start(prompt_ids) before propose_tree (a new generation)")
        if isinstance(prefix_ids, (str, bytes)):
            raise ValueError("prefix_ids must be a sequence of token ids (integers >= 0); got a string")
        # only the new tokens are checked (the earlier ones were when they came): O(new), not O(prefix)
        seen, n = self.local_tree.length(0), len(prefix_ids)
        if n < seen or (seen and prefix_ids[seen - 1] != self.local_tree.last_token(0)):
            raise ValueError(
                f"prefix_ids must extend the {seen} tokens seen since start() (prompt + tokens so far); "
                f"got {n} tokens{' that differ' if n >= seen else ''}"
            )
        self.local_tree.extend(0, _token_ids(f"prefix_ids[{seen}:]", prefix_ids[seen:]))
        return [int(t) for t in prefix_ids[max(n - self.max_depth, 0) :]]

    def speculate(self, prefix_ids: Sequence[int], budget: int) -> SuffixDraft:
        """The draft (with probabilities, score and match length) for ``prefix_ids``."""
        budget = check_budget(budget)
        context = self._sync(prefix_ids)
        assert self.local_tree is not None
        args = (budget, self.max_spec_factor, self.max_spec_offset, self.min_token_prob)
        args = (*args, self.use_tree_spec, self.match)
        # the per-request tree holds the context itself: its suffix nodes are the matches
        # (arctic matches lengths m < len(context) only)
        draft = self.local_tree.speculate_seq(0, max(len(context) - 1, 0), *args)
        if self.use_global and self.global_tree.num_seqs:
            other = self.global_tree.speculate_at(self.global_tree._match_nodes(context[1:]), *args)
            if other.score > draft.score:
                draft = other
        return draft

    def propose_tree(
        self, prefix_ids: Sequence[int], budget: int, warp_fn: WarpFn, rng: np.random.Generator
    ) -> TreeProposal:
        draft = self.speculate(prefix_ids, budget)
        return TreeProposal(draft.tree, None, calls=1 if budget else 0)

    def finish(self, generated_ids: Sequence[int]) -> None:
        """Remember the generation's response in the global tree (unless ``use_global`` is False)."""
        ids = _token_ids("generated_ids", generated_ids)
        if self.use_global and ids:
            self.global_tree.extend(self._next_seq, ids)
            self._next_seq += 1
        self.local_tree = None
