"""Distillation of draft models from the target: the data (``specdec run distill-data``).

Data. The target samples responses to :func:`specdec.train.workloads.training_prompts`
at temperature 1 (no top-k, no top-p: the samples have the target's own law p) in batches,
with a plain batched sampling loop (:func:`_sample_batch`; data making, not the measured
engine). At every response position the target's top-``TOP_K`` log-probabilities are kept as
soft labels (float16), next to the sampled token. Each batch is one shard ``shard-NNNNN.npz``
in the format of :mod:`specdec.train.shards`, its only writer and reader (``load_shards`` is
re-exported here).

Training (``specdec run distill-train``) and the draft models live in :mod:`specdec.train.draftnets`;
the command lines are :mod:`specdec.experiments.training`'s programs. The book's drafts were made with
(each ``specdec/data/drafts/<name>/card.json`` holds the exact command, in the form of its day:
``python -m specdec.train.distill train --name X --data A B C`` is now
``specdec run distill-train --draft-name X --data A,B,C``)::

    # three data folders: the first (float32, unsorted) from an earlier session, then two
    # bfloat16 processes side by side, one thread each
    specdec run distill-data --tokens 800000 --minutes 22 --out data/distill --seed 0 \
        --batch-size 64 --max-new-tokens 192 --threads 1
    specdec run distill-data --tokens 400000 --minutes 36 --out data/distill-s1 --seed 1 \
        --batch-size 64 --max-new-tokens 192 --dtype bfloat16 --threads 1 --sort-window 8
    specdec run distill-data --tokens 400000 --minutes 36 --out data/distill-s2 --seed 2 \
        --batch-size 64 --max-new-tokens 192 --dtype bfloat16 --threads 1 --sort-window 8
    # the three drafts side by side, one thread each, bfloat16 autocast
    specdec run distill-train --data data/distill,data/distill-s1,data/distill-s2 \
        --layers 1 --draft-name distil-l1 --steps 3600 --lr 1e-3 --batch-tokens 1024 --seed 0 \
        --threads 1 --autocast --out-root data/drafts-new    # then copy into specdec/data/drafts
    # ... and --layers 2 --draft-name distil-l2 --steps 2600, --layers 4 --draft-name distil-l4 --steps 2000

Sampling is seeded, but a ``--minutes`` budget makes the amount of data depend on the machine's
speed; ``meta.json`` in each folder records what was made, and ``--tokens <its tokens>``
without ``--minutes`` draws the same batches again (the same samples where the arithmetic
rounds alike: bfloat16 sampling on another CPU may pick other tokens after a near-tie).

Use 1 thread on a machine whose cores are shared: with 2 threads on 2 busy cores each
parallel region waits for a descheduled thread, and the data run went about 10x slower.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specdec.theory.checks import Refused, check_int
from specdec.theory.recordio import write_record
from specdec.train.shards import load_shards, response_tokens, shard_paths, write_shard

__all__ = ["TOP_K", "generate_data", "load_shards"]

#: How many of the target's log-probabilities are kept per response position.
TOP_K = 32


def _sample_batch(
    model: Any,
    prompts: list[list[int]],
    max_new_tokens: int,
    pad_id: int,
    eos_id: int,
    top_k: int,
    generator: torch.Generator,
) -> list[tuple[list[int], list[int], np.ndarray, np.ndarray]]:
    """Sample one response per prompt at temperature 1; returns (prompt, response, top_ids, top_logp).

    A plain batched loop over the model with a KV cache (left padding, an attention mask and
    explicit position ids): the rows of p are log_softmax of the float32 logits, the token is
    drawn from p with ``torch.multinomial`` (no top-k, no top-p), and a row leaves the batch
    (and the cache) once it has emitted EOS or ``max_new_tokens`` tokens, so finished rows cost
    nothing. The response ends at its first EOS (kept).
    """
    from transformers import DynamicCache

    width = max(map(len, prompts))
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for i, p in enumerate(prompts):  # left padding
        input_ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    resp: list[list[int]] = [[] for _ in prompts]
    tops: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in prompts]
    alive = torch.arange(len(prompts))
    with torch.inference_mode():
        out = model(
            input_ids=input_ids, attention_mask=mask, position_ids=positions, cache=cache, logits_to_keep=1
        )
        next_pos = positions[:, -1] + 1
        for step in range(max_new_tokens):
            logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
            top = logp.topk(top_k, dim=-1)
            tok = torch.multinomial(logp.exp(), 1, generator=generator)[:, 0]
            for j, row in enumerate(alive.tolist()):
                resp[row].append(int(tok[j]))
                tops[row].append((top.indices[j], top.values[j]))
            keep = tok != eos_id
            if step + 1 == max_new_tokens or not bool(keep.any()):
                break
            if not bool(keep.all()):
                idx = keep.nonzero()[:, 0]
                cache.batch_select_indices(idx)
                mask, tok, next_pos, alive = mask[idx], tok[idx], next_pos[idx], alive[idx]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = model(
                input_ids=tok[:, None],
                attention_mask=mask,
                position_ids=next_pos[:, None],
                cache=cache,
            )
            next_pos = next_pos + 1
    rows = []
    for p, r, t in zip(prompts, resp, tops, strict=True):
        ids = torch.stack([i for i, _ in t]).to(torch.int32).numpy()
        logp = torch.stack([v for _, v in t]).to(torch.float16).numpy()
        rows.append((p, r, ids, logp))
    return rows


def generate_data(
    model: Any,
    tokenizer: Any,
    out: str | Path,
    *,
    tokens: int,
    seed: int = 0,
    batch_size: int = 64,
    max_new_tokens: int = 256,
    top_k: int = TOP_K,
    minutes: float | None = None,
    prompt_ids: list[list[int]] | None = None,
    sort_window: int = 1,
    progress: bool = True,
) -> dict:
    """Sample target responses until ``tokens`` response tokens are stored under ``out``.

    Prompts are :func:`specdec.train.workloads.training_prompts` (seed ``seed``), in order; one
    ``torch.Generator`` seeded with ``seed`` draws every token. Existing shards in ``out`` are
    kept and counted (a run can be resumed; it reseeds with an offset by the shard index).
    ``prompt_ids`` replaces the templated prompts by token-id prompts, used in turn (tests).
    With ``minutes``, no new batch starts after that much wall time (fewer tokens may result).
    With ``sort_window`` w > 1, each run of w consecutive batches draws the same w x batch_size
    prompts, sorted by token length (stable), so a batch pads its prompts to similar lengths.
    A run that stops inside a window has drawn that window's shorter prompts only, which skews
    the mix of prompt kinds a little (passage tasks are the longest prompts); the skew is at
    most one window, w x batch_size prompts. Resuming needs the same seed, batch size and window.
    Writes ``meta.json`` (settings, tokens, throughput) and returns it.
    """
    from specdec.train.workloads import chat_prompt_ids, training_prompts

    checks = {"tokens": tokens, "batch_size": batch_size, "top_k": top_k, "sort_window": sort_window}
    for name, value in checks.items():
        check_int(name, value, low=1)
    check_int("max_new_tokens", max_new_tokens, low=1)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shards = shard_paths(out)
    meta_path = out / "meta.json"
    if shards and meta_path.exists():  # a resumed run must draw prompts the way the first one did
        old = json.loads(meta_path.read_text())
        for key, value in (("seed", seed), ("batch_size", batch_size), ("sort_window", sort_window)):
            if old.get(key, 1 if key == "sort_window" else None) != value:
                raise Refused(f"{out} was made with {key}={old.get(key)!r}; resume it with the same value")
    done = response_tokens(out)
    # enough prompts if responses average 4 tokens or more (they average well over 100)
    n_batches = len(shards) + math.ceil(max(tokens - done, 0) / (4 * batch_size)) + 1
    if prompt_ids is None:
        texts = [p.prompt for p in training_prompts(n_batches * batch_size, seed)]
        n_prompts: int | None = len(texts)

        def base(i: int) -> list[int]:
            return chat_prompt_ids(tokenizer, texts[i])

    else:
        if not prompt_ids or not all(len(p) for p in prompt_ids):
            raise ValueError("prompt_ids must be a non-empty list of non-empty token-id lists")
        n_prompts = None

        def base(i: int) -> list[int]:
            return list(prompt_ids[i % len(prompt_ids)])

    prompt = base if sort_window == 1 else _sorted_windows(base, sort_window * batch_size, n_prompts)
    eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else model.config.eos_token_id
    pad = getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else model.config.pad_token_id
    pad = 0 if pad is None else pad
    generator = torch.Generator().manual_seed(seed)
    bar = _bar(tokens, done, progress)
    start, made, b = time.perf_counter(), 0, len(shards)
    while done < tokens and (minutes is None or time.perf_counter() - start < 60 * minutes):
        if b == len(shards) and b > 0:  # a resumed run: a fresh stream, distinct from the first
            generator.manual_seed(seed * 1_000_003 + b)
        if prompt_ids is None and b >= n_batches:
            raise RuntimeError(f"ran out of prompts after {b} batches: responses average under 4 tokens")
        batch = [prompt(i) for i in range(b * batch_size, (b + 1) * batch_size)]
        rows = _sample_batch(model, batch, max_new_tokens, pad, eos, top_k, generator)
        n = write_shard(out / f"shard-{b:05d}.npz", rows)
        done, made, b = done + n, made + n, b + 1
        bar.update(n)
    bar.close()
    seconds = time.perf_counter() - start
    meta = {
        "tokens": done,
        "shards": b,
        "seed": seed,
        "batch_size": batch_size,
        "max_new_tokens": max_new_tokens,
        "minutes": minutes,
        "top_k": top_k,
        "sort_window": sort_window,
        "temperature": 1.0,
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        "this_run_tokens": made,
        "this_run_seconds": round(seconds, 1),
        "tokens_per_s": round(made / seconds, 1) if seconds > 0 else None,
    }
    write_record(out / "meta.json", meta, indent=2, sort_keys=False)  # atomic; NaN -> null
    return meta


def _sorted_windows(base: Any, span: int, n: int | None) -> Any:
    """Prompt i of ``base`` re-ordered: each window of ``span`` prompts sorted by token length (stable)."""
    window: dict[int, list[list[int]]] = {}

    def prompt(i: int) -> list[int]:
        lo = (i // span) * span
        if lo not in window:  # one window at a time: batches are taken in order
            window.clear()
            hi = lo + span if n is None else min(lo + span, n)
            window[lo] = sorted((base(j) for j in range(lo, hi)), key=len)
        return window[lo][i - lo]

    return prompt


def _bar(total: int, initial: int, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="tok", disable=not enabled, mininterval=5, file=sys.stderr)
