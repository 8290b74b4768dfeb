"""Tree decoding (issue 29): lossless end to end, greedy equal to plain, and the drafter registry.

The theory-level checks (exact enumeration of one round, chi-square tests of broken verifiers) are
tests/test_treeverify.py's; the engines' tree forward (every node equal to its path's chain forward,
bit for bit) is tests/test_tree_forward.py's. Here the whole loop runs on tiny random Llamas.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec.drafting import modeltree
from specdec.drafting.lookuptree import LookupTreeDrafter
from specdec.drafting.modeltree import ModelTreeDrafter
from specdec.drafting.registry import KINDS, DraftContext, build_drafter, parse_spec
from specdec.drafting.suffix import SuffixDecodingDrafter
from specdec.engine import native
from specdec.engine.decoding import autoregressive, speculative, speculative_tree
from specdec.engine.drafters import ChainTree, EarlyExitDrafter, ModelDrafter, PromptLookupDrafter
from specdec.engine.lean import LeanLlama
from specdec.engine.lm import open_lm
from specdec.theory.chisquare import chi_square_pvalue
from specdec.theory.sampling import warp
from tests.tiny_models import VOCAB, perturbed_copy, tiny_llama

MODES = ["float32", *(["q4q8"] if native.available("q4q8") else [])]


def _prompt(seed: int, n: int = 40) -> list[int]:
    """Random ids with a repeated stretch, so that lookup and suffix drafters find matches."""
    rng = np.random.default_rng(seed)
    head = rng.integers(0, VOCAB, n // 2).tolist()
    return head + head[: n // 4] + rng.integers(0, VOCAB, n // 4).tolist()


@pytest.fixture(scope="module")
def small():
    return tiny_llama(0, layers=2)


def _side_leaf_hits(target, drafter, prompt, budget) -> int:
    """Rounds of a greedy tree decode whose accepted path used a non-first child."""
    from specdec.engine import decoding as treeverify  # the name the loop calls

    hits = []
    original = treeverify.verify_tree_greedy  # temperature 0: the loop verifies by exact matching

    def spy(argmax_ids, tree):
        path, token = original(argmax_ids, tree)
        hits.append(any(tree.children(tree.parents[i]).index(i) > 0 for i in path))
        return path, token

    treeverify.verify_tree_greedy = spy
    try:
        speculative_tree(target, drafter, prompt, budget=budget, max_new_tokens=40)
    finally:
        treeverify.verify_tree_greedy = original
    return sum(hits)


@pytest.mark.parametrize("mode", MODES)
def test_greedy_tree_decoding_equals_greedy_plain(small, mode):
    side_hits: dict[str, int] = {}
    target = LeanLlama(small, mode, threads=1)
    draft = LeanLlama(perturbed_copy(small, 0.05, 3), mode, threads=1)
    drafters = {
        "chain-as-tree": (ChainTree(ModelDrafter(draft)), 4),
        "model-tree-b3": (ModelTreeDrafter(ModelDrafter(draft), branch=3), 9),
        "early-exit-tree": (ModelTreeDrafter(EarlyExitDrafter(target, 1), branch=2), 6),
        "lookup-tree": (LookupTreeDrafter(), 8),
        "suffix": (SuffixDecodingDrafter(use_global=False), 16),
    }
    for seed in range(3):
        prompt = _prompt(seed)
        plain = autoregressive(target, prompt, max_new_tokens=40)
        for name, (drafter, budget) in drafters.items():
            gen = speculative_tree(target, drafter, prompt, budget=budget, max_new_tokens=40)
            assert gen.tokens == plain.tokens, (mode, name, seed)
            assert gen.stats.new_tokens == 40 and gen.stats.target_calls == gen.stats.rounds
            if name.startswith(("chain", "model")):
                assert gen.stats.accepted_tokens > 0, name  # the drafts were used
            if name == "model-tree-b3":
                side_hits[mode] = side_hits.get(mode, 0) + _side_leaf_hits(target, drafter, prompt, budget)
    assert side_hits[mode] > 0  # a runner-up (not the first child) was accepted: the tree was exercised


def test_a_chain_as_a_tree_accepts_what_the_chain_loop_accepts(small):
    target = LeanLlama(small, "float32")
    for seed in range(3):
        prompt = _prompt(seed)
        chain = speculative(target, PromptLookupDrafter(), prompt, gamma=4, max_new_tokens=32)
        tree = speculative_tree(target, ChainTree(PromptLookupDrafter()), prompt, budget=4, max_new_tokens=32)
        assert tree.tokens == chain.tokens
        assert tree.stats.accepted == chain.stats.accepted
        assert tree.stats.drafted == chain.stats.drafted


def _two_token_law(model: LeanLlama, prefix: list[int]) -> np.ndarray:
    p1 = warp(open_lm(model).forward(prefix, keep=1), temperature=1.0)[0].double()
    rows = torch.stack([open_lm(model).forward([*prefix, x], keep=1)[0] for x in range(VOCAB)])
    law = (p1[:, None] * warp(rows, temperature=1.0).double()).numpy()
    return law / law.sum()


def _tree_counts(target, drafter, n: int = 1000) -> np.ndarray:
    counts = np.zeros((VOCAB, VOCAB))
    for seed in range(n):
        gen = speculative_tree(target, drafter, [36], budget=6, max_new_tokens=3, temperature=1.0, seed=seed)
        counts[gen.tokens[0], gen.tokens[1]] += 1
    return counts


def test_tree_sampling_has_the_target_law_and_a_wrong_side_leaf_law_breaks_it(small, monkeypatch):
    one = tiny_llama(0, layers=1)
    target = LeanLlama(one, "float32")
    drafter = ModelTreeDrafter(ModelDrafter(LeanLlama(perturbed_copy(one, 0.6, 7), "float32")), branch=3)
    law = _two_token_law(target, [36])
    assert chi_square_pvalue(_tree_counts(target, drafter), law)["pvalue"] > 1e-3
    # broken: the side leaves are the draft's runners-up (a deterministic choice) but claim to be
    # draws from q; verification then accepts them too often and the output law is no longer p
    monkeypatch.setattr(modeltree, "_point_mass", lambda like, token: like.clone())
    assert chi_square_pvalue(_tree_counts(target, drafter), law)["pvalue"] < 1e-3


def test_tree_decoding_refuses_bad_input(small):
    target = LeanLlama(small, "float32")
    with pytest.raises(ValueError, match="budget"):
        speculative_tree(target, LookupTreeDrafter(), [1, 2, 3], budget=-1, max_new_tokens=4)
    with pytest.raises(ValueError, match="propose_tree"):
        speculative_tree(target, PromptLookupDrafter(), [1, 2, 3], budget=4, max_new_tokens=4)
    with pytest.raises(ValueError, match="branch"):
        ModelTreeDrafter(ModelDrafter(target), branch=0)


def test_the_registry_parses_checks_and_builds_every_kind(small):
    target = LeanLlama(small, "float32")
    spec = parse_spec("draft-tree:distil-l1,branch=3")
    assert (spec.kind, spec.argument, spec.options, spec.shape) == (
        "draft-tree",
        "distil-l1",
        {"branch": 3},
        "tree",
    )
    assert parse_spec("lookup").shape == "chain" and parse_spec("suffix,factor=2").options == {"factor": 2.0}
    for bad, words in [
        ("nope", "unknown kind"),
        ("", "non-empty"),
        ("lookup:3", "takes no"),
        ("draft", "needs"),
        ("early-exit:x", "layers"),
        ("suffix,factor", "key=value"),
        ("suffix,colour=red", "key=value"),
        ("draft-tree:d,branch=0", "branch"),
        ("lookup,max_ngram=2,max_ngram=3", "twice"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_spec(bad)
    context = DraftContext(
        target,
        load_draft=lambda name: LeanLlama(perturbed_copy(small, 0.05, 3), "float32"),
        corpus=lambda: [[5, 6, 7, 5, 6, 8]],
        load_model=lambda folder: perturbed_copy(small, 0.05, 4),
    )
    conditioned = {"medusa", "mlp", "eagle", "hybrid"}  # built in tests/test_conditioned.py, test_hybrid.py
    argument = {"early-exit": ":1", "early-exit-tree": ":1", "draft": ":d", "draft-tree": ":d", "model": ":d"}
    built = {
        kind: build_drafter(kind + argument.get(kind, ""), context)
        for kind in KINDS
        if kind not in conditioned
    }
    for kind, drafter in built.items():
        has_tree = callable(getattr(drafter, "propose_tree", None))
        assert has_tree == (KINDS[kind].shape == "tree"), kind
    for spec, needs in (("draft:d", "load_draft"), ("bigram", "corpus"), ("model:d", "load_model")):
        with pytest.raises(ValueError, match=f"needs DraftContext.{needs}"):
            build_drafter(spec, DraftContext(target))
    seen: list[str] = []
    assert build_drafter("model:a,b", DraftContext(target, load_model=lambda f: (seen.append(f), small)[1]))
    assert seen == ["a,b"]  # a folder's path keeps its commas
    # suffix decoding's tree over earlier generations is off unless the spec asks for it
    assert not built["suffix"].use_global and build_drafter("suffix,global=1", context).use_global
    assert not build_drafter("suffix,tree=0", context).use_tree_spec


def test_a_tree_never_outgrows_the_target_context():
    small = tiny_llama(0, layers=1)  # max_position_embeddings 512
    target = LeanLlama(small, "float32")
    drafter = ModelTreeDrafter(ModelDrafter(LeanLlama(perturbed_copy(small, 0.05, 3), "float32")), branch=3)
    prompt = _prompt(5, 492)
    plain = autoregressive(target, prompt, max_new_tokens=20)
    tree = speculative_tree(target, drafter, prompt, budget=9, max_new_tokens=20)
    assert tree.tokens == plain.tokens


def test_eos_inside_a_tree_ends_the_generation_as_plain_decoding_does(small):
    target = LeanLlama(small, "float32")
    draft = LeanLlama(perturbed_copy(small, 0.05, 3), "float32")
    for seed in range(4):
        prompt = _prompt(seed)
        plain = autoregressive(target, prompt, max_new_tokens=40)
        eos = plain.tokens[7 + seed]  # a token the generation reaches: it must stop there
        want = autoregressive(target, prompt, max_new_tokens=40, eos_token_id=eos).tokens
        for drafter in (ModelTreeDrafter(ModelDrafter(draft), branch=3), LookupTreeDrafter()):
            got = speculative_tree(target, drafter, prompt, budget=9, max_new_tokens=40, eos_token_id=eos)
            assert got.tokens == want and got.tokens[-1] == eos


@pytest.mark.parametrize("warp_kw", [{}, {"top_k": 40}, {"top_p": 0.8}, {"temperature": 0.7}])
def test_a_sampled_round_warps_only_the_rows_it_reads_and_verifies_as_on_every_row(warp_kw):
    """The loop's sampled verification (decoding._verify) warps p's rows one by one as the walk reads them
    (RowsOnDemand): the same path and token, uniform for uniform, as verify_tree on every row warped at
    once, and only the root's and the accepted nodes' rows made; beta reads the rows made."""
    from functools import partial

    from specdec.engine import decoding
    from specdec.theory.trees import DraftTree
    from specdec.theory.treeverify import verify_tree

    warp_kw = dict(warp_kw)  # the parameter's own dict stays as given
    temperature = warp_kw.pop("temperature", 1.0)
    sampling = decoding.Sampling(temperature, warp_kw.get("top_k"), warp_kw.get("top_p"), 0, None)
    warp_fn = partial(warp, temperature=temperature, top_k=sampling.top_k, top_p=sampling.top_p)
    gen = torch.Generator().manual_seed(0)
    tree = DraftTree([1, 2, 3, 4, 5], [-1, 0, 1, 2, 3])  # a chain: beta's rows are the walk's
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the loop (the engine owns the cores)
    try:
        partial_rows = 0
        for seed in range(40):
            logits = torch.randn(6, 300, generator=gen) * 2
            logits[:5, [1, 2, 3, 4, 5]] += 3.0  # drafts the target likes: paths of every length
            q = torch.softmax(torch.randn(5, 300, generator=gen), -1)
            a, b = np.random.default_rng(seed), np.random.default_rng(seed)
            path, token, p, ids = decoding._verify(logits, tree, q, sampling, warp_fn, a)
            assert ids is None and (path, token) == verify_tree(warp_fn(logits), q, tree, b)
            assert a.random() == b.random()
            assert p.made == [0, *(i + 1 for i in path)]
            examined = min(len(path) + 1, tree.depth)
            want = torch.minimum(q[:examined], warp_fn(logits)[:examined]).sum(-1)
            assert torch.equal(decoding._beta(None, p, q, examined, 1.0), want)
            partial_rows += len(p.made) < 6
    finally:
        torch.set_num_threads(threads)
    assert partial_rows >= 10
