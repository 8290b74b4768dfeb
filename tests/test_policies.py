"""Dynamic draft length: policies, the confidence stop, and losslessness with both."""

from __future__ import annotations

import numpy as np
import pytest
from test_decoding import PROMPTS, chi_square_pvalue, exact_two_token_law
from tiny_models import VOCAB, perturbed_copy, tiny_llama

from specdec.engine.decoding import autoregressive, speculative
from specdec.engine.drafters import ModelDrafter, PromptLookupDrafter
from specdec.theory.policies import DraftPolicy, FixedGamma, HeuristicGamma, as_policy

pytestmark = pytest.mark.usefixtures("one_thread")


def test_heuristic_schedule():
    h = HeuristicGamma(start=5, max_gamma=8)
    seen = []
    for drafted, accepted in [(5, 5), (7, 7), (8, 8), (8, 3), (7, 0), (6, 6), (0, 0)]:
        seen.append(h.next())
        h.update(drafted, accepted)
    assert seen == [5, 7, 8, 8, 7, 6, 8]  # +2 on full accepts (capped at 8), -1 otherwise, none: same
    assert h.next() == 8
    h.reset()
    assert h.next() == 5
    for _ in range(10):
        h.update(h.next(), 0)
    assert h.next() == 1  # never below 1
    with pytest.raises(ValueError, match="start"):
        HeuristicGamma(start=9, max_gamma=8)
    with pytest.raises(ValueError, match="accepted"):
        h.update(2, 3)
    assert isinstance(as_policy(4), FixedGamma) and as_policy(h) is h
    with pytest.raises(ValueError, match="gamma"):
        FixedGamma(0)


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0)


def test_greedy_is_exact_with_every_policy(target):
    draft = perturbed_copy(target, 0.05, 5)
    for drafter in (ModelDrafter(draft), ModelDrafter(draft, confidence=0.6), PromptLookupDrafter()):
        for prompt in PROMPTS:
            plain = autoregressive(target, prompt, max_new_tokens=24)
            for gamma in (HeuristicGamma(start=2, max_gamma=6), 3):
                assert (
                    speculative(target, drafter, prompt, gamma=gamma, max_new_tokens=24).tokens
                    == plain.tokens
                )


def test_the_schedule_and_the_confidence_stop_change_draft_lengths(target):
    prompt = PROMPTS[2]
    good = ModelDrafter(perturbed_copy(target, 0.05, 5))
    fixed = speculative(target, good, prompt, gamma=2, max_new_tokens=40).stats
    grown = speculative(
        target, good, prompt, gamma=HeuristicGamma(start=2, max_gamma=8), max_new_tokens=40
    ).stats
    assert max(fixed.drafted) == 2 and max(grown.drafted) > 2  # full accepts grew gamma
    assert grown.gamma == 8
    loose = perturbed_copy(target, 0.3, 7)
    always = speculative(target, ModelDrafter(loose), prompt, gamma=6, max_new_tokens=40).stats
    unsure = speculative(
        target, ModelDrafter(loose, confidence=0.9), prompt, gamma=6, max_new_tokens=40
    ).stats
    assert np.mean(unsure.drafted) < np.mean(always.drafted)
    assert unsure.draft_calls < always.draft_calls
    with pytest.raises(ValueError, match="confidence"):
        ModelDrafter(loose, confidence=1.0)


def test_sampling_stays_lossless_with_dynamic_gamma():
    small = tiny_llama(0, layers=1)
    drafter = ModelDrafter(perturbed_copy(small, 0.3, 7), confidence=0.5)
    prefix, kw = [36], {"temperature": 1.0}
    counts = np.zeros((VOCAB, VOCAB))
    for seed in range(1000):
        policy = HeuristicGamma(start=1, max_gamma=3)
        gen = speculative(small, drafter, prefix, gamma=policy, max_new_tokens=3, seed=seed, **kw)
        counts[gen.tokens[0], gen.tokens[1]] += 1
    assert chi_square_pvalue(counts, exact_two_token_law(small, prefix, **kw)) > 1e-3


def test_a_policy_out_of_range_is_refused(target):
    class Broken(DraftPolicy):
        max_gamma = 3

        def next(self):
            return 5

    with pytest.raises(ValueError, match="asked for 5 drafts"):
        speculative(target, PromptLookupDrafter(), [1, 2, 3], gamma=Broken(), max_new_tokens=5)
