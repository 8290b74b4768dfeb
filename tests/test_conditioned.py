"""Drafters conditioned on the target's features (issue 30): Medusa, the MLP speculator, EAGLE / EAGLE-2.

On tiny random Llamas: the loop hands each drafter the target's features of exactly the committed
positions (equal, bit for bit in q4q8, to one forward over the whole sequence); greedy decoding with
every family equals plain greedy decoding; sampling keeps the target's law (chi-square) and a drafter
that claims a wrong law for its nodes breaks it; the registry builds each kind; the training step runs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec.drafting.registry import DraftContext, build_drafter
from specdec.engine import leannative, native
from specdec.engine.decoding import autoregressive, speculative_tree
from specdec.engine.drafters import TreeProposal
from specdec.engine.lean import LeanLlama
from specdec.engine.lm import open_lm
from specdec.theory.chisquare import chi_square_pvalue
from specdec.theory.policies import BudgetPolicy
from specdec.theory.sampling import warp
from specdec.train.condnets import build_conditioned
from tests.tiny_models import VOCAB, tiny_llama

pytestmark = pytest.mark.skipif(not native.available("q4q8"), reason="needs the q4q8 C library")

MODES = ["float32", "q4q8"]
PROFILE = [[0.6, 0.2, 0.1], [0.5, 0.2, 0.1], [0.4, 0.2, 0.1]]
SPECS = ["medusa:m", "medusa:m,ranks=1", "mlp:s", "mlp:s,ranks=1", "eagle:e", "eagle:e,topk=3,depth=3"]


def _module(small, family: str, seed: int, scale: float = 0.3):
    card = {"name": family, "kind": family, "heads": 3, "stages": 3, "depth": 3,
            "hidden_size": small.config.hidden_size, "init_layer": small.config.num_hidden_layers - 1,
            "heldout_profile": {"hit": PROFILE}}  # fmt: skip
    module = build_conditioned(card, small, torch.arange(VOCAB))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # untrained but not degenerate: random weights of a modest scale
        for p in module.parameters():
            if p.requires_grad and p.ndim >= 2:
                p.add_(scale * torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
        # the frozen final norm is the drafter's own copy: not all ones, so that a norm applied twice, or
        # not at all, drafts other tokens than the module predicts
        module.frozen.norm.mul_(1.0 + 0.3 * torch.randn(module.frozen.norm.shape, generator=gen))
    return module, card


@pytest.fixture(scope="module")
def small():
    return tiny_llama(0, layers=2)


def _context(small, target, seed: int = 1) -> DraftContext:
    families = {"m": "medusa", "s": "mlp-speculator", "e": "eagle"}
    return DraftContext(target, load_conditioned=lambda name: _module(small, families[name], seed))


def _prompt(seed: int, n: int = 24) -> list[int]:
    return np.random.default_rng(seed).integers(0, VOCAB, n).tolist()


@pytest.mark.parametrize("mode", MODES)
def test_greedy_decoding_with_every_conditioned_drafter_equals_plain(small, mode):
    target = LeanLlama(small, mode, threads=1)
    context = _context(small, target)
    drafted = dict.fromkeys(SPECS, 0)
    for seed in range(3):
        prompt = _prompt(seed)
        plain = autoregressive(target, prompt, max_new_tokens=30)
        for spec in SPECS:
            gen = speculative_tree(target, build_drafter(spec, context), prompt, budget=6, max_new_tokens=30)
            assert gen.tokens == plain.tokens, (mode, spec, seed)
            drafted[spec] += gen.stats.drafted_tokens
    assert all(n > 0 for n in drafted.values()), drafted  # every drafter drafted


class EveryThird(BudgetPolicy):
    """Two plain rounds, then a round of 6 nodes, over and over: the loop keeps the plain rounds' features
    (views of the session's buffer) until the drafting round tells the drafter. Depends on its own past
    only, so lossless."""

    max_budget = 6

    def reset(self) -> None:
        self.rounds = 0

    def next(self) -> int:
        self.rounds += 1
        return 6 if self.rounds % 3 == 0 else 0

    def update(self, nodes: int, depth: int, accepted: int) -> None:
        pass


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("budget", [6, "every third"])
def test_the_loop_hands_the_drafter_the_features_of_the_committed_positions(small, mode, budget, monkeypatch):
    """Every pair (f_j, x_{j+1}) the drafter is told equals the chain forward's features at j, under a
    fixed budget and under a policy whose plain rounds' features wait in the loop for a drafting round."""
    target = LeanLlama(small, mode, threads=1)
    drafter = build_drafter("eagle:e,topk=3,depth=3", _context(small, target))
    seen: list[tuple[np.ndarray, list[int]]] = []
    original = type(drafter).extend

    def spy(self, features, next_ids):
        seen.append((np.array(features, copy=True), list(next_ids)))
        return original(self, features, next_ids)

    monkeypatch.setattr(type(drafter), "extend", spy)
    prompt = _prompt(5)
    policy = 6 if budget == 6 else EveryThird()
    gen = speculative_tree(target, drafter, prompt, budget=policy, max_new_tokens=20, temperature=1.0, seed=3)
    if budget != 6:
        assert sum(1 for d in gen.stats.drafted if d == 0) >= 10  # plain rounds whose features waited
    feats = np.concatenate([f for f, _ in seen])
    nexts = [t for _, ids in seen for t in ids]
    tokens = prompt + gen.tokens
    assert nexts == tokens[1 : 1 + len(nexts)]  # pairs (f_j, x_{j+1}) in order, none skipped
    session = open_lm(target)
    session.record_features = True
    session.forward(tokens[: len(nexts)])
    if mode == "q4q8":  # rows of tree calls equal the chain forward bit for bit
        assert np.array_equal(feats, session.features)
    else:
        np.testing.assert_allclose(feats, session.features, rtol=1e-4, atol=1e-4)


def _two_token_law(model: LeanLlama, prefix: list[int]) -> np.ndarray:
    p1 = warp(open_lm(model).forward(prefix, keep=1), temperature=1.0)[0].double()
    rows = torch.stack([open_lm(model).forward([*prefix, x], keep=1)[0] for x in range(VOCAB)])
    law = (p1[:, None] * warp(rows, temperature=1.0).double()).numpy()
    return law / law.sum()


def _counts(target, drafter, prefix, n: int = 400) -> np.ndarray:
    counts = np.zeros((VOCAB, VOCAB))
    for s in range(n):
        gen = speculative_tree(target, drafter, prefix, budget=6, max_new_tokens=2, temperature=1.0, seed=s)
        counts[gen.tokens[0], gen.tokens[1]] += 1
    return counts


@pytest.mark.parametrize("spec", ["medusa:m", "mlp:s", "eagle:e,topk=3,depth=3"])
def test_sampling_keeps_the_target_law_and_a_wrong_claimed_law_breaks_it(spec, monkeypatch):
    one = tiny_llama(0, layers=1)
    target = LeanLlama(one, "float32")
    drafter = build_drafter(spec, _context(one, target, seed=4))
    prefix = [36, 5, 17]
    law = _two_token_law(target, prefix)
    assert chi_square_pvalue(_counts(target, drafter, prefix), law)["pvalue"] > 1e-3
    # broken: the nodes are deterministic (point masses) but claim to be draws from a q that gave
    # them almost no mass; verification then accepts them far too often and the law is no longer p
    propose = type(drafter).propose_tree

    def claims_rare(self, prefix_ids, budget, warp_fn, rng):
        out = propose(self, prefix_ids, budget, warp_fn, rng)
        q = torch.full((len(out.tree), VOCAB), 1.0 / (VOCAB - 1))
        for i, token in enumerate(out.tree.tokens):
            q[i, token] = 1e-12
        return TreeProposal(out.tree, q / q.sum(1, keepdim=True), out.calls)

    monkeypatch.setattr(type(drafter), "propose_tree", claims_rare)
    assert chi_square_pvalue(_counts(target, drafter, prefix), law)["pvalue"] < 1e-3


def test_conditioned_drafters_refuse_a_target_without_features_and_bad_options(small):
    target = LeanLlama(small, "float32", threads=1)
    drafter = build_drafter("medusa:m", _context(small, target))
    with pytest.raises(ValueError, match="features"):
        speculative_tree(small, drafter, _prompt(0), budget=4, max_new_tokens=4)  # a Hugging Face target
    with pytest.raises(ValueError, match="needs DraftContext.load_conditioned"):
        build_drafter("medusa:m", DraftContext(target))
    with pytest.raises(ValueError, match="ranks"):
        build_drafter("medusa:m,ranks=0", _context(small, target))
    with pytest.raises(ValueError, match="needs a medusa"):
        build_drafter("medusa:e", _context(small, target))
    for spec in ("medusa", "eagle:e,topk=x", "mlp:s,branch=2"):  # no name; a bad option; an unknown one
        with pytest.raises(ValueError, match="drafter spec"):
            build_drafter(spec, _context(small, target))
    from specdec.drafting.registry import KINDS

    assert {KINDS[k].shape for k in ("medusa", "mlp", "eagle")} == {"tree"}
    with pytest.raises(ValueError, match="features"):
        drafter.extend(np.zeros((2, 32), np.float32), [1])


def test_an_eagle2_tree_is_closed_under_parents_and_within_budget(small):
    target = LeanLlama(small, "q4q8", threads=1)
    drafter = build_drafter("eagle:e,topk=3,depth=4", _context(small, target))
    session = open_lm(target)
    session.record_features = True
    prompt = _prompt(2)
    session.forward(prompt[:-1])
    drafter.start(prompt)
    drafter.extend(session.features, prompt[1:])
    for budget in (1, 2, 5, 9, 20):
        tree = drafter.propose_tree(prompt, budget, None, np.random.default_rng(0)).tree
        assert 1 <= len(tree) <= budget
        assert all(p < i for i, p in enumerate(tree.parents))
        assert max(tree.depths) <= 4
    top = leannative.topk(np.array([[1.0, 3.0, 3.0, 2.0]], np.float32), 3)[0]
    assert top.tolist() == [[1, 2, 3]]  # ties: the smaller id first


def test_training_labels_line_up_with_what_drafting_predicts(small):
    """Medusa head k and MLP stage n at position j are trained on x_{j+1+k} / x_{j+n+1} and on the
    target's law at j+k / j+n: the positions drafting asks them for (a round at m uses f_{m-1})."""
    from specdec.train.condtrain import CondData, _position_batch

    n, hidden = 40, small.config.hidden_size
    ids = np.arange(n, dtype=np.int64) % VOCAB
    srow = np.full(n, -1, dtype=np.int64)
    srow[9:39] = np.arange(30)  # prompt of 10 tokens: soft labels from position 9 (predicting x_10) on
    kept = torch.arange(VOCAB)
    top = (np.zeros((30, 32), np.int32), np.zeros((30, 32), np.float16))
    feats = np.zeros((n, hidden), np.float16)
    data = CondData(ids, feats, srow, np.array([[0, 10, n]]), *top, kept, kept.clone())
    j = data.positions("soft", 3, np.array([0]))
    assert j.min() == 8 and j.max() == n - 2 - 3  # soft labels at j+1 .. j+3 all exist
    for family in ("medusa", "mlp-speculator"):
        module, _ = _module(small, "medusa" if family == "medusa" else "mlp-speculator", 0)
        _, rows, hard = _position_batch(module, family, data, j, 3)
        for d in range(3):
            assert np.array_equal(hard[:, d], ids[j + 2 + d])  # x_{j+1+k}, k = d + 1
            assert np.array_equal(rows[:, d], srow[j + 1 + d])  # p(x_{j+k+1} | x_{<=j+k})
    assert data.positions("prompt", 3, np.array([0])).max() == 10 - 2 - 3  # labels inside the prompt


def _near_max(logits: torch.Tensor, index: int, tol: float = 0.02) -> bool:
    """``index`` is the argmax of ``logits`` up to ``tol`` of their range (int8 drafting vs float)."""
    top, low = float(logits.max()), float(logits.min())
    return float(logits[index]) >= top - tol * (top - low)


@pytest.mark.parametrize("family", ["medusa", "mlp-speculator", "eagle"])
def test_each_drafter_drafts_what_its_trained_module_predicts(small, family):
    """The drafting code (int8, numpy, the C engine) against the training code's module (float torch),
    as a chain of depth 3 after a prompt: each drafted token is the module's own top choice at that
    depth (up to int8 rounding), fed the same features and the drafter's own earlier tokens."""
    target = LeanLlama(small, "float32", threads=1)
    module, card = _module(small, family, 7, scale=3.0)  # large enough that every input matters
    if family == "mlp-speculator":  # the tiny model's embeddings are small: make the tokens count
        with torch.no_grad():
            module.w_emb.mul_(30.0)
    spec = {"medusa": "medusa:m,ranks=1", "mlp-speculator": "mlp:s,ranks=1", "eagle": "eagle:e"}[family]
    letter = {"medusa": "m", "mlp-speculator": "s", "eagle": "e"}[family]
    drafter = build_drafter(spec, DraftContext(target, load_conditioned=lambda name: (module, card)))
    assert letter in spec
    prompt = _prompt(9)
    session = open_lm(target)
    session.record_features = True
    session.forward(prompt[:-1])
    feats = torch.from_numpy(session.features.copy())
    drafter.start(prompt)
    drafter.extend(session.features, prompt[1:])
    tree = drafter.propose_tree(prompt, 3, None, np.random.default_rng(0)).tree
    assert list(tree.parents) == [-1, 0, 1]
    kept = module.frozen.kept
    tokens = tree.tokens
    with torch.no_grad():
        if family == "medusa":  # head d on f_{m-1} predicts x_{m+d}
            logits = module(feats[-1:])[0]
            rows = [logits[d] for d in range(3)]
        elif family == "mlp-speculator":  # stage n consumes the root, then the drafted tokens
            from specdec.train.condnets import rms_norm

            state, rows = rms_norm(feats[-1:], module.frozen.norm, module.frozen.eps), []
            for n, consumed in enumerate([prompt[-1], *tokens[:2]]):
                state, logits = module.stage(n, state, torch.tensor([consumed]))
                rows.append(logits[0])
        else:  # EAGLE: pairs (f_j, x_{j+1}), then its own g fed back with the drafted token
            f, nxt, rows = feats, torch.tensor(prompt[1:]), []
            for t in tokens:
                g, logits = module(f[None], nxt[None])
                rows.append(logits[0, -1])
                f, nxt = torch.cat([f, g[0, -1:]]), torch.cat([nxt, torch.tensor([t])])
    for d, (row, t) in enumerate(zip(rows, tokens, strict=True)):
        index = int((kept == t).nonzero()[0, 0])
        assert _near_max(row, index), (family, d)


@pytest.mark.parametrize("broken", [False, True])
def test_the_training_time_test_feeds_each_depth_what_decoding_would(small, broken, monkeypatch):
    """EAGLE-3's training-time test, step k row j: the draft layer over the true inputs of positions
    0 .. j-k+1 and then its own k-1 predictions, one plain causal forward (what the draft cache holds
    at depth k), computed independently; a mask that lets step 1 reach one position further fails."""
    from specdec.train import condtrain
    from specdec.train.condnets import prenorm_forward

    if broken:
        real = condtrain._ttt_mask

        def leaky(steps, valid):
            m = real(steps, valid)
            if steps == 1:  # step 1 is left alone: the leak is in the later steps' context
                return m
            w = valid.shape[1]
            i = torch.arange(w)
            m[:, :, (steps - 1) * w :, :w] |= (i[None, :] <= i[:, None] - steps + 2)[None, None]
            return m

        monkeypatch.setattr(condtrain, "_ttt_mask", leaky)
    n, hidden = 14, small.config.hidden_size
    gen = torch.Generator().manual_seed(3)
    ids = np.random.default_rng(2).integers(0, VOCAB, 2 * n).astype(np.int64)
    feats = (torch.randn(2 * n, hidden, generator=gen) * 0.5).numpy().astype(np.float16)
    srow = np.arange(2 * n, dtype=np.int64)
    kept = torch.arange(VOCAB)
    top = (np.zeros((2 * n, 32), np.int32), np.zeros((2 * n, 32), np.float16))
    seq = np.array([[0, 3, n], [n, 3, n + n - 2]])
    data = condtrain.CondData(ids, feats, srow, seq, *top, kept, kept.clone())
    module, _ = _module(small, "eagle", 0)
    with torch.no_grad():
        gs, outs, *_ = condtrain._eagle_batch(module, data, [0, 1], 384, 0.0, steps=3)
        f1 = torch.from_numpy(feats[None, : n - 1].astype(np.float32))
        one, _ = module(f1, torch.from_numpy(ids[None, 1:n]))
        assert torch.allclose(gs[0][0], one[0], atol=1e-5)  # step 1 is EAGLE's own pass
        f = torch.from_numpy(feats[: n - 1].astype(np.float32))
        nxt = torch.from_numpy(ids[1:n])
        x1 = module.inputs(f, nxt)
        worst = 0.0
        for k in (2, 3):
            for j in range(k - 1, n - 1):
                xs = [x1[: j - k + 2]]
                for m in range(2, k + 1):  # step m's input at row j-k+m: g_{m-1} of the row before
                    xs.append(module.inputs(gs[m - 2][0, j - k + m - 1][None], nxt[j - k + m][None]))
                x = torch.cat(xs)[None]
                pos = torch.arange(j + 1)[None]
                g, _ = prenorm_forward(module.model, inputs_embeds=x, position_ids=pos)
                worst = max(worst, float((g[0, -1] - gs[k - 1][0, j]).abs().max()))
    assert (worst > 1e-3) if broken else (worst < 1e-4), worst


def test_the_training_time_tests_passes_equal_one_forward_over_every_steps_rows(small):
    """_ttt_passes computes each step's rows once, against the earlier steps' kept keys; the reference is
    the formulation it replaced: pass k one forward of the one-layer model over steps 1 .. k laid end
    to end under _ttt_mask (earlier steps recomputed). Outputs and gradients agree (float32 rounding)."""
    from specdec.train import condtrain
    from specdec.train.condnets import prenorm_forward

    module, _ = _module(small, "eagle", 0)
    gen = torch.Generator().manual_seed(5)
    batch, width, hidden, steps = 2, 11, small.config.hidden_size, 3
    feats = torch.randn(batch, width, hidden, generator=gen) * 0.5
    nxt = torch.randint(0, VOCAB, (batch, width), generator=gen)
    valid = torch.ones(batch, width, dtype=torch.long)
    valid[1, 8:] = 0  # a shorter second sequence: padding never seen

    def reference():
        xs = [module.inputs(feats, nxt)]
        positions = torch.arange(width).expand(batch, -1)
        gs, outs = [], []
        for k in range(1, steps + 1):
            if k > 1:
                prev = torch.cat([torch.zeros_like(gs[-1][:, :1]), gs[-1][:, :-1]], 1)
                xs.append(module.inputs(prev, nxt))
            g_all, normed = prenorm_forward(module.model, inputs_embeds=torch.cat(xs, 1),
                                            attention_mask=condtrain._ttt_mask(k, valid),
                                            position_ids=positions.repeat(1, k))  # fmt: skip
            gs.append(g_all[:, -width:])
            outs.append(normed[:, -width:] @ module.frozen.head.T)
        return gs, outs

    def loss_and_grads(run):
        module.zero_grad(set_to_none=True)
        gs, outs = run()
        real = valid.bool()
        pairs = zip(gs, outs, strict=True)
        loss = sum((g[real] ** 2).mean() + o[real].logsumexp(-1).mean() for g, o in pairs)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
        return gs, outs, grads

    want = loss_and_grads(reference)
    got = loss_and_grads(lambda: condtrain._ttt_passes(module, module.inputs(feats, nxt), nxt, valid, steps))
    real = valid.bool()
    for a, b in zip(want[0] + want[1], got[0] + got[1], strict=True):
        assert torch.allclose(a[real], b[real], atol=1e-4, rtol=1e-4), float((a[real] - b[real]).abs().max())
    assert want[2].keys() == got[2].keys() and want[2]
    for name in want[2]:
        assert torch.allclose(want[2][name], got[2][name], atol=1e-4, rtol=1e-3), name


def _tiny_gen_data(folder, small, sequences: int = 24, seed: int = 0) -> None:
    """One gen-data shard of random sequences with top-32 soft labels, and its features file."""
    from specdec.train.condtrain import _save_features
    from specdec.train.shards import write_shard

    rng = np.random.default_rng(seed)
    rows, total = [], 0
    for _ in range(sequences):
        prompt, resp = rng.integers(0, VOCAB, 6).tolist(), rng.integers(0, VOCAB, 10).tolist()
        top = np.stack([rng.permutation(VOCAB)[:32] for _ in resp])
        logp = np.log(rng.dirichlet(np.ones(32), size=len(resp)))
        rows.append((prompt, resp, top, logp))
        total += len(prompt) + len(resp)
    folder.mkdir(parents=True)
    write_shard(folder / "shard-00000.npz", rows)
    feats = rng.standard_normal((total, small.config.hidden_size)).astype(np.float16)
    _save_features(folder / "shard-00000.npz", feats)


@pytest.mark.parametrize("family", ["eagle", "mlp-speculator"])
def test_a_run_stopped_and_resumed_trains_what_an_uninterrupted_run_does(
    small, family, tmp_path, monkeypatch
):
    """Training resumes across sessions (issue 42): a run stopped after a checkpoint and rerun with the
    same command ends with the same weights, bit for bit, as one run that never stopped (numpy's draws
    are the step's own, torch's generator and the optimizer come back from the checkpoint)."""
    from specdec.train import condtrain

    _tiny_gen_data(tmp_path / "data", small)
    kw = dict(family=family, steps=6, depth=3, kept_size=VOCAB, batch=128, ttt=2 if family == "eagle" else 1,
              out_root=tmp_path / "out", progress=False, folders=[str(tmp_path / "data")])  # fmt: skip
    torch.manual_seed(123)  # the caller's generator state does not matter: training seeds its own
    condtrain.train_conditioned(small, name="straight", work_root=tmp_path / "w1", **kw)

    class Stop(Exception):
        pass

    real_save, clock = condtrain._save_checkpoint, iter(range(0, 10**6, 61))
    saves = []

    def save_then_stop(*args):
        real_save(*args)
        saves.append(args[-1]["step"])
        if args[-1]["step"] == 3:
            raise Stop

    with monkeypatch.context() as m:  # a checkpoint every step (61 s apart), killed after step 3's
        m.setattr(condtrain, "_save_checkpoint", save_then_stop)
        m.setattr(condtrain.time, "perf_counter", lambda: float(next(clock)))
        with pytest.raises(Stop):
            condtrain.train_conditioned(small, name="resumed", work_root=tmp_path / "w2", **kw)
    assert saves == [1, 2, 3]
    torch.manual_seed(999)
    card = condtrain.train_conditioned(small, name="resumed", work_root=tmp_path / "w2", **kw)
    straight = (tmp_path / "out" / "straight" / "weights.safetensors").read_bytes()
    assert (tmp_path / "out" / "resumed" / "weights.safetensors").read_bytes() == straight
    assert card["steps"] == 6 and [h["step"] for h in card["heldout_curve"]] == [1, 2, 3, 4, 5]


def test_draft_work_counts_each_network_of_a_drafter_once(small):
    """The arithmetic floor's per-row work (issue 44, item 2), against counts by hand from the shapes."""
    from specdec.drafting.hybrid import HybridDrafter
    from specdec.drafting.suffix import SuffixDecodingDrafter
    from specdec.engine.drafters import ChainTree, PromptLookupDrafter
    from specdec.measure.draftcost import Q8_BYTES_PER_WEIGHT, draft_work
    from specdec.measure.verifykernels import model_counts

    target = LeanLlama(small, "q4q8", threads=1)
    context = _context(small, target)
    h = small.config.hidden_size
    medusa = build_drafter("medusa:m", context)
    head = VOCAB * h  # the kept vocabulary is every token here
    assert draft_work(medusa)["macs"] == head + 3 * h * h  # the kept head and three heads of h x h
    assert draft_work(medusa)["weight_bytes"] == pytest.approx((head + 3 * h * h) * Q8_BYTES_PER_WEIGHT)
    eagle = build_drafter("eagle:e,topk=3,depth=3", context)
    assert eagle.head is None  # EAGLE's head is its lean layer's own: no second copy
    layer = model_counts(eagle.layer)["macs"]
    assert draft_work(eagle)["macs"] == layer + h * 2 * h  # the layer (its head included) and fc
    # nested drafters are walked, the same network counted once, copying drafters do no arithmetic
    assert draft_work(HybridDrafter(SuffixDecodingDrafter(), eagle))["macs"] == draft_work(eagle)["macs"]
    assert draft_work(ChainTree(PromptLookupDrafter()))["macs"] == 0
    assert draft_work(SuffixDecodingDrafter())["parts"] == []


def test_the_training_programs_make_features_and_a_drafter_whose_card_keeps_its_command(
    small, tmp_path, monkeypatch, capsys
):
    """``specdec run cond-features`` writes the features a shard lacks (a rerun writes none), ``cond-train``
    trains from them, resumably under data/cond-train/<name>, and its card keeps the program's command;
    ``self-features`` hands its options to :func:`specdec.train.condtrain.self_features`."""
    import json
    import shlex

    from specdec.cli.app import main
    from specdec.experiments import training
    from specdec.train import condnets, condtrain

    assert training.FAMILIES == condnets.FAMILIES  # the program's copy (its module imports no torch)
    loaded = type("Loaded", (), {"model": small, "tokenizer": None})()
    monkeypatch.setattr(training, "_target", lambda dtype, threads: loaded)
    monkeypatch.chdir(tmp_path)  # the checkpoints go under data/cond-train/
    _tiny_gen_data(tmp_path / "data", small)
    feats = tmp_path / "data" / "feat-00000.npy"
    feats.unlink()
    assert main(["run", "cond-features", "--data", str(tmp_path / "data"), "--threads", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == {"written": 1}
    shard = np.load(tmp_path / "data" / "shard-00000.npz")
    assert np.load(feats).shape == (len(shard["ids"]), small.config.hidden_size)
    assert main(["run", "cond-features", "--data", str(tmp_path / "data"), "--threads", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == {"written": 0}

    argv = ["cond-train", "--family", "mlp-speculator", "--draft-name", "mlp-t",
            "--data", str(tmp_path / "data"), "--steps", "2", "--depth", "3", "--kept", str(VOCAB),
            "--batch", "64", "--threads", "1", "--out-root", str(tmp_path / "out")]  # fmt: skip
    assert main(["run", *argv]) == 0
    card = json.loads((tmp_path / "out" / "mlp-t" / "card.json").read_text())
    assert card["command"] == shlex.join(["specdec", "run", *argv]) and card["steps"] == 2
    assert (tmp_path / "data" / "cond-train" / "mlp-t" / "ckpt.pt").exists()

    asked = []
    monkeypatch.setattr(condtrain, "self_features", lambda *a, **k: asked.append((a[1:], k)) or 3)
    assert main(["run", "self-features", "--self-data", "sd", "--out", "o", "--shards", "2"]) == 0
    assert asked == [(("sd", "o"), {"threads": 2, "shards": 2})]
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {"written": 3}
    assert main(["run", "cond-train", "--family", "medusa", "--ttt", "2"]) == 2
    assert "--ttt (the training-time test's steps) is EAGLE's" in capsys.readouterr().err


def test_unseen_heldout_reads_only_held_out_sequences_past_the_first_shard(small, tmp_path):
    """The drafters are compared on sequences of shards first_shard.. that the split over every shard
    holds out: none was trained on by a run over all shards, nor by one over the earlier shards."""
    from specdec.train import condtrain

    folder = tmp_path / "data"
    for i in range(3):  # three shards of 24 sequences, each with its features
        _tiny_gen_data(tmp_path / f"one{i}", small, seed=i)
        folder.mkdir(exist_ok=True)
        for kind in ("shard", "feat"):
            suffix = ".npz" if kind == "shard" else ".npy"
            (tmp_path / f"one{i}" / f"{kind}-00000{suffix}").rename(folder / f"{kind}-0000{i}{suffix}")
    module, card = _module(small, "eagle", 0)
    got = condtrain.unseen_heldout(small, {"e": (module, card)}, str(folder), first_shard=1, n_sequences=64)
    order = np.random.default_rng(0).permutation(72)
    held = set(order[: 72 // 20].tolist())
    assert got["held_out_in_range"] == len([i for i in held if i >= 24])
    assert all(i + 24 in held for i in got["sequences"])  # local to shard 1 on: +24 sequences of shard 0
    prof = got["profiles"]["e"]
    assert len(prof["hit"]) == card["depth"] and prof["rows"] > 0
    with pytest.raises(ValueError, match="first_shard"):
        condtrain.unseen_heldout(small, {"e": (module, card)}, str(folder), first_shard=3)


def _eagle(small):
    target = LeanLlama(small, "q4q8", threads=1)
    return build_drafter("eagle:e,topk=3,depth=4", _context(small, target))


def _three_calls(drafter, feats, ids, cache, start, keep, top, parents=None, prefix=None):
    """EAGLE's level as three calls (its inputs, the draft layer's forward, the top-k), the reference the
    one C call must equal bit for bit."""
    from specdec.theory.trees import tree_layout

    embeds = torch.from_numpy(drafter.level.inputs(feats, ids))
    out = torch.empty(len(ids), drafter.layer.hidden)
    tree = None if parents is None else tree_layout(parents, len(parents))
    logits = leannative.native_forward(
        drafter.layer, torch.tensor(ids), start, cache, keep, tree, embeds, out, prefix
    )
    idx, val, lse = leannative.topk(logits.numpy(), top)
    return out.numpy(), idx, val - lse[:, None]


def test_an_eagle_level_in_one_call_equals_its_three_calls(small):
    """Issue 40 item 4: EAGLE's inputs (norm, concatenation, fc), its layer, its kept head and the top
    tokens in one C call give the bits of the three calls made one after another, for a chain's rows and
    for a tree level hung below an earlier level; the inputs are the module's fc([norm(f), embed[x]])."""
    drafter = _eagle(small)
    hidden = drafter.layer.hidden
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(6, hidden)).astype(np.float32)
    ids = rng.integers(0, VOCAB, 6).tolist()
    # the inputs against the module's float arithmetic: the same up to int8 rounding of fc's rows
    u = feats / np.sqrt((feats * feats).mean(-1, keepdims=True) + drafter.eps) * drafter.norm_w
    x2 = np.concatenate([u, drafter.embed[ids]], 1).astype(np.float32)
    want = x2 @ drafter.fc.dequantized.numpy().T
    assert np.abs(drafter.level.inputs(feats, ids) - want).max() <= 0.02 * np.abs(want).max()
    fused_cache, split_cache = drafter.layer.new_cache(64), drafter.layer.new_cache(64)
    calls = [  # (rows, start, keep, parents, prefix): a prefix of 4, a chain row, two tree levels
        (slice(0, 4), 0, 1, None, None),
        (slice(4, 5), 4, 1, None, None),
        (slice(4, 6), 5, 2, [-1, -1], 5),
        (slice(0, 3), 7, 3, [-1, -1, 0, 0, 1], 5),
    ]
    for rows, start, keep, parents, prefix in calls:
        got = drafter.level(feats[rows], ids[rows], fused_cache, start, keep, 3, parents, prefix)
        want = _three_calls(drafter, feats[rows], ids[rows], split_cache, start, keep, 3, parents, prefix)
        for a, b in zip(got, want, strict=True):
            assert a.shape == b.shape and np.array_equal(a, b)
        assert torch.equal(fused_cache, split_cache)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ids": [0, VOCAB]}, "token ids must lie in"),
        ({"nan": True}, "features be finite"),
        ({"keep": 3}, "need 1 <= keep <= k"),
        ({"top": 65}, "top must be an integer in"),
        ({"start": 63}, "fit the cache"),
        ({"parents": [-1, 0, 1, 3], "prefix": 0}, "parents lie in"),
        ({"parents": [-1], "prefix": 0}, "one entry per node of the region"),
        ({"prefix": 1}, "a chain .parents None. needs prefix == start"),
        ({"prefix": 3, "parents": [-1, 0]}, "prefix must lie in"),
    ],
)
def test_an_eagle_level_refuses_bad_arguments_and_writes_nothing(small, change, message):
    drafter = _eagle(small)
    feats = np.random.default_rng(1).normal(size=(2, drafter.layer.hidden)).astype(np.float32)
    if change.get("nan"):
        feats[1, 3] = np.nan
    cache = drafter.layer.new_cache(64)
    before = cache.clone()
    kwargs = {"start": 2, "keep": 1, "top": 3, "parents": None, "prefix": None}
    kwargs.update({k: v for k, v in change.items() if k in kwargs})
    with pytest.raises(ValueError, match=message):
        drafter.level(feats, change.get("ids", [1, 2]), cache, **kwargs)
    assert torch.equal(cache, before)


def _rms(x, w, eps):
    x = np.asarray(x, np.float32)
    return (w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + np.float32(eps)))).astype(np.float32)


def _same_top(idx, logp, idx_ref, logp_ref, atol=2e-3):
    """The same top tokens and log-probabilities, up to float rounding: a token may differ from the
    reference's only where the two rank neighbours tie within it (the reference's norm rounds otherwise)."""
    assert np.allclose(logp, logp_ref, atol=atol)
    for r, c in zip(*np.nonzero(idx != idx_ref), strict=True):
        assert abs(logp_ref[r, c] - logp[r, c]) <= atol and idx[r, c] in idx_ref[r], (r, c)


def test_a_medusa_draft_and_an_mlp_stage_in_one_call_equal_their_arithmetic(small):
    """Issue 40 item 4: Medusa's heads (norm, the heads' matrix, SiLU's residual) and an MLP speculator's
    stage (norm for the first, the stage's matrix, layer norm, GELU, the output scale), each with the kept
    head's top tokens, in one C call: the same tokens and log-probabilities (to float rounding) as the
    arithmetic done step by step with the same int8 matrices."""
    target = LeanLlama(small, "q4q8", threads=1)
    rng = np.random.default_rng(3)
    medusa = build_drafter("medusa:m", _context(small, target))
    feat = rng.normal(size=medusa.norm_w.shape[0]).astype(np.float32) * 3
    u = _rms(feat, medusa.norm_w, medusa.eps)
    z = medusa.w(u[None]).reshape(medusa.k, -1) + medusa.b
    idx_ref, val_ref, lse_ref = medusa.head.top((u[None] + z / (1.0 + np.exp(-z))).astype(np.float32), 3)
    idx, logp = leannative.MedusaHeads(medusa.w, medusa.b, medusa.head, medusa.norm_w, medusa.eps)(feat, 3)
    _same_top(idx, logp, idx_ref, val_ref - lse_ref[:, None])

    mlp = build_drafter("mlp:s", _context(small, target))
    states = rng.normal(size=(4, mlp.norm_w.shape[0])).astype(np.float32)
    ids = rng.integers(0, VOCAB, 4)
    for n, norm in ((0, (mlp.norm_w, mlp.eps)), (1, None)):
        x = _rms(states, mlp.norm_w, mlp.eps) if norm else states
        zz = mlp.w[n](np.concatenate([x, mlp.embed[ids]], 1).astype(np.float32))
        zz = (zz - zz.mean(-1, keepdims=True)) / np.sqrt(zz.var(-1, keepdims=True) + np.float32(1e-5))
        zz = zz * mlp.ln_w[n] + mlp.ln_b[n]
        s_ref = 0.5 * zz * (1 + np.tanh(np.float32(0.7978845608) * (zz + np.float32(0.044715) * zz**3)))
        i_ref, v_ref, l_ref = mlp.head.top((s_ref * mlp.out_scale[n]).astype(np.float32), 2)
        stage = leannative.MlpStage(
            mlp.w[n], (mlp.ln_w[n], mlp.ln_b[n]), mlp.out_scale[n], mlp.head, mlp.embed, norm
        )
        s, i, lp = stage(states, ids, 2)
        assert np.allclose(s, s_ref, atol=2e-4), n
        _same_top(i, lp, i_ref, v_ref - l_ref[:, None])


def test_a_medusa_draft_and_an_mlp_stage_refuse_bad_arguments(small):
    target = LeanLlama(small, "q4q8", threads=1)
    medusa = build_drafter("medusa:m", _context(small, target))
    feat = np.ones(medusa.norm_w.shape[0], np.float32)
    args = (medusa.w, medusa.b, medusa.head, medusa.norm_w, medusa.eps)
    heads = leannative.MedusaHeads(*args)
    with pytest.raises(ValueError, match="top must be an integer in"):
        heads(feat, 0)
    bad = feat.copy()
    bad[2] = np.inf
    with pytest.raises(ValueError, match="feat must hold finite values"):
        heads(bad, 2)
    with pytest.raises(ValueError, match="feat must hold"):
        heads(feat[:-1], 2)
    mlp = build_drafter("mlp:s", _context(small, target))
    stage = leannative.MlpStage(mlp.w[1], (mlp.ln_w[1], mlp.ln_b[1]), mlp.out_scale[1], mlp.head, mlp.embed)
    states = np.zeros((2, mlp.norm_w.shape[0]), np.float32)
    with pytest.raises(ValueError, match="token ids in the vocabulary"):
        stage(states, [0, mlp.embed.shape[0]], 2)
    with pytest.raises(ValueError, match=r"states must have shape \(rows >= 1"):
        stage(states, [0], 2)
    with pytest.raises(ValueError, match="ids must be integers"):
        stage(states, [0.0, 1.9], 2)
    with pytest.raises(ValueError, match="bias must hold"):
        leannative.MedusaHeads(medusa.w, medusa.b.T.copy(), *args[2:])
    with pytest.raises(ValueError, match="eps must be > 0"):
        leannative.MedusaHeads(*args[:4], 0.0)
    nan_bias = medusa.b.copy()
    nan_bias[0, 0] = np.nan
    with pytest.raises(ValueError, match="bias must hold finite values"):
        leannative.MedusaHeads(medusa.w, nan_bias, *args[2:])


def test_round_costs_recovers_what_each_row_count_cost_and_counts_the_empty_calls():
    """Runs built from known costs per row count (1 row: 1.0, 3 rows: 1.4, 5 rows: 1.9 plain calls) give
    those costs back by least squares, and the drafter's empty calls are counted; a configuration with
    no Stats is refused by name."""
    from specdec.analysis.condtables import round_costs

    rng = np.random.default_rng(0)
    cost = {0: 1.0, 2: 1.4, 4: 1.9}
    configs = [
        {"id": "e/plain", "plain": True, "threads": 2},
        {"id": "e/lookup/noharm", "plain": False, "threads": 2},
    ]
    runs = []
    for p in range(6):
        per_call = 0.002 * (1 + 0.1 * p)
        runs.append({"config": "e/plain", "prompt": p, "rep": 0, "temperature": 0.0,
                     "target_s": 50 * per_call, "target_calls": 50, "decode_s": 50 * per_call / 0.9,
                     "new_tokens": 50})  # fmt: skip
        drafted = list(rng.choice([0, 2, 4], size=40))
        runs.append({"config": "e/lookup/noharm", "prompt": p, "rep": 0, "temperature": 0.0,
                     "target_s": per_call * sum(cost[n] for n in drafted),
                     "stats": {"drafted": [int(n) for n in drafted], "draft_calls": 30}})  # fmt: skip
    record = {"configs": configs, "runs": runs, "settings": {"threads": 2}}
    out = round_costs(record, "lookup/noharm")
    assert out["cost"] == pytest.approx({1: 1.0, 3: 1.4, 5: 1.9})
    assert out["cost_steps"] == pytest.approx({1: 0.9, 3: 1.26, 5: 1.71})  # a call is 0.9 of a step
    assert sum(out["rounds"].values()) == 240
    nonempty = sum(1 for r in runs if "stats" in r for n in r["stats"]["drafted"] if n)
    assert out["draft_calls"] == 180 and out["empty_calls"] == 180 - nonempty
    with pytest.raises(ValueError, match="no run of 'lookup/noharm' in the record kept its Stats"):
        round_costs(record, "lookup/noharm", temperature=1.0)


def _full_expansion(drafter, budget: int):
    """EAGLE-2's tree by expanding every level's top-k (the drafter's algorithm before it skipped the nodes
    none of whose children can be chosen): the reference the pruned expansion must equal."""
    k = min(drafter.topk, budget)
    tok, par, score, dep = [], [], [], []
    for t, lp in zip(drafter.first[0][:k], drafter.first[1][:k], strict=True):
        tok.append(int(drafter.kept[t])), par.append(-1), score.append(float(lp)), dep.append(1)
    feat_of, slot_of, region, calls = {-1: drafter.g}, {}, [], 1
    for d in range(2, min(drafter.depth, budget) + 1):
        new = sorted([i for i in range(len(tok)) if dep[i] == d - 1], key=lambda i: (-score[i], i))[:k]
        start = drafter.m + len(region)
        for i in new:
            slot_of[i] = len(region)
            region.append(slot_of[par[i]] if par[i] >= 0 else -1)
        rows, ids = np.stack([feat_of[par[i]] for i in new]), [tok[i] for i in new]
        feats, top, logp = drafter.level(
            rows, ids, drafter.cache, start, len(new), drafter.top, region, drafter.m
        )  # fmt: skip
        calls += 1
        for r, i in enumerate(new):
            feat_of[i] = feats[r]
            for t, lp in zip(top[r][:k], logp[r][:k], strict=True):
                tok.append(int(drafter.kept[t])), par.append(i), dep.append(d)
                score.append(score[i] + float(lp))
    chosen = sorted(range(len(tok)), key=lambda i: (-score[i], dep[i], i))[:budget]
    nodes = sorted(chosen, key=lambda i: (dep[i], -score[i], i))
    assert all(par[i] in chosen for i in chosen if par[i] >= 0)  # the order's top is closed under parents
    pos = {node: r for r, node in enumerate(nodes)}
    return [tok[i] for i in nodes], [pos[par[i]] if par[i] >= 0 else -1 for i in nodes], calls


@pytest.mark.parametrize("topk,depth", [(3, 4), (4, 5), (2, 6)])
def test_an_eagle2_tree_skips_only_nodes_none_of_whose_children_can_be_chosen(small, topk, depth):
    """EAGLE-2's tree with the frontier nodes that cannot gain a chosen child left unexpanded is the tree
    of expanding every level's top-k (tokens and parents, at every budget, over many prompts), in fewer
    rows and at most as many calls; somewhere it saves a call."""
    target = LeanLlama(small, "q4q8", threads=1)
    drafter = build_drafter(f"eagle:e,topk={topk},depth={depth}", _context(small, target))
    fewer = 0
    for seed in range(6):
        prompt = _prompt(10 + seed)
        session = open_lm(target)
        session.record_features = True
        session.forward(prompt[:-1])
        drafter.start(prompt)
        drafter.extend(session.features, prompt[1:])
        for budget in (2, 3, 4, 6, 9, 16):
            got = drafter.propose_tree(prompt, budget, None, np.random.default_rng(0))
            tokens, parents, calls = _full_expansion(drafter, budget)
            assert (list(got.tree.tokens), list(got.tree.parents)) == (tokens, parents), (seed, budget)
            assert got.calls <= calls
            fewer += got.calls < calls
    assert fewer > 0
