"""The engine against transformers' generate on the real target (``specdec run hf-bench``).

One run times, on the same prompts and thread count, interleaved within each repetition:

* our autoregressive loop against ``model.generate`` greedy (tokens/s ratio, target >= 1.0);
* our prompt-lookup speculative decoding against ``generate(prompt_lookup_num_tokens=gamma)``
  at the same gamma and the same n-gram sizes (speedups over each side's own greedy baseline),
  outputs compared token for token;
* an early-exit drafter (the target's first ``ee_layers`` layers), whose c is not ~0;

then measures the verify-cost curve T(k)/T(1), k = 1..``kmax``
(:func:`specdec.measure.core.verify_cost_curves`), and compares each measured speedup with
Theorem 3.8's prediction from the run's alpha and c, and with the same formula with the measured
verify cost in place of one target step (:func:`specdec.analysis.realrun.speedup_gap`).

The timed runs are the package's one paired run (:func:`specdec.measure.pairedrun.paired_block`):
per repetition, prompt and dtype, our plain loop (the block's plain run, first on even
repetitions and last on odd ones) and every other path once in a seeded random order,
transformers' ``generate`` entering through the block's ``timer`` and ``row`` hooks.

Fairness. Threads are pinned (``torch.set_num_threads``). Every path is warmed up before any
timing. Greedy everywhere (``do_sample=False``; temperature 0 in our loops). transformers'
draft-length knobs ``num_assistant_tokens``, ``num_assistant_tokens_schedule`` and
``assistant_confidence_threshold`` belong to ``AssistedCandidateGenerator`` (a draft model); the
prompt-lookup generator of transformers 5.24 takes only ``prompt_lookup_num_tokens`` (gamma) and
``max_matching_ngram_size`` (default 2, ours 3: pinned to ours here), and its
``update_candidate_strategy`` is the base class's no-op, so gamma stays fixed across rounds
and calls. :func:`record_hf_rounds` records transformers' per-round draft lengths through that
no-op hook (one list append per round) to show it. Both sides stop at the first EOS (id 2): no
``min_new_tokens`` (which would add a logits processor and forbid EOS).
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from specdec.drafting.registry import DraftContext, build_drafter
from specdec.experiments.options import Program, option
from specdec.measure.core import VerifyCost, environment, time_once, verify_cost_curves, write_result
from specdec.measure.pairedrun import paired_block, timed_generation, timing_row
from specdec.measure.runner import RunSettings
from specdec.theory.checks import check_choice, check_int, check_ints
from specdec.theory.recordio import jsonable
from specdec.theory.tokens import first_divergence

__all__ = [
    "HFBenchRun",
    "NOTE",
    "PROMPTS",
    "HFGenerate",
    "Settings",
    "cut_at_eos",
    "divergence",
    "hf_generate",
    "mean_context",
    "measure_curves",
    "path_configs",
    "print_tables",
    "record_hf_rounds",
    "render_prompts",
    "run_suite",
    "summarise",
    "theorem_row",
]

BENCHMARK = "bench_engine"
#: The predicted speedups of each theorem row (models of specdec.analysis.realrun.speedup_gap).
PREDICTIONS = ("theorem", "with_verify", "with_drafts", "with_observed_T")

# --------------------------------------------------------------------------- prompts
CODE = '''def summarize_orders(data, min_total=0.0, currency="EUR"):
    """Group orders by customer and compute totals, counts and averages."""
    result = {}
    skipped = 0
    for item in data:
        customer = item.get("customer")
        if customer is None:
            skipped += 1
            continue
        amount = float(item.get("amount", 0.0))
        if item.get("currency", currency) != currency:
            rate = item.get("rate", 1.0)
            amount = amount * rate
        if customer not in result:
            result[customer] = {"total": 0.0, "count": 0, "largest": 0.0, "items": []}
        entry = result[customer]
        entry["total"] += amount
        entry["count"] += 1
        entry["items"].append(item.get("id"))
        if amount > entry["largest"]:
            entry["largest"] = amount
    for customer, entry in list(result.items()):
        if entry["total"] < min_total:
            del result[customer]
            continue
        entry["average"] = entry["total"] / entry["count"]
        entry["share"] = 0.0
    grand_total = sum(entry["total"] for entry in result.values())
    for entry in result.values():
        if grand_total > 0:
            entry["share"] = entry["total"] / grand_total
    report = {
        "currency": currency,
        "customers": len(result),
        "skipped": skipped,
        "grand_total": grand_total,
        "by_customer": result,
    }
    return report
'''

PASSAGE = (
    "Lighthouses were once the most important aids to navigation along dangerous coasts. "
    "Early towers burned wood or coal in open fires, which were hard to see in fog and consumed "
    "enormous amounts of fuel. In the early nineteenth century the French physicist Augustin "
    "Fresnel designed a lens made of concentric rings of glass prisms. His lens gathered the light "
    "of a single lamp into a narrow, powerful beam that could be seen more than twenty miles out "
    "to sea, and it used far less oil than the mirrors it replaced. Within a few decades Fresnel "
    "lenses were installed in lighthouses around the world. Keepers tended the lamps through the "
    "night, wound the clockwork that turned the lens, and recorded the weather in their logs. "
    "During the twentieth century electric lamps, automatic timers and radio beacons made the "
    "keepers unnecessary, and satellite navigation later reduced many lighthouses to backups or "
    "museums."
)

#: name -> the user message; rendered with the target's chat template.
PROMPTS: dict[str, str] = {
    "code_rewrite": (
        "Rewrite the following Python function. Rename the variable `data` to `orders` and add type "
        "hints to the signature. Return the complete rewritten function in a code block.\n\n"
        f"```python\n{CODE}```"
    ),
    "summarise": f"Summarise the following passage in three sentences.\n\n{PASSAGE}",
    "open_question": "Why do cities tend to be warmer than the countryside around them?",
}

NOTE = (
    "Measured on a shared 2-core machine: another helper's 1-thread training job ran on the other "
    "core during this run. Times are medians over repetitions with every competitor interleaved."
)


def render_prompts(tokenizer: Any, names: Sequence[str] | None = None) -> dict[str, list[int]]:
    """Token ids of the chosen prompts (all by default), rendered with the chat template."""
    names = list(PROMPTS) if names is None else list(names)
    unknown = [n for n in names if n not in PROMPTS]
    if unknown:
        raise ValueError(f"prompt names must be among {sorted(PROMPTS)}; got {unknown}")
    out = {}
    for name in names:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": PROMPTS[name]}], add_generation_prompt=True, tokenize=True
        )
        ids = ids["input_ids"] if isinstance(ids, Mapping) or hasattr(ids, "keys") else ids
        out[name] = [int(t) for t in ids]
    return out


# --------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Settings(RunSettings):
    """What one benchmark run does; :meth:`to_record` is the record's ``settings``."""

    max_new_tokens: int = 64
    repeats: int = 3
    gammas: tuple[int, ...] = (3, 10)
    ee_layers: int = 4
    ee_gamma: int = 2
    max_ngram: int = 3  # ours PromptLookupDrafter(max_ngram) = transformers' max_matching_ngram_size
    min_ngram: int = 1  # transformers always goes down to 1
    warmup_tokens: int = 8
    kmax: int = 16
    curve_repeats: int = 10
    curve_prefix: int | None = None  # None: the mean context length of the prompts (prompt + N/2)
    eos_token_id: int | None = 2

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "repeats", "ee_layers", "ee_gamma", "max_ngram", "min_ngram", "kmax"):
            value = getattr(self, name)
            check_int(name, value, low=1)
        check_ints("gammas", self.gammas, low=1)
        if max(*self.gammas, self.ee_gamma) + 1 > self.kmax:
            raise ValueError(f"kmax must be >= gamma + 1 for every gamma; got kmax = {self.kmax}")
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram must be <= max_ngram; got {self.min_ngram} > {self.max_ngram}")


