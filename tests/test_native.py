"""specdec.engine.native: the C forward is built per machine (or emulated CPU), cached, and refused
clearly."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_llama

from specdec.engine import leannative, native
from specdec.engine.lean import LeanLlama
from specdec.measure import profile as measure_profile


@pytest.fixture
def fresh_load():
    native._load.cache_clear()
    yield
    native._load.cache_clear()


def test_build_flags_follow_the_emulated_cpu(monkeypatch):
    monkeypatch.delenv("SPECDEC_EMULATED_CPU", raising=False)
    assert "-march=native" in native.build_flags()
    monkeypatch.setenv("SPECDEC_EMULATED_CPU", "avx2")
    assert "-march=x86-64-v3" in native.build_flags()
    monkeypatch.setenv("SPECDEC_EMULATED_CPU", "baseline")
    assert "-march=x86-64" in native.build_flags()
    monkeypatch.setenv("SPECDEC_EMULATED_CPU", "avx9000")
    with pytest.raises(ValueError, match="SPECDEC_EMULATED_CPU must be one of"):
        native.build_flags()


@pytest.mark.parametrize("target", ["native", "avx2", "baseline"])
def test_every_c_build_turns_fp_contraction_off(monkeypatch, target):
    """No fused multiply-adds in any C forward, on any CPU level: the float arithmetic is the source's."""
    monkeypatch.setenv("SPECDEC_EMULATED_CPU", target)
    for kind in native.KINDS:
        assert "-ffp-contract=off" in native.build_flags(kind), kind


def test_the_library_is_cached_per_source_flags_and_machine(tmp_path, monkeypatch):
    if native._compiler() is None:
        pytest.skip("no C compiler here")
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    cc = native._compiler()
    native_path = native._library_path(cc, ["-O3", "-march=native"])
    baseline_path = native._library_path(cc, ["-O3", "-march=x86-64"])
    assert native_path != baseline_path and native_path.parent == baseline_path.parent


def test_a_missing_compiler_is_a_clear_refusal(monkeypatch, fresh_load):
    from specdec.measure.modes import available_modes

    monkeypatch.setenv("CC", "no-such-compiler-xyz")
    assert not native.available()
    assert "no C compiler found" in native.unavailable_reason()
    assert "q4_1" not in available_modes() and "q4q8" not in available_modes()
    assert "no C compiler found" in native.unavailable_reason("q4q8")
    with pytest.raises(ValueError, match="mode 'q4q8' needs specdec's C forward"):
        LeanLlama(tiny_llama(0), "q4q8")
    with pytest.raises(OSError, match="C forward is unavailable"):
        native.library()
    with pytest.raises(ValueError, match="mode 'q4_1' needs specdec's C forward"):
        LeanLlama(tiny_llama(0), "q4_1")
    assert native.build_info() is None


def test_cc_may_name_a_launcher_and_a_compiler(monkeypatch):
    import shutil

    monkeypatch.setenv("CC", "env cc")  # as CC="ccache gcc" would, with a launcher every machine has
    if shutil.which("env") is None or shutil.which("cc") is None:
        pytest.skip("no env or cc here")
    assert native._compiler() == (shutil.which("env"), "cc")
    assert native._compiler_version(native._compiler()).strip()  # `env cc --version` ran cc
    monkeypatch.setenv("CC", "")
    assert native._compiler() is None


def test_a_failing_build_says_why(monkeypatch, fresh_load, tmp_path):
    if native._compiler() is None:
        pytest.skip("no C compiler here")
    monkeypatch.setattr(native, "SOURCE", tmp_path / "broken.c")
    (tmp_path / "broken.c").write_text("this is not C\n")
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    reason = native.unavailable_reason()
    assert reason is not None and "failed to build broken.c" in reason


