"""Part V's analysis of hardware records: verify-cost curves, GPU cost surfaces, and what they do to speedups.

Reads the records of ``specdec run engine-modes`` (CPU engines side by side; the verify
curves with their intervals), ``specdec run gpu-record`` (a GPU's T(b, k)) and
``specdec run dynamic-gamma`` (adaptive draft lengths against fixed ones,
:func:`adaptive_vs_fixed`) and ``specdec run verify-kernels`` (the lean q4q8 engine's verify curve
before and after a change of its C kernels, with the floor per k: :func:`kernel_curves`,
:func:`kernel_floors`, :func:`kernel_goals`) and ``specdec run loop-cost`` (the decoding loop's time per
token over the bare C step, before and after: :func:`loop_cost`); computes nothing by timing. The one
model of a speedup used here is Theorem 3.8 with the verify pass priced at its measured cost,
``E[T](alpha, gamma) / (gamma c + v(gamma + 1))`` with ``v(k) = T(k) / T(1)``
(:func:`specdec.theory.speedup.walltime_speedup_measured`), maximised over the gammas whose verify
cost was measured (:func:`best_gamma_on_curve`; per batch of a cost surface,
:func:`batch_gains`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specdec.theory.intervals import paired_speedup, per_unit_medians, ratio_ci, verdict
from specdec.theory.speedup import (  # Theorem 3.8 on a curve lives in theory; re-exported here
    best_gamma_on_curve,
    break_even_alpha,
)

__all__ = [
    "DRAFT_COST_GOALS",
    "EAGLE2_PRUNING",
    "KERNEL_GOALS",
    "LOOP_GOAL",
    "adaptive_vs_fixed",
    "batch_gains",
    "best_gamma_on_curve",
    "break_even_alpha",
    "draft_cost_drafts",
    "draft_cost_of_change",
    "draft_costs",
    "gpu_shapes",
    "gpu_surface",
    "kernel_curves",
    "kernel_decode",
    "loop_cost",
    "kernel_floor_parts",
    "kernel_floors",
    "kernel_goals",
    "kernel_v_from_samples",
    "load_record",
    "round_verify_cost",
    "verify_curves",
    "verify_intervals",
]


def load_record(path: str | Path) -> dict[str, Any]:
    """A JSON record, with its file name under ``"file"``."""
    p = Path(path)
    return {**json.loads(p.read_text(encoding="utf-8")), "file": p.name}


def draft_cost_drafts(draft_costs: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The drafts of an engine record's ``draft_costs`` keyed ``SPEC/mode`` by the drafter registry's
    spec (``draft:distil-l1/q4q8``, ``early-exit:8/q4q8``): the key the engine benchmark writes now; an
    older record's ``distil-l1/q4q8`` (a saved draft's bare name) and ``ee-8/q4q8`` mapped here, once, for
    every chapter that reads one. Empty without draft costs."""
    out = {}
    for key, d in ((draft_costs or {}).get("drafts") or {}).items():
        name, _, mode = key.rpartition("/")
        if name.startswith("ee-") and name[3:].isdigit():
            name = f"early-exit:{name[3:]}"
        elif ":" not in name:  # a saved distilled draft's bare name
            name = f"draft:{name}"
        out[f"{name}/{mode}"] = d
    return out


def verify_curves(record: Mapping[str, Any]) -> dict[str, dict[int, float]]:
    """Per engine of an engine-modes record: ``{k: T(k) / T(1)}`` (geometric mean over passes)."""
    if record.get("kind") != "engine-modes":
        raise ValueError(f"record must be an engine-modes record; got kind {record.get('kind')!r}")
    return {
        name: {int(c["k"]): float(c["ratio_to_k1"]) for c in cells}
        for name, cells in record["verify"]["engines"].items()
    }


def verify_intervals(record: Mapping[str, Any]) -> dict[str, dict[int, tuple[float, float, float]]]:
    """Per engine of an engine-modes record: ``{k: (T(k)/T(1), low, high)}`` with the record's
    95 % interval over passes (``ratio_ci``)."""
    if record.get("kind") != "engine-modes":
        raise ValueError(f"record must be an engine-modes record; got kind {record.get('kind')!r}")
    return {
        name: {int(c["k"]): (float(c["ratio_to_k1"]), *map(float, c["ratio_ci"])) for c in cells}
        for name, cells in record["verify"]["engines"].items()
    }


