"""specdec.analysis.hardware: record readers and the verify-priced optimum, on hand-made records."""

from __future__ import annotations

import pytest

from specdec.analysis.hardware import best_gamma_on_curve, gpu_shapes, gpu_surface, verify_curves
from specdec.theory.speedup import walltime_speedup, walltime_speedup_measured


def test_best_gamma_on_a_flat_curve_is_theorem_38():
    flat = dict.fromkeys(range(1, 17), 1.0)
    g, s = best_gamma_on_curve(0.8, 0.05, flat)
    best = max(range(1, 16), key=lambda g: walltime_speedup(0.8, g, 0.05))
    assert g == best and s == pytest.approx(float(walltime_speedup(0.8, best, 0.05)))


def test_a_steep_curve_shortens_gamma_and_costs_speedup():
    flat = dict.fromkeys(range(1, 17), 1.0)
    steep = {k: 1.0 + 0.5 * (k - 1) for k in range(1, 17)}  # llama.cpp-like: each token costs half a step
    g_flat, s_flat = best_gamma_on_curve(0.8, 0.0, flat)
    g_steep, s_steep = best_gamma_on_curve(0.8, 0.0, steep)
    assert g_steep < g_flat and s_steep < s_flat
    assert s_steep == pytest.approx(float(walltime_speedup_measured(0.8, g_steep, 0.0, steep[g_steep + 1])))
    # only measured k count: a curve with k = 1 and 5 allows gamma = 4 alone
    assert best_gamma_on_curve(0.8, 0.0, {1: 1.0, 5: 1.2})[0] == 4
    with pytest.raises(ValueError, match="k >= 2"):
        best_gamma_on_curve(0.8, 0.0, {1: 1.0})


def test_readers():
    rec = {
        "kind": "engine-modes",
        "verify": {"engines": {"e": [{"k": 1, "ratio_to_k1": 1.0}, {"k": 4, "ratio_to_k1": 1.3}]}},
    }
    assert verify_curves(rec) == {"e": {1: 1.0, 4: 1.3}}
    with pytest.raises(ValueError, match="engine-modes"):
        verify_curves({"kind": "real-decoding"})
    gpu = {
        "shape:tiny": {
            "surface": {"cells": [{"b": 1, "k": 1, "median_s": 0.02}, {"b": 2, "k": 4, "median_s": 0.03}]},
            "kernels": {"cells": [{"b": 1, "k": 1, "kernel_s": 0.002}]},
        },
        "roofline": {},
    }
    assert gpu_shapes(gpu) == ["tiny"]
    assert gpu_surface(gpu, "tiny", "wall") == {(1, 1): 0.02, (2, 4): 0.03}
    assert gpu_surface(gpu, "tiny") == {(1, 1): 0.002}
    with pytest.raises(ValueError, match="shape"):
        gpu_surface(gpu, "huge")
    with pytest.raises(ValueError, match="source"):
        gpu_surface(gpu, "tiny", "median")


def test_break_even_alpha_is_c_with_a_free_verify_and_rises_with_a_premium():
    from specdec.analysis.hardware import break_even_alpha

    flat = {k: 1.0 for k in range(2, 17)}
    assert break_even_alpha(0.3, flat) == pytest.approx(0.3, abs=1e-6)  # converse of Cor. 3.9
    assert break_even_alpha(0.0, flat) == pytest.approx(0.0, abs=1e-6)
    premium = {2: 1.2, 3: 1.4, 4: 1.6}
    assert break_even_alpha(0.1, premium) == pytest.approx(0.1 + 0.2, abs=1e-6)  # gamma = 1 decides
    assert break_even_alpha(2.0, flat) == 1.0  # a draft dearer than the target never pays
    with pytest.raises(ValueError, match="c must be"):
        break_even_alpha(-0.1, flat)


def test_break_even_alpha_refuses_a_tolerance_that_would_never_end():
    from specdec.analysis.hardware import break_even_alpha

    with pytest.raises(ValueError, match=r"tol must be a finite number in \(0.0, 0.5\); got 0.0"):
        break_even_alpha(0.1, {2: 1.0}, tol=0.0)


def test_loop_cost_reads_each_temperature_of_the_summary():
    from specdec.analysis.hardware import loop_cost

    side = lambda k: {  # noqa: E731
        "bare_ms": 4.0 + k,
        "loop-0_minus_bare_ms": [0.1 * k, 0.0, 0.2],
        "loop-0_over_bare": [1.02, 1.0, 1.04],
        "loop-1_minus_bare_ms": [0.5 + k, 0.4, 0.6],
        "loop-1_over_bare": [1.2, 1.1, 1.3],
    }
    summary = {
        "before": side(0),
        "after": side(1),
        "overhead_after_minus_before_ms": {"loop-0": [-0.1, -0.2, 0.0], "loop-1": [-0.3, -0.4, -0.2]},
        "after_over_before": {"bare": [1.0, 0.9, 1.1], "loop-0": [0.98, 0.9, 1.0], "loop-1": [0.9, 0.8, 1.0]},
    }
    record = {"kind": "engine-loop-cost", "summary": {"2t": summary}}
    rows = loop_cost(record, 2)
    assert [r["temperature"] for r in rows] == [0, 1]
    assert rows[1]["overhead_ms_after"] == (1.5, 0.4, 0.6) and rows[1]["bare_ms_before"] == 4.0
    assert rows[0]["overhead_change_ms"] == (-0.1, -0.2, 0.0) and rows[1]["loop_after_over_before"][0] == 0.9
    assert rows[0]["bare_after_over_before"] == (1.0, 0.9, 1.1)
    with pytest.raises(ValueError, match="threads must be one of"):
        loop_cost(record, 1)
    with pytest.raises(ValueError, match="engine-loop-cost"):
        loop_cost({"kind": "engine-modes"}, 2)


def test_round_verify_cost_reads_the_speculative_arms_or_none():
    from specdec.analysis.hardware import round_verify_cost

    def side(k):
        return {
            "spec-0_verify_ms_per_round": [0.3 - k, 0.2, 0.4],
            "spec-1_verify_ms_per_round": [0.9 - k, 0.8, 1.0],
        }

    summary = {
        "before": side(0.0),
        "after": side(0.25),
        "verify_after_minus_before_ms": {"spec-0": [-0.25, -0.3, -0.2], "spec-1": [-0.3, -0.4, -0.2]},
        "after_over_before": {"spec-0": [0.95, 0.9, 1.0], "spec-1": [0.9, 0.85, 0.95]},
    }
    record = {"kind": "engine-loop-cost", "settings": {"drafter": "mlp:mlp-3m@4"}, "summary": {"2t": summary}}
    rows = round_verify_cost(record, 2)
    assert [r["temperature"] for r in rows] == [0, 1] and rows[0]["drafter"] == "mlp:mlp-3m@4"
    assert rows[1]["verify_ms_before"] == (0.9, 0.8, 1.0) and rows[1]["verify_ms_after"][0] == 0.65
    assert rows[0]["verify_change_ms"] == (-0.25, -0.3, -0.2) and rows[1]["spec_after_over_before"][0] == 0.9
    assert round_verify_cost({**record, "settings": {"drafter": None}}, 2) == []
    with pytest.raises(ValueError, match="threads must be one of"):
        round_verify_cost(record, 1)
    with pytest.raises(ValueError, match="engine-loop-cost"):
        round_verify_cost({"kind": "engine-modes"}, 2)
