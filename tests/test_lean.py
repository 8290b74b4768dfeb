"""The lean engine (specdec.engine.lean): the same logits as transformers, and decoding exact in every mode.

Per mode (float32, q4_1, bfloat16, int4): greedy speculative decoding equals greedy autoregressive
decoding for model, early-exit and prompt-lookup drafters, and sampling has the target's law
(chi-square of the first two tokens against the exact law of the lean model in that mode).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_decoding import PROMPTS, chi_square_pvalue
from tiny_models import VOCAB, perturbed_copy, tiny_llama

from specdec.engine import native
from specdec.engine.decoding import autoregressive, speculative
from specdec.engine.drafters import EarlyExitDrafter, ModelDrafter, PromptLookupDrafter
from specdec.engine.lean import GROUP_SIZE, MODES, NATIVE_MODES, LeanLlama, LeanSession, int4_supported
from specdec.engine.lm import CachedLM, open_lm
from specdec.theory.sampling import warp

pytestmark = pytest.mark.usefixtures("one_thread")

SHIPPED = [
    m for m in MODES if (m != "int4" or int4_supported()) and (m not in NATIVE_MODES or native.available(m))
]


@pytest.fixture(scope="module")
def hf_target():
    return tiny_llama(0)


@pytest.fixture(scope="module")
def lean(hf_target):
    return {mode: LeanLlama(hf_target, mode) for mode in SHIPPED}


def test_float32_logits_equal_transformers_through_prefill_steps_crops_and_syncs(hf_target, lean):
    ref, ours = CachedLM(hf_target), open_lm(lean["float32"])
    assert isinstance(ours, LeanSession)
    seq = [5, 17, 42, 8, 91, 3, 3, 60, 12, 77, 1, 30]
    for a, b in [(ref.forward(seq[:5]), ours.forward(seq[:5]))]:
        torch.testing.assert_close(b, a, atol=2e-5, rtol=1e-5)
    for t in seq[5:8]:  # single steps
        torch.testing.assert_close(ours.forward([t]), ref.forward([t]), atol=2e-5, rtol=1e-5)
    ref.crop(6)
    ours.crop(6)  # a rejection: drop two tokens, then a block of three
    torch.testing.assert_close(ours.forward(seq[8:11]), ref.forward(seq[8:11]), atol=2e-5, rtol=1e-5)
    assert ours.ids == ref.ids
    other = [5, 17, 42, 9, 9]
    torch.testing.assert_close(ours.sync(other), ref.sync(other), atol=2e-5, rtol=1e-5)
    assert ours.ids == ref.ids == other[:-1] + other[-1:]
    torch.testing.assert_close(
        ours.forward([1, 2, 3], keep=2), ref.forward([1, 2, 3], keep=2), atol=2e-5, rtol=1e-5
    )


def on_q4_1_grid(model, seed=0, half=False):
    """Snap every decoder weight to a Q4_1 code: w = d q + m per block of 32, with q = 0 and
    q = 15 in every block (as the GGUF quantizer leaves them); returns the model. ``half``: the
    scales and minimums are IEEE half floats, as in a GGUF file."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model.model.layers:
            att, mlp = layer.self_attn, layer.mlp
            for lin in [
                att.q_proj,
                att.k_proj,
                att.v_proj,
                att.o_proj,
                mlp.gate_proj,
                mlp.up_proj,
                mlp.down_proj,
            ]:
                n, k = lin.weight.shape
                q = torch.randint(0, 16, (n, k // GROUP_SIZE, GROUP_SIZE), generator=gen).float()
                q[..., 0], q[..., 1] = 0, 15  # the block's minimum and maximum
                d = (0.01 + 0.02 * torch.rand(n, k // GROUP_SIZE, 1, generator=gen)) * lin.weight.std() * 10
                m = -8 * d + 0.1 * d * torch.randn(n, k // GROUP_SIZE, 1, generator=gen)
                if half:
                    d, m = d.half().float(), m.half().float()
                lin.weight.copy_((q * d + m).view(n, k))
        # the LM head on a Q8_0 grid (w = d q, q in -127..127, the block's largest |q| = 127),
        # as SmolLM2's tied embedding is in its GGUF
        head = model.get_output_embeddings().weight
        n, k = head.shape
        q = torch.randint(-127, 128, (n, k // GROUP_SIZE, GROUP_SIZE), generator=gen).float()
        q[..., 0] = 127
        d = (0.5 + torch.rand(n, k // GROUP_SIZE, 1, generator=gen)) * head.std() / 64
        if half:
            d = d.half().float()
        head.copy_((q * d).view(n, k))
    return model


@pytest.fixture(scope="module")
def grid_model():
    return on_q4_1_grid(tiny_llama(3))


def test_int4_recovers_a_q4_1_code_exactly(grid_model):
    """Weights on a Q4_1 grid come back as the same integers (reconstruction error: rounding
    only); weights off the grid do not, and the error is reported rather than hidden."""
    if not int4_supported():
        pytest.skip("this torch lacks the CPU int4 kernels")
    assert LeanLlama(grid_model, "int4").quantization_error < 1e-6
    assert LeanLlama(tiny_llama(3), "int4").quantization_error > 1e-4


@pytest.mark.parametrize("mode", ["bfloat16", "int4"])
def test_low_precision_modes_round_the_same_model(grid_model, mode):
    """On Q4_1-grid weights, bfloat16 and int4 differ from float32 only by bf16 rounding
    (activations, and int4's scales): close to it, not equal."""
    if mode == "int4" and not int4_supported():
        pytest.skip("this torch lacks the CPU int4 kernels")
    seq = [5, 17, 42, 8, 91, 3]
    full = torch.softmax(open_lm(LeanLlama(grid_model, "float32")).forward(seq), -1)
    low = torch.softmax(open_lm(LeanLlama(grid_model, mode)).forward(seq), -1)
    tv = 0.5 * (full - low).abs().sum(-1)
    assert 0.0 < float(tv.max()) < 0.05


@pytest.mark.parametrize("mode", SHIPPED)
@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_speculative_equals_greedy_plain_in_every_mode(hf_target, lean, mode, gamma):
    target = lean[mode]
    draft = LeanLlama(perturbed_copy(hf_target, 0.05, 5), mode)
    drafters = {
        "model": ModelDrafter(draft, target=target),
        "early-exit": EarlyExitDrafter(target, 1),
        "prompt-lookup": PromptLookupDrafter(),
    }
    accepted = 0
    for name, drafter in drafters.items():
        for prompt in PROMPTS:
            plain = autoregressive(target, prompt, max_new_tokens=24)
            spec = speculative(target, drafter, prompt, gamma=gamma, max_new_tokens=24)
            assert spec.tokens == plain.tokens, (mode, name, prompt)
            accepted += spec.stats.accepted_tokens
    assert accepted > 0  # the drafts were used, so the check compared verify passes with steps


def exact_two_token_law(model: LeanLlama, prefix, **warp_kw):
    """P(x1, x2 | prefix) of the lean model under warp, from fresh sessions, float64."""
    p1 = warp(open_lm(model).forward(prefix, keep=1), **warp_kw)[0].double()
    rows = torch.stack([open_lm(model).forward([*prefix, x], keep=1)[0] for x in range(VOCAB)])
    p2 = warp(rows, **warp_kw).double()
    law = (p1[:, None] * p2).numpy()
    return law / law.sum()


@pytest.mark.parametrize("mode", SHIPPED)
def test_sampling_has_the_target_law_in_every_mode(mode):
    small = tiny_llama(0, layers=1)
    target = LeanLlama(small, mode)
    drafter = ModelDrafter(LeanLlama(perturbed_copy(small, 0.3, 7), mode))
    prefix, gamma, kw = [36], 2, {"temperature": 1.0}
    counts = np.zeros((VOCAB, VOCAB))
    for seed in range(1000):
        gen = speculative(target, drafter, prefix, gamma=gamma, max_new_tokens=gamma + 1, seed=seed, **kw)
        counts[gen.tokens[0], gen.tokens[1]] += 1
    assert chi_square_pvalue(counts, exact_two_token_law(target, prefix, **kw)) > 1e-3


def test_sampling_check_tells_two_models_apart():
    """The chi-square above has power: samples of one model against another's law fail."""
    small = tiny_llama(0, layers=1)
    shifted = LeanLlama(perturbed_copy(small, 0.3, 11), "float32")
    target = LeanLlama(small, "float32")
    counts = np.zeros((VOCAB, VOCAB))
    for seed in range(1000):
        gen = autoregressive(target, [36], max_new_tokens=2, temperature=1.0, seed=seed)
        counts[gen.tokens[0], gen.tokens[1]] += 1
    assert chi_square_pvalue(counts, exact_two_token_law(shifted, [36], temperature=1.0)) < 1e-3


def test_session_limits_and_bad_input(hf_target, lean):
    model = lean["float32"]
    s = model.session()
    with pytest.raises(ValueError, match="new_ids"):
        s.forward([])
    with pytest.raises(ValueError, match="keep"):
        s.forward([1, 2], keep=3)
    seq = [(7 * i) % VOCAB for i in range(300)]
    s.forward(seq[:250])
    grown = s.forward(seq[250:])  # beyond the first 256 slots: the cache grows, keeping its contents
    assert s.cache.shape[3] >= 300 and len(s) == 300
    torch.testing.assert_close(grown, CachedLM(hf_target).forward(seq)[250:], atol=2e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        s.forward([1] * (model.max_positions - 299))
    with pytest.raises(ValueError, match=r"n must be an integer in \[0, 300\] \(the cached length\)"):
        s.crop(301)
    with pytest.raises(ValueError, match="mode must be one of"):
        LeanLlama(hf_target, "int8")
    with pytest.raises(ValueError, match="n_layers"):
        model.early_exit(3)
    assert model.early_exit(1).num_layers == 1 and model.num_layers == 2
    with pytest.raises(ValueError, match="attention_bias"):
        LeanLlama(tiny_llama(0, attention_bias=True), "float32")
    assert 0 < model.weight_bytes()
    if "int4" in lean:
        assert lean["int4"].weight_bytes() < lean["bfloat16"].weight_bytes() < model.weight_bytes()


def test_a_reserved_cache_gives_the_same_logits_and_the_loops_reserve_the_whole_generation(
    hf_target, lean, monkeypatch
):
    """LeanSession.reserve grows the cache now (at most max_position_embeddings; a negative count
    refused) and the logits are bit for bit those of a session that grows on the way; autoregressive and
    the tree loop reserve the prompt, the new tokens and the widest round once, at the prefill, so no
    step grows the cache (the loop's growth, counted through _reserve, never allocates after it)."""
    model = lean["float32"]
    seq = [(7 * i) % VOCAB for i in range(300)]
    grown, ahead = model.session(), model.session()
    ahead.reserve(300)
    assert ahead.cache.shape[3] == 300
    a = [grown.forward(seq[:250]), grown.forward(seq[250:])]
    b = [ahead.forward(seq[:250]), ahead.forward(seq[250:])]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)) and ahead.cache.shape[3] == 300
    ahead.reserve(10 * model.max_positions)  # a hint: at most the model's positions
    assert ahead.cache.shape[3] == model.max_positions
    with pytest.raises(ValueError, match=r"n must be an integer >= 0"):
        ahead.reserve(-1)
    grows: list[tuple[int, int]] = []
    original = LeanSession._reserve

    def counted(self, end, **kw):
        before = self.cache.shape[3]
        original(self, end, **kw)
        if self.cache.shape[3] != before:
            grows.append((len(self.ids), self.cache.shape[3]))

    monkeypatch.setattr(LeanSession, "_reserve", counted)
    prompt = seq[:200]
    autoregressive(model, prompt, max_new_tokens=90, temperature=0.0)
    assert grows == [(0, 200 + 90)]  # once, before the prompt went in
    grows.clear()
    drafter = PromptLookupDrafter()
    speculative(model, drafter, prompt, gamma=4, max_new_tokens=90, temperature=0.0)
    assert grows == [(0, 200 + 90 + 4)]


@pytest.mark.parametrize("mode", SHIPPED)
def test_a_verify_block_equals_single_steps_bit_for_bit_in_low_precision(mode):
    """Rows of one k-token call against k one-token calls, on a model with a plain LM head
    (no scaling, so the logits are not artificially peaked). bfloat16 and int4: equal bit for
    bit (row-wise attention, two-row bf16 kernel); float32: GEMV and GEMM round differently,
    so equal only up to rounding."""
    model = LeanLlama(tiny_llama(4, head_scale=1.0, attn_scale=1.0), mode)
    prefix, block = [5, 17, 42, 8], [91, 3, 3, 60, 12]
    whole = model.session()
    whole.forward(prefix)
    rows = whole.forward(block)
    steps = model.session()
    steps.forward(prefix)
    single = torch.cat([steps.forward([t]) for t in block])
    if mode == "float32":
        assert float((rows - single).abs().max()) < 1e-5
    else:
        assert torch.equal(rows, single)
        assert model.verify_matches_steps()


@pytest.mark.parametrize("k", [0, 1, True, 2.0])
def test_verify_matches_steps_checks_its_arguments(lean, k):
    with pytest.raises(ValueError, match="k must be an integer >= 2"):
        lean["float32"].verify_matches_steps(k=k)


@pytest.fixture(scope="module")
def shape_true():
    """Random weights at SmolLM2-135M's layer shapes (4 of its 30 layers, a small vocabulary):
    big enough that the kernels' row-count-dependent paths and long attention rows occur."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(4)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=4,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=512,
    )
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("mode", [m for m in SHIPPED if m != "float32"])
def test_verify_equals_steps_bit_for_bit_at_real_shapes(shape_true, mode):
    """The guarantee behind greedy exactness in low precision, on ten random sequences. Each
    half of the fix is needed: without the two-row bf16 kernel seeds 2 and 8 fail in
    bfloat16, and masked-block attention fails int4 (both on an AVX-512 EPYC)."""
    model = LeanLlama(shape_true, mode)
    assert all(model.verify_matches_steps(k=5, context=16 + 3 * seed, seed=seed) for seed in range(10))


def test_the_int4_modes_head_is_an_exact_8_bit_code_in_two_int4_halves():
    """A Q8_0-coded weight (41 rows: not a multiple of the packing's 16) comes back with zero
    code error, and the two int4 products equal the dense product up to bf16 rounding."""
    if not int4_supported():
        pytest.skip("this torch lacks the CPU int4 kernels")
    from specdec.engine.lean import _int8_split

    gen = torch.Generator().manual_seed(1)
    q = torch.randint(-127, 128, (41, 2, GROUP_SIZE), generator=gen).float()
    q[..., 3] = -127
    d = 0.001 + 0.01 * torch.rand(41, 2, 1, generator=gen)
    weight = (q * d).view(41, 2 * GROUP_SIZE)
    head, error = _int8_split(weight, torch.bfloat16)
    assert error < 1e-6 and head.out_features == 41
    x = torch.randn(3, 2 * GROUP_SIZE, generator=gen).to(torch.bfloat16)
    got = head(x).float()
    assert got.shape == (3, 41)
    torch.testing.assert_close(got, x.float() @ weight.t(), atol=0.05, rtol=0.02)
    # off the grid the code error is reported, not hidden
    assert _int8_split(torch.randn(16, GROUP_SIZE, generator=gen), torch.bfloat16)[1] > 1e-4


def test_engine_variants_kept_for_measuring_what_exactness_and_the_int8_head_cost(shape_true):
    """exact_verify=False attends over the block in one masked call: the same logits up to
    rounding, but not bit for bit (int4 at real shapes); int8_head=False keeps a bf16 head."""
    if not int4_supported():
        pytest.skip("this torch lacks the CPU int4 kernels")
    exact, fast = LeanLlama(shape_true, "int4"), LeanLlama(shape_true, "int4", exact_verify=False)
    ids = list(range(3, 40))
    a, b = exact.session(), fast.session()
    a.forward(ids[:30])
    b.forward(ids[:30])
    torch.testing.assert_close(a.forward(ids[30:]), b.forward(ids[30:]), atol=0.1, rtol=0.05)
    dense_head = LeanLlama(shape_true, "int4", int8_head=False)
    assert dense_head.weight_bytes() > exact.weight_bytes()
    with pytest.raises(ValueError, match="int8_head=True needs mode 'int4'"):
        LeanLlama(shape_true, "bfloat16", int8_head=True)
    with pytest.raises(ValueError, match="exact_verify must be True or False"):
        LeanLlama(shape_true, "int4", exact_verify=1)


def test_a_distilled_draft_with_a_kept_vocabulary_runs_in_the_lean_engine(hf_target):
    """specdec.train.draftnets' drafts (a TrimmedHead over kept ids: -inf elsewhere) load into the lean
    engine with the same logits, and modes.lean_draft refuses int4 (it would re-quantize them)."""
    from specdec.measure.modes import lean_draft
    from specdec.train.draftnets import build_draft

    kept = torch.tensor([0, 3, 5, 8, 13, 21, 34, 55])
    draft = build_draft(hf_target, [0], kept)
    lean, probe = lean_draft(draft, "float32")
    assert probe is None and lean.vocab_size == VOCAB
    seq = [5, 17, 42, 8, 91, 3]
    ours, ref = open_lm(lean).forward(seq), open_lm(draft).forward(seq)
    assert torch.equal(torch.isfinite(ours), torch.isfinite(ref))
    assert int(torch.isfinite(ours[0]).sum()) == len(kept)
    torch.testing.assert_close(ours[torch.isfinite(ours)], ref[torch.isfinite(ref)], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="mode must be 'auto' or one of"):
        lean_draft(draft, "int4")


@pytest.mark.parametrize("mode", [m for m in SHIPPED if m != "float32"])
def test_verify_equals_steps_bit_for_bit_for_a_wider_model(mode):
    """Hidden 2048 (one layer): oneDNN's one-row bf16 kernel differs from its multi-row kernel
    for the LM head too (K = 2048), so the head must run one-row inputs as two rows as well;
    without that the bf16 head failed 6 of 6 seeds on an AVX512-BF16 EPYC."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(7)
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=2048,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(config).eval()
    for variant in ({}, {"int8_head": False}) if mode == "int4" else ({},):
        lean = LeanLlama(model, mode, **variant)
        assert all(lean.verify_matches_steps(k=5, context=8 + s, seed=s) for s in range(6)), variant


def test_q4_1_is_the_float32_model_on_the_gguf_grid(grid_model):
    """q4_1 keeps the GGUF's integers (zero code error on Q4_1/Q8_0-grid weights) and computes in
    float32: its logits equal float32's up to summation order, far closer than bf16 rounding."""
    if not native.available():
        pytest.skip(f"the C forward cannot be built here: {native.unavailable_reason()}")
    q4 = LeanLlama(grid_model, "q4_1")
    assert q4.quantization_error < 1e-6 and q4.dtype == torch.float32
    seq = [5, 17, 42, 8, 91, 3]
    full = open_lm(LeanLlama(grid_model, "float32")).forward(seq)
    ours = open_lm(q4).forward(seq)
    assert float((ours - full).abs().max()) < 1e-4 * float(full.abs().max())
    assert LeanLlama(tiny_llama(3), "q4_1").quantization_error > 1e-4  # off the grid: reported
    assert q4.weight_bytes() < LeanLlama(grid_model, "bfloat16").weight_bytes()


def test_q4_1_refuses_options_it_does_not_have(grid_model):
    if not native.available():
        pytest.skip(f"the C forward cannot be built here: {native.unavailable_reason()}")
    with pytest.raises(ValueError, match="always runs the LM head as Q8_0"):
        LeanLlama(grid_model, "q4_1", int8_head=False)
    with pytest.raises(ValueError, match="exact by construction"):
        LeanLlama(grid_model, "q4_1", exact_verify=False)


def test_q4_1_runs_a_kept_vocabulary_head_and_early_exit_views(hf_target):
    if not native.available():
        pytest.skip(f"the C forward cannot be built here: {native.unavailable_reason()}")
    from specdec.train.draftnets import build_draft

    kept = torch.tensor([0, 3, 5, 8, 13, 21, 34, 55])
    draft = LeanLlama(build_draft(hf_target, [0], kept), "q4_1")
    ref = LeanLlama(build_draft(hf_target, [0], kept), "float32")
    seq = [5, 17, 42, 8, 91, 3]
    ours, full = open_lm(draft).forward(seq), open_lm(ref).forward(seq)
    assert torch.equal(torch.isfinite(ours), torch.isfinite(full)) and ours.shape == (6, VOCAB)
    whole = LeanLlama(hf_target, "q4_1")
    one = whole.early_exit(1)
    assert one.num_layers == 1 and whole.num_layers == 2
    a, b = open_lm(one).forward(seq), open_lm(whole).forward(seq)
    assert a.shape == b.shape and not torch.equal(a, b)  # the view runs its own layers
    assert torch.equal(open_lm(whole).forward(seq), b)  # and leaves the whole model as it was


def test_key_value_heads_must_divide_the_heads():
    """Grouped-query attention maps query head j to key-value head j // (heads / kv_heads)."""
    from types import SimpleNamespace

    from specdec.engine.lean import _check_supported

    with pytest.raises(ValueError, match=r"num_key_value_heads \(3\) to divide the heads \(4\)"):
        _check_supported(SimpleNamespace(model_type="llama", num_attention_heads=4, num_key_value_heads=3))
    _check_supported(SimpleNamespace(model_type="llama", num_attention_heads=4, num_key_value_heads=2))


def test_a_sessions_cache_is_replaced_with_its_numpy_view(lean):
    """``cache`` is a property: setting it (a reset, a grown cache) keeps the C forward's numpy view on the
    same memory, so a native call never writes an old cache."""
    s = open_lm(lean["float32"])
    s.forward([5, 17, 42])
    assert np.shares_memory(s._cache_np, s.cache.numpy())
    old = s.cache
    s.reserve(s.model.max_positions)  # grows the cache (256 positions at first): a new tensor
    assert s.cache is not old and s.cache.shape[3] == s.model.max_positions > old.shape[3]
    assert np.shares_memory(s._cache_np, s.cache.numpy())
    s.reset()
    assert np.shares_memory(s._cache_np, s.cache.numpy()) and s.ids == []
