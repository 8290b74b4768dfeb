"""Shadow probes (DoNoHarm's ``shadow``): a probe that does not verify. The drafter proposes as in any
round, the round is the plain decoder's step, and the chance that verification would have accepted one
of the root's children is what the policy learns from. The round's token is the target's own draw, so
the loop stays lossless: greedy output equals plain decoding's, and at temperature 1 the law of the first
two tokens is the target's (chi-square), while a shadow step that commits the drafter's guess instead is
caught by the same test.
"""

from __future__ import annotations

import numpy as np
import pytest

from specdec.drafting.modeltree import ModelTreeDrafter
from specdec.engine import decoding
from specdec.engine.decoding import autoregressive, speculative_tree
from specdec.engine.drafters import ModelDrafter
from specdec.engine.lean import LeanLlama
from specdec.theory.chisquare import chi_square_pvalue
from specdec.theory.policies import BudgetPolicy, DoNoHarm
from specdec.theory.trees import DraftTree
from specdec.theory.treeverify import first_level_chance, output_law, verify_tree
from tests.test_budget_policy import _counts, _two_token_law
from tests.tiny_models import VOCAB, perturbed_copy, tiny_llama


@pytest.fixture(scope="module")
def pair():
    one = tiny_llama(0, layers=1)
    target = LeanLlama(one, "float32")
    draft = ModelTreeDrafter(ModelDrafter(LeanLlama(perturbed_copy(one, 0.3, 7), "float32")), branch=2)
    return target, draft


def _rows(rng, n, vocab=6):
    x = rng.random((n, vocab)) ** 3
    return x / x.sum(1, keepdims=True)


def test_first_level_chance_is_the_rules_probability_of_accepting_a_child():
    """Exactly the mass output_law gives the outputs that start with an accepted child (a tree of leaves
    below the root: two tokens emitted), for one child, siblings with their own rows and deterministic
    drafts; a Monte Carlo of verify_tree agrees."""
    rng = np.random.default_rng(0)
    for kids in ((2,), (2, 4), (1, 3, 5)):
        tree = DraftTree(tuple(kids), (-1,) * len(kids))
        p = _rows(rng, len(kids) + 1)
        for q in (_rows(rng, len(kids)), None):
            law = output_law(p, q, tree)
            exact = sum(m for out, m in law.items() if len(out) == 2)
            assert first_level_chance(p[0], q, tree) == pytest.approx(exact, abs=1e-12)
    one = DraftTree((2,), (-1,))
    p, q = _rows(rng, 2), _rows(rng, 1)
    assert first_level_chance(p[0], q, one) == pytest.approx(min(1.0, p[0, 2] / q[0, 2]))
    assert first_level_chance(p[0], None, one) == pytest.approx(p[0, 2])
    hits = sum(bool(verify_tree(p, q, one, np.random.default_rng(s))[0]) for s in range(4000))
    chance = first_level_chance(p[0], q, one)
    assert abs(hits / 4000 - chance) < 4 * np.sqrt(chance * (1 - chance) / 4000) + 1e-9
    # a deeper node does not count: only the root's children
    chain = DraftTree((2, 3), (-1, 0))
    assert first_level_chance(p[0], None, chain) == pytest.approx(p[0, 2])
    with pytest.raises(ValueError, match="p_root must be one row"):
        first_level_chance(p, None, one)
    with pytest.raises(ValueError, match=r"tree.tokens\[0\] must lie in \[0, 6\)"):
        first_level_chance(p[0], None, DraftTree((9,), (-1,)))


