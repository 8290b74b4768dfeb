"""Real weights on a GPU (issue #23): the run of ``specdec run gpu-real``, section by section.

The program :class:`specdec.experiments.gpurealrun.GpuRealRun` (its options, the device plan in its
docstring) calls :func:`run_real`
(or, for ``--check-payload``, :func:`specdec.measure.devicechecks.preflight` and
:func:`~specdec.measure.devicechecks.graph_smoke`; for ``--prepare``,
:func:`specdec.measure.gpupayload.write_payload`); the payload is :mod:`specdec.measure.gpupayload`'s,
the static-cache engine :mod:`specdec.engine.staticllama`'s, the tables
:mod:`specdec.measure.gpusummary`'s. The sections of the record (``<device>-real.json``, a
:class:`specdec.measure.runner.Recorder` saved after every section):

* ``payload``, ``engine``, ``graphs``, ``checks``, ``hf_check`` -- the weights loaded and
  checked, the engines built and captured, their logits checked (:func:`run_real`);
* ``costs_run`` -- :func:`cost_curves`: T(k) of the target and T(1) of each draft model by the
  one T(k) loop (:func:`specdec.measure.core.time_forwards`) with the timers side by side:
  ``eager`` and ``graph`` (the wall clock, :func:`specdec.measure.core.time_once`), ``graph_gpu``
  (CUDA events, :func:`cuda_event_time`), ``kernel`` (the kernels' time,
  :func:`specdec.measure.surfaces.kernel_seconds`) and ``hf_eager`` (transformers' own forward
  through :class:`specdec.engine.lm.CachedLM`);
* ``warmup``, ``decoding_run`` -- :func:`decode_cells`: every cell's repetitions run by the one
  paired plain-vs-speculative driver (:func:`specdec.measure.pairedrun.paired_block`, its
  ``timer`` hook choosing the engine and counting graph replays);
* ``summary`` -- the tables recomputed from the stored timings
  (:func:`specdec.measure.gpusummary.summarize_runs`).

torch and numpy only at import; transformers only for ``hf_check`` and ``hf_eager``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from specdec.measure.core import environment, sync_hook, time_forwards, time_once
from specdec.measure.device import device_info, device_slug, free_memory
from specdec.measure.pairedrun import paired_block, timed_generation
from specdec.measure.runner import Deadline, Recorder, RunSettings
from specdec.measure.surfaces import kernel_seconds
from specdec.theory.checks import Refused, check_int, check_seed
from specdec.theory.tokens import first_divergence

__all__ = [
    "TASKS",
    "FixedStart",
    "GpuReal",
    "check_settings",
    "cost_curves",
    "cuda_event_time",
    "decode_cells",
    "hf_model",
    "plain_engines_equal",
    "plan_cells",
    "run_real",
]

TASKS = ("summarize", "code", "instruct")


def _ints(text: str, name: str, low: int) -> list[int]:
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"{name} takes comma-separated integers; got {text!r}") from None
    if not values or values[0] < low:
        raise ValueError(f"{name} must list integers >= {low}; got {text!r}")
    return values


@dataclass
class GpuReal(RunSettings):
    """The design of the real-weights GPU run (made from the options by
    :meth:`specdec.experiments.gpurealrun.GpuRealRun.settings`).

    Checked here (a ValueError names the field and its range); the lists the run iterates over are
    derived from the comma-separated fields. :meth:`to_record` is the record's ``settings`` (a GPU run
    does not resume: the device goes back when idle). The checks against the payload and the saved
    drafts are :func:`check_settings`'s.
    """

    payload: str
    out: str
    device: str = "cuda"
    dtype: str = "float32"
    budget_s: float = 360.0
    quick: bool = False
    prompts: int = 8
    tasks: str = ",".join(TASKS)
    new_tokens: int = 48
    repeats: int = 2
    gamma: int = 4
    temperatures: str = "0,1"
    early_exit: int = 8
    drafts: str | None = None
    engines: str = "graph,eager"
    cost_ks: str = "1,2,3,4,5,6,8"
    cost_repeats: int = 20
    context: int = 128
    seed: int = 0
    commit: str | None = None
    threads: int | None = None
    piece_mb: float = 20.0
    task_list: list[str] = field(init=False)
    temperature_list: list[float] = field(init=False)
    engine_list: list[str] = field(init=False)
    cost_k_list: list[int] = field(init=False)

    def __post_init__(self) -> None:
        check_int("prompts", self.prompts, low=2)
        for name in ("new_tokens", "repeats", "early_exit", "cost_repeats", "context"):
            check_int(name, getattr(self, name), low=1)
        check_int("gamma", self.gamma, low=1, high=16, note="a verify call's length is captured as a graph")
        check_seed("seed", self.seed)
        if self.threads is not None:
            check_int("threads", self.threads, low=1)
        if not self.budget_s >= 0:
            raise ValueError(f"budget_s must be a number of seconds >= 0; got {self.budget_s}")
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"dtype must be float32 or bfloat16; got {self.dtype!r}")
        if self.new_tokens < self.gamma + 2:
            raise ValueError(f"new_tokens must be >= gamma + 2 = {self.gamma + 2}; got {self.new_tokens}")
        if not 1 <= self.piece_mb <= 60:
            raise ValueError(f"piece_mb must lie in [1, 60]; got {self.piece_mb}")
        self.task_list = [t.strip() for t in self.tasks.split(",") if t.strip()]
        if not self.task_list or any(t not in TASKS for t in self.task_list):
            raise ValueError(f"tasks must name tasks among {list(TASKS)}; got {self.tasks!r}")
        try:
            self.temperature_list = list(
                dict.fromkeys(float(t) for t in self.temperatures.split(",") if t.strip())
            )
        except ValueError:
            raise ValueError(
                f"temperatures takes comma-separated numbers; got {self.temperatures!r}"
            ) from None
        if not self.temperature_list or any(not t >= 0 for t in self.temperature_list):
            raise ValueError(f"temperatures must list numbers >= 0; got {self.temperatures!r}")
        self.engine_list = list(dict.fromkeys(e.strip() for e in self.engines.split(",") if e.strip()))
        if not self.engine_list or any(e not in ("graph", "eager") for e in self.engine_list):
            raise ValueError(f"engines must list graph and/or eager; got {self.engines!r}")
        self.cost_k_list = _ints(self.cost_ks, "cost_ks", 1)
        if self.cost_k_list[-1] > 64:
            raise ValueError(f"cost_ks must lie in [1, 64]; got {self.cost_ks!r}")
        if 1 not in self.cost_k_list:
            raise ValueError("cost_ks must include 1 (v(k) and c divide by T(1))")


class FixedStart:
    """A static-cache engine (:class:`specdec.engine.staticllama.StaticLlama`) as a timing session: every
    call ``engine.run(ids, start)`` writes after the ``start`` cached positions (the engine's cache
    already holds them), and cropping only moves the length back (later slots are overwritten)."""

    def __init__(self, engine: Any, start: int) -> None:
        self.engine, self._len = engine, int(start)

    def __len__(self) -> int:
        return self._len

    def forward(self, new_ids: Sequence[int]) -> Any:
        out = self.engine.run(new_ids, self._len)
        self._len += len(new_ids)
        return out

    def crop(self, n: int) -> None:
        self._len = int(n)


def cuda_event_time(fn: Callable[[], object], synchronize: Callable[[], None] | None = None) -> float:
    """The seconds of one call ``fn()`` by two CUDA events recorded around it (the GPU's clock), the
    device synchronised before and after: a timer for :func:`specdec.measure.core.time_forwards`."""
    import torch

    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if synchronize is not None:
        synchronize()
    begin.record()
    fn()
    end.record()
    torch.cuda.synchronize() if synchronize is None else synchronize()
    return begin.elapsed_time(end) / 1e3


@contextmanager
def _graphs(engine: Any, on: bool) -> Iterator[None]:
    """``engine`` replays its CUDA graphs (``on``) or runs eagerly inside the block; eager after it."""
    engine.use_graphs = on
    try:
        yield
    finally:
        engine.use_graphs = False


def cost_curves(
    engines: dict[str, Any],
    ctx: Sequence[int],
    ks: Sequence[int],
    *,
    repeats: int,
    timers: Sequence[str],
    kernel: bool,
    hf: Any = None,
    seed: int = 0,
    on_model: Callable[[dict[str, Any]], None] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """T(k) of ``engines["target"]`` over ``ks`` and T(1) of every other engine, per timer.

    Each engine's cache holds ``ctx`` (its context); every timed call writes the first k ids of
    ``ctx`` after it, at the same positions. The timers of ``timers`` (``eager``, ``graph``,
    ``graph_gpu``) are names of one :func:`specdec.measure.core.time_forwards` loop over
    :class:`FixedStart` sessions of the engine: two warm-up passes, then ``repeats`` passes, each
    timing every (timer, k) once in a seeded random order; ``graph`` and ``graph_gpu`` replay the
    engine's graphs, ``graph_gpu`` is timed by :func:`cuda_event_time`. With ``kernel`` the
    kernels' time of eager calls (:func:`specdec.measure.surfaces.kernel_seconds`); with ``hf``
    (transformers' model of the same weights) ``hf_eager``, its forward through
    :class:`specdec.engine.lm.CachedLM`, in the target's entries. Returns ``models`` (name ->
    timer -> k as a string -> median seconds), ``raw`` (the same with every time) and ``errors``
    (a failed kernel or hf_eager timing, recorded; the other timers stand). ``on_model`` gets the
    result so far after each engine (to save it).
    """
    sync = sync_hook(device=engines["target"].device)
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"models": {}, "raw": {}}
    for name, engine in engines.items():
        model_ks = list(ks) if name == "target" else [1]
        engine.session().forward(list(ctx))  # the cached context
        sessions = {t: FixedStart(engine, len(ctx)) for t in timers}
        times = time_forwards(
            sessions,
            {t: list(ctx) for t in timers},
            model_ks,
            repeats=repeats,
            warmup=2,
            rng=rng,
            synchronize=sync,
            around={t: partial(_graphs, engine, t != "eager") for t in timers},
            timers={"graph_gpu": cuda_event_time} if "graph_gpu" in timers else None,
        )
        raw = {t: {str(k): v for k, v in curve.items()} for t, curve in times.items()}
        med = {t: {k: float(np.median(v)) for k, v in curve.items()} for t, curve in raw.items()}
        if kernel:  # the profiler times eager calls: no graph needed
            try:
                per_call = kernel_seconds(FixedStart(engine, len(ctx)), list(ctx), model_ks, synchronize=sync)
                med["kernel"] = {str(k): v for k, v in per_call.items()}
            except Exception as exc:  # noqa: BLE001  (recorded; the other timers stand)
                out.setdefault("errors", {})[f"{name}:kernel"] = f"{type(exc).__name__}: {exc}"
                log(f"  kernel time of {name} failed: {type(exc).__name__}: {exc}")
        out["models"][name], out["raw"][name] = med, raw
        if on_model is not None:
            on_model(out)
    if hf is not None and "target" in out["models"]:
        try:
            from specdec.engine.lm import CachedLM

            lm = CachedLM(hf)
            lm.forward(list(ctx))
            times = time_forwards(
                {"hf_eager": lm}, {"hf_eager": list(ctx)}, list(ks), repeats=repeats, warmup=2,
                order="fixed", synchronize=sync,
            )["hf_eager"]  # fmt: skip
        except Exception as exc:  # noqa: BLE001  (recorded; the engine's timers stand)
            out.setdefault("errors", {})["target:hf_eager"] = f"{type(exc).__name__}: {exc}"
        else:
            out["raw"]["target"]["hf_eager"] = {str(k): v for k, v in times.items()}
            out["models"]["target"]["hf_eager"] = {str(k): float(np.median(v)) for k, v in times.items()}
    return out


def hf_model(payload: Any, device: str) -> Any:
    """transformers' LlamaForCausalLM with the payload's float32 weights (for the logits check)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    c = payload.config
    names = (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "vocab_size", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings",
    )  # fmt: skip
    config = LlamaConfig(
        **{k: c[k] for k in names},
        rope_theta=c["rope_theta"],  # the legacy name and the 5.x one: either version reads one
        rope_parameters={"rope_type": "default", "rope_theta": c["rope_theta"]},
    )
    with torch.device(device):
        model = LlamaForCausalLM(config)
    model.load_state_dict({k: v for k, v in payload.weights.items()}, strict=False)
    model.tie_weights()
    return model.eval().requires_grad_(False)


def plain_engines_equal(generations: list[dict[str, Any]]) -> dict[str, Any]:
    """Plain tokens of the engines compared cell by cell (same seed), where more than one ran it."""
    by_cell: dict[tuple, dict[str, list[int]]] = {}
    for g in generations:
        by_cell.setdefault((g["temperature"], g["task"], g["prompt"]), {})[g["engine"]] = g["plain"]
    shared = {c: e for c, e in by_cell.items() if len(e) > 1}
    equal = [c for c, e in shared.items() if len({tuple(t) for t in e.values()}) == 1]
    return {
        "cells": len(shared),
        "equal": len(equal),
        "equal_greedy": sum(c[0] == 0 for c in equal),
        "cells_greedy": sum(c[0] == 0 for c in shared),
    }


def plan_cells(prompts: list[dict], tasks: list[str], temps: list[float], per_task: int) -> list[dict]:
    """Cells prompt by prompt: (temperature, task) for prompt 1 of every task, then prompt 2, ..."""
    by_task = {t: [p for p in prompts if p["task"] == t][:per_task] for t in tasks}
    cells = []
    for i in range(per_task):
        for temp in temps:
            for task in tasks:
                cells.append({"temperature": temp, "task": task, "prompt": by_task[task][i], "index": i})
    return cells


# --------------------------------------------------------------------------- decoding
def decode_cells(
    target: Any,
    engines: dict[str, Any],
    drafters: dict[str, Any],
    cells: Sequence[dict[str, Any]],
    *,
    engine: str,
    methods: Sequence[str],
    gamma: int,
    new_tokens: int,
    repeats: int,
    seed: int,
    deadline: Deadline,
    runs: list[dict[str, Any]],
    generations: list[dict[str, Any]],
    on_cell: Callable[[int, dict[str, Any], float], None],
) -> str | None:
    """One pass over ``cells`` on ``engine`` ("graph" or "eager"), prompt by prompt, appending rows.

    Each cell (temperature, task, prompt) runs ``repeats`` repetitions of the one paired driver
    (:func:`specdec.measure.pairedrun.paired_block`): plain decoding and every method once, the
    same seed (``seed + 1000 * cell index``, the same on both engines), in an order drawn from the
    cell's generator, plain first in even repetitions and last in odd ones. Its ``timer`` hook sets
    every engine to ``engine``, times the whole generation between two device synchronisations
    and counts the target's graph and eager calls. A run's row: engine, method, cell, repetition,
    order, seed, its times and counts; greedy speculative rows also ``equals_plain`` and
    ``first_divergence`` (against plain tokens of the same repetition); repetition 0 of each cell
    appends plain's tokens to ``generations``. A cell starts only while ``deadline`` allows 1.2 times
    the longest cell so far plus 5 s; the reason it stopped is returned (None: every cell ran).
    ``on_cell(index, cell, seconds)`` follows each cell.
    """
    sync = sync_hook(device=target.device)
    calls: list[tuple[int, int]] = []

    def timer(model: Any, drafter: Any, ids: Sequence[int], **kw: Any) -> tuple[list[int], Any, float]:
        for e in engines.values():
            e.use_graphs = engine == "graph"
        before = (target.graph_calls, target.eager_calls)
        done = []
        total = time_once(lambda: done.append(timed_generation(model, drafter, ids, **kw)), sync)
        calls.append((target.graph_calls - before[0], target.eager_calls - before[1]))
        tokens, stats, _ = done[0]
        return tokens, stats, total

    configs = [{"drafter": m, "object": drafters[m], "gamma": gamma, "lenience": 1.0} for m in methods[1:]]
    longest = 0.0
    for ci, cell in enumerate(cells):
        if not deadline.allows(1.2 * longest + 5):
            return f"budget: {deadline.left():.0f} s left before cell {ci} of {len(cells)}"
        t_cell = time.perf_counter()
        temp, task, prompt = cell["temperature"], cell["task"], cell["prompt"]
        cell_seed = seed + 1000 * ci
        rng = np.random.default_rng(cell_seed)
        for rep in range(repeats):
            del calls[:]
            block = paired_block(
                target, configs, prompt["ids"], temperature=temp, new_tokens=new_tokens, seed=cell_seed,
                rep=rep, rng=rng, timer=timer,
            )  # fmt: skip
            tokens = {r["drafter"]: r["_tokens"] for r in block}
            for order, (r, (graph_calls, eager_calls)) in enumerate(zip(block, calls, strict=True)):
                st = r["_stats"]
                row = {
                    "engine": engine, "method": r["drafter"], "temperature": temp, "task": task,
                    "prompt": prompt["id"], "rep": rep, "order": order, "seed": cell_seed,
                    "decode_s": r["decode_s"], "prefill_s": r["prefill_s"], "new_tokens": st.new_tokens,
                    "rounds": st.rounds, "gamma": st.gamma, "drafted": st.drafted_tokens,
                    "accepted": st.accepted_tokens, "examined": st.examined, "draft_s": st.draft_s,
                    "target_s": st.target_s, "verify_s": st.verify_s, "target_calls": st.target_calls,
                    "draft_calls": st.draft_calls, "target_graph_calls": graph_calls,
                    "target_eager_calls": eager_calls,
                }  # fmt: skip
                if r["drafter"] != "plain" and temp == 0:
                    row["equals_plain"] = tokens[r["drafter"]] == tokens["plain"]
                    row["first_divergence"] = first_divergence(tokens[r["drafter"]], tokens["plain"])
                runs.append(row)
            if rep == 0:
                generations.append({
                    "engine": engine, "temperature": temp, "task": task, "prompt": prompt["id"],
                    "seed": cell_seed, "plain": tokens["plain"],
                })  # fmt: skip
        seconds = time.perf_counter() - t_cell
        longest = max(longest, seconds)
        on_cell(ci, cell, seconds)
    return None


# --------------------------------------------------------------------------- the run
def check_settings(settings: GpuReal, manifest: dict[str, Any], saved_drafts: Sequence[str]) -> list[str]:
    """The settings checked against the payload's manifest and the saved drafts; the drafts to run.

    ValueError, naming the option and its valid range, for drafts that are not saved, more
    prompts per task than the payload holds, or an early exit outside the target's layers.
    """
    s = settings
    drafts = list(saved_drafts) if s.drafts is None else [d.strip() for d in s.drafts.split(",") if d.strip()]
    missing = [d for d in drafts if d not in saved_drafts]
    if missing:
        raise ValueError(f"--drafts {missing} are not saved drafts; saved: {list(saved_drafts)}")
    available = min(sum(p["task"] == t for p in manifest["prompts"]) for t in s.task_list)
    check_int("--prompts", s.prompts, low=2, high=available, note="prompts per task in the payload")
    depth = int(manifest["config"]["num_hidden_layers"])
    check_int("--early-exit", s.early_exit, low=1, high=depth - 1, note=f"the target has {depth} layers")
    return drafts


def run_real(
    settings: GpuReal,
    *,
    drafts: Sequence[str],
    drafts_root: str | Path,
    command: str,
    log: Callable[[str], None] = print,
) -> Path:
    """The device run of ``specdec run gpu-real``: every section of ``<out>/<device>-real[-quick].json``.

    ``settings`` is the run's design (checked as it was made) and is recorded as the record's
    ``settings``; ``drafts`` are the distilled drafts to run, folders of ``drafts_root``
    (:func:`check_settings` checks both against the payload); ``command`` is recorded as it was
    typed. Returns the record's path.
    """
    s = settings
    deadline = Deadline(s.budget_s)
    import torch

    from specdec.engine.builder import EngineSpec, open_static_draft, open_weights
    from specdec.measure.gpupayload import load_payload

    if s.threads:
        torch.set_num_threads(s.threads)
    cuda = torch.device(s.device).type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise Refused("CUDA is not available here; on a CPU run with --device cpu --quick")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 (exactness checks)
    draft_root = Path(drafts_root)
    info = device_info(s.device)
    rec = _open_record(s, info, command, log)

    # 1. the payload
    payload = None
    with rec.section("payload") as out:
        payload = load_payload(s.payload, s.device)
        out.update(payload.checks)
        out["source"] = payload.manifest["source"]
        out["prepared_commit"] = payload.manifest.get("prepared_commit")
        out["prompt_source"] = payload.manifest["prompt_source"]
        log(
            f"  payload: {out['pieces']} pieces checked; the weights dequantized on {s.device} "
            f"equal the CPU loader's ({len(out['redone_on_cpu'])} redone on the CPU)"
        )
    if payload is None:
        return rec.finish()
    cells = plan_cells(payload.prompts, s.task_list, s.temperature_list, s.prompts)
    longest = max(len(c["prompt"]["ids"]) for c in cells)
    capacity = -(-(max(longest + s.new_tokens + s.gamma + 2, s.context + max(s.cost_k_list))) // 64) * 64

    # 2. the engines (by the builder; each draft engine named by its drafter's registry spec) and their checks
    engines: dict[str, Any] = {}
    with rec.section("engine") as out:
        t0 = time.perf_counter()
        spec = EngineSpec("static", s.dtype, s.threads or torch.get_num_threads(), device=s.device)
        opened = open_weights(payload.weights, payload.config, spec, capacity=capacity)
        target = engines["target"] = opened.model
        engines[f"early-exit:{s.early_exit}"] = target.early_exit(s.early_exit)  # a view of the target
        for d in drafts:
            engines[f"draft:{d}"] = open_static_draft(opened, draft_root / d).model
        out.update(capacity=capacity, dtype=s.dtype, models=list(engines), build_s=time.perf_counter() - t0)
    if "target" not in engines:
        return rec.finish()
    target = engines["target"]
    ids = cells[0]["prompt"]["ids"]
    graphs_ok = False
    if cuda:
        with rec.section("graphs") as out:
            ks = sorted(set(s.cost_k_list) | set(range(1, s.gamma + 2)))
            for name, e in engines.items():
                out[name] = e.capture(ks if name == "target" else (1, 2))
            graphs_ok = True
            log(f"  graphs captured: target k = {ks}, drafts k = [1, 2]")
    else:
        rec.skip("graphs", f"CUDA graphs need a CUDA device; this run is on {s.device}")

    n0 = min(len(ids) - s.gamma - 1, 48)
    with rec.section("checks") as out:  # a verify call against single steps; graph against eager
        out.update(_logit_checks(target, ids, n0, s.gamma, graphs_ok))
        if graphs_ok:
            log(f"  graph vs eager logits: bitwise equal {out['graph_vs_eager']['bitwise_equal']}")
        out["memory"] = free_memory(s.device)

    hf = None
    try:
        import transformers  # noqa: F401  (optional on the device)
    except ImportError as exc:
        rec.skip("hf_check", f"transformers is not importable ({exc}); no logits check, no hf_eager column")
    else:
        with rec.section("hf_check") as out:
            hf = hf_model(payload, s.device)
            out.update(_hf_checks(hf, target, payload.config, ids[:n0], s.device))
            log(f"  logits vs transformers: max |diff| {out['logits_vs_transformers']['max_abs_diff']:.2e}")
        if "hf_check" in rec.data["status"]["failed"]:
            hf = None  # no hf_eager column from a model whose check failed

    # 3. costs: T(k) of the target, T(1) of the draft models, by every timer
    _costs_section(rec, s, engines, cells, hf, graphs_ok=graphs_ok, cuda=cuda, deadline=deadline, log=log)
    hf = None
    free_memory(s.device)

    # 4. decoding
    dec = _decoding_section(
        rec, s, engines, drafts, cells, graphs_ok=graphs_ok, cuda=cuda, deadline=deadline, log=log
    )

    # 5. tables from the stored timings
    _summary_section(rec, dec, s.seed, log)
    return rec.finish(deadline, f"cells done {dec['cells_done']}")


def _decoding_section(
    rec: Recorder, s: GpuReal, engines: dict[str, Any], drafts: Sequence[str], cells: list[dict], *,
    graphs_ok: bool, cuda: bool, deadline: Deadline, log: Callable[[str], None],
) -> dict[str, Any]:  # fmt: skip
    """Sections ``warmup`` and ``decoding_run``: plain decoding and every drafter (built by the registry
    from its spec, which names it in the record; the early exit is the target's view, the distilled
    drafts engines of the run) on every cell, per engine (graph first), within the budget; the decoding
    part of the record, filled as the cells finish."""
    from specdec.drafting.registry import DraftContext, build_drafter

    target = engines["target"]
    methods = ["plain", "lookup", f"early-exit:{s.early_exit}", *(f"draft:{d}" for d in drafts)]
    # the drafts are engines of the run; the early exit asks the target for its (one) view
    context = DraftContext(target, load_draft=lambda name: engines[f"draft:{name}"])
    drafters = {name: build_drafter(name, context) for name in methods[1:]}
    runs: list[dict[str, Any]] = []
    generations: list[dict[str, Any]] = []
    dec = {"methods": methods, "engines": s.engine_list, "cells_planned": len(cells), "cells_done": 0}
    dec.update(runs=runs, generations=generations)
    rec.data["decoding"] = dec
    engine_list = [e for e in s.engine_list if e == "eager" or graphs_ok]
    if len(engine_list) < len(s.engine_list):
        rec.skip("decoding:graph", f"no CUDA graphs (device {s.device}); decoding runs eager only")
    dec["engines"] = engine_list
    decode = partial(
        decode_cells, target, engines, drafters, methods=methods, gamma=s.gamma, new_tokens=s.new_tokens,
        seed=s.seed, deadline=deadline,
    )  # fmt: skip
    if not cuda:
        rec.skip("warmup", f"no warm-up on {s.device} (it readies CUDA kernels and allocators)")
    else:
        with rec.section("warmup"):  # every method once per engine, on the first cell (not recorded)
            for engine in engine_list:
                decode(
                    cells[:1], engine=engine, repeats=1, runs=[], generations=[], on_cell=lambda *a: None,
                    deadline=Deadline(math.inf),
                )  # fmt: skip
    # one pass over every cell per engine, graph first: the launch-free engine gets all prompts,
    # the eager one what the budget leaves (prompt by prompt, so its groups stay balanced)
    dec["cells_done"] = {e: 0 for e in engine_list}
    with rec.section("decoding_run") as out:
        for engine in engine_list:

            def cell_done(ci: int, cell: dict[str, Any], seconds: float, engine: str = engine) -> None:
                dec["cells_done"][engine] = ci + 1
                rec.save()
                log(
                    f"  {engine} cell {ci + 1}/{len(cells)} T={cell['temperature']:g} {cell['task']} "
                    f"{cell['prompt']['id']} ({seconds:.1f} s)"
                )

            stopped = decode(
                cells, engine=engine, repeats=s.repeats, runs=runs, generations=generations, on_cell=cell_done
            )
            if stopped is not None:
                rec.skip(f"decoding_cells:{engine}", stopped)
        out["cells_done"] = dict(dec["cells_done"])
    return dec


def _open_record(s: GpuReal, info: dict[str, Any], command: str, log: Callable[[str], None]) -> Recorder:
    """The run's record (the one runner's :class:`~specdec.measure.runner.Recorder`), with the device, the
    environment, the commit (git's, else ``--commit``), the command and the engine's description."""
    slug = device_slug(info["name"]) + "-real" + ("-quick" if s.quick else "")
    rec = Recorder(Path(s.out) / f"{slug}.json", settings=s, kind="gpu_real", log=log)
    rec.data["device"] = info
    rec.data["environment"] = environment(device=s.device, dtype=s.dtype)
    env_commit = rec.data["environment"].get("git_commit")
    rec.data["commit"] = {
        "git": env_commit,
        "given": s.commit,
        "used": env_commit or s.commit,
        "source": "git" if env_commit else ("--commit" if s.commit else None),
    }
    rec.data["command"] = command
    rec.data["engine"] = (
        "specdec.engine.staticllama.StaticLlama: torch ops over a static KV cache of fixed capacity "
        "(position as a "
        "device tensor, attention over the whole capacity with a causal mask); 'graph' replays one "
        "torch.cuda.CUDAGraph per call length, 'eager' runs the same code without capture"
    )
    rec.save()
    log(
        f"gpu_real: {info['name']} | torch {info['torch']} | {s.dtype} | "
        f"budget {s.budget_s:.0f} s -> {rec.path}"
    )
    return rec


def _costs_section(
    rec: Recorder, s: GpuReal, engines: dict[str, Any], cells: list[dict], hf: Any, *, graphs_ok: bool,
    cuda: bool, deadline: Deadline, log: Callable[[str], None],
) -> None:  # fmt: skip
    """Section ``costs_run``: T(k) of the target and T(1) of the draft models by every timer the device
    has (:func:`cost_curves`), saved model by model, with v(k) and c (:func:`summarize_costs`)."""
    from specdec.measure.gpusummary import summarize_costs

    timers = ["eager", *(["graph", "graph_gpu"] if graphs_ok else [])]
    if not graphs_ok:
        rec.skip(
            "costs:graph,graph_gpu" + ("" if cuda else ",kernel"),
            f"no CUDA graphs (device {s.device})" + ("" if cuda else "; kernel timing needs CUDA"),
        )
    costs: dict[str, Any] = {"context": s.context, "repeats": s.cost_repeats, "models": {}, "raw": {}}
    rec.data["costs"] = costs
    if deadline.allows(30):
        with rec.section("costs_run") as out:
            ctx = [t for c in cells for t in c["prompt"]["ids"]][: s.context]

            def save_costs(partial_costs: dict[str, Any]) -> None:
                costs.update(partial_costs)
                rec.save()

            costs.update(
                cost_curves(
                    engines, ctx, s.cost_k_list, repeats=s.cost_repeats, timers=timers, kernel=cuda, hf=hf,
                    seed=s.seed, on_model=save_costs, log=log,
                )
            )  # fmt: skip
            costs["summary"] = summarize_costs(costs)
            out["timers"] = sorted(costs["models"].get("target", {}))
            for t, v in costs["summary"]["v"].items():
                log(f"  v(k) {t}: " + " ".join(f"{k}:{x:.2f}" for k, x in v.items()))
    else:
        rec.skip("costs_run", f"budget: {deadline.left():.0f} s left")


def _summary_section(rec: Recorder, dec: dict[str, Any], seed: int, log: Callable[[str], None]) -> None:
    """Section ``summary``: the tables from the stored timings (:func:`summarize_runs`) and greedy
    equality, speculative against plain and engine against engine."""
    from specdec.measure.gpusummary import summarize_runs

    runs, generations = dec["runs"], dec["generations"]
    with rec.section("summary") as out:
        dec["summary"] = summarize_runs(runs, seed=seed)
        greedy = [r for r in runs if r["temperature"] == 0 and r["method"] != "plain"]
        dec["greedy"] = {
            "runs": len(greedy),
            "equal": sum(r["equals_plain"] for r in greedy),
            "all_equal": all(r["equals_plain"] for r in greedy),
            "plain_engines_equal": plain_engines_equal(generations),
        }
        out["greedy"] = dec["greedy"]
        for row in dec["summary"]:
            if row["method"] != "plain" and row.get("speedup", {}).get("low") is not None:
                sp = row["speedup"]
                log(
                    f"  {row['engine']:5s} T={row['temperature']:g} {row['task']:9s} {row['method']:16s} "
                    f"{sp['estimate']:.2f} [{sp['low']:.2f}, {sp['high']:.2f}] alpha {row['alpha']:.2f}"
                )


def _logit_checks(target: Any, ids: Sequence[int], n0: int, gamma: int, graphs: bool) -> dict[str, Any]:
    """A verify call over ``gamma + 1`` ids after ``n0`` against single steps; with ``graphs`` the
    graph replay of that call against the eager one."""
    import torch

    s = target.session()
    s.forward(ids[:n0])
    block = s.forward(ids[n0 : n0 + gamma + 1])
    s.crop(n0)
    steps = torch.cat([s.forward([t]) for t in ids[n0 : n0 + gamma + 1]])
    out: dict[str, Any] = {
        "verify_vs_steps": {
            "k": gamma + 1,
            "max_abs_diff": float((block - steps).abs().max()),
            "argmax_equal": bool(torch.equal(block.argmax(-1), steps.argmax(-1))),
        }
    }
    if graphs:
        target.use_graphs = True
        s.crop(n0)
        graph_block = s.forward(ids[n0 : n0 + gamma + 1])
        target.use_graphs = False
        out["graph_vs_eager"] = {
            "bitwise_equal": bool(torch.equal(graph_block, block)),
            "max_abs_diff": float((graph_block - block).abs().max()),
        }
    return out


def _hf_checks(
    hf: Any, target: Any, config: dict[str, Any], ids: Sequence[int], device: str
) -> dict[str, Any]:
    """The engine's logits over ``ids`` against transformers' (same weights), and its rotary base."""
    import torch

    with torch.no_grad():
        ref = hf(torch.tensor([list(ids)], device=device)).logits[0].float()
    mine = target.session().forward(list(ids))
    hd, theta = config["head_dim"], config["rope_theta"]
    want = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)
    inv = getattr(getattr(hf.model, "rotary_emb", None), "inv_freq", None)
    return {
        "logits_vs_transformers": {
            "tokens": len(ids),
            "max_abs_diff": float((mine - ref).abs().max()),
            "argmax_equal": bool(torch.equal(mine.argmax(-1), ref.argmax(-1))),
        },
        "rope_matches": None if inv is None else bool(torch.allclose(inv.float().cpu(), want)),
    }
