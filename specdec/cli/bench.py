"""``specdec bench``: the engine benchmark, every engine's step, verify cost and decoding speed."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from specdec.cli.common import (
    COUNT_MAX,
    COUNTS,
    NAMES,
    UsageError,
    at_least,
    fmt,
    json_out,
    lean_modes,
    log,
    needs_models,
    out_path,
    para,
    read_record,
    require_fields,
    threads_arg,
    threads_help,
)

__all__ = ["BENCH_QUICK", "add_parser", "ks_arg", "print_bench", "run"]


#: The fields :func:`print_bench` reads (``--from-json`` checks them before printing a line).
BENCH_FIELDS = (
    "settings.engine_names", "settings.threads", "settings.repeats", "settings.new_tokens", "settings.gamma",
    "summary.prompts", "chosen_mode.mode", "chosen_mode.rule", "summary.engines.*.plain_tok_s",
    "summary.engines.*.lookup_over_plain", "summary.engines.*.step_ms", "summary.engines.*.greedy_exact",
)  # fmt: skip


def print_bench(record: dict[str, Any]) -> None:
    s = record["settings"]
    summary = record["summary"]
    prompts = len(summary["prompts"])
    print(
        f"engine benchmark: {len(s['engine_names'])} engine(s), {s['threads']} thread(s), "
        f"{prompts} prompt(s) x {s['repeats']} pass(es), {s['new_tokens']} new tokens, "
        f"prompt lookup at gamma = {s['gamma']}"
    )
    mode = record["chosen_mode"]
    print(f"lean mode chosen for this machine: {mode['mode']} ({mode['rule']})")
    print(
        f"{'engine':14s} {'T(1) ms':>8s} {'T(4)/T(1)':>9s}  "
        f"{'plain tok/s [95% CI]':24s} {'lookup/plain [95% CI]':24s} exact"
    )
    for name, e in summary["engines"].items():
        est, lo, hi = e["plain_tok_s"]
        plain = f"{est:6.1f} [{lo:.1f}, {hi:.1f}]"
        est, lo, hi = e["lookup_over_plain"]
        look = f"{est:5.2f} [{lo:.2f}, {hi:.2f}]"
        t4 = e.get("T4_over_T1")
        print(
            f"{name:14s} {e['step_ms']:8.2f} {fmt(t4 and t4[0], '9.3f', '      n/a')}  "
            f"{plain:24s} {look:24s} {'yes' if e['greedy_exact'] else 'NO'}"
        )
    print(
        textwrap.fill(
            "T(1): one decode step (median); T(4)/T(1): one call over 4 tokens (3 drafts and the last "
            "token) over one step (Theorem 3.8 assumes 1); plain tok/s: plain greedy decoding; "
            "lookup/plain: prompt lookup's speedup over plain decoding on that engine (geometric mean "
            "over prompts); exact: both decoded the same tokens.",
            100,
        )
    )
    if record.get("skipped"):
        print(f"left out (run with --full): {', '.join(record['skipped'])}")


#: The quick (CI-sized) run of `specdec bench`; --full takes BenchSettings' defaults (`specdec run
#: engine-modes`'s).
BENCH_QUICK = {
    "engines": "hf-float32,lean-float32,lean-bfloat16,lean-int4,lean-q4_1,lean-q4q8",
    "prompts_per_task": 1,
    "new_tokens": 16,
    "gamma": 4,
    "repeats": 1,
    "ks": "1,2,4,8",
    "verify_repeats": 3,
}


#: The widest verify call --ks may time, and how many widths one curve may hold.
MAX_K, MAX_KS = 256, 64


def ks_arg(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",")})
    except ValueError:
        raise UsageError(
            f"--ks must be comma-separated integers >= 1 with 1 among them, e.g. 1,2,4,8; got {text!r}"
        ) from None
    if not ks or ks[0] != 1:
        raise UsageError(f"--ks must include 1 (the step every ratio divides by) and no k < 1; got {text!r}")
    if ks[-1] > MAX_K or len(ks) > MAX_KS:
        raise UsageError(
            f"--ks must hold at most {MAX_KS} values, each in 1..{MAX_K} (rows of one verify call); "
            f"got {text!r}"
        )
    return ks


def run(args: argparse.Namespace) -> int:
    from specdec.train.workloads import evaluation_count

    if args.from_json is not None:
        record = read_record(args.from_json, "engine-modes", "bench")
        require_fields(record, BENCH_FIELDS, args.from_json, "bench")
        if args.json:
            print(json_out(record))
        else:
            print_bench(record)
        return 0
    for name in ("prompts_per_task", "new_tokens", "gamma", "repeats", "verify_repeats"):
        low = 2 if name == "verify_repeats" else 1  # c's interval is over the passes
        high = evaluation_count() if name == "prompts_per_task" else COUNT_MAX[name]  # what the tasks hold
        at_least("--" + name.replace("_", "-"), getattr(args, name), low, COUNTS[name], high)
    out_path(args.out)  # before the run, not after it
    try:
        from specdec.measure.enginebench import BenchSettings, resolve_engines, run_bench

        full = BenchSettings.__dataclass_fields__
        chosen = {}
        for name in ("prompts_per_task", "new_tokens", "gamma", "repeats", "verify_repeats"):
            given = getattr(args, name)
            chosen[name] = (
                given if given is not None else (full[name].default if args.full else BENCH_QUICK[name])
            )
        ks = args.ks if args.ks is not None else (None if args.full else BENCH_QUICK["ks"])
        engines = (
            args.engines if args.engines is not None else (None if args.full else BENCH_QUICK["engines"])
        )
        # the quick default list leaves out what this machine cannot run; a list the user gave does not
        names = resolve_engines(engines, log=log, strict=args.engines is not None)
        settings = BenchSettings(
            threads=args.threads,
            engines=engines,
            ks=full["ks"].default if ks is None else ks_arg(ks),
            engine_names=names,
            **chosen,
        )
        record, env = run_bench(
            settings,
            command="specdec " + " ".join(args.argv),
            refresh_probe=args.full,
            with_roofline=args.full,
            with_profile=args.full,
            log=log,
        )
    except (ImportError, FileNotFoundError) as exc:
        return needs_models("bench", exc)
    if args.out is not None:
        from specdec.measure.core import write_result

        path = write_result(args.out, record, env=env)
        log(f"record written to {path}")
    if args.json:
        print(json_out({**record, "environment": env}))
    else:
        print_bench(record)
    return 0


def add_parser(sub: Any, formatter: Any) -> None:
    """Add this command's parser to ``sub`` (the subparsers of :func:`specdec.cli.app.parser`)."""
    lean = lean_modes()
    quick = BENCH_QUICK["engines"].split(",")
    b = sub.add_parser(
        "bench",
        help="the engine benchmark: every engine's step, verify cost and decoding speed side by side",
        description=para(
            "Run the book's engine benchmark on this machine: transformers' forward (hf-float32, "
            f"hf-bfloat16), the lean engine's modes ({', '.join('lean-' + m for m in lean)}) and "
            "llama.cpp (when llama-cpp-python is installed), all with the default target and "
            "specdec's own decoding loops. Per engine: T(1), one decode step; T(k)/T(1), what "
            "verifying k - 1 drafts in one call costs in steps; plain greedy decoding's tokens per "
            "second; and prompt lookup's speedup over plain decoding, each with a 95 % bootstrap "
            "interval over prompts. Without --full it runs a quick, CI-sized version (about a "
            f"minute: {len(quick)} engines ({', '.join(quick)}; those this machine cannot run are left "
            "out), three prompts, 16 tokens, the cached mode probe, no roofline or "
            "profile); --full runs the defaults of specdec run engine-modes (about ten minutes). "
            "Any option below overrides either. Theorem 3.8 prices a verify call at one step, "
            "T(k)/T(1) = 1; this measures what it costs on each engine."
        )
        + NAMES,
        epilog="Examples:\n  specdec bench\n  specdec bench --full --out engine-modes.json\n"
        "  specdec bench --engines lean-float32,lean-int4 --new-tokens 32 --json",
        formatter_class=formatter,
    )
    b.add_argument("--full", action="store_true", help="the full run (the record format of results/bench)")
    b.add_argument(
        "--engines",
        default=None,
        metavar="LIST",
        help=f"comma list from hf-float32, hf-bfloat16, {', '.join('lean-' + m for m in lean)}, "
        "llama.cpp "
        "(quick: hf-float32 and the lean modes; --full: every available engine), or a lean-int4 "
        "variant run only when named (specdec.measure.enginebench.VARIANTS)",
    )
    b.add_argument(
        "--threads",
        type=threads_arg,
        default=1,
        metavar="N",
        help=threads_help("1"),
    )
    b.add_argument(
        "--prompts-per-task",
        type=int,
        default=None,
        metavar="N",
        help="prompts of each of the three tasks (quick 1, full 2)",
    )
    b.add_argument(
        "--new-tokens",
        type=int,
        default=None,
        metavar="N",
        help="tokens decoded per prompt (quick 16, full 64)",
    )
    b.add_argument("--gamma", type=int, default=None, metavar="G", help="prompt lookup's draft length (4)")
    b.add_argument("--repeats", type=int, default=None, metavar="N", help="decoding passes (quick 1, full 3)")
    b.add_argument(
        "--ks",
        default=None,
        metavar="LIST",
        help="call sizes k of the verify curve, 1 among them (quick 1,2,4,8; full 1,2,3,4,5,6,8,12,16)",
    )
    b.add_argument(
        "--verify-repeats",
        type=int,
        default=None,
        metavar="N",
        help="timed passes of the verify curve, >= 2: c's interval is over them (quick 3, full 9)",
    )
    b.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="also write the full record (JSON, with the environment) to FILE",
    )
    b.add_argument(
        "--from-json",
        default=None,
        metavar="FILE",
        help="measure nothing: print a record saved by --json, --out or specdec run engine-modes "
        "(e.g. results/bench/engine-modes-*.json)",
    )
    b.add_argument(
        "--json", action="store_true", help="print the full record as one JSON object (for scripts)"
    )
    b.set_defaults(run=run)
