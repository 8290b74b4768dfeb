"""The second campaign's readers on a synthetic complete record (no decoding, no timing thresholds): the
answer's rows and figure, the estimators' agreement, the configurations in words, the section 7 table and
its measured verdicts, each checked to follow the stored numbers and to change when they change."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from specdec.analysis import answer, crossfit
from specdec.analysis.answerfig import answer_figure, answer_rows, prompt_figure
from specdec.analysis.beyond import SOURCES, section7_table
from specdec.experiments.campaign2 import analyse
from specdec.paper.article import load_article_table
from specdec.paper.ledger.section7 import RULES7, section7_rows

TASKS = ("summarize", "extract", "code", "chat")
ENGINES = {"lean-q4q8-2t": 190.0, "lean-q4q8-1t": 170.0, "hf-bfloat16-2t": 19.0}
#: family spec -> (its settings, its speed over the fastest plain decoder)
FAMILIES = {
    "suffix": ((8, 16), 1.3),
    "lookup": ((2, 4), 1.05),
    "medusa:medusa-4": ((4,), 0.7),
    "eagle:eagle-1": ((2,), 0.8),
    "eagle:eagle-1,topk=4,depth=5": ((4,), 0.55),
    "mlp:mlp-4,ranks=1": ((2,), 0.8),
    "draft:distil-l1": ((1, 2), 0.85),
}


def _configs():
    out = [
        {
            "id": f"{e}/plain",
            "engine": e,
            "family": f"{e}/plain",
            "drafter": "plain",
            "gamma": "0",
            "plain": True,
        }
        for e in ENGINES
    ]
    for spec, (settings, _) in FAMILIES.items():
        for g in settings:
            out.append(
                {
                    "id": f"lean-q4q8-2t/{spec}/g{g}",
                    "engine": "lean-q4q8-2t",
                    "family": f"lean-q4q8-2t/{spec}",
                    "drafter": spec,
                    "gamma": str(g),
                    "plain": False,
                }
            )
    return out


def synthetic(seed: int = 0, reps: int = 3) -> dict:
    """A campaign-v2-shaped record: 4 tasks x 4 prompts, both temperatures, every run's timings drawn
    around the speeds above (suffix faster on summarize and extract than on chat)."""
    rng = np.random.default_rng(seed)
    prompts = [{"task": t, "id": f"{t}-{i}", "index": i, "half": i % 2} for t in TASKS for i in range(4)]
    configs = _configs()
    runs = []
    for temp in (0.0, 1.0):
        for p in prompts:
            for c in configs:
                base = ENGINES[c["engine"]] if c["plain"] else 190.0 * FAMILIES[c["drafter"]][1]
                if c["drafter"] == "suffix" and p["task"] == "chat":
                    base = 190.0 * 0.95
                for rep in range(reps):
                    rate = base * np.exp(rng.normal(0, 0.03))
                    n = 100
                    run = {
                        "temperature": temp,
                        "task": p["task"],
                        "prompt": p["id"],
                        "config": c["id"],
                        "engine": c["engine"],
                        "drafter": c["drafter"],
                        "gamma": c["gamma"],
                        "rep": rep,
                        "new_tokens": n,
                        "decode_s": n / rate,
                        "prefill_s": 0.02,
                        "draft_s": 0.01,
                        "rounds": 40,
                        "target_calls": 40,
                        "same_as_rep0": True,
                    }
                    if rep == 0:
                        run["first_divergence_from_plain"] = None  # only repetition 0 carries it
                    if rep == 0 and not c["plain"]:
                        run["stats"] = {
                            "target_calls": 40,
                            "rounds": 40,
                            "new_tokens": n,
                            "drafted_tokens": 120,
                            "accepted_tokens": 60,
                            "draft_calls": 40,
                            "examined_at": [40, 30],
                            "accepted_at": [30, 20],
                        }
                    runs.append(run)
    from specdec.analysis.crossfit import analyse as crossfit
    from specdec.analysis.crossfit import fold_of
    from specdec.experiments.trees import tree_summary

    record = {
        "complete": True,
        "settings": {"seed": 0},
        "prompts": prompts,
        "configs": configs,
        "runs": runs,
        "temperatures": [0.0, 1.0],
        "engines": {
            e: {
                "engine": "transformers" if e.startswith("hf") else "lean",
                "mode": "q4q8",
                "threads": int(e[-2]),
            }
            for e in ENGINES
        },
    }
    folds = {(p["task"], p["id"]): fold_of(p["index"]) for p in prompts}
    record["crossfit"] = crossfit(runs, configs, folds, n_boot=200)
    record["analyses"] = analyse(record, n_boot=200, simultaneous_boot=400)
    record["trees"] = tree_summary(record)
    step = 1 / 190.0  # the fastest plain decoder's step (its rate above)
    record["verify_curves"] = {
        "ks": [1, 2, 4, 8],
        "median_s": {"chain": [0.8 * step, 0.9 * step, 1.0 * step, 1.6 * step],
                     "tree": [0.8 * step, 0.9 * step, 1.04 * step, 1.7 * step]},
    }  # fmt: skip
    return record


@pytest.fixture(scope="module")
def record():
    return synthetic()


def test_answer_rows_follow_the_analysis(record):
    rows = answer_rows(record, 0.0)
    assert len(rows) == 1 + len(ENGINES) + len(FAMILIES)
    head = rows[0]  # the headline itself: the blind choice, with its 95 % interval
    blind = answer.stratum(record, 0.0)["any_speculative"]["vs_fastest_plain"]
    assert head["kind"] == "headline" and (head["x"], head["low"], head["high"]) == (
        blind["estimate"], blind["low"], blind["high"],
    )  # fmt: skip
    (fastest,) = [r for r in rows if r["fastest"]]
    assert fastest["key"] == "lean-q4q8-2t/plain"
    suffix = next(r for r in rows if r["key"] == "lean-q4q8-2t/suffix")
    assert suffix["verdict"] == "faster" and suffix["x"] == pytest.approx(1.3**0.75 * 0.95**0.25, rel=0.05)
    assert set(suffix["tasks"]) == set(TASKS) and suffix["tasks"]["chat"] < suffix["tasks"]["extract"]
    medusa = next(r for r in rows if r["key"].endswith("medusa:medusa-4"))
    # the interval drawn is the simultaneous one of the paired ratio, the one the colour (verdict) rests on
    sim = answer.stratum(record, 0.0, analysis="simultaneous")
    medusa_sim = next(f for f in sim["families"] if f["family"] == medusa["key"])["vs_fastest_plain"]
    assert (medusa["low"], medusa["high"]) == (medusa_sim["low"], medusa_sim["high"])
    assert medusa["verdict"] == "slower" and medusa["low"] <= medusa["x"] <= medusa["high"] < 1
    import matplotlib.pyplot as plt

    for fig in (answer_figure(record), prompt_figure(record)):
        assert len(fig.axes) == 2
        plt.close(fig)


def test_the_headline_prompt_by_prompt_and_without_each_task(record):
    ratios = answer.prompt_ratios(record, 0.0)
    blind = answer.stratum(record, 0.0)["any_speculative"]["vs_fastest_plain"]
    assert len(ratios) == len(record["prompts"])
    assert float(np.exp(np.mean(np.log(ratios)))) == pytest.approx(blind["estimate"])
    rows = answer.leave_one_task_out(record, 0.0, n_boot=200)
    assert [r["left out"] for r in rows] == list(TASKS)
    per_task = len(record["prompts"]) // len(TASKS)
    assert all(r["prompts"] == len(record["prompts"]) - per_task for r in rows)
    assert all(r["low"] <= r["x"] <= r["high"] for r in rows)
    chat = next(r for r in rows if r["left out"] == "chat")  # chat gains least here: leaving it out helps
    assert chat["x"] > blind["estimate"]
    with pytest.raises(ValueError, match="tasks must name"):
        crossfit.any_speculative(record["runs"], record["configs"], {}, temperature=0.0, tasks=[])


def test_the_estimators_agree_here_and_the_headline_reads_each(record):
    agree = answer.estimator_agreement(record, 0.0)
    assert [r["estimate"] for r in agree["rows"]] == list(answer.ESTIMATES)
    assert agree["same"] and agree["verdict"] == "faster"
    broken = copy.deepcopy(record)
    s = next(
        s for s in broken["analyses"]["mean"]["strata"] if s["temperature"] == 0.0 and s["task"] == "all"
    )
    s["any_speculative"]["vs_fastest_plain"]["verdict"] = "not distinguishable"
    assert not answer.estimator_agreement(broken, 0.0)["same"]
    with pytest.raises(ValueError, match="analysis must be one of"):
        answer.stratum(record, 0.0, analysis="best")


def test_configurations_in_words(record):
    assert (
        answer.config_words(record, "lean-q4q8-2t/suffix/g8")
        == "suffix decoding, tree, 8 nodes (lean q4q8, 2 threads)"
    )
    assert answer.config_words(record, "lean-q4q8-2t/lookup/g2").startswith("prompt lookup, γ = 2")
    assert answer.config_words(record, "lean-q4q8-2t/lookup/g2", engine=False) == "prompt lookup, γ = 2"
    assert answer.config_words(record, "lean-q4q8-2t/eagle:eagle-1/g2").startswith("EAGLE, γ = 2")  # a path
    assert answer.config_words(record, "lean-q4q8-2t/eagle:eagle-1,topk=4,depth=5/g4").startswith(
        "EAGLE-2, 4 nodes"
    )
    two = answer.config_words(
        record, "lean-q4q8-2t/lookup/g2 (chosen on half 0) / lean-q4q8-2t/suffix/g16 (chosen on half 1)"
    )
    assert "γ = 2 (lean q4q8, 2 threads) (chosen on half 0)" in two and "16 nodes" in two


def test_section7_table_sets_every_printed_row_beside_its_families(record):
    rows = section7_table(record, load_article_table("sources_table"))
    assert {r["source"] for r in rows} == set(SOURCES)
    medusa = next(r for r in rows if r["family"] == "medusa:medusa-4")
    assert medusa["article_training"] == "是" and medusa["train_minutes"] > 0 and medusa["stored_mb"] > 0
    assert medusa["x_t0"][3] == "slower" and medusa["accept_d1"] == pytest.approx(0.75)
    assert medusa["chosen"] == "4 nodes" and next(r for r in rows if r["family"] == "lookup")["chosen"] in (
        "γ = 2",
        "γ = 4",
        "γ = 2 / γ = 4",
        "γ = 4 / γ = 2",
    )
    assert next(r for r in rows if r["family"] == "lookup+heuristic")["x_t0"] is None  # not in this record


def test_section7_verdicts_follow_the_record(record):
    rows = {r["claim"]: r for r in section7_rows(record)}
    assert set(rows) == {c for c, _ in RULES7.values()}
    assert rows["七-2"]["verdict"] == "fails for this target"  # 0.7x against "over 2.2X"
    assert rows["七-6"]["verdict"] == "undecided for this target"  # no agentic workload here
    assert (
        rows["七-8"]["verdict"] == "holds for this target"
        and rows["三-7"]["verdict"] == "holds for this target"
    )
    assert rows["三-7"]["values"]["greedy_runs"] == 3 * 16 * 3  # three families, 16 prompts, 3 repetitions
    assert (
        rows["七-8"]["values"]["tree_runs"] == 4 * 16 * 2 * 3
    )  # suffix (2 settings), Medusa, EAGLE-2; both temps
    assert (
        rows["七-9"]["verdict"] == "holds for this target"
    )  # suffix faster on summarize/extract, above chat
    assert rows["七-4"]["values"]["rel"] == pytest.approx(0.55 / 0.8, rel=0.05)
    bad = copy.deepcopy(record)
    for r in bad["runs"]:
        if r["drafter"] == "suffix":
            r["target_calls"] = r["rounds"] + 1  # a tree verified in two calls
        if r["drafter"] == "medusa:medusa-4" and r["temperature"] == 0.0 and r["rep"] == 1:
            r["same_as_rep0"] = False  # a later repetition that left repetition 0's (plain's) tokens
    rows = {r["claim"]: r for r in section7_rows(bad)}
    assert (
        rows["七-8"]["verdict"] == "fails for this target"
        and rows["三-7"]["verdict"] == "fails for this target"
    )
    wrong = copy.deepcopy(record)
    for r in wrong["runs"]:
        if r["drafter"] == "suffix" and r["temperature"] == 0.0 and r["rep"] == 0:
            r["first_divergence_from_plain"] = 7  # one call per round, but a tree verified wrongly
    rows = {r["claim"]: r for r in section7_rows(wrong)}
    assert (
        rows["七-8"]["verdict"] == "fails for this target"
        and rows["七-8"]["values"]["one_call"] == 4 * 16 * 2 * 3
    )
    assert all(r["verdict"] == "not recorded on this machine" for r in section7_rows(None))


def test_where_the_time_goes_follows_the_three_numbers(record):
    rows = answer.where_time_goes(record, 0.0)
    assert {r["config"] for r in rows} == {c["id"] for c in record["configs"] if not c["plain"]}
    r = next(r for r in rows if r["config"] == "lean-q4q8-2t/medusa:medusa-4/g4")
    assert r["label"] == "Medusa-1, 4 nodes" and r["engine"] == "lean q4q8, 2 threads" and r["tree"]
    assert r["plain_step_ms"] == pytest.approx(1e3 / 190, rel=0.02)
    assert r["tokens_per_call"] == pytest.approx(2.5) and r["width"] == pytest.approx(4.0)
    # Theorem 3.8's units: the tree curve at 4 rows over the bare one-row call (0.8 of a plain step)
    assert r["verify"] == pytest.approx(1.04 / 0.8, rel=0.03)
    assert r["verify_bare"] == pytest.approx(1.04, rel=0.03)  # the bare call alone, in plain steps
    assert r["loop_share"] == pytest.approx(0.2, rel=0.05)
    assert r["predicted"] == pytest.approx(2.5 / (r["verify"] + r["c_round"]))
    assert r["measured"] == pytest.approx(0.7, rel=0.05)
    assert r["round_cost"] == pytest.approx(2.5 / r["measured"])
    assert r["extra"] == pytest.approx(r["round_cost"] - r["verify"] - r["c_round"])
    assert r["needed"] == pytest.approx(1.5 * r["round_cost"])
    chain = next(r for r in rows if r["config"] == "lean-q4q8-2t/eagle:eagle-1/g2")
    assert not chain["tree"] and chain["verify"] == pytest.approx(1.0 / 0.8, rel=0.03)  # the causal curve
    dearer = copy.deepcopy(record)
    dearer["verify_curves"]["median_s"]["tree"][2] *= 2
    r2 = next(x for x in answer.where_time_goes(dearer, 0.0) if x["config"] == r["config"])
    assert r2["verify"] == pytest.approx(2 * r["verify"]) and r2["predicted"] < r["predicted"]
    assert r2["extra"] == pytest.approx(r["extra"] - r["verify"])  # the measured round cost is the same
    mixed = copy.deepcopy(record)  # rounds of 1 and 7 drafted nodes: priced at 2 and 8 rows, not at 5
    for run in mixed["runs"]:
        if run["config"] == r["config"] and run["rep"] == 0 and run["temperature"] == 0.0:
            run["stats"]["drafted"] = [1, 7]
    r3 = next(x for x in answer.where_time_goes(mixed, 0.0) if x["config"] == r["config"])
    assert r3["verify"] == pytest.approx((0.9 + 1.7) / 2 / 0.8, rel=0.03)
    narrow = copy.deepcopy(record)
    narrow["verify_curves"] = {"ks": [1, 2], "median_s": {"chain": [1.0, 1.1], "tree": [1.0, 1.1]}}
    with pytest.raises(ValueError, match="measured verify widths"):
        answer.where_time_goes(narrow, 0.0)
    with pytest.raises(ValueError, match="goal must be > 0"):
        answer.where_time_goes(record, 0.0, goal=0)
    assert answer.is_network("x/eagle:eagle-1,topk=4,depth=5/g4") and not answer.is_network("x/suffix/g8")
    assert answer.is_network("x/draft-tree:distil-l1,branch=2") and not answer.is_network(
        "x/lookup+heuristic"
    )
    assert answer.is_tree("x/suffix/g8") and not answer.is_tree("x/suffix,tree=0/g8")
    assert not answer.is_tree("x/mlp:mlp-4,ranks=1") and answer.is_tree("x/mlp:mlp-4")


@pytest.mark.parametrize("name", ["trees", "conditioned"])
def test_where_the_time_goes_is_one_decomposition_for_every_record_with_trees(name, root):
    """The trees and conditioned chapters read the answer chapter's decomposition: on their own records,
    at both temperatures, the terms add up in plain steps, verify_bare is the same verify call in plain
    steps, and the acceptance at depth is the record's."""
    from specdec.analysis import records

    rec = records.newest(root / "results", name)
    for t in rec["temperatures"]:
        rows = answer.where_time_goes(rec, t)
        assert len(rows) == sum(1 for r in rec["trees"]["rows"] if r["temperature"] == t)
        for r in rows:
            assert r["temperature"] == t
            assert r["verify"] + r["c_round"] + r["extra"] == pytest.approx(r["round_cost"])
            t1 = rec["verify_curves"]["median_s"]["chain"][0]
            assert r["verify"] == pytest.approx(r["verify_bare"] * r["plain_step_ms"] / 1e3 / t1)
            assert r["loop_share"] == pytest.approx(1 - t1 / (r["plain_step_ms"] / 1e3))
            source = next(
                x for x in rec["trees"]["rows"] if x["temperature"] == t and x["config"] == r["config"]
            )
            assert r["accept_d1"] == source["accept_at_depth"][0]


