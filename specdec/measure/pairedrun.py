"""The one paired plain-vs-speculative run: timed generations, interleaved per repetition.

A measured speedup compares plain decoding with speculative decoding of the same prompt, run
back to back so that drift (other jobs, clocks) hits both alike. ``specdec measure``
(:mod:`specdec.experiments.usermeasure`), Part IV's benchmark (:mod:`specdec.experiments.realdecoding`), the
campaign (:mod:`specdec.experiments.campaign`), the engine against transformers
(:mod:`specdec.experiments.hfbench`, transformers' ``generate`` through the ``timer`` and ``row`` hooks),
the adaptive-gamma benchmark (:mod:`specdec.measure.dynamicgamma`) and the oracle's costs
(:func:`specdec.experiments.oraclegamma.measure_costs`) all time their runs here:

* :func:`timed_generation` -- one plain (``drafter`` None) or speculative generation, timed as
  a whole (the prompt's prefill is in :attr:`specdec.engine.stats.Stats.prefill_s`).
* :func:`fresh_timer` -- :func:`timed_generation` with a fresh drafter and policy per run (factories).
* :func:`timing_row` -- what every repetition keeps: times and round counts.
* :func:`paired_block` -- one repetition: plain and every configuration once, in an order drawn
  from the caller's generator (plain first on even repetitions and last on odd ones, first
  with probability 1/2, or anywhere in the order: :data:`PLAIN_AT`).
* :func:`finish_cell` -- a cell's runs slimmed for a record, with each run's first divergence
  from plain decoding.

c (Definition 3.7) of each speculative run against its paired plain run's step is
:func:`specdec.engine.stats.cost_coefficient`; the gap between Theorem 3.8 and the measured speedup
is :func:`specdec.analysis.realrun.speedup_gap`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from specdec.measure.core import gc_seconds, time_once
from specdec.theory.checks import check_choice
from specdec.theory.tokens import first_divergence

__all__ = [
    "PLAIN_AT",
    "finish_cell",
    "fresh_timer",
    "paired_block",
    "timed_generation",
    "timing_row",
    "tokens_digest",
]

#: Where :func:`paired_block` puts the plain decoder in a repetition's order.
PLAIN_AT = ("alternate", "random", "anywhere")


def timed_generation(
    target: Any,
    drafter: Any,
    ids: Sequence[int],
    *,
    gamma: int = 0,
    temperature: float = 0.0,
    new_tokens: int,
    seed: int = 0,
    lenience: float = 1.0,
    eos_token_id: int | None = None,
    exact_length: bool = False,
) -> tuple[list[int], Any, float]:
    """One generation, timed as a whole: plain decoding when ``drafter`` is None, else speculative
    decoding at ``gamma`` (a tree drafter's node budget when the drafter proposes trees). Returns
    ``(tokens, stats, total_s)``; the decoding time alone is
    ``total_s - stats.prefill_s``. With ``exact_length`` (and no EOS) a generation of other
    than ``new_tokens`` tokens is an error (Part IV times fixed-length runs)."""
    made: list[Any] = []  # a q4q8 target's C threads get the cores: the loop puts torch on one thread
    gc_before = gc_seconds()
    total = time_once(
        lambda: made.append(
            _generate(target, drafter, ids, gamma, temperature, new_tokens, seed, lenience, eos_token_id)
        )
    )
    g = made[0]
    g.stats.gc_s = gc_seconds() - gc_before  # the cyclic collector's share of the call (in total)
    if exact_length and len(g.tokens) != new_tokens:
        raise RuntimeError(f"a generation made {len(g.tokens)} tokens instead of {new_tokens}")
    return [int(t) for t in g.tokens], g.stats, total


def _generate(
    target: Any,
    drafter: Any,
    ids: Sequence[int],
    gamma: int,
    temperature: float,
    new_tokens: int,
    seed: int,
    lenience: float,
    eos_token_id: int | None,
) -> Any:
    from specdec.engine.decoding import autoregressive, speculative, speculative_tree

    if callable(getattr(drafter, "propose_tree", None)):  # a tree drafter: gamma is its node budget
        if lenience != 1.0:
            raise ValueError(f"tree drafters verify losslessly only (lenience 1); got lenience={lenience!r}")
        return speculative_tree(
            target,
            drafter,
            ids,
            budget=gamma,
            max_new_tokens=new_tokens,
            temperature=temperature,
            seed=seed,
            eos_token_id=eos_token_id,
        )
    if drafter is None:
        return autoregressive(
            target,
            ids,
            max_new_tokens=new_tokens,
            temperature=temperature,
            seed=seed,
            eos_token_id=eos_token_id,
        )
    return speculative(
        target,
        drafter,
        ids,
        gamma=gamma,
        max_new_tokens=new_tokens,
        temperature=temperature,
        lenience=lenience,
        seed=seed,
        eos_token_id=eos_token_id,
    )


def fresh_timer(
    target: Any, drafter: Any, ids: Sequence[int], *, gamma: Any, **kw: Any
) -> tuple[list[int], Any, float]:
    """:func:`timed_generation` for configurations that hold factories (a :func:`paired_block`
    ``timer``): ``drafter()`` and ``gamma()`` make a fresh drafter and a fresh gamma or stateful
    policy (:class:`specdec.theory.policies.HeuristicGamma`) for every run; plain decoding
    (``drafter`` None) as is."""
    if drafter is None:
        return timed_generation(target, None, ids, gamma=0, **kw)
    return timed_generation(target, drafter(), ids, gamma=gamma(), **kw)


def timing_row(stats: Any, total_s: float) -> dict[str, Any]:
    """What every repetition keeps: times and round counts."""
    return {
        "decode_s": total_s - stats.prefill_s,
        "prefill_s": stats.prefill_s,
        "draft_s": stats.draft_s,
        "target_s": stats.target_s,
        "verify_s": stats.verify_s,
        "rounds": stats.rounds,
        "target_calls": stats.target_calls,
        "new_tokens": stats.new_tokens,
        "gc_s": getattr(stats, "gc_s", 0.0),
    }


PLAIN = {"drafter": "plain", "object": None, "gamma": 0, "lenience": 1.0}


def paired_block(
    target: Any,
    configs: Sequence[Mapping[str, Any]],
    ids: Sequence[int],
    *,
    temperature: float,
    new_tokens: int,
    seed: int,
    rep: int,
    rng: np.random.Generator,
    plain_at: str = "alternate",
    eos_token_id: int | None = None,
    exact_length: bool = True,
    timer: Callable[..., tuple[list[int], Any, float]] = timed_generation,
    row: Callable[[Any, float], dict[str, Any]] = timing_row,
) -> list[dict[str, Any]]:
    """One repetition of a cell: plain decoding and every configuration once, the same ``seed`` for all.

    ``configs`` hold ``drafter`` (a name), ``object`` (the drafter), ``gamma`` and ``lenience``.
    The configurations run in an order drawn from ``rng``; plain decoding runs first on even
    repetitions and last on odd ones (``plain_at="alternate"``), first with probability 1/2
    (``"random"``, one draw), or at a position drawn uniformly among the len(configs) + 1 places
    (``"anywhere"``, one draw after the order's: plain then takes each place, the cell's first run
    included, as often as any configuration does, so whatever differs between the places of a
    repetition reaches plain no more than the configurations; under ``"alternate"`` the do-no-harm
    judgements' never-drafting policies read slower against plain on odd repetitions, plain last, than
    on even ones, plain first and the cell's first 2-thread run on repetition 0, in 18 of 20 record x
    temperature pairs: :func:`specdec.analysis.condtables.plain_position`; which place is the odd one,
    and why, those records do not say).
    Returns one row per run: ``drafter``, ``gamma``, ``lenience``,
    ``rep``, :func:`timing_row`, and the private ``_tokens`` and ``_stats``. ``timer`` runs one
    configuration (the signature and return of :func:`timed_generation`) and ``row(stats, total_s)``
    makes its timing fields: hooks for runs other than the package's (transformers' ``generate``).
    """
    check_choice("plain_at", plain_at, PLAIN_AT)
    if plain_at == "random":
        first = rng.random() < 0.5
        order = [configs[i] for i in rng.permutation(len(configs))] if len(configs) > 1 else list(configs)
        order = [PLAIN, *order] if first else [*order, PLAIN]
    else:
        order = [configs[i] for i in rng.permutation(len(configs))]
        at = 0 if rep % 2 == 0 else len(order)  # "alternate"
        if plain_at == "anywhere":
            at = int(rng.integers(len(order) + 1))
        order.insert(at, PLAIN)
    rows = []
    for cfg in order:
        tokens, stats, total = timer(
            target,
            cfg["object"],
            ids,
            gamma=cfg["gamma"],
            temperature=temperature,
            new_tokens=new_tokens,
            seed=seed,
            lenience=cfg["lenience"],
            eos_token_id=eos_token_id,
            exact_length=exact_length,
        )
        rows.append(
            {"drafter": cfg["drafter"], "gamma": cfg["gamma"], "lenience": cfg["lenience"], "rep": rep}
            | row(stats, total)
            | {"_tokens": tokens, "_stats": stats}
        )
    return rows


def tokens_digest(tokens: Sequence[int]) -> str:
    """The first 16 hex digits of the sha256 of the token ids written in decimal, comma-separated: equal
    generations have equal digests, so a reader re-checks greedy equality between any two runs."""
    import hashlib

    return hashlib.sha256(",".join(str(int(t)) for t in tokens).encode()).hexdigest()[:16]


def finish_cell(
    rows: list[dict[str, Any]],
    base: dict[str, Any],
    keep_tokens: Callable[[dict[str, Any]], bool] = lambda r: False,
) -> list[dict[str, Any]]:
    """Slim a cell's runs for the record: every repetition keeps its times, whether its tokens
    equal repetition 0's and their digest (:func:`tokens_digest`); repetition 0 keeps its Stats
    summary and its first divergence from plain, and its tokens where ``keep_tokens(run)`` says so."""
    key = ("drafter", "gamma", "lenience")
    first = {tuple(r[k] for k in key): r for r in rows if r["rep"] == 0}
    plain = next(r for r in rows if r["drafter"] == "plain" and r["rep"] == 0)["_tokens"]
    out = []
    for r in rows:
        ref = first[tuple(r[k] for k in key)]
        slim = {k: v for k, v in r.items() if not k.startswith("_")} | base
        slim["same_as_rep0"] = r["_tokens"] == ref["_tokens"]
        slim["tokens_sha256"] = tokens_digest(r["_tokens"])  # greedy equality re-checkable from the record
        if r["rep"] == 0:
            slim["stats"] = {k: v for k, v in r["_stats"].summary().items() if not k.endswith("_s")}
            slim["first_divergence_from_plain"] = first_divergence(r["_tokens"], plain)
            if keep_tokens(r):
                slim["tokens"] = r["_tokens"]
        out.append(slim)
    return out
