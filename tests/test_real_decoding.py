"""Part IV's summaries (:mod:`specdec.analysis.realtables`, which ``specdec run real-decoding`` calls) on
synthetic runs: every derived number recomputed by hand (medians over repetitions, the speedup's
geometric mean, c, alpha over drafted and all positions, Theorem 3.8), the estimate; and the
program's own parts: the drafter-name parser, its options and resumption's settings check."""

from __future__ import annotations

import json
import shlex
import statistics

import numpy as np
import pytest

from specdec.analysis import realtables
from specdec.cli.app import main
from specdec.experiments import options as program_options
from specdec.experiments.realdecodingrun import RealDecodingRun
from specdec.theory.checks import Refused
from specdec.theory.intervals import ratio_ci
from specdec.theory.speedup import walltime_speedup


def options(argv):
    """``specdec run real-decoding ARGV``'s program, from its generated parser (nothing runs)."""
    return program_options.build(
        RealDecodingRun, vars(program_options.parser(RealDecodingRun).parse_args(argv))
    )


def settings(argv):
    """The run's settings (:class:`specdec.experiments.realdecoding.RealDecoding`) of those options."""
    return options(argv).settings()


GAMMA = 2
PROMPTS = ("p1", "p2", "p3")


def synthetic_runs():
    """Three prompts, three repetitions, plain and one drafter 'd' with hand-picked times."""
    rng = np.random.default_rng(0)
    rows = []
    for i, prompt in enumerate(PROMPTS):
        for rep in range(3):
            plain_s = 1.0 + 0.1 * i + 0.01 * rep
            spec_s = 0.8 + 0.05 * i + 0.02 * rng.random()
            base = {
                "phase": "main",
                "task": "code",
                "temperature": 0.0,
                "prompt": prompt,
                "rep": rep,
                "lenience": 1.0,
                "same_as_rep0": True,
            }
            rows.append(
                base
                | {
                    "drafter": "plain",
                    "gamma": 0,
                    "decode_s": plain_s,
                    "prefill_s": 0.1,
                    "draft_s": 0.0,
                    "rounds": 10,
                    "target_s": plain_s,
                    "target_calls": 10,
                    "new_tokens": 10,
                }
            )
            drafted, accepted = [2, 2, 0, 1], [1, 2, 0, 1]
            row = base | {
                "drafter": "d",
                "gamma": GAMMA,
                "decode_s": spec_s,
                "prefill_s": 0.1,
                "draft_s": 0.04 * (i + 1),
                "rounds": 4,
                "target_s": 0.5,
                "target_calls": 4,
                "new_tokens": 10,
            }
            if rep == 0:
                row["stats"] = {"gamma": GAMMA, "drafted": drafted, "accepted": accepted, "new_tokens": 8}
                row["first_divergence_from_plain"] = None
            rows.append(row)
    tf = [
        {
            "task": "code",
            "temperature": 0.0,
            "prompt": p,
            "drafter": "d",
            "beta_sum": 3.0 + i,
            "drafted": 8,
            "positions": 10,
        }
        for i, p in enumerate(PROMPTS)
    ]
    return rows, tf


def test_table_row_by_hand():
    rows, tf = synthetic_runs()
    curve = {1: 1.0, 2: 1.2, 3: 1.5}
    row = realtables.table_row(rows, tf, "d", GAMMA, curve)

    def med(name, p, key):
        return statistics.median(r[key] for r in rows if r["drafter"] == name and r["prompt"] == p)

    plain = [med("plain", p, "decode_s") for p in PROMPTS]
    spec = [med("d", p, "decode_s") for p in PROMPTS]
    assert (row["measured"], row["measured_low"], row["measured_high"]) == pytest.approx(
        ratio_ci(plain, spec)
    )
    assert row["verdict"] in ("faster", "tie")
    # c: draft time per round / gamma / the same repetition's plain step, median over reps, then prompts
    c_p = []
    for i in range(len(PROMPTS)):
        per_rep = [0.04 * (i + 1) / 4 / GAMMA / ((1.0 + 0.1 * i + 0.01 * rep) / 10) for rep in range(3)]
        c_p.append(statistics.median(per_rep))
    assert row["c"] == pytest.approx(statistics.median(c_p), rel=1e-12)
    assert row["per_prompt"]["c"] == pytest.approx(c_p, rel=1e-12)
    alpha, alpha_all = (3 + 4 + 5) / 24, (3 + 4 + 5) / 30
    assert (row["alpha"], row["alpha_all"], row["alpha_coverage"]) == pytest.approx((alpha, alpha_all, 0.8))
    assert row["theorem"] == pytest.approx(float(walltime_speedup(alpha_all, GAMMA, row["c"])), rel=1e-12)
    assert row["ratio"] == pytest.approx(row["measured"] / row["theorem"], rel=1e-9)
    assert row["ratio_low"] <= row["ratio"] <= row["ratio_high"]
    # pooled rounds: three prompts of the same four rounds; full rounds are the two with k = gamma
    assert row["pooled"]["rounds"] == 12 and row["pooled"]["full_rounds"] == 6
    assert row["pooled"]["rounds_none"] == 3 and row["pooled"]["rounds_short"] == 3
    assert row["pooled"]["accepted_hist"] == [0, 3, 3]
    assert row["greedy_exact"] is True and row["deterministic"] is True
    assert row["verify_cost"] == 1.5
    product = row["theorem"] * row["factor_verify"] * row["factor_drafts"]
    assert product * row["factor_acceptance"] * row["factor_overhead"] == pytest.approx(row["measured"])