def test_the_phase_clocks_account_for_a_call():
    if not native.available():
        pytest.skip(f"the C forward cannot be built here: {native.unavailable_reason()}")
    model = LeanLlama(tiny_llama(0), "q4_1")
    s = model.session()
    s.forward([5, 17, 42, 8])
    from specdec.engine.leannative import phase_clocks

    other = LeanLlama(tiny_llama(1), "q4_1")
    other.session().forward([3, 4])  # another model's forward, not profiled: its clocks stay its own
    prof = measure_profile.profile_native_step(
        lambda k: s.forward([1] * k), k=3, repeats=3, reset=lambda: s.crop(4), clocks=phase_clocks(model)
    )
    assert phase_clocks(other).read_clocks() == [0.0] * len(native.PHASES)
    assert phase_clocks(model).description.phase_s is not None and not phase_clocks(model).description.phase_s
    buckets = prof["buckets_ms"]
    assert set(buckets) == {*native.PHASES, "framework overhead"}
    assert all(v >= 0 for v in buckets.values()) and buckets["linear"] > 0
    assert sum(buckets.values()) == pytest.approx(prof["wall_ms"], rel=1e-6)
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        measure_profile.profile_native_step(lambda k: None, repeats=0, clocks=phase_clocks(model))


def test_the_c_forward_checks_what_torch_indexing_would_have_checked():
    """The C code reads raw memory, so bad ids, positions past the cache and a wrong cache raise."""
    if not native.available():
        pytest.skip(f"the C forward cannot be built here: {native.unavailable_reason()}")
    model = LeanLlama(tiny_llama(0), "q4_1")
    cache = model.new_cache(8)
    with pytest.raises(ValueError, match="token ids must lie in"):
        model.forward(torch.tensor([1, model.vocab_size]), 0, cache)
    with pytest.raises(ValueError, match="token ids must lie in"):
        model.forward(torch.tensor([-1]), 0, cache)
    with pytest.raises(ValueError, match="do not fit the cache"):
        model.forward(torch.tensor([1, 2]), 7, cache)
    with pytest.raises(ValueError, match="keep"):
        model.forward(torch.tensor([1, 2]), 0, cache, keep=3)
    with pytest.raises(ValueError, match="cache must be a contiguous float32 tensor"):
        model.forward(torch.tensor([1]), 0, model.early_exit(1).new_cache(8))
    assert model.forward(torch.tensor([1, 2]), 6, cache).shape == (2, model.vocab_size)


def test_where_a_compiler_exists_the_c_forward_builds():
    """A broken leanq4.c must fail the suite, not turn every q4_1 test into a skip."""
    if native._compiler() is None:
        pytest.skip("no C compiler here")
    assert native.available(), native.unavailable_reason()
    info = native.build_info()  # what a record names
    assert info["flags"] == native.build_flags() and info["compiler"] == " ".join(native._compiler())
    assert info["library"] == native._library_path(native._compiler(), info["flags"]).name


@pytest.mark.parametrize("target", ["avx2", "baseline"])
def test_the_emulated_cpu_builds_are_exact_across_the_8_row_split(monkeypatch, target):
    """The library built for an older CPU level (as make test emulates) keeps verify == steps,
    at k = 9 (past the kernels' 8-row chunks) and head_dim 64 (the vector attention path)."""
    if native._compiler() is None:
        pytest.skip("no C compiler here")
    from transformers import LlamaConfig, LlamaForCausalLM

    monkeypatch.setenv("SPECDEC_EMULATED_CPU", target)
    torch.manual_seed(5)
    config = LlamaConfig(
        vocab_size=64, hidden_size=128, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip
    model = LeanLlama(LlamaForCausalLM(config).eval(), "q4_1")
    assert model.verify_matches_steps(k=9, context=7)


def test_q4_1_handles_heads_times_head_dim_unlike_hidden():
    """head_dim given apart from hidden / heads (attention width 128, hidden 64): q4_1 agrees
    with float32 on grid weights, as the torch modes do."""
    if not native.available():
        pytest.skip(f"the C forward cannot be built here: {native.unavailable_reason()}")
    from test_lean import on_q4_1_grid
    from transformers import LlamaConfig, LlamaForCausalLM

    from specdec.engine.lm import open_lm

    torch.manual_seed(6)
    config = LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=64,
    )  # fmt: skip
    hf = on_q4_1_grid(LlamaForCausalLM(config).eval())
    seq = [5, 17, 42, 8, 33, 3]
    full = open_lm(LeanLlama(hf, "float32")).forward(seq)
    ours = open_lm(LeanLlama(hf, "q4_1")).forward(seq)
    assert float((ours - full).abs().max()) < 1e-4 * float(full.abs().max())


