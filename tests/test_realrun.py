"""The single definitions of specdec.analysis.realrun against hand computations: first divergence, the
verify cost of rounds as drafted, the gap to Theorem 3.8, the i.i.d. fit and the per-position
rates with their bootstrap intervals."""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import pytest

from specdec.analysis.realrun import (
    first_divergence,
    full_round_counts,
    iid_fit,
    observed_verify_cost,
    position_rates,
    speedup_gap,
    unit_bootstrap,
)
from specdec.theory.intervals import bootstrap_ci, geomean


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 2, 4]) == 2
    assert first_divergence([9, 2], [1, 2]) == 0
    assert first_divergence([1, 2], [1, 2, 3]) == 2  # a strict prefix diverges where it ends
    assert first_divergence([], []) is None
    assert first_divergence(np.array([1, 2]), (1, 2)) is None  # any integer sequences


def test_observed_verify_cost():
    curve = {1: 1.0, 2: 1.5, 3: 2.0, 5: 4.0}
    assert observed_verify_cost([0, 1, 2, 4], curve) == pytest.approx((1 + 1.5 + 2 + 4) / 4)
    with pytest.raises(ValueError, match=r"lacks the call sizes \[4\]"):
        observed_verify_cost([3], curve)
    with pytest.raises(ValueError, match="at least one round"):
        observed_verify_cost([], curve)


def test_speedup_gap_against_a_hand_computation():
    """alpha 7/10, gamma 2, c 1/10, v(k) = 1, 3/2, 2 for k = 1, 2, 3; rounds drafted 2, 2, 0;
    2 tokens a round observed; measured 9/10. Every model and factor in exact arithmetic."""
    F = Fraction
    alpha, gamma, c, measured, t_obs = F(7, 10), 2, F(1, 10), F(9, 10), F(2)
    curve = {1: F(1), 2: F(3, 2), 3: F(2)}
    drafted = [2, 2, 0]

    def e_t(a, k):  # Eq. 1 as a sum
        return sum(a**i for i in range(k + 1))

    a_thm = F(1, 2)  # e.g. prompt lookup's alpha over every position
    theorem = e_t(a_thm, gamma) / (gamma * c + 1)
    with_verify = e_t(a_thm, gamma) / (gamma * c + curve[3])
    cost = sum(gamma * c + curve[k + 1] for k in drafted)
    with_drafts = sum(e_t(alpha, k) for k in drafted) / cost
    v_obs = sum(curve[k + 1] for k in drafted) / 3
    with_observed = t_obs / (gamma * c + v_obs)
    gap = speedup_gap(
        alpha=0.7,
        gamma=2,
        c=0.1,
        curve={k: float(v) for k, v in curve.items()},
        drafted=drafted,
        tokens_per_round=2.0,
        measured=0.9,
        alpha_theorem=0.5,
    )
    want = {
        "verify_cost": curve[3],
        "verify_cost_observed": v_obs,
        "theorem": theorem,
        "with_verify": with_verify,
        "with_drafts": with_drafts,
        "with_observed_T": with_observed,
        "measured": measured,
        "factor_verify": with_verify / theorem,
        "factor_drafts": with_drafts / with_verify,
        "factor_acceptance": with_observed / with_drafts,
        "factor_overhead": measured / with_observed,
        "ratio": measured / theorem,
    }
    assert set(gap) == set(want)
    for key, value in want.items():
        assert gap[key] == pytest.approx(float(value), rel=1e-12), key
    product = gap["theorem"] * gap["factor_verify"] * gap["factor_drafts"]
    assert product * gap["factor_acceptance"] * gap["factor_overhead"] == pytest.approx(0.9, rel=1e-12)
    # alpha_theorem defaults to alpha; full rounds and v = 1 give factors of exactly 1
    flat = {1: 1.0, 2: 1.0, 3: 1.0}
    g = speedup_gap(
        alpha=0.7, gamma=2, c=0.1, curve=flat, drafted=[2, 2], tokens_per_round=2.19, measured=1.0
    )
    assert g["factor_verify"] == pytest.approx(1.0) and g["factor_drafts"] == pytest.approx(1.0)
    assert g["factor_acceptance"] == pytest.approx(1.0)  # 2.19 tokens = E[T](0.7, 2)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"measured": 0.0}, "measured"),
        ({"tokens_per_round": 0.5}, "tokens_per_round"),
        ({"curve": {1: 1.0, 2: 1.2}}, "gamma \\+ 1"),
        ({"drafted": [3]}, "lacks the call sizes"),
    ],
)
def test_speedup_gap_refuses_bad_input(change, match):
    kw = {
        "alpha": 0.5,
        "gamma": 2,
        "c": 0.1,
        "curve": {1: 1.0, 2: 1.2, 3: 1.3},
        "drafted": [2, 1],
        "tokens_per_round": 1.5,
        "measured": 1.1,
    }
    with pytest.raises(ValueError, match=match):
        speedup_gap(**(kw | change))


