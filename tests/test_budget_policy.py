"""Budget policies in the tree loop (issue 42, item 3): each round's node budget chosen from the rounds
already verified, 0 meaning a plain step. :class:`DoNoHarm` speculates only where Theorem 3.8's ratio
for the round, with online acceptance per depth and the measured v and c, beats a plain step.

Lossless by the round-by-round argument (the budget is fixed before the round's verification draws
anything): greedy output equals plain decoding's whatever the budgets; at temperature 1 the law of the
first two tokens is the target's (chi-square), under a policy that switches budgets on what it saw,
while a loop that *undoes* a rejected speculative round (and takes a plain step instead: "do no harm"
done wrong) is caught by the same test.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec.drafting.modeltree import ModelTreeDrafter
from specdec.drafting.registry import build_drafter
from specdec.engine import decoding
from specdec.engine.decoding import autoregressive, speculative_tree
from specdec.engine.drafters import ModelDrafter, TreeProposal
from specdec.engine.lean import LeanLlama
from specdec.engine.lm import open_lm
from specdec.theory import treeverify
from specdec.theory.chisquare import chi_square_pvalue
from specdec.theory.policies import BudgetPolicy, DoNoHarm, FixedBudget
from specdec.theory.sampling import sample, warp
from specdec.theory.trees import DraftTree
from tests.tiny_models import VOCAB, perturbed_copy, tiny_llama


class Alternate(BudgetPolicy):
    """A policy that reacts to what it saw: budget 0 after a round that accepted something, else 6."""

    max_budget = 6

    def reset(self) -> None:
        self.accepted = 0

    def next(self) -> int:
        return 0 if self.accepted else 6

    def update(self, nodes: int, depth: int, accepted: int) -> None:
        self.accepted = accepted


def test_do_no_harm_speculates_only_where_it_pays():
    cheap = DoNoHarm({1: (1.1, 0.05, 1), 4: (1.3, 0.2, 4)}, prior=2, prior_rate=0.5, probe_every=4)
    r = cheap.predicted()  # a = 0.5 at every depth before any round
    assert r[0] == 1.0 and r[1] == pytest.approx(1.5 / 1.15) and r[4] == pytest.approx(1.9375 / 1.5)
    assert cheap.next() == 1
    costly = DoNoHarm({2: (1.2, 0.9, 2)}, probe_every=3)
    assert [costly.next() for _ in range(1)] == [0]
    costly.update(0, 0, 0)
    costly.update(0, 0, 0)
    assert costly.next() == 2  # the third plain round in a row probes the drafter
    costly.update(2, 2, 2)  # it accepted both: the estimates rise
    assert costly.rates()[0] > 0.5 and costly.plain_run == 0
    for _ in range(40):
        costly.update(2, 2, 2)
    assert costly.next() == 2  # now speculation pays even at c = 0.9
    for _ in range(200):
        costly.update(2, 2, 0)  # nothing accepted for a long time: back to plain steps
    assert costly.next() == 0


def test_do_no_harm_probes_a_hopeless_drafter_less_and_less_often():
    policy = DoNoHarm({2: (1.2, 0.5, 2)}, probe_every=4, max_probe_every=32)
    probes = []
    for i in range(200):
        b = policy.next()
        if b:
            probes.append(i)
        policy.update(b, b, 0)  # every probe's drafts rejected
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    # round 0 drafts by choice (the prior's a = 0.5 gives R = 1.75 / 1.7); then probes, each wait doubled
    assert probes[0] == 0 and gaps[:4] == [4, 8, 16, 32] and set(gaps[4:]) == {32}


def test_do_no_harm_counts_depths_as_the_tree_reached_them():
    policy = DoNoHarm({6: (1.5, 0.1, 3)}, prior=0)
    policy.update(6, 3, 1)  # depth 1 passed, depth 2 tried and failed, depth 3 never reached
    policy.update(6, 2, 2)  # a shallower tree: depths 1 and 2 passed
    assert policy.tried == [2, 2, 0] and policy.passed == [2, 1, 0]


def test_do_no_harm_remembers_earlier_generations_when_asked():
    forget, keep = DoNoHarm({2: (1.2, 0.1, 2)}, prior=0), DoNoHarm({2: (1.2, 0.1, 2)}, prior=0, remember=0.5)
    for policy in (forget, keep):
        for _ in range(4):
            policy.update(2, 2, 2)
        policy.reset()  # a new generation
    assert forget.tried == [0, 0] and keep.tried == [2, 2] and keep.passed == [2, 2]
    with pytest.raises(ValueError, match=r"remember must be a finite number in \[0(\.0)?, 1(\.0)?\]"):
        DoNoHarm({2: (1.2, 0.1, 2)}, remember=1.5)


def test_do_no_harm_starts_from_a_prior_per_depth_and_learns_away_from_it():
    """A calibration's acceptance per depth as the prior (draftcost.no_harm_policy): the first round's
    choice follows it, and the online counts move the estimate away from it."""
    from specdec.measure.draftcost import no_harm_policy

    cal = {"budgets": {"1": [1.1, 0.3, 1], "4": [1.3, 0.3, 4]}, "prior_rates": [0.9, 0.8, 0.7, 0.6]}
    hopeful = no_harm_policy(cal, prior=4)
    assert hopeful.rates() == pytest.approx([0.9, 0.8, 0.7, 0.6]) and hopeful.next() == 4
    for _ in range(30):  # every round rejected at depth 1
        hopeful.update(4, 4, 0)
    assert hopeful.rates()[0] == pytest.approx(3.6 / 34) and hopeful.next() == 0
    low = DoNoHarm({4: (1.3, 0.3, 4)}, prior=4, prior_rate=np.full(4, 0.1), probe_every=0)  # any sequence
    assert low.next() == 0
    with pytest.raises(ValueError, match=r"prior_rate must hold one rate per depth 1\.\.4"):
        DoNoHarm({4: (1.3, 0.3, 4)}, prior_rate=[0.5, 0.5])
    with pytest.raises(ValueError, match=r"prior_rate\[1\] must be a finite number in \[0"):
        DoNoHarm({2: (1.3, 0.3, 2)}, prior_rate=[0.5, 1.5])


def test_do_no_harm_takes_the_prior_of_the_nearest_calibrated_temperature():
    from specdec.measure.draftcost import _rates, no_harm_policy

    cal = {"budgets": {"2": [1.2, 0.1, 2]}, "prior_rates": {"0": [0.9, 0.8], "1": [0.1, 0.1]}}
    policy = no_harm_policy(cal, prior=4, probe_every=0)
    policy.begin(0.0)
    assert policy.rates() == pytest.approx([0.9, 0.8]) and policy.next() == 2
    policy.begin(0.8)  # nearer 1 than 0
    assert policy.rates() == pytest.approx([0.1, 0.1]) and policy.next() == 0
    policy.begin(0.5)  # a tie: the lower temperature's
    assert policy.rates() == pytest.approx([0.9, 0.8])
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        policy.begin(-1.0)
    # a depth a temperature never examined: pooled over temperatures, else the depth above's
    counts = {"0": [[10, 5], [5, 4]], "1": [[10, 1]]}
    assert _rates(counts, 3) == {"0": [0.5, 0.8, 0.8], "1": [0.1, 0.8, 0.8]}


def test_do_no_harm_bounds_what_probes_cost_with_explore():
    """A probe predicted to lose L plain steps waits at least L / explore plain rounds."""

    def probes(policy: DoNoHarm) -> list[int]:
        out = []
        for i in range(200):
            b = policy.next()
            if b:
                out.append(i)
            policy.update(b, b, 0)
        return out

    loss = (1.5 + 0.2) - (1 + 0.1 + 0.01)  # v + c - E[tokens] at the smallest budget: 0.59 plain steps
    bounded = probes(DoNoHarm({2: (1.5, 0.2, 2)}, prior=4, prior_rate=0.1, probe_every=4, explore=0.01))
    assert bounded[0] == int(np.ceil(loss / 0.01)) - 1  # the first probe after ceil(0.59 / 0.01) = 59 rounds
    assert probes(DoNoHarm({2: (1.5, 0.2, 2)}, prior=4, prior_rate=0.1, probe_every=4))[0] == 3
    with pytest.raises(ValueError, match=r"explore must be a finite number in \[0"):
        DoNoHarm({2: (1.2, 0.1, 2)}, explore=2.0)


def test_a_probe_pays_for_the_positions_the_drafter_must_catch_up_on():
    """Each position the drafter has not been told costs ``catch_up`` at the next probe: a catch-up of
    ``explore`` or more per position is never covered, so such a drafter is never probed; a cheaper one
    is probed later than a drafter that costs nothing to catch up, the prompt's positions counted."""

    def first_probe(catch_up: float, prompt: int) -> int | None:
        policy = DoNoHarm({2: (1.5, 0.2, 2)}, prior=4, prior_rate=0.1, probe_every=4, explore=0.01,
                          catch_up=catch_up)  # fmt: skip
        policy.begin(1.0, prompt)
        for i in range(400):
            b = policy.next()
            if b:
                return i
            policy.update(0, 0, 0)
        return None

    loss = (1.5 + 0.2) - (1 + 0.1 + 0.01)
    assert first_probe(0.0, 100) == int(np.ceil(loss / 0.01)) - 1
    assert first_probe(0.01, 100) is None and first_probe(0.05, 0) is None
    # (n + 1) * 0.01 >= 0.59 + 0.005 * (99 + n): 0.005 n >= 1.075, n = 215
    assert first_probe(0.005, 100) == 215


