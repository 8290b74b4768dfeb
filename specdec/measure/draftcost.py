"""What a drafter costs inside the decoding loop, in plain steps (issue 40, item 4), for two checkouts.

A drafter's c (Theorem 3.8's cost of a draft call over a target call) is measured where it is paid: in
the tree or chain loop (:func:`specdec.engine.decoding.speculative_tree` / ``speculative``), as the
loop's own clock gives it (``Stats.draft_s``: the drafter's proposals and, for drafters conditioned on
the target, its ``extend`` of the committed positions), over the rounds, divided by the plain step
of the same engine measured on the same prompt just before (``autoregressive``: its target call and
its sampling per token). Per configuration: ``c_round`` (draft time per round), ``c_call`` (per draft
call: a level of a tree, a stage, a draft model step) and ``calls_per_round``.

To compare the code of two commits (the drafters' C calls before and after a change), :func:`measure`
runs in a process of each checkout (``PYTHONPATH`` = that checkout, this file run as a script,
:func:`side_main`: it uses only the package's public calls, which both have), the processes alternating
(``specdec run draft-cost``, :class:`specdec.experiments.draftcost.DraftCostRun`), and
:func:`compare` pairs them per configuration by prompt and repetition: after / before with a bootstrap
interval over the pairs (:func:`specdec.theory.intervals.paired_speedup`'s rule on time per round).
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: campaign v2's network-drafter configurations (spec, node budget or gamma) and a 16-node EAGLE-2
#: tree (the issue's goal for EAGLE-2 is stated for 16 nodes)
CONFIGS: tuple[tuple[str, int], ...] = (
    ("medusa:medusa-4", 4),
    ("mlp:mlp-4,ranks=1", 2),
    ("mlp:mlp-4", 4),
    ("eagle:eagle-1", 2),
    ("eagle:eagle-1,topk=4,depth=5", 4),
    ("eagle:eagle-1,topk=4,depth=6", 16),
    ("draft:distil-l1", 2),
    ("early-exit:8", 1),
)


def dev_texts(n: int) -> list[str]:
    """``n`` development prompts' texts: every 997th prompt of the self-generated data's prompt set
    (results/selfdata, disjoint from every evaluation set; the trainers leave their sequences out:
    :data:`specdec.train.selfshards.DEV_EVERY`)."""
    from specdec.train.selfshards import DEV_EVERY

    path = Path(__file__).resolve().parents[2] / "results" / "selfdata" / "prompts.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        lines = [line for i, line in zip(range(DEV_EVERY * n), handle, strict=False) if i % DEV_EVERY == 0]
    return [json.loads(line)["prompt"] for line in lines]


def dev_prompts(n: int, tokens: int, tokenizer: Any) -> list[list[int]]:
    """``n`` development prompts (:func:`dev_texts`) of at most ``tokens`` tokens, tokenized bare."""
    return [tokenizer(t)["input_ids"][:tokens] for t in dev_texts(n)]


def measure(
    configs: tuple[tuple[str, int], ...] = CONFIGS,
    *,
    threads: int = 2,
    prompts: int = 4,
    prompt_tokens: int = 160,
    new_tokens: int = 48,
    drafter_threads: tuple[int, ...] = (1,),
) -> dict[str, Any]:
    """One process's samples: per prompt, the plain step, then every configuration (each at every
    ``drafter_threads``) decoded greedily from that prompt: its draft seconds, rounds and calls, and the
    whole generation's decoding seconds (the call's wall time less its prefill) and the cyclic garbage
    collector's seconds during the whole call (``gc_s``: the prompt's prefill included, where a drafter's
    ``start`` builds its tables), the plain run's too."""
    import specdec.theory
    from specdec.drafting.registry import KINDS, build_drafter
    from specdec.engine.builder import EngineSpec, open_engine
    from specdec.measure.modes import draft_context
    from specdec.measure.pairedrun import timed_generation

    engine = open_engine(EngineSpec("lean", "q4q8", threads))
    context, _ = draft_context(engine)
    ids = dev_prompts(prompts, prompt_tokens, engine.tokenizer)
    built = {}
    for spec, budget in configs:
        for dt in drafter_threads:
            if "threads" not in KINDS[spec.split(":")[0].split(",")[0]].options:
                if dt != drafter_threads[0]:
                    continue  # a draft model runs at the target's threads: once
                name = spec
            else:  # explicit, as the default differs between checkouts (1 before 0691db0's successor)
                name = f"{spec},threads={dt}"
            built[(name, budget)] = build_drafter(name, context)
    rows = []
    for p, prompt in enumerate(ids):  # the one timed generation (its stats carry the collector's gc_s)
        _, plain, plain_total = timed_generation(engine.model, None, prompt, new_tokens=new_tokens)
        step = (plain.target_s + plain.verify_s) / plain.rounds
        for (name, budget), drafter in built.items():  # a tree drafter's budget, a chain drafter's gamma
            _, st, total = timed_generation(
                engine.model, drafter, prompt, gamma=budget, new_tokens=new_tokens
            )
            rows.append({
                "config": name, "budget": budget, "prompt": p, "plain_step_s": step, "draft_s": st.draft_s,
                "rounds": st.rounds, "draft_calls": st.draft_calls, "target_s": st.target_s,
                "decode_s": total - st.prefill_s, "gc_s": st.gc_s, "new_tokens": st.new_tokens,
                "plain_decode_s": plain_total - plain.prefill_s, "plain_gc_s": plain.gc_s,
                "plain_new_tokens": plain.new_tokens,
            })  # fmt: skip
    package = Path(specdec.theory.__file__).resolve().parents[1]  # the checkout this process imported
    return {"specdec": str(package), "threads": threads, "rows": rows}


