"""Campaign v3's program (issue 44) without timing anything: its design, its refusals before any load."""

from __future__ import annotations

import pytest

from specdec.experiments import campaign2 as c2
from specdec.experiments import campaign3 as c3
from specdec.experiments.options import Refused


def _settings(**kw):
    base = {"threads": 2, "machine": {"cpu": "x"}, "git_commit": "abc", "prompts_sha256": None}
    return c3.Campaign3Settings(**(base | kw))


def test_the_design_holds_v2s_families_the_self_trained_drafters_and_the_policies():
    assert set(c2.CONFIGS) < set(c3.CONFIGS)
    self_trained = {"mlp:mlp-self", "eagle:eagle-ttt", "eagle:eagle-3m", "hybrid:eagle-3m,topk=4,depth=5"}
    assert self_trained < set(c3.CONFIGS)
    assert set(c3.POLICIES) <= set(c3.CONFIGS)  # every policy's drafter is also measured without it
    stored = _settings().to_record()
    assert stored["temperatures"] == [0.0, 1.0] and stored["eos"] is True
    assert stored["v2_commit"] == c3.V2_COMMIT and stored["repeats"] == 5 and stored["new_tokens"] == 128
    assert c3.PROMPTS.name == "campaign-v3.jsonl" and c3.PROMPTS.exists()
    with pytest.raises(ValueError, match="policy budgets"):
        _settings(policies={"lookup": (4, 4)})
    with pytest.raises(ValueError, match="repeats"):
        _settings(repeats=0)


def test_an_unbuildable_v2_engine_is_refused_before_anything_loads(monkeypatch):
    from specdec.measure import verifykernels as vk

    def no_library(commit):
        raise OSError("that leanq8 has structure sizes [1] (ABI 5); here: [2]")

    def no_build(*a, **k):
        raise AssertionError("nothing may load before the refusal")

    monkeypatch.setattr(vk, "library_at", no_library)
    monkeypatch.setattr(c2, "build", no_build)
    with pytest.raises(Refused, match="--no-v2-engine"):
        c3.build(_settings())


def test_the_command_of_a_run_resumes_it_and_leaves_its_one_off_actions_out():
    run = c3.Campaign3Run(budget_s=3000.0, fresh=True, v2_engine=False)
    assert run.command() == "specdec run campaign3 --no-v2-engine --budget-s 3000.0"
    assert "--reanalyse" not in c3.Campaign3Run(reanalyse="r.json").command()


def test_the_committed_record_ran_after_the_greedy_plain_decoders_fix():
    """The answer chapter says campaign v3's greedy plain decoder takes the argmax, as the speculative loops
    do (commit 0c1a774; campaign v2's built a one-hot row and drew from it): true of every committed v3
    record whose commit descends from that one."""
    import subprocess
    from pathlib import Path

    from specdec.analysis import records

    root = Path(__file__).resolve().parents[1]
    try:
        rec = records.newest(root / "results", "campaign-v3", note=False)
    except FileNotFoundError:
        pytest.skip("no campaign v3 record yet")
    commit = rec["settings"]["git_commit"]
    known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=root, capture_output=True)
    fix = subprocess.run(["git", "cat-file", "-e", "0c1a774^{commit}"], cwd=root, capture_output=True)
    if known.returncode or fix.returncode:
        pytest.skip("this checkout lacks the history (a shallow clone)")
    ancestry = subprocess.run(["git", "merge-base", "--is-ancestor", "0c1a774", commit], cwd=root)
    assert ancestry.returncode == 0, f"campaign v3's commit {commit[:7]} does not contain the argmax fix"
    assert not rec["environment"]["git_dirty"] and rec["complete"]
