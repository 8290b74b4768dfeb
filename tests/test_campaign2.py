"""Issue 31's second campaign: its frozen prompts, its design's checks, and what the runner gained for it
(an engine in the first repetitions only, a loaded cell timed again with the discarded runs kept, the
estimators of a prompt's repetitions). Tiny random models; no timing thresholds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specdec.analysis.crossfit import ESTIMATORS, prompt_rates
from specdec.engine.drafters import PromptLookupDrafter
from specdec.engine.tinymodels import tiny_llama
from specdec.experiments import campaign as cp
from specdec.experiments import campaign2 as c2

pytestmark = pytest.mark.usefixtures("one_thread")
WORKLOADS = Path(c2.PROMPTS).parents[1]


def test_the_frozen_prompts_are_4_tasks_of_12_and_new():
    rows = [json.loads(line) for line in c2.PROMPTS.read_text(encoding="utf-8").splitlines() if line.strip()]
    tasks = {}
    for r in rows:
        tasks.setdefault(r["task"], []).append(r["id"])
    assert {t: len(v) for t, v in tasks.items()} == {"summarize": 12, "extract": 12, "code": 12, "chat": 12}
    assert len({r["id"] for r in rows}) == 48
    seen = set()
    for path in [*WORKLOADS.glob("*.jsonl"), WORKLOADS / "heldout" / "trees-v1.jsonl"]:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                seen.add(json.loads(line)["prompt"].strip().lower())
    assert not [r["id"] for r in rows if r["prompt"].strip().lower() in seen]


def design(**kw):
    base = {"threads": 2, "machine": {"cpu": "x"}, "git_commit": "abc", "prompts_sha256": "0" * 64,
            "hf_dtype": "bfloat16"}  # fmt: skip
    return c2.Campaign2(**(base | kw))


def test_the_design_is_checked_and_is_the_resume_key():
    d = design()
    rec = d.to_record()
    assert rec["repeats"] == 5 and rec["new_tokens"] == 128 and rec["eos"] is True
    assert rec["configs"]["lookup"] == [2, 4]  # as JSON stores it
    assert json.loads(json.dumps(rec)) == rec
    assert design(repeats=6).to_record() != rec  # another design cannot resume this one
    bad_designs = (
        ({"repeats": 0}, "repeats"),
        ({"hf_dtype": "float16"}, "hf_dtype"),
        ({"threads": 0}, "threads"),
        ({"adaptive": {"draft:x": (1,)}}, "adaptive drafter"),
    )
    for bad, match in bad_designs:
        with pytest.raises(ValueError, match=match):
            design(**bad)


def test_every_family_spec_parses_and_every_setting_is_declared():
    from specdec.drafting.registry import parse_spec

    for spec, values in {**c2.CONFIGS, **c2.QUICK_CONFIGS}.items():
        assert parse_spec(spec).text == spec and values and all(v >= 1 for v in values)
    assert set(c2.ADAPTIVE) <= set(c2.CONFIGS)


def test_prompt_rates_estimators_and_end_to_end():
    runs = [{"temperature": 0.0, "task": "t", "prompt": "p", "config": "c", "new_tokens": 10,
             "decode_s": s, "prefill_s": 1.0} for s in (1.0, 2.0, 4.0)]  # fmt: skip
    key = (0.0, "t", "p", "c")
    assert prompt_rates(runs)[key] == 5.0
    assert prompt_rates(runs, estimator="mean")[key] == pytest.approx((10 + 5 + 2.5) / 3)
    assert prompt_rates(runs, estimator="min_time")[key] == 10.0
    assert prompt_rates(runs, timing="end_to_end")[key] == pytest.approx(10 / 3)
    assert ESTIMATORS == ("median", "mean", "min_time")
    with pytest.raises(ValueError, match="estimator must be one of"):
        prompt_rates(runs, estimator="best")
    with pytest.raises(ValueError, match="timing must be one of"):
        prompt_rates(runs, timing="wall")


@pytest.fixture(scope="module")
def tiny():
    target = tiny_llama(0, layers=2)
    engines = [
        cp.Engine("a", target, 1, {"engine": "hf"}),
        cp.Engine("slow", target, 1, {"engine": "hf"}, repeats=1),
    ]
    configs = cp.spec_configs("a", {"lookup": PromptLookupDrafter()}, [2])
    rng = np.random.default_rng(0)
    prompts = [
        {"task": "x", "id": f"x-{i}", "index": i, "ids": rng.integers(1, 90, size=8).tolist()}
        for i in range(2)
    ]
    return engines, configs, prompts


def run(tiny, out, settings=None, **kw):
    engines, configs, prompts = tiny
    return cp.run_campaign(
        engines, configs, prompts, out, settings=settings or {"s": 1}, temperatures=(0.0,), new_tokens=4,
        repeats=3, n_boot=100, progress=False, log=lambda s: None, **kw,
    )  # fmt: skip


def test_an_engine_with_repeats_runs_in_the_first_repetitions_only(tiny, tmp_path):
    rec = run(tiny, tmp_path / "r.json")
    reps = {e: sorted({r["rep"] for r in rec["runs"] if r["engine"] == e}) for e in ("a", "slow")}
    assert reps == {"a": [0, 1, 2], "slow": [0]}
    assert rec["engines"]["slow"]["repeats"] == 1 and "repeats" not in rec["engines"]["a"]


def test_the_settings_place_plain_in_every_block_and_a_bad_place_is_refused(tiny, tmp_path, monkeypatch):
    seen = []
    real = cp.paired_block

    def spy(*args, **kw):
        seen.append(kw["plain_at"])
        return real(*args, **kw)

    monkeypatch.setattr(cp, "paired_block", spy)
    run(tiny, tmp_path / "r.json", settings={"s": 1, "plain_at": "anywhere"})  # the settings say where
    assert seen and set(seen) == {"anywhere"}
    seen.clear()
    run(tiny, tmp_path / "a.json")  # none said: the alternating rule
    assert seen and set(seen) == {"alternate"}
    seen.clear()
    with pytest.raises(ValueError, match="plain_at must be one of"):
        run(tiny, tmp_path / "s.json", settings={"s": 1, "plain_at": "last"})
    assert not seen and not (tmp_path / "s.json").exists()


def test_each_run_says_its_place_in_its_block_and_its_blocks_turn(tiny, tmp_path):
    """The rows of one (prompt, repetition): per engine, places 0, 1, ... in the stored (run) order, and each
    engine's block one turn of the repetition's engine order."""
    rec = run(tiny, tmp_path / "r.json", settings={"s": 1, "plain_at": "anywhere"})
    blocks: dict = {}
    for r in rec["runs"]:
        blocks.setdefault((r["prompt"], r["rep"]), {}).setdefault(r["engine"], []).append(r)
    for engines in blocks.values():
        assert sorted({rs[0]["turn"] for rs in engines.values()}) == list(range(len(engines)))
        for rs in engines.values():
            assert [r["place"] for r in rs] == list(range(len(rs))) and len({r["turn"] for r in rs}) == 1


def test_a_loaded_cell_is_timed_again_and_its_runs_kept_as_discarded(tiny, tmp_path, monkeypatch):
    """The one runner's retry (specdec.measure.runner.run_cells), through the campaign."""
    from specdec.measure import runner

    calls = {"n": 0}
    real = runner.load_during

    def fake(before, after, wall, threads):
        calls["n"] += 1
        out = real(before, after, wall, threads)
        return out | {"loaded": calls["n"] == 1, "others_busy_cpus": 1.5}

    monkeypatch.setattr(runner, "load_during", fake)
    rec = run(tiny, tmp_path / "r.json", retry_loaded=2)
    assert len(rec["discarded"]) == 1
    gone = rec["discarded"][0]
    assert gone["cell"] == rec["done"][0] and gone["runs"] and "1.50 CPUs busy" in gone["why"]
    assert len(rec["done"]) == 2 and len(rec["cell_load"]) == 2
    assert not any(v["loaded"] for v in rec["cell_load"].values())
    with pytest.raises(ValueError, match="retry_loaded"):
        run(tiny, tmp_path / "s.json", retry_loaded=-1)


