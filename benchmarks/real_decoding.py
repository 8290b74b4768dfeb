"""Real speculative decoding on SmolLM2: alpha, c, expected and measured speedups, per task and drafter.

The measurement behind the chapter "Real speculative decoding on SmolLM2" (notebooks/src/real-decoding.md).

    python benchmarks/real_decoding.py            # the full run (see the chapter for its runtime)
    python benchmarks/real_decoding.py --quick    # a small run (a few minutes)

Steps, in order (one thread by default, the device chosen automatically: CUDA when present):

1. Plain decoding of every evaluation prompt at temperature 0 and 1 (seeded), interleaved with
   speculative decoding of the same prompt by every drafter at a fixed gamma, in a seeded
   random order per prompt. The plain outputs are the target's generations: they are stored
   (``generations-<tag>.json``) and are the text alpha is measured on.
2. Table 3: the paper's alpha (mean over response positions of sum_x min(p, q), teacher-forced
   on the target's generations, :mod:`specdec.acceptance`) next to the acceptance fraction of
   the speculative runs (accepted / examined drafts, :class:`specdec.stats.Stats`).
3. Tables 2/4: per task, drafter and temperature: gamma, alpha, c (draft time per round /
   gamma / one target step of plain decoding), v = T(gamma+1)/T(1) (verify cost,
   :func:`specdec.measure.verify_cost_curve`), the speedups expected by Theorem 3.8 and with
   v, the measured speedup (time per token of plain over speculative decoding, prefill
   excluded, median over prompts), their ratio and its decomposition (:func:`specdec.realrun.speedup_gap`).
4. Per-position acceptance and accepted-count histograms (:func:`specdec.realrun.pool_rounds`).
5. A gamma sweep for two drafters on one task at temperature 0.
6. Argmax lenience (Appendix A.5): the sweep's model draft at temperature 0 and the fixed gamma,
   for each l of ``--lenience``; each output is stored, to compare with plain greedy decoding
   and with the same drafter at l = 1 (which differs from plain only by rounding).

Writes ``results/real/<device>-<dtype>-<threads>t[-quick].json`` (with ``measure.environment()``)
and CSVs of the tables next to it.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
from tqdm import tqdm

from specdec.acceptance import target_p_rows, teacher_forced
from specdec.decoding import autoregressive, speculative
from specdec.drafters import (
    BigramDrafter,
    EarlyExitDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    UnigramDrafter,
)
from specdec.measure import environment, forward_times, verify_cost_curve, write_result
from specdec.models import load_target, pick_device, set_threads
from specdec.realrun import pool_rounds, speedup_gap
from specdec.sampling import warp
from specdec.theory import optimal_gamma, walltime_speedup, walltime_speedup_measured
from specdec.workloads import TASKS, chat_prompt_ids, load_workload, training_prompts

ROOT = Path(__file__).resolve().parents[1]
EE_DEPTHS = (8, 20, 28)


def ngram_corpus(target, tokenizer, folders: list[Path], n_fallback: int, max_new: int, seed: int):
    """Target-generated responses for the n-gram tables: the distillation shards when present
    (``python -m specdec.distill gen-data``, training prompts disjoint from the evaluation),
    else fresh temperature-1 generations on ``n_fallback`` training prompts."""
    shards = [s for folder in folders for s in sorted(folder.glob("shard-*.npz"))]
    if shards:
        seqs = []
        for s in shards:
            z = np.load(s)
            for st, pl, rl in zip(z["starts"], z["prompt_lens"], z["resp_lens"], strict=True):
                seqs.append(z["ids"][st + pl : st + pl + rl].astype(np.int64))
        where = ", ".join(relative(str(f.resolve())) for f in folders if any(f.glob("shard-*.npz")))
        tokens = sum(len(x) for x in seqs)
        return seqs, f"{len(shards)} distillation shards ({tokens} response tokens) in {where}"
    seqs = []
    for i, p in enumerate(training_prompts(n_fallback, seed=seed)):
        ids = chat_prompt_ids(tokenizer, p.prompt)
        g = autoregressive(target, ids, max_new_tokens=max_new, temperature=1.0, seed=seed + i)
        seqs.append(np.asarray(g.tokens))
    return seqs, f"temperature-1 generations on {n_fallback} training prompts (seed {seed})"


def build_drafters(target, corpus, trained: list[str], depths=EE_DEPTHS) -> dict:
    vocab = target.config.vocab_size
    out = {f"ee-{n}": EarlyExitDrafter(target, n) for n in depths}
    out["lookup"] = PromptLookupDrafter(max_ngram=3, min_ngram=1)
    out["unigram"] = UnigramDrafter.from_token_ids(corpus, vocab)
    out["bigram"] = BigramDrafter.from_token_ids(corpus, vocab)
    if trained:
        from specdec.draftnets import load_draft

        for name in trained:
            out[f"draft-{name}"] = ModelDrafter(load_draft(name, target), target=target)
    return out


def run_one(target, drafter, ids, gamma, temperature, max_new, seed, eos, lenience=1.0) -> dict:
    start = time.perf_counter()
    if drafter is None:
        g = autoregressive(
            target, ids, max_new_tokens=max_new, temperature=temperature, seed=seed, eos_token_id=eos
        )
    else:
        g = speculative(
            target,
            drafter,
            ids,
            gamma=gamma,
            max_new_tokens=max_new,
            temperature=temperature,
            lenience=lenience,
            seed=seed,
            eos_token_id=eos,
        )
    total = time.perf_counter() - start
    s = g.stats
    return {"tokens": g.tokens, "total_s": total, "decode_s": total - s.prefill_s, "stats": s}


def finite(obj):
    """NaN and infinity -> None, recursively (JSON cannot store them)."""
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if isinstance(obj, (float, np.floating)) and not np.isfinite(obj):
        return None
    return obj


def relative(value):
    """A path under the repository as a relative POSIX path (also inside lists); anything else unchanged."""
    if isinstance(value, list):
        return [relative(v) for v in value]
    if isinstance(value, str) and Path(value).is_absolute() and Path(value).is_relative_to(ROOT):
        return Path(value).relative_to(ROOT).as_posix()
    return value


def per_token(run: dict) -> float:
    return run["decode_s"] / max(run["stats"].new_tokens, 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 prompts a task, 48 new tokens, a short sweep")
    ap.add_argument("--prompts", type=int, default=6, help="evaluation prompts per task (default 6)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--gamma", type=int, default=4, help="fixed gamma of Tables 2/4 (default 4)")
    ap.add_argument("--sweep", default="1,2,3,4,6,8", help="gammas of the sweep")
    ap.add_argument(
        "--sweep-drafters",
        default="auto",
        help="comma-separated drafters of the gamma sweep; auto: lookup and the model draft "
        "(early exit or distilled) with the highest measured speedup on the sweep task at temperature 0",
    )
    ap.add_argument("--sweep-task", default="code", choices=TASKS)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--ngram-data",
        nargs="+",
        default=[str(d) for d in sorted(ROOT.glob("data/distill*")) if d.is_dir()],
        help="gen-data folders for the n-gram tables (default: every data/distill* folder)",
    )
    ap.add_argument("--early-exit", default=",".join(map(str, EE_DEPTHS)), help="early-exit depths")
    ap.add_argument("--lenience", default="1,0.5,0.3,0.1", help="argmax lenience values (A.5); empty: skip")
    ap.add_argument("--no-trained", action="store_true", help="skip the trained drafts (specdec.draftnets)")
    ap.add_argument(
        "--drafts",
        default=None,
        help="comma-separated trained drafts (default: every one in specdec/data/drafts)",
    )
    ap.add_argument("--out", default=str(ROOT / "results" / "real"))
    args = ap.parse_args(argv)
    if args.quick:
        args.prompts, args.max_new_tokens, args.sweep = 2, 48, "1,2,4,6"
    sweep = [int(g) for g in args.sweep.split(",")]
    lenience_values = [float(x) for x in args.lenience.split(",") if x]  # checked before hours of runs
    if any(not 0 < lv <= 1 for lv in lenience_values):
        ap.error(f"--lenience values must lie in (0, 1]; got {args.lenience!r}")
    if args.sweep_drafters == "auto" and args.no_trained and not args.early_exit.strip(","):
        ap.error("--sweep-drafters auto needs a model draft: drop --no-trained or give --early-exit depths")
    trained = []  # a requested draft that is missing is an error here, before the target loads
    if args.no_trained and args.drafts is not None:
        ap.error("--drafts and --no-trained exclude each other")
    if not args.no_trained:
        from specdec.draftnets import require_drafts

        try:
            trained = require_drafts(None if args.drafts is None else args.drafts.split(","))
        except (ValueError, FileNotFoundError) as exc:
            ap.error(f"{exc} (--no-trained runs without trained drafts)")
    started = time.perf_counter()

    threads = set_threads(args.threads)
    device = pick_device(args.device)
    loaded = load_target(args.dtype, device=device, quiet=True)
    target, tok = loaded.model, loaded.tokenizer
    eos = tok.eos_token_id
    env = environment(model=target)
    env.update(threads_info=threads, attn_implementation=loaded.attn_implementation)
    tag = f"{device.split(':')[0]}-{args.dtype}-{args.threads}t" + ("-quick" if args.quick else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    folders = [Path(d) for d in args.ngram_data]
    corpus, corpus_source = ngram_corpus(target, tok, folders, 12, args.max_new_tokens, 1000)
    depths = [int(n) for n in args.early_exit.split(",") if n]
    drafters = build_drafters(target, corpus, trained, depths)
    names = list(drafters)
    if args.sweep_drafters != "auto" and not set(args.sweep_drafters.split(",")) <= set(names):
        ap.error(f"--sweep-drafters {args.sweep_drafters!r}: each must be one of {names}")
    print(f"[real] {tag}: drafters {names}; n-grams from {corpus_source}", file=sys.stderr)

    prompts = {t: load_workload(t)[: args.prompts] for t in TASKS}
    prompt_ids = {(t, p.id): chat_prompt_ids(tok, p.prompt) for t in TASKS for p in prompts[t]}
    mean_prompt = int(np.mean([len(v) for v in prompt_ids.values()]))

    # -- costs measured on clean forwards: verify cost T(k)/T(1) and c of the model drafters
    ks = range(1, max([args.gamma, *sweep]) + 2)
    prefix = mean_prompt + args.max_new_tokens // 2
    vc = verify_cost_curve(target, prefix, ks, repeats=10 if args.quick else 30, seed=args.seed)
    verify = dict(zip(vc.ks, vc.ratios, strict=True))
    models = {"target": target} | {n: d.lm.model for n, d in drafters.items() if isinstance(d, ModelDrafter)}
    ft = forward_times(models, prefix, (1,), repeats=10 if args.quick else 30, seed=args.seed)
    t1 = ft[("target", 1)].median_s
    c_forward = {n: ft[(n, 1)].median_s / t1 for n in models if n != "target"}

    # -- 1: plain and speculative runs, interleaved per prompt
    rng = np.random.default_rng(args.seed)
    runs, generations = [], []
    cells = [(temp, t, p) for temp in (0.0, 1.0) for t in TASKS for p in prompts[t]]
    for i, (temp, task, p) in enumerate(tqdm(cells, desc="runs", file=sys.stderr)):
        ids = prompt_ids[(task, p.id)]
        seed = args.seed + i
        for j in rng.permutation(len(names) + 1):
            name = "plain" if j == len(names) else names[j]
            r = run_one(target, drafters.get(name), ids, args.gamma, temp, args.max_new_tokens, seed, eos)
            runs.append(
                {"task": task, "prompt": p.id, "temperature": temp, "drafter": name, "seed": seed, **r}
            )
            if name == "plain":
                generations.append(
                    {
                        "task": task,
                        "prompt": p.id,
                        "temperature": temp,
                        "seed": seed,
                        "prompt_ids": ids,
                        "response": r["tokens"],
                    }
                )

    # -- 2: teacher-forced alpha on the target's generations
    tf_rows = []
    for g in tqdm(generations, desc="teacher forcing", file=sys.stderr):
        seq = g["prompt_ids"] + g["response"]
        if len(g["response"]) < 1:
            continue
        warp_fn = partial(warp, temperature=g["temperature"])
        p_rows = target_p_rows(target, seq, len(g["prompt_ids"]), warp_fn)
        for name, d in drafters.items():
            res = teacher_forced(target, d, seq, len(g["prompt_ids"]), warp_fn, p=p_rows)
            tf_rows.append(
                {k: g[k] for k in ("task", "prompt", "temperature")}
                | {
                    "drafter": name,
                    "beta_sum": float(np.nansum(res.beta)),
                    "drafted": res.drafted,
                    "positions": len(res.beta),
                }
            )

    # -- 3/4: aggregate per task x drafter x temperature
    def plain_of(task, prompt, temp):
        return next(
            r
            for r in runs
            if (r["task"], r["prompt"], r["temperature"], r["drafter"]) == (task, prompt, temp, "plain")
        )

    table = []
    for temp in (0.0, 1.0):
        for task in TASKS:
            for name in names:
                sel = [r for r in runs if (r["task"], r["temperature"], r["drafter"]) == (task, temp, name)]
                tfs = [
                    r for r in tf_rows if (r["task"], r["temperature"], r["drafter"]) == (task, temp, name)
                ]
                alpha = sum(r["beta_sum"] for r in tfs) / max(sum(r["drafted"] for r in tfs), 1)
                coverage = sum(r["drafted"] for r in tfs) / max(sum(r["positions"] for r in tfs), 1)
                pooled = pool_rounds(r["stats"] for r in sel)
                steps = [plain_of(task, r["prompt"], temp)["stats"] for r in sel]
                t_step = [s.target_s / s.target_calls for s in steps]
                c_round = [
                    (r["stats"].draft_s / r["stats"].rounds) / args.gamma / ts
                    for r, ts in zip(sel, t_step, strict=True)
                ]
                v_run = [
                    (r["stats"].target_s / r["stats"].rounds) / ts for r, ts in zip(sel, t_step, strict=True)
                ]
                speed = [per_token(plain_of(task, r["prompt"], temp)) / per_token(r) for r in sel]
                c = statistics.median(c_round)
                measured = statistics.median(speed)
                v = verify[args.gamma + 1]
                draft_cost = statistics.median(
                    (r["stats"].draft_s / r["stats"].rounds) / ts for r, ts in zip(sel, t_step, strict=True)
                )
                ks_run = [k for r in sel for k in r["stats"].drafted]
                v_obs = float(np.mean([verify[k + 1] for k in ks_run]))
                gap = speedup_gap(
                    alpha,
                    args.gamma,
                    c,
                    v,
                    pooled["tokens_per_round"],
                    measured,
                    draft_cost=draft_cost,
                    verify_cost_observed=v_obs,
                )
                table.append(
                    {
                        "task": task,
                        "temperature": temp,
                        "drafter": name,
                        "gamma": args.gamma,
                        "alpha": alpha,
                        "alpha_coverage": coverage,
                        "accept_fraction": pooled["alpha_accept_rate"],
                        "c": c,
                        "c_forward": c_forward.get(name),
                        "verify_cost": v,
                        "verify_cost_in_run": statistics.median(v_run),
                        "optimal_gamma": int(optimal_gamma(alpha, c)),
                        "tokens_per_round": pooled["tokens_per_round"],
                        "draft_cost": draft_cost,
                        "verify_cost_observed": v_obs,
                        "greedy_exact": (
                            all(r["tokens"] == plain_of(task, r["prompt"], temp)["tokens"] for r in sel)
                            if temp == 0
                            else None
                        ),
                        "prompts": len(sel),
                        **{k: gap[k] for k in gap},
                        "pooled": pooled,
                    }
                )

    # -- 5: gamma sweep (temperature 0, one task)
    sweep_rows = []
    task = args.sweep_task
    if args.sweep_drafters == "auto":
        model_rows = [
            row
            for row in table
            if row["task"] == task
            and row["temperature"] == 0
            and isinstance(drafters[row["drafter"]], ModelDrafter)
        ]
        best_model = max(model_rows, key=lambda row: row["measured"])["drafter"]
        sweep_drafters = ["lookup", best_model]
    else:
        sweep_drafters = [n for n in args.sweep_drafters.split(",") if n in drafters]
    sweep_cells = [(p, g, n) for p in prompts[task] for g in sweep for n in sweep_drafters]
    plain_t = {p.id: plain_of(task, p.id, 0.0) for p in prompts[task]}
    for p, g, n in tqdm(sweep_cells, desc="gamma sweep", file=sys.stderr):
        ids = prompt_ids[(task, p.id)]
        base = run_one(
            target, None, ids, g, 0.0, args.max_new_tokens, args.seed, eos
        )  # a fresh plain run, adjacent
        r = run_one(target, drafters[n], ids, g, 0.0, args.max_new_tokens, args.seed, eos)
        ts = base["stats"].target_s / base["stats"].target_calls
        sweep_rows.append(
            {
                "prompt": p.id,
                "gamma": g,
                "drafter": n,
                "speedup": per_token(base) / per_token(r),
                "tokens_per_round": r["stats"].mean_tokens_per_round,
                "c": (r["stats"].draft_s / r["stats"].rounds) / g / ts,
                "exact": r["tokens"] == plain_t[p.id]["tokens"],
            }
        )
    sweep_summary = []
    for n in sweep_drafters:
        alpha = next(
            row["alpha"]
            for row in table
            if (row["task"], row["temperature"], row["drafter"]) == (task, 0.0, n)
        )
        for g in sweep:
            sel = [r for r in sweep_rows if (r["drafter"], r["gamma"]) == (n, g)]
            c = statistics.median(r["c"] for r in sel)
            sweep_summary.append(
                {
                    "drafter": n,
                    "gamma": g,
                    "alpha": alpha,
                    "c": c,
                    "verify_cost": verify[g + 1],
                    "measured": statistics.median(r["speedup"] for r in sel),
                    "theorem": float(walltime_speedup(alpha, g, c)),
                    "with_verify": float(walltime_speedup_measured(alpha, g, c, verify[g + 1])),
                    "tokens_per_round": statistics.median(r["tokens_per_round"] for r in sel),
                }
            )

    # -- 6: argmax lenience (Appendix A.5) on the sweep task: the best model draft, gamma fixed
    lenience_rows = []
    len_drafter = next((n for n in sweep_drafters if isinstance(drafters[n], ModelDrafter)), None)
    if lenience_values and len_drafter is not None:
        cells = [(p, lv) for p in prompts[task] for lv in lenience_values]
        for p, lv in tqdm(cells, desc="argmax lenience", file=sys.stderr):
            ids = prompt_ids[(task, p.id)]
            base = run_one(target, None, ids, args.gamma, 0.0, args.max_new_tokens, args.seed, eos)
            r = run_one(
                target, drafters[len_drafter], ids, args.gamma, 0.0, args.max_new_tokens, args.seed, eos, lv
            )
            greedy = plain_t[p.id]["tokens"]
            same = sum(a == b for a, b in zip(r["tokens"], greedy, strict=False))
            lenience_rows.append(
                {
                    "prompt": p.id,
                    "lenience": lv,
                    "drafter": len_drafter,
                    "gamma": args.gamma,
                    "accepted": r["stats"].accepted_tokens,
                    "examined": r["stats"].examined,
                    "tokens_per_round": r["stats"].mean_tokens_per_round,
                    "speedup": per_token(base) / per_token(r),
                    "prefix_equal": next(
                        (i for i, (a, b) in enumerate(zip(r["tokens"], greedy, strict=False)) if a != b),
                        min(len(r["tokens"]), len(greedy)),
                    ),
                    "same_position": same / max(len(greedy), 1),
                    "tokens": r["tokens"],
                }
            )

    # -- write
    def slim(r):
        s = r["stats"]
        return {k: v for k, v in r.items() if k not in ("stats", "tokens")} | {
            "new_tokens": s.new_tokens,
            "stats": s.summary(),
        }

    gen_path = out / f"generations-{tag}.json"
    gen_path.write_text(
        json.dumps({"kind": "generations", "seed": args.seed, "generations": generations}) + "\n"
    )
    record = {
        "kind": "real-decoding",
        "tag": tag,
        "command": "python benchmarks/real_decoding.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "settings": {k: relative(v) for k, v in vars(args).items()},  # no absolute paths in records
        "target": {
            "name": loaded.name,
            "dtype": loaded.dtype,
            "device": loaded.device,
            "layers": target.config.num_hidden_layers,
        },
        "drafters": names,
        "trained_drafts": trained,
        "ngram_source": corpus_source,
        "prompts_per_task": args.prompts,
        "verify_cost": vc.to_dict(),
        "c_forward": c_forward,
        "step_ms": 1e3 * t1,
        "table": table,
        "teacher_forced": tf_rows,
        "sweep": {"task": task, "rows": sweep_rows, "summary": sweep_summary},
        "lenience": {"task": task, "temperature": 0.0, "rows": lenience_rows},
        "runs": [slim(r) for r in runs],
        "generations_file": gen_path.name,
        "runtime_min": (time.perf_counter() - started) / 60,
    }
    path = write_result(out / f"{tag}.json", finite(record), env=env)
    cols = [k for k in table[0] if k != "pooled"]
    with (out / f"{tag}-table.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        w.writerows({k: row[k] for k in cols} for row in table)
    with (out / f"{tag}-sweep.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, list(sweep_summary[0]))
        w.writeheader()
        w.writerows(sweep_summary)
    print(f"[real] wrote {path.name} in {record['runtime_min']:.1f} min", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
