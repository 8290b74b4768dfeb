"""Batch size on this CPU (issue #12, item 2; ``benchmarks/batch_surface.py``): the steps of the run.

The script parses the arguments and names the record; this module runs its steps on the record
(:func:`run_steps`): ``surface`` (:func:`step_surface`: T(b, k) of the targets and T(b, 1) of the
drafts, :func:`specdec.analysis.batchcost.measure_surface`), ``decoding`` (:func:`step_decoding`:
batched speculative against batched plain decoding, :func:`specdec.analysis.batchcost.decode_units`)
and ``analysis`` (:func:`step_analysis`: the predicted gain per batch size at the measured alphas,
beside the measured speedups). The record is saved after every finished block and unit; a rerun
with the same settings resumes it (:func:`open_record`, :func:`specdec.measure.cellrun.open_partial`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specdec.analysis import batchcost as bc
from specdec.measure.cellrun import as_stored, open_partial
from specdec.measure.core import write_result

__all__ = [
    "choose_decode_mode",
    "describe",
    "load_models",
    "open_record",
    "progress_bar",
    "run_steps",
    "save",
    "step_analysis",
    "step_decoding",
    "step_surface",
]


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
def load_models(args: Any) -> dict[str, Any]:
    """Per mode: the target, the draft, the tokenizer (None with --tiny) and the prompt pool."""
    import torch

    out: dict[str, Any] = {}
    if args.tiny:
        from specdec.engine import tinymodels as tm

        gen = torch.Generator().manual_seed(args.seed)
        lengths = [int(n) for n in torch.randint(3, 30, (8,), generator=gen)]
        pool = [torch.randint(0, tm.VOCAB, (n,), generator=gen).tolist() for n in lengths]
        for mode in args.modes:
            dtype = getattr(torch, mode)
            target = tm.tiny_llama(0).to(dtype)
            draft = tm.perturbed_copy(tm.tiny_llama(0), 0.05, 5).to(dtype)
            out[mode] = {"target": target, "draft": draft, "pool": pool, "name": "tiny_llama(0)"}
        return out
    from specdec.engine.builder import EngineSpec, open_engine
    from specdec.train.draftnets import load_draft
    from specdec.train.workloads import evaluation_prompts

    for mode in args.modes:  # transformers in each dtype, on the GPU when there is one, at every core
        loaded = open_engine(EngineSpec("hf", mode)).base
        draft = load_draft(args.draft, loaded.model)
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
    args: Any, settings: dict[str, Any], path: Path, command: str, env: dict, machine: dict, note: str
) -> dict[str, Any]:
    """The record to fill: the one at ``path`` when it was made with the same ``settings`` (resume,
    :func:`specdec.measure.cellrun.open_partial`), else a new one (``args``: the script's settings)."""
    import transformers

    settings = as_stored(settings)
    record = open_partial(path, settings, fresh=args.fresh, what="batch-surface record")
    if record is not None:
        if record.get("kind") != "batch-surface":
            raise SystemExit(f"{path} is not a batch-surface record: pass --fresh to start over, or --out")
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
        "quick": bool(args.quick),
        "tiny": bool(args.tiny),
        "note": note,
        "settings": settings,
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
def step_surface(args: Any, record: dict, models: dict, save_now: Callable[[], None], progress: Any) -> None:
    """T(b, k) of every target and T(b, 1) of every draft, block by block (:func:`bc.measure_surface`),
    each finished block kept and saved."""
    section = record.setdefault("surface", {})
    section.update(
        context=args.context,
        batches=list(args.batches),
        passes=args.passes,
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
            ks[name] = list(args.ks) if role == "target" else [1]
            section["models"][name] = {"role": role, "mode": mode, **describe(m[role])}
            if role == "draft":
                section["models"][name]["name"] = args.draft if not args.tiny else "perturbed_copy(0.05)"
    section["ks"] = ks

    bc.measure_surface(
        nets,
        ks,
        args.batches,
        passes=args.passes,
        context=args.context,
        seed=args.seed,
        done=section["blocks"],
        on_block=_keep(section["blocks"], save_now),
        progress=progress,
    )
    section["cells"] = {name: bc.surface_cells(section["blocks"], name) for name in nets}


def choose_decode_mode(args: Any, record: dict) -> tuple[str, str]:
    """--decode-mode, or auto: the mode with the smaller sum of T(b, 1) over the decoding batches
    measured by the surface step; without one, bfloat16 when the CPU has BF16 instructions."""
    if args.decode_mode != "auto":
        return args.decode_mode, "given by --decode-mode"
    if "surface" in record and record["surface"].get("blocks") and len(args.modes) > 1:
        cost = {}
        for mode in args.modes:
            surf = bc.surface(record["surface"]["blocks"], f"target-{mode}")
            cost[mode] = sum(surf[(b, 1)] for b in args.decode_batches if (b, 1) in surf)
        best = min(cost, key=cost.get)
        return best, f"auto: the smaller sum of T(b, 1) over b in {list(args.decode_batches)} ({cost})"
    if len(args.modes) == 1:
        return args.modes[0], "auto: the only mode"
    bf16 = bool(record["machine"].get("bf16_instructions"))
    return (
        "bfloat16" if bf16 else "float32"
    ), "auto: BF16 instructions on this CPU" if bf16 else "auto: no BF16"


def step_decoding(args: Any, record: dict, models: dict, save_now: Callable[[], None], progress: Any) -> None:
    """Batched speculative decoding against batched plain decoding, unit by unit
    (:func:`bc.decode_units`), each finished unit kept and saved."""
    from specdec.drafting.registry import build_drafter

    section = record.setdefault("decoding", {})
    mode, why = section.get("mode"), section.get("mode_rule")
    if mode is None:
        mode, why = choose_decode_mode(args, record)
    m = models[mode]
    draft_name = args.draft if not args.tiny else "tiny-draft"
    configs = {
        draft_name: {"drafter": m["draft"], "cut": "ragged"},
        "lookup": {"drafter": build_drafter("lookup"), "cut": "ragged"},
        "lookup, common cut": {"drafter": build_drafter("lookup"), "cut": "common"},
    }
    section.update(
        mode=mode,
        mode_rule=why,
        draft_config=draft_name,
        gamma=args.gamma,
        new_tokens=args.new_tokens,
        batches=list(args.decode_batches),
        units_per_batch=args.units,
        temperature=0.0,
        eos="not stopping: every row decodes new_tokens tokens",
        pool=f"{len(m['pool'])} prompts"
        + ("" if args.tiny else ": the book's evaluation prompts, 12 per task"),
        configs={
            name: {"cut": c["cut"], "drafter": type(c["drafter"]).__name__} for name, c in configs.items()
        },
        common_cut_alpha_from="lookup",
    )
    section.setdefault("units", [])
    print(f"decoding in {mode} ({why})", flush=True)

    bc.decode_units(
        m["target"],
        configs,
        m["pool"],
        args.decode_batches,
        units=args.units,
        new_tokens=args.new_tokens,
        gamma=args.gamma,
        seed=args.seed,
        done=section["units"],
        on_unit=_keep(section["units"], save_now),
        progress=progress,
    )
    section["summary"] = bc.summarize_decoding(section["units"])


def step_analysis(args: Any, record: dict) -> None:
    """Predictions from the surface at the alphas the decoding step measured (ragged configurations:
    a common cut re-drafts and re-examines drafts it accepted but cut, so its own count is biased)."""
    if "surface" not in record or "decoding" not in record:
        raise SystemExit("the analysis step needs the surface and decoding steps in the record")
    from specdec.theory.speedup import expected_tokens, walltime_speedup_measured

    blocks, dec = record["surface"]["blocks"], record["decoding"]
    ragged = [name for name, c in dec["configs"].items() if c["cut"] == "ragged"]
    alphas = {name: bc.pooled_alpha(dec["units"], name) for name in ragged}
    draft_cfg = dec["draft_config"]  # the draft model's configuration (the others draft by lookup)
    out: dict[str, Any] = {
        "alpha": alphas,
        "alpha_source": "accepted / examined drafts, pooled over the decoding units (ragged configurations)",
    }
    for mode in args.modes:
        per: dict[str, Any] = {}
        for name in ragged:
            draft = f"draft-{mode}" if name == draft_cfg else None
            per[name] = bc.gain_intervals(
                blocks, f"target-{mode}", alphas[name], draft=draft, n_boot=args.boot, seed=args.seed
            )
        per["c0 at the draft's alpha"] = bc.gain_intervals(
            blocks, f"target-{mode}", alphas[draft_cfg], n_boot=args.boot, seed=args.seed
        )
        out[mode] = per
    # the prediction at the decoding's gamma beside the measured speedup (decoding mode)
    mode = dec["mode"]
    surf = bc.surface(blocks, f"target-{mode}")
    draft_surf = bc.surface(blocks, f"draft-{mode}")
    side = {}
    for name, cfg in dec["configs"].items():
        c = {b: draft_surf[(b, 1)] / surf[(b, 1)] for b, k in surf if k == 1} if name == draft_cfg else 0.0
        rows = {}
        for b in dec["batches"]:
            measured = dec["summary"][str(b)][name]
            row = {"measured": measured["speedup"], "tokens_per_round": measured["tokens_per_round"]}
            if (b, args.gamma + 1) in surf:
                v = surf[(b, args.gamma + 1)] / surf[(b, 1)]
                c_b = c[b] if isinstance(c, dict) else c
                # a common cut keeps the round's smallest count: i.i.d. rows at alpha give Eq. (1) at alpha^b
                a = alphas[name] if cfg["cut"] == "ragged" else alphas[dec["common_cut_alpha_from"]] ** b
                row["predicted"] = float(walltime_speedup_measured(a, args.gamma, c_b, v))
                row["predicted_tokens_per_round"] = float(expected_tokens(a, args.gamma))
                row["c"], row["verify_cost"] = c_b, v
            rows[str(b)] = row
        side[name] = rows
    out["at_gamma"] = {"gamma": args.gamma, "mode": mode, "configs": side}
    record["prediction"] = out
    record["mode"] = mode


def run_steps(
    args: Any, record: dict[str, Any], path: Path, steps: Sequence[str], all_steps: Sequence[str]
) -> Path:
    """Load the models, then run each of ``steps`` not yet done in ``record`` (the analysis always),
    saving after each block, unit and step; ``--redo`` drops its step's data first. Returns ``path``."""
    if args.redo is not None and args.redo in record["status"]["steps_done"]:
        record.pop(args.redo, None)
        record["status"]["steps_done"].remove(args.redo)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record["status"].setdefault("redone", []).append(
            {"step": args.redo, "reason": args.redo_reason, "utc": when}
        )
    started = time.monotonic()
    progress = progress_bar(not args.no_progress)

    def save_now() -> None:
        save(path, record, started)

    print(f"record: {path}; loading the models...", flush=True)
    models = load_models(args)
    for name in steps:
        if name in record["status"]["steps_done"] and name != "analysis":
            print(f"[{name}] done in the record; skipped", flush=True)
            continue
        t0 = time.monotonic()
        print(f"[{name}] start", flush=True)
        if name == "surface":
            step_surface(args, record, models, save_now, progress)
        elif name == "decoding":
            step_decoding(args, record, models, save_now, progress)
        else:
            step_analysis(args, record)
        if name not in record["status"]["steps_done"]:
            record["status"]["steps_done"].append(name)
        save_now()
        print(f"[{name}] done in {time.monotonic() - t0:.0f} s", flush=True)
    record["status"]["finished"] = all(s in record["status"]["steps_done"] for s in all_steps)
    save_now()
    return path