def test_an_empty_probe_waits_again_and_the_loop_says_what_the_drafter_was_not_told(pair):
    """A probe whose drafter proposes nothing is still a probe: the wait starts again (doubled), it does
    not probe every round after it. The loop tells ``begin`` how many prompt positions the drafter was
    not told at the prefill (a conditioned drafter under a policy: all but the first; otherwise none)."""
    policy = DoNoHarm({2: (1.2, 0.9, 2)}, probe_every=4, max_probe_every=32)  # R(2) = 1.75 / 2.1
    probes = []
    for i in range(60):
        b = policy.next()
        if b:
            probes.append(i)
        policy.update(0, 0, 0)  # every probe proposes nothing
    assert probes[:3] == [3, 11, 27]  # waits of 4, 8, 16 plain rounds

    target, draft = pair
    seen = []

    class Told(BudgetPolicy):  # a policy other than a fixed budget, that records what begin is told
        max_budget = 2

        def begin(self, temperature, prompt_tokens=0):
            seen.append(prompt_tokens)

        def next(self):
            return 0

    prompt = [3, 4, 5, 6, 7, 8]
    speculative_tree(target, draft, prompt, budget=Told(), max_new_tokens=3)
    conditioned = build_drafter("lookup-tree")
    conditioned.conditioned = True
    conditioned.extend = lambda features, ids: None
    speculative_tree(target, conditioned, prompt, budget=Told(), max_new_tokens=3)
    assert seen == [1, len(prompt)]


