"""The batch surface's timed runs (issue #12, item 2): T(b, k) of causal LMs and batched speculative
decoding against batched plain decoding, block by block and unit by unit, resumable.

``specdec run batch-surface`` (:mod:`specdec.experiments.batchsurface`) runs them as named steps and
saves its record after every block or unit; the readers of that record are
:mod:`specdec.analysis.batchcost`'s, which import no torch.

* :func:`block_plan` -- the order of the measurement: (pass, model, b) blocks, a fresh seeded order
  per pass (a resumed run visits the blocks left in the same order);
* :func:`measure_surface` -- T(b, k): one forward call feeding k new tokens to each of b sequences
  after a cached context, every k of a block timed once in a fresh order
  (:func:`specdec.measure.core.time_forwards`), the cache cropped back after every call;
* :func:`decode_units` -- batched speculative decoding (:mod:`specdec.engine.batched`) against batched
  plain decoding of the same batch of prompts, one paired run per unit
  (:func:`specdec.measure.pairedrun.paired_block`).

Speed thresholds belong in benchmarks, never in tests: these functions only measure.
"""

from __future__ import annotations

import copy
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from specdec.measure.core import sync_hook, time_forwards
from specdec.measure.pairedrun import paired_block
from specdec.theory.checks import check_int, check_ints

__all__ = ["Progress", "block_plan", "decode_units", "measure_surface"]

#: A progress bar: ``progress(items, description)`` -> the items (tqdm's shape).
Progress = Callable[[Iterable[Any], str], Iterable[Any]]


def _no_progress(items: Iterable[Any], desc: str) -> Iterable[Any]:
    return items


