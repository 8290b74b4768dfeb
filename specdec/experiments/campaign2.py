"""Issue 31's second campaign: every plain decoder at its best and every drafter family, on frozen prompts.

The design (:class:`Campaign2`) is fixed before the run and stored as the record's settings (also the
resume key: a partial record made with other settings, another commit or another machine is refused):

* **Prompts**: ``specdec/data/workloads/heldout/campaign-v2.jsonl`` (4 tasks x 12, committed before any
  timing, never used to develop or tune anything; its sha256 in the record). Halves for the cross-fit:
  a prompt's index in its task mod 2.
* **Generations** to EOS or ``new_tokens`` (128), temperatures 0 and 1, ``repeats`` (5) repetitions of
  every cell; every cell on one clean commit (a dirty tree refuses to start); the load of every cell
  recorded, a loaded cell timed again (``retry_loaded`` times) with the discarded timings kept.
* **Plain decoders** (:func:`build`): the lean engine (q4q8, the book's engine) at every core and at one;
  llama.cpp on Q4_0 requantized from the shipped GGUF (its fastest CPU format, repacked kernels) at the
  same threads through its lowest-overhead loop (one ``llama_decode`` per token, last-row logits) and
  through its high-level ``Llama.eval`` with every position's logits; transformers in its fastest dtype
  here (float32 or bfloat16, timed at the start: :func:`fastest_hf_dtype`), in the first
  ``hf_repeats`` (2) repetitions of a cell only: about a tenth of the lean engine's speed in a smoke run,
  it is not expected to be the fastest plain decoder (it stays among the candidates the cross-fit
  chooses from), and its 6 s decodes would take a quarter of the run.
* **Families** on the lean engine at every core (:data:`CONFIGS`, drafter specs of
  :mod:`specdec.drafting.registry`): prompt lookup as a chain and as a tree, suffix decoding as a tree
  and as a path, the one-layer distilled draft as a chain and as a tree, early exit, Medusa, the MLP
  speculator as a chain and as a tree, EAGLE's chain and EAGLE-2's dynamic tree; the heuristic gamma
  policy on prompt lookup (:data:`ADAPTIVE`). A family with two gammas / budgets has its
  setting chosen by cross-fitting (one half chooses, the other reports); a family with one had it fixed
  before the run from the newest records on other prompts (the trees and conditioned records, the first
  campaign): no setting is chosen on the prompts it is reported on.

The analysis (:func:`analyse`): the cross-fit (:func:`specdec.analysis.crossfit.analyse`) under each
estimator of a prompt's repetitions (median, mean, the fastest repetition) and with the prefill
included, and Bonferroni-simultaneous intervals over the family-vs-fastest-plain verdicts.
``specdec run campaign2`` is the command (:class:`Campaign2Run`).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from specdec.experiments.campaign import Config, Engine, spec_configs
from specdec.experiments.options import INCOMPLETE, Program, Refused, option, read_record
from specdec.measure.runner import RunSettings
from specdec.theory.checks import check_float, check_int

__all__ = [
    "ADAPTIVE",
    "CONFIGS",
    "PROMPTS",
    "QUICK_ADAPTIVE",
    "QUICK_CONFIGS",
    "Campaign2",
    "Campaign2Run",
    "analyse",
    "build",
    "fastest_hf_dtype",
    "finish",
]

PROMPTS = Path(__file__).resolve().parents[1] / "data" / "workloads" / "heldout" / "campaign-v2.jsonl"

#: Every family: a drafter spec and its gammas (chains) or node budgets (trees). Two values: chosen by
#: cross-fitting; one: fixed before the run from the newest records on other prompts (each the setting
#: those records' cross-fit chose on every half: lookup tree 4, suffix path 8, draft tree 4, Medusa 4,
#: the MLP chain 2 and tree 4, EAGLE's chain 2, EAGLE-2 4; early exit at 8 of 30 layers, gamma 1, the
#: first campaign's).
CONFIGS: dict[str, tuple[int, ...]] = {
    "lookup": (2, 4),
    "lookup-tree,min_ngram=2": (4,),
    "suffix": (8, 16),
    "suffix,tree=0": (8,),
    "draft:distil-l1": (1, 2),
    "draft-tree:distil-l1,branch=2": (4,),
    "early-exit:8": (1,),
    "medusa:medusa-4": (4,),
    "mlp:mlp-4,ranks=1": (2,),
    "mlp:mlp-4": (4,),
    "eagle:eagle-1": (2,),
    "eagle:eagle-1,topk=4,depth=5": (4,),
}
#: The heuristic gamma policy (:class:`specdec.theory.policies.HeuristicGamma`) on these chain drafters,
#: started at each value (cross-fitted when two): on prompt lookup, started at 1 (the first campaign's
#: choice at 2 threads; on the distilled draft it lost to a fixed gamma there, and is left out).
ADAPTIVE: dict[str, tuple[int, ...]] = {"lookup": (1,)}
QUICK_CONFIGS: dict[str, tuple[int, ...]] = {"lookup": (2,), "suffix": (8,), "eagle:eagle-1": (2,)}
QUICK_ADAPTIVE: dict[str, tuple[int, ...]] = {"lookup": (1,)}


@dataclasses.dataclass(frozen=True)
class Campaign2(RunSettings):
    """The run's design: what the record stores as its settings and what a resumed run must equal."""

    threads: int
    machine: dict[str, Any]
    git_commit: str | None
    prompts_sha256: str | None
    hf_dtype: str
    quick: bool = False
    new_tokens: int = 128
    repeats: int = 5
    seed: int = 0
    retry_loaded: int = 2
    llamacpp: bool = True
    hf: bool = True
    #: transformers (about a tenth of the lean engine's tokens/s in a smoke run, not expected to be the
    #: fastest plain decoder) runs in the first ``hf_repeats`` repetitions of each cell only: ~6 s a decode
    hf_repeats: int = 2
    prompts_file: str = PROMPTS.name
    configs: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=lambda: dict(CONFIGS))
    adaptive: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=lambda: dict(ADAPTIVE))

    def __post_init__(self) -> None:
        check_int("threads", self.threads, low=1, high=1024)
        check_int("new_tokens", self.new_tokens, low=2, high=2048)
        check_int("repeats", self.repeats, low=1, high=100)
        check_int("seed", self.seed, low=0)
        check_int("retry_loaded", self.retry_loaded, low=0, high=10)
        check_int("hf_repeats", self.hf_repeats, low=1, high=100)
        if self.hf_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"hf_dtype must be 'float32' or 'bfloat16'; got {self.hf_dtype!r}")
        for spec in self.adaptive:
            if spec not in self.configs:
                raise ValueError(
                    f"adaptive drafter {spec!r} must be one of the configurations {list(self.configs)}"
                )

    def to_record(self) -> dict[str, Any]:
        """The settings as the record stores them (JSON types): the resume key (with the two fixed
        parts of the design: generations stop at EOS, temperatures 0 and 1)."""
        return super().to_record() | {"eos": True, "temperatures": [0.0, 1.0]}


