"""Part IV's benchmark, real speculative decoding on SmolLM2 (``specdec run real-decoding``).

:class:`specdec.experiments.realdecodingrun.RealDecodingRun` is the program's options (see ``specdec
run real-decoding --help`` and its docstring for how it measures); its settings are a
:class:`RealDecoding` and :func:`run` runs them. This module holds the measurement:

* the engine and drafters: :func:`load_engine` (the target in its mode), :func:`build_drafters`
  (the registry's specs, from :func:`drafter_names`; the record names every drafter by its spec),
  :func:`ngram_corpus` (the n-gram tables' text);
* the verify-cost curve: :func:`verify_curve`, the one T(k) loop
  (:func:`specdec.measure.core.verify_cost_curve`) in the record's form;
* the cells: a cell's repetitions are :func:`specdec.measure.pairedrun.paired_block` runs
  (:func:`paired_cell`), slimmed by :func:`specdec.measure.pairedrun.finish_cell`; the cells run
  through the one resumable runner, :func:`specdec.measure.runner.run_cells` (the state saved after
  every cell by :func:`specdec.theory.recordio.write_record`, NaN -> null), the main phase
  (:func:`main_cells`) then the extras (the gamma sweep and argmax lenience, :func:`extra_configs`);
* the record: the tables of :mod:`specdec.analysis.realtables`, :func:`write_outputs`.

Importing it imports no torch (``specdec run --list``): the engine, the drafters and the tables are
imported where they are used.
"""

from __future__ import annotations

import csv
import io
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from specdec.measure.core import environment, verify_cost_curve, write_result
from specdec.measure.pairedrun import finish_cell, paired_block, timed_generation
from specdec.measure.runner import RunSettings, not_key, open_partial, run_cells
from specdec.theory.checks import check_int, check_seed
from specdec.theory.intervals import geomean, per_unit_medians
from specdec.theory.recordio import csv_cell, write_record, write_text_atomic
from specdec.theory.sampling import warp
from specdec.train.shards import load_shards, sequences, shard_paths
from specdec.train.workloads import (
    TASKS,
    chat_prompt_ids,
    check_per_task,
    evaluation_prompts,
    training_prompts,
)

__all__ = [
    "HF_MODES",
    "RUN_KINDS",
    "RealDecoding",
    "build_drafters",
    "cell_id",
    "choose_sweep_drafters",
    "drafter_names",
    "extra_configs",
    "engine_view",
    "load_engine",
    "main_cells",
    "ngram_corpus",
    "paired_cell",
    "relative",
    "run",
    "teacher_force",
    "verify_curve",
    "write_outputs",
]

ROOT = Path(__file__).resolve().parents[2]
HF_MODES = ("hf-float32", "hf-bfloat16")


# -- the drafters' names ----------------------------------------------------------------------------


#: The drafter registry's kinds (:mod:`specdec.drafting.registry`) a run builds: the chains its context
#: makes (prompt lookup, the n-gram tables of the target's text, early exits, the distilled drafts).
RUN_KINDS = ("lookup", "unigram", "bigram", "early-exit", "draft")


def drafter_names(spec: str, trained: list[str]) -> list[str]:
    """The drafters of a comma list, each the registry's spec, which names it in the record: ``lookup``,
    ``unigram``, ``bigram``, ``early-exit:N``, ``draft:NAME`` (NAME among ``trained``), or ``drafts``
    (``draft:NAME`` of every trained draft); an item ``key=value`` continues the spec before it
    (``lookup,max_ngram=2``). Anything else raises ValueError naming the valid specs (the records'
    older names, ``ee-N`` and ``draft-NAME``, with the spec that replaces them)."""
    from specdec.drafting.registry import parse_spec

    items: list[str] = []
    for item in (s.strip() for s in spec.split(",")):
        if item and "=" in item and items and items[-1] != "drafts":
            items[-1] += f",{item}"  # an option of the spec before
        elif item:
            items.append(item)
    out: list[str] = []
    for item in items:
        if item == "drafts":
            out += [f"draft:{n}" for n in trained]
            continue
        try:
            parsed = parse_spec(item)
        except ValueError as exc:
            parsed, why = None, str(exc)
        if parsed is not None and parsed.kind not in RUN_KINDS:
            why = f"a real-decoding run builds the kinds {', '.join(RUN_KINDS)}; not {parsed.kind}"
        elif parsed is not None and parsed.kind == "draft" and parsed.argument not in trained:
            why = f"no trained draft {parsed.argument!r} (the trained drafts: {', '.join(trained) or 'none'})"
        elif parsed is not None:
            out.append(parsed.text)
            continue
        older = item[3:] if item.startswith("ee-") and item[3:].isdigit() else None
        hint = f" (the older name of early-exit:{older})" if older else ""
        if item.startswith("draft-") and ":" not in item:
            hint = f" (the older name of draft:{item.removeprefix('draft-')})"
        raise ValueError(
            f"drafter {item!r}{hint}: {why}; give registry specs: lookup, unigram, bigram, early-exit:N, "
            f"draft:NAME with NAME among the trained drafts ({', '.join(trained) or 'none'}), or drafts"
        )
    return list(dict.fromkeys(out))


