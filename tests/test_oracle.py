"""specdec.analysis.oracle (Section 3.5's oracle replayed on real drafts) and theory.oracle_speedup."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.analysis.oracle import iid_fixed_best, replay, verify_cost_at
from specdec.experiments.oraclegamma import draft_runs
from specdec.theory.speedup import oracle_speedup, speedup_ceiling, walltime_speedup

FLAT = {16: 1.0}  # verifying up to 16 positions costs one step: Theorem 3.8's assumption


def iid_runs(alpha: float, n: int, max_gamma: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Runs of i.i.d. agreements: position t agrees with probability alpha."""
    agree = np.random.default_rng(seed).random(n + max_gamma) < alpha
    runs = []
    for s in range(n):
        r = 0
        while r < max_gamma and agree[s + r]:
            r += 1
        runs.append(r)
    return runs, [max_gamma] * n


def test_oracle_speedup_closed_form():
    assert oracle_speedup(0.8, 0.0) == pytest.approx(float(speedup_ceiling(0.8)))
    assert oracle_speedup(0.8, 0.05) == pytest.approx(1 / (1 - 0.8 + 0.8 * 0.05))
    assert oracle_speedup(0.0, 0.3) == 1.0  # nothing is ever accepted: plain decoding
    with pytest.raises(ValueError, match="alpha"):
        oracle_speedup(1.2, 0.0)
    with pytest.raises(ValueError, match="c must be"):
        oracle_speedup(0.5, -0.1)


@pytest.mark.parametrize(("alpha", "c"), [(0.6, 0.0), (0.8, 0.05), (0.9, 0.2)])
def test_replay_on_iid_agreements_matches_theorem_3_8_and_the_oracle(alpha, c):
    runs, lengths = iid_runs(alpha, 200_000, 60)
    for gamma in (1, 3, 7):
        got = replay(runs, lengths, gamma, c, FLAT | {61: 1.0})["speedup"]
        assert got == pytest.approx(float(walltime_speedup(alpha, gamma, c)), rel=0.01)
    got = replay(runs, lengths, "oracle", c, FLAT | {61: 1.0})["speedup"]
    assert got == pytest.approx(float(oracle_speedup(alpha, c)), rel=0.01)


def test_replay_by_hand():
    runs, lengths = [2, 0, 0, 1, 0], [3, 3, 3, 3, 3]
    fixed = replay(runs, lengths, 1, 0.1, FLAT)
    assert (fixed["tokens"], fixed["rounds"], fixed["drafted"]) == (5, 3, 3)
    assert fixed["cost"] == pytest.approx(3 * 1.1)
    oracle = replay(runs, lengths, "oracle", 0.1, FLAT)
    assert (oracle["tokens"], oracle["rounds"], oracle["drafted"]) == (5, 2, 3)
    assert oracle["cost"] == pytest.approx(1.2 + 1.1)
    # a drafter that proposes nothing costs a plain step per token, whatever gamma
    none = replay([0, 0, 0], [0, 0, 0], 4, 0.5, FLAT)
    assert none["speedup"] == 1.0 and none["drafted"] == 0


def test_replay_charges_the_verify_curve():
    curve = {2: 1.5, 4: 2.0}
    assert verify_cost_at(curve, 3) == pytest.approx(1.75)  # linear between measured points
    assert verify_cost_at(curve, 1) == 1.0
    out = replay([3, 0, 0, 0], [3, 3, 3, 3], "oracle", 0.0, curve)
    assert out["cost"] == pytest.approx(2.0)  # one round: 3 drafts, a verify over 4 positions
    with pytest.raises(ValueError, match="k must lie within"):
        verify_cost_at(curve, 5)


def test_replay_rejects_bad_input():
    with pytest.raises(ValueError, match="equal length"):
        replay([1], [1, 1], 1, 0.0, FLAT)
    with pytest.raises(ValueError, match="run must lie"):
        replay([2], [1], 1, 0.0, FLAT)
    with pytest.raises(ValueError, match="fixed gamma, 'oracle' or a DraftPolicy"):
        replay([1], [1], 0, 0.0, FLAT)
    with pytest.raises(ValueError, match="fixed gamma, 'oracle' or a DraftPolicy"):
        replay([1], [1], "best", 0.0, FLAT)
    with pytest.raises(ValueError, match="c must be"):
        replay([1], [1], 1, -1.0, FLAT)


