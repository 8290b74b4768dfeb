"""SuffixTree (counts, incremental updates) and SuffixDecodingDrafter (trees, budget, global tree)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec.drafting.suffix import SuffixDecodingDrafter, SuffixTree
from specdec.engine.drafters import TreeDrafter, TreeProposal
from specdec.theory.trees import DraftTree

RNG = np.random.default_rng


def brute_counts(seqs: list[list[int]], depth: int) -> dict[tuple[int, ...], int]:
    out: dict[tuple[int, ...], int] = {}
    for seq in seqs:
        for i in range(len(seq)):
            for j in range(i + 1, min(i + depth, len(seq)) + 1):
                key = tuple(seq[i:j])
                out[key] = out.get(key, 0) + 1
    return out


def paths(tree: DraftTree) -> list[tuple[int, ...]]:
    return [tuple(tree.tokens[j] for j in tree.path(i)) for i in range(len(tree))]


@pytest.mark.parametrize("depth", [1, 2, 5, 64])
def test_counts_are_every_substring_up_to_max_depth_after_incremental_appends(depth):
    rng = RNG(depth)
    for _ in range(20):
        tree = SuffixTree(depth)
        seqs: dict[int, list[int]] = {}
        for _ in range(int(rng.integers(1, 15))):  # appends to up to 3 sequences, interleaved
            seq_id = int(rng.integers(0, 3))
            chunk = rng.integers(0, int(rng.choice([2, 4, 30])), size=int(rng.integers(0, 12))).tolist()
            if len(chunk) == 1 and rng.random() < 0.5:
                tree.append(seq_id, chunk[0])
            else:
                tree.extend(seq_id, chunk)
            seqs.setdefault(seq_id, []).extend(chunk)
            assert tree.counts() == brute_counts(list(seqs.values()), depth)
        assert tree.total == sum(len(s) for s in seqs.values())
        assert tree.num_seqs == sum(1 for s in seqs.values() if s) and all(
            tree.length(i) == len(s) for i, s in seqs.items()
        )
        for ngram, count in list(brute_counts(list(seqs.values()), depth).items())[:20]:
            assert tree.count(ngram) == count
        assert tree.count([999]) == 0


def test_incremental_updates_equal_a_rebuild():
    rng = RNG(7)
    for _ in range(30):
        seq = rng.integers(0, int(rng.choice([2, 3, 8])), size=200).tolist()
        one_by_one, chunked, at_once = SuffixTree(16), SuffixTree(16), SuffixTree(16)
        for t in seq:
            one_by_one.append(0, t)
        for start in range(0, len(seq), 7):
            chunked.extend(0, seq[start : start + 7])
        at_once.extend(0, seq)
        assert one_by_one.counts() == chunked.counts() == at_once.counts()
        for k in range(5):
            context = seq[: 40 * (k + 1)]
            drafts = [
                t.speculate(context, 16, use_tree_spec=k % 2 == 0) for t in (one_by_one, chunked, at_once)
            ]
            assert drafts[0] == drafts[1] == drafts[2]


def test_the_drafter_fed_round_by_round_equals_one_started_on_the_whole_prefix():
    rng = RNG(3)
    base = rng.integers(0, 6, size=30).tolist()
    prompt = base + rng.integers(0, 6, size=10).tolist()
    generated = base[5:] + rng.integers(0, 6, size=20).tolist()
    drafter = SuffixDecodingDrafter(32, use_global=False)
    drafter.start(prompt)
    done = 0
    while done < len(generated):
        prefix = prompt + generated[:done]
        fresh = SuffixDecodingDrafter(32, use_global=False)
        fresh.start(prefix)
        assert drafter.speculate(prefix, 12) == fresh.speculate(prefix, 12)
        done += int(rng.integers(1, 4))


def check_draft_against_counts(draft, context, seqs, depth, budget, factor, offset, threshold):
    """Probabilities are count ratios below the match; best-first, siblings most likely first."""
    tree = draft.tree
    assert len(tree) <= min(budget, max(int(factor * draft.match_len + offset + 1e-6), 0))
    if not len(tree):
        return
    brute = brute_counts(seqs, depth)
    match = tuple(context[len(context) - draft.match_len :])
    for path, prob in zip(paths(tree), draft.probs, strict=True):
        assert prob == pytest.approx(brute[match + path] / brute[match], rel=1e-5)
        assert prob >= np.float32(threshold)
    for node in [-1, *range(len(tree))]:
        sib = [draft.probs[c] for c in tree.children(node)]
        assert sib == sorted(sib, reverse=True)
    kept = set(paths(tree))
    frontier = [
        brute[p] / brute[match]
        for p in brute
        if len(p) > len(match) and p[: len(match)] == match and p[len(match) :] not in kept
        if len(p) == len(match) + 1 or p[len(match) : -1] in kept
    ]
    if len(tree) == budget:  # nothing left out beats what was kept
        assert max(frontier, default=0.0) <= min(draft.probs) * (1 + 1e-6)
    else:  # stopped by the threshold or the tree ran out
        assert all(f < threshold * (1 + 1e-6) for f in frontier) or len(tree) == int(
            factor * draft.match_len + offset + 1e-6
        )


@pytest.mark.parametrize("factor, offset, threshold", [(1.0, 0.0, 0.1), (2.0, 1.0, 0.0), (0.5, 0.0, 0.3)])
def test_proposed_trees_are_valid_bounded_and_most_likely_first(factor, offset, threshold):
    rng = RNG(11)
    for _ in range(25):
        depth = int(rng.choice([4, 16, 64]))
        prompt = rng.integers(0, int(rng.choice([2, 3, 6])), size=int(rng.integers(1, 150))).tolist()
        drafter = SuffixDecodingDrafter(
            depth, max_spec_factor=factor, max_spec_offset=offset, min_token_prob=threshold, use_global=False
        )
        drafter.start(prompt)
        for budget in (0, 1, 3, 8, 32):
            proposal = drafter.propose_tree(prompt, budget, lambda x: x, rng)
            assert isinstance(proposal, TreeProposal) and proposal.q is None
            assert isinstance(proposal.tree, DraftTree) and len(proposal.tree) <= budget
            draft = drafter.speculate(prompt, budget)
            assert draft.tree == proposal.tree  # deterministic
            context = prompt[-depth:]
            check_draft_against_counts(draft, context, [prompt], depth, budget, factor, offset, threshold)


def test_a_repetitive_context_drafts_its_continuation():
    drafter = SuffixDecodingDrafter(use_global=False)
    text = [1, 2, 3, 4, 5, 6, 7, 8] * 4
    drafter.start(text)
    draft = drafter.speculate(text, 8)
    assert draft.tree == DraftTree([1, 2, 3, 4, 5, 6, 7, 8], list(range(-1, 7)))
    # the best match is the last 8 tokens: 4 occurrences, 3 followed by more text (score 8 * 3/4)
    assert draft.match_len == 8 and draft.probs == [0.75] * 8


def test_the_global_tree_remembers_finished_generations_and_can_be_cleared_or_kept_off():
    prompt, response = [9, 9, 1, 2], [10, 11, 12, 13, 14, 15]
    # an offset of 8 lets a 2-token match draft the whole rest of the response
    kept = SuffixDecodingDrafter(max_spec_offset=8.0, use_global=True)
    off = SuffixDecodingDrafter(max_spec_offset=8.0)  # the default: no global tree
    for drafter in (kept, off):
        drafter.start(prompt)
        assert len(drafter.speculate(prompt, 8).tree) == 0  # nothing to copy yet
        drafter.finish(response)
    # the same prompt again (a measurement's repeat): only the global tree knows what follows
    for drafter in (kept, off):
        drafter.start(prompt)
    repeat = prompt + response[:2]
    assert kept.speculate(repeat, 8).token_ids == response[2:]
    assert off.speculate(repeat, 8).token_ids == []
    assert kept.global_tree.num_seqs == 1 and off.global_tree.num_seqs == 0
    kept.clear_global()
    kept.start(prompt)
    assert kept.speculate(repeat, 8).token_ids == [] and kept.global_tree.num_seqs == 0


def test_the_per_request_tree_is_fresh_for_each_generation():
    drafter = SuffixDecodingDrafter(use_global=False)
    drafter.start([1, 2, 3, 1, 2])
    assert drafter.speculate([1, 2, 3, 1, 2], 4).token_ids[0] == 3
    drafter.finish([3])
    drafter.start([1, 2])
    assert drafter.speculate([1, 2], 4).token_ids == []


def test_the_protocol():
    assert issubclass(SuffixDecodingDrafter, TreeDrafter)
    with pytest.raises(ValueError, match="q must have shape"):
        TreeProposal(DraftTree([1, 2], [-1, 0]), torch.zeros(3, 5))
    with pytest.raises(ValueError, match="tree must be a DraftTree"):
        TreeProposal([1, 2])
    with pytest.raises(ValueError, match="calls"):
        TreeProposal(DraftTree([], []), None, -1)
    with pytest.raises(NotImplementedError):
        TreeDrafter().propose_tree([1], 1, lambda x: x, RNG(0))
    drafter = SuffixDecodingDrafter()
    with pytest.raises(RuntimeError, match="start"):
        drafter.propose_tree([1, 2], 3, lambda x: x, RNG(0))
    drafter.start([1, 2, 1])
    empty = drafter.propose_tree([1, 2, 1, 2], 0, lambda x: x, RNG(0))
    assert len(empty.tree) == 0 and empty.calls == 0
    assert drafter.propose_tree([1, 2, 1, 2], 2, lambda x: x, RNG(0)).calls == 1


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"max_depth": 0}, "max_depth"),
        ({"max_spec_factor": -1.0}, "max_spec_factor"),
        ({"max_spec_offset": float("nan")}, "max_spec_offset"),
        ({"min_token_prob": 1.5}, "min_token_prob"),
        ({"match": "first"}, "match"),
        ({"use_global": 1}, "use_global"),
        ({"use_tree_spec": None}, "use_tree_spec"),
    ],
)
def test_bad_drafter_arguments_are_refused(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SuffixDecodingDrafter(**kwargs)


def test_bad_call_arguments_are_refused():
    drafter = SuffixDecodingDrafter()
    with pytest.raises(ValueError, match=r"prompt_ids\[1\]"):
        drafter.start([1, -1])
    drafter.start([1, 2, 3])
    with pytest.raises(ValueError, match="budget"):
        drafter.speculate([1, 2, 3], -1)
    with pytest.raises(ValueError, match="prefix_ids must extend"):
        drafter.speculate([1, 2], 4)
    with pytest.raises(ValueError, match="prefix_ids must extend"):
        drafter.speculate([1, 2, 4, 5], 4)
    with pytest.raises(ValueError, match="generated_ids"):
        drafter.finish([1.5])
    tree = SuffixTree(4)
    with pytest.raises(ValueError, match="max_depth"):
        SuffixTree(0)
    with pytest.raises(ValueError, match="seq_id"):
        tree.extend(-1, [1])
    with pytest.raises(ValueError, match="token"):
        tree.append(0, -3)
    with pytest.raises(ValueError, match=r"len\(ngram\)"):
        tree.count([1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="max_spec_tokens"):
        tree.speculate([1], -1)
    with pytest.raises(ValueError, match="min_token_prob"):
        tree.speculate([1], 3, min_token_prob=-0.1)


def test_the_tree_grows_without_objects_the_garbage_collector_tracks():
    """The trie's nodes are integers in flat arrays (not one object each): appending thousands of
    tokens adds no container the cyclic collector walks (the earlier trie of node objects added
    about two per node, 90 nodes a token, and its collections cost 0.3 ms a generated token)."""
    import gc

    rng = RNG(3)
    tree = SuffixTree(64)
    tree.extend(0, rng.integers(0, 50, size=200).tolist())  # the arrays and dicts exist
    gc.collect()
    before = len(gc.get_objects())
    tree.extend(0, rng.integers(0, 50, size=3000).tolist())
    assert tree.num_nodes() > 50_000
    assert len(gc.get_objects()) - before < 20


def test_token_ids_beyond_32_bits_are_refused():
    tree = SuffixTree(4)
    with pytest.raises(ValueError, match="below 2"):
        tree.extend(0, [1, 2**32])
    with pytest.raises(ValueError, match="token"):
        tree.append(0, 2**32)
    drafter = SuffixDecodingDrafter(8)
    with pytest.raises(ValueError, match="prompt_ids must hold token ids below 2"):
        drafter.start([1, 2**33])


def _arctic_best(tree, nodes, budget, factor, offset, threshold, use_tree):
    """Arctic's walk over match lengths, m = 1, 2, ...: every match grown, a draft kept when its score is
    >= the best so far (so the longest among equal scores, and the longest m when all are empty)."""
    from specdec.drafting.suffix import _F32, SuffixDraft, _max_tokens

    grow = tree._grow_tree if use_tree else tree._grow_path
    best, best_m, best_score = None, 0, 0.0
    for m, node in enumerate(nodes, start=1):
        n = 0 if not tree._nchild[node] else _max_tokens(m, _F32(factor), _F32(offset), budget)
        if n == 0:
            if best_score == 0:
                best, best_m = None, m
            continue
        draft = grow(node, n, _F32(threshold))
        if draft.score >= best_score:
            best, best_m, best_score = draft, m, draft.score
    out = SuffixDraft() if best is None else best
    out.match_len = best_m
    return out


def test_the_longest_first_walk_that_skips_matches_that_cannot_win_chooses_as_arctic_does():
    """speculate_at walks the match lengths from the longest down and grows no match whose draft cannot
    score more than the best so far: the same draft and match length as arctic's walk that grows every
    match (ties to the longer match), on random trees of skewed and flat vocabularies."""
    rng = RNG(11)
    for _ in range(300):
        depth, vocab = int(rng.integers(1, 16)), int(rng.choice([2, 3, 6, 20]))
        tree = SuffixTree(depth, native=False)  # arctic_best reads the Python arrays
        for _ in range(int(rng.integers(1, 5))):
            weights = rng.dirichlet(np.ones(vocab) * 0.5)
            tree.extend(
                int(rng.integers(0, 3)), rng.choice(vocab, size=int(rng.integers(1, 150)), p=weights).tolist()
            )
        for _ in range(4):
            context = rng.choice(vocab, size=int(rng.integers(2, 25))).tolist()
            nodes = tree.match_nodes(context[1:])
            budget = int(rng.integers(0, 20))
            factor, offset = float(rng.choice([0.5, 1.0, 2.0])), float(rng.choice([-1.0, 0.0, 1.0]))
            threshold = float(rng.choice([0.0, 0.1, 0.3]))
            for use_tree in (True, False):
                got = tree.speculate_at(nodes, budget, factor, offset, threshold, use_tree, "best")
                want = _arctic_best(tree, nodes, budget, factor, offset, threshold, use_tree)
                assert (got.token_ids, got.parents, got.probs, got.score, got.match_len) == (
                    want.token_ids,
                    want.parents,
                    want.probs,
                    want.score,
                    want.match_len,
                )


def test_the_c_trie_equals_the_python_reference_bit_for_bit():
    """The trie held in C (``csrc/leanq8_suffix.h``) against the pure-Python one, fed the same appends
    (several sequences, interleaved, skewed and flat vocabularies, depths from 1): the same nodes in the
    same sibling order, the same suffix and match nodes, and the same drafts, probabilities, scores and
    match lengths for both matches and both growths, from a context's matches and from a sequence's own
    suffix nodes (which the C trie reads in place)."""
    from specdec.engine import native

    if not native.available("q4q8"):
        pytest.skip(native.unavailable_reason("q4q8"))
    rng = RNG(21)
    for _ in range(120):
        depth, vocab = int(rng.integers(1, 20)), int(rng.choice([2, 3, 6, 40]))
        c, py = SuffixTree(depth, native=True), SuffixTree(depth, native=False)
        assert c.native and not py.native
        base = 2**32 - vocab if rng.random() < 0.2 else 0  # token ids up to 2**32 - 1
        for _ in range(int(rng.integers(1, 6))):
            seq = int(rng.integers(0, 3))
            weights = rng.dirichlet(np.ones(vocab) * 0.5)
            chunk = (base + rng.choice(vocab, size=int(rng.integers(0, 120)), p=weights)).tolist()
            for tree in (c, py):
                tree.extend(seq, chunk)
        assert c.num_nodes() == py.num_nodes() and c.total == py.total
        assert all(c.children(n) == py.children(n) for n in range(py.num_nodes() + 1))
        assert c.counts() == py.counts()
        for seq in range(3):
            assert c.suffix_nodes(seq) == py.suffix_nodes(seq)
        for _ in range(6):
            context = (base + rng.choice(vocab, size=int(rng.integers(2, 30)))).tolist()
            assert c.match_nodes(context) == py.match_nodes(context)
            budget = int(rng.integers(0, 24)) if rng.random() < 0.8 else int(rng.integers(65, 130))
            factor, offset = float(rng.choice([0.5, 1.0, 2.0])), float(rng.choice([-1.0, 0.0, 1.5]))
            threshold = float(rng.choice([0.0, 0.05, 0.1, 0.3]))
            for use_tree in (True, False):
                for match in ("best", "longest"):
                    args = (context, budget, factor, offset, threshold, use_tree, match)
                    assert c.speculate(*args) == py.speculate(*args)
                    seq, count = int(rng.integers(0, 3)), int(rng.integers(0, depth + 2))
                    args = (seq, count, budget, factor, offset, threshold, use_tree, match)
                    assert c.speculate_seq(*args) == py.speculate_seq(*args)  # the sequence's own nodes


def test_the_c_trie_refuses_bad_arguments_by_code():
    """Each C entry point checks its own arguments and returns -2 (nothing read or written out of
    bounds): a NULL handle, a negative count, a token beyond 32 bits, a node outside the trie."""
    from specdec.engine import native

    if not native.available("q4q8"):
        pytest.skip(native.unavailable_reason("q4q8"))
    from specdec.drafting.suffix import _declared

    lib = _declared(native.library("q4q8"))
    assert not lib.specdec_sfx_new(0)
    tree = SuffixTree(4, native=True)
    handle = tree._c.handle
    active, n = np.zeros(4, np.int32), np.zeros(1, np.int32)
    big = np.array([2**32], np.int64)
    assert lib.specdec_sfx_append(None, active.ctypes.data, n.ctypes.data, big.ctypes.data, 1) == -2
    assert lib.specdec_sfx_append(handle, active.ctypes.data, n.ctypes.data, big.ctypes.data, -1) == -2
    assert lib.specdec_sfx_append(handle, active.ctypes.data, n.ctypes.data, big.ctypes.data, 1) == -2
    assert tree.num_nodes() == 0 and n[0] == 0
    one, n[0], active[0] = np.array([3], np.int64), 1, 7  # an active node that is not in the trie
    assert lib.specdec_sfx_append(handle, active.ctypes.data, n.ctypes.data, one.ctypes.data, 1) == -2
    assert tree.num_nodes() == 0
    out = np.zeros(7, np.int64)
    assert lib.specdec_sfx_node(handle, 1, out.ctypes.data) == -2
    nodes = np.array([5], np.int32)
    tok, par, prob = np.zeros(4, np.int64), np.zeros(4, np.int32), np.zeros(4, np.float32)
    score, m = np.zeros(1, np.float32), np.zeros(1, np.int32)
    ptrs = [a.ctypes.data for a in (tok, par, prob, score, m)]
    assert lib.specdec_sfx_speculate(handle, nodes.ctypes.data, 1, 4, 1.0, 0.0, 0.1, 1, 0, *ptrs) == -2
    assert lib.specdec_sfx_speculate(handle, nodes.ctypes.data, 0, -1, 1.0, 0.0, 0.1, 1, 0, *ptrs) == -2
    with pytest.raises(ValueError, match="native must be None, True or False"):
        SuffixTree(4, native=1)
