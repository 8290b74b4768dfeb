"""Tree verification (specdec.theory.treeverify): the multi-candidate rule is lossless.

(a) exactly: every draft outcome and every acceptance enumerated, the law of the emitted tokens
equals the target's autoregressive law to 1e-12; (b) by sampling: chi-square tests pass for the
verifier and reject broken variants at a tiny p-value; (c) a chain is Algorithm 1, uniform for
uniform; greedy tree verification is the rule on one-hot rows; (d) bad inputs raise ValueError
naming the argument.
"""

from __future__ import annotations

import numpy as np
import pytest

from specdec.theory.chisquare import chi_square_pvalue
from specdec.theory.sampling import residual, sample, verify
from specdec.theory.trees import DraftTree, chain_tree
from specdec.theory.treeverify import (
    SAMPLINGS,
    RowsOnDemand,
    extend_law,
    output_law,
    round_law,
    verify_tree,
    verify_tree_greedy,
)


class Model:
    """A tiny autoregressive model: one random row per context, drawn once from a seeded generator."""

    def __init__(self, vocab: int, seed: int, concentration: float = 0.7) -> None:
        self.vocab, self.rows = vocab, {}
        self.rng = np.random.default_rng(seed)
        self.concentration = concentration

    def __call__(self, context: tuple[int, ...]) -> np.ndarray:
        if context not in self.rows:
            self.rows[context] = self.rng.dirichlet(np.full(self.vocab, self.concentration))
        return self.rows[context]


def max_difference(a: dict, b: dict) -> float:
    return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


# --------------------------------------------------------------------------- (a) exact enumeration
SHAPES = {
    "2x2, V=3": ([-1, -1, 0, 0, 1, 1], 3),  # depth 2, two children per node
    "3+2+1, V=4": ([-1, -1, -1, 0, 0, 1], 4),  # three children at the root
    "3x3 top, V=3": ([-1, -1, -1, 0, 0, 0], 3),  # three children: without replacement exhausts V
}


@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_round_has_the_targets_law_exactly(shape, sampling):
    parents, vocab = SHAPES[shape]
    target, draft = Model(vocab, seed=1), Model(vocab, seed=2)
    law = round_law(target, draft, parents, sampling)
    assert abs(sum(law.values()) - 1.0) < 1e-12
    assert max(map(len, law)) == 3  # some outcome accepts two drafts
    for length in (1, 2, 3):  # the first token, the first two, the first three
        want = {}  # the target's autoregressive law, by explicit products
        for seq in np.ndindex(*(vocab,) * length):
            want[seq] = float(np.prod([target(seq[:k])[seq[k]] for k in range(length)]))
        assert max_difference(extend_law(law, target, length), want) < 1e-12


def test_exact_enumeration_sees_a_wrong_q():
    """The exact check is not vacuous: drafting without replacement but telling the verifier the
    unrenormalised row (wrong q) changes the law by far more than 1e-12."""
    parents, vocab = [-1, -1, -1], 3
    target, draft = Model(vocab, seed=1), Model(vocab, seed=2)
    p = np.stack([target(())] + [target((x,)) for x in range(vocab)])
    q_row = draft(())
    law: dict = {}
    for tokens in [(a, b, c) for a in range(3) for b in range(3) for c in range(3) if len({a, b, c}) == 3]:
        weight, left = 1.0, q_row.copy()
        for x in tokens:
            weight *= left[x] / left.sum()
            left[x] = 0.0
        tree = DraftTree(list(tokens), parents)
        for out, prob in output_law(p[[0, *tokens]], np.stack([q_row] * 3), tree).items():
            law[out] = law.get(out, 0.0) + weight * prob
    want = {(y,): float(target(())[y]) for y in range(vocab)}
    assert max_difference(extend_law(law, target, 1), want) > 1e-3


# --------------------------------------------------------------------------- (b) chi-square by sampling
PARENTS = [-1, -1, -1, 0, 0, 1]  # three children at the root, two below the first, one below the second
VOCAB = 4
ROOT_P = np.array([0.1, 0.2, 0.3, 0.4])
ROOT_Q = np.array([0.55, 0.3, 0.1, 0.05])  # far from ROOT_P: siblings repeat the likely token


