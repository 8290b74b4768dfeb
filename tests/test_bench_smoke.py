"""Smoke test of ``specdec run hf-bench``'s program (specdec.experiments.hfbench) on a tiny random Llama:
its core functions run
end to end for a few tokens and write a valid results file. No timing is asserted, but every
number the summary derives from the times (ratios, medians, pooled rates, theorem rows) is
recomputed here from the raw times and counts, and every path's tokens must equal a
hand-rolled greedy loop's (fp32).
"""

from __future__ import annotations

import io
import json
import statistics

import pytest
import torch
from tiny_models import tiny_llama

from specdec.measure.core import write_result


@pytest.fixture(scope="module")
def bench():
    from specdec.experiments import hfbench

    return hfbench


def test_the_command_checks_its_options_and_calls_the_package(capsys, monkeypatch):
    from specdec.cli.app import main
    from specdec.engine import builder
    from specdec.engine import models as engine_models
    from specdec.experiments import hfbench

    for argv, option in (
        (["--repeats", "1", "--prompts", "nope"], "--prompts"),
        (["--dtype", "float16"], "--dtype"),
        (["--gammas", "3,10", "--kmax", "8"], "--kmax"),
        (["--repeats", "0"], "--repeats"),
    ):
        assert main(["run", "hf-bench", *argv]) == 2
        assert option in capsys.readouterr().err
    # the options reach the package: stand-ins for the models and every step record their inputs
    calls = {}
    loaded = type("Loaded", (), {"model": "M", "tokenizer": "T", "load_s": 0.5})()
    opened = type("Opened", (), {"base": loaded})()
    monkeypatch.setattr(builder, "open_engine", lambda spec: calls.setdefault("spec", spec) and opened)
    monkeypatch.setattr(engine_models, "set_threads", lambda n: n)
    monkeypatch.setattr(
        hfbench, "render_prompts", lambda tok, names: calls.setdefault("prompts", {"p": [1, 2]})
    )
    monkeypatch.setattr(
        hfbench, "run_suite", lambda models, prompts, s: calls.setdefault("suite", (models, s))
    )
    monkeypatch.setattr(
        hfbench, "measure_curves", lambda models, prefix, s: calls.setdefault("curves", prefix)
    )
    monkeypatch.setattr(hfbench, "summarise", lambda raw, curves, prompts, s: {"float32": {}})
    monkeypatch.setattr(hfbench, "print_tables", lambda summary, s: None)
    monkeypatch.setattr(hfbench, "environment", lambda model: {})
    monkeypatch.setattr(
        hfbench, "write_result", lambda path, record, env: calls.setdefault("written", (path, record))
    )
    argv = [
        "--quick",
        "--dtype",
        "float32",
        "--threads",
        "1",
        "--curve-prefix",
        "7",
        "--out",
        "/tmp/x-{dtype}.json",
    ]
    assert main(["run", "hf-bench", *argv]) == 0
    models_, s = calls["suite"]
    assert models_ == {"float32": "M"}
    assert (calls["spec"].engine, calls["spec"].mode, calls["spec"].device) == ("hf", "float32", "cpu")
    assert (s.max_new_tokens, s.repeats, s.gammas, s.kmax, s.curve_repeats) == (8, 1, (3,), 4, 1)  # --quick
    assert calls["curves"] == 7 and str(calls["written"][0]) == "/tmp/x-float32.json"
    record = calls["written"][1]
    assert record["threads"] == 1
    assert record["command"] == (
        "specdec run hf-bench --quick --dtype float32 --curve-prefix 7 --out '/tmp/x-{dtype}.json'"
    )
    # a value given wins over --quick's
    assert hfbench.HFBenchRun(quick=True, repeats=2).settings().repeats == 2


PROMPTS = {
    "repeats": [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7],  # prompt lookup finds matches here
    "plain": [3, 14, 15, 92, 65, 35],
}


@torch.no_grad()
def argmax_loop(model, ids: list[int], n: int, eos: int | None) -> list[int]:
    """Greedy decoding by hand: a full forward without a cache per token, argmax, stop at EOS."""
    seq = list(ids)
    for _ in range(n):
        seq.append(int(model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].argmax()))
        if seq[-1] == eos:
            break
    return seq[len(ids) :]


def tps(run: dict) -> list[float]:
    return [t["new_tokens"] / t["wall_s"] for t in run["times"]]


def decode_tps(t: dict) -> float:
    return t["new_tokens"] / (t["wall_s"] - t["prefill_s"])


def quotients(a, b) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=True)]


