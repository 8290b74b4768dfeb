"""Lossless verification of a draft tree: the multi-candidate rule, and its exact output law.

A round drafts a tree (:class:`specdec.theory.trees.DraftTree`) below the root, the last
committed token, and the target scores every node in one call (tree attention: each node sees
the prefix and its own ancestors). :func:`verify_tree` then walks down from the root
(SpecInfer's multi-step speculative sampling, Miao et al. 2024, arXiv:2305.09781; the
without-replacement variant as in Yang et al. 2024, "Multi-candidate speculative decoding",
and Jeon et al. 2024, "Recursive speculative decoding"):

* at the current node, with residual target ``r`` (at first the target's row ``p`` for that
  node), examine its children in sibling order. Child ``i`` with token ``x`` is accepted with
  probability ``min(1, r(x) / q_i(x))`` (one uniform each; ``q_i(x) = 0``: accepted iff
  ``r(x) > 0``; a deterministic draft is the point mass ``q_i = delta_x``, accepted with
  probability ``r(x)``). On acceptance, move to that child: its own row of ``p`` becomes the new
  ``r``. On rejection, ``r <- norm(max(r - q_i, 0))`` and the next sibling is examined;
* when no child is accepted (or the node is a leaf), the round's next token is drawn from ``r``.

``q_i`` is the law node ``i`` was drawn from *given its ancestors and its earlier siblings*: a
drafter that draws siblings i.i.d. from one row passes that row for each; one that draws without
replacement passes the row with the earlier siblings' tokens zeroed and renormalised.

**Why the output has the target's law.** Claim: at a node with residual ``r``, whose remaining
children are ``i, i+1, ...``, the first token emitted below the node has law ``r``, whatever
``q_i`` is. By induction over the number of remaining children. None left: the token is drawn
from ``r``. Otherwise ``x ~ q_i`` and it is emitted through acceptance with probability
``q_i(y) min(1, r(y)/q_i(y)) = min(r(y), q_i(y))`` at ``y``; a rejection has probability
``Z = 1 - sum_y min(r(y), q_i(y)) = sum_y max(r(y) - q_i(y), 0)``. Given the rejection *and the
rejected token* (on which ``q_{i+1}`` may depend: without replacement it does), the rest of the
walk starts from ``r' = max(r - q_i, 0) / Z``, which does not depend on that token, so by the
induction hypothesis it emits a token of law ``r'``. In total ``min(r, q_i) + Z r' = r``. (If
``Z = 0`` a rejection has probability 0; floating point may still reach it, and
:func:`specdec.theory.sampling.residual` then keeps ``r``.) Starting at the root with
``r = p(. | prefix)``, the first emitted token has the target's law. Given that it is an
accepted child ``y``, the walk restarts at ``y`` with ``r = p(. | prefix, y)`` over ``y``'s
subtree, which was drafted given its ancestors only; the same claim, by induction over depth,
gives each further token the target's conditional law. A round that ends is followed by a
fresh round from the committed prefix, so the whole generation has the target's
autoregressive law. A chain (one child per node) is Algorithm 1 of Leviathan et al. (2023)
exactly, uniform for uniform (:func:`specdec.theory.sampling.verify`).

At temperature 0 the rows are one-hot and the rule is exact matching: :func:`verify_tree_greedy`
follows the first child, in sibling order, whose token is the row's argmax.

:func:`output_law` computes the exact law of one round's output for given rows by the same
recursion (no sampling); :func:`round_law` adds the draws of the tree itself (with
replacement, without replacement, or deterministic), and :func:`extend_law` continues every
output with the target's own law, so that a round's law can be compared with the target's
autoregressive law exactly.

Pure numpy (torch tensors are accepted duck-typed by :func:`verify_tree`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from specdec.theory.checks import check_array, check_float, check_int
from specdec.theory.sampling import float32_view, residual, sample
from specdec.theory.trees import DraftTree

__all__ = [
    "SAMPLINGS",
    "RowsOnDemand",
    "extend_law",
    "first_level_chance",
    "output_law",
    "round_law",
    "verify_tree",
    "verify_tree_greedy",
]

Array = Any  # numpy.ndarray or torch.Tensor

#: How :func:`round_law` draws the siblings of a node.
SAMPLINGS = ("with_replacement", "without_replacement", "deterministic")

#: Tolerance used to decide that a row of probabilities sums to one.
SUM_TOL = 1e-6


def _is_torch(x: object) -> bool:
    return type(x).__module__.startswith("torch")


def _to_float(x: Array) -> float:
    return float(x.item()) if hasattr(x, "item") else float(x)


def _check_tree(tree: object) -> DraftTree:
    if not isinstance(tree, DraftTree):
        raise ValueError(f"tree must be a specdec.theory.trees.DraftTree; got {type(tree).__name__}")
    return tree


class RowsOnDemand:
    """The rows of p, each made when first read: ``rows[i]`` is ``make(i)`` (one row, 1-D), kept for later
    reads; ``rows[a:b]`` stacks rows a .. b-1 (torch tensors by torch, anything else as numpy).
    ``shape`` is (n, vocab). For :func:`verify_tree`, which reads the root's row and the accepted nodes'
    rows only: a round's warp then costs the rows examined, not every node's (no value checks: ``make``
    is the caller's)."""

    def __init__(self, n: int, vocab: int, make: Callable[[int], Array]) -> None:
        check_int("n", n, low=1)
        check_int("vocab", vocab, low=1)
        if not callable(make):
            raise ValueError(f"make must be callable (row index) -> row; got {type(make).__name__}")
        self.shape = (n, vocab)
        self._make, self._rows = make, {}

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, i: int | slice) -> Array:
        if isinstance(i, slice):  # stacked as the rows are: tensors (on their device) by torch, else numpy
            rows = [self[j] for j in range(*i.indices(self.shape[0]))]
            if rows and _is_torch(rows[0]):
                import torch

                return torch.stack(rows)
            return np.stack([np.asarray(r) for r in rows])
        try:
            i = operator.index(i)  # a Python or numpy integer
        except TypeError:
            raise IndexError(f"row index must be an integer or a slice; got {i!r}") from None
        if not 0 <= i < self.shape[0]:
            raise IndexError(f"row index must lie in [0, {self.shape[0]}); got {i!r}")
        if i not in self._rows:
            self._rows[i] = self._make(i)
        return self._rows[i]

    @property
    def made(self) -> list[int]:
        """The rows made so far, in index order."""
        return sorted(self._rows)