def fastest_hf_dtype(threads: int, *, tokens: int = 24, rounds: int = 3) -> tuple[str, dict[str, Any]]:
    """transformers' faster dtype on this machine at ``threads``: float32 and bfloat16 each decode
    ``tokens`` greedy tokens after a short prompt, interleaved ``rounds`` times (the first round a
    warm-up); the lower median time per token wins. Returns the dtype and the timings."""
    import numpy as np

    from specdec.engine.builder import HF_DTYPES, EngineSpec, open_engine
    from specdec.engine.decoding import autoregressive

    models = {d: open_engine(EngineSpec("hf", d, threads, device="cpu")) for d in HF_DTYPES}
    ids = models["float32"].tokenizer("Tell me about the sea.")["input_ids"]
    times: dict[str, list[float]] = {d: [] for d in models}
    for r in range(rounds + 1):
        for d, loaded in models.items():
            t0 = time.perf_counter()
            autoregressive(loaded.model, ids, max_new_tokens=tokens)
            if r:
                times[d].append((time.perf_counter() - t0) / tokens)
    med = {d: float(np.median(v)) for d, v in times.items()}
    best = min(med, key=lambda d: (med[d], d))
    return best, {
        "s_per_token": times,
        "median_s_per_token": med,
        "chosen": best,
        "threads": threads,
        "rule": f"{tokens} greedy tokens, {rounds} interleaved rounds after a warm-up; lower median wins",
    }


