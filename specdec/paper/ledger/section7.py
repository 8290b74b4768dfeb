"""Measured verdicts of the source article's section 7 (and 引-4, 三-7) on the newest campaign record (v3).

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
  that copy their input (summarize, extract) against open chat, judged at each temperature: the verdict
  names the temperatures it holds at and the tasks that carry it, and says when a task not counted as
  repetitive (code) gains like the copying tasks.

This module is the one place these verdicts come from: the "Beyond the paper" chapter shows
:func:`section7_rows`, and the claims ledger (:func:`specdec.paper.ledger.build_ledger` with the same
record) gives each of these claims (``check_kind`` ``target`` in ``article_claims.csv``) the same verdict.
The article's printed values the rules compare with are read from ``article_claims.csv``
(:data:`LOW_PRINTED`), not typed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from specdec.analysis.answer import is_tree
from specdec.paper.article import load_article_claims, printed_values
from specdec.paper.audit import parse_printed
from specdec.paper.ledger.measured import NOT_RECORDED
from specdec.theory.intervals import bootstrap_ci

__all__ = [
    "COPYING",
    "FAILS",
    "FAMILIES7",
    "HOLDS",
    "LOW_PRINTED",
    "NOT_RECORDED",
    "OPEN_TASK",
    "RULES7",
    "TARGET_VERDICTS",
    "UNDECIDED",
    "per_temperature_verdict",
    "section7_rows",
]

#: The verdicts: about this book's target on its CPU, never about the article's models. The claims
#: ledger gives each of these claims the same verdict (its ``check_kind`` is ``target``).
HOLDS, FAILS, UNDECIDED = "holds for this target", "fails for this target", "undecided for this target"
#: A rule's verdicts at one temperature, and without a record ("not recorded on this machine").
TARGET_VERDICTS = (HOLDS, FAILS, UNDECIDED, NOT_RECORDED)
#: 七-9's repetitive workloads: the campaign's tasks that copy from their input; and the open task.
COPYING, OPEN_TASK = ("summarize", "extract"), "chat"

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
        "undecided otherwise. Judged at each temperature the campaign ran (0 and 1); where the verdicts "
        "differ the verdict names each temperature's, and a verdict that holds names the copying tasks that "
        "carry it (faster by their interval). A task counted as neither (code) 'gains like the copying "
        "tasks' when its estimate lies nearer the nearest copying task's than chat's; the verdict's note "
        "says so. The comparison table's other columns (alpha, c, training, memory) are measured in the "
        "chapter, not judged.",
    ),
}
#: item -> the key of the claim's printed value that each rule compares with (Medusa-1's "over 2.2X", the
#: low end of a printed range, suffix decoding's "up to 5.3X").
PRINTED_KEY = {"七-2": "medusa1", "七-3": "low", "引-4": "low", "七-4": "low", "七-5": "low", "七-6": "max"}


def _printed_low() -> dict[str, float]:
    claims = {c.id: c for c in load_article_claims()}
    out = {}
    for item, key in PRINTED_KEY.items():
        (text,) = printed_values(claims[RULES7[item][0]].printed)[key]
        out[item] = parse_printed(text)[0]
    return out


#: The article's lowest printed speedup per claim, read from ``article_claims.csv``.
LOW_PRINTED: dict[str, float] = _printed_low()


def _relative() -> tuple[tuple[float, float], tuple[float, float]]:
    """七-4's "20%-40% faster" as ratios, and the rule's bounds: the printed tens, half a ten each way."""
    (claim,) = [c for c in load_article_claims() if c.id == "七-4"]
    printed = printed_values(claim.printed)
    low, high = (float(printed[k][0].rstrip("%")) / 100 for k in ("faster_low", "faster_high"))
    half = 0.1 / 2  # the printed values are tens of percent
    return (1 + low - half, 1 + high + half), (1 + low, 1 + high)


#: 七-4's relative claim: (the rule's bounds on EAGLE-2 over EAGLE-1), (the printed ratios).
RELATIVE_BOUNDS, RELATIVE_PRINTED = _relative()


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


def _short(verdict: str) -> str:
    """A verdict without "for this target" (the second temperature's, after the first's full one)."""
    return verdict.removesuffix(" for this target")


def per_temperature_verdict(verdicts: Mapping[float, str], carriers: Mapping[float, Sequence[str]]) -> str:
    """One verdict from a rule judged at each temperature (``verdicts``: temperature -> verdict): the
    verdict itself where every temperature gives it, else each temperature's in turn ("holds for this
    target at temperature 0 (on extract alone), undecided at temperature 1"). A verdict that holds on
    some of the copying tasks only (``carriers``: temperature -> the tasks faster by their interval)
    names them."""

    def on(temp: float) -> str:
        tasks = list(carriers.get(temp, ()))
        if verdicts[temp] != HOLDS or not tasks or set(tasks) >= set(COPYING):
            return ""
        return f" (on {tasks[0]} alone)" if len(tasks) == 1 else f" (on {' and '.join(tasks)} only)"

    temps = sorted(verdicts)
    if len({(verdicts[t], on(t)) for t in temps}) == 1:
        return verdicts[temps[0]] + on(temps[0])
    return ", ".join(
        f"{verdicts[t] if i == 0 else _short(verdicts[t])} at temperature {t:g}{on(t)}"
        for i, t in enumerate(temps)
    )


def _repetitive(
    sim: Mapping[str, Any],
) -> tuple[str, str, dict[str, float], dict[float, str], dict[float, list[str]], str]:
    """七-9 judged at each temperature of the record: (verdict, evidence, values, the verdict per
    temperature, the copying tasks faster by their interval per temperature, the caveat on the tasks
    counted as neither copying nor open)."""
    temps = sorted({float(s["temperature"]) for s in sim["strata"]})
    per_temp: dict[float, str] = {}
    carriers: dict[float, list[str]] = {}
    values: dict[str, float] = {}
    parts, caveats = [], []
    for temp in temps:
        tasks = [s["task"] for s in sim["strata"] if float(s["temperature"]) == temp and s["task"] != "all"]
        est = {}
        for task in tasks:
            f = _family(sim, temp, task, "suffix")
            if f is not None:
                est[task] = f["vs_fastest_plain"]
        copy = [t for t in COPYING if t in est]
        if OPEN_TASK not in est or not copy:
            per_temp[temp] = NOT_RECORDED
            continue
        carriers[temp] = [t for t in copy if est[t]["low"] > 1]
        above = [est[t]["estimate"] > est[OPEN_TASK]["estimate"] for t in copy]
        per_temp[temp] = (HOLDS if carriers[temp] and all(above) else
                          FAILS if not carriers[temp] and not any(above) else UNDECIDED)  # fmt: skip
        for t, x in est.items():
            values[f"{t}_t{temp:g}"] = x["estimate"]
            values[f"{t}_t{temp:g}_low"] = x["low"]
            values[f"{t}_t{temp:g}_high"] = x["high"]
        shown = [f"{t} {x['estimate']:.2f}x [{x['low']:.2f}, {x['high']:.2f}]" for t, x in est.items()]
        parts.append(f"temperature {temp:g}: " + ", ".join(shown))
        for t in est:
            if t in COPYING or t == OPEN_TASK or per_temp[temp] != HOLDS:
                continue  # the caveat qualifies a verdict that holds: do the copying tasks alone gain?
            near = min(copy, key=lambda c: abs(est[c]["estimate"] - est[t]["estimate"]))
            if abs(est[t]["estimate"] - est[near]["estimate"]) < abs(
                est[t]["estimate"] - est[OPEN_TASK]["estimate"]
            ):
                caveats.append(
                    f"at temperature {temp:g}, {t}, not counted as repetitive, gains like the copying tasks "
                    f"({est[t]['estimate']:.2f}x, nearer {near}'s {est[near]['estimate']:.2f}x than "
                    f"{OPEN_TASK}'s {est[OPEN_TASK]['estimate']:.2f}x)"
                )
    if not per_temp or all(v == NOT_RECORDED for v in per_temp.values()):
        return NOT_RECORDED, "the record lacks a task", {}, per_temp, carriers, ""
    verdict = per_temperature_verdict(per_temp, carriers)
    caveat = "; ".join(caveats)
    evidence = "suffix decoding: " + "; ".join(parts) + (f". Caveat: {caveat}" if caveat else "")
    return verdict, evidence, values, per_temp, carriers, caveat


def section7_rows(record: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One row per item of :data:`RULES7` from a complete campaign record (v2 or v3): item, claim, evidence
    (rounded for reading), verdict, the unrounded values, ``per_temperature`` (the rule's verdict at each
    temperature, for a rule judged at each: 七-9; else empty), ``carriers`` (七-9: the copying tasks faster
    than the fastest plain decoder by their interval, per temperature) and ``caveat`` (what qualifies the
    verdict beyond it, "" when nothing does); "not recorded on this machine" without a record."""
    if record is None:
        return [
            {"item": i, "claim": c, "evidence": "no campaign record",
             "verdict": NOT_RECORDED, "values": {}, "per_temperature": {}, "carriers": {},
             "caveat": ""}
            for i, (c, _) in RULES7.items()
        ]  # fmt: skip
    sim = record["analyses"]["simultaneous"]
    median = record["analyses"]["median"]
    seed = int(record["settings"].get("seed", 0))
    out = []
    for item, (claim, _) in RULES7.items():
        values: dict[str, float] = {}
        per_temp: dict[float, str] = {}
        carriers: dict[float, list[str]] = {}
        caveat = ""
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
                    (lo_b, hi_b), (lo_p, hi_p) = RELATIVE_BOUNDS, RELATIVE_PRINTED
                    inside = lo_b <= lo and hi <= hi_b
                    outside = hi < lo_b or lo > hi_b
                    rel_v = HOLDS if inside else FAILS if outside else UNDECIDED
                    art = f"(the article: {lo_p:g}-{hi_p:g})"
                    evidence += f"; over EAGLE's chain {est:.2f}x [{lo:.2f}, {hi:.2f}] {art}"
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
            verdict = HOLDS if n and ok == n and equal == greedy else FAILS if n else NOT_RECORDED
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
            verdict = HOLDS if cond and same == len(cond) else FAILS if cond else NOT_RECORDED
            evidence = f"{same} of {len(cond)} greedy runs of Medusa, EAGLE and EAGLE-2 equal plain decoding"
        else:  # 七-9
            verdict, evidence, values, per_temp, carriers, caveat = _repetitive(sim)
        out.append({"item": item, "claim": claim, "evidence": evidence, "verdict": verdict, "values": values,
                    "per_temperature": per_temp, "carriers": carriers, "caveat": caveat})  # fmt: skip
    return out
