"""Section 3.5's oracle bound from real drafts (issue #12, item 3): the record behind it.

On the default target in the lean mode of this machine (the same setting as
``benchmarks/dynamic_gamma.py``), for each evaluation prompt:

1. the target's greedy continuation of ``--new-tokens`` tokens (plain decoding);
2. per drafter (prompt lookup and the distilled draft ``--draft``), the greedy draft of up to
   ``--max-gamma`` tokens at every position of that continuation, and how many of its tokens
   match the target's (:func:`specdec.analysis.oracle.draft_runs`);
3. per drafter, its cost c (Definition 3.7, :func:`specdec.engine.stats.cost_coefficient`) from
   ``--repeats`` speculative calls at gamma = ``--c-gamma`` interleaved with plain ones; their
   accepted counts per round are kept, so that the replay at that gamma can be checked
   against real decoding (:func:`specdec.analysis.oracle.replay` must give the same rounds).

The verify-cost curve T(k)/T(1) comes from the mode probe (:func:`specdec.measure.modes.choose_mode`).
The record holds the runs, the draft lengths, c and the curve; the book replays them under
every fixed gamma and under the oracle (:func:`specdec.analysis.oracle.replay`). Only step 3 is a
timing; the runs are deterministic for a given CPU's arithmetic.

    python benchmarks/oracle_gamma.py --threads 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec.analysis.oracle import draft_runs  # noqa: E402
from specdec.engine.decoding import autoregressive, speculative  # noqa: E402
from specdec.engine.drafters import ModelDrafter, PromptLookupDrafter  # noqa: E402
from specdec.engine.models import load_target, set_threads  # noqa: E402
from specdec.measure.core import environment, write_result  # noqa: E402
from specdec.measure.device import device_slug  # noqa: E402
from specdec.measure.modes import lean_model, probe_modes  # noqa: E402
from specdec.train.draftnets import load_draft, require_drafts  # noqa: E402
from specdec.train.workloads import evaluation_prompts  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mode", default="auto", help="lean mode, or auto (measured on this machine)")
    ap.add_argument("--prompts-per-task", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--max-gamma", type=int, default=15, help="longest draft asked for (verify over 16)")
    ap.add_argument("--draft", default="distil-l1")
    ap.add_argument("--c-gamma", type=int, default=4, help="gamma of the calls that measure c")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved calls per prompt that measure c")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    for name in ("threads", "prompts_per_task", "new_tokens", "max_gamma", "c_gamma", "repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    try:
        require_drafts([args.draft])
    except (ValueError, FileNotFoundError) as exc:
        ap.error(str(exc))
    return args


def load(args: argparse.Namespace) -> tuple[Any, dict[str, Any], Any, Any]:
    """The lean target in this machine's mode, its probe, the tokenizer and the draft model."""
    base = load_target("float32")
    target, probe = lean_model(base.model, args.mode)
    if probe is None:  # a named mode: its verify curve is still measured here
        probe = probe_modes(base.model, [target.mode])
    top = max(int(k) for k in probe["modes"][target.mode]["curve"])
    if args.max_gamma + 1 > top:
        raise SystemExit(
            f"--max-gamma must be at most {top - 1}: the verify curve was measured up to k = {top}"
        )
    return target, probe, base.tokenizer, load_draft(args.draft, base.model)


def drafters(args: argparse.Namespace, target: Any, draft_model: Any) -> dict[str, Any]:
    """name -> a factory of fresh drafters."""
    return {"lookup": PromptLookupDrafter, args.draft: lambda: ModelDrafter(draft_model, target=target)}


def record_runs(
    args: argparse.Namespace, target: Any, makers: dict[str, Any], prompts: list[dict]
) -> list[dict]:
    """Steps 1 and 2: the greedy continuation and every drafter's runs along it, per prompt."""
    rows = []
    for p in tqdm(prompts, desc="runs", unit="prompt"):
        tokens = autoregressive(target, p["ids"], max_new_tokens=args.new_tokens).tokens
        row = {"prompt": p["id"], "task": p["task"], "new_tokens": len(tokens), "drafters": {}}
        for name, make in makers.items():
            runs, lengths = draft_runs(make(), p["ids"], tokens, args.max_gamma)
            row["drafters"][name] = {"runs": runs, "lengths": lengths}
        rows.append(row)
    return rows


def measure_c(args: argparse.Namespace, target: Any, makers: dict[str, Any], prompts: list[dict]) -> dict:
    """Step 3: c per drafter, the median over prompts and repeats of speculative calls at
    gamma = ``--c-gamma``, each priced against the plain call just before or after it."""
    rng = np.random.default_rng(0)
    samples: dict[str, list[float]] = {name: [] for name in makers}
    accepted: dict[str, list[list[int]]] = {name: [] for name in makers}  # per call, per round
    for _ in tqdm(range(args.repeats), desc="c", unit="pass"):
        for p in prompts:
            for i in rng.permutation(len(makers)):
                name = list(makers)[i]
                first_plain = bool(rng.integers(2))
                calls = {}
                for kind in ("plain", "spec") if first_plain else ("spec", "plain"):
                    if kind == "plain":
                        calls[kind] = autoregressive(target, p["ids"], max_new_tokens=args.new_tokens)
                    else:
                        calls[kind] = speculative(
                            target,
                            makers[name](),
                            p["ids"],
                            gamma=args.c_gamma,
                            max_new_tokens=args.new_tokens,
                        )
                samples[name].append(calls["spec"].stats.cost_coefficient(calls["plain"].stats.step_s))
                accepted[name].append(list(calls["spec"].stats.accepted))
    return {
        name: {"c": float(np.median(v)), "samples": v, "accepted": accepted[name]}
        for name, v in samples.items()
    }


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    set_threads(args.threads)
    command = "python benchmarks/oracle_gamma.py " + " ".join(sys.argv[1:] if argv is None else argv)
    target, probe, tokenizer, draft_model = load(args)
    print(f"target: lean {target.mode}; draft {args.draft}; threads {args.threads}", flush=True)
    prompts = evaluation_prompts(tokenizer, args.prompts_per_task)
    makers = drafters(args, target, draft_model)
    t0 = time.time()
    rows = record_runs(args, target, makers, prompts)
    costs = measure_c(args, target, makers, prompts)
    env = environment(dtype=target.mode, device="cpu")
    out = (
        Path(args.out)
        if args.out
        else ROOT
        / "results"
        / "bench"
        / f"oracle-gamma-{device_slug(env['device_name'])}-{args.threads}t.json"
    )
    record = {
        "kind": "oracle-gamma",
        "command": command,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "mode": target.mode,
        "curve": probe["modes"][target.mode]["curve"],
        "exact": probe["modes"][target.mode]["exact"],
        "costs": costs,
        "rows": rows,
        "wall_s": time.time() - t0,
    }
    path = write_result(out, record, env=env)
    print(f"-> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
    return path


if __name__ == "__main__":
    main()
