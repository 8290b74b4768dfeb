"""Draft-length policies: how many tokens to draft in the next round (dynamic gamma).

A fixed gamma is the paper's setting. A *policy* decides each round's draft length from what
the previous rounds did; :func:`specdec.engine.decoding.speculative` accepts one in place of an integer
``gamma``. Losslessness is unaffected: the proof of Appendix A.1 holds round by round for any
draft length chosen before the round's verification (from past rounds, or, for a drafter that
stops early, from its own samples so far), because each position's accept/resample step
leaves the target's conditional law intact whatever the number of positions.

* :class:`FixedGamma` -- the paper: gamma every round.
* :class:`HeuristicGamma` -- transformers' "heuristic" schedule for assisted generation:
  +2 after a round whose drafts were all accepted, -1 (not below 1) otherwise.

The other adaptive rule the field uses, stopping a draft once the draft model's own
probability of its token falls below a threshold (transformers' ``assistant_confidence_
threshold``), depends on the draft's samples within the round, so it lives in the drafter:
:class:`specdec.engine.drafters.ModelDrafter`'s ``confidence`` argument.
"""

from __future__ import annotations

from specdec.theory.checks import check_int

__all__ = ["DraftPolicy", "FixedGamma", "HeuristicGamma", "as_policy"]


class DraftPolicy:
    """Base class: ``next()`` gives the next round's draft length (1..``max_gamma``),
    ``update(drafted, accepted)`` reports the round; ``reset()`` starts a new generation."""

    max_gamma: int

    def reset(self) -> None:  # noqa: B027 (optional hook)
        pass

    def next(self) -> int:
        raise NotImplementedError

    def update(self, drafted: int, accepted: int) -> None:  # noqa: B027 (optional hook)
        pass

    def describe(self) -> str:
        return type(self).__name__


class FixedGamma(DraftPolicy):
    """gamma drafts every round (the paper's Algorithm 1)."""

    def __init__(self, gamma: int) -> None:
        self.max_gamma = check_int("gamma", gamma, low=1)

    def next(self) -> int:
        return self.max_gamma

    def describe(self) -> str:
        return f"fixed gamma = {self.max_gamma}"


class HeuristicGamma(DraftPolicy):
    """transformers' heuristic schedule: start at ``start``; after a round in which every draft
    was accepted add ``up``, otherwise subtract ``down``; stay within [1, ``max_gamma``].

    A round with no drafts (the drafter proposed nothing) leaves gamma unchanged.
    """

    def __init__(self, start: int = 5, *, up: int = 2, down: int = 1, max_gamma: int = 16) -> None:
        self.max_gamma = check_int("max_gamma", max_gamma, low=1)
        self.start = check_int("start", start, low=1, high=max_gamma, note="max_gamma")
        self.up = check_int("up", up, low=0)
        self.down = check_int("down", down, low=0)
        self.reset()

    def reset(self) -> None:
        self.gamma = self.start

    def next(self) -> int:
        return self.gamma

    def update(self, drafted: int, accepted: int) -> None:
        if not 0 <= accepted <= drafted:
            raise ValueError(f"need 0 <= accepted <= drafted; got {accepted}, {drafted}")
        if drafted == 0:
            return
        if accepted == drafted:
            self.gamma = min(self.max_gamma, self.gamma + self.up)
        else:
            self.gamma = max(1, self.gamma - self.down)

    def describe(self) -> str:
        return f"heuristic (start {self.start}, +{self.up} on a full accept, -{self.down} otherwise)"


def as_policy(gamma: int | DraftPolicy) -> DraftPolicy:
    """An integer gamma as :class:`FixedGamma`; a policy as it is."""
    if isinstance(gamma, DraftPolicy):
        return gamma
    return FixedGamma(gamma)
