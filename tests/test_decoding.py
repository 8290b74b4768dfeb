"""Tests of the decoding loops (specdec.engine.decoding) on tiny random Llama models, fp32 CPU.

1. Greedy speculative decoding equals greedy autoregressive decoding token for token, for
   every drafter and several prompts and gammas.
2. Sampling is lossless (Appendix A.1): a chi-square test of the joint law of the first two
   generated tokens against the target's exact law; the same test rejects deliberately
   broken engines (resampling from p instead of the residual; reseeding every round).
3. EOS, the max_new_tokens budget, gamma boundaries, caches, statistics.
4. Bad input raises ValueError.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_models import VOCAB, next_token_logits, perturbed_copy, tiny_llama

import specdec.theory.sampling
import specdec.theory.treeverify
from specdec.engine.decoding import autoregressive, speculative
from specdec.engine.drafters import (
    BigramDrafter,
    Drafter,
    EarlyExitDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    Proposal,
    UnigramDrafter,
)
from specdec.engine.lm import CachedLM
from specdec.engine.stats import Stats
from specdec.theory.chisquare import chi_square_pvalue as chi_square_pvalue_record
from specdec.theory.sampling import warp
from specdec.theory.speedup import acceptance_rate

PROMPTS = [[7], [3, 14, 15, 92, 65], [11, 22, 33, 44, 11, 22, 33, 55, 66, 11, 22, 33]]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0)


@pytest.fixture(scope="module")
def models(target):
    """Drafts: an unrelated random model (alpha ~ 0), a close copy of the target (alpha ~ 0.8 at
    temperature 1) and a looser copy (alpha ~ 0.4)."""
    return {
        "random": tiny_llama(1, layers=1),
        "good": perturbed_copy(target, 0.05, 5),
        "loose": perturbed_copy(target, 0.3, 7),
    }


class NoDrafter(Drafter):
    """Proposes nothing: every round is a plain target step."""

    def propose(self, prefix_ids, gamma, warp_fn, rng):
        return Proposal([])


class Overrun(Drafter):
    """A broken drafter that ignores gamma."""

    def propose(self, prefix_ids, gamma, warp_fn, rng):
        return Proposal([1, 2, 3, 4, 5])


class OracleDrafter(Drafter):
    """Proposes the target's own greedy continuation (q = None): every draft is accepted at
    temperature 0, so every round is a full accept with a bonus token."""

    def __init__(self, target):
        self.target = target

    def propose(self, prefix_ids, gamma, warp_fn, rng):
        if gamma == 0:
            return Proposal([])
        return Proposal(autoregressive(self.target, prefix_ids, max_new_tokens=gamma).tokens, None, 1)


@pytest.fixture(scope="module")
def drafters(target, models):
    """Every drafter, n-gram tables fitted on the target's greedy continuations of 14 prompts."""
    greedy_texts = [autoregressive(target, [t], max_new_tokens=30).tokens for t in range(0, VOCAB, 7)]
    return {
        "model-random": ModelDrafter(models["random"], target=target),
        "model-good": ModelDrafter(models["good"], target=target),
        "prompt-lookup": PromptLookupDrafter(),
        "unigram": UnigramDrafter.from_token_ids(greedy_texts, VOCAB, smoothing=0.1),
        "bigram": BigramDrafter.from_token_ids(greedy_texts, VOCAB, smoothing=0.1),
        "early-exit": EarlyExitDrafter(target, 1),
        "oracle": OracleDrafter(target),
    }


def check_invariants(gen, gamma, max_new_tokens):
    s = gen.stats
    assert len(gen.tokens) == s.new_tokens <= max_new_tokens
    assert sum(a + 1 for a in s.accepted) == s.new_tokens + s.dropped_after_eos
    assert sum(s.accepted_hist) == s.rounds == s.target_calls
    assert all(0 <= a <= k <= gamma for a, k in zip(s.accepted, s.drafted, strict=True))
    assert s.examined_at[0] == sum(k > 0 for k in s.drafted)
    assert sum(s.accepted_at) == s.accepted_tokens
    assert s.examined == sum(min(a + 1, k) for a, k in zip(s.accepted, s.drafted, strict=True))
    assert math.isclose(s.mean_tokens_per_round, s.new_tokens / s.rounds)
    assert s.bonus_tokens == sum(k > 0 and a == k for a, k in zip(s.accepted, s.drafted, strict=True))