def _check_rows(name: str, rows: Array, n_rows: int, vocab: int | None, what: str, sums: bool = True) -> None:
    shape = tuple(rows.shape) if hasattr(rows, "shape") else None
    if shape is None or len(shape) != 2 or shape[0] != n_rows or (vocab is not None and shape[1] != vocab):
        want = f"({n_rows}, {'V' if vocab is None else vocab})"
        raise ValueError(f"{name} must have shape {want} ({what}); got {shape}")
    if shape[1] == 0:
        raise ValueError(f"{name} must have at least one column (the vocabulary); got shape {shape}")
    if not _is_torch(rows) and not isinstance(rows, RowsOnDemand):
        arr = check_array(name, rows, low=0.0)
        totals = arr.sum(axis=1)
        if sums and np.any(np.abs(totals - 1.0) > SUM_TOL):
            raise ValueError(f"{name} rows must sum to 1 (within {SUM_TOL}); sums are {totals!r}")


def _check_inputs(p: Array, q: Array | None, tree: object, sums: bool = True) -> DraftTree:
    """Shapes, the tree's type and token ids; numpy rows also finite and >= 0 (and summing to 1 with
    ``sums``: float32 rows of a large vocabulary may miss 1 by more than the tolerance, so
    :func:`verify_tree`, which samples from unnormalised weights anyway, does not ask)."""
    tree = _check_tree(tree)
    n = len(tree)
    _check_rows("p", p, n + 1, None, "N + 1 rows: p at the root, then at each node", sums)
    vocab = int(p.shape[1])
    if q is not None:
        _check_rows("q", q, n, vocab, "one row per node, over p's vocabulary", sums)
    for i, token in enumerate(tree.tokens):
        if token >= vocab:
            raise ValueError(f"tree.tokens[{i}] must lie in [0, {vocab}) (p's vocabulary); got {token}")
    return tree


def _children(tree: DraftTree) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {-1: []}
    for i, parent in enumerate(tree.parents):
        kids.setdefault(i, [])
        kids[parent].append(i)
    return kids


