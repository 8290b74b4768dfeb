"""Issue 31's second campaign: every plain decoder at its best and every drafter family, on frozen prompts.

    python benchmarks/campaign2.py --quick             # a smoke run (minutes) on development prompts
    python benchmarks/campaign2.py --budget-s 6000     # the run; the same command again resumes it
    python benchmarks/campaign2.py --reanalyse results/campaign/v2-<cpu>-<n>t.json

The design, the engines, the families and the analysis are :mod:`specdec.experiments.campaign2`; the
runner (interleaved paired blocks, resumable after every cell, load per cell, a loaded cell timed again)
is :func:`specdec.experiments.campaign.run_campaign`. A full run refuses a dirty working tree and resumes
only on the commit and machine it started on. The record ``results/campaign/v2-<cpu>-<threads>t.json``
holds the command, the settings, every session's environment, every run's raw timings and
repetition-0 Stats, every cell's load, the discarded timings, transformers' dtype probe, the verify
curve v(N) of the lean engine, and the analyses.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec.theory.checks import check_float, check_int  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="a smoke run: development prompts, 3 families, 16 tokens"
    )
    ap.add_argument("--repeats", type=int, default=5, help="repetitions per cell, 1..100 (default 5)")
    ap.add_argument(
        "--new-tokens", type=int, default=128, help="new tokens at most, 2..2048 (EOS stops earlier)"
    )
    ap.add_argument(
        "--threads", type=int, default=None, help="the engines' threads, 1..1024 (default: every core)"
    )
    ap.add_argument("--hf-dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                    help="transformers' dtype (auto: the faster here, timed at the start)")  # fmt: skip
    ap.add_argument("--no-llamacpp", action="store_true", help="leave llama.cpp out")
    ap.add_argument(
        "--budget-s", type=float, default=None, help="stop after the cell that exhausts this budget"
    )
    ap.add_argument("--fresh", action="store_true", help="discard a partial record instead of resuming it")
    ap.add_argument(
        "--out", default=None, help="the record's path (default: results/campaign/v2-<cpu>-<n>t.json)"
    )
    ap.add_argument(
        "--reanalyse", metavar="RECORD", default=None, help="recompute a complete record's analyses"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.new_tokens, args.repeats = 16, 1
    try:
        check_int("--repeats", args.repeats, low=1, high=100)
        check_int("--new-tokens", args.new_tokens, low=2, high=2048)
        if args.threads is not None:
            check_int("--threads", args.threads, low=1, high=1024)
        if args.budget_s is not None:
            check_float("--budget-s", args.budget_s, low=0.0)
    except ValueError as exc:
        ap.error(str(exc))
    return args


def finish(record: dict, out: Path) -> None:
    """The analyses of a complete record, with the commit that computed them, written to ``out``."""
    from specdec.experiments.campaign2 import analyse
    from specdec.experiments.trees import tree_summary
    from specdec.measure.core import environment
    from specdec.theory.recordio import write_record

    record["analyses"] = analyse(record)
    record["trees"] = tree_summary(record)
    env = environment()
    record["analysed_with"] = {k: env.get(k) for k in ("git_commit", "git_dirty", "timestamp_utc")}
    write_record(out, record, indent=1, sort_keys=False)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.reanalyse:
        path = Path(args.reanalyse)
        record = json.loads(path.read_text(encoding="utf-8"))
        if not record.get("complete"):
            print(f"campaign2.py: {path} is not a complete record", file=sys.stderr)
            return 2
        finish(record, path)
        return 0
    from specdec.engine import native
    from specdec.engine.models import set_threads
    from specdec.experiments import campaign2 as c2
    from specdec.experiments.campaign import evaluation_cells, partial_path, run_campaign
    from specdec.experiments.trees import heldout_prompts, verify_curves
    from specdec.measure.core import cpu_name, environment
    from specdec.measure.device import device_slug
    from specdec.measure.modes import machine_identity

    env = environment()
    if env.get("git_dirty") and not args.quick:
        print("campaign2.py: the working tree is dirty; commit first (every cell timed on one clean commit)",
              file=sys.stderr)  # fmt: skip
        return 2
    threads = args.threads or native.default_threads()
    machine = machine_identity()  # before any thread count is pinned
    slug = device_slug(cpu_name())[:40]
    out = Path(args.out) if args.out else (
        ROOT / "results" / "campaign" / f"v2-{slug}-{threads}t{'-quick' if args.quick else ''}.json"
    )  # fmt: skip
    probe = None
    hf_dtype = args.hf_dtype
    part = partial_path(out)
    if hf_dtype == "auto" and part.exists() and not args.fresh:  # a resumed run keeps its first choice
        hf_dtype = json.loads(part.read_text(encoding="utf-8"))["settings"]["hf_dtype"]
    elif hf_dtype == "auto":
        print(
            "[campaign2] timing transformers in float32 and bfloat16 (its faster dtype here)", file=sys.stderr
        )
        hf_dtype, probe = c2.fastest_hf_dtype(threads)
    settings = c2.Campaign2(
        threads=threads, machine=machine, git_commit=env.get("git_commit"), hf_dtype=hf_dtype,
        prompts_sha256=None, quick=args.quick, new_tokens=args.new_tokens, repeats=args.repeats,
        llamacpp=not args.no_llamacpp,
        **({"configs": dict(c2.QUICK_CONFIGS), "adaptive": dict(c2.QUICK_ADAPTIVE)} if args.quick else {}),
    )  # fmt: skip
    built = c2.build(settings, log=lambda line: print(line, file=sys.stderr))
    if args.quick:  # development prompts: a smoke run never touches the frozen set
        prompts, sha = evaluation_cells(built["tokenizer"], per_task=2), None
    else:
        prompts, sha = heldout_prompts(built["tokenizer"], c2.PROMPTS)

    settings = dataclasses.replace(settings, prompts_sha256=sha)
    target = built["engines"][0].model
    set_threads(threads)
    print("[campaign2] timing verify calls of N rows, chain and tree (v(N))", file=sys.stderr)
    curves = verify_curves(target, repeats=3 if args.quick else 15)
    header = {
        "kind": "campaign-v2",
        "command": "python benchmarks/campaign2.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "environment": env,
        "machine": machine,
        "hf_dtype_probe": probe,
        "verify_curves": curves,
        "drafts": built["drafts"],
        "left_out": built["left_out"],
    }
    record = run_campaign(
        built["engines"], built["configs"], prompts, out, settings=settings.to_record(), header=header,
        new_tokens=settings.new_tokens, repeats=settings.repeats, seed=settings.seed, budget_s=args.budget_s,
        fresh=args.fresh, set_threads=set_threads, eos_token_id=built["eos_token_id"],
        retry_loaded=settings.retry_loaded,
    )  # fmt: skip
    if not record["complete"]:
        return 3
    record["kind"] = "campaign-v2"
    finish(record, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
