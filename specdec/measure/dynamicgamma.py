"""Dynamic draft length (issue #12, item 3; ``specdec run dynamic-gamma``,
:class:`specdec.experiments.dynamicgamma.DynamicGammaRun`): adaptive policies against every fixed
gamma, with intervals.

Greedy decoding of ``new_tokens`` tokens (EOS suppressed, equal lengths) per prompt: plain decoding
(the baseline of every speedup); prompt lookup with fixed gammas and with transformers' heuristic
schedule; the distilled draft with fixed gammas, the heuristic schedule, and the confidence stop
(:func:`configurations`). Each pass runs, per prompt, one :func:`specdec.measure.pairedrun.paired_block`
(plain first or last with probability 1/2, the configurations in a fresh seeded order; fresh
drafters and policies per run, :func:`specdec.measure.pairedrun.fresh_timer`); :func:`summarize`
gives per configuration the geometric mean over prompts of the median over passes of plain time /
its time, with a 95 % bootstrap interval (:mod:`specdec.theory.intervals`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from specdec.drafting.registry import DraftContext, build_drafter
from specdec.measure.pairedrun import fresh_timer, paired_block
from specdec.theory.intervals import paired_speedup
from specdec.theory.policies import HeuristicGamma

__all__ = ["configurations", "run", "summarize"]


def configurations(
    gammas: Sequence[int], confidences: Sequence[float], draft: str, target: Any, draft_model: Any
) -> dict[str, tuple[Any, Any]]:
    """name -> (drafter factory, gamma or policy factory); factories give fresh state per run: prompt
    lookup and the draft ``draft`` at each fixed gamma and under the heuristic schedule, and the
    draft's confidence stop at each of ``confidences`` (drafting up to the largest gamma)."""
    top = max(gammas)
    context = DraftContext(target, load_draft=lambda name: draft_model)  # the draft, already loaded

    def make(spec: str) -> Any:  # a fresh drafter per run, from the registry
        return lambda: build_drafter(spec, context)

    out: dict[str, tuple[Any, Any]] = {}
    for g in gammas:
        out[f"lookup g={g}"] = (make("lookup"), lambda g=g: g)
    out["lookup heuristic"] = (make("lookup"), lambda: HeuristicGamma(start=min(5, top), max_gamma=2 * top))
    for g in gammas:
        out[f"{draft} g={g}"] = (make(f"draft:{draft}"), lambda g=g: g)
    out[f"{draft} heuristic"] = (
        make(f"draft:{draft}"),
        lambda: HeuristicGamma(start=min(5, top), max_gamma=2 * top),
    )
    for c in confidences:
        out[f"{draft} confidence {c:g}"] = (make(f"draft:{draft},confidence={c!r}"), lambda: top)
    return out


def run(
    target: Any,
    configs: Mapping[str, tuple[Any, Any]],
    prompts: Sequence[Mapping[str, Any]],
    *,
    new_tokens: int,
    repeats: int,
    seed: int = 0,
) -> list[dict]:
    """``repeats`` passes; per prompt one paired block of plain decoding and every configuration
    (factories from :func:`configurations`). One row per run: ``config``, ``prompt``, ``task``,
    ``repeat``, ``decode_s`` (prefill excluded), ``tokens``, ``rounds``, ``mean_drafted``,
    ``tokens_per_round``."""
    rng = np.random.default_rng(seed)
    block = [{"drafter": n, "object": d, "gamma": g, "lenience": 1.0} for n, (d, g) in configs.items()]
    rows = []
    for rep in range(repeats):
        for p in prompts:
            runs = paired_block(
                target, block, p["ids"], temperature=0.0, new_tokens=new_tokens, seed=0, rep=rep, rng=rng,
                plain_at="random", exact_length=False, timer=fresh_timer,
            )  # fmt: skip
            for r in runs:
                s = r["_stats"]
                rows.append(
                    {
                        "config": r["drafter"],
                        "prompt": p["id"],
                        "task": p["task"],
                        "repeat": rep,
                        "decode_s": r["decode_s"],
                        "tokens": len(r["_tokens"]),
                        "rounds": s.rounds,
                        "mean_drafted": float(np.mean(s.drafted)) if s.drafted else 0.0,
                        "tokens_per_round": s.mean_tokens_per_round,
                    }
                )
        print(f"  pass {rep + 1}/{repeats} done", flush=True)
    return rows


def summarize(rows: list[dict], configs: list[str]) -> dict:
    """Per configuration: the speedup over plain decoding (:func:`specdec.theory.intervals.paired_speedup`:
    geometric mean over prompts of the median over passes of plain time / its time, with its 95 %
    bootstrap interval), per task (its estimate on the task's prompts), mean drafts and tokens per
    round; one printed line each."""
    prompts = sorted({r["prompt"] for r in rows})

    def med(config: str, prompt: str, key: str) -> float:
        return float(np.median([r[key] for r in rows if r["config"] == config and r["prompt"] == prompt]))

    plain = np.array([med("plain", p, "decode_s") for p in prompts])
    out = {}
    for c in configs:
        t = np.array([med(c, p, "decode_s") for p in prompts])
        est, lo, hi = paired_speedup(plain, t)  # the book's one estimator
        tasks = {}
        for task in sorted({r["task"] for r in rows}):
            ids = [
                i for i, p in enumerate(prompts) if any(r["prompt"] == p and r["task"] == task for r in rows)
            ]
            tasks[task] = paired_speedup(plain[ids], t[ids])[0]  # the same estimator on the task's prompts
        out[c] = {
            "speedup": [est, lo, hi],
            "per_task": tasks,
            "mean_drafted": float(np.mean([med(c, p, "mean_drafted") for p in prompts])),
            "tokens_per_round": float(np.mean([med(c, p, "tokens_per_round") for p in prompts])),
        }
        print(
            f"  {c:28s} {est:.2f} [{lo:.2f}, {hi:.2f}]  drafted/round {out[c]['mean_drafted']:.2f}",
            flush=True,
        )
    return {"prompts": prompts, "configs": out}