def _deepest(budget: int) -> Any:
    """A fixed budget that remembers the deepest tree the drafter proposed under it (``deepest``); the
    policies' module is imported here, as an earlier checkout measured by :func:`main` may lack it."""
    from specdec.theory.policies import FixedBudget

    class Deepest(FixedBudget):
        def reset(self) -> None:
            self.deepest = 0

        def update(self, nodes: int, depth: int, accepted: int) -> None:
            self.deepest = max(self.deepest, depth)

    return Deepest(budget)


def _calibration(
    target: Any, drafter: Any, prompts: list[list[int]], budgets: tuple[int, ...], verify: list[float], *,
    new_tokens: int, temperature: float,
) -> dict[str, Any]:  # fmt: skip
    """What :class:`specdec.theory.policies.DoNoHarm` needs, measured in the tree loop on ``prompts``
    (development prompts, never those a result is reported on) at one temperature, in plain steps (the
    plain step: a whole plain decoding's time per token, ``autoregressive`` with its prefill left out:
    the target call, sampling and the loop, measured just before on the same prompt):

    * ``budgets``: b -> (v, c, depth): v the verify cost of a round whose drafter proposed, by the nodes it
      actually proposed: the mean of v(n + 1) from ``verify`` (the verify curve) over the rounds with
      n >= 1 (median over the prompts that had one; v(b + 1) where none had; by this timing alone, a
      diagnostic: the policy's price is :func:`price_calibration`'s, from ``nodes``); c the
      round's drafting (``draft_s`` per round) plus its verification's work beyond a plain step's
      (``verify_s`` per round less plain decoding's: accepting, rejecting, sampling the rows); depth the
      deepest tree the drafter proposed at b (at least 1). Medians over prompts.
    * ``loop_v``: b -> the rest of the round as the loop's clock saw it (the generation's time less prefill,
      drafting and verification's extra work, per round; median over prompts), and ``loop_full``: b -> the
      same for a round whose drafter proposed ((loop_v - (1 - s) r0) / s per prompt, s the prompt's share
      of proposing rounds, r0 what a round with nothing to verify costs: ``plain_round``, the median
      over prompts; median over the prompts that had one; NaN where none had).
    * ``counts``: the deepest budget's rounds per depth, (examined, accepted) pooled over prompts
      (accepted / examined is the a_d of the policy); ``budget_counts``: the same for every budget.
    * ``nodes``: b -> {n: the rounds whose drafter proposed n >= 1 nodes}, pooled over prompts (what
      :func:`price_calibration` prices a budget's proposing round by).
    * ``tokens``: b -> the new tokens per round (mean over prompts, every round counted).
    * ``proposes``: the share of rounds whose drafter proposed at least one node (pooled over prompts
      and budgets).
    * ``catch_up``: the tree loop's prefill beyond plain decoding's (where a fixed budget tells the drafter
      the prompt), per prompt position (median over prompts and budgets).
    * ``plain_round``: what a plain round of the tree loop with this drafter (budget 0: the drafter never
      called, its bookkeeping kept) costs (median over prompts; after one untimed warm-up of both, the
      two runs of a prompt in alternating order): the policy's R(0) = 1 assumes 1, and a loop that costs
      more than its step shows here before it shows in a record. A diagnostic with its limits: a fixed
      budget 0 skips the policy's own choice each round, and a few short generations resolve a few
      percent at best.
    * ``shadow_c``: a shadow probe's cost as the loop pays it, in plain steps: a shadow round at the
      smallest budget every :data:`SHADOW_EVERY` rounds, plain rounds between (a probe after a run of
      plain rounds, the drafter's weights no longer in cache), its drafting and its verification's work
      beyond a plain step's per probe asked (a drafter that proposed nothing paid its call too; median
      over prompts; the calibrations of noharm-v12 divided by the probes whose drafter proposed, which
      overstates the cost of a drafter that often proposes nothing). A drafter's call after plain rounds
      can cost more than one right after another, so c at the smallest budget may underprice it. The
      target call is left out (a shadow round's is a plain step's; what cache it lost to the draft is
      within a timing's noise here), and so is no catch-up: the drafter is told the plain rounds before
      each probe inside its draft time, which the policy's ``catch_up`` also prices (an error towards
      probing less)."""
    from functools import partial

    import numpy as np

    from specdec.engine.decoding import autoregressive, speculative_tree
    from specdec.theory.checks import check_int

    if not prompts:
        raise ValueError("calibrate_policy needs at least one development prompt")
    for b in budgets:
        check_int("a budget", b, low=1)
    # per budget and prompt: v, c, loop_v, the deepest depth, the share of rounds that proposed
    samples: dict[int, list[tuple[float, float, float, int, float]]] = {b: [] for b in budgets}
    # per budget: the proposing rounds by nodes proposed
    nodes: dict[int, dict[int, int]] = {b: {} for b in budgets}
    proposed = [0, 0]  # rounds, and rounds whose drafter proposed
    per_round: dict[int, list[float]] = {b: [] for b in budgets}  # new tokens per round
    catch_up: list[float] = []  # the drafter's prefill share per prompt position told, in plain steps
    by_budget: dict[int, list[list[int]]] = {b: [] for b in budgets}
    plain_round: list[float] = []  # a budget-0 round of the tree loop over plain decoding's step
    shadow_c: list[float] = []  # a shadow probe's drafting and extra verification, in plain steps

    def timed(run: Any) -> tuple[float, Any]:  # a run's time per round (its prefill left out), its Stats
        t0 = time.perf_counter()
        st = run().stats
        return (time.perf_counter() - t0 - st.prefill_s) / st.rounds, st

    for i, prompt in enumerate(prompts):
        kw = {"max_new_tokens": new_tokens, "temperature": temperature}
        plain_run = partial(autoregressive, target, prompt, **kw)
        zero_run = partial(speculative_tree, target, drafter, prompt, budget=0, **kw)
        if i == 0:  # warm-up, untimed
            plain_run(), zero_run()
        # plain decoding's step, and a budget-0 round of the tree loop in that unit, in alternating order
        if i % 2 == 0:
            (step, plain), (zero, _) = timed(plain_run), timed(zero_run)
        else:
            (zero, _), (step, plain) = timed(zero_run), timed(plain_run)
        plain_round.append(zero / step)
        plain_verify = plain.verify_s / plain.rounds
        probes = _shadow_every(min(budgets))
        st = speculative_tree(target, drafter, prompt, budget=probes, **kw).stats
        if probes.asked:  # every probe asked, those whose drafter proposed nothing too (the policy pays both)
            extra = st.draft_s + st.verify_s - plain_verify * st.rounds
            shadow_c.append(max(0.0, extra) / probes.asked / step)
        for b in budgets:
            policy = _deepest(b)
            t0 = time.perf_counter()
            st = speculative_tree(
                target, drafter, prompt, budget=policy, max_new_tokens=new_tokens, temperature=temperature
            ).stats
            round_s = (time.perf_counter() - t0 - st.prefill_s) / st.rounds
            draft_s = st.draft_s / st.rounds
            c_b = (draft_s + st.verify_s / st.rounds - plain_verify) / step
            full = [verify[n] for n in st.drafted if n]
            for n in st.drafted:
                if n:
                    nodes[b][n] = nodes[b].get(n, 0) + 1
            v_b = float(np.mean(full)) if full else float("nan")
            share = len(full) / len(st.drafted)
            loop_v = round_s / step - c_b  # the round less what c holds
            proposed[0] += len(st.drafted)
            proposed[1] += len(full)
            samples[b].append((v_b, c_b, loop_v, max(1, policy.deepest), share))
            per_round[b].append(st.new_tokens / st.rounds)
            # a fixed budget tells the drafter the prompt's positions in the prefill (start, extend)
            catch_up.append(max(0.0, st.prefill_s - plain.prefill_s) / max(len(prompt) - 1, 1) / step)
            rows = by_budget[b]  # (examined, accepted) per depth, pooled over prompts
            rows += [[0, 0] for _ in range(len(st.examined_at) - len(rows))]
            for d, (e, a) in enumerate(zip(st.examined_at, st.accepted_at, strict=True)):
                rows[d][0] += e
                rows[d][1] += a
    r0 = float(np.median(plain_round))  # an empty round: a plain step in the tree loop
    return {
        "budgets": {
            b: (
                float(np.median([r[0] for r in rows if r[0] == r[0]] or [verify[b]])),  # NaN: none proposed
                float(np.median([r[1] for r in rows])),
                min(b, max(r[3] for r in rows)),
            )
            for b, rows in samples.items()
        },
        "loop_v": {b: float(np.median([r[2] for r in rows])) for b, rows in samples.items()},
        "loop_full": {
            b: float(np.median(full))
            if (full := [proposing_round(r[2], r[4], r0) for r in rows if r[4]])
            else float("nan")
            for b, rows in samples.items()
        },
        "counts": by_budget[max(budgets)],
        "budget_counts": by_budget,
        "nodes": nodes,
        "tokens": {b: float(np.mean(rows)) for b, rows in per_round.items()},
        "proposes": proposed[1] / proposed[0],
        "catch_up": float(np.median(catch_up)),
        "plain_round": r0,
        "shadow_c": float(np.median(shadow_c)) if shadow_c else float("nan"),
    }