def test_the_q4_1_entry_point_checks_its_arguments_in_c():
    """The C function itself refuses positions past the cache, bad row counts and negative ids (-2)."""
    if not native.available():
        pytest.skip(f"the C forward cannot be built here: {native.unavailable_reason()}")
    import ctypes

    model = LeanLlama(tiny_llama(0), "q4_1")
    cache, desc = model.new_cache(8), leannative.native_structure(model)
    ids, logits = torch.tensor([1, 2], dtype=torch.int64), torch.empty(2, model.vocab_size)

    def call(k=2, start=6, capacity=8, keep=2, ids=ids):
        return native.library().specdec_q4_forward(
            ctypes.byref(desc), ids.data_ptr(), k, start, cache.data_ptr(), capacity, logits.data_ptr(), keep
        )

    assert call() == 0
    for bad in ({"start": 7}, {"start": -1}, {"k": 0}, {"keep": 3}, {"keep": 0}, {"capacity": 10**6}):
        assert call(**bad) == -2, bad
    assert call(ids=torch.tensor([1, -5], dtype=torch.int64)) == -2


def test_every_q4_1_entry_point_checks_its_arguments_and_its_abi(monkeypatch, fresh_load):
    """leanq4.c's exported functions refuse what would read or write out of bounds (-2): ids at or past
    the vocabulary, layers in another code than Q4_1, null pointers and bad row counts in the one-layer
    products, a null profile buffer,
    a profiling switch other than 0/1; and a library whose structures differ from Python's is refused
    at load, by version or by size, as leanq8's is."""
    if not native.available():
        pytest.skip(f"the C forward cannot be built here: {native.unavailable_reason()}")
    import ctypes

    model = LeanLlama(tiny_llama(0), "q4_1")
    cache, desc = model.new_cache(8), leannative.native_structure(model)
    assert desc.vocab == model.vocab_size
    logits = torch.empty(2, model.vocab_size)
    lib = native.library()
    ids = torch.tensor([1, model.vocab_size], dtype=torch.int64)  # one past the last row
    args = (ids.data_ptr(), 2, 0, cache.data_ptr(), 8, logits.data_ptr(), 2)
    assert lib.specdec_q4_forward(ctypes.byref(desc), *args) == -2
    ok = torch.tensor([1, model.vocab_size - 1], dtype=torch.int64)
    assert lib.specdec_q4_forward(ctypes.byref(desc), ok.data_ptr(), *args[1:]) == 0
    desc.layer_codes = 1  # the one model_t of both forwards: Q8_0 layers are leanq8.c's, refused here
    assert lib.specdec_q4_forward(ctypes.byref(desc), ok.data_ptr(), *args[1:]) == -2
    desc.layer_codes = 0
    layer = model.layers[0]["qkv"].struct()
    k, n = layer.k, layer.n
    x, y = torch.zeros(3, k), torch.empty(3, n)
    assert lib.specdec_q41_mm(ctypes.byref(layer), x.data_ptr(), 3, y.data_ptr()) == 0
    assert lib.specdec_q41_mm(ctypes.byref(layer), x.data_ptr(), 0, y.data_ptr()) == -2
    assert lib.specdec_q41_mm(ctypes.byref(layer), None, 3, y.data_ptr()) == -2
    assert lib.specdec_q41_mm(None, x.data_ptr(), 3, y.data_ptr()) == -2
    head = model.head.struct()
    hx, hy = torch.zeros(2, head.k), torch.empty(2, head.n)
    assert lib.specdec_q80_mm(ctypes.byref(head), hx.data_ptr(), 2, hy.data_ptr()) == 0
    assert lib.specdec_q80_mm(ctypes.byref(head), hx.data_ptr(), 2, None) == -2
    assert not hasattr(lib, "specdec_q4_profile")  # the clocks are the model's (model_t.phase_s)
    monkeypatch.setattr(native, "Q4_ABI", native.Q4_ABI + 100)
    native._load.cache_clear()
    assert "leanq4 ABI mismatch" in native.unavailable_reason("q4_1")
