"""Part VI's reading of the campaign record: "faster than what?", from one interleaved run.

The campaign (:mod:`specdec.experiments.campaign`, ``specdec run campaign``) times every plain
decoder and every speculative configuration on the same prompts; its cross-fit analysis
(:mod:`specdec.analysis.crossfit`) chooses gamma (and, for the headline, the method and engine
too) on one half of the prompts and reports on the other. These functions only read that stored
analysis and shape it for the answer chapter and the landing page:

* :func:`engine_label` -- what an engine is, in words (engine, mode or format, threads);
* :func:`stratum` -- the analysis of one temperature and task ("all": the tasks pooled);
* :func:`faster_than_what` -- one row per plain decoder and per speculative family: absolute
  tokens/s, the speedup over the same engine's plain decoding and over the fastest plain
  decoder, each with its 95 % interval and the verdict the interval gives;
* :func:`headline` -- the fastest plain decoder and the blind choice among all speculative
  configurations against it, for one temperature and task;
* :func:`task_verdicts` -- the headline's verdict per task;
* :func:`where_time_goes` -- per speculative configuration of a campaign-v2 record, the three
  measured numbers of a round (tokens per target call, the verify call's cost, the draft's cost)
  and the speedup they predict beside the measured one.

Verdicts are the record's (from intervals only: faster, slower, not distinguishable).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "ESTIMATES",
    "METHOD_NAMES",
    "VERDICT_WORDS",
    "config_words",
    "engine_label",
    "estimator_agreement",
    "faster_than_what",
    "headline",
    "label",
    "method_words",
    "setting_words",
    "stratum",
    "task_verdicts",
    "EDGE",
    "NETWORK_KINDS",
    "at_edge",
    "is_network",
    "is_tree",
    "where_time_goes",
    "leave_one_task_out",
    "prompt_ratios",
]


def engine_label(record: Mapping[str, Any], engine: str) -> str:
    """E.g. "lean q4q8, 1 thread", "llama.cpp Q4_0 (requantized), 2 threads", "transformers float32";
    an engine decoding with another commit's C library (campaign v3's row of v2's engine) names it."""
    info = record["engines"][engine]
    threads = info.get("threads")
    t = f"{threads} thread{'s' if threads != 1 else ''}"
    kind = info.get("engine")
    if kind == "lean":
        library = info.get("library")  # campaign v3's row of v2's engine: another commit's C library
        if isinstance(library, Mapping) and library.get("commit"):
            return f"lean {info.get('mode')}, {t}, C library of {str(library['commit'])[:7]}"
        return f"lean {info.get('mode')}, {t}"
    if kind == "llama.cpp":
        fmt = "Q4_0 (requantized)" if "Q4_0" in str(info.get("format", "")) else str(info.get("gguf", ""))
        loop = str(info.get("loop", ""))
        how = " low-level loop," if loop.startswith("one llama_decode") else " Llama.eval," if loop else ""
        return f"llama.cpp {fmt},{how} {t}"
    if kind == "transformers":
        return f"transformers {info.get('mode')}, {t}"
    return f"{engine}, {t}"


def stratum(
    record: Mapping[str, Any], temperature: float, task: str = "all", analysis: str = "median"
) -> dict[str, Any]:
    """The cross-fit analysis of one (temperature, task) of a complete campaign record; ``analysis``
    names one of a campaign-v2 record's analyses (``median``, ``mean``, ``min_time``, ``end_to_end``,
    ``simultaneous``; a first-campaign record has the median's only)."""
    if not record.get("complete") or "crossfit" not in record:
        raise ValueError("the campaign record is not complete: it has no cross-fit analysis yet")
    if analysis == "median":
        found = record.get("analyses", {}).get("median", record["crossfit"])
    elif analysis in record.get("analyses", {}):
        found = record["analyses"][analysis]
    else:
        raise ValueError(
            f"analysis must be one of {['median', *record.get('analyses', {})]}; got {analysis!r}"
        )
    for s in found["strata"]:
        if float(s["temperature"]) == float(temperature) and s["task"] == task:
            return s
    raise ValueError(f"no stratum at temperature {temperature} and task {task!r} in the record")


def _config_engine(record: Mapping[str, Any], config: str) -> str:
    return next(c["engine"] for c in record["configs"] if c["id"] == config)


def _chosen(halves: Mapping[str, str]) -> str:
    """The configurations chosen on the two halves, once if they agree."""
    a, b = halves["0"], halves["1"]
    return a if a == b else f"{a} (chosen on half 0) / {b} (chosen on half 1)"