#: A calibration's shadow probes come every this many rounds (:func:`_calibration`'s ``shadow_c``).
SHADOW_EVERY = 8


def _shadow_every(budget: int) -> Any:
    """A shadow probe at ``budget`` every :data:`SHADOW_EVERY` rounds, plain rounds between: how a
    do-no-harm policy's probes come. A fixed budget (imported here, as :func:`_deepest` does) so that the
    loop tells a conditioned drafter the prompt at the prefill (a probe's catch-up on the plain rounds
    before it stays in its cost)."""
    from specdec.theory.policies import FixedBudget

    class ShadowEvery(FixedBudget):
        asked = 0  # the probes asked, over every generation

        def reset(self) -> None:
            self.i = 0

        def next(self) -> int:
            self.i += 1
            if self.i % SHADOW_EVERY:
                return 0
            self.asked += 1
            return self.max_budget

        def shadows(self) -> bool:
            return self.i % SHADOW_EVERY == 0

    return ShadowEvery(budget)


def proposing_round(loop_v: float, share: float, plain_round: float) -> float:
    """The loop's cost of a round whose drafter proposed, from ``loop_v`` (its cost per round, every round
    counted), ``share`` (in (0, 1]: the rounds that proposed) and ``plain_round`` (what a round with
    nothing to verify costs in the tree loop): loop_v = (1 - share) plain_round + share x, solved for x.
    (The calibrations of noharm-v7 and before put 1 for ``plain_round``.)"""
    from specdec.theory.checks import check_float

    check_float("share", share, low=0.0, high=1.0, open_low=True)
    return (loop_v - (1.0 - share) * plain_round) / share