def check_ratio(block: dict, per_repeat: list[float]) -> None:
    assert block["per_repeat"] == pytest.approx(per_repeat, rel=1e-12)
    assert block["median"] == pytest.approx(statistics.median(per_repeat), rel=1e-12)


def test_bench_engine_core_functions_end_to_end(bench, tmp_path, one_thread):
    """Every path decodes what a hand-rolled argmax loop decodes, and every derived number of the
    summary is recomputed here from the raw times and counts it was derived from."""
    s = bench.Settings(
        max_new_tokens=6,
        repeats=2,
        gammas=(2, 3),
        ee_layers=1,
        ee_gamma=2,
        kmax=4,
        curve_repeats=1,
        warmup_tokens=2,
    )
    model = tiny_llama(0, layers=2)
    models = {"float32": model}
    raw = bench.run_suite(models, PROMPTS, s, progress=False)
    curves = bench.measure_curves(models, 8, s)
    summary = bench.summarise(raw, curves, PROMPTS, s)
    rec = summary["float32"]
    assert set(rec["by_prompt"]) == set(PROMPTS)
    vc = rec["verify_cost"]
    assert vc.ks == (1, 2, 3, 4)
    assert vc.ratios == pytest.approx([t.median_s / vc.timings[0].median_s for t in vc.timings], rel=1e-12)
    v_of = dict(zip(vc.ks, vc.ratios, strict=True))
    ee = f"ours_ee{s.ee_layers}_g{s.ee_gamma}"
    for name, r in rec["by_prompt"].items():
        runs = r["runs"]
        # Greedy in fp32: every path gives the hand loop's tokens, and twice the same.
        reference = argmax_loop(model, PROMPTS[name], s.max_new_tokens, s.eos_token_id)
        assert len(reference) == s.max_new_tokens or reference[-1] == s.eos_token_id
        for path, run in runs.items():
            assert run["tokens"] == reference, (name, path)
            assert run["deterministic"] and len(run["times"]) == s.repeats
            assert run["new_tokens"] == len(reference) == run["times"][0]["new_tokens"]
            assert run["tokens_per_s_median"] == pytest.approx(statistics.median(tps(run)), rel=1e-12)
        assert all(ex["identical"] for ex in r["exactness"].values()), r["exactness"]
        # Ratios are the quotients of the tokens/s they name, per repetition, then the median.
        check_ratio(r["ratios"]["ar_ours_over_hf"], quotients(tps(runs["ours_ar"]), tps(runs["hf_greedy"])))
        check_ratio(r["ratios"][ee]["ours_speedup"], quotients(tps(runs[ee]), tps(runs["ours_ar"])))
        for g in s.gammas:
            ours, hf, block = runs[f"ours_pld_g{g}"], runs[f"hf_pld_g{g}"], r["ratios"][f"pld_g{g}"]
            ours_sp = quotients(tps(ours), tps(runs["ours_ar"]))
            hf_sp = quotients(tps(hf), tps(runs["hf_greedy"]))
            check_ratio(block["ours_speedup"], ours_sp)
            check_ratio(block["hf_speedup"], hf_sp)
            check_ratio(block["ours_speedup_over_hf_speedup"], quotients(ours_sp, hf_sp))
            check_ratio(block["ours_over_hf_tokens_per_s"], quotients(tps(ours), tps(hf)))
            rounds = hf["hf_rounds"]  # transformers kept gamma fixed; its counts add up
            assert rounds["rounds"] == len(rounds["drafted"]) == hf["times"][0]["rounds"] >= 1
            assert rounds["max_drafted"] == max(rounds["drafted"]) <= g
            assert rounds["mean_tokens_per_round"] == pytest.approx(hf["new_tokens"] / rounds["rounds"])
        # Our runs' counts add up: each round emits its accepted drafts plus one token.
        for path in [f"ours_pld_g{g}" for g in s.gammas] + [ee]:
            st, t0 = runs[path]["stats"], runs[path]["times"][0]
            assert st["rounds"] == len(st["drafted"]) == len(st["accepted"]) == t0["rounds"]
            assert st["drafted_tokens"] == sum(st["drafted"]) and max(st["drafted"]) <= st["gamma"]
            assert st["accepted_tokens"] == sum(st["accepted"]) <= st["drafted_tokens"]
            assert st["new_tokens"] + st["dropped_after_eos"] == st["accepted_tokens"] + st["rounds"]
            assert st["new_tokens"] == runs[path]["new_tokens"]
            assert st["target_calls"] == t0["target_calls"] == st["rounds"]
        # Theorem rows: each repetition's t1, c, measured speedup and predictions, by hand.
        for path, t in r["theorem"].items():
            st, ar = runs[path]["stats"], runs["ours_ar"]
            gamma, alpha = st["gamma"], st["accepted_tokens"] / st["examined"] if st["examined"] else 0.0
            assert (t["gamma"], t["alpha"], t["rounds"]) == (gamma, pytest.approx(alpha), st["rounds"])
            e_t = sum(alpha**i for i in range(gamma + 1))  # Eq. 1 as a sum
            assert len(t["per_repeat"]) == s.repeats
            for row, ts, ta in zip(t["per_repeat"], runs[path]["times"], ar["times"], strict=True):
                t1 = ta["target_s"] / ta["target_calls"]
                c = ts["draft_s"] / ts["rounds"] / gamma / t1  # the paper's c: per round, over gamma
                assert (row["t1_s"], row["c"]) == (pytest.approx(t1, rel=1e-12), pytest.approx(c, rel=1e-12))
                assert row["measured"] == pytest.approx(decode_tps(ts) / decode_tps(ta), rel=1e-12)
                pred = row["predicted"]
                assert pred["theorem"] == pytest.approx(e_t / (gamma * c + 1), rel=1e-9)
                assert pred["with_verify"] == pytest.approx(e_t / (gamma * c + v_of[gamma + 1]), rel=1e-9)
                v_sum = sum(v_of[k + 1] for k in st["drafted"])
                e_rounds = sum(sum(alpha**i for i in range(k + 1)) for k in st["drafted"])
                cost = ts["draft_s"] / t1 + v_sum  # gamma c per round is the round's draft time
                assert pred["with_drafts"] == pytest.approx(e_rounds / cost, rel=1e-9)
                assert pred["with_observed_T"] == pytest.approx(st["new_tokens"] / cost, rel=1e-9)
            assert t["measured_speedup_median"] == pytest.approx(
                statistics.median(row["measured"] for row in t["per_repeat"]), rel=1e-12
            )
    assert rec["by_prompt"]["repeats"]["runs"]["ours_pld_g3"]["stats"]["drafted_tokens"] > 0
    # All prompts pooled: total tokens over total time per repetition, then the quotients.
    by = rec["by_prompt"]

    def pooled_tps(path):
        return [
            sum(by[p]["runs"][path]["times"][i]["new_tokens"] for p in by)
            / sum(by[p]["runs"][path]["times"][i]["wall_s"] for p in by)
            for i in range(s.repeats)
        ]

    pooled = rec["all_prompts"]
    check_ratio(pooled["ar_ours_over_hf"], quotients(pooled_tps("ours_ar"), pooled_tps("hf_greedy")))
    for g in s.gammas:
        ours_sp = quotients(pooled_tps(f"ours_pld_g{g}"), pooled_tps("ours_ar"))
        hf_sp = quotients(pooled_tps(f"hf_pld_g{g}"), pooled_tps("hf_greedy"))
        check_ratio(pooled[f"pld_g{g}"]["ours_speedup"], ours_sp)
        check_ratio(pooled[f"pld_g{g}"]["ours_speedup_over_hf_speedup"], quotients(ours_sp, hf_sp))
    out = io.StringIO()
    bench.print_tables(summary, s, file=out)
    assert (
        f"{'all prompts':<14} {'':>13} {'':>9} {pooled['ar_ours_over_hf']['median']:6.3f}" in out.getvalue()
    )
    path = write_result(tmp_path / "engine.json", rec, env={"device": "cpu"})
    loaded = json.loads(path.read_text())
    assert loaded["settings"]["gammas"] == [2, 3]
    assert loaded["all_prompts"] == pooled and loaded["by_prompt"]["plain"]["ratios"] == by["plain"]["ratios"]
    assert loaded["verify_cost"]["ratios"] == list(vc.ratios)


