"""Engine benchmark (issue #10): every engine side by side on the same machine and threads.

A thin wrapper: the measurement is :func:`specdec.measure.enginebench.run_bench` (its docstring lists
the engines and steps), which ``specdec bench`` runs too. This script runs the full benchmark
(every step, the mode probe re-measured) and writes one JSON record (``--out``, default
``results/bench/engine-modes-<cpu>-<threads>t.json``) with the machine named and how busy other
processes kept it meanwhile (``machine_load``, :func:`specdec.measure.runner.load_during`). About 10
minutes with the defaults on 1 thread.

    python benchmarks/engine_modes.py --threads 1
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec.measure import benchargs as ba  # noqa: E402
from specdec.measure.enginebench import ALL_ENGINES, BenchSettings, resolve_engines, run_bench  # noqa: E402
from specdec.measure.runner import cpu_counters, load_during  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # the full run's defaults, as specdec bench --full takes them (read from the fields: building a
    # BenchSettings would resolve the engines, building the C forwards, before --help)
    full = argparse.Namespace(**{f.name: f.default for f in dataclasses.fields(BenchSettings)})
    ap.add_argument("--threads", type=int, default=full.threads)
    ap.add_argument("--engines", default=None, help=f"comma list from {ALL_ENGINES} (default: all available)")
    ap.add_argument("--prompts-per-task", type=int, default=full.prompts_per_task)
    ap.add_argument("--new-tokens", type=int, default=full.new_tokens)
    ap.add_argument("--gamma", type=int, default=full.gamma, help="prompt-lookup draft length")
    ap.add_argument("--repeats", type=int, default=full.repeats)
    ap.add_argument("--ks", default=",".join(map(str, full.ks)))
    ap.add_argument("--verify-repeats", type=int, default=full.verify_repeats)
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--cached-probe",
        action="store_true",
        help="read this machine's cached mode probe instead of re-timing",
    )
    args = ap.parse_args(argv)
    ba.check_counts(
        ap, args, ("threads", "prompts_per_task", "new_tokens", "gamma", "repeats", "verify_repeats")
    )
    args.ks = sorted({int(k) for k in args.ks.split(",")})
    if args.ks[0] != 1:
        ap.error("--ks must include 1 (the step every ratio divides by)")
    try:
        args.engine_names = resolve_engines(args.engines)
    except ValueError as exc:
        ap.error(str(exc))
    given = {k: v for k, v in vars(args).items() if k not in ("out", "cached_probe")}
    args.settings = ba.build_settings(BenchSettings, given, ap.error)  # checked before anything runs
    return args


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    command = ba.command_line("engine_modes.py", argv)
    settings = args.settings
    before, start = cpu_counters(), time.perf_counter()
    record, env = run_bench(settings, command=command, refresh_probe=not args.cached_probe)
    record["machine_load"] = load_during(before, cpu_counters(), time.perf_counter() - start, args.threads)
    return ba.write_bench_record(record, env, args.out, "engine-modes", args.threads)


if __name__ == "__main__":
    main()