def broken_verify(p, q, tree, rng, bug):
    """verify_tree's rule with one deliberate bug."""
    kids = {-1: []} | {i: [] for i in range(len(tree))}
    for i, parent in enumerate(tree.parents):
        kids[parent].append(i)
    node, r, path = -1, p[0], []
    while True:
        for rank, i in enumerate(kids[node]):
            x = tree.tokens[i]
            q_x = 1.0 if q is None else q[i, x]
            test_row = p[node + 1] if bug == "p_for_later_siblings" and rank > 0 else r
            if rng.random() * q_x < test_row[x]:
                path.append(i)
                node, r = i, p[i + 1]
                break
            if bug != "no_residual_update":
                r = residual(r, None if q is None else q[i], token=x)
        else:
            return path, sample(r, rng)


def run_rounds(verifier, sampling, n_rounds, seed, wrong_q=False):
    """Counts of the first two emitted tokens (a round that emits one is continued by the target)."""
    target = Model(VOCAB, seed=3)
    target.rows[()] = ROOT_P
    draft = Model(VOCAB, seed=4, concentration=0.5)
    draft.rows[()] = ROOT_Q
    tree0 = DraftTree([0] * len(PARENTS), PARENTS)
    rng = np.random.default_rng(seed)
    counts = np.zeros((VOCAB, VOCAB))
    for _ in range(n_rounds):
        tokens, q_rows = [], []
        for i, parent in enumerate(PARENTS):
            context = () if parent < 0 else tuple(tokens[j] for j in tree0.path(parent))
            row = draft(context).copy()
            if sampling == "without_replacement":
                row[[tokens[j] for j in range(i) if PARENTS[j] == parent]] = 0.0
                row /= row.sum()
            tokens.append(sample(row, rng))
            q_rows.append(draft(context) if wrong_q else row)
        tree = DraftTree(tokens, PARENTS)
        p = np.stack(
            [target(())] + [target(tuple(tokens[j] for j in tree.path(i))) for i in range(len(tree))]
        )
        path, nxt = verifier(p, np.stack(q_rows), tree, rng)
        out = [tokens[i] for i in path] + [nxt]
        if len(out) == 1:
            out.append(sample(target(tuple(out)), rng))
        counts[out[0], out[1]] += 1
    law = np.array([[ROOT_P[a] * target((a,))[b] for b in range(VOCAB)] for a in range(VOCAB)])
    return chi_square_pvalue(counts, law)["pvalue"]


N_ROUNDS = 3000


@pytest.mark.parametrize("sampling", ["with_replacement", "without_replacement"])
def test_chi_square_passes_for_the_verifier(sampling):
    assert run_rounds(verify_tree, sampling, N_ROUNDS, seed=11) > 1e-3
    # the test's copy of the rule, without a bug, passes too: the failures below are the bugs'
    assert run_rounds(lambda *a: broken_verify(*a, bug=None), sampling, N_ROUNDS, seed=12) > 1e-3


@pytest.mark.parametrize("bug", ["no_residual_update", "p_for_later_siblings"])
def test_chi_square_rejects_a_broken_verifier(bug):
    assert run_rounds(lambda *a: broken_verify(*a, bug=bug), "with_replacement", N_ROUNDS, seed=13) < 1e-9


def test_chi_square_rejects_q_not_renormalised_without_replacement():
    assert run_rounds(verify_tree, "without_replacement", N_ROUNDS, seed=14, wrong_q=True) < 1e-9


# --------------------------------------------------------------------------- (c) chains and greedy
@pytest.mark.parametrize("lenience", [1.0, 0.6])
@pytest.mark.parametrize("deterministic", [False, True])
def test_a_chain_is_algorithm_1_uniform_for_uniform(deterministic, lenience):
    gen = np.random.default_rng(5)
    for seed in range(300):
        gamma, vocab = int(gen.integers(1, 6)), int(gen.integers(2, 6))
        p = gen.dirichlet(np.ones(vocab), size=gamma + 1)
        q = None if deterministic else gen.dirichlet(np.ones(vocab), size=gamma)
        draft = gen.integers(0, vocab, size=gamma)
        path, nxt = verify_tree(p, q, chain_tree(draft.tolist()), np.random.default_rng(seed), lenience)
        assert path == list(range(len(path)))
        assert (len(path), nxt) == verify(p, q, draft, np.random.default_rng(seed), lenience)


def test_greedy_follows_the_first_matching_child():
    # root -> 0:a, 1:b ; 0 -> 2:c, 3:d ; 3 -> 4:e
    tree = DraftTree([5, 7, 1, 2, 9], [-1, -1, 0, 0, 3])
    assert verify_tree_greedy(np.array([7, 0, 0, 0, 0, 0]), tree) == ([1], 0)
    assert verify_tree_greedy([5, 2, 8, 8, 9, 4], tree) == ([0, 3, 4], 4)
    assert verify_tree_greedy([5, 3, 8, 8, 9, 4], tree) == ([0], 3)
    assert verify_tree_greedy([6, 3, 8, 8, 9, 4], tree) == ([], 6)


