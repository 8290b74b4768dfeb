"""specdec.measure.draftcost's pairing: c per round and per call in plain steps; how much faster a round's
drafting got by the book's one estimator (paired by prompt, median over repetitions); prompts without a
partner are left out, not guessed."""

from __future__ import annotations

import json
import math

import pytest

from specdec.measure.draftcost import compare


def row(config, prompt, rep, draft_s, rounds=10, calls=20, step=0.004):
    return {"config": config, "budget": 4, "prompt": prompt, "rep": rep, "plain_step_s": step,
            "draft_s": draft_s, "rounds": rounds, "draft_calls": calls, "target_s": 0.1}  # fmt: skip


def test_compare_pairs_by_prompt():
    before = [row("m", p, r, 0.02 * (1 + p)) for p in range(3) for r in range(2)]
    after = [row("m", p, r, 0.01 * (1 + p)) for p in range(3) for r in range(2)]
    after.append(row("m", 9, 0, 5.0))  # no partner: left out
    (out,) = compare(before, after)
    assert out["prompts"] == 3
    x, lo, hi = out["draft_speedup"]
    assert x == pytest.approx(2.0) and lo == pytest.approx(2.0) and hi == pytest.approx(2.0)
    assert out["before"]["c_round"] == pytest.approx(0.04 / 10 / 0.004)  # median prompt: 0.04 s / 10 rounds
    assert out["after"]["c_call"] == pytest.approx(0.02 / 20 / 0.004)
    assert out["after"]["calls_per_round"] == 2


def test_compare_keeps_one_spec_at_two_budgets_apart():
    """A spec measured at two budgets gives two entries, each of its own rows (they were pooled under the
    spec alone: one entry, both budgets' rounds in its medians)."""
    before = [row("m", p, 0, 0.02) | {"budget": b} for p in range(3) for b in (4, 8)]
    after = [row("m", p, 0, 0.01 if b == 4 else 0.04) | {"budget": b} for p in range(3) for b in (4, 8)]
    four, eight = compare(before, after)
    assert (four["budget"], eight["budget"]) == (4, 8)
    assert four["draft_speedup"][0] == pytest.approx(2.0) and eight["draft_speedup"][0] == pytest.approx(0.5)


def test_compare_takes_each_prompts_median_and_covers_a_varying_ratio():
    before = [row("m", p, r, 0.02 if r < 2 else 9.0) for p in range(8) for r in range(3)]  # one slow outlier
    after = [row("m", p, 0, 0.02 * (0.5 if p % 2 else 1.0)) for p in range(8)]
    (out,) = compare(before, after)
    x, lo, hi = out["draft_speedup"]
    assert x == pytest.approx(math.sqrt(2.0))
    assert 1.0 <= lo < x < hi <= 2.0


