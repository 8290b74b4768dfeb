"""The campaign runner (issue #22): every plain decoder and speculative configuration on the same prompts.

``specdec run campaign`` (:class:`CampaignRun`) builds the engines and drafters and calls
:func:`run_campaign`; the analysis is :func:`specdec.analysis.crossfit.analyse` (gamma chosen by
cross-fitting).

* **Engines** (:class:`Engine`): plain decoders, each a model with its thread count and what it is
  (engine, mode, threads, format). **Configurations** (:class:`Config`): an engine's plain
  decoding, or a drafter on an engine at a gamma (an int) or under an adaptive policy
  (:class:`specdec.theory.policies.HeuristicGamma` started at that gamma); a *family* is a drafter (or
  drafter + policy) on one engine, its members differ in gamma only.
* **Cells**: (temperature, prompt). A cell runs ``repeats`` repetitions; each repetition runs every
  engine once in a fresh seeded order, and on each engine :func:`specdec.measure.pairedrun.paired_block`
  (plain and that engine's configurations, order drawn, plain first or last alternately), all
  with one sampling seed and exactly ``new_tokens`` tokens (EOS ignored).
* **Resume**: the record is written (:func:`specdec.theory.recordio.write_record`) to ``<out>.partial.json``
  after every finished cell, and a run with the same settings continues from it
  (:mod:`specdec.measure.runner`, the runner Part IV's benchmark shares); a budget stops
  the run cleanly after the cell that exhausts it. When every cell is done the cross-fit analysis
  is added and the record moves to ``<out>``.
* **Estimate**: :func:`calibrate` times one short repetition of every configuration on one
  prompt; :func:`estimate_seconds` scales it to any settings.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from specdec.analysis.crossfit import analyse, fold_of
from specdec.experiments.options import INCOMPLETE, Program, Refused, option, read_record
from specdec.measure.pairedrun import PLAIN_AT, finish_cell, paired_block
from specdec.measure.runner import RunSettings, as_stored, open_partial, run_cells
from specdec.theory.checks import check_choice, check_float, check_int, check_ints
from specdec.theory.recordio import jsonable, write_record

__all__ = [
    "RECORD_FORMAT",
    "CampaignRun",
    "CampaignSettings",
    "Config",
    "Engine",
    "calibrate",
    "cells",
    "estimate_run",
    "estimate_seconds",
    "reanalyse",
    "reopen",
    "resumable",
    "run_campaign",
    "spec_configs",
]

RECORD_FORMAT = 1
TEMPERATURES = (0.0, 1.0)


@dataclass(frozen=True)
class CampaignSettings(RunSettings):
    """The first campaign's design (:class:`CampaignRun` builds it from its options, the machine
    identity taken before any thread count is pinned): :meth:`to_record` is the record's settings and
    the key a partial campaign must hold to be resumed."""

    quick: bool
    prompts: int
    new_tokens: int
    repeats: int
    gammas: tuple[int, ...]
    early_exit: tuple[int, ...]
    drafts: str | None
    adaptive: bool
    mode: str
    threads: str | None
    llamacpp_gguf: str | None
    llamacpp: bool
    hf: bool
    seed: int
    machine: dict[str, Any]

    def __post_init__(self) -> None:
        check_int("prompts", self.prompts, low=2, note="two halves")
        check_int("new_tokens", self.new_tokens, low=2)
        check_int("repeats", self.repeats, low=1)
        check_int("seed", self.seed, low=0)
        check_ints("gammas", list(self.gammas), low=1, distinct=True)
        check_ints("early_exit", list(self.early_exit), low=1)


@dataclass
class Engine:
    """A plain decoder: ``model`` decodes with ``threads`` threads; ``info`` says what it is;
    ``repeats``: it runs in the first ``repeats`` repetitions of a cell only (None: in every one),
    for a slow reference decoder not expected to be the fastest (it stays a candidate)."""

    name: str
    model: Any
    threads: int
    info: dict[str, Any] = field(default_factory=dict)
    repeats: int | None = None


@dataclass
class Config:
    """A speculative configuration: ``drafter`` on ``engine`` at ``gamma`` (int or policy)."""

    id: str
    engine: str
    family: str
    drafter_name: str
    drafter: Any
    gamma: Any
    gamma_label: str

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "engine": self.engine,
            "family": self.family,
            "drafter": self.drafter_name,
            "gamma": self.gamma_label,
            "plain": False,
        }


def spec_configs(
    engine: str,
    drafters: Mapping[str, Any],
    gammas: Sequence[int],
    *,
    adaptive: Sequence[str] = (),
    max_gamma: int = 16,
) -> list[Config]:
    """Every drafter at every gamma on ``engine``, and the heuristic policy (started at each gamma,
    capped at ``max_gamma``) on the drafters named in ``adaptive``."""
    from specdec.theory.policies import HeuristicGamma

    gammas = check_ints("gammas", gammas, low=1, distinct=True)
    out = []
    for name, d in drafters.items():
        for g in gammas:
            out.append(Config(f"{engine}/{name}/g{g}", engine, f"{engine}/{name}", name, d, g, str(g)))
    for name in adaptive:
        if name not in drafters:
            raise ValueError(f"adaptive drafter {name!r} is not among the drafters {list(drafters)}")
        for g in gammas:
            policy = HeuristicGamma(g, max_gamma=max(max_gamma, g))
            out.append(
                Config(
                    f"{engine}/{name}+heuristic/s{g}",
                    engine,
                    f"{engine}/{name}+heuristic",
                    name,
                    drafters[name],
                    policy,
                    f"heuristic start {g} max {policy.max_gamma}",
                )
            )
    return out


def all_configs(engines: Sequence[Engine], configs: Sequence[Config]) -> list[dict[str, Any]]:
    """The stated order of every configuration: each engine's plain decoding, then the speculative ones."""
    plain = [
        {"id": f"{e.name}/plain", "engine": e.name, "family": f"{e.name}/plain", "drafter": "plain",
         "gamma": "0", "plain": True, **{"threads": e.threads, "info": e.info}}
        for e in engines
    ]  # fmt: skip
    return plain + [c.describe() for c in configs]