def test_do_no_harm_predicts_from_the_measured_tokens_per_round():
    """With measured tokens per round, E[tokens | b] starts there (empty proposals included) and moves in
    proportion to the online acceptance."""
    policy = DoNoHarm({4: (1.2, 0.1, 4)}, prior=4, prior_rate=0.5, tokens={0.0: {4: 1.3}, 1.0: {4: 1.1}})
    policy.begin(0.0)
    assert policy.predicted()[4] == pytest.approx(1.3 / 1.3)  # not (1 + 0.9375) / 1.3
    policy.begin(1.0)
    assert policy.predicted()[4] == pytest.approx(1.1 / 1.3)
    for _ in range(8):  # every drafted node accepted: the acceptance's gain rises, and E with it
        policy.update(4, 4, 4)
    rates = policy.rates()
    g = sum(np.prod(rates[: d + 1]) for d in range(4))
    assert policy.predicted()[4] == pytest.approx((1 + 0.1 * g / 0.9375) / 1.3)
    with pytest.raises(ValueError, match=r"tokens\[0\.0\] must give every budget \[4\]"):
        DoNoHarm({4: (1.2, 0.1, 4)}, tokens={0.0: {2: 1.3}})
    with pytest.raises(ValueError, match="catch_up must be a finite number"):
        DoNoHarm({4: (1.2, 0.1, 4)}, catch_up=-1.0)


def test_do_no_harm_learns_how_often_the_drafter_proposes():
    """Rounds whose drafter comes back empty (prompt lookup without a match) bring one token and cost a
    plain call and the draft call: the share s of rounds that proposed is learnt (pooled, shrunk towards
    the calibrated share) and both sides of R(b) move with it, so the policy stops asking a drafter that
    keeps proposing nothing (a policy blind to empty rounds would ask it for ever)."""
    verify = [1.0, 1.3, 1.5, 1.7, 1.9]
    policy = DoNoHarm({4: (1.9, 0.07, 4)}, prior=4, prior_rate=0.6, proposes={0.0: 0.9}, probe_every=0,
                      verify=verify)  # fmt: skip
    policy.begin(0.0)
    g = 0.6 + 0.6**2 + 0.6**3 + 0.6**4
    asked = 0
    while policy.next():
        policy.update(0, 0, 0)  # asked, proposed nothing
        asked += 1
        s = 4 * 0.9 / (asked + 4)
        assert policy.predicted()[4] == pytest.approx((1 + s * g) / (1 - s + s * 1.9 + 0.07))
        assert asked < 40
    assert asked >= 3 and all(policy.next() == 0 for _ in range(50))
    with pytest.raises(
        ValueError, match=r"proposes\[0\.0\] must be a finite number in \[0\.0, 1\.0\]; got 1\.5"
    ):
        DoNoHarm({4: (1.9, 0.07, 4)}, proposes={0.0: 1.5})