# -- 1. greedy: speculative == autoregressive ------------------------------------------------------


@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_equals_autoregressive_for_every_drafter(target, drafters, gamma):
    for prompt in PROMPTS:
        expected = autoregressive(target, prompt, max_new_tokens=20).tokens
        for name, drafter in drafters.items():
            gen = speculative(target, drafter, prompt, gamma=gamma, max_new_tokens=20)
            assert gen.tokens == expected, (name, prompt)
            check_invariants(gen, gamma, 20)


def test_greedy_autoregressive_equals_transformers_generate(target):
    """An independent reference for the baseline, and so for every greedy equality above (a
    wrong position id, say, would leave speculative == autoregressive but not this)."""
    for prompt in PROMPTS:
        out = target.generate(
            torch.tensor([prompt]), max_new_tokens=20, do_sample=False, pad_token_id=0, eos_token_id=None
        )
        assert out.shape[1] == len(prompt) + 20
        assert out[0, len(prompt) :].tolist() == autoregressive(target, prompt, max_new_tokens=20).tokens


def test_greedy_drafters_span_rejections_and_full_accepts(target, drafters):
    """The greedy test above is only as strong as the mix of rounds it sees."""
    hist = {
        name: speculative(target, d, PROMPTS[1], gamma=3, max_new_tokens=20).stats.accepted_hist
        for name, d in drafters.items()
    }
    assert hist["model-random"][0] == sum(hist["model-random"])  # every round rejects at once
    assert hist["oracle"][3] == sum(hist["oracle"])  # full accepts only
    assert 0 < hist["model-good"][3] < sum(hist["model-good"])  # some of each


# -- 2. sampling is lossless ---------------------------------------------------------------------

N_SAMPLES = 1000
P_MIN = 1e-3  # pass threshold of the chi-square p-value; seeds are fixed, so the outcome is too


def exact_two_token_law(target, prefix, **warp_kw):
    """P(x1, x2 | prefix) of the target under warp, from full (uncached) forwards, float64."""
    p1 = warp(next_token_logits(target, [prefix]), **warp_kw)[0].double()
    p2 = warp(next_token_logits(target, [prefix + [x] for x in range(VOCAB)]), **warp_kw).double()
    law = (p1[:, None] * p2).numpy()
    return law / law.sum()


def chi_square_pvalue(counts, law, min_expected=5.0):
    """Pearson's chi-square p-value of observed counts against a law, rare cells pooled.

    The package's one implementation (:func:`specdec.theory.chisquare.chi_square_pvalue`, which the
    GPU record also runs); tests/test_gpu_record.py checks its pooling and its p-value.
    """
    return chi_square_pvalue_record(counts, law, min_expected)["pvalue"]


def first_two_counts(target, drafter, prefix, gamma, n=N_SAMPLES, new_tokens=None, **kw):
    counts = np.zeros((VOCAB, VOCAB))
    new_tokens = gamma + 1 if new_tokens is None else new_tokens
    for seed in range(n):
        gen = speculative(target, drafter, prefix, gamma=gamma, max_new_tokens=new_tokens, seed=seed, **kw)
        counts[gen.tokens[0], gen.tokens[1]] += 1
    return counts


@pytest.fixture(scope="module")
def small_target():
    """A one-layer target for the sampling tests, which need thousands of calls."""
    return tiny_llama(0, layers=1)


def target_bigram(small_target, per_context=20, seed=2):
    """A bigram table fitted on pairs (y, x) with x drawn from the target's p(. | y): alpha ~ 0.6."""
    p = torch.softmax(next_token_logits(small_target, [[y] for y in range(VOCAB)]), -1).double().numpy()
    rng = np.random.default_rng(seed)
    pairs = [[y, int(x)] for y in range(VOCAB) for x in rng.choice(VOCAB, per_context, p=p[y] / p[y].sum())]
    return BigramDrafter.from_token_ids(pairs, VOCAB, smoothing=0.1)


