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
Eager transformers, sdpa attention, no CUDA graphs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specdec.measure import gpurecord as gr  # noqa: E402


def log(msg: str) -> None:
    print(msg, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/gpu", help="folder of the JSON record")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", help="dtype of the shape-true targets")
    ap.add_argument("--budget-s", type=float, default=300.0, help="global time budget, checked between cells")
    ap.add_argument("--quick", action="store_true", help="a scaled-down run (CPU tests)")
    ap.add_argument("--shapes", nargs="*", default=None, help=f"any of {list(gr.SHAPES)} (default: all)")
    ap.add_argument("--context", type=int, default=128, help="cached tokens per sequence")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--chi2-runs", type=int, default=3000)
    ap.add_argument("--chi2-cap-s", type=float, default=45.0, help="time cap of the chi-square runs")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--skip-correctness", action="store_true")
    return ap.parse_args(argv)


def plan(args: argparse.Namespace) -> dict:
    """The grid and the shapes of this run (quick: the scaled-down shape and a small grid)."""
    if args.quick:
        return {
            "shapes": {"quick": gr.QUICK_SHAPE},
            "batches": (1, 2),
            "ks": (1, 2, 3),
            "b1_extra_ks": (4,),
            "context": min(args.context, 16),
            "repeats": min(args.repeats, 3),
            "warmup": min(args.warmup, 1),
            "chi2_runs": min(args.chi2_runs, 200),
            "engine_ks": (1, 4),
            "copy_mib": 8,
            "matmul_n": (128,),
        }
    names = args.shapes if args.shapes else list(gr.SHAPES)
    unknown = [n for n in names if n not in gr.SHAPES]
    if unknown:
        raise SystemExit(f"unknown shapes {unknown}; choose from {list(gr.SHAPES)}")
    return {
        "shapes": {n: gr.SHAPES[n] for n in names},
        "batches": gr.GRID_BATCHES,
        "ks": gr.GRID_KS,
        "b1_extra_ks": gr.B1_EXTRA_KS,
        "context": args.context,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "chi2_runs": args.chi2_runs,
        "engine_ks": (1, 4, 8),
        "copy_mib": 1024,
        "matmul_n": (4096, 8192),
    }


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    deadline = gr.Deadline(args.budget_s)
    import torch

    from specdec.measure.core import environment

    if args.threads:
        torch.set_num_threads(args.threads)
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("CUDA is not available here; on a CPU run with --device cpu --quick")
    dtype = getattr(torch, args.dtype)
    p = plan(args)
    info = gr.device_info(args.device)
    slug = gr.device_slug(info["name"]) + ("-quick" if args.quick else "")
    rec = gr.Recorder(Path(args.out) / f"{slug}.json", settings={**vars(args), **p}, log=log)
    rec.data["device"] = info
    rec.data["environment"] = environment(device=args.device, dtype=args.dtype)
    rec.data["engine"] = "eager Hugging Face transformers, sdpa attention, no CUDA graphs, no compile"
    rec.save()
    log(
        f"gpu_record: {info['name']} | torch {torch.__version__} (CUDA {torch.version.cuda}) | "
        f"transformers {rec.data['environment']['transformers']} | budget {args.budget_s:.0f} s | "
        f"-> {rec.path}"
    )

    # 1-2. Correctness of the engine on the device (float32, tiny models).
    if args.skip_correctness:
        rec.skip("greedy", "--skip-correctness")
        rec.skip("chi_square", "--skip-correctness")
    else:
        with rec.section("greedy") as out:
            out.update(gr.greedy_equality(args.device))
            log(
                f"  greedy equal: {out['all_equal']}, matches CPU: {out['all_match_cpu']}, "
                f"block-vs-step logits diff {out['block_vs_step_logits_max_abs_diff']:.2e}"
            )
        if deadline.allows(60):
            cap = min(args.chi2_cap_s, max(deadline.left() - 60, 1.0))
            with rec.section("chi_square") as out:
                out.update(
                    gr.first_two_token_test(args.device, n=p["chi2_runs"], time_cap_s=cap, progress=log)
                )
                log(
                    f"  chi-square: {out['runs']} runs, p = {out['pvalue']:.3g} ({out['method']}), "
                    f"passed: {out['passed']}"
                )
        else:
            rec.skip("chi_square", f"budget: {deadline.left():.0f} s left")
        gr.free_memory(args.device)

    # 3. The device's roofline: bandwidth, matmul throughput in the timing dtype, ridge point.
    with rec.section("roofline") as out:
        out.update(
            gr.device_roofline(
                args.device, dtype, copy_mib=p["copy_mib"], matmul_n=p["matmul_n"], repeats=p["warmup"] + 7
            )
        )
        log(
            f"  roofline: {out['bandwidth_gb_s']:.0f} GB/s, {out['peak_tflop_s']:.1f} TFLOP/s {args.dtype}, "
            f"ridge {out['ridge_flop_per_byte']:.0f} FLOP/byte"
        )
    gr.free_memory(args.device)

    # 4. Shape-true targets: T(b, k) in the timing dtype.
    for name, shape in p["shapes"].items():
        section = f"shape:{name}"
        if not deadline.allows(10):
            rec.skip(section, f"budget: {deadline.left():.0f} s left")
            continue
        model = None
        with rec.section(section) as out:
            out["config"] = dict(shape)
            out["dtype"] = args.dtype
            t0 = time.monotonic()
            model = gr.random_llama(shape, args.device, dtype)
            out["build_s"] = time.monotonic() - t0
            out["params"] = sum(t.numel() for t in model.parameters())
            out["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
            log(f"  {name}: {out['params'] / 1e6:.1f} M parameters built in {out['build_s']:.1f} s")

            def save_partial(surface: dict, out: dict = out) -> None:
                out["surface"] = surface
                rec.save()

            out["surface"] = gr.cost_surface(
                model,
                batches=p["batches"],
                ks=p["ks"],
                b1_extra_ks=p["b1_extra_ks"],
                context=p["context"],
                repeats=p["repeats"],
                warmup=p["warmup"],
                deadline=deadline,
                on_block=save_partial,
                log=log,
            )
            cells = {(c["b"], c["k"]): c for c in out["surface"]["cells"]}
            if (1, 1) in cells:
                out["step_s"] = cells[(1, 1)]["median_s"]
                log(f"  {name}: T(1,1) = {1e3 * out['step_s']:.2f} ms")
            if torch.device(args.device).type == "cuda" and deadline.allows(10):
                try:  # the hardware's T(b, k): kernel time, free of eager launch overhead
                    out["kernels"] = gr.kernel_time_surface(
                        model, context=p["context"], deadline=deadline, log=log
                    )
                except Exception as exc:  # noqa: BLE001  (recorded, the run goes on)
                    out["kernels"] = {"error": f"{type(exc).__name__}: {exc}"}
                    log(f"  kernels failed: {out['kernels']['error']}")
                rec.save()
            if deadline.allows(5):
                out["engine"] = gr.engine_forward_times(
                    model, context=p["context"], ks=p["engine_ks"], repeats=p["repeats"], warmup=p["warmup"]
                )
            out["memory"] = gr.free_memory(args.device)  # the peak while this shape ran
        model = None  # free the GPU for the next shape, also after a failure
        gr.free_memory(args.device)

    rec.data["status"]["budget_left_s"] = deadline.left()
    path = rec.finish()
    st = rec.data["status"]
    log(
        f"gpu_record: done in {st['elapsed_s']:.0f} s; failed {st['failed']}, "
        f"skipped {[s['section'] for s in st['skipped']]} -> {path}"
    )
    return path


if __name__ == "__main__":
    main()