def test_measured_tokens_per_round_are_read_over_the_calibrated_share_that_proposed():
    """Calibrated tokens per round count every round, the empty ones too: with a calibrated share s of
    proposing rounds, a proposing round brings (tokens - 1) / s drafts and a round 1 + s of that, at a
    cost of (1 - s) + s v + c (here exactly 1: the margin keeps it plain). Without a calibrated share
    (an earlier calibration's format) the measured tokens already hold the empty rounds, so the share is
    not learnt again from empty rounds."""
    policy = DoNoHarm(
        {4: (1.8, 0.1, 4)}, prior=4, prior_rate=0.5, tokens={0.0: {4: 1.5}}, proposes={0.0: 0.5}
    )
    policy.begin(0.0)
    assert policy.predicted()[4] == pytest.approx(1.5 / (0.5 + 0.5 * 1.8 + 0.1))
    old = DoNoHarm({4: (1.3, 0.1, 4)}, prior=4, prior_rate=0.5, tokens={0.0: {4: 1.5}}, probe_every=0)
    old.begin(0.0)
    before = old.predicted()[4]
    for _ in range(10):
        assert old.next() == 4
        old.update(0, 0, 0)  # asked, proposed nothing
    assert old.predicted()[4] == pytest.approx(before)


def test_do_no_harm_prices_a_round_by_the_nodes_its_drafter_proposed():
    """With the verify curve, a round is priced at v(n + 1) for the n nodes proposed (the mean over the
    rounds at b that proposed, shrunk towards the calibrated v): a drafter that proposes 2 of its 4 nodes
    on a curve that is steep past 3 rows keeps paying, where pricing at the budget's v(5) says it does
    not (and without the curve the calibrated v stays)."""
    verify = [1.0, 1.2, 1.4, 3.0, 3.0]
    rates = [0.9, 0.9, 0.0, 0.0]  # a drafter whose drafts stop at depth 2
    priced, fixed = (DoNoHarm({4: (3.0, 0.05, 4)}, prior=4, prior_rate=rates, probe_every=1, verify=curve)
                     for curve in (verify, None))  # fmt: skip
    for policy in (priced, fixed):
        policy.begin(0.0)
        for _ in range(20):
            policy.next()
            policy.update(2, 2, 2)  # a probe (every round): two nodes proposed, both accepted
    n = priced.filled[4][0]  # the probes (the first round only waits)
    assert n >= 15
    v = (n * 1.4 + 4 * 3.0) / (n + 4)
    assert priced.priced()[4][1] == pytest.approx(v + 0.05)
    assert fixed.priced()[4][1] == pytest.approx(3.0 + 0.05)
    assert priced.predicted()[4] > 1.02 > fixed.predicted()[4]  # the margin: speculate, and not
    with pytest.raises(ValueError, match=r"verify must give v\(k\) for k = 1 \.\. 5"):
        DoNoHarm({4: (3.0, 0.05, 4)}, verify=verify[:4])
    with pytest.raises(ValueError, match=r"v\(2\) must be"):
        DoNoHarm({4: (3.0, 0.05, 4)}, verify=[1.0, 0.0, 1.4, 3.0, 3.0])
    priced.next()
    with pytest.raises(ValueError, match=r"nodes must be at most the budget asked \(4\); got 5"):
        priced.update(5, 5, 0)