def test_record_hf_rounds_restores_the_hook(bench):
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator as Gen

    before = Gen.update_candidate_strategy
    with bench.record_hf_rounds() as rounds:
        assert Gen.update_candidate_strategy is not before
    assert Gen.update_candidate_strategy is before and rounds == []


def test_helpers_and_bad_settings(bench):
    assert bench.cut_at_eos([4, 2, 5, 2], 2) == [4, 2]
    assert bench.cut_at_eos([4, 5], 2) == [4, 5]
    assert bench.divergence([1, 2, 3], [1, 2, 4])["first_divergence"] == 2
    assert bench.divergence([1, 2], [1, 2, 3])["first_divergence"] == 2
    assert bench.divergence([1, 2], [1, 2]) == {
        "identical": True,
        "first_divergence": None,
        "len_a": 2,
        "len_b": 2,
    }
    with pytest.raises(ValueError, match="kmax"):
        bench.Settings(gammas=(3, 10), kmax=8)
    with pytest.raises(ValueError, match="gammas"):
        bench.Settings(gammas=(0,))
    with pytest.raises(ValueError, match="repeats"):
        bench.Settings(repeats=0)
    with pytest.raises(ValueError, match="prompt names"):
        bench.render_prompts(None, ["nope"])


def test_dynamic_gamma_runs_every_configuration_paired_with_plain(one_thread):
    """``specdec run dynamic-gamma``'s measurement (specdec.measure.dynamicgamma) on tiny random Llamas:
    one paired block per prompt and pass, fresh policies per run, the summary from the rows."""
    from tiny_models import perturbed_copy

    from specdec.measure.dynamicgamma import configurations, run, summarize

    target = tiny_llama(0, layers=2)
    draft = perturbed_copy(tiny_llama(0, layers=2), 0.05, 5)
    configs = configurations([1, 2], [0.5], "tiny", target, draft)
    assert list(configs) == [
        "lookup g=1", "lookup g=2", "lookup heuristic", "tiny g=1", "tiny g=2", "tiny heuristic",
        "tiny confidence 0.5",
    ]  # fmt: skip
    prompts = [
        {"task": t, "id": f"{t}{i}", "ids": [5, 6, 7, 8, 5, 6, 7 + i]} for t in ("a", "b") for i in range(2)
    ]
    rows = run(target, configs, prompts, new_tokens=6, repeats=2)
    assert len(rows) == 2 * len(prompts) * (len(configs) + 1)
    assert {r["tokens"] for r in rows} == {6} and {r["config"] for r in rows} == {"plain", *configs}
    summary = summarize(rows, list(configs))
    assert summary["prompts"] == sorted(p["id"] for p in prompts)
    for s in summary["configs"].values():
        est, lo, hi = s["speedup"]
        assert lo <= est <= hi and set(s["per_task"]) == {"a", "b"}