def sampling_case(name, small_target):
    """(drafter, prefix, gamma, warp settings) of each losslessness check. The model draft is a
    perturbed copy of the target with alpha about 0.6 after the prefix [36]."""
    loose = perturbed_copy(small_target, 0.3, 7)
    cases = {
        # gamma = 1: token 2 is the bonus token after an accept, a plain target step after a reject
        "model-gamma1": (ModelDrafter(loose), [36], 1, {"temperature": 1.0}),
        # gamma = 2: token 2 is the second draft or the residual at the second position
        "model-gamma2": (ModelDrafter(loose), [36], 2, {"temperature": 1.0}),
        "bigram-topk-topp": (
            target_bigram(small_target),
            [36],
            2,
            {"temperature": 0.8, "top_k": 20, "top_p": 0.9},
        ),
        # q = None: prompt lookup drafts "61 10" (point masses), which the target accepts with
        # probabilities of about 0.6 and 0.4 (top-p 0.95)
        "lookup-topp": (PromptLookupDrafter(), [10, 61, 10], 2, {"temperature": 1.0, "top_p": 0.95}),
    }
    return cases[name]


@pytest.mark.parametrize("case", ["model-gamma1", "model-gamma2", "bigram-topk-topp", "lookup-topp"])
def test_sampling_has_the_target_law(small_target, case):
    drafter, prefix, gamma, kw = sampling_case(case, small_target)
    counts = first_two_counts(small_target, drafter, prefix, gamma, **kw)
    assert chi_square_pvalue(counts, exact_two_token_law(small_target, prefix, **kw)) > P_MIN


def test_sampling_check_rejects_resampling_from_p(small_target, monkeypatch):
    """A broken verify that resamples a rejected position from p, not norm(max(0, p - q))."""
    broken = lambda p, q, lenience=1.0, token=None: p  # noqa: E731
    monkeypatch.setattr(specdec.theory.sampling, "residual", broken)
    monkeypatch.setattr(specdec.theory.treeverify, "residual", broken)  # the one loop verifies through it
    drafter, prefix, gamma, kw = sampling_case("model-gamma1", small_target)
    counts = first_two_counts(small_target, drafter, prefix, gamma, **kw)
    assert chi_square_pvalue(counts, exact_two_token_law(small_target, prefix, **kw)) < P_MIN


class ReseedEachRound(Drafter):
    """Emulates the classic bug ``rng = default_rng(seed)`` at the top of every round: the
    generator goes back to its seeded state whenever a round starts (propose is its first step)."""

    def __init__(self, drafter):
        self.drafter, self.vocab_size, self.seeded_state = drafter, drafter.vocab_size, None

    def start(self, prompt_ids):
        self.drafter.start(prompt_ids)
        self.seeded_state = None

    def propose(self, prefix_ids, gamma, warp_fn, rng):
        if self.seeded_state is None:  # the first round: nothing has been drawn yet
            self.seeded_state = rng.bit_generator.state
        rng.bit_generator.state = self.seeded_state
        return self.drafter.propose(prefix_ids, gamma, warp_fn, rng)


def test_sampling_check_rejects_reseeding_every_round(small_target):
    """Three new tokens, so that a round after a rejection drafts again (a round with no token left to
    draft does not call the drafter, so with two the reseeding would never happen)."""
    drafter, prefix, gamma, kw = sampling_case("model-gamma1", small_target)
    counts = first_two_counts(
        small_target, ReseedEachRound(drafter), prefix, gamma, new_tokens=gamma + 2, **kw
    )
    assert chi_square_pvalue(counts, exact_two_token_law(small_target, prefix, **kw)) < P_MIN


def test_no_draft_round_is_an_autoregressive_step(target):
    """With nothing drafted, speculative draws exactly autoregressive's uniforms: same tokens."""
    for kw in ({"temperature": 1.0}, {"temperature": 0.7, "top_k": 5}, {"temperature": 1.3, "top_p": 0.8}):
        for seed in range(3):
            ar = autoregressive(target, PROMPTS[1], max_new_tokens=15, seed=seed, **kw)
            sp = speculative(target, NoDrafter(), PROMPTS[1], gamma=4, max_new_tokens=15, seed=seed, **kw)
            assert sp.tokens == ar.tokens
            assert sp.stats.accepted_hist == [15, 0, 0, 0, 0]


