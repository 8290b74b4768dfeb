"""Issues 29 and 30: draft trees, suffix decoding and the drafters conditioned on the target, measured on
held-out prompts against chains and plain decoding.

    python benchmarks/trees.py --quick                 # a smoke run (a minute) on development prompts
    python benchmarks/trees.py --budget-s 3000         # the run; the same command again resumes it
    python benchmarks/trees.py --set conditioned       # issue 30: Medusa, the MLP speculator, EAGLE(-2)
    python benchmarks/trees.py --set self              # issue 42: drafters trained on the target's own
                                                       # text, the hybrid, the do-no-harm policy

The program is :mod:`specdec.experiments.trees` (configurations, prompts, summary); the runner and the
cross-fit analysis are the campaign's. The record ``results/bench/<set>-<cpu>-<threads>t[-quick].json``
holds the command, settings (the prompt file's sha256 among them), the machine identity, the git commit,
every run's raw timings and repetition-0 Stats, each cell's load, the cross-fit analysis and the tree
summary. A full run refuses a dirty working tree: every cell is timed on one clean commit.
"""

from __future__ import annotations

import argparse
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
        "--quick", action="store_true", help="a smoke run: 3 configurations, 16 tokens, 1 repetition"
    )
    ap.add_argument(
        "--new-tokens", type=int, default=128, help="new tokens at most (generations stop at EOS)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="repetitions per cell (>= 1)")
    ap.add_argument(
        "--threads", type=int, default=None, help="the engine's threads (default: every usable core)"
    )
    ap.add_argument(
        "--budget-s", type=float, default=None, help="stop after the cell that exhausts this budget"
    )
    ap.add_argument("--seed", type=int, default=0, help="the sampling seeds start here (cell i: seed + i)")
    ap.add_argument(
        "--set",
        choices=("trees", "conditioned", "self"),
        default="trees",
        help="which configurations (default: trees)",
    )
    ap.add_argument("--fresh", action="store_true", help="discard a partial record instead of resuming it")
    ap.add_argument(
        "--out", default=None, help="the record's path (default: results/bench/trees-<cpu>-<n>t.json)"
    )
    ap.add_argument(
        "--reanalyse",
        metavar="RECORD",
        default=None,
        help="add the simultaneous (Bonferroni) intervals and the tree summary to a complete record, anew",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.new_tokens, args.repeats = 16, 1
    try:
        check_int("--new-tokens", args.new_tokens, low=2, high=2048)
        check_int("--repeats", args.repeats, low=1, high=100)
        check_int("--seed", args.seed, low=0)
        if args.threads is not None:
            check_int("--threads", args.threads, low=1, high=1024)
        if args.budget_s is not None:
            check_float("--budget-s", args.budget_s, low=0.0)
    except ValueError as exc:
        ap.error(str(exc))
    return args


def reanalyse(path: str) -> int:
    """The record's analyses recomputed from its stored runs (pure functions of them), with the commit
    that computed them."""
    import json

    from specdec.analysis.treetables import simultaneous
    from specdec.experiments import trees as tb
    from specdec.measure.core import environment
    from specdec.theory.recordio import write_record

    record = json.loads(Path(path).read_text(encoding="utf-8"))
    if not record.get("complete"):
        print(f"trees.py: {path} is not a complete record", file=sys.stderr)
        return 2
    record["trees"] = tb.tree_summary(record)
    record["simultaneous"] = simultaneous(record)
    env = environment()
    record["analysed_with"] = {"git_commit": env.get("git_commit"), "git_dirty": env.get("git_dirty"),
                               "timestamp_utc": env.get("timestamp_utc")}  # fmt: skip
    write_record(path, record, indent=1, sort_keys=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.reanalyse:
        return reanalyse(args.reanalyse)
    from specdec.engine import native
    from specdec.engine.models import set_threads
    from specdec.experiments import trees as tb
    from specdec.experiments.campaign import evaluation_cells, partial_path, run_campaign
    from specdec.measure.core import cpu_name, environment
    from specdec.measure.device import device_slug
    from specdec.measure.modes import machine_identity
    from specdec.theory.recordio import read_json, write_record

    env = environment()
    if env.get("git_dirty") and not args.quick:
        print("trees.py: the working tree is dirty; commit first (a full run is timed on one clean commit)",
              file=sys.stderr)  # fmt: skip
        return 2
    threads = args.threads or native.default_threads()
    machine = machine_identity()  # before any thread count is pinned
    chosen = tb.SETS[args.set]
    configs = chosen.quick if args.quick else chosen.full
    policies = chosen.quick_policies if args.quick else chosen.policies
    slug = device_slug(cpu_name())[:40]
    out = Path(args.out) if args.out else (
        ROOT / "results" / "bench" / f"{args.set}-{slug}-{threads}t{'-quick' if args.quick else ''}.json"
    )  # fmt: skip
    calibration = None  # a resumed run keeps its policies' calibration (their choices stay the run's)
    part = partial_path(out)
    if part.exists() and not args.fresh:
        calibration = read_json(part).get("policy_calibration")
    built = tb.build(threads=threads, configs=configs, policies=policies, calibration=calibration)
    if args.quick:  # the development prompts: a smoke run never touches the held-out set
        prompts, sha = evaluation_cells(built["tokenizer"], per_task=2), None
    else:
        prompts, sha = tb.heldout_prompts(built["tokenizer"])
    settings = tb.TreesSettings(
        quick=args.quick, new_tokens=args.new_tokens, repeats=args.repeats, threads=threads, seed=args.seed,
        configs={k: tuple(v) for k, v in configs.items()}, prompts_file=tb.HELDOUT.name, prompts_sha256=sha,
        machine=machine, policies={k: tuple(v) for k, v in policies.items()},
    )  # fmt: skip
    target = built["engines"][0].model
    print("[trees] timing verify calls of N rows, chain and tree (v(N))", file=sys.stderr)
    curves = tb.verify_curves(target, repeats=3 if args.quick else 15)
    header = {
        "kind": args.set,
        "verify_curves": curves,
        "command": "python benchmarks/trees.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "environment": env,
        "machine": machine,
        "drafts": built["drafts"],
        **({"policy_calibration": built["calibration"]} if built["calibration"] else {}),
    }
    record = run_campaign(
        built["engines"], built["configs"], prompts, out, settings=settings, header=header,
        new_tokens=args.new_tokens, repeats=args.repeats, seed=args.seed, budget_s=args.budget_s,
        fresh=args.fresh, set_threads=set_threads, eos_token_id=built["eos_token_id"],
    )  # fmt: skip
    if not record["complete"]:
        return 3
    record["kind"] = args.set
    record["trees"] = tb.tree_summary(record)
    write_record(out, record, indent=1, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
