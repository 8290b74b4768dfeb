"""The "q4q8" forward's multi-row kernels (csrc/leanq8_matmul.h, issue 40): register tiles of up to 8 rows,
wider calls in even passes, and AMX tiles where the CPU has AMX-INT8. Every row of a call
equals the single step at its position bit for bit, whatever the call's rows (every tile shape and pass
split), the threads, the instruction set and the AMX switch; tree nodes equal the chain over their path;
and a deliberately broken tile (a wrong row stride, a stale block scale, a misconfigured AMX tile: the
SPECDEC_Q8_FAULT build hook) makes these equalities fail, so the tests can see a broken kernel.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from test_native_q8 import int8_rows, needs_q8, wide_model
from test_tree_forward import assert_nodes_equal_chains, random_parents

from specdec.engine import native
from specdec.engine.lean import LeanLlama
from specdec.engine.leannative import Q8Linear

pytestmark = pytest.mark.usefixtures("one_thread")

#: call sizes covering every register-tile shape (1..8), uneven pass splits (9 = 5 + 4, 17 = 6 + 6 + 5)
#: and AMX passes (12 and 16: one; 17 = 9 + 8; 33 = 11 + 11 + 11)
KS = [2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 33]


def amx_modes() -> list[str]:
    """The AMX settings this machine can run: "off" always, "on" and "always" where there is AMX."""
    needs_q8()
    return ["off"] if native.amx() is None else ["off", "on", "always"]


def set_amx(mode: str) -> None:
    """Turn the AMX switch where there is AMX (without it every call runs the register tiles: "off")."""
    if native.amx() is not None:
        native.amx(mode)


@pytest.fixture
def amx_restored():
    """Put the AMX switch back to its default after a test that turns it."""
    yield
    if native.available("q4q8") and native.amx() is not None:
        native.amx("on")


@pytest.fixture
def fresh_load():
    native._load.cache_clear()
    yield
    native._load.cache_clear()


def model_in(codes: str, threads: int = 2) -> LeanLlama:
    hf = int8_rows(wide_model()) if codes == "q8_0" else wide_model()
    return LeanLlama(hf, "q4q8", threads=threads, codes=codes)


@pytest.mark.parametrize("codes", ["q4_1", "q8_0"])
def test_rows_equal_single_steps_in_every_tile_shape(codes, amx_restored):
    for mode in amx_modes():
        set_amx(mode)
        model = model_in(codes)
        for k in KS:
            assert model.verify_matches_steps(k=k, context=5 + k, seed=k), (codes, mode, k)


def test_amx_and_register_tiles_give_the_same_bits_on_any_threads(amx_restored):
    """A call of 40 rows (AMX passes 14 + 14 + 12) gives the same logits with AMX off, on and always, on 1
    and 3 threads: int32 sums are exact on both paths and the float epilogue is one sequence."""
    modes = amx_modes()
    hf = wide_model()
    seq = torch.randint(0, 70, (40,), generator=torch.Generator().manual_seed(7))
    outs = {}
    for mode in modes:
        set_amx(mode)
        for threads in (1, 3):
            model = LeanLlama(hf, "q4q8", threads=threads)
            outs[mode, threads] = model.forward(seq, 0, model.new_cache(48))
    first = next(iter(outs.values()))
    for key, out in outs.items():
        assert torch.equal(out, first), key


def test_tree_nodes_equal_their_chains_in_wide_tree_calls(amx_restored):
    """Trees of 17 and 33 nodes (several passes per tile) on 1 and 2 threads, every AMX setting."""
    rng = random.Random(11)
    for mode in amx_modes():
        set_amx(mode)
        for n, threads in ((17, 2), (33, 1)):
            model = LeanLlama(wide_model(), "q4q8", threads=threads)
            parents = random_parents(n, 3, rng)
            tokens = [rng.randrange(70) for _ in range(n)]
            assert_nodes_equal_chains(model, [5, 17, 42, 8, 3], tokens, parents)


def test_the_standalone_linear_rows_equal_single_rows(amx_restored):
    """specdec_q8_linear (the Q8_0 head kernel) over 33 rows: each row equals the one-row call, with AMX
    off and always, on 1 and 2 threads."""
    weight = torch.randn(70, 128, generator=torch.Generator().manual_seed(3))
    x = np.random.default_rng(4).standard_normal((33, 128)).astype(np.float32)
    lin = Q8Linear(weight)
    one = np.concatenate([lin(x[i : i + 1]) for i in range(33)])
    for mode in amx_modes():
        set_amx(mode)
        for threads in (1, 2):
            assert np.array_equal(lin(x, threads=threads), one), (mode, threads)


@pytest.mark.parametrize("target", ["avx2", "baseline"])
def test_the_emulated_builds_keep_every_tile_shape_exact(monkeypatch, target):
    """The AVX2 build (half tiles) and the portable one are exact across pass splits and give native's
    logits; neither has AMX."""
    needs_q8()
    hf = wide_model()
    seq = torch.randint(0, 70, (33,), generator=torch.Generator().manual_seed(8))
    ref = LeanLlama(hf, "q4q8", threads=2)
    want = ref.forward(seq, 0, ref.new_cache(40))
    monkeypatch.setenv("SPECDEC_EMULATED_CPU", target)
    assert native.amx() is None
    for codes in ("q4_1", "q8_0"):
        model = model_in(codes)
        for k in (3, 5, 9, 17):
            assert model.verify_matches_steps(k=k, context=4 + k, seed=k), (target, codes, k)
    emulated = LeanLlama(hf, "q4q8", threads=2)
    assert torch.equal(emulated.forward(seq, 0, emulated.new_cache(40)), want)


def test_the_amx_switch_refuses_unknown_settings():
    needs_q8()
    with pytest.raises(ValueError, match="mode must be one of"):
        native.amx("sometimes")
    assert native.build_info("q4q8")["amx"] in (None, "off", "on", "always")


def _broken_build(monkeypatch, fault: int, target: str = "native") -> None:
    flags = native.build_flags("q4q8")  # native's, or the emulated target's
    if target != "native":
        monkeypatch.setenv("SPECDEC_EMULATED_CPU", target)
        flags = native.build_flags("q4q8")
    broken = [*flags, f"-DSPECDEC_Q8_FAULT={fault}"]
    monkeypatch.setattr(native, "build_flags", lambda kind="q4_1": list(broken) if kind == "q4q8" else flags)
    assert native.available("q4q8"), native.unavailable_reason("q4q8")


@pytest.mark.parametrize(
    ("fault", "target"),
    [(1, "native"), (2, "native"), (1, "avx2"), (2, "baseline"), (3, "native")],
    ids=["row-stride", "stale-scale", "row-stride-avx2", "stale-scale-baseline", "amx-config"],
)
def test_a_broken_tile_makes_rows_differ_from_steps(monkeypatch, fresh_load, fault, target):
    """The build hook SPECDEC_Q8_FAULT breaks rows 1.. of a multi-row tile (1: a wrong row stride, 2: the
    previous block's activation scale) or misconfigures the AMX tiles (3: 8 rows high, so rows 8.. of a
    pass keep stale sums): the rows-equal-steps check then fails, as it must on a broken kernel, while a
    single step (one row) is untouched."""
    needs_q8()
    good = LeanLlama(wide_model(), "q4q8", threads=2)
    step_ids = torch.tensor([5, 17, 42, 8])
    want = good.forward(step_ids[:1], 0, good.new_cache(8))
    _broken_build(monkeypatch, fault, target)
    if fault == 3:
        if native.amx() is None:
            pytest.skip("no AMX on this machine: nothing to misconfigure")
        native.amx("always")
    else:
        set_amx("off")  # the register tiles, where faults 1 and 2 sit on every build
    broken = LeanLlama(wide_model(), "q4q8", threads=2)
    assert torch.equal(broken.forward(step_ids[:1], 0, broken.new_cache(8)), want)  # one row: right
    assert not broken.verify_matches_steps(k=12, context=6, seed=1)