def test_calibrate_policy_stores_what_the_policy_is_built_from_and_the_plain_rounds_cost():
    """On a tiny model: every budget's (v, c, depth), the priors and tokens per round per temperature, the
    catch-up, and a budget-0 round of the tree loop in plain steps per temperature (a diagnostic: what the
    policy's R(0) = 1 assumes; positive and finite, no threshold on a time); no_harm_policy builds on it."""
    from tiny_models import perturbed_copy, tiny_llama

    from specdec.drafting.modeltree import ModelTreeDrafter
    from specdec.engine.drafters import ModelDrafter
    from specdec.engine.lean import LeanLlama
    from specdec.measure.draftcost import calibrate_policy, no_harm_policy

    one = tiny_llama(0, layers=1)
    target = LeanLlama(one, "float32")
    drafter = ModelTreeDrafter(ModelDrafter(LeanLlama(perturbed_copy(one, 0.3, 7), "float32")), branch=2)
    cal = calibrate_policy(target, drafter, [[3, 14, 15, 92, 65], [7, 8, 9]], (1, 2, 4), new_tokens=18)
    assert set(cal["budgets"]) == {"1", "2", "4"} and set(cal["plain_round"]) == {"0", "1"}
    assert cal["budgets"]["1"][2] == 1  # a one-node round is one deep
    # acceptance per depth from each budget's own rounds; the deepest budget's are the prior_rates
    depth = max(d for _, _, d in cal["budgets"].values())
    assert set(cal["budget_rates"]) == {"1", "2", "4"} and set(cal["budget_rates"]["1"]) == {"0", "1"}
    assert all(len(r) == depth for per_t in cal["budget_rates"].values() for r in per_t.values())
    for t in ("0", "1"):
        own = cal["per_temperature"][t]
        assert own["budget_counts"]["4"] == own["counts"] and set(own["budget_counts"]) == {"1", "2", "4"}
        assert len(own["budget_counts"]["1"]) <= 1  # one node: nothing examined below depth 1
    assert all(math.isfinite(v) and v > 0 for v in cal["plain_round"].values())
    assert set(cal["tokens_per_round"]) == {"0", "1"} and cal["catch_up"] >= 0
    assert len(cal["verify"]) == 5 and cal["verify"][0] == 1.0 and min(cal["verify"]) > 0
    assert cal["level"] >= 1 and cal["verify"] == [1 + cal["level"] * (x - 1) for x in cal["verify_bare"]]
    assert all(0 <= cal["proposes"][t] <= 1 for t in ("0", "1"))
    assert cal["verify_bare"] == cal["verify_timed"]  # priced by its own timing until a run pools curves
    hists = [h for t in ("0", "1") for h in cal["per_temperature"][t]["nodes"].values()]
    counted = sum(k for h in hists for k in h.values())
    assert counted > 0  # the proposing rounds by nodes proposed, per budget, that price_calibration reads
    policy = no_harm_policy(cal)
    policy.begin(1.0)
    assert all(policy.budget_prior(b) == cal["budget_rates"][str(b)]["1"] for b in (1, 2, 4))
    assert (
        policy.max_budget == 4
        and policy.verify == cal["verify"]
        and policy.shares == {0.0: cal["proposes"]["0"], 1.0: cal["proposes"]["1"]}
    )
    # a shadow probe's cost as the loop paid it (two per prompt at 18 tokens), the shadow policy's price
    per_t = [cal["per_temperature"][t]["shadow_c"] for t in ("0", "1")]
    assert all(math.isfinite(x) and x >= 0 for x in per_t) and cal["shadow_c"] == pytest.approx(
        sorted(per_t)[0] / 2 + sorted(per_t)[1] / 2
    )
    assert policy.probe_cost is None and no_harm_policy(cal, shadow=True).probe_cost == cal["shadow_c"]


def test_each_budgets_rates_are_shrunk_towards_all_its_budgets_rounds():
    """_budget_rates: (accepted + 4 x pooled) / (examined + 4) per budget and depth, pooled = the rate of
    every budget's rounds at that temperature (with _rates' fallbacks): one miss at a depth is not a rate
    of 0, a depth a budget never examined takes the pooled rate, a budget with many rounds keeps about
    its own."""
    from specdec.measure.draftcost import _budget_rates

    counts = {"0": {1: [[10, 4]], 4: [[100, 80], [1, 0]]}}
    out = _budget_rates(counts, (1, 4), 2)
    pool1, pool2 = 84 / 110, 0 / 1
    assert out["1"]["0"] == pytest.approx([(4 + 4 * pool1) / 14, pool2])  # depth 2 never examined at 1
    assert out["4"]["0"] == pytest.approx([(80 + 4 * pool1) / 104, 0.0])
    # the lone miss at depth 2 no longer pins it at 0 once another budget's rounds reached it
    more = _budget_rates({"0": {1: [[10, 4], [5, 5]], 4: [[100, 80], [1, 0]]}}, (1, 4), 2)
    assert more["4"]["0"][1] == pytest.approx((0 + 4 * 5 / 6) / 5) and more["4"]["0"][1] > 0


def test_the_draft_cost_program_checks_its_options_and_its_worker_its_form(capsys):
    """``specdec run draft-cost`` refuses a missing side or a bad count before anything runs; the worker
    (the measurement module run as a file) takes exactly the form the program writes."""
    import pytest

    from specdec.cli.app import main
    from specdec.measure.draftcost import side_main

    assert main(["run", "draft-cost", "--out", "x.json"]) == 2
    assert "--before is needed unless --summarize is given" in capsys.readouterr().err
    assert main(["run", "draft-cost", "--before", "/tmp", "--out", "x.json", "--drafter-threads", "0"]) == 2
    assert "--drafter-threads must be an integer" in capsys.readouterr().err
    bad = (["--side", "--threads", "1"], ["--threads", "1", "--prompts", "1", "--drafter-threads", "1", "x"])
    for argv in bad:
        with pytest.raises(ValueError, match="the draft-cost worker takes"):
            side_main(argv)
    old_form = ["--side", "--threads", "1", "--prompts", "1", "--drafter-threads", "1"]  # before --configs
    with pytest.raises(ValueError, match="--new-tokens N --configs JSON"):
        side_main(old_form)
    assert (
        main(
            [
                "run",
                "draft-cost",
                "--before",
                "/tmp",
                "--out",
                "x.json",
                "--configs",
                "suffix,tree=0@8;suffix",
            ]
        )
        == 2
    )
    assert "each must be SPEC@BUDGET" in capsys.readouterr().err
    assert (
        main(["run", "draft-cost", "--before", "/tmp", "--out", "x.json", "--configs", "lookup@4; nosuch@4"])
        == 2
    )
    assert "nosuch" in capsys.readouterr().err


