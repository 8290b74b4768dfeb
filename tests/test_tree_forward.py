"""Tree verify calls in every engine (issue 29): a call over draft-tree nodes, each attending to the cached
prefix and its own ancestors, gives every node the logits of the chain forward over its path.

* ``"q4q8"`` (csrc/leanq8.c's ``specdec_q8_forward_tree``), ``"q4_1"`` (csrc/leanq4.c's
  ``specdec_q4_forward_tree``) and the torch modes ``"bfloat16"`` and ``"int4"``: bit for bit
  (torch.equal), on 1 and several threads and on every instruction-set build (q4q8), across the
  session's cache growth at 256 slots; ``keep_path`` then leaves the very cache a chain decode leaves.
* ``"float32"``: close only (about 1e-6), as its verify rows are to steps (BLAS sums a block of
  rows in another order than one row: see specdec.engine.lean's docstring).
* Hugging Face (:class:`CachedLM`, a 4D attention mask): close to the chain (1e-4 in float32).
* llama.cpp (and any session without trees) refuses them with a clear error.
"""

from __future__ import annotations

import random

import pytest
import torch
from test_native_q8 import needs_q8, wide_model
from tiny_models import tiny_llama

from specdec.engine import leannative, native
from specdec.engine.lean import LeanLlama, int4_supported
from specdec.engine.lm import CachedLM, Session

pytestmark = pytest.mark.usefixtures("one_thread")

EXACT = ["q4q8", "q4_1", "bfloat16", "int4"]


def skip_unless(mode: str) -> None:
    if mode == "q4q8":
        needs_q8()
    if mode == "q4_1" and not native.available("q4_1"):
        pytest.skip(f"the q4_1 C forward cannot be built here: {native.unavailable_reason('q4_1')}")
    if mode == "int4" and not int4_supported():
        pytest.skip("this torch lacks the CPU int4 kernels")


def random_parents(n: int, branching: int, rng: random.Random) -> list[int]:
    """A random tree of ``n`` nodes in topological order, each node (and the root, -1) with at most
    ``branching`` children."""
    children = {-1: 0}
    parents = []
    for r in range(n):
        parent = rng.choice([p for p, c in children.items() if c < branching])
        parents.append(parent)
        children[parent] += 1
        children[r] = 0
    return parents


def path_of(parents: list[int], node: int) -> list[int]:
    out = []
    while node >= 0:
        out.append(node)
        node = parents[node]
    return out[::-1]


def assert_nodes_equal_chains(model, prefix, tokens, parents, *, exact=True, atol=1e-4):
    """Every row of a tree call after ``prefix`` equals the chain forward over the node's path; returns
    the rows and the session that made the tree call."""
    tree = model.session()
    tree.forward(prefix)
    rows = tree.forward_tree(tokens, parents)
    assert rows.shape == (len(tokens), model.vocab_size) and tree.ids == [*prefix, *tokens]
    chain = model.session()
    chain.forward(prefix)
    for node in range(len(tokens)):
        chain.crop(len(prefix))
        want = chain.forward([tokens[i] for i in path_of(parents, node)])[-1]
        if exact:
            assert torch.equal(rows[node], want), (node, float((rows[node] - want).abs().max()))
        else:
            torch.testing.assert_close(rows[node], want, atol=atol, rtol=0)
    return rows, tree


def cases(seed: int, count: int, vocab: int, long_prefix: bool = True):
    """(prefix, tokens, parents) of random trees: up to 32 nodes, branching 1 to 4; the first has a
    prefix of 240 tokens, so that a 32-node call crosses LeanSession's first cache size (256)."""
    rng = random.Random(seed)
    for i in range(count):
        n = 32 if i == 0 else rng.randint(1, 32)
        start = 240 if i == 0 and long_prefix else rng.randint(1, 40)
        yield (
            [rng.randrange(vocab) for _ in range(start)],
            [rng.randrange(vocab) for _ in range(n)],
            random_parents(n, rng.randint(1, 4), rng),
        )


@pytest.fixture(scope="module")
def wide():
    return wide_model()


@pytest.mark.parametrize("mode", EXACT)
def test_every_node_equals_the_chain_over_its_path_bit_for_bit(wide, mode):
    skip_unless(mode)
    model = LeanLlama(wide, mode, threads=2)
    for i, (prefix, tokens, parents) in enumerate(cases(seed=len(mode), count=5, vocab=70)):
        _, session = assert_nodes_equal_chains(model, prefix, tokens, parents)
        if i == 0:  # the tree call itself grew the cache (240 cached + 32 nodes > 256 slots)
            assert session.cache.shape[3] > 256


