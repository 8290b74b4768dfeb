"""Tests of specdec.theory.sampling: Algorithm 1 on probability rows.

The statistical tests run many independent rounds of ``verify`` on a toy target whose
position-j distribution is the row p[j] (independent of the prefix), so the target's law of
the first gamma + 1 output tokens is the product of the rows. Each round's output is
completed to gamma + 1 tokens by sampling the missing positions from the target, which is
what the next rounds would do in law. A chi-square goodness-of-fit test against the exact
product law must not reject at level 1e-4 for the real implementation, and must reject for
each deliberately broken variant (seeds fixed, so the outcome is reproducible).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from specdec.theory import sampling
from specdec.theory.sampling import residual, sample, verify, verify_argmax, warp

P = np.array(
    [
        [0.50, 0.30, 0.15, 0.05],
        [0.10, 0.20, 0.30, 0.40],
        [0.25, 0.25, 0.40, 0.10],
    ]
)
Q = np.array(
    [
        [0.10, 0.60, 0.05, 0.25],
        [0.40, 0.00, 0.30, 0.30],
    ]
)
GAMMA = Q.shape[0]
N_ROUNDS = 30_000
LEVEL = 1e-4


def run_rounds(verify_fn, q=Q, n=N_ROUNDS, seed=1234, deterministic_draft=(1, 3)):
    """Counts of the completed (gamma + 1)-token outputs, and of accepted drafts per round."""
    rng = np.random.default_rng(seed)
    vocab = P.shape[1]
    counts = np.zeros((vocab,) * (GAMMA + 1))
    accepted = np.zeros(GAMMA + 1)
    for _ in range(n):
        if q is None:
            draft = list(deterministic_draft)
        else:
            draft = [int(rng.choice(vocab, p=q[i])) for i in range(GAMMA)]
        n_acc, nxt = verify_fn(P, q, draft, rng)
        out = draft[:n_acc] + [nxt]
        out += [int(rng.choice(vocab, p=P[j])) for j in range(len(out), GAMMA + 1)]
        counts[tuple(out)] += 1
        accepted[n_acc] += 1
    return counts, accepted


def product_law():
    law = np.ones((P.shape[1],) * (GAMMA + 1))
    for j in range(GAMMA + 1):
        shape = [1] * (GAMMA + 1)
        shape[j] = -1
        law = law * P[j].reshape(shape)
    return law


def gof_pvalue(counts, law):
    keep = law.ravel() > 0
    observed = counts.ravel()
    assert observed[~keep].sum() == 0, "a token with target probability 0 was emitted"
    expected = law.ravel()[keep] * observed.sum()
    return stats.chisquare(observed[keep], expected).pvalue


def accepted_law(q):
    """Exact law of A: position i accepts with probability beta_i = sum min(p_i, q_i)."""
    beta = [(np.minimum(P[i], q[i]).sum() if q is not None else P[i, (1, 3)[i]]) for i in range(GAMMA)]
    law, survive = [], 1.0
    for b in beta:
        law.append(survive * (1 - b))
        survive *= b
    return np.array(law + [survive])


@pytest.mark.parametrize("q", [Q, None], ids=["sampled-draft", "deterministic-draft"])
def test_output_law_equals_target(q):
    counts, accepted = run_rounds(verify, q=q)
    assert gof_pvalue(counts, product_law()) > LEVEL
    assert stats.chisquare(accepted, accepted_law(q) * accepted.sum()).pvalue > LEVEL


def broken_resample_from_p(p, q, draft, rng, lenience=1.0):
    """Rejection resamples from p instead of the residual max(0, p - q)."""
    original = sampling.residual
    sampling.residual = lambda p_row, q_row, lenience=1.0, token=None: p_row
    try:
        return verify(p, q, draft, rng)
    finally:
        sampling.residual = original


def broken_bonus_from_last_draft_row(p, q, draft, rng, lenience=1.0):
    """After a full accept, the bonus token is drawn from p[gamma - 1] instead of p[gamma]."""
    n, nxt = verify(p, q, draft, rng)
    if n == len(draft):
        nxt = sample(p[len(draft) - 1], rng)
    return n, nxt


def broken_no_residual_accept_anyway(p, q, draft, rng, lenience=1.0):
    """Dropping the residual: a rejected draft is emitted anyway (the round just stops)."""
    n, nxt = verify(p, q, draft, rng)
    if n < len(draft):
        nxt = draft[n]
    return n, nxt


def broken_reseeded_generator(p, q, draft, rng, lenience=1.0):
    """A fresh generator with the same seed in every round (the classic reseeding bug)."""
    return verify(p, q, draft, np.random.default_rng(0))


def broken_ratio_inverted(p, q, draft, rng, lenience=1.0):
    """Accept with min(1, q/p) instead of min(1, p/q)."""
    return verify(q_full_swap(p, q), q, draft, rng)


def q_full_swap(p, q):
    swapped = p.copy()
    swapped[: q.shape[0]] = q
    return swapped


@pytest.mark.parametrize(
    "broken",
    [
        broken_resample_from_p,
        broken_bonus_from_last_draft_row,
        broken_no_residual_accept_anyway,
        broken_reseeded_generator,
        broken_ratio_inverted,
    ],
)
def test_broken_variants_fail_the_same_test(broken):
    counts, _ = run_rounds(broken, n=10_000, seed=99)
    assert gof_pvalue(counts, product_law()) < LEVEL


def test_lenience_below_one_is_not_lossless_but_bounded():
    counts, _ = run_rounds(lambda p, q, d, r: verify(p, q, d, r, lenience=0.3), n=10_000)
    assert gof_pvalue(counts, product_law()) < LEVEL
    # Appendix A.5: no token becomes more than 1/l times as likely as under p.
    rng = np.random.default_rng(5)
    for _ in range(200):
        p = rng.dirichlet(np.ones(6) * 0.5)
        q = rng.dirichlet(np.ones(6) * 0.5)
        for lenience in (0.1, 0.5, 0.9):
            accept = np.minimum(q, p / lenience)
            out = accept + (1 - accept.sum()) * residual(p, q, lenience=lenience)
            assert out.sum() == pytest.approx(1.0)
            assert np.all(out <= p / lenience + 1e-12)


def test_first_token_law_exact_single_position():
    # One position (gamma = 1): P(output = x) = min(p, q) + (1 - alpha) residual = p, exactly.
    p, q = P[0], Q[0]
    alpha = np.minimum(p, q).sum()
    assert np.allclose(np.minimum(p, q) + (1 - alpha) * residual(p, q), p)


def test_zero_draft_probability_and_disjoint_support():
    p = np.array([[0.0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    rng = np.random.default_rng(0)
    # q gives the drafted token 0 mass but p does not: always accepted.
    q = np.array([[0.5, 0.0, 0.5]])
    assert all(verify(p, q, [1], rng)[0] == 1 for _ in range(200))
    # Disjoint support: always rejected, the residual is p itself; no NaNs anywhere.
    q = np.array([[1.0, 0.0, 0.0]])
    for _ in range(200):
        n, nxt = verify(p, q, [0], rng)
        assert n == 0 and nxt in (1, 2)
    assert np.allclose(residual(p[0], q[0]), p[0])


def test_zero_residual_returns_p():
    p = np.array([0.2, 0.8])
    assert np.allclose(residual(p, p.copy()), p)
    assert np.allclose(residual(np.array([0.0, 1.0]), None, token=1), [0.0, 1.0])
    assert not np.isnan(residual(p, p * 1.0000001 / 1.0000001)).any()


def test_greedy_is_exact_match_with_one_hot_rows():
    logits = np.array([[0.1, 2.0, 0.3], [1.0, 0.0, 0.5], [0.0, 0.0, 3.0]])
    p = warp(logits, temperature=0.0)
    rng = np.random.default_rng(0)
    assert verify(p, None, [1, 0], rng) == (2, 2)
    assert verify(p, None, [1, 2], rng) == (1, 0)
    assert verify(p, None, [0, 0], rng) == (0, 1)
    assert verify(p, warp(np.array([[0, 5.0, 0], [5.0, 0, 0]]), 0.0), [1, 0], rng) == (2, 2)


def test_verify_argmax_is_exact_match_at_lenience_one_and_the_papers_rule_below():
    """Appendix A.5, argmax case: keep x while p(x) >= l max p; the round's token is argmax p."""
    p = np.array(
        [
            [0.5, 0.3, 0.2],  # argmax 0; 1 has ratio 0.6, 2 has ratio 0.4
            [0.1, 0.6, 0.3],  # argmax 1; 2 has ratio 0.5
            [0.2, 0.2, 0.6],  # bonus row
        ]
    )
    assert verify_argmax(p, [0, 1]) == (2, 2)  # full accept, bonus = argmax of the last row
    assert verify_argmax(p, [1, 1]) == (0, 0)  # l = 1: only the argmax is kept
    assert verify_argmax(p, [1, 2], lenience=0.6) == (1, 1)  # 0.3 >= 0.6 * 0.5; 0.3 < 0.6 * 0.6
    assert verify_argmax(p, [1, 2], lenience=0.5) == (2, 2)
    assert verify_argmax(p, [2, 2], lenience=0.5) == (0, 0)  # 0.2 < 0.25
    assert verify_argmax(p, [2, 2], lenience=0.4) == (2, 2)
    tie = np.array([[0.4, 0.4, 0.2], [1.0, 0.0, 0.0]])
    assert verify_argmax(tie, [1]) == (0, 0)  # l = 1 is greedy: ties go to the smallest id
    onehot = warp(np.log(p), temperature=0.0)
    for draft in itertools.product(range(3), repeat=2):
        assert verify_argmax(p, list(draft)) == verify(onehot, None, list(draft), np.random.default_rng(0))
    with pytest.raises(ValueError, match="gamma \\+ 1 = 3 rows"):
        verify_argmax(p[:2], [0, 1])
    with pytest.raises(ValueError, match=r"lenience must be a finite number in \(0.0, 1.0\]; got"):
        verify_argmax(p, [0, 1], lenience=0.0)
    with pytest.raises(ValueError, match=r"draft token ids must lie in \[0, 3\)"):
        verify_argmax(p, [0, 3])


