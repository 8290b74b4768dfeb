"""Drafters: where the gamma guessed tokens of a round come from (M_q of the paper).

A drafter answers one question, cf. transformers' candidate generators::

    propose(prefix_ids, gamma, warp_fn, rng) -> Proposal(tokens, q, calls)

``tokens`` are k <= gamma drafted ids (k may be 0: the round is then a plain target step).
``q`` is the (k, V) tensor of the distributions the tokens were *sampled from*, after the
same ``warp_fn`` (temperature, top-k, top-p) that the loop applies to the target's logits
-- the losslessness proof of Appendix A.1 needs q to be exactly the law of the draft -- or ``None`` for a
deterministic drafter, whose drafts verify treats as point masses. Drafts are drawn with
:func:`specdec.theory.sampling.sample` from the decoding call's single generator ``rng``; at
temperature 0 the rows are one-hot, so drafting is greedy. ``calls`` counts draft steps
(see :class:`specdec.engine.stats.Stats`).

For measuring alpha on given text (teacher forcing, :mod:`specdec.measure.acceptance`) a drafter also
answers ``q_rows(ids, keep, warp_fn)``: the rows q it would draft the next token from after
each of the last ``keep`` tokens of ``ids``, or ``None`` for a deterministic drafter.

Drafters here:

* :class:`ModelDrafter` -- any causal LM with the target's vocabulary, with its own KV cache.
* :class:`EarlyExitDrafter` -- the target's first n decoder layers + final norm + LM head.
* :class:`PromptLookupDrafter` -- copy the continuation of an earlier n-gram (q = None),
  as transformers' ``prompt_lookup_num_tokens``.
* :class:`UnigramDrafter`, :class:`BigramDrafter` -- count tables with add-k smoothing,
  the paper's Table 3 baselines.

**The one protocol the loop speaks is the tree's** (issue 41, item 3: a chain is a tree of one
branch). A tree drafter answers::

    propose_tree(prefix_ids, budget, warp_fn, rng) -> TreeProposal(tree, q, calls)

``tree`` is a :class:`~specdec.theory.trees.DraftTree` of at most ``budget`` nodes hanging below
the last token of ``prefix_ids`` (budget 0: the empty tree, the round is a plain target step).
Siblings are ordered by index and the verifier tries them in that order, so a drafter puts the
most likely child first. ``q`` holds one row per node, the (N, V) law node ``i`` was drawn from
given its parent and its earlier siblings (what SpecInfer's multi-candidate rule needs), or is
``None`` for a deterministic drafter, whose nodes verify treats as point masses. ``calls``
counts draft steps. :meth:`TreeDrafter.start` is called once per generation before the first
round (with the prompt), :meth:`TreeDrafter.finish` once after it ends (with the generated
tokens), e.g. for a drafter that remembers earlier generations. A chain drafter (``propose``)
reaches the loop through :class:`ChainTree`, the one adapter: its proposal is the tree whose
nodes each have one child, and its budget is its draft length.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from specdec.engine.lm import CachedLM, open_lm, vocab_size
from specdec.theory.checks import check_float, check_int, check_optional_float, is_int
from specdec.theory.sampling import sample
from specdec.theory.trees import DraftTree, chain_tree

__all__ = [
    "BigramDrafter",
    "ChainTree",
    "Drafter",
    "EarlyExitDrafter",
    "ModelDrafter",
    "PromptLookupDrafter",
    "Proposal",
    "TreeDrafter",
    "TreeProposal",
    "UnigramDrafter",
    "WarpFn",
    "check_budget",
    "check_same_tokenizer",
    "check_same_vocab",
    "check_token_ids",
    "early_exit_model",
]

#: logits (..., V) -> the probabilities actually sampled from; a configured ``sampling.warp``.
WarpFn = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Proposal:
    """Drafted token ids, the (k, V) rows q they were sampled from (or None), and draft steps."""

    tokens: list[int]
    q: torch.Tensor | None = None
    calls: int = 0

    def __post_init__(self) -> None:
        if self.q is not None and (self.q.ndim != 2 or self.q.shape[0] != len(self.tokens)):
            k, shape = len(self.tokens), tuple(self.q.shape)
            raise ValueError(f"q must have shape (k, V) with k = {k}; got {shape}")


class Drafter:
    """Base class of drafters. ``vocab_size`` is V for drafters that produce q rows, else None."""

    vocab_size: int | None = None
    #: The positions the drafter's model can attend to (its max_position_embeddings); None: no limit.
    context: int | None = None

    def start(self, prompt_ids: Sequence[int]) -> None:  # noqa: B027 (optional hook)
        """Called once per decoding call before the first round (timed as prefill)."""

    def propose(
        self, prefix_ids: Sequence[int], gamma: int, warp_fn: WarpFn, rng: np.random.Generator
    ) -> Proposal:
        """Draft up to ``gamma`` tokens to follow ``prefix_ids`` (prompt + tokens so far)."""
        raise NotImplementedError

    def q_rows(self, ids: Sequence[int], keep: int, warp_fn: WarpFn) -> torch.Tensor | None:
        """Teacher forcing: the (keep, V) rows of q after each of the last ``keep`` tokens of ``ids``.

        Row j is the distribution the drafter would sample its *first* draft from after the
        prefix ``ids[: len(ids) - keep + j + 1]``, warped by ``warp_fn`` as in :meth:`propose`.
        ``None`` means the drafter is deterministic (no q; verify treats drafts as point masses).
        """
        raise NotImplementedError(f"{type(self).__name__} does not give q rows")


# -- the tree protocol (the loop's) and the chain adapter ----------------------------------------


@dataclass
class TreeProposal:
    """A drafted tree, the (N, V) rows q its nodes were drawn from (or None), and draft steps."""

    tree: DraftTree
    q: torch.Tensor | None = None
    calls: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.tree, DraftTree):
            raise ValueError(f"tree must be a DraftTree; got {type(self.tree).__name__}")
        if self.q is not None and (self.q.ndim != 2 or self.q.shape[0] != len(self.tree)):
            n, shape = len(self.tree), tuple(self.q.shape)
            raise ValueError(f"q must have shape (N, V) with N = {n} (one row per node); got {shape}")
        check_int("calls", self.calls, low=0)


def check_budget(budget: object) -> int:
    """``budget`` (the most nodes a tree may have) as an int >= 0, else ValueError naming it."""
    return check_int("budget", budget, low=0)


def check_token_ids(name: str, ids: Sequence[object]) -> list[int]:
    """``ids`` as a list of token ids (integers >= 0), else ValueError naming ``name`` and the entry."""
    if isinstance(ids, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of token ids (integers >= 0); got a string")
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"{name} must be a 1-D array of integer token ids; got {ids.dtype} {ids.shape}")
        if ids.size and int(ids.min()) < 0:
            raise ValueError(f"{name} must hold token ids >= 0; got {int(ids.min())}")
        return ids.tolist()
    out = [int(t) for t in ids] if all(type(t) is int and t >= 0 for t in ids) else None
    if out is None:
        for i, t in enumerate(ids):
            check_int(f"{name}[{i}]", t, low=0, note="a token id")
        out = [int(t) for t in ids]
    return out


class TreeDrafter:
    """Base class of tree drafters. ``vocab_size`` is V for drafters that produce q rows, else None."""

    vocab_size: int | None = None

    def start(self, prompt_ids: Sequence[int]) -> None:  # noqa: B027 (optional hook)
        """Called once per generation before the first round."""

    def propose_tree(
        self, prefix_ids: Sequence[int], budget: int, warp_fn: WarpFn, rng: np.random.Generator
    ) -> TreeProposal:
        """Draft a tree of at most ``budget`` nodes to follow ``prefix_ids`` (prompt + tokens so far)."""
        raise NotImplementedError

    def finish(self, generated_ids: Sequence[int]) -> None:  # noqa: B027 (optional hook)
        """Called once after a generation ends, with the tokens it generated (the prompt left out)."""


class ChainTree(TreeDrafter):
    """A chain drafter as a tree drafter: its proposal is the tree of one branch (each draft the child
    of the one before), its budget its draft length; start, finish, ``vocab_size`` and ``context`` are
    the chain drafter's. The one adapter between the two protocols (:func:`specdec.engine.decoding.
    speculative` decodes every chain drafter through it). ``chain`` tells the loop that the tree's
    depth is its budget, so that the loop asks for no more drafts than the tokens left can use (a
    chain drafter draws every draft it is asked for)."""

    chain = True

    def __init__(self, drafter: Drafter) -> None:
        if not callable(getattr(drafter, "propose", None)):
            raise ValueError(f"drafter must be a chain drafter (a propose method); got {drafter!r}")
        self.drafter = drafter
        self.vocab_size = getattr(drafter, "vocab_size", None)
        self.context = getattr(drafter, "context", None)

    def start(self, prompt_ids: Sequence[int]) -> None:
        self.drafter.start(prompt_ids)

    def propose_tree(
        self, prefix_ids: Sequence[int], budget: int, warp_fn: WarpFn, rng: np.random.Generator
    ) -> TreeProposal:
        budget = check_int("budget", budget, low=0)
        if budget == 0:
            return TreeProposal(DraftTree([], []))
        proposal = self.drafter.propose(prefix_ids, budget, warp_fn, rng)
        if len(proposal.tokens) > budget:
            n = len(proposal.tokens)
            raise ValueError(f"the drafter proposed {n} tokens; {budget} at most were asked")
        return TreeProposal(chain_tree(proposal.tokens), proposal.q, proposal.calls)

    def finish(self, generated_ids: Sequence[int]) -> None:
        finish = getattr(self.drafter, "finish", None)
        if callable(finish):
            finish(generated_ids)


# -- compatibility checks ------------------------------------------------------------------------


def check_same_vocab(target: torch.nn.Module, draft: torch.nn.Module) -> None:
    """Raise ValueError unless the two models' logits rows have the same width V."""
    v_target, v_draft = vocab_size(target), vocab_size(draft)
    if v_target != v_draft:
        raise ValueError(
            f"the draft's vocabulary size ({v_draft}) differs from the target's ({v_target}): "
            "speculative decoding needs p and q over the same token ids"
        )


def check_same_tokenizer(target_tokenizer: object, draft_tokenizer: object) -> None:
    """Raise ValueError unless two Hugging Face tokenizers map the same strings to the same ids."""
    vt, vd = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if vt != vd:
        differ = sorted(set(vt.items()) ^ set(vd.items()), key=lambda kv: kv[1])[:3]
        raise ValueError(
            f"the draft's tokenizer ({len(vd)} tokens) differs from the target's ({len(vt)} tokens); "
            f"first differing (token, id) pairs: {differ}"
        )


# -- model drafters ------------------------------------------------------------------------------


class ModelDrafter(Drafter):
    """A small causal LM M_q drafting autoregressively with its own KV cache (Algorithm 1, first step).

    Each round syncs the draft's cache with the committed prefix (:meth:`CachedLM.sync`):
    after a rejection it crops the rejected drafts and feeds the round's token; after a full
    accept it also feeds the last draft, which it had sampled but never fed (the draft-cache
    gap). Then it samples token i from q_i = warp_fn(logits) and feeds it to get q_{i+1}:
    gamma forward calls for gamma drafts. With ``confidence`` set, drafting stops after a token
    whose probability under the draft model (softmax of its logits at temperature 1, so that
    the rule also works for greedy decoding) is below it: transformers'
    ``assistant_confidence_threshold`` rule, applied to the sampled token. Fewer drafts where
    the draft is unsure; the rule looks only at the draft's own samples, so sampling stays
    lossless. Pass ``target`` (and tokenizers) to check compatibility now; ``speculative``
    checks the vocabulary size in any case.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        target: torch.nn.Module | None = None,
        tokenizer: object | None = None,
        target_tokenizer: object | None = None,
        confidence: float | None = None,
    ) -> None:
        check_optional_float("confidence", confidence, low=0.0, high=1.0, open_high=True)
        self.confidence = confidence
        if target is not None:
            check_same_vocab(target, model)
        if (tokenizer is None) != (target_tokenizer is None):
            raise ValueError("pass both tokenizer and target_tokenizer, or neither")
        if tokenizer is not None:
            check_same_tokenizer(target_tokenizer, tokenizer)
        self.lm = open_lm(model)
        self.vocab_size = self.lm.vocab_size
        context = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        self.context = context if is_int(context) else None

    def start(self, prompt_ids: Sequence[int]) -> None:
        self.lm.reset()
        if len(prompt_ids) > 1:
            self.lm.forward(prompt_ids[:-1], keep=1)

    def propose(
        self, prefix_ids: Sequence[int], gamma: int, warp_fn: WarpFn, rng: np.random.Generator
    ) -> Proposal:
        if gamma == 0:
            return Proposal([])
        calls = self.lm.calls
        logits = self.lm.sync(prefix_ids)[-1]
        tokens, rows = [], []
        for i in range(gamma):
            q = warp_fn(logits)
            tokens.append(sample(q, rng))
            rows.append(q)
            if self.confidence is not None and _own_probability(logits, tokens[-1]) < self.confidence:
                break  # the draft doubts its own token: stop drafting (dynamic gamma)
            if i + 1 < gamma:
                logits = self.lm.forward(tokens[-1:])[-1]
        return Proposal(tokens, torch.stack(rows), self.lm.calls - calls)

    @torch.inference_mode()
    def q_rows(self, ids: Sequence[int], keep: int, warp_fn: WarpFn) -> torch.Tensor:
        """One full forward of the draft model over ``ids`` (no cache; its own cache is untouched)."""
        check_int("keep", keep, low=1, high=len(ids), note="len(ids)")
        if not isinstance(self.lm, CachedLM):  # a lean model: a fresh session, fed once
            return warp_fn(open_lm(self.lm.model).forward(list(ids), keep=keep))
        input_ids = torch.tensor([[int(t) for t in ids]], dtype=torch.long, device=self.lm.device)
        out = self.lm.model(input_ids=input_ids, use_cache=False, logits_to_keep=keep)
        return warp_fn(out.logits[0, -keep:].float())


def _own_probability(logits: torch.Tensor, token: int) -> float:
    """The draft model's probability of ``token`` at temperature 1."""
    return float(torch.softmax(logits.float(), dim=-1)[token])


def early_exit_model(model: torch.nn.Module, n_layers: int) -> torch.nn.Module:
    """A view of ``model`` made of its embeddings, first ``n_layers`` decoder layers, final norm
    and LM head. The weights are shared, not copied (no extra memory).

    Works for Hugging Face decoder-only models laid out as ``model.<base>.layers`` (Llama,
    Mistral, Qwen2, SmolLM2, ...): the view is built on the meta device and every submodule
    is then replaced by the target's own.
    """
    early_exit = getattr(model, "early_exit", None)
    if callable(early_exit):  # a specdec.engine.lean.LeanLlama: a view over its first layers
        return early_exit(n_layers)
    base = getattr(model, model.base_model_prefix)
    total = len(base.layers)
    check_int("n_layers", n_layers, low=1, high=total, note="the target's depth")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = n_layers
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:n_layers]
    with torch.device("meta"):
        view = type(model)(config)
    view_base = getattr(view, view.base_model_prefix)
    for name, _ in list(view_base.named_children()):
        setattr(view_base, name, getattr(base, name))
    view_base.layers = torch.nn.ModuleList(base.layers[:n_layers])
    for name, _ in list(view.named_children()):
        if name != view.base_model_prefix:
            setattr(view, name, getattr(model, name))
    left = [n for n, t in [*view.named_parameters(), *view.named_buffers()] if t.is_meta]
    if left:
        raise ValueError(f"cannot build an early-exit view of {type(model).__name__}: unshared {left[:3]}")
    return view.eval()


class EarlyExitDrafter(ModelDrafter):
    """The target's first ``n_layers`` decoder layers + final norm + LM head as M_q.

    The weights are the target's (see :func:`early_exit_model`); the KV cache is its own.
    With n_layers equal to the target's depth, q = p up to rounding (every draft accepted).
    """

    def __init__(self, target: torch.nn.Module, n_layers: int) -> None:
        super().__init__(early_exit_model(target, n_layers))
        self.n_layers = n_layers


# -- deterministic and table drafters --------------------------------------------------------------


class PromptLookupDrafter(Drafter):
    """Copy what followed an earlier occurrence of the prefix's last n-gram (q = None).

    As transformers' ``PromptLookupCandidateGenerator`` (``prompt_lookup_num_tokens``):
    for n from ``max_ngram`` down to ``min_ngram``, find the first (leftmost) earlier match of
    the last n tokens in the prefix (prompt and generated tokens alike) that has a
    continuation, and propose up to gamma tokens of it (fewer when the prefix ends first).
    No match: k = 0. Deterministic, so verify treats the drafts as point masses.
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        check_int("min_ngram", min_ngram, low=1)
        check_int("max_ngram", max_ngram, low=min_ngram, note="min_ngram")
        self.max_ngram, self.min_ngram = int(max_ngram), int(min_ngram)

    def lookup(self, prefix_ids: Sequence[int], gamma: int) -> list[int]:
        ids = np.asarray(prefix_ids, dtype=np.int64)
        length = len(ids)
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            # windows of ids[:-1]: a match must end before the last token, so it has a continuation
            windows = np.lib.stride_tricks.sliding_window_view(ids[:-1], n)
            hits = np.flatnonzero((windows == ids[-n:]).all(axis=1))
            if hits.size:
                start = int(hits[0]) + n
                return ids[start : start + gamma].tolist()
        return []

    def propose(
        self, prefix_ids: Sequence[int], gamma: int, warp_fn: WarpFn, rng: np.random.Generator
    ) -> Proposal:
        if gamma == 0:
            return Proposal([])
        return Proposal(self.lookup(prefix_ids, gamma), None, calls=1)

    def q_rows(self, ids: Sequence[int], keep: int, warp_fn: WarpFn) -> None:
        """None: prompt lookup is deterministic (use :meth:`lookup` for its drafts)."""
        check_int("keep", keep, low=1, high=len(ids), note="len(ids)")
        return None


def _check_sequences(seqs: Iterable[Sequence[int]], vocab: int) -> list[np.ndarray]:
    check_int("vocab_size", vocab, low=1)
    arrays = [np.asarray(s, dtype=np.int64).ravel() for s in seqs]
    if not any(a.size for a in arrays):
        raise ValueError("seqs must hold at least one token id")
    for a in arrays:
        if a.size and (a.min() < 0 or a.max() >= vocab):
            raise ValueError(f"token ids must lie in [0, {vocab}) (vocab_size); got {a.min()}..{a.max()}")
    return arrays


class UnigramDrafter(Drafter):
    """Draft i.i.d. tokens from a unigram table: q(x) = (n(x) + k) / (N + k V), add-k smoothing.

    The log-probabilities serve as the draft's logits, so q is warp_fn(log q): the same
    temperature / top-k / top-p as the target. A baseline M_q of the paper's Table 3.
    """

    def __init__(self, probs: np.ndarray | torch.Tensor) -> None:
        probs = torch.as_tensor(probs, dtype=torch.float64)
        if probs.ndim != 1 or not bool((probs > 0).all()) or abs(float(probs.sum()) - 1) > 1e-6:
            raise ValueError("probs must be a 1-D array of positive probabilities summing to 1")
        self.log_probs = probs.log().float()
        self.vocab_size = probs.shape[0]

    @classmethod
    def from_token_ids(
        cls, seqs: Iterable[Sequence[int]], vocab_size: int, smoothing: float = 1.0
    ) -> UnigramDrafter:
        check_float("smoothing", smoothing, low=0.0, open_low=True)
        counts = np.bincount(np.concatenate(_check_sequences(seqs, vocab_size)), minlength=vocab_size)
        return cls((counts + smoothing) / (counts.sum() + smoothing * vocab_size))

    def propose(
        self, prefix_ids: Sequence[int], gamma: int, warp_fn: WarpFn, rng: np.random.Generator
    ) -> Proposal:
        if gamma == 0:
            return Proposal([])
        q = warp_fn(self.log_probs)
        return Proposal([sample(q, rng) for _ in range(gamma)], q.expand(gamma, -1), calls=gamma)

    def q_rows(self, ids: Sequence[int], keep: int, warp_fn: WarpFn) -> torch.Tensor:
        """The same row after every prefix: a unigram draft ignores the context."""
        check_int("keep", keep, low=1, high=len(ids), note="len(ids)")
        return warp_fn(self.log_probs).expand(keep, -1)


class BigramDrafter(Drafter):
    """Draft from bigram counts: q(x | y) = (n(y, x) + k) / (n(y) + k V), add-k smoothing.

    Counts are kept sparse (V x V would not fit for V = 49152); a row is made dense when
    needed. As for :class:`UnigramDrafter`, q = warp_fn(log q). Table 3 baseline.
    """

    def __init__(
        self, pairs: dict[int, tuple[np.ndarray, np.ndarray]], vocab_size: int, smoothing: float = 1.0
    ) -> None:
        check_float("smoothing", smoothing, low=0.0, open_low=True)
        check_int("vocab_size", vocab_size, low=1)
        self.pairs, self.vocab_size, self.smoothing = pairs, int(vocab_size), float(smoothing)

    @classmethod
    def from_token_ids(
        cls, seqs: Iterable[Sequence[int]], vocab_size: int, smoothing: float = 1.0
    ) -> BigramDrafter:
        arrays = _check_sequences(seqs, vocab_size)
        codes = np.concatenate([a[:-1] * vocab_size + a[1:] for a in arrays])
        keys, counts = np.unique(codes, return_counts=True)
        prev, nxt = np.divmod(keys, vocab_size)
        pairs = {}
        for y in np.unique(prev):
            sel = prev == y
            pairs[int(y)] = (nxt[sel], counts[sel])
        return cls(pairs, vocab_size, smoothing)

    def log_probs(self, prev: int) -> torch.Tensor:
        """log q(. | prev), a float32 row of length V."""
        row = np.full(self.vocab_size, self.smoothing)
        if prev in self.pairs:
            nxt, counts = self.pairs[prev]
            row[nxt] += counts
        return torch.from_numpy(np.log(row / row.sum())).float()

    def propose(
        self, prefix_ids: Sequence[int], gamma: int, warp_fn: WarpFn, rng: np.random.Generator
    ) -> Proposal:
        if gamma == 0:
            return Proposal([])
        tokens, rows, prev = [], [], int(prefix_ids[-1])
        for _ in range(gamma):
            q = warp_fn(self.log_probs(prev))
            prev = sample(q, rng)
            tokens.append(prev)
            rows.append(q)
        return Proposal(tokens, torch.stack(rows), calls=gamma)

    def q_rows(self, ids: Sequence[int], keep: int, warp_fn: WarpFn) -> torch.Tensor:
        """Row j is warp_fn(log q(. | previous token)) for each of the last ``keep`` tokens."""
        check_int("keep", keep, low=1, high=len(ids), note="len(ids)")
        return warp_fn(torch.stack([self.log_probs(int(t)) for t in list(ids)[-keep:]]))
