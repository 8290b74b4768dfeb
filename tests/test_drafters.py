"""Tests of the drafters (specdec.engine.drafters) on tiny random Llama models and toy corpora."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import scipy.stats
import torch
from tiny_models import VOCAB, next_token_logits, perturbed_copy, tiny_llama
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from specdec.engine.drafters import (
    BigramDrafter,
    EarlyExitDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    Proposal,
    UnigramDrafter,
    early_exit_model,
)
from specdec.theory.sampling import warp


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0)


# -- model drafter ---------------------------------------------------------------------------------


def test_model_drafter_rows_and_draft_cache_gap(target):
    """q rows equal a fresh, uncached forward of the draft after every kind of round: the first,
    one after a full accept (the gap: the last draft was never fed), one after a rejection."""
    draft = perturbed_copy(target, 0.3, 7)
    drafter = ModelDrafter(draft, target=target)
    warp_fn = partial(warp, temperature=1.0, top_k=30)
    rng = np.random.default_rng(0)

    def check(prefix, gamma):
        prop = drafter.propose(prefix, gamma, warp_fn, rng)
        assert len(prop.tokens) == gamma and prop.q.shape == (gamma, VOCAB) and prop.calls == gamma
        for i in range(gamma):
            row = warp_fn(next_token_logits(draft, [prefix + prop.tokens[:i]]))
            torch.testing.assert_close(prop.q[i : i + 1], row, atol=1e-5, rtol=1e-4)
        assert drafter.lm.ids == prefix + prop.tokens[:-1]  # the last draft is sampled, not fed
        return prop.tokens

    prompt = [3, 14, 15, 92, 65]
    drafter.start(prompt)
    assert drafter.lm.ids == prompt[:-1]
    drafts = check(prompt, 4)
    after_full_accept = prompt + drafts + [11]  # the sync feeds drafts[-1] and 11 in one call
    drafts = check(after_full_accept, 3)
    after_reject = after_full_accept + drafts[:1] + [(drafts[1] + 1) % VOCAB]
    check(after_reject, 2)
    assert drafter.propose(after_reject, 0, warp_fn, rng) == Proposal([])


def test_model_drafter_vocab_and_tokenizer_checks(target):
    small = tiny_llama(1, vocab=50)
    with pytest.raises(ValueError, match=r"vocabulary size \(50\) differs from the target's \(97\)"):
        ModelDrafter(small, target=target)

    class Tok:
        def __init__(self, vocab):
            self.vocab = vocab

        def get_vocab(self):
            return dict(self.vocab)

    same = {"a": 0, "b": 1}
    ModelDrafter(target, tokenizer=Tok(same), target_tokenizer=Tok(same))
    with pytest.raises(ValueError, match=r"tokenizer \(2 tokens\) differs from the target's \(2 tokens\)"):
        ModelDrafter(target, tokenizer=Tok({"a": 1, "b": 0}), target_tokenizer=Tok(same))
    with pytest.raises(ValueError, match="pass both tokenizer and target_tokenizer"):
        ModelDrafter(target, tokenizer=Tok(same))


def test_proposal_shape_check():
    with pytest.raises(ValueError, match=r"q must have shape \(k, V\) with k = 2"):
        Proposal([1, 2], torch.zeros(3, VOCAB))


# -- early exit ------------------------------------------------------------------------------------


def test_early_exit_shares_weights_and_computes_the_first_layers():
    target = tiny_llama(0, layers=3)
    ids = [[5, 9, 2, 44, 7]]
    view = early_exit_model(target, 1)
    assert view.model.embed_tokens.weight.data_ptr() == target.model.embed_tokens.weight.data_ptr()
    assert view.lm_head.weight.data_ptr() == target.lm_head.weight.data_ptr()
    assert view.model.layers[0] is target.model.layers[0] and len(target.model.layers) == 3
    with torch.no_grad():
        hidden = target(input_ids=torch.tensor(ids), output_hidden_states=True).hidden_states[1]
        expected = target.lm_head(target.model.norm(hidden))[0, -1]
    torch.testing.assert_close(next_token_logits(view, ids)[0], expected, atol=1e-5, rtol=1e-5)
    # all layers: the target itself
    torch.testing.assert_close(
        next_token_logits(early_exit_model(target, 3), ids),
        next_token_logits(target, ids),
        atol=1e-5,
        rtol=1e-5,
    )
    drafter = EarlyExitDrafter(target, 2)
    assert drafter.n_layers == 2 and drafter.vocab_size == VOCAB and len(drafter.lm.model.model.layers) == 2
    for bad in (0, 4, 1.5, True):
        with pytest.raises(ValueError, match=r"n_layers must be an integer in \[1, 3\]"):
            EarlyExitDrafter(target, bad)


# -- prompt lookup ---------------------------------------------------------------------------------


def test_prompt_lookup_agrees_with_transformers():
    """Same candidates as transformers' PromptLookupCandidateGenerator (min_ngram = 1)."""
    rng = np.random.default_rng(0)
    found = 0
    for _ in range(300):
        ids = rng.integers(0, 4, rng.integers(2, 25)).tolist()
        max_ngram, gamma = int(rng.integers(1, 4)), int(rng.integers(1, 6))
        theirs = PromptLookupCandidateGenerator(
            num_output_tokens=gamma, max_matching_ngram_size=max_ngram, max_length=10_000
        )
        candidates, _ = theirs.get_candidates(torch.tensor([ids]))
        ours = PromptLookupDrafter(max_ngram=max_ngram).propose(ids, gamma, None, None)
        assert ours.tokens == candidates[0, len(ids) :].tolist() and ours.q is None
        found += bool(ours.tokens)
    assert found > 200