def test_seed_reproducibility(target, models):
    drafter = ModelDrafter(models["loose"])
    runs = [
        speculative(target, drafter, PROMPTS[1], gamma=3, max_new_tokens=15, temperature=1.0, seed=s).tokens
        for s in (0, 0, 1)
    ]
    assert runs[0] == runs[1] != runs[2]


def test_lenience_accepts_more(target, models):
    """Appendix A.5: with l < 1 a draft is accepted with probability min(1, p / (l q)) >= min(1, p / q)."""
    drafter = ModelDrafter(models["loose"])

    def rate(lenience):
        accepted = examined = 0
        for seed in range(20):
            s = speculative(
                target,
                drafter,
                [7],
                gamma=4,
                max_new_tokens=20,
                temperature=1.0,
                lenience=lenience,
                seed=seed,
            ).stats
            accepted, examined = accepted + s.accepted_tokens, examined + s.examined
        return accepted / examined

    assert rate(0.3) > rate(1.0) + 0.1


def test_argmax_lenience_keeps_only_tokens_within_l_of_the_targets_favourite(target, models):
    """Appendix A.5 at temperature 0: every kept draft x has p(x) >= l max p (teacher-forced check),
    every other token is the target's argmax, and acceptance rises as l falls."""
    drafter = ModelDrafter(models["loose"])
    prompt = PROMPTS[1]
    rates = {}
    for lenience in (1.0, 0.5, 0.1):
        g = speculative(target, drafter, prompt, gamma=4, max_new_tokens=24, lenience=lenience)
        rates[lenience] = g.stats.accepted_tokens / g.stats.examined
        seq = prompt + g.tokens
        logits = target(torch.tensor([seq])).logits[0, len(prompt) - 1 : -1].float()
        p = torch.softmax(logits, -1)
        ratio = p.gather(1, torch.tensor(g.tokens)[:, None])[:, 0] / p.max(-1).values
        assert bool((ratio >= lenience - 1e-6).all())
        own = np.cumsum(np.array(g.stats.accepted) + 1) - 1  # each round's own token: the argmax
        assert bool((ratio[own[own < len(g.tokens)]] == 1).all())
        if lenience == 1.0:
            assert g.tokens == autoregressive(target, prompt, max_new_tokens=24).tokens
    assert rates[0.1] > rates[0.5] >= rates[1.0]
    assert rates[0.1] > rates[1.0] + 0.1


# -- 3. EOS, budget, gamma boundaries, caches, statistics -------------------------------------------


def test_eos_inside_a_draft_is_cut_and_ends_the_output(target):
    expected = autoregressive(target, PROMPTS[1], max_new_tokens=30).tokens
    eos = expected[4]
    end = expected.index(eos) + 1
    for gamma in (1, 3, 8):
        gen = speculative(
            target, OracleDrafter(target), PROMPTS[1], gamma=gamma, max_new_tokens=30, eos_token_id=eos
        )
        assert gen.tokens == expected[:end]
        assert max(gen.stats.drafted) <= gamma
        check_invariants(gen, gamma, 30)
    # gamma = 8 drafts past the EOS: the proposal is cut after it, the EOS is accepted, and the
    # bonus token that verify draws after it is dropped.
    gen = speculative(target, OracleDrafter(target), PROMPTS[1], gamma=8, max_new_tokens=30, eos_token_id=eos)
    assert gen.stats.drafted[0] == end and gen.stats.dropped_after_eos == 1
    assert autoregressive(target, PROMPTS[1], max_new_tokens=30, eos_token_id=eos).tokens == expected[:end]