def _rates(counts: dict[str, list[list[int]]], depth: int) -> dict[str, list[float]]:
    """Acceptance per depth 1..``depth`` at each temperature from (examined, accepted) counts; a depth a
    temperature never examined takes the rate pooled over temperatures, and one none examined the
    depth above's (the first depth's: 0)."""
    out = {}
    for t, rows in counts.items():
        rates: list[float] = []
        for d in range(depth):
            e, a = rows[d] if d < len(rows) else (0, 0)
            if not e:  # pooled over temperatures
                e = sum(r[d][0] for r in counts.values() if d < len(r))
                a = sum(r[d][1] for r in counts.values() if d < len(r))
            rates.append(a / e if e else (rates[-1] if rates else 0.0))
        out[t] = rates
    return out


def _budget_rates(
    counts: dict[str, dict[int, list[list[int]]]], budgets: Sequence[int], depth: int, shrink: float = 4.0
) -> dict[str, dict[str, list[float]]]:
    """Each budget's acceptance per depth 1..``depth`` at each temperature from ``counts`` (temperature ->
    budget -> (examined, accepted) per depth), shrunk towards the rate of all the budgets' rounds at that
    temperature (:func:`_rates` of their pooled counts, with its fallbacks) by ``shrink`` pseudo-rounds:
    (accepted + shrink x pooled) / (examined + shrink), so that a depth a budget examined a few times
    (or never) is not read as 0 or 1 (the calibrations of noharm-v11 took the budget's own counts)."""
    pooled_rows: dict[str, list[list[int]]] = {}
    for t, per_b in counts.items():
        rows = [[0, 0] for _ in range(depth)]
        for b in budgets:
            for d, (e, a) in enumerate(per_b[b][:depth]):
                rows[d][0] += e
                rows[d][1] += a
        pooled_rows[t] = rows
    pooled = _rates(pooled_rows, depth)
    out: dict[str, dict[str, list[float]]] = {str(b): {} for b in budgets}
    for t, per_b in counts.items():
        for b in budgets:
            own = per_b[b]
            out[str(b)][t] = [
                ((own[d][1] if d < len(own) else 0) + shrink * pooled[t][d])
                / ((own[d][0] if d < len(own) else 0) + shrink)
                for d in range(depth)
            ]
    return out


def curve_level(pairs: list[tuple[float, float]]) -> float:
    """How far the loop's clock raises the verify curve's level (:func:`calibrate_policy`): over ``pairs``
    of (curve's price of a proposing round, the loop's cost of one), the sum of (loop - 1) over the sum
    of (curve - 1), at least 1: a ratio of sums, so a pair whose curve price is barely above 1 (a small
    budget, where one noisy loop time would make its own ratio anything) weighs as little as it says.
    Pairs whose curve price is not above 1 or whose loop cost is NaN or None (no proposing round; a
    record stores NaN as null) are left out, and with none left the level is 1. (The calibrations of
    noharm-v7 and before took the median of the pairs' ratios.)"""
    # a loop cost read back from a record is None where it was NaN
    kept = [(c - 1.0, loop - 1.0) for c, loop in pairs if c > 1.0 and loop is not None and loop == loop]
    return max(1.0, sum(x for _, x in kept) / sum(v for v, _ in kept)) if kept else 1.0


