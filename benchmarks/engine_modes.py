"""Engine benchmark (issue #10): every engine side by side on the same machine and threads.

Engines: transformers' model as loaded before the lean engine ("hf-float32", "hf-bfloat16":
the *before*), the lean engine in each mode ("lean-float32", "lean-bfloat16", "lean-int4":
the *after*), and llama.cpp on the same GGUF when ``llama_cpp`` is importable ("llama.cpp";
build it with ``pip install llama-cpp-python``, several minutes of C++). All run through
specdec's own loops (``autoregressive``, ``speculative``), so only the forward differs.

Steps (named functions below), all interleaved (a fresh engine order per pass) and repeated:

1. ``verify_curve``  -- T(k) of one call over k new tokens after a cached prompt, k = 1..16;
2. ``decode``        -- per prompt: plain greedy decoding of ``--new-tokens`` tokens (EOS
                        suppressed: equal lengths), and greedy prompt lookup (gamma
                        ``--gamma``) on the same prompt; tokens/s of each (decoding time:
                        the prompt's prefill excluded) and their ratio;
   ``profile``       -- where a step's and a verify call's CPU time goes, per torch engine;
   ``roofline``      -- the machine's measured roof and the step it predicts per format;
3. ``summarize``     -- per engine: median T(k)/T(1), plain tokens/s, lookup over plain,
                        each with a 95 % bootstrap interval over prompts (specdec.intervals);
                        and every engine's plain tokens/s over llama.cpp's (and over hf-float32's).

Also the mode that :func:`specdec.modes.choose_mode` picks here. Writes one JSON record
(``--out``, default ``results/bench/engine-modes-<cpu>-<threads>t.json``) with the machine
named. About 10 minutes with the defaults on 1 thread.

    python benchmarks/engine_modes.py --threads 1
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec import llamacpp  # noqa: E402
from specdec.decoding import autoregressive, speculative  # noqa: E402
from specdec.drafters import PromptLookupDrafter  # noqa: E402
from specdec.gpurecord import device_slug  # noqa: E402
from specdec.intervals import bootstrap_ci, ratio_ci  # noqa: E402
from specdec.lean import MODES, LeanLlama, int4_supported  # noqa: E402
from specdec.lm import open_lm  # noqa: E402
from specdec.measure import environment, write_result  # noqa: E402
from specdec.models import load_target, set_threads, smollm2_gguf_path  # noqa: E402
from specdec.modes import choose_mode  # noqa: E402
from specdec.roofline import machine_roofline, predict_verify_curve, profile_step  # noqa: E402
from specdec.workloads import evaluation_prompts  # noqa: E402

ALL_ENGINES = ("hf-float32", "hf-bfloat16", *(f"lean-{m}" for m in MODES), "llama.cpp")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--engines", default=None, help=f"comma list from {ALL_ENGINES} (default: all available)")
    ap.add_argument("--prompts-per-task", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--gamma", type=int, default=4, help="prompt-lookup draft length")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ks", default="1,2,3,4,5,6,8,12,16")
    ap.add_argument("--verify-repeats", type=int, default=9)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    for name in ("threads", "prompts_per_task", "new_tokens", "gamma", "repeats", "verify_repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    args.ks = sorted({int(k) for k in args.ks.split(",")})
    if args.ks[0] != 1:
        ap.error("--ks must include 1 (the step every ratio divides by)")
    wanted = ALL_ENGINES if args.engines is None else tuple(args.engines.split(","))
    unknown = [e for e in wanted if e not in ALL_ENGINES]
    if unknown:
        ap.error(f"unknown engines {unknown}; choose from {ALL_ENGINES}")
    if "llama.cpp" in wanted and not llamacpp.available():
        if args.engines is not None:
            ap.error("llama.cpp requested but llama_cpp is not importable (pip install llama-cpp-python)")
        print("llama_cpp is not importable: llama.cpp is left out (pip install llama-cpp-python)", flush=True)
        wanted = tuple(e for e in wanted if e != "llama.cpp")
    if "lean-int4" in wanted and not int4_supported():
        wanted = tuple(e for e in wanted if e != "lean-int4")
    args.engine_names = wanted
    return args


def build_engines(names: tuple[str, ...], threads: int) -> tuple[dict[str, Any], Any]:
    """The engines by name, and the tokenizer (one float32 load feeds the lean modes)."""
    engines: dict[str, Any] = {}
    base = load_target("float32")
    for name in names:
        if name == "hf-float32":
            engines[name] = base.model
        elif name == "hf-bfloat16":
            engines[name] = load_target("bfloat16").model
        elif name.startswith("lean-"):
            engines[name] = LeanLlama(base.model, name.removeprefix("lean-"))
        elif name == "llama.cpp":
            engines[name] = llamacpp.LlamaCppModel(smollm2_gguf_path(), threads=threads)
    return engines, base


def verify_curve(engines: dict[str, Any], prompt_ids: list[int], ks: list[int], repeats: int) -> dict:
    """T(k) per engine after the prompt is cached; engines and ks in a fresh order per pass."""
    rng = np.random.default_rng(0)
    sessions = {}
    for name, model in engines.items():
        s = open_lm(model)
        s.forward(prompt_ids, keep=1)
        sessions[name] = s
    new = list(range(1000, 1000 + max(ks)))
    times: dict[str, dict[int, list[float]]] = {n: {k: [] for k in ks} for n in engines}
    context = len(prompt_ids)
    for rep in range(repeats + 1):  # the first pass warms up
        for i in rng.permutation(len(engines)):
            name = list(engines)[i]
            s = sessions[name]
            if name == "llama.cpp":  # one llama.cpp context: re-feed the prompt after others ran
                s = sessions[name] = open_lm(engines[name])
                s.forward(prompt_ids, keep=1)
            for j in rng.permutation(len(ks)):
                k = ks[j]
                t0 = time.perf_counter()
                s.forward(new[:k])
                dt = time.perf_counter() - t0
                s.crop(context)
                if rep:
                    times[name][k].append(dt)
    out = {}
    for name in engines:
        one = np.asarray(times[name][1])
        cells = []
        for k in ks:
            t = np.asarray(times[name][k])
            # paired by pass (the k-call and the 1-call of one pass ran back to back)
            est, lo, hi = (
                ratio_ci(t, one) if len(t) > 1 else (float(np.median(t) / np.median(one)), None, None)
            )
            cells.append(
                {
                    "k": k,
                    "median_s": float(np.median(t)),
                    "ratio_to_k1": est,
                    "ratio_rule": "geometric mean over passes of T(k)/T(1), paired by pass",
                    "ratio_ci": [lo, hi],
                    "samples_s": t.tolist(),
                }
            )
        out[name] = cells
        line = " ".join(f"{c['k']}:{c['ratio_to_k1']:.2f}" for c in cells)
        print(f"  verify {name:14s} T(1) = {1e3 * np.median(one):6.1f} ms  T(k)/T(1) {line}", flush=True)
    return {"context": context, "ks": ks, "repeats": repeats, "engines": out}


def decode(
    engines: dict[str, Any], prompt_list: list[dict], new_tokens: int, gamma: int, repeats: int
) -> dict:
    """Plain and prompt-lookup greedy decoding per prompt and engine, interleaved, EOS suppressed."""
    rng = np.random.default_rng(1)
    rows = []
    for rep in range(repeats):
        for p in prompt_list:
            for i in rng.permutation(len(engines)):
                name = list(engines)[i]
                model = engines[name]
                order = ("plain", "lookup") if (rep + i) % 2 == 0 else ("lookup", "plain")
                row: dict[str, Any] = {"engine": name, "prompt": p["id"], "task": p["task"], "repeat": rep}
                for kind in order:
                    t0 = time.perf_counter()
                    if kind == "plain":
                        gen = autoregressive(model, p["ids"], max_new_tokens=new_tokens)
                    else:
                        gen = speculative(
                            model, PromptLookupDrafter(), p["ids"], gamma=gamma, max_new_tokens=new_tokens
                        )
                    dt = time.perf_counter() - t0
                    decode_s = dt - gen.stats.prefill_s  # the prompt's prefill is not decoding
                    row[f"{kind}_s"] = dt
                    row[f"{kind}_prefill_s"] = gen.stats.prefill_s
                    row[f"{kind}_tokens"] = list(gen.tokens)
                    row[f"{kind}_tok_s"] = len(gen.tokens) / decode_s
                    if kind == "lookup":
                        row["lookup_tokens_per_round"] = gen.stats.mean_tokens_per_round
                row["greedy_exact"] = row["plain_tokens"] == row["lookup_tokens"]
                rows.append(row)
        print(f"  decode pass {rep + 1}/{repeats} done", flush=True)
    return {"new_tokens": new_tokens, "gamma": gamma, "repeats": repeats, "rows": rows}


def _feed(session: Any, new: list[int], k: int) -> Any:
    return session.forward(new[:k])


def profile(engines: dict[str, Any], prompt_ids: list[int], ks: tuple[int, ...] = (1, 4)) -> dict:
    """Where a step's (k = 1) and a verify call's (k = 4) CPU time goes, per torch engine
    (specdec.roofline.profile_step: linear layers, attention, other ops, framework overhead)."""
    out: dict[str, Any] = {}
    new = list(range(1000, 1000 + max(ks)))
    for name, model in engines.items():
        if name == "llama.cpp":
            continue  # not a torch forward: the profiler sees one opaque call
        s = open_lm(model)
        s.forward(prompt_ids, keep=1)
        context = len(prompt_ids)
        out[name] = {}
        for k in ks:
            prof = profile_step(partial(_feed, s, new), k=k, repeats=5, reset=partial(s.crop, context))
            out[name][str(k)] = {
                key: prof[key] for key in ("buckets_ms", "wall_ms", "wall_ms_unprofiled", "top_ops")
            }
        b = out[name]["1"]["buckets_ms"]
        print(
            f"  profile {name:14s} k=1: " + ", ".join(f"{key} {v:.1f} ms" for key, v in b.items()), flush=True
        )
    return out


def roofline(threads: int, config: Any) -> dict:
    """The machine's measured roof at these threads, and the step it predicts per weight format."""
    roof = machine_roofline(threads=threads)
    predictions = {}
    int4 = {"default": "int4", "lm_head": "bfloat16", "embedding": "bfloat16"}  # as the lean int4 mode
    for fmt, dtype in (("float32", "float32"), ("bfloat16", "bfloat16"), (int4, "bfloat16")):
        curve = predict_verify_curve(
            config, [1, 2, 4, 8, 16], roof, dtype=dtype, context=128, weight_format=fmt
        )
        predictions[fmt if isinstance(fmt, str) else "int4"] = curve
    return {"machine": roof, "predicted": predictions}


