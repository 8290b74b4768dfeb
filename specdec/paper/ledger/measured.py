"""Measured verdicts: the article's hardware and load claims against the book's benchmark records.

The ledger's other verdicts judge the article against its sources (is the arithmetic right, is
the paper quoted faithfully?). The claims below are about machines, so they are also judged
against measurements, on the machines and engines that made the book's records, each by a
rule stated in :data:`RULES` and applied by code:

* 一 (claim 一-11, with 一-13's "验证只有 1 步"): single-sequence decoding is bandwidth-bound,
  so verifying gamma + 1 tokens costs about one step -- the measured verify cost
  ``v(gamma + 1) = T(gamma + 1) / T(1)`` per CPU engine (``results/bench/engine-modes-*.json``)
  and per GPU target shape and clock (``results/gpu/*.json``);
* D1: the ridge point of a processor is 10^2-10^3 FLOP/byte -- the measured ridge;
* D2: weight bytes / bandwidth gives single-stream tokens/s "to an order of magnitude" -- that
  estimate on the measured bandwidth against the measured tokens/s (16-bit weights, as D2);
* 第三 (claim 九-6): adapting gamma gains over a fixed gamma, up to ~60 % -- the adaptive rules
  of ``results/bench/dynamic-gamma-*.json`` against the best fixed gamma, with intervals, and
  Section 3.5's oracle replayed on real drafts (``results/bench/oracle-gamma-*.json``,
  :func:`specdec.analysis.oracle.summarize_record`) against the bound;
* 第六 (claim 九-9): throughput reduction beyond a batch size of 64 -- the speedup predicted
  from a measured cost surface T(b, k) as the batch grows (the GPU record; a CPU batch-surface
  record ``results/bench/batch-surface-*.json`` when one exists).

A measured verdict is one of :data:`MEASURED_VERDICTS`: it *holds here* or *fails here* when the
rule decides, is *undecided here* when the record cannot decide (an interval across the bound,
a record that stops short of the claim's range), and *not recorded on this machine* when the
record does not exist. "Here" is always the machine and engine named in the row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from specdec.analysis import records
from specdec.analysis.hardware import (
    adaptive_vs_fixed,
    batch_gains,
    gpu_shapes,
    gpu_surface,
    load_record,
    verify_curves,
    verify_intervals,
)
from specdec.analysis.oracle import summarize_record
from specdec.paper import published
from specdec.paper.article import load_article_claims, printed_values
from specdec.paper.audit import agrees, parse_printed
from specdec.theory.checks import check_int
from specdec.theory.cost import step_cost

__all__ = [
    "DEFAULT_GAMMA",
    "FAILS",
    "HOLDS",
    "MEASURED_VERDICTS",
    "NOT_RECORDED",
    "RULES",
    "UNDECIDED",
    "Measured",
    "adaptive_gamma_verdicts",
    "batch_verdicts",
    "find_records",
    "measured_ledger",
    "oracle_gamma_verdicts",
    "ridge_verdicts",
    "verify_step_verdicts",
    "weights_only_verdicts",
]

HOLDS = "holds here"
FAILS = "fails here"
UNDECIDED = "undecided here"
NOT_RECORDED = "not recorded on this machine"
#: The verdicts of a measurement, in the order the ledger counts them.
MEASURED_VERDICTS = (HOLDS, FAILS, UNDECIDED, NOT_RECORDED)

#: The article's item, the ledger claim it belongs to, and the rule that decides it.
RULES: dict[str, tuple[str, str]] = {
    "一": (
        "一-11",
        "v(γ+1) = T(γ+1)/T(1) at the γ the CPU record decodes with counts as 'about one step' when it "
        "rounds to the article's '1 step' (一-13) by the book's half-unit rule, i.e. lies below 1.5. "
        "With the record's 95 % interval over passes: holds when the whole interval is below 1.5, "
        "fails when it is all at or above, undecided otherwise; without one (GPU medians, kernel "
        "means) the point value decides.",
    ),
    "D1": (
        "D1",
        "the measured ridge point (peak matmul FLOP/s over bandwidth) lies in D1's range 10²-10³ "
        "FLOP/byte when log10(ridge) rounds to 2 or 3, i.e. lies in [1.5, 3.5).",
    ),
    "D2": (
        "D2",
        "D2's estimate, weight bytes ÷ bandwidth, on the measured bandwidth and a 16-bit step's weight "
        "bytes (specdec.theory.cost.step_cost), holds 'to an order of magnitude' "
        "(D2's own words, 仅示数量级) "
        "when log10(measured tokens/s ÷ estimate) rounds to 0, i.e. the two lie within a factor √10.",
    ),
    "第三": (
        "九-6",
        "per drafter, the best adaptive rule against the best fixed γ (chosen after the fact), the ratio "
        "of decode times with its 95 % bootstrap interval over prompts: holds when the interval lies "
        "above 1, fails when every rule's interval lies below 1, undecided otherwise. The oracle of "
        "Section 3.5, replayed on the same kind of drafts, against the bound: holds when its gain's 95 % "
        "interval lies above 1 and at most at the bound read at its printed precision (~60 %: 60.5 %), "
        "fails when it lies wholly above the bound or wholly at or below 1, undecided otherwise.",
    ),
    "第六": (
        "九-9",
        "with a free draft (c = 0) at the paper's T5-small α (Table 4, EnDe, T = 0), the speedup over "
        "plain decoding at each recorded batch b, max over γ of E[T]/v_b(γ+1) on the k measured at "
        "every batch; r(b) = speedup(b)/speedup(1). The gain is reduced from b on when r rounds "
        "below 1.0 at one decimal (r < 0.95) at b and every larger recorded batch. Holds when that "
        "onset lies above 64; fails when it lies at or below 64, or when no reduction shows in a "
        "record that goes beyond 64; undecided when none shows and the record stops at or below 64.",
    ),
}

#: The gamma of 一's verdict when no CPU record gives one (specdec run engine-modes's default).
DEFAULT_GAMMA = 4
BENCH = Path("bench")
GPU = Path("gpu")


class Measured(NamedTuple):
    """One measured verdict: a claim on one machine, engine and target, from one record."""

    item: str  # the article's item: 一, D1, D2, 第三, 第六
    claim: str  # the ledger claim it belongs to
    machine: str
    engine: str
    target: str
    record: str  # the record's file name ("" when not recorded)
    evidence: str  # the numbers behind the verdict, rounded for reading
    verdict: str
    values: Mapping[str, float]  # the numbers, unrounded (the chapter rounds what it glues)


def _row(
    item: str,
    machine: str,
    engine: str,
    target: str,
    record: str,
    evidence: str,
    verdict: str,
    **values: float,
) -> Measured:
    if verdict not in MEASURED_VERDICTS:
        raise ValueError(f"verdict must be one of {MEASURED_VERDICTS}; got {verdict!r}")
    return Measured(item, RULES[item][0], machine, engine, target, record, evidence, verdict, values)


def _cpu_machine(record: Mapping[str, Any]) -> str:
    env = record["environment"]
    threads = record.get("settings", {}).get("threads", env.get("threads"))
    return f"{env['device_name']} (CPU), {threads} thread{'s' if threads != 1 else ''}"


def _gpu_machine(record: Mapping[str, Any]) -> str:
    return f"{record['device']['name']} (GPU)"


GPU_CLOCKS = {
    "kernel": "transformers eager, GPU kernel time (what a launch-free engine nears)",
    "wall": "transformers eager, wall clock",
}
CPU_TARGET = "SmolLM2-135M-Instruct"


def _interval_verdict(low: float, high: float) -> str:
    """HOLDS when low and high both round to 1 step, FAILS when neither does, else UNDECIDED."""
    ok_low, ok_high = agrees("1", low), agrees("1", high)
    if ok_low and ok_high:
        return HOLDS
    if not ok_low and not ok_high:
        return FAILS
    return UNDECIDED


def _free_gamma(curve: Mapping[int, float]) -> int:
    """The largest gamma such that v(k) rounds to 1 step for every measured k <= gamma + 1."""
    free = 0
    for k in sorted(curve):
        if k >= 2:
            if not agrees("1", curve[k]):
                break
            free = k - 1
    return free


# --------------------------------------------------------------------------- 一: verify cost
def verify_step_verdicts(
    cpu: Mapping[str, Any] | None, gpu: Mapping[str, Any] | None, gamma: int | None = None
) -> list[Measured]:
    """一: does a call over gamma + 1 tokens cost about one step? One row per CPU engine of an
    engine-modes record and per GPU shape and clock of a GPU record.

    ``gamma`` defaults to the CPU record's decoding gamma (``settings.gamma``); it must be given
    when there is no CPU record.
    """
    if gamma is None:
        if cpu is None:
            raise ValueError("gamma must be given when there is no CPU record")
        gamma = int(cpu["settings"]["gamma"])
    check_int("gamma", gamma, low=1)
    k = gamma + 1
    rows = []
    if cpu is None:
        rows.append(_row("一", "CPU", "every engine", CPU_TARGET, "", "no engine-modes record", NOT_RECORDED))
    else:
        curves, intervals = verify_curves(cpu), verify_intervals(cpu)
        for engine, cells in intervals.items():
            if k not in cells:
                raise ValueError(f"the CPU record has no T({k}) for {engine!r}")
            v, low, high = cells[k]
            free = _free_gamma(curves[engine])
            rows.append(
                _row(
                    "一",
                    _cpu_machine(cpu),
                    engine,
                    CPU_TARGET,
                    cpu["file"],
                    f"v({k}) = {v:.2f} [{low:.2f}, {high:.2f}]; rounds to one step up to γ = {free}",
                    _interval_verdict(low, high),
                    v=v,
                    low=low,
                    high=high,
                    free_gamma=free,
                )
            )
    if gpu is None:
        rows.append(_row("一", "GPU", "every engine", "every shape", "", "no GPU record", NOT_RECORDED))
    else:
        for shape in gpu_shapes(gpu):
            for clock, engine in GPU_CLOCKS.items():
                surface = gpu_surface(gpu, shape, clock)
                curve = {kk: t / surface[(1, 1)] for (b, kk), t in surface.items() if b == 1}
                if k not in curve:
                    raise ValueError(f"the GPU record has no T(1, {k}) for {shape!r} ({clock})")
                v, free = curve[k], _free_gamma(curve)
                rows.append(
                    _row(
                        "一",
                        _gpu_machine(gpu),
                        engine,
                        shape,
                        gpu["file"],
                        f"v({k}) = {v:.2f}; rounds to one step up to γ = {free}",
                        HOLDS if agrees("1", v) else FAILS,
                        v=v,
                        free_gamma=free,
                    )
                )
    return rows


# --------------------------------------------------------------------------- D1: the ridge
def _claim_printed(claim_id: str) -> dict[str, list[str]]:
    """The printed values of one claim of the article (its ``printed`` field, parsed)."""
    (claim,) = [c for c in load_article_claims() if c.id == claim_id]
    return printed_values(claim.printed)


def ridge_verdicts(cpu: Mapping[str, Any] | None, gpu: Mapping[str, Any] | None) -> list[Measured]:
    """D1: the measured ridge point per machine (and matmul dtype on the CPU), against D1's
    10^2-10^3 FLOP/byte; the evidence places D1's own single-stream intensity below it."""
    printed = _claim_printed("D1")
    low, high = (int(printed[key][0]) for key in ("ridge_low_exp", "ridge_high_exp"))
    intensity = float(printed["intensity"][0])

    def row(machine: str, engine: str, record: str, ridge: float) -> Measured:
        orders = math.log10(ridge)
        verdict = HOLDS if low <= math.floor(orders + 0.5) <= high else FAILS
        evidence = (
            f"ridge {ridge:.3g} FLOP/byte (10^{orders:.2f}); D1's {intensity:g} FLOP/byte step sits "
            f"{math.log10(ridge / intensity):.1f} orders below it"
        )
        return _row("D1", machine, engine, "-", record, evidence, verdict, ridge=ridge)

    rows = []
    if cpu is None:
        rows.append(_row("D1", "CPU", "torch matmul", "-", "", "no engine-modes record", NOT_RECORDED))
    else:
        threads = cpu["settings"]["threads"]
        entry = next(e for e in cpu["roofline"]["machine"]["rooflines"] if e["threads"] == threads)
        for dtype, ridge in entry["ridge_flop_per_byte"].items():
            rows.append(row(_cpu_machine(cpu), f"torch {dtype} matmul", cpu["file"], float(ridge)))
    if gpu is None:
        rows.append(_row("D1", "GPU", "torch matmul", "-", "", "no GPU record", NOT_RECORDED))
    else:
        rows.append(
            row(
                _gpu_machine(gpu),
                "torch bfloat16 matmul",
                gpu["file"],
                float(gpu["roofline"]["ridge_flop_per_byte"]),
            )
        )
    return rows