def test_a_chain_given_as_parents_is_the_chain_call(wide):
    needs_q8()
    model = LeanLlama(wide, "q4q8", threads=1)
    seq = torch.randint(0, 70, (12,), generator=torch.Generator().manual_seed(7))
    cache_a, cache_b = model.new_cache(16), model.new_cache(16)
    a = model.forward(seq, 0, cache_a)
    b = model.forward(seq, 0, cache_b, parents=list(range(-1, 11)))
    assert torch.equal(a, b) and torch.equal(cache_a, cache_b)


@pytest.mark.parametrize("mode", EXACT)
def test_a_tree_call_may_keep_its_last_rows(wide, mode):
    skip_unless(mode)
    model = LeanLlama(wide, mode, threads=2)
    seq, parents = torch.tensor([3, 9, 27, 11, 5, 64]), [-1, 0, 0, -1, 3, 1]
    full = model.forward(seq, 0, model.new_cache(8), parents=parents)
    kept = model.forward(seq, 0, model.new_cache(8), keep=2, parents=parents)
    assert torch.equal(kept, full[-2:])


def test_float32_nodes_are_close_to_the_chain(wide):
    """float32's BLAS sums one row and a block in different orders: close, not equal (as its verify rows)."""
    model = LeanLlama(wide, "float32")
    for prefix, tokens, parents in cases(seed=1, count=2, vocab=70, long_prefix=False):
        assert_nodes_equal_chains(model, prefix, tokens, parents, exact=False, atol=1e-4)


@pytest.mark.parametrize("mode", EXACT)
def test_nodes_equal_chains_at_real_shapes(mode):
    """SmolLM2-135M's layer shapes (4 of its 30 layers, 9 query and 3 key/value heads of 64)."""
    skip_unless(mode)
    from test_lean import on_q4_1_grid
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(4)
    config = LlamaConfig(
        vocab_size=256, hidden_size=576, intermediate_size=1536, num_hidden_layers=4,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=512,
    )  # fmt: skip
    hf = on_q4_1_grid(LlamaForCausalLM(config).eval(), half=True)
    model = LeanLlama(hf, mode, threads=2)
    rng = random.Random(11)
    prefix = [rng.randrange(256) for _ in range(37)]
    tokens = [rng.randrange(256) for _ in range(16)]
    assert_nodes_equal_chains(model, prefix, tokens, random_parents(16, 3, rng))


def test_one_thread_and_many_give_the_same_tree_logits(wide):
    needs_q8()
    prefix, tokens, parents = next(cases(seed=3, count=1, vocab=70))
    outs = []
    for threads in (1, 2, 3):
        model = LeanLlama(wide, "q4q8", threads=threads)
        session = model.session()
        session.forward(prefix)
        outs.append((session.forward_tree(tokens, parents), session.cache.clone()))
    for logits, cache in outs[1:]:
        assert torch.equal(logits, outs[0][0]) and torch.equal(cache, outs[0][1])


def test_every_instruction_set_build_gives_the_same_tree_logits(monkeypatch, wide):
    """As tests/test_native_q8.py's ISA test: native, AVX2 and portable builds (and AVX-VNNI where the CPU
    has it), all with -ffp-contract=off, give the same tree logits, each node equal to its chain."""
    needs_q8()
    from specdec.engine.machine import cpu_flags

    base = ["-O3", "-std=gnu11", "-shared", "-fPIC", "-ffp-contract=off", "-pthread"]
    targets = {"native": ["-march=native"], "avx2": ["-march=x86-64-v3"], "portable": ["-march=x86-64"]}
    if "avx_vnni" in cpu_flags():
        targets["avxvnni"] = ["-march=x86-64-v3", "-mavxvnni"]
    prefix, tokens, parents = next(cases(seed=5, count=2, vocab=70, long_prefix=False))
    ref = None
    for name, march in targets.items():
        monkeypatch.setattr(native, "build_flags", lambda kind="q4_1", f=base + march: list(f))
        assert native.available("q4q8"), native.unavailable_reason("q4q8")
        if name in ("avx2", "portable"):
            assert native.isa() == name
        for codes in ("q4_1", "q8_0"):
            model = LeanLlama(wide, "q4q8", threads=2, codes=codes)
            rows, _ = assert_nodes_equal_chains(model, prefix, tokens, parents)
            if codes == "q4_1":
                ref = rows if ref is None else ref
                assert torch.equal(rows, ref), name


