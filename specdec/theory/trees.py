"""Draft trees: the shape every tree drafter proposes, every engine verifies and every verifier reads.

A draft tree of ``N`` nodes hangs below the *root*, the last committed token (the first input of a
verify call, as in the chain loop). Node ``i`` holds the drafted token ``tokens[i]`` and its parent
``parents[i]``: ``-1`` for a child of the root, else the index of an earlier node
(``-1 <= parents[i] < i``: nodes come in topological order). Siblings are ordered by index: the
verifier examines the children of a node in that order (SpecInfer's multi-candidate rule,
:mod:`specdec.theory.treeverify`). A chain of ``gamma`` drafts is the tree with
``parents = [-1, 0, 1, ..., gamma - 2]``.

A verify call feeds ``[root, *tokens]`` with the parents shifted by one (the root is node 0 of the
call, parent -1, each draft's parent ``parents[i] + 1``): see :meth:`DraftTree.call_parents`. Row 0
of the call's logits is p at the root (the law of the root's children), row ``i + 1`` is p at
node ``i`` (the law of its children).

:class:`TreeLayout` is the one layout of such a call that the engines read (Python's tree attention
and the C forwards' ``parents`` argument): rows in call order, ``parents[r]`` in ``[-1, r - 1]``, a
row's depth counted from 0 at the call's first row (the root: the slot after the cached prefix), so
that call row ``i + 1``'s depth is draft node ``i``'s depth (counted from 1 below the root). The C
forwards build the same depths and paths from the same ``parents`` (``lean_common.h``: ``tree_paths``).

Pure Python and numpy (the theory layer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specdec.theory.checks import is_int

__all__ = ["DraftTree", "TreeLayout", "chain_tree", "check_parents", "tree_layout"]


def check_parents(parents: Sequence[object], name: str = "parents") -> list[int]:
    """``parents`` as a list of ints, each in ``[-1, i - 1]`` (node ``i``'s parent comes before it);
    otherwise ValueError naming ``name``, the node and the valid range."""
    out: list[int] = []
    for i, parent in enumerate(parents):
        if not is_int(parent) or not -1 <= parent <= i - 1:
            raise ValueError(
                f"{name}[{i}] must be an integer in [-1, {i - 1}] (an earlier node or -1); got {parent!r}"
            )
        out.append(int(parent))
    return out


@dataclass(frozen=True)
class DraftTree:
    """Drafted tokens and their parents (``-1``: a child of the root); see the module docstring."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    depths: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __init__(self, tokens: Sequence[object], parents: Sequence[object]) -> None:
        if len(tokens) != len(parents):
            raise ValueError(
                f"tokens and parents must have one entry per node; got {len(tokens)} and {len(parents)}"
            )
        ids = []
        for i, token in enumerate(tokens):
            if not is_int(token) or token < 0:
                raise ValueError(f"tokens[{i}] must be an integer >= 0 (a token id); got {token!r}")
            ids.append(int(token))
        checked = check_parents(parents)
        depths: list[int] = []
        for parent in checked:
            depths.append(1 if parent < 0 else depths[parent] + 1)
        object.__setattr__(self, "tokens", tuple(ids))
        object.__setattr__(self, "parents", tuple(checked))
        object.__setattr__(self, "depths", tuple(depths))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depth(self) -> int:
        """The longest root-to-leaf path in drafts (0 for an empty tree)."""
        return max(self.depths, default=0)

    @property
    def is_chain(self) -> bool:
        """Whether every node is the child of the one before (a chain: one branch, depth = nodes)."""
        return all(parent == i - 1 for i, parent in enumerate(self.parents))

    def children(self, node: int) -> list[int]:
        """The children of ``node`` (``-1``: the root's), in sibling order."""
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def path(self, node: int) -> list[int]:
        """The nodes from the root's child down to ``node`` (inclusive)."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def call_parents(self) -> list[int]:
        """The parents of a verify call over ``[root, *tokens]``: ``[-1, parents[i] + 1 ...]``."""
        return [-1, *(parent + 1 for parent in self.parents)]

    def call_layout(self) -> TreeLayout:
        """The :class:`TreeLayout` of a verify call over ``[root, *tokens]``."""
        return tree_layout(self.call_parents(), len(self) + 1)

    def kept(self, keep: Sequence[bool]) -> list[int]:
        """The nodes that stay when those where ``keep`` is False are removed with their descendants
        (a node stays when it and its parent stay), in order."""
        if len(keep) != len(self):
            raise ValueError(f"keep must have one entry per node ({len(self)}); got {len(keep)}")
        alive: set[int] = {-1}
        for i, parent in enumerate(self.parents):
            if keep[i] and parent in alive:
                alive.add(i)
        return sorted(alive - {-1})

    def cut(self, keep: Sequence[bool]) -> DraftTree:
        """The tree of :meth:`kept`'s nodes (indices renumbered)."""
        nodes = self.kept(keep)
        new_index = {-1: -1, **{old: new for new, old in enumerate(nodes)}}
        return DraftTree([self.tokens[i] for i in nodes], [new_index[self.parents[i]] for i in nodes])


def chain_tree(tokens: Sequence[object]) -> DraftTree:
    """A chain of drafts as a tree: each token the child of the one before."""
    return DraftTree(tokens, list(range(-1, len(tokens) - 1)))


@dataclass(frozen=True)
class TreeLayout:
    """A checked tree call: ``parents`` (ints in [-1, r - 1]), ``depths`` (0 for a child of the cached
    prefix) and ``paths`` (each row's call indices, root-down, itself last)."""

    parents: tuple[int, ...]
    depths: tuple[int, ...]
    paths: tuple[tuple[int, ...], ...]

    def positions(self, start: int) -> list[int]:
        """The rotary positions of the rows in a call at ``start``: ``start`` + depth."""
        return [start + d for d in self.depths]

    def keys(self, start: int, row: int) -> list[int]:
        """The cache slots row ``row`` attends to, in order: the prefix ``0 .. start - 1``, then its path."""
        return [*range(start), *(start + i for i in self.paths[row])]


def tree_layout(parents: Sequence[object], k: int, name: str = "parents") -> TreeLayout:
    """``parents`` of a call over ``k`` rows, checked (ValueError naming ``name``, the row and the valid
    range: one integer per row, ``parents[r]`` in ``[-1, r - 1]``), with depths and paths. A tensor or
    array of integers is taken through its ``tolist``."""
    kind = getattr(parents, "dtype", None)
    if kind is not None and getattr(kind, "kind", "i") not in "iu":  # numpy: kind; torch: is_floating_point
        raise ValueError(f"{name} must hold integers; got an array of {kind}")
    if kind is not None and callable(getattr(parents, "is_floating_point", None)):
        if parents.is_floating_point() or parents.is_complex() or str(kind) == "torch.bool":
            raise ValueError(f"{name} must hold integers; got a tensor of {kind}")
    if hasattr(parents, "tolist"):
        parents = parents.tolist()
    if isinstance(parents, (str, bytes)) or not hasattr(parents, "__len__"):
        raise ValueError(f"{name} must be a sequence of integers (one per row); got {parents!r}")
    if len(parents) != k:
        raise ValueError(f"{name} must have one entry per node of the call ({k}); got {len(parents)}")
    checked = check_parents(list(parents), name)
    depths: list[int] = []
    paths: list[tuple[int, ...]] = []
    for r, parent in enumerate(checked):
        depths.append(0 if parent < 0 else depths[parent] + 1)
        paths.append((r,) if parent < 0 else (*paths[parent], r))
    return TreeLayout(tuple(checked), tuple(depths), tuple(paths))