def test_a_shadow_probe_learns_from_the_chance_and_costs_its_draft():
    """A shadow policy probes at its smallest budget (shadows() True on that round only), counts depth 1
    tried once and passed by the chance, waits longer after a probe that does not make speculation pay,
    and bounds probes by explore with the draft's cost c as a probe's loss (not verify's rows)."""
    costs = {1: (1.3, 0.2, 1), 4: (2.0, 0.3, 4)}
    pol = DoNoHarm(costs, prior=2, prior_rate=0.2, probe_every=3, max_probe_every=12, shadow=True)
    seen = []
    for _ in range(40):
        b = pol.next()
        seen.append((b, pol.shadows()))
        if b:
            pol.update_shadow(1, 0.0)
        else:
            pol.update(0, 0, 0)
    probes = [i for i, (b, s) in enumerate(seen) if b]
    assert all(s for b, s in seen if b) and not any(s for b, s in seen if not b)
    assert [b for b, _ in seen if b] == [1] * len(probes)  # the smallest budget
    assert [j - i for i, j in zip(probes, probes[1:], strict=False)][:3] == [6, 12, 12]  # doubled, capped
    assert pol.tried[0] == len(probes) and pol.passed[0] == 0.0 and pol.filled[1] == [0.0, 0.0]
    # the chance counts as a fraction of a pass
    pol = DoNoHarm(costs, prior=2, prior_rate=0.2, probe_every=1, shadow=True)
    assert pol.next() == 1 and pol.shadows()
    pol.update_shadow(1, 0.25)
    assert pol.rates()[0] == pytest.approx((0.25 + 2 * 0.2) / 3)
    # explore: a shadow probe's predicted loss is c at the smallest budget (0.2), a verified one's
    # cost less its tokens (1.5 - 1.2 = 0.3): with explore 0.01 the first waits 20 rounds, the other 30
    for shadow, wait in ((True, 20), (False, 30)):
        pol = DoNoHarm(costs, prior=2, prior_rate=0.2, probe_every=1, explore=0.01, shadow=shadow)
        gave = []
        while not gave or not gave[-1]:
            gave.append(pol.next())
            if gave[-1] == 0:
                pol.update(0, 0, 0)
        assert wait <= len(gave) <= wait + 1, shadow  # + 1: the loss's rounding
    # a shadow probe priced as the calibration's loop paid it (probe_cost), not at c
    pol = DoNoHarm(costs, prior=2, prior_rate=0.2, probe_every=1, explore=0.01, shadow=True, probe_cost=0.1)
    gave = []
    while not gave or not gave[-1]:
        gave.append(pol.next())
        if gave[-1] == 0:
            pol.update(0, 0, 0)
    assert 10 <= len(gave) <= 11
    with pytest.raises(ValueError, match="probe_cost must be"):
        DoNoHarm(costs, shadow=True, probe_cost=-1.0)
    plain = DoNoHarm(costs, probe_every=1)
    assert plain.next() == 1 and not plain.shadows()
    with pytest.raises(ValueError, match="update_shadow reports a shadow probe"):
        plain.update_shadow(1, 0.5)
    pol = DoNoHarm(costs, probe_every=1, prior_rate=0.2, shadow=True)
    pol.next()
    with pytest.raises(ValueError, match=r"chance must be a finite number in \[0.0, 1.0\]"):
        pol.update_shadow(1, 1.5)
    with pytest.raises(ValueError, match="nodes must be at most the budget asked"):
        pol.update_shadow(2, 0.5)
    with pytest.raises(ValueError, match="shadow must be True or False"):
        DoNoHarm(costs, shadow=1)
    assert "shadow probes" in DoNoHarm(costs, shadow=True).describe()


def _always_shadow():
    return DoNoHarm({1: (1.3, 0.5, 1)}, prior_rate=0.2, probe_every=1, max_probe_every=1, shadow=True)


def test_greedy_shadow_probes_decode_plain_tokens_and_score_exact_matches(pair):
    """Greedy: the same tokens as plain decoding; every round a shadow probe (counted in shadow_rounds,
    as plain rounds with their draft calls); the chance is 1 exactly where the drafter's child is the
    token the step committed."""
    target, draft = pair
    prompt = np.random.default_rng(3).integers(0, VOCAB, 12).tolist()
    plain = autoregressive(target, prompt, max_new_tokens=30)
    chances = []
    real = decoding._shadow_step

    def spy(lm, tokens, tree, q, *args):
        token, chance = real(lm, tokens, tree, q, *args)
        chances.append((chance, token in tree.tokens[:1]))
        return token, chance

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decoding, "_shadow_step", spy)
        gen = speculative_tree(target, draft, prompt, budget=_always_shadow(), max_new_tokens=30)
    assert gen.tokens == plain.tokens
    st = gen.stats
    assert st.shadow_rounds == len(chances) == 29 and st.drafted == [0] * 30 and st.draft_calls == 29
    assert all(c == float(hit) for c, hit in chances) and any(c for c, _ in chances)


