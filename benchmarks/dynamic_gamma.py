"""Dynamic draft length (issue #12, item 3): adaptive policies against every fixed gamma, with intervals.

On the default target in the mode chosen for this machine (:func:`specdec.measure.modes.lean_model`),
greedy decoding of ``--new-tokens`` tokens (EOS suppressed, equal lengths) per prompt:

* plain decoding (the baseline of every speedup);
* prompt lookup with fixed gamma in ``--gammas`` and with transformers' heuristic schedule;
* the distilled draft ``--draft`` with fixed gammas, the heuristic schedule, and the
  confidence stop at each of ``--confidences`` (drafting up to the largest gamma).

Every configuration runs on every prompt in each pass, configurations in a fresh order per
prompt and pass (interleaved); the speedup of a configuration on a prompt is the median over
passes of plain time / its time, and the record holds per configuration the geometric mean over
prompts with a 95 % bootstrap interval (specdec.theory.intervals), mean drafts and tokens per round.

    python benchmarks/dynamic_gamma.py --threads 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec.measure import benchargs as ba  # noqa: E402
from specdec.measure.dynamicgamma import configurations, run, summarize  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ba.add_lean_args(ap)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--gammas", default="1,2,3,4,6,8")
    ap.add_argument("--confidences", default="0.3,0.6")
    args = ap.parse_args(argv)
    ba.check_counts(ap, args, ("threads", "prompts_per_task", "new_tokens", "repeats"))
    args.gammas = sorted({int(g) for g in args.gammas.split(",")})
    args.confidences = [float(c) for c in args.confidences.split(",")] if args.confidences else []
    if args.gammas[0] < 1 or any(not 0 <= c < 1 for c in args.confidences):
        ap.error("--gammas must be >= 1 and --confidences in [0, 1)")
    ba.check_draft(ap, args.draft)
    return args


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    run_ = ba.start_lean_run(args, "dynamic_gamma.py", argv)
    target, probe = run_.target, run_.probe
    configs = configurations(args.gammas, args.confidences, args.draft, target, run_.draft_model)
    t0 = time.time()
    rows = run(target, configs, run_.prompts, new_tokens=args.new_tokens, repeats=args.repeats)
    record = {
        "kind": "dynamic-gamma",
        "command": run_.command,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "mode": target.mode,
        "mode_probe": None if probe is None else {k: v for k, v in probe.items() if k not in ("cached",)},
        "rows": rows,
        "summary": summarize(rows, list(configs)),
        "wall_s": time.time() - t0,
    }
    return ba.write_bench_record(record, run_.env, args.out, "dynamic-gamma", args.threads)


if __name__ == "__main__":
    main()