def test_greedy_equals_the_rule_on_one_hot_rows():
    gen = np.random.default_rng(6)
    vocab, lengths = 3, []
    for seed in range(300):
        n = int(gen.integers(0, 9))
        parents = [int(gen.integers(-1, i)) for i in range(n)]
        argmax = gen.integers(0, vocab, size=n + 1)
        tokens = gen.integers(0, vocab, size=n)  # few tokens: duplicates among siblings, many matches
        tree = DraftTree(tokens.tolist(), parents)
        p = np.eye(vocab)[argmax]
        q = None if seed % 2 else gen.dirichlet(np.ones(vocab), size=n)
        got = verify_tree(p, q, tree, np.random.default_rng(seed))
        assert got == verify_tree_greedy(argmax, tree)
        lengths.append(len(got[0]))
    assert max(lengths) >= 3


def test_torch_rows_give_the_numpy_result():
    torch = pytest.importorskip("torch")
    gen = np.random.default_rng(7)
    tree = DraftTree([0, 1, 2, 0, 1], [-1, -1, 0, 0, 2])
    for seed in range(50):
        p = gen.dirichlet(np.ones(3), size=6)
        q = gen.dirichlet(np.ones(3), size=5)
        want = verify_tree(p, q, tree, np.random.default_rng(seed))
        got = verify_tree(torch.tensor(p), torch.tensor(q), tree, np.random.default_rng(seed))
        assert got == want


def test_float32_tensors_are_read_in_place_with_the_arrays_result(monkeypatch):
    """Float32 CPU tensors are walked as their numpy views (a spy on the residual sees numpy rows sharing
    the tensors' memory): the same path and token as the arrays. A float32 p with a float64 q stays on
    torch (both read in place, or neither)."""
    torch = pytest.importorskip("torch")
    from specdec.theory import treeverify

    seen = []
    real = treeverify.residual

    def spy(r, q_row, *args, **kwargs):
        seen.append((type(r), type(q_row), q_row))
        return real(r, q_row, *args, **kwargs)

    monkeypatch.setattr(treeverify, "residual", spy)
    gen = np.random.default_rng(8)
    tree = DraftTree([0, 1, 2, 0, 1], [-1, -1, 0, 0, 2])
    total = 0
    for seed in range(50):
        p = gen.dirichlet(np.ones(3), size=6).astype(np.float32)
        q = gen.dirichlet(np.ones(3), size=5).astype(np.float32)
        want = verify_tree(p, q, tree, np.random.default_rng(seed))
        qt = torch.from_numpy(q)
        seen.clear()
        got = verify_tree(torch.from_numpy(p), qt, tree, np.random.default_rng(seed))
        assert got == want
        assert all(a is np.ndarray and b is np.ndarray and np.shares_memory(c, q) for a, b, c in seen)
        rejections = len(seen)
        seen.clear()
        verify_tree(torch.from_numpy(p), qt.double(), tree, np.random.default_rng(seed))  # runs, on torch
        assert all(a is not np.ndarray and b is not np.ndarray for a, b, _ in seen)
        total += rejections
    assert total >= 20  # residuals were taken


def test_rows_on_demand_give_the_same_result_and_make_only_the_rows_read():
    """A RowsOnDemand p: the same path and token as the whole array, uniform for uniform, and only row 0
    and the accepted nodes' rows made (what a round's warp then costs): on a chain, every row when every
    draft is accepted (q = p), fewer when one is rejected."""
    gen = np.random.default_rng(9)
    tree = chain_tree([0, 1, 2, 0, 1, 2])
    made_all = made_fewer = 0
    for seed in range(200):
        p = gen.dirichlet(np.full(3, 0.5), size=7)
        q = p[:6].copy() if seed % 4 == 0 else gen.dirichlet(np.full(3, 0.5), size=6)  # q = p: all accepted
        asked: list[int] = []
        rows = RowsOnDemand(7, 3, lambda i, p=p, asked=asked: asked.append(i) or p[i])
        a, b = np.random.default_rng(seed), np.random.default_rng(seed)
        path, token = verify_tree(rows, q, tree, a)
        assert (path, token) == verify_tree(p, q, tree, b) and a.random() == b.random()
        assert rows.made == sorted(asked) == [0, *(i + 1 for i in path)]  # each made once
        made_all += len(asked) == 7
        made_fewer += len(asked) < 7
        assert np.array_equal(rows[: len(path) + 1], p[: len(path) + 1])  # a slice stacks (making the rest)
    assert made_all >= 50 and made_fewer >= 50


