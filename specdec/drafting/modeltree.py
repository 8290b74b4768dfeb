"""Trees from chain drafters: a model drafter's chain with side leaves, and any chain as a tree.

* :class:`ModelTreeDrafter` -- a model drafter (:class:`specdec.engine.drafters.ModelDrafter`: the
  distilled drafts, early exit) drafts its chain as usual, one draft call per level, and at every
  level adds ``branch - 1`` *side leaves*: the draft's next most likely tokens at that position
  (by its raw logits), excluding the chain's own token. A side leaf costs no draft call (its row
  is already computed) and one more verify row; it pays when the chain's token is rejected but
  the target's token is among the draft's runners-up (a rejection at depth d then still yields
  d + 1 accepted drafts instead of d). This is the cheapest tree a sequential drafter can grow;
  Medusa's and EAGLE's static/dynamic trees expand runners-up further.

(Any chain drafter reaches the tree loop through :class:`specdec.engine.drafters.ChainTree`.)

Losslessness: the chain token at a level is sampled from q (its row is q), and the side leaves
are a deterministic function of the context (the draft's top tokens), so each has a point mass as
its law given its parent and its earlier siblings (:mod:`specdec.theory.treeverify` accepts both);
at temperature 0 every row is a point mass and verification is exact matching.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from specdec.engine.drafters import TreeDrafter, TreeProposal, WarpFn
from specdec.theory.checks import check_int
from specdec.theory.sampling import sample
from specdec.theory.trees import DraftTree

__all__ = ["ModelTreeDrafter"]


class ModelTreeDrafter(TreeDrafter):
    """A model drafter's chain plus ``branch - 1`` side leaves per level (see the module docstring).

    A budget of N nodes drafts ceil(N / branch) levels (the last level may have fewer side
    leaves); ``branch = 1`` is the model drafter's chain.
    """

    def __init__(self, drafter: Any, branch: int = 2) -> None:
        if not hasattr(drafter, "lm"):
            raise ValueError(f"drafter must be a model drafter (with its own session .lm); got {drafter!r}")
        self.branch = check_int("branch", branch, low=1, high=64)
        self.drafter = drafter
        self.lm = drafter.lm
        self.vocab_size = drafter.vocab_size
        self.context = getattr(drafter, "context", None)

    def start(self, prompt_ids: Sequence[int]) -> None:
        self.drafter.start(prompt_ids)

    @torch.inference_mode()
    def propose_tree(
        self, prefix_ids: Sequence[int], budget: int, warp_fn: WarpFn, rng: np.random.Generator
    ) -> TreeProposal:
        budget = check_int("budget", budget, low=0)
        if budget == 0:
            return TreeProposal(DraftTree([], []))
        calls = self.lm.calls
        logits = self.lm.sync(prefix_ids)[-1]
        tokens: list[int] = []
        parents: list[int] = []
        rows: list[torch.Tensor] = []
        parent = -1
        while len(tokens) < budget:
            q = warp_fn(logits)
            main = sample(q, rng)
            here = len(tokens)
            tokens.append(main)
            parents.append(parent)
            rows.append(q)
            sides = min(self.branch - 1, budget - len(tokens))
            if sides:
                top = torch.topk(logits.float(), sides + 1).indices.tolist()
                for token in [t for t in top if t != main][:sides]:
                    tokens.append(int(token))
                    parents.append(parent)
                    rows.append(_point_mass(q, int(token)))
            parent = here
            if len(tokens) < budget:
                logits = self.lm.forward([main])[-1]
        return TreeProposal(DraftTree(tokens, parents), torch.stack(rows), self.lm.calls - calls)


def _point_mass(like: torch.Tensor, token: int) -> torch.Tensor:
    row = torch.zeros_like(like)
    row[token] = 1.0
    return row
