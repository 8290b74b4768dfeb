"""The worker of ``specdec run loop-cost`` (:mod:`specdec.measure.loopcost`): one version's arms, timed.

Run as a file of this checkout on either version's package (:func:`specdec.measure.sides.run_side`), so
it uses only the API the ``before`` commits share: ``open_engine``, ``autoregressive``,
``speculative_tree``, ``LeanLlama.forward`` / ``new_cache``, ``leannative.q8_forward`` and, with a
drafter, ``build_drafter`` and ``measure.modes.draft_context``. A JSON job on stdin (threads, prompts,
tokens, seed, drafter, the prompts' order and each prompt's rounds of arms), a JSON result on stdout:
per prompt and arm, seconds per token per round, the last round's tokens and, for a speculative arm,
its verification's seconds per round (``verify_s`` over every round of the generation, the last
token's plain step included); ``"specdec"``: the package it imported. One drafter per worker serves
every generation (a drafter that learns across generations, as suffix decoding's global tree does,
would see each version's prompts in another order).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["main", "time_arms"]


def time_arms(job: dict[str, Any]) -> dict[int, dict[str, dict[str, Any]]]:
    """Open the lean q4q8 target at ``job["threads"]``, warm every arm up on a quarter of the first prompt,
    then run each prompt's rounds (every arm once per round, in the job's order)."""
    import numpy as np
    import torch

    from specdec.engine.builder import EngineSpec, open_engine
    from specdec.engine.decoding import autoregressive, speculative_tree
    from specdec.engine.leannative import q8_forward

    opened = open_engine(EngineSpec("lean", "q4q8", job["threads"]))
    target = opened.model
    torch.set_num_threads(1)  # the C pool owns the cores, as in the decoding loop
    fw = q8_forward(target)
    V, L, T = target.head.out_features, target.num_layers, target.threads

    def bare(prompt: list[int], n: int) -> tuple[float, list[int]]:
        cache = target.new_cache(len(prompt) + n)
        target.forward(torch.tensor(prompt[:-1]), 0, cache, keep=1)
        c, ids, out = cache.numpy(), np.zeros(1, np.int64), np.empty((1, V), np.float32)
        where, tok, new = (ids.ctypes.data, c.ctypes.data, c.shape[3], out.ctypes.data), prompt[-1], []
        t0 = time.perf_counter()
        for i in range(n):
            ids[0] = tok
            fw.forward(where[0], 1, len(prompt) - 1 + i, where[1], where[2], where[3], 1, L, T)
            tok = int(out[0].argmax())
            new.append(tok)
        return (time.perf_counter() - t0) / n, new

    def loop(prompt: list[int], n: int, temperature: float) -> tuple[float, list[int]]:
        t0 = time.perf_counter()
        g = autoregressive(target, prompt, max_new_tokens=n, temperature=temperature, seed=job["seed"])
        return (time.perf_counter() - t0 - g.stats.prefill_s) / len(g.tokens), list(g.tokens)

    def spec(
        prompt: list[int], n: int, temperature: float, drafter: Any, budget: int
    ) -> tuple[float, list[int], float]:
        t0 = time.perf_counter()
        g = speculative_tree(
            target,
            drafter,
            prompt,
            budget=budget,
            max_new_tokens=n,
            temperature=temperature,
            seed=job["seed"],
        )
        s = g.stats
        return (time.perf_counter() - t0 - s.prefill_s) / len(g.tokens), list(g.tokens), s.verify_s / s.rounds

    n = job["tokens"]
    arms: dict[str, Callable[[list[int]], tuple[Any, ...]]] = {"bare": lambda p: bare(p, n)}
    for t in (0, 1):
        arms[f"loop-{t}"] = lambda p, t=t: loop(p, n, float(t))
    if job.get("drafter"):
        from specdec.drafting.registry import build_drafter
        from specdec.measure.modes import draft_context

        name, budget = job["drafter"].rsplit("@", 1)
        drafter = build_drafter(name, draft_context(opened)[0])
        for t in (0, 1):
            arms[f"spec-{t}"] = lambda p, t=t: spec(p, n, float(t), drafter, int(budget))
    warm = job["prompts"][0]
    for arm in arms.values():
        arm(warm[: max(2, len(warm) // 4)])
    result: dict[int, dict[str, dict[str, Any]]] = {}
    for i in job["order"]:
        prompt = job["prompts"][i]
        result[i] = {name: {"s_per_token": [], "tokens": None} for name in arms}
        for order in job["arms"][i]:  # one round per entry: every arm once, in that order
            for name in order:
                seconds, new, *verify = arms[name](prompt)
                result[i][name]["s_per_token"].append(seconds)
                result[i][name]["tokens"] = new
                if verify:  # a speculative arm: its verification's seconds per round
                    result[i][name].setdefault("verify_s_per_round", []).append(verify[0])
    return result


def main() -> int:
    """The job from stdin, the result to stdout (to the parent, not a file)."""
    from pathlib import Path

    from specdec.engine import builder

    result = time_arms(json.load(sys.stdin))
    package = Path(builder.__file__).resolve().parents[1]  # the specdec this process imported
    sys.stdout.write(json.dumps({"specdec": str(package), "prompts": result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
