"""What one decoding call counted and timed: the :class:`Stats` record.

Names follow the paper (Leviathan et al., 2023) and the book's notation chapter:

* A -- accepted drafts in a round, 0 <= A <= k <= gamma (k: drafts proposed that round);
* T = A + 1 -- tokens emitted by a round: the accepted drafts plus the target's own token
  (the correction drawn from the residual after a rejection, or the *bonus* token after a
  full accept). E[T] is Eq. (1) of the paper; E[A] = E[T] - 1. The two are kept apart here
  because mixing them is the most common off-by-one in reported speedups.

Two estimates of alpha are kept, because they are not the same quantity:

* ``alpha_accept_rate`` counts verify's coin flips. In a round, positions 0..A are
  *examined* (a uniform is drawn for each) when draft A was rejected, and 0..k-1 when all
  k drafts were accepted; positions after the first rejection are never examined and
  count for nothing. alpha_accept_rate = accepted / examined. Under the paper's i.i.d.
  assumption each examined position is an independent Bernoulli(alpha) trial, so this is
  the maximum-likelihood estimate of alpha. (``draft_acceptance_fraction`` = accepted /
  drafted also counts the never-examined drafts as failures, and is biased low.)
* ``alpha_tv`` is the mean over examined positions with a draft distribution q of
  beta = sum_x min(p(x), q(x)) = 1 - TV(p, q), the per-position acceptance probability of
  Corollary 3.6 (with lenience l: sum_x min(q(x), p(x) / l), Appendix A.5); alpha = E[beta]
  as in the paper's Table 3. Deterministic drafters (q = None) do not contribute.

The draft cost c (Definition 3.7) has one definition, :func:`cost_coefficient` (pure arithmetic, in
:mod:`specdec.theory.speedup`, named here too): the draft
time per round over gamma, in units of one single-token target step of plain decoding.

Times are wall-clock seconds from ``time.perf_counter`` with the CUDA device synchronised
before each reading when the model is on a GPU.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field

import torch

from specdec.theory.checks import check_int
from specdec.theory.speedup import cost_coefficient

__all__ = ["Stats", "cost_coefficient"]


@dataclass
class Stats:
    """Counts and times of one decoding call (speculative, or autoregressive with gamma = 0).

    Counting conventions:

    * ``rounds`` -- loop iterations; each makes exactly one target forward call, so
      ``target_calls == rounds``. The prefill of the prompt (target and draft) is not a
      round and is not counted in ``target_calls`` / ``draft_calls``; its time is
      ``prefill_s``.
    * ``draft_calls`` -- draft steps: forward calls of a model drafter (gamma per round:
      the first one also feeds the tokens the draft had not seen), one per sampled token
      for the n-gram table drafters, one per lookup for prompt lookup.
    * ``new_tokens`` -- tokens returned. It equals sum(T) = sum(A + 1) over rounds, except
      when the generation ends on an accepted drafted EOS: the round's own token after the
      EOS is then dropped (``dropped_after_eos`` is 1).
    * ``max_drafts`` -- the most drafts a round of the call can propose: gamma, or fewer when
      the call cannot use them (:func:`specdec.engine.decoding.speculative` passes
      min(gamma, max_new_tokens - 1): a round emits its drafts plus one token of its own).
      ``examined_at`` / ``accepted_at`` hold one count per position 0..max_drafts - 1 and
      ``accepted_hist`` max_drafts + 1 counts, so memory follows the work, not gamma; the
      positions left out are ones no round could reach (their counts would be 0). Without
      ``max_drafts`` (it then defaults to gamma, the bound :meth:`record_round` checks) the
      lists start empty and grow to the deepest position a round reached, so ``Stats(gamma=10**9)``
      costs no more than the rounds it records.

    One meaning for chains and trees (one loop runs both, a chain being a tree of one branch:
    :func:`specdec.engine.decoding.speculative_tree`): ``gamma`` is a round's budget (a chain's
    gamma, a tree's node budget; :attr:`budget` names it so), ``drafted`` a round's nodes (a chain's
    length), ``accepted`` the accepted depth A (the accepted path's length), ``examined_at`` /
    ``accepted_at`` count per depth, and ``mean_tokens_per_round`` is tokens per target call. The field
    keeps the paper's name ``gamma``, which every stored record's Stats uses.
    """

    gamma: int
    drafted: list[int] = field(default_factory=list)  #: k, drafts proposed in each round
    accepted: list[int] = field(default_factory=list)  #: A, drafts accepted in each round
    examined_at: list[int] = field(default_factory=list)  #: rounds that examined position i
    accepted_at: list[int] = field(default_factory=list)  #: rounds that accepted position i
    new_tokens: int = 0
    dropped_after_eos: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    #: rounds that were shadow probes: plain steps in which the drafter's guess was scored, not verified
    #: (:meth:`specdec.theory.policies.BudgetPolicy.shadows`); counted among the rounds as plain ones
    shadow_rounds: int = 0
    beta_sum: float = 0.0  #: sum of beta over the examined positions that had a q row
    beta_count: int = 0
    prefill_s: float = 0.0
    draft_s: float = 0.0  #: time in drafter.propose
    target_s: float = 0.0  #: time in target forward calls of the rounds
    verify_s: float = 0.0  #: time in warp + accept/reject + sampling of the round's token
    #: time Python's cyclic garbage collector ran during the call (within the times above), set by the
    #: measuring harness (:func:`specdec.measure.pairedrun.timed_generation`); 0 when not measured
    gc_s: float = 0.0
    max_drafts: int | None = None  #: the most drafts a round can propose (default: gamma)

    def __post_init__(self) -> None:
        check_int("gamma", self.gamma, low=0)
        sized = self.max_drafts is not None  # sized by the caller: the lists cover every position
        if self.max_drafts is None:
            self.max_drafts = self.gamma
        check_int("max_drafts", self.max_drafts, low=0, high=self.gamma, note="gamma")
        if sized and not self.examined_at:
            self.examined_at = [0] * self.max_drafts
            self.accepted_at = [0] * self.max_drafts

    # -- recording -----------------------------------------------------------------------
    @property
    def budget(self) -> int:
        """A round's budget: a chain's gamma, a tree's node budget (the field ``gamma``)."""
        return self.gamma

    def record_round(
        self,
        p: torch.Tensor,
        q: torch.Tensor | None,
        drafted: int,
        accepted: int,
        draft_calls: int,
        lenience: float = 1.0,
    ) -> None:
        """Add one round: k = ``drafted`` drafts, A = ``accepted`` of them kept.

        ``p`` (k + 1, V) and ``q`` (k, V) or None are the warped rows of the round (with
        argmax lenience, the one-hot greedy rows: ``alpha_tv`` then measures agreement with the
        target's argmax, and only the acceptance counts feel the lenience).
        """
        if not 0 <= accepted <= drafted <= self.max_drafts:
            got = (accepted, drafted, self.max_drafts)
            raise ValueError(f"need 0 <= accepted <= drafted <= max_drafts (gamma or less); got {got}")
        examined = min(accepted + 1, drafted)
        beta = None
        if q is not None and examined > 0:
            beta = torch.minimum(q[:examined], p[:examined] / lenience).sum(-1)
        self.record_tree_round(drafted, drafted, accepted, draft_calls, beta)

    def record_tree_round(
        self, nodes: int, depth: int, accepted: int, draft_calls: int, beta: torch.Tensor | None = None
    ) -> None:
        """Add one round: a tree of ``nodes`` drafts and ``depth`` levels (a chain: depth = nodes), of
        which a path of ``accepted`` nodes was kept. Depth d + 1 of the tree counts as position d:
        ``examined_at[d]`` (rounds that tried a node at that depth) and ``accepted_at[d]``. ``beta``:
        beta = sum_x min(q, p / l) (l the lenience; Corollary 3.6 at l = 1) at each examined position of a
        chain drafter's round that had q rows (one value each), or None. Every round of every loop is
        counted here (:meth:`record_round` is a chain's)."""
        if not 0 <= accepted <= depth <= nodes <= self.max_drafts:
            got = (accepted, depth, nodes, self.max_drafts)
            raise ValueError(f"need 0 <= accepted <= depth <= nodes <= max_drafts (the budget); got {got}")
        self.drafted.append(nodes)
        self.accepted.append(accepted)
        self.target_calls += 1
        self.draft_calls += draft_calls
        examined = min(accepted + 1, depth)
        if examined > len(self.examined_at):
            grow = [0] * (examined - len(self.examined_at))
            self.examined_at += grow
            self.accepted_at += grow
        for i in range(examined):
            self.examined_at[i] += 1
            self.accepted_at[i] += i < accepted
        if beta is not None and len(beta):
            if len(beta) != examined:
                raise ValueError(
                    f"beta must hold one value per examined position ({examined}); got {len(beta)}"
                )
            self.beta_sum += float(beta.double().sum())
            self.beta_count += examined

    def timer(self, name: str, device: torch.device) -> AbstractContextManager[None]:
        """Add the wall time of the ``with`` block to the field ``name`` (CUDA synchronised)."""
        return add_elapsed(self, name, device)

    # -- derived quantities ------------------------------------------------------------------
    @property
    def rounds(self) -> int:
        return len(self.accepted)

    @property
    def drafted_tokens(self) -> int:
        return sum(self.drafted)

    @property
    def accepted_tokens(self) -> int:
        return sum(self.accepted)

    @property
    def accepted_hist(self) -> list[int]:
        """Index k: the number of rounds with A = k accepted drafts (length max_drafts + 1,
        gamma + 1 unless the call could not draft gamma tokens in a round; without max_drafts,
        one more than the deepest position a round reached)."""
        hist = [0] * (max(len(self.examined_at), max(self.accepted, default=0)) + 1)
        for a in self.accepted:
            hist[a] += 1
        return hist

    @property
    def bonus_tokens(self) -> int:
        """Rounds with a full accept (A = k >= 1): their last token came from the bonus row."""
        return sum(1 for k, a in zip(self.drafted, self.accepted, strict=True) if k > 0 and a == k)

    @property
    def mean_accepted(self) -> float:
        """Mean accepted drafts per round, E[A] (gpt-fast's "mean accepted")."""
        return self.accepted_tokens / self.rounds if self.rounds else math.nan

    @property
    def mean_tokens_per_round(self) -> float:
        """Mean tokens per round, E[T] = E[A] + 1 (Eq. (1)); computed as new_tokens / rounds."""
        return self.new_tokens / self.rounds if self.rounds else math.nan

    @property
    def examined(self) -> int:
        return sum(self.examined_at)

    @property
    def alpha_accept_rate(self) -> float:
        """Accepted drafts over examined positions (see the module docstring); nan if none."""
        return self.accepted_tokens / self.examined if self.examined else math.nan

    @property
    def draft_acceptance_fraction(self) -> float:
        """Accepted drafts over all drafted tokens (biased low as an estimate of alpha)."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else math.nan

    @property
    def alpha_tv(self) -> float:
        """Mean of beta = sum_x min(p, q) over examined positions (Corollary 3.6); nan if none."""
        return self.beta_sum / self.beta_count if self.beta_count else math.nan

    @property
    def step_s(self) -> float:
        """Mean time of one target call of the rounds: for plain decoding (gamma = 0) the
        single-token step T(1) that every speedup and the paper's c divide by; nan if none."""
        return self.target_s / self.target_calls if self.target_calls else math.nan

    def cost_coefficient(self, step_s: float) -> float:
        """The paper's c of this speculative call against a single-token target step ``step_s``.

        See :func:`cost_coefficient`; pass the ``step_s`` of a plain decoding call of the same
        target (``plain.stats.step_s``), not this call's own target calls, which verify k + 1
        tokens each.
        """
        return cost_coefficient(self.draft_s, self.rounds, self.gamma, step_s)

    def summary(self) -> dict:
        """The recorded fields plus the derived quantities, as plain Python values (JSON-ready)."""
        out = asdict(self)
        for name in (
            "rounds",
            "drafted_tokens",
            "accepted_tokens",
            "accepted_hist",
            "bonus_tokens",
            "mean_accepted",
            "mean_tokens_per_round",
            "examined",
            "alpha_accept_rate",
            "draft_acceptance_fraction",
            "alpha_tv",
            "step_s",
        ):
            out[name] = getattr(self, name)
        return out


@contextmanager
def add_elapsed(obj: object, name: str, device: torch.device) -> Iterator[None]:
    """Add the wall time of the ``with`` block to the attribute ``name`` of ``obj``; on a CUDA
    device the GPU is synchronised before and after, so queued kernels count where they run."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda _d: None)
    sync(device)
    start = time.perf_counter()
    try:
        yield
    finally:
        sync(device)
        setattr(obj, name, getattr(obj, name) + time.perf_counter() - start)
