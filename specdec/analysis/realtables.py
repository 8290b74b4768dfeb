"""Part IV's tables from the state of a real-decoding run (``specdec run real-decoding``).

The benchmark times plain and speculative decoding of real prompts (:mod:`specdec.measure.pairedrun`)
and teacher-forces every drafter on the plain generations; these functions turn its saved
state into the record's tables. The record's readers are in :mod:`specdec.analysis.realrun`.

* :func:`speedup_columns` -- per prompt, the medians over repetitions of plain and speculative
  decode time and of c (:func:`specdec.engine.stats.cost_coefficient` against the same repetition's
  plain step).
* :func:`table_row` / :func:`table_rows` -- alpha, c, v, expected and measured speedups with
  intervals, pooled counts and the gap's factors (:func:`specdec.analysis.realrun.speedup_gap`), per
  (temperature, task, drafter).
* :func:`alpha_rows`, :func:`sweep_rows`, :func:`lenience_rows` -- teacher-forced alpha of every
  drafter; the gamma sweep; argmax lenience.
* :func:`estimate_full_minutes` -- the full run's duration predicted from a quick run's times.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from specdec.analysis.realrun import (
    drafter_family,
    full_round_counts,
    pool_rounds,
    speedup_gap,
    unit_bootstrap,
)
from specdec.theory.intervals import geomean, paired_speedup, per_unit_medians, verdict
from specdec.theory.speedup import (
    cost_coefficient,
    optimal_gamma,
    walltime_speedup,
    walltime_speedup_measured,
)
from specdec.theory.tokens import first_divergence

__all__ = [
    "TEMPERATURES",
    "PromptEstimates",
    "alpha_rows",
    "estimate_full_minutes",
    "lenience_rows",
    "measured_interval",
    "speedup_columns",
    "sweep_rows",
    "table_row",
    "table_rows",
]

#: The temperatures of Part IV's main phase.
TEMPERATURES = (0.0, 1.0)


def speedup_columns(
    rows: list[dict[str, Any]], name: str, gamma: int, lenience: float = 1.0
) -> dict[str, Any]:
    """Per prompt (sorted) the median over repetitions of plain and speculative decode time and of c."""
    config = (name, gamma, lenience)
    sel = [
        r | {"config": "plain" if r["drafter"] == "plain" else "spec"}
        for r in rows
        if r["drafter"] == "plain" or (r["drafter"], r["gamma"], r["lenience"]) == config
    ]
    units, med = per_unit_medians(sel, "decode_s")
    plain_step = {
        (r["prompt"], r["rep"]): r["target_s"] / r["target_calls"] for r in sel if r["config"] == "plain"
    }
    c_rows = [
        r | {"c": cost_coefficient(r["draft_s"], r["rounds"], gamma, plain_step[(r["prompt"], r["rep"])])}
        for r in sel
        if r["config"] == "spec"
    ]
    _, c_med = per_unit_medians(c_rows, "c")
    return {"prompts": units, "plain_s": med["plain"], "spec_s": med["spec"], "c": c_med["spec"]}


def measured_interval(cols: dict[str, Any]) -> dict[str, Any]:
    est, lo, hi = paired_speedup(cols["plain_s"], cols["spec_s"])  # per-prompt medians already
    return {"measured": est, "measured_low": lo, "measured_high": hi, "verdict": verdict(lo, hi)}


def table_rows(
    state: dict[str, Any], timed_names: Sequence[str], gamma: int, curve: dict[int, float]
) -> list[dict[str, Any]]:
    """One row per (temperature, task, timed drafter): :func:`table_row`."""
    from specdec.train.workloads import TASKS

    table = []
    for temp in TEMPERATURES:
        for task in TASKS:
            rows = [
                r
                for r in state["runs"]
                if r["phase"] == "main" and r["task"] == task and r["temperature"] == temp
            ]
            tf = [r for r in state["teacher_forced"] if (r["task"], r["temperature"]) == (task, temp)]
            for name in timed_names:
                row = table_row(rows, [r for r in tf if r["drafter"] == name], name, gamma, curve)
                table.append({"task": task, "temperature": temp} | row)
    return table


class PromptEstimates:
    """The per-prompt numbers of one table row, and the row's estimates on any resample of prompts."""

    def __init__(self, cols: dict[str, Any], tf: dict[str, dict[str, Any]], gamma: int, v: float) -> None:
        prompts = cols["prompts"]
        self.beta = np.array([tf[p]["beta_sum"] for p in prompts], dtype=float)
        self.drafted = np.array([tf[p]["drafted"] for p in prompts], dtype=float)
        self.positions = np.array([tf[p]["positions"] for p in prompts], dtype=float)
        self.c = np.asarray(cols["c"], dtype=float)
        self.speedup = np.asarray(cols["plain_s"]) / np.asarray(cols["spec_s"])
        self.gamma, self.v, self.n = gamma, v, len(prompts)

    def alpha(self, idx: np.ndarray, all_positions: bool = False) -> float:
        """Pooled teacher-forced alpha: over the drafted positions, or over every position."""
        n = (self.positions if all_positions else self.drafted)[idx].sum()
        return float(self.beta[idx].sum() / n) if n else 0.0

    def expected(self, idx: np.ndarray, with_verify: bool = False) -> float:
        """Theorem 3.8 (or with the measured v) at the alpha over every position and the median c."""
        a, c = self.alpha(idx, True), float(np.median(self.c[idx]))
        if with_verify:
            return float(walltime_speedup_measured(a, self.gamma, c, self.v))
        return float(walltime_speedup(a, self.gamma, c))

    def ratio(self, idx: np.ndarray, with_verify: bool = False) -> float:
        """Measured over expected on the prompts ``idx``."""
        # paired_speedup's estimate (geometric mean of the per-prompt medians' ratios) on a resample whose
        # bootstrap re-estimates alpha and c too: its own interval would not cover the expected side
        return float(geomean(self.speedup[idx])) / self.expected(idx, with_verify)