@pytest.mark.parametrize("program", ["dynamic-gamma", "oracle-gamma", "engine-modes"])
def test_the_lean_programs_check_their_counts_in_one_message(program, capsys):
    """The programs' checks name the option, in one message form, before anything loads."""
    from specdec.cli.app import main

    for argv, match in ((["--threads", "0"], "--threads"), (["--new-tokens", "-1"], "--new-tokens")):
        assert main(["run", program, *argv]) == 2
        assert f"{match} must be an integer >= 1; got {argv[1]}" in capsys.readouterr().err
    if program != "engine-modes":
        assert main(["run", program, "--draft", "no-such-draft"]) == 2
        assert "no-such-draft" in capsys.readouterr().err
    else:
        assert main(["run", program, "--engines", "no-such-engine"]) == 2
        assert "unknown engines ['no-such-engine']" in capsys.readouterr().err
        assert main(["run", program, "--ks", "2,4"]) == 2
        assert "--ks must include 1" in capsys.readouterr().err


def test_engine_modes_stores_the_settings_the_committed_records_hold(root):
    """``specdec run engine-modes`` with its defaults stores the settings of the committed one-thread
    engine record (the engines that ran there given, as resolve_engines would give them)."""
    from specdec.experiments.enginemodes import EngineModesRun

    committed = sorted((root / "results" / "bench").glob("engine-modes-*-1t.json"))
    assert committed
    stored = json.loads(committed[0].read_text(encoding="utf-8"))["settings"]
    program = EngineModesRun(engines=stored["engines"])
    assert program.command() == "specdec run engine-modes"
    assert program.settings(tuple(stored["engine_names"])).record() == stored


@pytest.mark.parametrize(
    ("program", "argv", "match"),
    [
        ("q4q8-error", ["--prompts-per-task", "0"], "--prompts-per-task must be an integer >= 1"),
        ("q4q8-error", ["--threads", "0"], "--threads must be an integer >= 1"),
        ("verify-cost", ["--prefix", "0"], "--prefix must be an integer >= 1"),
        ("verify-cost", ["--warmup", "-1"], "--warmup must be an integer >= 0"),
        ("verify-cost", ["--dtype", "float16"], "--dtype must be one of"),
    ],
)
def test_the_other_programs_refuse_bad_options(program, argv, match, capsys):
    from specdec.cli.app import main

    assert main(["run", program, *argv]) == 2
    assert match in capsys.readouterr().err


