"""The trees measurement's program, script and reader (issue 29), without timing anything real."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from specdec.analysis import treetables as tt
from specdec.engine.lean import LeanLlama
from specdec.experiments import trees as tb
from specdec.measure.verifykernels import target_verify_curves
from tests.tiny_models import tiny_llama

ROOT = Path(__file__).resolve().parents[1]


class _Tok:
    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return messages[-1]["content"]

    def encode(self, text, add_special_tokens=False):
        return [ord(c) % 50 for c in text[:20]]


def test_the_held_out_prompts_are_the_frozen_file_and_the_record_names_its_hash():
    prompts, sha = tb.heldout_prompts(_Tok())
    assert sha == hashlib.sha256(tb.HELDOUT.read_bytes()).hexdigest()
    tasks = [p["task"] for p in prompts]
    assert {t: tasks.count(t) for t in set(tasks)} == {"summarize": 6, "extract": 6, "code": 6, "chat": 6}
    assert [p["index"] for p in prompts if p["task"] == "code"] == list(range(6))
    # the committed records were measured on exactly this file: editing it breaks them
    for path in sorted((ROOT / "results" / "bench").glob("trees-*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if not record["settings"].get("quick"):
            assert record["settings"]["prompts_sha256"] == sha, path.name


def test_a_malformed_prompt_file_is_refused(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"id": "a", "task": "chat", "prompt": 5}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="line 1"):
        tb.heldout_prompts(_Tok(), bad)


def test_verify_curves_time_chain_and_tree_calls_on_a_tiny_model():
    model = LeanLlama(tiny_llama(0), "float32")
    v = target_verify_curves(model, prefix_len=8, ks=(1, 2, 5), repeats=2)
    assert v["ks"] == [1, 2, 5] and v["v_chain"][0] == 1.0
    assert len(v["samples_s"]["tree"][2]) == 2 and all(t > 0 for t in v["median_s"]["tree"])


def _run(temp, prompt, config, rep, rate, task="summarize", stats=None):
    row = {"temperature": temp, "task": task, "prompt": prompt, "config": config, "rep": rep,
           "engine": config.split("/")[0],
           "drafter": "plain" if config.endswith("plain") else config.split("/")[1],
           "decode_s": 100 / rate, "new_tokens": 100, "draft_s": 0.01, "rounds": 50}  # fmt: skip
    if stats is not None:
        row["stats"] = stats
    return row


def test_tree_summary_pools_rep0_stats_and_prices_the_draft_in_plain_steps():
    st = {"target_calls": 50, "new_tokens": 100, "rounds": 50, "drafted_tokens": 200, "accepted_tokens": 50,
          "draft_calls": 50, "examined_at": [50, 20], "accepted_at": [30, 10]}  # fmt: skip
    runs = [_run(0.0, "p", "e/plain", 0, 100.0), _run(0.0, "p", "e/suffix/g8", 0, 150.0, stats=st),
            _run(0.0, "p", "other/plain", 0, 10.0)]  # another engine's plain run: not the step  # fmt: skip
    row = tb.tree_summary({"runs": runs})["rows"][0]
    assert row["tokens_per_call"] == 2.0 and row["nodes_per_round"] == 4.0
    assert row["accept_at_depth"] == [0.6, 0.5]
    assert row["c_round_median"] == pytest.approx(0.01 / 50 / (1 / 100))  # draft per round / plain step


def _fam(task, family, est, low, high=2.0, temp=0.0):
    ratio = {"estimate": est, "low": low, "high": high, "verdict": "x"}
    return {"family": f"e/{family}", "chosen_on_half": {"0": f"e/{family}/g4", "1": f"e/{family}/g4"},
            "tok_s": {"estimate": 100.0 * est}, "vs_fastest_plain": ratio}  # fmt: skip


def _analysis(copy_est, copy_low, chat_est, tree_est, tree_low):
    strata = []
    for temp in (0.0, 1.0):
        for task in ("summarize", "extract", "code", "chat", "all"):
            est = copy_est if task in tt.COPY_TASKS else chat_est if task == "chat" else 1.1
            families = [_fam(task, "suffix", est, copy_low if task in tt.COPY_TASKS else 0.9),
                        _fam(task, "lookup-tree,min_ngram=2", 0.5, 0.4),
                        _fam(task, "suffix,tree=0", 0.5, 0.4),
                        _fam(task, "draft-tree:distil-l1,branch=2", tree_est, tree_low),
                        _fam(task, "draft-tree:distil-l1,branch=3", 0.5, 0.4)]  # fmt: skip
            strata.append({"temperature": temp, "task": task, "families": families,
                           "fastest_plain_tok_s": {"estimate": 100.0}})  # fmt: skip
    return {"strata": strata}


def test_the_goal_rules_decide_at_their_bounds_exactly():
    met = tt.goals({}, _analysis(1.3, 1.01, 0.95, 1.0, 1.001))
    assert tt.goals_met(met) == {1: True, 2: True, 3: True}
    assert [g["family"] for g in met if g["met"]] == ["suffix", "suffix", "draft-tree:distil-l1,branch=2"]
    # every family named in advance is judged, none picked on the data
    assert {g["family"] for g in met if g["goal"] == 1} == set(tt.LOOKUP_FAMILIES)
    missed = tt.goals({}, _analysis(1.2999999, 1.01, 0.9499999, 1.0, 1.0))
    assert tt.goals_met(missed) == {1: False, 2: False, 3: False}
    assert not tt.goals_met(tt.goals({}, _analysis(1.5, 1.0, 1.0, 1.2, 1.1)))[1]  # an interval touching 1


def test_the_command_refuses_bad_arguments_and_an_incomplete_record(tmp_path, capsys):
    from specdec.cli.app import main

    for argv in (["--repeats", "0"], ["--new-tokens", "1"], ["--threads", "0"], ["--budget-s", "-1"]):
        assert main(["run", "trees", *argv]) == 2
        assert argv[0] in capsys.readouterr().err
    partial = tmp_path / "r.json"
    partial.write_text(json.dumps({"complete": False}), encoding="utf-8")
    assert main(["run", "trees", "--reanalyse", str(partial)]) == 2
    assert "is not a complete record" in capsys.readouterr().err


def _self_record(tokens_t0, depth1, noharm_est, noharm_high, top_est, top_low, differ=None):
    """A minimal complete ``self`` record: tree rows of two EAGLE configurations, the simultaneous
    analysis of a fixed family and a do-no-harm one, and one greedy run."""
    from specdec.analysis import condtables as ct  # noqa: F401 (imported where used)

    rows = []
    for temp in (0.0, 1.0):
        for cfg, tpc in (("eagle:eagle-ttt/g4", tokens_t0), ("eagle:eagle-ttt,topk=4,depth=5/g8", 1.5)):
            rows.append({"temperature": temp, "config": f"e/{cfg}", "tokens_per_call": tpc - temp * 0.4,
                         "accept_at_depth": [depth1, 0.5]})  # fmt: skip
        rows.append({"temperature": temp, "config": "e/eagle:eagle-ttt/noharm", "tokens_per_call": 9.0,
                     "accept_at_depth": [0.9]})  # fmt: skip
    strata = []
    for temp in (0.0, 1.0):
        for task in ("code", "all"):
            families = [_fam(task, "suffix", top_est - temp * 0.3, top_low),
                        _fam(task, "suffix+noharm", noharm_est, 0.9, noharm_high)]  # fmt: skip
            strata.append({"temperature": temp, "task": task, "fastest_plain_tok_s": {"estimate": 100.0},
                           "families": families})  # fmt: skip
    run = {"drafter": "eagle:eagle-ttt", "rep": 0, "temperature": 0.0, "config": "e/eagle:eagle-ttt/g4",
           "first_divergence_from_plain": differ}  # fmt: skip
    return {"trees": {"rows": rows}, "simultaneous": {"strata": strata}, "runs": [run]}


def test_the_self_goal_rules_decide_at_their_bounds_exactly():
    from specdec.analysis import condtables as ct

    met = ct.goals_self(_self_record(2.2, 0.6, 0.98, 0.99, 1.5, 1.0001))
    assert [g["met"] for g in met] == [True] * len(met)
    first = met[0]
    assert first["config"] == "eagle:eagle-ttt/g4" and first["tokens_per_call_t1"] == pytest.approx(1.8)
    assert len([g for g in met if g["goal"] == 2]) == 4  # every task x temperature cell of the policy
    missed = ct.goals_self(_self_record(2.1999, 0.5999, 0.9799, 1.0, 1.4999, 1.0, differ=3))
    assert [g["met"] for g in missed] == [False] * len(missed)
    rescued = ct.goals_self(_self_record(2.2, 0.6, 0.97, 1.0001, 1.5, 1.1))  # an interval reaching above 1
    assert all(g["met"] for g in rescued if g["goal"] == 2)


def test_the_greedy_handicap_is_the_plain_step_beyond_a_never_drafting_policy_round():
    """condtables.greedy_handicap: ms per token of the plain decoder's sampling step against the tree
    loop's, from a do-no-harm configuration that never drafted greedily; none such: ValueError."""
    from specdec.analysis import condtables as ct

    def run(config, verify_s, decode_s, drafted):
        return {"config": config, "temperature": 0.0, "verify_s": verify_s, "decode_s": decode_s,
                "new_tokens": 10, "stats": {"drafted": drafted}}  # fmt: skip

    configs = [{"id": "p/plain", "plain": True, "threads": 2}, {"id": "p/a/noharm", "plain": False},
               {"id": "p/b/noharm", "plain": False}]  # fmt: skip
    rec = {"settings": {"threads": 2}, "configs": configs,
           "runs": [run("p/plain", 0.006, 0.06, [0] * 10), run("p/a/noharm", 0.003, 0.05, [0, 2, 0]),
                    run("p/b/noharm", 0.002, 0.057, [0] * 10)]}  # fmt: skip
    hc = ct.greedy_handicap(rec)
    assert hc["never_drafted"] == ["p/b/noharm"]
    assert hc["plain_verify_ms"] == pytest.approx(0.6) and hc["tree_verify_ms"] == pytest.approx(0.2)
    assert hc["share"] == pytest.approx(0.4 / 6.0)
    rec["runs"][2]["stats"]["drafted"] = [1]
    with pytest.raises(ValueError, match="no do-no-harm configuration"):
        ct.greedy_handicap(rec)


