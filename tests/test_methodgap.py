"""Issue 44, item 2: the method-or-implementation split (specdec.analysis.methodgap) on a record built
by hand, every number checked against arithmetic done here."""

from __future__ import annotations

import pytest

from specdec.analysis import methodgap as mg


def _record(plain_s: float = 0.010, spec_s: float = 0.005) -> dict:
    runs = []
    for p in range(4):
        for rep in range(3):
            for config, per_token in (
                ("e/plain", plain_s * (1 + p / 10)),
                ("e/eagle:x,topk=4,depth=5/g8", spec_s * (1 + p / 10)),
            ):
                runs.append({"config": config, "temperature": 0.0, "task": "t", "prompt": f"p{p}",
                             "rep": rep, "decode_s": per_token * 100, "new_tokens": 100})  # fmt: skip
    return {
        "model_counts": {"weight_bytes": 96e6, "macs": 134e6},
        "peaks": {"int8": {"median_per_s": 1e12}},
        "bandwidth": {"bandwidth_gbps": 40.0},
        "verify_curves": {"ks": [1, 2, 4, 8, 16],
                          "median_s": {"chain": [0.008, 0.0088, 0.0104, 0.016, 0.032],
                                       "tree": [0.008, 0.0088, 0.0104, 0.0168, 0.0336]}},
        "draft_work": {"eagle:x,topk=4,depth=5": {"macs": 9e6, "weight_bytes": 9.5e6}},
        "trees": {"rows": [{"config": "e/eagle:x,topk=4,depth=5/g8", "temperature": 0.0,
                            "tokens_per_call": 2.0, "nodes_per_round": 7.0,
                            "draft_calls_per_round": 5.0, "c_round_median": 0.5}]},
        "runs": runs,
    }  # fmt: skip


def test_the_floor_and_the_four_speedups_follow_their_arithmetic():
    rec = _record()
    floor = mg.floor_model(rec)
    assert floor["weights_s"] == pytest.approx(96e6 / 40e9)  # 2.4 ms
    assert floor["row_s"] == pytest.approx(134e6 / 1e12)  # 0.134 ms
    assert floor["plain_s"] == floor["weights_s"]
    (row,) = mg.split(rec)
    assert row["family"] == "eagle-tree" and row["anchor"] == "EAGLE-2"
    # measured costs in Theorem 3.8's units: v(8) = T_tree(8) / T(1) = 16.8 / 8 ms; c = 0.5 plain loop
    # steps (the plain step, the median of 10, 11, 12, 13 ms, is 11.5 ms: c_round's unit, not v's)
    assert mg.plain_step(rec, "e", 0.0) == pytest.approx(0.0115)
    assert row["at_measured_costs"] == pytest.approx(2.0 / (0.0168 / 0.008 + 0.5))
    # floor: 8 rows ride on the weights (8 x 0.134 < 2.4 ms): v = 1; five calls, each bound by the
    # drafter's 9.5 MB at 40 GB/s (0.2375 ms > one row's 9 us)
    c = 5 * (9.5e6 / 40e9) / (96e6 / 40e9)
    assert row["at_floor"] == pytest.approx(2.0 / (1.0 + c))
    # EAGLE-2's published 4.35 tokens per call at its 59 nodes and 6 calls: 60 rows exceed the weights
    v60 = 60 * 134e6 / 1e12 / (96e6 / 40e9)
    c59 = 6 * (9.5e6 / 40e9) / (96e6 / 40e9)
    assert row["anchor_at_floor"] == pytest.approx(4.35 / (v60 + c59))
    assert row["measured"]["estimate"] == pytest.approx(2.0)  # 10 ms over 5 ms per token on every prompt
    assert row["loop"] == pytest.approx(2.0 / row["at_measured_costs"])
    assert row["implementation"] == pytest.approx(row["at_measured_costs"] / row["at_floor"])
    assert row["method"] == pytest.approx(row["at_floor"] / row["anchor_at_floor"])


def test_each_family_meets_its_anchor_and_an_unstated_tree_size_computes_nothing():
    assert mg.family_of("eagle:eagle-ttt") == "eagle-chain"
    assert mg.family_of("eagle:eagle-ttt,topk=4,depth=5") == "eagle-tree"
    assert mg.family_of("lookup-tree,min_ngram=2") == "lookup"
    assert mg.family_of("draft-tree:distil-l1,branch=2") == "draft"
    assert mg.anchor_for("medusa:medusa-4")["method"] == "Medusa"
    assert mg.anchor_for("mlp:mlp-self")["method"] == "Hydra"
    assert mg.anchor_for("suffix") is None and mg.anchor_for("early-exit:8") is None
    rec = _record()
    rec["trees"]["rows"][0]["config"] = "e/mlp:x/g8"
    rec["draft_work"] = {}
    for run in rec["runs"]:
        run["config"] = run["config"].replace("eagle:x,topk=4,depth=5", "mlp:x")
    (row,) = mg.split(rec)
    assert row["anchor"] == "Hydra" and row["anchor_at_floor"] is None and row["method"] is None