@pytest.mark.parametrize("program", ["dynamic-gamma", "oracle-gamma"])
def test_the_lean_programs_write_their_records_on_tiny_models(program, tmp_path, monkeypatch, one_thread):
    """``specdec run dynamic-gamma`` and ``oracle-gamma`` end to end (the lean target and draft loaded
    through benchargs.load_lean_with_draft, the package's loops, write_bench_record) with tiny random
    Llamas in place of the real target and draft."""
    from types import SimpleNamespace

    from tiny_models import perturbed_copy

    import specdec.train.workloads
    from specdec.cli.app import main
    from specdec.measure import benchargs

    target = tiny_llama(0, layers=2)
    target.mode = "tiny"
    draft = perturbed_copy(tiny_llama(0, layers=2), 0.05, 5)
    probe = {"modes": {"tiny": {"curve": {str(k): 1.0 + 0.01 * k for k in range(1, 17)}, "exact": True}}}
    base = SimpleNamespace(model=target, tokenizer=None)
    monkeypatch.setattr(
        benchargs, "load_lean_with_draft", lambda mode, name, threads: (target, probe, base, draft)
    )
    prompts = [
        {"task": t, "id": f"{t}{i}", "ids": [5, 6, 7, 8, 5, 6, 7 + i]} for t in ("a", "b") for i in range(2)
    ]
    monkeypatch.setattr(specdec.train.workloads, "evaluation_prompts", lambda tok, n: prompts)
    extra = (
        ["--gammas", "2,1,2", "--confidences", "0.5"] if program == "dynamic-gamma" else ["--max-gamma", "4"]
    )
    out = tmp_path / "record.json"
    assert main(["run", program, "--new-tokens", "6", "--repeats", "1", "--out", str(out), *extra]) == 0
    record = json.loads(out.read_text())
    assert record["kind"] == program and record["mode"] == "tiny"
    assert record["command"].startswith(f"specdec run {program} --new-tokens 6 --out ")
    assert record["environment"]["dtype"] == "tiny" and "out" not in record["settings"]
    if program == "dynamic-gamma":
        assert record["settings"]["gammas"] == [1, 2] and record["settings"]["confidences"] == [0.5]
        assert len(record["rows"]) == len(prompts) * 8 and set(record["summary"]["configs"]) == {
            "lookup g=1", "lookup g=2", "lookup heuristic", "distil-l1 g=1", "distil-l1 g=2",
            "distil-l1 heuristic", "distil-l1 confidence 0.5",
        }  # fmt: skip
    else:
        assert set(record["costs"]) == {"lookup", "distil-l1"} and len(record["rows"]) == len(prompts)
        assert record["settings"] == {
            "threads": 1, "mode": "auto", "prompts_per_task": 3, "new_tokens": 6, "draft": "distil-l1",
            "max_gamma": 4, "c_gamma": 4, "repeats": 1,
        }  # fmt: skip
    # oracle-gamma: a curve shorter than the drafts asked for is refused, naming the option
    if program == "oracle-gamma":
        assert main(["run", program, "--new-tokens", "6", "--max-gamma", "16", "--out", str(out)]) == 2


def test_logit_error_against_the_reference_by_hand(one_thread):
    """``specdec run q4q8-error``'s measurement (specdec.measure.logiterror) on a tiny Llama, bfloat16
    against float32: the largest |logit difference| and the argmax agreement recomputed here."""
    from specdec.engine.lean import LeanLlama
    from specdec.measure.logiterror import logit_error

    model = tiny_llama(0, layers=2)
    models = {"float32": LeanLlama(model, "float32"), "bfloat16": LeanLlama(model, "bfloat16")}
    prompts = [{"ids": [5, 6, 7, 8]}, {"ids": [9, 10]}]
    lines = []
    out = logit_error(models, prompts, ["bfloat16"], log=lines.append)["bfloat16"]
    worst, agree = 0.0, 0
    for p in prompts:
        ids = torch.tensor(p["ids"])
        ref = models["float32"].forward(ids, 0, models["float32"].new_cache(len(ids)))
        low = models["bfloat16"].forward(ids, 0, models["bfloat16"].new_cache(len(ids)))
        worst = max(worst, float((low - ref).abs().max()))
        agree += int((low.argmax(-1) == ref.argmax(-1)).sum())
    assert out["positions"] == 6 and out["max_abs_logit_diff"] == pytest.approx(worst)
    assert out["argmax_agreement"] == agree / 6 and len(lines) == 1
    with pytest.raises(ValueError, match="reference"):
        logit_error(models, prompts, ["q4q8"])
