"""The GPU record: the engine's CUDA paths checked, and the cost surface T(b, k) of shape-true targets.

``specdec run gpu-record`` (``make gpu-record``; the program :class:`GpuRecordRun`) calls :func:`run_record`,
which runs these steps as named sections of one record (:class:`specdec.measure.runner.Recorder`,
saved after every section, under a global :class:`~specdec.measure.runner.Deadline`) on a
machine with one CUDA GPU, torch and transformers, and nothing else: no network, no weights, no
package install (``PYTHONPATH=.``). Issue #12, item 4.

1. ``greedy``       -- :func:`specdec.measure.devicechecks.greedy_equality`;
2. ``chi_square``   -- :func:`specdec.measure.devicechecks.first_two_token_test` (its p-value from
                       scipy where it imports, else :func:`specdec.theory.chisquare.chi2_sf`; the
                       section's ``method`` says which);
3. ``roofline``     -- :func:`specdec.measure.device.device_roofline`;
4. ``shape:<name>`` -- per shape of :data:`specdec.engine.randomllama.SHAPES`, random weights
                       (:func:`~specdec.engine.randomllama.random_llama`): the cost surface
                       (:func:`specdec.measure.surfaces.cost_surface`), the kernels' time on CUDA
                       (:func:`~specdec.measure.surfaces.kernel_time_surface`) and the engine's own
                       step (:func:`~specdec.measure.surfaces.engine_forward_times`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from specdec.engine.randomllama import QUICK_SHAPE, SHAPES, random_llama
from specdec.experiments.options import Program, option
from specdec.measure.device import device_info, device_roofline, device_slug, free_memory
from specdec.measure.devicechecks import first_two_token_test, greedy_equality
from specdec.measure.runner import Deadline, Recorder, RunSettings
from specdec.measure.surfaces import (
    B1_EXTRA_KS,
    GRID_BATCHES,
    GRID_KS,
    cost_surface,
    engine_forward_times,
    kernel_time_surface,
)
from specdec.theory.checks import Refused, check_choice, check_float, check_int

__all__ = ["GpuRecord", "GpuRecordRun", "plan", "run_record"]


@dataclass
class GpuRecord(RunSettings):
    """The GPU record's design (:meth:`GpuRecordRun.settings` makes it from the options), checked as
    it is made (a ValueError names the field and its range; an unknown shape among them). The record
    stores :meth:`to_record` with the run's plan (:func:`plan`) as its ``settings``."""

    out: str = "results/gpu"
    device: str = "cuda"
    dtype: str = "bfloat16"
    budget_s: float = 300.0
    quick: bool = False
    shapes: list[str] | None = None
    context: int = 128
    repeats: int = 20
    warmup: int = 3
    chi2_runs: int = 3000
    chi2_cap_s: float = 45.0
    threads: int | None = None
    skip_correctness: bool = False

    def __post_init__(self) -> None:
        for name in ("context", "repeats", "chi2_runs"):
            check_int(name, getattr(self, name), low=1)
        check_int("warmup", self.warmup, low=0)
        if self.threads is not None:
            check_int("threads", self.threads, low=1)
        check_float("budget_s", self.budget_s, low=0.0)
        check_float("chi2_cap_s", self.chi2_cap_s, low=0.0)
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be float32, bfloat16 or float16; got {self.dtype!r}")
        plan(self)  # an unknown shape is refused here


def plan(settings: Any) -> dict[str, Any]:
    """The grid and the shapes of a run (``settings``: the command line's; quick: the scaled-down
    shape and a small grid). An unknown shape name is a ValueError."""
    s = settings
    if s.quick:
        return {
            "shapes": {"quick": QUICK_SHAPE},
            "batches": (1, 2),
            "ks": (1, 2, 3),
            "b1_extra_ks": (4,),
            "context": min(s.context, 16),
            "repeats": min(s.repeats, 3),
            "warmup": min(s.warmup, 1),
            "chi2_runs": min(s.chi2_runs, 200),
            "engine_ks": (1, 4),
            "copy_mib": 8,
            "matmul_n": (128,),
        }
    names = s.shapes if s.shapes else list(SHAPES)
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        raise ValueError(f"unknown shapes {unknown}; choose from {list(SHAPES)}")
    return {
        "shapes": {n: SHAPES[n] for n in names},
        "batches": GRID_BATCHES,
        "ks": GRID_KS,
        "b1_extra_ks": B1_EXTRA_KS,
        "context": s.context,
        "repeats": s.repeats,
        "warmup": s.warmup,
        "chi2_runs": s.chi2_runs,
        "engine_ks": (1, 4, 8),
        "copy_mib": 1024,
        "matmul_n": (4096, 8192),
    }