def test_a_one_node_rounds_miss_is_read_against_a_one_node_rounds_rate():
    """budget_rates: a tree of eight has several guesses at depth 1 (calibrated 0.8), a one-node round one
    (0.4). Five one-node rounds that pass at exactly their own rate leave the tree's depth-1 estimate at
    its calibrated 0.8; read as if every round were the tree's (no budget_rates: the broken reading)
    they pull it down to (2 + 4 x 0.8) / 9. Rounds of eight at 0.8 leave the one-node rate at 0.4."""
    costs = {1: (1.05, 0.0, 1), 8: (3.0, 0.5, 3)}
    shaped = DoNoHarm(
        costs, prior=4, prior_rate=[0.8, 0.6, 0.5], budget_rates={1: [0.4, 0.6, 0.5], 8: [0.8, 0.6, 0.5]}
    )
    pooled = DoNoHarm(costs, prior=4, prior_rate=[0.8, 0.6, 0.5])
    for policy in (shaped, pooled):
        for accepted in (1, 0, 1, 0, 0):  # two of five pass at depth 1
            assert policy.next() == 1
            policy.update(1, 1, accepted)
    assert shaped.rates(8)[0] == pytest.approx(0.8) and shaped.rates(1)[0] == pytest.approx(0.4)
    assert pooled.rates(8)[0] == pytest.approx((2 + 4 * 0.8) / 9) == pooled.rates()[0] == pooled.rates(1)[0]
    assert shaped.rates()[0] == pytest.approx((2 + 4 * 0.8) / 9)  # the pooled counts themselves
    eight = DoNoHarm(
        {1: (1.05, 0.0, 1), 8: (1.05, 0.0, 3)},
        prior=4,
        prior_rate=[0.8, 0.6, 0.5],
        budget_rates={1: [0.4, 0.6, 0.5]},
    )  # fmt: skip  (8: prior_rate's)
    for accepted in (1, 1, 1, 1, 0):  # four of five pass at depth 1, as the tree's rate says
        assert eight.next() == 8
        eight.update(8, 3, accepted)
    assert eight.rates(1)[0] == pytest.approx(0.4) and eight.rates(8)[0] == pytest.approx(0.8)
    # per temperature, the nearest calibrated one's
    hot = DoNoHarm(
        costs, prior_rate=[0.8, 0.6, 0.5], budget_rates={1: {0.0: [0.4, 0.6, 0.5], 1.0: [0.1, 0.1, 0.1]}}
    )
    hot.begin(0.9)
    assert hot.budget_prior(1) == [0.1, 0.1, 0.1] and hot.budget_prior(8) == [0.8, 0.6, 0.5]
    with pytest.raises(ValueError, match=r"budget_rates names budget 4; the budgets are \[1, 8\]"):
        DoNoHarm(costs, budget_rates={4: 0.5})
    with pytest.raises(ValueError, match=r"budget_rates\[1\] must hold one rate per depth 1\.\.3"):
        DoNoHarm(costs, budget_rates={1: [0.4]})


def test_the_choice_after_one_node_rounds_reads_them_against_their_own_rate():
    """Ten one-node rounds that pass about as often as a one-node round's calibrated rate (0.3): read
    against that rate (budget_rates, given for both budgets or for budget 1 only, 8 then at prior_rate),
    the tree of eight still pays and is chosen; pooled as if they were the tree's (the broken reading,
    no budget_rates) it no longer pays and the policy steps plainly. After a new generation
    (remember 0) every budget is back at its calibrated rate."""

    def after_ten(budget_rates):
        policy = DoNoHarm({1: (1.3, 0.05, 1), 8: (1.8, 0.05, 3)}, prior=4, prior_rate=[0.6, 0.7, 0.7],
                          budget_rates=budget_rates, probe_every=0)  # fmt: skip
        for accepted in (0, 0, 1, 0, 0, 0, 1, 0, 0, 0):
            policy._asked = 1  # a one-node round (as next() gives at a probe)
            policy.update(1, 1, accepted)
        return policy

    for given in ({1: [0.3, 0.7, 0.7], 8: [0.6, 0.7, 0.7]}, {1: [0.3, 0.7, 0.7]}):
        shaped = after_ten(given)
        assert shaped.predicted()[8] == pytest.approx(1.119, abs=1e-3) and shaped.next() == 8
        shaped.begin(0.0)
        assert all(shaped.rates(b) == pytest.approx(shaped.budget_prior(b)) for b in (1, 8))
    pooled = after_ten(None)
    assert pooled.predicted()[8] == pytest.approx(0.913, abs=1e-3) and pooled.next() == 0


def test_policies_refuse_bad_arguments():
    with pytest.raises(ValueError, match="budget must be an integer >= 0"):
        FixedBudget(-1)
    with pytest.raises(ValueError, match="budgets must map"):
        DoNoHarm({})
    with pytest.raises(ValueError, match=r"budgets\[2\]'s depth must be an integer in \[1, 2\]"):
        DoNoHarm({2: (1.2, 0.1, 3)})
    with pytest.raises(ValueError, match="v\\(b \\+ 1\\)"):
        DoNoHarm({2: (0.0, 0.1, 2)})
    with pytest.raises(ValueError, match="accepted must be an integer in \\[0, 1\\]"):
        DoNoHarm({2: (1.2, 0.1, 2)}).update(2, 1, 2)