def table_row(
    rows: list[dict[str, Any]], tf_rows: list[dict[str, Any]], name: str, gamma: int, curve: dict[int, float]
) -> dict[str, Any]:
    """alpha, c, v, expected and measured speedups with intervals, pooled counts and the gap's
    factors of one drafter on one task and temperature (``rows``: that cell group's runs)."""
    cols = speedup_columns(rows, name, gamma)
    prompts = cols["prompts"]
    est = PromptEstimates(cols, {r["prompt"]: r for r in tf_rows}, gamma, curve[gamma + 1])
    everyone = np.arange(est.n)
    alpha, alpha_all, c = est.alpha(everyone), est.alpha(everyone, True), float(np.median(est.c))
    spec0 = sorted(
        (r for r in rows if r["drafter"] == name and r["rep"] == 0), key=lambda r: prompts.index(r["prompt"])
    )
    pooled = pool_rounds(r["stats"] for r in spec0)
    meas = measured_interval(cols)
    gap = speedup_gap(
        alpha=alpha,
        gamma=gamma,
        c=c,
        curve=curve,
        drafted=pooled["drafted"],
        tokens_per_round=pooled["tokens_per_round"],
        measured=meas["measured"],
        alpha_theorem=alpha_all,
    )
    ratio = unit_bootstrap(est.n, est.ratio)
    ratio_v = unit_bootstrap(est.n, lambda idx: est.ratio(idx, True))
    full = [full_round_counts(r["stats"]["drafted"], r["stats"]["accepted"], gamma) for r in spec0]
    greedy = spec0[0]["temperature"] == 0
    return {
        "drafter": name,
        "gamma": gamma,
        "alpha": alpha,
        "alpha_all": alpha_all,
        "alpha_coverage": float(est.drafted.sum() / est.positions.sum()),
        "accept_fraction": pooled["alpha_accept_rate"],
        "c": c,
        "optimal_gamma": int(optimal_gamma(alpha_all, c)),
        "tokens_per_round": pooled["tokens_per_round"],
        **meas,
        **{k: gap[k] for k in gap if k != "measured"},
        "ratio": ratio[0],
        "ratio_low": ratio[1],
        "ratio_high": ratio[2],
        "ratio_verify": ratio_v[0],
        "ratio_verify_low": ratio_v[1],
        "ratio_verify_high": ratio_v[2],
        "greedy_exact": all(r["first_divergence_from_plain"] is None for r in spec0) if greedy else None,
        "deterministic": all(r["same_as_rep0"] for r in rows if r["drafter"] in (name, "plain")),
        "prompts": est.n,
        "pooled": {k: pooled[k] for k in pooled if k != "drafted"},
        "per_prompt": {
            "prompt": prompts,
            "speedup": est.speedup.tolist(),
            "c": est.c.tolist(),
            "beta_sum": est.beta.tolist(),
            "drafted": est.drafted.tolist(),
            "positions": est.positions.tolist(),
            "full_examined_at": [f["examined_at"].tolist() for f in full],
            "full_accepted_at": [f["accepted_at"].tolist() for f in full],
        },
    }


