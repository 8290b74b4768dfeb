"""The verify-kernels benchmark (specdec.measure.verifykernels, issue 40): an earlier commit's q4q8 library
built and loaded beside this checkout's, both timed and compared on the same model, the arithmetic peaks
the floor divides by, and the floor's arithmetic. No timing is asserted: only shapes, rules and bits."""

from __future__ import annotations

import subprocess

import pytest
import torch
from test_native_q8 import needs_q8, wide_model

from specdec.engine import native
from specdec.engine.lean import LeanLlama
from specdec.measure import verifykernels as vk

pytestmark = pytest.mark.usefixtures("one_thread")

#: the commit before the multi-row kernels (ABI 6: no specdec_q8_amx, no specdec_q8_peak)
BEFORE = "747fa73"


def has_commit(commit: str) -> bool:
    try:
        done = subprocess.run(
            ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=vk.ROOT, capture_output=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def test_settings_are_checked_naming_the_field():
    assert vk.VerifyKernels().ks == tuple(range(1, 34))
    with pytest.raises(ValueError, match="ks must include 1"):
        vk.VerifyKernels(ks=(2, 4))
    with pytest.raises(ValueError, match="profile_ks must be among ks"):
        vk.VerifyKernels(ks=(1, 2), profile_ks=(1, 4))
    with pytest.raises(ValueError, match="threads"):
        vk.VerifyKernels(threads=(0,))
    with pytest.raises(ValueError, match="before must name a git commit"):
        vk.VerifyKernels(before=" ")
    assert "out" not in vk.VerifyKernels(out="x.json").to_record()


def test_the_tree_is_binary_and_valid():
    assert vk.tree_parents(1) == [-1]
    assert vk.tree_parents(7) == [-1, 0, 0, 1, 1, 2, 2]
    assert all(-1 <= p < r for r, p in enumerate(vk.tree_parents(33)))


def test_the_floor_is_the_weights_then_the_arithmetic_plus_attention():
    counts = {"weight_bytes": 1e8, "macs": 1e8, "epilogue_vector_ops": 1e6}
    peaks = {
        "int8": {"median_per_s": 4e11},
        "amx_int8": {"median_per_s": 4e12},
        "float32_vector": {"median_per_s": 8e9},
    }
    profile = [{"k": 1, "buckets_ms": {"attention": 1.0}}, {"k": 9, "buckets_ms": {"attention": 5.0}}]
    rows = {r["k"]: r for r in vk.floor_table(counts, peaks, 20.0, profile, [1, 5, 40])}
    assert rows[1]["weights_ms"] == pytest.approx(5.0) and rows[5]["attention_ms"] == pytest.approx(3.0)
    assert rows[1]["floor_ms"] == pytest.approx(5.0 + 1.0) and rows[1]["floor_v"] == 1.0
    # 40 rows: 40 x 0.25 ms of int8 products pass the 5 ms of weights; registers add the epilogue
    assert rows[40]["int8_ms"] == pytest.approx(10.0) and rows[40]["epilogue_ms"] == pytest.approx(5.0)
    assert rows[40]["floor_ms"] == pytest.approx(10.0 + 5.0)
    assert rows[40]["floor_registers_ms"] == pytest.approx(15.0 + 5.0)
    assert rows[40]["floor_amx_ms"] == pytest.approx(5.0 + 5.0)  # the epilogue, not AMX's products
    assert rows[40]["floor_v"] == pytest.approx(15.0 / 6.0)


def test_the_model_counts_match_smollm2s_shapes():
    needs_q8()
    model = LeanLlama(wide_model(), "q4q8", threads=1)
    counts = vk.model_counts(model)
    # hidden 128, 2 heads of 64, 1 kv head, inter 96, 2 layers, vocab 70
    per_layer = 256 * 128 + 128 * 128 + 192 * 128 + 128 * 96
    assert counts["layer_macs"] == 2 * per_layer and counts["head_macs"] == 70 * 128
    tiles = (16 * 4) + (8 * 4) + (12 * 4) + (8 * 3)
    assert counts["weight_bytes"] == 2 * tiles * 320 + 5 * 4 * 544


def test_the_peaks_run_each_kind_and_refuse_unknown_ones():
    needs_q8()
    for kind in native.PEAK_KINDS:
        if kind == "amx_int8" and native.amx() is None:
            with pytest.raises(ValueError, match="no AMX here"):
                native.peak_work(kind, 10, 1)
            continue
        assert native.peak_work(kind, 10, 1) > 0
    with pytest.raises(ValueError, match="kind must be one of"):
        native.peak_work("int4", 10, 1)
    peaks = vk.measure_peaks(1, seconds=0.001, repeats=2)
    assert peaks["int8"]["median_per_s"] > 0 and peaks["float32_vector"]["median_per_s"] > 0


def test_an_earlier_library_loads_beside_this_one_and_gives_the_same_logits():
    """The library of the commit before the multi-row kernels (ABI 6) is built from git, loaded beside
    this checkout's, repacks the same model, and gives the same logits bit for bit (chains and trees);
    both are timed in one interleaved loop."""
    needs_q8()
    if not has_commit(BEFORE):
        pytest.skip(f"no git history with commit {BEFORE} here")
    old, info = vk.library_at(BEFORE)
    assert info["abi"] == 6 and set(info["lacks"]) == set(native._Q8_NEWER)  # every entry of ABI 7 and 8
    model = LeanLlama(wide_model(), "q4q8", threads=2)
    views = vk.library_views(model, vk.forwards_of(model, {"before": old, "after": None}), 2)
    prompt = list(range(3, 40))
    assert views["before"].q8_forward().lib is old and views["after"].q8_forward() is model.q8_forward()
    assert vk.equal_logits(views, prompt, [1, 2, 5, 9, 17])["bit_equal"]
    out = vk.verify_curves(views, prompt, [1, 2, 3], passes=2, seed=0)
    assert set(out["curves"]) == {"before-chain", "before-tree", "after-chain", "after-tree"}
    one = out["curves"]["after-chain"][0]
    assert one["k"] == 1 and one["v"] == pytest.approx(1.0) and len(one["samples_s"]) == 2
    assert [r["k"] for r in out["after_over_before"]["tree"]] == [1, 2, 3]
    dec = vk.plain_decode(views, prompt, tokens=4, repeats=2, seed=0)
    assert dec["same_tokens"] and len(dec["seconds_per_token"]["after"]) == 2


def test_campaign_v2s_library_runs_on_structures_that_only_grew_at_their_end():
    """Campaign v2's library (ABI 5: model_t without the phase_s pointer ABI 6 appended) is accepted on
    this checkout's structures, says so in its info, and gives the same logits bit for bit; a library
    whose sizes are not such a prefix is still refused."""
    from specdec.experiments.campaign3 import V2_COMMIT

    needs_q8()
    if not has_commit(V2_COMMIT):
        pytest.skip(f"no git history with commit {V2_COMMIT} here")
    old, info = vk.library_at(V2_COMMIT)
    assert info["abi"] == 5
    assert info["structures"]["its_sizes"][3] + 8 == info["structures"]["ours"][3]
    model = LeanLlama(wide_model(), "q4q8", threads=2)
    views = vk.library_views(model, vk.forwards_of(model, {"v2": old, "now": None}), 2)
    assert vk.equal_logits(views, list(range(3, 40)), [1, 2, 5])["bit_equal"]
    grown = dict(native._Q8_APPENDED)
    try:  # without the rule, ABI 5's smaller model_t is refused
        native._Q8_APPENDED.clear()
        with pytest.raises(OSError, match="structure sizes"):
            vk.library_at(V2_COMMIT)
    finally:
        native._Q8_APPENDED.update(grown)


def test_a_commit_without_the_sources_is_refused():
    if not has_commit("HEAD"):
        pytest.skip("no git history here")
    with pytest.raises(ValueError, match="git cannot show|no specdec/engine/csrc"):
        vk.library_at("0000000000000000000000000000000000000000")
    assert torch.get_num_threads() == 1
