"""Target features for conditioned drafters (Medusa, EAGLE, MLP speculators): every row's residual before
the final norm (``features``), a forward over given embedding rows (``embeds``) and a standalone Q8_0
linear (:class:`specdec.engine.leannative.Q8Linear`), in C (csrc/leanq8.c's ``specdec_q8_forward_ex``
and ``specdec_q8_linear``, ABI 5) and in the torch modes.

* q4q8: a k-row chain call's features equal k single steps' bit for bit, a tree node's equal the chain
  over its path, and 1, 2 and 3 threads agree bit for bit; ``embeds = embed[ids]`` gives the ids call's
  logits and features bit for bit; the final norm and the head over the last row's features give the
  logits (close), and normed values are not the features (a broken "after the norm" would fail).
* float32: the same identities (close), and q4q8's features close to float32's.
* Bad arguments refused with ValueError (both or neither of ids and embeds in the raw C call, shapes).
* Q8Linear: x W^T of the dequantized weight within the activations' quantization error; rows and
  threads never change a row's bits.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_native_q8 import needs_q8, wide_model

from specdec.engine import native
from specdec.engine.lean import LeanLlama
from specdec.engine.leannative import Q8Linear

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def q8_model():
    needs_q8()
    return LeanLlama(wide_model(), "q4q8", threads=1)


def ids_of(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 70, (n,), generator=torch.Generator().manual_seed(seed))


def run(model, ids, start, cache, **kw):
    """Logits and features (every row) of one call."""
    feats = torch.empty(len(ids), model.hidden)
    logits = model.forward(ids, start, cache, features=feats, **kw)
    return logits, feats


def prefilled(model, context: int = 9, capacity: int = 40):
    ids = ids_of(context + 8)
    cache = model.new_cache(capacity)
    model.forward(ids[:context], 0, cache)
    return ids, context, cache


def test_chain_features_equal_single_steps_bit_for_bit(q8_model):
    model = q8_model
    ids, c, cache = prefilled(model)
    block_logits, block = run(model, ids[c : c + 6], c, cache.clone())
    steps = [run(model, ids[c + i : c + i + 1], c + i, cache)[1] for i in range(6)]
    assert torch.equal(block, torch.cat(steps))
    assert block.abs().sum() > 0 and block.shape == (6, model.hidden)
    # keep limits the logits, never the features
    kept, feats = run(model, ids[c : c + 6], c, cache.clone(), keep=2)
    assert torch.equal(feats, block) and torch.equal(kept, block_logits[-2:])


def test_tree_node_features_equal_the_chain_over_their_path(q8_model):
    model = q8_model
    ids, c, cache = prefilled(model)
    parents = [-1, 0, 0, 1, 2, 2]
    nodes = ids[c : c + 6]
    _, tree = run(model, nodes, c, cache.clone(), parents=parents)
    for node, path in ((3, [0, 1, 3]), (5, [0, 2, 5]), (2, [0, 2])):
        _, chain = run(model, nodes[path], c, cache.clone())
        assert torch.equal(tree[node], chain[-1]), node


def test_features_do_not_depend_on_the_thread_count(q8_model):
    model = q8_model
    ids, c, cache = prefilled(model)
    outs = []
    try:
        for threads in (1, 2, 3):
            model.threads = threads
            outs.append(run(model, ids[c : c + 5], c, cache.clone()))
    finally:
        model.threads = 1
    for logits, feats in outs[1:]:
        assert torch.equal(logits, outs[0][0]) and torch.equal(feats, outs[0][1])


@pytest.mark.parametrize("mode", ["q4q8", "float32"])
def test_embeds_of_the_ids_give_the_ids_call(mode):
    if mode == "q4q8":
        needs_q8()
    model = LeanLlama(wide_model(), mode, threads=1)
    ids, c, cache = prefilled(model)
    new = ids[c : c + 4]
    by_ids = run(model, new, c, cache.clone())
    by_embeds = run(model, new, c, cache.clone(), embeds=model.embed[new].clone())
    assert torch.equal(by_ids[0], by_embeds[0]) and torch.equal(by_ids[1], by_embeds[1])
    # other rows change the result (the embeds are really used)
    other = run(model, new, c, cache.clone(), embeds=model.embed[new] + 0.5)
    assert not torch.equal(other[1], by_ids[1])


@pytest.mark.parametrize("mode", ["q4q8", "float32"])
def test_features_are_before_the_final_norm(mode):
    """The final norm and the head over the last row's features give its logits; the normed values
    themselves differ from the features (a forward that recorded them after the norm would fail)."""
    if mode == "q4q8":
        needs_q8()
    model = LeanLlama(wide_model(), mode, threads=1)
    ids, c, cache = prefilled(model)
    logits, feats = run(model, ids[c : c + 3], c, cache)
    normed = F.rms_norm(feats, (model.hidden,), eps=model.eps) * model.norm
    head = model.head.dequantized if hasattr(model.head, "dequantized") else None
    if mode == "q4q8":
        q = model.head.qs.float().view(model.head.out_features, -1, 32) * model.head.d[..., None]
        head = q.view(model.head.out_features, model.hidden)
        again = normed @ head.T
        assert torch.allclose(again, logits, atol=0.05 * float(logits.abs().max()))
    else:
        again = model.head(normed)
        assert torch.allclose(again, logits, atol=1e-4)
    assert not torch.allclose(normed, feats, atol=1e-3)  # the broken variant is detectable
    if mode == "q4q8":  # and the head over un-normed features misses the logits by far
        assert not torch.allclose(feats @ head.T, logits, atol=0.05 * float(logits.abs().max()))


def test_q4q8_features_are_close_to_float32s():
    needs_q8()
    q8, f32 = LeanLlama(wide_model(), "q4q8", threads=1), LeanLlama(wide_model(), "float32")
    ids = ids_of(12)
    a = run(q8, ids, 0, q8.new_cache(16))[1]
    b = run(f32, ids, 0, f32.new_cache(16))[1]
    # 4-bit weights and 8-bit activations: close (about 10% of the residual's norm), not equal
    assert float((a - b).norm() / b.norm()) < 0.25
    assert float(F.cosine_similarity(a, b, dim=-1).min()) > 0.95


def test_the_session_records_features_of_every_row():
    needs_q8()
    model = LeanLlama(wide_model(), "q4q8", threads=1)
    session = model.session()
    assert session.record_features is False and session.features is None
    session.forward([1, 2, 3], keep=1)
    assert session.features is None
    session.record_features = True
    session.forward([4, 5, 6, 7], keep=1)
    assert session.features.shape == (4, model.hidden) and session.features.dtype == np.float32
    chain = model.session()
    chain.record_features = True
    chain.forward([1, 2, 3, 4, 5, 6, 7])
    assert np.array_equal(chain.features[3:], session.features)
    session.forward_tree([8, 9, 10], [-1, 0, 0])
    assert session.features.shape == (3, model.hidden)
    step = model.session()
    step.record_features = True
    step.forward([1, 2, 3, 4, 5, 6, 7, 8, 10])
    assert np.array_equal(step.features[-1], session.features[2])  # node 2's path: 8, 10
    embeds = model.embed[torch.tensor([11, 12])].clone()
    session.crop(7)
    session.forward([11, 12], embeds=embeds)
    assert session.features.shape == (2, model.hidden)


def test_a_calls_features_stay_until_their_slots_are_written_again():
    """The decoding loop keeps a call's features (a view of the session's buffer at the call's slots)
    until a later round tells the drafter: later calls at later slots, the cache's growth past 256
    slots included, must leave them as they were; a call at the same slot after a crop gives that call's
    token's features."""
    needs_q8()
    model = LeanLlama(wide_model(), "q4q8", threads=1)
    rng = np.random.default_rng(0)
    ids = [int(t) for t in rng.integers(0, 70, 300)]
    session = model.session()
    session.record_features = True
    session.forward(ids[:200], keep=1)
    kept = [(0, session.features, session.features.copy())]
    for i in range(200, 300):  # one step at a time: the cache grows from 256 slots on the way
        session.forward([ids[i]])
        kept.append((i, session.features, session.features.copy()))
    assert session.cache.shape[3] > 256
    for _, view, copy in kept:
        assert np.array_equal(view, copy)
    whole = model.session()
    whole.record_features = True
    whole.forward(ids)
    assert np.array_equal(whole.features[:200], kept[0][2])
    assert np.array_equal(whole.features[200:], np.concatenate([c for _, _, c in kept[1:]]))
    session.crop(299)
    other = (ids[299] + 1) % 70
    session.forward([other])  # slot 299 again, another token: its features are that token's
    fresh = model.session()
    fresh.record_features = True
    fresh.forward([*ids[:299], other])
    assert np.array_equal(session.features, fresh.features[-1:])
    assert not np.array_equal(session.features, kept[-1][2])


