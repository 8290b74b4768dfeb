"""The C calls a drafter runs (issue 40, item 4): partial selection of top tokens (``specdec_topk``, a
head and its top tokens in one call: ``specdec_q8_linear_topk``) and a draft tree grown level by level
below the nodes earlier calls wrote (``specdec_q8_forward_spec``: EAGLE-2's expansion computing each node
once).

* top-k equals a stable sort of -x (ties: the smaller index first) for every k up to TOPK_MAX, on rows
  whose length is not a multiple of the 16-lane blocks the selection skips by; its log-sum-exp is the
  softmax's normaliser; bad arguments are refused with the argument named;
* a head's top tokens equal those of its logits, bit for bit;
* a tree grown over several calls gives every node the logits, and the features, of the chain forward
  over its path, bit for bit, on 1 and 2 threads; a call that places a node's ancestors wrongly (the
  ``prefix`` the region starts at, off by one) does not.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from test_native_q8 import needs_q8, wide_model
from test_tree_forward import path_of, random_parents

from specdec.engine import native
from specdec.engine.lean import LeanLlama
from specdec.engine.leannative import TOPK_MAX, Q8Linear, native_forward, topk
from specdec.theory.trees import tree_layout

pytestmark = pytest.mark.usefixtures("one_thread")


def reference_top(x: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-x, axis=1, kind="stable")[:, :k]


def test_topk_equals_a_stable_sort_for_every_k():
    needs_q8()
    rng = np.random.default_rng(0)
    for n in (1, 15, 16, 17, 100, 8192 + 5):
        x = rng.standard_normal((3, n)).astype(np.float32)
        x[:, ::7] = np.round(x[:, ::7])  # many ties
        x[1] = 1.0  # a row of ties only
        for k in sorted({1, 2, 5, 16, 33, TOPK_MAX} & set(range(1, n + 1))):
            idx, val, lse = topk(x, k)
            ref = reference_top(x, k)
            assert np.array_equal(idx, ref), (n, k)
            assert np.array_equal(val, np.take_along_axis(x, ref, 1)), (n, k)
            want = np.log(np.exp(x.astype(np.float64) - x.max(1, keepdims=True)).sum(1)) + x.max(1)
            assert np.allclose(lse, want, rtol=0, atol=1e-5), (n, k)


def test_topk_refuses_bad_arguments():
    needs_q8()
    x = np.zeros((2, 10), np.float32)
    with pytest.raises(ValueError, match=r"k must .*\[1, 10\]"):
        topk(x, 11)
    with pytest.raises(ValueError, match="k must"):
        topk(x, 0)
    with pytest.raises(ValueError, match=rf"k must .*\[1, {TOPK_MAX}\]"):
        topk(np.zeros((1, 200), np.float32), TOPK_MAX + 1)
    with pytest.raises(ValueError, match="finite"):
        topk(np.array([[0.0, np.nan]], np.float32), 1)
    with pytest.raises(ValueError, match="float32"):
        topk(np.zeros((1, 4)), 1)
    with pytest.raises(ValueError, match="2-D"):
        topk(np.zeros(4, np.float32), 1)


def test_a_heads_top_tokens_are_its_logits_top_tokens():
    needs_q8()
    weight = torch.randn(8192 + 7, 128, generator=torch.Generator().manual_seed(3))
    x = np.random.default_rng(4).standard_normal((5, 128)).astype(np.float32)
    lin = Q8Linear(weight)
    logits = lin(x)
    for threads in (1, 2):
        idx, val, lse = lin.top(x, 8, threads)
        assert np.array_equal(idx, reference_top(logits, 8))
        assert np.array_equal(val, np.take_along_axis(logits, idx.astype(np.int64), 1))
        assert np.array_equal(lse, topk(logits, 8)[2])
    with pytest.raises(ValueError, match="k must"):
        lin.top(x, 0)


def grow_tree(model, prompt, tokens, parents, levels, prefix_shift=0):
    """Prefill ``prompt``, then write the tree's nodes in ``levels`` calls (node ranges), each call hung
    below the earlier calls' nodes; returns (logits, features) per node. ``prefix_shift`` misplaces the
    region's start (a broken call)."""
    cache = model.new_cache(64)
    n0 = len(prompt)
    native_forward(model, torch.tensor(prompt), 0, cache, 1, None)
    logits, feats = {}, {}
    for lo, hi in levels:
        ids = torch.tensor(tokens[lo:hi])
        f = torch.empty(hi - lo, model.hidden)
        region = tree_layout(parents[:hi], hi)
        out = native_forward(
            model, ids, n0 + lo, cache, hi - lo, region, None, f, n0 + prefix_shift if lo else None
        )  # fmt: skip
        for r in range(hi - lo):
            logits[lo + r], feats[lo + r] = out[r], f[r]
    return logits, feats


