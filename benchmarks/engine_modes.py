"""Engine benchmark (issue #10): every engine side by side on the same machine and threads.

A thin wrapper: the measurement is :func:`specdec.measure.enginebench.run_bench` (its docstring lists
the engines and steps), which ``specdec bench`` runs too. This script runs the full benchmark
(every step, the mode probe re-measured) and writes one JSON record (``--out``, default
``results/bench/engine-modes-<cpu>-<threads>t.json``) with the machine named. About 10
minutes with the defaults on 1 thread.

    python benchmarks/engine_modes.py --threads 1
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec.measure.core import write_result  # noqa: E402
from specdec.measure.device import device_slug  # noqa: E402
from specdec.measure.enginebench import ALL_ENGINES, BenchSettings, resolve_engines, run_bench  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--engines", default=None, help=f"comma list from {ALL_ENGINES} (default: all available)")
    ap.add_argument("--prompts-per-task", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--gamma", type=int, default=4, help="prompt-lookup draft length")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ks", default="1,2,3,4,5,6,8,12,16")
    ap.add_argument("--verify-repeats", type=int, default=9)
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--cached-probe",
        action="store_true",
        help="read this machine's cached mode probe instead of re-timing",
    )
    args = ap.parse_args(argv)
    for name in ("threads", "prompts_per_task", "new_tokens", "gamma", "repeats", "verify_repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    args.ks = sorted({int(k) for k in args.ks.split(",")})
    if args.ks[0] != 1:
        ap.error("--ks must include 1 (the step every ratio divides by)")
    try:
        args.engine_names = resolve_engines(args.engines)
    except ValueError as exc:
        ap.error(str(exc))
    return args


def _cpu_times() -> list[int] | None:
    """The machine's aggregate CPU counters (/proc/stat, clock ticks), None where unreadable."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            return [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None


def _load_between(
    a: list[int] | None, b: list[int] | None, own0: os.times_result, own1: os.times_result
) -> dict:
    """Whether other processes shared the machine during the run: the machine's busy and stolen
    CPU-seconds over the run, this process's own CPU-seconds, and the difference (others')."""
    if a is None or b is None:
        return {"measured": False}
    tick = os.sysconf("SC_CLK_TCK")
    d = [(y - x) / tick for x, y in zip(a, b, strict=False)]
    idle = d[3] + (d[4] if len(d) > 4 else 0.0)
    steal = d[7] if len(d) > 7 else 0.0
    busy = sum(d[:8]) - idle - steal
    own = (own1.user - own0.user) + (own1.system - own0.system)
    cores = os.cpu_count() or 1
    wall = sum(d[:8]) / cores
    return {
        "measured": True,
        "wall_s": wall,
        "cores": cores,
        "busy_cpu_s": busy,
        "steal_cpu_s": steal,
        "own_cpu_s": own,
        "others_cpu_s": max(0.0, busy - own),
        "others_mean_cores": max(0.0, busy - own) / wall if wall > 0 else None,
    }


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    command = "python benchmarks/engine_modes.py " + " ".join(sys.argv[1:] if argv is None else argv)
    settings = BenchSettings(**{k: v for k, v in vars(args).items() if k not in ("out", "cached_probe")})
    before, own0 = _cpu_times(), os.times()
    record, env = run_bench(settings, command=command, refresh_probe=not args.cached_probe)
    record["machine_load"] = _load_between(before, _cpu_times(), own0, os.times())
    slug = device_slug(env["device_name"])
    out = (
        Path(args.out)
        if args.out
        else ROOT / "results" / "bench" / f"engine-modes-{slug}-{args.threads}t.json"
    )
    path = write_result(out, record, env=env)
    print(f"-> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
    return path


if __name__ == "__main__":
    main()