# --------------------------------------------------------------------------- measuring T(b, k)
def block_plan(
    models: Sequence[str], batches: Sequence[int], passes: int, seed: int = 0
) -> list[tuple[int, str, int]]:
    """The order of the measurement: (pass, model, b) blocks, each pass in a fresh seeded order.

    The order depends only on the arguments, so a resumed run visits the blocks left in the
    same order as the interrupted one would have.
    """
    blocks = []
    for r in range(passes):
        order = np.random.default_rng([seed, r]).permutation(len(models) * len(batches))
        blocks += [(r, models[i // len(batches)], batches[i % len(batches)]) for i in order]
    return blocks


def measure_surface(
    models: Mapping[str, Any],
    ks: Mapping[str, Sequence[int]],
    batches: Sequence[int],
    *,
    passes: int,
    context: int = 128,
    seed: int = 0,
    done: Sequence[Mapping[str, Any]] = (),
    on_block: Callable[[dict[str, Any]], None] | None = None,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Time T(b, k) for every model in ``models`` (name -> transformers causal LM) at its ``ks``.

    The blocks of :func:`block_plan` that ``done`` (blocks of an earlier, interrupted run) does
    not hold are measured in order. A block (pass r, model, b): the model's prefilled context of
    ``context`` random tokens (one prefill per model, seeded, copied b times: a forward's cost does
    not depend on which tokens it sees), one untimed call at the largest k, then one timed call
    per k in a fresh order; the cache is cropped back to the context after every call and its
    length checked. Each finished block is passed to ``on_block`` (to save it) and returned with
    the others: ``{"pass", "model", "b", "times_s": {k: seconds}, "finished_utc"}``.
    """
    import torch

    batches = check_ints("batches", batches, low=1, distinct=True)
    names = list(models)
    if not names or set(ks) != set(names):
        raise ValueError(f"ks must name the same models as models; got {sorted(ks)} and {names}")
    for name in names:
        if 1 not in check_ints(f"ks[{name!r}]", ks[name], low=1, distinct=True):
            raise ValueError(f"ks[{name!r}] must hold 1 (the step every ratio divides by)")
    check_int("passes", passes, low=1)
    check_int("context", context, low=1)
    progress = progress or _no_progress
    finished = {(int(d["pass"]), str(d["model"]), int(d["b"])) for d in done}
    todo = [blk for blk in block_plan(names, batches, passes, seed) if blk not in finished]
    bases: dict[str, Any] = {}
    out: list[dict[str, Any]] = []
    for r, name, b in progress(todo, "T(b, k) blocks"):
        model = models[name]
        if name not in bases:
            gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
            bases[name] = _prefill(model, context, gen)
        times = _time_block(model, bases[name], b, sorted(int(k) for k in ks[name]), context, [seed, r, b])
        block = {
            "pass": r,
            "model": name,
            "b": b,
            "times_s": {str(k): t for k, t in sorted(times.items())},
            "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        out.append(block)
        if on_block is not None:
            on_block(block)
    return out


def _prefill(model: Any, context: int, gen: Any) -> Any:
    """A KV cache of ``context`` random tokens (one sequence) for ``model``."""
    import torch

    from specdec.engine.lm import TensorSession

    ids = torch.randint(0, int(model.config.vocab_size), (1, context), generator=gen)
    return TensorSession(model, ids).cache


def _time_block(
    model: Any, base: Any, b: int, ks: list[int], context: int, seed: list[int]
) -> dict[int, float]:
    """One block: ``base`` copied to b rows, a warm-up call at the largest k, then one timed call per
    k in a seeded random order (:func:`specdec.measure.core.time_forwards`), the cache cropped back (and
    checked) after every call."""
    import torch

    from specdec.engine.lm import TensorSession

    cache = copy.deepcopy(base)
    cache.batch_repeat_interleave(b)
    session = TensorSession(model, cache=cache, context=context)
    gen = torch.Generator().manual_seed(int(np.random.default_rng(seed).integers(2**31)))
    new = torch.randint(0, int(model.config.vocab_size), (b, max(ks)), generator=gen).to(session.device)
    sync = sync_hook(device=session.device)
    run = {"block": session}, {"block": new}
    time_forwards(*run, [max(ks)], repeats=1, synchronize=sync)  # warm-up: the block's largest shape
    times = time_forwards(*run, ks, repeats=1, rng=np.random.default_rng(seed), synchronize=sync)["block"]
    return {k: t[0] for k, t in times.items()}


def decode_units(
    target: Any,
    configs: Mapping[str, Mapping[str, Any]],
    pool: Sequence[Sequence[int]],
    batches: Sequence[int],
    *,
    units: int,
    new_tokens: int,
    gamma: int,
    seed: int = 0,
    done: Sequence[Mapping[str, Any]] = (),
    on_unit: Callable[[dict[str, Any]], None] | None = None,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Batched plain decoding against batched speculative configurations, per batch size.

    A *unit* is one batch of b prompts drawn from ``pool`` without replacement (seeded by
    (seed, b, unit)); every configuration decodes it in a fresh seeded order: ``"plain"``
    (:func:`specdec.engine.batched.batched_autoregressive`) and each of ``configs`` (name ->
    ``{"drafter": ..., "cut": "ragged" | "common"}``, :func:`specdec.engine.batched.batched_speculative`
    with ``gamma``). Greedy, EOS not stopping (every row gives ``new_tokens`` tokens, so the
    configurations produce the same number of tokens). The runs of a unit are one
    :func:`specdec.measure.pairedrun.paired_block` (plain first or last with probability 1/2, the
    configurations permuted). Units in ``done`` are skipped; each new
    unit goes to ``on_unit``. Per configuration a unit records the decode time (prefill
    excluded), the prefill time, tokens, rounds, the batch's draft / target / verify times,
    per-row accepted and examined drafts, the tokens kept per row and round, and whether each
    row's tokens equal plain decoding's.
    """
    batches = check_ints("batches", batches, low=1, distinct=True)
    if max(batches) > len(pool):
        raise ValueError(f"batches must not exceed the prompt pool ({len(pool)}); got {max(batches)}")
    progress = progress or _no_progress
    finished = {(int(u["b"]), int(u["unit"])) for u in done}
    todo = [(b, u) for b in batches for u in range(units) if (b, u) not in finished]
    block = [
        {"drafter": name, "object": cfg, "gamma": gamma, "lenience": 1.0} for name, cfg in configs.items()
    ]
    out = []
    for b, u in progress(todo, "decoding units"):
        rng = np.random.default_rng([seed, b, u])
        chosen = sorted(int(i) for i in rng.choice(len(pool), size=b, replace=False))
        prompts = [list(pool[i]) for i in chosen]
        # the one paired run: plain and every configuration once, in a fresh seeded order
        rows = paired_block(
            target, block, prompts, temperature=0.0, new_tokens=new_tokens, seed=seed, rep=u, rng=rng,
            plain_at="random", exact_length=False, timer=_batched_generation, row=_batched_row,
        )  # fmt: skip
        unit: dict[str, Any] = {"b": b, "unit": u, "prompts": chosen, "order": [r["drafter"] for r in rows]}
        unit["runs"] = {r["drafter"]: {k: v for k, v in r.items() if k in _BATCH_FIELDS} for r in rows}
        plain = next(r["_tokens"] for r in rows if r["drafter"] == "plain")
        for r in rows:
            if r["drafter"] != "plain":
                same = sum(a == p for a, p in zip(r["_tokens"], plain, strict=True))
                unit["runs"][r["drafter"]]["rows_equal_plain"] = same
        out.append(unit)
        if on_unit is not None:
            on_unit(unit)
    return out


#: What a unit keeps of each batched run (:func:`_batched_row`).
_BATCH_FIELDS = (
    "decode_s", "prefill_s", "draft_s", "target_s", "verify_s", "tokens", "rounds", "accepted", "examined",
    "kept_per_round",
)  # fmt: skip


def _batched_generation(
    target: Any, cfg: Mapping[str, Any] | None, prompts: Sequence[Sequence[int]], *, gamma: int,
    new_tokens: int, **_: Any,
) -> tuple[list[list[int]], Any, float]:  # fmt: skip
    """:func:`specdec.measure.pairedrun.paired_block`'s timer for a batch: plain (``cfg`` None) or
    speculative decoding of every prompt at once, greedy, EOS not stopping (each row gives
    ``new_tokens`` tokens). The generation's own decode clock is its time (prefill apart)."""
    from specdec.engine.batched import batched_autoregressive, batched_speculative

    if cfg is None:
        gen = batched_autoregressive(target, prompts, max_new_tokens=new_tokens)
    else:
        gen = batched_speculative(
            target,
            cfg["drafter"],
            prompts,
            gamma=gamma,
            max_new_tokens=new_tokens,
            cut=cfg.get("cut", "ragged"),
        )
    return gen.tokens, gen, gen.decode_s + gen.prefill_s


def _batched_row(gen: Any, total_s: float) -> dict[str, Any]:
    """A batched run's fields: its times, tokens, rounds and per-row drafts."""
    return {
        "decode_s": gen.decode_s,
        "prefill_s": gen.prefill_s,
        "draft_s": gen.draft_s,
        "target_s": gen.target_s,
        "verify_s": gen.verify_s,
        "tokens": gen.new_tokens,
        "rounds": gen.rounds,
        "accepted": [s.accepted_tokens for s in gen.stats],
        "examined": [s.examined for s in gen.stats],
        "kept_per_round": [float(np.mean(e)) for e in gen.emitted],
    }
