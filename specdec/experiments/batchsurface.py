"""Batch size on this CPU (issue #12, item 2; ``specdec run batch-surface``): the steps of the run.

The program :class:`BatchSurfaceRun` takes the options and names the record; this module runs its
steps on the record (:func:`run_steps`): ``surface`` (:func:`step_surface`: T(b, k) of the targets
and T(b, 1) of the drafts, :func:`specdec.measure.batchruns.measure_surface`), ``decoding``
(:func:`step_decoding`: batched speculative against batched plain decoding,
:func:`specdec.measure.batchruns.decode_units`) and ``analysis`` (:func:`step_analysis`: the
predicted gain per batch size at the measured alphas, beside the measured speedups). The record is
saved after every finished block and unit; a rerun with the same settings resumes it
(:func:`open_record`, :func:`specdec.measure.runner.open_partial`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from specdec.analysis import batchcost as bc
from specdec.experiments.options import Program, Refused, option
from specdec.measure import batchruns
from specdec.measure.core import write_result
from specdec.measure.runner import RunSettings, not_key, open_partial, run_cells
from specdec.theory.checks import check_int

__all__ = [
    "FULL",
    "NOTE",
    "QUICK",
    "STEPS",
    "BatchSurface",
    "BatchSurfaceRun",
    "choose_decode_mode",
    "describe",
    "load_models",
    "open_record",
    "progress_bar",
    "record_path",
    "run_steps",
    "save",
    "step_analysis",
    "step_decoding",
    "step_surface",
]


STEPS = ("surface", "decoding", "analysis")
#: The full run's grid and counts (what a run without ``quick`` does).
FULL = {
    "batches": (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
    "ks": (1, 2, 3, 4, 5, 6, 7, 8),
    "passes": 5,
    "decode_batches": (1, 2, 4, 8, 16),
    "units": 5,
    "new_tokens": 32,
    "boot": 2000,
}
#: A CI-sized run's (a value given explicitly wins).
QUICK = {
    "batches": (1, 2, 4),
    "ks": (1, 2, 4),
    "passes": 2,
    "decode_batches": (1, 2),
    "units": 2,
    "new_tokens": 8,
    "boot": 200,
}
#: What the record says of the machine it was measured on.
NOTE = (
    "Measured on a machine whose CPU cores other sessions shared at the same time: single timings "
    "are noisy. Passes interleave every cell, the tables use medians over passes, and the intervals "
    "(bootstrap over passes for T(b, k), over batches of prompts for decoding) show the noise."
)


@dataclass
class BatchSurface(RunSettings):
    """The design of a batch-surface run (:meth:`BatchSurfaceRun.settings` makes it from the options).

    A field left None takes the full run's value, or with ``quick`` the CI-sized one
    (:data:`FULL`, :data:`QUICK`). Checked here, before anything loads. :meth:`to_record` (every field
    but the ones that do not change what is measured: which steps this call runs, ``redo``, the
    decoding step's mode choice, the bootstrap draws, where the record goes, progress) is the record's
    ``settings`` and the key a record must hold to be resumed.
    """

    quick: bool = False
    tiny: bool = False
    threads: int = 1
    modes: tuple[str, ...] = ("float32", "bfloat16")
    draft: str = "distil-l1"
    context: int = 128
    gamma: int = 3
    batches: tuple[int, ...] | None = None
    ks: tuple[int, ...] | None = None
    passes: int | None = None
    decode_batches: tuple[int, ...] | None = None
    units: int | None = None
    new_tokens: int | None = None
    seed: int = 0
    steps: tuple[str, ...] = not_key(STEPS)
    decode_mode: str = not_key("auto")
    boot: int | None = not_key(None)
    out: str | None = not_key(None)
    fresh: bool = not_key(False)
    redo: str | None = not_key(None)
    redo_reason: str = not_key("")
    no_progress: bool = not_key(False)

    def __post_init__(self) -> None:
        grid = QUICK if self.quick else FULL
        for key in ("batches", "ks", "decode_batches"):
            value = getattr(self, key)
            setattr(self, key, tuple(grid[key]) if value is None else tuple(int(v) for v in value))
        for key in ("passes", "units", "new_tokens", "boot"):
            if getattr(self, key) is None:
                setattr(self, key, grid[key])
        self.steps, self.modes = tuple(self.steps), tuple(self.modes)
        if self.redo is not None and self.redo not in STEPS:
            raise ValueError(f"redo must name one of {', '.join(STEPS)}; got {self.redo!r}")
        if not self.steps or any(s not in STEPS for s in self.steps):
            raise ValueError(f"steps must name some of {', '.join(STEPS)}; got {self.steps}")
        if not self.modes or any(m not in ("float32", "bfloat16") for m in self.modes):
            raise ValueError(f"modes must name float32 and/or bfloat16; got {self.modes}")
        if self.decode_mode not in ("auto", *self.modes):
            raise ValueError(
                f"decode_mode must be auto or one of the modes given {self.modes}; got {self.decode_mode!r}"
            )
        for name in ("threads", "context", "gamma", "passes", "units", "new_tokens"):
            check_int(name, getattr(self, name), low=1)
        check_int("boot", self.boot, low=100)
        # narrower than check_seed's range: batchcost derives its blocks' seeds as seed * 10**6 + block
        check_int("seed", self.seed, low=0, high=2**32 - 1)
        if 1 not in self.ks or min(self.ks) < 1 or min(self.batches) < 1 or min(self.decode_batches) < 1:
            raise ValueError("ks must hold 1, and every k and batch size must be >= 1")
        if self.gamma + 1 > max(self.ks):
            raise ValueError(
                f"ks must reach gamma + 1 = {self.gamma + 1} (the verify call of the decoding step)"
            )


def progress_bar(enabled: bool) -> Callable[[Any, str], Any]:
    """A tqdm bar on stderr (off with --no-progress or when stderr is no terminal)."""

    def wrap(items: Any, desc: str) -> Any:
        items = list(items)
        if not enabled:
            return items
        from tqdm import tqdm

        return tqdm(items, desc=desc, total=len(items), file=sys.stderr, disable=None, mininterval=2)

    return wrap


# --------------------------------------------------------------------------- models and prompts
def load_models(s: BatchSurface) -> dict[str, Any]:
    """Per mode: the target, the draft, the tokenizer (None with --tiny) and the prompt pool."""
    import torch

    out: dict[str, Any] = {}
    if s.tiny:
        from specdec.engine import tinymodels as tm

        gen = torch.Generator().manual_seed(s.seed)
        lengths = [int(n) for n in torch.randint(3, 30, (8,), generator=gen)]
        pool = [torch.randint(0, tm.VOCAB, (n,), generator=gen).tolist() for n in lengths]
        for mode in s.modes:
            dtype = getattr(torch, mode)
            target = tm.tiny_llama(0).to(dtype)
            draft = tm.perturbed_copy(tm.tiny_llama(0), 0.05, 5).to(dtype)
            out[mode] = {"target": target, "draft": draft, "pool": pool, "name": "tiny_llama(0)"}
        return out
    from specdec.engine.builder import EngineSpec, open_engine
    from specdec.train.draftnets import load_draft
    from specdec.train.workloads import evaluation_prompts

    for mode in s.modes:  # transformers in each dtype, on the GPU when there is one, at every core
        loaded = open_engine(EngineSpec("hf", mode)).base
        draft = load_draft(s.draft, loaded.model)
        pool = [p["ids"] for p in evaluation_prompts(loaded.tokenizer, 12)]
        out[mode] = {"target": loaded.model, "draft": draft, "pool": pool, "name": loaded.name}
    return out


def describe(model: Any) -> dict[str, Any]:
    """What the record says about a model: layers, parameters, dtype, attention implementation."""
    return {
        "layers": int(model.config.num_hidden_layers),
        "params": int(sum(p.numel() for p in model.parameters())),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
    }


# --------------------------------------------------------------------------- the record
def save(path: Path, record: dict[str, Any], started: float) -> None:
    """Write the record atomically (a crash never leaves half a file), its time so far updated."""
    record["status"]["elapsed_s"] = record["status"].get("elapsed_before_s", 0.0) + time.monotonic() - started
    env = record.pop("environment")
    try:
        write_result(path, record, env=env)  # atomic (specdec.theory.recordio.write_record)
    finally:
        record["environment"] = env


def open_record(
    s: BatchSurface, path: Path, command: str, env: dict, machine: dict, note: str
) -> dict[str, Any]:
    """The record to fill: the one at ``path`` when it holds ``s.to_record()`` as its settings (resume,
    :func:`specdec.measure.runner.open_partial`; ``s.fresh`` starts over), else a new one."""
    import transformers

    record = open_partial(path, s, fresh=s.fresh, what="batch-surface record")
    if record is not None:
        if record.get("kind") != "batch-surface":
            raise Refused(f"{path} is not a batch-surface record: pass --fresh to start over, or --out")
        record["status"]["elapsed_before_s"] = record["status"].get("elapsed_s", 0.0)
        record["status"]["finished"] = False
        record["sessions"].append({"command": command, "environment": env})
        print(f"resuming {path.name}: steps done {record['status']['steps_done']}", flush=True)
        return record
    return {
        "kind": "batch-surface",
        "schema": 1,
        "command": command,
        "machine": machine,
        "engine": f"transformers {transformers.__version__}, eager forward, sdpa attention",
        "mode": None,
        "quick": bool(s.quick),
        "tiny": bool(s.tiny),
        "note": note,
        "settings": s.to_record(),
        "status": {"finished": False, "steps_done": [], "elapsed_s": 0.0},
        "sessions": [{"command": command, "environment": env}],
        "environment": env,
    }


def _keep(items: list, save_now: Callable[[], None]) -> Callable[[dict], None]:
    """A step's callback: keep a finished block or unit in ``items`` and save the record."""

    def keep(item: dict) -> None:
        items.append(item)
        save_now()

    return keep


# --------------------------------------------------------------------------- steps
def step_surface(
    s: BatchSurface, record: dict, models: dict, save_now: Callable[[], None], progress: Any
) -> None:
    """T(b, k) of every target and T(b, 1) of every draft, block by block (:func:`batchruns.measure_surface`),
    each finished block kept and saved."""
    section = record.setdefault("surface", {})
    section.update(
        context=s.context,
        batches=list(s.batches),
        passes=s.passes,
        timer="time.perf_counter around one forward call (every position's logits), cache cropped after",
        models={},
        ks={},
    )
    section.setdefault("blocks", [])
    nets, ks = {}, {}
    for mode, m in models.items():
        for role in ("target", "draft"):
            name = f"{role}-{mode}"
            nets[name] = m[role]
            ks[name] = list(s.ks) if role == "target" else [1]
            section["models"][name] = {"role": role, "mode": mode, **describe(m[role])}
            if role == "draft":
                section["models"][name]["name"] = s.draft if not s.tiny else "perturbed_copy(0.05)"
    section["ks"] = ks

    batchruns.measure_surface(
        nets,
        ks,
        s.batches,
        passes=s.passes,
        context=s.context,
        seed=s.seed,
        done=section["blocks"],
        on_block=_keep(section["blocks"], save_now),
        progress=progress,
    )
    section["cells"] = {name: bc.surface_cells(section["blocks"], name) for name in nets}


def choose_decode_mode(s: BatchSurface, record: dict) -> tuple[str, str]:
    """--decode-mode, or auto: the mode with the smaller sum of T(b, 1) over the decoding batches
    measured by the surface step; without one, bfloat16 when the CPU has BF16 instructions."""
    if s.decode_mode != "auto":
        return s.decode_mode, "given by --decode-mode"
    if "surface" in record and record["surface"].get("blocks") and len(s.modes) > 1:
        cost = {}
        for mode in s.modes:
            surf = bc.surface(record["surface"]["blocks"], f"target-{mode}")
            cost[mode] = sum(surf[(b, 1)] for b in s.decode_batches if (b, 1) in surf)
        best = min(cost, key=cost.get)
        return best, f"auto: the smaller sum of T(b, 1) over b in {list(s.decode_batches)} ({cost})"
    if len(s.modes) == 1:
        return s.modes[0], "auto: the only mode"
    bf16 = bool(record["machine"].get("bf16_instructions"))
    return (
        "bfloat16" if bf16 else "float32"
    ), "auto: BF16 instructions on this CPU" if bf16 else "auto: no BF16"


def step_decoding(
    s: BatchSurface, record: dict, models: dict, save_now: Callable[[], None], progress: Any
) -> None:
    """Batched speculative decoding against batched plain decoding, unit by unit
    (:func:`batchruns.decode_units`), each finished unit kept and saved."""
    from specdec.drafting.registry import build_drafter

    section = record.setdefault("decoding", {})
    mode, why = section.get("mode"), section.get("mode_rule")
    if mode is None:
        mode, why = choose_decode_mode(s, record)
    m = models[mode]
    draft_name = s.draft if not s.tiny else "tiny-draft"
    configs = {
        draft_name: {"drafter": m["draft"], "cut": "ragged"},
        "lookup": {"drafter": build_drafter("lookup"), "cut": "ragged"},
        "lookup, common cut": {"drafter": build_drafter("lookup"), "cut": "common"},
    }
    section.update(
        mode=mode,
        mode_rule=why,
        draft_config=draft_name,
        gamma=s.gamma,
        new_tokens=s.new_tokens,
        batches=list(s.decode_batches),
        units_per_batch=s.units,
        temperature=0.0,
        eos="not stopping: every row decodes new_tokens tokens",
        pool=f"{len(m['pool'])} prompts" + ("" if s.tiny else ": the book's evaluation prompts, 12 per task"),
        configs={
            name: {"cut": c["cut"], "drafter": type(c["drafter"]).__name__} for name, c in configs.items()
        },
        common_cut_alpha_from="lookup",
    )
    section.setdefault("units", [])
    print(f"decoding in {mode} ({why})", flush=True)

    batchruns.decode_units(
        m["target"],
        configs,
        m["pool"],
        s.decode_batches,
        units=s.units,
        new_tokens=s.new_tokens,
        gamma=s.gamma,
        seed=s.seed,
        done=section["units"],
        on_unit=_keep(section["units"], save_now),
        progress=progress,
    )
    section["summary"] = bc.summarize_decoding(section["units"])


def step_analysis(s: BatchSurface, record: dict) -> None:
    """Predictions from the surface at the alphas the decoding step measured (ragged configurations:
    a common cut re-drafts and re-examines drafts it accepted but cut, so its own count is biased)."""
    if "surface" not in record or "decoding" not in record:
        raise Refused("the analysis step needs the surface and decoding steps in the record")
    from specdec.theory.speedup import cost_coefficient, expected_tokens, walltime_speedup_measured

    blocks, dec = record["surface"]["blocks"], record["decoding"]
    ragged = [name for name, c in dec["configs"].items() if c["cut"] == "ragged"]
    alphas = {name: bc.pooled_alpha(dec["units"], name) for name in ragged}
    draft_cfg = dec["draft_config"]  # the draft model's configuration (the others draft by lookup)
    out: dict[str, Any] = {
        "alpha": alphas,
        "alpha_source": "accepted / examined drafts, pooled over the decoding units (ragged configurations)",
    }
    for mode in s.modes:
        per: dict[str, Any] = {}
        for name in ragged:
            draft = f"draft-{mode}" if name == draft_cfg else None
            per[name] = bc.gain_intervals(
                blocks, f"target-{mode}", alphas[name], draft=draft, n_boot=s.boot, seed=s.seed
            )
        per["c0 at the draft's alpha"] = bc.gain_intervals(
            blocks, f"target-{mode}", alphas[draft_cfg], n_boot=s.boot, seed=s.seed
        )
        out[mode] = per
    # the prediction at the decoding's gamma beside the measured speedup (decoding mode)
    mode = dec["mode"]
    surf = bc.surface(blocks, f"target-{mode}")
    draft_surf = bc.surface(blocks, f"draft-{mode}")
    side = {}
    for name, cfg in dec["configs"].items():
        # c(b) in the bare-forward unit: T_draft(b, 1) / T(b, 1), medians over passes
        c = (
            {b: cost_coefficient(draft_surf[(b, 1)], 1, 1, surf[(b, 1)]) for b, k in surf if k == 1}
            if name == draft_cfg
            else 0.0
        )
        rows = {}
        for b in dec["batches"]:
            measured = dec["summary"][str(b)][name]
            row = {"measured": measured["speedup"], "tokens_per_round": measured["tokens_per_round"]}
            if (b, s.gamma + 1) in surf:
                v = surf[(b, s.gamma + 1)] / surf[(b, 1)]
                c_b = c[b] if isinstance(c, dict) else c
                # a common cut keeps the round's smallest count: i.i.d. rows at alpha give Eq. (1) at alpha^b
                a = alphas[name] if cfg["cut"] == "ragged" else alphas[dec["common_cut_alpha_from"]] ** b
                row["predicted"] = float(walltime_speedup_measured(a, s.gamma, c_b, v))
                row["predicted_tokens_per_round"] = float(expected_tokens(a, s.gamma))
                row["c"], row["verify_cost"] = c_b, v
            rows[str(b)] = row
        side[name] = rows
    out["at_gamma"] = {"gamma": s.gamma, "mode": mode, "configs": side}
    record["prediction"] = out
    record["mode"] = mode


def run_steps(s: BatchSurface, record: dict[str, Any], path: Path) -> Path:
    """Load the models, then run each of ``s.steps`` not yet done in ``record`` (the analysis always)
    through the one runner (:func:`specdec.measure.runner.run_cells`: a step is a cell, its seconds and
    the machine's load recorded), saving after each block, unit and step; ``s.redo`` drops its step's
    data first. Returns ``path``."""
    done = record["status"]["steps_done"]
    if s.redo is not None and s.redo in done:
        record.pop(s.redo, None)
        done.remove(s.redo)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record["status"].setdefault("redone", []).append(
            {"step": s.redo, "reason": s.redo_reason, "utc": when}
        )
    if "analysis" in done and "analysis" in s.steps:
        done.remove("analysis")  # asked for, the analysis runs again, on the data so far
    started = time.monotonic()
    progress = progress_bar(not s.no_progress)

    def save_now() -> None:
        save(path, record, started)

    print(f"record: {path}; loading the models...", flush=True)
    models = load_models(s)
    run = {
        "surface": lambda: step_surface(s, record, models, save_now, progress),
        "decoding": lambda: step_decoding(s, record, models, save_now, progress),
        "analysis": lambda: step_analysis(s, record),
    }
    for name in s.steps:
        if name in done:
            print(f"[{name}] done in the record; skipped", flush=True)
    run_cells(
        record,
        [(name, run[name]) for name in s.steps],
        path,
        threads=s.threads,
        done=done,
        after=lambda name, seconds: print(f"[{name}] done in {seconds:.0f} s", flush=True),
        save=save_now,
    )
    record["status"]["finished"] = all(step in done for step in STEPS)
    save_now()
    return path


def record_path(s: BatchSurface, slug: str) -> Path:
    """``s.out``, or ``results/bench/batch-surface-<cpu>-<threads>t[-quick|-tiny].json``."""
    from specdec.measure.benchargs import ROOT

    if s.out:
        return Path(s.out)
    tag = "-tiny" if s.tiny else ("-quick" if s.quick else "")
    return ROOT / "results" / "bench" / f"batch-surface-{slug}-{s.threads}t{tag}.json"


# --------------------------------------------------------------------------- the program
@dataclass(frozen=True)
class BatchSurfaceRun(Program):
    """Batch size on this CPU (issue #12, item 2): the cost surface T(b, k), its gain, batched decoding.

    On the default target (SmolLM2-135M-Instruct, transformers' eager forward, sdpa attention), one
    thread by default, as named steps (``--steps``; default all, in this order):

    1. ``surface``   -- T(b, k), one forward over k new tokens for each of b sequences after a
                        cached context of ``--context`` tokens, for b in ``--batches`` (1..64) and k in
                        1..8, for the target in each of ``--modes`` (float32, bfloat16), and T(b, 1) of
                        the draft ``--draft`` in each mode (its cost c(b)); in ``--passes`` interleaved
                        passes (specdec.measure.batchruns.measure_surface);
    2. ``decoding``  -- batched speculative decoding (specdec.engine.batched, gamma ``--gamma``) against
                        batched plain decoding for b in ``--decode-batches`` (1..16), ``--units``
                        batches of prompts per b drawn from the book's 36 evaluation prompts,
                        configurations interleaved: the draft model and prompt lookup (ragged cut),
                        and prompt lookup with the common cut; greedy, ``--new-tokens`` per row;
    3. ``analysis``  -- per mode: T(b, k)/T(b, 1) with intervals, the predicted gain per b (best gamma)
                        at each configuration's measured alpha, with the draft's c(b) and with c = 0,
                        bootstrap intervals over passes, the batch at which the gain vanishes, and the
                        prediction at ``--gamma`` beside the measured batched speedup.

    The record (``results/bench/batch-surface-<cpu>-<threads>t.json``; ``-quick`` for ``--quick``) is
    saved after every finished block and unit; rerunning the same command resumes from it (``--fresh``
    starts over; other settings are refused). ``--quick`` is a CI-sized run (a small grid, two
    passes, two units); ``--tiny`` swaps in the test suite's tiny random models (tests only).

        specdec run batch-surface            # the full run, about 20 minutes on 2 cores
        specdec run batch-surface --quick    # about a minute
    """

    name: ClassVar[str] = "batch-surface"

    steps: tuple[str, ...] = option(STEPS, f"the steps to run, any of {', '.join(STEPS)}")
    quick: bool = option(False, "a CI-sized run (small grid, 2 passes, 2 units)")
    tiny: bool = option(False, "the test suite's tiny random models (tests)")
    threads: int = option(1, "threads of the forward calls")
    modes: tuple[str, ...] = option(("float32", "bfloat16"), "target dtypes of the surface")
    decode_mode: str = option("auto", "dtype of the decoding step; auto: the mode with the cheaper T(b, 1)")
    draft: str = option("distil-l1", "the distilled draft (specdec/data/drafts)")
    context: int = option(128, "cached tokens per sequence in the surface")
    gamma: int = option(3, "drafts per round of the decoding step")
    batches: tuple[int, ...] | None = option(
        None, f"surface batch sizes (default {','.join(map(str, FULL['batches']))})"
    )
    ks: tuple[int, ...] | None = option(None, "tokens per sequence (default 1..8)")
    passes: int | None = option(None, f"passes over the surface (default {FULL['passes']})")
    decode_batches: tuple[int, ...] | None = option(
        None, f"decoding batch sizes (default {','.join(map(str, FULL['decode_batches']))})"
    )
    units: int | None = option(None, f"batches of prompts per decoding batch size (default {FULL['units']})")
    new_tokens: int | None = option(None, f"new tokens per row (default {FULL['new_tokens']})")
    boot: int | None = option(None, f"bootstrap draws of the gain intervals (default {FULL['boot']})")
    seed: int = option(0, "the seed of the passes' order and the prompt batches")
    out: str | None = option(None, "the record's path")
    fresh: bool = option(False, "start over instead of resuming the record", once=True)
    redo: str | None = option(
        None, "a step to measure again in a resumed record (its data dropped)", once=True
    )
    redo_reason: str = option("", "why --redo: kept in the record's status", once=True)
    progress: bool = option(True, "draw progress bars")

    def check(self) -> None:
        self.settings()  # the settings check themselves

    def settings(self) -> BatchSurface:
        """The run's design (the record's ``settings`` and resume key), the grid filled in."""
        given = self.options()
        given["no_progress"] = not given.pop("progress")
        return BatchSurface(**given)

    def run(self) -> int:
        from specdec.engine.machine import cpu_identity
        from specdec.engine.models import set_threads
        from specdec.measure.benchargs import report
        from specdec.measure.core import environment
        from specdec.measure.device import device_slug

        s = self.settings()
        set_threads(s.threads)
        machine = cpu_identity()
        env = environment(dtype=",".join(s.modes), device="cpu")
        path = record_path(s, device_slug(env["device_name"]))
        path.parent.mkdir(parents=True, exist_ok=True)
        record = open_record(s, path, self.command(), env, machine, NOTE)
        run_steps(s, record, path)
        report(path)
        return 0