# --------------------------------------------------------------------------- D2: weights only
def _estimate_row(
    machine: str,
    engine: str,
    target: str,
    record: str,
    bandwidth_gbps: float,
    weight_bytes: float,
    measured: float,
) -> Measured:
    estimate = bandwidth_gbps * 1e9 / weight_bytes
    ratio = measured / estimate
    verdict = HOLDS if math.floor(math.log10(ratio) + 0.5) == 0 else FAILS
    return _row(
        "D2",
        machine,
        engine,
        target,
        record,
        f"estimate {estimate:.0f} tokens/s ({weight_bytes / 1e6:.0f} MB of weights at "
        f"{bandwidth_gbps:.0f} GB/s), measured {measured:.1f}: {ratio:.2f} of it",
        verdict,
        estimate=estimate,
        measured=measured,
        ratio=ratio,
    )


def weights_only_verdicts(cpu: Mapping[str, Any] | None, gpu: Mapping[str, Any] | None) -> list[Measured]:
    """D2: weight bytes / bandwidth against measured single-stream tokens/s, 16-bit weights.

    CPU: the record's bfloat16 engines (plain decoding tokens/s, one thread, the read-stream
    bandwidth of that thread count). GPU: each shape's bfloat16 step at batch 1, by kernel time
    and by wall clock, on the record's copy bandwidth.
    """
    rows = []
    if cpu is None:
        rows.append(
            _row("D2", "CPU", "16-bit engines", CPU_TARGET, "", "no engine-modes record", NOT_RECORDED)
        )
    else:
        threads = cpu["settings"]["threads"]
        entry = next(e for e in cpu["roofline"]["machine"]["rooflines"] if e["threads"] == threads)
        cost = step_cost(
            cpu["chosen_mode"]["model"],
            k=1,
            context=int(cpu["chosen_mode"]["context"]),
            weight_format="bfloat16",
        )
        for engine, summary in cpu["summary"]["engines"].items():
            if engine.endswith("bfloat16"):
                rows.append(
                    _estimate_row(
                        _cpu_machine(cpu),
                        engine,
                        CPU_TARGET,
                        cpu["file"],
                        float(entry["bandwidth_gbps"]),
                        cost["weight_bytes"],
                        float(summary["plain_tok_s"][0]),
                    )
                )
    if gpu is None:
        rows.append(_row("D2", "GPU", "every engine", "every shape", "", "no GPU record", NOT_RECORDED))
    else:
        bandwidth = float(gpu["roofline"]["bandwidth_gb_s"])
        for shape in gpu_shapes(gpu):
            section = gpu[f"shape:{shape}"]
            cost = step_cost(
                section["config"], k=1, context=int(section["surface"]["context"]), weight_format="bfloat16"
            )
            for clock, engine in GPU_CLOCKS.items():
                step = gpu_surface(gpu, shape, clock)[(1, 1)]
                rows.append(
                    _estimate_row(
                        _gpu_machine(gpu),
                        engine,
                        shape,
                        gpu["file"],
                        bandwidth,
                        cost["weight_bytes"],
                        1.0 / step,
                    )
                )
    return rows


