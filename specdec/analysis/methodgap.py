"""Issue 44, item 2: which part of a family's gap is the method's and which this implementation's.

Pure functions of a campaign record that holds what the split needs (campaign v3's: its verify curves,
the machine's int8 peak and bandwidth measured in the same run, the model's work and bytes per row, and
each drafter's, :func:`specdec.measure.draftcost.draft_work`), and of the anchors' published acceptance
(``specdec/data/anchors/spec_bench_3090.csv``). For each speculative configuration and temperature, four
speedups over plain decoding on the same engine (Theorem 3.8's form: tokens per target call over the
cost of a round in plain steps, v(nodes + 1) + c):

* ``measured`` -- the run's own: :func:`specdec.theory.intervals.paired_speedup` of time per token
  against the same engine's plain decoding, prompt by prompt (median over repetitions, geometric mean,
  bootstrap interval);
* ``at_measured_costs`` -- the theorem at the measured tokens per call, the measured verify cost
  v(nodes + 1) = T(nodes + 1) / T(1) (the record's verify curve, bare forwards, at the round's mean nodes
  + 1: a one-row call priced as one plain step, Theorem 3.8's units) and the measured draft time per
  round (``c_round``, in plain decoding's loop steps: its time per token on the same engine, prompts and
  temperature): what the round's parts predict; below it, the gap is the loop's (bookkeeping, policy,
  Python between calls, and whatever a round's plain part costs beyond a plain step);
* ``at_floor`` -- the same tokens per call, priced at the machine's floor: v(k) = max(weight bytes /
  bandwidth, k x multiply-adds / int8 peak) over its k = 1 (attention and the float epilogue left out:
  a floor), and c = draft calls x max(drafter bytes / bandwidth, drafter multiply-adds per row / int8
  peak) over the plain floor step (every call streams the drafter's weights once and computes at least
  one row: a lower bound, which more rows per call meet while they ride on the weights' stream); between
  this and ``at_measured_costs``, the gap is the engine's and the drafter's implementation;
* ``anchor_at_floor`` -- the anchor's published tokens per call at its own published tree size and
  draft calls, priced at the same floor with this drafter's work per row; between this and
  ``at_floor``, the gap is the method's acceptance as trained here (the data, the training, the
  small target), not the implementation's. None where the anchor's table states no tree size.

Nothing here times anything; every number is a function of the record and the anchors' file.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specdec.theory.intervals import geomean

__all__ = [
    "ANCHORS",
    "anchor_for",
    "fixed_budget",
    "floor_model",
    "load_anchors",
    "measured_speedup",
    "plain_step",
    "split",
    "summary",
    "verify_measured",
    "whose_gap",
]

#: The anchors' published tokens per target call (Spec-Bench, RTX 3090, Vicuna-7B; its README).
ANCHORS = Path(__file__).resolve().parents[1] / "data" / "anchors" / "spec_bench_3090.csv"


def load_anchors(path: str | Path = ANCHORS) -> list[dict[str, Any]]:
    """The anchors' rows: ``method``, ``families`` (book families it anchors), ``tokens_per_call``,
    ``speedup``, ``nodes`` and ``draft_calls`` (None where not stated), ``setting``."""
    rows = []
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            rows.append(
                {
                    "method": row["method"],
                    "families": row["families"].split(";"),
                    "tokens_per_call": float(row["tokens_per_call"]),
                    "speedup": float(row["speedup"]),
                    "nodes": int(row["nodes"]) if row["nodes"] else None,
                    "draft_calls": int(row["draft_calls"]) if row["draft_calls"] else None,
                    "setting": row["setting"],
                }
            )
    return rows


def family_of(spec: str) -> str:
    """The anchors' family name of a drafter spec: ``eagle-tree`` (EAGLE with topk > 1), ``eagle-chain``,
    ``medusa``, ``mlp``, ``draft`` (the distilled draft, chain or tree), ``lookup`` (chain or tree),
    ``hybrid``, or the spec's own kind (``suffix``, ``early-exit``)."""
    kind, _, args = spec.partition(":")
    kind = kind.split(",")[0]
    if kind == "eagle":
        options = dict(part.split("=", 1) for part in args.split(",")[1:] if "=" in part)
        return "eagle-tree" if int(options.get("topk", 1)) > 1 else "eagle-chain"
    return {"draft-tree": "draft", "lookup-tree": "lookup"}.get(kind, kind)


def anchor_for(spec: str, anchors: Sequence[Mapping[str, Any]] | None = None) -> Mapping[str, Any] | None:
    """The anchor row of a drafter spec's family (None: no published row)."""
    family = family_of(spec)
    for row in load_anchors() if anchors is None else anchors:
        if family in row["families"]:
            return row
    return None


