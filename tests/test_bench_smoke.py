"""Smoke test of benchmarks/bench_engine.py on a tiny random Llama: the script's core functions run
end to end for a few tokens and write a valid results file. No timing is asserted; the
token-for-token checks (ours against transformers, greedy, fp32) are.
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
import sys

import pytest
from tiny_models import tiny_llama

from specdec.measure import write_result


@pytest.fixture(scope="module")
def bench(root):
    path = root / "benchmarks" / "bench_engine.py"
    spec = importlib.util.spec_from_file_location("bench_engine", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_engine"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("bench_engine", None)


PROMPTS = {
    "repeats": [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7],  # prompt lookup finds matches here
    "plain": [3, 14, 15, 92, 65, 35],
}


def test_bench_engine_core_functions_end_to_end(bench, tmp_path, one_thread):
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
    models = {"float32": tiny_llama(0, layers=2)}
    raw = bench.run_suite(models, PROMPTS, s, progress=False)
    curves = bench.measure_curves(models, 8, s)
    summary = bench.summarise(raw, curves, PROMPTS, s)
    rec = summary["float32"]
    assert set(rec["by_prompt"]) == set(PROMPTS)
    for name, r in rec["by_prompt"].items():
        # Greedy in fp32: every path gives the same tokens, and twice the same.
        for pair, ex in r["exactness"].items():
            assert ex["identical"], (name, pair, ex)
        assert all(run["deterministic"] for run in r["runs"].values())
        assert len({run["new_tokens"] for run in r["runs"].values()}) == 1
        assert all(len(run["times"]) == s.repeats for run in r["runs"].values())
        for g in s.gammas:
            hf = r["runs"][f"hf_pld_g{g}"]["hf_rounds"]
            assert hf["rounds"] >= 1 and hf["max_drafted"] <= g  # transformers kept gamma fixed
            assert r["ratios"][f"pld_g{g}"]["ours_speedup"]["median"] > 0
        for t in r["theorem"].values():
            assert 0.0 <= t["alpha"] <= 1.0 and t["c_median"] >= 0
            assert all(math.isfinite(v) and v > 0 for v in t["predicted_median"].values())
            assert len(t["per_repeat"]) == s.repeats
    assert rec["by_prompt"]["repeats"]["runs"]["ours_pld_g3"]["stats"]["drafted_tokens"] > 0
    assert rec["verify_cost"].ks == (1, 2, 3, 4) and rec["verify_cost"].ratios[0] == 1.0
    out = io.StringIO()
    bench.print_tables(summary, s, file=out)
    assert "ours AR tok/s" in out.getvalue()
    path = write_result(tmp_path / "engine.json", rec, env={"device": "cpu"})
    loaded = json.loads(path.read_text())
    assert loaded["settings"]["gammas"] == [2, 3]
    assert loaded["all_prompts"]["ar_ours_over_hf"]["median"] > 0


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
