"""A hybrid drafter (issue 42, item 4): suffix decoding where its match is confident, a network drafter
elsewhere, ArcticInference's pattern (its suffix decoding beside the MLP speculator: the suffix draft
is used when its score reaches a threshold, the model's draft otherwise).

Each round, :class:`~specdec.drafting.suffix.SuffixDecodingDrafter` speculates first; when its draft's
*score* (the sum of its nodes' estimated probabilities, arctic's rule: about the tokens it expects
to be accepted) is at least ``min_score``, its tree is the round's; otherwise the network drafter's
(Medusa, the MLP speculator, EAGLE or EAGLE-2: :mod:`specdec.drafting.conditioned`) is. Both drafters
draft deterministically (every node a point mass given its parent and earlier siblings), and the
choice depends on the committed tokens only (the suffix tree over the prefix), so each round's tree
is a function of the past: the tree verification is lossless at every temperature, as for either
drafter alone (:mod:`specdec.theory.treeverify`).

The network drafter is conditioned on the target's features: it is told every committed position
(``extend``) whichever drafter drafted, so that it can draft when its turn comes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specdec.engine.drafters import TreeDrafter, TreeProposal, WarpFn, check_budget
from specdec.theory.checks import check_float

__all__ = ["HybridDrafter"]


class HybridDrafter(TreeDrafter):
    """Suffix decoding's tree when its score is at least ``min_score``, ``network``'s tree otherwise;
    ``used``: how many rounds each drafted (``"suffix"``, ``"network"``) since :meth:`start`."""

    def __init__(self, suffix: TreeDrafter, network: TreeDrafter, min_score: float = 1.0) -> None:
        if not callable(getattr(suffix, "speculate", None)):
            raise ValueError(
                f"suffix must be a SuffixDecodingDrafter (a speculate method); got {suffix!r:.80}"
            )
        self.suffix, self.network = suffix, network
        self.min_score = check_float("min_score", min_score, low=0.0)
        self.conditioned = bool(getattr(network, "conditioned", False))
        self.vocab_size = getattr(network, "vocab_size", None)
        self.context = getattr(network, "context", None)  # the network drafter's window bounds a generation
        self.used = {"suffix": 0, "network": 0}

    def start(self, prompt_ids: Sequence[int]) -> None:
        self.suffix.start(prompt_ids)
        self.network.start(prompt_ids)
        self.used = {"suffix": 0, "network": 0}

    def extend(self, features: np.ndarray, next_ids: Sequence[int]) -> None:
        """The target's features of newly committed positions, for the network drafter."""
        self.network.extend(features, next_ids)

    def propose_tree(
        self, prefix_ids: Sequence[int], budget: int, warp_fn: WarpFn, rng: np.random.Generator
    ) -> TreeProposal:
        budget = check_budget(budget)
        draft = self.suffix.speculate(prefix_ids, budget)
        if budget and len(draft.tree) and draft.score >= self.min_score:
            self.used["suffix"] += 1
            return TreeProposal(draft.tree, None, calls=1)
        proposal = self.network.propose_tree(prefix_ids, budget, warp_fn, rng)
        if proposal.q is not None:
            raise ValueError("the hybrid's network drafter must draft point masses (q None)")
        if budget:
            self.used["network"] += 1
        return proposal

    def finish(self, generated_ids: Sequence[int]) -> None:
        self.suffix.finish(generated_ids)
        finish = getattr(self.network, "finish", None)
        if callable(finish):
            finish(generated_ids)
