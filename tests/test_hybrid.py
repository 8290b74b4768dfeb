"""The hybrid drafter (issue 42, item 4): suffix decoding where its draft's score reaches min_score, the
network drafter elsewhere. Lossless (each round's tree is a function of the committed tokens): greedy
equal to plain decoding; the two-token law at temperature 1 passes chi-square, and a hybrid whose
choice peeks at the round's own randomness (the suffix draft kept only when the verification's next
uniform would accept its first node) fails it."""

from __future__ import annotations

import numpy as np
import pytest
from test_conditioned import _context, _counts, _prompt, _two_token_law

from specdec.drafting import hybrid as hybrid_module
from specdec.drafting.registry import build_drafter, parse_spec
from specdec.engine import native
from specdec.engine.decoding import autoregressive, speculative_tree
from specdec.engine.lean import LeanLlama
from specdec.theory.chisquare import chi_square_pvalue
from tests.tiny_models import tiny_llama

pytestmark = pytest.mark.skipif(not native.available("q4q8"), reason="needs the q4q8 C library")


@pytest.fixture(scope="module")
def small():
    return tiny_llama(0, layers=2)


@pytest.mark.parametrize("spec", ["hybrid:e", "hybrid:m,ranks=2,min_score=0.5", "hybrid:e,topk=3,depth=3"])
def test_greedy_hybrid_equals_plain_and_uses_both_drafters(small, spec):
    target = LeanLlama(small, "q4q8", threads=1)
    used = {"suffix": 0, "network": 0}
    for seed in range(3):
        head = _prompt(seed, 12)
        prompt = head + head + head[:6]  # a repeat: the suffix tree has matches
        drafter = build_drafter(spec, _context(small, target))
        plain = autoregressive(target, prompt, max_new_tokens=30)
        gen = speculative_tree(target, drafter, prompt, budget=6, max_new_tokens=30)
        assert gen.tokens == plain.tokens, (spec, seed)
        for k in used:
            used[k] += drafter.used[k]
    assert used["suffix"] > 0 and used["network"] > 0, used


def test_hybrid_sampling_keeps_the_target_law_and_a_peeking_choice_breaks_it(monkeypatch):
    one = tiny_llama(0, layers=1)
    target = LeanLlama(one, "float32")
    drafter = build_drafter("hybrid:e,min_score=0.3", _context(one, target, seed=4))
    prefix = [36, 5, 17, 36, 5, 17, 36, 5]  # a repeat: suffix decoding drafts 17 with a high score
    law = _two_token_law(target, prefix)
    assert chi_square_pvalue(_counts(target, drafter, prefix), law)["pvalue"] > 1e-3
    # broken: the suffix draft is kept only when the generator's next uniform is small, i.e. when the
    # verification (which draws that same uniform next) would accept its first node; otherwise the
    # round drafts nothing. The choice then depends on the round's own randomness, not on the past
    original = hybrid_module.HybridDrafter.propose_tree

    def peeking(self, prefix_ids, budget, warp_fn, rng):
        proposal = original(self, prefix_ids, budget, warp_fn, rng)
        peek = np.random.Generator(type(rng.bit_generator)())
        peek.bit_generator.state = rng.bit_generator.state
        if len(proposal.tree) and peek.random() > 0.3:
            return type(proposal)(type(proposal.tree)([], []), None, 0)
        return proposal

    monkeypatch.setattr(hybrid_module.HybridDrafter, "propose_tree", peeking)
    assert chi_square_pvalue(_counts(target, drafter, prefix), law)["pvalue"] < 1e-3


def test_hybrid_refuses_options_of_another_family(small):
    target = LeanLlama(small, "q4q8", threads=1)
    with pytest.raises(ValueError, match=r"option\(s\) \['ranks'\] do not apply to 'e', a eagle drafter"):
        build_drafter("hybrid:e,ranks=2", _context(small, target))
    with pytest.raises(ValueError, match="min_score"):
        parse_spec("hybrid:e,min_score=-1")