# --------------------------------------------------------------------------- 第三: adaptive gamma
def _oracle_bound() -> tuple[str, float]:
    """Section 3.5's "~60%" as printed, and the largest speedup ratio it allows at its printed
    precision (1 + 60.5 / 100)."""
    printed = published.statement("sec3_5_oracle_gain")
    value, half = parse_printed(printed)
    return printed, 1 + (value + half) / 100


def adaptive_gamma_verdicts(record: Mapping[str, Any] | None) -> list[Measured]:
    """第三: per drafter of a dynamic-gamma record, its best adaptive rule against the best fixed gamma."""
    if record is None:
        return [_row("第三", "CPU", "every engine", CPU_TARGET, "", "no dynamic-gamma record", NOT_RECORDED)]
    printed, bound = _oracle_bound()
    comparisons = adaptive_vs_fixed(record)
    rows = []
    for drafter in dict.fromkeys(c["drafter"] for c in comparisons):
        mine = [c for c in comparisons if c["drafter"] == drafter]
        best = max(mine, key=lambda c: c["ratio"])
        if any(c["low"] > 1 for c in mine):
            verdict = HOLDS
        elif all(c["high"] < 1 for c in mine):
            verdict = FAILS
        else:
            verdict = UNDECIDED
        exceeded = any(c["low"] > bound for c in mine)
        rules = "; ".join(f"{c['rule']} {c['ratio']:.2f} [{c['low']:.2f}, {c['high']:.2f}]" for c in mine)
        rows.append(
            _row(
                "第三",
                _cpu_machine(record),
                f"lean {record['mode']} target, drafter {drafter}, adaptive rules",
                CPU_TARGET,
                record["file"],
                f"against the best fixed {best['best_fixed']}: {rules}; the {printed} bound "
                f"{'is exceeded' if exceeded else 'is not exceeded'} ({bound:.3f})",
                verdict,
                ratio=best["ratio"],
                low=best["low"],
                high=best["high"],
                max_high=max(c["high"] for c in mine),
            )
        )
    return rows


