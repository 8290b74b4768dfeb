"""Engine benchmark (issue #10): every engine side by side on the same machine and threads.

A thin wrapper: the measurement is :func:`specdec.enginebench.run_bench` (its docstring lists
the engines and steps), which ``specdec bench`` runs too. This script runs the full benchmark
(every step, the mode probe re-measured) and writes one JSON record (``--out``, default
``results/bench/engine-modes-<cpu>-<threads>t.json``) with the machine named. About 10
minutes with the defaults on 1 thread.

    python benchmarks/engine_modes.py --threads 1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec.enginebench import ALL_ENGINES, BenchSettings, resolve_engines, run_bench  # noqa: E402
from specdec.gpurecord import device_slug  # noqa: E402
from specdec.measure import write_result  # noqa: E402


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


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    command = "python benchmarks/engine_modes.py " + " ".join(sys.argv[1:] if argv is None else argv)
    settings = BenchSettings(**{k: v for k, v in vars(args).items() if k != "out"})
    record, env = run_bench(settings, command=command)
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