def calibrate_policy(
    target: Any,
    drafter: Any,
    prompts: list[list[int]],
    budgets: tuple[int, ...],
    *,
    new_tokens: int = 32,
    temperatures: tuple[float, ...] = (0.0, 1.0),
    verify_repeats: int = 15,
) -> dict[str, Any]:
    """Everything a :class:`~specdec.theory.policies.DoNoHarm` is built from (:func:`no_harm_policy`),
    measured on development ``prompts`` at each of ``temperatures``, as a record stores it: the target's
    verify curve v(k), k = 1 .. max budget + 1, by the one T(k) loop
    (:func:`specdec.measure.verifykernels.target_verify_curves`, ``verify_repeats`` passes; tree calls
    over the chain's one-row call, v(1) = 1: a plain step; kept as ``verify_timed``), which prices each
    round by the nodes its drafter proposed (:func:`price_calibration`, which sets each budget's v,
    ``verify_bare``, ``level`` and ``verify``); per budget, the median over temperatures of c and the
    deepest depth
    (:func:`_calibration`); the prior acceptance per depth at each temperature (the policy takes the one
    nearest a generation's temperature: :meth:`~specdec.theory.policies.DoNoHarm.begin`), from the
    deepest budget's rounds (``prior_rates``) and from each budget's own, shrunk towards all its budgets'
    (``budget_rates``, :func:`_budget_rates`), with the counts they came from; ``shadow_c``, what a shadow
    probe costs the loop (the median over temperatures of :func:`_calibration`'s).

    A short timing of bare calls can catch the host in a regime where wide calls look cheap (one run's
    seven calibrations gave v(5) from 1.26 to 1.93 minutes apart; ``noharm-v6``), so the curve gives the
    shape and the loop's own clock may raise its level: ``level`` = over budgets and temperatures, the
    sum of (loop_full - 1) over the sum of (v - 1), the loop's cost of a proposing round over the
    curve's price of it, at least 1 (:func:`curve_level`); the curve the policy prices by (``verify``)
    is 1 + level (v(k) - 1), and each budget's v likewise (the curve before the level is ``verify_bare``:
    this timing, or the upper quantile of a run's, :func:`pooled_curves`).
    Never below the curve: a do-no-harm price errs towards not drafting."""
    import numpy as np

    from specdec.measure.verifykernels import target_verify_curves
    from specdec.theory.checks import check_int

    check_int("verify_repeats", verify_repeats, low=1)
    if not budgets:
        raise ValueError("budgets must hold at least one positive budget")
    ks = list(range(1, max(budgets) + 2))
    curve = target_verify_curves(target, ks=ks, repeats=verify_repeats)
    verify = [1.0, *curve["v_tree"][1:]]
    runs = {
        f"{t:g}": _calibration(
            target, drafter, prompts, budgets, verify, new_tokens=new_tokens, temperature=t
        )  # fmt: skip
        for t in temperatures
    }
    costs = {  # v is set by price_calibration
        str(b): [
            float("nan"),
            float(np.median([r["budgets"][b][1] for r in runs.values()])),
            max(r["budgets"][b][2] for r in runs.values()),
        ]
        for b in budgets
    }
    depth = max(c[2] for c in costs.values())
    rates = _rates({t: r["counts"] for t, r in runs.items()}, depth)
    by_budget = _budget_rates({t: r["budget_counts"] for t, r in runs.items()}, budgets, depth)
    raw = {
        "budgets": costs,
        "verify_timed": verify,
        "verify_curve": {k: curve[k] for k in ("prefix_len", "ks", "median_s", "v_chain", "v_tree", "rule")},
        "prior_rates": rates,
        "budget_rates": by_budget,
        "tokens_per_round": {t: {str(b): e for b, e in r["tokens"].items()} for t, r in runs.items()},
        "proposes": {t: r["proposes"] for t, r in runs.items()},
        "catch_up": float(np.median([r["catch_up"] for r in runs.values()])),
        "plain_round": {t: r["plain_round"] for t, r in runs.items()},
        "shadow_c": float(np.median(c))
        if (c := [r["shadow_c"] for r in runs.values() if r["shadow_c"] == r["shadow_c"]])
        else float("nan"),
        "prompts": len(prompts),
        "new_tokens": new_tokens,
        "per_temperature": {
            t: {
                "budgets": {str(b): list(c) for b, c in r["budgets"].items()},
                "loop_v": {str(b): v for b, v in r["loop_v"].items()},
                "loop_full": {str(b): v for b, v in r["loop_full"].items()},
                "nodes": {str(b): {str(n): k for n, k in sorted(h.items())} for b, h in r["nodes"].items()},
                "counts": r["counts"],
                "budget_counts": {str(b): c for b, c in r["budget_counts"].items()},
                "catch_up": r["catch_up"],
                "shadow_c": r["shadow_c"],
            }
            for t, r in runs.items()
        },
        "rule": "verify_timed: v(k) = T(k) / T(1), tree calls over the chain's one-row call, medians over "
        "passes, v(1) = 1; verify_bare: the curve it is priced by (verify_timed, or the elementwise "
        "upper quantile of several: pooled_curves); per budget and temperature, the bare price of a "
        "proposing round: the mean of verify_bare(n + 1) over the rounds whose drafter proposed n >= 1 "
        "nodes (nodes, pooled over prompts); level: over budgets and temperatures, the sum of "
        "(loop_full - 1) over the sum of (that price - 1), at least 1; verify: 1 + level (verify_bare - 1); "
        "per budget v: 1 + level (the median over temperatures of that price - 1); "
        "proposes per temperature: the share of rounds that proposed, pooled; "
        "c: drafting plus verification beyond a plain step's, per round; c: medians over "
        "prompts, then over temperatures; loop_v: the round less drafting and verification's extra work "
        "as the loop's clock saw it; loop_full: the same for a proposing round, an empty round at "
        "plain_round; rates per temperature: "
        "accepted / examined per depth at the largest budget, "
        "pooled over prompts (a depth a temperature never examined: pooled over temperatures, else the "
        "depth above's); budget_rates: per budget, its rounds' (accepted + 4 pooled) / (examined + 4), "
        "pooled: the rate of all the budgets' rounds at that temperature; tokens per round per "
        "temperature and budget: mean over prompts; catch_up: per "
        "prompt position, the median over prompts and budgets, then over temperatures; plain_round per "
        "temperature: a budget-0 round of the tree loop over plain decoding's step, median over prompts; "
        f"shadow_c: a shadow probe at the smallest budget every {SHADOW_EVERY} rounds, its drafting and "
        "verification beyond a plain step's per probe asked, median over prompts, then over temperatures",
    }
    return price_calibration(raw, verify)