def run_record(
    settings: GpuRecord, *, command: str | None = None, log: Callable[[str], None] = print
) -> Path:
    """The GPU record's run: every step as a section of ``<out>/<device-slug>[-quick].json``.

    ``settings`` is the run's design (:class:`GpuRecord`), recorded with the plan (:func:`plan`);
    ``command`` (the program's, :meth:`GpuRecordRun.command`) is recorded when given. Returns the
    record's path.
    """
    s = settings
    deadline = Deadline(s.budget_s)
    import torch

    from specdec.measure.core import environment

    if s.threads:
        torch.set_num_threads(s.threads)
    if torch.device(s.device).type == "cuda" and not torch.cuda.is_available():
        raise Refused("CUDA is not available here; on a CPU run with --device cpu --quick")
    dtype = getattr(torch, s.dtype)
    p = plan(s)
    info = device_info(s.device)
    slug = device_slug(info["name"]) + ("-quick" if s.quick else "")
    rec = Recorder(Path(s.out) / f"{slug}.json", settings={**s.to_record(), **p}, log=log)
    rec.data["device"] = info
    rec.data["environment"] = environment(device=s.device, dtype=s.dtype)
    rec.data["engine"] = "eager Hugging Face transformers, sdpa attention, no CUDA graphs, no compile"
    if command is not None:
        rec.data["command"] = command
    rec.save()
    log(
        f"gpu_record: {info['name']} | torch {torch.__version__} (CUDA {torch.version.cuda}) | "
        f"transformers {rec.data['environment']['transformers']} | budget {s.budget_s:.0f} s | "
        f"-> {rec.path}"
    )

    # 1-2. Correctness of the engine on the device (float32, tiny models).
    if s.skip_correctness:
        rec.skip("greedy", "--skip-correctness")
        rec.skip("chi_square", "--skip-correctness")
    else:
        with rec.section("greedy") as out:
            out.update(greedy_equality(s.device))
            log(
                f"  greedy equal: {out['all_equal']}, matches CPU: {out['all_match_cpu']}, "
                f"block-vs-step logits diff {out['block_vs_step_logits_max_abs_diff']:.2e}"
            )
        if deadline.allows(60):
            cap = min(s.chi2_cap_s, max(deadline.left() - 60, 1.0))
            with rec.section("chi_square") as out:
                out.update(first_two_token_test(s.device, n=p["chi2_runs"], time_cap_s=cap, progress=log))
                log(
                    f"  chi-square: {out['runs']} runs, p = {out['pvalue']:.3g} ({out['method']}), "
                    f"passed: {out['passed']}"
                )
        else:
            rec.skip("chi_square", f"budget: {deadline.left():.0f} s left")
        free_memory(s.device)

    # 3. The device's roofline: bandwidth, matmul throughput in the timing dtype, ridge point.
    with rec.section("roofline") as out:
        out.update(
            device_roofline(
                s.device, dtype, copy_mib=p["copy_mib"], matmul_n=p["matmul_n"], repeats=p["warmup"] + 7
            )
        )
        log(
            f"  roofline: {out['bandwidth_gb_s']:.0f} GB/s, {out['peak_tflop_s']:.1f} TFLOP/s {s.dtype}, "
            f"ridge {out['ridge_flop_per_byte']:.0f} FLOP/byte"
        )
    free_memory(s.device)

    # 4. Shape-true targets: T(b, k) in the timing dtype.
    for name, shape in p["shapes"].items():
        section = f"shape:{name}"
        if not deadline.allows(10):
            rec.skip(section, f"budget: {deadline.left():.0f} s left")
            continue
        with rec.section(section) as out:
            _shape_section(out, name, shape, s, p, dtype, deadline, rec, log)
        free_memory(s.device)  # the model is gone with the section: free the GPU for the next shape

    return rec.finish(deadline, f"skipped {[x['section'] for x in rec.data['status']['skipped']]}")