def test_eos_as_the_targets_own_token(target, models):
    expected = autoregressive(target, PROMPTS[0], max_new_tokens=30).tokens
    eos = expected[6]
    gen = speculative(
        target, ModelDrafter(models["random"]), PROMPTS[0], gamma=3, max_new_tokens=30, eos_token_id=eos
    )
    assert gen.tokens == expected[: expected.index(eos) + 1]
    assert gen.stats.dropped_after_eos == 0


@pytest.mark.parametrize("drafter_name", ["oracle", "prompt-lookup", "model-good"])
def test_max_new_tokens_is_never_exceeded(target, drafters, drafter_name):
    drafter = drafters[drafter_name]
    for max_new in (1, 2, 3, 7, 9):
        for gamma in (1, 4, 8):  # gamma > max_new - 1 included: shortened near the end
            for temperature in (0.0, 1.0):
                gen = speculative(
                    target, drafter, PROMPTS[2], gamma=gamma, max_new_tokens=max_new, temperature=temperature
                )
                assert len(gen.tokens) == max_new
                check_invariants(gen, gamma, max_new)


def test_full_accepts_use_the_bonus_token(target):
    """Oracle drafts are all accepted: each round emits gamma + 1 tokens, the last from p[gamma]."""
    expected = autoregressive(target, PROMPTS[1], max_new_tokens=22).tokens
    gen = speculative(target, OracleDrafter(target), PROMPTS[1], gamma=3, max_new_tokens=22)
    assert gen.tokens == expected
    s = gen.stats
    assert s.accepted == [3, 3, 3, 3, 3, 1] and s.drafted == [3, 3, 3, 3, 3, 1]
    assert s.bonus_tokens == 6 and s.alpha_accept_rate == 1.0
    assert s.mean_accepted == 16 / 6 and s.mean_tokens_per_round == 22 / 6


def test_prompt_lookup_shorter_than_gamma(target):
    """The lookup finds fewer tokens than gamma: the proposal is shorter; output unchanged."""
    prompt = [5, 6, 7, 8, 5, 6]  # "5 6" was followed by "7 8 5 6": 4 tokens < gamma = 8
    gen = speculative(target, PromptLookupDrafter(), prompt, gamma=8, max_new_tokens=12)
    assert gen.stats.drafted[0] == 4
    assert gen.tokens == autoregressive(target, prompt, max_new_tokens=12).tokens


def test_gamma_one_rounds(target, models):
    gen = speculative(target, ModelDrafter(models["good"]), PROMPTS[1], gamma=1, max_new_tokens=16)
    assert gen.tokens == autoregressive(target, PROMPTS[1], max_new_tokens=16).tokens
    # every round drafts one token, except a last round with budget 1 (a plain target step)
    assert set(gen.stats.drafted[:-1]) == {1} and gen.stats.drafted[-1] in (0, 1)
    assert len(gen.stats.accepted_hist) == 2
    check_invariants(gen, 1, 16)


def test_draft_calls_and_times(target, models):
    gen = speculative(target, ModelDrafter(models["good"]), PROMPTS[1], gamma=4, max_new_tokens=20)
    s = gen.stats
    assert s.draft_calls == s.drafted_tokens  # one draft forward per drafted token (no EOS here)
    assert min(s.prefill_s, s.draft_s, s.target_s, s.verify_s) > 0
    ar = autoregressive(target, PROMPTS[1], max_new_tokens=20).stats
    c = s.cost_coefficient(ar.step_s)
    assert c > 0 and math.isfinite(c)
    assert ar.target_calls == ar.rounds == 20 and ar.accepted_hist == [20]