def build(settings: Campaign2, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The plain decoders and every configuration of ``settings`` (drafters by the registry, on the lean
    engine at ``settings.threads``). Returns engines, configs, tokenizer, eos_token_id, drafts (what
    each draft ran in), left_out (what could not run, said), drafters (spec -> the drafter its
    configurations share) and context (what they were built from, for more on the same engine)."""
    from specdec.drafting.registry import build_drafter, parse_spec
    from specdec.engine import llamacpp as lc
    from specdec.engine.builder import EngineSpec, open_engine, open_model
    from specdec.measure.modes import draft_context

    threads = settings.threads
    specs = {s: parse_spec(s) for s in settings.configs}  # every spec checked before anything loads
    opened = open_engine(EngineSpec("lean", "q4q8", threads))
    target, loaded = opened.model, opened.base
    name = f"lean-{target.mode}-{threads}t"
    left_out: list[str] = []
    context, drafts = draft_context(opened, draft_mode="q4q8")
    configs: list[Config] = []
    drafters = {text: build_drafter(spec, context) for text, spec in specs.items()}
    for text, drafter in drafters.items():
        adaptive = [text] if text in settings.adaptive else []
        configs += spec_configs(name, {text: drafter}, list(settings.configs[text]))
        for start in settings.adaptive.get(text, ()):
            configs += [
                c
                for c in spec_configs(name, {text: drafter}, [start], adaptive=adaptive)
                if "+heuristic" in c.id
            ]
    info = {"engine": "lean", "mode": target.mode, "threads": threads}
    engines = [Engine(name, target, threads, info)]
    if threads > 1:
        one = open_model(loaded.model, EngineSpec("lean", "q4q8", 1)).model
        engines.append(
            Engine(f"lean-{one.mode}-1t", one, 1, {"engine": "lean", "mode": one.mode, "threads": 1})
        )
    if settings.llamacpp and lc.available():
        for loop in ("lowlevel", "eval"):
            cpp = open_engine(EngineSpec("llama.cpp", "q4_0", threads, loop=loop), base=loaded)
            info = {"engine": "llama.cpp", **cpp.about, "threads": threads, "loop": lc.LOOPS[loop]}
            engines.append(Engine(f"llama.cpp-{loop}-{threads}t", cpp.model, threads, info))
    elif settings.llamacpp:
        left_out.append("llama.cpp left out: llama_cpp is not importable (pip install llama-cpp-python)")
    if settings.hf:
        hf = open_engine(
            EngineSpec("hf", settings.hf_dtype, threads, device="cpu"),
            base=loaded if settings.hf_dtype == "float32" else None,
        ).base
        engines.append(
            Engine(
                f"hf-{settings.hf_dtype}-{threads}t",
                hf.model,
                threads,
                {"engine": "transformers", "mode": settings.hf_dtype, "threads": threads},
                repeats=min(settings.hf_repeats, settings.repeats),
            )
        )
    for line in left_out:
        log(f"[campaign2] {line}")
    return {
        "engines": engines,
        "configs": configs,
        "tokenizer": loaded.tokenizer,
        "eos_token_id": loaded.tokenizer.eos_token_id,
        "drafts": drafts,
        "left_out": left_out,
        "context": context,
        "drafters": drafters,
    }


def analyse(
    record: Mapping[str, Any], *, n_boot: int = 2000, simultaneous_boot: int = 100_000
) -> dict[str, Any]:
    """The record's analyses, pure functions of its stored runs: the cross-fit under each estimator
    (:data:`specdec.analysis.crossfit.ESTIMATORS`) on decode time, the median with the prefill included
    (end to end), and the median's Bonferroni-simultaneous intervals
    (:func:`specdec.analysis.treetables.simultaneous`)."""
    from specdec.analysis.crossfit import ESTIMATORS, fold_of
    from specdec.analysis.crossfit import analyse as crossfit
    from specdec.analysis.treetables import simultaneous

    folds = {(p["task"], p["id"]): fold_of(p["index"]) for p in record["prompts"]}
    seed = int(record["settings"].get("seed", 0))
    out: dict[str, Any] = {}
    for est in ESTIMATORS:
        out[est] = crossfit(record["runs"], record["configs"], folds, n_boot=n_boot, seed=seed, estimator=est)
    out["end_to_end"] = crossfit(
        record["runs"], record["configs"], folds, n_boot=n_boot, seed=seed, timing="end_to_end"
    )
    out["simultaneous"] = simultaneous(record, n_boot=simultaneous_boot)
    return out


def finish(record: dict[str, Any], out: Path) -> None:
    """The analyses of a complete record, with the commit that computed them, written to ``out``."""
    from specdec.experiments.trees import analysed_with, tree_summary
    from specdec.theory.recordio import write_record

    record["analyses"] = analyse(record)
    record["trees"] = tree_summary(record)
    record["analysed_with"] = analysed_with()
    write_record(out, record, indent=1, sort_keys=False)


def run_and_finish(
    built: Mapping[str, Any],
    prompts: Sequence[Mapping[str, Any]],
    out: Path,
    settings: Any,
    header: Mapping[str, Any],
    *,
    budget_s: float | None,
    fresh: bool,
) -> int:
    """A campaign's cells (:func:`specdec.experiments.campaign.run_campaign`: ``built``'s engines and
    configurations on ``prompts``, ``settings`` the design and resume key, ``header`` what the record says
    of the run, its ``kind`` among it), then, once every cell is done, :func:`finish`. Returns the exit
    status: 0, or :data:`~specdec.experiments.options.INCOMPLETE` when ``budget_s`` stopped it."""
    from specdec.engine.models import set_threads
    from specdec.experiments.campaign import run_campaign

    record = run_campaign(
        built["engines"], built["configs"], prompts, out, settings=settings.to_record(), header=header,
        new_tokens=settings.new_tokens, repeats=settings.repeats, seed=settings.seed, budget_s=budget_s,
        fresh=fresh, set_threads=set_threads, eos_token_id=built["eos_token_id"],
        retry_loaded=settings.retry_loaded,
    )  # fmt: skip
    if not record["complete"]:
        return INCOMPLETE
    record["kind"] = header["kind"]
    finish(record, out)
    return 0


# -- the program: ``specdec run campaign2`` ------------------------------------------------------------


@dataclass(frozen=True)
class Campaign2Run(Program):
    """The second campaign (issue 31): every plain decoder at its best and every drafter family.

    On the 48 prompts frozen before the run (``campaign-v2.jsonl``; --quick uses development prompts).
    The design, the engines, the families and the analysis are :mod:`specdec.experiments.campaign2`;
    the runner (interleaved paired blocks, resumable after every cell, load per cell, a loaded cell
    timed again) is :func:`specdec.experiments.campaign.run_campaign`. A full run refuses a dirty
    working tree and resumes only on the commit and machine it started on. The record
    ``results/campaign/v2-<cpu>-<threads>t.json`` holds the command, the settings, every session's
    environment, every run's raw timings and repetition-0 Stats, every cell's load, the discarded
    timings, transformers' dtype probe, the verify curve v(N) of the lean engine, and the analyses.

        specdec run campaign2 --quick             # a smoke run (minutes) on development prompts
        specdec run campaign2 --budget-s 6000     # the run; the same command again resumes it
        specdec run campaign2 --reanalyse results/campaign/v2-<cpu>-<n>t.json
    """

    name: ClassVar[str] = "campaign2"

    quick: bool = option(False, "a smoke run: development prompts, 3 families, 16 tokens, 1 repetition")
    repeats: int = option(5, "repetitions per cell, 1..100 (quick: 1)")
    new_tokens: int = option(128, "new tokens at most, 2..2048, EOS stops earlier (quick: 16)")
    threads: int | None = option(None, "the engines' threads, 1..1024 (default: every core)")
    hf_dtype: str = option(
        "auto",
        "transformers' dtype (auto: the faster here, timed at the start)",
        choices=("auto", "float32", "bfloat16"),
    )
    llamacpp: bool = option(True, "llama.cpp among the plain decoders")
    budget_s: float | None = option(None, "stop after the cell that exhausts this budget")
    fresh: bool = option(False, "discard a partial record instead of resuming it", once=True)
    out: str | None = option(None, "the record's path (default: results/campaign/v2-<cpu>-<n>t.json)")
    reanalyse: str | None = option(
        None, "recompute a complete record's analyses", metavar="RECORD", once=True
    )

    def counts(self) -> tuple[int, int]:
        """``(new_tokens, repeats)`` of the run: the options', or 16 and 1 with --quick (which overrides
        them)."""
        return (16, 1) if self.quick else (self.new_tokens, self.repeats)

    def check(self) -> None:
        new_tokens, repeats = self.counts()
        check_int("repeats", repeats, low=1, high=100)
        check_int("new_tokens", new_tokens, low=2, high=2048)
        if self.threads is not None:
            check_int("threads", self.threads, low=1, high=1024)
        if self.budget_s is not None:
            check_float("budget_s", self.budget_s, low=0.0)

    def run(self) -> int:
        if self.reanalyse:
            path = Path(self.reanalyse)
            record = read_record(path)
            if not record.get("complete"):
                raise Refused(f"reanalyse: {path} is not a complete record")
            finish(record, path)
            return 0
        from specdec.engine import native
        from specdec.engine.models import set_threads
        from specdec.experiments.campaign import evaluation_cells, partial_path, resumable
        from specdec.experiments.trees import heldout_prompts
        from specdec.measure.benchargs import ROOT
        from specdec.measure.core import cpu_name, environment
        from specdec.measure.device import device_slug
        from specdec.measure.modes import machine_identity
        from specdec.measure.verifykernels import target_verify_curves

        env = environment()
        if env.get("git_dirty") and not self.quick:
            raise Refused("the working tree is dirty; commit first (every cell timed on one clean commit)")
        new_tokens, repeats = self.counts()
        threads = self.threads or native.default_threads()
        machine = machine_identity()  # before any thread count is pinned
        slug = device_slug(cpu_name())[:40]
        out = Path(self.out) if self.out else (
            ROOT / "results" / "campaign" / f"v2-{slug}-{threads}t{'-quick' if self.quick else ''}.json"
        )  # fmt: skip
        probe = None
        hf_dtype = self.hf_dtype
        part = partial_path(out)
        if hf_dtype == "auto" and part.exists() and not self.fresh:  # a resumed run keeps its first choice
            hf_dtype = json.loads(part.read_text(encoding="utf-8"))["settings"]["hf_dtype"]
        elif hf_dtype == "auto":
            print(
                "[campaign2] timing transformers in float32 and bfloat16 (its faster dtype here)",
                file=sys.stderr,
            )
            hf_dtype, probe = fastest_hf_dtype(threads)
        settings = Campaign2(
            threads=threads, machine=machine, git_commit=env.get("git_commit"), hf_dtype=hf_dtype,
            prompts_sha256=None, quick=self.quick, new_tokens=new_tokens, repeats=repeats,
            llamacpp=self.llamacpp,
            **({"configs": dict(QUICK_CONFIGS), "adaptive": dict(QUICK_ADAPTIVE)} if self.quick else {}),
        )  # fmt: skip
        built = build(settings, log=lambda line: print(line, file=sys.stderr))
        if self.quick:  # development prompts: a smoke run never touches the frozen set
            prompts, sha = evaluation_cells(built["tokenizer"], per_task=2), None
        else:
            prompts, sha = heldout_prompts(built["tokenizer"], PROMPTS)

        settings = dataclasses.replace(settings, prompts_sha256=sha)
        resumable(out, built["engines"], built["configs"], settings, fresh=self.fresh)  # before any timing
        target = built["engines"][0].model
        set_threads(threads)
        print("[campaign2] timing verify calls of N rows, chain and tree (v(N))", file=sys.stderr)
        curves = target_verify_curves(target, repeats=3 if self.quick else 15)
        header = {
            "kind": "campaign-v2",
            "command": self.command(),
            "environment": env,
            "machine": machine,
            "hf_dtype_probe": probe,
            "verify_curves": curves,
            "drafts": built["drafts"],
            "left_out": built["left_out"],
        }
        return run_and_finish(built, prompts, out, settings, header, budget_s=self.budget_s, fresh=self.fresh)