def test_full_round_counts_is_linear_in_gamma():
    """The same counts as the per-position sums it replaced (O(gamma^2)), and a huge gamma is fast."""
    rng = np.random.default_rng(0)
    for gamma in (1, 2, 5, 9):
        drafted = rng.integers(0, gamma + 1, size=40).tolist()
        accepted = [int(rng.integers(0, k + 1)) for k in drafted]
        got = full_round_counts(drafted, accepted, gamma)
        hist, a_values = got["hist"], np.arange(gamma + 1)
        assert got["examined_at"].tolist() == [int(hist[a_values >= i].sum()) for i in range(gamma)]
        assert got["accepted_at"].tolist() == [int(hist[a_values > i].sum()) for i in range(gamma)]
        assert got["examined_at"].dtype == got["accepted_at"].dtype == np.int64
    start = time.perf_counter()
    big = full_round_counts([50_000, 50_000, 3], [7, 50_000, 3], 50_000)  # the old loop took ~10 s
    assert time.perf_counter() - start < 2.0
    assert big["examined_at"][:8].tolist() == [2] * 8 and big["examined_at"][8:].min() == 1
    assert big["accepted_at"][-1] == 1 and len(big["accepted_at"]) == 50_000


def test_full_round_counts_and_iid_fit():
    # gamma 2: rounds (k, A) = (2, 0), (2, 1), (2, 2), (2, 2), and a short (1, 1) left out
    counts = full_round_counts([2, 2, 2, 2, 1], [0, 1, 2, 2, 1], 2)
    assert counts["hist"].tolist() == [1, 1, 2]
    assert counts["examined_at"].tolist() == [4, 3] and counts["accepted_at"].tolist() == [3, 2]
    fit = iid_fit(counts["hist"])
    # accepted 0 + 1 + 2 + 2 = 5 over examined 1 + 2 + 2 + 2 = 7 positions
    assert fit["rate"] == pytest.approx(5 / 7, rel=1e-12)
    assert fit["rate"] == pytest.approx(counts["accepted_at"].sum() / counts["examined_at"].sum())
    a = 5 / 7
    iid = [1 - a, a * (1 - a), a * a]
    assert fit["iid"] == pytest.approx(iid)
    assert fit["observed"] == pytest.approx([0.25, 0.25, 0.5])
    assert fit["tv"] == pytest.approx(
        0.5 * sum(abs(o - i) for o, i in zip(fit["observed"], iid, strict=True))
    )
    assert fit["mean_observed"] == pytest.approx(1.25) and fit["mean_iid"] == pytest.approx(a + a * a)
    assert (fit["p0_observed"], fit["p0_iid"], fit["rounds"]) == (0.25, pytest.approx(2 / 7), 4)
    # counts drawn from the i.i.d. law itself fit it closely
    rng = np.random.default_rng(0)
    u = rng.random((20000, 4)) < 0.6
    acc = np.where(u.all(axis=1), 4, np.argmin(u, axis=1))
    fit = iid_fit(np.bincount(acc, minlength=5))
    assert fit["rate"] == pytest.approx(0.6, abs=0.01) and fit["tv"] < 0.02
    with pytest.raises(ValueError, match="accepted_hist"):
        iid_fit([0, 0, 0])
    with pytest.raises(ValueError, match="accepted_hist"):
        iid_fit([3])


def test_unit_bootstrap_matches_bootstrap_ci():
    x = np.array([1.1, 0.9, 1.3, 1.05, 0.95, 1.2])
    assert unit_bootstrap(len(x), lambda idx: float(geomean(x[idx]))) == pytest.approx(
        bootstrap_ci(x, geomean)
    )
    with pytest.raises(ValueError, match="n_units"):
        unit_bootstrap(1, lambda idx: 0.0)


def test_position_rates_flat_and_rising():
    # eight prompts whose acceptance is 0.5 at both positions: no rise, the interval covers 0
    ex = [[40, 20]] * 8
    flat = position_rates(ex, [[20, 10]] * 8)
    assert flat["rate"] == pytest.approx([0.5, 0.5])
    assert flat["rise"][1] <= 0 <= flat["rise"][2]
    # rising on every prompt (0.3 -> 0.8): the rise's interval lies above 0
    acc = [[12 + i % 2, 16] for i in range(8)]
    rising = position_rates(ex, acc)
    assert rising["rise"][0] == pytest.approx(0.8 - (12 * 4 + 13 * 4) / 320)
    assert rising["rise"][1] > 0
    for i in range(2):
        assert rising["low"][i] <= rising["rate"][i] <= rising["high"][i]
    # a rise on half the prompts and a fall on the other half: not counted
    mixed = position_rates(ex, [[12, 16]] * 4 + [[28, 2]] * 4)
    assert mixed["rise"][1] < 0
    with pytest.raises(ValueError, match="accepted_at <= examined_at"):
        position_rates([[1, 1], [1, 1]], [[2, 0], [0, 0]])
    with pytest.raises(ValueError, match="units >= 2"):
        position_rates([[1, 1]], [[0, 0]])


