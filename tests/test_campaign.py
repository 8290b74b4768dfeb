"""specdec.experiments.campaign on tiny random models: cells, stored runs, budget stop, resume, estimate.

No timing thresholds: timings are only checked to be stored and to reproduce the analysis."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specdec.analysis.crossfit import analyse, prompt_rates
from specdec.engine.drafters import EarlyExitDrafter, ModelDrafter, PromptLookupDrafter
from specdec.engine.tinymodels import tiny_llama
from specdec.experiments.campaign import (
    Engine,
    calibrate,
    estimate_seconds,
    partial_path,
    run_campaign,
    spec_configs,
)
from specdec.theory.checks import Refused

NEW = 6
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup():
    target = tiny_llama(0, layers=2)
    draft = tiny_llama(1, layers=1)
    engines = [
        Engine("tiny-a", target, 1, {"engine": "hf", "mode": "float32", "threads": 1}),
        Engine("tiny-b", target, 1, {"engine": "hf", "mode": "float32", "threads": 1, "note": "same model"}),
    ]
    drafters = {
        "lookup": PromptLookupDrafter(),
        "draft:tiny": ModelDrafter(draft),
        "early-exit:1": EarlyExitDrafter(target, 1),
    }
    configs = spec_configs("tiny-a", drafters, [1, 2], adaptive=["lookup"])
    rng = np.random.default_rng(0)
    prompts = [
        {"task": task, "id": f"{task}-{i}", "index": i, "ids": rng.integers(1, 90, size=10).tolist()}
        for task in ("summarize", "code")
        for i in range(2)
    ]
    return engines, configs, prompts


def run(setup, out, **kw):
    engines, configs, prompts = setup
    return run_campaign(
        engines, configs, prompts, out, header={"command": "test"},
        settings={"new_tokens": NEW, "repeats": 1},
        temperatures=(0.0, 1.0), new_tokens=NEW, repeats=1, n_boot=100, progress=False, log=lambda s: None,
        **kw,
    )  # fmt: skip


def strip_times(record):
    """The record without anything measured in seconds (what a resumed run must equal)."""
    timed = ("decode_s", "prefill_s", "draft_s", "target_s", "verify_s", "gc_s")
    runs = [{k: v for k, v in r.items() if k not in timed} for r in record["runs"]]
    skip = ("runs", "crossfit", "cell_seconds", "cell_load", "sessions")
    return {k: v for k, v in record.items() if k not in skip} | {"runs": runs}


def test_configs_cover_every_drafter_gamma_and_policy(setup):
    _, configs, _ = setup
    ids = [c.id for c in configs]
    assert ids == [
        "tiny-a/lookup/g1", "tiny-a/lookup/g2", "tiny-a/draft:tiny/g1", "tiny-a/draft:tiny/g2",
        "tiny-a/early-exit:1/g1", "tiny-a/early-exit:1/g2", "tiny-a/lookup+heuristic/s1",
        "tiny-a/lookup+heuristic/s2",
    ]  # fmt: skip
    assert {c.family for c in configs} == {
        "tiny-a/lookup", "tiny-a/draft:tiny", "tiny-a/early-exit:1", "tiny-a/lookup+heuristic"
    }  # fmt: skip
    with pytest.raises(ValueError, match="adaptive drafter"):
        spec_configs("x", {"lookup": None}, [1], adaptive=["draft"])


def test_full_run_stores_every_run_and_its_analysis_recomputes(setup, tmp_path):
    engines, configs, prompts = setup
    out = tmp_path / "c.json"
    rec = run(setup, out)
    assert rec["complete"] and out.exists() and not partial_path(out).exists()
    saved = json.loads(out.read_text())
    assert saved["command"] == "test" and len(saved["done"]) == 2 * len(prompts)
    n_configs = len(engines) + len(configs)
    assert len(saved["runs"]) == 2 * len(prompts) * n_configs  # every config once per cell (1 repeat)
    ids = {c["id"] for c in saved["configs"]}
    assert {r["config"] for r in saved["runs"]} == ids
    assert all(r["new_tokens"] == NEW for r in saved["runs"])
    # greedy speculative decoding equals greedy plain decoding on the same engine
    greedy = [r for r in saved["runs"] if r["temperature"] == 0.0 and r["engine"] == "tiny-a"]
    assert all(r["first_divergence_from_plain"] is None for r in greedy)
    # the stored analysis is what the stored timings give
    folds = {(p["task"], p["id"]): p["half"] for p in saved["prompts"]}
    again = analyse(saved["runs"], saved["configs"], folds, n_boot=100)
    assert json.loads(json.dumps(again)) == saved["crossfit"]
    rates = prompt_rates(saved["runs"])
    every = next(s for s in saved["crossfit"]["strata"] if s["temperature"] == 0.0 and s["task"] == "all")
    fam = next(f for f in every["families"] if f["family"] == "tiny-a/lookup")
    units = [tuple(u) for u in every["prompts"]]
    own = np.array([rates[(0.0, t, p, "tiny-a/plain")] for t, p in units])
    assert fam["per_prompt"]["same_plain_tok_s"] == pytest.approx(own.tolist())
    chosen = [fam["chosen_on_half"][str(1 - h)] for h in every["folds"]]
    spec = np.array([rates[(0.0, t, p, c)] for (t, p), c in zip(units, chosen, strict=True)])
    assert fam["vs_same_plain"]["estimate"] == pytest.approx(float(np.exp(np.log(spec / own).mean())))


def test_budget_stop_then_resume_equals_an_uninterrupted_run(setup, tmp_path):
    whole = run(setup, tmp_path / "whole.json")
    out = tmp_path / "cut.json"
    first = run(setup, out, budget_s=0.0)  # stops after the first finished cell
    assert not first["complete"] and len(first["done"]) == 1
    assert partial_path(out).exists() and not out.exists()
    stored = json.loads(partial_path(out).read_text())
    assert stored["done"] == first["done"] and len(stored["runs"]) == len(first["runs"])
    second = run(setup, out, budget_s=0.0)
    assert len(second["done"]) == 2  # one more cell per call
    final = run(setup, out)
    assert final["complete"] and out.exists()
    assert [s["cells_done_at_start"] for s in final["sessions"]] == [0, 1, 2]
    a, b = strip_times(final), strip_times(whole)
    for ra, rb in zip(a.pop("runs"), b.pop("runs"), strict=True):
        sa, sb = ra.get("stats", {}), rb.get("stats", {})
        assert ra == rb, {k: (sa.get(k), sb.get(k)) for k in sa.keys() | sb.keys() if sa.get(k) != sb.get(k)}
    assert a == b
    with pytest.raises(Refused, match="other settings"):
        partial_path(out).write_text(json.dumps(stored))
        engines, configs, prompts = setup
        run_campaign(
            engines, configs, prompts, out, settings={"new_tokens": NEW + 1, "repeats": 1},
            new_tokens=NEW + 1, repeats=1, progress=False, log=lambda s: None,
        )  # fmt: skip


def test_calibration_scales_to_an_estimate(setup):
    engines, configs, prompts = setup
    cal = calibrate(engines, configs, prompts[0], new_tokens=4)
    assert set(cal) == {f"{e.name}/plain" for e in engines} | {c.id for c in configs}
    one = estimate_seconds(cal, n_cells=1, repeats=1, new_tokens=4)
    per_token = sum(c["s_per_token"] for c in cal.values())
    prefill = sum(c["prefill_s"] for c in cal.values())
    assert one == pytest.approx(4 * per_token + prefill)
    assert estimate_seconds(cal, n_cells=6, repeats=2, new_tokens=40) == pytest.approx(
        12 * (40 * per_token + prefill)
    )
    # the script's estimate: this run's cells and the full run's grid, from one calibration
    from specdec.experiments.campaign import FULL, TEMPERATURES, estimate_run

    lines = []
    est = estimate_run(engines, configs, prompts, repeats=2, new_tokens=40, gammas=(2,), log=lines.append)
    cal, n_cells = est["calibration"], len(prompts) * len(TEMPERATURES)
    assert est["this_run_s"] == pytest.approx(
        estimate_seconds(cal, n_cells=n_cells, repeats=2, new_tokens=40)
    )
    full_cells = len({p["task"] for p in prompts}) * FULL["prompts"] * len(TEMPERATURES)
    scale = {c.id: len(FULL["gammas"]) for c in configs}
    assert est["full_run_s"] == pytest.approx(
        estimate_seconds(
            cal, n_cells=full_cells, repeats=FULL["repeats"], new_tokens=FULL["new_tokens"], scale=scale
        )
    )
    assert len(lines) == 1 and "estimated: this run" in lines[0]


def _options(argv):
    """``specdec run campaign ARGV``'s program, from its generated parser (nothing runs)."""
    from specdec.experiments import options
    from specdec.experiments.campaign import CampaignRun

    return options.build(CampaignRun, vars(options.parser(CampaignRun).parse_args(argv)))


