"""Section 3.5's oracle bound from real drafts (issue #12, item 3): the record behind it.

On the default target in the lean mode of this machine (the same setting as
``benchmarks/dynamic_gamma.py``), for each evaluation prompt:

1. the target's greedy continuation of ``--new-tokens`` tokens (plain decoding);
2. per drafter (prompt lookup and the distilled draft ``--draft``), the greedy draft of up to
   ``--max-gamma`` tokens at every position of that continuation, and how many of its tokens
   match the target's (:func:`specdec.analysis.oracle.record_runs`);
3. per drafter, its cost c (Definition 3.7, :func:`specdec.analysis.oracle.measure_costs`) from
   ``--repeats`` speculative calls at gamma = ``--c-gamma`` paired with plain ones; their
   accepted counts per round are kept, so that the replay at that gamma can be checked
   against real decoding (:func:`specdec.analysis.oracle.replay` must give the same rounds).

The verify-cost curve T(k)/T(1) comes from the mode probe (:func:`specdec.measure.modes.choose_mode`).
The record holds the runs, the draft lengths, c and the curve; the book replays them under
every fixed gamma and under the oracle (:func:`specdec.analysis.oracle.replay`). Only step 3 is a
timing; the runs are deterministic for a given CPU's arithmetic.

    python benchmarks/oracle_gamma.py --threads 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec.analysis.oracle import measure_costs, record_runs  # noqa: E402
from specdec.measure import benchargs as ba  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ba.add_lean_args(ap)
    ap.add_argument("--max-gamma", type=int, default=15, help="longest draft asked for (verify over 16)")
    ap.add_argument("--c-gamma", type=int, default=4, help="gamma of the calls that measure c")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved calls per prompt that measure c")
    args = ap.parse_args(argv)
    ba.check_counts(
        ap, args, ("threads", "prompts_per_task", "new_tokens", "max_gamma", "c_gamma", "repeats")
    )
    ba.check_draft(ap, args.draft)
    return args


def verify_curve_probe(args: argparse.Namespace, run: ba.LeanRun) -> dict[str, Any]:
    """The mode probe with the target's verify curve (measured here for a named mode); the curve
    must reach ``--max-gamma`` + 1."""
    from specdec.measure.modes import probe_modes

    probe = run.probe if run.probe is not None else probe_modes(run.base.model, [run.target.mode])
    top = max(int(k) for k in probe["modes"][run.target.mode]["curve"])
    if args.max_gamma + 1 > top:
        raise SystemExit(
            f"--max-gamma must be at most {top - 1}: the verify curve was measured up to k = {top}"
        )
    return probe


def drafters(args: argparse.Namespace, target: Any, draft_model: Any) -> dict[str, Any]:
    """name -> a factory of fresh drafters."""
    from specdec.engine.drafters import ModelDrafter, PromptLookupDrafter

    return {"lookup": PromptLookupDrafter, args.draft: lambda: ModelDrafter(draft_model, target=target)}


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    run = ba.start_lean_run(args, "oracle_gamma.py", argv)
    target, prompts = run.target, run.prompts
    probe = verify_curve_probe(args, run)
    makers = drafters(args, target, run.draft_model)
    t0 = time.time()
    rows = record_runs(target, makers, prompts, new_tokens=args.new_tokens, max_gamma=args.max_gamma)
    costs = measure_costs(
        target, makers, prompts, new_tokens=args.new_tokens, gamma=args.c_gamma, repeats=args.repeats
    )
    record = {
        "kind": "oracle-gamma",
        "command": run.command,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "mode": target.mode,
        "curve": probe["modes"][target.mode]["curve"],
        "exact": probe["modes"][target.mode]["exact"],
        "costs": costs,
        "rows": rows,
        "wall_s": time.time() - t0,
    }
    return ba.write_bench_record(record, run.env, args.out, "oracle-gamma", args.threads)


if __name__ == "__main__":
    main()
