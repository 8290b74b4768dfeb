"""Real speculative decoding on SmolLM2: alpha, c, expected and measured speedups, with intervals.

The measurement behind the chapter "Real speculative decoding on SmolLM2"
(notebooks/src/real-decoding.md).

    python benchmarks/real_decoding.py --quick    # the CI-sized record (minutes)
    python benchmarks/real_decoding.py            # the full record (see the chapter for its runtime)

Run it again with the same arguments after an interruption: it resumes after the last finished
cell (the state is saved after every cell in ``<tag>.partial.json``; ``--fresh`` discards it).

How it measures (issue 11):

* **Engine.** The target runs in the lean mode chosen by measuring this machine
  (:func:`specdec.measure.modes.lean_model` with ``"auto"``: of the modes :data:`specdec.engine.lean.MODES`
  this machine can run, :func:`specdec.measure.modes.available_modes`, the one with the lowest
  single-step time T(1); the probe is recorded), or the mode ``--mode`` names (a lean mode, or
  ``hf-float32``/``hf-bfloat16``: transformers, e.g. on a GPU). Early exits are views of the
  target; a distilled draft runs in the lean engine when the target does
  (:func:`specdec.measure.modes.lean_draft`: the faster of :data:`specdec.measure.modes.DRAFT_MODES`), else
  through transformers beside it.
* **Equal lengths.** Every generation, plain or speculative, has exactly ``--new-tokens`` new
  tokens: decoding does not stop at EOS (the target writes on past its end-of-turn token), so
  the tokens/s of plain and speculative decoding compare the same amount of work.
* **Cells.** A cell is (temperature, task, prompt); ``--prompts`` prompts a task
  (:func:`specdec.train.workloads.evaluation_prompts`), temperatures 0 and 1. A cell runs
  ``--repeats`` repetitions; each runs plain decoding and every timed drafter once, plain first
  in even repetitions and last in odd ones, the drafters in a fresh seeded order: the order
  alternates between plain and speculative. All runs of a cell share one sampling seed, so the
  repetitions repeat the same computation (checked: identical tokens). The time of a run is its
  decode time (prefill excluded).
* **Alpha.** After each cell, the paper's alpha (teacher-forced beta, :mod:`specdec.measure.acceptance`)
  of every drafter, the timed ones and the ``--alpha-only`` ones, on the plain generation.
* **Extras** on ``--sweep-task`` at temperature 0, cell by cell with the same interleaving: the
  gamma sweep (prompt lookup and the model draft with the highest measured speedup there) and
  argmax lenience (Appendix A.5) of that model draft at ``--gamma``.
* **Summary.** Per (temperature, task, drafter): the measured speedup, the geometric mean over
  prompts of plain time / speculative time (each the median over repetitions), with its 95 %
  bootstrap interval over prompts (:func:`specdec.theory.intervals.ratio_ci`) and a verdict; alpha,
  c (:func:`specdec.engine.stats.cost_coefficient`), v, Theorem 3.8 and the verify-corrected model,
  and measured/expected ratios with intervals that re-estimate alpha and c on every resample
  (:func:`specdec.analysis.realrun.unit_bootstrap`); the pooled round counts
  (:func:`specdec.analysis.realrun.pool_rounds`) and the gap's factors
  (:func:`specdec.analysis.realrun.speedup_gap`).

Writes ``results/real/<device>-<mode>-<threads>t[-quick].json`` (command, settings, the
machine and commit via :func:`specdec.measure.core.environment`), the generations, and CSVs of
the tables. A quick run also records its estimate of the full run's duration.
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
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec.analysis.realrun import RECORD_FORMAT  # noqa: E402
from specdec.analysis.realtables import (  # noqa: E402
    TEMPERATURES,
    alpha_rows,
    estimate_full_minutes,
    lenience_rows,
    sweep_rows,
    table_rows,
)
from specdec.engine.decoding import autoregressive  # noqa: E402
from specdec.engine.drafters import (  # noqa: E402
    BigramDrafter,
    EarlyExitDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    UnigramDrafter,
)
from specdec.engine.lean import MODES  # noqa: E402
from specdec.engine.models import load_target, pick_device, set_threads  # noqa: E402
from specdec.measure.acceptance import target_p_rows, teacher_forced  # noqa: E402
from specdec.measure.core import environment, write_record, write_result  # noqa: E402
from specdec.measure.pairedrun import finish_cell, paired_block, timed_generation  # noqa: E402
from specdec.theory.intervals import geomean, per_unit_medians  # noqa: E402
from specdec.theory.sampling import warp  # noqa: E402
from specdec.train.shards import load_shards, sequences, shard_paths  # noqa: E402
from specdec.train.workloads import chat_prompt_ids, evaluation_prompts, training_prompts  # noqa: E402

HF_MODES = ("hf-float32", "hf-bfloat16")
#: The full run's values of the settings --quick changes.
FULL = {
    "prompts": 8,
    "new_tokens": 48,
    "sweep": "1,2,4,6,8",
    "lenience": "1,0.5,0.3,0.1",
    "verify_repeats": 15,
}
#: What --quick changes: a CI-sized run (a value given on the command line wins).
QUICK = {
    "prompts": 3,
    "new_tokens": 32,
    "sweep": "1,2,4,6",
    "lenience": "1,0.3",
    "verify_repeats": 5,
}
#: The settings that must match for a partial run to be resumed.
RESUME_KEYS = (
    "quick",
    "prompts",
    "new_tokens",
    "repeats",
    "gamma",
    "sweep",
    "sweep_task",
    "sweep_drafters",
    "lenience",
    "timed",
    "alpha_only",
    "drafts",
    "no_trained",
    "mode",
    "threads",
    "seed",
)


# -- 1. arguments -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's settings, checked before anything is loaded (a missing draft is an error here)."""
    from specdec.train.workloads import TASKS

    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0]
        + " An interrupted run resumes: run the same command again (the state is saved after every "
        "cell in <out>/<mode>-<threads>t[-quick].partial.json; --fresh discards it).",
        epilog="python benchmarks/real_decoding.py --quick  (the CI-sized record, minutes); without "
        "--quick: the full record. The lean modes are specdec.engine.lean.MODES.",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"a CI-sized run: {QUICK}; a value given on the command line wins over these",
    )
    ap.add_argument(
        "--prompts", type=int, default=None, help="evaluation prompts per task (default 8; quick 3)"
    )
    ap.add_argument(
        "--new-tokens", type=int, default=None, help="new tokens of every generation (default 48; quick 32)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="timed repetitions per cell (default 3)")
    ap.add_argument("--gamma", type=int, default=4, help="fixed gamma of the tables (default 4)")
    ap.add_argument("--sweep", default=None, help="gammas of the sweep (default 1,2,4,6,8; quick 1,2,4,6)")
    ap.add_argument(
        "--sweep-drafters",
        default="auto",
        help="comma-separated drafters of the gamma sweep; auto: lookup and the timed model draft "
        "with the highest measured speedup on the sweep task at temperature 0",
    )
    ap.add_argument("--sweep-task", default="code", choices=TASKS)
    ap.add_argument(
        "--lenience",
        default=None,
        help="argmax lenience values (A.5; default 1,0.5,0.3,0.1; quick 1,0.3); empty: skip",
    )
    ap.add_argument(
        "--timed",
        default="lookup,bigram,drafts",
        help="drafters timed against plain decoding: lookup, unigram, bigram, ee-N, and 'drafts' "
        "(every trained draft asked for)",
    )
    ap.add_argument(
        "--alpha-only",
        default="ee-8,ee-20,ee-28,unigram",
        help="drafters whose alpha is measured (teacher forcing) but which are not timed",
    )
    ap.add_argument("--no-trained", action="store_true", help="no trained drafts (specdec.train.draftnets)")
    ap.add_argument("--drafts", default=None, help="comma-separated trained drafts (default: all saved)")
    ap.add_argument(
        "--mode",
        default="auto",
        help=f"auto (the mode probe: the lean mode with the fastest step here), a lean mode "
        f"({', '.join(MODES)}), or transformers' {', '.join(HF_MODES)}",
    )
    ap.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default=None,
        help="the option of records made before --mode existed (results/real/cpu-bfloat16-1t-quick.json): "
        "--dtype D runs as --mode hf-D, transformers in D, as those runs did; the method has changed "
        "since (commit 238e00e), so the numbers are comparable with today's records, not with that one",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch threads, >= 1 (default 1, as the records)")
    ap.add_argument(
        "--seed", type=int, default=0, help="the seed of sampling and of the run order (default 0)"
    )
    ap.add_argument(
        "--verify-repeats",
        type=int,
        default=None,
        help="repetitions of the verify-cost curve (default 15; quick 5)",
    )
    ap.add_argument(
        "--ngram-data",
        nargs="+",
        default=[str(d) for d in sorted(ROOT.glob("data/distill*")) if d.is_dir()],
        help="gen-data folders for the n-gram tables (default: every data/distill* folder)",
    )
    ap.add_argument("--fresh", action="store_true", help="discard a partial run instead of resuming it")
    ap.add_argument(
        "--out",
        default=str(ROOT / "results" / "real"),
        help="folder of the record, its CSVs and the partial state (default results/real)",
    )
    args = ap.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        given = getattr(args, key)
        if given is None:
            setattr(args, key, value)
        elif args.quick and given != value:
            flag = "--" + key.replace("_", "-")
            print(
                f"--quick with {flag} {given}: the value given wins (quick would use {value})",
                file=sys.stderr,
            )
    if args.dtype is not None:
        if args.mode != "auto":
            ap.error(f"--dtype (the old name) and --mode exclude each other; give --mode hf-{args.dtype}")
        args.mode = f"hf-{args.dtype}"
    for name in ("prompts", "new_tokens", "repeats", "gamma", "threads", "verify_repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be an integer >= 1; got {getattr(args, name)}")
    if args.new_tokens < args.gamma + 2:
        ap.error(f"--new-tokens must be >= gamma + 2 = {args.gamma + 2}; got {args.new_tokens}")
    try:
        args.sweep_gammas = sorted({int(g) for g in args.sweep.split(",") if g})
        args.lenience_values = [float(x) for x in args.lenience.split(",") if x]
    except ValueError as exc:
        ap.error(f"--sweep and --lenience take comma-separated numbers ({exc})")
    if any(g < 1 for g in args.sweep_gammas):
        ap.error(f"--sweep gammas must be >= 1; got {args.sweep!r}")
    if any(not 0 < lv <= 1 for lv in args.lenience_values):
        ap.error(f"--lenience values must lie in (0, 1]; got {args.lenience!r}")
    if args.lenience_values and 1.0 not in args.lenience_values:
        ap.error("--lenience must include 1 (the exact run the others are compared with)")
    if args.mode not in ("auto", *MODES, *HF_MODES):
        ap.error(f"--mode must be one of {', '.join(('auto', *MODES, *HF_MODES))}; got {args.mode!r}")
    if args.no_trained and args.drafts is not None:
        ap.error("--drafts and --no-trained exclude each other")
    args.trained = []
    if not args.no_trained:
        from specdec.train.draftnets import require_drafts

        try:
            args.trained = require_drafts(None if args.drafts is None else args.drafts.split(","))
        except (ValueError, FileNotFoundError) as exc:
            ap.error(f"{exc} (--no-trained runs without trained drafts)")
    try:
        args.timed_names = drafter_names(args.timed, args.trained)
        args.alpha_names = [
            n for n in drafter_names(args.alpha_only, args.trained) if n not in args.timed_names
        ]
    except ValueError as exc:
        ap.error(str(exc))
    if not args.timed_names:
        ap.error("--timed must name at least one drafter")
    if args.sweep_drafters != "auto":
        unknown = [n for n in args.sweep_drafters.split(",") if n not in args.timed_names]
        if unknown:
            ap.error(f"--sweep-drafters {unknown} must be timed drafters ({args.timed_names})")
    return args


def drafter_names(spec: str, trained: list[str]) -> list[str]:
    """Drafter names from a comma list: lookup, unigram, bigram, ee-N, draft-<name> or 'drafts'."""
    out: list[str] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item == "drafts":
            out += [f"draft-{n}" for n in trained]
        elif item in ("lookup", "unigram", "bigram"):
            out.append(item)
        elif item.startswith("ee-") and item[3:].isdigit() and int(item[3:]) >= 1:
            out.append(item)
        elif item.startswith("draft-") and item[6:] in trained:
            out.append(item)
        else:
            raise ValueError(
                f"unknown drafter {item!r}: use lookup, unigram, bigram, ee-N, drafts or draft-<name> "
                f"with name among the trained drafts {trained}"
            )
    return list(dict.fromkeys(out))


# -- 2. the engine, the drafters, the costs ---------------------------------------------------------


def load_engine(args: argparse.Namespace, saved_mode: str | None = None) -> dict[str, Any]:
    """The target in the chosen mode, the Hugging Face model behind it, the tokenizer, the mode probe."""
    mode = saved_mode or args.mode
    if mode == "auto" and pick_device(None).startswith("cuda"):
        mode = "hf-bfloat16"  # the lean forward is CPU-only
    if mode in HF_MODES:
        device = pick_device(None)
        loaded = load_target(mode.removeprefix("hf-"), device=device, quiet=True)
        return {
            "target": loaded.model,
            "base": loaded.model,
            "tokenizer": loaded.tokenizer,
            "mode": mode,
            "device": device,
            "probe": None,
            "loaded": loaded,
        }
    from specdec.measure.modes import lean_model, probe_summary

    loaded = load_target("float32", device="cpu", quiet=True)
    target, probe = lean_model(loaded.model, mode, threads=args.threads)  # the C forward's threads too
    return {
        "target": target,
        "base": loaded.model,
        "tokenizer": loaded.tokenizer,
        "mode": target.mode,
        "device": "cpu",
        "probe": None if probe is None else probe_summary(probe),
        "loaded": loaded,
    }


def ngram_corpus(engine: dict[str, Any], folders: list[Path], n_fallback: int, max_new: int, seed: int):
    """Target-generated responses for the n-gram tables: the distillation shards when present
    (``python -m specdec.train.distill gen-data``, training prompts disjoint from the evaluation), else
    temperature-1 generations of the target on ``n_fallback`` training prompts."""
    with_shards = [f for f in folders if shard_paths(f)]
    if with_shards:
        seqs = [s.response.astype(np.int64).tolist() for f in with_shards for s in sequences(load_shards(f))]
        where = ", ".join(relative(str(f.resolve())) for f in with_shards)
        return seqs, f"distillation shards ({sum(map(len, seqs))} response tokens) in {where}"
    seqs = []
    for i, p in enumerate(training_prompts(n_fallback, seed=seed)):
        ids = chat_prompt_ids(engine["tokenizer"], p.prompt)
        g = autoregressive(engine["target"], ids, max_new_tokens=max_new, temperature=1.0, seed=seed + i)
        seqs.append([int(t) for t in g.tokens])
    return seqs, f"temperature-1 generations of the target on {n_fallback} training prompts (seed {seed})"


def build_drafters(engine: dict[str, Any], names: list[str], corpus: list[list[int]]) -> dict[str, Any]:
    """The drafter of each name (see :func:`drafter_names`)."""
    target, vocab = engine["target"], int(engine["target"].config.vocab_size)
    out: dict[str, Any] = {}
    for name in names:
        if name == "lookup":
            out[name] = PromptLookupDrafter(max_ngram=3, min_ngram=1)
        elif name == "unigram":
            out[name] = UnigramDrafter.from_token_ids(corpus, vocab)
        elif name == "bigram":
            out[name] = BigramDrafter.from_token_ids(corpus, vocab)
        elif name.startswith("ee-"):
            out[name] = EarlyExitDrafter(target, int(name[3:]))
        else:
            from specdec.train.draftnets import load_draft

            draft = load_draft(name.removeprefix("draft-"), engine["base"])
            if engine["mode"] not in HF_MODES:  # a lean target: the draft runs in the lean engine too
                from specdec.measure.modes import lean_draft

                draft, _ = lean_draft(draft)
            engine.setdefault("draft_modes", {})[name] = getattr(draft, "mode", engine["mode"])
            out[name] = ModelDrafter(draft, target=engine["base"])
    return out


def verify_curve(engine: dict[str, Any], prefix: int, kmax: int, repeats: int) -> dict[str, Any]:
    """T(k)/T(1), k = 1..kmax, of the target as it decodes (interleaved, repeated medians)."""
    from specdec.measure.core import verify_cost_curve

    ks = list(range(1, kmax + 1))
    vc = verify_cost_curve(engine["target"], prefix, ks, repeats=repeats)  # any engine: the one T(k) loop
    return {
        "prefix_len": prefix,
        "ks": ks,
        "ratios": list(vc.ratios),
        "step_ms": 1e3 * vc.timings[0].median_s,
    }


# -- 3. one timed run -------------------------------------------------------------------------------


# -- 4. the partial state: save after every cell, resume ---------------------------------------------


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Write the state atomically (:func:`specdec.measure.core.write_record`: NaN -> null)."""
    write_record(path, state, indent=None, sort_keys=False)


def resume_state(path: Path, args: argparse.Namespace) -> dict[str, Any] | None:
    """The saved state of an interrupted run with the same settings; None when there is none."""
    if args.fresh or not path.exists():
        return None
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(state, dict):
            raise ValueError(f"a JSON {type(state).__name__}, not the state object")
    except (OSError, ValueError) as exc:
        raise SystemExit(
            f"{path} is damaged and cannot be resumed ({' '.join(str(exc).split())}): pass --fresh to "
            "discard it and start the run again"
        ) from None
    mine = {k: jsonable(getattr(args, k)) for k in RESUME_KEYS}
    if state.get("settings_key") != mine:
        diff = sorted(k for k in mine if state.get("settings_key", {}).get(k) != mine[k])
        raise SystemExit(
            f"{path} holds a partial run with other settings ({', '.join(diff)}): rerun it with its own "
            "command (in the file) to resume, or pass --fresh to discard it"
        )
    return state


# -- 5. the phases -----------------------------------------------------------------------------------


def main_cells(prompts: list[dict[str, Any]]) -> list[tuple[float, dict[str, Any]]]:
    return [(temp, p) for temp in TEMPERATURES for p in prompts]


def cell_id(phase: str, temp: float, prompt: dict[str, Any]) -> str:
    return f"{phase}|{temp:g}|{prompt['task']}|{prompt['id']}"


def run_main_phase(engine, drafters, alpha_drafters, prompts, args, state, save) -> None:
    """Timed runs and teacher forcing, cell by cell, saved after each."""
    configs = [{"drafter": n, "object": d, "gamma": args.gamma, "lenience": 1.0} for n, d in drafters.items()]
    cells = main_cells(prompts)
    for i, (temp, p) in enumerate(cells):
        cid = cell_id("main", temp, p)
        if cid in state["done"]:
            continue
        t0 = time.perf_counter()
        seed = args.seed + i
        rng = np.random.default_rng([args.seed, i])
        rows = []
        for rep in range(args.repeats):
            rows += paired_block(
                engine["target"],
                configs,
                p["ids"],
                temperature=temp,
                new_tokens=args.new_tokens,
                seed=seed,
                rep=rep,
                rng=rng,
            )
        base = {"phase": "main", "task": p["task"], "prompt": p["id"], "temperature": temp, "seed": seed}
        plain = next(r for r in rows if r["drafter"] == "plain" and r["rep"] == 0)["_tokens"]
        state["runs"] += finish_cell(rows, base)
        gen = {
            "task": p["task"],
            "prompt": p["id"],
            "temperature": temp,
            "seed": seed,
            "prompt_ids": p["ids"],
            "response": plain,
        }
        state["generations"].append(gen)
        state["teacher_forced"] += teacher_force(engine["target"], drafters | alpha_drafters, gen)
        state["done"].append(cid)
        save(time.perf_counter() - t0)
        print(
            f"[real] {len(state['done'])} cells done ({cid}, {time.perf_counter() - t0:.0f} s)",
            file=sys.stderr,
        )


def teacher_force(target, drafters: dict[str, Any], gen: dict[str, Any]) -> list[dict[str, Any]]:
    """beta summed over the positions each drafter drafts, on one plain generation."""
    seq, n = gen["prompt_ids"] + gen["response"], len(gen["prompt_ids"])
    warp_fn = partial(warp, temperature=gen["temperature"])
    p_rows = target_p_rows(target, seq, n, warp_fn)
    out = []
    for name, d in drafters.items():
        res = teacher_forced(target, d, seq, n, warp_fn, p=p_rows)
        out.append(
            {k: gen[k] for k in ("task", "prompt", "temperature")}
            | {
                "drafter": name,
                "beta_sum": float(np.nansum(res.beta)),
                "drafted": res.drafted,
                "positions": len(res.beta),
            }
        )
    return out


def choose_sweep_drafters(state, args, drafters) -> list[str]:
    """lookup and the timed model draft with the highest measured speedup on the sweep task at T = 0."""
    if args.sweep_drafters != "auto":
        return args.sweep_drafters.split(",")
    out = ["lookup"] if "lookup" in drafters else []
    models = [n for n, d in drafters.items() if isinstance(d, ModelDrafter)]
    if models:
        rows = [
            r
            for r in state["runs"]
            if r["phase"] == "main" and r["task"] == args.sweep_task and r["temperature"] == 0.0
        ]
        units, med = per_unit_medians(rows, "decode_s", group="drafter")
        best = max(models, key=lambda n: float(geomean(med["plain"] / med[n])))
        out.append(best)
    return out


def run_extra_phase(engine, drafters, prompts, args, state, save) -> None:
    """Gamma sweep and argmax lenience on the sweep task at temperature 0, cell by cell."""
    if state.get("sweep_drafters") is None:
        state["sweep_drafters"] = choose_sweep_drafters(state, args, drafters)
    names = state["sweep_drafters"]
    model = next((n for n in names if isinstance(drafters[n], ModelDrafter)), None)
    configs = [
        {"drafter": n, "object": drafters[n], "gamma": g, "lenience": 1.0}
        for n in names
        for g in args.sweep_gammas
    ]
    if model is not None:
        if args.gamma not in args.sweep_gammas and args.lenience_values:
            configs.append(
                {"drafter": model, "object": drafters[model], "gamma": args.gamma, "lenience": 1.0}
            )
        configs += [
            {"drafter": model, "object": drafters[model], "gamma": args.gamma, "lenience": lv}
            for lv in args.lenience_values
            if lv < 1
        ]
    if not configs:
        return
    cells = [p for p in prompts if p["task"] == args.sweep_task]
    for i, p in enumerate(cells):
        cid = cell_id("extra", 0.0, p)
        if cid in state["done"]:
            continue
        t0 = time.perf_counter()
        rng = np.random.default_rng([args.seed, 10_000 + i])
        rows = []
        for rep in range(args.repeats):
            rows += paired_block(
                engine["target"],
                configs,
                p["ids"],
                temperature=0.0,
                new_tokens=args.new_tokens,
                seed=args.seed,
                rep=rep,
                rng=rng,
            )
        base = {"phase": "extra", "task": p["task"], "prompt": p["id"], "temperature": 0.0, "seed": args.seed}
        slim = finish_cell(
            rows, base, lambda r: r["drafter"] == "plain" or (r["drafter"], r["gamma"]) == (model, args.gamma)
        )
        state["runs"] += slim
        state["done"].append(cid)
        save(time.perf_counter() - t0)
        print(
            f"[real] extra cell {i + 1}/{len(cells)} done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr
        )


# -- 7. writing ---------------------------------------------------------------------------------------


def jsonable(value):
    return value if isinstance(value, (str, int, float, bool, type(None), list)) else str(value)


def relative(value):
    """A path under the repository as a relative POSIX path (also inside lists); anything else unchanged."""
    if isinstance(value, list):
        return [relative(v) for v in value]
    if isinstance(value, str) and Path(value).is_absolute() and Path(value).is_relative_to(ROOT):
        return Path(value).relative_to(ROOT).as_posix()
    return value


def write_outputs(out: Path, tag: str, record: dict[str, Any], env: dict[str, Any]) -> Path:
    path = write_result(out / f"{tag}.json", record, env=env)
    table = record["table"]
    cols = [k for k in table[0] if k not in ("pooled", "per_prompt")]
    with (out / f"{tag}-table.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        w.writerows({k: row[k] for k in cols} for row in table)
    if record["sweep"]["rows"]:
        with (out / f"{tag}-sweep.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, list(record["sweep"]["rows"][0]))
            w.writeheader()
            w.writerows(record["sweep"]["rows"])
    return path


# -- 8. main ------------------------------------------------------------------------------------------


def full_settings() -> dict[str, Any]:
    """The full run's defaults (what a run without --quick does), for the quick run's estimate."""
    d = parse_args([])  # the defaults, with the package's drafts
    return {
        "prompts": d.prompts,
        "new_tokens": d.new_tokens,
        "repeats": d.repeats,
        "timed": d.timed_names,
        "sweep": d.sweep_gammas,
        "lenience": d.lenience_values,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python benchmarks/real_decoding.py " + " ".join(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    threads = set_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ppath = out / f"{args.mode}-{args.threads}t{'-quick' if args.quick else ''}.partial.json"
    state = resume_state(ppath, args)
    engine = load_engine(args, saved_mode=state["mode"] if state else None)
    tag = f"{engine['device'].split(':')[0]}-{engine['mode'].removeprefix('hf-')}-{args.threads}t" + (
        "-quick" if args.quick else ""
    )
    prompts = evaluation_prompts(engine["tokenizer"], args.prompts)
    if state is None:
        corpus, corpus_source = ngram_corpus(engine, [Path(d) for d in args.ngram_data], 12, 64, 1000)
        mean_prompt = int(np.mean([len(p["ids"]) for p in prompts]))
        kmax = max(args.gamma, *args.sweep_gammas) + 1
        curve = verify_curve(engine, mean_prompt + args.new_tokens // 2, kmax, args.verify_repeats)
        state = {
            "kind": "real-decoding-partial",
            "settings_key": {k: jsonable(getattr(args, k)) for k in RESUME_KEYS},
            "commands": [],
            "mode": engine["mode"],
            "probe": engine["probe"],
            "corpus": corpus,
            "ngram_source": corpus_source,
            "verify_cost": curve,
            "done": [],
            "runs": [],
            "generations": [],
            "teacher_forced": [],
            "sweep_drafters": None,
            "elapsed_s": 0.0,
            "setup_s": 0.0,
        }
    state["commands"].append(command)
    state["setup_s"] += time.perf_counter() - started
    last = [time.perf_counter()]

    def save(_cell_s: float) -> None:
        now = time.perf_counter()
        state["elapsed_s"] += now - last[0]
        last[0] = now
        save_state(ppath, state)

    drafters = build_drafters(engine, args.timed_names, state["corpus"])
    alpha_drafters = build_drafters(engine, args.alpha_names, state["corpus"])
    print(
        f"[real] {tag}: timed {list(drafters)}, alpha only {list(alpha_drafters)}; "
        f"{len(state['done'])} cells already done",
        file=sys.stderr,
    )
    warm = prompts[0]["ids"]
    for d in [None, *drafters.values()]:
        timed_generation(
            engine["target"],
            d,
            warm,
            gamma=args.gamma,
            temperature=0.0,
            new_tokens=args.gamma + 2,
            exact_length=True,
        )
    last[0] = time.perf_counter()
    save_state(ppath, state)

    run_main_phase(engine, drafters, alpha_drafters, prompts, args, state, save)
    run_extra_phase(engine, drafters, prompts, args, state, save)

    curve = {
        int(k): float(r)
        for k, r in zip(state["verify_cost"]["ks"], state["verify_cost"]["ratios"], strict=True)
    }
    table = table_rows(state, args.timed_names, args.gamma, curve)
    alphas = alpha_rows(state, [*args.timed_names, *args.alpha_names])
    alpha_of = {
        r["drafter"]: (r["alpha"], r["alpha_all"])
        for r in alphas
        if r["task"] == args.sweep_task and r["temperature"] == 0.0
    }
    plain_steps = [
        r["target_s"] / r["target_calls"]
        for r in state["runs"]
        if r["phase"] == "main" and r["drafter"] == "plain"
    ]
    record = {
        "kind": "real-decoding",
        "format": RECORD_FORMAT,
        "tag": tag,
        "command": state["commands"][0],
        "commands": state["commands"],
        "settings": {k: relative(jsonable(v)) for k, v in vars(args).items()},
        "target": {
            "name": engine["loaded"].name,
            "mode": engine["mode"],
            "device": engine["device"],
            "layers": int(engine["target"].config.num_hidden_layers),
        },
        "mode_probe": state["probe"],
        "draft_modes": engine.get("draft_modes", {}),
        "timed_drafters": args.timed_names,
        "alpha_only_drafters": args.alpha_names,
        "trained_drafts": args.trained,
        "ngram_source": state["ngram_source"],
        "prompts_per_task": args.prompts,
        "repeats": args.repeats,
        "new_tokens": args.new_tokens,
        "verify_cost": state["verify_cost"],
        "step_ms": 1e3 * statistics.median(plain_steps),
        "table": table,
        "alpha_table": alphas,
        "teacher_forced": state["teacher_forced"],
        "sweep": {
            "task": args.sweep_task,
            "drafters": state["sweep_drafters"],
            "rows": sweep_rows(state, args.sweep_gammas, curve, alpha_of),
        },
        "lenience": {
            "task": args.sweep_task,
            "temperature": 0.0,
            "rows": lenience_rows(state, args.gamma, args.lenience_values),
        },
        "runs": [{k: v for k, v in r.items() if k != "tokens"} for r in state["runs"]],
        "generations_file": f"generations-{tag}.json",
        "runtime_min": (state["elapsed_s"] + state["setup_s"]) / 60,
        "threads_info": threads,
    }
    used = (engine["mode"], *engine.get("draft_modes", {}).values())
    if "q4_1" in used or "q4q8" in used:
        from specdec.engine import native

        kind = "q4q8" if "q4q8" in used else "q4_1"
        record["native_build"] = native.build_info(kind)  # the compiler and flags of the C forward
    if args.quick:
        record["full_run_estimate"] = estimate_full_minutes(state, full_settings())
    write_record(
        out / record["generations_file"],
        {"kind": "generations", "seed": args.seed, "generations": state["generations"]},
        indent=None,
        sort_keys=False,
    )
    env = environment(dtype=engine["mode"], device=engine["device"])
    env.update(threads_info=threads)
    path = write_outputs(out, tag, record, env)
    ppath.unlink(missing_ok=True)
    print(f"[real] wrote {path.name} in {record['runtime_min']:.1f} min", file=sys.stderr)
    if args.quick:
        print(
            f"[real] estimated full run: {record['full_run_estimate']['total_min']:.0f} min", file=sys.stderr
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
