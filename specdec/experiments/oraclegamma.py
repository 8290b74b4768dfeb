"""Section 3.5's oracle bound from real drafts (issue 12, item 3): the record behind it.

:class:`OracleGammaRun` (``specdec run oracle-gamma``) is the program; the model-running steps are here
(:func:`draft_runs`, :func:`record_runs`, :func:`measure_costs`), the readers that replay the record
under every rule are :mod:`specdec.analysis.oracle` (no torch there).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np

from specdec.experiments.dynamicgamma import LeanDraftRun, start_lean
from specdec.experiments.options import Refused, option
from specdec.theory.checks import check_int

__all__ = ["OracleGammaRun", "draft_runs", "drafters", "measure_costs", "record_runs", "verify_curve_probe"]


def draft_runs(
    drafter: Any, prompt_ids: Sequence[int], tokens: Sequence[int], max_gamma: int
) -> tuple[list[int], list[int]]:
    """Per position s of ``tokens`` (the target's greedy continuation of ``prompt_ids``): the
    drafter's greedy draft of up to ``max_gamma`` tokens after ``prompt_ids + tokens[:s]``.

    Returns ``runs`` (how many leading draft tokens equal ``tokens[s:]``) and ``lengths`` (how
    many tokens the drafter proposed; prompt lookup may propose fewer, or none).
    """
    import torch

    from specdec.theory.sampling import warp

    max_gamma = check_int("max_gamma", max_gamma, low=1)
    if len(prompt_ids) < 1:
        raise ValueError("prompt_ids must hold at least one token")
    if len(tokens) < 1:
        raise ValueError("tokens must hold at least one generated token")
    greedy = partial(warp, temperature=0.0)
    rng = np.random.default_rng(0)  # unused by greedy drafts; the protocol asks for one
    ids = [int(t) for t in prompt_ids] + [int(t) for t in tokens]
    drafter.start(ids[: len(prompt_ids)])
    runs, lengths = [], []
    with torch.inference_mode():
        for s in range(len(tokens)):
            prefix = ids[: len(prompt_ids) + s]
            draft = drafter.propose(prefix, max_gamma, greedy, rng).tokens
            truth = tokens[s : s + len(draft)]
            run = 0
            while run < min(len(draft), len(truth)) and int(draft[run]) == int(truth[run]):
                run += 1
            runs.append(run)
            lengths.append(len(draft))
    return runs, lengths


def record_runs(
    target: Any,
    makers: Mapping[str, Any],
    prompts: Sequence[Mapping[str, Any]],
    *,
    new_tokens: int,
    max_gamma: int,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Per prompt: the target's greedy continuation of ``new_tokens`` tokens and, per drafter (name ->
    a factory of fresh drafters), its :func:`draft_runs` along it (``runs`` and ``lengths``)."""
    from tqdm import tqdm

    from specdec.engine.decoding import autoregressive

    rows = []
    for p in tqdm(prompts, desc="runs", unit="prompt", disable=not progress):
        tokens = autoregressive(target, p["ids"], max_new_tokens=new_tokens).tokens
        row = {"prompt": p["id"], "task": p["task"], "new_tokens": len(tokens), "drafters": {}}
        for name, make in makers.items():
            runs, lengths = draft_runs(make(), p["ids"], tokens, max_gamma)
            row["drafters"][name] = {"runs": runs, "lengths": lengths}
        rows.append(row)
    return rows


def measure_costs(
    target: Any,
    makers: Mapping[str, Any],
    prompts: Sequence[Mapping[str, Any]],
    *,
    new_tokens: int,
    gamma: int,
    repeats: int,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, dict[str, Any]]:
    """c per drafter (Definition 3.7): in each of ``repeats`` passes, per prompt and per drafter (in a
    seeded random order), one :func:`specdec.measure.pairedrun.paired_block` of a plain call and a
    speculative call at ``gamma`` (plain first with probability 1/2); c is the speculative call's
    draft time per round over gamma, over the paired plain call's step. Per drafter: the median
    ``c``, its ``samples`` and the ``accepted`` counts per round of every speculative call."""
    from tqdm import tqdm

    from specdec.measure.pairedrun import fresh_timer, paired_block

    check_int("repeats", repeats, low=1)
    rng = np.random.default_rng(seed)
    names = list(makers)
    samples: dict[str, list[float]] = {name: [] for name in makers}
    accepted: dict[str, list[list[int]]] = {name: [] for name in makers}  # per call, per round
    for _ in tqdm(range(repeats), desc="c", unit="pass", disable=not progress):
        for p in prompts:
            for i in rng.permutation(len(names)):
                name = names[int(i)]
                cfg = {"drafter": name, "object": makers[name], "gamma": lambda: gamma, "lenience": 1.0}
                plain, spec = sorted(
                    paired_block(
                        target, [cfg], p["ids"], temperature=0.0, new_tokens=new_tokens, seed=0, rep=0,
                        rng=rng, plain_at="random", exact_length=False, timer=fresh_timer,
                    ),
                    key=lambda r: r["drafter"] != "plain",
                )  # fmt: skip
                samples[name].append(spec["_stats"].cost_coefficient(plain["_stats"].step_s))
                accepted[name].append(list(spec["_stats"].accepted))
    return {
        name: {"c": float(np.median(v)), "samples": v, "accepted": accepted[name]}
        for name, v in samples.items()
    }


def verify_curve_probe(max_gamma: int, lean: Any) -> dict[str, Any]:
    """The mode probe with the target's verify curve (measured here for a named mode); the curve
    must reach ``max_gamma`` + 1."""
    from specdec.measure.modes import probe_modes

    probe = lean.probe if lean.probe is not None else probe_modes(lean.base.model, [lean.target.mode])
    top = max(int(k) for k in probe["modes"][lean.target.mode]["curve"])
    if max_gamma + 1 > top:
        raise Refused(f"--max-gamma must be at most {top - 1}: the verify curve was measured up to k = {top}")
    return probe


def drafters(draft: str, target: Any, draft_model: Any) -> dict[str, Any]:
    """name -> a factory of fresh drafters (the registry's): prompt lookup and the distilled ``draft``."""
    from specdec.drafting.registry import DraftContext, build_drafter

    context = DraftContext(target, load_draft=lambda name: draft_model)  # the draft, already loaded
    return {
        "lookup": lambda: build_drafter("lookup", context),
        draft: lambda: build_drafter(f"draft:{draft}", context),
    }


@dataclass(frozen=True)
class OracleGammaRun(LeanDraftRun):
    """Section 3.5's oracle bound from real drafts (issue 12, item 3): the runs, draft lengths and c.

    On the default target in the lean mode of this machine (the same setting as
    ``specdec run dynamic-gamma``), for each evaluation prompt:

    1. the target's greedy continuation of ``--new-tokens`` tokens (plain decoding);
    2. per drafter (prompt lookup and the distilled draft ``--draft``), the greedy draft of up to
       ``--max-gamma`` tokens at every position of that continuation, and how many of its tokens
       match the target's (:func:`record_runs`);
    3. per drafter, its cost c (Definition 3.7, :func:`measure_costs`) from ``--repeats``
       speculative calls at gamma = ``--c-gamma`` paired with plain ones; their accepted counts per
       round are kept, so that the replay at that gamma can be checked against real decoding
       (:func:`specdec.analysis.oracle.replay` must give the same rounds).

    The verify-cost curve T(k)/T(1) comes from the mode probe (:func:`specdec.measure.modes.choose_mode`).
    The record (``results/bench/oracle-gamma-<cpu>-<threads>t.json``) holds the runs, the draft
    lengths, c and the curve; the book replays them under every fixed gamma and under the oracle
    (:func:`specdec.analysis.oracle.replay`). Only step 3 is a timing; the runs are deterministic for
    a given CPU's arithmetic.

        specdec run oracle-gamma --threads 1
    """

    name: ClassVar[str] = "oracle-gamma"

    max_gamma: int = option(15, "longest draft asked for (verify over 16)")
    c_gamma: int = option(4, "gamma of the calls that measure c")
    repeats: int = option(3, "interleaved calls per prompt that measure c")

    def check(self) -> None:
        super().check()
        for name in ("max_gamma", "c_gamma", "repeats"):
            check_int(name, getattr(self, name), low=1)

    def run(self) -> int:
        from specdec.measure import benchargs as ba

        lean = start_lean(self)
        target, prompts = lean.target, lean.prompts
        probe = verify_curve_probe(self.max_gamma, lean)
        makers = drafters(self.draft, target, lean.draft_model)
        t0 = time.time()
        rows = record_runs(target, makers, prompts, new_tokens=self.new_tokens, max_gamma=self.max_gamma)
        costs = measure_costs(
            target, makers, prompts, new_tokens=self.new_tokens, gamma=self.c_gamma, repeats=self.repeats
        )
        record = {
            "kind": "oracle-gamma",
            "command": lean.command,
            "settings": {k: v for k, v in self.options().items() if k != "out"},
            "mode": target.mode,
            "curve": probe["modes"][target.mode]["curve"],
            "exact": probe["modes"][target.mode]["exact"],
            "costs": costs,
            "rows": rows,
            "wall_s": time.time() - t0,
        }
        ba.write_bench_record(record, lean.env, self.out, "oracle-gamma", self.threads)
        return 0