def test_the_anchors_file_is_the_published_table():
    rows = {r["method"]: r for r in mg.load_anchors()}
    assert rows["EAGLE-2"]["tokens_per_call"] == 4.35 and rows["EAGLE-2"]["nodes"] == 59
    assert rows["PLD"]["draft_calls"] == 0 and rows["Medusa"]["nodes"] == 63
    assert all(r["tokens_per_call"] >= 1 for r in rows.values())


def test_a_config_without_runs_is_refused():
    with pytest.raises(ValueError, match="no runs"):
        mg.measured_speedup(_record(), "e/none/g1", 0.0)


def test_a_named_baseline_pairs_the_same_prompts_and_reverses_to_the_reciprocal():
    rec = _record()
    spec = "e/eagle:x,topk=4,depth=5/g8"
    assert mg.measured_speedup(rec, spec, 0.0, baseline="e/plain") == mg.measured_speedup(rec, spec, 0.0)
    est, _, _ = mg.measured_speedup(rec, "e/plain", 0.0, baseline=spec)
    assert est == pytest.approx(0.5)  # plain decoding over the drafter: 5 ms over 10 ms per token
    with pytest.raises(ValueError, match="baseline must differ"):
        mg.measured_speedup(rec, spec, 0.0, baseline=spec)


def test_the_summary_spans_its_members_and_refuses_none():
    rec = _record()
    rows = mg.split(rec)
    sm = mg.summary(rows, 0.0, [rows[0]["config"]])
    assert sm["n"] == 1 and sm["at_floor"] == (rows[0]["at_floor"],) * 2
    assert sm["implementation_gmean"] == pytest.approx(rows[0]["implementation"])
    assert sm["measured_above"] == 1  # 2x
    assert sm["method"] == (rows[0]["method"],) * 2
    second = dict(rows[0], config="e/other/g1", at_floor=0.5, implementation=4.0, method=None)
    both = mg.summary([*rows, second], 0.0, [rows[0]["config"], "e/other/g1"])
    assert both["at_floor"] == (0.5, rows[0]["at_floor"]) and both["at_floor_above"] == 1
    assert both["implementation_gmean"] == pytest.approx((rows[0]["implementation"] * 4.0) ** 0.5)
    assert both["method"] == (rows[0]["method"],) * 2  # a member without an anchor adds nothing
    assert both["method_n"] == 1 and both["implementation_n"] == 2
    with pytest.raises(ValueError, match="no row"):
        mg.summary(rows, 1.0, [rows[0]["config"]])


def test_the_gap_figure_draws_one_row_per_configuration():
    import matplotlib

    matplotlib.use("Agg")
    from specdec.analysis.answerfig import gap_figure

    (row,) = mg.split(_record())
    fig = gap_figure([row], {row["config"]: "EAGLE-2, 8 nodes"}, temperatures=(0.0,))
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["EAGLE-2, 8 nodes"]
    # two temperatures, a row missing at the second, one without an anchor and without an interval
    lone = dict(row, config="e/mlp:x/g4", anchor_at_floor=None, at_floor=3.0,
                measured={"estimate": 0.4, "low": None, "high": None})  # fmt: skip
    hot = dict(row, temperature=1.0)
    fig = gap_figure([row, lone, hot])
    left, right = fig.axes[:2]
    assert [t.get_text() for t in left.get_yticklabels()] == ["mlp:x/g4", row["config"].split("/", 1)[1]]
    for ax in (left, right):
        lo, hi = ax.get_xlim()
        assert lo <= 0.4 and hi >= 3.0  # every estimate inside every panel
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(legend) == len(set(legend)) == 4
    with pytest.raises(ValueError, match="at least one row"):
        gap_figure([])


def test_whose_gap_compares_shortfalls_over_the_configurations_with_both_factors():
    (row,) = mg.split(_record())
    base = dict(row, config="a", implementation=0.5, method=0.8)
    assert mg.whose_gap([base], 0.0, ["a"])["whose"] == "implementation"
    assert mg.whose_gap([dict(base, method=0.4)], 0.0, ["a"])["whose"] == "method"
    # a factor above 1 is a surplus, not a gap: a method ahead of its anchor leaves the implementation's
    assert mg.whose_gap([dict(base, implementation=0.9, method=1.3)], 0.0, ["a"])["whose"] == "implementation"
    assert mg.whose_gap([dict(base, implementation=1.1, method=1.3)], 0.0, ["a"])["whose"] == "neither"
    # a configuration without a method factor is left out of both means
    other = dict(base, config="b", implementation=0.01, method=None)
    judged = mg.whose_gap([base, other], 0.0, ["a", "b"])
    assert judged["n"] == 1 and judged["implementation"] == pytest.approx(0.5)
    assert mg.whose_gap([other], 0.0, ["b"]) == {
        "n": 0,
        "implementation": None,
        "method": None,
        "whose": "undecided",
    }


def test_fixed_budget_leaves_the_policies_out():
    ids = ("e/lookup/g2", "e/lookup/noharm", "e/lookup+heuristic/s1", "e/eagle:x/g2", "e/lookup/g2")
    rows = [{"config": c, "spec": c.split("/")[1]} for c in ids]
    assert mg.fixed_budget(rows) == ["e/eagle:x/g2", "e/lookup/g2"]
