"""Batched decoding: b prompts at once, plain or speculative, each row accepted by Algorithm 1.

:func:`batched_speculative` runs :func:`specdec.engine.decoding.speculative` for b prompts with one
target forward call per round for the whole batch; :func:`batched_autoregressive` is the
baseline, one call per token for the whole batch. Both take Hugging Face causal LMs (e.g.
``LlamaForCausalLM``); the drafter is a Hugging Face causal LM with the target's vocabulary
(drafting with its own batched cache), or a stateless table drafter of :mod:`specdec.engine.drafters`
(prompt lookup, unigram, bigram), asked row by row.

Design: ragged acceptance over one masked cache
-----------------------------------------------
Every row keeps its own accepted count. The target's (and the draft model's) KV cache is one
rectangular ``DynamicCache`` of shape (b, heads, L, d) plus a boolean *slot mask* (b, L): slot
j of row i holds a token of row i when ``mask[i, j]``. Position ids are *logical*: a token's
position is the number of valid slots before it in its row, so rotary embeddings see each
row's own sequence and the masked slots ("holes") are invisible to attention (the mask goes to
the model as ``attention_mask``; transformers' Llama builds its causal mask from it, holes and
all). :class:`BatchedLM` keeps the mask, the token ids of each row and the physical slots they
occupy:

* prompts of different lengths are *left-padded*: the pad slots are simply masked;
* a feed appends one block of columns for all rows; a row that feeds fewer tokens (a shorter
  draft, or none) is left-padded inside the block;
* rolling back a rejection masks the rejected slots of that row (other rows are untouched), and
  the trailing columns that are masked in every row are cropped from the cache, as in the
  single-sequence engine. With b = 1 nothing but trailing columns is ever masked, so the cache
  is the single-sequence engine's exactly;
* finished rows (budget or EOS) leave the batch (``DynamicCache.batch_select_indices``).

Why ragged rather than a common truncation point: with one cut per round, every row keeps
``m = min_i n_i`` drafts plus its own token, so under the i.i.d. model the tokens per round are
Eq. (1) with alpha^b in place of alpha, E[T] = (1 - alpha^(b (gamma+1))) / (1 - alpha^b): at
alpha = 0.7 and b = 8 that is 1.06 tokens per round, and the batch would lose the gain by
construction, whatever the hardware. The ragged design loses nothing per row; its price is
the holes, which the attention reads (a few columns per round; the linear layers, which
dominate a step at these context lengths, never see them). The common cut is kept as
``cut="common"`` to measure that effect, not as the default.

Losslessness
------------
``cut="ragged"``: each row runs Algorithm 1 exactly as :func:`specdec.engine.decoding.speculative`
does (drafts sampled from q, each row's chain verified by :func:`specdec.theory.treeverify.verify_tree`,
the one loop's verifier, which on a chain is Algorithm 1 uniform for uniform, with its own uniforms, the
residual norm(max(0, p - q)) after a rejection, the bonus token after a full accept). The rows
share forward calls, and a masked slot contributes exp(-inf) = 0 to attention, so a row's p and
q rows are those of its own sequence (up to floating-point rounding of differently shaped
kernels, as left padding in any batched engine); Appendix A.1 then applies row by row.

``cut="common"``: verify gives each row its own n_i; every row emits its drafts x_1..x_m,
m = min_i n_i, and then its own token at position m + 1: the draft x_(m+1) if that row accepted
it (n_i > m), else the token verify drew there (residual, or bonus when m = gamma). Fix row i
and condition on the batch's history before the round. The other rows' outcomes, hence
m' = min over j != i of n_j, use other draft samples and other uniforms, so they are independent
of row i's draws, and row i emits its first min(n_i, m') + 1 tokens. Given m', that is Algorithm 1
with m' drafts: positions 1..m' as usual, and at position m' + 1 the accepted draft or else
the residual, which together are a draw from p_(m'+1) (the one-position lemma of A.1) -- the
bonus token of an m'-draft round. So each row's tokens have the target's law, round by round.

Conventions, as in :mod:`specdec.engine.decoding`: one numpy generator per call,
``np.random.default_rng(seed)``, never reseeded (rows draw from it in order: draft samples per
draft step, row by row; then each row's verify); a target cache holds each row's committed
tokens except the last; drafts are cut after an EOS and a row's output stops at its first EOS;
``max_new_tokens`` is never exceeded (a row's draft length is cut to its budget minus one);
prefill (prompt minus its last token) is timed apart. With b = 1 both loops draw the same
numbers as the single-sequence loops and return the same tokens.

Statistics: :class:`BatchGeneration` holds one :class:`~specdec.engine.stats.Stats` per row (rounds
it took part in, drafted and accepted counts with verify's own n, alpha, calls; its times stay
0) and the batch's times. With ``cut="common"`` a row may emit fewer tokens than verify
accepted: ``emitted`` lists the tokens each row kept per round.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from specdec.engine.cores import engine_owns_cores
from specdec.engine.decoding import check_draft_context, cut_at_eos, finish_generation, start_generation
from specdec.engine.drafters import BigramDrafter, PromptLookupDrafter, Proposal, UnigramDrafter, WarpFn
from specdec.engine.lm import cache_argument, common_prefix_len, vocab_size
from specdec.engine.stats import Stats, add_elapsed
from specdec.theory.checks import check_int, check_optional_int, is_int
from specdec.theory.sampling import sample, warp
from specdec.theory.trees import chain_tree
from specdec.theory.treeverify import verify_tree

__all__ = ["CUTS", "BatchGeneration", "BatchedLM", "batched_autoregressive", "batched_speculative"]

#: How a round's accepted counts are applied: each row its own, or all rows the minimum.
CUTS = ("ragged", "common")

#: Drafters without state between calls: asked row by row.
_TABLE_DRAFTERS = (PromptLookupDrafter, UnigramDrafter, BigramDrafter)


@dataclass
class BatchGeneration:
    """The new tokens of each row (prompts excluded) and what the batched call counted.

    ``stats[i]`` counts row i's rounds as :class:`~specdec.engine.stats.Stats` does for one sequence
    (``accepted`` is verify's own count, also with ``cut="common"``); ``emitted[i]`` the tokens
    row i kept in each of its rounds; ``batch_sizes`` the rows in each round. Times are the
    batch's, in seconds: ``decode_s`` is the whole loop of rounds (bookkeeping included), split
    into ``draft_s``, ``target_s`` (the rounds' target calls) and ``verify_s``.
    """

    tokens: list[list[int]]
    stats: list[Stats]
    emitted: list[list[int]] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    prefill_s: float = 0.0
    decode_s: float = 0.0
    draft_s: float = 0.0
    target_s: float = 0.0
    verify_s: float = 0.0

    @property
    def rounds(self) -> int:
        """Rounds of the batch: target calls after the prefill."""
        return len(self.batch_sizes)

    @property
    def new_tokens(self) -> int:
        """Tokens returned, all rows together."""
        return sum(len(t) for t in self.tokens)


# -- the batched cache ---------------------------------------------------------------------------


class BatchedLM:
    """A Hugging Face causal LM over b rows: one KV cache, a slot mask, logical positions.

    ``ids[i]`` lists row i's cached tokens and ``slots[i]`` the physical columns that hold them
    (increasing). :meth:`feed` appends one block of columns (each row's tokens right-aligned in
    it, masked slots before them); :meth:`truncate` keeps a prefix of each row (masking the rest,
    then cropping the columns masked in every row at the end); :meth:`sync` makes each row hold a
    given prefix and returns the logits after it; :meth:`select` keeps some rows. ``calls`` counts
    forward calls. The module docstring explains the design.
    """

    def __init__(self, model: torch.nn.Module, batch: int) -> None:
        _check_hf_model(model, "model")
        check_int("batch", batch, low=1)
        self.model = model.eval() if model.training else model
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.vocab_size = vocab_size(model)
        self._cache_arg = cache_argument(model)
        self.calls = 0
        self.cache = DynamicCache(config=model.config)
        self.mask = np.zeros((int(batch), 0), dtype=bool)  # numpy: edited in place, outside inference mode
        self.ids: list[list[int]] = [[] for _ in range(int(batch))]
        self.slots: list[list[int]] = [[] for _ in range(int(batch))]

    @property
    def batch(self) -> int:
        return len(self.ids)

    @property
    def width(self) -> int:
        """Physical columns of the cache, holes included."""
        return int(self.mask.shape[1])

    @torch.inference_mode()
    def feed(self, blocks: Sequence[Sequence[int]], keep: int | None = None) -> torch.Tensor:
        """Append one block per row in one forward call; return logits (b, w, V), float32.

        ``w`` is the longest block (``keep``: only the last ``keep`` columns, transformers'
        ``logits_to_keep``). Row i's block sits at the right end of the w columns, so its logits
        are the last ``len(blocks[i])`` columns of its row; an empty block feeds nothing for
        that row (its columns are masked, their logits meaningless).
        """
        if len(blocks) != self.batch:
            raise ValueError(f"blocks must hold one block per row ({self.batch}); got {len(blocks)}")
        w = max(len(block) for block in blocks)
        if w == 0:
            raise ValueError("blocks must hold at least one token id")
        check_optional_int("keep", keep, low=1, high=w, note="or None; the longest block")
        ids = np.zeros((self.batch, w), dtype=np.int64)
        valid = np.zeros((self.batch, w), dtype=bool)
        for i, block in enumerate(blocks):
            if block:
                ids[i, w - len(block) :] = [int(t) for t in block]
                valid[i, w - len(block) :] = True
        lengths = np.array([len(row) for row in self.ids], dtype=np.int64)
        positions = lengths[:, None] + np.maximum(valid.cumsum(1) - 1, 0)
        mask = np.concatenate([self.mask, valid], axis=1)
        # The last ``keep`` columns as an index tensor, not an int: transformers then gathers a
        # contiguous copy of those hidden states, where an int slices a strided view, on which a
        # bfloat16 LM head of shape (b > 1, 1, hidden) ran 100 times slower (torch 2.13, CPU).
        to_keep = 0 if keep is None else torch.arange(w - keep, w, device=self.device)
        out = self.model(
            input_ids=torch.from_numpy(ids).to(self.device),
            attention_mask=torch.from_numpy(mask.astype(np.int64)).to(self.device),
            position_ids=torch.from_numpy(positions).to(self.device),
            use_cache=True,
            logits_to_keep=to_keep,
            **{self._cache_arg: self.cache},
        )
        self.calls += 1
        start = self.width
        self.mask = mask
        for i, block in enumerate(blocks):
            self.ids[i].extend(int(t) for t in block)
            self.slots[i].extend(range(start + w - len(block), start + w))
        return out.logits.float()

    def truncate(self, lengths: Sequence[int]) -> None:
        """Keep the first ``lengths[i]`` cached tokens of each row i; mask the rest, crop the tail."""
        if len(lengths) != self.batch:
            raise ValueError(f"lengths must hold one length per row ({self.batch}); got {len(lengths)}")
        for i, n in enumerate(lengths):
            check_int(f"lengths[{i}]", n, low=0, high=len(self.ids[i]), note=f"row {i}'s cached length")
            if n < len(self.ids[i]):
                self.mask[i, self.slots[i][n:]] = False
                del self.ids[i][n:], self.slots[i][n:]
        self._crop_tail()

    def _crop_tail(self) -> None:
        used = max((row[-1] + 1 for row in self.slots if row), default=0)
        drop = self.width - used
        if drop <= 0:
            return
        if used == 0:
            self.cache = DynamicCache(config=self.model.config)
        else:  # a negative argument removes that many columns (transformers 4.x and 5.x)
            self.cache.crop(-drop)
        self.mask = self.mask[:, :used]

    def select(self, rows: Sequence[int]) -> None:
        """Keep only the given rows (indices into the current rows, increasing), in that order."""
        rows = [int(r) for r in rows]
        if not rows or sorted(set(rows)) != rows or rows[-1] >= self.batch:
            raise ValueError(f"rows must be increasing indices in [0, {self.batch}); got {rows!r}")
        if rows == list(range(self.batch)):
            return
        if self.width:
            self.cache.batch_select_indices(torch.tensor(rows, device=self.device))
        self.mask = self.mask[rows]
        self.ids = [self.ids[r] for r in rows]
        self.slots = [self.slots[r] for r in rows]
        self._crop_tail()

    def sync(self, prefixes: Sequence[Sequence[int]]) -> torch.Tensor:
        """Make row i hold ``prefixes[i]``; return the logits after each prefix's last token, (b, V).

        As :meth:`specdec.engine.lm.Session.sync`, per row: the longest common prefix stays (at most
        all but the last token), the rest is masked, and the missing tokens are fed, all rows in
        one call.
        """
        if len(prefixes) != self.batch or any(len(p) == 0 for p in prefixes):
            raise ValueError(f"prefixes must hold one non-empty prefix per row ({self.batch})")
        keep = [min(common_prefix_len(row, p), len(p) - 1) for row, p in zip(self.ids, prefixes, strict=True)]
        self.truncate(keep)
        return self.feed([p[k:] for p, k in zip(prefixes, keep, strict=True)], keep=1)[:, -1]


# -- drafters over a batch -------------------------------------------------------------------------


class _ModelBatchDrafter:
    """A draft model over the batch: its own :class:`BatchedLM`, synced with each row's prefix."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.vocab_size = vocab_size(model)
        self.lm: BatchedLM | None = None
        self.rows: list[int] = []

    def start(self, prompts: Sequence[Sequence[int]]) -> None:
        self.lm = BatchedLM(self.model, len(prompts))
        self.rows = list(range(len(prompts)))
        if any(len(p) > 1 for p in prompts):
            self.lm.feed([p[:-1] for p in prompts], keep=1)

    def propose(
        self,
        rows: Sequence[int],
        prefixes: Sequence[Sequence[int]],
        limits: Sequence[int],
        warp_fn: WarpFn,
        rng: np.random.Generator,
    ) -> list[Proposal]:
        if list(rows) != self.rows:
            self.lm.select([self.rows.index(r) for r in rows])
            self.rows = list(rows)
        top = max(limits)
        if top == 0:
            return [Proposal([]) for _ in rows]
        calls = self.lm.calls
        logits = self.lm.sync(prefixes)  # (a, V): the rows of each row's first draft
        tokens: list[list[int]] = [[] for _ in rows]
        q_rows: list[list[torch.Tensor]] = [[] for _ in rows]
        for step in range(top):
            q = warp_fn(logits)
            for j, limit in enumerate(limits):
                if step < limit:
                    tokens[j].append(sample(q[j], rng))
                    q_rows[j].append(q[j])
            if step + 1 < top:
                more = [step + 1 < limit for limit in limits]  # rows still drafting feed their last draft
                blocks = [[t[-1]] if go else [] for t, go in zip(tokens, more, strict=True)]
                logits = self.lm.feed(blocks, keep=1)[:, -1]
        calls = self.lm.calls - calls
        return [
            Proposal(t, torch.stack(q) if q else None, calls) if t else Proposal([])
            for t, q in zip(tokens, q_rows, strict=True)
        ]


class _TableBatchDrafter:
    """A stateless drafter (prompt lookup, n-gram tables) asked row by row."""

    def __init__(self, drafter: Any) -> None:
        self.drafter = drafter
        self.vocab_size = getattr(drafter, "vocab_size", None)

    def start(self, prompts: Sequence[Sequence[int]]) -> None:
        for p in prompts:
            self.drafter.start(p)

    def propose(
        self,
        rows: Sequence[int],
        prefixes: Sequence[Sequence[int]],
        limits: Sequence[int],
        warp_fn: WarpFn,
        rng: np.random.Generator,
    ) -> list[Proposal]:
        return [
            self.drafter.propose(p, limit, warp_fn, rng) if limit > 0 else Proposal([])
            for p, limit in zip(prefixes, limits, strict=True)
        ]


# -- the loops -----------------------------------------------------------------------------------


@engine_owns_cores
def batched_speculative(
    target: torch.nn.Module,
    drafter: torch.nn.Module | PromptLookupDrafter | UnigramDrafter | BigramDrafter,
    prompts: Sequence[Sequence[int]],
    *,
    gamma: int,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_token_id: int | None = None,
    cut: str = "ragged",
) -> BatchGeneration:
    """Speculative decoding of b prompts at once; each loop is one round for every unfinished row.

    A round: the drafter guesses up to ``gamma`` tokens per row (the draft model in one batched
    call per draft step); one target call scores every row's [last committed token, drafts];
    :func:`specdec.theory.sampling.verify` accepts a prefix of each row's drafts and draws the row's own
    token (residual or bonus); each row keeps them (``cut="ragged"``) or every row keeps the
    round's smallest accepted count plus its own token at the next position (``cut="common"``;
    see the module docstring for why both are lossless); the rejected slots are masked.

    ``target`` is a Hugging Face causal LM; ``drafter`` a Hugging Face causal LM with the same
    vocabulary, or a :class:`~specdec.engine.drafters.PromptLookupDrafter`,
    :class:`~specdec.engine.drafters.UnigramDrafter` or :class:`~specdec.engine.drafters.BigramDrafter`.
    ``prompts`` is a non-empty list of non-empty lists of token ids, of any lengths.
    ``gamma`` is an integer >= 1; temperature / top_k / top_p as in
    :func:`specdec.engine.decoding.speculative` (lenience is not offered: l = 1, lossless).
    Returns every row's new tokens and a :class:`BatchGeneration`.
    """
    if cut not in CUTS:
        raise ValueError(f"cut must be one of {CUTS}; got {cut!r}")
    rows_prompts = _start_batch(target, prompts, max_new_tokens, temperature, top_k, top_p, eos_token_id)
    check_int("gamma", gamma, low=1)
    if isinstance(drafter, torch.nn.Module):  # a draft model: its context must hold the longest row
        context = getattr(getattr(drafter, "config", None), "max_position_embeddings", None)
        check_draft_context(SimpleNamespace(context=context), max(map(len, rows_prompts)), max_new_tokens)
    batch_drafter = _batch_drafter(drafter, target)
    b = len(rows_prompts)
    lm = BatchedLM(target, b)
    rng = np.random.default_rng(seed)  # the call's only source of randomness; never reseeded
    warp_fn = partial(warp, temperature=temperature, top_k=top_k, top_p=top_p)
    tokens = [list(p) for p in rows_prompts]
    cap = min(int(gamma), max(max_new_tokens - 1, 1))  # a round drafts budget - 1 tokens at most
    stats = [Stats(gamma=int(gamma), max_drafts=cap) for _ in range(b)]
    out = BatchGeneration(tokens=[], stats=stats, emitted=[[] for _ in range(b)])
    with _timer(out, "prefill_s", lm.device):
        if any(len(p) > 1 for p in rows_prompts):
            lm.feed([p[:-1] for p in rows_prompts], keep=1)
        batch_drafter.start(rows_prompts)
    active = list(range(b))
    start = time.perf_counter()
    while active:
        budgets = [max_new_tokens - (len(tokens[i]) - len(rows_prompts[i])) for i in active]
        limits = [min(int(gamma), budget - 1) for budget in budgets]
        with _timer(out, "draft_s", lm.device):
            proposals = batch_drafter.propose(active, [tokens[i] for i in active], limits, warp_fn, rng)
            proposals = [cut_at_eos(p, lim, eos_token_id) for p, lim in zip(proposals, limits, strict=True)]
        with _timer(out, "target_s", lm.device):  # one call scores every row's k + 1 positions
            logits = lm.feed([[tokens[i][-1], *p.tokens] for i, p in zip(active, proposals, strict=True)])
        with _timer(out, "verify_s", lm.device):
            p_all, w = warp_fn(logits), logits.shape[1]
            outcomes = []
            for j, prop in enumerate(proposals):
                p = p_all[j, w - len(prop.tokens) - 1 :]
                q = None if prop.q is None else prop.q.to(p.device)
                path, own = verify_tree(p, q, chain_tree(prop.tokens), rng)  # the one loop's verifier
                outcomes.append((p, q, len(path), own))
            m = min(n for _, _, n, _ in outcomes)
        kept = []
        for j, (i, prop, (p, q, n, own)) in enumerate(zip(active, proposals, outcomes, strict=True)):
            new = _kept_tokens(prop.tokens, n, own, m if cut == "common" else n)
            stats[i].record_round(p, q, len(prop.tokens), n, prop.calls)
            out.emitted[i].append(len(new))
            tokens[i] += new
            if eos_token_id not in new and budgets[j] > len(new):
                kept.append(j)
        out.batch_sizes.append(len(active))
        # the target's cache holds each row's committed tokens except the last
        lm.truncate([len(tokens[i]) - 1 for i in active])
        if len(kept) < len(active):
            active = [active[j] for j in kept]
            if active:
                lm.select(kept)
    out.decode_s = time.perf_counter() - start
    for i in range(b):
        out.tokens.append(finish_generation(tokens[i][len(rows_prompts[i]) :], stats[i], eos_token_id).tokens)
    return out


@engine_owns_cores
def batched_autoregressive(
    target: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_token_id: int | None = None,
) -> BatchGeneration:
    """Plain decoding of b prompts at once: one target call per token for every unfinished row.

    The baseline of the batched speedups. Row by row it draws one uniform per token from the
    call's generator, so with b = 1 it returns :func:`specdec.engine.decoding.autoregressive`'s tokens.
    A row leaves the batch after ``max_new_tokens`` tokens or its first EOS.
    """
    rows_prompts = _start_batch(target, prompts, max_new_tokens, temperature, top_k, top_p, eos_token_id)
    b = len(rows_prompts)
    lm = BatchedLM(target, b)
    rng = np.random.default_rng(seed)
    warp_fn = partial(warp, temperature=temperature, top_k=top_k, top_p=top_p)
    tokens = [list(p) for p in rows_prompts]
    stats = [Stats(gamma=0) for _ in range(b)]
    out = BatchGeneration(tokens=[], stats=stats, emitted=[[] for _ in range(b)])
    with _timer(out, "prefill_s", lm.device):
        if any(len(p) > 1 for p in rows_prompts):
            lm.feed([p[:-1] for p in rows_prompts], keep=1)
    active = list(range(b))
    start = time.perf_counter()
    while active:
        with _timer(out, "target_s", lm.device):
            logits = lm.feed([[tokens[i][-1]] for i in active])[:, -1]
        kept = []
        with _timer(out, "verify_s", lm.device):
            p_all = warp_fn(logits)
            for j, i in enumerate(active):
                tokens[i].append(sample(p_all[j], rng))
                stats[i].record_round(p_all[j : j + 1], None, 0, 0, 0)
                out.emitted[i].append(1)
                if tokens[i][-1] != eos_token_id and len(tokens[i]) - len(rows_prompts[i]) < max_new_tokens:
                    kept.append(j)
        out.batch_sizes.append(len(active))
        if len(kept) < len(active):
            active = [active[j] for j in kept]
            if active:
                lm.select(kept)
    out.decode_s = time.perf_counter() - start
    for i in range(b):
        out.tokens.append(finish_generation(tokens[i][len(rows_prompts[i]) :], stats[i], eos_token_id).tokens)
    return out


# -- helpers -------------------------------------------------------------------------------------


def _kept_tokens(draft: list[int], n: int, own: int, cut_at: int) -> list[int]:
    """What a row keeps of a round: its drafts up to ``cut_at`` (<= n, the drafts verify accepted)
    and then its token at position cut_at + 1: its own token ``own`` (residual or bonus, drawn by
    verify at position n + 1) when cut_at = n, else the accepted draft x_(cut_at + 1)."""
    if cut_at == n:
        return [*draft[:n], own]
    return draft[: cut_at + 1]


def _timer(out: BatchGeneration, name: str, device: torch.device) -> AbstractContextManager[None]:
    """Add the wall time of the block to ``out.<name>`` (CUDA synchronised around it)."""
    return add_elapsed(out, name, device)


def _check_hf_model(model: object, name: str) -> None:
    if not isinstance(model, torch.nn.Module) or not callable(getattr(model, "get_output_embeddings", None)):
        raise ValueError(
            f"{name} must be a Hugging Face causal LM (batched decoding feeds an attention mask to "
            f"transformers' forward); got {type(model).__name__}"
        )


def _start_batch(
    target: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    eos_token_id: int | None,
) -> list[list[int]]:
    """Check the arguments both loops share (each prompt as :func:`specdec.engine.decoding.speculative`
    checks its one prompt); return the prompts as lists of ints. Raises ValueError early."""
    _check_hf_model(target, "target")
    if isinstance(prompts, torch.Tensor | np.ndarray):
        if prompts.ndim != 2:
            raise ValueError(f"prompts as an array must be 2-D (b, length); got shape {tuple(prompts.shape)}")
        prompts = prompts.tolist()
    if isinstance(prompts, str | bytes) or not isinstance(prompts, Sequence):
        kind = type(prompts).__name__
        raise ValueError(f"prompts must be a list of prompts (lists of token ids); got {kind}")
    if len(prompts) == 0:
        raise ValueError("prompts must hold at least one prompt; got an empty batch")
    if any(is_int(p) for p in prompts):
        raise ValueError("prompts must be a list of prompts (lists of token ids); got a flat list of ints")
    out = []
    for i, prompt in enumerate(prompts):
        try:
            _, ids = start_generation(target, prompt, max_new_tokens, temperature, top_k, top_p, eos_token_id)
        except ValueError as exc:
            raise ValueError(f"prompts[{i}]: {exc}") from exc
        out.append(ids)
    return out


def _batch_drafter(drafter: object, target: torch.nn.Module) -> _ModelBatchDrafter | _TableBatchDrafter:
    """The batched form of ``drafter``, checked against the target's vocabulary."""
    if isinstance(drafter, _TABLE_DRAFTERS):
        wrapped: _ModelBatchDrafter | _TableBatchDrafter = _TableBatchDrafter(drafter)
    elif isinstance(drafter, torch.nn.Module):
        _check_hf_model(drafter, "drafter")
        wrapped = _ModelBatchDrafter(drafter)
    else:
        raise ValueError(
            "drafter must be a Hugging Face causal LM (the draft model itself, not a ModelDrafter) or a "
            f"PromptLookupDrafter, UnigramDrafter or BigramDrafter; got {type(drafter).__name__}"
        )
    v_draft, v_target = wrapped.vocab_size, vocab_size(target)
    if v_draft is not None and v_draft != v_target:
        raise ValueError(f"the drafter's vocabulary size ({v_draft}) differs from the target's ({v_target})")
    return wrapped