def test_compare_times_the_whole_generation_where_the_samples_have_it():
    """decode_speedup: before / after seconds per generated token, paired by prompt; the collector's
    share per token reported on each side; a side without whole-generation times gets neither."""

    def timed(config, prompt, rep, decode_s, gc_s):
        return row(config, prompt, rep, 0.02) | {
            "decode_s": decode_s, "gc_s": gc_s, "new_tokens": 40,
            "plain_decode_s": 0.08, "plain_gc_s": 0.0, "plain_new_tokens": 40,
        }  # fmt: skip

    before = [timed("s", p, r, 0.12, 0.02) for p in range(3) for r in range(2)]
    after = [timed("s", p, r, 0.08, 0.0) for p in range(3) for r in range(2)]
    (out,) = compare(before, after)
    assert out["decode_speedup"] == pytest.approx([1.5, 1.5, 1.5])
    assert out["before"]["gc_ms_per_token"] == pytest.approx(0.5) and out["after"]["gc_ms_per_token"] == 0
    assert out["after"]["decode_ms_per_token"] == pytest.approx(2.0)
    (old,) = compare([row("s", 0, 0, 0.02)], [row("s", 0, 0, 0.01)])
    assert "decode_speedup" not in old and "gc_ms_per_token" not in old["after"]


def test_the_configs_option_refuses_an_empty_list_a_repeat_and_a_huge_budget(capsys):
    from specdec.cli.app import main
    from specdec.measure.draftcost import side_main

    run = ["run", "draft-cost", "--before", "/tmp", "--out", "x.json", "--configs"]
    for bad, said in ((";", "name at least one"), ("lookup@4;lookup@4", "named twice"),
                      ("lookup@5000", "budget of lookup")):  # fmt: skip
        assert main([*run, bad]) == 2
        assert said in capsys.readouterr().err
    argv = ["--side", "--threads", "1", "--prompts", "1", "--drafter-threads", "1", "--new-tokens", "8"]
    with pytest.raises(ValueError, match="--configs must be a JSON list"):
        side_main([*argv, "--configs", "[lookup"])


def test_the_loops_clock_raises_the_curves_level_never_lowers_it():
    """curve_level: the sum of (loop - 1) over the sum of (curve - 1) over budgets and temperatures, at
    least 1; a pair without a proposing round (NaN) or a curve price of 1 is left out."""
    from specdec.measure.draftcost import curve_level

    assert curve_level([(1.5, 2.0), (1.2, 1.4), (1.8, 2.6)]) == pytest.approx(2.0)
    # a pair barely above 1 weighs by its curve price: the median of the ratios (10, 1.2, 1.1) would say
    # 1.2, the ratio of sums (0.5 + 1.2 + 1.1) / (0.05 + 1 + 1)
    assert curve_level([(1.05, 1.5), (2.0, 2.2), (2.0, 2.1)]) == pytest.approx(2.8 / 2.05)
    assert curve_level([(1.02, 1.6), (3.0, 3.0)]) == pytest.approx(2.6 / 2.02)
    assert curve_level([(1.5, 1.2), (1.9, 1.5)]) == 1.0  # the loop says cheaper: the curve stands
    assert curve_level([(1.5, float("nan")), (1.0, 3.0)]) == 1.0
    assert curve_level([(1.5, float("nan")), (1.25, 1.75)]) == pytest.approx(3.0)


def test_a_proposing_rounds_loop_cost_leaves_the_empty_rounds_at_their_own_cost():
    """proposing_round: loop_v = (1 - s) plain_round + s x solved for x; an empty round costs what a plain
    round of the tree loop costs (plain_round), not 1; a share of 0 is refused."""
    from specdec.measure.draftcost import proposing_round

    assert proposing_round(0.4 * 1.05 + 0.6 * 1.3, 0.6, 1.05) == pytest.approx(1.3)
    assert proposing_round(1.2, 1.0, 1.05) == pytest.approx(1.2)  # every round proposed
    with pytest.raises(ValueError, match="share"):
        proposing_round(1.2, 0.0, 1.0)