def test_unit_bootstrap_drops_undefined_resamples():
    ex, ac = np.array([5, 0, 0, 0]), np.array([3, 0, 0, 0])

    def rate(idx):
        return ac[idx].sum() / ex[idx].sum() if ex[idx].sum() else float("nan")

    # resamples without unit 0 examine nothing: they are dropped, not turned into NaN bounds
    assert unit_bootstrap(4, rate) == (pytest.approx(0.6), pytest.approx(0.6), pytest.approx(0.6))
    est, lo, hi = unit_bootstrap(3, lambda idx: float("nan"))
    assert np.isnan(est) and np.isnan(lo) and np.isnan(hi)
    with pytest.raises(ValueError, match="level"):
        unit_bootstrap(3, rate, level=1.0)
    # a last position examined on few prompts still gets an interval
    pr = position_rates([[10, 2], [10, 0], [10, 0]], [[5, 1], [5, 0], [4, 0]])
    assert np.isfinite(pr["low"][1]) and np.isfinite(pr["rise"][1])


def test_main_record_prefers_the_full_run_then_the_newest(tmp_path):
    import json

    from specdec.analysis.realrun import RECORD_FORMAT, main_record

    def write(tag, when):
        record = {"kind": "real-decoding", "format": RECORD_FORMAT, "tag": tag}
        record["environment"] = {"timestamp_utc": when}
        (tmp_path / f"{tag}.json").write_text(json.dumps(record))

    write("cpu-int4-1t-quick", "2026-12-01T09:00:00Z")
    write("cpu-int4-1t", "2026-11-30T20:00:00Z")
    (tmp_path / "old.json").write_text(json.dumps({"kind": "real-decoding", "tag": "old"}))  # format 1
    assert main_record(tmp_path)["tag"] == "cpu-int4-1t"  # the full run, though older
    write("cpu-q4_1-1t", "2026-12-01T02:47:00Z")  # sorts after int4 by name, but is newer
    assert main_record(tmp_path)["tag"] == "cpu-q4_1-1t"
    write("cpu-a-1t", "2026-12-01T02:47:00Z")  # the same start: the file name decides
    assert main_record(tmp_path)["tag"] == "cpu-a-1t"
    for tag in ("cpu-a-1t", "cpu-q4_1-1t", "cpu-int4-1t"):
        (tmp_path / f"{tag}.json").unlink()
    assert main_record(tmp_path)["tag"] == "cpu-int4-1t-quick"
    (tmp_path / "cpu-int4-1t-quick.json").unlink()
    with pytest.raises(ValueError, match="no real-decoding record"):
        main_record(tmp_path)


def test_machine_probe_reads_the_runs_own_probe_else_the_same_machines_benchmark(tmp_path):
    import json

    from specdec.analysis.realrun import machine_probe

    own = {"rule": "r", "chosen": "int4", "step_ms": {"int4": 16.0}}
    record = {"mode_probe": own, "environment": {"device_name": "AMD EPYC", "threads": 1}}
    assert machine_probe(record, tmp_path) == (own, "this run")
    record["mode_probe"] = None
    assert machine_probe(record, tmp_path) is None  # no benchmark record
    probe = {
        "rule": "lowest median T(1)",
        "mode": "q4_1",
        "machine": {"cpu": "AMD EPYC", "threads": 1},
        "modes": {"q4_1": {"step_s": 0.012}, "float32": {"step_s": 0.037}},
    }
    bench = {"kind": "engine-modes", "chosen_mode": probe, "environment": {"device_name": "AMD EPYC"}}
    (tmp_path / "engine-modes-amd-epyc-1t.json").write_text(json.dumps(bench))
    summary, source = machine_probe(record, tmp_path)
    assert source == "engine-modes-amd-epyc-1t.json" and summary["chosen"] == "q4_1"
    assert summary["step_ms"] == pytest.approx({"q4_1": 12.0, "float32": 37.0})
    # a newer benchmark wins, whatever its name (the first file by name was taken before)
    newer = {**bench, "chosen_mode": {**probe, "mode": "q4q8"}}
    newer["environment"] = {"device_name": "AMD EPYC", "timestamp_utc": "2026-12-01T00:00:00Z"}
    bench["environment"]["timestamp_utc"] = "2026-11-01T00:00:00Z"
    (tmp_path / "engine-modes-amd-epyc-1t.json").write_text(json.dumps(bench))
    (tmp_path / "engine-modes-a-newer.json").write_text(json.dumps(newer))
    summary, source = machine_probe(record, tmp_path)
    assert source == "engine-modes-a-newer.json" and summary["chosen"] == "q4q8"
    record["environment"]["timestamp_utc"] = "2026-11-15T00:00:00Z"  # a run made between the two
    summary, source = machine_probe(record, tmp_path)
    assert source == "engine-modes-amd-epyc-1t.json" and summary["chosen"] == "q4_1"
    record["environment"]["timestamp_utc"] = "2026-10-01T00:00:00Z"  # made before every benchmark
    assert machine_probe(record, tmp_path) is None
    del record["environment"]["timestamp_utc"]
    record["environment"]["threads"] = 2  # another thread count: not the same probe
    assert machine_probe(record, tmp_path) is None
    record["environment"] = {"device_name": "Intel Xeon", "threads": 1}
    assert machine_probe(record, tmp_path) is None