def summarize(verify: dict, dec: dict, engines: list[str]) -> dict:
    """Per engine: plain tokens/s, lookup over plain and T(4)/T(1), each with a 95 % interval."""
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
            "lookup_over_plain": ratio_ci(lookup, plain[e]),
            "greedy_exact": all(r["greedy_exact"] for r in rows if r["engine"] == e),
            "step_ms": 1e3 * cells[1]["median_s"],
        }
        for k in (4, 8):
            if k in cells:
                entry[f"T{k}_over_T1"] = [cells[k]["ratio_to_k1"], *cells[k]["ratio_ci"]]
        for ref in ("llama.cpp", "hf-float32"):
            if ref in plain and ref != e:
                entry[f"plain_over_{ref}"] = ratio_ci(plain[e], plain[ref])
        out["engines"][e] = entry
        line = f"  {e:14s} plain {entry['plain_tok_s'][0]:6.1f} tok/s"
        if "plain_over_llama.cpp" in entry:
            est, lo, hi = entry["plain_over_llama.cpp"]
            line += f" | vs llama.cpp {est:.2f} [{lo:.2f}, {hi:.2f}]"
        if "T4_over_T1" in entry:
            line += f" | T(4)/T(1) {entry['T4_over_T1'][0]:.2f}"
        est, lo, hi = entry["lookup_over_plain"]
        print(line + f" | lookup/plain {est:.2f} [{lo:.2f}, {hi:.2f}]", flush=True)
    return out


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    set_threads(args.threads)
    command = "python benchmarks/engine_modes.py " + " ".join(sys.argv[1:] if argv is None else argv)
    engines, base = build_engines(args.engine_names, args.threads)
    print(f"engines: {', '.join(engines)}; threads {args.threads}", flush=True)
    probe = choose_mode(base.model, refresh=True)
    print(f"choose_mode: {probe['mode']} ({probe['rule']})", flush=True)
    plist = evaluation_prompts(base.tokenizer, args.prompts_per_task)
    env = environment(dtype="mixed", device="cpu")  # at the start: the commit and tree that ran
    t0 = time.time()
    roof = roofline(args.threads, base.model.config)
    verify = verify_curve(engines, plist[0]["ids"], args.ks, args.verify_repeats)
    prof = profile(engines, plist[0]["ids"])
    dec = decode(engines, plist, args.new_tokens, args.gamma, args.repeats)
    summary = summarize(verify, dec, list(engines))
    slug = device_slug(env["device_name"])
    out = (
        Path(args.out)
        if args.out
        else ROOT / "results" / "bench" / f"engine-modes-{slug}-{args.threads}t.json"
    )
    probe_light = {k: v for k, v in probe.items() if k != "cached"}
    record = {
        "kind": "engine-modes",
        "command": command,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "chosen_mode": probe_light,
        "roofline": roof,
        "verify": verify,
        "profile": prof,
        "decode": dec,
        "summary": summary,
        "wall_s": time.time() - t0,
    }
    path = write_result(out, record, env=env)
    print(f"-> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
    return path


if __name__ == "__main__":
    main()
