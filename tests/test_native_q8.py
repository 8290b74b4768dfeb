"""The "q4q8" C forward (csrc/leanq8.c): integer dot products, exact across rows, threads and
instruction sets; bounds checked in C; a damaged cached library rebuilt, not a crash.

Greedy speculative == greedy plain and the chi-square losslessness test run for this mode in
tests/test_lean.py (it is one of SHIPPED there).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_llama

from specdec.engine import native
from specdec.engine.lean import LeanLlama
from specdec.measure import profile as measure_profile

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[1]


def needs_q8():
    if not native.available("q4q8"):
        if native._compiler() is not None:  # a compiler that cannot build it is a failure
            pytest.fail(f"the q4q8 forward does not build: {native.unavailable_reason('q4q8')}")
        pytest.skip(f"the C forward cannot be built here: {native.unavailable_reason('q4q8')}")


@pytest.fixture
def fresh_load():
    native._load.cache_clear()
    yield
    native._load.cache_clear()


def wide_model(seed: int = 5, vocab: int = 70, max_positions: int = 512):
    """hidden 128, head_dim 64 (the vector attention path), vocabulary not a multiple of 16 (a
    partial tile of output columns), grouped-query heads."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=128, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=max_positions,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    return model


def test_threads_are_validated_naming_the_argument():
    with pytest.raises(ValueError, match=r"threads must be an integer in \[1, 1024\]"):
        LeanLlama(tiny_llama(0), "float32", threads=0)
    with pytest.raises(ValueError, match="threads must be an integer"):
        LeanLlama(tiny_llama(0), "float32", threads=True)
    assert native.check_threads(None) == native.default_threads() >= 1
    assert native.check_threads(3) == 3


def test_the_q4q8_forward_builds_and_names_its_integer_path():
    needs_q8()
    info = native.build_info("q4q8")
    assert info["isa"] in ("avx512vnni", "avxvnni", "avx2", "portable")
    assert "-ffp-contract=off" in info["flags"] and info["library"].startswith("leanq8-")


@pytest.mark.parametrize("k", [2, 5, 9, 16])
def test_rows_equal_single_steps_bit_for_bit(k):
    needs_q8()
    model = LeanLlama(wide_model(), "q4q8", threads=2)
    assert model.verify_matches_steps(k=k, context=7 + k, seed=k)


def test_rows_equal_steps_across_the_cache_growth_at_256_positions():
    """A verify call of 16 rows that crosses the session's first cache size (256) equals 16 steps."""
    needs_q8()
    model = LeanLlama(wide_model(), "q4q8", threads=2)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 70, (260,), generator=gen).tolist()
    block, steps = model.session(), model.session()
    block.forward(ids[:244], keep=1)
    steps.forward(ids[:244], keep=1)
    assert block.cache.shape[3] == 256
    rows = block.forward(ids[244:260])
    assert block.cache.shape[3] > 256  # it grew during the call
    one = torch.cat([steps.forward([t]) for t in ids[244:260]])
    assert torch.equal(rows, one)
    # and after a rejection (crop) the next block still equals steps
    block.crop(250)
    steps.crop(250)
    assert torch.equal(block.forward(ids[250:258]), torch.cat([steps.forward([t]) for t in ids[250:258]]))


def test_one_thread_and_many_give_the_same_logits():
    needs_q8()
    hf = wide_model()
    seq = torch.randint(0, 70, (13,), generator=torch.Generator().manual_seed(1))
    outs = []
    for threads in (1, 2, 3, 5):
        model = LeanLlama(hf, "q4q8", threads=threads)
        outs.append(model.forward(seq, 0, model.new_cache(16)))
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_early_exit_views_share_the_repacked_model():
    needs_q8()
    whole = LeanLlama(wide_model(), "q4q8", threads=1)
    one = whole.early_exit(1)
    seq = torch.tensor([5, 17, 42, 8])
    a = one.forward(seq, 0, one.new_cache(8))
    b = whole.forward(seq, 0, whole.new_cache(8))
    assert a.shape == b.shape and not torch.equal(a, b)
    assert one.q8_forward() is whole.q8_forward()
    assert one.verify_matches_steps(k=6, context=5)


