"""Tree drafters conditioned on the target's features: Medusa heads, the MLP speculator, EAGLE / EAGLE-2.

The models and their training are :mod:`specdec.train.condnets` / :mod:`specdec.train.condtrain`;
here they draft, in int8 rows on the lean engine's kernels (:class:`specdec.engine.leannative.Q8Linear`
for the heads and stages, the q4q8 forward fed with embedding rows for EAGLE's layer).

Protocol (beyond :class:`~specdec.engine.drafters.TreeDrafter`): ``conditioned = True`` asks the tree
loop (:func:`specdec.engine.decoding.speculative_tree`) to record the target's features and to call
:meth:`ConditionedDrafter.extend` with the pairs ``(f_j, x_{j+1})`` of every newly committed position:
after the prefill (positions 0 .. n-2 of the prompt) and after every round (the root and the accepted
path; the last pair holds the bonus token). At a round's start the drafter has thus seen the features
of every cached position ``0 .. m-1``; the root ``x_m`` is the last token of the prefix.

Every drafter here drafts deterministically (top tokens by its own logits), so each node's law given
its parent and earlier siblings is a point mass and the tree verification is lossless at every
temperature (:mod:`specdec.theory.treeverify`); at temperature 0 it is exact matching.

* :class:`MedusaDrafter` -- one call of K heads on ``norm(f_{m-1})``; head d's rank-r token fills every
  node at depth d and rank r of a *static* tree, the best tree for the budget under the heads'
  held-out acceptance profile (:func:`specdec.theory.treetheory.best_tree`), as Medusa's tree is.
* :class:`SpeculatorDrafter` -- the MLP speculator's stages, one batched call per depth, over the same
  kind of static tree (``ranks=1``: a chain).
* :class:`EagleDrafter` -- EAGLE's draft layer over its own KV cache; ``topk=1``: EAGLE's chain (one
  row per level, the earlier levels kept in the cache); ``topk > 1``: EAGLE-2's dynamic tree: at each
  depth the ``topk`` frontier nodes of highest cumulative draft probability are expanded (``topk``
  children each), then the ``budget`` nodes of highest cumulative probability are kept (a set closed
  under parents); a frontier node none of whose children could be kept (``budget`` - 1 candidates or
  more rank before it) is not expanded, which gives the same tree with fewer rows, and skips a level's
  call when no node of it qualifies (where the draft cache is nearly full, the full expansion would have
  stopped a level earlier: there the tree may go deeper). A tree level is one call over that level's
  expanded nodes only: the draft layer's cache keeps the earlier levels' nodes, and the call hangs the
  new ones below them (``specdec_q8_forward_spec``: each node attends to the committed prefix and its
  own path, so its output equals the chain's over its path, bit for bit), as the papers' cached trees
  do. A level, chain or tree, is one C call (:class:`specdec.engine.leannative.EagleLevel`: the inputs'
  norm, concatenation and ``fc``, the draft layer, the kept head and the rows' top tokens).

Every head's top tokens come from one C call (the head's int8 rows and a partial selection over the
kept vocabulary, :meth:`specdec.engine.leannative.Q8Linear.top`), never from a sort of the vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from specdec.engine.drafters import TreeDrafter, TreeProposal, WarpFn, check_budget
from specdec.theory.checks import check_int
from specdec.theory.trees import DraftTree

__all__ = ["ConditionedDrafter", "EagleDrafter", "MedusaDrafter", "SpeculatorDrafter", "StaticTreeDrafter"]

_EMPTY = DraftTree([], [])


class ConditionedDrafter(TreeDrafter):
    """Shared parts: the target's frozen norm, embeddings and kept-vocabulary head, and the last feature."""

    conditioned = True

    def __init__(self, module: torch.nn.Module, card: dict, threads: int = 1, *, head: bool = True) -> None:
        """``head``: keep the kept-vocabulary head as an int8 matrix (False for a drafter whose own lean
        model ends in that head, EAGLE's: no second copy that nothing calls)."""
        from specdec.engine.leannative import Q8Linear

        frozen = module.frozen
        self.card, self.name = card, str(card.get("name"))
        self.threads = check_int("threads", threads, low=1, high=1024)
        self.kept = frozen.kept.numpy().astype(np.int64)
        self.norm_w = frozen.norm.numpy().astype(np.float32)
        self.eps = float(frozen.eps)
        self.embed = frozen.embed.numpy()
        self.head = Q8Linear(frozen.head) if head else None
        self.last: np.ndarray | None = None

    def start(self, prompt_ids: Sequence[int]) -> None:
        self.last = None

    def extend(self, features: np.ndarray, next_ids: Sequence[int]) -> None:
        """The target's pre-norm features of newly committed positions and each one's next token."""
        features = np.asarray(features, dtype=np.float32)
        if features.ndim != 2 or features.shape[0] != len(next_ids):
            raise ValueError(
                f"extend needs (n, hidden) features and n next tokens; got {features.shape}, {len(next_ids)}"
            )
        if len(next_ids):
            self.last = features[-1].copy()


