"""specdec.paper.ledger.measured (and the record readers it adds to specdec.analysis.hardware): measured
verdicts
of the article's hardware and load claims, on hand-made records whose verdicts are known, and on
the committed records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pandas")

from specdec.analysis.hardware import adaptive_vs_fixed, batch_gains, verify_intervals  # noqa: E402
from specdec.paper.ledger import measured  # noqa: E402
from specdec.paper.ledger.measured import (  # noqa: E402
    FAILS,
    HOLDS,
    MEASURED_VERDICTS,
    NOT_RECORDED,
    RULES,
    UNDECIDED,
    adaptive_gamma_verdicts,
    batch_verdicts,
    find_records,
    measured_ledger,
    oracle_gamma_verdicts,
    ridge_verdicts,
    verify_step_verdicts,
    weights_only_verdicts,
)
from specdec.paper.ledger.render import measured_counts, measured_html, measured_records  # noqa: E402
from specdec.theory.cost import step_cost  # noqa: E402
from specdec.theory.speedup import expected_tokens  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "vocab_size": 256,
}


def cpu_record(intervals: dict[str, tuple[float, float, float]], ridge: float = 8.0, tok_s: float = 10.0):
    """An engine-modes record: T(5)/T(1) per engine with its interval, a roofline, a bf16 engine."""
    engines = {
        name: [
            {"k": 1, "ratio_to_k1": 1.0, "ratio_ci": [1.0, 1.0]},
            {"k": 2, "ratio_to_k1": 1.0, "ratio_ci": [1.0, 1.0]},
            {"k": 5, "ratio_to_k1": v, "ratio_ci": [lo, hi]},
        ]
        for name, (v, lo, hi) in intervals.items()
    }
    return {
        "kind": "engine-modes",
        "file": "engine-modes-test.json",
        "environment": {"device_name": "Test CPU"},
        "settings": {"gamma": 4, "threads": 1},
        "verify": {"engines": engines},
        "chosen_mode": {"model": TINY, "context": 16},
        "roofline": {
            "machine": {
                "rooflines": [
                    {"threads": 1, "bandwidth_gbps": 1.0, "ridge_flop_per_byte": {"bfloat16": ridge}}
                ]
            }
        },
        "summary": {"engines": {"lean-bfloat16": {"plain_tok_s": [tok_s, tok_s, tok_s]}}},
    }


def gpu_record(surface: dict[tuple[int, int], float], ridge: float = 200.0, bandwidth: float = 1000.0):
    cells = [{"b": b, "k": k, "median_s": t} for (b, k), t in surface.items()]
    kernels = [{"b": b, "k": k, "kernel_s": t} for (b, k), t in surface.items()]
    return {
        "file": "gpu-test.json",
        "device": {"name": "Test GPU"},
        "roofline": {"ridge_flop_per_byte": ridge, "bandwidth_gb_s": bandwidth},
        "shape:tiny": {
            "config": TINY,
            "surface": {"cells": cells, "context": 16},
            "kernels": {"cells": kernels},
        },
    }


def flat_surface(batches, premium=lambda b, k: 1.0):
    """T(b, k) = 0.01 * premium(b, k) for k in 1, 2, 4, 5, 8 (premium 1 at k = 1)."""
    return {(b, k): 0.01 * (1.0 if k == 1 else premium(b, k)) for b in batches for k in (1, 2, 4, 5, 8)}


# --------------------------------------------------------------------------- 一: verify cost
def test_verify_cost_rule_rounds_to_one_step():
    rec = cpu_record({"free": (1.2, 1.1, 1.4), "steep": (1.7, 1.6, 1.8), "edge": (1.5, 1.4, 1.6)})
    rows = {m.engine: m for m in verify_step_verdicts(rec, None)}
    assert (rows["free"].verdict, rows["steep"].verdict, rows["edge"].verdict) == (HOLDS, FAILS, UNDECIDED)
    assert rows["free"].values["v"] == 1.2 and rows["free"].values["free_gamma"] == 4
    assert rows["every engine"].verdict == NOT_RECORDED  # no GPU record given
    gpu = gpu_record({(1, 1): 0.01, (1, 5): 0.0149, (1, 8): 0.0151})
    by_clock = [m for m in verify_step_verdicts(None, gpu, gamma=4) if m.machine.startswith("Test GPU")]
    assert {m.verdict for m in by_clock} == {HOLDS} and by_clock[0].values["free_gamma"] == 4
    assert verify_step_verdicts(None, gpu, gamma=7)[-1].verdict == FAILS  # v(8) = 1.51
    with pytest.raises(ValueError, match="gamma must be given"):
        verify_step_verdicts(None, gpu)
    with pytest.raises(ValueError, match="no T"):
        verify_step_verdicts(None, gpu, gamma=2)


# --------------------------------------------------------------------------- D1, D2
@pytest.mark.parametrize(
    ("ridge", "verdict"), [(150.0, HOLDS), (3000.0, HOLDS), (20.0, FAILS), (3500.0, FAILS), (8.0, FAILS)]
)
def test_ridge_rule_is_d1s_orders_of_magnitude(ridge, verdict):
    (row,) = [m for m in ridge_verdicts(None, gpu_record({(1, 1): 0.01}, ridge=ridge)) if m.record]
    assert row.verdict == verdict and row.values["ridge"] == ridge


def test_weights_only_rule_is_an_order_of_magnitude():
    weight_bytes = step_cost(TINY, k=1, context=16, weight_format="bfloat16")["weight_bytes"]
    estimate = 1e9 / weight_bytes  # 1 GB/s in the hand-made CPU record
    for ratio, verdict in ((0.4, HOLDS), (2.5, HOLDS), (0.3, FAILS), (3.3, FAILS)):
        rows = weights_only_verdicts(cpu_record({}, tok_s=ratio * estimate), None)
        (row,) = [m for m in rows if m.engine == "lean-bfloat16"]
        assert row.verdict == verdict and row.values["ratio"] == pytest.approx(ratio)
    assert weights_only_verdicts(None, None)[0].verdict == NOT_RECORDED


# --------------------------------------------------------------------------- 第三: adaptive gamma
def dynamic_record(factor_lookup: float, factor_draft: float):
    """Four prompts; 'heuristic' takes the best fixed time times a factor (per prompt jitter)."""
    rows, configs = [], {}
    for drafter, factor in (("lookup", factor_lookup), ("d", factor_draft)):
        for name, scale in (
            (f"{drafter} g=1", 1.1),
            (f"{drafter} g=2", 1.0),
            (f"{drafter} heuristic", factor),
        ):
            configs[name] = {"speedup": [1 / scale, 1 / scale, 1 / scale]}
            for i, jitter in enumerate((1.0, 1.01, 0.99, 1.02)):
                rows.append({"config": name, "prompt": f"p{i}", "decode_s": scale * jitter * (1 + 0.001 * i)})
    return {
        "kind": "dynamic-gamma",
        "file": "dyn.json",
        "mode": "int4",
        "environment": {"device_name": "Test CPU"},
        "settings": {"draft": "d", "threads": 1},
        "summary": {"configs": configs},
        "rows": rows,
    }


def test_adaptive_gamma_rule():
    rec = dynamic_record(0.8, 1.25)  # heuristic faster for lookup, slower for the draft
    comparisons = adaptive_vs_fixed(rec)
    assert [(c["drafter"], c["rule"], c["best_fixed"]) for c in comparisons] == [
        ("lookup", "heuristic", "g=2"),
        ("d", "heuristic", "g=2"),
    ]
    assert comparisons[0]["ratio"] == pytest.approx(1 / 0.8, rel=0.02)
    rows = adaptive_gamma_verdicts(rec)
    assert [m.verdict for m in rows] == [HOLDS, FAILS]
    assert "is not exceeded" in rows[0].evidence
    assert "is exceeded" in adaptive_gamma_verdicts(dynamic_record(0.5, 1.0))[0].evidence  # 2x > 1.6
    assert adaptive_gamma_verdicts(None)[0].verdict == NOT_RECORDED
    with pytest.raises(ValueError, match="dynamic-gamma"):
        adaptive_vs_fixed({"kind": "engine-modes"})


@pytest.mark.parametrize(
    ("interval", "verdict"),
    [
        ((1.3, 1.2, 1.4), HOLDS),  # gains, within ~60 %
        ((1.3, 1.2, 1.61), UNDECIDED),  # may exceed the bound (60.5 % at the printed precision)
        ((1.7, 1.65, 1.8), FAILS),  # exceeds it
        ((0.98, 0.95, 1.0), FAILS),  # no gain at all
        ((1.02, 0.99, 1.05), UNDECIDED),
    ],
)
def test_oracle_rule_against_the_bound(monkeypatch, interval, verdict):
    gain, low, high = interval
    fake = [
        {
            "drafter": "d",
            "best_gamma": 2,
            "gain": gain,
            "gain_low": low,
            "gain_high": high,
            "alpha": 0.5,
            "c": 0.1,
            "iid_gain": 1.2,
        }
    ]
    monkeypatch.setattr(measured, "summarize_record", lambda record: fake)
    rec = {"file": "oracle.json", "mode": "int4", "environment": {"device_name": "Test CPU"}, "settings": {}}
    (row,) = oracle_gamma_verdicts(rec)
    assert row.verdict == verdict and row.values["bound"] == pytest.approx(1.605)
    assert oracle_gamma_verdicts(None)[0].verdict == NOT_RECORDED


# --------------------------------------------------------------------------- 第六: batch size
def _gpu_batch_verdicts(surface):
    return [m for m in batch_verdicts(gpu_record(surface), None) if m.machine.startswith("Test GPU")]


def test_batch_rule():
    # no premium anywhere, record up to 64: nothing shows, the record cannot reach "beyond 64"
    assert {m.verdict for m in _gpu_batch_verdicts(flat_surface((1, 16, 64)))} == {UNDECIDED}
    # the premium appears only at b = 128: the onset lies beyond 64
    late = flat_surface((1, 16, 64, 128), lambda b, k: 1.0 + (k - 1) * (0.5 if b >= 128 else 0.0))
    rows = _gpu_batch_verdicts(late)
    assert {m.verdict for m in rows} == {HOLDS} and rows[0].values["onset"] == 128
    # already at b = 32: fails, with the onset named
    early = flat_surface((1, 16, 32, 64), lambda b, k: 1.0 + (k - 1) * (0.5 if b >= 32 else 0.0))
    rows = _gpu_batch_verdicts(early)
    assert {m.verdict for m in rows} == {FAILS} and rows[0].values["onset"] == 32
    assert "onset in (16, 32]" in rows[0].evidence
    # a dip that recovers is not an onset
    dip = flat_surface((1, 16, 64), lambda b, k: 1.0 + (k - 1) * (0.5 if b == 16 else 0.0))
    assert {m.verdict for m in _gpu_batch_verdicts(dip)} == {UNDECIDED}
    # a record beyond 64 without any reduction contradicts "reduction beyond 64"
    assert {m.verdict for m in _gpu_batch_verdicts(flat_surface((1, 64, 128)))} == {FAILS}


def test_batch_gains_use_the_common_ks():
    surface = {**flat_surface((1, 4)), (1, 3): 0.01}  # k = 3 only at b = 1: not used
    gains = batch_gains(surface, 0.75)
    assert gains[1] == gains[4] == (7, pytest.approx(float(expected_tokens(0.75, 7))))
    with pytest.raises(ValueError, match="T\\(b, 1\\)"):
        batch_gains({(1, 1): 1.0, (1, 2): 1.0, (2, 2): 1.0}, 0.75)
    with pytest.raises(ValueError, match="k >= 2"):
        batch_gains({(1, 1): 1.0, (2, 1): 1.0}, 0.75)


def test_cpu_batch_surface_is_read_or_reported_missing():
    rows = batch_verdicts(None, None)
    assert [m.verdict for m in rows] == [NOT_RECORDED, NOT_RECORDED]
    assert "batch-surface" in rows[0].evidence
    cpu = {
        "file": "batch-surface-test.json",
        "environment": {"device_name": "Test CPU"},
        "settings": {"threads": 1},
        "engine": "transformers",
        "surface": {
            "cells": {
                "target-float32": [
                    {"b": b, "k": k, "median_s": t} for (b, k), t in flat_surface((1, 8)).items()
                ],
                "draft-float32": [{"b": 1, "k": 1, "median_s": 0.001}],
            }
        },
    }
    (row,) = [m for m in batch_verdicts(None, cpu) if m.record]
    assert (row.machine, row.engine, row.verdict) == (
        "Test CPU (CPU), 1 thread",
        "transformers float32",
        UNDECIDED,
    )
    with pytest.raises(ValueError, match="batch-surface-test.json must hold surface.cells"):
        batch_verdicts(None, {**cpu, "surface": {}})
    with pytest.raises(ValueError, match="target-"):
        batch_verdicts(None, {**cpu, "surface": {"cells": {"draft-float32": []}}})


# --------------------------------------------------------------------------- records on disk
def test_find_records_marks_what_is_absent(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "gpu").mkdir()
    found = find_records(tmp_path)
    assert found == {"cpu": None, "gpu": None, "dynamic": None, "batch": None, "oracle": None}
    rows = measured_ledger(found)
    assert {m.verdict for m in rows} == {NOT_RECORDED}
    assert [m.item for m in rows] == ["一", "一", "D1", "D1", "D2", "D2", "第三", "第三", "第六", "第六"]
    (tmp_path / "bench" / "dynamic-gamma-x.json").write_text(json.dumps(dynamic_record(0.8, 1.0)))
    assert find_records(tmp_path)["dynamic"]["file"] == "dynamic-gamma-x.json"
    with pytest.raises(ValueError, match="existing folder"):
        find_records(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="key 'oracle'"):
        measured_ledger({"cpu": None, "gpu": None, "dynamic": None, "batch": None})


def test_verify_intervals_reader():
    rec = cpu_record({"e": (1.3, 1.2, 1.4)})
    assert verify_intervals(rec)["e"][5] == (1.3, 1.2, 1.4)
    with pytest.raises(ValueError, match="engine-modes"):
        verify_intervals({"kind": "gpu_record"})


def test_committed_records():
    """The verdicts the chapter describes, from the committed records."""
    rows = measured_ledger(find_records(ROOT / "results"))
    assert {m.item for m in rows} == set(RULES)
    assert all(m.verdict in MEASURED_VERDICTS for m in rows)
    verdict = {(m.item, m.machine.split(" (")[0], m.engine, m.target): m.verdict for m in rows}
    kernel = next(e for (i, _, e, _) in verdict if i == "一" and "kernel" in e)
    assert verdict[("一", "AMD EPYC", "llama.cpp", "SmolLM2-135M-Instruct")] == FAILS
    assert verdict[("一", "NVIDIA H200", kernel, "llama2-7b")] == HOLDS
    assert verdict[("D1", "NVIDIA H200", "torch bfloat16 matmul", "-")] == HOLDS
    assert verdict[("D1", "AMD EPYC", "torch bfloat16 matmul", "-")] == FAILS
    assert verdict[("D2", "NVIDIA H200", kernel, "llama2-7b")] == HOLDS
    counts = measured_counts(rows)
    assert sum(counts["all"].values()) == len(rows)
    for item in RULES:
        assert sum(counts[item].values()) == sum(m.item == item for m in rows)
    records = measured_records(rows)
    assert [r["verdict"] for r in records] == [m.verdict for m in rows]
    assert all(r["rule"] == RULES[r["item"]][1] for r in records)
    html = measured_html(rows)
    assert html.count("<tr") == len(rows) + 1