class Wild(BudgetPolicy):
    max_budget = 3

    def next(self) -> int:
        return 4


@pytest.fixture(scope="module")
def pair():
    one = tiny_llama(0, layers=1)
    target = LeanLlama(one, "float32")
    draft = ModelTreeDrafter(ModelDrafter(LeanLlama(perturbed_copy(one, 0.3, 7), "float32")), branch=2)
    return target, draft


def test_greedy_output_equals_plain_under_every_policy(pair):
    target, draft = pair
    prompt = np.random.default_rng(3).integers(0, VOCAB, 12).tolist()
    plain = autoregressive(target, prompt, max_new_tokens=30).tokens
    for policy in (
        FixedBudget(0),
        FixedBudget(5),
        Alternate(),
        DoNoHarm({2: (1.1, 0.1, 2), 6: (1.4, 0.3, 3)}),
    ):
        gen = speculative_tree(target, draft, prompt, budget=policy, max_new_tokens=30)
        assert gen.tokens == plain, policy.describe()
    with pytest.raises(ValueError, match="asked for a budget of 4; it must give 0..3"):
        speculative_tree(target, draft, prompt, budget=Wild(), max_new_tokens=5)


def test_a_conditioned_drafter_is_told_the_plain_rounds_in_one_call(pair):
    """A conditioned drafter hears of a plain round's positions only when a later round drafts: one
    ``extend`` just before that round's proposal; a plain round calls no drafter at all."""
    target, _ = pair
    events = []
    lookup = build_drafter("lookup-tree")

    class Recorder:
        conditioned = True

        def start(self, prompt_ids):
            lookup.start(prompt_ids)

        def extend(self, features, next_ids):
            assert features.shape[0] == len(next_ids)
            events.append(("extend", len(next_ids)))

        def propose_tree(self, prefix_ids, budget, warp_fn, rng):
            events.append(("propose", budget))
            return lookup.propose_tree(prefix_ids, budget, warp_fn, rng)

    prompt = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]
    plain = autoregressive(target, prompt, max_new_tokens=16).tokens
    gen = speculative_tree(target, Recorder(), prompt, budget=Alternate(), max_new_tokens=16)
    assert gen.tokens == plain
    assert events[0] == ("extend", len(prompt) - 1)  # the prefill's pairs
    later = events[1:]
    for i, (what, _) in enumerate(later):
        if what == "extend":
            assert later[i + 1][0] == "propose" and later[i + 1][1] > 0
    assert ("propose", 0) not in events  # a plain round (budget 0) asks the drafter nothing
    accepted = gen.stats.accepted
    plain_rounds = sum(1 for i in range(1, len(accepted)) if accepted[i - 1] > 0)  # Alternate's zeros
    assert plain_rounds and sum(1 for e in events if e[0] == "propose") <= len(accepted) - plain_rounds
    # every committed position but those after the last drafting round is told, in as many calls as
    # rounds drafted: a plain round's positions ride with the next drafting round's
    told = sum(n for what, n in later if what == "extend")
    assert told < gen.stats.new_tokens and len([e for e in later if e[0] == "extend"]) < len(accepted)
    assert max(n for what, n in later if what == "extend") >= 2


def _two_token_law(model: LeanLlama, prefix: list[int]) -> np.ndarray:
    p1 = warp(open_lm(model).forward(prefix, keep=1), temperature=1.0)[0].double()
    rows = torch.stack([open_lm(model).forward([*prefix, x], keep=1)[0] for x in range(VOCAB)])
    law = (p1[:, None] * warp(rows, temperature=1.0).double()).numpy()
    return law / law.sum()


def _counts(target, drafter, policy_factory, n: int = 1200) -> np.ndarray:
    counts = np.zeros((VOCAB, VOCAB))
    for seed in range(n):
        gen = speculative_tree(
            target, drafter, [36], budget=policy_factory(), max_new_tokens=3, temperature=1.0, seed=seed
        )
        counts[gen.tokens[0], gen.tokens[1]] += 1
    return counts