class StaticTreeDrafter(ConditionedDrafter):
    """A drafter whose tree has a fixed shape per budget: the best static tree under the card's held-out
    profile's first ``ranks`` ranks. Subclasses fill in the nodes' tokens (:meth:`_fill`)."""

    def __init__(self, module: torch.nn.Module, card: dict, threads: int = 1, ranks: int = 4) -> None:
        super().__init__(module, card, threads)
        self.ranks = check_int("ranks", ranks, low=1, high=64)
        profile = card.get("heldout_profile", {}).get("hit")
        self.profile = None if profile is None else np.asarray(profile, dtype=np.float64)
        self._trees: dict[int, tuple[list[int], list[int], list[int]]] = {}

    def static_tree(self, budget: int) -> tuple[list[int], list[int], list[int]]:
        """(parents, depths (1-based), sibling ranks) of the best static tree of ``budget`` nodes under the
        held-out profile's first ``ranks`` ranks (cached per budget)."""
        from specdec.theory.treetheory import best_tree, profile_from_marginals, tree_shape

        if budget not in self._trees:
            if self.profile is None:
                raise ValueError(
                    f"drafter {self.name!r}: its card has no held-out profile to shape a static tree"
                )
            # the card's hits are marginal (P(rank j is the target's token), teacher-forced: parent
            # right); best_tree wants P(rank j accepted | parent accepted, ranks < j rejected)
            h = np.minimum.accumulate(self.profile[:, : self.ranks], axis=1)  # a later rank never likelier
            self._trees[budget] = tree_shape(best_tree(profile_from_marginals(h), budget))
        return self._trees[budget]

    @torch.inference_mode()
    def propose_tree(
        self, prefix_ids: Sequence[int], budget: int, warp_fn: WarpFn, rng: np.random.Generator
    ) -> TreeProposal:
        budget = check_budget(budget)
        if self.last is None or budget == 0:
            return TreeProposal(_EMPTY, None, 0)
        parents, depths, ranks = self.static_tree(budget)
        tokens, calls = self._fill(prefix_ids, parents, depths, ranks)
        return TreeProposal(DraftTree(tokens, parents), None, calls)

    def _fill(
        self, prefix_ids: Sequence[int], parents: list[int], depths: list[int], ranks: list[int]
    ) -> tuple[list[int], int]:
        """The nodes' tokens and the draft calls spent, for the tree's shape."""
        raise NotImplementedError


class MedusaDrafter(StaticTreeDrafter):
    """Medusa-1 heads over a static tree (see the module docstring); ``ranks``: tokens tried per head."""

    def __init__(self, module: torch.nn.Module, card: dict, threads: int = 1, ranks: int = 4) -> None:
        from specdec.engine.leannative import MedusaHeads, Q8Linear

        super().__init__(module, card, threads, ranks)
        self.k = int(module.heads)
        h = module.w.shape[-1]
        self.w = Q8Linear(module.w.detach().reshape(self.k * h, h))
        self.b = module.b.detach().numpy().astype(np.float32)
        self.draft = MedusaHeads(self.w, self.b, self.head, self.norm_w, self.eps, self.threads)  # one C call

    def _fill(
        self, prefix_ids: Sequence[int], parents: list[int], depths: list[int], ranks: list[int]
    ) -> tuple[list[int], int]:
        """One call of every head on norm(f_{m-1}) and their top tokens (one C call,
        :class:`specdec.engine.leannative.MedusaHeads`); head d's rank-r token fills the nodes at (d, r)."""
        top, _ = self.draft(self.last, self.ranks)
        return [int(self.kept[top[d - 1, j]]) for d, j in zip(depths, ranks, strict=True)], 1