def cells(prompts: Sequence[Mapping[str, Any]], temperatures: Sequence[float]) -> list[tuple[float, dict]]:
    """(temperature, prompt) for every temperature, then every prompt in its order."""
    return [(float(t), dict(p)) for t in temperatures for p in prompts]


def cell_id(temp: float, prompt: Mapping[str, Any]) -> str:
    return f"{temp:g}|{prompt['task']}|{prompt['id']}"


def _run_cell(
    engines: Sequence[Engine],
    configs: Sequence[Config],
    prompt: Mapping[str, Any],
    temp: float,
    *,
    new_tokens: int,
    repeats: int,
    seed: int,
    rng: np.random.Generator,
    set_threads: Callable[[int], Any],
    eos_token_id: int | None = None,
    plain_at: str = "alternate",
) -> list[dict[str, Any]]:
    """One cell: ``repeats`` repetitions, engines in a fresh order each, paired blocks on each
    (exactly ``new_tokens`` tokens, or up to the first EOS when ``eos_token_id`` is given; plain placed by
    ``plain_at``, ``paired_block``'s). A row's ``place``: its index in its engine's block; ``turn``: the
    engine blocks that ran before that block in the repetition."""
    by_engine = {e.name: [c for c in configs if c.engine == e.name] for e in engines}
    rows: dict[str, list[dict[str, Any]]] = {e.name: [] for e in engines}
    for rep in range(repeats):
        turn = 0  # the engine blocks run before this one in the repetition
        for i in rng.permutation(len(engines)):
            e = engines[int(i)]
            if e.repeats is not None and rep >= e.repeats:
                continue
            set_threads(e.threads)
            block = [
                {"drafter": c.id, "object": c.drafter, "gamma": c.gamma, "lenience": 1.0}
                for c in by_engine[e.name]
            ]
            ran = paired_block(
                e.model, block, prompt["ids"], temperature=temp, new_tokens=new_tokens, seed=seed,
                rep=rep, rng=rng, eos_token_id=eos_token_id, exact_length=eos_token_id is None,
                plain_at=plain_at,
            )  # fmt: skip
            rows[e.name] += [r | {"place": place, "turn": turn} for place, r in enumerate(ran)]
            turn += 1
    labels = {c.id: c for c in configs}
    out = []
    base = {"task": prompt["task"], "prompt": prompt["id"], "temperature": temp, "seed": seed}
    for e in engines:
        for r in finish_cell(rows[e.name], base | {"engine": e.name}):
            c = labels.get(r["drafter"])
            r["config"] = c.id if c else f"{e.name}/plain"
            r["drafter"] = c.drafter_name if c else "plain"
            r["gamma"] = c.gamma_label if c else "0"
            out.append(r)
    return out