def floor_model(record: Mapping[str, Any]) -> dict[str, float]:
    """The floor's parts from the record (seconds): ``weights_s`` (the target's weight bytes at the
    measured bandwidth), ``row_s`` (one row's multiply-adds at the measured int8 peak), ``plain_s`` (the
    larger: a plain step's floor) and the two roofs."""
    counts = record["model_counts"]
    peak = float(record["peaks"]["int8"]["median_per_s"])
    bandwidth = float(record["bandwidth"]["bandwidth_gbps"]) * 1e9
    weights_s = float(counts["weight_bytes"]) / bandwidth
    row_s = float(counts["macs"]) / peak
    return {"weights_s": weights_s, "row_s": row_s, "plain_s": max(weights_s, row_s),
            "int8_per_s": peak, "bytes_per_s": bandwidth}  # fmt: skip


def _v_floor(k: float, floor: Mapping[str, float]) -> float:
    return max(floor["weights_s"], k * floor["row_s"]) / floor["plain_s"]


def _c_floor(work: Mapping[str, Any] | None, calls: float, floor: Mapping[str, float]) -> float:
    """Draft calls x (the drafter's weights streamed once, or one row's multiply-adds, the larger), in
    plain floor steps: the least a round's drafting can cost."""
    if not work or not work.get("macs") or calls <= 0:
        return 0.0
    per_call = max(
        float(work["weight_bytes"]) / floor["bytes_per_s"], float(work["macs"]) / floor["int8_per_s"]
    )
    return calls * per_call / floor["plain_s"]


def verify_measured(record: Mapping[str, Any], k: float, shape: str) -> float:
    """T(k), seconds, of a verify call of k rows from the record's verify curve for ``shape`` (``chain``
    or ``tree``: bare forwards, median), linear between its k."""
    curves = record["verify_curves"]
    ks = np.asarray(curves["ks"], dtype=float)
    return float(np.interp(k, ks, np.asarray(curves["median_s"][shape], dtype=float)))


def plain_step(record: Mapping[str, Any], engine: str, temperature: float) -> float:
    """Plain decoding's loop step on ``engine`` at ``temperature``: the median over its runs of decode
    seconds per token (the unit of the record's c per round)."""
    steps = [
        r["decode_s"] / r["new_tokens"]
        for r in record["runs"]
        if r["config"] == f"{engine}/plain" and r["temperature"] == temperature and r["new_tokens"]
    ]
    if not steps:
        raise ValueError(f"no plain runs of {engine!r} at temperature {temperature}")
    return float(np.median(steps))


def measured_speedup(
    record: Mapping[str, Any],
    config: str,
    temperature: float,
    *,
    baseline: str | None = None,
    seed: int = 0,
) -> tuple[float, float | None, float | None]:
    """``config`` over ``baseline`` (default: its engine's plain decoding) at ``temperature``: time per
    token paired by prompt (:func:`specdec.theory.intervals.paired_speedup`, repetitions' median,
    geometric mean over prompts, bootstrap interval)."""
    from specdec.theory.intervals import paired_speedup

    base = baseline if baseline is not None else f"{config.split('/')[0]}/plain"
    if base == config:
        raise ValueError(f"baseline must differ from config; both are {config!r}")
    times: dict[str, dict[tuple[str, str], list[float]]] = {config: {}, base: {}}
    for run in record["runs"]:
        if run["config"] in times and run["temperature"] == temperature and run["new_tokens"]:
            key = (run["task"], run["prompt"])
            times[run["config"]].setdefault(key, []).append(run["decode_s"] / run["new_tokens"])
    mine, plain = times[config], times[base]
    prompts = sorted(set(mine) & set(plain))
    if not prompts:
        raise ValueError(f"no runs of both {config!r} and {base!r} at temperature {temperature}")
    return paired_speedup([plain[p] for p in prompts], [mine[p] for p in prompts], seed=seed)


