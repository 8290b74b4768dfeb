"""The plain step's draw in C (specdec.engine.draw.draw_at) gives sample's index, always."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from specdec.engine import draw, native
from specdec.theory.sampling import argmax, argmax_at, sample


class Fixed:
    """A generator stand-in whose uniforms are given."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


def needs_c() -> None:
    if not native.available("q4q8"):
        pytest.skip(f"the q4q8 library does not build here: {native.unavailable_reason('q4q8')}")


def spy_on_c(monkeypatch) -> list[int]:
    """The C draw wrapped: each call's row length is appended to the returned list."""
    calls: list[int] = []
    real = draw._sample_cdf()

    def spy(*args):
        calls.append(args[1])
        return real(*args)

    monkeypatch.setattr(draw, "_sample_cdf", lambda: spy)
    return calls


def rows(n: int = 30, width: int = 49_152) -> list[np.ndarray]:
    gen = np.random.default_rng(0)
    out = []
    for i in range(n):
        logits = torch.from_numpy((gen.standard_normal(width) * (1 + i % 7)).astype(np.float32))
        row = torch.softmax(logits, -1).numpy().copy()
        if i % 3 == 0:
            row[::5] = 0.0  # rows with zeros (warp's top-k / top-p leave them)
        out.append(row)
    return out


def c_draw(row: np.ndarray, u: float) -> tuple[int, float, int]:
    """The C draw's index, total and path (0: the blocked sum decided, 1: the rule as written)."""
    total, path = ctypes.c_double(), ctypes.c_int32(-1)
    idx = draw._sample_cdf()(row.ctypes.data, row.size, u, ctypes.byref(total), ctypes.byref(path))
    return int(idx), total.value, path.value


def rule(row: np.ndarray, u: float) -> int:
    """sample's index for the uniform u: the first i whose running float64 sum exceeds u times the total."""
    cdf = np.cumsum(row.astype(np.float64))
    return int(np.searchsorted(cdf, u * cdf[-1], side="right"))