# -- the settings --------------------------------------------------------------------------------------


@dataclass
class RealDecoding(RunSettings):
    """The design of a real-decoding run (``RealDecodingRun.settings`` builds it from the options).

    Checked here, before anything loads (a ValueError names the field and its range); the trained
    drafts are resolved from the package's drafts, and the drafter lists from ``timed`` and
    ``alpha_only``. :meth:`to_record` -- every field but ``out`` and ``fresh`` -- is the record's
    ``settings`` and the key a partial run must hold to be resumed (it replaces a hand-kept key list,
    which had left out ``verify_repeats`` and ``ngram_data``, both fixed when a run starts).
    """

    prompts: int
    new_tokens: int
    sweep: str
    lenience: str
    verify_repeats: int
    quick: bool = False
    repeats: int = 3
    gamma: int = 4
    sweep_task: str = "code"
    sweep_drafters: str = "auto"
    timed: str = "lookup,bigram,drafts"
    alpha_only: str = "early-exit:8,early-exit:20,early-exit:28,unigram"
    drafts: str | None = None
    no_trained: bool = False
    mode: str = "auto"
    threads: int = 1
    seed: int = 0
    ngram_data: list[str] = field(default_factory=list)
    out: str = not_key(str(ROOT / "results" / "real"))
    fresh: bool = not_key(False)
    sweep_gammas: list[int] = field(init=False)
    lenience_values: list[float] = field(init=False)
    trained: list[str] = field(init=False)
    timed_names: list[str] = field(init=False)
    alpha_names: list[str] = field(init=False)

    def __post_init__(self) -> None:
        from specdec.engine.lean import MODES

        for name in ("prompts", "new_tokens", "repeats", "gamma", "threads", "verify_repeats"):
            check_int(name, getattr(self, name), low=1)
        check_seed("seed", self.seed)
        check_per_task("prompts", self.prompts)  # not silently fewer, nor after the model loads
        if self.new_tokens < self.gamma + 2:
            raise ValueError(f"new_tokens must be >= gamma + 2 = {self.gamma + 2}; got {self.new_tokens}")
        try:
            self.sweep_gammas = sorted({int(g) for g in self.sweep.split(",") if g})
        except ValueError:
            raise ValueError(f"sweep takes comma-separated integers; got {self.sweep!r}") from None
        try:
            self.lenience_values = [float(x) for x in self.lenience.split(",") if x]
        except ValueError:
            raise ValueError(f"lenience takes comma-separated numbers; got {self.lenience!r}") from None
        if any(g < 1 for g in self.sweep_gammas):
            raise ValueError(f"sweep gammas must be >= 1; got {self.sweep!r}")
        if any(not 0 < lv <= 1 for lv in self.lenience_values):
            raise ValueError(f"lenience values must lie in (0, 1]; got {self.lenience!r}")
        if self.lenience_values and 1.0 not in self.lenience_values:
            raise ValueError("lenience must include 1 (the exact run the others are compared with)")
        if self.sweep_task not in TASKS:
            raise ValueError(f"sweep_task must be one of {', '.join(TASKS)}; got {self.sweep_task!r}")
        if self.mode not in ("auto", *MODES, *HF_MODES):
            modes = ", ".join(("auto", *MODES, *HF_MODES))
            raise ValueError(f"mode must be one of {modes}; got {self.mode!r}")
        if self.no_trained and self.drafts is not None:
            raise ValueError("drafts and no_trained exclude each other")
        self.trained = []
        if not self.no_trained:
            from specdec.train.draftnets import require_drafts

            try:
                self.trained = require_drafts(None if self.drafts is None else self.drafts.split(","))
            except (ValueError, FileNotFoundError) as exc:
                raise ValueError(f"drafts: {exc} (no_trained runs without trained drafts)") from None
        self.timed_names = drafter_names(self.timed, self.trained)
        alpha_only = drafter_names(self.alpha_only, self.trained)
        self.alpha_names = [n for n in alpha_only if n not in self.timed_names]
        if not self.timed_names:
            raise ValueError("timed must name at least one drafter")
        if self.sweep_drafters != "auto":
            unknown = [n for n in self.sweep_drafters.split(",") if n not in self.timed_names]
            if unknown:
                raise ValueError(f"sweep_drafters {unknown} must be timed drafters ({self.timed_names})")

    def partial_path(self) -> Path:
        """Where the run's state is saved after every cell (resumed by the same settings)."""
        return Path(self.out) / f"{self.mode}-{self.threads}t{'-quick' if self.quick else ''}.partial.json"