def price_calibration(calibration: dict[str, Any], bare: Sequence[float]) -> dict[str, Any]:
    """A :func:`calibrate_policy` result priced by the bare verify curve ``bare`` (v(k) for k = 1 .. at
    least the largest budget + 1, v(1) = 1; its first entries are used): per temperature and budget, a
    proposing round's bare price is the mean of v(n + 1) over the calibration's proposing rounds by the
    nodes they proposed (``nodes``; v(b + 1) where none proposed); ``level`` is :func:`curve_level` of
    those prices against the loop's clock (``loop_full``); ``verify`` = 1 + level (v(k) - 1) and each
    budget's v = 1 + level (its median price over temperatures - 1). Returns a new dict with
    ``verify_bare`` = ``bare`` and those three replaced; ``verify_timed`` (the calibration's own timing)
    stays. A steeper ``bare`` raises the prices and lowers the level the loop's clock needs, never
    below 1: :func:`pooled_curves` pools a run's calibrations so that one timed in a regime where wide
    calls looked cheap (``noharm-v6``, ``noharm-v8``) is priced by the others'."""
    import numpy as np

    budgets = sorted(int(b) for b in calibration["budgets"])
    temps = calibration["per_temperature"]
    if any("nodes" not in t for t in temps.values()):
        raise ValueError("the calibration has no node counts per budget (made before price_calibration)")
    if len(bare) < max(budgets) + 1:
        raise ValueError(f"bare must give v(k) for k = 1 .. {max(budgets) + 1}; got {len(bare)} values")
    curve = [float(x) for x in bare[: max(budgets) + 1]]

    def price(t: str, b: int) -> float:
        hist = {int(n): k for n, k in temps[t]["nodes"][str(b)].items()}
        total = sum(hist.values())
        return sum(k * curve[n] for n, k in hist.items()) / total if total else curve[b]

    prices = {t: {b: price(t, b) for b in budgets} for t in temps}
    level = curve_level([(prices[t][b], temps[t]["loop_full"][str(b)]) for t in temps for b in budgets])
    out = dict(calibration)
    out["budgets"] = {
        str(b): [
            1.0 + level * (float(np.median([prices[t][b] for t in temps])) - 1.0),
            *calibration["budgets"][str(b)][1:],
        ]
        for b in budgets
    }
    out["verify_bare"] = curve
    out["verify"] = [1.0 + level * (x - 1.0) for x in curve]
    out["level"] = level
    return out


def pooled_curves(curves: Mapping[str, Sequence[float]], quantile: float = 0.75) -> dict[str, list[float]]:
    """For each name -> a bare verify curve timed in one run (v(k), k = 1 ..), the elementwise
    ``quantile`` (numpy's linear rule) of every curve that reaches that k, then never falling as k grows
    (a running maximum: a curve that stops early must not leave a longer curve's next entries below the
    ones it raised, or a wider round would look cheaper than a narrower one): the price a do-no-harm
    policy errs towards when the host's wide calls cost one thing in one minute and another in the next
    (one run's calibrations timed v(5) at 1.25 and at 1.89; ``noharm-v8``). An upper quantile leans to
    not drafting without letting one timing caught in a spike price the whole run (one calibration of a
    dev run timed v(2) = 1.39 and v(3) = 0.94 where the other six timed v(2) 1.05-1.26); ``quantile`` = 1
    is the elementwise steepest curve, the rule every run prices by but ``noharm-v11``
    (:class:`specdec.experiments.trees.ConfigSet`'s ``pool``; ``noharm-v9`` and ``noharm-v10`` without
    the running maximum, added after them)."""
    import itertools

    import numpy as np

    from specdec.theory.checks import check_float

    check_float("quantile", quantile, low=0.0, high=1.0)
    out = {}
    for name, own in curves.items():
        row = [
            float(np.quantile([float(c[k]) for c in curves.values() if len(c) > k], quantile))
            for k in range(len(own))
        ]
        out[name] = list(itertools.accumulate(row, max))
    return out