def test_drafter_names_are_registry_specs():
    """Issue 41, item 2: a run names its drafters by the registry's specs (before: ee-28, draft-distil-l1)."""
    from specdec.experiments.realdecoding import drafter_names

    trained = ["distil-l1", "distil-l4"]
    assert drafter_names("lookup,drafts,early-exit:28", trained) == [
        "lookup",
        "draft:distil-l1",
        "draft:distil-l4",
        "early-exit:28",
    ]
    assert drafter_names("bigram,bigram,,draft:distil-l4", trained) == ["bigram", "draft:distil-l4"]
    assert drafter_names("lookup,max_ngram=2,unigram", trained) == ["lookup,max_ngram=2", "unigram"]
    for bad, words in (
        ("early-exit:0", "integer >= 1"),
        ("early-exit:x", "integer >= 1"),
        ("draft:nope", "no trained draft 'nope'"),
        ("trigram", "unknown kind 'trigram'"),
        ("suffix", "builds the kinds lookup, unigram, bigram, early-exit, draft; not suffix"),
        ("lookup,depth=2", "option 'depth=2'"),
        ("ee-28", "the older name of early-exit:28"),  # the records' old names: refused, the spec named
        ("draft-distil-l1", "the older name of draft:distil-l1"),
    ):
        with pytest.raises(
            ValueError, match="give registry specs: lookup, unigram, bigram, early-exit:N"
        ) as e:
            drafter_names(bad, trained)
        assert words in str(e.value), (bad, str(e.value))


def test_resume_refuses_other_settings(tmp_path):
    """The settings dataclass's to_record() is the resume key: the same command resumes, another
    setting (repeats; verify_repeats, which the hand-kept key list had left out) is refused, --fresh
    discards, a damaged file is refused."""
    from specdec.measure.runner import open_partial

    def resume(settings):
        return open_partial(settings.partial_path(), settings, fresh=settings.fresh, key="settings_key")

    args = settings(["--no-trained", "--quick", "--out", str(tmp_path)])
    path = tmp_path / "auto-1t-quick.partial.json"
    assert args.partial_path() == path
    assert resume(args) is None  # nothing to resume
    assert "out" not in args.to_record() and "fresh" not in args.to_record()
    path.write_text(json.dumps({"settings_key": args.to_record(), "done": ["x"]}))
    assert resume(args)["done"] == ["x"]
    for flag, value, name in (("--repeats", "4", "repeats"), ("--verify-repeats", "9", "verify_repeats")):
        other = settings(["--no-trained", "--quick", flag, value, "--out", str(tmp_path)])
        with pytest.raises(Refused, match=f"other settings \\({name}\\)"):
            resume(other)
    fresh = settings(["--no-trained", "--quick", "--fresh", "--out", str(tmp_path)])
    assert resume(fresh) is None
    for damaged in ("[1]", '{"settings_key": '):
        path.write_text(damaged)
        with pytest.raises(Refused, match="is damaged and cannot be resumed .*pass --fresh"):
            resume(args)


def test_bad_arguments(capsys):
    for argv, match in (
        (["--repeats", "0"], "--repeats must be"),
        (["--lenience", "0.5"], "must include 1"),
        (["--lenience", "1,1.5"], "must lie in"),
        (["--new-tokens", "4"], "--new-tokens must be >= gamma"),
        (["--timed", "trigram"], "unknown kind 'trigram'"),
        (["--mode", "fp8"], "--mode must be"),
    ):
        assert main(["run", "real-decoding", "--no-trained", *argv]) == 2
        assert match in capsys.readouterr().err