@pytest.mark.parametrize("target", ["avx2", "baseline"])
def test_the_emulated_cpu_builds_give_the_native_tree_logits(monkeypatch, wide, target):
    needs_q8()
    prefix, tokens, parents = next(cases(seed=6, count=2, vocab=70, long_prefix=False))
    ref, _ = assert_nodes_equal_chains(LeanLlama(wide, "q4q8", threads=2), prefix, tokens, parents)
    monkeypatch.setenv("SPECDEC_EMULATED_CPU", target)
    model = LeanLlama(wide, "q4q8", threads=2)
    assert native.isa() == ("avx2" if target == "avx2" else "portable")
    assert torch.equal(assert_nodes_equal_chains(model, prefix, tokens, parents)[0], ref)


@pytest.mark.parametrize("mode", EXACT)
def test_keep_path_then_a_chain_equals_a_plain_chain_decode(wide, mode):
    """After a tree call, keeping an accepted path leaves the cache a chain decode of it leaves (bit for
    bit), so the next call's logits equal a plain decode's."""
    skip_unless(mode)
    model = LeanLlama(wide, mode, threads=2)
    rng = random.Random(9)
    for prefix, tokens, parents in cases(seed=8, count=4, vocab=70):
        tree = model.session()
        tree.forward(prefix)
        tree.forward_tree(tokens, parents)
        path = path_of(parents, rng.randrange(len(tokens)))
        start = len(prefix)
        tree.keep_path(start, path)
        kept = [tokens[i] for i in path]
        assert tree.ids == [*prefix, *kept]
        plain = model.session()
        plain.forward(prefix)
        plain.forward(kept)
        end = len(tree.ids)
        assert torch.equal(tree.cache[:, :, :, :end], plain.cache[:, :, :, :end])
        more = [rng.randrange(70) for _ in range(5)]
        assert torch.equal(tree.forward(more), plain.forward(more))
        assert torch.equal(tree.forward([more[0]]), plain.forward([more[0]]))


def test_keep_path_of_nothing_and_bad_paths(wide):
    model = LeanLlama(wide, "bfloat16")
    session = model.session()
    session.forward([1, 2, 3])
    session.forward_tree([4, 5, 6, 7], [-1, -1, 0, 2])
    with pytest.raises(ValueError, match="nodes must be ascending"):
        session.keep_path(3, [2, 0])
    with pytest.raises(ValueError, match="root-down path of the tree call at 3: node 3's parent is 2, not 0"):
        session.keep_path(3, [0, 3])
    with pytest.raises(ValueError, match=r"nodes\[0\] must be an integer in \[0, 3\]"):
        session.keep_path(3, [4])
    with pytest.raises(ValueError, match=r"start must be an integer in \[0, 7\]"):
        session.keep_path(8, [])
    session.keep_path(3, [1, 2, 3][:0])
    assert session.ids == [1, 2, 3]


BAD_PARENTS = [
    ([0, -1, 0], r"parents\[0\] must be an integer in \[-1, -1\]"),
    ([-1, 1, 0], r"parents\[1\] must be an integer in \[-1, 0\]"),
    ([-1, -2, 0], r"parents\[1\] must be an integer in \[-1, 0\]"),
    ([-1, 0, 5], r"parents\[2\] must be an integer in \[-1, 1\]"),
    ([-1, 0], r"parents must have one entry per node of the call \(3\); got 2"),
    ([-1, 0, 1, 2], r"parents must have one entry per node of the call \(3\); got 4"),
    ([-1, 0.0, 1], r"parents\[1\] must be an integer"),
    ([-1, True, 1], r"parents\[1\] must be an integer"),
    ([-1, "0", 1], r"parents\[1\] must be an integer"),
    (torch.tensor([-1.0, 0.0, 1.0]), "parents must hold integers"),
    (5, "parents must be a sequence of integers"),
]


@pytest.mark.parametrize("mode", ["q4q8", "q4_1", "bfloat16"])
@pytest.mark.parametrize(("parents", "message"), BAD_PARENTS)
def test_bad_parents_are_refused_naming_the_argument(wide, mode, parents, message):
    skip_unless(mode)
    model = LeanLlama(wide, mode, threads=1)
    cache = model.new_cache(8)
    with pytest.raises(ValueError, match=message):
        model.forward(torch.tensor([1, 2, 3]), 0, cache, parents=parents)
    assert not cache.any()  # refused before anything was written
    session = model.session()
    session.forward([4])
    with pytest.raises(ValueError, match=message):
        session.forward_tree([1, 2, 3], parents)
    assert session.ids == [4]