def test_trees_settings_store_the_plain_decoders_place_only_where_it_changed():
    """A set before the fourteenth judgement stores the settings it always did (a partial record of
    one resumes); ``plain_at="anywhere"`` is stored, and a value paired_block does not know is refused
    before anything loads."""
    base = dict(quick=False, new_tokens=128, repeats=5, threads=2, seed=0, configs={"suffix": (8,)},
                prompts_file="x.jsonl", prompts_sha256=None, machine={})  # fmt: skip
    assert "plain_at" not in tb.TreesSettings(**base).to_record()
    assert tb.TreesSettings(**base, plain_at="anywhere").to_record()["plain_at"] == "anywhere"
    with pytest.raises(ValueError, match="plain_at must be one of"):
        tb.TreesSettings(**base, plain_at="last")


def test_the_noharm_sets_decode_their_own_frozen_prompts_with_their_policies():
    """``--set noharm`` judges the do-no-harm policies on prompts no policy ran on (campaign v2's),
    ``--set noharm-v4`` on prompts frozen for it, both with campaign v3's policies (one definition) and
    records of one kind; every other set decodes the trees' held-out prompts; each committed noharm
    record was measured on exactly the file its set names."""
    from specdec.drafting.registry import parse_spec
    from specdec.experiments import campaign3

    names = {"noharm": "campaign-v2.jsonl", "noharm-v4": "noharm-v4.jsonl", "noharm-v5": "noharm-v5.jsonl",
             "noharm-v6": "noharm-v6.jsonl", "noharm-v7": "noharm-v7.jsonl",
             "noharm-v8": "noharm-v8.jsonl", "noharm-v9": "noharm-v9.jsonl",
             "noharm-v10": "noharm-v10.jsonl", "noharm-v11": "noharm-v11.jsonl",
             "noharm-v12": "noharm-v12.jsonl", "noharm-v13": "noharm-v13.jsonl",
             "noharm-v14": "noharm-v14.jsonl", "noharm-v15": "noharm-v15.jsonl",
             "noharm-v16": "noharm-v16.jsonl"}  # fmt: skip
    small_sets = ("noharm-v11", "noharm-v12", "noharm-v13", "noharm-v14", "noharm-v15", "noharm-v16")
    for name, file in names.items():
        assert tb.SETS[name].prompts.name == file and tb.SETS[name].prompts.exists()
        small = name in small_sets  # from the eleventh on, budgets of one and two nodes beside v3's
        assert tb.SETS[name].policies == (tb.SMALL_POLICIES if small else tb.V3_POLICIES)
        assert (tb.SETS[name].kind or name) == "noharm"
        # the eleventh priced by the upper quartile of the run's curves, the others by the steepest
        assert tb.SETS[name].pool == (0.75 if small else 1.0)
        assert tb.SETS[name].quick_policies == {"lookup": (1, 2, 4) if small else (4,)}
        assert tb.SETS[name].shadow == (name in small_sets[1:])  # from the twelfth on, shadow probes
        # from the fourteenth on, the plain decoder anywhere in a repetition's order
        assert tb.SETS[name].plain_at == ("anywhere" if name in small_sets[3:] else "alternate")
    # the seventeenth: the sixteenth's design on the families no judgement before had under the policy
    v17 = tb.SETS["noharm-v17"]
    assert v17.prompts.name == "noharm-v17.jsonl" and v17.prompts.exists() and v17.kind == "noharm"
    assert v17.policies == tb.NEW_POLICIES and v17.full == tb.NOHARM_V17_CONFIGS
    assert (v17.pool, v17.shadow, v17.plain_at) == (0.75, True, "anywhere")
    assert not set(tb.NEW_POLICIES) & set(tb.SMALL_POLICIES)  # no family judged again
    # with it, every drafter kind of campaign v3 has run under the policy
    kinds = {parse_spec(s).kind for s in campaign3.CONFIGS}
    assert kinds == {parse_spec(s).kind for s in [*tb.SMALL_POLICIES, *tb.NEW_POLICIES]}
    names["noharm-v17"] = "noharm-v17.jsonl"
    assert tb.V3_POLICIES == campaign3.POLICIES
    assert all(s.pool == 1.0 for n, s in tb.SETS.items() if n not in (*small_sets, "noharm-v17"))
    assert tb.SMALL_POLICIES["lookup"] == (1, 2, 4, 8) and tb.SMALL_POLICIES["eagle:eagle-ttt"] == (1, 2, 4)
    assert tb.SMALL_POLICIES["eagle:eagle-3m,topk=4,depth=5"] == (1, 2, 4, 8)
    assert set(tb.SMALL_POLICIES) == set(tb.V3_POLICIES)
    assert all(s.prompts == tb.HELDOUT for name, s in tb.SETS.items() if name not in names)
    assert set(tb.NOHARM_CONFIGS) < set(tb.NOHARM_V4_CONFIGS)
    shas = {f: hashlib.sha256(tb.SETS[n].prompts.read_bytes()).hexdigest() for n, f in names.items()}
    for path in sorted((ROOT / "results" / "bench").glob("noharm-*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if not record["settings"].get("quick"):
            assert record["kind"] == "noharm", path.name
            assert record["settings"]["prompts_sha256"] == shas[record["settings"]["prompts_file"]], path.name


def test_time_per_token_splits_each_configurations_time_by_the_loops_timers():
    from specdec.analysis import condtables as ct

    def run(config, t, new, decode, draft, target, verify, drafted=None):
        r = {"config": config, "temperature": t, "new_tokens": new, "decode_s": decode, "draft_s": draft,
             "target_s": target, "verify_s": verify}  # fmt: skip
        return r | ({"stats": {"drafted": drafted}} if drafted is not None else {})

    record = {
        "settings": {"threads": 2},
        "configs": [
            {"id": "e-2t/plain", "plain": True, "threads": 2},
            {"id": "e-1t/plain", "plain": True, "threads": 1},
            {"id": "e-2t/lookup/noharm", "plain": False, "threads": 2},
        ],  # fmt: skip
        "runs": [
            run("e-2t/plain", 1.0, 100, 0.25, 0.0, 0.2, 0.03),
            run("e-2t/plain", 1.0, 100, 0.25, 0.0, 0.2, 0.03),
            run("e-1t/plain", 1.0, 100, 9.0, 0.0, 9.0, 0.0),
            run("e-2t/lookup/noharm", 1.0, 50, 0.15, 0.01, 0.1, 0.02, drafted=[0, 0, 4, 0]),
            run("e-2t/lookup/noharm", 0.0, 50, 1.0, 0.0, 1.0, 0.0),
        ],  # fmt: skip
    }
    plain, lookup = ct.time_per_token(record, 1.0)
    assert plain["configuration"] == "plain" and lookup["configuration"] == "lookup"
    assert plain["target calls"] == pytest.approx(2.0) and plain["sampling, verifying"] == pytest.approx(0.3)
    assert plain["the loop's rest"] == pytest.approx(0.2) and plain["total"] == pytest.approx(2.5)
    assert lookup["draft"] == pytest.approx(0.2) and lookup["total"] == pytest.approx(3.0)
    assert lookup["rounds that draft"] == 0.25 and plain["rounds that draft"] == 0.0
    with pytest.raises(ValueError, match="no run of e-2t/plain at temperature 0.5"):
        ct.time_per_token(record, 0.5)
    for r in record["runs"]:
        r["task"] = "code"
    record["runs"].append(run("e-2t/plain", 1.0, 100, 9.0, 0.0, 9.0, 0.0) | {"task": "chat"})
    assert ct.time_per_token(record, 1.0, "code")[0]["total"] == pytest.approx(2.5)  # the chat run left out
    with pytest.raises(ValueError, match=r"no run of e-2t/lookup/noharm at temperature 1.0 \(task chat\)"):
        ct.time_per_token(record, 1.0, "chat")
    record["runs"][3].pop("stats")  # no stored rounds: the share that drafted is unknown, not 0
    assert np.isnan(ct.time_per_token(record, 1.0, "code")[1]["rounds that draft"])


def test_never_drafting_pairs_the_policies_prompts_that_drafted_nothing_with_plain():
    """condtables.never_drafting: per temperature, the (policy, prompt) pairs whose repetition-0 run drafted
    nothing, each against the plain decoder at the record's threads on its prompt (medians over
    repetitions, geometric mean of plain's time over the policy's); a prompt on which the policy drafted
    is left out, and so is the plain decoder at other threads."""
    from specdec.analysis import condtables as ct

    def run(config, prompt, t, rep, decode, drafted=None):
        r = {"config": config, "prompt": prompt, "temperature": t, "rep": rep, "new_tokens": 100,
             "decode_s": decode}  # fmt: skip
        return r | ({"stats": {"drafted": drafted}} if drafted is not None else {})

    configs = [
        {"id": "e-2t/plain", "plain": True, "threads": 2},
        {"id": "e-1t/plain", "plain": True, "threads": 1},
        {"id": "e-2t/a/noharm", "plain": False, "threads": 2},
    ]
    runs = []
    for p, (plain_s, mine_s, drafted) in enumerate(
        [(0.20, 0.25, [0, 0]), (0.20, 0.16, [0]), (0.2, 0.1, [3, 0])]
    ):
        for rep in range(3):
            runs += [
                run("e-2t/plain", p, 1.0, rep, plain_s + 0.01 * rep),
                run("e-1t/plain", p, 1.0, rep, 0.01),
                run("e-2t/a/noharm", p, 1.0, rep, mine_s + 0.01 * rep, drafted if rep == 0 else None),
            ]
    out = ct.never_drafting({"settings": {"threads": 2}, "configs": configs, "runs": runs}, n_boot=200)
    assert out[1.0]["pairs"] == 2  # the third prompt drafted
    assert out[1.0]["estimate"] == pytest.approx(((0.21 / 0.26) * (0.21 / 0.17)) ** 0.5)
    assert out[1.0]["low"] <= out[1.0]["estimate"] <= out[1.0]["high"]
    assert out[0.0]["pairs"] == 0 and np.isnan(out[0.0]["estimate"])


def test_never_drafting_parts_splits_the_policies_extra_time_by_the_loops_timers():
    """condtables.never_drafting_parts: per temperature and part, the mean over prompts of the median over
    repetitions of (the never-drafting policies' mean - plain's in the same repetition), ms per token; a
    prompt on which every policy drafted is left out, a policy that drafted on a prompt is left out of that
    prompt's mean, ``kinds`` keeps the policies of those drafter kinds, one prompt gives no interval."""
    from specdec.analysis import condtables as ct

    def run(config, prompt, t, rep, target, verify, draft, decode, drafted=None):
        r = {"config": config, "prompt": prompt, "temperature": t, "rep": rep, "new_tokens": 10,
             "target_s": target, "verify_s": verify, "draft_s": draft, "decode_s": decode}  # fmt: skip
        return r | ({"stats": {"drafted": drafted}} if rep == 0 and drafted is not None else {})

    configs = [{"id": "e-2t/plain", "plain": True, "threads": 2}]
    runs = []
    # slow repetitions, skewed: plain's (0, 0.1, 1) ms a token in reps 0-2, the policy's (1, 0, 0.1); the
    # paired differences' median is 0.1 ms below the difference of the medians (which would read 1.5)
    slow = (0.0, 0.001, 0.010)
    for t in (0.0, 1.0):
        for p in range(3):
            for rep in range(3):
                pl = 0.030 + slow[rep]
                # policy a: target +1 ms a token on prompt 0, +2 on prompt 1 (in every repetition but its slow
                # one); draft +0.1 ms; other loop time +0.1 ms (of 10 tokens)
                a_t = 0.030 + 0.010 * (p + 1) + slow[(rep + 2) % 3]
                lookup_t = 0.030 + 0.010 * (p + 3) + slow[(rep + 2) % 3]
                lk = [0] if p == 1 and t == 1.0 else [3]
                runs += [
                    run("e-2t/plain", p, t, rep, pl, 0.002, 0.0, pl + 0.003),
                    run(
                        "e-2t/eagle:x/noharm",
                        p,
                        t,
                        rep,
                        a_t,
                        0.002,
                        0.001,
                        a_t + 0.005,
                        [0] if p < 2 else [1],
                    ),
                    run("e-2t/mlp:y/noharm", p, t, rep, 0.5, 0.5, 0.5, 2.0, [1]),  # drafted: left out
                    # prompt 1 only (at T = 1): a second never-drafting policy, +4 ms a token
                    run("e-2t/lookup/noharm", p, t, rep, lookup_t, 0.002, 0.001, lookup_t + 0.005, lk),
                ]
    record = {"settings": {"threads": 2}, "configs": configs, "runs": runs}
    rows = ct.never_drafting_parts(record, n_boot=200)
    parts = ["target call", "token choice", "policy and drafter", "other loop time", "bookkeeping", "total"]
    assert [(r["temperature"], r["part"]) for r in rows] == [(t, x) for t in (0.0, 1.0) for x in parts]
    got = {(r["temperature"], r["part"]): r for r in rows}
    assert all(r["units"] == 2 for r in rows)  # prompt 2: every policy drafted
    # greedy: prompt 0 +1 ms, prompt 1 +2 ms, each less 0.1 (the median of the paired differences)
    assert got[(0.0, "target call")]["ms"] == pytest.approx(1.4)
    # at T = 1 prompt 1 averages eagle (+2) and lookup (+4) in each repetition: +3, less 0.1
    assert got[(1.0, "target call")]["ms"] == pytest.approx(1.9)
    assert got[(0.0, "target call")]["plain_ms"] == pytest.approx(3.1)
    assert got[(0.0, "token choice")]["ms"] == pytest.approx(0.0, abs=1e-12)
    assert got[(0.0, "policy and drafter")]["ms"] == pytest.approx(0.1)
    assert got[(0.0, "other loop time")]["ms"] == pytest.approx(0.1)
    assert got[(0.0, "other loop time")]["plain_ms"] == pytest.approx(0.1)
    assert got[(0.0, "bookkeeping")]["ms"] == pytest.approx(0.2)
    assert got[(0.0, "total")]["ms"] == pytest.approx(1.6)
    assert got[(0.0, "target call")]["low"] == pytest.approx(0.9) and got[(0.0, "target call")][
        "high"
    ] == pytest.approx(1.9)
    eagle = {
        (r["temperature"], r["part"]): r["ms"]
        for r in ct.never_drafting_parts(record, n_boot=200, kinds=("eagle",))
    }
    assert eagle[(1.0, "target call")] == pytest.approx(1.4)
    only = ct.never_drafting_parts(record, n_boot=200, kinds=("lookup",))
    assert [r["temperature"] for r in only] == [1.0] * len(parts) and all(r["units"] == 1 for r in only)
    one = next(r for r in only if r["part"] == "target call")
    assert one["ms"] == pytest.approx(3.9) and np.isnan(one["low"]) and np.isnan(one["high"])


def test_plain_position_splits_the_never_drafting_prompts_by_where_plain_ran():
    """condtables.plain_position: the stored order of an engine's runs of a (prompt, repetition) is the order
    they ran; each prompt is a unit per place plain took in its own engine's block (first, between, last;
    another engine's runs do not count): plain's times in those repetitions against the geometric mean of the
    never-drafting policies' (medians over the repetitions, geometric mean over prompts); a policy that
    drafted on a prompt is left out of it, and a prompt where none is left drops; temperatures apart."""
    from specdec.analysis import condtables as ct

    def run(config, engine, prompt, t, rep, decode, drafted=None):
        r = {"config": config, "engine": engine, "prompt": prompt, "temperature": t, "rep": rep,
             "new_tokens": 100, "decode_s": decode}  # fmt: skip
        return r | ({"stats": {"drafted": drafted}} if drafted is not None else {})

    configs = [{"id": "e-2t/plain", "plain": True, "threads": 2},
               {"id": "e-1t/plain", "plain": True, "threads": 1},
               {"id": "e-2t/a/noharm", "plain": False, "threads": 2},
               {"id": "e-2t/b/noharm", "plain": False, "threads": 2},
               {"id": "e-2t/c/g4", "plain": False, "threads": 2}]  # fmt: skip
    # plain first twice, between twice, last twice; the 1t plain after the block never makes plain "between"
    orders = [("plain", "a", "b", "c"), ("a", "plain", "b", "c"), ("b", "a", "c", "plain"),
              ("plain", "c", "a", "b"), ("c", "b", "plain", "a"), ("a", "b", "c", "plain")]  # fmt: skip
    slow = {"first": 1.10, "between": 1.20, "last": 1.30}  # the policies' time over plain's, by plain's place
    drafted = {("a", 0): [0], ("b", 0): [0, 0], ("a", 1): [0], ("b", 1): [1], ("a", 2): [3], ("b", 2): [2]}
    runs = []
    for t in (0.0, 1.0):
        for p in range(3):
            for rep, order in enumerate(orders):
                place = "first" if order[0] == "plain" else "last" if order[-1] == "plain" else "between"
                plain_s = 0.1 * (p + 1) * (1 + 0.01 * rep) * (1 + t)  # prompts and repetitions differ
                for name in order:
                    if name == "plain":
                        runs.append(run("e-2t/plain", "e-2t", p, t, rep, plain_s))
                    elif name in "ab":
                        own = slow[place] * (1.0 if name == "a" else 1.05**2)
                        runs.append(run(f"e-2t/{name}/noharm", "e-2t", p, t, rep, plain_s * own,
                                        drafted[(name, p)] if rep == 0 else None))  # fmt: skip
                    else:
                        runs.append(run("e-2t/c/g4", "e-2t", p, t, rep, 0.05))
                runs.append(run("e-1t/plain", "e-1t", p, t, rep, 0.3))
    record = {"settings": {"threads": 2}, "configs": configs, "runs": runs}
    rows = ct.plain_position(record, n_boot=200)
    assert [(r["temperature"], r["place"]) for r in rows] == [(t, p) for t in (0.0, 1.0) for p in ct.PLACES]
    for r in rows:
        # prompt 0: a and b never drafted (their geometric mean 1.05 x a); prompt 1: a only; prompt 2: none
        assert r["units"] == 2 and r["runs"] == 4
        want = (1 / (slow[r["place"]] * 1.05) * 1 / slow[r["place"]]) ** 0.5
        assert r["estimate"] == pytest.approx(want)
        assert r["low"] <= r["estimate"] <= r["high"] and r["low"] < r["high"]  # the two prompts differ
    # places pooled: every repetition of a prompt in one unit (medians over its six repetitions)
    pooled = ct.plain_position(record, n_boot=200, by_place=False)
    assert [(r["temperature"], r["place"], r["units"], r["runs"]) for r in pooled] == [
        (0.0, "any", 2, 12),
        (1.0, "any", 2, 12),
    ]
    assert 1 / (1.30 * 1.05) < pooled[0]["estimate"] < 1 / 1.10


def test_nodes_mix_bins_every_policy_round_of_repetition_zero_by_the_nodes_proposed():
    """condtables.nodes_mix: per (policy configuration, temperature), the repetition-0 rounds by nodes
    proposed into NODE_BINS, shares summing to 1; other repetitions and configurations without a policy
    are left out, and a bin no round fell in is 0."""
    from specdec.analysis import condtables as ct

    runs = [
        {"config": "e-2t/a/noharm", "rep": 0, "temperature": 0.0, "stats": {"drafted": [0, 1, 1, 2, 4, 8]}},
        {
            "config": "e-2t/a/noharm",
            "rep": 0,
            "temperature": 0.0,
            "stats": {"drafted": [0, 0, 3, 9], "shadow_rounds": 1},
        },
        {"config": "e-2t/a/noharm", "rep": 1, "temperature": 0.0, "stats": {"drafted": [8] * 50}},
        {"config": "e-2t/a/noharm", "rep": 0, "temperature": 1.0, "stats": {"drafted": [0, 0]}},
        {"config": "e-2t/a/g4", "rep": 0, "temperature": 0.0, "stats": {"drafted": [4, 4]}},
    ]
    rows = ct.nodes_mix({"runs": runs})
    assert [(r["temperature"], r["config"], r["rounds"]) for r in rows] == [
        (0.0, "a/noharm", 10),
        (1.0, "a/noharm", 2),
    ]
    assert [rows[0][b] for b, _, _ in ct.NODE_BINS] == pytest.approx([0.3, 0.2, 0.1, 0.2, 0.1, 0.1])
    assert rows[1]["0"] == 1.0 and rows[1]["5-8"] == 0.0
    assert sum(rows[0][b] for b, _, _ in ct.NODE_BINS) == pytest.approx(1.0)
    assert rows[0]["shadow"] == pytest.approx(0.1) and rows[1]["shadow"] == 0.0  # a record before them: 0


def test_the_noharm_judgement_of_a_committed_record_and_a_broken_copy():
    """condtables.noharm_judgement on the committed do-no-harm record of campaign v2's prompts: goal 2's
    cells are the simultaneous analysis's family rows under the policy, a failing cell's parts add up to
    its extra time, the pairs that never drafted decoded plain tokens; a copy in which one such run's
    tokens differ from plain decoding's is refused."""
    import copy

    from specdec.analysis import condtables as ct

    path = ROOT / "results" / "bench" / "noharm-amd-epyc-2t.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    j = ct.noharm_judgement(record)
    fams = [r for r in tt.family_rows(record["simultaneous"]) if r["family"].endswith("+noharm")]
    assert len(j["cells"]) == len(fams) and set(j["pooled"]) == {0.0, 1.0}
    assert sum(not r["met"] for r in j["cells"]) == len(j["failing"])
    for f in j["failing"]:
        parts = sum(v for k, v in f["extra"].items() if k != "total")
        assert parts == pytest.approx(f["extra"]["total"]) and f["extra"][f["largest"]] == max(
            v for k, v in f["extra"].items() if k != "total"
        )
    assert j["never"] and all(n["ratio"] > 0 for n in j["never"])
    assert j["gc_ms"]["suffix/noharm"] > 0 and j["gc_ms"]["plain"] == 0
    broken = copy.deepcopy(record)
    quiet = j["never"][0]
    cid = next(c["id"] for c in broken["configs"] if c["id"].endswith(f"/{quiet['family']}/noharm"))
    run = next(r for r in broken["runs"] if r["config"] == cid and r["temperature"] == quiet["temperature"])
    run["tokens_sha256"] = "0" * 16
    with pytest.raises(ValueError, match="never drafted"):
        ct.noharm_judgement(broken)


def test_a_shadow_probe_of_a_sampling_drafter_may_change_the_tokens():
    """In the seventeenth judgement's record, a policy over the distilled draft's tree verified no draft at
    temperature 1, yet on prompts where it made shadow probes its tokens differ from plain decoding's: the
    draft model sampled from the generator in each probe, and the step's token was drawn with a later
    uniform (its law is the same: tests/test_shadow_probe.py's chi-square). noharm_judgement leaves only
    those prompts out of its check that a never-drafting policy decodes plain's tokens: a copy whose
    run differs on a prompt without a probe, on a probed prompt greedy, or on a probed prompt of a drafter
    that drafts deterministically (Medusa) is refused."""
    import copy

    from specdec.analysis import condtables as ct

    path = ROOT / "results" / "bench" / "noharm-v17-amd-epyc-2t.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    j = ct.noharm_judgement(record)
    threads = record["settings"]["threads"]
    plain = next(c["id"] for c in record["configs"] if c["plain"] and c["threads"] == threads)
    sha = {(r["prompt"], r["rep"], r["temperature"]): r["tokens_sha256"]
           for r in record["runs"] if r["config"] == plain}  # fmt: skip
    never = {(n["family"], n["temperature"]) for n in j["never"]}

    def rep0(family, t):
        cid = next(c["id"] for c in record["configs"] if c["id"].endswith(f"/{family}/noharm"))
        return cid, [
            r for r in record["runs"] if r["config"] == cid and r["temperature"] == t and r["rep"] == 0
        ]

    tree = "draft-tree:distil-l1,branch=2"
    assert {(tree, 0.0), (tree, 1.0), ("medusa:medusa-self", 1.0)} <= never
    tree_id, runs = rep0(tree, 1.0)
    probed = [r for r in runs if r["stats"]["shadow_rounds"]]
    assert probed and any(r["tokens_sha256"] != sha[(r["prompt"], 0, 1.0)] for r in probed)
    quiet = [r for r in runs if not r["stats"]["shadow_rounds"]]
    assert quiet and all(r["tokens_sha256"] == sha[(r["prompt"], 0, 1.0)] for r in quiet)
    cases = [(tree_id, 1.0, quiet[0]["prompt"])]
    for family, t in ((tree, 0.0), ("medusa:medusa-self", 1.0)):  # greedy; a deterministic drafter
        cid, runs = rep0(family, t)
        cases.append((cid, t, next(r["prompt"] for r in runs if r["stats"]["shadow_rounds"])))
    for cid, t, prompt in cases:
        broken = copy.deepcopy(record)
        run = next(
            r
            for r in broken["runs"]
            if r["config"] == cid and r["temperature"] == t and r["prompt"] == prompt
        )
        run["tokens_sha256"] = "0" * 16
        with pytest.raises(ValueError, match="decoded other tokens than plain"):
            ct.noharm_judgement(broken)