def test_estimate_scales_this_runs_costs():
    rows, _ = synthetic_runs()
    state = {"runs": rows, "sweep_drafters": [], "elapsed_s": 100.0, "setup_s": 30.0, "done": ["a", "b"]}
    full = {"prompts": 8, "new_tokens": 20, "repeats": 3, "timed": ["d"], "sweep": [1, 2], "lenience": [1.0]}
    est = realtables.estimate_full_minutes(state, full)
    plain = 0.1 + 20 * statistics.median(r["decode_s"] / 10 for r in rows if r["drafter"] == "plain")
    spec = 0.1 + 20 * statistics.median(r["decode_s"] / 10 for r in rows if r["drafter"] == "d")
    assert est["main_min"] == pytest.approx(8 * 3 * 2 * 3 * (plain + spec) / 60)
    timed = sum(r["decode_s"] + r["prefill_s"] for r in rows)
    other = (100.0 - timed) / 2 * (48 + 8) + 30.0
    assert est["other_min"] == pytest.approx(other / 60)
    assert est["total_min"] == pytest.approx(est["main_min"] + est["extra_min"] + est["other_min"])


def test_a_killed_run_resumes_to_the_whole_runs_record(tmp_path, monkeypatch, one_thread):
    """``specdec run real-decoding`` on a tiny random Llama: a run killed after two cells, then resumed
    by the same command, stores the runs, generations and alphas of an unbroken run."""
    from types import SimpleNamespace

    from tiny_models import VOCAB, tiny_llama

    from specdec.experiments import realdecoding as realbench

    model = tiny_llama(0, layers=2)
    from specdec.engine.builder import EngineSpec, open_model

    opened = open_model(model, EngineSpec("hf", "float32", 1))
    opened.base = SimpleNamespace(name="tiny_llama(0)", model=model, tokenizer=None, device="cpu")
    engine = realbench.engine_view(opened)
    rng = np.random.default_rng(0)
    prompts = [
        {"task": task, "id": f"{task}-{i}", "ids": rng.integers(3, VOCAB, 6 + i).tolist()}
        for task in ("summarize", "code", "instruct")
        for i in range(2)
    ]
    monkeypatch.setattr(realbench, "load_engine", lambda mode, threads: dict(engine))
    monkeypatch.setattr(realbench, "evaluation_prompts", lambda tok, n: prompts)
    corpus = [rng.integers(3, VOCAB, 20).tolist() for _ in range(4)]
    monkeypatch.setattr(realbench, "ngram_corpus", lambda *a: (corpus, "random ids"))
    argv = [
        "--no-trained",
        "--quick",
        "--prompts",
        "2",
        "--new-tokens",
        "6",
        "--repeats",
        "2",
        "--gamma",
        "2",
    ]
    argv += [
        "--sweep",
        "1,2",
        "--lenience",
        "1",
        "--timed",
        "lookup,bigram",
        "--alpha-only",
        "early-exit:1",
        "--mode",
        "hf-float32",
    ]
    argv += ["--sweep-drafters", "lookup", "--verify-repeats", "1", "--threads", "1", "--ngram-data", "x"]
    monkeypatch.setattr(realbench, "set_threads", lambda n: {"threads": n})

    def record(folder):
        assert main(["run", "real-decoding", *argv, "--out", str(folder)]) == 0
        (path,) = folder.glob("cpu-float32-1t-quick.json")
        return json.loads(path.read_text())

    whole = record(tmp_path / "whole")
    cells, real_cell = [0], realbench.paired_cell

    def dies_at_the_third(*a, **kw):
        cells[0] += 1
        if cells[0] == 3:
            raise KeyboardInterrupt
        return real_cell(*a, **kw)

    monkeypatch.setattr(realbench, "paired_cell", dies_at_the_third)
    assert main(["run", "real-decoding", *argv, "--out", str(tmp_path / "resumed")]) == 130  # killed
    state = json.loads((tmp_path / "resumed" / "hf-float32-1t-quick.partial.json").read_text())
    assert len(state["done"]) == 2 and len(state["generations"]) == 2  # the third cell died unsaved
    monkeypatch.setattr(realbench, "paired_cell", real_cell)
    resumed = record(tmp_path / "resumed")
    assert len(resumed["commands"]) == 2 and not list((tmp_path / "resumed").glob("*.partial.json"))
    command = resumed["command"]
    assert command.startswith("specdec run real-decoding --quick --prompts 2 --new-tokens 6")
    assert options(shlex.split(command)[3:]) == options([*argv, "--out", str(tmp_path / "resumed")])
    timing = ("decode_s", "prefill_s", "draft_s", "target_s", "verify_s", "gc_s")

    def untimed(runs):
        return [{k: v for k, v in r.items() if k not in timing} for r in runs]

    assert untimed(resumed["runs"]) == untimed(whole["runs"])
    assert resumed["teacher_forced"] == whole["teacher_forced"]
    assert resumed["alpha_table"] == whole["alpha_table"]
    gens = [
        json.loads((tmp_path / f / "generations-cpu-float32-1t-quick.json").read_text())
        for f in ("whole", "resumed")
    ]
    assert gens[0] == gens[1]
    assert len(whole["runs"]) == len(resumed["runs"]) > 0 and whole["sweep"]["drafters"] == ["lookup"]
