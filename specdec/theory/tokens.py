"""Comparing token lists: the longest common prefix and the first position where two differ.

Pure Python (no numpy, no torch): the KV cache's :meth:`specdec.engine.lm.Session.sync`, the GPU
record's greedy check, the benchmarks and Part IV's readers all compare generations with these.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["common_prefix_len", "first_divergence"]


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token-id sequences."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where two generations differ; ``None`` when they are identical.

    A generation that is a strict prefix of the other diverges where it ends. Any integer
    sequences (lists, tuples, numpy arrays) compare by value.
    """
    a, b = [int(x) for x in a], [int(x) for x in b]
    if a == b:
        return None
    return common_prefix_len(a, b)
