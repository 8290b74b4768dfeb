"""The plain step's draw in C (specdec.engine.draw.draw_at) is sample's rule, bit for bit."""

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


def test_the_c_running_sum_is_numpys_and_torchs_bit_for_bit():
    """The total the C draw scales u by is the last entry of numpy's float64 cumsum (and torch's): a sum
    in another order (pairwise, vectorised) would differ in its last bits on these rows."""
    needs_c()
    function = draw._sample_cdf()
    for row in rows():
        total = ctypes.c_double()
        function(row.ctypes.data, row.size, 0.5, ctypes.byref(total))
        cdf = np.cumsum(row.astype(np.float64))
        assert total.value == cdf[-1]
        assert total.value == torch.cumsum(torch.from_numpy(row).double(), -1)[-1].item()
    # the pairwise sum, for contrast: the test can tell orders apart on these rows
    assert any(
        float(np.sum(r.astype(np.float64))) != float(np.cumsum(r.astype(np.float64))[-1]) for r in rows()
    )


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