def test_prompt_lookup_cases():
    lookup = PromptLookupDrafter(max_ngram=3, min_ngram=2)
    assert lookup.lookup([1, 2, 3, 4, 1, 2], 5) == [3, 4, 1, 2]  # shorter than gamma: the prefix ends
    assert lookup.lookup([1, 2, 3, 9, 2, 3, 8, 1, 2, 3], 2) == [9, 2]  # the 3-gram wins over the 2-gram
    assert lookup.lookup([1, 2, 3, 2], 3) == []  # a 1-gram match only, below min_ngram
    assert PromptLookupDrafter().lookup([1, 2, 3, 2], 3) == [3, 2]
    assert PromptLookupDrafter().lookup([7], 3) == []
    for kwargs in ({"max_ngram": 0}, {"min_ngram": 0}, {"max_ngram": 1, "min_ngram": 2}, {"max_ngram": 2.0}):
        with pytest.raises(ValueError, match="ngram"):
            PromptLookupDrafter(**kwargs)


# -- n-gram tables ---------------------------------------------------------------------------------


def test_unigram_table_and_drafts():
    drafter = UnigramDrafter.from_token_ids([[0, 1, 1], [2]], vocab_size=4, smoothing=1.0)
    np.testing.assert_allclose(drafter.log_probs.exp().numpy(), [2 / 8, 3 / 8, 2 / 8, 1 / 8], rtol=1e-6)
    greedy = drafter.propose([3], 4, partial(warp, temperature=0.0), np.random.default_rng(0))
    assert greedy.tokens == [1, 1, 1, 1] and greedy.calls == 4
    sampled = drafter.propose([3], 4000, partial(warp, temperature=1.0), np.random.default_rng(0))
    counts = np.bincount(sampled.tokens, minlength=4)
    assert scipy.stats.chisquare(counts, 4000 * np.array([2, 3, 2, 1]) / 8).pvalue > 1e-3
    torch.testing.assert_close(sampled.q[0], torch.tensor([2, 3, 2, 1]) / 8)


def test_bigram_table_and_drafts():
    drafter = BigramDrafter.from_token_ids([[0, 1, 0, 1, 2]], vocab_size=3, smoothing=0.5)
    np.testing.assert_allclose(
        drafter.log_probs(0).exp().numpy(), [0.5 / 3.5, 2.5 / 3.5, 0.5 / 3.5], rtol=1e-6
    )
    np.testing.assert_allclose(
        drafter.log_probs(1).exp().numpy(), [1.5 / 3.5, 0.5 / 3.5, 1.5 / 3.5], rtol=1e-6
    )
    np.testing.assert_allclose(drafter.log_probs(2).exp().numpy(), [1 / 3] * 3, rtol=1e-6)  # unseen: uniform
    prop = drafter.propose([2, 0], 4, partial(warp, temperature=0.0), np.random.default_rng(0))
    assert prop.tokens == [1, 0, 1, 0]  # after 1, a tie between 0 and 2 goes to the first
    assert prop.q.shape == (4, 3) and prop.calls == 4


@pytest.mark.parametrize("cls", [UnigramDrafter, BigramDrafter])
def test_table_drafter_input_errors(cls):
    with pytest.raises(ValueError, match="smoothing must be a finite number > 0"):
        cls.from_token_ids([[0, 1]], vocab_size=3, smoothing=0.0)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 3\)"):
        cls.from_token_ids([[0, 3]], vocab_size=3)
    with pytest.raises(ValueError, match="at least one token id"):
        cls.from_token_ids([[]], vocab_size=3)
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 1"):
        cls.from_token_ids([[0]], vocab_size=0)


def test_unigram_probs_check():
    with pytest.raises(ValueError, match="positive probabilities summing to 1"):
        UnigramDrafter(np.array([0.5, 0.5, 0.0]))
