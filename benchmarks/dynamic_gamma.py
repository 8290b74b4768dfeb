"""Dynamic draft length (issue #12, item 3): adaptive policies against every fixed gamma, with intervals.

On the default target in the mode chosen for this machine (:func:`specdec.measure.modes.lean_model`),
greedy decoding of ``--new-tokens`` tokens (EOS suppressed, equal lengths) per prompt:

* plain decoding (the baseline of every speedup);
* prompt lookup with fixed gamma in ``--gammas`` and with transformers' heuristic schedule;
* the distilled draft ``--draft`` with fixed gammas, the heuristic schedule, and the
  confidence stop at each of ``--confidences`` (drafting up to the largest gamma).

Every configuration runs on every prompt in each pass, configurations in a fresh order per
prompt and pass (interleaved); the speedup of a configuration on a prompt is the median over
passes of plain time / its time, and the record holds per configuration the geometric mean over
prompts with a 95 % bootstrap interval (specdec.theory.intervals), mean drafts and tokens per round.

    python benchmarks/dynamic_gamma.py --threads 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec.engine.drafters import ModelDrafter, PromptLookupDrafter  # noqa: E402
from specdec.engine.models import load_target, set_threads  # noqa: E402
from specdec.measure.core import environment, write_result  # noqa: E402
from specdec.measure.device import device_slug  # noqa: E402
from specdec.measure.modes import lean_model  # noqa: E402
from specdec.measure.pairedrun import timed_generation  # noqa: E402
from specdec.theory.intervals import bootstrap_ci, geomean  # noqa: E402
from specdec.theory.policies import HeuristicGamma  # noqa: E402
from specdec.train.draftnets import load_draft, require_drafts  # noqa: E402
from specdec.train.workloads import evaluation_prompts  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mode", default="auto", help="lean mode, or auto (measured on this machine)")
    ap.add_argument("--prompts-per-task", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--gammas", default="1,2,3,4,6,8")
    ap.add_argument("--draft", default="distil-l1")
    ap.add_argument("--confidences", default="0.3,0.6")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    for name in ("threads", "prompts_per_task", "new_tokens", "repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    args.gammas = sorted({int(g) for g in args.gammas.split(",")})
    args.confidences = [float(c) for c in args.confidences.split(",")] if args.confidences else []
    if args.gammas[0] < 1 or any(not 0 <= c < 1 for c in args.confidences):
        ap.error("--gammas must be >= 1 and --confidences in [0, 1)")
    try:
        require_drafts([args.draft])
    except (ValueError, FileNotFoundError) as exc:
        ap.error(str(exc))
    return args


def configurations(args: argparse.Namespace, target: Any, draft_model: Any) -> dict[str, tuple[Any, Any]]:
    """name -> (drafter factory, gamma or policy factory); factories give fresh state per run."""
    top = max(args.gammas)
    out: dict[str, tuple[Any, Any]] = {}
    for g in args.gammas:
        out[f"lookup g={g}"] = (PromptLookupDrafter, lambda g=g: g)
    out["lookup heuristic"] = (
        PromptLookupDrafter,
        lambda: HeuristicGamma(start=min(5, top), max_gamma=2 * top),
    )
    for g in args.gammas:
        out[f"{args.draft} g={g}"] = (lambda: ModelDrafter(draft_model, target=target), lambda g=g: g)
    out[f"{args.draft} heuristic"] = (
        lambda: ModelDrafter(draft_model, target=target),
        lambda: HeuristicGamma(start=min(5, top), max_gamma=2 * top),
    )
    for c in args.confidences:
        out[f"{args.draft} confidence {c:g}"] = (
            lambda c=c: ModelDrafter(draft_model, target=target, confidence=c),
            lambda: top,
        )
    return out


def run(args: argparse.Namespace, target: Any, configs: dict, prompts: list[dict]) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    names = ["plain", *configs]
    for rep in range(args.repeats):
        for p in prompts:
            for i in rng.permutation(len(names)):
                name = names[i]
                make_drafter, make_gamma = configs.get(name, (lambda: None, lambda: 0))
                tokens, s, total = timed_generation(
                    target, make_drafter(), p["ids"], gamma=make_gamma(), new_tokens=args.new_tokens
                )
                dt = total - s.prefill_s
                rows.append(
                    {
                        "config": name,
                        "prompt": p["id"],
                        "task": p["task"],
                        "repeat": rep,
                        "decode_s": dt,
                        "tokens": len(tokens),
                        "rounds": s.rounds,
                        "mean_drafted": float(np.mean(s.drafted)) if s.drafted else 0.0,
                        "tokens_per_round": s.mean_tokens_per_round,
                    }
                )
        print(f"  pass {rep + 1}/{args.repeats} done", flush=True)
    return rows


def summarize(rows: list[dict], configs: list[str]) -> dict:
    prompts = sorted({r["prompt"] for r in rows})

    def med(config: str, prompt: str, key: str) -> float:
        return float(np.median([r[key] for r in rows if r["config"] == config and r["prompt"] == prompt]))

    plain = np.array([med("plain", p, "decode_s") for p in prompts])
    out = {}
    for c in configs:
        t = np.array([med(c, p, "decode_s") for p in prompts])
        est, lo, hi = bootstrap_ci(plain / t, geomean)
        tasks = {}
        for task in sorted({r["task"] for r in rows}):
            ids = [
                i for i, p in enumerate(prompts) if any(r["prompt"] == p and r["task"] == task for r in rows)
            ]
            tasks[task] = float(geomean((plain / t)[ids]))
        out[c] = {
            "speedup": [est, lo, hi],
            "per_task": tasks,
            "mean_drafted": float(np.mean([med(c, p, "mean_drafted") for p in prompts])),
            "tokens_per_round": float(np.mean([med(c, p, "tokens_per_round") for p in prompts])),
        }
        print(
            f"  {c:28s} {est:.2f} [{lo:.2f}, {hi:.2f}]  drafted/round {out[c]['mean_drafted']:.2f}",
            flush=True,
        )
    return {"prompts": prompts, "configs": out}


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    set_threads(args.threads)
    command = "python benchmarks/dynamic_gamma.py " + " ".join(sys.argv[1:] if argv is None else argv)
    base = load_target("float32")
    target, probe = lean_model(base.model, args.mode)
    draft_model = load_draft(args.draft, base.model)
    print(f"target: lean {target.mode}; draft {args.draft}; threads {args.threads}", flush=True)
    prompts = evaluation_prompts(base.tokenizer, args.prompts_per_task)
    env = environment(dtype=target.mode, device="cpu")
    configs = configurations(args, target, draft_model)
    t0 = time.time()
    rows = run(args, target, configs, prompts)
    summary = summarize(rows, list(configs))
    slug = device_slug(env["device_name"])
    out = (
        Path(args.out)
        if args.out
        else ROOT / "results" / "bench" / f"dynamic-gamma-{slug}-{args.threads}t.json"
    )
    record = {
        "kind": "dynamic-gamma",
        "command": command,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "mode": target.mode,
        "mode_probe": None if probe is None else {k: v for k, v in probe.items() if k not in ("cached",)},
        "rows": rows,
        "summary": summary,
        "wall_s": time.time() - t0,
    }
    path = write_result(out, record, env=env)
    print(f"-> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
    return path


if __name__ == "__main__":
    main()
