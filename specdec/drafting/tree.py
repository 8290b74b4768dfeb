"""The tree-drafter protocol: where the draft *tree* of a round comes from.

A tree drafter answers, as a chain drafter (:mod:`specdec.engine.drafters`) does::

    propose_tree(prefix_ids, budget, warp_fn, rng) -> TreeProposal(tree, q, calls)

``tree`` is a :class:`~specdec.theory.trees.DraftTree` of at most ``budget`` nodes hanging below
the last token of ``prefix_ids`` (budget 0: the empty tree, the round is a plain target step).
Siblings are ordered by index and the verifier tries them in that order, so a drafter puts the
most likely child first. ``q`` holds one row per node, the (N, V) law node ``i`` was drawn from
given its parent and its earlier siblings (what SpecInfer's multi-candidate rule needs), or is
``None`` for a deterministic drafter, whose nodes verify treats as point masses. ``calls``
counts draft steps.

:meth:`TreeDrafter.start` is called once per generation before the first round (with the
prompt), :meth:`TreeDrafter.finish` once after it ends (with the generated tokens), e.g. for a
drafter that remembers earlier generations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from specdec.engine.drafters import WarpFn
from specdec.theory.checks import check_int
from specdec.theory.trees import DraftTree

__all__ = ["TreeDrafter", "TreeProposal", "check_budget", "check_token_ids"]


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
