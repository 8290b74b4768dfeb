"""The engine benchmark: every engine side by side on the same machine, threads and prompts.

Engines: transformers' model as loaded ("hf-float32", "hf-bfloat16": the engine before the
lean one), the lean engine in each mode ("lean-float32", "lean-bfloat16", "lean-int4"), and
llama.cpp on the same GGUF when ``llama_cpp`` is importable ("llama.cpp"; ``pip install
llama-cpp-python``). All run through specdec's own loops (``autoregressive``, ``speculative``),
so only the forward differs. Used by ``specdec bench`` and ``specdec run engine-modes``
(:class:`specdec.experiments.enginemodes.EngineModesRun`).

Steps (:func:`run_bench`), all interleaved (a fresh engine order per pass) and repeated:

1. ``verify``   -- T(k) of one call over k new tokens after a cached prompt
                   (:func:`specdec.measure.core.engine_verify_curves`);
2. ``decode``   -- per prompt: plain greedy decoding of ``new_tokens`` tokens (EOS suppressed:
                   equal lengths), and greedy prompt lookup at ``gamma`` on the same prompt;
                   tokens/s of each (decoding time: the prompt's prefill excluded);
   ``profile``  -- where a step's and a verify call's CPU time goes, per torch engine;
   ``roofline`` -- the machine's measured roof and the step it predicts per weight format;
   ``draft_costs`` -- c of every distilled draft in each mode that keeps its weights, and of
                   the early-exit draft, against the lean target's step (:func:`draft_costs`);
3. ``summarize`` -- per engine: T(1), T(4)/T(1) and T(8)/T(1), plain tokens/s, lookup over
                   plain, each with a 95 % bootstrap interval over prompts (specdec.theory.intervals),
                   and every engine's plain tokens/s over llama.cpp's and over hf-float32's.

Also the mode that :func:`specdec.measure.modes.choose_mode` picks here. The record's format is the one
``results/bench/engine-modes-*.json`` hold (read by :mod:`specdec.analysis.hardware`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np

from specdec.theory.checks import check_int
from specdec.train.workloads import check_per_task

__all__ = [
    "ALL_ENGINES",
    "VARIANTS",
    "BenchSettings",
    "build_engines",
    "decode",
    "draft_costs",
    "engine_list",
    "profile",
    "resolve_engines",
    "roofline",
    "run_bench",
    "summarize",
]

ALL_ENGINES = (
    "hf-float32",
    "hf-bfloat16",
    "lean-float32",
    "lean-bfloat16",
    "lean-int4",
    "lean-q4_1",
    "lean-q4q8",
    "llama.cpp",
    "llama.cpp-q4_0",
)
#: Variants of lean-int4 that undo one of its choices, run only when named: what each choice
#: costs or saves, measured in the same interleaved run (``lean-int4-bf16head``: the LM head
#: dense in bfloat16 instead of the 8-bit code in two int4 halves; ``lean-int4-blockattn``:
#: one masked attention call over a verify block instead of row by row, so a block's rows
#: are no longer bit-equal to single steps).
VARIANTS = {
    "lean-int4-bf16head": ("int4", {"int8_head": False}),
    "lean-int4-blockattn": ("int4", {"exact_verify": False}),
}

Log = Callable[[str], None]


def _print(line: str) -> None:
    print(line, flush=True)


@dataclass
class BenchSettings:
    """What one benchmark run measures; the defaults are the full run (about 10 minutes on 1 thread).

    ``engines`` is the comma list asked for (None: every available engine); ``engine_names`` the
    engines that run (:func:`resolve_engines`). ``ks`` are the call sizes of the verify curve
    (1 among them); ``verify_repeats`` its passes, ``repeats`` the decoding passes.
    """

    threads: int = 1
    engines: str | None = None
    prompts_per_task: int = 2
    new_tokens: int = 64
    gamma: int = 4
    repeats: int = 3
    ks: list[int] | tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8, 12, 16)
    verify_repeats: int = 9
    engine_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("threads", "prompts_per_task", "new_tokens", "gamma", "repeats", "verify_repeats"):
            value = getattr(self, name)
            check_int(name, value, low=1)
        check_per_task("prompts_per_task", self.prompts_per_task)  # not silently fewer than asked
        check_int("verify_repeats", self.verify_repeats, low=2, note="c's interval is over the passes")
        ks = sorted({int(k) for k in self.ks})
        if not ks or ks[0] != 1:
            raise ValueError(
                f"ks must include 1 (the step every ratio divides by) and no k < 1; got {self.ks!r}"
            )
        self.ks = ks
        if self.engine_names is None:
            self.engine_names = resolve_engines(self.engines)

    def record(self) -> dict[str, Any]:
        """The settings as the record stores them."""
        out = asdict(self)
        out["engine_names"] = list(self.engine_names)
        return out


def engine_list(engines: str | Sequence[str] | None) -> tuple[str, ...]:
    """The engines asked for: a comma list (or sequence) from :data:`ALL_ENGINES` and :data:`VARIANTS`,
    or None for :data:`ALL_ENGINES`; an unknown name raises ValueError. Nothing is probed (no torch):
    :func:`resolve_engines` says which of them this machine runs."""
    if engines is None:
        return ALL_ENGINES
    wanted = tuple(e.strip() for e in engines.split(",")) if isinstance(engines, str) else tuple(engines)
    unknown = [e for e in wanted if e not in ALL_ENGINES and e not in VARIANTS]
    if unknown or not wanted:
        raise ValueError(f"unknown engines {unknown}; choose from {', '.join((*ALL_ENGINES, *VARIANTS))}")
    return wanted


def resolve_engines(
    engines: str | Sequence[str] | None, *, log: Log = _print, strict: bool = True
) -> tuple[str, ...]:
    """The engines to run: a comma list (or sequence) from :data:`ALL_ENGINES`, or None for every
    available one. An unknown name raises ValueError (:func:`engine_list`); so does an engine asked
    for by name that this machine cannot run (llama.cpp not importable, no C compiler for lean-q4_1,
    torch without the int4 kernels), unless ``strict`` is False (a default list, not the user's): then
    it is left out and said on ``log``, as with None."""
    wanted = engine_list(engines)
    from specdec.engine import llamacpp, native
    from specdec.engine.lean import int4_supported

    strict = strict and engines is not None
    # (engines, whether this machine runs them, why not): each checked only when asked for
    needs = (
        (
            ("llama.cpp", "llama.cpp-q4_0"),
            llamacpp.available,
            lambda: "llama_cpp is not importable (pip install llama-cpp-python)",
        ),
        (
            ("lean-q4_1",),
            native.available,
            lambda: f"the C forward cannot be built: {native.unavailable_reason()}",
        ),
        (
            ("lean-q4q8",),
            lambda: native.available("q4q8"),
            lambda: f"the q4q8 C forward cannot be built: {native.unavailable_reason('q4q8')}",
        ),
        (("lean-int4", *VARIANTS), int4_supported, lambda: "this torch lacks the CPU int4 kernels"),
    )
    for names, runs, why in needs:
        asked = [e for e in wanted if e in names]
        if not asked or runs():
            continue
        if strict:
            raise ValueError(f"{', '.join(asked)} requested but {why()}")
        log(f"{', '.join(asked)} left out: {why()}")
        wanted = tuple(e for e in wanted if e not in asked)
    return wanted


def build_engines(names: Sequence[str], threads: int) -> tuple[dict[str, Any], Any]:
    """The engines by name, and the loaded float32 target (one float32 load feeds the lean modes)."""
    from specdec.engine.builder import EngineSpec, open_engine, open_model

    engines: dict[str, Any] = {}
    base = open_engine(EngineSpec("hf", "float32", threads, device="cpu")).base
    for name in names:
        if name == "hf-float32":
            engines[name] = base.model
        elif name == "hf-bfloat16":
            engines[name] = open_engine(EngineSpec("hf", "bfloat16", threads, device="cpu")).model
        elif name in VARIANTS or name.startswith("lean-"):
            mode, options = VARIANTS.get(name, (name.removeprefix("lean-"), {}))
            engines[name] = open_model(base.model, EngineSpec("lean", mode, threads, options=options)).model
        elif name in ("llama.cpp", "llama.cpp-q4_0"):  # the shipped Q4_1 GGUF, or llama.cpp's best CPU
            fmt = "q4_0" if name.endswith("q4_0") else "q4_1"  # format here (not the same weights)
            engines[name] = open_engine(EngineSpec("llama.cpp", fmt, threads, loop="eval"), base=base).model
    return engines, base


def draft_costs(
    target: Any,
    base_model: Any,
    prompt_ids: Sequence[int],
    threads: int,
    *,
    repeats: int = 9,
    early_exit: Sequence[int] = (8,),
    log: Log | None = _print,
) -> dict[str, Any]:
    """c (Definition 3.7) of every saved distilled draft in each mode that keeps its weights (keyed by
    its registry spec and mode: ``draft:distil-l1/q4q8``, ``early-exit:8/q4q8``)
    (:func:`specdec.measure.modes.draft_modes`: the torch modes, and q4q8 on the drafts' own int8
    codes) and of the early-exit drafts of ``target``, against ``target``'s step: T(1) of each,
    interleaved with the target's in one run (:func:`specdec.measure.core.engine_verify_curves`),
    c of a pass = :func:`specdec.engine.stats.cost_coefficient` in its bare-forward unit
    (T_draft(1) / T_target(1) of the same pass, ``rounds = gamma = 1``: no loop around either), and c =
    the geometric mean over passes with its 95 % bootstrap interval. Every draft runs at ``threads``
    (torch's modes on torch's threads). The C forward's drafts and torch's are timed in two groups,
    each with the target."""
    from specdec.engine.builder import EngineSpec, draft_modes, open_draft
    from specdec.engine.lean import LeanLlama
    from specdec.engine.stats import cost_coefficient
    from specdec.measure.core import engine_verify_curves
    from specdec.measure.modes import timing_groups
    from specdec.theory.intervals import bootstrap_ci, geomean
    from specdec.train.draftnets import list_drafts, load_draft

    models: dict[str, Any] = {}
    for name in list_drafts():
        hf = load_draft(name, base_model)
        for mode in draft_modes(hf):
            models[f"draft:{name}/{mode}"] = open_draft(hf, EngineSpec("lean", mode, threads)).model
    if isinstance(target, LeanLlama):
        for n in early_exit:
            if 1 <= n < target.num_layers:
                models[f"early-exit:{n}/{target.mode}"] = target.early_exit(n)
    out, groups = {}, {}
    for label, names in timing_groups({name: m.mode for name, m in models.items()}):  # each with the target
        group = {name: models[name] for name in names}
        curves = engine_verify_curves({"target": target, **group}, prompt_ids, [1], repeats, log=log)[
            "engines"
        ]
        base = np.asarray(curves["target"][0]["samples_s"])
        groups[label] = {"target_step_ms": 1e3 * float(np.median(base)), "target_samples_s": base.tolist()}
        for name in group:
            t = np.asarray(curves[name][0]["samples_s"])
            per_pass = [cost_coefficient(d, 1, 1, b) for d, b in zip(t, base, strict=True)]  # bare forward
            c, lo, hi = bootstrap_ci(per_pass, geomean)
            out[name] = {"group": label, "step_ms": 1e3 * float(np.median(t)), "c": c, "c_ci": [lo, hi],
                         "samples_s": t.tolist()}  # fmt: skip
            if log is not None:
                log(f"  c of {name}: {c:.3f} [{lo:.3f}, {hi:.3f}] ({out[name]['step_ms']:.2f} ms per step)")
    return {
        "target": getattr(target, "mode", type(target).__name__),
        "threads": threads,
        "context": len(prompt_ids),
        "rule": (
            "geometric mean over passes of T_draft(1) / T_target(1), paired by pass, the target timed in "
            "each group (C-forward drafts; torch drafts); 95 % bootstrap"
        ),
        "groups": groups,
        "drafts": out,
    }


def decode(
    engines: dict[str, Any],
    prompt_list: list[dict],
    new_tokens: int,
    gamma: int,
    repeats: int,
    *,
    log: Log = _print,
) -> dict:
    """Plain and prompt-lookup greedy decoding per prompt and engine, interleaved, EOS suppressed
    (:func:`specdec.measure.pairedrun.timed_generation`)."""
    from specdec.drafting.registry import build_drafter
    from specdec.measure.pairedrun import timed_generation

    rng = np.random.default_rng(1)
    rows = []
    for rep in range(repeats):
        for j, p in enumerate(prompt_list):
            log(f"  decode pass {rep + 1}/{repeats}: prompt {j + 1}/{len(prompt_list)} ({p['id']})")
            for i in rng.permutation(len(engines)):
                name = list(engines)[i]
                model = engines[name]
                order = ("plain", "lookup") if (rep + i) % 2 == 0 else ("lookup", "plain")
                row: dict[str, Any] = {"engine": name, "prompt": p["id"], "task": p["task"], "repeat": rep}
                for kind in order:
                    drafter = build_drafter("lookup") if kind == "lookup" else None
                    # q4q8: its C threads, torch on one (the decoding loop's engine_owns_cores)
                    tokens, stats, dt = timed_generation(
                        model, drafter, p["ids"], gamma=gamma, new_tokens=new_tokens
                    )
                    decode_s = dt - stats.prefill_s  # the prompt's prefill is not decoding
                    row[f"{kind}_s"] = dt
                    row[f"{kind}_prefill_s"] = stats.prefill_s
                    row[f"{kind}_tokens"] = tokens
                    row[f"{kind}_tok_s"] = len(tokens) / decode_s
                    if kind == "lookup":
                        row["lookup_tokens_per_round"] = stats.mean_tokens_per_round
                row["greedy_exact"] = row["plain_tokens"] == row["lookup_tokens"]
                rows.append(row)
        log(f"  decode pass {rep + 1}/{repeats} done")
    return {"new_tokens": new_tokens, "gamma": gamma, "repeats": repeats, "rows": rows}


def _feed(session: Any, new: list[int], k: int) -> Any:
    return session.forward(new[:k])


def profile(
    engines: dict[str, Any], prompt_ids: list[int], ks: tuple[int, ...] = (1, 4), *, log: Log = _print
) -> dict:
    """Where a step's (k = 1) and a verify call's (k = 4) CPU time goes, per engine but llama.cpp
    (specdec.measure.profile.profile_step: linear layers, attention, other ops, framework overhead;
    for the C forwards their own phase clocks, specdec.measure.profile.profile_native_step)."""
    from specdec.engine import leannative
    from specdec.engine.lm import open_lm
    from specdec.measure.profile import profile_native_step, profile_step

    out: dict[str, Any] = {}
    new = list(range(1000, 1000 + max(ks)))
    for name, model in engines.items():
        if name.startswith("llama.cpp"):
            continue  # not a torch forward: the profiler sees one opaque call
        s = open_lm(model)
        s.forward(prompt_ids, keep=1)
        context = len(prompt_ids)
        out[name] = {}
        for k in ks:
            mode = getattr(model, "mode", None)
            if mode == "q4q8":
                prof = profile_native_step(
                    partial(_feed, s, new), k=k, repeats=5, reset=partial(s.crop, context),
                    clocks=model.q8_forward(), threads=model.threads,
                )  # fmt: skip
            elif mode == "q4_1":
                prof = profile_native_step(
                    partial(_feed, s, new), k=k, repeats=5, reset=partial(s.crop, context),
                    clocks=leannative.phase_clocks(model),
                )  # fmt: skip
            else:
                prof = profile_step(partial(_feed, s, new), k=k, repeats=5, reset=partial(s.crop, context))
            out[name][str(k)] = {
                key: prof[key] for key in ("buckets_ms", "wall_ms", "wall_ms_unprofiled", "top_ops")
            }
        b = out[name]["1"]["buckets_ms"]
        log(f"  profile {name:14s} k=1: " + ", ".join(f"{key} {v:.1f} ms" for key, v in b.items()))
    return out


def roofline(threads: int, config: Any) -> dict:
    """The machine's measured roof at these threads, and the step it predicts per weight format."""
    from specdec.measure.roofline import machine_roofline
    from specdec.theory.cost import predict_verify_curve

    roof = machine_roofline(threads=threads)
    predictions = {}
    int4 = {"default": "int4", "lm_head": "bfloat16", "embedding": "bfloat16"}  # as the lean int4 mode
    for fmt, dtype in (("float32", "float32"), ("bfloat16", "bfloat16"), (int4, "bfloat16")):
        curve = predict_verify_curve(
            config, [1, 2, 4, 8, 16], roof, dtype=dtype, context=128, weight_format=fmt
        )
        predictions[fmt if isinstance(fmt, str) else "int4"] = curve
    return {"machine": roof, "predicted": predictions}


def summarize(verify: dict, dec: dict, engines: list[str], *, log: Log = _print) -> dict:
    """Per engine: plain tokens/s, lookup over plain and T(4)/T(1), each with a 95 % interval. The
    speedups (lookup over plain, an engine's plain decoding over another's) are
    :func:`specdec.theory.intervals.paired_speedup` of the per-prompt medians' time per token."""
    from specdec.theory.intervals import bootstrap_ci, paired_speedup

    rows = dec["rows"]
    ids = sorted({r["prompt"] for r in rows})

    def per_prompt(engine: str, key: str) -> np.ndarray:
        return np.array(
            [np.median([r[key] for r in rows if r["engine"] == engine and r["prompt"] == p]) for p in ids]
        )

    out: dict[str, Any] = {"prompts": ids, "engines": {}}
    plain = {e: per_prompt(e, "plain_tok_s") for e in engines}
    for e in engines:
        lookup = per_prompt(e, "lookup_tok_s")
        cells = {c["k"]: c for c in verify["engines"][e]}
        entry = {
            "plain_tok_s": bootstrap_ci(plain[e], np.median),
            "lookup_over_plain": paired_speedup(1.0 / plain[e], 1.0 / lookup),  # time per token
            "greedy_exact": all(r["greedy_exact"] for r in rows if r["engine"] == e),
            "step_ms": 1e3 * cells[1]["median_s"],
        }
        for k in (4, 8):
            if k in cells:  # the verify-cost ratio of engine_verify_curves, not a speedup
                entry[f"T{k}_over_T1"] = [cells[k]["ratio_to_k1"], *cells[k]["ratio_ci"]]
        for ref in ("llama.cpp", "llama.cpp-q4_0", "hf-float32"):
            if ref in plain and ref != e:
                entry[f"plain_over_{ref}"] = paired_speedup(1.0 / plain[ref], 1.0 / plain[e])
        out["engines"][e] = entry
        line = f"  {e:14s} plain {entry['plain_tok_s'][0]:6.1f} tok/s"
        if "plain_over_llama.cpp" in entry:
            est, lo, hi = entry["plain_over_llama.cpp"]
            line += f" | vs llama.cpp {est:.2f} [{lo:.2f}, {hi:.2f}]"
        if "T4_over_T1" in entry:
            line += f" | T(4)/T(1) {entry['T4_over_T1'][0]:.2f}"
        est, lo, hi = entry["lookup_over_plain"]
        log(line + f" | lookup/plain {est:.2f} [{lo:.2f}, {hi:.2f}]")
    return out


def run_bench(
    settings: BenchSettings,
    *,
    command: str,
    refresh_probe: bool = True,
    with_roofline: bool = True,
    with_profile: bool = True,
    log: Log = _print,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the benchmark on this machine: ``(record, env)``, the record and the environment it ran
    in (taken at the start), ready for :func:`specdec.measure.core.write_result`.

    ``refresh_probe`` times the lean modes anew (:func:`specdec.measure.modes.choose_mode`) instead of
    reading this machine's cached probe. ``with_roofline`` and ``with_profile`` run those two
    steps (the full run does); a step left out is None in the record and named under
    ``"skipped"``.
    """
    from specdec.engine.models import set_threads
    from specdec.measure.core import engine_verify_curves, environment
    from specdec.measure.modes import choose_mode
    from specdec.train.workloads import evaluation_prompts

    set_threads(settings.threads)
    engines, base = build_engines(settings.engine_names, settings.threads)
    log(f"engines: {', '.join(engines)}; threads {settings.threads}")
    probe = choose_mode(base.model, refresh=refresh_probe, threads=settings.threads)
    log(f"choose_mode: {probe['mode']} ({probe['rule']})")
    plist = evaluation_prompts(base.tokenizer, settings.prompts_per_task)
    env = environment(dtype="mixed", device="cpu")  # at the start: the commit and tree that ran
    t0 = time.time()
    roof = roofline(settings.threads, base.model.config) if with_roofline else None
    verify = engine_verify_curves(
        engines, plist[0]["ids"], settings.ks, settings.verify_repeats, log=log,
        reopen=tuple(e for e in engines if e.startswith("llama.cpp")),
    )  # fmt: skip
    prof = profile(engines, plist[0]["ids"], log=log) if with_profile else None
    dec = decode(engines, plist, settings.new_tokens, settings.gamma, settings.repeats, log=log)
    summary = summarize(verify, dec, list(engines), log=log)
    lean_target = next((engines[n] for n in ("lean-q4q8", "lean-q4_1") if n in engines), None)
    costs = None
    if lean_target is not None:
        costs = draft_costs(
            lean_target,
            base.model,
            plist[0]["ids"],
            settings.threads,
            repeats=settings.verify_repeats,
            log=log,
        )
    record = {
        "kind": "engine-modes",
        "command": command,
        "settings": settings.record(),
        "chosen_mode": {k: v for k, v in probe.items() if k != "cached"},
        "roofline": roof,
        "verify": verify,
        "profile": prof,
        "decode": dec,
        "summary": summary,
        "draft_costs": costs,
        "wall_s": time.time() - t0,
    }
    if "lean-q4_1" in engines or "lean-q4q8" in engines:
        from specdec.engine import native

        record["native_build"] = native.build_info()
        if "lean-q4q8" in engines:
            record["native_build_q4q8"] = native.build_info("q4q8")
    if "llama.cpp-q4_0" in engines:
        record["llama.cpp-q4_0"] = (
            "the shipped Q4_1 GGUF requantized to Q4_0 by llama_model_quantize (allow_requantize): "
            "llama.cpp's fastest CPU format for this model, but NOT the same weights as the other engines"
        )
    skipped = [name for name, done in (("roofline", with_roofline), ("profile", with_profile)) if not done]
    if skipped:
        record["skipped"] = skipped
    return record, env
