"""``specdec measure``: a drafter measured against a target on your prompts, on this machine.

:func:`measure_setup` checks the arguments (:func:`parse_draft`, :func:`read_prompts`), loads
the target, the engine and the draft, and runs :func:`measure_drafter`: the paper's alpha by
teacher forcing (:func:`teacher_forced_alpha`) and the acceptance rate observed while
decoding, c (:func:`specdec.engine.stats.cost_coefficient`), the verify-cost curve
(:func:`specdec.measure.core.engine_verify_curves`), and the measured speedup with its bootstrap
interval against Theorem 3.8's prediction (:func:`specdec.analysis.realrun.speedup_gap`). The timing
primitives live in :mod:`specdec.measure.core`; this module composes them for the command line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specdec.measure.core import engine_verify_curves, environment
from specdec.theory.checks import check_int, check_seed
from specdec.theory.recordio import jsonable
from specdec.theory.sampling import check_temperature

__all__ = [
    "ENGINES",
    "OLD_DRAFT_NAMES",
    "check_context",
    "measure_drafter",
    "measure_setup",
    "parse_draft",
    "prompt_ids",
    "read_prompts",
    "registry_draft",
    "teacher_forced_alpha",
]

#: The command line's one older drafter name, mapped once (:func:`parse_draft`) to the registry's spec
#: (:mod:`specdec.drafting.registry`): a distilled draft's name -> ``draft:<name>``. It stays because a
#: documented command uses it: ``specdec measure --draft distil-l1`` made the committed record
#: ``results/cli/measure-distil-l1-*.json``, whose command the command-line chapter shows. The other
#: older spellings (a bare model folder, ``early-exit`` without its layers) are refused, naming the spec.
OLD_DRAFT_NAMES = ("<a distilled draft's name>",)

#: The engines :func:`measure_setup` decodes with: the lean engine's modes (CPU), ``"auto"``
#: (the lean mode :func:`specdec.measure.modes.lean_model` picks by measuring this machine), or the
#: transformers model as loaded (CPU or GPU).
#: (Spelled out so that importing this module does not import torch; a test checks that the
#: lean modes are :data:`specdec.engine.lean.MODES`.)
ENGINES = ("auto", "float32", "q4_1", "q4q8", "bfloat16", "int4", "hf-float32", "hf-bfloat16")

#: Training prompts (and their seed) whose temperature-1 generations make the bigram table:
#: disjoint from the evaluation prompts, as in Part IV's fallback corpus.
BIGRAM_PROMPTS, BIGRAM_SEED = 12, 1000

Progress = Callable[[Iterable[Any], str], Iterable[Any]]


def _no_progress(items: Iterable[Any], desc: str) -> Iterable[Any]:
    return items


def parse_draft(draft: str) -> Any:
    """The drafter ``draft`` names, checked before anything loads: a registry spec
    (:class:`specdec.drafting.registry.DrafterSpec`, chain or tree).

    ``draft`` is a registry spec (:func:`specdec.drafting.registry.parse_spec`: ``lookup``, ``suffix``,
    ``lookup-tree``, ``early-exit:8``, ``draft:distil-l1``, ``model:<folder>``, ``medusa:medusa-4``,
    ``eagle:eagle-1,topk=4``, ...) or the older name (:data:`OLD_DRAFT_NAMES`), mapped here and nowhere
    else: a distilled draft's name -> ``draft:<name>``. A saved drafter the spec names (``draft``,
    ``draft-tree``, ``medusa``, ``mlp``, ``eagle``) must exist with a card of that family; a ``model:``
    folder must exist. Anything else (a bare folder, ``early-exit`` without its layers included) raises
    ValueError naming the valid specs.
    """
    from specdec.drafting.registry import KINDS, parse_spec
    from specdec.train.draftnets import list_drafts

    if not isinstance(draft, str) or not draft.strip():
        raise ValueError(f"draft must name a drafter (a registry spec such as 'lookup'); got {draft!r}")
    text = draft.strip()
    saved = list_drafts()
    kind = text.partition(":")[0].partition(",")[0]
    if kind not in KINDS:  # not a registry spec: the older name, mapped once
        if text in saved:
            text = f"draft:{text}"
        elif Path(text).expanduser().is_dir():
            raise ValueError(
                f"draft {text!r} is a folder: a draft model in a folder is the spec model:{text}"
            )
        else:
            if Path(text).exists():
                raise ValueError(
                    f"draft {text!r} is a file; a draft model is a folder (save_pretrained), the spec "
                    "model:<folder>"
                )
            raise ValueError(
                f"unknown draft {text!r}: give a drafter registry spec kind[:argument][,key=value] (kinds: "
                f"{', '.join(sorted(KINDS))}; e.g. lookup, suffix, early-exit:8, draft:distil-l1, "
                f"model:<folder>) or a distilled draft's name ({', '.join(saved)})"
            )
    try:
        spec = parse_spec(text)
    except ValueError as exc:
        raise ValueError(f"draft {draft!r}: {exc}") from None
    _check_saved(spec, saved)
    return spec


def _check_saved(spec: Any, saved: Sequence[str]) -> None:
    """What ``spec`` loads exists, with a card of its own family (before anything loads)."""
    from specdec.train.draftnets import CONDITIONED_SPECS, DRAFT_DIR, require_drafts

    families = {kind: family for family, kind in CONDITIONED_SPECS.items()}  # registry kind -> card kind
    if spec.kind in ("draft", "draft-tree"):
        require_drafts([spec.argument])
    elif spec.kind in families:
        card = DRAFT_DIR / str(spec.argument) / "card.json"
        found = json.loads(card.read_text(encoding="utf-8")).get("kind") if card.is_file() else None
        if found != families[spec.kind]:
            have = sorted(p.parent.name for p in DRAFT_DIR.glob("*/card.json") if p.parent.name not in saved)
            got = "no such saved drafter" if found is None else f"its card is a {found} card"
            raise ValueError(
                f"draft {spec.text!r}: {spec.kind} needs a saved {families[spec.kind]} drafter; "
                f"{spec.argument!r}: {got} (saved conditioned drafters: {', '.join(have)}; distilled "
                f"drafts, spec draft:<name>: {', '.join(saved)})"
            )
    elif spec.kind == "model" and not Path(str(spec.argument)).expanduser().is_dir():
        raise ValueError(f"draft {spec.text!r}: no such model folder {spec.argument!r}")


def registry_draft(record: dict[str, Any]) -> dict[str, Any]:
    """A ``specdec measure`` record with its drafter named by the registry's spec (``draft.name`` and
    ``draft.spec``, ``draft.kind`` the spec's kind). The records made before the command took specs name
    a distilled draft by its name alone (``distil-l1``, kind ``distilled``) and an early exit by its
    kind and layers: mapped once, here, where the record is read (``specdec measure --from-json``); the
    file stays as written. A record that names its spec comes back equal."""
    draft = record.get("draft")
    if not isinstance(draft, dict) or not isinstance(draft.get("name"), str):
        return record  # a damaged record: the reader's field check names what is missing
    spec, kind = draft.get("spec"), draft.get("kind")
    if not isinstance(spec, str):
        spec = draft["name"]
        if kind == "distilled":
            spec, kind = f"draft:{spec}", "draft"
        elif kind == "early-exit" and isinstance(draft.get("layers"), int):
            spec = f"early-exit:{draft['layers']}"
        elif kind == "model":
            spec = f"model:{spec}"
    return {**record, "draft": {**draft, "name": spec, "spec": spec, "kind": kind}}


def read_prompts(path: str | Path) -> list[str]:
    """The prompts in a UTF-8 file: one a line, or, for a ``.jsonl`` file, one JSON object a line
    with a ``"prompt"`` field (the format of ``specdec/data/workloads/*.jsonl``). Blank lines are
    skipped. The file is read once, from its start to its end, so a pipe such as ``/dev/stdin`` works.
    A missing file, a folder, a file that is not UTF-8, an empty file, or a JSON line without a prompt
    raises ValueError naming the file."""
    p = Path(path).expanduser()
    if not p.exists() or p.is_dir():
        raise ValueError(f"prompts file {str(path)!r} does not exist (or is a folder)")
    try:
        with p.open("rb") as f:  # one read: a pipe cannot be read twice
            raw = f.read()
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"prompts file {str(path)!r} is not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})"
        ) from None
    except OSError as exc:
        raise ValueError(f"prompts file {str(path)!r} cannot be read ({exc.strerror or exc})") from None
    out = []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # text mode's newlines
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if p.suffix == ".jsonl":
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if not isinstance(row, dict) or not str(row.get("prompt", "")).strip():
                raise ValueError(
                    f"prompts file {p.name} line {line_no}: expected a JSON object with a 'prompt'"
                )
            out.append(str(row["prompt"]))
        else:
            out.append(line)
    if not out:
        raise ValueError(f"prompts file {str(path)!r} holds no prompt (only blank lines)")
    return out


def prompt_ids(tokenizer: Any, text: str) -> list[int]:
    """``text`` as one user turn in the tokenizer's chat template
    (:func:`specdec.train.workloads.chat_prompt_ids`),
    or plainly encoded when the tokenizer has no chat template."""
    from specdec.train.workloads import chat_prompt_ids

    if getattr(tokenizer, "chat_template", None):
        return chat_prompt_ids(tokenizer, text)
    return list(tokenizer.encode(text, add_special_tokens=True))


def _warp_fn(temperature: float) -> Callable[[Any], Any]:
    from functools import partial

    from specdec.theory.sampling import warp

    return partial(warp, temperature=temperature)


def teacher_forced_alpha(
    engine: Any,
    drafter: Any,
    sequences: Sequence[tuple[Sequence[int], Sequence[int]]],
    temperature: float,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The paper's alpha on the target's own text, by teacher forcing (:mod:`specdec.measure.acceptance`).

    ``sequences`` holds (prompt ids, the target's response) pairs; p_t comes from one forward of
    ``engine`` (any engine :func:`specdec.engine.lm.open_lm` opens) over prompt + response, q_t from the
    drafter after the same prefix, both warped at ``temperature``; beta_t = sum_x min(p_t, q_t)
    (Corollary 3.6; p_t of the drafted token for prompt lookup). Returns ``alpha`` (mean beta over
    the positions with a draft, pooled over sequences), ``alpha_all_positions`` (a position
    without a draft counted as beta = 0), ``coverage`` (positions with a draft over all) and
    ``positions``; NaN alphas when nothing was drafted. ``progress(items, description)`` wraps
    the loop over sequences.
    """
    from specdec.engine.lm import open_lm
    from specdec.measure.acceptance import teacher_forced

    warp_fn = _warp_fn(temperature)
    beta_sum, drafted, positions = 0.0, 0, 0
    for prompt, response in (progress or _no_progress)(list(sequences), "teacher forcing"):
        if not response:
            continue
        seq = [*map(int, prompt), *map(int, response)]
        p = warp_fn(open_lm(engine).forward(seq[:-1], keep=len(response)))
        res = teacher_forced(engine, drafter, seq, len(prompt), warp_fn, p=p)
        beta_sum += float(np.nansum(res.beta))
        drafted += res.drafted
        positions += len(res.beta)
    nan = float("nan")
    return {
        "alpha": beta_sum / drafted if drafted else nan,
        "alpha_all_positions": beta_sum / positions if positions else nan,
        "coverage": drafted / positions if positions else nan,
        "positions": positions,
    }


def _decode_pairs(
    engine: Any,
    drafter: Any,
    prompts: list[list[int]],
    *,
    gamma: int,
    new_tokens: int,
    temperature: float,
    repeats: int,
    eos_token_id: int | None,
    seed: int,
    progress: Progress,
) -> list[dict[str, Any]]:
    """Step 1 of :func:`measure_drafter`: per repeat and prompt, plain and speculative decoding in a
    seeded random order by the one paired run (:func:`specdec.measure.pairedrun.paired_block`); each
    pair's ``plain`` and ``speculative`` tokens, decode time (prefill excluded) and Stats."""
    from specdec.measure.pairedrun import paired_block

    order = np.random.default_rng(seed)
    runs: list[dict[str, Any]] = []
    cells = [(rep, i) for rep in range(repeats) for i in range(len(prompts))]
    spec = [{"drafter": "speculative", "object": drafter, "gamma": gamma, "lenience": 1.0}]
    for rep, i in progress(cells, "decoding"):
        pair: dict[str, Any] = {"repeat": rep, "prompt": i}
        for row in paired_block(
            engine, spec, prompts[i], temperature=temperature, new_tokens=new_tokens, seed=seed + i, rep=rep,
            rng=order, plain_at="random", eos_token_id=eos_token_id, exact_length=False,
        ):  # fmt: skip
            pair[row["drafter"]] = {
                "tokens": row["_tokens"],
                "decode_s": row["decode_s"],
                "stats": row["_stats"],
            }
        runs.append(pair)
    return runs


def _cost(runs: list[dict[str, Any]], gamma: int) -> tuple[float, list[float], float]:
    """Step 3 of :func:`measure_drafter`: c (Definition 3.7) of every speculative call against its paired
    plain call's step, their median, and the median plain step in seconds."""
    from specdec.engine.stats import cost_coefficient

    c_runs = [
        cost_coefficient(r["speculative"]["stats"].draft_s, r["speculative"]["stats"].rounds, gamma,
                         r["plain"]["stats"].step_s)
        for r in runs
    ]  # fmt: skip
    return float(np.median(c_runs)), c_runs, float(np.median([r["plain"]["stats"].step_s for r in runs]))


def _measured(runs: list[dict[str, Any]], n_prompts: int) -> tuple[list[Any], Any]:
    """Step 5's measured speedup of :func:`measure_drafter` on time per token, by the book's one estimator
    (:func:`specdec.theory.intervals.paired_speedup`), and each prompt's ratio of medians."""
    from specdec.theory.intervals import paired_speedup

    def side(which: str) -> list[list[float]]:  # per prompt, its repetitions' time per token
        return [
            [r[which]["decode_s"] / max(len(r[which]["tokens"]), 1) for r in runs if r["prompt"] == i]
            for i in range(n_prompts)
        ]

    plain_t, spec_t = side("plain"), side("speculative")
    per_prompt = np.array([np.median(a) / np.median(b) for a, b in zip(plain_t, spec_t, strict=True)])
    return list(paired_speedup(plain_t, spec_t)), per_prompt


def _predictions(
    alpha: float, alpha_all: float, gamma: int, c: float, curve: dict[int, float], pooled: dict[str, Any],
    measured: float, max_gamma: int,
) -> tuple[Any, Any, Any]:  # fmt: skip
    """Step 5's predictions of :func:`measure_drafter` (None each when alpha is undefined): the gap's
    factors (:func:`specdec.analysis.realrun.speedup_gap`), Theorem 3.8's optimal gamma and the best
    gamma on the measured verify curve."""
    from specdec.analysis.realrun import speedup_gap
    from specdec.theory.speedup import best_gamma_on_curve, optimal_gamma, walltime_speedup

    if not math.isfinite(alpha):
        return None, None, None
    prediction = speedup_gap(
        alpha=alpha, gamma=gamma, c=c, curve=curve, drafted=pooled["drafted"],
        tokens_per_round=pooled["tokens_per_round"], measured=measured, alpha_theorem=alpha_all,
    )  # fmt: skip
    g = int(optimal_gamma(alpha_all, c))
    best_theorem = {"gamma": g, "speedup": float(walltime_speedup(alpha_all, g, c))}
    g, sp = best_gamma_on_curve(alpha_all, c, curve)
    return prediction, best_theorem, {"gamma": g, "speedup": sp, "max_gamma": max_gamma}


def curve_ks(gamma: int, ks: Sequence[int] | None = None) -> list[int]:
    """The call sizes the verify cost curve times (:func:`measure_drafter`, step 4): ``ks`` with 1, or by
    default 1 .. gamma + 1 and 6, 8, 12, 16."""
    return sorted({*range(1, gamma + 2), 6, 8, 12, 16} if ks is None else {1, *map(int, ks)})


def check_context(context: Any, prompt_lengths: Sequence[int], new_tokens: int, ks: Sequence[int]) -> None:
    """The whole need of a measurement against the target's context (``max_position_embeddings``; None:
    unknown, nothing checked), before anything is measured: every prompt plus ``new_tokens`` (decoding and
    teacher forcing), and the first prompt plus the widest verify call ``max(ks)`` (the verify cost
    curve, step 4 of :func:`measure_drafter`). ValueError naming the prompt, --new-tokens and the limit."""
    from specdec.theory.checks import is_int

    if not is_int(context):
        return
    i = int(np.argmax(prompt_lengths))
    n = int(prompt_lengths[i])
    if n >= context:
        raise ValueError(
            f"prompt {i + 1} alone ({n} tokens) fills the target's context of {context} positions (its "
            "max_position_embeddings): shorten the prompt (--prompts)"
        )
    if n + new_tokens > context:
        raise ValueError(
            f"prompt {i + 1} ({n} tokens) + new_tokens ({new_tokens}, --new-tokens) = {n + new_tokens} "
            f"positions; the target's context holds {context} (its max_position_embeddings): shorten "
            f"the prompt or lower --new-tokens to at most {context - n}"
        )
    first, widest = int(prompt_lengths[0]), max(ks)
    if first + widest > context:
        raise ValueError(
            f"the verify cost curve times calls of up to {widest} tokens after prompt 1 ({first} tokens): "
            f"{first + widest} positions; the target's context holds {context} (its "
            f"max_position_embeddings): shorten prompt 1 (the curve is timed after it) to at most "
            f"{context - widest} tokens"
        )


def _context(engine: Any) -> Any:
    """The target's context, as the decoding loops read it (``config.max_position_embeddings``)."""
    return getattr(getattr(engine, "config", None), "max_position_embeddings", None)


def is_tree(drafter: Any) -> bool:
    """A drafter that proposes trees (``propose_tree``): decoded by the tree loop at a node budget."""
    return callable(getattr(drafter, "propose_tree", None))


def measure_drafter(
    engine: Any,
    drafter: Any,
    prompts: Sequence[Sequence[int]],
    *,
    gamma: int,
    new_tokens: int,
    temperature: float = 0.0,
    repeats: int = 2,
    verify_ks: Sequence[int] | None = None,
    verify_repeats: int = 5,
    eos_token_id: int | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Measure a drafter against a target on given prompts: alpha both ways, c, the verify cost
    curve, and the measured speedup next to Theorem 3.8's.

    A chain drafter (``propose``) or a tree drafter (``propose_tree``, :func:`is_tree`); for a tree,
    ``gamma`` is the node budget of a round, and what only a chain has is NaN: both alphas, the
    prediction and the optimal gammas (Corollary 3.6 and Theorem 3.8 price a chain of drafts), while
    the measured speedup, c (draft time per round over the budget) and the tokens per round are its own.
    Before anything runs, the whole need is checked against the target's context (:func:`check_context`).

    1. Decoding: per repeat and prompt, plain decoding (:func:`specdec.engine.decoding.autoregressive`)
       and speculative decoding at ``gamma`` (:func:`specdec.engine.decoding.speculative`, or
       :func:`specdec.engine.decoding.speculative_tree` for a tree drafter) of up to
       ``new_tokens`` tokens, in a seeded random order (interleaved, so drift hits both alike),
       the same seed for both; each call's decoding time excludes the prompt's prefill.
    2. ``alpha`` (Corollary 3.6, :func:`teacher_forced_alpha`) on the plain generations of the
       first repeat; ``alpha_observed``: accepted over examined drafts of the speculative calls
       (:class:`specdec.engine.stats.Stats`, pooled by :func:`specdec.analysis.realrun.pool_rounds`).
    3. ``c`` (Definition 3.7, :func:`specdec.engine.stats.cost_coefficient`): a speculative call's draft
       time per round over gamma, in single-token steps T(1) of the paired plain call; the
       median over calls.
    4. The verify cost curve T(k)/T(1) after the first prompt (:func:`engine_verify_curves`), for
       every k in ``verify_ks`` (default 1 .. gamma + 1 and 6, 8, 12, 16).
    5. ``measured`` speedup: the book's one estimator (:func:`specdec.theory.intervals.paired_speedup`)
       on time per token: per prompt the median over repeats of each decoder's time, then the
       geometric mean over prompts of plain over speculative with its 95 % bootstrap interval (no
       interval with one prompt).
       ``prediction`` is :func:`specdec.analysis.realrun.speedup_gap`: Theorem 3.8 at the measured alpha
       (over all positions) and c, then with the measured verify cost, the rounds as drafted,
       the observed tokens per round, and the factors between them. ``optimal_gamma``: Theorem
       3.8's (:func:`specdec.theory.speedup.optimal_gamma`) and the best on the measured curve
       (:func:`specdec.theory.speedup.best_gamma_on_curve`).

    ``progress(items, description)`` wraps the loops (e.g. a tqdm bar). Returns a JSON-ready dict
    (NaN where a quantity is undefined, e.g. alpha when nothing was drafted).
    """
    from specdec.analysis.realrun import pool_rounds
    from specdec.engine.decoding import check_draft_context
    from specdec.theory.speedup import expected_tokens, walltime_speedup

    _check_settings(gamma, new_tokens, repeats, verify_repeats, temperature)
    check_seed("seed", seed)
    prompts = [[int(t) for t in p] for p in prompts]
    if not prompts or any(not p for p in prompts):
        raise ValueError("prompts must hold at least one non-empty list of token ids")
    check_draft_context(drafter, max(map(len, prompts)), new_tokens)  # before any decoding
    ks = curve_ks(gamma, verify_ks)
    missing = [k for k in range(1, gamma + 2) if k not in ks]
    if missing:
        raise ValueError(f"verify_ks must hold every call size 1 .. gamma + 1 = {gamma + 1}; lacks {missing}")
    check_context(_context(engine), [len(p) for p in prompts], new_tokens, ks)  # the whole need, up front
    tree = is_tree(drafter)
    progress = progress or _no_progress

    # 1. decoding, interleaved
    runs = _decode_pairs(
        engine, drafter, prompts, gamma=gamma, new_tokens=new_tokens, temperature=temperature,
        repeats=repeats, eos_token_id=eos_token_id, seed=seed, progress=progress,
    )  # fmt: skip

    # 2. alpha, both definitions
    first = {r["prompt"]: r["plain"]["tokens"] for r in runs if r["repeat"] == 0}
    nan = float("nan")
    if tree:  # no single q per position: Corollary 3.6's alpha, and Theorem 3.8, are a chain's
        tf = {"alpha": nan, "alpha_all_positions": nan, "coverage": nan, "positions": 0}
    else:
        tf = teacher_forced_alpha(
            engine, drafter, [(prompts[i], first[i]) for i in range(len(prompts))], temperature, progress
        )
    pooled = pool_rounds(r["speculative"]["stats"] for r in runs)
    spec_stats = [r["speculative"]["stats"] for r in runs]
    drafted = sum(s.drafted_tokens for s in spec_stats)

    # 3. c against the paired plain call's step
    c, c_runs, step_s = _cost(runs, gamma)

    # 4. the verify cost curve on this engine
    curves = engine_verify_curves({"target": engine}, prompts[0], ks, verify_repeats, log=None)
    cells_v = curves["engines"]["target"]
    curve = {int(cell["k"]): float(cell["ratio_to_k1"]) for cell in cells_v}

    # 5. measured speedup and the prediction
    measured, per_prompt = _measured(runs, len(prompts))
    alpha, alpha_all = tf["alpha"], tf["alpha_all_positions"]
    prediction, best_theorem, best_curve = _predictions(
        alpha, alpha_all, gamma, c, curve, pooled, measured[0], max(ks) - 1
    )
    alpha_obs = nan if tree else pooled["alpha_accept_rate"]
    return jsonable(  # NaN -> None: the record writers' rule
        {
            "shape": "tree" if tree else "chain",
            "gamma": gamma,
            "new_tokens": new_tokens,
            "temperature": temperature,
            "repeats": repeats,
            "prompts": len(prompts),
            "prompt_tokens": [len(p) for p in prompts],
            "generated_tokens": [len(first[i]) for i in range(len(prompts))],
            "alpha": alpha,
            "alpha_all_positions": alpha_all,
            "alpha_coverage": tf["coverage"],
            "alpha_positions": tf["positions"],
            "alpha_observed": alpha_obs,
            "draft_acceptance_fraction": (
                sum(s.accepted_tokens for s in spec_stats) / drafted if drafted else nan
            ),
            "tokens_per_round": pooled["tokens_per_round"],
            "mean_drafted": pooled["mean_drafted"],
            "expected_tokens": float(expected_tokens(alpha_all, gamma)) if math.isfinite(alpha_all) else nan,
            "c": c,
            "step_ms": 1e3 * step_s,
            "verify_curve": {str(k): v for k, v in sorted(curve.items())},
            "verify_cost": curve[gamma + 1],
            "verify": curves,
            "measured": measured,
            "measured_per_prompt": per_prompt.tolist(),
            "theorem_observed_alpha": (
                float(walltime_speedup(alpha_obs, gamma, c)) if math.isfinite(alpha_obs) else nan
            ),
            "prediction": prediction,
            "optimal_gamma_theorem": best_theorem,
            "optimal_gamma_curve": best_curve,
            "plain_tok_s": float(
                np.median([len(r["plain"]["tokens"]) / r["plain"]["decode_s"] for r in runs])
            ),
            "speculative_tok_s": float(
                np.median([len(r["speculative"]["tokens"]) / r["speculative"]["decode_s"] for r in runs])
            ),
            "greedy_exact": (
                all(r["plain"]["tokens"] == r["speculative"]["tokens"] for r in runs)
                if temperature == 0
                else None
            ),
            "c_per_call": c_runs,
        }
    )


def _depth(engine: Any) -> int:
    n = getattr(engine, "num_layers", None)  # a LeanLlama
    return int(n if n is not None else engine.config.num_hidden_layers)


def _build_drafter(
    spec: Any,
    detail: Any,
    opened: Any,
    *,
    new_tokens: int,
    progress: Progress,
    log: Callable[[str], None],
) -> tuple[Any, dict[str, Any]]:
    """The drafter of the spec :func:`parse_draft` returned, around the opened target, built by the
    registry (:mod:`specdec.drafting.registry`, its loaders by :func:`specdec.measure.modes.draft_context`),
    and what it is (for a model folder, ``detail`` is the draft :func:`_load_draft_folder` loaded)."""
    from specdec.drafting.registry import KINDS, build_drafter
    from specdec.measure.modes import draft_context

    engine, loaded = opened.model, opened.base

    def corpus() -> list[list[int]]:
        from specdec.engine.decoding import autoregressive
        from specdec.train.workloads import training_prompts

        log(f"building the bigram table from the target's text on {BIGRAM_PROMPTS} training prompts...")
        out = []
        for i, p in enumerate(progress(training_prompts(BIGRAM_PROMPTS, seed=BIGRAM_SEED), "bigram corpus")):
            ids = prompt_ids(loaded.tokenizer, p.prompt)
            g = autoregressive(engine, ids, max_new_tokens=new_tokens, temperature=1.0, seed=BIGRAM_SEED + i)
            out.append(g.tokens)
        about["about"] = (
            f"bigram counts (add-1) of the target's temperature-1 text on {BIGRAM_PROMPTS} training prompts "
            f"(seed {BIGRAM_SEED}), {sum(map(len, out))} tokens"
        )
        return out

    def folder_model(_: str) -> Any:  # a lean target: the draft in the same lean mode when it is a Llama
        from specdec.engine.builder import EngineSpec, open_model

        dl, how = detail, f"transformers {loaded.dtype}"
        model = dl.model
        if opened.spec.engine == "lean":
            try:
                model = open_model(dl.model, EngineSpec("lean", opened.mode, opened.threads)).model
                how = f"lean {opened.mode}"
            except ValueError as exc:
                how = f"transformers {loaded.dtype} (the lean engine refused it: {exc})"
        about["about"] = f"the model in {dl.name} ({_depth(dl.model)} layers), {how}"
        return model

    context, drafts = draft_context(opened, corpus=corpus, load_model=folder_model)
    about: dict[str, Any] = {"kind": spec.kind, "shape": spec.shape, "about": KINDS[spec.kind].doc}
    text = spec.text
    if spec.kind == "lookup":
        about["about"] = "prompt lookup: copies what followed an earlier match of the last 1-3 tokens"
    elif spec.kind.startswith("early-exit"):
        depth, n = _depth(engine), int(spec.argument)
        if n > depth:
            raise ValueError(f"draft {spec.kind}:{n} asks for more layers than the target has ({depth})")
        about.update(layers=n, about=f"the target's own first {n} of {depth} layers, final norm and LM head")
    elif spec.kind == "model":
        from specdec.engine.drafters import check_same_vocab

        check_same_vocab(engine, detail.model)
    drafter = build_drafter(text, context)
    about["name"] = about["spec"] = text  # the record names the drafter by its registry spec
    if spec.kind in ("draft", "draft-tree"):
        ran = drafts[spec.argument]
        how = "transformers forward"
        if opened.spec.engine == "lean":  # its fastest draft mode here, as every run does
            how = f"lean {ran['mode']} (the fastest draft mode here{', probed' if 'probe' in ran else ''})"
        about.update(
            about=f"the book's distilled draft {spec.argument} (specdec/data/drafts), {how}"
            + (f"; {KINDS[spec.kind].doc}" if spec.shape == "tree" else ""),
            engine=how,
        )
    return drafter, about


def _load_draft_folder(folder: Path, loaded: Any, log: Callable[[str], None]) -> Any:
    """The draft model in ``folder``, loaded like the target; ValueError unless it has the target's
    vocabulary (logit rows of the same width) and tokenizer (the same ids for the same strings)."""
    from specdec.engine.drafters import check_same_tokenizer, check_same_vocab
    from specdec.engine.models import load_model

    log(f"loading the draft model {folder}...")
    dl = load_model(folder, dtype=loaded.dtype, device=loaded.device, quiet=True)
    check_same_vocab(loaded.model, dl.model)
    check_same_tokenizer(loaded.tokenizer, dl.tokenizer)
    return dl


def _check_settings(
    gamma: int, new_tokens: int, repeats: int, verify_repeats: int, temperature: float
) -> None:
    """The settings :func:`measure_drafter` and :func:`measure_setup` share. A round emits its drafts
    plus one token of its own, so it drafts new_tokens - 1 at most: a larger gamma would measure
    nothing more (and its verify curve would grow with gamma)."""
    for name, value, low in (
        ("gamma", gamma, 1),
        ("new_tokens", new_tokens, 2),
        ("repeats", repeats, 1),
        ("verify_repeats", verify_repeats, 1),
    ):
        check_int(name, value, low=low)
    if gamma > new_tokens - 1:
        raise ValueError(
            f"gamma must lie in 1 .. new_tokens - 1 = {new_tokens - 1} (a round drafts at most the "
            f"tokens still to generate, less the target's own); got gamma = {gamma}, new_tokens = "
            f"{new_tokens}: lower gamma or raise new_tokens"
        )
    check_temperature("temperature", temperature)


def measure_setup(
    target: str = "default",
    draft: str = "lookup",
    prompts: str | Path | Sequence[str] | None = None,
    *,
    dtype: str = "auto",
    gamma: int = 4,
    new_tokens: int = 64,
    temperature: float = 0.0,
    repeats: int = 2,
    verify_repeats: int = 5,
    threads: int = 1,
    seed: int = 0,
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Everything ``specdec measure`` reports, for a target, a drafter and prompts on this machine.

    ``target``: ``"default"`` (SmolLM2-135M-Instruct, :func:`specdec.engine.models.load_target`) or a
    local transformers model folder. ``draft``: a registry spec, chain or tree, or an older name (see
    :func:`parse_draft`; a model folder must share the target's vocabulary and tokenizer); for a tree
    drafter ``gamma`` is its node budget. ``prompts``: a file (:func:`read_prompts`), the prompts
    themselves (a list of strings, e.g. read once from a pipe), or None for the book's first
    evaluation prompt of each task. ``dtype``: one of
    :data:`ENGINES`; ``"auto"`` is the lean mode chosen by timing this machine
    (:func:`specdec.measure.modes.lean_model`, cached per machine). Every argument is checked before
    anything is loaded (ValueError); the prompts' tokens, the new tokens and the verify curve's widest
    call against the target's context (:func:`check_context`) as soon as the tokenizer is loaded,
    before the target is converted, probed or measured. ``threads`` pins torch's threads. The measurement is
    :func:`measure_drafter`'s; the result adds what was measured (target, engine, draft,
    prompts) and :func:`environment`.
    """
    log = log or (lambda line: None)
    progress = progress or _no_progress
    _check_settings(gamma, new_tokens, repeats, verify_repeats, temperature)
    check_seed("seed", seed)  # before the model loads
    check_int("threads", threads, low=1)
    if dtype not in ENGINES:
        raise ValueError(f"dtype must be one of {', '.join(ENGINES)}; got {dtype!r}")
    spec = parse_draft(draft)
    if prompts is None or isinstance(prompts, str | Path):
        texts = None if prompts is None else read_prompts(prompts)
        named = None if prompts is None else Path(prompts).name
    else:
        texts, named = [str(t) for t in prompts], "the caller"
        if not texts or not all(t.strip() for t in texts):
            raise ValueError("prompts must hold at least one prompt, none of them blank")
    target_path = None
    if target != "default":
        target_path = Path(target).expanduser()
        if not target_path.is_dir():
            raise ValueError(
                f"target {target!r}: no such folder; give 'default' (SmolLM2-135M-Instruct) "
                "or a local transformers model folder"
            )

    from specdec.engine.builder import EngineSpec, open_engine
    from specdec.engine.models import load_model
    from specdec.measure.modes import machine_identity, open_target
    from specdec.train.workloads import evaluation_prompts

    lean = not dtype.startswith("hf-")
    hf_dtype = "bfloat16" if dtype == "hf-bfloat16" else "float32"
    hf_spec = EngineSpec("hf", hf_dtype, threads, device="cpu" if lean else None)  # lean runs on the CPU
    log("loading the target...")
    if target_path is None:
        loaded = open_engine(hf_spec).base
    else:
        loaded = load_model(target_path, dtype=hf_dtype, device=hf_spec.device, quiet=True)
    detail = None
    if spec.kind == "model":  # load and check a draft folder before the target is converted or probed
        detail = _load_draft_folder(Path(str(spec.argument)).expanduser(), loaded, log)
    tok = loaded.tokenizer
    if texts is None:
        plist = evaluation_prompts(tok, 1)
        ids = [p["ids"] for p in plist]
        source = (
            "the book's evaluation prompts, the first of each task ("
            + ", ".join(p["id"] for p in plist)
            + ")"
        )
    else:
        ids = [prompt_ids(tok, t) for t in texts]
        source = f"{len(texts)} prompt(s) from {named}"
    context = _context(loaded.model)  # the whole need, before the target is converted, probed or run
    check_context(context, [len(p) for p in ids], new_tokens, curve_ks(gamma))
    opened, engine_name = open_target(hf_spec, base=loaded), dtype
    if lean:
        if dtype == "auto":
            log("choosing the lean mode (this machine's probe: cached, else timed once in about a minute)...")
        try:
            opened = open_target(EngineSpec("lean", dtype, threads), base=loaded)
        except ValueError as exc:
            raise ValueError(f"{exc} (--dtype hf-float32 runs any transformers model)") from exc
        engine_name = f"lean-{opened.mode}"
        if opened.probe is not None:
            cached = "from the cache" if opened.probe.get("cached") else "measured now"
            log(f"lean mode {opened.mode} ({cached})")
    engine, probe = opened.model, opened.probe
    drafter, about = _build_drafter(spec, detail, opened, new_tokens=new_tokens, progress=progress, log=log)
    env = environment(dtype=engine_name, device=loaded.device)
    log(f"measuring: {len(ids)} prompt(s) x {repeats} repeat(s), plain and speculative decoding...")
    result = measure_drafter(
        engine,
        drafter,
        ids,
        gamma=gamma,
        new_tokens=new_tokens,
        temperature=temperature,
        repeats=repeats,
        verify_repeats=verify_repeats,
        eos_token_id=tok.eos_token_id,
        seed=seed,
        progress=progress,
    )
    mode = None
    if probe is not None:
        mode = {
            "mode": probe["mode"],
            "rule": probe.get("rule"),
            "cached": bool(probe.get("cached")),
            "step_ms": {m: 1e3 * v["step_s"] for m, v in probe["modes"].items()},
        }
    return {
        "kind": "specdec-measure",
        "target": {
            "name": loaded.name,
            "engine": engine_name,
            "dtype": dtype,
            "device": loaded.device,
            "layers": _depth(engine),
        },
        "mode_probe": mode,
        "machine": machine_identity(),  # the identity records.machine_of compares records by
        "draft": about,  # name and spec: the registry's spec, whatever older name was typed
        "prompts_source": source,
        "threads": threads,
        "seed": seed,
        **result,
        "environment": env,
    }