def test_torch_and_numpy_agree_for_the_same_seed():
    torch = pytest.importorskip("torch")
    rng_np, rng_t = np.random.default_rng(7), np.random.default_rng(7)
    for _ in range(300):
        draft = [int(rng_np.integers(4)), int(rng_np.integers(4))]
        rng_t.integers(4), rng_t.integers(4)
        a = verify(P, Q, draft, rng_np)
        b = verify(torch.tensor(P), torch.tensor(Q), torch.tensor(draft), rng_t)
        assert a == b


def test_sample_inverse_cdf():
    rng = np.random.default_rng(3)
    draws = [sample(np.array([0.0, 2.0, 0.0, 6.0, 0.0]), rng) for _ in range(4000)]
    assert set(draws) == {1, 3}
    assert np.mean(np.array(draws) == 3) == pytest.approx(0.75, abs=0.03)
    with pytest.raises(ValueError, match="mass"):
        sample(np.zeros(3), rng)


class _FixedUniform:
    """A generator whose uniforms are given: the draws at the top of the CDF are reachable."""

    def __init__(self, values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


def _sample_min_rule(row, u):
    """The rule sample() followed before it looked for the last positive index lazily."""
    cdf = np.cumsum(np.asarray(row, dtype=float))
    idx = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return min(idx, int(np.flatnonzero(np.asarray(row) > 0)[-1]))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_sample_equals_the_min_rule_and_never_draws_zero_mass(backend):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    top = np.nextafter(1.0, 0.0)  # the largest uniform below 1: the top of the CDF
    for trial in range(300):
        row = rng.random(40) * (rng.random(40) < 0.5)
        row[-int(rng.integers(1, 6)) :] = 0.0  # trailing zeros: past them lies no mass
        if not row.sum() > 0:
            row[3] = 0.25
        us = [float(rng.random()), top, 0.0]
        for u in us:
            arg = torch.tensor(row, dtype=torch.float32) if backend == "torch" else row
            if backend == "torch":
                expected = _sample_min_rule(arg.double().numpy(), u)
            else:
                expected = _sample_min_rule(row, u)
            got = sample(arg, _FixedUniform([u]))
            assert got == expected, (trial, u)
            assert row[got] > 0


def test_warp_temperature_top_k_top_p():
    logits = np.log(np.array([[0.5, 0.25, 0.15, 0.10]]))
    assert np.allclose(warp(logits, 1.0), [[0.5, 0.25, 0.15, 0.10]])
    assert np.allclose(warp(logits, 0.0), [[1, 0, 0, 0]])
    assert np.allclose(warp(logits, 1.0, top_k=2), [[2 / 3, 1 / 3, 0, 0]])
    # top-p keeps the smallest prefix whose mass reaches p, the crossing token included.
    assert np.allclose(warp(logits, 1.0, top_p=0.6), [[2 / 3, 1 / 3, 0, 0]])
    assert np.allclose(warp(logits, 1.0, top_p=0.5), [[1, 0, 0, 0]])
    sharp = warp(logits, 0.5)
    assert sharp[0, 0] > 0.5 and sharp.sum() == pytest.approx(1.0)


def test_warp_torch_matches_numpy():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    logits = rng.normal(size=(3, 50))
    for kwargs in [{}, {"temperature": 0.7}, {"top_k": 5}, {"top_p": 0.9}, {"temperature": 0.0}]:
        a = warp(logits, **kwargs)
        b = warp(torch.tensor(logits, dtype=torch.float64), **kwargs).double().numpy()
        assert np.allclose(a, b, atol=1e-6), kwargs


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: warp(np.zeros((1, 3)), temperature=-0.5), "temperature"),
        (lambda: warp(np.zeros((1, 3)), top_k=0), "top_k"),
        (lambda: warp(np.zeros((1, 3)), top_p=0.0), "top_p"),
        (lambda: warp(np.zeros((1, 3)), top_p=1.5), "top_p"),
        (lambda: verify(P, Q, [0], np.random.default_rng(0)), "gamma \\+ 1"),
        (lambda: verify(P, Q[:1], [0, 1], np.random.default_rng(0)), "q must have shape"),
        (lambda: verify(P, Q, [0, 9], np.random.default_rng(0)), "draft token ids"),
        (lambda: verify(P, Q, [0, 1], np.random.default_rng(0), lenience=0.0), "lenience"),
        (lambda: verify(P, Q, [0, 1], np.random.default_rng(0), lenience=1.5), "lenience"),
        (lambda: residual(P[0], None), "drafted token"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_every_output_cell_reachable():
    # Sanity of the harness itself: the product law has no zero cells here.
    assert all(product_law()[idx] > 0 for idx in itertools.product(range(4), repeat=GAMMA + 1))


def test_argmax_gives_torchs_indices_ties_to_the_first():
    """sampling.argmax reads a float32 CPU tensor with numpy: the same indices as torch's argmax(-1) on
    rows with ties at the top (the first wins), infinities, a NaN, one row and a 2-D block; other
    dtypes and numpy arrays go to their own argmax."""
    import torch

    from specdec.theory.sampling import argmax

    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 6, (64, 300), generator=g).float()  # many ties at the top
    rows[3, 7], rows[5, :] = float("inf"), float("-inf")
    rows[9, 10] = float("nan")
    rows[11, 4], rows[11, 2] = float("nan"), float("nan")  # two NaNs: the first
    rows[13, 8], rows[13, 20] = float("inf"), float("nan")  # a NaN beats +inf
    with torch.inference_mode():  # logits come out of the forward as inference tensors
        made = torch.randn(3, 1000, generator=g)
    for x in (rows, rows[0], rows[:, :1], torch.randn(5, 49152, generator=g), rows[::2, 1:], made):
        got = argmax(x)
        assert got.dtype == torch.int64 and torch.equal(got, x.argmax(-1))
    assert int(argmax(torch.tensor([1.0, 3.0, 3.0, 2.0]))) == 1
    assert torch.equal(argmax(rows.double()), rows.double().argmax(-1))
    assert argmax(np.array([[0.0, 2.0, 2.0]])).tolist() == [1]


