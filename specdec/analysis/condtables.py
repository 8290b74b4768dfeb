"""The reader of the conditioned-drafters record (issue 30): goals, losslessness and where the time goes.

Pure functions of a complete ``conditioned`` record (``specdec run trees --set conditioned``), whose
cross-fit analysis, tree summary and verify curves have the trees record's form, so
:mod:`specdec.analysis.treetables`' readers apply to it too. Torch-free.

Goal rules (issue 30), fixed here before the record was read: "at least X times the fastest plain
decoder" is met when a family's cross-fitted estimate (tasks pooled) is >= X *and* the lower end of its
simultaneous interval (Bonferroni over every family verdict of the record, ``record["simultaneous"]``,
from ``specdec run trees --reanalyse``) is above 1, since a goal met by any of several families is a
choice made after seeing them; "c <= 0.10" is judged on c per draft call (the paper's c: a draft
step's time over a plain target step's, measured inside the decoding loop: ``c_round`` over the draft
calls per round, EAGLE's call that catches its cache up with the accepted tokens counted), for each
configuration; lossless means every greedy run's tokens equal plain decoding's
(``first_divergence_from_plain`` is None for every repetition-0 run at temperature 0). Estimates are
compared at full precision; the chapter prints them rounded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from specdec.analysis.treetables import family_rows, short

__all__ = [
    "CONDITIONED",
    "HANDICAP_RECORD",
    "NETWORK",
    "NETWORK_NOHARM",
    "NETWORK_V3",
    "SAMPLING_KINDS",
    "c_rows",
    "goals",
    "goals_self",
    "greedy_equal",
    "greedy_handicap",
    "never_drafting",
    "noharm_judgement",
    "policy_specs",
    "plain_position",
    "nodes_mix",
    "round_costs",
    "simultaneous_of",
    "time_per_token",
]

#: The target-conditioned families of issue 30, by their short names (their registry specs).
CONDITIONED = (
    "medusa:medusa-4",
    "mlp:mlp-4,ranks=1",
    "mlp:mlp-4",
    "eagle:eagle-1",
    "eagle:eagle-1,topk=4,depth=5",
)

#: The network drafters of issue 42's ``self`` record trained on the target's own text (registry specs).
NETWORK = ("mlp:mlp-self", "eagle:eagle-ttt", "eagle:eagle-ttt,topk=4,depth=5")
#: The same in campaign v3, with ``eagle-3m`` (the same recipe on all the self-generated data).
NETWORK_V3 = (*NETWORK, "eagle:eagle-3m", "eagle:eagle-3m,topk=4,depth=5")
#: The registry's drafter kinds that sample their draft from q with the call's generator at temperature
#: > 0 (a draft model's softmax, early exit's, n-gram counts); every other kind drafts deterministically.
SAMPLING_KINDS = frozenset(
    {"draft", "draft-tree", "early-exit", "early-exit-tree", "model", "unigram", "bigram"}
)
#: The network drafters of ``specdec run trees --set noharm`` (eagle-3m as a chain and as EAGLE-2's tree,
#: Medusa on the target's own text) and of ``--set noharm-v4`` (those and ``mlp-3m``), by registry spec.
NETWORK_NOHARM = ("eagle:eagle-3m", "eagle:eagle-3m,topk=4,depth=5", "medusa:medusa-self", "mlp:mlp-3m")


def _plain_id(record: Mapping[str, Any]) -> str:
    """The id of the record's plain decoder at the record's own thread count."""
    threads = record["settings"]["threads"]
    return next(c["id"] for c in record["configs"] if c["plain"] and c["threads"] == threads)


def c_rows(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per (temperature, configuration): c per round, draft calls per round and c per draft call."""
    out = []
    for r in record["trees"]["rows"]:
        calls = r["draft_calls_per_round"] or 0.0
        c = r["c_round_median"]
        out.append({
            "temperature": r["temperature"], "config": short(r["config"]), "c_round": c,
            "calls_per_round": calls, "c_per_call": c / calls if c is not None and calls else None,
        })  # fmt: skip
    return out


def greedy_equal(record: Mapping[str, Any]) -> dict[str, Any]:
    """Greedy runs (temperature 0, repetition 0) of speculative configurations whose tokens equal plain
    decoding's, out of how many, and the configurations of any that differ."""
    runs = [
        r
        for r in record["runs"]
        if r["drafter"] != "plain" and r["rep"] == 0 and float(r["temperature"]) == 0
    ]
    differ = sorted({short(r["config"]) for r in runs if r.get("first_divergence_from_plain") is not None})
    return {"runs": len(runs), "equal": sum(r.get("first_divergence_from_plain") is None for r in runs),
            "differ": differ}  # fmt: skip


