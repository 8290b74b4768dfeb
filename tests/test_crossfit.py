"""specdec.analysis.crossfit on synthetic timings whose answer is known (no timing thresholds: made-up
data)."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.analysis.crossfit import TIE, analyse, crossfit_family, fold_of, prompt_rates
from specdec.theory.intervals import bootstrap_ci

N = 8
FOLDS = np.array([fold_of(i) for i in range(N)])  # 0 1 0 1 ...


def test_fold_rule_is_position_mod_2():
    assert [fold_of(i) for i in range(5)] == [0, 1, 0, 1, 0]


def test_a_config_best_on_one_half_only_gets_no_hindsight_interval():
    # x: 1.5x on half 0, 0.9x on half 1 (geomean 1.16: the hindsight pick); y: 1.1x everywhere.
    plain = np.full(N, 100.0)
    x = np.where(FOLDS == 0, 150.0, 90.0)
    y = np.full(N, 110.0)
    res = crossfit_family(np.stack([x, y]), plain, plain[None], FOLDS, n_boot=400)
    # chosen on half 0 -> x, reported on half 1 (0.9); chosen on half 1 -> y, reported on half 0 (1.1)
    assert res["chosen_on_half"] == {"0": 0, "1": 1}
    assert res["vs_same_plain"]["estimate"] == pytest.approx(np.sqrt(0.9 * 1.1))
    assert res["per_prompt"]["tok_s"] == pytest.approx(np.where(FOLDS == 0, 110.0, 90.0).tolist())
    assert res["hindsight"]["chosen"] == 0
    assert res["hindsight"]["vs_same_plain"] == pytest.approx(np.sqrt(1.5 * 0.9))
    assert res["vs_same_plain"]["high"] < res["hindsight"]["vs_same_plain"]
    assert res["vs_same_plain"]["verdict"] != "faster"


def test_a_uniformly_better_config_is_found_and_called_faster():
    rng = np.random.default_rng(0)
    plain = 100 * np.exp(rng.normal(0, 0.02, N))
    fam = np.stack([plain * 0.8, plain * 1.3, plain * 1.1])
    res = crossfit_family(fam, plain, plain[None], FOLDS, n_boot=400)
    assert res["chosen_on_half"] == {"0": 1, "1": 1}
    assert res["vs_same_plain"]["estimate"] == pytest.approx(1.3)
    assert res["vs_same_plain"]["verdict"] == "faster"
    slow = crossfit_family(fam[:1], plain, plain[None], FOLDS, n_boot=400)
    assert slow["vs_same_plain"]["verdict"] == "slower"


def test_swapping_the_halves_gives_the_same_answer():
    rng = np.random.default_rng(1)
    fam = 100 * np.exp(rng.normal(0, 0.3, (3, N)))
    plain = 100 * np.exp(rng.normal(0, 0.1, N))
    plains = np.stack([plain, 100 * np.exp(rng.normal(0.1, 0.1, N))])
    a = crossfit_family(fam, plain, plains, FOLDS, n_boot=300)
    b = crossfit_family(fam, plain, plains, 1 - FOLDS, n_boot=300)
    for key in ("tok_s", "vs_same_plain", "vs_fastest_plain"):
        assert a[key]["estimate"] == pytest.approx(b[key]["estimate"])
    assert a["chosen_on_half"] == {"0": b["chosen_on_half"]["1"], "1": b["chosen_on_half"]["0"]}
    assert a["per_prompt"] == b["per_prompt"]


def test_the_fastest_plain_baseline_is_cross_fitted_too():
    # plain p is fastest on half 0 only (by luck), q steady: the baseline on half 1 is p (chosen on
    # half 0), on half 0 it is q (chosen on half 1) -- never the per-prompt maximum.
    p = np.where(FOLDS == 0, 130.0, 80.0)
    q = np.full(N, 100.0)
    spec = np.full(N, 110.0)
    res = crossfit_family(spec[None], q, np.stack([p, q]), FOLDS, n_boot=300)
    assert res["fastest_plain_on_half"] == {"0": 0, "1": 1}
    base = np.where(FOLDS == 0, 100.0, 80.0)
    assert res["per_prompt"]["fastest_plain_tok_s"] == pytest.approx(base.tolist())
    assert res["vs_fastest_plain"]["estimate"] == pytest.approx(np.exp(np.log(spec / base).mean()))


def test_verdicts_come_from_the_interval_only():
    plain = np.full(N, 100.0)
    noisy = 100 * np.array([1.6, 0.7, 0.7, 1.5, 1.4, 0.75, 0.8, 1.55])  # geomean > 1, interval across 1
    res = crossfit_family(noisy[None], plain, plain[None], FOLDS, n_boot=1000)
    v = res["vs_same_plain"]
    assert v["estimate"] > 1 and v["low"] < 1 < v["high"]
    assert v["verdict"] == TIE


def test_verdict_reads_an_interval_against_its_reference():
    """intervals.verdict: against 1 (a ratio) by default, against ``at`` (0 for a difference) when given;
    an interval touching the reference is a tie; low above high is refused."""
    from specdec.theory.intervals import verdict

    assert verdict(1.01, 1.2) == "faster" and verdict(0.8, 0.99) == "slower" and verdict(0.9, 1.0) == "tie"
    assert verdict(0.01, 0.2, at=0.0) == "faster" and verdict(0.01, 0.2) == "slower"
    assert verdict(-0.2, -0.01, at=0.0, below="less") == "less" and verdict(0.0, 0.2, at=0.0) == "tie"
    with pytest.raises(ValueError, match="low must not exceed high"):
        verdict(0.2, 0.1, at=0.0)


def test_stratified_bootstrap_keeps_each_half():
    vals = np.array([1.0, 100.0] * 4)
    _, low, high = bootstrap_ci(vals, np.mean, n_boot=200, strata=FOLDS.tolist())
    assert low == high == pytest.approx(50.5)  # each half constant and its size kept: no spread


def _runs(rate, temps=(0.0,), tasks=("summarize", "code"), reps=3, per_task=4):
    """Rows as the campaign stores them; decode_s from a known rate, repetition noise symmetric."""
    out = []
    for temp in temps:
        for task in tasks:
            for i in range(per_task):
                for cfg, r in rate(task, i).items():
                    for rep, jitter in zip(range(reps), (1.0, 1.2, 0.9), strict=False):
                        out.append({"temperature": temp, "task": task, "prompt": f"{task}-{i}", "config": cfg,
                                    "rep": rep, "new_tokens": 32, "decode_s": 32 / r * jitter})  # fmt: skip
    return out


CONFIGS = [
    {"id": "a/plain", "engine": "a", "family": "a/plain", "plain": True},
    {"id": "b/plain", "engine": "b", "family": "b/plain", "plain": True},
    {"id": "a/lookup/g1", "engine": "a", "family": "a/lookup", "plain": False},
    {"id": "a/lookup/g4", "engine": "a", "family": "a/lookup", "plain": False},
]


def test_analyse_recomputes_from_stored_timings():
    def rate(task, i):
        return {"a/plain": 100.0 + i, "b/plain": 150.0, "a/lookup/g1": 120.0 + i, "a/lookup/g4": 90.0}

    runs = _runs(rate)
    folds = {(r["task"], r["prompt"]): fold_of(int(r["prompt"].split("-")[1])) for r in runs}
    res = analyse(runs, CONFIGS, folds, n_boot=200)
    med = prompt_rates(runs)
    assert med[(0.0, "code", "code-2", "a/plain")] == pytest.approx(
        32 / np.median([32 / 102 * j for j in (1, 1.2, 0.9)])
    )
    strata = {(s["temperature"], s["task"]): s for s in res["strata"]}
    assert set(strata) == {(0.0, "summarize"), (0.0, "code"), (0.0, "all")}
    every = strata[(0.0, "all")]
    assert every["fastest_plain_chosen_on_half"] == {"0": "b/plain", "1": "b/plain"}
    fam = next(f for f in every["families"] if f["family"] == "a/lookup")
    assert fam["chosen_on_half"] == {"0": "a/lookup/g1", "1": "a/lookup/g1"}
    units = [tuple(u) for u in every["prompts"]]
    spec = np.array([med[(0.0, t, p, "a/lookup/g1")] for t, p in units])
    own = np.array([med[(0.0, t, p, "a/plain")] for t, p in units])
    fast = np.array([med[(0.0, t, p, "b/plain")] for t, p in units])
    assert fam["vs_same_plain"]["estimate"] == pytest.approx(np.exp(np.log(spec / own).mean()))
    assert fam["vs_fastest_plain"]["estimate"] == pytest.approx(np.exp(np.log(spec / fast).mean()))
    assert fam["vs_fastest_plain"]["verdict"] == "slower"
    fixed = {f["config"]: f for f in every["fixed"]}
    g4 = np.array([med[(0.0, t, p, "a/lookup/g4")] for t, p in units])
    assert fixed["a/lookup/g4"]["vs_same_plain"]["estimate"] == pytest.approx(np.exp(np.log(g4 / own).mean()))
    assert fixed["a/lookup/g4"]["vs_same_plain"]["verdict"] == "slower"


def test_any_speculative_is_chosen_across_engines_on_the_other_half():
    """One family of every speculative configuration: on each half the configuration best on the
    other half is reported (here b/lookup/g2 on half 0's prompts, a/lookup/g1 elsewhere), against
    the cross-fitted fastest plain decoder; recomputed from the stored timings."""
    configs = [*CONFIGS, {"id": "b/lookup/g2", "engine": "b", "family": "b/lookup", "plain": False}]

    def rate(task, i):
        # b/lookup/g2 is fastest on odd prompts (half 1) only, a/lookup/g1 on even ones (half 0)
        return {"a/plain": 100.0, "b/plain": 150.0, "a/lookup/g1": 200.0 if i % 2 == 0 else 120.0,
                "a/lookup/g4": 90.0, "b/lookup/g2": 130.0 if i % 2 == 0 else 250.0}  # fmt: skip

    runs = _runs(rate)
    folds = {(r["task"], r["prompt"]): fold_of(int(r["prompt"].split("-")[1])) for r in runs}
    every = {s["task"]: s for s in analyse(runs, configs, folds, n_boot=200)["strata"]}["all"]
    anyspec = every["any_speculative"]
    assert anyspec["configs"] == 3
    assert anyspec["chosen_on_half"] == {"0": "a/lookup/g1", "1": "b/lookup/g2"}
    med = prompt_rates(runs)
    units = [tuple(u) for u in every["prompts"]]
    # half-0 prompts get the half-1 choice and vice versa
    oof = np.array(
        [
            med[(0.0, t, p, "b/lookup/g2" if fold_of(int(p.split("-")[1])) == 0 else "a/lookup/g1")]
            for t, p in units
        ]
    )
    fast = np.array([med[(0.0, t, p, "b/plain")] for t, p in units])
    assert anyspec["vs_fastest_plain"]["estimate"] == pytest.approx(np.exp(np.log(oof / fast).mean()))
    assert anyspec["per_prompt"]["tok_s"] == pytest.approx(oof.tolist())