# --------------------------------------------------------------------------- transformers
@contextlib.contextmanager
def record_hf_rounds() -> Iterator[list[tuple[int, int]]]:
    """Record (drafted, accepted) per round of transformers' prompt-lookup generation.

    Wraps ``PromptLookupCandidateGenerator.update_candidate_strategy``, a no-op that
    ``_assisted_decoding`` calls once per round with the round's logits (candidate_length + 1
    rows) and the number of accepted candidates.
    """
    from transformers.generation import candidate_generator as cg

    rounds: list[tuple[int, int]] = []
    cls = cg.PromptLookupCandidateGenerator
    original = cls.update_candidate_strategy

    def record(self: Any, input_ids: Any, scores: Any, num_matches: Any) -> Any:
        rounds.append((int(scores.shape[1]) - 1, int(num_matches)))
        return original(self, input_ids, scores, num_matches)

    cls.update_candidate_strategy = record
    try:
        yield rounds
    finally:
        cls.update_candidate_strategy = original


def cut_at_eos(tokens: Sequence[int], eos_token_id: int | None) -> list[int]:
    """The tokens up to and including the first EOS."""
    tokens = [int(t) for t in tokens]
    if eos_token_id is not None and eos_token_id in tokens:
        return tokens[: tokens.index(eos_token_id) + 1]
    return tokens