def calibrate(
    engines: Sequence[Engine],
    configs: Sequence[Config],
    prompt: Mapping[str, Any],
    *,
    new_tokens: int = 8,
    set_threads: Callable[[int], Any] = lambda n: None,
) -> dict[str, dict[str, float]]:
    """One short greedy repetition of every configuration on ``prompt``: per configuration id, the
    decoding seconds per token and the prefill seconds (for :func:`estimate_seconds`)."""
    rows = _run_cell(
        engines, configs, prompt, 0.0, new_tokens=new_tokens, repeats=1, seed=0,
        rng=np.random.default_rng(0), set_threads=set_threads,
    )  # fmt: skip
    return {
        r["config"]: {"s_per_token": r["decode_s"] / new_tokens, "prefill_s": r["prefill_s"]} for r in rows
    }


def estimate_seconds(
    calibration: Mapping[str, Mapping[str, float]],
    *,
    n_cells: int,
    repeats: int,
    new_tokens: int,
    scale: Mapping[str, float] | None = None,
) -> float:
    """The run's duration from a calibration: cells x repeats x the sum over configurations of
    (seconds per token x new_tokens + prefill); ``scale`` multiplies a configuration's share (e.g. a
    family's gamma count in a larger grid divided by the calibrated one)."""
    scale = scale or {}
    per_rep = sum(
        scale.get(cid, 1.0) * (c["s_per_token"] * new_tokens + c["prefill_s"])
        for cid, c in calibration.items()
    )
    return n_cells * repeats * per_rep