def test_sampling_with_shadow_probes_has_the_target_law_and_committing_the_guess_breaks_it(pair):
    target, draft = pair
    law = _two_token_law(target, [36])
    assert chi_square_pvalue(_counts(target, draft, _always_shadow), law)["pvalue"] > 1e-3
    real = decoding._shadow_step

    def commit_the_guess(lm, tokens, tree, q, *args):  # broken: a likely guess is taken unverified
        token, chance = real(lm, tokens, tree, q, *args)
        if chance > 0.2:
            tokens[-1] = token = tree.tokens[0]
        return token, chance

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decoding, "_shadow_step", commit_the_guess)
        assert chi_square_pvalue(_counts(target, draft, _always_shadow), law)["pvalue"] < 1e-3


def test_a_conditioned_drafter_is_told_every_committed_position_once_across_shadow_rounds(pair):
    """A conditioned drafter under shadow probes hears of each committed position exactly once, in
    order, before each proposal (the prompt's, then each shadow round's token), one feature row each."""
    target, draft = pair
    told: list[int] = []
    proposed_at: list[int] = []

    class Recorder:
        conditioned = True

        def start(self, prompt_ids):
            draft.start(prompt_ids)

        def extend(self, features, next_ids):
            assert features.shape[0] == len(next_ids)
            told.extend(next_ids)

        def propose_tree(self, prefix_ids, budget, warp_fn, rng):
            proposed_at.append(len(prefix_ids))
            assert told == list(prefix_ids[1:])  # every position but the first, before the proposal
            return draft.propose_tree(prefix_ids, budget, warp_fn, rng)

    prompt = np.random.default_rng(5).integers(0, VOCAB, 10).tolist()
    for temperature in (0.0, 1.0):
        told.clear(), proposed_at.clear()
        gen = speculative_tree(target, Recorder(), prompt, budget=_always_shadow(), max_new_tokens=12,
                               temperature=temperature, seed=2)  # fmt: skip
        assert gen.stats.shadow_rounds == len(proposed_at) == 11
        assert proposed_at == list(range(len(prompt), len(prompt) + 11))


def test_the_base_policy_never_shadows():
    class Any1(BudgetPolicy):
        max_budget = 1

        def next(self):
            return 1

    assert not Any1().shadows()


def test_first_level_chance_at_the_rules_edges():
    """A child the drafter gave no mass (q_x = 0) is accepted iff p has mass there; a child p gives no mass
    (top-k zeros) never is; torch rows give numpy's value; unnormalised rows are read as verify_tree reads
    them (its test compares r(x) with q(x) unscaled)."""
    import torch

    tree = DraftTree((1, 2), (-1, -1))
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array(
        [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0]]
    )  # child 0's token has q = 0: accepted iff p > 0
    assert first_level_chance(p, q, tree) == 1.0
    zero = DraftTree((3,), (-1,))
    assert first_level_chance(p, np.array([[0.0, 0.0, 0.0, 1.0]]), zero) == 0.0  # p(x) = 0: never
    qs = _rows(np.random.default_rng(1), 2, 4)
    exact = first_level_chance(p, qs, tree)
    assert first_level_chance(torch.tensor(p), torch.tensor(qs), tree) == pytest.approx(exact)
    law = output_law(np.vstack([p, _rows(np.random.default_rng(2), 2, 4)]), qs, tree)
    assert exact == pytest.approx(sum(m for out, m in law.items() if len(out) == 2))
    assert first_level_chance(2 * p, None, DraftTree((0,), (-1,))) == 1.0  # r(x) = 1.0 >= q = 1


