"""Issue 44's third campaign: every family after the engine and drafter work, on prompts frozen for it.

The design (:class:`Campaign3Settings`, the record's settings and resume key) is campaign v2's
(:mod:`specdec.experiments.campaign2`) with what issues 40-42 added, fixed before the run:

* **Prompts**: ``specdec/data/workloads/heldout/campaign-v3.jsonl`` (4 tasks x 12), frozen and checked
  disjoint from every training and development prompt before any timing
  (``campaign-v3.disjointness.json``); never used to develop or tune anything; its sha256 in the record.
  A ``--quick`` smoke run decodes development prompts and never touches it. Cross-fit halves: a
  prompt's index in its task mod 2.
* **Generations** to EOS or ``new_tokens`` (128), temperatures 0 and 1, ``repeats`` (5) repetitions, on
  one clean commit; every cell's load recorded and a loaded cell timed again; every run's tokens kept as
  a sha256 digest (:func:`specdec.measure.pairedrun.finish_cell`), so that greedy equality with plain
  decoding can be re-checked from the record.
* **Plain decoders**: the lean engine (q4q8) at every core and at one; llama.cpp on Q4_0 through its
  lowest-overhead loop and its high-level one (campaign v2's rows); and **v2's engine**: this lean
  engine's weights decoded by the C library of campaign v2's commit (``v2_commit``, built here with
  this machine's compiler: :func:`specdec.measure.verifykernels.library_at`), so that the record shows
  what the engine work bought on the same machine, in the same run. v2's library is of ABI 5, whose
  structures this checkout's only extend at their end (:func:`specdec.engine.native.q8_library_from`
  says so in the record); a library that cannot run here is refused before anything loads, unless
  ``--no-v2-engine`` leaves the row out (its settings then hold ``v2_commit: null``).
  transformers is left out (a tenth of the lean engine's speed in campaign v2, never a candidate for
  the fastest plain decoder).
* **Families** (:data:`CONFIGS`): campaign v2's twelve and the drafters trained on the target's own
  text (issue 42: ``mlp-self``, ``eagle-ttt`` and ``eagle-3m`` as chains and as EAGLE-2's trees, the
  hybrid on ``eagle-3m``); and every family of :data:`POLICIES` under the do-no-harm policy,
  calibrated on development prompts on the running machine before the first cell (stored; a resumed
  run keeps it). Two budgets: chosen by the cross-fit; one: fixed before the run from the newest
  records on other prompts.
* **What the method-or-implementation split needs** (issue 44, item 2), measured in the same run: the
  verify curves of chain and tree calls (v(N)), the arithmetic roofs of this machine's kernels
  (:func:`specdec.measure.verifykernels.measure_peaks`) and the model's work and bytes per row
  (:func:`~specdec.measure.verifykernels.model_counts`).

The analysis is campaign v2's (:func:`specdec.experiments.campaign2.finish`): the cross-fit under each
estimator, end to end, and Bonferroni-simultaneous intervals; plus the tree summary.
``specdec run campaign3`` is the command (:class:`Campaign3Run`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from specdec.experiments import campaign2 as c2
from specdec.experiments.options import Program, Refused, option, read_record
from specdec.experiments.trees import V3_POLICIES
from specdec.measure.runner import RunSettings
from specdec.theory.checks import check_float, check_int, check_ints

__all__ = [
    "CONFIGS",
    "POLICIES",
    "PROMPTS",
    "QUICK_CONFIGS",
    "QUICK_POLICIES",
    "V2_COMMIT",
    "Campaign3Run",
    "Campaign3Settings",
    "build",
]

PROMPTS = Path(__file__).resolve().parents[1] / "data" / "workloads" / "heldout" / "campaign-v3.jsonl"

#: Campaign v2's commit (its record's ``settings.git_commit``): the C library of v2's engine row.
V2_COMMIT = "08bbcf4ef8555025cf2031e4b361550b1eb3d334"

#: Every family: campaign v2's (:data:`specdec.experiments.campaign2.CONFIGS`, the same settings) and
#: issue 42's drafters trained on the target's own text, at the budgets the ``self`` record measured
#: (``results/bench/self-*.json``, on the trees' held-out prompts, not these): the MLP speculator and
#: EAGLE's chain and EAGLE-2's tree at two each (cross-fitted), the hybrid at 8. ``eagle-3m`` (the same
#: layer and recipe on all 56 shards) runs at ``eagle-ttt``'s budgets: it was never timed before the
#: run, and it leads the hybrid because it predicts best on held-out shards that no drafter trained on
#: (``results/bench/cond-heldout.json``), never on these prompts.
CONFIGS: dict[str, tuple[int, ...]] = {
    **c2.CONFIGS,
    "mlp:mlp-self": (4, 8),
    "eagle:eagle-ttt": (2, 4),
    "eagle:eagle-ttt,topk=4,depth=5": (4, 8),
    "eagle:eagle-3m": (2, 4),
    "eagle:eagle-3m,topk=4,depth=5": (4, 8),
    "hybrid:eagle-3m,topk=4,depth=5": (8,),
}
#: The do-no-harm policy per family: the budgets it chooses among (0, a plain step, always among them);
#: the ``self`` record's set with ``eagle-3m`` in ``eagle-ttt``'s place for EAGLE-2's tree and the hybrid
#: (:data:`specdec.experiments.trees.V3_POLICIES`, which ``specdec run trees --set noharm`` runs too).
POLICIES: dict[str, tuple[int, ...]] = dict(V3_POLICIES)
QUICK_CONFIGS: dict[str, tuple[int, ...]] = {"lookup": (2,), "suffix": (8,), "eagle:eagle-ttt": (2,)}
QUICK_POLICIES: dict[str, tuple[int, ...]] = {"lookup": (4,)}


@dataclasses.dataclass(frozen=True)
class Campaign3Settings(RunSettings):
    """The run's design: what the record stores as its settings and what a resumed run must equal."""

    threads: int
    machine: dict[str, Any]
    git_commit: str | None
    prompts_sha256: str | None
    quick: bool = False
    new_tokens: int = 128
    repeats: int = 5
    seed: int = 0
    retry_loaded: int = 2
    llamacpp: bool = True
    v2_commit: str | None = V2_COMMIT
    prompts_file: str = PROMPTS.name
    configs: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=lambda: dict(CONFIGS))
    adaptive: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=lambda: dict(c2.ADAPTIVE))
    policies: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=lambda: dict(POLICIES))

    # campaign v2's build reads these; v3 runs no transformers row
    hf: ClassVar[bool] = False
    hf_dtype: ClassVar[str] = "float32"
    hf_repeats: ClassVar[int] = 1

    def __post_init__(self) -> None:
        check_int("threads", self.threads, low=1, high=1024)
        check_int("new_tokens", self.new_tokens, low=2, high=2048)
        check_int("repeats", self.repeats, low=1, high=100)
        check_int("seed", self.seed, low=0)
        check_int("retry_loaded", self.retry_loaded, low=0, high=10)
        for spec in self.adaptive:
            if spec not in self.configs:
                raise ValueError(f"adaptive drafter {spec!r} must be one of the configurations")
        for spec, budgets in self.policies.items():
            check_ints(f"the policy budgets of {spec}", budgets, low=1, distinct=True)

    def to_record(self) -> dict[str, Any]:
        """The settings as stored (the resume key), with the two fixed parts of the design."""
        return super().to_record() | {"eos": True, "temperatures": [0.0, 1.0]}