def hf_generate(
    model: Any,
    prompt_ids: Sequence[int],
    *,
    max_new_tokens: int,
    eos_token_id: int | None,
    prompt_lookup: int | None = None,
    max_ngram: int = 3,
) -> dict[str, Any]:
    """transformers' greedy ``generate`` (with prompt lookup when ``prompt_lookup`` is gamma)."""
    import torch

    device = next(model.parameters()).device
    x = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    kwargs: dict[str, Any] = {
        "attention_mask": torch.ones_like(x),
        "do_sample": False,
        "max_new_tokens": max_new_tokens,
        "eos_token_id": eos_token_id,
        "pad_token_id": eos_token_id if eos_token_id is not None else 0,
    }
    if prompt_lookup is not None:
        kwargs |= {"prompt_lookup_num_tokens": prompt_lookup, "max_matching_ngram_size": max_ngram}
    hook = record_hf_rounds() if prompt_lookup is not None else contextlib.nullcontext([])
    with hook as rounds:
        made: list[Any] = []
        wall = time_once(lambda: made.append(model.generate(x, **kwargs)))
        out = made[0]
    tokens = cut_at_eos(out[0, x.shape[1] :].tolist(), eos_token_id)
    record: dict[str, Any] = {"tokens": tokens, "wall_s": wall}
    if prompt_lookup is not None:
        record["hf_rounds"] = list(rounds)
    return record


# --------------------------------------------------------------------------- the paths
@dataclass(frozen=True)
class HFGenerate:
    """transformers' greedy ``generate`` as a paired block's configuration ``object``: with prompt
    lookup at gamma ``prompt_lookup`` (None: plain greedy) and ``max_ngram``."""

    prompt_lookup: int | None
    max_ngram: int


@dataclass(frozen=True)
class HFRun:
    """What a ``generate`` call leaves for its timing row: its token count and, with prompt lookup,
    its (drafted, accepted) rounds."""

    new_tokens: int
    rounds: list[tuple[int, int]] | None


def _timer(target: Any, drafter: Any, ids: Sequence[int], **kw: Any) -> tuple[list[int], Any, float]:
    """The paired block's timer: transformers' ``generate`` for an :class:`HFGenerate` (greedy, to
    ``new_tokens`` or EOS), else ours (:func:`specdec.measure.pairedrun.timed_generation`)."""
    if not isinstance(drafter, HFGenerate):
        return timed_generation(target, drafter, ids, **kw)
    r = hf_generate(
        target,
        ids,
        max_new_tokens=kw["new_tokens"],
        eos_token_id=kw["eos_token_id"],
        prompt_lookup=drafter.prompt_lookup,
        max_ngram=drafter.max_ngram,
    )
    return r["tokens"], HFRun(len(r["tokens"]), r.get("hf_rounds")), r["wall_s"]


def _timing_fields(stats: Any, total_s: float) -> dict[str, Any]:
    """The paired block's row: the whole run's wall time, and for our runs
    :func:`specdec.measure.pairedrun.timing_row` with the draft calls."""
    if isinstance(stats, HFRun):
        row = {"wall_s": total_s, "new_tokens": stats.new_tokens}
        return row | ({"rounds": len(stats.rounds)} if stats.rounds is not None else {})
    return {"wall_s": total_s} | timing_row(stats, total_s) | {"draft_calls": stats.draft_calls}


def path_configs(model: Any, s: Settings) -> list[dict[str, Any]]:
    """The paths timed against our plain loop (``ours_ar``, the paired block's plain run): paired
    block configurations with their ``side`` (ours or hf) and ``method`` (ar, pld or ee)."""
    pld = build_drafter(f"lookup,max_ngram={s.max_ngram},min_ngram={s.min_ngram}")
    ee = build_drafter(f"early-exit:{s.ee_layers}", DraftContext(model))

    def path(name: str, side: str, method: str, gamma: int, obj: Any) -> dict[str, Any]:
        return {
            "drafter": name,
            "object": obj,
            "gamma": gamma,
            "lenience": 1.0,
            "side": side,
            "method": method,
        }

    out = [path("hf_greedy", "hf", "ar", 0, HFGenerate(None, s.max_ngram))]
    for g in s.gammas:
        out.append(path(f"ours_pld_g{g}", "ours", "pld", g, pld))
        out.append(path(f"hf_pld_g{g}", "hf", "pld", g, HFGenerate(g, s.max_ngram)))
    out.append(path(f"ours_ee{s.ee_layers}_g{s.ee_gamma}", "ours", "ee", s.ee_gamma, ee))
    return out