def goals(record: Mapping[str, Any], families: Sequence[str] = CONDITIONED) -> list[dict[str, Any]]:
    """Issue 30's goals per conditioned family: (1) >= 1.5x the fastest plain decoder pooled at
    temperature 0; (2) >= 1.2x at temperature 1; (3) c per draft call <= 0.10 at both temperatures;
    (4) greedy output equal to plain. One row per goal and family with its numbers and ``met``."""
    rows = family_rows(record["simultaneous"])
    cs = c_rows(record)
    eq = greedy_equal(record)
    out = []
    for name in families:
        pooled = {r["temperature"]: r for r in rows if r["task"] == "all" and r["family"] == name}
        if set(pooled) != {0.0, 1.0}:
            raise ValueError(f"the record has no pooled row of {name!r} at temperatures 0 and 1")
        for goal, temp, bar in ((1, 0.0, 1.5), (2, 1.0, 1.2)):
            r = pooled[temp]
            out.append({
                "goal": goal, "family": name, "temperature": temp, "bar": bar,
                "estimate": r["x_estimate"], "low": r["x_low"], "high": r["x_high"], "chosen": r["chosen"],
                "met": r["x_estimate"] >= bar and r["x_low"] > 1.0,
            })  # fmt: skip
        mine = [c for c in cs if c["config"].rsplit("/", 1)[0] == name and c["c_per_call"] is not None]
        worst = max((c["c_per_call"] for c in mine), default=None)
        out.append({"goal": 3, "family": name, "c_per_call_max": worst,
                    "met": worst is not None and worst <= 0.10})  # fmt: skip
        out.append(
            {"goal": 4, "family": name, "met": name not in {d.rsplit("/", 1)[0] for d in eq["differ"]}}
        )
    return out