def test_the_command_s_options_quick_refusals_and_an_incomplete_record(tmp_path, capsys):
    """``specdec run campaign2`` (:class:`Campaign2Run`): --quick overrides the counts, a bad option is
    one line naming it, --reanalyse refuses a partial record."""
    from specdec.cli.app import main
    from specdec.experiments import options

    ap = options.parser(c2.Campaign2Run)
    quick = options.build(c2.Campaign2Run, vars(ap.parse_args(["--quick", "--repeats", "3"])))
    assert quick.counts() == (16, 1) and c2.Campaign2Run(repeats=3).counts() == (128, 3)
    assert quick.command() == "specdec run campaign2 --quick --repeats 3"
    assert c2.Campaign2Run(llamacpp=False, hf_dtype="bfloat16").command() == (
        "specdec run campaign2 --hf-dtype bfloat16 --no-llamacpp"
    )
    for bad in (["--repeats", "0"], ["--new-tokens", "1"], ["--threads", "0"], ["--budget-s", "-1"],
                ["--hf-dtype", "float16"]):  # fmt: skip
        assert main(["run", "campaign2", *bad]) == 2
        assert bad[0] in capsys.readouterr().err
    partial = tmp_path / "r.json"
    partial.write_text(json.dumps({"complete": False}), encoding="utf-8")
    assert main(["run", "campaign2", "--reanalyse", str(partial)]) == 2
    assert "is not a complete record" in capsys.readouterr().err
