"""One speculative loop (issue 41, item 3): a chain is a tree of one branch.

:func:`specdec.engine.decoding.speculative` now runs the tree loop with the chain drafter behind
:class:`specdec.engine.drafters.ChainTree`. ``old_chain_loop`` below is the chain loop as it was at
commit d160475, frozen here (its helpers are still the package's): the new loop must give the same
tokens and the same counts (Stats without its clocks) for every drafter kind, temperature, top-k,
lenience, fixed and dynamic gamma, EOS and budget edge. Sampled outputs equal means the same uniforms
are drawn in the same order, so every stored record's outputs stand. A test that the comparison can
fail: the same loop with the lenience dropped from the verify rule differs.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
from tiny_models import perturbed_copy, tiny_llama

from specdec.engine.decoding import (
    Generation,
    _prefill,
    cut_at_eos,
    finish_generation,
    speculative,
    speculative_tree,
    start_generation,
)
from specdec.engine.drafters import (
    BigramDrafter,
    ChainTree,
    ModelDrafter,
    PromptLookupDrafter,
    UnigramDrafter,
)
from specdec.engine.stats import Stats
from specdec.theory.policies import DraftPolicy, HeuristicGamma, as_policy
from specdec.theory.sampling import verify, verify_argmax, warp
from specdec.theory.trees import chain_tree

pytestmark = pytest.mark.usefixtures("one_thread")

CLOCKS = ("prefill_s", "draft_s", "target_s", "verify_s", "step_s")


def old_chain_loop(
    target,
    drafter,
    prompt_ids,
    *,
    gamma,
    max_new_tokens,
    temperature=0.0,
    top_k=None,
    top_p=None,
    lenience=1.0,
    seed=0,
    eos_token_id=None,
    verify_fn=verify,
) -> Generation:
    """The chain loop of commit d160475 (argument checks left out)."""
    lm, prompt = start_generation(target, prompt_ids, max_new_tokens, temperature, top_k, top_p, eos_token_id)
    dynamic = isinstance(gamma, DraftPolicy)
    policy = as_policy(gamma if dynamic else int(gamma))
    policy.reset()
    rng = np.random.default_rng(seed)
    warp_fn = partial(warp, temperature=temperature, top_k=top_k, top_p=top_p)
    argmax_lenient = temperature == 0 and lenience < 1.0
    stats = Stats(gamma=policy.max_gamma, max_drafts=min(policy.max_gamma, max(max_new_tokens - 1, 1)))
    tokens = list(prompt)
    _prefill(lm, prompt)
    drafter.start(prompt)
    while (budget := max_new_tokens - (len(tokens) - len(prompt))) > 0:
        limit = min(policy.next(), budget - 1)
        proposal = cut_at_eos(drafter.propose(tokens, limit, warp_fn, rng), limit, eos_token_id)
        draft, q = proposal.tokens, proposal.q
        logits = lm.forward([tokens[-1], *draft])
        p = warp_fn(logits)
        if argmax_lenient:
            n_accepted, next_token = verify_argmax(torch.softmax(logits.float(), -1), draft, lenience)
        else:
            n_accepted, next_token = verify_fn(p, q, draft, rng, lenience)
        old_record_round(stats, p, q, len(draft), n_accepted, proposal.calls, lenience)
        policy.update(len(draft), n_accepted)
        new = [*draft[:n_accepted], next_token]
        tokens += new
        lm.crop(len(tokens) - 1)
        if eos_token_id in new:
            break
    return finish_generation(tokens[len(prompt) :], stats, eos_token_id)


def old_record_round(s: Stats, p, q, drafted: int, accepted: int, draft_calls: int, lenience: float) -> None:
    """Stats.record_round of commit d160475, frozen (the new one goes through record_tree_round)."""
    s.drafted.append(drafted)
    s.accepted.append(accepted)
    s.target_calls += 1
    s.draft_calls += draft_calls
    examined = min(accepted + 1, drafted)
    if examined > len(s.examined_at):
        grow = [0] * (examined - len(s.examined_at))
        s.examined_at += grow
        s.accepted_at += grow
    for i in range(examined):
        s.examined_at[i] += 1
        s.accepted_at[i] += i < accepted
    if q is not None and examined > 0:
        beta = torch.minimum(q[:examined], p[:examined] / lenience).sum(-1)
        s.beta_sum += float(beta.double().sum())
        s.beta_count += examined


def counts(gen: Generation) -> dict:
    return {k: v for k, v in gen.stats.summary().items() if k not in CLOCKS}


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0)


@pytest.fixture(scope="module")
def drafters(target):
    text = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 38, 32, 79, 50, 28, 84, 19] * 3
    return {
        "model": lambda: ModelDrafter(perturbed_copy(target, 0.2, 5)),
        "lookup": lambda: PromptLookupDrafter(),
        "unigram": lambda: UnigramDrafter.from_token_ids([text], target.config.vocab_size),
        "bigram": lambda: BigramDrafter.from_token_ids([text], target.config.vocab_size),
    }


PROMPTS = [[7], [3, 14, 15, 92, 65, 3, 14, 15], [11, 22, 33, 44, 11, 22, 33, 55, 66, 11, 22, 33]]
SETTINGS = [  # temperature, top_k, lenience, gamma, eos
    (0.0, None, 1.0, 4, None),
    (0.0, None, 0.5, 3, None),
    (1.0, None, 1.0, 4, None),
    (1.0, 20, 1.0, 2, 5),
    (0.7, None, 0.6, 5, None),
    (1.0, None, 1.0, "heuristic", 9),
]


@pytest.mark.parametrize("kind", ["model", "lookup", "unigram", "bigram"])
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "-".join(map(str, s)))
def test_the_one_loop_equals_the_old_chain_loop(target, drafters, kind, setting):
    temperature, top_k, lenience, gamma, eos = setting
    for seed, prompt in enumerate(PROMPTS):

        def g():
            return HeuristicGamma(start=2, max_gamma=6) if gamma == "heuristic" else gamma

        kw = dict(max_new_tokens=17, temperature=temperature, top_k=top_k, lenience=lenience, seed=seed,
                  eos_token_id=eos)  # fmt: skip
        old = old_chain_loop(target, drafters[kind](), prompt, gamma=g(), **kw)
        new = speculative(target, drafters[kind](), prompt, gamma=g(), **kw)
        assert new.tokens == old.tokens, (kind, setting, seed)
        assert counts(new) == counts(old), (kind, setting, seed)


def test_the_comparison_can_fail(target, drafters):
    """A loop whose verify ignores the lenience gives other samples: the comparison above sees it."""

    def ignored(p, q, draft, rng, lenience):
        return verify(p, q, draft, rng, 1.0)

    kw = dict(gamma=4, max_new_tokens=24, temperature=1.0, lenience=0.3)
    differ = 0
    for seed, prompt in enumerate(PROMPTS):
        broken = old_chain_loop(target, drafters["model"](), prompt, seed=seed, verify_fn=ignored, **kw)
        new = speculative(target, drafters["model"](), prompt, seed=seed, **kw)
        differ += broken.tokens != new.tokens or counts(broken) != counts(new)
    assert differ


def test_a_chain_drafter_through_the_tree_entry_is_the_old_chain_loop(target, drafters):
    """ChainTree is the one adapter: the tree entry with a chain drafter at budget gamma gives the frozen
    chain loop's tokens and counts (beyond the positions' histogram, sized by the budget there)."""
    for temperature in (0.0, 1.0):
        for seed, prompt in enumerate(PROMPTS):
            kw = dict(max_new_tokens=20, temperature=temperature, seed=seed)
            old = old_chain_loop(target, drafters["model"](), prompt, gamma=4, **kw)
            tree = speculative_tree(target, ChainTree(drafters["model"]()), prompt, budget=4, **kw)
            assert tree.tokens == old.tokens
            for field in ("drafted", "accepted", "draft_calls", "beta_count"):
                assert getattr(tree.stats, field) == getattr(old.stats, field), field
            assert tree.stats.beta_sum == pytest.approx(old.stats.beta_sum, rel=1e-12)


def test_beta_is_counted_for_a_chain_drafter_only(target):
    """Through the loop: a chain drafter's rounds count beta at every examined position; a tree drafter's
    count none, whether its trees branch (branch 2) or happen to be chains (branch 1)."""
    from specdec.drafting.modeltree import ModelTreeDrafter

    draft = perturbed_copy(target, 0.2, 5)
    for temperature in (0.0, 1.0):
        chain = speculative(target, ModelDrafter(draft), PROMPTS[1], gamma=3, max_new_tokens=16,
                            temperature=temperature)  # fmt: skip
        assert chain.stats.beta_count == chain.stats.examined > 0
        for branch in (1, 2):
            tree = speculative_tree(target, ModelTreeDrafter(ModelDrafter(draft), branch=branch), PROMPTS[1],
                                    budget=4, max_new_tokens=16, temperature=temperature)  # fmt: skip
            assert tree.stats.beta_count == 0 and tree.stats.examined > 0


def test_stats_take_beta_per_examined_position_and_trees_know_chains():
    """beta (alpha_tv) is counted on chains only, where Corollary 3.6's position is defined."""
    s = Stats(gamma=4)
    s.record_tree_round(3, 3, 1, 3, torch.tensor([0.5, 0.25]))
    assert s.alpha_tv == pytest.approx(0.375)
    with pytest.raises(ValueError, match="one value per examined position"):
        s.record_tree_round(3, 3, 1, 3, torch.tensor([0.5]))
    assert chain_tree([1, 2, 3]).is_chain and chain_tree([]).is_chain
    from specdec.theory.trees import DraftTree

    assert not DraftTree([1, 2, 3], [-1, -1, 0]).is_chain


def test_a_trees_stats_mean_what_a_chains_do(target, drafters):
    """One Stats for chains and trees: the tree loop's budget is ``gamma`` (``budget``), a round's nodes
    are ``drafted`` and never exceed it, its accepted depth is ``accepted``, and tokens per target call
    is ``mean_tokens_per_round`` (new tokens over target calls)."""
    from specdec.drafting.lookuptree import LookupTreeDrafter

    for drafter, budget in ((ChainTree(drafters["lookup"]()), 4), (LookupTreeDrafter(), 6)):
        gen = speculative_tree(target, drafter, PROMPTS[2], budget=budget, max_new_tokens=24)
        st = gen.stats
        assert st.budget == st.gamma == budget
        assert max(st.drafted) <= budget and sum(st.drafted) > 0
        assert all(0 <= a <= k for a, k in zip(st.accepted, st.drafted, strict=True))
        assert st.mean_tokens_per_round == pytest.approx(st.new_tokens / st.target_calls)