def oracle_gamma_verdicts(record: Mapping[str, Any] | None) -> list[Measured]:
    """第三, its bound: per drafter of an oracle-gamma record, Section 3.5's oracle (drafts exactly
    as many tokens as the target will accept) replayed against the best fixed gamma."""
    if record is None:
        return [
            _row(
                "第三",
                "CPU",
                "Section 3.5 oracle",
                CPU_TARGET,
                "",
                "no results/bench/oracle-gamma-*.json",
                NOT_RECORDED,
            )
        ]
    printed, bound = _oracle_bound()
    rows = []
    for s in summarize_record(record):
        if s["gain_low"] > bound or s["gain_high"] <= 1:
            verdict = FAILS
        elif s["gain_low"] > 1 and s["gain_high"] <= bound:
            verdict = HOLDS
        else:
            verdict = UNDECIDED
        rows.append(
            _row(
                "第三",
                _cpu_machine(record),
                f"lean {record['mode']} target, drafter {s['drafter']}, Section 3.5 oracle (replayed)",
                CPU_TARGET,
                record["file"],
                f"oracle over the best fixed γ = {s['best_gamma']}: {s['gain']:.2f} [{s['gain_low']:.2f}, "
                f"{s['gain_high']:.2f}] (α = {s['alpha']:.2f}, c = {s['c']:.3f}; the i.i.d. model on the "
                f"same verify curve predicts {s['iid_gain']:.2f}); the bound {printed} allows up to "
                f"{bound:.3f}",
                verdict,
                gain=s["gain"],
                low=s["gain_low"],
                high=s["gain_high"],
                iid_gain=s["iid_gain"],
                bound=bound,
            )
        )
    return rows