def gpu_shapes(record: Mapping[str, Any]) -> list[str]:
    """The shape names measured in a GPU record, in record order."""
    return [key.removeprefix("shape:") for key in record if key.startswith("shape:")]


def gpu_surface(
    record: Mapping[str, Any], shape: str, source: str = "kernel"
) -> dict[tuple[int, int], float]:
    """T(b, k) in seconds of one shape of a GPU record: ``"wall"`` (eager wall clock, median)
    or ``"kernel"`` (the GPU's summed kernel time per call: what a launch-free engine nears)."""
    key = f"shape:{shape}"
    if key not in record:
        raise ValueError(f"shape must be one of {gpu_shapes(record)}; got {shape!r}")
    section = record[key]
    if source == "wall":
        return {(int(c["b"]), int(c["k"])): float(c["median_s"]) for c in section["surface"]["cells"]}
    if source == "kernel":
        kernels = section.get("kernels")
        if not kernels or "cells" not in kernels:
            raise ValueError(f"the record holds no kernel times for {shape!r}")
        return {(int(c["b"]), int(c["k"])): float(c["kernel_s"]) for c in kernels["cells"]}
    raise ValueError(f"source must be 'wall' or 'kernel'; got {source!r}")


def batch_gains(
    surface: Mapping[tuple[int, int], float], alpha: float, c: float = 0.0
) -> dict[int, tuple[int, float]]:
    """Per batch b of a cost surface T(b, k): the best gamma and its predicted speedup over plain
    decoding at the same batch, ``max E[T] / (gamma c + T(b, gamma + 1) / T(b, 1))``.

    Only the k measured at every batch count, so that all batches choose from the same gammas;
    ``c = 0`` (a free draft, e.g. prompt lookup) isolates what the target's verify premium does.
    Raises ValueError when a batch lacks T(b, 1) or no k >= 2 is common to all batches.
    """
    batches = sorted({b for b, _ in surface})
    if not batches:
        raise ValueError("surface must hold at least one cell")
    common = set.intersection(*({k for bb, k in surface if bb == b} for b in batches))
    missing = [b for b in batches if (b, 1) not in surface]
    if missing:
        raise ValueError(f"surface must hold T(b, 1) for every batch; missing for b = {missing}")
    if not any(k >= 2 for k in common):
        raise ValueError("surface must hold one k >= 2 measured at every batch")
    return {
        b: best_gamma_on_curve(alpha, c, {k: surface[(b, k)] / surface[(b, 1)] for k in sorted(common)})
        for b in batches
    }


