"""Eager vs sdpa attention for one single-token decode step of the default target.

Loads SmolLM2-135M-Instruct twice (from the weight cache after the first run), pins the
threads, and times one forward over 1 new token on a KV cache of ``--prefix`` tokens for
both kernels, interleaved (specdec.measure.core.forward_times). Prints medians and IQRs; with
``--out`` also writes a results file. The faster kernel is specdec.engine.models.DEFAULT_ATTN.

    python benchmarks/attention_kernels.py --threads 2 --prefix 128 --repeats 200
"""

from __future__ import annotations

import argparse

from specdec.engine.models import load_target, set_threads
from specdec.measure import benchargs as ba
from specdec.measure.core import forward_times, write_result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--prefix", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--out", default=None, help="write a JSON results file here")
    args = ap.parse_args()
    ba.check_counts(ap, args, ("threads", "repeats"))
    ba.check_counts(ap, args, ("prefix",))  # a forward on a cache of at least one token
    ba.check_counts(ap, args, ("warmup",), low=0)
    threads = set_threads(args.threads)
    models = {
        attn: load_target(args.dtype, device="cpu", attn_implementation=attn, quiet=True).model
        for attn in ("eager", "sdpa")
    }
    times = forward_times(models, args.prefix, (1,), repeats=args.repeats, warmup=args.warmup)
    print(f"threads={threads['threads']} dtype={args.dtype} prefix={args.prefix} repeats={args.repeats}")
    print(f"{'kernel':>8} {'median ms':>10} {'IQR ms':>8}")
    for (attn, _), t in times.items():
        print(f"{attn:>8} {1e3 * t.median_s:10.2f} {1e3 * t.iqr_s:8.2f}")
    if args.out:
        record = {
            "benchmark": "attention_kernels",
            "dtype": args.dtype,
            "prefix_len": args.prefix,
            "threads": args.threads,
            "timings": {attn: t for (attn, _), t in times.items()},
        }
        write_result(args.out, record, env=None)


if __name__ == "__main__":
    main()