def test_the_command_s_options_quick_and_refusals(capsys):
    from specdec.cli.app import main
    from specdec.experiments.campaign import FULL, QUICK

    full = _options([]).design()
    assert (full["prompts"], full["new_tokens"], full["repeats"], full["gammas"]) == (
        FULL["prompts"], FULL["new_tokens"], FULL["repeats"], FULL["gammas"]
    )  # fmt: skip
    assert full["prompts"] >= 8  # issue #22: at least 8 prompts per task
    quick = _options(["--quick", "--budget-s", "60", "--gammas", "1,2"])
    assert (quick.design()["prompts"], quick.design()["new_tokens"], quick.design()["gammas"]) == (
        QUICK["prompts"], QUICK["new_tokens"], QUICK["gammas"]
    )  # fmt: skip
    assert quick.budget_s == 60.0 and quick.gammas == (1, 2)  # quick overrides the grid
    assert quick.command() == "specdec run campaign --quick --gammas 1,2 --budget-s 60.0"
    assert _options(["--no-adaptive", "--no-hf", "--threads", "1,2"]).command() == (
        "specdec run campaign --no-adaptive --threads 1,2 --no-hf"
    )
    for bad in (
        ["--prompts", "1"],
        ["--gammas", "0,2"],
        ["--gammas", "2,2"],
        ["--budget-s", "-1"],
        ["--threads", "0"],
        ["--n-boot", "10"],
        ["--reopen", "r.json", "--reopen-temperature", "1"],
        ["--reopen-why", "loaded"],
    ):
        assert main(["run", "campaign", *bad]) == 2
        assert bad[0] in capsys.readouterr().err
    assert main(["run", "campaign", "--prompts", "1"]) == 2
    assert "--prompts must be an integer in [2, 12]" in capsys.readouterr().err