def test_iid_fixed_best_is_the_optimal_gamma_on_a_flat_curve():
    gamma, speedup = iid_fixed_best(0.8, 0.05, FLAT, 15)
    grid = [float(walltime_speedup(0.8, g, 0.05)) for g in range(1, 16)]
    assert speedup == pytest.approx(max(grid)) and gamma == 1 + int(np.argmax(grid))


def test_draft_runs_with_prompt_lookup():
    from specdec.engine.drafters import PromptLookupDrafter

    prompt = [1, 2, 3, 4, 9, 1, 2]
    tokens = [3, 4, 5, 6]  # the prompt's "1 2 3 4" continues as "3 4", then departs
    runs, lengths = draft_runs(PromptLookupDrafter(), prompt, tokens, max_gamma=3)
    assert runs[0] == 2 and lengths[0] == 3  # proposes 3 4 9: two match
    assert all(0 <= r <= n <= 3 for r, n in zip(runs, lengths, strict=True))
    with pytest.raises(ValueError, match="max_gamma"):
        draft_runs(PromptLookupDrafter(), prompt, tokens, max_gamma=0)
    with pytest.raises(ValueError, match="tokens"):
        draft_runs(PromptLookupDrafter(), prompt, [], max_gamma=2)


def test_draft_runs_of_the_target_itself_accepts_everything():
    from tiny_models import tiny_llama

    from specdec.engine.decoding import autoregressive
    from specdec.engine.drafters import ModelDrafter

    target = tiny_llama(0)
    prompt = [5, 17, 42]
    tokens = autoregressive(target, prompt, max_new_tokens=12).tokens
    runs, lengths = draft_runs(ModelDrafter(target), prompt, tokens, max_gamma=4)
    assert lengths == [4] * len(tokens)
    assert runs == [min(4, len(tokens) - s) for s in range(len(tokens))]


def test_replay_record_per_prompt_and_errors():
    from specdec.analysis.oracle import replay_record

    rows = [
        {"prompt": "a", "drafters": {"d": {"runs": [2, 0, 0, 1, 0], "lengths": [3] * 5}}},
        {"prompt": "b", "drafters": {"d": {"runs": [0, 0, 0], "lengths": [0] * 3}}},
    ]
    got = replay_record(rows, "d", 0.1, FLAT, [1, "oracle"])
    assert got[1] == pytest.approx([5 / 3.3, 1.0])
    assert got["oracle"] == pytest.approx([5 / 2.3, 1.0])
    with pytest.raises(ValueError, match="missing"):
        replay_record(rows, "lookup", 0.1, FLAT, [1])
    with pytest.raises(ValueError, match="at least one prompt"):
        replay_record([], "d", 0.1, FLAT, [1])


def test_summarize_record_picks_the_best_fixed_gamma_and_bounds_it():
    from specdec.analysis.oracle import summarize_record

    runs, lengths = iid_runs(0.7, 400, 8, seed=1)
    rows = [
        {
            "prompt": f"p{i}",
            "drafters": {"d": {"runs": runs[i * 100 : (i + 1) * 100], "lengths": lengths[:100]}},
        }
        for i in range(4)
    ]
    costs = {"d": {"c": 0.05, "samples": [0.04, 0.05, 0.06, 0.05] * 2}}  # two passes over 4 prompts
    record = {"curve": {"9": 1.0}, "settings": {"max_gamma": 8}, "costs": costs, "rows": rows}
    (out,) = summarize_record(record, n_boot=200)
    assert out["drafter"] == "d" and 1 <= out["best_gamma"] <= 8 and out["c"] == 0.05
    assert out["oracle"] >= out["best_fixed"] and out["gain"] >= 1.0  # hindsight never loses
    assert out["gain_low"] <= out["gain"] <= out["gain_high"]
    assert out["heuristic_low"] <= out["heuristic"] <= out["heuristic_high"]
    assert 0.5 < out["alpha"] < 0.9
    # on a flat curve the real (here: i.i.d.) runs and the i.i.d. formula agree closely
    assert out["flat_gain"] == pytest.approx(out["iid_flat_gain"], rel=0.05)
    with pytest.raises(ValueError, match="whole passes"):
        summarize_record(record | {"costs": {"d": {"c": 0.05, "samples": [0.05] * 5}}})