def verify_tree(
    p: Array,
    q: Array | None,
    tree: DraftTree,
    rng: np.random.Generator,
    lenience: float = 1.0,
    draw: Callable[[Array, np.random.Generator], int] = sample,
) -> tuple[list[int], int]:
    """Verify a draft tree with the multi-candidate rule; lossless (see the module docstring).

    Parameters
    ----------
    p : (N + 1, V) target rows, already warped: row 0 is p at the root (the law of the root's
        children), row ``i + 1`` is p at node ``i``; or a :class:`RowsOnDemand` making them (the walk
        reads row 0 and the accepted nodes' rows only).
    q : (N, V) or None. ``q[i]`` is the law node ``i`` was drawn from given its parent and its
        earlier siblings (siblings drawn i.i.d. from one row pass that row for each; drawn
        without replacement, the row with the earlier siblings zeroed and renormalised).
        ``None``: deterministic drafts, each a point mass.
    tree : the :class:`~specdec.theory.trees.DraftTree` of the N drafts.
    rng : a numpy ``Generator``: one uniform per examined child, one for the next token.
    lenience : l in (0, 1] (Appendix A.5; 1, the default, is lossless): child ``i`` is accepted iff
        ``u l q_i(x) < r(x)`` and a rejection leaves ``norm(max(r - l q_i, 0))``. On a chain this is
        :func:`specdec.theory.sampling.verify` uniform for uniform (l < 1 is defined for chains only:
        :func:`specdec.engine.decoding.speculative`).
    draw : the rule of the last draw, ``draw(row, rng) -> index`` (default
        :func:`~specdec.theory.sampling.sample`); a replacement must draw by the same law from the
        row's weights with what ``rng`` gives (the engine's loop passes its C draw, the same index).

    Float32 CPU tensors are read as numpy in place (:func:`~specdec.theory.sampling.float32_view`) once
    their shapes are checked, so the walk's reads, residuals and draw run no torch operation (each
    cost ~20 us between two forwards of the C engine, where the weight stream leaves torch's code cold).

    Returns
    -------
    (path, next_token) : the accepted nodes, from a child of the root down (root excluded), and
    the token drawn after the last of them. The round emits ``[tree.tokens[i] for i in path]``
    then ``next_token``.
    """
    tree = _check_inputs(p, q, tree, sums=False)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator; got {type(rng).__name__}")
    check_float("lenience", lenience, low=0.0, high=1.0, open_low=True)
    if not callable(draw):
        raise ValueError(f"draw must be callable (row, rng) -> index; got {type(draw).__name__}")
    views = (_in_place(p), None if q is None else _in_place(q))
    if all(v is not None for v in views[: 1 if q is None else 2]):  # both read in place, or neither
        p, q = views
    kids = _children(tree)
    node, r, path = -1, p[0], []
    while True:
        for i in kids[node]:
            x = tree.tokens[i]
            q_x = 1.0 if q is None else _to_float(q[i, x])
            if rng.random() * lenience * q_x < _to_float(r[x]):
                path.append(i)
                node, r = i, p[i + 1]
                break
            r = residual(r, None if q is None else q[i], lenience, token=x)
        else:
            return path, int(draw(r, rng))


def _in_place(rows: Array) -> Array | None:
    """A float32 CPU tensor's numpy view (:func:`~specdec.theory.sampling.float32_view`); a numpy array or
    a RowsOnDemand itself; None for another tensor (then the walk stays on torch)."""
    if not _is_torch(rows):
        return rows
    return float32_view(rows)


def verify_tree_greedy(argmax_ids: Array, tree: DraftTree) -> tuple[list[int], int]:
    """Greedy tree verification (temperature 0): exact matching, no uniforms.

    ``argmax_ids`` holds the (N + 1,) argmax of the target's rows (row 0 at the root, row
    ``i + 1`` at node ``i``). From the root, follow the first child in sibling order whose token
    equals the current row's argmax; where none does, that argmax is the next token. Returns
    ``(path, next_token)`` like :func:`verify_tree`, which gives the same on one-hot rows.
    """
    tree = _check_tree(tree)
    ids = argmax_ids.tolist() if hasattr(argmax_ids, "tolist") else argmax_ids
    if not (isinstance(ids, list) and all(type(i) is int and i >= 0 for i in ids)):  # else the full check
        ids = check_array("argmax_ids", ids, low=0, integer=True)  # (13 us on five ids: a round's cost)
    shape = ids.shape if isinstance(ids, np.ndarray) else (len(ids),)
    if shape != (len(tree) + 1,):
        raise ValueError(
            f"argmax_ids must have shape ({len(tree) + 1},) (N + 1: the root, then each node); got {shape}"
        )
    kids = _children(tree)
    node, path = -1, []
    while True:
        want = int(ids[node + 1])
        match = next((i for i in kids[node] if tree.tokens[i] == want), None)
        if match is None:
            return path, want
        path.append(match)
        node = match