def _gammas(record: Mapping[str, Any], halves: Mapping[str, str]) -> str:
    """The settings chosen on the two halves in words ("γ = 2", "8 nodes / 16 nodes"), once if equal."""
    vals = [setting_words(record, halves[h]) for h in ("0", "1")]
    return vals[0] if vals[0] == vals[1] else f"{vals[0]} / {vals[1]}"


def faster_than_what(
    record: Mapping[str, Any], temperature: float, task: str = "all", analysis: str = "median"
) -> list[dict[str, Any]]:
    """Rows for the table "faster than what?": every plain decoder, then every speculative family
    (its gamma chosen on the other half), then the blind choice among all speculative configurations.
    Each row: ``what``, ``engine`` (in words), ``gamma``, ``tok_s`` (estimate, low, high), ``vs_own``
    and ``vs_fastest`` (estimate, low, high, verdict); ``vs_own`` is None for plain decoders and
    for the blind choice (whose engine differs by half). ``analysis``: as :func:`stratum`."""
    s = stratum(record, temperature, task, analysis)

    def triple(d: Mapping[str, Any]) -> tuple[float, float, float]:
        return (float(d["estimate"]), float(d["low"]), float(d["high"]))

    def quad(d: Mapping[str, Any]) -> tuple[float, float, float, str]:
        return (*triple(d), str(d["verdict"]))

    rows = []
    for p in s["plain"]:
        rows.append(
            {
                "what": "plain decoding",
                "config": p["config"],
                "engine": engine_label(record, _config_engine(record, p["config"])),
                "gamma": "",
                "tok_s": triple(p["tok_s"]),
                "vs_own": None,
                "vs_fastest": quad(p["vs_fastest_plain"]),
            }
        )
    for f in s["families"]:
        method = f["family"].split("/", 1)[1]
        rows.append(
            {
                "what": method,
                "config": f["family"],
                "engine": engine_label(record, f["engine"]),
                "gamma": _gammas(record, f["chosen_on_half"]),
                "tok_s": triple(f["tok_s"]),
                "vs_own": quad(f["vs_same_plain"]),
                "vs_fastest": quad(f["vs_fastest_plain"]),
            }
        )
    a = s.get("any_speculative")
    if a is not None:
        rows.append(
            {
                "what": "any speculative configuration, chosen blind",
                "config": _chosen(a["chosen_on_half"]),
                "engine": "as chosen",
                "gamma": _gammas(record, a["chosen_on_half"]),
                "tok_s": triple(a["tok_s"]),
                "vs_own": None,
                "vs_fastest": quad(a["vs_fastest_plain"]),
            }
        )
    return rows


def headline(
    record: Mapping[str, Any], temperature: float, task: str = "all", analysis: str = "median"
) -> dict[str, Any]:
    """The fastest plain decoder (chosen on each half; its engine in words and its tokens/s with
    interval) and the blind speculative choice against it: its configurations, tokens/s, speedup over
    the fastest plain decoder with interval and verdict; plus how many families beat their own
    engine's plain decoding and how many beat the fastest plain decoder, by their intervals.
    ``analysis``: as :func:`stratum`."""
    s = stratum(record, temperature, task, analysis)
    fastest = s["fastest_plain_chosen_on_half"]
    fastest_engines = sorted({engine_label(record, _config_engine(record, c)) for c in fastest.values()})
    a = s["any_speculative"]
    fams = s["families"]
    return {
        "temperature": float(temperature),
        "task": task,
        "prompts": len(s["prompts"]),
        "fastest_plain": " / ".join(fastest_engines),
        "fastest_plain_tok_s": (
            float(s["fastest_plain_tok_s"]["estimate"]),
            float(s["fastest_plain_tok_s"]["low"]),
            float(s["fastest_plain_tok_s"]["high"]),
        ),
        "spec_chosen": _chosen(a["chosen_on_half"]),
        "spec_tok_s": (float(a["tok_s"]["estimate"]), float(a["tok_s"]["low"]), float(a["tok_s"]["high"])),
        "spec_vs_fastest": (
            float(a["vs_fastest_plain"]["estimate"]),
            float(a["vs_fastest_plain"]["low"]),
            float(a["vs_fastest_plain"]["high"]),
        ),
        "spec_verdict": str(a["vs_fastest_plain"]["verdict"]),
        "families": len(fams),
        "families_faster_than_own": sum(f["vs_same_plain"]["verdict"] == "faster" for f in fams),
        "families_faster_than_fastest": sum(f["vs_fastest_plain"]["verdict"] == "faster" for f in fams),
        "families_slower_than_fastest": sum(f["vs_fastest_plain"]["verdict"] == "slower" for f in fams),
    }