# --------------------------------------------------------------------------- 第六: batch size
def _t5_small_alpha() -> float:
    (row,) = [
        r
        for r in published.load_table("table4")
        if (r["task"], r["M_q"], r["temp"]) == ("EnDe", "T5-small", "0")
    ]
    return published.value(row["alpha"])


def _batch_row(
    machine: str,
    engine: str,
    target: str,
    record: str,
    surface: Mapping[tuple[int, int], float],
    alpha: float,
    threshold: int,
) -> Measured:
    gains = batch_gains(surface, alpha)
    batches = sorted(gains)
    base = gains[batches[0]][1]
    ratio = {b: gains[b][1] / base for b in batches}
    reduced = {b: not agrees("1.0", ratio[b]) and ratio[b] < 1 for b in batches}
    onset = next((b for i, b in enumerate(batches) if all(reduced[x] for x in batches[i:])), None)
    largest = batches[-1]
    if onset is not None:
        verdict = HOLDS if onset > threshold else FAILS
        before = max((b for b in batches if b < onset), default=None)
        where = f"reduced from b = {onset} on (onset in ({before}, {onset}])"
    else:
        verdict = FAILS if largest > threshold else UNDECIDED
        where = f"no reduction up to b = {largest}, the record's largest batch"
    evidence = (
        f"speedup {gains[batches[0]][1]:.2f} at b = {batches[0]}, {gains[largest][1]:.2f} at b = {largest} "
        f"(r = {ratio[largest]:.2f}); {where}"
    )
    return _row(
        "第六",
        machine,
        engine,
        target,
        record,
        evidence,
        verdict,
        alpha=alpha,
        gain_first=gains[batches[0]][1],
        gain_last=gains[largest][1],
        ratio_last=ratio[largest],
        onset=float(onset) if onset is not None else math.nan,
        largest=float(largest),
    )


