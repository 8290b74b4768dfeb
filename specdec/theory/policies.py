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

The tree loop (:func:`specdec.engine.decoding.speculative_tree`; a chain is a tree of one branch) takes
a :class:`BudgetPolicy` in place of its node budget, 0 meaning a plain step:

* :class:`FixedBudget` -- the same budget every round.
* :class:`DoNoHarm` -- speculate only where it pays: each round the budget with the best predicted
  speed over a plain step (Theorem 3.8's ratio with online acceptance per depth and the measured v and
  c), plain steps where none beats 1, with a periodic probe of the drafter.

The other adaptive rule the field uses, stopping a draft once the draft model's own
probability of its token falls below a threshold (transformers' ``assistant_confidence_
threshold``), depends on the draft's samples within the round, so it lives in the drafter:
:class:`specdec.engine.drafters.ModelDrafter`'s ``confidence`` argument.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specdec.theory.checks import check_int, is_int

__all__ = [
    "BudgetPolicy",
    "ChainPolicy",
    "DoNoHarm",
    "DraftPolicy",
    "FixedBudget",
    "FixedGamma",
    "HeuristicGamma",
    "as_budget_policy",
    "as_policy",
]


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


# -- node budgets for the tree loop (a chain is a tree of one branch) ---------------------------------


class BudgetPolicy:
    """Base class of a tree loop's budget policy (:func:`specdec.engine.decoding.speculative_tree`):
    ``next()`` gives the next round's node budget, 0 to ``max_budget`` (0: a plain step, no draft);
    ``update(nodes, depth, accepted)`` reports the round (the tree's nodes and depth, the accepted path's
    length);
    ``begin(temperature, prompt_tokens)`` starts a generation at that sampling temperature from a prompt
    whose positions but the first the drafter has not yet been told (by default: ``reset()``,
    which forgets the previous generation's rounds). A policy sees only rounds already committed (verified,
    or a shadow probe's chance against a token already drawn: :meth:`shadows`), so the budget of a round
    is fixed before its verification draws anything: the loop stays lossless
    (Appendix A.1 round by round; :mod:`specdec.theory.treeverify` for trees), whatever the policy."""

    max_budget: int

    def begin(self, temperature: float, prompt_tokens: int = 0) -> None:
        """Start a generation at ``temperature``; ``prompt_tokens`` - 1 prompt positions are not yet told
        to the drafter (the loop gives 1, i.e. none, where the drafter takes the prompt at the prefill;
        a policy may keep priors per temperature, or price the catch-up)."""
        self.reset()

    def reset(self) -> None:  # noqa: B027 (optional hook)
        pass

    def next(self) -> int:
        raise NotImplementedError

    def update(self, nodes: int, depth: int, accepted: int) -> None:  # noqa: B027 (optional hook)
        pass

    def shadows(self) -> bool:
        """After :meth:`next` gave a budget b > 0: True when the round is a *shadow* probe. The drafter
        proposes its tree of at most b nodes as in any round, but the round is the plain decoder's step
        (its nodes are not verified, so no extra row is paid and no draft is committed); the plain step's
        token is drawn as it always is, and the chance that verifying the tree would have accepted one of
        the root's children (:func:`specdec.theory.treeverify.first_level_chance`: 0 or 1 greedy) is
        reported with :meth:`update_shadow`. The round's token is the target's own draw whatever the
        drafter proposed, so the loop stays lossless. Default False: every round with a budget verifies."""
        return False

    def update_shadow(self, nodes: int, chance: float) -> None:
        """A shadow round (:meth:`shadows`) whose drafter proposed ``nodes`` >= 1 nodes, one of the root's
        children accepted with probability ``chance`` had they been verified (a drafter that proposed
        nothing is reported by ``update(0, 0, 0)``, as in any round). Default: the plain round it was."""
        self.update(0, 0, 0)

    def plain_rounds(self, most: int) -> int:
        """Right after :meth:`next` gave 0: how many plain rounds in a row, this one included and at most
        ``most`` (the rounds the loop has left), the policy gives whatever those rounds bring (a plain
        round tells it nothing of the drafter). The loop then runs them without asking again and reports
        them with one :meth:`update_plain`. Default 1: ask every round."""
        return 1

    def update_plain(self, rounds: int) -> None:
        """``rounds`` plain rounds: as many ``update(0, 0, 0)`` (a policy may do it in one step)."""
        for _ in range(rounds):
            self.update(0, 0, 0)

    def describe(self) -> str:
        return type(self).__name__


