"""The loop-cost run's design and summary (specdec.measure.loopcost), on made-up worker results."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.measure.loopcost import ARMS, SPEC_ARMS, LoopCost, arms_of, crossed_ci, summarize


def worker(bare_ms: float, over_ms: dict[str, float], rounds: int, prompts: int, gen, tokens=None):
    """One worker's result: per prompt and arm, seconds per token per round (a shared drift per round)."""
    out = []
    for i in range(prompts):
        drift = gen.normal(0, 0.3, rounds)  # a round's drift falls on every arm alike
        arms = {}
        for arm in ARMS:
            ms = bare_ms + i * 0.1 + drift + (0.0 if arm == "bare" else over_ms[arm])
            arms[arm] = {"s_per_token": list(ms / 1e3), "tokens": tokens or [1, 2, 3]}
        out.append(arms)
    return out


def cells(settings: LoopCost, before: dict, after: dict, *, after_bare: float = 4.0, seed: int = 0):
    gen = np.random.default_rng(seed)
    out = {}
    for threads in settings.threads:
        for rep in range(settings.repeats + 1):
            out[f"{threads}t-{rep}"] = {
                "before": worker(4.0, before, settings.rounds, settings.prompts, gen),
                "after": worker(after_bare, after, settings.rounds, settings.prompts, gen),
            }
    return out


def test_the_overhead_is_paired_by_round_and_its_change_by_repetition():
    settings = LoopCost(threads=(1,), prompts=6, rounds=3, repeats=4)
    before, after = {"loop-0": 0.30, "loop-1": 0.90}, {"loop-0": 0.10, "loop-1": 0.40}
    # the after process is 10 % slower at everything (another process's luck): the overhead must not see it
    entry = summarize(cells(settings, before, after, after_bare=4.4), settings)["1t"]
    for arm in ("loop-0", "loop-1"):
        est, lo, hi = entry["before"][f"{arm}_minus_bare_ms"]
        assert est == pytest.approx(before[arm], abs=1e-9) and lo <= est <= hi
        assert entry["after"][f"{arm}_minus_bare_ms"][0] == pytest.approx(after[arm], abs=1e-9)
        change = entry["overhead_after_minus_before_ms"][arm][0]
        assert change == pytest.approx(after[arm] - before[arm], abs=1e-9)
        ratio = entry["before"][f"{arm}_over_bare"][0]
        assert 1 < ratio < 1 + before[arm] / 4.0 + 0.01
    # across processes the bare arm shows the processes' difference: after / before ~ 4.4 / 4.0
    assert entry["after_over_before"]["bare"][0] == pytest.approx(1.1, rel=0.03)
    assert entry["after"]["bare_ms"] > entry["before"]["bare_ms"]
    assert entry["greedy_loop_equals_bare"] and entry["versions_agree"]


def skewed() -> tuple[LoopCost, dict]:
    """Two prompts, three rounds, three repetitions, where a difference of medians and a median of paired
    differences part: each round's and each repetition's slowness falls on one arm or one version."""
    settings = LoopCost(threads=(1,), prompts=2, rounds=3, repeats=3)
    loop_ms, bare_ms = (
        [4.3, 4.35, 8.0],
        [4.0, 7.9, 4.2],
    )  # per round: paired 0.3, -3.55, 3.8; medians 4.35 - 4.2
    over = {"after": [0.1, 0.9, 0.15], "before": [0.3, 1.1, 0.9]}  # per repetition: paired -0.2 each but one

    def arms(extra: float) -> dict:
        loop = [ms + extra for ms in loop_ms]
        side = {a: {"s_per_token": [ms / 1e3 for ms in loop], "tokens": [1]} for a in ("loop-0", "loop-1")}
        return {"bare": {"s_per_token": [ms / 1e3 for ms in bare_ms], "tokens": [1]}, **side}

    data = {
        f"1t-{r}": {v: [arms(over[v][r - 1] if r else 0.0) for _ in range(2)] for v in over} for r in range(4)
    }
    return settings, data


def test_a_skewed_round_or_repetition_is_paired_not_compared_by_medians():
    settings, data = skewed()
    entry = summarize(data, settings)["1t"]
    # within a worker: the median over rounds of loop - bare (0.3 + the repetition's extra), not 4.35 - 4.2
    assert entry["after"]["loop-0_minus_bare_ms"][0] == pytest.approx(0.3 + 0.15, abs=1e-9)
    assert entry["after"]["loop-0_over_bare"][0] == pytest.approx(
        np.median(np.array([4.45, 4.5, 8.15]) / [4.0, 7.9, 4.2])
    )
    # after - before paired by repetition: -0.2, -0.2, -0.75 -> -0.2 (the medians' difference would be -0.75)
    assert entry["overhead_after_minus_before_ms"]["loop-0"][0] == pytest.approx(-0.2, abs=1e-9)