def test_the_last_draw_is_the_given_rule():
    """``draw`` makes the round's own token (a spy sees the residual row); anything but a callable is
    refused by name."""
    tree = DraftTree([0], [-1])
    p, q = np.array([[0.2, 0.8], [0.5, 0.5]]), np.array([[1.0, 0.0]])
    seen = []

    def spy(row, rng):
        seen.append(np.array(row))
        return sample(row, rng)

    a, b = np.random.default_rng(1), np.random.default_rng(1)
    for _ in range(20):
        assert verify_tree(p, q, tree, a, draw=spy) == verify_tree(p, q, tree, b)
    assert len(seen) == 20 and any(np.allclose(r, [0.0, 1.0]) for r in seen)  # the residual after a rejection
    with pytest.raises(ValueError, match="draw must be callable"):
        verify_tree(p, q, tree, a, draw=3)


def test_greedy_ids_as_a_list_or_an_array_give_one_result():
    tree = DraftTree([4, 5, 6], [-1, 0, 0])
    for ids in ([4, 6, 1, 2], np.array([4, 6, 1, 2]), (4, 6, 1, 2)):
        assert verify_tree_greedy(ids, tree) == ([0, 2], 2)  # ids[3]: the row of node 2


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: RowsOnDemand(0, 3, lambda i: i), "n must be"),
        (lambda: RowsOnDemand(2, 0, lambda i: i), "vocab must be"),
        (lambda: RowsOnDemand(2, 3, None), "make must be callable"),
        (lambda: RowsOnDemand(2, 3, lambda i: i)[2], r"row index must lie in \[0, 2\)"),
        (lambda: verify_tree(RowsOnDemand(2, 2, P.__getitem__), None, TREE, RNG), r"p must have shape \(3,"),
    ],
)
def test_bad_rows_on_demand_are_refused(call, match):
    with pytest.raises((ValueError, IndexError), match=match):
        call()


# --------------------------------------------------------------------------- (d) bad inputs
TREE = DraftTree([0, 1], [-1, 0])
P = np.full((3, 2), 0.5)
RNG = np.random.default_rng(0)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: verify_tree(P, None, ([0, 1], [-1, 0]), RNG), "tree must be"),
        (lambda: verify_tree(P[:2], None, TREE, RNG), r"p must have shape \(3, V\)"),
        (lambda: verify_tree(P[0], None, TREE, RNG), r"p must have shape"),
        (lambda: output_law(np.full((3, 2), 0.6), None, TREE), "p rows must sum to 1"),
        (lambda: output_law(P, np.full((2, 2), 0.6), TREE), "q rows must sum to 1"),
        (lambda: verify_tree(P, np.array([[0.5, np.nan]] * 2), TREE, RNG), "q must be"),
        (lambda: verify_tree(np.array([[1.5, -0.5]] * 3), None, TREE, RNG), "p must be"),
        (lambda: verify_tree(P, np.full((2, 3), 1 / 3), TREE, RNG), r"q must have shape \(2, 2\)"),
        (lambda: verify_tree(P, None, DraftTree([0, 2], [-1, 0]), RNG), r"tree.tokens\[1\] must lie in"),
        (lambda: verify_tree(P, None, TREE, 0), "rng must be"),
        (lambda: verify_tree_greedy([0, 1], TREE), r"argmax_ids must have shape \(3,\)"),
        (lambda: verify_tree_greedy([0, -1, 0], TREE), "argmax_ids must be"),
        (lambda: verify_tree_greedy([0, 1, 0], [-1, 0]), "tree must be"),
        (lambda: round_law(lambda c: P[0], lambda c: P[0], [-1], "sometimes"), "sampling must be"),
        (lambda: round_law(lambda c: P[0], lambda c: np.ones(3) / 3, [-1]), "draft"),
        (lambda: round_law(lambda c: P[0], lambda c: P[0], [0]), r"parents\[0\]"),
        (lambda: extend_law({(): 1.0}, lambda c: P[0], -1), "length must be"),
    ],
)
def test_bad_inputs_raise_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_rows_on_demand_stack_tensors_as_tensors():
    torch = pytest.importorskip("torch")
    rows = RowsOnDemand(3, 2, lambda i: torch.full((2,), float(i)))
    got = rows[1:3]
    assert isinstance(got, torch.Tensor) and got.tolist() == [[1.0, 1.0], [2.0, 2.0]] and rows.made == [1, 2]
    assert isinstance(RowsOnDemand(2, 2, lambda i: np.zeros(2))[:2], np.ndarray)