class FixedBudget(BudgetPolicy):
    """``budget`` nodes every round (0 included: plain decoding through the tree loop)."""

    def __init__(self, budget: int) -> None:
        self.max_budget = check_int("budget", budget, low=0)

    def next(self) -> int:
        return self.max_budget

    def plain_rounds(self, most: int) -> int:
        return check_int("most", most, low=1) if self.max_budget == 0 else 1

    def update_plain(self, rounds: int) -> None:
        pass

    def describe(self) -> str:
        return f"fixed budget = {self.max_budget}"


class ChainPolicy(BudgetPolicy):
    """A draft-length policy (:class:`DraftPolicy`) as the loop's budget policy: a chain's budget is its
    length, 1 to ``max_gamma`` (a chain loop always drafts; the loop itself gives 0 when no token is
    left to draft). ``begin`` resets it; ``update`` tells it the round's drafts and accepted ones."""

    def __init__(self, policy: DraftPolicy) -> None:
        if not isinstance(policy, DraftPolicy):
            raise ValueError(f"policy must be a DraftPolicy; got {type(policy).__name__}")
        self.policy = policy
        self.max_budget = check_int("max_gamma", policy.max_gamma, low=1)

    def reset(self) -> None:
        self.policy.reset()

    def next(self) -> int:
        n = self.policy.next()
        if not is_int(n) or not 1 <= n <= self.max_budget:
            raise ValueError(
                f"{self.policy.describe()} asked for {n!r} drafts; it must give 1..{self.max_budget}"
            )
        return int(n)

    def update(self, nodes: int, depth: int, accepted: int) -> None:
        self.policy.update(nodes, accepted)

    def describe(self) -> str:
        return self.policy.describe()


def as_budget_policy(budget: int | BudgetPolicy) -> BudgetPolicy:
    """An integer budget as :class:`FixedBudget`; a budget policy as it is (a draft-length policy reaches
    the loop as :class:`ChainPolicy`, through :func:`specdec.engine.decoding.speculative`)."""
    if isinstance(budget, BudgetPolicy):
        return budget
    return FixedBudget(budget)


