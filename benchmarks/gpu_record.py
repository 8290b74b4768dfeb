"""The GPU record (issue #12, item 4): the engine's CUDA paths, and T(b, k) of shape-true targets.

One command on a machine with one CUDA GPU, torch and transformers (no network, no weights,
no install: the repository as the working directory)::

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 benchmarks/gpu_record.py --out results/gpu

Steps, each saved to ``<out>/<device-slug>.json`` as soon as it ends (a timeout keeps them):

1. ``greedy``       -- greedy speculative == greedy autoregressive on the GPU, float32, tiny
                       random Llamas of the test suite, model and prompt-lookup drafters;
2. ``chi_square``   -- the joint law of the first two tokens at temperature 1 over N runs
                       against the exact law (losslessness on the GPU);
3. ``roofline``     -- memory bandwidth (a 1 GiB copy), bf16 matmul TFLOP/s, the ridge point;
4. ``shape:<name>`` -- per shape (SmolLM2-135M, SmolLM2-1.7B, Llama-2-7B), random weights in
                       bfloat16 built on the GPU: T(b, k) for b in 1..64 and k in 1..8 (k up to
                       32 at b = 1) on a cached context, and the engine's own step.

A global budget (``--budget-s``) is checked between cells; what it cuts is listed as skipped.
On a CPU, ``--device cpu --quick`` runs a scaled-down version in seconds (the tests do).
Eager transformers, sdpa attention, no CUDA graphs. The steps are
:func:`specdec.experiments.gpurecord.run_record`'s; this script parses the command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.engine.randomllama import SHAPES  # noqa: E402
from specdec.experiments import gpurecord as gr  # noqa: E402


def log(msg: str) -> None:
    print(msg, flush=True)


def parse_args(argv: list[str] | None = None) -> gr.GpuRecord:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/gpu", help="folder of the JSON record")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", help="dtype of the shape-true targets")
    ap.add_argument("--budget-s", type=float, default=300.0, help="global time budget, checked between cells")
    ap.add_argument("--quick", action="store_true", help="a scaled-down run (CPU tests)")
    ap.add_argument("--shapes", nargs="*", default=None, help=f"any of {list(SHAPES)} (default: all)")
    ap.add_argument("--context", type=int, default=128, help="cached tokens per sequence")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--chi2-runs", type=int, default=3000)
    ap.add_argument("--chi2-cap-s", type=float, default=45.0, help="time cap of the chi-square runs")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--skip-correctness", action="store_true")
    args = ap.parse_args(argv)
    from specdec.measure import benchargs as ba

    return ba.build_settings(gr.GpuRecord, vars(args), ap.error)  # the settings check themselves


def main(argv: list[str] | None = None) -> Path:
    return gr.run_record(parse_args(argv), log=log)


if __name__ == "__main__":
    main()