# -- the engine, the drafters, the costs -------------------------------------------------------------


def load_engine(mode: str, threads: int) -> dict[str, Any]:
    """The target in ``mode`` (``auto``, a lean mode or an ``hf-`` mode) at ``threads``, opened by the
    engine builder (:func:`specdec.measure.modes.open_target`): the engine, the Hugging Face model
    behind it, the tokenizer, the mode probe."""
    from specdec.engine.builder import EngineSpec
    from specdec.engine.models import pick_device
    from specdec.measure.modes import open_target

    if mode == "auto" and pick_device(None).startswith("cuda"):
        mode = "hf-bfloat16"  # the lean forward is CPU-only
    if mode in HF_MODES:
        spec = EngineSpec("hf", mode.removeprefix("hf-"), threads, device=pick_device(None))
    else:
        spec = EngineSpec("lean", mode, threads)  # the C forward's threads too
    return engine_view(open_target(spec))


def engine_view(opened: Any) -> dict[str, Any]:
    """What the run reads of an opened engine (:class:`specdec.engine.builder.OpenedEngine`)."""
    from specdec.measure.core import probe_summary

    hf = opened.spec.engine == "hf"
    return {
        "target": opened.model,
        "base": opened.base.model,
        "tokenizer": opened.tokenizer,
        "mode": f"hf-{opened.mode}" if hf else opened.mode,
        "device": opened.base.device if hf else "cpu",
        "probe": None if opened.probe is None else probe_summary(opened.probe),
        "loaded": opened.base,
        "opened": opened,
    }


def ngram_corpus(
    engine: dict[str, Any], folders: list[Path], n_fallback: int, max_new: int, seed: int
) -> tuple[list[list[int]], str]:
    """Target-generated responses for the n-gram tables: the distillation shards when present
    (``specdec run distill-data``, training prompts disjoint from the evaluation), else
    temperature-1 generations of the target on ``n_fallback`` training prompts."""
    from specdec.engine.decoding import autoregressive

    with_shards = [f for f in folders if shard_paths(f)]
    if with_shards:
        seqs = [s.response.astype(np.int64).tolist() for f in with_shards for s in sequences(load_shards(f))]
        where = ", ".join(relative(str(f.resolve())) for f in with_shards)
        return seqs, f"distillation shards ({sum(map(len, seqs))} response tokens) in {where}"
    seqs = []
    for i, p in enumerate(training_prompts(n_fallback, seed=seed)):
        ids = chat_prompt_ids(engine["tokenizer"], p.prompt)
        g = autoregressive(engine["target"], ids, max_new_tokens=max_new, temperature=1.0, seed=seed + i)
        seqs.append([int(t) for t in g.tokens])
    return seqs, f"temperature-1 generations of the target on {n_fallback} training prompts (seed {seed})"


def build_drafters(engine: dict[str, Any], names: list[str], corpus: list[list[int]]) -> dict[str, Any]:
    """The drafter of each registry spec (see :func:`drafter_names`; ``lookup`` drafts up to 3-grams), built
    by the registry; a distilled draft runs in the lean engine at the target's threads when the target is
    lean (:func:`specdec.measure.modes.draft_context`)."""
    from specdec.drafting.registry import build_drafter, parse_spec
    from specdec.measure.modes import draft_context

    context, drafts = draft_context(engine["opened"], corpus=lambda: corpus)
    out = {name: build_drafter(name, context) for name in names}
    for name in names:
        spec = parse_spec(name)
        if spec.kind == "draft":
            mode = drafts[spec.argument]["mode"]
            engine.setdefault("draft_modes", {})[name] = (
                engine["mode"] if engine["mode"] in HF_MODES else mode
            )
    return out