def first_level_chance(p_root: Array, q: Array | None, tree: DraftTree) -> float:
    """The probability that :func:`verify_tree` accepts one of the root's children, given the drafts:
    sum over the root's children i, in sibling order, of P(children before i rejected) x min(1, r_i(x_i) /
    q_i(x_i)), r_i the residual after the earlier ones (the same rule, no uniforms drawn). ``p_root``: p
    at the root (warped; row 0 of :func:`verify_tree`'s ``p``), ``q`` as there (None: deterministic
    drafts). What a shadow probe scores (:meth:`specdec.theory.policies.BudgetPolicy.shadows`): the
    chance the depth-1 rate counts in place of a 0 / 1 outcome, with the same mean (Corollary 3.6's
    alpha = sum min(p, q) for one child drawn from q)."""
    tree = _check_tree(tree)
    vocab = int(p_root.shape[-1])
    if len(p_root.shape) != 1:
        raise ValueError(f"p_root must be one row of p (shape (V,)); got shape {tuple(p_root.shape)}")
    if q is not None:
        _check_rows("q", q, len(tree), vocab, "one row per node, over p's vocabulary", sums=False)
    r, stay, total = p_root, 1.0, 0.0
    kids = _children(tree)[-1]
    for n, i in enumerate(kids):
        x = tree.tokens[i]
        if x >= vocab:
            raise ValueError(f"tree.tokens[{i}] must lie in [0, {vocab}) (p's vocabulary); got {x}")
        q_x = 1.0 if q is None else _to_float(q[i, x])
        a = (1.0 if _to_float(r[x]) > 0 else 0.0) if q_x == 0.0 else min(1.0, _to_float(r[x]) / q_x)
        total += stay * a
        stay *= 1.0 - a
        if stay <= 0.0 or n == len(kids) - 1:  # no residual needed after the last child
            break
        r = residual(r, None if q is None else q[i], 1.0, token=x)
    return min(total, 1.0)


def _acceptance(r: np.ndarray, q_row: np.ndarray | None, x: int) -> float:
    q_x = 1.0 if q_row is None else float(q_row[x])
    if q_x == 0.0:
        return 1.0 if r[x] > 0 else 0.0
    return min(1.0, float(r[x]) / q_x)


def output_law(p: Array, q: Array | None, tree: DraftTree) -> dict[tuple[int, ...], float]:
    """The exact law of one round's output under :func:`verify_tree`, for these rows and tree.

    Returns ``{emitted tokens: probability}``, the emitted tokens being the accepted path's
    tokens followed by the next token. Computed by recursion over the rule (acceptance
    probabilities and residuals), not by sampling; arguments as :func:`verify_tree` (numpy).
    """
    tree = _check_inputs(p, q, tree)
    p = np.asarray(p, dtype=float)
    q = None if q is None else np.asarray(q, dtype=float)
    kids = _children(tree)
    out: dict[tuple[int, ...], float] = {}

    def walk(node: int, r: np.ndarray, prefix: tuple[int, ...], weight: float) -> None:
        for i in kids[node]:
            x = tree.tokens[i]
            q_row = None if q is None else q[i]
            a = _acceptance(r, q_row, x)
            if a > 0.0:
                walk(i, p[i + 1], (*prefix, x), weight * a)
            weight *= 1.0 - a
            if weight == 0.0:
                return
            r = residual(r, q_row, token=x)
        r = r / r.sum()
        for y in np.flatnonzero(r > 0):
            key = (*prefix, int(y))
            out[key] = out.get(key, 0.0) + weight * float(r[y])

    walk(-1, p[0], (), 1.0)
    return out


def _row(fn: Callable[[tuple[int, ...]], Array], context: tuple[int, ...], name: str) -> np.ndarray:
    row = check_array(f"{name}{context}", fn(context), low=0.0)
    if row.ndim != 1 or row.size == 0 or abs(row.sum() - 1.0) > SUM_TOL:
        raise ValueError(f"{name}{context} must be a row of probabilities summing to 1; got {row!r}")
    return row