def task_verdicts(
    record: Mapping[str, Any], temperature: float, tasks: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Per task: the blind speculative choice against the fastest plain decoder (estimate,
    interval, verdict) and the configurations chosen."""
    if tasks is None:
        tasks = list(dict.fromkeys(p["task"] for p in record["prompts"]))
    out = []
    for task in tasks:
        h = headline(record, temperature, task)
        out.append(
            {
                "task": task,
                "prompts": h["prompts"],
                "fastest plain": h["fastest_plain"],
                "fastest plain tok/s": h["fastest_plain_tok_s"][0],
                "speculative, chosen blind": h["spec_chosen"],
                "tok/s": h["spec_tok_s"][0],
                "x fastest plain": h["spec_vs_fastest"][0],
                "low": h["spec_vs_fastest"][1],
                "high": h["spec_vs_fastest"][2],
                "verdict": h["spec_verdict"],
            }
        )
    return out


def leave_one_task_out(
    record: Mapping[str, Any], temperature: float, *, n_boot: int = 2000
) -> list[dict[str, Any]]:
    """The headline (:func:`headline`'s blind choice against the fastest plain decoder, median estimator)
    recomputed with each task left out in turn (:func:`specdec.analysis.crossfit.any_speculative`, the same
    choice and bootstrap on the other tasks' prompts, the record's seed): rows ``left out``, ``prompts``,
    ``x``, ``low``, ``high``, ``verdict``."""
    from specdec.analysis.crossfit import any_speculative, fold_of

    tasks = list(dict.fromkeys(p["task"] for p in record["prompts"]))
    folds = {(p["task"], p["id"]): fold_of(p["index"]) for p in record["prompts"]}
    seed = int(record["settings"].get("seed", 0))
    rows = []
    for out in tasks:
        res = any_speculative(
            record["runs"],
            record["configs"],
            folds,
            temperature=temperature,
            tasks=[t for t in tasks if t != out],
            n_boot=n_boot,
            seed=seed,
        )
        x = res["vs_fastest_plain"]
        rows.append(
            {
                "left out": out,
                "prompts": res["prompts"],
                "x": float(x["estimate"]),
                "low": float(x["low"]),
                "high": float(x["high"]),
                "verdict": str(x["verdict"]),
            }
        )
    return rows


def prompt_ratios(record: Mapping[str, Any], temperature: float, analysis: str = "median") -> list[float]:
    """Per prompt, the headline's ratio: the blind speculative choice's tokens/s over the fastest plain
    decoder's, each chosen on the prompt's other half (the record's out-of-fold values), in the
    analysis's prompt order. Their geometric mean is the headline's estimate."""
    pp = stratum(record, temperature, "all", analysis)["any_speculative"]["per_prompt"]
    return [float(a) / float(b) for a, b in zip(pp["tok_s"], pp["fastest_plain_tok_s"], strict=True)]


#: The analyses a campaign-v2 record holds, as the robustness table names them.
ESTIMATES = {
    "median": "median of the repetitions (the book's estimator)",
    "mean": "mean of the repetitions",
    "min_time": "fastest repetition",
    "end_to_end": "median, prefill included (end to end)",
}


def estimator_agreement(record: Mapping[str, Any], temperature: float, task: str = "all") -> dict[str, Any]:
    """The headline (the blind speculative choice against the fastest plain decoder) under each estimator
    of a prompt's repetitions and end to end (:data:`ESTIMATES`): rows with the estimate, interval and
    verdict, and ``same``: whether the three estimators of decoding time give one verdict (decided
    exactly: the verdict strings compared)."""
    rows = []
    for key, what in ESTIMATES.items():
        h = headline(record, temperature, task, key)
        rows.append({"estimate": key, "what": what, "fastest plain": h["fastest_plain"],
                     "fastest plain tok/s": h["fastest_plain_tok_s"][0], "speculative": h["spec_chosen"],
                     "x": h["spec_vs_fastest"][0], "low": h["spec_vs_fastest"][1],
                     "high": h["spec_vs_fastest"][2], "verdict": h["spec_verdict"]})  # fmt: skip
    decode = {r["verdict"] for r in rows if r["estimate"] != "end_to_end"}
    return {"rows": rows, "same": len(decode) == 1, "verdict": rows[0]["verdict"]}


#: A verdict as the prose says it: "<x> is faster than / slower than / not distinguishable from" the baseline.
VERDICT_WORDS = {
    "faster": "faster than",
    "slower": "slower than",
    "not distinguishable": "not distinguishable from",
    "too few prompts": "not decidable (too few prompts) against",
}


def method_words(method: str) -> str:
    """A drafter spec (or "plain decoding") in words: "suffix decoding, tree", "EAGLE-2", ..."""
    if method in ("plain decoding", "any speculative configuration, chosen blind"):
        return method
    return label({}, f"x/{method}")


def _setting(method: str, config: Mapping[str, Any]) -> str:
    """ ", γ = 2", ", 8 nodes", ", γ adapted from 1" or "" (plain decoding)."""
    if config["plain"]:
        return ""
    gamma = str(config["gamma"])
    if gamma.startswith("heuristic start"):
        return f", from γ = {gamma.split()[2]}"
    if gamma.startswith("do no harm over budgets"):  # the policy's budgets, 0 a plain step
        budgets = gamma.split("[", 1)[1].split("]", 1)[0]
        return f", do-no-harm policy over budgets {budgets}"
    # a chain, or a tree kind drafting a single path: its budget is a gamma (first-campaign names: chains)
    return f", {gamma} nodes" if is_tree(f"x/{method}") else f", γ = {gamma}"


def setting_words(record: Mapping[str, Any], config: str) -> str:
    """A speculative configuration's setting alone: "γ = 2", "8 nodes", "from γ = 1" ("" for plain)."""
    c = next(c for c in record["configs"] if c["id"] == config)
    return _setting(config.split("/")[1], c).removeprefix(", ")


def config_words(record: Mapping[str, Any], config: str, *, engine: bool = True) -> str:
    """A configuration id (or the two halves' choices, "a (chosen on half 0) / b (chosen on half 1)") in
    words: the method,
    its setting and (unless ``engine`` is False) its engine, e.g. "suffix decoding, tree, 8 nodes (lean
    q4q8, 2 threads)"."""
    parts = [p.strip() for p in config.split(" / ")]
    out = []
    configs = {c["id"]: c for c in record["configs"]}
    for part in parts:
        cid, _, half = part.partition(" (chosen on half")
        c = configs[cid]
        what = "plain decoding" if c["plain"] else method_words(cid.split("/")[1])
        text = f"{what}{_setting(cid.split('/')[1], c)}"
        if engine:
            text += f" ({engine_label(record, c['engine'])})"
        out.append(text + (f" (chosen on half{half}" if half else ""))
    return " / ".join(out)


#: Each drafter spec of the campaigns in words.
METHOD_NAMES = {
    "lookup": "prompt lookup",
    "lookup-tree,min_ngram=2": "prompt lookup, tree",
    "lookup+heuristic": "prompt lookup, adaptive γ",
    "suffix": "suffix decoding, tree",
    "suffix,tree=0": "suffix decoding, path",
    "draft:distil-l1": "distilled draft (1 layer)",
    "draft-tree:distil-l1,branch=2": "distilled draft, tree",
    "early-exit:8": "early exit (8 layers)",
    "medusa:medusa-4": "Medusa-1",
    "mlp:mlp-4,ranks=1": "MLP speculator",
    "mlp:mlp-4": "MLP speculator, tree",
    "eagle:eagle-1": "EAGLE",
    "eagle:eagle-1,topk=4,depth=5": "EAGLE-2",
    # issue 42's drafters trained on the target's own text (campaign v3), named by their drafts
    "mlp:mlp-self": "MLP speculator, tree (mlp-self)",
    "eagle:eagle-ttt": "EAGLE (eagle-ttt)",
    "eagle:eagle-ttt,topk=4,depth=5": "EAGLE-2 (eagle-ttt)",
    "eagle:eagle-3m": "EAGLE (eagle-3m)",
    "eagle:eagle-3m,topk=4,depth=5": "EAGLE-2 (eagle-3m)",
    "hybrid:eagle-ttt,topk=4,depth=5": "hybrid: suffix, else EAGLE-2 (eagle-ttt)",
    "hybrid:eagle-3m,topk=4,depth=5": "hybrid: suffix, else EAGLE-2 (eagle-3m)",
}

#: The suffix of a family run under the do-no-harm policy (:class:`specdec.theory.policies.DoNoHarm`).
NOHARM = "+noharm"


def label(record: Mapping[str, Any], key: str) -> str:
    """A decoder in words: a plain decoder by its engine, a family by its method."""
    if key.endswith("/plain"):
        return engine_label(record, key.split("/", 1)[0])
    method = key.split("/", 1)[1]
    if method.endswith(NOHARM):
        base = method.removesuffix(NOHARM)
        return f"{METHOD_NAMES.get(base, base)}, do-no-harm policy"
    return METHOD_NAMES.get(method, method)


def _interp(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    """Linear interpolation of ys at x inside xs (ValueError outside: nothing is extrapolated)."""
    if not xs[0] <= x <= xs[-1]:
        raise ValueError(f"x must lie in [{xs[0]}, {xs[-1]}] (the measured verify widths); got {x}")
    return float(np.interp(x, xs, ys))


#: The book's rule for a verdict at the edge: a simultaneous interval that ends within EDGE of 1 (another
#: set of bootstrap resamples could give the other verdict) is named so wherever its verdict is shown.
EDGE = 0.005


def at_edge(ratio: Mapping[str, Any]) -> bool:
    """Whether a ratio's interval (``low``, ``high``) ends within :data:`EDGE` of 1."""
    return min(abs(float(ratio["low"]) - 1.0), abs(float(ratio["high"]) - 1.0)) < EDGE


#: Drafter kinds (the registry's spec kinds) that draft by running a neural network: a distilled draft
#: model (chain or tree), the target's own first layers (early exit), heads on the target's features
#: (Medusa, the MLP speculator), EAGLE's feature-level draft, and the hybrid (suffix decoding where its
#: match is confident, EAGLE-2 in every other round). The others copy from the text.
NETWORK_KINDS = frozenset({"draft", "draft-tree", "early-exit", "medusa", "mlp", "eagle", "hybrid"})


def _spec_of(key: str) -> Any:
    """The registry's parsed spec of a family or configuration id ("engine/spec[/setting]"; a policy
    suffix such as "+heuristic" dropped), or None for a first-campaign name the registry does not know."""
    from specdec.drafting.registry import parse_spec

    try:
        return parse_spec(key.split("/")[1].split("+")[0])
    except ValueError:  # a first-campaign name (draft-distil-l1, ee-8)
        return None


def is_network(key: str) -> bool:
    """Whether a family or configuration id ("engine/spec[/setting]") drafts with a neural network."""
    spec = _spec_of(key)
    return spec is not None and spec.kind in NETWORK_KINDS


def is_tree(key: str) -> bool:
    """Whether a family or configuration id verifies a tree of several paths (not a single path: a chain,
    or a tree kind drafting one path; first-campaign names are chains)."""
    spec = _spec_of(key)
    if spec is None:
        return False
    opts = spec.options
    path = (
        spec.shape == "chain"
        or (spec.kind == "suffix" and opts.get("tree") == 0)
        or (spec.kind == "eagle" and opts.get("topk", 1) == 1)
        or (spec.kind in ("mlp", "medusa") and opts.get("ranks") == 1)
    )
    return not path


def _plain_steps(record: Mapping[str, Any], temperature: float) -> dict[str, float]:
    """Per engine, its plain decoding step at ``temperature`` in seconds: the (upper) median over its plain
    runs of decode time per new token (the loop included)."""
    steps: dict[str, list[float]] = {}
    for r in record["runs"]:
        if r["drafter"] == "plain" and float(r["temperature"]) == float(temperature) and r["new_tokens"] > 0:
            steps.setdefault(r["engine"], []).append(r["decode_s"] / r["new_tokens"])
    return {engine: float(sorted(v)[len(v) // 2]) for engine, v in steps.items()}


def where_time_goes(
    record: Mapping[str, Any], temperature: float = 0.0, *, goal: float = 1.5
) -> list[dict[str, Any]]:
    """Where a round's time goes, per speculative configuration of a complete record with tree statistics
    (campaign v2, the trees and the conditioned runs) at ``temperature`` (tasks pooled): the one
    decomposition every chapter shows, in Theorem 3.8's units. The unit is one *plain decoding step* of
    the same engine (``plain_step_ms``: the median over its plain runs of decode time per token, the loop
    included); as in the theorem, a target call over k rows costs v(k) such steps, where v(k) is the bare
    verify call over k rows divided by the bare call over one row (the record's own verify curve). So the
    plain loop's share of a step (``loop_share`` = 1 - T(1) / plain step) is priced into every target call,
    and what is left of a round beyond the theorem's terms is speculation's own extra work. (``loop_share``
    is negative where the curve's bare one-row call took longer than a generation's step: the curve then
    serves as ratios only, and the answer chapter says so.)
    Fields: ``label`` (the configuration in words), ``engine``, ``tree`` (verifies several paths),
    ``tokens_per_call`` (new tokens per target call, repetition-0 Stats pooled over prompts),
    ``nodes_per_round``, ``accept_d1`` .. ``accept_d3`` (accepted over examined at depths 1-3), ``width``
    (the verify call's mean rows: drafted nodes per round + 1), ``verify`` (the paper's v for the rounds
    as they ran: the bare verify call over each round's rows over the bare one-row call, on the tree-masked
    curve for trees and the causal one for chains, interpolated at every round's width of the repetition-0
    runs and averaged; the mean width where a record holds no per-round counts), ``verify_bare`` (the same
    bare calls in plain steps: what the forward alone costs, without the loop), ``loop_share``, ``c_round``
    (draft seconds per round in plain steps, the median over runs), ``round_cost`` = tokens_per_call /
    measured (what a round costs as measured), ``extra`` = round_cost - verify - c_round (speculation's
    loop work per round beyond the plain loop's share, which ``verify`` already holds: verification,
    warping, cache bookkeeping, Python), ``predicted`` = tokens_per_call / (verify + c_round) (Theorem 3.8
    with the measured v and c), ``measured`` (tokens/s over the same engine's plain decoding, this
    configuration on every prompt, not cross-fitted) and ``needed`` = goal * round_cost: the tokens per
    call the configuration would need for ``goal`` times plain decoding at the same cost per round."""
    if goal <= 0:
        raise ValueError(f"goal must be > 0; got {goal}")
    curves = record["verify_curves"]
    ks = [float(k) for k in curves["ks"]]
    seconds = {kind: [float(x) for x in curves["median_s"][kind]] for kind in ("chain", "tree")}
    fixed = {f["config"]: f for f in stratum(record, temperature)["fixed"]}
    widths: dict[str, list[int]] = {}  # every round's rows (its drafted nodes + 1), repetition-0 runs
    for r in record["runs"]:
        if r["drafter"] != "plain" and r["rep"] == 0 and float(r["temperature"]) == float(temperature):
            widths.setdefault(r["config"], []).extend(
                1 + int(n) for n in r.get("stats", {}).get("drafted", [])
            )
    plain_steps = _plain_steps(record, temperature)
    if 1.0 not in ks:
        raise ValueError(f"the record's verify curve must hold one row (k = 1); it has {curves['ks']}")
    t1 = seconds["chain"][ks.index(1.0)]  # the bare one-row call
    out = []
    for row in record["trees"]["rows"]:
        if float(row["temperature"]) != float(temperature) or row["config"] not in fixed:
            continue
        engine = _config_engine(record, row["config"])
        if engine not in plain_steps:
            raise ValueError(f"the record has no plain run of engine {engine!r} at temperature {temperature}")
        step = plain_steps[engine]
        tree = is_tree(row["config"])
        width = 1.0 + float(row["nodes_per_round"])
        curve = seconds["tree" if tree else "chain"]
        rounds = widths.get(row["config"]) or [width]  # each round priced at its own width
        verify_s = float(np.mean([_interp(float(w), ks, curve) for w in rounds]))
        v = verify_s / t1  # Theorem 3.8's v: target calls of one plain step each
        c_round = float(row["c_round_median"] or 0.0)
        tpc = float(row["tokens_per_call"])
        measured = float(fixed[row["config"]]["vs_same_plain"]["estimate"])
        round_cost = tpc / measured
        depth = ([*row.get("accept_at_depth", [])] + [None] * 3)[:3]
        out.append({
            "temperature": float(temperature), "config": row["config"],
            "label": config_words(record, row["config"], engine=False),
            "engine": engine_label(record, engine), "tree": tree, "plain_step_ms": 1e3 * step,
            "tokens_per_call": tpc, "nodes_per_round": float(row["nodes_per_round"]),
            "accept_d1": depth[0], "accept_d2": depth[1], "accept_d3": depth[2], "width": width,
            "verify": v, "verify_bare": verify_s / step, "loop_share": 1.0 - t1 / step,
            "c_round": c_round, "predicted": tpc / (v + c_round), "measured": measured,
            "round_cost": round_cost, "extra": round_cost - v - c_round, "needed": goal * round_cost,
        })  # fmt: skip
    if not out:
        raise ValueError(f"the record has no speculative configuration at temperature {temperature}")
    return out