def verify_curve(engine: dict[str, Any], prefix: int, kmax: int, repeats: int) -> dict[str, Any]:
    """T(k)/T(1), k = 1..kmax, of the target as it decodes (interleaved, repeated medians): the
    one T(k) loop, :func:`specdec.measure.core.verify_cost_curve`, in the record's form."""
    ks = list(range(1, kmax + 1))
    vc = verify_cost_curve(engine["target"], prefix, ks, repeats=repeats)  # any engine: the one T(k) loop
    return {
        "prefix_len": prefix,
        "ks": ks,
        "ratios": list(vc.ratios),
        "step_ms": 1e3 * vc.timings[0].median_s,
    }


def teacher_force(target: Any, drafters: dict[str, Any], gen: dict[str, Any]) -> list[dict[str, Any]]:
    """beta summed over the positions each drafter drafts, on one plain generation."""
    from specdec.measure.acceptance import target_p_rows, teacher_forced

    seq, n = gen["prompt_ids"] + gen["response"], len(gen["prompt_ids"])
    warp_fn = partial(warp, temperature=gen["temperature"])
    p_rows = target_p_rows(target, seq, n, warp_fn)
    out = []
    for name, d in drafters.items():
        res = teacher_forced(target, d, seq, n, warp_fn, p=p_rows)
        out.append(
            {k: gen[k] for k in ("task", "prompt", "temperature")}
            | {
                "drafter": name,
                "beta_sum": float(np.nansum(res.beta)),
                "drafted": res.drafted,
                "positions": len(res.beta),
            }
        )
    return out


# -- the cells -----------------------------------------------------------------------------------------


def main_cells(prompts: list[dict[str, Any]]) -> list[tuple[float, dict[str, Any]]]:
    """The main phase's cells: every temperature, then every prompt."""
    from specdec.analysis.realtables import TEMPERATURES

    return [(temp, p) for temp in TEMPERATURES for p in prompts]


def cell_id(phase: str, temp: float, prompt: dict[str, Any]) -> str:
    """A cell's id in the state's ``done`` list."""
    return f"{phase}|{temp:g}|{prompt['task']}|{prompt['id']}"