def round_law(
    target: Callable[[tuple[int, ...]], Array],
    draft: Callable[[tuple[int, ...]], Array],
    parents: Sequence[int],
    sampling: str = "with_replacement",
) -> dict[tuple[int, ...], float]:
    """The exact law of one round's output when the tree's tokens are drawn too.

    ``target(context)`` and ``draft(context)`` give the target's and the drafter's row after the
    tokens ``context`` (a tuple; ``()`` at the root); ``parents`` is the tree's shape (as
    :class:`~specdec.theory.trees.DraftTree`). Every node is drafted from ``draft`` at its path:

    * ``"with_replacement"``: siblings i.i.d. from the row (q_i is the row);
    * ``"without_replacement"``: each sibling from the row with the earlier siblings' tokens
      zeroed and renormalised (q_i is that row);
    * ``"deterministic"``: the j-th sibling is the row's j-th most probable token (ties to the
      smaller id), q = None.

    Every draft outcome is enumerated (V^N of them: keep the tree and vocabulary tiny) and
    weighted by its probability, then :func:`output_law` gives the verifier's law for it.
    """
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {SAMPLINGS}; got {sampling!r}")
    tree = DraftTree([0] * len(parents), parents)
    paths = [tuple(tree.path(i)) for i in range(len(tree))]
    vocab = _row(target, (), "target").size
    total: dict[tuple[int, ...], float] = {}

    def draw(i: int, tokens: list[int], q_rows: list[np.ndarray], weight: float) -> None:
        if i == len(tree):
            full = DraftTree(tokens, tree.parents)
            contexts = [()] + [tuple(tokens[j] for j in paths[k]) for k in range(len(tree))]
            p = np.stack([_row(target, ctx, "target") for ctx in contexts])
            q = None if sampling == "deterministic" else np.stack(q_rows).reshape(len(tree), vocab)
            for out, prob in output_law(p, q, full).items():
                total[out] = total.get(out, 0.0) + weight * prob
            return
        parent = tree.parents[i]
        context = () if parent < 0 else tuple(tokens[j] for j in paths[parent])
        row = _row(draft, context, "draft")
        if row.size != vocab:
            raise ValueError(f"draft{context} must have the target's vocabulary ({vocab}); got {row.size}")
        earlier = [tokens[j] for j in range(i) if tree.parents[j] == parent]
        if sampling == "deterministic":
            order = np.argsort(-row, kind="stable")
            if len(earlier) >= vocab:
                raise ValueError(f"node {i} is sibling {len(earlier) + 1}; the vocabulary has {vocab} tokens")
            draw(i + 1, [*tokens, int(order[len(earlier)])], q_rows, weight)
            return
        if sampling == "without_replacement":
            row = row.copy()
            row[earlier] = 0.0
            if row.sum() <= 0.0:
                if weight > 0.0:
                    raise ValueError(f"node {i}: draft{context} has no mass left without replacement")
                return
            row = row / row.sum()
        for x in np.flatnonzero(row > 0):
            draw(i + 1, [*tokens, int(x)], [*q_rows, row], weight * float(row[x]))

    draw(0, [], [], 1.0)
    return total


def extend_law(
    law: dict[tuple[int, ...], float], target: Callable[[tuple[int, ...]], Array], length: int
) -> dict[tuple[int, ...], float]:
    """The law of the first ``length`` tokens when each sequence of ``law`` is continued by the
    target's own law (``target(context)``, as in :func:`round_law`) and longer ones are cut.

    ``extend_law({(): 1.0}, target, length)`` is the target's autoregressive law; a round is
    lossless when ``extend_law(round_law(...), target, length)`` equals it, for every length.
    """
    n = check_int("length", length, low=0)
    out: dict[tuple[int, ...], float] = {}
    stack = [(seq[:n], prob) for seq, prob in law.items()]
    while stack:
        seq, prob = stack.pop()
        if len(seq) == n:
            out[seq] = out.get(seq, 0.0) + prob
            continue
        row = _row(target, seq, "target")
        stack.extend(((*seq, int(y)), prob * float(row[y])) for y in np.flatnonzero(row > 0))
    return out