def simultaneous_of(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """A record's Bonferroni-simultaneous cross-fit: a trees record's ``simultaneous``, a campaign's
    ``analyses.simultaneous``."""
    if "simultaneous" in record:
        return record["simultaneous"]
    try:
        return record["analyses"]["simultaneous"]
    except KeyError:
        raise ValueError(
            "the record holds no simultaneous analysis (simultaneous, analyses.simultaneous)"
        ) from None


def goals_self(record: Mapping[str, Any], network: Sequence[str] = NETWORK) -> list[dict[str, Any]]:
    """Issue 42's goals on a complete ``self`` record (``specdec run trees --set self``) or campaign v3's
    (``specdec run campaign3``, with ``network`` naming its drafters), rules fixed before the record was
    read:

    1. the best network drafter (of ``network``; each configuration, i.e. spec and budget, judged on
       the held-out prompts' repetition-0 Stats, the best being the one with the most tokens per target
       call at temperature 0): depth-1 acceptance >= 0.6 and >= 2.2 tokens per target call at
       temperature 0, >= 1.8 at temperature 1 (the same configuration);
    2. under the do-no-harm policy (every ``+noharm`` family), no family x task x temperature cell
       below 0.98x the fastest plain decoder: met when every cell's estimate is >= 0.98 or the upper
       end of its simultaneous interval is above 1;
    3. the best family (highest pooled cross-fitted estimate, simultaneous intervals) >= 1.5x at
       temperature 0 and >= 1.2x at temperature 1 with the interval's lower end above 1;
    4. lossless: every repetition-0 greedy run's tokens equal plain decoding's (the runs that store
       their first divergence from plain).

    One row per goal (and per cell for goal 2) with its numbers and ``met``."""
    out: list[dict[str, Any]] = []
    by_config = {(r["temperature"], short(r["config"])): r for r in record["trees"]["rows"]}
    candidates = [
        c
        for (t, c) in by_config
        if t == 0.0
        and c.rsplit("/", 1)[0] in network
        and not c.endswith("/noharm")
        and by_config[(t, c)]["tokens_per_call"]
    ]
    if not candidates:
        raise ValueError(f"the record has no configuration of {list(network)} at temperature 0")
    best = max(candidates, key=lambda c: (by_config[(0.0, c)]["tokens_per_call"], c))
    g0, g1 = by_config[(0.0, best)], by_config.get((1.0, best))
    depth1 = g0["accept_at_depth"][0] if g0["accept_at_depth"] else None
    out.append({
        "goal": 1, "config": best, "depth1_t0": depth1, "tokens_per_call_t0": g0["tokens_per_call"],
        "tokens_per_call_t1": g1["tokens_per_call"] if g1 else None,
        "met": depth1 is not None and depth1 >= 0.6 and g0["tokens_per_call"] >= 2.2
        and g1 is not None and g1["tokens_per_call"] >= 1.8,
    })  # fmt: skip
    rows = family_rows(simultaneous_of(record))
    if not any(r["family"].endswith("+noharm") for r in rows):
        raise ValueError("the record has no do-no-harm family (+noharm): goal 2 cannot be judged")
    for r in rows:
        if r["family"].endswith("+noharm"):
            out.append({
                "goal": 2, "family": r["family"], "temperature": r["temperature"], "task": r["task"],
                "estimate": r["x_estimate"], "low": r["x_low"], "high": r["x_high"],
                "met": r["x_estimate"] >= 0.98 or r["x_high"] > 1.0,
            })  # fmt: skip
    for temp, bar in ((0.0, 1.5), (1.0, 1.2)):
        pooled = [r for r in rows if r["task"] == "all" and r["temperature"] == temp]
        top = max(pooled, key=lambda r: (r["x_estimate"], r["family"]))
        out.append({
            "goal": 3, "family": top["family"], "temperature": temp, "bar": bar,
            "estimate": top["x_estimate"], "low": top["x_low"], "high": top["x_high"],
            "met": top["x_estimate"] >= bar and top["x_low"] > 1.0,
        })  # fmt: skip
    eq = greedy_equal(record)
    out.append({"goal": 4, "runs": eq["runs"], "equal": eq["equal"], "differ": eq["differ"],
                "met": eq["runs"] > 0 and not eq["differ"]})  # fmt: skip
    return out


#: The last ``self`` record whose greedy plain decoder built warp's one-hot row and drew from it (commit
#: 1e110b3, before 0c1a774's argmax), relative to results/: the one record that measures that handicap
#: (:func:`greedy_handicap`); superseded as the chapter's record, kept in ``history/`` for this.
HANDICAP_RECORD = "bench/history/self-intel-r-xeon-r-processor-2t-1e110b3.json"


def greedy_handicap(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the greedy plain decoder of a ``self`` record spent beyond the tree loop's greedy plain round
    (records before commit 0c1a774: warp's one-hot row and a draw per token, where the tree loop takes an
    argmax): ms per token of each (every repetition's ``verify_s`` over its new tokens, temperature 0),
    the plain decoder's whole ms per token, the difference as a share of it, and the do-no-harm
    configurations that never drafted greedily (repetition 0's rounds), whose ratio over plain shows it.
    The tree loop's figure is the first such configuration's; ValueError when there is none."""
    plain = _plain_id(record)

    def greedy(cid: str) -> list[Mapping[str, Any]]:
        return [r for r in record["runs"] if r["config"] == cid and r["temperature"] == 0.0]

    never = [
        c["id"] for c in record["configs"] if c["id"].endswith("/noharm")
        and all(d == 0 for r in greedy(c["id"]) if "stats" in r for d in r["stats"]["drafted"])
    ]  # fmt: skip
    if not never:
        raise ValueError("no do-no-harm configuration of the record stayed plain greedily")

    def per_token(runs: list[Mapping[str, Any]], key: str) -> float:
        return 1e3 * sum(r[key] for r in runs) / sum(r["new_tokens"] for r in runs)

    plain_runs, tree_runs = greedy(plain), greedy(never[0])
    out = {
        "plain_config": plain, "never_drafted": never,
        "plain_verify_ms": per_token(plain_runs, "verify_s"),
        "tree_verify_ms": per_token(tree_runs, "verify_s"), "plain_ms": per_token(plain_runs, "decode_s"),
    }  # fmt: skip
    out["share"] = (out["plain_verify_ms"] - out["tree_verify_ms"]) / out["plain_ms"]
    return out


def time_per_token(
    record: Mapping[str, Any], temperature: float, task: str | None = None
) -> list[dict[str, Any]]:
    """Where a token's time goes at ``temperature`` (over ``task``'s prompts, or all), for the plain decoder
    at the record's threads and every do-no-harm configuration (``/noharm``): ms per new token in the
    loop's timers (every repetition's ``draft_s``, ``target_s`` and ``verify_s`` over their new tokens), the
    loop's rest (decode time less the timers), their total, the share of repetition 0's rounds that
    drafted (NaN where no run stored its rounds), and ``gc``: Python's cyclic collector over the whole
    call per new token (the record's ``gc_s``, the prompt's prefill included; what of it fell in decoding
    lies in whichever part it interrupted).
    Configurations are named ``plain`` or by their short spec without ``/noharm``."""
    plain = _plain_id(record)
    out = []
    for cid in [plain, *(c["id"] for c in record["configs"] if c["id"].endswith("/noharm"))]:
        runs = [r for r in record["runs"] if r["config"] == cid and r["temperature"] == temperature
                and (task is None or r["task"] == task)]  # fmt: skip
        if not runs:
            raise ValueError(f"the record has no run of {cid} at temperature {temperature} (task {task})")
        n = sum(r["new_tokens"] for r in runs)
        timers = {k: 1e3 * sum(r[k] for r in runs) / n for k in ("draft_s", "target_s", "verify_s")}
        rest = 1e3 * sum(r["decode_s"] for r in runs) / n - sum(timers.values())
        rounds = [d for r in runs if "stats" in r for d in r["stats"]["drafted"]]  # repetition 0's rounds
        out.append({
            "temperature": float(temperature),
            "configuration": "plain" if cid == plain else short(cid).removesuffix("/noharm"),
            "rounds that draft": (0.0 if cid == plain else sum(d > 0 for d in rounds) / len(rounds) if rounds
                                  else float("nan")),  # no stored rounds: unknown, not none
            "draft": timers["draft_s"], "target calls": timers["target_s"],
            "sampling, verifying": timers["verify_s"], "the loop's rest": rest,
            "total": sum(timers.values()) + rest,
            "gc": 1e3 * sum(r.get("gc_s", 0.0) for r in runs) / n,
        })  # fmt: skip
    return out


def noharm_judgement(record: Mapping[str, Any], network: Sequence[str] = NETWORK_NOHARM) -> dict[str, Any]:
    """A do-no-harm record (kind ``noharm``) judged by :func:`goals_self`'s rules, with what the chapter
    says of it:

    * ``goals``: :func:`goals_self`'s rows (``network``: the specs among which goal 1's best is sought);
      ``cells``: goal 2's rows; ``pooled``: temperature -> (lowest, highest) pooled estimate of the
      families under the policy;
    * ``never``: the family x temperature pairs whose policy drafted in none of repetition 0's rounds, each
      with its speed over the plain decoder of the same run (total time per token, every repetition); a
      pair any of whose runs decoded other tokens than the plain decoder on the same prompt, repetition
      and temperature raises ValueError (the policy never drafted, so its tokens are the plain
      decoder's), but for a drafter of :data:`SAMPLING_KINDS` at temperature > 0 on a prompt where it made
      shadow probes (it drew from the generator in each: the tokens differ, their law does not);
    * ``failing``: per failing cell of goal 2, its extra ms per token over the plain decoder on the same
      prompts in each of the loop's parts (:func:`time_per_token`), the largest part, and the share of
      rounds that drafted;
    * ``fixed``: (configuration, temperature) -> (estimate, low, high) of the configurations run at a
      fixed budget (tasks pooled, simultaneous intervals);
    * ``gc_ms``: configuration (short spec; ``plain`` the plain decoder at the record's threads) -> the
      cyclic collector's seconds over all its runs per generated token, in ms (each run's ``gc_s`` counts
      the whole call, the prompt's prefill included)."""
    from specdec.analysis.treetables import fixed_rows
    from specdec.drafting.registry import parse_spec

    goals = goals_self(record, network)
    cells = [r for r in goals if r["goal"] == 2]
    pooled = {
        t: (min(e), max(e))
        for t in (0.0, 1.0)
        if (e := [r["estimate"] for r in cells if r["temperature"] == t and r["task"] == "all"])
    }
    plain = _plain_id(record)
    plain_sha = {(r["prompt"], r["rep"], r["temperature"]): r["tokens_sha256"]
                 for r in record["runs"] if r["config"] == plain}  # fmt: skip
    by_name = policy_specs(record)
    never = []
    for t in (0.0, 1.0):
        split = {r["configuration"]: r for r in time_per_token(record, t)}
        for name, row in split.items():
            if name == "plain" or row["rounds that draft"] != 0:
                continue
            # sampled, a drafter that samples its draft (SAMPLING_KINDS) draws from the generator in a shadow
            # probe, so the step's uniform and token differ from plain's, in law the same: its prompts with a
            # probe are left out (every repetition runs the same seed, so repetition 0's counts say which)
            probed = set()
            if t > 0 and parse_spec(name).kind in SAMPLING_KINDS:
                probed = {r["prompt"] for r in _policy_rounds(record) if r["config"] == by_name[name]
                          and r["temperature"] == t and r["stats"].get("shadow_rounds")}  # fmt: skip
            runs = [r for r in record["runs"] if r["config"] == by_name[name] and r["temperature"] == t
                    and r["prompt"] not in probed]  # fmt: skip
            if any(r["tokens_sha256"] != plain_sha[(r["prompt"], r["rep"], t)] for r in runs):
                raise ValueError(
                    f"{name} never drafted at temperature {t:g} yet decoded other tokens than plain"
                )
            never.append({"family": name, "temperature": t, "ratio": split["plain"]["total"] / row["total"]})
    failing = []
    parts = ("draft", "target calls", "sampling, verifying", "the loop's rest")
    for r in (r for r in cells if not r["met"]):
        task = None if r["task"] == "all" else r["task"]  # "all": the tasks pooled
        split = {x["configuration"]: x for x in time_per_token(record, r["temperature"], task)}
        name = short(r["family"]).removesuffix("+noharm")
        extra = {k: split[name][k] - split["plain"][k] for k in (*parts, "total")}
        big = max(parts, key=lambda k: extra[k])
        failing.append({"family": name, "task": r["task"], "temperature": r["temperature"], "extra": extra,
                        "largest": big, "drafting_rounds": split[name]["rounds that draft"]})  # fmt: skip
    fixed = {(f["config"], f["temperature"]): (f["x_estimate"], f["x_low"], f["x_high"])
             for f in fixed_rows(simultaneous_of(record)) if not f["config"].endswith("/noharm")}  # fmt: skip
    gc_ms: dict[str, float] = {}
    for cid in dict.fromkeys(r["config"] for r in record["runs"]):
        if cid != plain and any(c["id"] == cid and c["plain"] for c in record["configs"]):
            continue  # a plain decoder at another thread count
        runs = [r for r in record["runs"] if r["config"] == cid]
        name = "plain" if cid == plain else short(cid)
        gc_ms[name] = 1e3 * sum(r.get("gc_s", 0.0) for r in runs) / sum(r["new_tokens"] for r in runs)
    return {"goals": goals, "cells": cells, "pooled": pooled, "never": never, "failing": failing,
            "fixed": fixed, "gc_ms": gc_ms}  # fmt: skip


def policy_specs(record: Mapping[str, Any]) -> dict[str, str]:
    """The record's configurations under the do-no-harm policy (ids ending ``/noharm``), in its order:
    short spec without ``/noharm`` (e.g. ``medusa:medusa-self``) -> configuration id."""
    return {
        short(c["id"]).removesuffix("/noharm"): c["id"]
        for c in record["configs"]
        if c["id"].endswith("/noharm")
    }


def _policy_rounds(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The do-no-harm configurations' repetition-0 runs that kept their Stats (every repetition runs the
    same seed, so the same rounds)."""
    return [r for r in record["runs"] if r["config"].endswith("/noharm") and r["rep"] == 0 and "stats" in r]


def never_drafting(record: Mapping[str, Any], *, n_boot: int = 4000) -> dict[float, dict[str, Any]]:
    """What the loop costs where a do-no-harm policy never drafted, under the cells' own estimator: per
    temperature, every (policy configuration, prompt) whose repetition-0 run drafted in none of its rounds
    (a shadow probe is not a draft: its nodes are not verified; every repetition runs the same seed, so
    the same rounds), paired with the plain decoder at the record's threads on the same prompt:
    :func:`specdec.theory.intervals.paired_speedup` of their times per token (medians over repetitions;
    the geometric mean over the pairs of plain's time over the policy's, so below 1 is slower than plain;
    the interval resamples the pairs, which share prompts across configurations, so it is narrower than
    one over prompts would be). Returns temperature -> ``pairs``, ``estimate``, ``low``, ``high`` (NaN
    where fewer than two pairs)."""
    from specdec.theory.intervals import paired_speedup

    plain = _plain_id(record)
    times: dict[tuple[str, str, float], list[float]] = {}
    for r in record["runs"]:
        times.setdefault((r["config"], r["prompt"], float(r["temperature"])), []).append(
            r["decode_s"] / r["new_tokens"]
        )
    never = [
        (r["config"], r["prompt"], float(r["temperature"]))
        for r in _policy_rounds(record)
        if not any(r["stats"]["drafted"])
    ]
    out = {}
    for t in (0.0, 1.0):
        keys = [k for k in never if k[2] == t]
        base = [times[(plain, p, t)] for _, p, _ in keys]
        mine = [times[k] for k in keys]
        est, low, high = paired_speedup(base, mine, n_boot=n_boot) if len(keys) > 1 else (float("nan"),) * 3
        out[t] = {"pairs": len(keys), "estimate": est, "low": low, "high": high}
    return out


def _never_drafted(
    record: Mapping[str, Any], kinds: Sequence[str] | None = None
) -> dict[tuple[str, float], list[str]]:
    """(prompt, temperature) -> the policy configurations (of a drafter kind in ``kinds``, every kind when
    None) whose repetition-0 run on that prompt drafted in none of its rounds, in the record's order."""
    from specdec.drafting.registry import parse_spec

    never: dict[tuple[str, float], list[str]] = {}
    for r in _policy_rounds(record):
        if any(r["stats"]["drafted"]):
            continue
        if kinds is None or parse_spec(short(r["config"]).removesuffix("/noharm")).kind in kinds:
            never.setdefault((r["prompt"], float(r["temperature"])), []).append(r["config"])
    return never


#: Where the plain decoder ran in its repetition's block (:func:`plain_position`).
PLACES = ("first", "between", "last")


def plain_position(
    record: Mapping[str, Any], *, n_boot: int = 4000, by_place: bool = True
) -> list[dict[str, Any]]:
    """Whether the plain decoder's place in a repetition's order moves :func:`never_drafting`'s ratio: per
    temperature and place (:data:`PLACES`: first, between, last in the block of its engine's runs of that
    prompt and repetition, the record's runs being stored in the order they ran), the prompts on which some
    policy configuration drafted in none of repetition 0's rounds, each a unit: plain's times per token in
    the repetitions where it ran at that place, against the geometric mean of those policies' times in the
    same repetitions; :func:`specdec.theory.intervals.paired_speedup` over the prompts (medians over each
    prompt's repetitions, the interval resampling prompts; below 1: the policies slower than plain). The
    policies of a prompt share its plain runs, so a prompt is the unit, not a policy. Until the fourteenth
    judgement plain ran first on even repetitions (repetition 0's the cell's first 2-thread run where that
    engine's block came first) and last on odd ones (``plain_at`` "alternate"), so no unit is between and
    the split is by parity too. Rows with ``temperature``, ``place``, ``units`` (prompts), ``runs`` (plain's
    runs counted), ``estimate``, ``low``, ``high`` (NaN where fewer than two prompts), sorted by temperature,
    then place. ``by_place=False``: one row per temperature, every repetition of a prompt in one unit
    (place ``"any"``): :func:`never_drafting`'s question with prompts, not (policy, prompt) pairs, as
    units."""
    from specdec.theory.intervals import paired_speedup

    plain = _plain_id(record)
    engine = next(r["engine"] for r in record["runs"] if r["config"] == plain)
    blocks: dict[tuple[str, float, int], list[str]] = {}
    times: dict[tuple[str, str, float, int], float] = {}
    for r in record["runs"]:
        key = (r["prompt"], float(r["temperature"]), int(r["rep"]))
        if r["engine"] == engine:  # the plain decoder's block: its engine's runs of the repetition
            blocks.setdefault(key, []).append(r["config"])
        times[(r["config"], *key)] = r["decode_s"] / r["new_tokens"]
    never = _never_drafted(record)
    # (temperature, place) -> prompt -> (plain's times, the policies' geometric means), one per repetition
    units: dict[tuple[float, str], dict[str, tuple[list[float], list[float]]]] = {}
    for (prompt, t, rep), order in blocks.items():
        at = order.index(plain)
        place = PLACES[0] if at == 0 else PLACES[2] if at == len(order) - 1 else PLACES[1]
        place = place if by_place else "any"
        base, mine = units.setdefault((t, place), {}).setdefault(prompt, ([], []))
        if (prompt, t) in never:
            base.append(times[(plain, prompt, t, rep)])
            logs = [math.log(times[(c, prompt, t, rep)]) for c in never[(prompt, t)]]
            mine.append(math.exp(sum(logs) / len(logs)))
    out = []
    order = {p: i for i, p in enumerate((*PLACES, "any"))}
    for (t, place), by_prompt in sorted(units.items(), key=lambda kv: (kv[0][0], order[kv[0][1]])):
        pairs = [v for v in by_prompt.values() if v[0]]
        base, mine = [b for b, _ in pairs], [m for _, m in pairs]
        est, low, high = paired_speedup(base, mine, n_boot=n_boot) if len(pairs) > 1 else (float("nan"),) * 3
        out.append({"temperature": t, "place": place, "units": len(pairs), "runs": sum(len(b) for b in base),
                    "estimate": est, "low": low, "high": high})  # fmt: skip
    return out


#: The parts of a run's time per token that :func:`never_drafting_parts` splits, by the loop's own timers.
PARTS = (("target call", "target_s"), ("token choice", "verify_s"), ("policy and drafter", "draft_s"))
#: The drafter kinds (:data:`specdec.drafting.registry.KINDS`) that read the target's features, so that
#: their sessions record them (``conditioned`` drafters; the hybrid holds one).
CONDITIONED_KINDS = ("medusa", "mlp", "eagle", "hybrid")


def never_drafting_parts(
    record: Mapping[str, Any], *, n_boot: int = 4000, kinds: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Where the never-drafting policies' time per token differs from the plain decoder's, by the loop's own
    timers: :data:`PARTS`, ``other loop time`` (the generation's decoding time less those three: the loop's
    bookkeeping outside them, the timers' own cost, the collector), ``bookkeeping`` (policy and drafter plus
    other loop time) and ``total`` (the decoding time). Per temperature, the prompts on which some policy
    configuration (of a drafter kind in ``kinds``, every kind when None) drafted in none of repetition 0's
    rounds are the units: in each repetition, the mean over those policies of their part per token less the
    plain decoder's in the same repetition (ms), then the median over the prompt's repetitions; the mean
    over prompts with its percentile-bootstrap interval (prompts resampled; one seed, so every part sees
    the same resamples). The parts' medians need not add up to the total's. Rows with ``temperature``,
    ``part``, ``units``, ``ms`` (above 0: the policies spend more), ``low``, ``high`` (NaN where fewer than
    two prompts) and ``plain_ms`` (the plain decoder's part, the mean over the units of its medians), by
    temperature in the order above."""
    import numpy as np

    from specdec.theory.intervals import bootstrap_ci

    plain = _plain_id(record)
    names = [*(n for n, _ in PARTS), "other loop time", "bookkeeping", "total"]
    ms: dict[tuple[str, str, float, int], np.ndarray] = {}
    for r in record["runs"]:
        timed = [r[k] for _, k in PARTS]
        other = r["decode_s"] - sum(timed)
        ms[(r["config"], r["prompt"], float(r["temperature"]), int(r["rep"]))] = (
            1e3 * np.asarray([*timed, other, timed[-1] + other, r["decode_s"]]) / r["new_tokens"]
        )
    plain_reps: dict[tuple[str, float], list[int]] = {}
    for c, prompt, t, rep in sorted(ms):
        if c == plain:
            plain_reps.setdefault((prompt, t), []).append(rep)
    never = _never_drafted(record, kinds)
    out = []
    for t in sorted({t for _, t in never}):
        units, base = [], []
        for prompt in sorted(p for p, tt in never if tt == t):
            reps = plain_reps[(prompt, t)]
            mine = [np.mean([ms[(c, prompt, t, rep)] for c in never[(prompt, t)]], axis=0) for rep in reps]
            diffs = [m - ms[(plain, prompt, t, rep)] for m, rep in zip(mine, reps, strict=True)]
            units.append(np.median(diffs, axis=0))
            base.append(np.median([ms[(plain, prompt, t, rep)] for rep in reps], axis=0))
        diff, plain_ms = np.asarray(units), np.mean(base, axis=0)
        for i, name in enumerate(names):
            one = (float(diff[0, i]), math.nan, math.nan)
            est, low, high = bootstrap_ci(diff[:, i], n_boot=n_boot) if len(units) > 1 else one
            row = {"temperature": t, "part": name, "units": len(units), "ms": float(est)}
            out.append(row | {"low": float(low), "high": float(high), "plain_ms": float(plain_ms[i])})
    return out


#: The bins of :func:`nodes_mix`: (label, fewest nodes, most nodes) proposed in a round.
NODE_BINS = (("0", 0, 0), ("1", 1, 1), ("2", 2, 2), ("3-4", 3, 4), ("5-8", 5, 8), ("9+", 9, 10**9))


def nodes_mix(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """How the do-no-harm policies' rounds were spent: per policy configuration (its short spec) and
    temperature, the rounds of every repetition-0 run (each repetition runs the same seed, so the same
    rounds) and the share of them whose drafter proposed 0 nodes (a plain round, by the policy's choice or
    a drafter that found nothing), 1, 2, 3-4, 5-8 and 9 or more (:data:`NODE_BINS`; a bin no round fell in
    is 0.0), and ``shadow``: the share of them that were shadow probes (plain rounds in which the drafter's
    guess was scored, not verified; among the 0 rounds; 0.0 in a record made before them). Rows sorted by
    temperature, then configuration."""
    # per (temperature, configuration): the rounds in each of NODE_BINS, then the shadow rounds
    counts: dict[tuple[float, str], list[int]] = {}
    for r in _policy_rounds(record):
        row = counts.setdefault((float(r["temperature"]), short(r["config"])), [0] * (len(NODE_BINS) + 1))
        for n in r["stats"]["drafted"]:
            row[next(i for i, (_, lo, hi) in enumerate(NODE_BINS) if lo <= n <= hi)] += 1
        row[-1] += int(r["stats"].get("shadow_rounds", 0))
    out = []
    for (t, c), row in sorted(counts.items()):
        total = sum(row[:-1])
        shares = {label: k / total for (label, _, _), k in zip(NODE_BINS, row[:-1], strict=True)}
        out.append({"temperature": t, "config": c, "rounds": total, **shares, "shadow": row[-1] / total})
    return out


def round_costs(record: Mapping[str, Any], config: str, temperature: float | None = None) -> dict[str, Any]:
    """What a round of the configuration ``config`` (its id, or its short spec such as
    ``lookup/noharm``) cost in the record's own runs, by the rows its verify call had: each run that kept
    its Stats (repetition 0) gives its target calls' seconds in units of the plain decoder's seconds per
    target call on the same prompt, repetition and temperature, and its count of rounds by rows (the
    nodes proposed + 1); a least-squares fit over the runs gives each row count's cost per round (a row
    count with few rounds is poorly determined: its rounds are given beside it; a point estimate, no
    interval), and the same in plain steps (``cost_steps``: times ``call_over_step``, the median over the
    plain decoder's runs of its seconds per target call over its seconds per token). Also the drafter's
    calls, and ``empty_calls``, the calls less the rounds that had a node: the calls that proposed
    nothing where the drafter is called once a round it is asked (prompt lookup, suffix decoding; a
    network drafter calls once per level, so there it is not a count of rounds; a shadow probe's call
    counts among them, its nodes not verified). ``temperature``: only
    runs at it (None: both)."""
    import numpy as np

    cid = next(c["id"] for c in record["configs"] if config in (c["id"], short(c["id"])))
    plain = _plain_id(record)
    per_call = {
        (r["prompt"], r["rep"], r["temperature"]): r["target_s"] / r["target_calls"]
        for r in record["runs"]
        if r["config"] == plain
    }
    runs = [
        r
        for r in record["runs"]
        if r["config"] == cid and "stats" in r and (temperature is None or r["temperature"] == temperature)
    ]
    if not runs:
        raise ValueError(f"no run of {config!r} in the record kept its Stats")
    most = max(max(r["stats"]["drafted"], default=0) for r in runs) + 1
    counts = np.zeros((len(runs), most))
    y = np.empty(len(runs))
    calls = empty = 0
    for i, r in enumerate(runs):
        for n in r["stats"]["drafted"]:
            counts[i, n] += 1
        y[i] = r["target_s"] / per_call[(r["prompt"], r["rep"], r["temperature"])]
        calls += r["stats"]["draft_calls"]
        empty += r["stats"]["draft_calls"] - sum(1 for n in r["stats"]["drafted"] if n)
    used = np.flatnonzero(counts.sum(axis=0))
    fit, *_ = np.linalg.lstsq(counts[:, used], y, rcond=None)
    # a plain target call over a plain step (the decoder's whole time per token), for prices in steps
    call_over_step = float(np.median([
        (r["target_s"] / r["target_calls"]) / (r["decode_s"] / r["new_tokens"])
        for r in record["runs"]
        if r["config"] == plain and (temperature is None or r["temperature"] == temperature)
    ]))  # fmt: skip
    return {
        "config": cid,
        "runs": len(runs),
        "cost": {int(k) + 1: float(c) for k, c in zip(used, fit, strict=True)},
        "call_over_step": call_over_step,
        "cost_steps": {int(k) + 1: float(c) * call_over_step for k, c in zip(used, fit, strict=True)},
        "rounds": {int(k) + 1: int(counts[:, k].sum()) for k in used},
        "draft_calls": int(calls),
        "empty_calls": int(empty),
        "rule": "least squares of each run's target seconds, in the plain decoder's seconds per target call "
        "on the same prompt, repetition and temperature, on its count of rounds by rows",
    }