def test_residual_on_numpy_rows_keeps_float32_and_leaves_its_inputs():
    """The numpy residual: max(p - l q, 0) normalised, float32 kept for float32 rows (as a tensor's), the
    same values as torch's to float32 rounding, integer weights made float, and p and q untouched."""
    import torch

    from specdec.theory.sampling import residual

    gen = np.random.default_rng(0)
    p = gen.dirichlet(np.ones(50)).astype(np.float32)
    q = gen.dirichlet(np.ones(50)).astype(np.float32)
    p0, q0 = p.copy(), q.copy()
    for lenience in (1.0, 0.6):
        r = residual(p, q, lenience)
        t = residual(torch.from_numpy(p), torch.from_numpy(q), lenience)
        assert r.dtype == np.float32 and np.allclose(r, t.numpy(), rtol=1e-6, atol=1e-9)
        assert np.array_equal(r, np.maximum(p - lenience * q, 0) / np.maximum(p - lenience * q, 0).sum())
        assert np.array_equal(p, p0) and np.array_equal(q, q0)
    point = residual(p, None, 1.0, token=3)
    assert point.dtype == np.float32 and point[3] == 0 and np.array_equal(p, p0)
    ints = residual(np.array([3, 1, 0]), np.array([1, 1, 0]))
    assert ints.dtype.kind == "f" and np.allclose(ints, [1.0, 0.0, 0.0])