def test_sampling_under_a_policy_has_the_target_law_and_undoing_a_rejection_breaks_it(pair, monkeypatch):
    target, draft = pair
    law = _two_token_law(target, [36])
    assert chi_square_pvalue(_counts(target, draft, Alternate), law)["pvalue"] > 1e-3
    # broken: a round whose drafts were all rejected is undone and replaced by a plain step (a fresh
    # draw from p), as a policy that "never lets speculation cost a token" might be written; the draft's
    # tokens then win twice and the law is no longer p
    original = treeverify.verify_tree

    def undo_rejections(p, q, tree, rng, lenience=1.0, draw=sample):
        path, token = original(p, q, tree, rng, lenience, draw)
        if len(tree) and not path:
            token = sample(p[0], rng)
        return path, token

    monkeypatch.setattr(decoding, "verify_tree", undo_rejections)  # the name the loop calls
    assert chi_square_pvalue(_counts(target, draft, Alternate), law)["pvalue"] < 1e-3


def test_a_plain_round_is_autoregressives_step(pair, monkeypatch):
    """A round that verifies no node (the policy's budget 0, or a drafter that proposed nothing) runs
    the plain decoder's own step (``_plain_step``: one call, one draw), at every temperature: the same
    tokens as plain decoding from the same seed, and one such step per round."""
    target, draft = pair
    steps = []
    real = decoding._plain_step

    def counted(*args, **kwargs):
        steps.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(decoding, "_plain_step", counted)
    prompt = np.random.default_rng(4).integers(0, VOCAB, 9).tolist()
    never = DoNoHarm({4: (40.0, 40.0, 3)}, probe_every=0)  # predicted never to pay, never probed

    class Empty:  # asked every round, proposes nothing: its rounds verify no node either
        def __init__(self):
            self.asked = 0

        def start(self, prompt_ids):
            pass

        def propose_tree(self, prefix_ids, budget, warp_fn, rng):
            self.asked += 1
            return TreeProposal(DraftTree((), ()), None, 1)

    for temperature in (0.0, 1.0):
        plain = autoregressive(target, prompt, max_new_tokens=20, temperature=temperature, seed=5)
        assert len(steps) == plain.stats.rounds == 20
        for drafter, policy in ((draft, FixedBudget(0)), (draft, never), (Empty(), FixedBudget(4))):
            steps.clear()
            gen = speculative_tree(
                target, drafter, prompt, budget=policy, max_new_tokens=20, temperature=temperature, seed=5
            )
            assert gen.tokens == plain.tokens, (temperature, policy.describe())
            assert len(steps) == gen.stats.rounds == 20 and gen.stats.drafted == [0] * 20
        assert drafter.asked == 19 and gen.stats.draft_calls == 19  # every round but the last (no room)
        steps.clear()


def _choices(policy, outcomes, run_ahead):
    """The budgets a policy gives over rounds whose outcomes come from ``outcomes`` (nodes, depth,
    accepted for a round that drafts), asked every round or, with ``run_ahead``, once per run of plain
    rounds it commits to (as the loop asks it)."""
    out, i, ended = [], 0, False
    while len(out) < 400:
        b = policy.next()
        assert not (ended and b == 0), "a committed run of plain rounds ended before the policy's last one"
        if b == 0:
            run = policy.plain_rounds(400 - len(out)) if run_ahead else 1
            ended = run_ahead and run < 400 - len(out)  # the run's end is the policy's, not the test's cap
            out += [0] * run
            if run_ahead:
                policy.update_plain(run)
            else:
                policy.update(0, 0, 0)
        else:
            ended = False
            nodes, depth, accepted = outcomes[i % len(outcomes)]
            i += 1
            out.append(b)
            policy.update(min(nodes, b), min(depth, b, nodes), min(accepted, depth, b, nodes))
    return out


EXPLORE = [(0.0, 0.0), (0.05, 0.001), (0.05, 0.03), (0.1, 0.08), (0.01, 0.02), (0.2, 0.0)]