def alpha_rows(state: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """Teacher-forced alpha per (temperature, task, drafter) for every drafter measured."""
    out = []
    for temp in TEMPERATURES:
        for task in dict.fromkeys(r["task"] for r in state["teacher_forced"]):
            for name in names:
                tf = [
                    r
                    for r in state["teacher_forced"]
                    if (r["task"], r["temperature"], r["drafter"]) == (task, temp, name)
                ]
                drafted, positions = sum(r["drafted"] for r in tf), sum(r["positions"] for r in tf)
                beta = sum(r["beta_sum"] for r in tf)
                out.append(
                    {
                        "task": task,
                        "temperature": temp,
                        "drafter": name,
                        "alpha": beta / drafted if drafted else float("nan"),
                        "alpha_all": beta / positions if positions else float("nan"),
                        "coverage": drafted / positions if positions else float("nan"),
                        "prompts": len(tf),
                    }
                )
    return out


def sweep_rows(
    state: dict[str, Any], sweep_gammas: Sequence[int], curve: dict[int, float], alpha_of: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Per (sweep drafter, gamma): measured speedup with its interval, c, Theorem 3.8 and with v."""
    rows = [r for r in state["runs"] if r["phase"] == "extra"]
    out = []
    for name in state.get("sweep_drafters") or []:
        a, a_all = alpha_of[name]
        for g in sweep_gammas:
            cols = speedup_columns(rows, name, g)
            c = float(np.median(cols["c"]))
            spec0 = [
                r
                for r in rows
                if r["drafter"] == name and r["gamma"] == g and r["lenience"] == 1 and r["rep"] == 0
            ]
            pooled = pool_rounds(r["stats"] for r in spec0)
            out.append(
                {
                    "drafter": name,
                    "gamma": g,
                    "alpha": a,
                    "alpha_all": a_all,
                    "c": c,
                    "verify_cost": curve[g + 1],
                    **measured_interval(cols),
                    "theorem": float(walltime_speedup(a_all, g, c)),
                    "with_verify": float(walltime_speedup_measured(a_all, g, c, curve[g + 1])),
                    "tokens_per_round": pooled["tokens_per_round"],
                    "mean_drafted": pooled["mean_drafted"],
                    "prompts": len(cols["prompts"]),
                }
            )
    return out


def lenience_rows(
    state: dict[str, Any], gamma: int, lenience_values: Sequence[float]
) -> list[dict[str, Any]]:
    """Per lenience l: acceptance, speedup with its interval, and how far the output moved from l = 1."""
    rows = [r for r in state["runs"] if r["phase"] == "extra"]
    names = state.get("sweep_drafters") or []
    model = next((n for n in names if drafter_family(n) is not None), None)
    if model is None or not lenience_values:
        return []
    exact = {
        r["prompt"]: r["tokens"]
        for r in rows
        if r["drafter"] == model and r["gamma"] == gamma and r["lenience"] == 1 and r["rep"] == 0
    }
    plain = {r["prompt"]: r["tokens"] for r in rows if r["drafter"] == "plain" and r["rep"] == 0}
    out = []
    for lv in sorted(lenience_values, reverse=True):
        cols = speedup_columns(rows, model, gamma, lenience=lv)
        runs0 = [
            r
            for r in rows
            if r["drafter"] == model and r["gamma"] == gamma and r["lenience"] == lv and r["rep"] == 0
        ]
        div = [first_divergence(r["tokens"], exact[r["prompt"]]) for r in runs0]
        same = [
            float(np.mean([a == b for a, b in zip(r["tokens"], exact[r["prompt"]], strict=True)]))
            for r in runs0
        ]
        same_plain = [
            float(np.mean([a == b for a, b in zip(r["tokens"], plain[r["prompt"]], strict=True)]))
            for r in runs0
        ]
        accepted = sum(r["stats"]["accepted_tokens"] for r in runs0)
        examined = sum(r["stats"]["examined"] for r in runs0)
        out.append(
            {
                "lenience": lv,
                "drafter": model,
                "gamma": gamma,
                "accepted": accepted,
                "examined": examined,
                "accept_rate": accepted / examined if examined else float("nan"),
                "tokens_per_round": float(np.mean([r["stats"]["mean_tokens_per_round"] for r in runs0])),
                **measured_interval(cols),
                "same_as_exact": float(np.mean(same)),
                "same_as_plain": float(np.mean(same_plain)),
                "changed_prompts": sum(d is not None for d in div),
                "first_change_median": float(np.median([d for d in div if d is not None]))
                if any(d is not None for d in div)
                else None,
                "prompts": len(runs0),
            }
        )
    return out


def estimate_full_minutes(state: dict[str, Any], full: dict[str, Any]) -> dict[str, Any]:
    """The full run's duration predicted from this run's own times, for the settings ``full``.

    Per phase and drafter, a run costs its median prefill plus ``new_tokens`` times its median
    decode time per token (measured here); the cells' other work (teacher forcing, saving) and
    the set-up (loading, the n-gram corpus, the verify curve) are scaled from this run: per cell
    and once. Drafters of ``full`` not timed here are priced as plain decoding.
    """
    runs = state["runs"]

    def cost(phase: str, name: str) -> float:
        sel = [r for r in runs if r["phase"] == phase and r["drafter"] == name] or [
            r for r in runs if r["phase"] == phase and r["drafter"] == "plain"
        ]
        if not sel:
            return 0.0  # a phase this run did not time (no sweep, no lenience)
        prefill = statistics.median(r["prefill_s"] for r in sel)
        per_token = statistics.median(r["decode_s"] / r["new_tokens"] for r in sel)
        return prefill + full["new_tokens"] * per_token

    n_cells = full["prompts"] * 3 * len(TEMPERATURES)
    main_s = n_cells * full["repeats"] * sum(cost("main", n) for n in ["plain", *full["timed"]])
    names = state.get("sweep_drafters") or []
    model = [n for n in names if drafter_family(n) is not None]
    extra_block = cost("extra", "plain") + sum(len(full["sweep"]) * cost("extra", n) for n in names)
    if model:
        extra_block += (len(full["lenience"]) - 1) * cost("extra", model[0])
    extra_s = full["prompts"] * full["repeats"] * extra_block
    timed_here = sum(r["decode_s"] + r["prefill_s"] for r in runs)
    per_cell = max(state["elapsed_s"] - timed_here, 0.0) / max(len(state["done"]), 1)
    other_s = per_cell * (n_cells + full["prompts"]) + state["setup_s"]
    return {
        "settings": full,
        "main_min": main_s / 60,
        "extra_min": extra_s / 60,
        "other_min": other_s / 60,
        "total_min": (main_s + extra_s + other_s) / 60,
        "step_ms_here": 1e3
        * statistics.median(r["target_s"] / r["target_calls"] for r in runs if r["drafter"] == "plain"),
    }