# --------------------------------------------------------------------------- running
def run_suite(
    models: Mapping[str, Any],
    prompts: Mapping[str, Sequence[int]],
    s: Settings,
    *,
    progress: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """Warm up every path, then time them all, interleaved; returns the raw records.

    Each repetition loops over prompts, then dtypes; each (prompt, dtype) is one
    :func:`specdec.measure.pairedrun.paired_block`: our plain loop first on even repetitions and
    last on odd ones, the other paths in an order drawn from one generator seeded with ``seed``.
    Greedy outputs are deterministic, so the tokens and counts of the first repetition are kept
    and later repetitions are checked against them (``deterministic``).
    """
    from tqdm import tqdm

    blocks = {dtype: path_configs(model, s) for dtype, model in models.items()}

    def block(dtype: str, ids: Sequence[int], n: int, rep: int, rng: np.random.Generator) -> list[dict]:
        return paired_block(
            models[dtype], blocks[dtype], ids, temperature=0.0, new_tokens=n, seed=0, rep=rep, rng=rng,
            eos_token_id=s.eos_token_id, exact_length=False, timer=_timer, row=_timing_fields,
        )  # fmt: skip

    first_prompt = next(iter(prompts.values()))
    for dtype in tqdm(blocks, desc="warm-up", file=sys.stderr, disable=not progress):
        block(dtype, first_prompt, min(s.warmup_tokens, s.max_new_tokens), 0, np.random.default_rng(seed))

    plain = {"drafter": "ours_ar", "gamma": 0, "side": "ours", "method": "ar"}
    meta = {d: {c["drafter"]: c for c in [plain, *cfgs]} for d, cfgs in blocks.items()}
    runs: dict[str, dict[str, dict[str, Any]]] = {
        d: {p: {name: {"times": []} for name in meta[d]} for p in prompts} for d in blocks
    }
    rng = np.random.default_rng(seed)
    private = ("drafter", "gamma", "lenience", "rep")
    with tqdm(total=s.repeats * len(prompts) * len(blocks), desc="timed blocks", file=sys.stderr,
              disable=not progress) as bar:  # fmt: skip
        for rep in range(s.repeats):
            for pname, ids in prompts.items():
                for dtype in blocks:
                    bar.set_postfix_str(f"rep {rep + 1} {pname} {dtype}")
                    for r in block(dtype, ids, s.max_new_tokens, rep, rng):
                        name = "ours_ar" if r["drafter"] == "plain" else r["drafter"]
                        slot = runs[dtype][pname][name]
                        slot["times"].append({k: v for k, v in r.items() if k not in private and k[0] != "_"})
                        if rep == 0:
                            m = meta[dtype][name]
                            slot |= {"tokens": r["_tokens"], "deterministic": True}
                            slot |= {"side": m["side"], "method": m["method"], "gamma": m["gamma"]}
                            if not isinstance(r["_stats"], HFRun):
                                slot["stats"] = r["_stats"]
                            elif r["_stats"].rounds is not None:
                                slot["hf_rounds"] = r["_stats"].rounds
                        elif r["_tokens"] != slot["tokens"]:
                            slot["deterministic"] = False
                    bar.update()
    return runs


def measure_curves(models: Mapping[str, Any], prefix_len: int, s: Settings) -> dict[str, VerifyCost]:
    """T(k)/T(1) for k = 1..kmax for every model, all (model, k) pairs interleaved
    (:func:`specdec.measure.core.verify_cost_curves`)."""
    ks = range(1, s.kmax + 1)
    return verify_cost_curves(models, prefix_len, ks, repeats=s.curve_repeats, warmup=2)


# --------------------------------------------------------------------------- summaries
def divergence(a: Sequence[int], b: Sequence[int]) -> dict[str, Any]:
    """Whether two outputs are identical, and if not the first position where they differ
    (:func:`specdec.theory.tokens.first_divergence`)."""
    first = first_divergence(a, b)
    return {"identical": first is None, "first_divergence": first, "len_a": len(a), "len_b": len(b)}


def _tps(row: Mapping[str, Any]) -> float:
    return row["new_tokens"] / row["wall_s"]


def _decode_tps(row: Mapping[str, Any]) -> float:
    return row["new_tokens"] / (row["wall_s"] - row["prefill_s"])


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _ratio_block(nums: Sequence[float], dens: Sequence[float]) -> dict[str, Any]:
    # not paired_speedup (units: prompts): one prompt's repetitions, each ratio within a repetition (HF's runs
    # beside ours), the median of those ratios: this benchmark's own record format (test_bench_smoke)
    per = [a / b for a, b in zip(nums, dens, strict=True)]
    return {"median": _median(per), "per_repeat": per}


def summarise_prompt(
    slots: Mapping[str, Mapping[str, Any]], curve: VerifyCost, s: Settings
) -> dict[str, Any]:
    """Medians, per-repeat ratio medians, exactness checks and theorem rows for one prompt."""
    out: dict[str, Any] = {"runs": {}, "ratios": {}, "exactness": {}, "theorem": {}}
    for name, slot in slots.items():
        row = {
            "side": slot["side"],
            "method": slot["method"],
            "gamma": slot["gamma"],
            "new_tokens": len(slot["tokens"]),
            "deterministic": slot["deterministic"],
            "tokens_per_s_median": _median([_tps(t) for t in slot["times"]]),
            "wall_s_median": _median([t["wall_s"] for t in slot["times"]]),
            "times": slot["times"],
            "tokens": slot["tokens"],
        }
        if "stats" in slot:
            st = slot["stats"]
            row["decode_tokens_per_s_median"] = _median([_decode_tps(t) for t in slot["times"]])
            row["stats"] = jsonable(  # NaN (an undefined rate) -> None: the records' rule
                {
                    k: v
                    for k, v in st.summary().items()
                    if k not in ("prefill_s", "draft_s", "target_s", "verify_s", "gc_s")
                }
            )
        if "hf_rounds" in slot:
            drafted = [k for k, _ in slot["hf_rounds"]]
            accepted = [a for _, a in slot["hf_rounds"]]
            row["hf_rounds"] = {
                "rounds": len(drafted),
                "drafted": drafted,
                "accepted_tokens": sum(accepted),
                "mean_drafted": float(np.mean(drafted)) if drafted else None,
                "max_drafted": max(drafted) if drafted else None,
                "mean_tokens_per_round": len(slot["tokens"]) / len(drafted) if drafted else None,
            }
        out["runs"][name] = row

    def tps(name: str) -> list[float]:
        return [_tps(t) for t in slots[name]["times"]]

    out["ratios"]["ar_ours_over_hf"] = _ratio_block(tps("ours_ar"), tps("hf_greedy"))
    out["exactness"]["ours_ar_vs_hf_greedy"] = divergence(
        slots["ours_ar"]["tokens"], slots["hf_greedy"]["tokens"]
    )
    for g in s.gammas:
        ours, hf = f"ours_pld_g{g}", f"hf_pld_g{g}"
        ours_sp = [a / b for a, b in zip(tps(ours), tps("ours_ar"), strict=True)]
        hf_sp = [a / b for a, b in zip(tps(hf), tps("hf_greedy"), strict=True)]
        out["ratios"][f"pld_g{g}"] = {
            "ours_speedup": _ratio_block(tps(ours), tps("ours_ar")),
            "hf_speedup": _ratio_block(tps(hf), tps("hf_greedy")),
            "ours_speedup_over_hf_speedup": _ratio_block(ours_sp, hf_sp),
            "ours_over_hf_tokens_per_s": _ratio_block(tps(ours), tps(hf)),
        }
        out["exactness"][f"{ours}_vs_{hf}"] = divergence(slots[ours]["tokens"], slots[hf]["tokens"])
        out["exactness"][f"{ours}_vs_ours_ar"] = divergence(slots[ours]["tokens"], slots["ours_ar"]["tokens"])
        out["exactness"][f"{hf}_vs_hf_greedy"] = divergence(slots[hf]["tokens"], slots["hf_greedy"]["tokens"])
    ee = f"ours_ee{s.ee_layers}_g{s.ee_gamma}"
    out["exactness"][f"{ee}_vs_ours_ar"] = divergence(slots[ee]["tokens"], slots["ours_ar"]["tokens"])
    out["ratios"][ee] = {"ours_speedup": _ratio_block(tps(ee), tps("ours_ar"))}
    for name in [*(f"ours_pld_g{g}" for g in s.gammas), ee]:
        out["theorem"][name] = theorem_row(slots[name], slots["ours_ar"], curve)
    return out


def theorem_row(spec: Mapping[str, Any], ar: Mapping[str, Any], curve: VerifyCost) -> dict[str, Any]:
    """Measured speedup against Theorem 3.8 and its verify-cost-corrected forms, per repetition.

    Per repetition: t_1 = our AR run's mean target step (``Stats.step_s``: target_s /
    target_calls); c = :func:`specdec.engine.stats.cost_coefficient` (the run's draft time per round
    over gamma, over t_1); the measured speedup is decode tokens/s (prefill excluded, as in the
    theorem) of the speculative run over that of the AR run. Predictions, from the run's alpha
    (accepted / examined), are the models of :func:`specdec.analysis.realrun.speedup_gap`:

    * ``theorem``: Theorem 3.8, E[T](alpha, gamma) / (gamma c + 1);
    * ``with_verify``: E[T](alpha, gamma) / (gamma c + T(gamma+1)/T(1)), the measured verify cost;
    * ``with_drafts``: the rounds as drafted (k_r <= gamma, prompt lookup's are often shorter),
      sum_r E[T](alpha, k_r) / sum_r (gamma c + T(k_r+1)/T(1)) -- the headline for prompt lookup;
    * ``with_observed_T``: the realised tokens per round (not the i.i.d. E[T]) over the same
      per-round cost: what is left is the engine's own overhead.
    """
    from specdec.analysis.realrun import speedup_gap  # torch (Stats), only when a run is summarised
    from specdec.engine.stats import cost_coefficient

    st = spec["stats"]
    gamma = int(st.gamma)
    alpha = float(st.alpha_accept_rate) if st.examined else 0.0
    ratio = dict(zip(curve.ks, curve.ratios, strict=True))
    drafted = [int(k) for k in st.drafted]
    rows = []
    for t_spec, t_ar in zip(spec["times"], ar["times"], strict=True):
        t1 = t_ar["target_s"] / t_ar["target_calls"]
        c = cost_coefficient(t_spec["draft_s"], t_spec["rounds"], gamma, t1)
        measured = _decode_tps(t_spec) / _decode_tps(t_ar)  # this repetition's, beside its own prediction
        gap = speedup_gap(
            alpha=alpha,
            gamma=gamma,
            c=c,
            curve=ratio,
            drafted=drafted,
            tokens_per_round=st.mean_tokens_per_round,
            measured=measured,
        )
        pred = {k: gap[k] for k in PREDICTIONS}
        rows.append({"t1_s": t1, "c": c, "measured": measured, "predicted": pred})
    return {
        "gamma": gamma,
        "alpha": alpha,
        "rounds": st.rounds,
        "mean_drafted": float(np.mean(drafted)),
        "mean_tokens_per_round": st.mean_tokens_per_round,
        "verify_cost_gamma_plus_1": ratio[gamma + 1],
        "c_median": _median([r["c"] for r in rows]),
        "measured_speedup_median": _median([r["measured"] for r in rows]),
        "predicted_median": {k: _median([r["predicted"][k] for r in rows]) for k in PREDICTIONS},
        "measured_over_predicted_median": {
            k: _median([r["measured"] / r["predicted"][k] for r in rows]) for k in PREDICTIONS
        },
        "per_repeat": rows,
    }


def pooled(runs: Mapping[str, Mapping[str, Any]], s: Settings) -> dict[str, Any]:
    """All prompts together: per repetition, total tokens / total wall time of each path."""
    names = next(iter(runs.values())).keys()

    def tps(name: str) -> list[float]:
        return [
            sum(runs[p][name]["times"][r]["new_tokens"] for p in runs)
            / sum(runs[p][name]["times"][r]["wall_s"] for p in runs)
            for r in range(s.repeats)
        ]

    out = {"tokens_per_s_median": {n: _median(tps(n)) for n in names}}
    out["ar_ours_over_hf"] = _ratio_block(tps("ours_ar"), tps("hf_greedy"))
    for g in s.gammas:
        ours_sp = [a / b for a, b in zip(tps(f"ours_pld_g{g}"), tps("ours_ar"), strict=True)]
        hf_sp = [a / b for a, b in zip(tps(f"hf_pld_g{g}"), tps("hf_greedy"), strict=True)]
        out[f"pld_g{g}"] = {
            "ours_speedup": _ratio_block(ours_sp, [1.0] * len(ours_sp)),
            "hf_speedup": _ratio_block(hf_sp, [1.0] * len(hf_sp)),
            "ours_speedup_over_hf_speedup": _ratio_block(ours_sp, hf_sp),
        }
    return out


def summarise(
    raw: Mapping[str, Any],
    curves: Mapping[str, VerifyCost],
    prompts: Mapping[str, Sequence[int]],
    s: Settings,
) -> dict[str, dict[str, Any]]:
    """One JSON-ready record per dtype (without the environment)."""
    out = {}
    for dtype, per_prompt in raw.items():
        out[dtype] = {
            "benchmark": BENCHMARK,
            "dtype": dtype,
            "settings": s.to_record(),
            "prompts": {
                name: {"n_tokens": len(ids), "user_message": PROMPTS.get(name)}
                for name, ids in prompts.items()
            },
            "verify_cost": curves[dtype],
            "by_prompt": {p: summarise_prompt(slots, curves[dtype], s) for p, slots in per_prompt.items()},
            "all_prompts": pooled(per_prompt, s),
        }
    return out


# --------------------------------------------------------------------------- printing
def print_tables(summary: Mapping[str, Mapping[str, Any]], s: Settings, file: Any = None) -> None:
    """Plain-text tables of the headline numbers."""
    file = sys.stdout if file is None else file

    def p(*args: Any) -> None:
        print(*args, file=file)

    for dtype, rec in summary.items():
        p(f"\n== {dtype} ==")
        p(f"{'prompt':<14} {'ours AR tok/s':>13} {'HF tok/s':>9} {'ratio':>6}  exact(AR vs HF)")
        for pname, r in rec["by_prompt"].items():
            runs = r["runs"]
            ex = r["exactness"]["ours_ar_vs_hf_greedy"]
            p(
                f"{pname:<14} {runs['ours_ar']['tokens_per_s_median']:13.2f} "
                f"{runs['hf_greedy']['tokens_per_s_median']:9.2f} "
                f"{r['ratios']['ar_ours_over_hf']['median']:6.3f}  "
                f"{'identical' if ex['identical'] else 'diverges at ' + str(ex['first_divergence'])}"
            )
        p(f"{'all prompts':<14} {'':>13} {'':>9} {rec['all_prompts']['ar_ours_over_hf']['median']:6.3f}")
        p(f"\n{'prompt':<14} {'gamma':>5} {'ours x':>7} {'HF x':>6} {'ours/HF':>8}  exact(ours vs HF PLD)")
        for pname, r in rec["by_prompt"].items():
            for g in s.gammas:
                rr = r["ratios"][f"pld_g{g}"]
                ex = r["exactness"][f"ours_pld_g{g}_vs_hf_pld_g{g}"]
                p(
                    f"{pname:<14} {g:5d} {rr['ours_speedup']['median']:7.3f} "
                    f"{rr['hf_speedup']['median']:6.3f} {rr['ours_speedup_over_hf_speedup']['median']:8.3f}  "
                    f"{'identical' if ex['identical'] else 'diverges at ' + str(ex['first_divergence'])}"
                )
        curve = rec["verify_cost"]
        t1_ms = 1e3 * curve.timings[0].median_s
        p(f"\nverify cost T(k)/T(1), prefix {curve.prefix_len}, T(1) = {t1_ms:.1f} ms")
        p("  " + " ".join(f"{k}:{r:.2f}" for k, r in zip(curve.ks, curve.ratios, strict=True)))
        p(
            f"\n{'prompt':<14} {'run':<14} {'alpha':>5} {'c':>6} {'meas':>5} {'Thm3.8':>6} {'corr':>5} "
            f"{'m/T3.8':>6} {'m/corr':>6} {'m/cost':>6}"
        )
        for pname, r in rec["by_prompt"].items():
            for name, t in r["theorem"].items():
                mp = t["measured_over_predicted_median"]
                p(
                    f"{pname:<14} {name:<14} {t['alpha']:5.2f} {t['c_median']:6.3f} "
                    f"{t['measured_speedup_median']:5.2f} {t['predicted_median']['theorem']:6.2f} "
                    f"{t['predicted_median']['with_drafts']:5.2f} {mp['theorem']:6.2f} "
                    f"{mp['with_drafts']:6.2f} {mp['with_observed_T']:6.2f}"
                )


def mean_context(prompts: Mapping[str, Sequence[int]], max_new_tokens: int) -> int:
    """The verify curve's default prefix: the mean prompt length plus half the new tokens."""
    return int(round(float(np.mean([len(ids) for ids in prompts.values()])) + max_new_tokens / 2))


#: What ``--quick`` changes when the option is not given (a seconds-long smoke run).
QUICK = {"max_new_tokens": 8, "repeats": 1, "gammas": (3,), "kmax": 4, "curve_repeats": 1}
#: The dtypes one run may time (transformers' model as loaded).
DTYPES = ("float32", "bfloat16")
_DEFAULT = Settings()


@dataclass(frozen=True)
class HFBenchRun(Program):
    """The engine against transformers' generate on the real target, fp32 and bf16 side by side.

    Times (interleaved, one paired block per repetition, prompt and dtype) our autoregressive loop
    against ``model.generate`` greedy, our prompt lookup against
    ``generate(prompt_lookup_num_tokens=gamma)``, and an early-exit drafter; then the verify-cost
    curve T(k)/T(1) and each measured speedup against Theorem 3.8's prediction
    (:mod:`specdec.experiments.hfbench`). Results: one JSON per dtype (``--out``, a path template,
    default ``results/bench/engine-<dtype>-<threads>t.json``) with the environment (versions,
    device, dtype, threads, commit) and the command line.

        specdec run hf-bench --quick                 # a smoke run, seconds (writes under /tmp)
        specdec run hf-bench --threads 1             # the full run, fp32 and bf16
    """

    name: ClassVar[str] = "hf-bench"

    quick: bool = option(False, "a seconds-long smoke run: 8 tokens, 1 repetition, one prompt, /tmp")
    dtype: tuple[str, ...] = option(DTYPES, f"the dtypes to time, among {', '.join(DTYPES)}")
    threads: int = option(1, "torch's threads")
    max_new_tokens: int | None = option(
        None, f"new tokens at most, generations stop at EOS (default {_DEFAULT.max_new_tokens}; 8 quick)"
    )
    repeats: int | None = option(None, f"repetitions (default {_DEFAULT.repeats}; 1 quick)")
    gammas: tuple[int, ...] | None = option(
        None, f"prompt-lookup gammas (default {','.join(map(str, _DEFAULT.gammas))}; 3 quick)"
    )
    ee_layers: int = option(_DEFAULT.ee_layers, "early-exit drafter: the target's first n layers")
    ee_gamma: int = option(_DEFAULT.ee_gamma, "early-exit drafter's gamma")
    kmax: int | None = option(None, f"verify-cost curve: k = 1..kmax (default {_DEFAULT.kmax}; 4 quick)")
    curve_repeats: int | None = option(
        None, f"verify-cost curve's repetitions (default {_DEFAULT.curve_repeats}; 1 quick)"
    )
    curve_prefix: int | None = option(None, "verify-cost curve's cache length (default: mean prompt + N/2)")
    prompts: tuple[str, ...] | None = option(
        None, f"prompts among {', '.join(sorted(PROMPTS))} (default all; open_question quick)"
    )
    out: str | None = option(
        None,
        "the records' path template with {dtype} and {threads} (default "
        "results/bench/engine-{dtype}-{threads}t.json; quick /tmp/bench_engine-quick-...)",
    )
    note: str = option(NOTE, "the records' note (default: a note on the shared machine)")

    def check(self) -> None:
        if not self.dtype:
            raise ValueError(f"dtype must name at least one of {', '.join(DTYPES)}")
        for dtype in self.dtype:
            check_choice("dtype", dtype, DTYPES)
        check_int("threads", self.threads, low=1)
        for name in sorted(set(self.prompts or ())):
            check_choice("prompts", name, sorted(PROMPTS))
        if self.curve_prefix is not None:
            check_int("curve_prefix", self.curve_prefix, low=1)
        self.settings()  # its own checks, before anything loads

    def settings(self) -> Settings:
        """The run's design (the records' ``settings``): a value given, else the quick run's, else the
        full run's."""

        def pick(name: str) -> Any:
            given = getattr(self, name)
            if given is not None:
                return given
            return QUICK[name] if self.quick else getattr(_DEFAULT, name)

        return Settings(
            max_new_tokens=pick("max_new_tokens"),
            repeats=pick("repeats"),
            gammas=tuple(pick("gammas")),
            ee_layers=self.ee_layers,
            ee_gamma=self.ee_gamma,
            kmax=pick("kmax"),
            curve_repeats=pick("curve_repeats"),
            curve_prefix=self.curve_prefix,
        )

    def run(self) -> int:
        import time
        import warnings

        from tqdm import tqdm

        from specdec.engine.builder import EngineSpec, open_engine
        from specdec.engine.models import set_threads
        from specdec.measure.benchargs import ROOT

        s = self.settings()
        names = self.prompts or (("open_question",) if self.quick else None)
        template = self.out or (
            "/tmp/bench_engine-quick-{dtype}-{threads}t.json"
            if self.quick
            else str(ROOT / "results" / "bench" / "engine-{dtype}-{threads}t.json")
        )
        threads = set_threads(self.threads)
        warnings.filterwarnings("ignore")
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        loaded = {}
        for dtype in tqdm(self.dtype, desc="load", file=sys.stderr):
            loaded[dtype] = open_engine(EngineSpec("hf", dtype, self.threads, device="cpu")).base
        models = {d: lm.model for d, lm in loaded.items()}
        prompts = render_prompts(next(iter(loaded.values())).tokenizer, names)
        prefix = s.curve_prefix or mean_context(prompts, s.max_new_tokens)
        print(
            f"threads {threads}; prompts {[len(v) for v in prompts.values()]} tokens; curve prefix {prefix}",
            file=sys.stderr,
        )

        raw = run_suite(models, prompts, s)
        print(f"verify-cost curves: k = 1..{s.kmax}, {s.curve_repeats} repetitions ...", file=sys.stderr)
        start = time.perf_counter()
        curves = measure_curves(models, prefix, s)
        print(f"verify-cost curves done in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        summary = summarise(raw, curves, prompts, s)
        print_tables(summary, s)
        command = self.command()
        for dtype, record in summary.items():
            load_s = loaded[dtype].load_s
            record |= {"command": command, "note": self.note, "threads": threads, "load_s": load_s}
            env = environment(model=models[dtype])
            path = Path(template.format(dtype=dtype, threads=self.threads))
            write_result(path, record, env=env)
            print(f"wrote {path}", file=sys.stderr)
        return 0