def test_the_crossed_interval_sees_a_repetitions_shared_luck():
    """A repetition whose two processes differ for every prompt alike: prompts alone would give a point."""
    values = np.array([[1.0, 1.0, 3.0, 1.0, 1.0]] * 6)  # every prompt, one lucky repetition
    est, lo, hi = crossed_ci(values)
    assert est == 1.0 and lo == 1.0 and hi > 1.0  # resampling repetitions can draw the odd one often
    est, lo, hi = crossed_ci(np.full((4, 3), 2.0), log=True)
    assert est == pytest.approx(2.0) and lo == pytest.approx(2.0) and hi == pytest.approx(2.0)


def test_disagreeing_tokens_are_reported():
    settings = LoopCost(threads=(2,), prompts=3, rounds=1, repeats=1)
    data = cells(settings, {"loop-0": 0.1, "loop-1": 0.2}, {"loop-0": 0.1, "loop-1": 0.2})
    data["2t-1"]["after"][0]["loop-1"]["tokens"] = [9, 9, 9]
    entry = summarize(data, settings)["2t"]
    assert entry["greedy_loop_equals_bare"] and not entry["versions_agree"]
    data["2t-1"]["before"][2]["loop-0"]["tokens"] = [7]
    assert not summarize(data, settings)["2t"]["greedy_loop_equals_bare"]


def test_the_repetition_that_warms_up_is_left_out():
    settings = LoopCost(threads=(1,), prompts=3, rounds=2, repeats=1)  # with repetition 0, a median of 2
    data = cells(settings, {"loop-0": 0.2, "loop-1": 0.5}, {"loop-0": 0.2, "loop-1": 0.5})
    for arms in data["1t-0"]["after"]:
        arms["loop-0"]["s_per_token"] = [1.0, 1.0]  # a cold first repetition: one second a token
    assert summarize(data, settings)["1t"]["after"]["loop-0_minus_bare_ms"][0] == pytest.approx(0.2, abs=1e-9)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("before", " ", "before must name a git commit"),
        ("prompts", 1, "prompts"),
        ("tokens", 1, "tokens"),
        ("rounds", 0, "rounds"),
        ("repeats", 0, "repeats"),
        ("threads", (), "threads must hold at least one value"),
        ("threads", (0,), "each of threads"),
        ("drafter", "mlp:mlp-3m", "drafter must be SPEC@BUDGET"),
        ("drafter", "mlp:mlp-3m@0", "drafter must be SPEC@BUDGET"),
        ("drafter", "nonsense@4", "nonsense"),
    ],
)
def test_bad_settings_are_refused(field, value, message):
    with pytest.raises(ValueError, match=message):
        LoopCost(**{field: value})


def test_speculative_arms_report_verification_per_round_paired_by_repetition():
    """With a drafter the workers time SPEC_ARMS too; the summary gives each version's verification ms per
    round and after - before paired by repetition and prompt (a process's luck on the whole arm cancels)."""
    settings = LoopCost(threads=(2,), prompts=4, rounds=3, repeats=3, drafter="mlp:mlp-3m@4")
    assert arms_of(settings) == ARMS + SPEC_ARMS and arms_of(LoopCost()) == ARMS
    gen = np.random.default_rng(2)
    verify_ms = {"before": {"spec-0": 0.30, "spec-1": 0.90}, "after": {"spec-0": 0.13, "spec-1": 0.55}}
    out = {}
    for rep in range(settings.repeats + 1):
        cell = {}
        for version in ("before", "after"):
            luck = gen.normal(0, 0.05)  # this process's
            prompts = []
            for i in range(settings.prompts):
                arms = {}
                for arm in arms_of(settings):
                    ms = 4.0 + i * 0.1 + gen.normal(0, 0.01, settings.rounds)
                    arms[arm] = {"s_per_token": list(ms / 1e3), "tokens": [1, 2, 3]}
                    if arm in SPEC_ARMS:
                        v = verify_ms[version][arm] + luck + gen.normal(0, 0.002, settings.rounds)
                        arms[arm]["verify_s_per_round"] = list(v / 1e3)
                prompts.append(arms)
            cell[version] = prompts
        out[f"2t-{rep}"] = cell
    entry = summarize(out, settings)["2t"]
    for arm in SPEC_ARMS:
        for version in ("before", "after"):
            est, lo, hi = entry[version][f"{arm}_verify_ms_per_round"]
            assert lo <= est <= hi and abs(est - verify_ms[version][arm]) < 0.1
        est, lo, hi = entry["verify_after_minus_before_ms"][arm]
        assert lo <= est <= hi < 0 and abs(est - (verify_ms["after"][arm] - verify_ms["before"][arm])) < 0.1
        assert arm in entry["after_over_before"]
    assert entry["versions_agree"]
