"""Batch size on this CPU (issue #12, item 2): the cost surface T(b, k), its predicted gain, batched decoding.

On the default target (SmolLM2-135M-Instruct, transformers' eager forward, sdpa attention), one
thread by default, as named steps (``--steps``; default all, in this order):

1. ``surface``   -- T(b, k), one forward over k new tokens for each of b sequences after a
                    cached context of ``--context`` tokens, for b in ``--batches`` (1..64) and k in
                    1..8, for the target in each of ``--modes`` (float32, bfloat16), and T(b, 1) of
                    the draft ``--draft`` in each mode (its cost c(b)); in ``--passes`` interleaved
                    passes (specdec.analysis.batchcost.measure_surface);
2. ``decoding``  -- batched speculative decoding (specdec.engine.batched, gamma ``--gamma``) against
                    batched plain decoding for b in ``--decode-batches`` (1..16), ``--units``
                    batches of prompts per b drawn from the book's 36 evaluation prompts,
                    configurations interleaved: the draft model and prompt lookup (ragged cut),
                    and prompt lookup with the common cut; greedy, ``--new-tokens`` per row;
3. ``analysis``  -- per mode: T(b, k)/T(b, 1) with intervals, the predicted gain per b (best gamma)
                    at each configuration's measured alpha, with the draft's c(b) and with c = 0,
                    bootstrap intervals over passes, the batch at which the gain vanishes, and the
                    prediction at ``--gamma`` beside the measured batched speedup.

The record (``results/bench/batch-surface-<cpu>-<threads>t.json``; ``-quick`` for ``--quick``) is
saved after every finished block and unit; rerunning the same command resumes from it (``--fresh``
starts over; other settings are refused). ``--quick`` is a CI-sized run (a small grid, two
passes, two units); ``--tiny`` swaps in the test suite's tiny random models (tests only).

    python benchmarks/batch_surface.py            # the full run, about 20 minutes on 2 cores
    python benchmarks/batch_surface.py --quick    # about a minute
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.experiments import batchsurface as bb  # noqa: E402
from specdec.experiments.batchsurface import QUICK, STEPS  # noqa: E402,F401  (the grid, for --help and tests)
from specdec.measure import benchargs as ba  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTE = (
    "Measured on a machine whose CPU cores other sessions shared at the same time: single timings "
    "are noisy. Passes interleave every cell, the tables use medians over passes, and the intervals "
    "(bootstrap over passes for T(b, k), over batches of prompts for decoding) show the noise."
)


def parse_args(argv: list[str] | None = None) -> bb.BatchSurface:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, any of {', '.join(STEPS)}")
    ap.add_argument("--quick", action="store_true", help="a CI-sized run (small grid, 2 passes, 2 units)")
    ap.add_argument("--tiny", action="store_true", help="the test suite's tiny random models (tests)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--modes", default="float32,bfloat16", help="target dtypes of the surface")
    ap.add_argument("--decode-mode", default="auto", help="dtype of the decoding step; auto: see --help text")
    ap.add_argument("--draft", default="distil-l1", help="the distilled draft (specdec/data/drafts)")
    ap.add_argument("--context", type=int, default=128, help="cached tokens per sequence in the surface")
    ap.add_argument("--gamma", type=int, default=3)
    ap.add_argument("--batches", default=None, help="surface batch sizes (default: 1..64, 12 values)")
    ap.add_argument("--ks", default=None, help="tokens per sequence (default: 1..8)")
    ap.add_argument("--passes", type=int, default=None)
    ap.add_argument("--decode-batches", default=None, help="decoding batch sizes (default: 1, 2, 4, 8, 16)")
    ap.add_argument("--units", type=int, default=None, help="batches of prompts per decoding batch size")
    ap.add_argument("--new-tokens", type=int, default=None)
    ap.add_argument("--boot", type=int, default=None, help="bootstrap draws of the gain intervals")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="the record's path")
    ap.add_argument("--fresh", action="store_true", help="start over instead of resuming the record")
    ap.add_argument(
        "--redo", default=None, help="a step to measure again in a resumed record (its data dropped)"
    )
    ap.add_argument("--redo-reason", default="", help="why --redo: kept in the record's status")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    given = vars(args)
    for key in ("batches", "ks", "decode_batches"):
        if given[key] is not None:
            try:
                given[key] = tuple(int(v) for v in given[key].split(","))
            except ValueError:
                ap.error(f"--{key.replace('_', '-')} takes comma-separated integers; got {given[key]!r}")
    given["steps"] = tuple(s.strip() for s in args.steps.split(",") if s.strip())
    given["modes"] = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    return ba.build_settings(bb.BatchSurface, given, ap.error)  # the settings check themselves


# --------------------------------------------------------------------------- the record
def record_path(args: bb.BatchSurface, slug: str) -> Path:
    if args.out:
        return Path(args.out)
    tag = "-tiny" if args.tiny else ("-quick" if args.quick else "")
    return ROOT / "results" / "bench" / f"batch-surface-{slug}-{args.threads}t{tag}.json"


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    from specdec.engine.machine import cpu_identity
    from specdec.engine.models import set_threads
    from specdec.measure.core import environment
    from specdec.measure.device import device_slug

    set_threads(args.threads)
    command = ba.command_line("batch_surface.py", argv)
    machine = cpu_identity()
    env = environment(dtype=",".join(args.modes), device="cpu")
    path = record_path(args, device_slug(env["device_name"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    record = bb.open_record(args, path, command.strip(), env, machine, NOTE)
    bb.run_steps(args, record, path)
    ba.report(path)
    return path


if __name__ == "__main__":
    main()