def boundary_uniforms(row: np.ndarray, gen: np.random.Generator, n: int = 40) -> list[float]:
    """Uniforms that put u times the total on or next to the running sum at random entries, and at the
    entries where a sum in another order (numpy's pairwise) differs from it most: where a blocked sum
    could only decide by rounding."""
    cdf = np.cumsum(row.astype(np.float64))
    total = cdf[-1]
    pairwise = np.array([np.sum(row[: i + 1].astype(np.float64)) for i in range(0, row.size, 97)])
    apart = np.argsort(-np.abs(pairwise - cdf[::97]))[: n // 2] * 97
    out = []
    for i in [*gen.integers(0, row.size - 1, n // 2), *apart]:
        u = cdf[i] / total
        out += [u, np.nextafter(u, 0.0), np.nextafter(u, 1.0)]
    return [float(u) for u in out if 0.0 <= u < 1.0]


def test_the_c_draw_is_the_rules_index_on_either_path():
    """The C draw gives the running-sum rule's index (numpy's float64 cumsum, torch's: the same sums) for
    random uniforms and for uniforms on the boundaries between indices, where a sum in another order would
    pick a neighbour; the blocked sum decides most draws and hands those on a boundary to the rule as
    written (both paths taken); its total is positive exactly when the rule's is."""
    needs_c()
    gen = np.random.default_rng(11)
    paths = []
    for row in rows():
        cdf = np.cumsum(row.astype(np.float64))
        assert cdf[-1] == torch.cumsum(torch.from_numpy(row).double(), -1)[-1].item()
        for u in [*gen.random(20), *boundary_uniforms(row, gen)]:
            idx, total, path = c_draw(row, u)
            assert idx == rule(row, u), (u, idx)
            assert total > 0
            paths.append(path)
    assert 0 in paths and 1 in paths
    # the rows tell orders apart: a sum in another order differs from the running sum in its last bits
    assert any(
        float(np.sum(r.astype(np.float64))) != float(np.cumsum(r.astype(np.float64))[-1]) for r in rows()
    )


def test_the_c_draw_decides_rows_whose_last_block_takes_a_remainder():
    """Rows whose length is not a multiple of the block (256) nor of the vector lanes (16): the last
    block takes the remainder, summed partly in lanes and partly one by one (GPT-2's 50,257 entries,
    Qwen's 151,936, and one of 16 k + 7); the fast path decides their random draws, the rule's index."""
    needs_c()
    gen = np.random.default_rng(12)
    for width in (50_257, 151_936, 4_103):
        logits = torch.from_numpy((gen.standard_normal(width) * 4).astype(np.float32))
        row = torch.softmax(logits, -1).numpy().copy()
        row[-5:] = np.float32(0.05)  # mass in the remainder's one-by-one tail
        us = [float(u) for u in [*gen.random(40), 0.999999]]
        got = [c_draw(row, u) for u in us]
        assert [i for i, _, _ in got] == [rule(row, u) for u in us]
        assert {path for _, _, path in got} == {0}  # random draws: the blocked sum decided every one
        assert any(i >= width - 5 for i, _, _ in got)  # a draw landed in the one-by-one tail
        for u in boundary_uniforms(row, gen, 20):
            assert c_draw(row, u)[0] == rule(row, u), u
        tail_negative = row.copy()
        tail_negative[-1] = -1e-9  # in the last block (one by one where the row has a tail): flagged
        assert c_draw(tail_negative, 0.5)[::2] == (rule(tail_negative, 0.5), 1)


def test_the_c_draw_takes_the_rule_as_written_where_the_blocks_cannot_decide():
    """Short rows, negative, infinite or NaN terms, and a uniform outside [0, 1) go to the rule as
    written, whose index (or its 'none qualifies', the row's length) the C draw returns."""
    needs_c()
    row = rows(2)[1]
    short = row[:300].copy()
    negative, infinite, nan = row.copy(), row.copy(), row.copy()
    negative[1000], infinite[2000], nan[3000] = -1e-6, np.inf, np.nan
    assert c_draw(short, 0.3) == (rule(short, 0.3), np.cumsum(short.astype(np.float64))[-1], 1)
    assert c_draw(negative, 0.3)[::2] == (rule(negative, 0.3), 1)
    assert c_draw(infinite, 0.3)[0::2] == (row.size, 1)  # the total is infinite: u * inf, never exceeded
    assert c_draw(nan, 0.3)[0::2] == (row.size, 1)  # a NaN total: the caller refuses it
    assert c_draw(row, 1.0)[0::2] == (row.size, 1)  # u * total = total: none qualifies (the guard's case)
    assert c_draw(row, 0.3)[2] == 0 and c_draw(row, 0.3)[0] == rule(row, 0.3)


def test_draw_at_gives_samples_index_and_uses_one_uniform():
    needs_c()
    for i, row in enumerate(rows()):
        probs = torch.from_numpy(np.stack([row, row[::-1].copy()]))
        a, b = np.random.default_rng(i), np.random.default_rng(i)
        for which in (0, 1):
            for _ in range(20):
                assert draw.draw_at(probs, which, a) == sample(probs[which], b)
        assert a.random() == b.random()  # the same uniforms consumed


def test_a_uniform_on_a_boundary_takes_the_next_index():
    """The first index whose running sum exceeds u * total, strictly (numpy's side='right')."""
    needs_c()
    row = np.full((1, 4), 0.25, np.float32)
    assert draw.draw_at(row, 0, Fixed(0.5)) == sample(row[0], Fixed(0.5)) == 2
    assert draw.draw_at(row, 0, Fixed(0.0)) == sample(row[0], Fixed(0.0)) == 0
    zero_first = np.array([[0.0, 0.0, 1.0, 0.0]], np.float32)
    assert draw.draw_at(zero_first, 0, Fixed(0.0)) == 2  # an index of no mass is never drawn


def test_rows_without_mass_are_refused():
    needs_c()
    for bad in ([0.0, 0.0, 0.0], [0.5, float("nan"), 0.5]):
        with pytest.raises(ValueError, match="total mass is 0"):
            draw.draw_at(np.array([bad], np.float32), 0, np.random.default_rng(0))
        with pytest.raises(ValueError, match="total mass is 0"):
            sample(np.array(bad, np.float32), np.random.default_rng(0))


def test_other_rows_go_to_sample():
    """float64 rows, numpy or torch, and 1-D rows of a 2-D array: sample's own path, the same index."""
    row = rows(3)[1]
    for probs in (torch.from_numpy(np.stack([row]).astype(np.float64)), np.stack([row]).astype(np.float64)):
        a, b = np.random.default_rng(5), np.random.default_rng(5)
        assert draw.draw_at(probs, 0, a) == sample(probs[0], b)


def test_sample_reads_a_float32_tensor_as_numpy_with_torchs_index():
    """sample's float32 CPU tensor path (numpy's) gives the index of its torch path (a float64 tensor)."""
    for i, row in enumerate(rows(12)):
        t32 = torch.from_numpy(row)
        t64 = t32.double()  # torch's path: cumsum, searchsorted
        a, b = np.random.default_rng(i), np.random.default_rng(i)
        assert [sample(t32, a) for _ in range(30)] == [sample(t64, b) for _ in range(30)]


def test_argmax_at_is_argmax_of_the_row():
    x = torch.tensor([[0.0, 3.0, 3.0, 1.0], [float("nan"), 1.0, 2.0, 5.0], [1.0, 9.0, 0.0, 9.0]])
    for r in range(3):
        assert argmax_at(x, r) == int(argmax(x[r])) == int(argmax(x[r].numpy()))
    assert argmax_at(x.to(torch.bfloat16), 2) == 1  # torch's own path
    assert argmax_at(x.numpy(), 1) == 0  # a NaN counts as the largest


def test_float32_rows_go_to_c_and_the_rest_to_sample(monkeypatch):
    """The dispatch: a float32 row reaches the C draw; without the library every row goes to sample."""
    needs_c()
    row = np.stack([rows(2)[1]])
    calls = spy_on_c(monkeypatch)
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    assert draw.draw_at(torch.from_numpy(row), 0, a) == sample(row[0], b) and calls == [row.shape[1]]
    draw.draw_at(row.astype(np.float64), 0, a)  # float64: sample's path
    assert calls == [row.shape[1]]
    monkeypatch.setattr(draw, "_sample_cdf", lambda: None)  # no library here
    a, b = np.random.default_rng(4), np.random.default_rng(4)
    assert draw.draw_at(row, 0, a) == sample(row[0], b) and calls == [row.shape[1]]
    assert not draw.prepare_draw()


def test_sample_refuses_more_than_one_row():
    probs = np.full((2, 3), 1 / 3, np.float32)
    for given in (probs, torch.from_numpy(probs), torch.from_numpy(probs).double()):
        with pytest.raises(ValueError, match="one row"):
            sample(given, np.random.default_rng(0))


def test_float32_view_reads_in_place_or_refuses():
    from specdec.theory.sampling import float32_view

    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    view = float32_view(t)
    assert view is not None and view.base is not None and np.shares_memory(view, t.numpy())
    a = np.zeros(3, np.float32)
    assert float32_view(a) is a
    others = (t.double(), t.to(torch.bfloat16), t.clone().requires_grad_(), a.astype(np.float64), [0.0, 1.0])
    for other in others:
        assert float32_view(other) is None


def test_draw_row_gives_samples_index_in_c_and_refuses_more_than_one_row(monkeypatch):
    """draw_row (a speculative round's last draw): sample's index, one uniform, a float32 row to C (a spy)
    and anything else to sample; a 2-D row refused by name."""
    needs_c()
    calls = spy_on_c(monkeypatch)
    for i, row in enumerate(rows(10)):
        a, b = np.random.default_rng(i), np.random.default_rng(i)
        for given in (row, torch.from_numpy(row)):
            assert draw.draw_row(given, a) == sample(row, b)
        assert a.random() == b.random()
    assert calls == [rows(1)[0].size] * 20
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    assert draw.draw_row(rows(1)[0].astype(np.float64), a) == sample(rows(1)[0], b)  # sample's path
    assert len(calls) == 20
    with pytest.raises(ValueError, match="row must be one non-empty row"):
        draw.draw_row(np.stack(rows(2)), a)