def test_q4q8_is_close_to_float32_on_the_gguf_grid():
    """On Q4_1-grid weights the only difference from float32 is the activations' 8-bit rounding."""
    needs_q8()
    from test_lean import on_q4_1_grid

    hf = on_q4_1_grid(wide_model(), half=True)
    seq = torch.tensor([5, 17, 42, 8, 33, 3, 60, 1])
    full = LeanLlama(hf, "float32").forward(seq, 0, LeanLlama(hf, "float32").new_cache(8))
    model = LeanLlama(hf, "q4q8", threads=1)
    ours = model.forward(seq, 0, model.new_cache(8))
    err = float((ours - full).abs().max())
    assert 0.0 < err < 0.05 * float(full.abs().max())
    assert model.quantization_error < 1e-6  # the GGUF's integers and half scales, kept exactly
    assert LeanLlama(on_q4_1_grid(wide_model()), "q4q8").quantization_error > 0  # float32 scales: rounded


def _logits_with(monkeypatch, flags, hf, seq):
    """Logits of ``hf`` in q4q8 with both layer codes (Q4_1 and Q8_0) from a library built with ``flags``."""
    monkeypatch.setattr(native, "build_flags", lambda kind="q4_1": list(flags))
    assert native.available("q4q8"), native.unavailable_reason("q4q8")
    out = []
    for codes in ("q4_1", "q8_0"):
        model = LeanLlama(hf, "q4q8", threads=2, codes=codes)
        out.append(model.forward(seq, 0, model.new_cache(32)))
    return torch.cat(out), native.isa()


def int8_rows(model):
    """``model`` with every decoder matrix rounded to int8 per output row (as the distilled drafts
    are saved, specdec.train.draftnets.quantize_int8), marked ``int8_rows``."""
    with torch.no_grad():
        for layer in model.model.layers:
            for lin in (*vars(layer.self_attn)["_modules"].values(), *vars(layer.mlp)["_modules"].values()):
                if isinstance(lin, torch.nn.Linear):
                    w = lin.weight
                    scale = (w.abs().amax(dim=1, keepdim=True) / 127).clamp(min=1e-12)
                    w.copy_(torch.round(w / scale).clamp(-127, 127) * scale)
    model.int8_rows = True
    return model


def test_q8_0_layer_codes_keep_an_int8_row_model_and_stay_exact():
    """codes="q8_0" (chosen by default for a model marked int8_rows, as the distilled drafts are):
    the layers' own int8 codes with half-precision scales, close to float32, exact across rows and
    threads; refused outside q4q8, naming the argument."""
    needs_q8()
    from test_lean import on_q4_1_grid

    hf = int8_rows(on_q4_1_grid(wide_model(), half=True))  # the head on the Q8_0 grid, exactly
    model = LeanLlama(hf, "q4q8", threads=2)
    assert model.codes == "q8_0" and LeanLlama(hf, "float32").codes == "q4_1"
    assert LeanLlama(wide_model(), "q4q8").codes == "q4_1"
    biggest = max(float(p.abs().max()) for n, p in hf.model.layers.named_parameters() if p.ndim == 2)
    # only the scales are rounded: |q d - w| <= |w| * 2^-11 (half precision's relative rounding)
    assert 0.0 < model.quantization_error <= biggest * 2.0**-11
    for k in (2, 9, 16):
        assert model.verify_matches_steps(k=k, context=7 + k, seed=k)
    seq = torch.randint(0, 70, (13,), generator=torch.Generator().manual_seed(4))
    outs = [LeanLlama(hf, "q4q8", threads=t).forward(seq, 0, model.new_cache(16)) for t in (1, 3)]
    assert torch.equal(outs[0], outs[1])
    full = LeanLlama(hf, "float32").forward(seq, 0, model.new_cache(16))
    assert 0.0 < float((outs[0] - full).abs().max()) < 0.05 * float(full.abs().max())
    with pytest.raises(ValueError, match="codes must be 'q4_1' or, in mode 'q4q8' only, 'q8_0'"):
        LeanLlama(hf, "float32", codes="q8_0")
    with pytest.raises(ValueError, match="codes must be"):
        LeanLlama(hf, "q4q8", codes="q4_0")


def test_a_draft_of_int8_rows_may_run_in_q4q8_and_no_other_draft_may():
    from specdec.measure import modes

    needs_q8()
    assert "q4q8" in modes.draft_modes(int8_rows(wide_model()))
    assert "q4q8" not in modes.draft_modes(wide_model())
    with pytest.raises(ValueError, match="mode must be 'auto' or one of"):
        modes.lean_draft(wide_model(), "q4q8")
    lean, probe = modes.lean_draft(int8_rows(wide_model()), "q4q8", threads=1)
    assert lean.mode == "q4q8" and lean.codes == "q8_0" and lean.threads == 1 and probe is None