def test_bad_arguments_are_refused():
    needs_q8()
    model = LeanLlama(wide_model(), "q4q8", threads=1)
    cache = model.new_cache(16)
    ids = ids_of(3)
    with pytest.raises(ValueError, match="embeds must be a float32 tensor of shape"):
        model.forward(ids, 0, cache, embeds=torch.zeros(2, model.hidden))
    with pytest.raises(ValueError, match="embeds must be a float32 tensor"):
        model.forward(ids, 0, cache, embeds=torch.zeros(3, model.hidden, dtype=torch.float64))
    with pytest.raises(ValueError, match="features must be a float32 tensor of shape"):
        model.forward(ids, 0, cache, features=torch.zeros(3, model.hidden + 1))
    with pytest.raises(ValueError, match="features must be a contiguous"):
        model.forward(ids, 0, cache, features=torch.zeros(model.hidden, 3).T)
    with pytest.raises(ValueError, match="token ids"):
        model.forward(torch.tensor([0, 99]), 0, cache, embeds=torch.zeros(2, model.hidden))
    # the raw C call: exactly one of ids and embeds
    fwd = model.q8_forward()
    logits = torch.empty(3, model.head.out_features)
    feats = torch.full((3, model.hidden), 7.0)
    emb = model.embed[ids].clone()
    common = (3, 0, cache.data_ptr(), 16, logits.data_ptr(), 3, model.num_layers, 1)
    for a, e in ((ids.data_ptr(), emb.data_ptr()), (None, None)):
        with pytest.raises(ValueError, match="exactly one of ids and embeds"):
            fwd.forward(a, *common, embeds=e, features=feats.data_ptr())
    assert torch.equal(feats, torch.full((3, model.hidden), 7.0))  # nothing written
    lib = native.library("q4q8")
    assert lib.specdec_q8_forward_ex(None, ids.data_ptr(), None, None, *common, None) == -2
    assert lib.specdec_q8_forward_ex(fwd.handle, ids.data_ptr(), None, None, 0, *common[1:], None) == -2
    fwd.forward(None, *common, embeds=emb.data_ptr(), features=feats.data_ptr())  # the valid call runs
    # mode q4_1 takes neither
    if native.available("q4_1"):
        q41 = LeanLlama(wide_model(), "q4_1")
        with pytest.raises(ValueError, match="needs mode 'q4q8' or a torch mode"):
            q41.forward(ids, 0, q41.new_cache(16), features=torch.empty(3, q41.hidden))