def v2_library(commit: str) -> tuple[Any, dict[str, Any]]:
    """The C library of ``commit`` built here (:func:`specdec.measure.verifykernels.library_at`) and what
    the record says of it; :class:`~specdec.experiments.options.Refused` when it cannot serve this
    checkout's model (an older ABI's structures), before anything is loaded or timed."""
    from specdec.measure import verifykernels as vk

    try:
        return vk.library_at(commit)
    except (OSError, ValueError, AttributeError) as exc:  # AttributeError: an ABI without our entry points
        raise Refused(
            f"campaign v2's engine (commit {commit[:7]}) cannot run here: {' '.join(str(exc).split())}; "
            "pass --no-v2-engine to run without that row (the record's settings then say so)"
        ) from None


def v2_engine(target: Any, threads: int, library: Any) -> Any:
    """``target`` (a lean q4q8 model) decoding with ``library`` (its weights repacked once for it)."""
    from specdec.measure import verifykernels as vk

    return vk.library_views(target, vk.forwards_of(target, {"v2": library}), threads)["v2"]


def build(
    settings: Campaign3Settings,
    *,
    calibration: Mapping[str, Any] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Campaign v2's plain decoders and families (:func:`specdec.experiments.campaign2.build`, on
    ``settings``' configurations), v2's engine as one more plain decoder, and every policy of
    ``settings.policies`` (:func:`specdec.experiments.trees.policy_configs`; ``calibration`` from a
    partial record is kept). Returns campaign v2's build with ``calibration`` and ``v2_library``."""
    from specdec.drafting.registry import build_drafter, parse_spec
    from specdec.experiments.campaign import Engine
    from specdec.experiments.trees import policy_configs

    library = v2_library(settings.v2_commit) if settings.v2_commit else None  # refused before any load
    built = c2.build(settings, log=log)  # type: ignore[arg-type]  (the fields it reads)
    lean = built["engines"][0]
    extra, calibration = policy_configs(
        lean.name,
        lean.model,
        built["tokenizer"],
        {  # a policy drafts with its family's drafter (the same object, as the trees measurement shares)
            text: built["drafters"].get(text) or build_drafter(parse_spec(text), built["context"])
            for text in settings.policies
        },
        settings.policies,
        calibration,
    )
    built["configs"] += extra
    built["calibration"] = calibration
    built["v2_library"] = None
    if library is not None:
        lib, info = library
        name = f"lean-q4q8-v2lib-{settings.threads}t"
        about = {"engine": "lean", "mode": "q4q8", "threads": settings.threads, "library": info}
        built["engines"].append(
            Engine(name, v2_engine(lean.model, settings.threads, lib), settings.threads, about)
        )
        built["v2_library"] = info
    else:
        built["left_out"].append("v2's engine: not asked for (--no-v2-engine)")
    return built


@dataclasses.dataclass(frozen=True)
class Campaign3Run(Program):
    """Campaign v3: every plain decoder, family and policy on frozen prompts, with v2's engine as a row.

    The record is ``results/campaign/v3-<cpu>-<threads>t[-quick].json``; a full run refuses a dirty
    working tree (every cell timed on one clean commit) and the same command resumes it.

        specdec run campaign3 --quick              # a smoke run on development prompts (minutes)
        specdec run campaign3 --budget-s 9000      # the run; the same command resumes it
        specdec run campaign3 --reanalyse RECORD   # the analyses of a complete record, anew
    """

    name: ClassVar[str] = "campaign3"

    quick: bool = option(False, "a smoke run: three families, one policy, 16 tokens, 1 repetition")
    new_tokens: int | None = option(
        None, "new tokens at most, generations stop at EOS (default 128; 16 quick)"
    )
    repeats: int | None = option(None, "repetitions of every cell (default 5; 1 quick)")
    threads: int | None = option(None, "the lean engine's threads (default: every usable core)")
    seed: int = option(0, "the sampling seeds start here")
    llamacpp: bool = option(True, "llama.cpp's plain decoders (when llama_cpp imports)")
    v2_engine: bool = option(
        True, "campaign v2's C library as one more plain decoder (refused where it cannot run)"
    )
    budget_s: float | None = option(None, "stop after the cell that exhausts this many seconds")
    fresh: bool = option(False, "discard a partial record instead of resuming it", once=True)
    out: str | None = option(None, "the record's path (default results/campaign/v3-<cpu>-<n>t.json)")
    reanalyse: str | None = option(
        None, "only recompute the analyses of this complete record", metavar="RECORD", once=True
    )

    def check(self) -> None:
        if self.new_tokens is not None:
            check_int("new_tokens", self.new_tokens, low=2, high=2048)
        if self.repeats is not None:
            check_int("repeats", self.repeats, low=1, high=100)
        if self.threads is not None:
            check_int("threads", self.threads, low=1, high=1024)
        check_int("seed", self.seed, low=0)
        if self.budget_s is not None:
            check_float("budget_s", self.budget_s, low=0.0)

    def run(self) -> int:
        from specdec.theory.recordio import read_json

        if self.reanalyse:
            record = read_record(self.reanalyse)
            if not record.get("complete"):
                raise Refused(f"reanalyse: {self.reanalyse} is not a complete record")
            c2.finish(record, Path(self.reanalyse))
            return 0
        from specdec.engine import native
        from specdec.engine.models import set_threads
        from specdec.experiments.campaign import evaluation_cells, partial_path, resumable
        from specdec.experiments.trees import heldout_prompts
        from specdec.measure.benchargs import ROOT
        from specdec.measure.core import cpu_name, environment
        from specdec.measure.device import device_slug
        from specdec.measure.draftcost import draft_work
        from specdec.measure.modes import machine_identity
        from specdec.measure.roofline import measure_bandwidth
        from specdec.measure.verifykernels import measure_peaks, model_counts, target_verify_curves

        env = environment()
        if env.get("git_dirty") and not self.quick:
            raise Refused("the working tree is dirty; commit first (every cell on one clean commit)")
        threads = self.threads or native.default_threads()
        machine = machine_identity()  # before any thread count is pinned
        slug = device_slug(cpu_name())[:40]
        out = Path(self.out) if self.out else (
            ROOT / "results" / "campaign" / f"v3-{slug}-{threads}t{'-quick' if self.quick else ''}.json"
        )  # fmt: skip
        part = partial_path(out)
        calibration = None  # a resumed run keeps its policies' calibration (their choices stay the run's)
        if part.exists() and not self.fresh:
            calibration = read_json(part).get("policy_calibration")
        quick = {"configs": dict(QUICK_CONFIGS), "policies": dict(QUICK_POLICIES)} if self.quick else {}
        settings = Campaign3Settings(
            threads=threads, machine=machine, git_commit=env.get("git_commit"), prompts_sha256=None,
            quick=self.quick, new_tokens=self.new_tokens or (16 if self.quick else 128),
            repeats=self.repeats or (1 if self.quick else 5), seed=self.seed, llamacpp=self.llamacpp,
            v2_commit=V2_COMMIT if self.v2_engine else None, **quick,
        )  # fmt: skip
        built = build(settings, calibration=calibration, log=lambda line: print(line, file=sys.stderr))
        if self.quick:  # development prompts: a smoke run never touches the frozen set
            prompts, sha = evaluation_cells(built["tokenizer"], per_task=2), None
        else:
            prompts, sha = heldout_prompts(built["tokenizer"], PROMPTS)
        settings = dataclasses.replace(settings, prompts_sha256=sha)
        resumable(out, built["engines"], built["configs"], settings, fresh=self.fresh)  # before any timing
        target = built["engines"][0].model
        set_threads(threads)
        print("[campaign3] timing verify calls of N rows (v(N)) and the kernels' roofs", file=sys.stderr)
        header = {
            "kind": "campaign-v3",
            "command": self.command(),
            "environment": env,
            "machine": machine,
            "verify_curves": target_verify_curves(target, repeats=3 if self.quick else 15),
            "peaks": measure_peaks(threads),
            "bandwidth": measure_bandwidth(threads),
            "model_counts": model_counts(target),
            "draft_work": {c.drafter_name: draft_work(c.drafter) for c in built["configs"]},
            "drafts": built["drafts"],
            "left_out": built["left_out"],
            "v2_library": built["v2_library"],
            "policy_calibration": built["calibration"],
        }
        # campaign v2's runner and analyses (the cross-fit, its estimators, the tree summary)
        return c2.run_and_finish(
            built, prompts, out, settings, header, budget_s=self.budget_s, fresh=self.fresh
        )