def _cpu_batch_surfaces(record: Mapping[str, Any]) -> dict[str, dict[tuple[int, int], float]]:
    """T(b, k) per target model of a CPU batch-surface record (``specdec run batch-surface``):
    ``surface.cells`` maps a model name (``target-float32``, ``draft-bfloat16``, ...) to cells
    with ``b``, ``k`` and ``median_s``; the targets' are returned, keyed by their mode."""
    try:
        cells = record["surface"]["cells"]
        out = {
            name.removeprefix("target-"): {(int(c["b"]), int(c["k"])): float(c["median_s"]) for c in rows}
            for name, rows in cells.items()
            if name.startswith("target-")
        }
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"record {record.get('file', '?')} must hold surface.cells (per model name) with b, k and "
            f"median_s; missing {exc}"
        ) from None
    if not out:
        raise ValueError(f"record {record.get('file', '?')} must hold surface.cells of a target-* model")
    return out


def batch_verdicts(gpu: Mapping[str, Any] | None, cpu_batch: Mapping[str, Any] | None) -> list[Measured]:
    """第六: where the predicted gain starts to fall as the batch grows, against the article's 64."""
    threshold = int(
        printed_values(next(c for c in load_article_claims() if c.id == "九-9").printed)["batch"][0]
    )
    alpha = _t5_small_alpha()
    rows = []
    if cpu_batch is None:
        rows.append(
            _row(
                "第六",
                "CPU",
                "every engine",
                CPU_TARGET,
                "",
                "no results/bench/batch-surface-*.json",
                NOT_RECORDED,
            )
        )
    else:
        for mode, surface in _cpu_batch_surfaces(cpu_batch).items():
            rows.append(
                _batch_row(
                    _cpu_machine(cpu_batch),
                    f"{cpu_batch.get('engine', '?')} {mode}",
                    CPU_TARGET,
                    cpu_batch["file"],
                    surface,
                    alpha,
                    threshold,
                )
            )
    if gpu is None:
        rows.append(_row("第六", "GPU", "every engine", "every shape", "", "no GPU record", NOT_RECORDED))
    else:
        for shape in gpu_shapes(gpu):
            for clock, engine in GPU_CLOCKS.items():
                rows.append(
                    _batch_row(
                        _gpu_machine(gpu),
                        engine,
                        shape,
                        gpu["file"],
                        gpu_surface(gpu, shape, clock),
                        alpha,
                        threshold,
                    )
                )
    return rows


# --------------------------------------------------------------------------- all of them
def find_records(results: str | Path) -> dict[str, dict[str, Any] | None]:
    """The records the measured verdicts read, from a ``results/`` folder (None where absent).

    Keys: ``cpu`` (the engine benchmark at one thread, kind ``engine-modes``, in ``bench/``),
    ``gpu`` (``gpu/``), ``dynamic`` (``dynamic-gamma``), ``oracle`` (``oracle-gamma``), ``batch``
    (``batch-surface``): each the newest of its kind by its stored timestamp
    (:func:`specdec.analysis.records.newest`, which also notes it for the chapter's provenance table).
    """
    root = Path(results)
    if not root.is_dir():
        raise ValueError(f"results must be an existing folder; got {root}")
    queries = {
        "cpu": (BENCH, "engine-modes", 1),
        "gpu": (GPU, "gpu", None),
        "dynamic": (BENCH, "dynamic-gamma", None),
        "batch": (BENCH, "batch-surface", None),
        "oracle": (BENCH, "oracle-gamma", None),
    }
    out: dict[str, dict[str, Any] | None] = {}
    for key, (folder, kind, threads) in queries.items():
        try:
            found = records.newest(root / folder, kind, threads=threads)
        except FileNotFoundError:
            out[key] = None
        else:
            out[key] = load_record(found["path"])
    return out


def measured_ledger(records: Mapping[str, Mapping[str, Any] | None]) -> list[Measured]:
    """Every measured verdict, item by item (一, D1, D2, 第三, 第六), from :func:`find_records`'s records."""
    for key in ("cpu", "gpu", "dynamic", "oracle", "batch"):
        if key not in records:
            raise ValueError(f"records must have the key {key!r} (None when the record is absent)")
    cpu, gpu = records["cpu"], records["gpu"]
    return [
        *verify_step_verdicts(cpu, gpu, None if cpu is not None else DEFAULT_GAMMA),
        *ridge_verdicts(cpu, gpu),
        *weights_only_verdicts(cpu, gpu),
        *adaptive_gamma_verdicts(records["dynamic"]),
        *oracle_gamma_verdicts(records["oracle"]),
        *batch_verdicts(gpu, records["batch"]),
    ]