def test_every_instruction_set_gives_the_same_logits_bit_for_bit(monkeypatch):
    """Integer sums are exact and the float epilogue is pinned (no FMA contraction), so the builds
    for AVX512-VNNI / AVX-VNNI / AVX2 / portable C give identical logits on this machine."""
    needs_q8()
    from specdec.engine.machine import cpu_flags

    hf = wide_model()
    seq = torch.randint(0, 70, (19,), generator=torch.Generator().manual_seed(2))
    base = ["-O3", "-std=gnu11", "-shared", "-fPIC", "-ffp-contract=off", "-pthread"]
    targets = {"native": ["-march=native"], "avx2": ["-march=x86-64-v3"], "portable": ["-march=x86-64"]}
    if "avx_vnni" in cpu_flags():
        targets["avxvnni"] = ["-march=x86-64-v3", "-mavxvnni"]
    results = {name: _logits_with(monkeypatch, base + march, hf, seq) for name, march in targets.items()}
    ref, _ = results["native"]
    assert results["avx2"][1] == "avx2" and results["portable"][1] == "portable"
    if "avxvnni" in results:
        assert results["avxvnni"][1] == "avxvnni"
    for name, (logits, isa) in results.items():
        assert torch.equal(logits, ref), (name, isa)


@pytest.mark.parametrize("target", ["avx2", "baseline"])
def test_the_emulated_cpu_builds_of_q4q8_are_exact_and_equal_native(monkeypatch, target):
    needs_q8()
    hf = wide_model()
    seq = torch.randint(0, 70, (11,), generator=torch.Generator().manual_seed(4))
    model = LeanLlama(hf, "q4q8", threads=2)
    ref = model.forward(seq, 0, model.new_cache(16))
    monkeypatch.setenv("SPECDEC_EMULATED_CPU", target)
    emulated = LeanLlama(hf, "q4q8", threads=2)
    assert native.isa() == ("avx2" if target == "avx2" else "portable")
    assert torch.equal(emulated.forward(seq, 0, emulated.new_cache(16)), ref)
    assert emulated.verify_matches_steps(k=9, context=7)


def test_the_c_entry_point_checks_its_arguments():
    """Bounds are checked inside C too: a bad call returns an error code, raised as ValueError."""
    needs_q8()
    model = LeanLlama(wide_model(), "q4q8", threads=1)
    fwd = model.q8_forward()
    cache = model.new_cache(8)
    ids = torch.tensor([1, 2, 3], dtype=torch.int64)
    logits = torch.empty(3, 70)

    def call(**kw):
        args = dict(ids=ids.data_ptr(), k=3, start=0, cache=cache.data_ptr(), capacity=8,
                    logits=logits.data_ptr(), keep=3, layers=2, threads=1) | kw  # fmt: skip
        fwd.forward(**args)

    call()  # fine
    for bad in ({"start": 6}, {"start": -1}, {"k": 0}, {"keep": 4}, {"keep": 0}, {"layers": 3},
                {"layers": 0}, {"threads": 0}, {"capacity": 513}):  # fmt: skip
        with pytest.raises(ValueError, match="refused its arguments"):
            call(**bad)
    bad_ids = torch.tensor([1, 70, 3], dtype=torch.int64)
    with pytest.raises(ValueError, match="refused its arguments"):
        call(ids=bad_ids.data_ptr())
    with pytest.raises(ValueError, match="token ids must lie in"):  # the Python check first
        model.forward(torch.tensor([1, 70]), 0, cache)
    with pytest.raises(ValueError, match="do not fit the cache"):
        model.forward(torch.tensor([1, 2]), 7, cache)


def test_an_abi_mismatch_is_a_clear_refusal(monkeypatch, fresh_load):
    needs_q8()
    monkeypatch.setattr(native, "Q8_ABI", native.Q8_ABI + 100)
    native._load.cache_clear()
    assert "ABI mismatch" in native.unavailable_reason("q4q8")
    with pytest.raises(ValueError, match="ABI mismatch"):
        LeanLlama(tiny_llama(0), "q4q8")


def test_phase_clocks_are_per_model(monkeypatch):
    needs_q8()
    a = LeanLlama(wide_model(), "q4q8", threads=1)
    b = LeanLlama(wide_model(), "q4q8", threads=1)
    s = a.session()
    s.forward([5, 17, 42, 8])
    prof = measure_profile.profile_native_step(
        lambda k: s.forward([1] * k), k=3, repeats=3, reset=lambda: s.crop(4), clocks=a.q8_forward()
    )
    assert prof["buckets_ms"]["linear"] > 0 and prof["buckets_ms"]["lm_head"] > 0
    assert b.q8_forward().read_clocks() == [0.0] * len(native.PHASES)  # b's clocks never ran


