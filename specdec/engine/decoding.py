"""The decoding loops: plain autoregressive sampling and speculative decoding, chain or tree.

There is one speculative loop, :func:`_decode` (issue 41, item 3): a chain is a tree of one branch.
:func:`speculative` is Algorithm 1 of Leviathan et al. (2023) run to the end of a generation: its
chain drafter reaches the loop through :class:`specdec.engine.drafters.ChainTree` and its draft-length
policy through :class:`specdec.theory.policies.ChainPolicy`; :func:`speculative_tree` hands the loop a
tree drafter and a node budget. Each round a drafter proposes a tree (a chain: k <= gamma tokens),
one target forward call scores the last committed token and every node, verification keeps a path
and draws the round's own token (:func:`specdec.theory.treeverify.verify_tree`, which on a chain is
:func:`specdec.theory.sampling.verify` uniform for uniform), and the target's KV cache is cut back to
the committed tokens. Losslessness (Appendix A.1) holds for every drafter: the output has the
target's law. Greedy decoding (temperature 0) is exact matching on the rows' argmax; with lenience
l < 1 a chain uses the paper's argmax rule instead (Appendix A.5, not lossless).

Conventions, copied from transformers' assisted generation and gpt-fast:

* The target's cache holds every committed token *except the last* (transformers crops to
  ``new_len - 1``): the last committed token is the first input of the next verify call, so
  its row of p is the distribution of the first draft.
* One ``numpy`` generator per call, ``np.random.default_rng(seed)``, never reseeded; it
  supplies the draft samples, verify's uniforms and the round's token.
* Drafts are cut after an EOS; the output stops at the first EOS (kept); ``max_new_tokens``
  is never exceeded: gamma is shortened near the end so a round cannot overshoot.
* Prefill (the prompt minus its last token, for target and drafter) happens before the
  first round and is timed apart; ``Stats.target_calls`` counts the rounds' calls only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch

from specdec.engine.cores import engine_owns_cores
from specdec.engine.drafters import ChainTree, Drafter, Proposal
from specdec.engine.draw import draw_at, draw_row, prepare_draw
from specdec.engine.lm import CachedLM, open_lm
from specdec.engine.stats import Stats
from specdec.theory.checks import check_float, check_int, check_optional_float, check_optional_int, is_int
from specdec.theory.policies import (
    BudgetPolicy,
    ChainPolicy,
    DraftPolicy,
    FixedBudget,
    as_budget_policy,
    as_policy,
)
from specdec.theory.sampling import argmax, argmax_at, float32_view, verify_argmax, warp
from specdec.theory.trees import DraftTree
from specdec.theory.treeverify import RowsOnDemand, first_level_chance, verify_tree, verify_tree_greedy

__all__ = ["Generation", "autoregressive", "speculative", "speculative_tree"]


@dataclass
class Generation:
    """The new tokens of one decoding call (prompt excluded) and what the call counted."""

    tokens: list[int]
    stats: Stats


@engine_owns_cores
def speculative(
    target: torch.nn.Module,
    drafter: Drafter,
    prompt_ids: Sequence[int],
    *,
    gamma: int | DraftPolicy,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    lenience: float = 1.0,
    seed: int = 0,
    eos_token_id: int | None = None,
) -> Generation:
    """Speculative decoding of ``target`` with a chain ``drafter``; each loop is one round.

    The chain drafter runs in the one loop (:func:`_decode`) as a tree of one branch
    (:class:`~specdec.engine.drafters.ChainTree`); a round is the paper's SpeculativeDecodingStep
    (Algorithm 1):

    1. the drafter guesses k <= gamma tokens x_1..x_k, sampled from q_1..q_k;
    2. one target call over [last committed token, x_1..x_k] gives p_1..p_{k+1};
    3. x_i is accepted with probability min(1, p_i(x_i) / (l q_i(x_i))) until the first rejection;
    4. the round's own token comes from norm(max(0, p_{A+1} - l q_{A+1})) after a rejection,
       or from p_{k+1} (the bonus token) after a full accept;

    then the target's cache is cropped back to the committed tokens minus the last.

    ``target`` is a Hugging Face causal LM (or a :class:`specdec.engine.lean.LeanLlama`); ``gamma``
    is an integer >= 1 or a :class:`specdec.theory.policies.DraftPolicy` that sets each round's draft
    length (dynamic gamma; ``Stats.gamma`` is then its ``max_gamma``); ``lenience`` l in (0, 1]
    (Appendix A.5; l = 1 is lossless, Appendix A.1); temperature / top_k / top_p define the
    warp applied alike to p and q. At temperature 0 with l < 1 step 3 is the paper's argmax
    variant instead (:func:`~specdec.theory.sampling.verify_argmax`: keep x_i while p_i(x_i) >= l max p_i,
    p at temperature 1; the round's token is the argmax); top-k/top-p do not enter it.
    Returns the new tokens (prompt excluded) and the :class:`~specdec.engine.stats.Stats` of the call.
    """
    if not callable(getattr(drafter, "propose", None)):  # a tree drafter has propose_tree only
        tree = callable(getattr(drafter, "propose_tree", None))
        raise TypeError(
            f"speculative() is the chain loop: its drafter needs propose(); {type(drafter).__name__} "
            + ("drafts trees: decode it with speculative_tree(target, drafter, prompt_ids, budget=...)"
               if tree else "has no propose method (a Drafter of specdec.engine.drafters)")
        )  # fmt: skip
    lm, prompt = start_generation(target, prompt_ids, max_new_tokens, temperature, top_k, top_p, eos_token_id)
    dynamic = isinstance(gamma, DraftPolicy)
    _check_speculative(lm, drafter, gamma.max_gamma if dynamic else gamma, lenience)
    check_draft_context(drafter, len(prompt), max_new_tokens)
    policy = ChainPolicy(as_policy(gamma if dynamic else int(gamma)))
    # a round drafts at most max_new_tokens - 1 tokens: the histograms need no more positions
    stats = Stats(gamma=policy.max_budget, max_drafts=min(policy.max_budget, max(max_new_tokens - 1, 1)))
    sampling = Sampling(temperature, top_k, top_p, seed, eos_token_id, lenience)
    return _decode(lm, prompt, ChainTree(drafter), policy, stats, sampling, max_new_tokens, _context(target))


@engine_owns_cores
def speculative_tree(
    target: torch.nn.Module,
    drafter: Any,
    prompt_ids: Sequence[int],
    *,
    budget: int | BudgetPolicy,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_token_id: int | None = None,
) -> Generation:
    """Speculative decoding with a draft *tree* verified in one target call per round.

        Each round: the drafter proposes a :class:`~specdec.theory.trees.DraftTree` of at most
        ``budget`` nodes (``drafter.propose_tree(prefix, budget, warp_fn, rng)``, a
        :class:`specdec.engine.drafters.TreeProposal`); one target call over ``[last committed token,
        *nodes]`` with tree attention (each node sees the committed prefix and its own ancestors:
        ``Session.forward_tree``) gives p at the root and at every node;
        :func:`specdec.theory.treeverify.verify_tree` walks down the tree (SpecInfer's multi-candidate
        rule; exact matching at temperature 0) and draws the round's own token; the target's cache
        keeps the accepted path only (``Session.keep_path``). A chain is the tree whose nodes each
        have one child, so this loop with a chain drafter is :func:`speculative`'s.

        Lossless at every temperature (the proof is :mod:`specdec.theory.treeverify`'s). Nodes below
        an EOS are cut, and so are nodes deeper than the tokens left to generate; a tree never has more
    nodes than the target's context has free positions. ``Stats``: a round's
        ``drafted`` is its node count, ``accepted`` the accepted path's length; ``examined_at[d]``
        counts rounds that reached depth d + 1 of the tree. ``drafter.finish(tokens)``, when the
        drafter has it, is told the whole generation at the end (suffix decoding's global tree).

        ``budget``: an integer >= 0 (every round's node budget) or a
        :class:`specdec.theory.policies.BudgetPolicy` choosing each round's from the rounds already
        verified (0: a plain step that calls no drafter, the step :func:`autoregressive` takes; e.g.
        :class:`~specdec.theory.policies.DoNoHarm`), told the temperature at the start
        (``policy.begin(temperature, prompt_tokens)``); ``Stats.gamma`` is then its ``max_budget``. A drafter
        conditioned on the target's features is told the positions of plain rounds at the next round
        that drafts, in one ``extend`` call (under a policy other than a fixed budget, the prompt's
        positions too: a drafter never used costs nothing).
    """
    lm, prompt = start_generation(target, prompt_ids, max_new_tokens, temperature, top_k, top_p, eos_token_id)
    if not isinstance(budget, BudgetPolicy):
        check_int("budget", budget, low=0)
    policy = as_budget_policy(budget)
    if not callable(getattr(drafter, "propose_tree", None)):
        raise ValueError(f"drafter must propose trees (a propose_tree method); got {type(drafter).__name__}")
    v_draft = getattr(drafter, "vocab_size", None)
    if v_draft is not None and v_draft != lm.vocab_size:
        raise ValueError(
            f"the drafter's vocabulary size ({v_draft}) differs from the target's ({lm.vocab_size})"
        )
    check_draft_context(drafter, len(prompt), max_new_tokens)
    # a drafter conditioned on the target's features: the session must report them
    if getattr(drafter, "conditioned", False):
        if not hasattr(lm, "record_features") or getattr(getattr(lm, "model", None), "mode", None) == "q4_1":
            raise ValueError(
                f"drafter {type(drafter).__name__} is conditioned on the target's features; the target must "
                "report them (a LeanLlama in mode 'q4q8' or a torch mode); got " + type(target).__name__
            )
    stats = Stats(gamma=policy.max_budget)  # a tree's nodes are not bounded by the tokens left
    sampling = Sampling(temperature, top_k, top_p, seed, eos_token_id)
    return _decode(lm, prompt, drafter, policy, stats, sampling, max_new_tokens, _context(target))


@dataclass(frozen=True)
class Sampling:
    """How one decoding call draws: the warp of p and q, the seed of its one generator, the EOS, and
    the lenience l of Appendix A.5 (1: lossless; below 1 only for chains, checked by the entry)."""

    temperature: float
    top_k: int | None
    top_p: float | None
    seed: int
    eos_token_id: int | None
    lenience: float = 1.0


def _decode(
    lm: CachedLM,
    prompt: list[int],
    drafter: Any,
    policy: BudgetPolicy,
    stats: Stats,
    sampling: Sampling,
    max_new_tokens: int,
    context: int | None,
) -> Generation:
    """THE speculative loop (issue 41, item 3): one round per target call, a chain a tree of one branch.

    Each round the policy gives a node budget (0: a plain step, the drafter not called); the drafter
    proposes a tree (:class:`~specdec.engine.drafters.ChainTree` for a chain drafter, whose budget is
    capped at the tokens left, so that it draws no draft that would be cut); nodes below an EOS or
    deeper than the tokens left are cut; one target call scores the root and every node (a chain,
    the empty tree included, through the chain call ``forward`` and ``crop``; a tree with branches
    through ``forward_tree`` and ``keep_path``); verification walks the tree (exact matching at
    temperature 0 on the argmax ids; :func:`~specdec.theory.treeverify.verify_tree` otherwise, which on
    a chain is Algorithm 1 uniform for uniform; the argmax rule of A.5 for a chain with l < 1 at
    temperature 0); Stats counts the round, with beta = sum_x min(q, p / l) at the examined positions
    when the drafter is a chain drafter with q rows (a tree drafter's rounds count none, whatever their
    shape: beta is defined per position of a chain).

    A shadow probe (the policy's :meth:`~specdec.theory.policies.BudgetPolicy.shadows`, after a budget
    b > 0 and a proposal with a node left after the cut) is the same plain step (:func:`_shadow_step`: the
    same call and draw) with the drafter's depth-1 guess scored against it, the chance reported to the
    policy (``update_shadow``); Stats counts it as a plain round with its draft calls, and in
    ``shadow_rounds``.

    A round with no node to verify (budget 0, or a drafter that proposed nothing or only nodes that
    were cut) is :func:`autoregressive`'s own step (:func:`_plain_step`: the same call, the same draw,
    the same timers), followed by the round's counts, so that a policy that chooses plain steps costs
    what plain decoding costs plus its bookkeeping. When the policy chose the plain round, it may commit
    to a run of them (:meth:`~specdec.theory.policies.BudgetPolicy.plain_rounds`: the rounds it would give
    anyway, since a plain round tells it nothing of the drafter); the loop takes them without asking it
    again and tells it of them at once (``update_plain``): the same rounds and tokens, less bookkeeping.
    (With lenience l < 1 at temperature 0 such a round takes the argmax of the logits, which is A.5's
    argmax of p at T = 1 but for a tie that rounding in the softmax would make.)

    The call's generator: the drafter draws its samples, then verification its uniforms (none at
    temperature 0: exact matching on the argmax), then the round's token; a drafter is not called in a
    round with no token left to draft (budget 0), nor is the policy asked; in a shadow probe the drafter
    draws its samples, then the step its token's one uniform (none greedy), and scoring the guess draws
    nothing. (The chain loop before this
    one called ``propose(prefix, 0)`` in such a round and drew verify's uniforms on one-hot rows at
    temperature 0: tokens and counts of every drafter of the package are the same, since each returns
    early at gamma 0 and draws nothing greedy; a drafter that draws from ``rng`` in those two places
    would see other numbers.) A chain-shaped tree is scored by the chain call, bit for bit a lean
    engine's tree call; on a Hugging Face or float32 lean target a tree call was close to it, not equal.
    """
    temperature, eos_token_id, lenience = sampling.temperature, sampling.eos_token_id, sampling.lenience
    chain_drafter = bool(getattr(drafter, "chain", False))
    conditioned = bool(getattr(drafter, "conditioned", False))
    # the positions the drafter is not told at the prefill: a conditioned drafter under a policy other
    # than a fixed budget hears of the prompt when a round first drafts; every other drafter takes it in
    # start()
    deferred = len(prompt) - 1 if conditioned and not isinstance(policy, FixedBudget) else 0
    policy.begin(temperature, deferred + 1)
    if conditioned:  # the entry checked that the session reports the target's features
        lm.record_features = True
    rng = np.random.default_rng(sampling.seed)  # the call's only source of randomness; never reseeded
    warp_fn = partial(warp, temperature=temperature, top_k=sampling.top_k, top_p=sampling.top_p)
    tokens = list(prompt)
    pending: list[tuple[np.ndarray, list[int]]] = []  # conditioned: committed pairs not yet told
    with stats.timer("prefill_s", lm.device):
        _prefill(lm, prompt, len(prompt) + max_new_tokens + policy.max_budget)
        drafter.start(prompt)
        if conditioned and not isinstance(policy, FixedBudget):  # told when a round first drafts
            if len(prompt) > 1:
                pending.append((lm.features, list(prompt[1:])))
        elif conditioned:  # pairs (f_j, x_{j+1}) of the prefilled positions 0 .. n-2
            drafter.extend(lm.features if len(prompt) > 1 else np.zeros((0, 1), np.float32), prompt[1:])
    while (left := max_new_tokens - (len(tokens) - len(prompt))) > 0:
        with stats.timer("draft_s", lm.device):
            chosen = limit = _next_budget(policy) if left > 1 else 0
            if chain_drafter:  # a chain's depth is its budget: no draft that the tokens left would cut
                limit = min(limit, left - 1)
            if context is not None:  # a tree call holds 1 + N slots after the cached tokens
                limit = min(limit, context - len(tokens))
            calls, shadow = 0, False
            if limit:
                if pending:  # the plain rounds' positions, in one call
                    drafter.extend(
                        np.concatenate([f for f, _ in pending]), [t for _, ids in pending for t in ids]
                    )
                    pending.clear()
                proposal = drafter.propose_tree(tokens, limit, warp_fn, rng)
                tree, q, calls = proposal.tree, proposal.q, proposal.calls
                if not isinstance(tree, DraftTree) or len(tree) > limit:
                    raise ValueError(
                        f"the drafter must propose a DraftTree of at most {limit} nodes; got {tree!r}"
                    )
                tree, q = _cut(tree, q, left - 1, eos_token_id)
                shadow = bool(len(tree)) and policy.shadows()
        if shadow:  # a shadow probe: the plain step, the drafter's guess scored against its token
            token, chance = _shadow_step(lm, tokens, tree, q, stats, temperature, warp_fn, rng)
            stats.record_tree_round(0, 0, 0, calls)
            stats.shadow_rounds += 1
            policy.update_shadow(len(tree), chance)
            if token == eos_token_id:
                break
            if conditioned and len(tokens) - len(prompt) < max_new_tokens:
                pending.append((lm.features[:1], [token]))
            continue
        if not limit or not len(tree):  # no node to verify: the step autoregressive() takes (a drafter
            # not called catches up on these positions when next asked); a policy that chose a plain round
            # may commit to a run of them, which the loop takes without asking again and reports at once
            run = _plain_run(policy, left) if left > 1 and chosen == 0 else 1
            done = 0
            while done < run:
                token = _plain_step(lm, tokens, stats, temperature, warp_fn, rng)
                stats.record_tree_round(0, 0, 0, calls if not done else 0)
                done += 1
                if token == eos_token_id:
                    break
                if conditioned and len(tokens) - len(prompt) < max_new_tokens:
                    pending.append((lm.features[:1], [token]))
            if run == 1:
                policy.update(0, 0, 0)
            else:
                policy.update_plain(done)
            if token == eos_token_id:
                break
            continue
        chain = tree.is_chain
        with stats.timer("target_s", lm.device):  # one call scores the root and every node
            if chain:  # a chain (the empty tree included): the chain call; a lean tree node equals it
                logits = lm.forward([tokens[-1], *tree.tokens])
            else:
                logits = lm.forward_tree([tokens[-1], *tree.tokens], tree.call_parents())
        with stats.timer("verify_s", lm.device):
            path, next_token, p, ids = _verify(logits, tree, q, sampling, warp_fn, rng)
        examined = min(len(path) + 1, tree.depth)
        beta = _beta(ids, p, q, examined, lenience) if chain_drafter and q is not None and examined else None
        stats.record_tree_round(len(tree), tree.depth, len(path), calls, beta)
        policy.update(len(tree), tree.depth, len(path))  # depths counted as Stats counts them
        new = [*(tree.tokens[i] for i in path), next_token]
        start = len(tokens) - 1  # the cache held the committed tokens minus the last (the root)
        rows = [0, *(i + 1 for i in path)]
        if conditioned:  # the root's and the accepted nodes' features, each with the token after it
            # a chain's rows 0 .. A: a view of the session's buffer at slots the crop below keeps, so it holds
            # until the next drafting round tells the drafter; a tree's: a copy, taken before keep_path
            feats = lm.features[: len(rows)] if chain else lm.features[rows]
        tokens += new
        if chain and len(tree):  # the cache must not hold the round's own token yet
            lm.crop(len(tokens) - 1)
        elif not chain:
            lm.keep_path(start, rows)  # (a plain step's call left the cache as it should be)
        if conditioned and eos_token_id not in new and len(tokens) - len(prompt) < max_new_tokens:
            pending.append((feats, new))  # told before the next round that drafts
        if eos_token_id in new:
            break
    out = finish_generation(tokens[len(prompt) :], stats, eos_token_id)
    finish = getattr(drafter, "finish", None)
    if callable(finish):
        finish(out.tokens)
    return out


def _cut(
    tree: DraftTree, q: torch.Tensor | None, depth: int, eos_token_id: int | None
) -> tuple[DraftTree, Any]:
    """The tree without the nodes deeper than ``depth`` (the tokens left but one) or below an EOS, and
    their rows of q."""
    keep = [
        tree.depths[i] <= depth and (par < 0 or tree.tokens[par] != eos_token_id)
        for i, par in enumerate(tree.parents)
    ]
    if not len(tree) or all(keep):
        return tree, q
    kept = tree.kept(keep)
    return tree.cut(keep), None if q is None else q[kept]


def _verify(
    logits: torch.Tensor, tree: DraftTree, q: torch.Tensor | None, sampling: Sampling, warp_fn: Any, rng: Any
) -> tuple[list[int], int, Any, torch.Tensor | None]:
    """A round's verification: the accepted path, the round's own token, p's rows where they were
    built (a tensor, or a :class:`~specdec.theory.treeverify.RowsOnDemand`; None greedy: exact matching
    on the argmax, no uniforms) and the rows' argmax where it was taken for a tree (greedy)."""
    temperature, lenience = sampling.temperature, sampling.lenience
    if temperature == 0 and lenience < 1.0:  # A.5, argmax case (chains): p(x) >= l max p at T = 1
        n_accepted, next_token = verify_argmax(torch.softmax(logits.float(), -1), tree.tokens, lenience)
        return list(range(n_accepted)), next_token, None, argmax(logits)
    if temperature == 0 and not len(tree):  # a plain step: the argmax, as autoregressive takes it
        return [], argmax_at(logits, 0), None, None
    if temperature == 0:  # exact matching: what verify_tree gives on one-hot rows, without them
        ids = argmax(logits)
        path, next_token = verify_tree_greedy(ids, tree)
        return path, next_token, None, ids
    if not len(tree):  # what verify_tree does for a tree of no nodes: one draw from p at the root
        return [], draw_at(warp_fn(logits), 0, rng), None, None
    # float32 CPU logits: p's rows warped one by one when the walk first reads them (the root's, the
    # accepted nodes'): warp is row-wise, so the same rows as warping all at once (tested), without the rows
    # never examined; elsewhere (a GPU: one launch per operation) every row at once
    if float32_view(logits) is not None:
        p: Any = RowsOnDemand(logits.shape[0], logits.shape[1], partial(_warped_row, logits, warp_fn))
    else:
        p = warp_fn(logits)
    q = None if q is None else q.to(logits.device)
    path, next_token = verify_tree(p, q, tree, rng, lenience, draw_row)
    return path, next_token, p, None


def _warped_row(logits: torch.Tensor, warp_fn: Any, i: int) -> Any:
    """Row i of warp_fn(logits), warped alone; a float32 CPU row as its numpy view (the walk's reads and
    residuals then run no torch operation)."""
    row = warp_fn(logits[i : i + 1])
    view = float32_view(row)
    return row[0] if view is None else view[0]


def _beta(ids: torch.Tensor | None, p: Any, q: torch.Tensor, examined: int, lenience: float) -> torch.Tensor:
    """beta = sum_x min(q, p / l) at a chain's first ``examined`` positions; with p one-hot at the argmax
    a (greedy, or A.5's argmax rule; ``p`` None, ``ids`` the argmax verification took) that is q(a)."""
    if p is None:  # greedy: the argmax ids verification took
        a = ids[:examined].to(q.device)
        return q[torch.arange(examined, device=q.device), a]
    rows = torch.as_tensor(p[:examined]).to(q.device)  # the rows verification made (RowsOnDemand), stacked
    return torch.minimum(q[:examined], rows / lenience).sum(-1)


@engine_owns_cores
def autoregressive(
    target: torch.nn.Module,
    prompt_ids: Sequence[int],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_token_id: int | None = None,
) -> Generation:
    """Plain decoding: one target call per token, sampled from warp(logits) with one uniform.

    The baseline of every speedup. Sampling (temperature > 0), it draws exactly the uniforms that
    :func:`speculative` draws when the drafter proposes nothing, so the two agree token for token
    then. Greedy
    (temperature 0) it takes the argmax of the logits, as the tree loop's greedy verification does,
    without building warp's one-hot row or drawing (records made before commit 0c1a774 built the row
    and drew a uniform per token: the same tokens, ~0.35 ms a token slower on a 2-core Xeon).
    """
    lm, prompt = start_generation(target, prompt_ids, max_new_tokens, temperature, top_k, top_p, eos_token_id)
    rng = np.random.default_rng(seed)
    warp_fn = partial(warp, temperature=temperature, top_k=top_k, top_p=top_p)
    stats, tokens = Stats(gamma=0), list(prompt)
    with stats.timer("prefill_s", lm.device):
        _prefill(lm, prompt, len(prompt) + max_new_tokens)
    while len(tokens) - len(prompt) < max_new_tokens:
        token = _plain_step(lm, tokens, stats, temperature, warp_fn, rng)
        stats.record_tree_round(0, 0, 0, 0)
        if token == eos_token_id:
            break
    return finish_generation(tokens[len(prompt) :], stats, eos_token_id)


def _plain_step(
    lm: CachedLM, tokens: list[int], stats: Stats, temperature: float, warp_fn: Any, rng: np.random.Generator
) -> int:
    """One plain step, the same for :func:`autoregressive` and the speculative loop's budget-0 rounds: the
    target's call on the last committed token (timed as ``target_s``), then its token (``verify_s``):
    the argmax greedy (what warp's one-hot row would give, without the row or a uniform), else one draw
    from warp(p) with one uniform. The token is appended to ``tokens`` and returned."""
    with stats.timer("target_s", lm.device):
        logits = lm.forward(tokens[-1:])
    with stats.timer("verify_s", lm.device):
        token = argmax_at(logits, 0) if temperature == 0 else draw_at(warp_fn(logits), 0, rng)
    tokens.append(token)
    return token


def _shadow_step(
    lm: CachedLM,
    tokens: list[int],
    tree: DraftTree,
    q: Any,
    stats: Stats,
    temperature: float,
    warp_fn: Any,
    rng: np.random.Generator,
) -> tuple[int, float]:
    """A shadow probe's round (:meth:`~specdec.theory.policies.BudgetPolicy.shadows`): :func:`_plain_step`'s
    call and draw (the argmax greedy; one draw from warp(p) with one uniform), then the chance that
    verifying ``tree`` would have accepted one of the root's children: 1 or 0 greedy (a child's token is
    the argmax), :func:`~specdec.theory.treeverify.first_level_chance` of p at the root otherwise (no
    uniform drawn for it). The token is appended to ``tokens``; returns it and the chance."""
    with stats.timer("target_s", lm.device):
        logits = lm.forward(tokens[-1:])
    with stats.timer("verify_s", lm.device):
        if temperature == 0:
            token = argmax_at(logits, 0)
            kids = (tree.tokens[i] for i, parent in enumerate(tree.parents) if parent < 0)
            chance = float(token in kids)
        else:
            rows = warp_fn(logits)
            token, p = draw_at(rows, 0, rng), rows[0]
            chance = first_level_chance(p, None if q is None else q.to(p.device), tree)
    tokens.append(token)
    return token, chance


# -- helpers -------------------------------------------------------------------------------------


def _next_budget(policy: BudgetPolicy) -> int:
    n = policy.next()
    if not is_int(n) or not 0 <= n <= policy.max_budget:
        raise ValueError(
            f"{policy.describe()} asked for a budget of {n!r}; it must give 0..{policy.max_budget}"
        )
    return int(n)


def _plain_run(policy: BudgetPolicy, left: int) -> int:
    """The plain rounds the policy commits to after choosing one (:meth:`BudgetPolicy.plain_rounds`), at
    most the tokens left."""
    n = policy.plain_rounds(left)
    if not is_int(n) or not 1 <= n <= left:
        raise ValueError(f"{policy.describe()} committed to {n!r} plain rounds; it must give 1..{left}")
    return int(n)


def _context(target: torch.nn.Module) -> int | None:
    """The target's context window (``config.max_position_embeddings``), or None where it has none."""
    context = getattr(getattr(target, "config", None), "max_position_embeddings", None)
    return int(context) if is_int(context) else None


def _prefill(lm: CachedLM, prompt: list[int], positions: int = 0) -> None:
    """The prompt but its last token into the cache, after reserving ``positions`` (the generation's
    most: prompt, new tokens and the widest round's nodes) so that no step grows the cache (where the
    session takes the hint: :meth:`specdec.engine.lm.Session.reserve`; a duck-typed session may not)."""
    reserve = getattr(lm, "reserve", None)
    if reserve is not None:
        reserve(positions)
    if len(prompt) > 1:
        lm.forward(prompt[:-1], keep=1)


def cut_at_eos(proposal: Proposal, limit: int, eos_token_id: int | None) -> Proposal:
    """Keep the drafts up to and including the first EOS: nothing can follow it.

    Also refuses a proposal longer than asked for, which could overrun ``max_new_tokens``.
    """
    if len(proposal.tokens) > limit:
        raise ValueError(f"the drafter proposed {len(proposal.tokens)} tokens; {limit} at most were asked")
    if eos_token_id is None or eos_token_id not in proposal.tokens:
        return proposal
    k = proposal.tokens.index(eos_token_id) + 1
    q = None if proposal.q is None else proposal.q[:k]
    return Proposal(proposal.tokens[:k], q, proposal.calls)


def finish_generation(new: list[int], stats: Stats, eos_token_id: int | None) -> Generation:
    """Cut the new tokens after the first EOS (kept), e.g. the bonus token after an accepted EOS."""
    if eos_token_id is not None and eos_token_id in new:
        end = new.index(eos_token_id) + 1
        stats.dropped_after_eos = len(new) - end
        new = new[:end]
    stats.new_tokens = len(new)
    return Generation(new, stats)


def start_generation(
    target: torch.nn.Module,
    prompt_ids: Sequence[int],
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    eos_token_id: int | None,
) -> tuple[CachedLM, list[int]]:
    """Check the arguments both loops share; wrap the target. Raises ValueError early.

    Also refuses a generation that could outgrow the target's context: prompt plus
    ``max_new_tokens`` beyond ``target.config.max_position_embeddings`` (when the config has it).
    """
    if isinstance(prompt_ids, torch.Tensor | np.ndarray):
        if prompt_ids.ndim == 2 and prompt_ids.shape[0] == 1:
            prompt_ids = prompt_ids[0]
        if prompt_ids.ndim != 1:
            raise ValueError(f"prompt_ids must be 1-D (batch size 1); got shape {tuple(prompt_ids.shape)}")
        prompt_ids = prompt_ids.tolist()
    prompt = list(prompt_ids)
    if not prompt:
        raise ValueError("prompt_ids must hold at least one token id; got an empty prompt")
    check_int("max_new_tokens", max_new_tokens, low=1)
    context = getattr(getattr(target, "config", None), "max_position_embeddings", None)
    if is_int(context) and len(prompt) + max_new_tokens > context:
        raise ValueError(
            f"len(prompt_ids) + max_new_tokens must be <= {context} (the target's max_position_embeddings); "
            f"got {len(prompt)} + {max_new_tokens} = {len(prompt) + max_new_tokens}"
        )
    check_float("temperature", temperature, low=0.0)
    check_optional_int("top_k", top_k, low=1)
    check_optional_float("top_p", top_p, low=0.0, high=1.0, open_low=True)
    lm = open_lm(target)
    if not all(is_int(t) and 0 <= t < lm.vocab_size for t in prompt):
        raise ValueError(f"prompt_ids must be integers in [0, {lm.vocab_size}) (the target's vocabulary)")
    check_optional_int(
        "eos_token_id", eos_token_id, low=0, high=lm.vocab_size - 1, note="or None; the target's vocabulary"
    )
    if temperature > 0:
        prepare_draw()  # the C draw's library loaded (built on first use) here, outside every timer
    return lm, [int(t) for t in prompt]


def check_draft_context(drafter: Drafter, n_prompt: int, max_new_tokens: int) -> None:
    """Refuse a draft whose context window cannot hold the generation (it would read positions
    it was never trained on, silently): the same rule as the target's, on ``drafter.context``."""
    context = getattr(drafter, "context", None)
    if is_int(context) and n_prompt + max_new_tokens > context:
        raise ValueError(
            f"the draft's context window ({context} positions, its max_position_embeddings) is shorter "
            f"than len(prompt_ids) + max_new_tokens = {n_prompt} + {max_new_tokens} = "
            f"{n_prompt + max_new_tokens}: use a draft with a longer context, or a shorter prompt or "
            "fewer new tokens"
        )


def _check_speculative(lm: CachedLM, drafter: Drafter, gamma: int, lenience: float) -> None:
    check_int("gamma", gamma, low=1)
    check_float("lenience", lenience, low=0.0, high=1.0, open_low=True)
    v_draft = getattr(drafter, "vocab_size", None)
    if v_draft is not None and v_draft != lm.vocab_size:
        raise ValueError(
            f"the drafter's vocabulary size ({v_draft}) differs from the target's ({lm.vocab_size})"
        )