def test_alpha_estimates(target, models):
    gen = speculative(target, ModelDrafter(models["loose"]), [7], gamma=4, max_new_tokens=40, temperature=1.0)
    s = gen.stats
    assert 0 < s.alpha_accept_rate < 1 and 0 < s.alpha_tv < 1
    assert s.draft_acceptance_fraction <= s.alpha_accept_rate
    # beta of one position equals theory.acceptance_rate (Corollary 3.6)
    p = torch.softmax(torch.randn(2, VOCAB, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(2, VOCAB, dtype=torch.float64), -1)
    one = Stats(gamma=1)
    one.record_round(p, q[:1], drafted=1, accepted=0, draft_calls=1)
    assert math.isclose(one.alpha_tv, float(acceptance_rate(p[0].numpy(), q[0].numpy())), rel_tol=1e-12)
    json_ready = s.summary()
    assert json_ready["rounds"] == s.rounds and json_ready["accepted_hist"] == s.accepted_hist


def test_cached_lm_matches_uncached_forward(target):
    """Prefill, incremental steps, crops and syncs give the logits of a full forward."""
    ids = [int(x) for x in np.random.default_rng(3).integers(0, VOCAB, 20)]
    full = target(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float().detach()
    lm = CachedLM(target)
    got = lm.forward(ids[:8])
    torch.testing.assert_close(got, full[:8], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lm.forward(ids[8:9]), full[8:9], atol=1e-5, rtol=1e-5)
    lm.forward([1, 2, 3])  # a rejected continuation
    lm.crop(9)
    assert lm.ids == ids[:9] and lm.cache.get_seq_length() == 9
    torch.testing.assert_close(lm.forward(ids[9:14]), full[9:14], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lm.sync(ids[:12]), full[11:12], atol=1e-5, rtol=1e-5)  # crop and re-feed
    torch.testing.assert_close(lm.sync(ids), full[19:20], atol=1e-5, rtol=1e-5)  # feed the missing 8
    assert lm.cache.get_seq_length() == 20
    lm.crop(0)
    assert len(lm) == 0 and lm.cache.get_seq_length() == 0
    with pytest.raises(ValueError, match=r"n must be an integer in \[0, 0\] \(the cached length\)"):
        lm.crop(1)


# -- 4. bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt_ids": []}, "prompt_ids must hold at least one"),
        ({"prompt_ids": [1, VOCAB]}, r"prompt_ids must be integers in \[0, 97\)"),
        ({"prompt_ids": torch.ones(2, 3, dtype=torch.long)}, "batch size 1"),
        ({"gamma": 0}, "gamma must be an integer >= 1"),
        ({"gamma": 2.5}, "gamma must be an integer >= 1"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an integer >= 1"),
        ({"temperature": -0.1}, "temperature must be a finite number >= 0"),
        ({"temperature": float("nan")}, "temperature must be a finite number >= 0"),
        ({"top_p": 0.0}, r"top_p must be a finite number in \(0.0, 1.0\] \(or None\); got 0.0"),
        ({"top_p": 1.5}, r"top_p must be a finite number in \(0.0, 1.0\] \(or None\); got 1.5"),
        ({"top_k": 0}, "top_k must be an integer >= 1"),
        ({"lenience": 0.0, "temperature": 1.0}, r"lenience must be a finite number in \(0.0, 1.0\]; got"),
        ({"lenience": 1.2, "temperature": 1.0}, r"lenience must be a finite number in \(0.0, 1.0\]; got"),
        (
            {"eos_token_id": VOCAB},
            r"eos_token_id must be an integer in \[0, 96\] \(or None; the target's vocabulary\); got 97",
        ),
        (
            {"drafter": UnigramDrafter(np.full(50, 1 / 50))},
            r"drafter's vocabulary size \(50\) differs .* \(97\)",
        ),
    ],
)
def test_bad_input(target, kwargs, message):
    args = {"drafter": NoDrafter(), "prompt_ids": [1, 2], "gamma": 2, "max_new_tokens": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        speculative(target, **args)


def test_a_drafter_that_overruns_gamma_is_refused(target):
    with pytest.raises(ValueError, match="the drafter proposed 5 tokens; 2 at most were asked"):
        speculative(target, Overrun(), [1, 2], gamma=2, max_new_tokens=10)


def test_bad_input_autoregressive(target):
    with pytest.raises(ValueError, match="prompt_ids must hold at least one"):
        autoregressive(target, [], max_new_tokens=3)
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1"):
        autoregressive(target, [1], max_new_tokens=2.0)


def test_prompt_as_tensor(target):
    ids = torch.tensor([[3, 14, 15, 92, 65]])
    assert (
        autoregressive(target, ids, max_new_tokens=5).tokens
        == autoregressive(target, PROMPTS[1], max_new_tokens=5).tokens
    )
