"""Real weights on a GPU (issue #23), the summary: a run's tables recomputed from its stored timings.

:func:`summarize_runs` and :func:`summarize_costs` turn the stored timings of a run
(:mod:`specdec.experiments.gpureal`) into its tables (tokens/s, speedups over plain with bootstrap
intervals over prompts, alpha, c, v(k)), so the record's tables can always be recomputed from its
raw timings (numpy only).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from specdec.engine.stats import cost_coefficient
from specdec.theory.intervals import bootstrap_ci, paired_speedup, verdict

__all__ = [
    "summarize_costs",
    "summarize_runs",
]


# --------------------------------------------------------------------------- summaries (numpy)
def _median(xs: Sequence[float]) -> float:
    return float(np.median(np.asarray(xs, dtype=float)))


def _ci(values: Sequence[float], stat: Callable[..., Any], seed: int) -> dict[str, Any]:
    if len(values) < 2:
        return {"estimate": float(stat(np.asarray(values))) if values else None, "low": None, "high": None}
    est, lo, hi = bootstrap_ci(values, stat, seed=seed)
    return {"estimate": est, "low": lo, "high": hi}


def summarize_runs(runs: Sequence[dict[str, Any]], *, seed: int = 0) -> list[dict[str, Any]]:
    """Per (engine, temperature, task, method): tokens/s and, against plain, speedup, alpha, c.

    A prompt's time is the median ``decode_s`` over its repetitions; the speedup is the
    geometric mean over prompts of plain time / method time, with a 95 % bootstrap interval over
    prompts (:func:`specdec.theory.intervals.ratio_ci`) and a verdict; tokens/s is the mean over
    prompts of new tokens / median time, with its interval. alpha = accepted / examined drafts
    and c = draft time per round per gamma over plain's time per target step, pooled over the
    group's runs. Only prompts that have both plain and the method are paired.
    """
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["engine"], r["temperature"], r["task"], r["method"]), []).append(r)
    out = []
    for (engine, temp, task, method), rows in groups.items():
        plain = groups.get((engine, temp, task, "plain"), [])
        per = {}
        for r in rows:
            per.setdefault(r["prompt"], []).append(r)
        base = {}
        for r in plain:
            base.setdefault(r["prompt"], []).append(r)
        prompts = sorted(p for p in per if p in base)
        t_m = [_median([r["decode_s"] for r in per[p]]) for p in sorted(per)]
        tps = [per[p][0]["new_tokens"] / t for p, t in zip(sorted(per), t_m, strict=True)]
        row: dict[str, Any] = {
            "engine": engine,
            "temperature": temp,
            "task": task,
            "method": method,
            "prompts": len(per),
            "runs": len(rows),
            "tokens_per_s": _ci(tps, np.mean, seed),
        }
        if method != "plain" and len(prompts) >= 1:
            num = [_median([r["decode_s"] for r in base[p]]) for p in prompts]
            den = [_median([r["decode_s"] for r in per[p]]) for p in prompts]
            est, lo, hi = paired_speedup(num, den, seed=seed)  # the book's one estimator
            row["speedup"] = {"estimate": est, "low": lo, "high": hi}
            if lo is not None and hi is not None:
                row["speedup"]["verdict"] = verdict(lo, hi)
            examined = sum(r["examined"] for r in rows)
            accepted = sum(r["accepted"] for r in rows)
            rounds = sum(r["rounds"] for r in rows)
            step_s = sum(r["target_s"] for r in plain) / max(sum(r["target_calls"] for r in plain), 1)
            gamma = rows[0]["gamma"]
            row["alpha"] = accepted / examined if examined else None
            row["mean_tokens_per_round"] = sum(r["new_tokens"] for r in rows) / rounds if rounds else None
            row["c"] = (  # the paper's c pooled over the runs (Definition 3.7)
                cost_coefficient(sum(r["draft_s"] for r in rows), rounds, gamma, step_s)
                if rounds and step_s > 0
                else None
            )
            if temp == 0:
                row["greedy_equal"] = all(r.get("equals_plain") is True for r in rows)
        out.append(row)
    return out


def summarize_costs(costs: dict[str, Any]) -> dict[str, Any]:
    """v(k) = T(k)/T(1) of the target and c = T_draft(1)/T_target(1) of each draft model, per timer.

    ``costs["models"][name][timer]`` maps k (as a string) to seconds per call; the timers are
    those measured (``eager``, ``graph``, ``graph_gpu``, ``kernel``, ``hf_eager``).
    """
    models = costs.get("models", {})
    target = models.get("target", {})
    out: dict[str, Any] = {"v": {}, "c": {}}
    for timer, curve in target.items():
        if "1" in curve and curve["1"]:
            out["v"][timer] = {k: t / curve["1"] for k, t in curve.items()}
    for name, timers in models.items():
        if name == "target":
            continue
        out["c"][name] = {
            timer: curve["1"] / target[timer]["1"]
            for timer, curve in timers.items()
            if "1" in curve and timer in target and target[timer].get("1")
        }
    return out
