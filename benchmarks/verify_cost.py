"""The verify-cost curve T(k)/T(1) of the default target (Theorem 3.8 assumes it is 1).

T(k) is the median time of one forward over k new tokens on a KV cache of ``--prefix``
tokens, the ks interleaved across repetitions (specdec.measure.core.verify_cost_curve).

    python benchmarks/verify_cost.py --dtype float32 --threads 2 --prefix 128 --kmax 16
"""

from __future__ import annotations

import argparse

from specdec.engine.models import load_target, set_threads
from specdec.measure import benchargs as ba
from specdec.measure.core import environment, verify_cost_curve, write_result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefix", type=int, default=128)
    ap.add_argument("--kmax", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", default=None, help="write a JSON results file here")
    args = ap.parse_args()
    ba.check_counts(ap, args, ("threads", "kmax", "repeats"))
    ba.check_counts(ap, args, ("prefix",))  # a forward on a cache of at least one token
    ba.check_counts(ap, args, ("warmup",), low=0)
    set_threads(args.threads)
    lm = load_target(args.dtype, device="cpu", quiet=True)
    print(f"load: {lm.source} in {lm.load_s:.1f} s")
    curve = verify_cost_curve(
        lm.model, args.prefix, range(1, args.kmax + 1), repeats=args.repeats, warmup=args.warmup
    )
    env = environment(model=lm.model)
    print(f"{env['device_name']}, {args.dtype}, threads={env['threads']}, prefix={args.prefix}")
    print(f"{'k':>3} {'median ms':>10} {'IQR ms':>8} {'T(k)/T(1)':>10}")
    for row in curve.rows():
        print(f"{row['k']:>3} {row['median_ms']:10.2f} {row['iqr_ms']:8.2f} {row['ratio']:10.2f}")
    if args.out:
        record = {"benchmark": "verify_cost", "dtype": args.dtype, "threads": args.threads, "curve": curve}
        write_result(args.out, record, env=env)


if __name__ == "__main__":
    main()