@pytest.mark.parametrize("explore, catch_up", EXPLORE)
def test_a_run_of_plain_rounds_is_the_rounds_the_policy_would_give_one_by_one(explore, catch_up):
    """DoNoHarm.plain_rounds commits to exactly the plain rounds that asking next() round by round gives
    (probes at the same rounds, the same budgets after them), for drafters that pay, that never pay and
    that pay now and then, with and without the explore bound; update_plain refuses a probe's round."""
    rng = np.random.default_rng(0)
    cheap = {2: (1.15, 0.1, 2), 4: (1.3, 0.15, 3)}
    dear = {2: (3.0, 1.0, 2)}  # a probe loses plain steps: the explore bound sets the wait
    for costs in (cheap, dear):
        for rates in ((0.9, 0.9), (0.05, 0.0), (0.5, 0.2)):
            outcomes = [
                (4, 3, int(rng.random() < rates[0]) + int(rng.random() < rates[1])) for _ in range(50)
            ]
            kw = {"prior_rate": 0.3, "probe_every": 4, "explore": explore, "catch_up": catch_up}
            one, run = DoNoHarm(costs, **kw), DoNoHarm(costs, **kw)
            one.begin(0.0, 30), run.begin(0.0, 30)
            assert _choices(one, outcomes, False) == _choices(run, outcomes, True)
            assert (one.plain_run, one.untold, one.wait) == (run.plain_run, run.untold, run.wait)
    probing = DoNoHarm({4: (100.0, 0.0, 4)}, probe_every=1)
    assert probing.next() == 4 and probing.plain_rounds(9) == 1  # a probe: no run
    with pytest.raises(ValueError, match="not a probe or a draft"):
        probing.update_plain(2)
    assert FixedBudget(0).plain_rounds(50) == 50 and FixedBudget(3).plain_rounds(50) == 1
    for policy in (FixedBudget(0), DoNoHarm({2: (1.1, 0.0, 2)})):
        with pytest.raises(ValueError, match="most"):
            policy.plain_rounds(0)


def test_a_run_of_plain_rounds_tests_each_round_as_next_does_where_the_two_sides_tie():
    """explore equal to catch_up: the probe's test compares two sums whose real difference never changes,
    yet in floating point it can flip a few rounds on; the run tests each round with next()'s own
    expression, so it ends where asking round by round probes."""
    outcomes = [(1, 1, 0)]
    for prompt in range(2, 40):
        one, run = (DoNoHarm({1: (1.0, 0.0, 1)}, prior_rate=0.5, margin=5, probe_every=1, explore=0.1,
                             catch_up=0.1) for _ in "ab")  # fmt: skip
        one.begin(0.0, prompt), run.begin(0.0, prompt)
        assert _choices(one, outcomes, False) == _choices(run, outcomes, True), prompt


def test_the_loop_takes_a_committed_run_without_asking_again(pair):
    """Under a policy that commits to runs of plain rounds, the loop asks it once per run, and decodes
    the same tokens with the same rounds as when it asks every round (its plain_rounds left at 1)."""
    target, draft = pair
    prompt = np.random.default_rng(6).integers(0, VOCAB, 9).tolist()

    class Counted(DoNoHarm):
        one_by_one = False

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.asked = 0

        def next(self):
            self.asked += 1
            return super().next()

        def plain_rounds(self, most):
            return 1 if self.one_by_one else super().plain_rounds(most)

    def state(policy):
        return (policy.plain_run, policy.untold, policy.wait, policy.probing, policy._asked, policy.tried,
                policy.passed)  # fmt: skip

    for temperature in (0.0, 1.0):
        for explore, catch_up in ((0.0, 0.0), (0.05, 0.01)):
            runs = {}
            for one_by_one in (False, True):
                policy = Counted({2: (1.1, 0.05, 2)}, prior_rate=0.02, probe_every=6, explore=explore,
                                 catch_up=catch_up)  # fmt: skip
                policy.one_by_one = one_by_one
                gen = speculative_tree(target, draft, prompt, budget=policy, max_new_tokens=40,
                                       temperature=temperature, seed=3)  # fmt: skip
                counts = {k: v for k, v in gen.stats.summary().items() if not k.endswith("_s")}
                runs[one_by_one] = (gen.tokens, counts, state(policy), policy.asked)
            assert runs[False][:3] == runs[True][:3]
            assert runs[False][3] < runs[True][3]


def test_an_eos_inside_a_run_of_plain_rounds_ends_the_generation_as_plain_decoding_does(pair):
    """A run of plain rounds stops at the EOS: the tokens and rounds of plain decoding with that EOS, under
    an endless run (a fixed budget of 0) and a policy that never drafts."""
    target, draft = pair
    prompt = np.random.default_rng(8).integers(0, VOCAB, 9).tolist()
    free = autoregressive(target, prompt, max_new_tokens=30, seed=2)
    eos = free.tokens[12]  # reached at the 13th token (or earlier, where it came before)
    plain = autoregressive(target, prompt, max_new_tokens=30, seed=2, eos_token_id=eos)
    assert len(plain.tokens) < 30
    for policy in (FixedBudget(0), DoNoHarm({4: (40.0, 40.0, 3)}, probe_every=0)):
        gen = speculative_tree(
            target, draft, prompt, budget=policy, max_new_tokens=30, seed=2, eos_token_id=eos
        )
        assert gen.tokens == plain.tokens and gen.stats.rounds == plain.stats.rounds, policy.describe()