def no_harm_policy(
    calibration: dict[str, Any],
    *,
    prior: float = 4.0,
    probe_every: int = 16,
    explore: float = 0.01,
    shadow: bool = False,
) -> Any:
    """The :class:`~specdec.theory.policies.DoNoHarm` of a :func:`calibrate_policy` result: its costs
    per budget, its prior acceptance per depth (per temperature) at ``prior`` pseudo-rounds; every
    generation starts from that prior (``remember`` 0), so a generation's budgets depend on its own past
    only; probes spend about ``explore`` of the time while speculation does not pay, the drafter's
    catch-up included; E[tokens | b] is the measured tokens per round where the calibration has them, and
    each round is priced by the verify curve at the nodes its drafter proposed where the calibration
    has the curve (``verify``); a round's acceptance is read against its own budget's calibrated rates
    where the calibration has them (``budget_rates``: a one-node round and a tree of eight differ at depth
    1); with ``shadow``, its probes are shadow rounds (a plain step that scores the drafter's guess,
    :meth:`~specdec.theory.policies.BudgetPolicy.shadows`), each priced at the calibration's ``shadow_c``
    where it has one. A calibration of an earlier format (one list
    of rates for every temperature, no tokens per round, no catch-up, no verify curve, no rates per
    budget) is read as it is."""
    from specdec.theory.policies import DoNoHarm

    budgets = {int(b): (float(v), float(c), int(d)) for b, (v, c, d) in calibration["budgets"].items()}
    rates = calibration["prior_rates"]
    rates = {float(t): list(r) for t, r in rates.items()} if isinstance(rates, dict) else list(rates)
    per_t = calibration.get("tokens_per_round") or {}
    shares = {float(t): float(x) for t, x in (calibration.get("proposes") or {}).items()} or None
    by_budget = {  # an earlier calibration has none: every budget at prior_rates
        int(b): {float(t): list(r) for t, r in by_t.items()}
        for b, by_t in (calibration.get("budget_rates") or {}).items()
    } or None
    tokens = {float(t): {int(b): float(e) for b, e in per.items()} for t, per in per_t.items()} or None
    probe_cost = calibration.get("shadow_c")  # a record stores NaN as null; an earlier one has none
    probe_cost = float(probe_cost) if shadow and probe_cost is not None and probe_cost == probe_cost else None
    return DoNoHarm(
        budgets, prior=prior, prior_rate=rates, probe_every=probe_every, explore=explore,
        catch_up=float(calibration.get("catch_up", 0.0)), tokens=tokens, verify=calibration.get("verify"),
        proposes=shares, budget_rates=by_budget, shadow=shadow, probe_cost=probe_cost,
    )  # fmt: skip


#: Bytes per weight of a Q8_0 matrix as the C kernels stream it (a block of 32 int8 codes and its
#: half-precision scale: 34 bytes per 32 weights).
Q8_BYTES_PER_WEIGHT = 34 / 32


def draft_work(drafter: Any, *, max_depth: int = 4) -> dict[str, Any]:
    """The arithmetic a drafter's networks do per row, from their weights (no timing): every int8 matrix
    (:class:`specdec.engine.leannative.Q8Linear`) and every lean model (its layers and head:
    :func:`specdec.measure.verifykernels.model_counts`) reachable from the drafter's attributes, nested
    drafters included (a hybrid's network, a chain drafter in a tree adapter), each counted once.
    ``macs``: multiply-adds of one row through all of them; ``weight_bytes``: what one pass over them
    streams; ``parts``: where each count comes from. A drafter without networks (prompt lookup, suffix
    decoding) does no such arithmetic: zeros. This prices a drafter at its arithmetic floor (issue 44,
    item 2): a draft call over r rows costs at least max(weight bytes / bandwidth, r x macs / peak)."""
    from specdec.engine.lean import LeanLlama
    from specdec.engine.leannative import Q8Linear
    from specdec.measure.verifykernels import model_counts

    seen: set[int] = set()
    parts: list[dict[str, Any]] = []

    def visit(obj: Any, path: str, depth: int) -> None:
        if id(obj) in seen or depth > max_depth:
            return
        seen.add(id(obj))
        if isinstance(obj, Q8Linear):
            n, k = obj.out_features, obj.in_features
            parts.append({"part": path, "kind": "int8 matrix", "macs": n * k,
                          "weight_bytes": n * k * Q8_BYTES_PER_WEIGHT})  # fmt: skip
        elif isinstance(obj, LeanLlama):
            counts = model_counts(obj)
            parts.append({"part": path, "kind": f"lean model, {obj.num_layers} layer(s) and head",
                          "macs": counts["macs"], "weight_bytes": counts["weight_bytes"]})  # fmt: skip
        elif isinstance(obj, (list, tuple)):
            for i, item in enumerate(obj):
                visit(item, f"{path}[{i}]", depth + 1)
        elif type(obj).__module__.startswith("specdec.") and hasattr(obj, "__dict__"):
            for name, value in vars(obj).items():
                visit(value, f"{path}.{name}" if path else name, depth + 1)

    visit(drafter, "", 0)
    return {
        "macs": int(sum(p["macs"] for p in parts)),
        "weight_bytes": float(sum(p["weight_bytes"] for p in parts)),
        "parts": parts,
        "rule": "one row through every network the drafter holds, each matrix once",
    }