def paired_cell(
    target: Any,
    configs: Sequence[Mapping[str, Any]],
    ids: Sequence[int],
    *,
    temperature: float,
    new_tokens: int,
    repeats: int,
    seed: int,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """A cell's ``repeats`` repetitions, each one :func:`specdec.measure.pairedrun.paired_block`
    (plain first on even repetitions, last on odd ones), all with ``seed`` and the order from ``rng``."""
    rows: list[dict[str, Any]] = []
    for rep in range(repeats):
        rows += paired_block(
            target, configs, ids, temperature=temperature, new_tokens=new_tokens, seed=seed, rep=rep, rng=rng
        )
    return rows


def choose_sweep_drafters(
    state: dict[str, Any], sweep_drafters: str, sweep_task: str, drafters: Mapping[str, Any]
) -> list[str]:
    """``sweep_drafters`` split at commas, or for ``auto``: lookup and the timed model draft with the
    highest measured speedup on ``sweep_task`` at T = 0."""
    from specdec.engine.drafters import ModelDrafter

    if sweep_drafters != "auto":
        return sweep_drafters.split(",")
    out = ["lookup"] if "lookup" in drafters else []
    models = [n for n, d in drafters.items() if isinstance(d, ModelDrafter)]
    if models:
        rows = [
            r
            for r in state["runs"]
            if r["phase"] == "main" and r["task"] == sweep_task and r["temperature"] == 0.0
        ]
        units, med = per_unit_medians(rows, "decode_s", group="drafter")
        best = max(models, key=lambda n: float(geomean(med["plain"] / med[n])))
        out.append(best)
    return out


def extra_configs(
    names: Sequence[str],
    drafters: Mapping[str, Any],
    gamma: int,
    sweep_gammas: Sequence[int],
    lenience_values: Sequence[float],
) -> tuple[list[dict[str, Any]], str | None]:
    """The extras' configurations: each sweep drafter at each sweep gamma, and the model draft among
    them at ``gamma`` under each lenience below 1 (with the exact run at ``gamma`` when the sweep
    lacks it); and that model draft's name (None without one)."""
    from specdec.engine.drafters import ModelDrafter

    model = next((n for n in names if isinstance(drafters[n], ModelDrafter)), None)
    configs = [
        {"drafter": n, "object": drafters[n], "gamma": g, "lenience": 1.0}
        for n in names
        for g in sweep_gammas
    ]
    if model is not None:
        if gamma not in sweep_gammas and lenience_values:
            configs.append({"drafter": model, "object": drafters[model], "gamma": gamma, "lenience": 1.0})
        configs += [
            {"drafter": model, "object": drafters[model], "gamma": gamma, "lenience": lv}
            for lv in lenience_values
            if lv < 1
        ]
    return configs, model


# -- the run -------------------------------------------------------------------------------------------


def _log(line: str) -> None:
    print(line, file=sys.stderr)


def set_threads(n: int) -> Any:
    """torch's and the C forward's threads (:func:`specdec.engine.models.set_threads`), imported when the
    run starts: importing this module imports no torch (``specdec run --list``)."""
    from specdec.engine.models import set_threads as pin

    return pin(n)


def run(
    s: RealDecoding,
    *,
    command: str,
    started: float,
    full: Mapping[str, Any] | None = None,
) -> Path:
    """The whole run of ``s``: every cell not yet in the partial state at ``s.partial_path()`` (resumed
    when it holds ``s.to_record()``; ``s.fresh`` discards it), saved there after each by the one runner
    (:func:`specdec.measure.runner.run_cells`); then the record, its generations and CSVs under
    ``s.out``. ``full``: the full run's settings, for a quick run's estimate. Returns the record's path."""
    out, partial_path = Path(s.out), s.partial_path()
    out.mkdir(parents=True, exist_ok=True)
    state = open_partial(partial_path, s, fresh=s.fresh, key="settings_key")
    threads = set_threads(s.threads)
    engine = load_engine(state["mode"] if state else s.mode, s.threads)
    tag = f"{engine['device'].split(':')[0]}-{engine['mode'].removeprefix('hf-')}-{s.threads}t" + (
        "-quick" if s.quick else ""
    )
    prompts = evaluation_prompts(engine["tokenizer"], s.prompts)
    if state is None:
        corpus, corpus_source = ngram_corpus(engine, [Path(d) for d in s.ngram_data], 12, 64, 1000)
        mean_prompt = int(np.mean([len(p["ids"]) for p in prompts]))
        kmax = max(s.gamma, *s.sweep_gammas) + 1
        curve = verify_curve(engine, mean_prompt + s.new_tokens // 2, kmax, s.verify_repeats)
        state = {
            "kind": "real-decoding-partial",
            "settings_key": s.to_record(),
            "commands": [],
            "mode": engine["mode"],
            "probe": engine["probe"],
            "corpus": corpus,
            "ngram_source": corpus_source,
            "verify_cost": curve,
            "done": [],
            "runs": [],
            "generations": [],
            "teacher_forced": [],
            "sweep_drafters": None,
            "elapsed_s": 0.0,
            "setup_s": 0.0,
        }
    state["commands"].append(command)
    state["setup_s"] += time.perf_counter() - started

    drafters = build_drafters(engine, s.timed_names, state["corpus"])
    alpha_drafters = build_drafters(engine, s.alpha_names, state["corpus"])
    _log(
        f"[real] {tag}: timed {list(drafters)}, alpha only {list(alpha_drafters)}; "
        f"{len(state['done'])} cells already done"
    )
    warm = prompts[0]["ids"]
    for d in [None, *drafters.values()]:
        timed_generation(
            engine["target"],
            d,
            warm,
            gamma=s.gamma,
            temperature=0.0,
            new_tokens=s.gamma + 2,
            exact_length=True,
        )
    last = [time.perf_counter()]
    write_record(partial_path, state, indent=None, sort_keys=False)

    def account(line: Callable[[str, float], str]) -> Callable[[str, float], None]:
        def after(cid: str, seconds: float) -> None:  # the time since the last save joins elapsed_s
            now = time.perf_counter()
            state["elapsed_s"] += now - last[0]
            last[0] = now
            _log(line(cid, seconds))

        return after

    # the main phase: timed runs and teacher forcing, cell by cell
    target = engine["target"]
    configs = [{"drafter": n, "object": d, "gamma": s.gamma, "lenience": 1.0} for n, d in drafters.items()]

    def main_cell(i: int, temp: float, p: dict[str, Any]) -> Callable[[], None]:
        def cell() -> None:
            seed = s.seed + i
            rows = paired_cell(
                target, configs, p["ids"], temperature=temp, new_tokens=s.new_tokens,
                repeats=s.repeats, seed=seed, rng=np.random.default_rng([s.seed, i]),
            )  # fmt: skip
            base = {"phase": "main", "task": p["task"], "prompt": p["id"], "temperature": temp, "seed": seed}
            plain = next(r for r in rows if r["drafter"] == "plain" and r["rep"] == 0)["_tokens"]
            state["runs"] += finish_cell(rows, base)
            gen = {
                "task": p["task"],
                "prompt": p["id"],
                "temperature": temp,
                "seed": seed,
                "prompt_ids": p["ids"],
                "response": plain,
            }
            state["generations"].append(gen)
            state["teacher_forced"] += teacher_force(target, drafters | alpha_drafters, gen)

        return cell

    main = [(cell_id("main", t, p), main_cell(i, t, p)) for i, (t, p) in enumerate(main_cells(prompts))]
    run_cells(
        state,
        main,
        partial_path,
        threads=s.threads,
        after=account(lambda cid, sec: f"[real] {len(state['done'])} cells done ({cid}, {sec:.0f} s)"),
    )

    # the extras: gamma sweep and argmax lenience on the sweep task at temperature 0, cell by cell
    if state.get("sweep_drafters") is None:
        state["sweep_drafters"] = choose_sweep_drafters(state, s.sweep_drafters, s.sweep_task, drafters)
    extra, model = extra_configs(
        state["sweep_drafters"], drafters, s.gamma, s.sweep_gammas, s.lenience_values
    )
    sweep_cells = [p for p in prompts if p["task"] == s.sweep_task]

    def extra_cell(i: int, p: dict[str, Any]) -> Callable[[], None]:
        def cell() -> None:
            rows = paired_cell(
                target, extra, p["ids"], temperature=0.0, new_tokens=s.new_tokens, repeats=s.repeats,
                seed=s.seed, rng=np.random.default_rng([s.seed, 10_000 + i]),
            )  # fmt: skip
            base = {
                "phase": "extra",
                "task": p["task"],
                "prompt": p["id"],
                "temperature": 0.0,
                "seed": s.seed,
            }
            state["runs"] += finish_cell(
                rows,
                base,
                lambda r: r["drafter"] == "plain" or (r["drafter"], r["gamma"]) == (model, s.gamma),
            )

        return cell

    if extra:
        n, position = len(sweep_cells), {cell_id("extra", 0.0, p): i for i, p in enumerate(sweep_cells)}
        run_cells(
            state,
            [(cell_id("extra", 0.0, p), extra_cell(i, p)) for i, p in enumerate(sweep_cells)],
            partial_path,
            threads=s.threads,
            after=account(lambda cid, sec: f"[real] extra cell {position[cid] + 1}/{n} done ({sec:.0f} s)"),
        )
    return _finish(s, state, engine, tag, out, partial_path, threads, full)


def _finish(
    s: RealDecoding,
    state: dict[str, Any],
    engine: dict[str, Any],
    tag: str,
    out: Path,
    partial_path: Path,
    threads: Any,
    full: Mapping[str, Any] | None,
) -> Path:
    """The record from a finished state: the tables, the generations, the CSVs; the state removed."""
    from specdec.analysis.realrun import RECORD_FORMAT
    from specdec.analysis.realtables import (
        alpha_rows,
        estimate_full_minutes,
        lenience_rows,
        sweep_rows,
        table_rows,
    )

    curve = {
        int(k): float(r)
        for k, r in zip(state["verify_cost"]["ks"], state["verify_cost"]["ratios"], strict=True)
    }
    table = table_rows(state, s.timed_names, s.gamma, curve)
    alphas = alpha_rows(state, [*s.timed_names, *s.alpha_names])
    alpha_of = {
        r["drafter"]: (r["alpha"], r["alpha_all"])
        for r in alphas
        if r["task"] == s.sweep_task and r["temperature"] == 0.0
    }
    plain_steps = [
        r["target_s"] / r["target_calls"]
        for r in state["runs"]
        if r["phase"] == "main" and r["drafter"] == "plain"
    ]
    record = {
        "kind": "real-decoding",
        "format": RECORD_FORMAT,
        "tag": tag,
        "command": state["commands"][0],
        "commands": state["commands"],
        "settings": {k: relative(v) for k, v in s.to_record().items()},  # the resume key, as it ran
        "target": {
            "name": engine["loaded"].name,
            "mode": engine["mode"],
            "device": engine["device"],
            "layers": int(engine["target"].config.num_hidden_layers),
        },
        "mode_probe": state["probe"],
        "draft_modes": engine.get("draft_modes", {}),
        "timed_drafters": s.timed_names,
        "alpha_only_drafters": s.alpha_names,
        "trained_drafts": s.trained,
        "ngram_source": state["ngram_source"],
        "prompts_per_task": s.prompts,
        "repeats": s.repeats,
        "new_tokens": s.new_tokens,
        "verify_cost": state["verify_cost"],
        "step_ms": 1e3 * statistics.median(plain_steps),
        "table": table,
        "alpha_table": alphas,
        "teacher_forced": state["teacher_forced"],
        "sweep": {
            "task": s.sweep_task,
            "drafters": state["sweep_drafters"],
            "rows": sweep_rows(state, s.sweep_gammas, curve, alpha_of),
        },
        "lenience": {
            "task": s.sweep_task,
            "temperature": 0.0,
            "rows": lenience_rows(state, s.gamma, s.lenience_values),
        },
        "runs": [{k: v for k, v in r.items() if k != "tokens"} for r in state["runs"]],
        "generations_file": f"generations-{tag}.json",
        "runtime_min": (state["elapsed_s"] + state["setup_s"]) / 60,
        "threads_info": threads,
        # the one runner's bookkeeping: each cell's seconds and the machine's load while it ran
        "cell_seconds": state.get("cell_seconds", {}),
        "cell_load": state.get("cell_load", {}),
    }
    used = (engine["mode"], *engine.get("draft_modes", {}).values())
    if "q4_1" in used or "q4q8" in used:
        from specdec.engine import native

        kind = "q4q8" if "q4q8" in used else "q4_1"
        record["native_build"] = native.build_info(kind)  # the compiler and flags of the C forward
    if s.quick and full is not None:
        record["full_run_estimate"] = estimate_full_minutes(state, full)
    write_record(
        out / record["generations_file"],
        {"kind": "generations", "seed": s.seed, "generations": state["generations"]},
        indent=None,
        sort_keys=False,
    )
    env = environment(dtype=engine["mode"], device=engine["device"])
    env.update(threads_info=threads)
    path = write_outputs(out, tag, record, env)
    partial_path.unlink(missing_ok=True)
    _log(f"[real] wrote {path.name} in {record['runtime_min']:.1f} min")
    if "full_run_estimate" in record:
        _log(f"[real] estimated full run: {record['full_run_estimate']['total_min']:.0f} min")
    return path


# -- writing -------------------------------------------------------------------------------------------


def relative(value: Any) -> Any:
    """A path under the repository as a relative POSIX path (also inside lists); anything else unchanged."""
    if isinstance(value, list):
        return [relative(v) for v in value]
    if isinstance(value, str) and Path(value).is_absolute() and Path(value).is_relative_to(ROOT):
        return Path(value).relative_to(ROOT).as_posix()
    return value


def write_outputs(out: Path, tag: str, record: dict[str, Any], env: dict[str, Any]) -> Path:
    """The record (with the environment) and CSVs of its table and its gamma sweep."""
    path = write_result(out / f"{tag}.json", record, env=env)
    table = record["table"]
    cols = [k for k in table[0] if k not in ("pooled", "per_prompt")]
    write_text_atomic(out / f"{tag}-table.csv", _csv(cols, table))
    if record["sweep"]["rows"]:
        write_text_atomic(
            out / f"{tag}-sweep.csv", _csv(list(record["sweep"]["rows"][0]), record["sweep"]["rows"])
        )
    return path


def _csv(cols: list[str], rows: Sequence[Mapping[str, Any]]) -> str:
    """CSV text of ``rows``' ``cols`` (the records' NaN rule: NaN and infinity -> the empty cell)."""
    buffer = io.StringIO()
    w = csv.DictWriter(buffer, cols)
    w.writeheader()
    w.writerows({k: csv_cell(row[k]) for k in cols} for row in rows)
    return buffer.getvalue()