def split(
    record: Mapping[str, Any], anchors: Sequence[Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Per speculative configuration and temperature of the record's tree summary: the four speedups
    (module docstring) and the three ratios between them, ``loop`` (measured / at measured costs),
    ``implementation`` (at measured costs / at floor) and ``method`` (at floor / anchor at floor)."""
    anchors = load_anchors() if anchors is None else anchors
    floor = floor_model(record)
    work_of = record.get("draft_work", {})
    out = []
    for row in record["trees"]["rows"]:
        config, temp = row["config"], float(row["temperature"])
        spec = config.split("/")[1]
        tokens = float(row["tokens_per_call"])
        nodes = float(row["nodes_per_round"])
        calls = float(row["draft_calls_per_round"])
        shape = "tree" if "noharm" in config or "tree" in spec or "topk" in spec or spec.startswith(
            ("suffix", "medusa", "mlp", "hybrid")
        ) else "chain"  # fmt: skip
        c_measured = float(row["c_round_median"])  # in plain loop steps
        work = work_of.get(spec)
        # Theorem 3.8's units: v(k) = T(k) / T(1) of the run's curve, a one-row call priced as one plain
        # loop step (the curve's bare call and the loop's step are timed by different code; their ratio
        # belongs to the loop's factor, not to the verify call's)
        v = verify_measured(record, nodes + 1, shape) / verify_measured(record, 1, "chain")
        at_measured = tokens / (v + c_measured)
        at_floor = tokens / (_v_floor(nodes + 1, floor) + _c_floor(work, calls, floor))
        anchor = anchor_for(spec, anchors)
        anchor_at_floor = None
        if anchor is not None and anchor["nodes"] is not None:
            a_nodes, a_calls = float(anchor["nodes"]), float(anchor["draft_calls"] or 0)
            anchor_at_floor = anchor["tokens_per_call"] / (
                _v_floor(a_nodes + 1, floor) + _c_floor(work, a_calls, floor)
            )
        est, low, high = measured_speedup(record, config, temp)
        out.append({
            "config": config, "spec": spec, "family": family_of(spec), "temperature": temp,
            "tokens_per_call": tokens, "nodes": nodes, "draft_calls": calls, "c_measured": c_measured,
            "measured": {"estimate": est, "low": low, "high": high},
            "at_measured_costs": at_measured, "at_floor": at_floor,
            "anchor": None if anchor is None else anchor["method"], "anchor_at_floor": anchor_at_floor,
            "loop": est / at_measured, "implementation": at_measured / at_floor,
            "method": None if anchor_at_floor is None else at_floor / anchor_at_floor,
        })  # fmt: skip
    return out


def fixed_budget(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The configurations of :func:`split`'s rows that run at a budget fixed before the run: not a
    do-no-harm policy (``.../noharm``) nor a rule that adapts its budget (``lookup+heuristic``), whose
    rounds mix budgets (and plain steps) and so belong to no one family's split. Sorted, each once."""
    return sorted({r["config"] for r in rows if "+" not in r["spec"] and not r["config"].endswith("/noharm")})


def _rows_at(rows: Sequence[Mapping[str, Any]], temperature: float, members: Sequence[str]) -> list:
    """The split's rows of the configurations in ``members`` at ``temperature``."""
    wanted = set(members)
    return [r for r in rows if r["config"] in wanted and float(r["temperature"]) == float(temperature)]


def summary(rows: Sequence[Mapping[str, Any]], temperature: float, members: Sequence[str]) -> dict[str, Any]:
    """The split's rows (:func:`split`) of the configurations in ``members`` at ``temperature`` summarized:
    ``n``; for each speedup (``measured``'s estimate, ``at_measured_costs``, ``at_floor``,
    ``anchor_at_floor``) its ``(min, max)`` and how many are above 1 (``*_above``); for each factor
    (``loop``, ``implementation``, ``method``) its ``(min, max)`` and geometric mean (``*_gmean``); a
    speedup or factor that no member has is ``None``. Raises ValueError when no member has a row."""
    mine = _rows_at(rows, temperature, members)
    if not mine:
        raise ValueError(f"no row of {list(members)} at temperature {temperature}")
    out: dict[str, Any] = {"n": len(mine)}
    values = {
        "measured": [r["measured"]["estimate"] for r in mine],
        **{
            k: [r[k] for r in mine if r[k] is not None]
            for k in ("at_measured_costs", "at_floor", "anchor_at_floor")
        },
    }
    for key, vals in values.items():
        out[key] = (min(vals), max(vals)) if vals else None
        out[f"{key}_above"] = sum(v > 1.0 for v in vals)
    for key in ("loop", "implementation", "method"):
        vals = [float(r[key]) for r in mine if r[key] is not None]
        out[key] = (min(vals), max(vals)) if vals else None
        out[f"{key}_gmean"] = float(geomean(vals)) if vals else None
        out[f"{key}_n"] = len(vals)
    return out


def whose_gap(
    rows: Sequence[Mapping[str, Any]], temperature: float, members: Sequence[str]
) -> dict[str, Any]:
    """Which of two shortfalls is the larger over the configurations of ``members`` at ``temperature``
    that have both factors (an anchor that states a tree size): the implementation's (at measured costs
    over the floor) or the method's (the floor at the measured acceptance over the floor at the anchor's).
    A factor of 1 or more is no shortfall (``max(0, -log f)`` of each geometric mean). Returns ``n`` (the
    configurations compared), the two geometric means (None when ``n`` is 0) and ``whose``:
    ``"implementation"``, ``"method"``, ``"neither"`` (both factors >= 1) or ``"undecided"`` (``n`` is 0:
    no anchor of these configurations states a tree size). The loop's factor is not compared."""
    both = [r for r in _rows_at(rows, temperature, members) if r["method"] is not None]
    if not both:
        return {"n": 0, "implementation": None, "method": None, "whose": "undecided"}
    impl = float(geomean([float(r["implementation"]) for r in both]))
    meth = float(geomean([float(r["method"]) for r in both]))
    short_impl, short_meth = max(0.0, -np.log(impl)), max(0.0, -np.log(meth))
    if short_impl == 0.0 and short_meth == 0.0:
        whose = "neither"
    else:
        whose = "implementation" if short_impl >= short_meth else "method"
    return {"n": len(both), "implementation": impl, "method": meth, "whose": whose}