def test_campaign_v3s_decoders_in_words():
    """Campaign v3's rows: v2's engine names its library, the drafters trained on the target's own text
    name their drafts, a family under the do-no-harm policy says so, and its setting is its budgets."""
    rec = {"engines": {"lean-q4q8-v2lib-2t": {"engine": "lean", "mode": "q4q8", "threads": 2,
                                               "library": {"commit": "08bbcf4ef85"}}},
           "configs": [{"id": "e/lookup/noharm", "engine": "lean-q4q8-v2lib-2t", "plain": False,
                        "gamma": "do no harm over budgets [0, 4, 8] (margin 0.02)"}]}  # fmt: skip
    assert answer.engine_label(rec, "lean-q4q8-v2lib-2t") == "lean q4q8, 2 threads, C library of 08bbcf4"
    assert answer.label(rec, "e/eagle:eagle-3m,topk=4,depth=5") == "EAGLE-2 (eagle-3m)"
    assert answer.label(rec, "e/lookup+noharm") == "prompt lookup, do-no-harm policy"
    assert answer.setting_words(rec, "e/lookup/noharm") == "do-no-harm policy over budgets 0, 4, 8"
    assert answer.is_network("x/hybrid:eagle-3m,topk=4,depth=5/g8")  # EAGLE-2 drafts where suffix does not


def test_every_card_named_by_a_source_exists():
    from specdec.analysis.beyond import card_name, card_of

    names = {card_name(f) for _, fams in SOURCES.values() for f in fams} - {None}
    assert {"distil-l1", "medusa-4", "eagle-1", "eagle-3m", "mlp-self"} <= names
    assert all(card_of(n)["steps"] > 0 for n in names)
    assert card_name("suffix") is None and card_name("hybrid:eagle-3m,topk=4,depth=5") is None