def _raw_calibration():
    """A calibration as calibrate_policy stores it, before pricing: budgets 2 and 4, two temperatures."""
    return {
        "budgets": {"2": [float("nan"), 0.1, 2], "4": [float("nan"), 0.2, 3]},
        "verify_timed": [1.0, 1.1, 1.2, 1.3, 1.4],
        "per_temperature": {
            "0": {"nodes": {"2": {"1": 1, "2": 3}, "4": {"4": 2}}, "loop_full": {"2": 1.5, "4": 2.0}},
            "1": {"nodes": {"2": {}, "4": {"2": 1, "4": 1}}, "loop_full": {"2": float("nan"), "4": 1.8}},
        },
    }


def test_a_calibration_is_priced_by_the_nodes_its_rounds_proposed_and_a_steeper_curve_raises_the_price():
    """price_calibration: a proposing round's bare price is the mean of v(n + 1) over the rounds by nodes
    proposed (v(b + 1) with none), the level the loop's clock sets is curve_level of those prices, and
    verify and each budget's v are raised by it; a steeper curve raises every price and lowers the level;
    pricing again by the same curve changes nothing; a calibration without node counts is refused."""
    from specdec.measure.draftcost import curve_level, price_calibration

    raw = _raw_calibration()
    cal = price_calibration(raw, raw["verify_timed"])
    p0 = {2: (1.1 + 3 * 1.2) / 4, 4: 1.4}  # temperature 0: by nodes proposed
    p1 = {2: 1.2, 4: (1.2 + 1.4) / 2}  # temperature 1: budget 2 proposed nothing, v(3)
    level = curve_level([(p0[2], 1.5), (p0[4], 2.0), (p1[2], float("nan")), (p1[4], 1.8)])
    assert cal["level"] == pytest.approx(level) and level > 1
    assert cal["budgets"]["2"][0] == pytest.approx(1 + level * ((p0[2] + p1[2]) / 2 - 1))
    assert cal["budgets"]["4"][1:] == [0.2, 3] and cal["verify_bare"] == raw["verify_timed"]
    assert cal["verify"] == pytest.approx([1 + level * (x - 1) for x in raw["verify_timed"]])
    steep = price_calibration(cal, [1.0, 1.3, 1.6, 1.9, 2.2])
    assert steep["level"] < cal["level"] and steep["verify_timed"] == raw["verify_timed"]
    assert all(steep["budgets"][b][0] > cal["budgets"][b][0] for b in ("2", "4"))
    assert price_calibration(steep, steep["verify_bare"]) == steep
    # a resumed run reads the calibration back from its record, where NaN was stored as null
    from specdec.theory.recordio import jsonable

    back = json.loads(json.dumps(jsonable(cal)))
    assert back["per_temperature"]["1"]["loop_full"]["2"] is None
    assert price_calibration(back, back["verify_bare"])["level"] == pytest.approx(cal["level"])
    with pytest.raises(ValueError, match="v\\(k\\) for k = 1 .. 5"):
        price_calibration(raw, [1.0, 1.1])
    del raw["per_temperature"]["1"]["nodes"]
    with pytest.raises(ValueError, match="no node counts"):
        price_calibration(raw, raw["verify_timed"])


def test_the_pooled_curve_of_a_run_reaches_each_calibration_as_far_as_its_own():
    """pooled_curves at quantile 1 (the steepest): each curve's entries replaced by the largest any curve of
    the run has at that k, over the curves that reach it, then by the running maximum along k; a curve
    keeps its own length."""
    from specdec.measure.draftcost import pooled_curves

    out = pooled_curves({"a": [1.0, 1.2, 1.3], "b": [1.0, 1.4, 1.25, 1.9, 2.5], "c": [1.0, 1.1]}, 1.0)
    assert out == {"a": [1.0, 1.4, 1.4], "b": [1.0, 1.4, 1.4, 1.9, 2.5], "c": [1.0, 1.4]}
    # a short steep curve never leaves a longer flat one falling: v(5) above v(4) stays
    flat = pooled_curves({"short": [1.0, 1.3, 1.6, 1.9], "long": [1.0, 1.1, 1.2, 1.3, 1.35, 1.4]}, 1.0)
    assert flat["long"] == [1.0, 1.3, 1.6, 1.9, 1.9, 1.9]