WEIGHT = torch.randn(37, 96, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def linear():
    needs_q8()
    return Q8Linear(WEIGHT)  # 37 outputs: a partial tile of 16


def test_q8_linear_matches_the_dequantized_product(linear):
    x = np.random.default_rng(0).standard_normal((5, 96)).astype(np.float32)
    y = linear(x)
    assert y.shape == (5, 37) and y.dtype == np.float32
    ref = x @ linear.dequantized.numpy().T
    # activations quantized per block of 32 (int8): error about |x| |w| sqrt(k) / 127
    bound = 0.02 * float(np.abs(ref).max())
    assert float(np.abs(y - ref).max()) < bound
    assert linear.weight_error < 0.05
    from specdec.engine.lean import _q80  # the LM head's Q8_0 code: the same codes and scales

    code, _ = _q80(WEIGHT, half_scales=True)
    assert torch.equal(code.qs, linear.qs) and torch.equal(code.d, linear.d)
    assert np.array_equal(linear(torch.from_numpy(x)), y)  # a tensor too


def test_q8_linear_rows_and_threads_never_change_a_row(linear):
    x = np.random.default_rng(1).standard_normal((7, 96)).astype(np.float32)
    y1 = linear(x, threads=1)
    assert np.array_equal(linear(x, threads=2), y1)
    assert np.array_equal(linear(x, threads=3), y1)
    for i in range(7):
        assert np.array_equal(linear(x[i : i + 1]), y1[i : i + 1])


def test_q8_linear_refuses_bad_arguments(linear):
    x = np.zeros((2, 96), dtype=np.float32)
    with pytest.raises(ValueError, match="threads must be an integer"):
        linear(x, threads=0)
    with pytest.raises(ValueError, match="x must be a float32"):
        linear(x.astype(np.float64))
    with pytest.raises(ValueError, match=r"x must have shape \(rows >= 1, 96\)"):
        linear(np.zeros((2, 64), dtype=np.float32))
    with pytest.raises(ValueError, match="x must have shape"):
        linear(np.zeros((0, 96), dtype=np.float32))
    with pytest.raises(ValueError, match="finite"):
        linear(np.full((1, 96), np.nan, dtype=np.float32))
    with pytest.raises(ValueError, match="multiple of 32"):
        Q8Linear(torch.zeros(4, 40))
    with pytest.raises(ValueError, match="weight must be a 2-D"):
        Q8Linear(torch.zeros(4, 32, dtype=torch.int32))
    lib = native.library("q4q8")
    y = np.zeros((2, 37), dtype=np.float32)
    assert lib.specdec_q8_linear(linear.handle, x.ctypes.data, 0, y.ctypes.data, 1) == -2
    assert lib.specdec_q8_linear(linear.handle, None, 2, y.ctypes.data, 1) == -2
    assert lib.specdec_q8_linear(linear.handle, x.ctypes.data, 2, y.ctypes.data, 1025) == -2
    status = ctypes.c_int32(0)
    assert not lib.specdec_q8_linear_new(None, ctypes.byref(status)) and status.value == -2


def test_a_sessions_embeds_are_checked_as_the_models_are():
    """Through a session's native call (numpy only): a float32 tensor, an array or a list of rows give the
    same logits; another dtype or shape is refused naming embeds."""
    needs_q8()
    model = LeanLlama(wide_model(), "q4q8", threads=1)
    rows = torch.randn(3, model.hidden, generator=torch.Generator().manual_seed(0))
    ids = [1, 2, 3]
    out = []
    for given in (rows, rows.numpy().copy(), rows.tolist()):
        session = model.session()
        out.append(session.forward(ids, embeds=given))
    assert torch.equal(out[0], out[1]) and torch.equal(out[0], out[2])
    for bad in (rows.to(torch.bfloat16), rows[:2], rows.double().numpy()):
        with pytest.raises(ValueError, match="embeds must be a float32"):
            model.session().forward(ids, embeds=bad)
