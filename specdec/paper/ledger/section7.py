"""Measured verdicts of the source article's section 7 (and 引-4, 三-7) on the second campaign's record.

The article's section 7 reports speedups of methods built on the target (Medusa, EAGLE, EAGLE-2, IBM's
MLP speculator) and of suffix decoding, measured by their authors on 7B-70B models and GPUs. The book
cannot rerun those; it built each method here, trained the drafters on this target's own text, and
timed every family in one campaign (``results/campaign/v2-*.json``, :mod:`specdec.experiments.campaign2`).
What that record decides, claim by claim, with the rule in :data:`RULES7`:

* the speedup claims (七-2, 七-3 = 引-4, 七-4, 七-5, 七-6) against the same method's speedup here over the
  fastest plain decoder measured (tasks pooled, temperature 0, the setting cross-fitted, the
  Bonferroni-simultaneous interval of the campaign's family table): a verdict about *this* target and
  CPU, never about the article's models;
* 七-4's relative claim (EAGLE-2 20-40 % faster than EAGLE-1): the ratio of the two families' tokens/s,
  prompt by prompt, with a bootstrap interval;
* 七-8 (one forward pass verifies every path of a tree): every tree configuration's rounds each made one
  target call;
* 三-7 (EAGLE and Medusa preserve the target's distribution): every greedy run of a target-conditioned
  drafter equals plain decoding token for token (the chi-square tests at temperature 1 are in
  ``tests/test_conditioned.py``);
* 七-9 (n-gram and suffix drafts pay off on repetitive workloads): suffix decoding's speedup on the tasks
  that copy their input (summarize, extract) against open chat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from specdec.analysis.answer import is_tree
from specdec.theory.intervals import bootstrap_ci

__all__ = ["FAILS", "FAMILIES7", "HOLDS", "RULES7", "UNDECIDED", "section7_rows"]

#: The verdicts: about this book's target on its CPU, never about the article's models (the claims
#: ledger's own verdicts judge the claims against the sources the book holds).
HOLDS, FAILS, UNDECIDED = "holds for this target", "fails for this target", "undecided for this target"

#: The campaign family (its drafter spec) each claim is about.
FAMILIES7: dict[str, str] = {
    "七-2": "medusa:medusa-4",
    "七-3": "eagle:eagle-1",
    "引-4": "eagle:eagle-1",
    "七-4": "eagle:eagle-1,topk=4,depth=5",
    "七-5": "mlp:mlp-4,ranks=1",
    "七-6": "suffix",
}
SPEED_RULE = (
    "the method's speedup here over the fastest plain decoder measured (temperature 0, tasks pooled, its "
    "setting cross-fitted where the campaign gives it two, fixed before the run otherwise) with the "
    "campaign's Bonferroni-simultaneous interval: holds when the interval's "
    "low end reaches the article's lowest printed value, fails when its high end stays below it, undecided "
    "otherwise. About this target (SmolLM2-135M) on this CPU, not the article's 7B-70B models on GPUs. "
    "The family judged for each claim was fixed before the run (FAMILIES7: Medusa's 4-node tree, EAGLE's "
    "chain, EAGLE-2's dynamic tree, the MLP speculator's chain); each source's other families are in the "
    "chapter's table."
)
#: item -> (the ledger claim, the rule).
RULES7: dict[str, tuple[str, str]] = {
    "七-2": ("七-2", SPEED_RULE + " Medusa-1 (frozen backbone): 'over 2.2X'."),
    "七-3": ("七-3", SPEED_RULE + " EAGLE: 2.7-3.5X."),
    "引-4": ("引-4", SPEED_RULE + " EAGLE: 2.7-3.5X (the introduction's figure)."),
    "七-4": (
        "七-4",
        SPEED_RULE
        + " EAGLE-2: 3.05-4.26X; and the relative claim, 20-40 % faster than EAGLE-1: the geometric "
        "mean over prompts of EAGLE-2's tokens/s over EAGLE's chain (each at its one setting, fixed before "
        "the run; a family with two settings would need the choice re-made on every resample; EAGLE-1 is "
        "drafted here as a chain of 2, a static tree of one path, not the paper's static tree) with a 95 % "
        "bootstrap interval holds when it lies within 15-45 % (the printed tens, half a unit each way), "
        "fails when it lies wholly outside, undecided otherwise; the verdict is the speedup's and the "
        "relative claim's "
        "together (fails when either fails).",
    ),
    "七-5": ("七-5", SPEED_RULE + " IBM's MLP speculator: 2-3X."),
    "七-6": (
        "七-6",
        "suffix decoding's speedup over the fastest plain decoder on each task here (simultaneous "
        "intervals): the claim ('up to 5.3X' on agentic benchmarks: SWE-Bench, Text-to-SQL) is about "
        "workloads this campaign does not run, so it is undecided here whatever the numbers; they are shown.",
    ),
    "七-8": (
        "七-8",
        "every tree configuration of the campaign (lookup tree, suffix tree, draft tree, Medusa, MLP tree, "
        "EAGLE-2) verified each round's whole tree in one target call, and correctly: holds when target "
        "calls = rounds (the prefill not counted) in every run of every tree configuration and every "
        "greedy run of one equals plain decoding token for token (repetition 0 against plain, later "
        "repetitions against repetition 0), fails otherwise. That each node's logits equal the chain's "
        "over its path is tested bit for bit (tests/test_tree_forward.py).",
    ),
    "三-7": (
        "三-7",
        "every greedy run (temperature 0) of Medusa, EAGLE and EAGLE-2 equals plain decoding on the same "
        "engine token for token (repetition 0: the record's first_divergence_from_plain; later repetitions: "
        "their tokens equal repetition 0's, same_as_rep0): holds when all do, fails when one differs.",
    ),
    "七-9": (
        "七-9",
        "the part measurable here, 'n-gram and suffix drafts pay off on repetitive workloads': suffix "
        "decoding's speedup over the fastest plain decoder (temperature 0, the campaign's "
        "Bonferroni-simultaneous intervals, as for every section-7 speed claim) on the two tasks that copy "
        "from their input (summarize, extract; code and chat are not counted as repetitive) against open "
        "chat: holds when one of them is faster than the fastest plain decoder by its interval and both "
        "point estimates exceed chat's, fails when neither is faster and neither estimate exceeds chat's, "
        "undecided otherwise. The comparison table's other columns (alpha, c, training, memory) are "
        "measured in the chapter, not judged.",
    ),
}
#: The article's lowest printed speedup per claim (its tables' values, for the rule).
LOW_PRINTED = {"七-2": 2.2, "七-3": 2.7, "引-4": 2.7, "七-4": 3.05, "七-5": 2.0, "七-6": 5.3}


def _family(analysis: Mapping[str, Any], temp: float, task: str, spec: str) -> Mapping[str, Any] | None:
    for s in analysis["strata"]:
        if float(s["temperature"]) == temp and s["task"] == task:
            for f in s["families"]:
                if f["family"].split("/", 1)[1] == spec:
                    return f
    return None


def _speed_verdict(low: float, high: float, bound: float) -> str:
    if low >= bound:
        return HOLDS
    if high < bound:
        return FAILS
    return UNDECIDED


def _relative(median: Mapping[str, Any], a: str, b: str, seed: int) -> tuple[float, float, float] | None:
    """Geometric mean over prompts of family a's out-of-fold tokens/s over family b's (T=0, pooled)."""
    fa, fb = _family(median, 0.0, "all", a), _family(median, 0.0, "all", b)
    if fa is None or fb is None:
        return None
    ratio = np.asarray(fa["per_prompt"]["tok_s"]) / np.asarray(fb["per_prompt"]["tok_s"])
    (stratum,) = [s for s in median["strata"] if float(s["temperature"]) == 0.0 and s["task"] == "all"]
    strata = [(p[0], f) for p, f in zip(stratum["prompts"], stratum["folds"], strict=True)]
    est, low, high = bootstrap_ci(
        ratio, lambda x, axis=None: np.exp(np.log(x).mean(axis=axis)), n_boot=4000, seed=seed, strata=strata
    )
    return est, low, high


def _greedy_equal(r: Mapping[str, Any]) -> bool:
    """A greedy run's tokens equal plain decoding's: repetition 0 by its comparison with plain, a later
    repetition by its equality with repetition 0 (greedy decoding being deterministic)."""
    if r["rep"] == 0:
        return "first_divergence_from_plain" in r and r["first_divergence_from_plain"] is None
    return bool(r.get("same_as_rep0"))


def _tree_calls(runs: Sequence[Mapping[str, Any]]) -> tuple[int, int, int, int, float]:
    """(runs of tree configurations, those that made one target call per round, their greedy runs, those
    equal to plain decoding, mean tree nodes per round in the repetition-0 Stats)."""
    n = ok = greedy = equal = 0
    nodes = rounds = 0
    for r in runs:
        if not is_tree(f"{r['engine']}/{r['drafter']}"):  # the campaign's tree configurations (七-8)
            continue
        n += 1
        ok += r["target_calls"] == r["rounds"]
        if float(r["temperature"]) == 0.0:
            greedy += 1
            equal += _greedy_equal(r)
        if "stats" in r:
            nodes += r["stats"]["drafted_tokens"]
            rounds += r["stats"]["rounds"]
    return n, ok, greedy, equal, nodes / rounds if rounds else float("nan")


def section7_rows(record: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One row per item of :data:`RULES7` from a complete campaign-v2 record: item, claim, evidence (rounded
    for reading), verdict and the unrounded values; "not recorded on this machine" without a record."""
    if record is None:
        return [
            {"item": i, "claim": c, "evidence": "no campaign-v2 record",
             "verdict": "not recorded on this machine", "values": {}}
            for i, (c, _) in RULES7.items()
        ]  # fmt: skip
    sim = record["analyses"]["simultaneous"]
    median = record["analyses"]["median"]
    seed = int(record["settings"].get("seed", 0))
    out = []
    for item, (claim, _) in RULES7.items():
        values: dict[str, float] = {}
        if item in LOW_PRINTED and item != "七-6":
            f = _family(sim, 0.0, "all", FAMILIES7[item])
            x = f["vs_fastest_plain"]
            values = {"x": x["estimate"], "low": x["low"], "high": x["high"], "bound": LOW_PRINTED[item]}
            verdict = _speed_verdict(x["low"], x["high"], LOW_PRINTED[item])
            evidence = (f"{x['estimate']:.2f}x [{x['low']:.2f}, {x['high']:.2f}] the fastest plain decoder; "
                        f"the article: from {LOW_PRINTED[item]:g}X")  # fmt: skip
            if item == "七-4":
                rel = _relative(median, FAMILIES7["七-4"], FAMILIES7["七-3"], seed)
                if rel is not None:
                    est, lo, hi = rel
                    values |= {"rel": est, "rel_low": lo, "rel_high": hi}
                    inside = 1.15 <= lo and hi <= 1.45
                    outside = hi < 1.15 or lo > 1.45
                    rel_v = HOLDS if inside else FAILS if outside else UNDECIDED
                    evidence += f"; over EAGLE's chain {est:.2f}x [{lo:.2f}, {hi:.2f}] (the article: 1.2-1.4)"
                    if FAILS in (verdict, rel_v):
                        verdict = FAILS
                    elif verdict != rel_v:
                        verdict = UNDECIDED
        elif item == "七-6":
            parts = []
            for s in sim["strata"]:
                if float(s["temperature"]) == 0.0:
                    f = _family(sim, 0.0, s["task"], "suffix")
                    if f is not None:
                        x = f["vs_fastest_plain"]
                        values[s["task"]] = x["estimate"]
                        parts.append(f"{s['task']} {x['estimate']:.2f}x [{x['low']:.2f}, {x['high']:.2f}]")
            verdict, evidence = (
                UNDECIDED,
                "no agentic workload here; suffix decoding: " + ", ".join(parts),
            )
        elif item == "七-8":
            n, ok, greedy, equal, nodes = _tree_calls(record["runs"])
            values = {"tree_runs": n, "one_call": ok, "greedy_runs": greedy, "greedy_equal": equal,
                      "nodes_per_round": nodes}  # fmt: skip
            verdict = (
                HOLDS if n and ok == n and equal == greedy else FAILS if n else "not recorded on this machine"
            )
            evidence = (f"{ok} of {n} runs of tree configurations made one target call per round "
                        f"(trees of {nodes:.1f} drafted nodes per round on average); {equal} of {greedy} "
                        "greedy runs equal plain decoding")  # fmt: skip
        elif item == "三-7":
            # repetition 0 carries the comparison with plain decoding; a later repetition, whether its
            # tokens equal repetition 0's (so, greedy being deterministic, plain's too)
            cond = [r for r in record["runs"] if float(r["temperature"]) == 0.0
                    and r["drafter"].split(":")[0] in ("medusa", "eagle")]  # fmt: skip
            same = sum(_greedy_equal(r) for r in cond)
            values = {"greedy_runs": len(cond), "equal": same}
            verdict = (
                HOLDS if cond and same == len(cond) else FAILS if cond else "not recorded on this machine"
            )
            evidence = f"{same} of {len(cond)} greedy runs of Medusa, EAGLE and EAGLE-2 equal plain decoding"
        else:  # 七-9
            est = {}
            for task in ("summarize", "extract", "chat"):
                f = _family(sim, 0.0, task, "suffix")
                if f is not None:
                    est[task] = f["vs_fastest_plain"]
            copy = [t for t in ("summarize", "extract") if t in est]
            if "chat" not in est or not copy:
                verdict, evidence = "not recorded on this machine", "the record lacks a task"
            else:
                faster = any(est[t]["low"] > 1 for t in copy)
                above = [est[t]["estimate"] > est["chat"]["estimate"] for t in copy]
                verdict = (HOLDS if faster and all(above) else
                           FAILS if not faster and not any(above) else UNDECIDED)  # fmt: skip
                values = {t: est[t]["estimate"] for t in est}
                evidence = "suffix decoding: " + ", ".join(
                    f"{t} {est[t]['estimate']:.2f}x [{est[t]['low']:.2f}, {est[t]['high']:.2f}]" for t in est
                )
        out.append({"item": item, "claim": claim, "evidence": evidence, "verdict": verdict, "values": values})
    return out