def adaptive_vs_fixed(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each adaptive draft-length rule of a dynamic-gamma record against the best fixed gamma.

    Per drafter (prompt lookup and the record's draft model), the best fixed gamma is the
    configuration ``"<drafter> g=<n>"`` with the highest speedup over plain (chosen after the
    fact); every other configuration of that drafter is an adaptive rule. Each row gives the
    geometric mean over prompts of (best fixed decode time / rule's decode time), > 1 when the
    rule is faster, with its 95 % bootstrap interval and :func:`specdec.theory.intervals.verdict`.
    """
    if record.get("kind") != "dynamic-gamma":
        raise ValueError(f"record must be a dynamic-gamma record; got kind {record.get('kind')!r}")
    configs = record["summary"]["configs"]
    _, decode = per_unit_medians(record["rows"], "decode_s")
    rows = []
    for drafter in ("lookup", record["settings"]["draft"]):
        fixed = [name for name in configs if name.startswith(drafter + " g=")]
        if not fixed:
            raise ValueError(f"record has no fixed-gamma configuration of {drafter!r}")
        best = max(fixed, key=lambda name: configs[name]["speedup"][0])
        for rule in (name for name in configs if name.startswith(drafter + " ") and name not in fixed):
            est, low, high = paired_speedup(decode[best], decode[rule])
            rows.append(
                {
                    "drafter": drafter,
                    "rule": rule.removeprefix(drafter + " "),
                    "best_fixed": best.removeprefix(drafter + " "),
                    "best_fixed_speedup": configs[best]["speedup"],
                    "ratio": est,
                    "low": low,
                    "high": high,
                    "verdict": verdict(low, high),
                }
            )
    return rows


# --------------------------------------------------------------------------- the lean kernels, before / after
#: Issue 40's goals for the lean q4q8 engine's verify curve on 2 threads: v(k) at most ``goal``; the last
#: one is AMX's (v(16) with the tile kernels), judged against AMX's own floor.
KERNEL_GOALS: tuple[dict[str, Any], ...] = (
    {"threads": 2, "k": 2, "goal": 1.08, "floor": "floor_v", "what": "v(2)"},
    {"threads": 2, "k": 4, "goal": 1.2, "floor": "floor_v", "what": "v(4)"},
    {"threads": 2, "k": 8, "goal": 1.5, "floor": "floor_v", "what": "v(8)"},
    {"threads": 2, "k": 16, "goal": 2.1, "floor": "floor_v", "what": "v(16)"},
    {"threads": 2, "k": 16, "goal": 1.3, "floor": "floor_amx_v", "what": "v(16) with AMX"},
)


def _kernels_record(record: Mapping[str, Any]) -> Mapping[str, Any]:
    if record.get("kind") != "engine-verify-kernels":
        raise ValueError(f"record must be an engine-verify-kernels record; got kind {record.get('kind')!r}")
    return record


def kernel_curves(
    record: Mapping[str, Any], threads: int
) -> dict[str, dict[int, tuple[float, float, float]]]:
    """Per curve of an engine-verify-kernels record at ``threads`` (``before-chain``, ``before-tree``,
    ``after-chain``, ``after-tree``): ``{k: (v(k), low, high)}``, v(k) = T(k) / T(1) with the record's
    95 % interval over passes."""
    cells = _kernels_record(record)["cells"][f"verify-{threads}t"]["curves"]
    return {
        name: {int(c["k"]): (float(c["v"]), *map(float, c["v_ci"])) for c in rows}
        for name, rows in cells.items()
    }


def kernel_floors(record: Mapping[str, Any], threads: int) -> dict[str, dict[int, float]]:
    """The record's floors per k at ``threads``, each over its own k = 1: ``floor`` (issue 40's:
    max(weight bytes / bandwidth, k multiply-adds / int8 peak) + attention), ``registers`` (the register
    tiles' own, int8 products and float epilogue on the same vector units) and ``amx`` (where measured)."""
    rows = _kernels_record(record)["floor"][f"{threads}t"]["rows"]
    out = {"floor": {int(r["k"]): float(r["floor_v"]) for r in rows}}
    for name, key in (("registers", "floor_registers_v"), ("amx", "floor_amx_v")):
        if key in rows[0]:
            out[name] = {int(r["k"]): float(r[key]) for r in rows}
    return out


def kernel_v_from_samples(
    record: Mapping[str, Any], threads: int, name: str, k: int, **kw: Any
) -> tuple[float, float, float]:
    """v(k) of one curve recomputed from the record's raw T(k) samples: the geometric mean over passes
    of T(k) / T(1), T(1) the same library's one-row chain call of the same pass, with its bootstrap
    interval (:func:`specdec.theory.intervals.ratio_ci`; ``kw`` goes to it)."""
    curves = _kernels_record(record)["cells"][f"verify-{threads}t"]["curves"]
    library = name.rsplit("-", 1)[0]
    by_k = {int(c["k"]): c["samples_s"] for c in curves[name]}
    one = {int(c["k"]): c["samples_s"] for c in curves[f"{library}-chain"]}[1]
    return ratio_ci(by_k[k], one, **kw)


def kernel_floor_parts(record: Mapping[str, Any], threads: int) -> dict[str, Any]:
    """What the floor is made of at ``threads``: the weight stream (ms, the same at every k), one row's
    int8 products (ms, at the register tiles' peak and at AMX's), one row's float epilogue (ms), the
    attention per k (ms), and per compute term the first k whose products outgrow the weight stream
    (None when none of the record's k does): below it the floor's rise over k = 1 is attention alone."""
    rows = _kernels_record(record)["floor"][f"{threads}t"]["rows"]
    by_k = {int(r["k"]): r for r in rows}
    one = by_k[min(by_k)]
    weights = float(one["weights_ms"])
    per_row = {"int8": float(one["int8_ms"]) / one["k"], "epilogue": float(one["epilogue_ms"]) / one["k"]}
    if "amx_int8_ms" in one:
        per_row["amx"] = float(one["amx_int8_ms"]) / one["k"]
    compute = {
        "int8": lambda r: r["int8_ms"],
        "registers": lambda r: r["int8_ms"] + r["epilogue_ms"],
    }
    if "amx" in per_row:
        compute["amx"] = lambda r: max(r["amx_int8_ms"], r["epilogue_ms"])
    crossing = {
        name: next((k for k in sorted(by_k) if term(by_k[k]) > weights), None)
        for name, term in compute.items()
    }
    return {
        "weights_ms": weights,
        "row_ms": per_row,
        "attention_ms": {k: float(r["attention_ms"]) for k, r in by_k.items()},
        "first_k_compute_bound": crossing,
    }


def kernel_goals(
    record: Mapping[str, Any], goals: Sequence[Mapping[str, Any]] = KERNEL_GOALS
) -> list[dict[str, Any]]:
    """Each goal against the record (an AMX goal only where the record has AMX's floor, i.e. the machine
    has AMX): the after library's chain v(k) with its interval, ``verdict``
    ``"met"`` (the interval's top at most the goal), ``"missed"`` (its bottom above it) or
    ``"undecided"``; and the goal's floor at that k, with ``floor_above`` when even the floor exceeds
    the goal (no kernel of that kind meets it while attention costs what the record measured)."""
    _kernels_record(record)
    rows = []
    for g in goals:
        threads, k, goal = int(g["threads"]), int(g["k"]), float(g["goal"])
        floor_rows = {int(r["k"]): r for r in record["floor"][f"{threads}t"]["rows"]}
        if g["floor"] == "floor_amx_v" and g["floor"] not in floor_rows[k]:
            continue  # an AMX goal, and the record's library ran no AMX: not this machine's goal
        est, low, high = kernel_curves(record, threads)["after-chain"][k]
        floor = float(floor_rows[k][g["floor"]])
        said = "met" if high <= goal else "missed" if low > goal else "undecided"
        rows.append(
            {
                **g,
                "after": (est, low, high),
                "verdict": said,
                "floor_v": floor,
                "floor_above": floor > goal,
            }
        )
    return rows


def kernel_decode(record: Mapping[str, Any], threads: int) -> dict[str, Any]:
    """Plain greedy decoding at ``threads``, after against before: median tokens per second of each
    library, time per token after / before (est, low, high: < 1 when after is faster), whether both
    produced the same tokens, and the bare one-row call's after / before (the plain step's T(1))."""
    rec = _kernels_record(record)
    dec = rec["cells"][f"decode-{threads}t"]
    ratio = dec["after_over_before"]
    chain = {int(r["k"]): r for r in rec["cells"][f"verify-{threads}t"]["after_over_before"]["chain"]}
    return {
        "tok_s": {lib: float(dec["median_tok_s"][lib]) for lib in ("before", "after")},
        "time_per_token": (float(ratio["ratio"]), *map(float, ratio["ci"])),
        "same_tokens": bool(dec["same_tokens"]),
        "step": (float(chain[1]["after_over_before"]), float(chain[1]["lo"]), float(chain[1]["hi"])),
    }


#: Issue 40's goals for a drafter's cost inside the decoding loop, in plain steps: (the configurations'
#: family, which c, the goal)
DRAFT_COST_GOALS: tuple[tuple[str, str, float], ...] = (
    ("eagle chain", "c_call", 0.06),  # per draft level
    ("medusa", "c_round", 0.05),  # a whole draft
    ("mlp", "c_round", 0.05),
    ("eagle-2, 16 nodes", "c_round", 0.10),
)


def _draft_family(config: str, budget: int) -> str | None:
    kind = config.split(":")[0]
    if kind == "eagle":
        if "topk=" not in config or "topk=1," in config + ",":
            return "eagle chain"
        return "eagle-2, 16 nodes" if budget == 16 else None
    return kind if kind in ("medusa", "mlp") else None


#: The words by which EAGLE-2's expansion without the nodes it cannot keep names itself in its draft-cost
#: record's ``change`` (commit 04bb209).
EAGLE2_PRUNING = "expansion skips"


def draft_cost_of_change(results: str | Path, words: str, threads: int = 2) -> dict[str, Any]:
    """The newest ``engine-draft-cost`` record at ``threads`` target threads whose ``change`` holds
    ``words`` (e.g. :data:`EAGLE2_PRUNING`); the records of that change, and only they, are noted in the
    provenance (:func:`specdec.analysis.records.every`). FileNotFoundError where none does."""
    from specdec.analysis import records

    return records.every(results, "engine-draft-cost", threads=threads,
                         where=lambda r: words in (r.get("change") or ""))[-1]  # fmt: skip


def draft_costs(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An ``engine-draft-cost`` record (:mod:`specdec.measure.draftcost`) per configuration, recomputed
    from its samples by the measuring module's own :func:`~specdec.measure.draftcost.compare`: the
    drafter's threads, c per round and per draft call before and after (medians over prompts and
    repetitions, plain steps), calls per round, how much faster a round's drafting got (with its
    interval) and, where the record timed whole generations, how much faster a generated token got
    (``decode_speedup``, else None), and the goal that applies with whether the after-median meets it
    (median <= goal)."""
    from specdec.measure.draftcost import compare

    if record.get("kind") != "engine-draft-cost":
        raise ValueError(f"need an engine-draft-cost record; got kind {record.get('kind')!r}")
    goals = {family: (which, goal) for family, which, goal in DRAFT_COST_GOALS}
    rows = []
    for s in compare(record["samples"]["before"], record["samples"]["after"]):
        spec, _, threads = s["config"].partition(",threads=")
        family = _draft_family(spec, s["budget"])
        which, goal = goals.get(family, (None, None)) if family else (None, None)
        rows.append({
            "config": spec, "budget": s["budget"], "drafter_threads": int(threads) if threads else None,
            "before": s["before"], "after": s["after"], "draft_speedup": s["draft_speedup"],
            "decode_speedup": s.get("decode_speedup"), "goal_of": which, "goal": goal,
            "met": None if goal is None else s["after"][which] <= goal,
        })  # fmt: skip
    return rows


#: Issue 40's goal for the decoding loop: its time per token within this factor of the bare step's
LOOP_GOAL = 1.15


def _loop_cost_entry(record: Mapping[str, Any], threads: int) -> Mapping[str, Any]:
    """A loop-cost record's summary at ``threads``; ValueError for another kind or thread count."""
    if record.get("kind") != "engine-loop-cost":
        raise ValueError(f"record must be an engine-loop-cost record; got kind {record.get('kind')!r}")
    entry = record["summary"].get(f"{threads}t")
    if entry is None:
        raise ValueError(f"threads must be one of the record's {sorted(record['summary'])}; got {threads!r}")
    return entry


def loop_cost(record: Mapping[str, Any], threads: int) -> list[dict[str, Any]]:
    """A loop-cost record (kind ``engine-loop-cost``, :mod:`specdec.measure.loopcost`) at ``threads``: one
    row per temperature of the loop (0, 1), each with the bare step's ms per token before and after, the
    loop's overhead over it in ms per token and loop / bare per version (est, low, high), the overhead's
    change after minus before (est, low, high) and after over before of the loop and of the bare step
    across the two processes (time ratios: below 1 is faster)."""
    entry = _loop_cost_entry(record, threads)
    rows = []
    for temperature in (0, 1):
        arm = f"loop-{temperature}"
        row: dict[str, Any] = {"temperature": temperature}
        for version in ("before", "after"):
            side = entry[version]
            row[f"bare_ms_{version}"] = float(side["bare_ms"])
            row[f"overhead_ms_{version}"] = tuple(map(float, side[f"{arm}_minus_bare_ms"]))
            row[f"over_bare_{version}"] = tuple(map(float, side[f"{arm}_over_bare"]))
        row["overhead_change_ms"] = tuple(map(float, entry["overhead_after_minus_before_ms"][arm]))
        row["loop_after_over_before"] = tuple(map(float, entry["after_over_before"][arm]))
        row["bare_after_over_before"] = tuple(map(float, entry["after_over_before"]["bare"]))
        rows.append(row)
    return rows


def round_verify_cost(record: Mapping[str, Any], threads: int) -> list[dict[str, Any]]:
    """The speculative arms of a loop-cost record made with a drafter (``settings.drafter``) at ``threads``:
    one row per temperature (0, 1), each with verification's ms per round before and after (est, low,
    high), their change after minus before (paired by repetition and prompt) and the speculative loop's
    time per token after over before across the two processes; no rows for a record without a drafter."""
    entry = _loop_cost_entry(record, threads)
    if not record["settings"].get("drafter"):
        return []
    rows = []
    for temperature in (0, 1):
        arm = f"spec-{temperature}"
        row: dict[str, Any] = {"temperature": temperature, "drafter": record["settings"]["drafter"]}
        for version in ("before", "after"):
            row[f"verify_ms_{version}"] = tuple(map(float, entry[version][f"{arm}_verify_ms_per_round"]))
        row["verify_change_ms"] = tuple(map(float, entry["verify_after_minus_before_ms"][arm]))
        row["spec_after_over_before"] = tuple(map(float, entry["after_over_before"][arm]))
        rows.append(row)
    return rows