def chain(model, prompt, tokens, parents, node):
    path = [tokens[i] for i in path_of(parents, node)]
    cache = model.new_cache(64)
    f = torch.empty(len(prompt) + len(path), model.hidden)
    out = native_forward(model, torch.tensor(prompt + path), 0, cache, 1, None, None, f)
    return out[0], f[-1]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_tree_grown_over_calls_equals_its_chains(threads):
    needs_q8()
    rng = random.Random(7)
    model = LeanLlama(wide_model(), "q4q8", threads=threads)
    prompt = [5, 17, 42, 8, 3]
    parents = random_parents(12, 3, rng)
    tokens = [rng.randrange(70) for _ in range(12)]
    logits, feats = grow_tree(model, prompt, tokens, parents, [(0, 3), (3, 4), (4, 9), (9, 12)])
    for node in range(12):
        want_logits, want_feat = chain(model, prompt, tokens, parents, node)
        assert torch.equal(logits[node], want_logits), node
        assert torch.equal(feats[node], want_feat), node


@pytest.fixture
def fresh_load():
    native._load.cache_clear()
    yield
    native._load.cache_clear()


def test_a_broken_spec_call_differs_and_bad_prefixes_are_refused(monkeypatch, fresh_load):
    """The build hook SPECDEC_Q8_FAULT=4 rotates a tree hung below earlier calls' nodes at the call's
    start instead of the region's: its nodes then differ from their chains, as they must on a broken
    call (the first call, hung at its own start, is untouched)."""
    from test_native_tiles import _broken_build

    needs_q8()
    rng = random.Random(8)
    prompt = [5, 17, 42, 8, 3]
    parents = [-1, 0, 1, 1, 0]
    tokens = [rng.randrange(70) for _ in range(5)]
    model = LeanLlama(wide_model(), "q4q8", threads=1)
    good, _ = grow_tree(model, prompt, tokens, parents, [(0, 2), (2, 5)])
    cache = model.new_cache(64)
    layout = tree_layout([-1, 0, 1], 3)
    with pytest.raises(ValueError, match="prefix"):
        native_forward(model, torch.tensor([1]), 7, cache, 1, layout, None, None, 9)  # prefix above start
    with pytest.raises(ValueError, match="prefix"):
        native_forward(model, torch.tensor([1]), 7, cache, 1, layout, None, None, 3)  # region of 5, not 3
    with pytest.raises(ValueError, match="prefix"):
        native_forward(model, torch.tensor([1]), 7, cache, 1, None, None, None, 5)  # no region's layout
    _broken_build(monkeypatch, 4, "native")
    broken = LeanLlama(wide_model(), "q4q8", threads=1)
    bad, _ = grow_tree(broken, prompt, tokens, parents, [(0, 2), (2, 5)])
    assert all(torch.equal(good[i], bad[i]) for i in range(2))
    assert all(not torch.equal(good[i], bad[i]) for i in range(2, 5))


def test_a_tree_layout_of_another_size_and_bad_abi_arguments_are_refused():
    import ctypes

    needs_q8()
    model = LeanLlama(wide_model(), "q4q8", threads=1)
    with pytest.raises(ValueError, match="tree must lay out the call's 2 nodes; got a layout of 3"):
        native_forward(model, torch.tensor([1, 2]), 0, model.new_cache(8), 1, tree_layout([-1, 0, 1], 3))
    lib = native.library("q4q8")
    assert lib.specdec_q8_abi(None, 4) == -2  # NULL sizes: refused, nothing written
    sizes = (ctypes.c_int64 * 4)()
    assert lib.specdec_q8_abi(sizes, -1) == -2 and lib.specdec_q8_abi(sizes, 4) == native.Q8_ABI