def test_a_build_failure_with_no_output_still_says_why(monkeypatch, fresh_load, tmp_path):
    """A compiler that fails silently (here `false`) gives a reason naming its exit status."""
    import shutil

    if shutil.which("false") is None:
        pytest.skip("no `false` program here")
    monkeypatch.setenv("CC", "false")
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    for kind in native.KINDS:
        reason = native.unavailable_reason(kind)
        assert reason is not None and "exit status 1" in reason and not reason.endswith(": "), reason


_LOAD = (
    "import sys; from specdec.engine import native; "
    "print(native.available('q4_1'), native.available('q4q8'), native.unavailable_reason('q4q8'))"
)


def _load_in_subprocess(cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPECDEC_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", _LOAD], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.parametrize("size", [1000, 0])
def test_a_damaged_cached_library_is_rebuilt_not_a_crash(tmp_path, size):
    """#20: a truncated (or emptied) cached library used to kill the process with a Bus error."""
    if native._compiler() is None:
        pytest.skip("no C compiler here")
    first = _load_in_subprocess(tmp_path)
    assert first.returncode == 0 and first.stdout.split()[:2] == ["True", "True"], first.stderr
    libs = sorted((tmp_path / "native").glob("*.so"))
    assert len(libs) == 2
    for lib in libs:
        with open(lib, "r+b") as f:
            f.truncate(size)
    again = _load_in_subprocess(tmp_path)
    assert again.returncode == 0, again.stderr  # no Bus error
    assert again.stdout.split()[:2] == ["True", "True"], again.stdout + again.stderr
    for lib in libs:
        assert f"rebuilding damaged library {lib}" in again.stderr
        assert lib.stat().st_size > size
    third = _load_in_subprocess(tmp_path)  # rebuilt libraries load quietly
    assert third.returncode == 0 and "rebuilding" not in third.stderr


def test_a_library_without_its_check_record_is_rebuilt(tmp_path):
    if native._compiler() is None:
        pytest.skip("no C compiler here")
    assert _load_in_subprocess(tmp_path).returncode == 0
    for side in (tmp_path / "native").glob("*.check.json"):
        side.unlink()
    again = _load_in_subprocess(tmp_path)
    assert again.returncode == 0 and again.stderr.count("rebuilding damaged library") == 2
    assert "no valid size and checksum record" in again.stderr


def test_torch_runs_on_one_thread_while_a_q4q8_model_decodes():
    from specdec.engine.cores import torch_threads_for

    needs_q8()
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch_threads_for(LeanLlama(wide_model(), "q4q8", threads=2)):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with torch_threads_for(LeanLlama(wide_model(), "float32")):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_decoding_loop_keeps_its_freed_memory_where_the_c_library_is_glibc():
    """keep_freed_memory: glibc's mallopt takes both settings (True; False on another C library), once per
    process; in a fresh process nothing is set until a decoding loop enters torch_threads_for, and then it
    is; SPECDEC_KEEP_FREED_MEMORY=0 leaves the allocator alone. (The page faults it saves depend on the
    process's allocation history: a dev probe, not a test.)"""
    import os
    import platform
    import subprocess
    import sys

    from specdec.engine import cores

    glibc = platform.libc_ver()[0] == "glibc" and not any(k in os.environ for k in cores._GLIBC_KNOBS)
    if os.environ.get("SPECDEC_KEEP_FREED_MEMORY") != "0":
        assert cores.keep_freed_memory() is glibc and cores.keep_freed_memory() is glibc
    code = "\n".join([
        f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r})",
        "from specdec.engine import cores", "from test_native_q8 import wide_model",
        "from specdec.engine.lean import LeanLlama", "from specdec.engine.decoding import autoregressive",
        "model = LeanLlama(wide_model(), 'float32')", "assert not cores._MEMORY, 'set before any decoding'",
        "autoregressive(model, [1, 2, 3], max_new_tokens=4, temperature=1.0)", "print(cores._MEMORY)",
    ])  # fmt: skip
    unset = (*cores._GLIBC_KNOBS, "SPECDEC_KEEP_FREED_MEMORY")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == str({"done": glibc})
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=env | {"SPECDEC_KEEP_FREED_MEMORY": "0"})  # fmt: skip
    assert off.returncode == 0, off.stderr[-2000:]
    assert off.stdout.strip().splitlines()[-1] == str({"done": False})