def test_a_run_of_plain_rounds_agrees_with_next_under_shadow_probes():
    """DoNoHarm.plain_rounds commits to the plain rounds next() would give one by one when probes are
    shadow rounds (their loss is probe_cost), the same probes after them."""

    def choices(policy, chances, run_ahead):
        out, i = [], 0
        while len(out) < 300:
            b = policy.next()
            if b == 0:
                run = policy.plain_rounds(300 - len(out)) if run_ahead else 1
                out += [0] * run
                policy.update_plain(run) if run_ahead else policy.update(0, 0, 0)
            else:
                out.append(b)
                if policy.shadows():
                    policy.update_shadow(1, chances[i % len(chances)])
                else:
                    policy.update(1, 1, int(chances[i % len(chances)] > 0.5))
                i += 1
        return out

    for explore, cost in ((0.0, None), (0.01, 0.3), (0.05, 0.02)):
        for chances in ((0.0,), (0.9, 0.1), (1.0,)):
            kw = {"prior_rate": 0.3, "probe_every": 4, "explore": explore, "catch_up": 0.01, "shadow": True}
            one = DoNoHarm({1: (1.3, 0.2, 1), 4: (2.0, 0.3, 4)}, probe_cost=cost, **kw)
            run = DoNoHarm({1: (1.3, 0.2, 1), 4: (2.0, 0.3, 4)}, probe_cost=cost, **kw)
            one.begin(0.0, 20), run.begin(0.0, 20)
            assert choices(one, chances, False) == choices(run, chances, True), (explore, cost, chances)


def test_an_empty_shadow_probe_and_an_eos_in_a_shadow_round(pair):
    """A probe whose drafter proposed nothing is the plain round it was (no shadow round counted, the
    policy told of an empty probe); the calibration's probes count it among those asked. A shadow round
    whose token is the EOS ends the generation as plain decoding does."""
    from specdec.engine.drafters import TreeProposal
    from specdec.measure.draftcost import _shadow_every

    target, draft = pair
    prompt = np.random.default_rng(6).integers(0, VOCAB, 9).tolist()

    class Empty:
        def start(self, prompt_ids):
            pass

        def propose_tree(self, prefix_ids, budget, warp_fn, rng):
            return TreeProposal(DraftTree((), ()), None, 1)

    probes = _shadow_every(1)
    gen = speculative_tree(target, Empty(), prompt, budget=probes, max_new_tokens=20)
    assert gen.stats.shadow_rounds == 0 and probes.asked == 2 and gen.stats.draft_calls == 2
    assert gen.tokens == autoregressive(target, prompt, max_new_tokens=20).tokens
    probes = _shadow_every(1)
    gen = speculative_tree(target, draft, prompt, budget=probes, max_new_tokens=20)
    assert gen.stats.shadow_rounds == probes.asked == 2
    pol = _always_shadow()
    pol.next()
    pol.update(0, 0, 0)  # an empty probe: the wait before the next doubles (capped at 1 here), no depth tried
    assert pol.tried == [0.0] and pol.drafted == [1.0, 0.0]
    plain = autoregressive(target, prompt, max_new_tokens=20).tokens
    eos = plain[6]
    want = autoregressive(target, prompt, max_new_tokens=20, eos_token_id=eos)
    got = speculative_tree(
        target, draft, prompt, budget=_always_shadow(), max_new_tokens=20, eos_token_id=eos
    )
    assert got.tokens == want.tokens and got.tokens[-1] == eos and got.stats.shadow_rounds == len(got.tokens)


def test_a_shadow_policy_without_a_timed_probe_prices_it_at_c_and_says_so():
    from specdec.measure.draftcost import no_harm_policy

    cal = {"budgets": {"1": [1.3, 0.2, 1], "4": [2.0, 0.3, 3]}, "prior_rates": [0.3, 0.3, 0.3]}
    for given in ({}, {"shadow_c": None}, {"shadow_c": float("nan")}):
        policy = no_harm_policy(cal | given, shadow=True)
        assert policy.probe_cost is None and "shadow probes at c" in policy.describe()
    timed = no_harm_policy(cal | {"shadow_c": 0.25}, shadow=True)
    assert timed.probe_cost == 0.25 and "shadow probes at 0.25" in timed.describe()
    assert no_harm_policy(cal | {"shadow_c": 0.25}).probe_cost is None  # no shadow: no probe price
