"""Batch size on this CPU (issue #12, item 2): the cost surface T(b, k), its predicted gain, batched decoding.

On the default target (SmolLM2-135M-Instruct, transformers' eager forward, sdpa attention), one
thread by default, as named steps (``--steps``; default all, in this order):

1. ``surface``   -- T(b, k), one forward over k new tokens for each of b sequences after a
                    cached context of ``--context`` tokens, for b in ``--batches`` (1..64) and k in
                    1..8, for the target in each of ``--modes`` (float32, bfloat16), and T(b, 1) of
                    the draft ``--draft`` in each mode (its cost c(b)); in ``--passes`` interleaved
                    passes (specdec.analysis.batchcost.measure_surface);
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

    python benchmarks/batch_surface.py            # the full run, about 20 minutes on 2 cores
    python benchmarks/batch_surface.py --quick    # about a minute
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.analysis import batchcost as bc  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("surface", "decoding", "analysis")
FULL = {
    "batches": (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
    "ks": (1, 2, 3, 4, 5, 6, 7, 8),
    "passes": 5,
    "decode_batches": (1, 2, 4, 8, 16),
    "units": 5,
    "new_tokens": 32,
    "boot": 2000,
}
QUICK = {
    "batches": (1, 2, 4),
    "ks": (1, 2, 4),
    "passes": 2,
    "decode_batches": (1, 2),
    "units": 2,
    "new_tokens": 8,
    "boot": 200,
}
NOTE = (
    "Measured on a machine whose CPU cores other sessions shared at the same time: single timings "
    "are noisy. Passes interleave every cell, the tables use medians over passes, and the intervals "
    "(bootstrap over passes for T(b, k), over batches of prompts for decoding) show the noise."
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, any of {', '.join(STEPS)}")
    ap.add_argument("--quick", action="store_true", help="a CI-sized run (small grid, 2 passes, 2 units)")
    ap.add_argument("--tiny", action="store_true", help="the test suite's tiny random models (tests)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--modes", default="float32,bfloat16", help="target dtypes of the surface")
    ap.add_argument("--decode-mode", default="auto", help="dtype of the decoding step; auto: see --help text")
    ap.add_argument("--draft", default="distil-l1", help="the distilled draft (specdec/data/drafts)")
    ap.add_argument("--context", type=int, default=128, help="cached tokens per sequence in the surface")
    ap.add_argument("--gamma", type=int, default=3)
    ap.add_argument("--batches", default=None, help="surface batch sizes (default: 1..64, 12 values)")
    ap.add_argument("--ks", default=None, help="tokens per sequence (default: 1..8)")
    ap.add_argument("--passes", type=int, default=None)
    ap.add_argument("--decode-batches", default=None, help="decoding batch sizes (default: 1, 2, 4, 8, 16)")
    ap.add_argument("--units", type=int, default=None, help="batches of prompts per decoding batch size")
    ap.add_argument("--new-tokens", type=int, default=None)
    ap.add_argument("--boot", type=int, default=None, help="bootstrap draws of the gain intervals")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="the record's path")
    ap.add_argument("--fresh", action="store_true", help="start over instead of resuming the record")
    ap.add_argument(
        "--redo", default=None, help="a step to measure again in a resumed record (its data dropped)"
    )
    ap.add_argument("--redo-reason", default="", help="why --redo: kept in the record's status")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    grid = QUICK if args.quick else FULL
    for key in ("batches", "ks", "decode_batches"):
        value = getattr(args, key)
        setattr(args, key, tuple(grid[key]) if value is None else tuple(int(v) for v in value.split(",")))
    for key in ("passes", "units", "new_tokens", "boot"):
        if getattr(args, key) is None:
            setattr(args, key, grid[key])
    args.steps = tuple(s.strip() for s in args.steps.split(",") if s.strip())
    args.modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if args.redo is not None and args.redo not in STEPS:
        ap.error(f"--redo must name one of {', '.join(STEPS)}; got {args.redo!r}")
    if not args.steps or any(s not in STEPS for s in args.steps):
        ap.error(f"--steps must name some of {', '.join(STEPS)}; got {args.steps}")
    if not args.modes or any(m not in ("float32", "bfloat16") for m in args.modes):
        ap.error(f"--modes must name float32 and/or bfloat16; got {args.modes}")
    if args.decode_mode not in ("auto", *args.modes):
        ap.error(f"--decode-mode must be auto or one of --modes {args.modes}; got {args.decode_mode!r}")
    for key in ("threads", "context", "gamma", "passes", "units", "new_tokens"):
        if getattr(args, key) < 1:
            ap.error(f"--{key.replace('_', '-')} must be >= 1")
    if args.boot < 100:
        ap.error("--boot must be >= 100")
    if 1 not in args.ks or min(args.ks) < 1 or min(args.batches) < 1 or min(args.decode_batches) < 1:
        ap.error("--ks must hold 1, and every k and batch size must be >= 1")
    if args.gamma + 1 > max(args.ks):
        ap.error(f"--ks must reach gamma + 1 = {args.gamma + 1} (the verify call of the decoding step)")
    return args


def progress_bar(enabled: bool):
    """A tqdm bar on stderr (off with --no-progress or when stderr is no terminal)."""

    def wrap(items: Any, desc: str) -> Any:
        items = list(items)
        if not enabled:
            return items
        from tqdm import tqdm

        return tqdm(items, desc=desc, total=len(items), file=sys.stderr, disable=None, mininterval=2)

    return wrap


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """What a resumed record must share with this command."""
    keys = ("quick", "tiny", "threads", "modes", "draft", "context", "gamma", "batches", "ks", "passes")
    keys += ("decode_batches", "units", "new_tokens", "seed")
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items() if k in keys}


# --------------------------------------------------------------------------- models and prompts
def load_models(args: argparse.Namespace) -> dict[str, Any]:
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
    from specdec.engine.models import load_target
    from specdec.train.draftnets import load_draft
    from specdec.train.workloads import evaluation_prompts

    for mode in args.modes:
        loaded = load_target(mode, quiet=True)
        draft = load_draft(args.draft, loaded.model)
        pool = [p["ids"] for p in evaluation_prompts(loaded.tokenizer, 12)]
        out[mode] = {"target": loaded.model, "draft": draft, "pool": pool, "name": loaded.name}
    return out


def describe(model: Any) -> dict[str, Any]:
    return {
        "layers": int(model.config.num_hidden_layers),
        "params": int(sum(p.numel() for p in model.parameters())),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
    }


# --------------------------------------------------------------------------- the record
def record_path(args: argparse.Namespace, slug: str) -> Path:
    if args.out:
        return Path(args.out)
    tag = "-tiny" if args.tiny else ("-quick" if args.quick else "")
    return ROOT / "results" / "bench" / f"batch-surface-{slug}-{args.threads}t{tag}.json"


def save(path: Path, record: dict[str, Any], started: float) -> None:
    """Write the record atomically (a crash never leaves half a file)."""
    from specdec.measure.core import write_result

    record["status"]["elapsed_s"] = record["status"].get("elapsed_before_s", 0.0) + time.monotonic() - started
    env = record.pop("environment")
    try:
        write_result(path, record, env=env)  # atomic (specdec.measure.core.write_record)
    finally:
        record["environment"] = env


def open_record(
    args: argparse.Namespace, path: Path, command: str, env: dict, machine: dict
) -> dict[str, Any]:
    """The record to fill: the one at ``path`` when it was made with the same settings (resume)."""
    import transformers

    settings = settings_of(args)
    if path.exists() and not args.fresh:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("kind") != "batch-surface" or record.get("settings") != settings:
            raise SystemExit(
                f"{path} was made with other settings ({record.get('settings')}); "
                "pass --fresh to start over, or --out to write elsewhere"
            )
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
        "note": NOTE,
        "settings": settings,
        "status": {"finished": False, "steps_done": [], "elapsed_s": 0.0},
        "sessions": [{"command": command, "environment": env}],
        "environment": env,
    }


# --------------------------------------------------------------------------- steps
def step_surface(args, record, models, save_now, progress) -> None:
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

    def keep(block: dict) -> None:
        section["blocks"].append(block)
        save_now()

    bc.measure_surface(
        nets,
        ks,
        args.batches,
        passes=args.passes,
        context=args.context,
        seed=args.seed,
        done=section["blocks"],
        on_block=keep,
        progress=progress,
    )
    section["cells"] = {name: bc.surface_cells(section["blocks"], name) for name in nets}


def choose_decode_mode(args, record) -> tuple[str, str]:
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


def step_decoding(args, record, models, save_now, progress) -> None:
    from specdec.engine.drafters import PromptLookupDrafter

    section = record.setdefault("decoding", {})
    mode, why = section.get("mode"), section.get("mode_rule")
    if mode is None:
        mode, why = choose_decode_mode(args, record)
    m = models[mode]
    draft_name = args.draft if not args.tiny else "tiny-draft"
    configs = {
        draft_name: {"drafter": m["draft"], "cut": "ragged"},
        "lookup": {"drafter": PromptLookupDrafter(), "cut": "ragged"},
        "lookup, common cut": {"drafter": PromptLookupDrafter(), "cut": "common"},
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

    def keep(unit: dict) -> None:
        section["units"].append(unit)
        save_now()

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
        on_unit=keep,
        progress=progress,
    )
    section["summary"] = bc.summarize_decoding(section["units"])


def step_analysis(args, record) -> None:
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


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    from specdec.engine.machine import cpu_identity
    from specdec.engine.models import set_threads
    from specdec.measure.core import environment
    from specdec.measure.device import device_slug

    set_threads(args.threads)
    command = "python benchmarks/batch_surface.py " + " ".join(sys.argv[1:] if argv is None else argv)
    machine = cpu_identity()
    env = environment(dtype=",".join(args.modes), device="cpu")
    path = record_path(args, device_slug(env["device_name"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    record = open_record(args, path, command.strip(), env, machine)
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
    for name in args.steps:
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
    record["status"]["finished"] = all(s in record["status"]["steps_done"] for s in STEPS)
    save_now()
    print(f"-> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
    return path


if __name__ == "__main__":
    main()