def test_reanalyse_recomputes_the_stored_analysis_and_refuses_a_partial_record(setup, tmp_path):
    from specdec.experiments.campaign import reanalyse

    out = tmp_path / "c.json"
    run(setup, out)
    saved = json.loads(out.read_text())
    assert saved["kind"] == "campaign"
    broken = dict(saved, crossfit={"n_boot": 100, "strata": []})
    out.write_text(json.dumps(broken))
    again = reanalyse(out)
    assert (
        json.loads(out.read_text())["crossfit"]
        == saved["crossfit"]
        == json.loads(json.dumps(again["crossfit"]))
    )
    out.write_text(json.dumps(dict(saved, complete=False)))
    with pytest.raises(ValueError, match="not a complete campaign record"):
        reanalyse(out)
    from specdec.cli.app import main

    assert main(["run", "campaign", "--reanalyse", str(out)]) == 2  # the command says so in one line


def test_every_cell_records_the_load_and_a_reopened_temperature_is_timed_again(setup, tmp_path):
    from specdec.experiments.campaign import reopen

    out = tmp_path / "c.json"
    first = run(setup, out)
    assert set(first["cell_load"]) == set(first["done"])
    assert all("others_busy_cpus" in v or "load_average_1min" in v for v in first["cell_load"].values())
    from specdec.cli.app import main

    reopened = ["--reopen", str(out), "--reopen-temperature", "0", "--reopen-why", "test"]
    assert main(["run", "campaign", *reopened]) == 0  # reopen() through the command
    part = partial_path(out)
    assert part.exists() and not out.exists()
    mid = json.loads(part.read_text())
    assert all(not c.startswith("0|") for c in mid["done"]) and mid["reopened"][0]["why"] == "test"
    assert {r["temperature"] for r in mid["runs"]} == {1.0}
    again = run(setup, out)  # the same command resumes: only the reopened cells run

    def same(rec):
        key = ("temperature", "task", "prompt", "config", "rep")
        out = strip_times(rec) | {"reopened": None, "done": sorted(rec["done"])}
        return out | {"runs": sorted(out["runs"], key=lambda r: tuple(str(r[k]) for k in key))}

    assert again["complete"] and same(again) == same(first)
    with pytest.raises(ValueError, match="temperature must be one of"):
        reopen(out, temperature=0.5, why="x")