def test_iid_oracle_on_a_flat_curve_is_section_3_5s_formula():
    from specdec.analysis.oracle import iid_oracle_on_curve

    flat = dict.fromkeys(range(1, 202), 1.0)
    assert iid_oracle_on_curve(0.8, 0.05, flat, 200) == pytest.approx(
        float(oracle_speedup(0.8, 0.05)), rel=1e-9
    )
    # a verify premium lowers it
    assert iid_oracle_on_curve(0.8, 0.05, {2: 1.2, 17: 3.0}, 16) < iid_oracle_on_curve(0.8, 0.05, flat, 16)
    with pytest.raises(ValueError, match="alpha"):
        iid_oracle_on_curve(1.0, 0.0, flat, 4)


def test_replay_runs_a_draft_length_policy_and_stops_at_the_end():
    from specdec.theory.policies import HeuristicGamma

    runs, lengths = [3, 2, 1, 0, 0, 0, 0, 0, 0, 0], [9] * 10
    out = replay(runs, lengths, HeuristicGamma(start=2, max_gamma=8), 0.0, FLAT)
    # round 1: gamma 2, accepts 2 (full) -> gamma 4; round 2 from s = 3: accepts 0 -> gamma 3;
    # then one token per round (6 rounds) to the end
    assert (out["tokens"], out["rounds"]) == (10, 8)
    # the last round never drafts past the end: 9 tokens left minus one
    assert replay([9] + [0] * 9, [9] * 10, 15, 0.0, FLAT)["drafted"] == 9


def test_the_record_steps_on_tiny_models_replay_real_decoding(one_thread, monkeypatch):
    """``specdec run oracle-gamma``'s steps (record_runs, measure_costs) on tiny random Llamas: the
    replay at the calls' gamma gives the rounds real speculative decoding accepted."""
    pytest.importorskip("torch")
    from tiny_models import VOCAB, perturbed_copy, tiny_llama

    from specdec.engine.drafters import ModelDrafter, PromptLookupDrafter
    from specdec.experiments.oraclegamma import measure_costs, record_runs

    target, draft = tiny_llama(0, layers=2), perturbed_copy(tiny_llama(0, layers=2), 0.05, 5)
    makers = {"lookup": PromptLookupDrafter, "draft": lambda: ModelDrafter(draft, target=target)}
    rng = np.random.default_rng(0)
    prompts = [{"task": "code", "id": f"p{i}", "ids": rng.integers(3, VOCAB, 8).tolist()} for i in range(2)]
    rows = record_runs(target, makers, prompts, new_tokens=10, max_gamma=4, progress=False)
    assert [r["new_tokens"] for r in rows] == [10, 10]
    from specdec.measure import pairedrun

    blocks = []
    real_block = pairedrun.paired_block

    def spy(*args, **kwargs):  # every block the costs come from, to recompute c from its own pair
        block = real_block(*args, **kwargs)
        blocks.append(block)
        return block

    monkeypatch.setattr(pairedrun, "paired_block", spy)
    costs = measure_costs(target, makers, prompts, new_tokens=10, gamma=3, repeats=2, progress=False)
    assert len(blocks) == 2 * len(prompts) * len(makers)
    expected = {name: [] for name in makers}
    for block in blocks:  # one plain and one speculative call per block: c from that pair only
        (plain,) = [r for r in block if r["drafter"] == "plain"]
        (spec,) = [r for r in block if r["drafter"] != "plain"]
        step = plain["_stats"].target_s / plain["_stats"].target_calls
        expected[spec["drafter"]].append(spec["_stats"].draft_s / spec["_stats"].rounds / 3 / step)
    for name in makers:
        assert len(costs[name]["samples"]) == len(costs[name]["accepted"]) == 4
        assert costs[name]["samples"] == pytest.approx(expected[name], rel=1e-9)
        assert costs[name]["c"] == pytest.approx(float(np.median(expected[name])))
        for row, accepted in zip(rows, costs[name]["accepted"][:2], strict=True):
            d = row["drafters"][name]
            replayed = replay(d["runs"], d["lengths"], 3, 0.0, FLAT)
            assert (replayed["tokens"], replayed["rounds"]) == (10, len(accepted)), name
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        measure_costs(target, makers, prompts, new_tokens=10, gamma=3, repeats=0)