class DoNoHarm(BudgetPolicy):
    """Speculate only where it pays (issue 42, item 3): each round, the budget b among ``budgets``
    (0 always among them: a plain step) that maximises the predicted speed over plain decoding,
    Theorem 3.8's ratio for the round,

        R(b) = E[tokens | b] / (v(b + 1) + c(b)),     R(0) = 1,

    with ``verify[k - 1]`` = v(k), a verify call over k rows in plain steps (v(1) = 1: a plain step),
    and ``draft[b]`` = c(b), the draft time of a round at budget b in plain steps, both measured on the
    running machine before the generation (:func:`specdec.measure.draftcost`'s rule), and E[tokens | b] =
    1 + sum over depths d <= depth(b) of a_1 ... a_d, where a_d is the online estimate of the
    probability that the accepted path reaches depth d given it reached d - 1 (a round whose tree had
    depth >= d and whose accepted path reached d - 1 tried depth d, whether or not the accepted node had
    children there: the tree's shape at a budget is part of what the drafter gives; pooled over the
    rounds that tried depth d, with ``prior`` pseudo-rounds at ``prior_rate`` so that the first rounds do
    not decide on one sample). ``prior_rate`` is one rate for every depth, one per depth (e.g. the
    acceptance per depth measured on development prompts: :func:`specdec.measure.draftcost.calibrate_policy`),
    or a mapping temperature -> rates per depth: :meth:`begin` then takes the calibrated temperature
    nearest the generation's. Trees of different budgets differ in shape (a one-node round has one guess
    at depth 1, a tree of eight several): with ``budget_rates`` (each budget's calibrated rates) a
    budget's a_d is the pooled estimate read against that budget's rate (:meth:`rates`). depth(b) is
    ``depth[b]`` (the drafter's deepest tree at budget b; a chain's is b). Speculation must beat plain
    decoding by ``margin`` (R(b) >= 1 + margin) to be chosen.

    A drafter does not always propose what it is asked for: prompt lookup finds no match, a suffix tree no
    suffix. Two things are learnt from the rounds that asked (probes included): s, the share whose
    drafter proposed at least one node (pooled over budgets, shrunk towards the calibrated share,
    ``proposes``, by ``prior`` pseudo-rounds; 1 where none is given), and, where ``verify`` (v(k) for
    k = 1 .. max budget + 1, the verify curve in plain steps) is given, the verify cost of a round that
    proposed, the mean of v(n + 1) over the rounds at b whose drafter proposed n >= 1 nodes (shrunk towards
    the calibrated v by ``prior`` pseudo-rounds). A round asked at b then brings

        E[tokens | b] = 1 + s * g(b),     and costs (1 - s) * 1 + s * V(b) + c(b),

    with g(b) the accepted drafts of a round that proposed (the depth rates' sum above, or the measured
    tokens per round over the calibrated share, moved as acceptance moved) and V(b) its verify cost: a
    drafter that keeps coming back empty is priced at its draft call, and a full round at the verify
    curve's cost of its nodes, whatever a calibration's mix of empty and full rounds averaged.

    While it chooses 0 it learns nothing of the drafter, so after ``probe_every`` plain rounds in a row it
    drafts at the smallest positive budget instead (a probe; ``probe_every = 0``: never); a probe after
    which speculation still does not pay doubles the wait before the next (up to ``max_probe_every``),
    and a round that speculates by choice resets it. ``explore`` > 0 bounds what probing costs: a probe
    is predicted to lose (v + c) - E[tokens] plain steps at the smallest budget, plus ``catch_up`` for
    each committed position the drafter has not been told (the prompt's too, before its first draft), and
    it waits until ``explore`` times the plain rounds since the last draft covers that loss, so probes
    cost about ``explore`` of the time while speculation does not pay; a drafter whose catch-up per
    position costs ``explore`` or more is then never probed (0: ``probe_every`` alone sets the wait).
    With ``shadow``, a probe is a shadow round (:meth:`BudgetPolicy.shadows`): the drafter proposes at
    the smallest budget, the round is a plain step, and the chance that one of the root's children would
    have been accepted counts at depth 1 (tried once, passed by that chance) in place of a verified
    outcome; a probe then costs its draft (``explore``'s loss: ``probe_cost``, the shadow round's cost
    as the loop paid it in calibration, or c at the smallest budget where None), instead of its extra
    verify rows less the tokens they bring. A verified one-node round after a run of plain
    rounds cost the loop more than its price (a dev probe of the MLP speculator on development prompts:
    0.66 plain steps over a plain round, its target call 1.43 and its draft 0.23, against v(2) - 1 +
    c(1) = 0.40 priced), and a drafter whose acceptance on the prompts at hand falls below its
    calibration lost the difference on every probe.
    ``remember`` in [0, 1]: the share of the acceptance counts a new generation (:meth:`reset`) keeps
    from the earlier ones on the same policy object (0: each generation starts from the prior alone);
    earlier generations are past too, so the loop stays lossless. Its choice depends on the committed
    rounds only (counts, not times: the same seed gives the same output), so the loop stays lossless
    (:class:`BudgetPolicy`).
    """

    def __init__(
        self,
        budgets: dict[int, tuple[float, float, int]],
        *,
        prior: float = 2.0,
        prior_rate: float | Sequence[float] | Mapping[float, Sequence[float]] = 0.5,
        margin: float = 0.02,
        probe_every: int = 16,
        max_probe_every: int = 256,
        remember: float = 0.0,
        explore: float = 0.0,
        catch_up: float = 0.0,
        tokens: Mapping[float, Mapping[int, float]] | None = None,
        verify: Sequence[float] | None = None,
        proposes: Mapping[float, float] | None = None,
        budget_rates: Mapping[int, float | Sequence[float] | Mapping[float, Sequence[float]]] | None = None,
        shadow: bool = False,
        probe_cost: float | None = None,
    ) -> None:
        """``budgets``: b -> (v(b + 1), c(b), depth(b)) for each positive budget b tried (b = 0, a plain
        step, is (1, 0, 0) and is always there). ``catch_up``: what telling the drafter one position it
        has not seen costs, in plain steps (a probe after a run of plain rounds pays it for each).
        ``tokens``: temperature -> b -> the tokens per round measured at budget b (every round, those
        whose drafter proposed nothing too); when given, E[tokens | b] is that, scaled by how the online
        acceptance moved from the prior (the drafter's empty proposals stay as measured). ``verify``: v(k)
        for k = 1 .. at least the largest budget + 1 (v(1) = 1), the verify curve a round's actual nodes
        are priced by (None: every round at b costs the calibrated v(b + 1)); ``budgets``' v is then the
        verify cost of a round whose drafter proposed. ``proposes``: temperature -> the share of rounds
        whose drafter proposed at least one node, as calibrated (None: 1, a drafter that always proposes;
        ``tokens`` counts every round, so it is read over this share). ``budget_rates``: b -> the
        acceptance per depth a round at budget b had in calibration (as ``prior_rate``: one rate, one per
        depth, or per temperature), for drafters whose trees differ in shape between budgets (a one-node
        round has one guess at depth 1, a tree of eight several): the rounds' counts are then pooled
        relative to their own budget's rates (:meth:`rates`); None: every budget at ``prior_rate``."""
        from specdec.theory.checks import check_float

        if not isinstance(budgets, dict) or not budgets:
            raise ValueError(
                f"budgets must map positive budgets to (v(b + 1), c(b), depth(b)); got {budgets!r}"
            )
        self.costs: dict[int, tuple[float, float, int]] = {0: (1.0, 0.0, 0)}
        for b, entry in sorted(budgets.items()):
            check_int("a budget", b, low=1)
            if not isinstance(entry, (tuple, list)) or len(entry) != 3:
                raise ValueError(f"budgets[{b}] must be (v(b + 1), c(b), depth(b)); got {entry!r}")
            v, c, d = entry
            self.costs[b] = (
                check_float(f"budgets[{b}]'s v(b + 1)", v, low=0.0, open_low=True),
                check_float(f"budgets[{b}]'s c(b)", c, low=0.0),
                check_int(f"budgets[{b}]'s depth", d, low=1, high=b),
            )
        self.max_budget = max(self.costs)
        self.prior = check_float("prior", prior, low=0.0)
        self.margin = check_float("margin", margin, low=0.0)
        self.probe_every = check_int("probe_every", probe_every, low=0)
        self.max_probe_every = check_int("max_probe_every", max_probe_every, low=max(self.probe_every, 1))
        self.remember = check_float("remember", remember, low=0.0, high=1.0)
        self.explore = check_float("explore", explore, low=0.0, high=1.0)
        self.catch_up = check_float("catch_up", catch_up, low=0.0)
        if not isinstance(shadow, bool):
            raise ValueError(f"shadow must be True or False; got {shadow!r}")
        self.shadow = shadow
        self.probe_cost = None if probe_cost is None else check_float("probe_cost", probe_cost, low=0.0)
        self.measured: dict[float, dict[int, float]] = {}
        for t, per_b in (tokens or {}).items():
            if set(per_b) != set(self.costs) - {0}:
                raise ValueError(f"tokens[{t!r}] must give every budget {sorted(set(self.costs) - {0})}")
            self.measured[check_float("a tokens temperature", t, low=0.0)] = {
                int(b): check_float(f"tokens[{t!r}][{b}]", e, low=1.0) for b, e in per_b.items()
            }
        self.tokens_now: dict[int, float] | None = None
        self.verify: list[float] | None = None
        if verify is not None:
            if isinstance(verify, (str, bytes)) or not hasattr(verify, "__len__"):
                raise ValueError(
                    f"verify must be a sequence of v(k), k = 1 .. {self.max_budget + 1}; got {verify!r}"
                )
            if len(verify) < self.max_budget + 1:
                raise ValueError(
                    f"verify must give v(k) for k = 1 .. {self.max_budget + 1} (the largest budget + 1); "
                    f"got {len(verify)} values"
                )
            self.verify = [
                check_float(f"v({k + 1})", x, low=0.0, open_low=True) for k, x in enumerate(verify)
            ]
        depth = max(d for _, _, d in self.costs.values())

        def per_depth(rates: float | Sequence[float], name: str) -> list[float]:
            if isinstance(rates, Sequence) or hasattr(rates, "__len__"):  # one rate per depth
                if len(rates) != depth:
                    raise ValueError(
                        f"{name} must hold one rate per depth 1..{depth} (the deepest budget's); "
                        f"got {len(rates)}"
                    )
                return [check_float(f"{name}[{d}]", r, low=0.0, high=1.0) for d, r in enumerate(rates)]
            return [check_float(name, rates, low=0.0, high=1.0)] * depth

        def per_temperature(given: Any, name: str, what: str) -> dict[float, list[float]]:
            """Rates per depth per temperature from one rate, one per depth, or a mapping temperature ->
            either (``what``: the argument's name in the temperature's check)."""
            if not isinstance(given, Mapping):
                return {0.0: per_depth(given, name)}
            if not given:
                raise ValueError(f"{name} as a mapping must hold at least one temperature -> rates")
            return {
                check_float(f"a {what} temperature", t, low=0.0): per_depth(r, f"{name}[{t!r}]")
                for t, r in given.items()
            }

        self.priors = per_temperature(prior_rate, "prior_rate", "prior_rate")
        self.prior_rates = self.priors[min(self.priors)]
        self.budget_priors: dict[int, dict[float, list[float]]] = {}
        for b, given in (budget_rates or {}).items():
            if not is_int(b) or b not in self.costs or b == 0:
                raise ValueError(f"budget_rates names budget {b!r}; the budgets are {sorted(self.costs)[1:]}")
            self.budget_priors[b] = per_temperature(given, f"budget_rates[{b}]", "budget_rates")
        # b -> its rates at the generation's temperature (begin() takes the nearest; until then the lowest)
        self.budget_now = {b: rates[min(rates)] for b, rates in self.budget_priors.items()}
        self.tried: list[float] = [0.0] * depth  # rounds whose tree reached depth d + 1 (had a node there)
        self.passed: list[float] = [0.0] * depth  # of those, rounds whose accepted path reached depth d + 1
        self.expected: list[float] = [0.0] * depth  # of those, the sum of their budgets' rates at d + 1
        self.shares: dict[float, float] = {}
        for t, share in (proposes or {}).items():
            self.shares[check_float("a proposes temperature", t, low=0.0)] = check_float(
                f"proposes[{t!r}]", share, low=0.0, high=1.0
            )
        self.share_now = 1.0
        # measured tokens per round without a calibrated share (an earlier calibration's format) already
        # hold the drafter's empty rounds: the share is then not learnt again
        self.learn_share = not (self.measured and not self.shares)
        self.drafted = [0.0, 0.0]  # rounds that asked the drafter, and of those the ones it proposed in
        # per budget: rounds whose drafter proposed, and the sum of their verify costs v(nodes + 1)
        self.filled: dict[int, list[float]] = {b: [0.0, 0.0] for b in self.costs if b}
        self.reset()

    def begin(self, temperature: float, prompt_tokens: int = 0) -> None:
        """A generation at ``temperature``: the prior (and measured tokens per round) of the calibrated
        temperature nearest it (the lower on a tie), then :meth:`reset`; the prompt's positions but the
        first are not yet told to the drafter (the loop tells them when a round first drafts)."""
        from specdec.theory.checks import check_float

        t = check_float("temperature", temperature, low=0.0)
        check_int("prompt_tokens", prompt_tokens, low=0)

        def nearest(keys: Mapping[float, Any]) -> float:  # the lower on a tie
            return min(keys, key=lambda k: (abs(k - t), k))

        self.prior_rates = self.priors[nearest(self.priors)]
        self.budget_now = {b: rates[nearest(rates)] for b, rates in self.budget_priors.items()}
        if self.measured:
            self.tokens_now = self.measured[nearest(self.measured)]
        self.share_now = self.shares[nearest(self.shares)] if self.shares else 1.0
        self.reset()
        self.untold = max(prompt_tokens - 1, 0)

    def reset(self) -> None:
        self.tried = [self.remember * t for t in self.tried]
        self.passed = [self.remember * p for p in self.passed]
        self.expected = [self.remember * e for e in self.expected]
        self.drafted = [self.remember * x for x in self.drafted]
        self.filled = {b: [self.remember * x for x in row] for b, row in self.filled.items()}
        self.plain_run = 0
        self.wait = self.probe_every  # plain rounds in a row before the next probe
        self.probing = False
        self._choice: int | None = None  # the best budget for the current counts, once computed
        self._loss = 0.0  # a probe's predicted loss before catching up, in plain steps (``explore``)
        self._asked = 0  # the budget the last next() gave
        self.untold = 0  # committed positions the drafter has not been told (it catches up when asked)

    def budget_prior(self, budget: int) -> list[float]:
        """The calibrated acceptance per depth of a round at ``budget`` (``budget_rates`` at the generation's
        temperature; ``prior_rate``'s where none was given)."""
        return self.budget_now.get(budget, self.prior_rates)

    def rates(self, budget: int | None = None) -> list[float]:
        """a_d for d = 1 .. the deepest budget's depth (the smoothed online estimates): at depth d, the
        rounds that tried d pooled with ``prior`` pseudo-rounds at ``prior_rate``, (passed + prior r) /
        (tried + prior); where the policy has ``budget_rates``, a ``budget``'s is that times its calibrated
        rate (:meth:`budget_prior`: ``prior_rate``'s for a budget none was given for) over the mean
        calibrated rate of the rounds pooled (the pseudo-rounds at r), at most 1, so that a one-node
        probe's miss counts against a one-node round's rate, not a wide tree's (where that mean is 0, the
        pooled rate). Without ``budget_rates`` (or ``budget`` None) every budget has the pooled rate. A
        calibrated rate of 0 stays 0 whatever the rounds show: :func:`specdec.measure.draftcost.
        calibrate_policy` shrinks each budget's rates towards the rates of all its budgets' rounds."""
        out = []
        for d, (t, p, r) in enumerate(zip(self.tried, self.passed, self.prior_rates, strict=True)):
            pooled = (p + self.prior * r) / (t + self.prior) if t + self.prior > 0 else r
            if budget is not None and self.budget_now:
                mean = (self.expected[d] + self.prior * r) / (t + self.prior) if t + self.prior > 0 else r
                pooled = min(1.0, pooled * self.budget_prior(budget)[d] / mean) if mean > 0 else pooled
            out.append(pooled)
        return out

    def priced(self) -> dict[int, tuple[float, float]]:
        """(E[tokens | b], the round's cost) per budget, in plain steps, from the rounds so far: 1 + s g(b)
        and (1 - s) + s V(b) + c(b) (the class's docstring)."""

        def gain(rs: list[float], d: int) -> float:  # expected accepted drafts: sum of a_1 ... a_k
            total, reach = 0.0, 1.0
            for a in rs[:d]:
                reach *= a
                total += reach
            return total

        asked, proposed = self.drafted
        share = (proposed + self.prior * self.share_now) / (asked + self.prior) if asked else self.share_now
        out = {0: (1.0, 1.0)}
        for b, (v, c, d) in self.costs.items():
            if not b:
                continue
            g = gain(self.rates(b), d)
            base = gain(self.budget_prior(b), d)
            if self.tokens_now is not None and base > 0 and self.share_now > 0:
                # the measured tokens per round that proposed, moved as acceptance moved
                g = min((self.tokens_now[b] - 1.0) / self.share_now * g / base, float(d))
            n, total = self.filled[b]
            if self.verify is not None and n:  # the rounds that proposed, v as ``prior`` pseudo-rounds
                v = (total + self.prior * v) / (n + self.prior)
            out[b] = (1.0 + share * g, 1.0 - share + share * v + c)
        return out

    def predicted(self) -> dict[int, float]:
        """R(b) for every budget, from the rounds so far (:meth:`priced`)."""
        return {b: tokens / cost for b, (tokens, cost) in self.priced().items()}

    def next(self) -> int:
        if self._choice is None:  # the counts changed since the last choice (plain rounds change none)
            priced = self.priced()
            r = {b: tokens / cost for b, (tokens, cost) in priced.items()}
            best = max((b for b in r if b > 0), key=lambda b: (r[b], -b))
            self._choice = best if r[best] >= 1.0 + self.margin else 0
            smallest = min(b for b in r if b > 0)
            # a probe's predicted loss, in plain steps: a shadow probe's is its draft (``probe_cost``)
            self._loss = (
                (self.costs[smallest][1] if self.probe_cost is None else self.probe_cost)
                if self.shadow
                else priced[smallest][1] * (1.0 - r[smallest])
            )
        choice = self._choice
        self.probing = choice == 0 and self.probe_every > 0 and self.plain_run + 1 >= self.wait
        if self.probing and self.explore > 0:  # the share of the plain rounds since the last draft
            # covers the probe's loss, its catch-up on the untold positions included
            self.probing = (self.plain_run + 1) * self.explore >= self._loss + self.catch_up * self.untold
        if self.probing:
            choice = min(b for b in self.costs if b > 0)
        elif choice:
            self.wait = self.probe_every
        self._asked = choice
        return choice

    def shadows(self) -> bool:
        """Whether the round :meth:`next` just gave is a shadow probe (``shadow`` and a probe)."""
        return self.shadow and self.probing and self._asked > 0

    def update_shadow(self, nodes: int, chance: float) -> None:
        """A shadow probe's outcome (:meth:`BudgetPolicy.update_shadow`): depth 1 tried once and passed by
        ``chance`` (read against the smallest budget's calibrated rate); the drafter proposed; the wait
        before the next probe as after a verified probe. No verify cost is learnt (none was paid)."""
        from specdec.theory.checks import check_float

        check_int("nodes", nodes, low=1)
        check_float("chance", chance, low=0.0, high=1.0)
        if not self.shadows():
            raise ValueError("update_shadow reports a shadow probe: the round next() gave was not one")
        if nodes > self._asked:
            raise ValueError(f"nodes must be at most the budget asked ({self._asked}); got {nodes}")
        asked, self._asked, self.probing = self._asked, 0, False
        self.untold = 1  # the drafter was told everything before it proposed; the step's token is new
        if self.learn_share:
            self.drafted[0] += 1
            self.drafted[1] += 1
        self.plain_run = 0
        self._choice = None
        self.tried[0] += 1
        self.passed[0] += chance
        self.expected[0] += self.budget_prior(asked)[0]
        pays = max(v for b, v in self.predicted().items() if b > 0) >= 1.0 + self.margin
        self.wait = self.probe_every if pays else min(2 * self.wait, self.max_probe_every)

    def plain_rounds(self, most: int) -> int:
        """After :meth:`next` gave a plain round by choice (no probe): the rounds until the next probe, this
        one included, at most ``most``, each later round tested as :meth:`next` would test it, with the
        same floating-point expression (a plain round changes only the run's length and the positions not
        told to the drafter)."""
        check_int("most", most, low=1)
        if self._asked or self.probing or self._choice != 0:
            return 1
        if self.probe_every == 0:
            return most
        run, untold = self.plain_run, self.untold
        j = max(1, self.wait - run - 1)  # the first later round that may probe
        if not self.explore or j >= most:
            return min(j, most)
        while j < most:  # round j probes once the plain rounds since the last draft cover the probe's loss
            if (run + j + 1) * self.explore >= self._loss + self.catch_up * (untold + j):
                return j
            j += 1
        return most

    def update_plain(self, rounds: int) -> None:
        check_int("rounds", rounds, low=0)
        if rounds and (self._asked or self.probing):
            raise ValueError("update_plain reports plain rounds chosen by next(), not a probe or a draft")
        self.plain_run += rounds
        self.untold += rounds

    def update(self, nodes: int, depth: int, accepted: int) -> None:
        check_int("nodes", nodes, low=0)
        check_int("depth", depth, low=0, high=nodes)
        check_int("accepted", accepted, low=0, high=depth)
        if self._asked and nodes > self._asked:  # checked before anything changes
            raise ValueError(f"nodes must be at most the budget asked ({self._asked}); got {nodes}")
        probed, self.probing = self.probing, False
        asked, self._asked = self._asked, 0
        self.untold = accepted + 1 if asked else self.untold + 1  # a drafter asked has caught up
        if asked and self.learn_share:  # a round that asked the drafter: whether it proposed, and what
            # its nodes cost
            self.drafted[0] += 1
            if nodes:
                self.drafted[1] += 1
        if asked and nodes:
            self.filled[asked][0] += 1
            self.filled[asked][1] += self.verify[nodes] if self.verify is not None else 0.0
        if asked:
            self._choice = None
        if nodes == 0:  # nothing drafted: a plain step, or a drafter that proposed nothing
            if probed:  # an empty probe: wait again (longer) before the next
                self.plain_run = 0
                self.wait = min(2 * self.wait, self.max_probe_every)
            else:
                self.plain_run += 1
            return
        self.plain_run = 0
        self._choice = None
        mine = self.budget_prior(asked) if asked else self.prior_rates
        for d in range(min(depth, len(self.tried))):  # depth d + 1 of the tree
            if d > accepted:  # the accepted path stopped before depth d: d + 1 was not tried
                break
            self.tried[d] += 1
            self.passed[d] += d < accepted
            self.expected[d] += mine[d]
        if probed:  # wait longer before the next probe unless speculation now pays
            pays = max(v for b, v in self.predicted().items() if b > 0) >= 1.0 + self.margin
            self.wait = self.probe_every if pays else min(2 * self.wait, self.max_probe_every)

    def describe(self) -> str:
        return (
            f"do no harm over budgets {sorted(self.costs)} (margin {self.margin:g}, "
            f"probe every {self.probe_every}"
            + (f", explore {self.explore:g}, catch-up {self.catch_up:.3g}" if self.explore else "")
            + (", tokens per round as measured" if self.measured else "")
            + (", rounds priced by the verify curve" if self.verify is not None else "")
            + (
                f", shadow probes at {'c' if self.probe_cost is None else f'{self.probe_cost:.3g}'}"
                if self.shadow
                else ""
            )
            + ")"
        )