def _print(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def partial_path(out: Path) -> Path:
    return out.with_name(out.name.removesuffix(".json") + ".partial.json")


def resumable(
    out: str | Path,
    engines: Sequence[Engine],
    configs: Sequence[Config],
    settings: RunSettings | Mapping[str, Any],
    *,
    fresh: bool = False,
) -> dict[str, Any] | None:
    """The partial record of ``out`` that a run of these engines, configurations and settings resumes
    (None: none, or ``fresh``); :class:`~specdec.theory.checks.Refused` when it was made with other
    settings, engines or configurations. A program calls it before it times anything (its verify
    curves, its roofs), so that a run that cannot resume stops at once; :func:`run_campaign` calls it
    again."""
    part = partial_path(Path(out))
    stored = settings.to_record() if isinstance(settings, RunSettings) else as_stored(dict(settings))
    record = open_partial(part, stored, fresh=fresh, what="partial campaign")
    if record is not None:
        ids = [c["id"] for c in all_configs(engines, configs)]
        if [c["id"] for c in record.get("configs", [])] != ids:
            raise Refused(
                f"{part} was run with other engines or configurations (a mode chosen anew, a draft or "
                "llama.cpp missing?): rerun with the settings and --mode in the file, or pass --fresh"
            )
    return record


def run_campaign(
    engines: Sequence[Engine],
    configs: Sequence[Config],
    prompts: Sequence[Mapping[str, Any]],
    out: str | Path,
    *,
    settings: RunSettings | Mapping[str, Any],
    header: Mapping[str, Any] | None = None,
    temperatures: Sequence[float] = TEMPERATURES,
    new_tokens: int,
    repeats: int,
    seed: int = 0,
    budget_s: float | None = None,
    fresh: bool = False,
    n_boot: int = 2000,
    set_threads: Callable[[int], Any] = lambda n: None,
    log: Callable[[str], None] = _print,
    progress: bool = True,
    eos_token_id: int | None = None,
    retry_loaded: int = 0,
) -> dict[str, Any]:
    """Run every cell not yet done, saving after each; analyse and write ``out`` when all are done.

    ``prompts``: dicts with ``task``, ``id``, ``ids`` and ``index`` (the position in its task's list:
    the cross-fit half is ``index`` mod 2). ``settings`` (the program's
    :class:`~specdec.measure.runner.RunSettings`, by its ``to_record()``; a mapping, as stored) must
    equal a partial record's to resume it (else Refused naming the differences; ``fresh`` discards
    it). ``header``: what the record
    says about the run (command, environment, machine, left-out engines). ``budget_s``: stop
    after the cell that brings the run's own time to or past it. ``eos_token_id``: generations stop
    at their first EOS (at most ``new_tokens``; tokens/s counts each run's own tokens); None: exactly
    ``new_tokens`` tokens, EOS ignored. ``retry_loaded``: a cell timed while other processes left
    fewer free CPUs than the engines' threads (:func:`specdec.measure.runner.load_during`) is timed
    again, up to this many times; the discarded timings stay in the record (``discarded``: cell, load,
    runs and the reason); the last attempt is kept whatever its load, which ``cell_load`` then shows.
    ``settings``' ``plain_at`` (none: "alternate") places each block's plain decoder (``paired_block``'s).
    Returns the record (``complete`` False when stopped early).
    """
    check_int("new_tokens", new_tokens, low=2)
    check_int("repeats", repeats, low=1)
    check_int("retry_loaded", retry_loaded, low=0, high=10)
    if budget_s is not None:
        check_float("budget_s", budget_s, low=0.0)
    out = Path(out)
    part = partial_path(out)
    settings = settings.to_record() if isinstance(settings, RunSettings) else as_stored(dict(settings))
    plain_at = check_choice("plain_at", settings.get("plain_at", "alternate"), PLAIN_AT)  # as recorded
    todo = cells(prompts, temperatures)
    record = resumable(out, engines, configs, settings, fresh=fresh)
    if record is not None:
        log(f"[campaign] resuming {part}: {len(record['done'])} of {len(todo)} cells done")
    if record is None:
        record = jsonable(
            {
                "kind": "campaign",
                "format": RECORD_FORMAT,
                "settings": settings,
                **dict(header or {}),
                "engines": {
                    e.name: {"threads": e.threads, **e.info, **({"repeats": e.repeats} if e.repeats else {})}
                    for e in engines
                },
                "configs": all_configs(engines, configs),
                "prompts": [
                    {"task": p["task"], "id": p["id"], "index": p["index"], "half": fold_of(p["index"])}
                    for p in prompts
                ],  # fmt: skip
                "temperatures": [float(t) for t in temperatures],
                "done": [],
                "runs": [],
                "cell_seconds": {},
                "complete": False,
            }
        )
    # every session that ran cells (a resumed run is several): its own header and where it started
    record.setdefault("sessions", []).append(
        jsonable({**dict(header or {}), "cells_done_at_start": len(record["done"])})
    )
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(
            total=len(todo), initial=len(record["done"]), desc="campaign cells", unit="cell", file=sys.stderr
        )
    most = max(e.threads for e in engines)

    def cell(i: int, temp: float, p: Mapping[str, Any]) -> Callable[[], list[dict[str, Any]]]:
        def run() -> list[dict[str, Any]]:  # as the file stores them: NaN -> None (resumed = whole)
            return jsonable(
                _run_cell(
                    engines, configs, p, temp, new_tokens=new_tokens, repeats=repeats, seed=seed + i,
                    rng=np.random.default_rng([seed, i]), set_threads=set_threads, eos_token_id=eos_token_id,
                    plain_at=plain_at,
                )
            )  # fmt: skip

        return run

    def keep(cid: str, rows: list[dict[str, Any]]) -> None:
        record["runs"] += rows

    # the one runner: each cell's seconds and the machine's load while it ran (cell_seconds, cell_load);
    # a loaded cell timed again up to retry_loaded times, its discarded timings kept with the reason
    run_cells(
        record,
        [(cell_id(temp, p), cell(i, temp, p)) for i, (temp, p) in enumerate(todo)],
        part,
        keep=keep,
        threads=most,
        retry_loaded=retry_loaded,
        budget_s=budget_s,
        after=None if bar is None else lambda cid, seconds: bar.update(1),
        log=lambda line: log(f"[campaign] {line}"),
    )
    if len(record["done"]) < len(todo):
        left = len(todo) - len(record["done"])
        log(f"[campaign] budget reached: {left} cells left; rerun the same command to resume ({part})")
        return record
    folds = {(p["task"], p["id"]): fold_of(p["index"]) for p in prompts}
    record["crossfit"] = analyse(record["runs"], record["configs"], folds, n_boot=n_boot, seed=seed)
    record["complete"] = True
    write_record(out, record, indent=1, sort_keys=False)
    part.unlink(missing_ok=True)
    log(f"[campaign] complete: {out}")
    return record


def reanalyse(path: str | Path, *, n_boot: int | None = None) -> dict[str, Any]:
    """Recompute a complete record's cross-fit analysis from its stored runs (the analysis is a pure
    function of them: :func:`specdec.analysis.crossfit.analyse`), e.g. after the analysis gained a
    table, and rewrite the record. The seed is the run's; ``n_boot`` defaults to the record's."""
    path = Path(path)
    record = read_record(path)
    if not record.get("complete"):
        raise Refused(f"{path} is not a complete campaign record: finish the run first")
    folds = {(p["task"], p["id"]): fold_of(p["index"]) for p in record["prompts"]}
    n_boot = int(n_boot if n_boot is not None else record["crossfit"]["n_boot"])
    seed = int(record["settings"].get("seed", 0))
    record.setdefault("kind", "campaign")
    record["crossfit"] = analyse(record["runs"], record["configs"], folds, n_boot=n_boot, seed=seed)
    write_record(path, record, indent=1, sort_keys=False)
    return record


def reopen(path: str | Path, *, temperature: float, why: str) -> Path:
    """Discard a complete record's cells at ``temperature`` (their runs, times and loads) and its
    analysis, and write what remains as the partial record, so that rerunning the record's own
    command times those cells again (e.g. cells timed while other work shared the machine). The
    record keeps, under ``reopened``, which cells were discarded, when and why. Returns the partial
    record's path."""
    path = Path(path)
    record = read_record(path)
    if not record.get("complete"):
        raise Refused(f"{path} is not a complete campaign record")
    temps = [float(t) for t in record["temperatures"]]
    if float(temperature) not in temps:
        raise Refused(f"temperature must be one of the record's {temps}; got {temperature!r}")
    if not str(why).strip():
        raise Refused("why must say why the cells are timed again")
    drop = [c for c in record["done"] if float(c.split("|", 1)[0]) == float(temperature)]
    record["done"] = [c for c in record["done"] if c not in drop]
    record["runs"] = [r for r in record["runs"] if float(r["temperature"]) != float(temperature)]
    for key in ("cell_seconds", "cell_load"):
        record[key] = {c: v for c, v in record.get(key, {}).items() if c not in drop}
    record.pop("crossfit", None)
    record["complete"] = False
    from specdec.measure.core import environment

    stamp = environment().get("timestamp_utc")
    record.setdefault("reopened", []).append({"cells": drop, "why": str(why), "at_utc": stamp})
    part = partial_path(path)
    write_record(part, record, indent=None, sort_keys=False)
    path.unlink()
    return part


# -- the real campaign: SmolLM2's engines and drafters -------------------------------------------------

#: The full run's settings (a later session runs these) and what --quick changes.
FULL = {"prompts": 8, "new_tokens": 48, "repeats": 2, "gammas": (1, 2, 4), "early_exit": (8,)}
QUICK = {"prompts": 2, "new_tokens": 12, "repeats": 1, "gammas": (2,), "early_exit": (8,)}


def estimate_run(
    engines: Sequence[Engine],
    configs: Sequence[Config],
    prompts: Sequence[Mapping[str, Any]],
    *,
    repeats: int,
    new_tokens: int,
    gammas: Sequence[int],
    set_threads: Callable[[int], Any] = lambda n: None,
    log: Callable[[str], None] = _print,
) -> dict[str, Any]:
    """:func:`calibrate` on the first prompt (8 tokens), scaled by :func:`estimate_seconds` to this
    run (its cells, ``repeats``, ``new_tokens``) and to the full run (:data:`FULL`, its gamma grid
    against ``gammas``); one log line. Returns the calibration, its seconds and both estimates."""
    t0 = time.perf_counter()
    cal = calibrate(engines, configs, prompts[0], new_tokens=8, set_threads=set_threads)
    n_cells = len(prompts) * len(TEMPERATURES)
    grid = len(FULL["gammas"]) / len(gammas)
    full_scale = {c.id: grid for c in configs}
    full_cells = len({p["task"] for p in prompts}) * FULL["prompts"] * len(TEMPERATURES)
    this = estimate_seconds(cal, n_cells=n_cells, repeats=repeats, new_tokens=new_tokens)
    full = estimate_seconds(
        cal, n_cells=full_cells, repeats=FULL["repeats"], new_tokens=FULL["new_tokens"], scale=full_scale
    )
    estimate = {
        "calibration": cal,
        "calibration_s": time.perf_counter() - t0,
        "this_run_s": this,
        "full_run_s": full,
        "full_settings": FULL,
    }
    log(
        f"[campaign] {len(engines)} plain decoders, {len(configs)} speculative configurations, "
        f"{n_cells} cells; "
        f"estimated: this run {this / 60:.1f} min, the full run ({FULL}) {full / 60:.1f} min "
        f"(calibration of {estimate['calibration_s']:.0f} s on one prompt, 8 tokens)"
    )
    return estimate


def evaluation_cells(tokenizer: Any, per_task: int) -> list[dict[str, Any]]:
    """The held-out evaluation prompts (:func:`specdec.train.workloads.evaluation_prompts`), each with its
    position in its task's list (``index``: the cross-fit half is index mod 2)."""
    from specdec.train.workloads import evaluation_prompts

    seen: dict[str, int] = {}
    out = []
    for p in evaluation_prompts(tokenizer, per_task):
        out.append(p | {"index": seen.get(p["task"], 0)})
        seen[p["task"]] = seen.get(p["task"], 0) + 1
    return out


def build_real(
    *,
    mode: str = "auto",
    thread_counts: Sequence[int] | None = None,
    gammas: Sequence[int] = FULL["gammas"],
    drafts: Sequence[str] | None = None,
    early_exit: Sequence[int] = FULL["early_exit"],
    adaptive: bool = True,
    llamacpp_gguf: str | Path | None = None,
    llamacpp: bool = True,
    hf: bool = True,
    log: Callable[[str], None] = _print,
) -> dict[str, Any]:
    """The engines and configurations of the campaign on SmolLM2-135M.

    Plain decoders: the lean engine in ``mode`` ("auto": :func:`specdec.measure.modes.lean_model`'s probe,
    per thread count) at each of ``thread_counts`` (default 1 and every usable core), llama.cpp
    on ``llamacpp_gguf`` (default: its best CPU format, Q4_0 requantized from the shipped Q4_1 GGUF
    by :func:`specdec.engine.llamacpp.requantized`; not the same weights) at the same thread
    counts when ``llama_cpp`` imports, transformers float32 at every core. Speculative, on every
    lean engine: prompt lookup, each distilled draft (``drafts``;
    None: every saved one, in the lean engine via :func:`specdec.measure.modes.lean_draft` at the
    engine's threads), early exit
    at each of ``early_exit`` layers, each at every gamma, and the heuristic policy on lookup and
    each draft (``adaptive``); prompt lookup on llama.cpp. What cannot run is left out and said
    (``left_out``). Returns engines, configs, tokenizer, left_out, probes.
    """
    from specdec.drafting.registry import build_drafter
    from specdec.engine import llamacpp as lc
    from specdec.engine import native
    from specdec.engine.builder import EngineSpec, open_engine
    from specdec.measure.core import probe_summary
    from specdec.measure.modes import draft_context, open_target

    every = native.default_threads()
    counts = list(dict.fromkeys(thread_counts or [1, every]))
    loaded = open_engine(EngineSpec("hf", "float32", counts[0], device="cpu")).base
    engines: list[Engine] = []
    configs: list[Config] = []
    left_out: list[str] = []
    probes: dict[str, Any] = {}
    if drafts is None:
        from specdec.train.draftnets import list_drafts

        drafts = list_drafts()
    for t in counts:
        opened = open_target(EngineSpec("lean", mode, t), base=loaded)
        target, name = opened.model, f"lean-{opened.mode}-{t}t"
        engines.append(Engine(name, target, t, {"engine": "lean", "mode": target.mode, "threads": t}))
        probes[name] = None if opened.probe is None else probe_summary(opened.probe)
        # each draft in the lean engine at this engine's threads, by its own probe (q4q8 on the
        # distilled drafts' own int8 codes where that is fastest)
        # (every drafter named by its registry spec, which the configurations' ids hold)
        context, ran = draft_context(opened)
        drafters: dict[str, Any] = {"lookup": build_drafter("lookup", context)}
        for dname in drafts:
            try:
                drafters[f"draft:{dname}"] = build_drafter(f"draft:{dname}", context)
            except (OSError, ValueError, RuntimeError) as exc:
                left_out.append(f"draft:{dname} left out: {exc}")
                continue
            probes[f"{name}/draft:{dname}"] = {
                "mode": ran[dname]["mode"],
                "codes": ran[dname]["codes"],
                "probe": ran[dname].get("probe"),
            }
        for n_layers in early_exit:
            try:
                drafters[f"early-exit:{n_layers}"] = build_drafter(f"early-exit:{n_layers}", context)
            except (ValueError, RuntimeError, NotImplementedError) as exc:
                left_out.append(f"early-exit:{n_layers} on {name} left out: {exc}")
        policy_on = [n for n in drafters if n == "lookup" or n.startswith("draft:")] if adaptive else []
        configs += spec_configs(name, drafters, gammas, adaptive=policy_on)
    if llamacpp and lc.available():
        for t in counts:
            spec = EngineSpec("llama.cpp", "q4_0", t, loop="eval", gguf=llamacpp_gguf or None)
            cpp = open_engine(spec, base=loaded)
            fmt = cpp.about["format"]
            info = {"engine": "llama.cpp", "gguf": cpp.about["gguf"], "format": fmt, "threads": t}
            engines.append(Engine(f"llama.cpp-{t}t", cpp.model, t, info))
            configs += spec_configs(f"llama.cpp-{t}t", {"lookup": build_drafter("lookup", context)}, gammas)
    elif llamacpp:
        left_out.append("llama.cpp left out: llama_cpp is not importable (pip install llama-cpp-python)")
    if hf:
        name = f"hf-float32-{every}t"
        engines.append(Engine(name, loaded.model, every, {"engine": "transformers", "mode": "float32",
                                                         "threads": every}))  # fmt: skip
    for line in left_out:
        log(f"[campaign] {line}")
    return {"engines": engines, "configs": configs, "tokenizer": loaded.tokenizer, "left_out": left_out,
            "probes": probes}  # fmt: skip


# -- the program: ``specdec run campaign`` -------------------------------------------------------------


@dataclass(frozen=True)
class CampaignRun(Program):
    """The first campaign (issue 22): speculative decoding against the fastest plain decoder, gamma blind.

    On one machine, in one interleaved run, the same held-out prompts (--prompts per task, the three
    tasks, temperatures 0 and 1) through every plain decoder (the lean engine in its chosen mode at 1
    thread and at every usable core, llama.cpp when installed, transformers float32) and every
    speculative configuration on the lean engines (prompt lookup, each distilled draft, early exit,
    the heuristic policy on lookup and the drafts, each at every gamma of --gammas; lookup on
    llama.cpp). The runner is :func:`run_campaign`, the analysis :mod:`specdec.analysis.crossfit`
    (gamma and the fastest plain decoder chosen on one half of the prompts and reported on the other,
    then swapped; bootstrap intervals over prompts; verdicts from intervals only).

    The record ``results/campaign/<cpu>-<threads>t[-quick].json`` holds the command, settings, the
    machine identity, the git commit and dirty flag, every engine's engine/mode/threads, every run's
    raw timings and token counts, the calibration and the estimate, and the cross-fit result. It is
    written to ``.partial.json`` after every finished cell; rerunning the same command resumes it
    (--fresh discards it); --budget-s stops after the cell that exhausts the budget.

        specdec run campaign --quick              # a smoke run (minutes); prints the full run's estimate
        specdec run campaign --budget-s 9000      # the full run, stopped cleanly after 150 minutes
        specdec run campaign --budget-s 9000      # the same command again resumes it
        specdec run campaign --reanalyse results/campaign/<record>.json   # the analysis, anew
        specdec run campaign --reopen RECORD --reopen-temperature 1 --reopen-why "loaded machine"
    """

    name: ClassVar[str] = "campaign"

    quick: bool = option(False, f"a smoke run: {QUICK} (overrides those options)")
    prompts: int = option(FULL["prompts"], "held-out prompts per task (>= 2: two halves)")
    new_tokens: int = option(FULL["new_tokens"], "new tokens of every generation")
    repeats: int = option(FULL["repeats"], "repetitions per cell")
    gammas: tuple[int, ...] = option(FULL["gammas"], "the gamma grid")
    early_exit: tuple[int, ...] = option(FULL["early_exit"], "early-exit layers")
    drafts: tuple[str, ...] | None = option(None, "distilled drafts (default: every saved one)")
    adaptive: bool = option(True, "the heuristic policy on lookup and the drafts")
    mode: str = option("auto", "the lean mode (auto: the probe's choice)")
    threads: tuple[int, ...] | None = option(None, "thread counts of the engines (default: 1 and all cores)")
    llamacpp_gguf: str | None = option(
        None, "GGUF for llama.cpp (default: Q4_0 requantized from the shipped Q4_1, its best CPU format)"
    )
    llamacpp: bool = option(True, "llama.cpp among the plain decoders")
    hf: bool = option(True, "transformers float32 among the plain decoders")
    budget_s: float | None = option(None, "stop after the cell that exhausts this budget")
    seed: int = option(0, "the sampling seeds start here (cell i: seed + i)")
    n_boot: int = option(2000, "bootstrap resamples")
    fresh: bool = option(False, "discard a partial record instead of resuming it", once=True)
    estimate: bool = option(True, "the calibration and the estimate of the run's duration first")
    out: str | None = option(None, "the record's path (default: results/campaign/<cpu>-<n>t.json)")
    reanalyse: str | None = option(
        None,
        "recompute a complete record's cross-fit analysis from its stored runs and rewrite it",
        metavar="RECORD",
        once=True,
    )
    reopen: str | None = option(
        None,
        "discard a complete record's cells at --reopen-temperature (saying --reopen-why) so that its own "
        "command times them again",
        metavar="RECORD",
        once=True,
    )
    reopen_temperature: float | None = option(
        None, "the temperature whose cells --reopen discards", once=True
    )
    reopen_why: str | None = option(
        None, "why --reopen times those cells again (kept in the record)", once=True
    )

    def design(self) -> dict[str, Any]:
        """The run's prompts, new_tokens, repeats, gammas and early_exit: the options', or with --quick
        :data:`QUICK`'s (quick overrides them)."""
        given = {key: getattr(self, key) for key in QUICK}
        return {
            k: tuple(v) if isinstance(v, tuple) else v for k, v in (QUICK if self.quick else given).items()
        }

    def check(self) -> None:
        from specdec.train.workloads import evaluation_count

        d = self.design()
        check_int(
            "prompts", d["prompts"], low=2, high=evaluation_count(), note="two halves; what a task holds"
        )
        check_int("new_tokens", d["new_tokens"], low=2)
        check_int("repeats", d["repeats"], low=1)
        check_int("n_boot", self.n_boot, low=100)
        check_int("seed", self.seed, low=0)
        check_ints("gammas", d["gammas"], low=1, distinct=True)
        check_ints("early_exit", d["early_exit"], low=1)
        if self.threads is not None:
            check_ints("threads", self.threads, low=1)
        if self.budget_s is not None:
            check_float("budget_s", self.budget_s, low=0.0)
        given = [self.reopen_temperature is not None, self.reopen_why is not None]
        if self.reopen is None and any(given):
            raise ValueError("reopen_temperature and reopen_why go with reopen (the record to reopen)")
        if self.reopen is not None and not all(given):
            raise ValueError(
                "reopen needs reopen_temperature and reopen_why (the cells to time again, and why)"
            )

    def run(self) -> int:
        if self.reopen:
            part = reopen(self.reopen, temperature=float(self.reopen_temperature), why=str(self.reopen_why))
            _print(f"[campaign] reopened {self.reopen}: rerun its command to time the cells again ({part})")
            return 0
        if self.reanalyse:
            reanalyse(self.reanalyse)
            _print(f"[campaign] reanalysed {self.reanalyse}")
            return 0
        from specdec.engine.models import set_threads
        from specdec.measure.benchargs import ROOT
        from specdec.measure.core import cpu_name, environment
        from specdec.measure.device import device_slug
        from specdec.measure.modes import machine_identity

        d = self.design()
        drafts = None if self.drafts is None else ",".join(self.drafts)
        threads = None if self.threads is None else ",".join(map(str, self.threads))
        machine = machine_identity()  # before any thread count is pinned
        built = build_real(
            mode=self.mode, thread_counts=self.threads, gammas=d["gammas"],
            drafts=None if self.drafts is None else list(self.drafts), early_exit=d["early_exit"],
            adaptive=self.adaptive, llamacpp_gguf=self.llamacpp_gguf, llamacpp=self.llamacpp, hf=self.hf,
        )  # fmt: skip
        engines, configs = built["engines"], built["configs"]
        prompts = evaluation_cells(built["tokenizer"], d["prompts"])
        most = max(e.threads for e in engines)
        slug = device_slug(cpu_name())[:40]
        out = Path(self.out) if self.out else (
            ROOT / "results" / "campaign" / f"{slug}-{most}t{'-quick' if self.quick else ''}.json"
        )  # fmt: skip
        estimate = None
        if self.estimate:
            estimate = estimate_run(
                engines, configs, prompts, repeats=d["repeats"], new_tokens=d["new_tokens"],
                gammas=d["gammas"], set_threads=set_threads,
            )  # fmt: skip
        settings = CampaignSettings(
            quick=self.quick, prompts=d["prompts"], new_tokens=d["new_tokens"], repeats=d["repeats"],
            gammas=d["gammas"], early_exit=d["early_exit"], drafts=drafts, adaptive=self.adaptive,
            mode=self.mode, threads=threads, llamacpp_gguf=self.llamacpp_gguf, llamacpp=self.llamacpp,
            hf=self.hf, seed=self.seed, machine=machine,
        )  # fmt: skip
        header = {
            "command": self.command(),
            "environment": environment(),
            "machine": machine,
            "left_out": built["left_out"],
            "probes": built["probes"],
            "estimate": estimate,
        }
        record = run_campaign(
            engines, configs, prompts, out, settings=settings, header=header, new_tokens=d["new_tokens"],
            repeats=d["repeats"], seed=self.seed, budget_s=self.budget_s, fresh=self.fresh,
            n_boot=self.n_boot, set_threads=set_threads,
        )  # fmt: skip
        return 0 if record["complete"] else INCOMPLETE
