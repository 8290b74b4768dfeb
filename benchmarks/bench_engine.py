"""The engine against transformers' generate on the real target, fp32 and bf16 side by side.

The arguments and paths of :mod:`specdec.experiments.hfbench`, which times (interleaved, one paired
block per repetition, prompt and dtype) our autoregressive loop against ``model.generate`` greedy,
our prompt lookup against ``generate(prompt_lookup_num_tokens=gamma)``, and an early-exit drafter;
then the verify-cost curve T(k)/T(1) and each measured speedup against Theorem 3.8's prediction.

    python benchmarks/bench_engine.py --quick            # a smoke run, seconds
    python benchmarks/bench_engine.py --threads 1        # the full run, fp32 and bf16

Results: one JSON per dtype (``--out``, default ``results/bench/engine-<dtype>-<threads>t.json``)
with the environment (versions, device, dtype, threads, commit) and the command line.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from specdec.engine.models import DEFAULT_THREADS, load_target, set_threads
from specdec.experiments.hfbench import (
    NOTE,
    PROMPTS,
    Settings,
    mean_context,
    measure_curves,
    print_tables,
    render_prompts,
    run_suite,
    summarise,
)
from specdec.measure.core import environment, write_result


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    d = Settings()
    ap.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    ap.add_argument("--repeats", type=int, default=d.repeats)
    ap.add_argument("--gammas", type=int, nargs="+", default=list(d.gammas), help="prompt-lookup gammas")
    ap.add_argument("--ee-layers", type=int, default=d.ee_layers, help="early-exit drafter: first n layers")
    ap.add_argument("--ee-gamma", type=int, default=d.ee_gamma)
    ap.add_argument("--kmax", type=int, default=d.kmax, help="verify-cost curve: k = 1..kmax")
    ap.add_argument("--curve-repeats", type=int, default=d.curve_repeats)
    ap.add_argument("--curve-prefix", type=int, default=None, help="default: mean prompt length + N/2")
    ap.add_argument("--prompts", nargs="+", default=None, choices=sorted(PROMPTS))
    ap.add_argument("--out", default="results/bench/engine-{dtype}-{threads}t.json", help="path template")
    ap.add_argument("--note", default=NOTE)
    ap.add_argument("--quick", action="store_true", help="a seconds-long smoke run (writes under /tmp)")
    args = ap.parse_args(argv)
    command = "python benchmarks/bench_engine.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    if args.quick:
        args.max_new_tokens, args.repeats, args.gammas, args.kmax, args.curve_repeats = 8, 1, [3], 4, 1
        args.prompts = args.prompts or ["open_question"]
        if args.out == ap.get_default("out"):
            args.out = "/tmp/bench_engine-quick-{dtype}-{threads}t.json"
    s = Settings(
        max_new_tokens=args.max_new_tokens,
        repeats=args.repeats,
        gammas=tuple(args.gammas),
        ee_layers=args.ee_layers,
        ee_gamma=args.ee_gamma,
        kmax=args.kmax,
        curve_repeats=args.curve_repeats,
        curve_prefix=args.curve_prefix,
    )
    threads = set_threads(args.threads)
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    loaded = {}
    for dtype in tqdm(args.dtype, desc="load", file=sys.stderr):
        loaded[dtype] = load_target(dtype, device="cpu", quiet=True)
    models = {d: lm.model for d, lm in loaded.items()}
    prompts = render_prompts(next(iter(loaded.values())).tokenizer, args.prompts)
    prefix = s.curve_prefix or mean_context(prompts, s.max_new_tokens)
    print(
        f"threads {threads}; prompts {[len(v) for v in prompts.values()]} tokens; curve prefix {prefix}",
        file=sys.stderr,
    )

    raw = run_suite(models, prompts, s)
    print(f"verify-cost curves: k = 1..{s.kmax}, {s.curve_repeats} repetitions ...", file=sys.stderr)
    start = time.perf_counter()
    curves = measure_curves(models, prefix, s)
    print(f"verify-cost curves done in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    summary = summarise(raw, curves, prompts, s)
    print_tables(summary, s)
    for dtype, record in summary.items():
        record |= {"command": command, "note": args.note, "threads": threads, "load_s": loaded[dtype].load_s}
        env = environment(model=models[dtype])
        path = Path(args.out.format(dtype=dtype, threads=args.threads))
        write_result(path, record, env=env)
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