def git_commit(folder: str) -> str:
    import subprocess

    out = subprocess.run(
        ["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip()


def _side(rows: list[dict]) -> dict[str, float]:
    """c per round and per call (:func:`specdec.theory.speedup.cost_coefficient`, gamma = 1, per round or
    per draft call, in plain loop steps), calls per round and the plain step: medians over the rows."""
    import numpy as np

    from specdec.theory.speedup import cost_coefficient

    def med(values: list[float]) -> float:
        return float(np.median(values))

    return {
        "c_round": med([cost_coefficient(r["draft_s"], r["rounds"], 1, r["plain_step_s"]) for r in rows]),
        "c_call": med(
            [cost_coefficient(r["draft_s"], max(r["draft_calls"], 1), 1, r["plain_step_s"]) for r in rows]
        ),
        "calls_per_round": med([r["draft_calls"] / r["rounds"] for r in rows]),
        "plain_step_ms": med([r["plain_step_s"] for r in rows]) * 1e3,
        **(
            {  # records made before the whole generation was timed have none of these
                "decode_ms_per_token": med([r["decode_s"] / r["new_tokens"] for r in rows]) * 1e3,
                "gc_ms_per_token": med([r["gc_s"] / r["new_tokens"] for r in rows]) * 1e3,
                "plain_decode_ms_per_token": med([r["plain_decode_s"] / r["plain_new_tokens"] for r in rows])
                * 1e3,
            }
            if all("decode_s" in r for r in rows)
            else {}
        ),
    }


def compare(before: list[dict], after: list[dict], *, seed: int = 0) -> list[dict]:
    """Per configuration and budget (one spec at two budgets: two entries): c_round, c_call and calls per
    round of each side (medians over prompts and repetitions; where the samples have them, the whole
    generation's decoding time per token, the collector's time per generated token over the whole call,
    prefill included (median; it is heavy-tailed), and ``decode_speedup``: before / after time per
    generated token by the same estimator), and how much faster a round's drafting got,
    ``draft_speedup`` = before / after time per round by :func:`specdec.theory.intervals.paired_speedup`
    (the book's one estimator: per prompt the median over repetitions, the geometric mean over prompts, a
    bootstrap interval over prompts).
    Prompts missing on either side are left out, not guessed."""

    from specdec.theory.intervals import paired_speedup

    out = []
    for config, budget in dict.fromkeys((r["config"], r["budget"]) for r in after):
        b = [r for r in before if (r["config"], r["budget"]) == (config, budget)]
        a = [r for r in after if (r["config"], r["budget"]) == (config, budget)]
        prompts = sorted({r["prompt"] for r in a} & {r["prompt"] for r in b})
        if not prompts:
            continue

        def per_round(rows: list[dict], p: int) -> list[float]:
            return [r["draft_s"] / r["rounds"] for r in rows if r["prompt"] == p]

        b, a = [r for r in b if r["prompt"] in prompts], [r for r in a if r["prompt"] in prompts]
        x, lo, hi = paired_speedup(
            [per_round(b, p) for p in prompts], [per_round(a, p) for p in prompts], seed=seed
        )
        entry = {
            "config": config, "budget": budget, "prompts": len(prompts),
            "before": _side(b), "after": _side(a), "draft_speedup": [x, lo, hi],
        }  # fmt: skip
        if all("decode_s" in r for r in a + b):  # the whole generation, per token: before / after

            def per_token(rows: list[dict], p: int) -> list[float]:
                return [r["decode_s"] / r["new_tokens"] for r in rows if r["prompt"] == p]

            entry["decode_speedup"] = list(
                paired_speedup(
                    [per_token(b, p) for p in prompts], [per_token(a, p) for p in prompts], seed=seed
                )
            )
        out.append(entry)
    return out


def side_main(argv: list[str]) -> int:
    """The worker of ``specdec run draft-cost`` (:class:`specdec.experiments.draftcost.DraftCostRun`):
    run as a file of this checkout with ``PYTHONPATH`` = the checkout to measure, it runs :func:`measure`
    in this process and prints its JSON. ``argv``: ``--side --threads N --prompts N --drafter-threads
    A,B --new-tokens N --configs JSON`` exactly, JSON a list of [spec, budget] pairs (the program writes
    them; a worker run by hand gets a ValueError naming the form)."""
    form = "--side --threads N --prompts N --drafter-threads A[,B...] --new-tokens N --configs JSON"
    from specdec.theory.checks import check_int

    names = argv[1:10:2] if len(argv) == 11 else []
    if argv[:1] != ["--side"] or names != ["--threads", "--prompts", "--drafter-threads", "--new-tokens",
                                           "--configs"]:  # fmt: skip
        raise ValueError(f"the draft-cost worker takes {form}; got {' '.join(argv)!r}")
    threads = check_int("--threads", int(argv[2]), low=1)
    prompts = check_int("--prompts", int(argv[4]), low=1)
    dts = tuple(check_int("--drafter-threads", int(x), low=1) for x in argv[6].split(","))
    new_tokens = check_int("--new-tokens", int(argv[8]), low=1)
    try:
        pairs = json.loads(argv[10])
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"--configs must be a JSON list of [spec, budget] pairs; got {argv[10]!r} ({exc})"
        ) from None
    configs = tuple((str(spec), check_int("a budget", budget, low=1)) for spec, budget in pairs)
    sys.stdout.write(json.dumps(measure(
        configs, threads=threads, prompts=prompts, drafter_threads=dts, new_tokens=new_tokens
    )))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(side_main(sys.argv[1:]))
