"""Issue #22's campaign: speculative decoding against the fastest plain decoder, gamma chosen blind.

    python benchmarks/campaign.py --quick              # a smoke run (minutes); prints the full run's estimate
    python benchmarks/campaign.py --budget-s 9000      # the full run, stopped cleanly after 150 minutes
    python benchmarks/campaign.py --budget-s 9000      # the same command again resumes it
    python benchmarks/campaign.py --reanalyse results/campaign/<record>.json   # the analysis, anew

On one machine, in one interleaved run, the same held-out prompts (--prompts per task, the three
tasks, temperatures 0 and 1) through every plain decoder (the lean engine in its chosen mode at 1
thread and at every usable core, llama.cpp when installed, transformers float32) and every
speculative configuration on the lean engines (prompt lookup, each distilled draft, early exit,
the heuristic policy on lookup and the drafts, each at every gamma of --gammas; lookup on
llama.cpp). The runner is :mod:`specdec.experiments.campaign`, the analysis
:mod:`specdec.analysis.crossfit` (gamma and
the fastest plain decoder chosen on one half of the prompts and reported on the other, then
swapped; bootstrap intervals over prompts; verdicts from intervals only).

The record ``results/campaign/<cpu>-<threads>t[-quick].json`` holds the command, settings, the
machine identity, the git commit and dirty flag, every engine's engine/mode/threads, every run's
raw timings and token counts, the calibration and the estimate, and the cross-fit result. It is
written to ``.partial.json`` after every finished cell; rerunning the same command resumes it
(``--fresh`` discards it); ``--budget-s`` stops after the cell that exhausts the budget.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec.experiments import campaign as cp  # noqa: E402
from specdec.theory.checks import check_float, check_int, check_ints  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"a smoke run: {cp.QUICK} (overrides those options)")
    ap.add_argument(
        "--prompts", type=int, default=cp.FULL["prompts"], help="held-out prompts per task (>= 2)"
    )
    ap.add_argument(
        "--new-tokens", type=int, default=cp.FULL["new_tokens"], help="new tokens of every generation"
    )
    ap.add_argument("--repeats", type=int, default=cp.FULL["repeats"], help="repetitions per cell")
    ap.add_argument("--gammas", default=",".join(map(str, cp.FULL["gammas"])), help="the gamma grid")
    ap.add_argument(
        "--early-exit", default=",".join(map(str, cp.FULL["early_exit"])), help="early-exit layers"
    )
    ap.add_argument(
        "--drafts", default=None, help="comma-separated distilled drafts (default: every saved one)"
    )
    ap.add_argument("--no-adaptive", action="store_true", help="leave out the heuristic policy")
    ap.add_argument("--mode", default="auto", help="the lean mode (auto: the probe's choice)")
    ap.add_argument("--threads", default=None, help="thread counts of the engines (default: 1 and all cores)")
    ap.add_argument(
        "--llamacpp-gguf",
        default=None,
        help="GGUF for llama.cpp (default: Q4_0 requantized from the shipped Q4_1, its best CPU format)",
    )
    ap.add_argument("--no-llamacpp", action="store_true", help="leave llama.cpp out")
    ap.add_argument("--no-hf", action="store_true", help="leave transformers out")
    ap.add_argument(
        "--budget-s", type=float, default=None, help="stop after the cell that exhausts this budget"
    )
    ap.add_argument("--seed", type=int, default=0, help="the sampling seeds start here (cell i: seed + i)")
    ap.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples")
    ap.add_argument("--fresh", action="store_true", help="discard a partial record instead of resuming it")
    ap.add_argument("--no-estimate", action="store_true", help="skip the calibration and estimate")
    ap.add_argument(
        "--out", default=None, help="the record's path (default: results/campaign/<cpu>-<n>t.json)"
    )
    ap.add_argument(
        "--reanalyse",
        metavar="RECORD",
        default=None,
        help="recompute a complete record's cross-fit analysis from its stored runs and rewrite it",
    )
    ap.add_argument(
        "--reopen",
        nargs=3,
        metavar=("RECORD", "TEMPERATURE", "WHY"),
        default=None,
        help="discard a complete record's cells at TEMPERATURE (saying WHY) so that its own command times "
        "them again",
    )
    args = ap.parse_args(argv)
    if args.quick:
        for key, value in cp.QUICK.items():
            setattr(args, key, ",".join(map(str, value)) if isinstance(value, tuple) else value)
    try:
        from specdec.train.workloads import evaluation_count

        check_int(
            "--prompts", args.prompts, low=2, high=evaluation_count(), note="two halves; what a task holds"
        )
        check_int("--new-tokens", args.new_tokens, low=2)
        check_int("--repeats", args.repeats, low=1)
        check_int("--n-boot", args.n_boot, low=100)
        args.gamma_list = check_ints(
            "--gammas", [int(g) for g in args.gammas.split(",") if g], low=1, distinct=True
        )
        args.ee_list = tuple(int(n) for n in args.early_exit.split(",") if n)
        args.thread_list = (
            None
            if args.threads is None
            else check_ints("--threads", [int(t) for t in args.threads.split(",")], low=1)
        )
        if args.budget_s is not None:
            check_float("--budget-s", args.budget_s, low=0.0)
    except ValueError as exc:
        ap.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.reopen:
        rec, temp, why = args.reopen
        part = cp.reopen(rec, temperature=float(temp), why=why)
        print(
            f"[campaign] reopened {rec}: rerun its command to time the cells again ({part})", file=sys.stderr
        )
        return 0
    if args.reanalyse:
        cp.reanalyse(args.reanalyse)
        print(f"[campaign] reanalysed {args.reanalyse}", file=sys.stderr)
        return 0
    from specdec.engine.models import set_threads
    from specdec.measure.core import cpu_name, environment
    from specdec.measure.device import device_slug
    from specdec.measure.modes import machine_identity

    machine = machine_identity()  # before any thread count is pinned
    built = cp.build_real(
        mode=args.mode, thread_counts=args.thread_list, gammas=args.gamma_list,
        drafts=None if args.drafts is None else args.drafts.split(","), early_exit=args.ee_list,
        adaptive=not args.no_adaptive, llamacpp_gguf=args.llamacpp_gguf, llamacpp=not args.no_llamacpp,
        hf=not args.no_hf,
    )  # fmt: skip
    engines, configs = built["engines"], built["configs"]
    prompts = cp.evaluation_cells(built["tokenizer"], args.prompts)
    most = max(e.threads for e in engines)
    slug = device_slug(cpu_name())[:40]
    out = (
        Path(args.out)
        if args.out
        else ROOT / "results" / "campaign" / f"{slug}-{most}t{'-quick' if args.quick else ''}.json"
    )
    estimate = None
    if not args.no_estimate:
        estimate = cp.estimate_run(
            engines, configs, prompts, repeats=args.repeats, new_tokens=args.new_tokens,
            gammas=args.gamma_list, set_threads=set_threads,
        )  # fmt: skip
    settings = cp.CampaignSettings(
        quick=args.quick, prompts=args.prompts, new_tokens=args.new_tokens, repeats=args.repeats,
        gammas=tuple(args.gamma_list), early_exit=tuple(args.ee_list), drafts=args.drafts,
        adaptive=not args.no_adaptive, mode=args.mode, threads=args.threads, llamacpp_gguf=args.llamacpp_gguf,
        llamacpp=not args.no_llamacpp, hf=not args.no_hf, seed=args.seed, machine=machine,
    )  # fmt: skip
    header = {
        "command": "python benchmarks/campaign.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "environment": environment(),
        "machine": machine,
        "left_out": built["left_out"],
        "probes": built["probes"],
        "estimate": estimate,
    }
    record = cp.run_campaign(
        engines, configs, prompts, out, settings=settings, header=header, new_tokens=args.new_tokens,
        repeats=args.repeats, seed=args.seed, budget_s=args.budget_s, fresh=args.fresh, n_boot=args.n_boot,
        set_threads=set_threads,
    )  # fmt: skip
    return 0 if record["complete"] else 3


if __name__ == "__main__":
    sys.exit(main())