class SpeculatorDrafter(StaticTreeDrafter):
    """The MLP speculator's stages over a static tree (``ranks=1``: a chain)."""

    def __init__(self, module: torch.nn.Module, card: dict, threads: int = 1, ranks: int = 4) -> None:
        from specdec.engine.leannative import MlpStage, Q8Linear

        super().__init__(module, card, threads, ranks)
        self.stages = int(module.stages)
        self.w = [
            Q8Linear(torch.cat([module.state_weight * ws, module.emb_weight * we], 1))
            for ws, we in zip(module.w_state.detach(), module.w_emb.detach(), strict=True)
        ]  # fmt: skip
        self.ln_w = module.ln_w.detach().numpy().astype(np.float32)
        self.ln_b = module.ln_b.detach().numpy().astype(np.float32)
        self.out_scale = module.out_scale.detach().numpy().astype(np.float32)
        self.stage_calls = [  # one C call per stage; the first normalizes the target's feature
            MlpStage(self.w[n], (self.ln_w[n], self.ln_b[n]), self.out_scale[n], self.head, self.embed,
                     (self.norm_w, self.eps) if n == 0 else None, self.threads)
            for n in range(self.stages)
        ]  # fmt: skip

    def _stage(self, n: int, states: np.ndarray, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Stage ``n`` over ``states`` (stage 0: the target's feature, normalized in the call) and the tokens
        each consumes, in one C call (:class:`specdec.engine.leannative.MlpStage`): (the next states, each
        row's top ``ranks`` kept-vocabulary indices)."""
        s, top, _ = self.stage_calls[n](states, tokens, self.ranks)
        return s, top

    def _fill(
        self, prefix_ids: Sequence[int], parents: list[int], depths: list[int], ranks: list[int]
    ) -> tuple[list[int], int]:
        """One batched stage call per depth, over the nodes that have children there."""
        n = len(parents)
        tokens = [0] * n
        state_in = {-1: self.last}  # the state a node's stage reads (the feature, normalized by stage 0)
        token_in = {-1: int(prefix_ids[-1])}  # the token it consumes (its own; the root's for -1)
        calls = 0
        for d in range(1, max(depths) + 1):
            expand = sorted({parents[i] for i in range(n) if depths[i] == d})
            states, top = self._stage(
                d - 1, np.stack([state_in[p] for p in expand]), [token_in[p] for p in expand]
            )
            calls += 1
            row = {p: r for r, p in enumerate(expand)}
            for i in range(n):
                if depths[i] == d:
                    tokens[i] = int(self.kept[top[row[parents[i]], ranks[i]]])
                    state_in[i], token_in[i] = states[row[parents[i]]], tokens[i]
        return tokens, calls


class EagleDrafter(ConditionedDrafter):
    """EAGLE's draft layer (``topk=1``: a chain) or EAGLE-2's dynamic tree (``topk > 1``), ``depth`` deep."""

    def __init__(
        self, module: torch.nn.Module, card: dict, threads: int = 1, topk: int = 1, depth: int = 6
    ) -> None:
        from specdec.engine.builder import EngineSpec, open_model
        from specdec.engine.leannative import EagleLevel, Q8Linear

        super().__init__(module, card, threads, head=False)  # the layer's lean model ends in the head
        self.topk = check_int("topk", topk, low=1, high=64)
        self.depth = check_int("depth", depth, low=1, high=64)
        self.fc = Q8Linear(module.fc.weight.detach())
        layer_model = module.model
        layer_model.int8_rows = True  # int8 rows, kept as codes by the q4q8 forward
        self.layer = open_model(layer_model, EngineSpec("lean", "q4q8", self.threads)).model
        self.context = self.layer.max_positions
        self.cache = self.layer.new_cache(self.layer.max_positions)
        # a level (inputs, layer, kept head, top tokens) is one C call
        self.level = EagleLevel(self.layer, self.fc, self.norm_w, self.eps, self.embed, self.threads)
        self.top = min(self.topk, self.level.kept)  # tokens asked of a row: no more than the kept vocabulary
        self.m = 0
        self.g: np.ndarray | None = None
        self.first: tuple[np.ndarray, np.ndarray] | None = None  # level 1: (kept indices, log-probabilities)

    def start(self, prompt_ids: Sequence[int]) -> None:
        self.m, self.g, self.first = 0, None, None

    @torch.inference_mode()
    def extend(self, features: np.ndarray, next_ids: Sequence[int]) -> None:
        super().extend(features, next_ids)
        if not len(next_ids):
            return
        if self.m + len(next_ids) > self.context:
            raise ValueError(f"EAGLE's draft layer holds {self.context} positions; the generation is longer")
        feats, idx, logp = self.level(features, next_ids, self.cache, self.m, 1, self.top)
        self.m += len(next_ids)  # committed pairs; speculative slots after m are overwritten
        self.g, self.first = feats[-1], (idx[0], logp[0])

    @torch.inference_mode()
    def propose_tree(
        self, prefix_ids: Sequence[int], budget: int, warp_fn: WarpFn, rng: np.random.Generator
    ) -> TreeProposal:
        budget = check_budget(budget)
        if self.g is None or self.first is None or budget == 0:
            return TreeProposal(_EMPTY, None, 0)
        k = min(self.topk, budget)  # more expanded nodes than the budget keeps would be drafted for nothing
        tok, par, score, dep = [], [], [], []  # candidate nodes
        for t, lp in zip(self.first[0][:k], self.first[1][:k], strict=True):
            tok.append(int(self.kept[t])), par.append(-1), score.append(float(lp)), dep.append(1)
        feat_of: dict[int, np.ndarray] = {-1: self.g}  # node -> its predicted feature (g after it)
        slot_of: dict[int, int] = {}  # expanded node -> its index in the draft cache's tree region
        region: list[int] = []  # the region's parents (indices into it; -1: a child of the prefix)
        calls = 1  # the call of extend() that gave the first level's logits (one per round)
        for d in range(2, min(self.depth, budget) + 1):
            frontier = [i for i in range(len(tok)) if dep[i] == d - 1]
            # EAGLE-2's top-k of the level, less the nodes none of whose children can be chosen: a child ranks
            # after its parent in the final order (a score no higher, a depth deeper), so it is among the
            # budget's best only if its parent and every node ranked before the parent are too; a node with
            # budget - 1 or more candidates before it is not expanded (the same tree as expanding it, fewer
            # rows, and no call at all once no node of a level can gain a chosen child; a child's log-prob is
            # <= 0 in float: the C top-k's lse >= the row's max). Near a full draft cache the full expansion
            # stopped a level earlier (it needed more slots): there the tree may go deeper
            ranked = sorted(range(len(tok)), key=lambda i: (-score[i], dep[i], i))  # the final choice's order
            order = {i: r for r, i in enumerate(ranked)}
            new = [i for i in sorted(frontier, key=lambda i: (-score[i], i))[:k] if order[i] <= budget - 2]
            if not new:
                break
            first = self.m + d - 2 if k == 1 else self.m + len(region)  # the level's first slot
            if first + len(new) > self.context:  # the draft cache is full: the tree stops here
                break
            rows, ids = np.stack([feat_of[par[i]] for i in new]), [tok[i] for i in new]
            if k == 1:  # a chain: the earlier levels stay in the cache at slots = positions; one row
                feats, top, logp = self.level(rows, ids, self.cache, self.m + d - 2, 1, self.top)
            else:  # the level's nodes only, hung below the earlier levels' nodes in the draft cache
                start = self.m + len(region)
                for i in new:
                    slot_of[i] = len(region)
                    region.append(slot_of[par[i]] if par[i] >= 0 else -1)
                feats, top, logp = self.level(
                    rows, ids, self.cache, start, len(new), self.top, region, self.m
                )  # fmt: skip
            calls += 1
            for r, i in enumerate(new):
                feat_of[i] = feats[r]
                for t, lp in zip(top[r][:k], logp[r][:k], strict=True):
                    tok.append(int(self.kept[t])), par.append(i), dep.append(d)
                    score.append(score[i] + float(lp))
        chosen = sorted(range(len(tok)), key=lambda i: (-score[i], dep[i], i))[:budget]
        keep = set(chosen)
        for i in list(chosen):  # close under parents (ties may leave a parent out)
            while par[i] >= 0 and par[i] not in keep:
                keep.add(par[i])
                i = par[i]
        nodes = sorted(keep, key=lambda i: (dep[i], -score[i], i))
        while len(nodes) > budget:  # closing added parents: drop the weakest leaves
            leaves = [i for i in nodes if not any(par[j] == i for j in nodes)]
            nodes.remove(min(leaves, key=lambda i: (score[i], -i)))
        pos = {node: r for r, node in enumerate(nodes)}
        tree = DraftTree([tok[i] for i in nodes], [pos[par[i]] if par[i] >= 0 else -1 for i in nodes])
        return TreeProposal(tree, None, calls)


def build_conditioned_drafter(
    kind: str, module: torch.nn.Module, card: dict, threads: int, options: dict[str, Any]
) -> ConditionedDrafter:
    """The drafter of registry kind ``kind`` (``medusa``, ``mlp``, ``eagle``) over a loaded module."""
    family = {"medusa": "medusa", "mlp": "mlp-speculator", "eagle": "eagle"}[kind]
    if card.get("kind") != family:
        raise ValueError(
            f"drafter kind {kind!r} needs a {family} drafter; {card.get('name')!r} is a {card.get('kind')}"
        )
    if kind == "medusa":
        return MedusaDrafter(module, card, threads, **options)
    if kind == "mlp":
        return SpeculatorDrafter(module, card, threads, **options)
    return EagleDrafter(module, card, threads, **options)