def _shape_section(
    out: dict[str, Any],
    name: str,
    shape: dict[str, Any],
    s: Any,
    p: dict[str, Any],
    dtype: Any,
    deadline: Deadline,
    rec: Recorder,
    log: Callable[[str], None],
) -> None:
    """One shape's section: the model built, its cost surface, its kernels' time (CUDA), the engine's step."""
    import torch

    out["config"] = dict(shape)
    out["dtype"] = s.dtype
    t0 = time.monotonic()
    model = random_llama(shape, s.device, dtype)
    out["build_s"] = time.monotonic() - t0
    out["params"] = sum(t.numel() for t in model.parameters())
    out["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    log(f"  {name}: {out['params'] / 1e6:.1f} M parameters built in {out['build_s']:.1f} s")

    def save_partial(surface: dict[str, Any]) -> None:
        out["surface"] = surface
        rec.save()

    grid = {k: p[k] for k in ("batches", "ks", "b1_extra_ks", "context", "repeats", "warmup")}
    out["surface"] = cost_surface(
        model,
        **grid,
        deadline=deadline,
        on_block=save_partial,
        log=log,
    )
    cells = {(c["b"], c["k"]): c for c in out["surface"]["cells"]}
    if (1, 1) in cells:
        out["step_s"] = cells[(1, 1)]["median_s"]
        log(f"  {name}: T(1,1) = {1e3 * out['step_s']:.2f} ms")
    if torch.device(s.device).type == "cuda" and deadline.allows(10):
        try:  # the hardware's T(b, k): kernel time, free of eager launch overhead
            out["kernels"] = kernel_time_surface(model, context=p["context"], deadline=deadline, log=log)
        except Exception as exc:  # noqa: BLE001  (recorded, the run goes on)
            out["kernels"] = {"error": f"{type(exc).__name__}: {exc}"}
            log(f"  kernels failed: {out['kernels']['error']}")
        rec.save()
    if deadline.allows(5):
        out["engine"] = engine_forward_times(
            model, context=p["context"], ks=p["engine_ks"], repeats=p["repeats"], warmup=p["warmup"]
        )
    out["memory"] = free_memory(s.device)  # the peak while this shape ran


# --------------------------------------------------------------------------- the program
def _log(msg: str) -> None:
    print(msg, flush=True)


@dataclass(frozen=True)
class GpuRecordRun(Program):
    """The GPU record (issue #12, item 4): the engine's CUDA paths, and T(b, k) of shape-true targets.

    One command on a machine with one CUDA GPU, torch and transformers (no network, no weights, no
    install: the repository as the working directory; ``make gpu-record`` is the same):

        PYTHONUNBUFFERED=1 PYTHONPATH=. python3 -m specdec run gpu-record --out results/gpu

    Steps, each saved to ``<out>/<device-slug>.json`` as soon as it ends (a timeout keeps them):

    1. ``greedy``       -- greedy speculative == greedy autoregressive on the GPU, float32, tiny
                           random Llamas of the test suite, model and prompt-lookup drafters;
    2. ``chi_square``   -- the joint law of the first two tokens at temperature 1 over N runs
                           against the exact law (losslessness on the GPU);
    3. ``roofline``     -- memory bandwidth (a 1 GiB copy), bf16 matmul TFLOP/s, the ridge point;
    4. ``shape:<name>`` -- per shape (SmolLM2-135M, SmolLM2-1.7B, Llama-2-7B), random weights in
                           bfloat16 built on the GPU: T(b, k) for b in 1..64 and k in 1..8 (k up to
                           32 at b = 1) on a cached context, and the engine's own step.

    A global budget (``--budget-s``) is checked between cells; what it cuts is listed as skipped (a
    one-shot run: the exit status is 0). On a CPU, ``--device cpu --quick`` runs a scaled-down
    version in seconds (the tests do). Eager transformers, sdpa attention, no CUDA graphs. The steps
    are :func:`run_record`'s.

        specdec run gpu-record --device cpu --quick --threads 1 --out /tmp/gpu
    """

    name: ClassVar[str] = "gpu-record"

    out: str = option("results/gpu", "folder of the JSON record")
    device: str = option("cuda", "the torch device")
    dtype: str = option(
        "bfloat16", "dtype of the shape-true targets", choices=("float32", "bfloat16", "float16")
    )
    budget_s: float = option(300.0, "global time budget, checked between cells")
    quick: bool = option(False, "a scaled-down run (CPU tests)")
    shapes: tuple[str, ...] | None = option(None, f"any of {','.join(SHAPES)} (default: all)")
    context: int = option(128, "cached tokens per sequence")
    repeats: int = option(20, "timed calls per cell")
    warmup: int = option(3, "untimed calls before a cell's timed ones")
    chi2_runs: int = option(3000, "speculative runs of the chi-square test")
    chi2_cap_s: float = option(45.0, "time cap of the chi-square runs")
    threads: int | None = option(None, "torch CPU threads (default: torch's)")
    skip_correctness: bool = option(False, "skip the greedy and chi-square steps")

    def check(self) -> None:
        for shape in self.shapes or ():
            check_choice("shapes", shape, SHAPES)
        self.settings()  # the settings check themselves

    def settings(self) -> GpuRecord:
        """The run's design, as the record stores it (with its plan)."""
        given = self.options()
        given["shapes"] = None if self.shapes is None else list(self.shapes)
        return GpuRecord(**given)

    def run(self) -> int:
        run_record(self.settings(), command=self.command(), log=_log)
        return 0  # one-shot: what the budget cut is listed as skipped in the record