def test_the_c_tree_entry_point_checks_its_parents(wide):
    """The C entry point refuses bad parents itself (ERR_ARGUMENT, nothing written), called directly."""
    needs_q8()
    model = LeanLlama(wide, "q4q8", threads=1)
    fwd = model.q8_forward()
    lib = native.library("q4q8")
    ids = torch.tensor([1, 2, 3], dtype=torch.int64)
    logits = torch.empty(3, 70)

    def status(parents):
        cache = model.new_cache(8)
        ptr = None if parents is None else parents.data_ptr()
        code = lib.specdec_q8_forward_tree(
            fwd.handle, ids.data_ptr(), ptr, 3, 0, cache.data_ptr(), 8, logits.data_ptr(), 3, 2, 1
        )
        return code, bool(cache.any())

    assert status(torch.tensor([-1, 0, 0], dtype=torch.int32)) == (0, True)
    for bad in ([0, -1, 0], [-1, 1, 0], [-1, -2, 0], [-1, 0, 3], [-1, 0, 2**31 - 1], [-1, 0, -(2**31)]):
        assert status(torch.tensor(bad, dtype=torch.int32)) == (native._ERR_ARGUMENT, False), bad
    assert status(None) == (native._ERR_ARGUMENT, False)  # no parents: the tree entry point refuses
    bad = torch.tensor([-1, 1, 0], dtype=torch.int32)
    with pytest.raises(ValueError, match="or a parent outside"):
        fwd.forward(ids.data_ptr(), 3, 0, model.new_cache(8).data_ptr(), 8, logits.data_ptr(), 3, 2, 1,
                    parents=bad.data_ptr())  # fmt: skip


def test_the_q4_1_c_tree_entry_point_checks_its_parents(wide):
    skip_unless("q4_1")
    import ctypes

    model = LeanLlama(wide, "q4_1")
    lib = native.library("q4_1")
    ids = torch.tensor([1, 2, 3], dtype=torch.int64)
    logits = torch.empty(3, 70)

    def status(parents):
        cache = model.new_cache(8)
        ptr = None if parents is None else parents.data_ptr()
        code = lib.specdec_q4_forward_tree(
            ctypes.byref(leannative.native_structure(model)), ids.data_ptr(), ptr, 3, 0, cache.data_ptr(), 8,
            logits.data_ptr(), 3,
        )  # fmt: skip
        return code, bool(cache.any())

    assert status(torch.tensor([-1, 0, 0], dtype=torch.int32)) == (0, True)
    for bad in ([0, -1, 0], [-1, 1, 0], [-1, -2, 0], [-1, 0, 3]):
        assert status(torch.tensor(bad, dtype=torch.int32)) == (-2, False), bad
    assert status(None) == (-2, False)


def test_engines_without_trees_say_so():
    with pytest.raises(NotImplementedError, match="verifies chains only"):
        Session().forward_tree([1], [-1])
    with pytest.raises(NotImplementedError, match="verifies chains only"):
        Session().keep_path(0, [])


def test_llamacpp_sessions_are_chain_only():
    from specdec.engine.llamacpp import LlamaCppSession

    assert LlamaCppSession.forward_tree is Session.forward_tree
    assert LlamaCppSession.keep_path is Session.keep_path


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_hugging_face_tree_calls_are_close_to_the_chain(attention):
    """CachedLM: a 4D additive mask and position ids; close to the chain (1e-4 in float32), not bit for
    bit (the model's kernels see other shapes)."""
    hf = tiny_llama(3, vocab=61, attn_implementation=attention)
    rng = random.Random(2)
    for n in (1, 7, 20):
        prefix = [rng.randrange(61) for _ in range(rng.randint(1, 30))]
        tokens = [rng.randrange(61) for _ in range(n)]
        parents = random_parents(n, rng.randint(1, 4), rng)
        tree = CachedLM(hf)
        tree.forward(prefix)
        rows = tree.forward_tree(tokens, parents)
        assert tree.ids == [*prefix, *tokens] and tree.cache.get_seq_length() == len(prefix) + n
        chain = CachedLM(hf)
        chain.forward(prefix)
        for node in range(n):
            chain.crop(len(prefix))
            want = chain.forward([tokens[i] for i in path_of(parents, node)])[-1]
            torch.testing.assert_close(rows[node], want, atol=1e-4, rtol=0)
        path = path_of(parents, rng.randrange(n))
        tree.keep_path(len(prefix), path)
        chain.crop(len(prefix))
        chain.forward([tokens[i] for i in path])
        assert tree.ids == chain.ids and tree.cache.get_seq_length() == len(chain.ids)
        more = [rng.randrange(61) for _ in range(4)]
        torch.testing.assert_close(tree.forward(more), chain.forward(more), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match=r"parents\[1\] must be an integer in \[-1, 0\]"):
        CachedLM(hf).forward_tree([1, 2], [-1, 1])