def test_the_upper_quartile_leaves_one_spike_out_and_keeps_the_steep_regime():
    """The default pool (the upper quartile, numpy's linear rule): five calibrations, one of which timed
    v(2) in a spike (1.9) and one v(3) below v(2); the pooled v(2) is the quartile of the five (1.2), not
    the spike, and a regime most calibrations timed steep prices every policy steep; a quantile outside
    [0, 1] is refused."""
    import numpy as np

    from specdec.measure.draftcost import pooled_curves

    curves = {
        "flat": [1.0, 1.05, 1.1],
        "spike": [1.0, 1.9, 0.95],
        "steep1": [1.0, 1.2, 1.4],
        "steep2": [1.0, 1.2, 1.45],
        "steep3": [1.0, 1.15, 1.4],
    }
    out = pooled_curves(curves)
    assert out["flat"][1] == float(np.quantile([1.05, 1.9, 1.2, 1.2, 1.15], 0.75)) == 1.2
    assert out["flat"][2] == 1.4 and all(c == out["flat"] for c in out.values())
    with pytest.raises(ValueError, match="quantile"):
        pooled_curves(curves, 1.5)


def test_a_runs_policies_are_priced_by_the_pooled_curve_their_calibrations_timed():
    """trees.policy_configs prices each calibration of the run by pooled_curves of their own timings
    (verify_timed): the one timed when wide calls looked cheap takes the other's curve, its own timing
    kept; a resumed run (the calibrations given, already priced) prices them the same again."""
    from tiny_models import perturbed_copy, tiny_llama

    from specdec.drafting.modeltree import ModelTreeDrafter
    from specdec.engine.drafters import ModelDrafter
    from specdec.engine.lean import LeanLlama
    from specdec.experiments.trees import policy_configs
    from specdec.measure.draftcost import calibrate_policy

    one = tiny_llama(0, layers=1)
    target = LeanLlama(one, "float32")
    drafter = ModelTreeDrafter(ModelDrafter(LeanLlama(perturbed_copy(one, 0.3, 7), "float32")), branch=2)
    cal = calibrate_policy(target, drafter, [[3, 14, 15, 92, 65]], (2, 4), new_tokens=8)
    flat = dict(cal, verify_timed=[1.0, 1.05, 1.1, 1.15, 1.2])
    steep = dict(cal, verify_timed=[1.0, 1.3, 1.6, 1.9, 2.2])
    given = {"flat": flat, "steep": steep}
    configs, priced = policy_configs("e", target, None, {"flat": drafter, "steep": drafter},
                                     {"flat": (2, 4), "steep": (2, 4)}, given, pool=1.0)  # fmt: skip
    assert priced["flat"]["pooled_quantile"] == 1.0
    assert [c.id for c in configs] == ["e/flat/noharm", "e/steep/noharm"]
    assert priced["flat"]["verify_bare"] == steep["verify_timed"] == priced["steep"]["verify_bare"]
    assert priced["flat"]["verify_timed"] == flat["verify_timed"]
    assert configs[0].gamma.verify == priced["flat"]["verify"]  # the policy prices by the steep curve
    _, again = policy_configs("e", target, None, {"flat": drafter, "steep": drafter},
                              {"flat": (2, 4), "steep": (2, 4)}, priced, pool=1.0)  # fmt: skip
    assert again == priced
    # the upper quartile of two curves (noharm-v11's pool): three quarters of the way to the steeper
    _, quartile = policy_configs("e", target, None, {"flat": drafter, "steep": drafter},
                                 {"flat": (2, 4), "steep": (2, 4)}, given, pool=0.75)  # fmt: skip
    assert quartile["flat"]["verify_bare"] == pytest.approx([1.0, 1.2375, 1.475, 1.7125, 1.95])
    # a partial record priced by one rule is not resumed under another
    with pytest.raises(ValueError, match="priced by the 1.0 quantile .* this run prices by the 0.75"):
        policy_configs("e", target, None, {"flat": drafter, "steep": drafter},
                       {"flat": (2, 4), "steep": (2, 4)}, priced, pool=0.75)  # fmt: skip
    with pytest.raises(ValueError, match=r"pool must be a finite number in \[0"):
        policy_configs("e", target, None, {"flat": drafter}, {"flat": (2, 4)}, given, pool=2.0)
