"""The cost accounting by hand (theory.cost), its predictions' arithmetic, and the measurements' shape.

No test asserts a speed: the measurements run with tiny sizes and are checked for their keys,
units (positive, finite, consistent with the bytes and FLOPs they report) and for restoring
torch's thread count.
"""

from __future__ import annotations

import math

import pytest

from specdec.measure import core as measure_core
from specdec.measure import profile as measure_profile
from specdec.measure import roofline
from specdec.theory.cost import (
    WEIGHT_FORMATS,
    predict_step_time,
    predict_verify_curve,
    step_cost,
)

# SmolLM2-135M: hidden 576, 30 layers, 9 heads (head_dim 64), 3 KV heads, MLP 1536, tied.
SMOLLM2 = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
}
D, INTER, LAYERS, HEADS, KV, HD, VOCAB = 576, 1536, 30, 9, 3, 64, 49152
# Per layer: q (576x576), k and v (192x576 each), o (576x576); gate, up (1536x576), down (576x1536).
ATTN_PARAMS = LAYERS * (D * D + 2 * (KV * HD) * D + D * D)
MLP_PARAMS = LAYERS * 3 * D * INTER
HEAD_PARAMS = VOCAB * D
MATMUL_PARAMS = ATTN_PARAMS + MLP_PARAMS  # the transformer layers' matmuls, LM head apart

MATMUL_PARTS = ("attention_projections", "mlp", "lm_head")

# A hand-made roofline entry: 10 GB/s, 100 GFLOP/s float32 (ridge 10 FLOP/byte).
ROOF = {"bandwidth_gbps": 10.0, "peak_gflops": {"float32": 100.0, "bfloat16": 400.0}}


# --------------------------------------------------------------------------- step_cost
def test_smollm2_float32_bytes_by_hand():
    cost = step_cost(SMOLLM2, k=1, context=128, weight_format="float32")
    parts = cost["parts"]
    assert MATMUL_PARAMS == 30 * (2 * 576 * 576 + 2 * 192 * 576 + 3 * 576 * 1536) == 106_168_320
    assert parts["attention_projections"]["params"] == ATTN_PARAMS
    assert parts["mlp"]["params"] == MLP_PARAMS
    assert parts["attention_projections"]["weight_bytes"] + parts["mlp"]["weight_bytes"] == 4 * MATMUL_PARAMS
    assert parts["lm_head"]["weight_bytes"] == 4 * HEAD_PARAMS  # the whole V x d matrix
    assert parts["embedding"]["weight_bytes"] == 4 * D  # the lookup reads k = 1 row
    assert parts["norm"]["weight_bytes"] == 4 * (2 * LAYERS + 1) * D
    weights = 4 * (MATMUL_PARAMS + HEAD_PARAMS + D + (2 * LAYERS + 1) * D)
    assert cost["weight_bytes"] == weights
    assert cost["matmul_params"] == MATMUL_PARAMS + HEAD_PARAMS
    # distinct parameters, the tied matrix once: SmolLM2-135M's 134,515,008
    assert cost["params"] == MATMUL_PARAMS + HEAD_PARAMS + (2 * LAYERS + 1) * D == 134_515_008
    assert cost["bytes"] == pytest.approx(sum(p["bytes"] for p in parts.values()))
    assert cost["bytes"] == pytest.approx(cost["weight_bytes"] + cost["kv_bytes"] + cost["activation_bytes"])
    assert cost["flops"] == pytest.approx(sum(p["flops"] for p in parts.values()))
    assert cost["intensity_flop_per_byte"] == pytest.approx(cost["flops"] / cost["bytes"])
    assert cost["tokens"] == 1 and cost["bytes_per_weight"]["mlp"] == 4.0


def test_weights_are_read_once_per_call_and_flops_scale_with_tokens():
    one = step_cost(SMOLLM2, k=1, context=64)
    for k in (2, 4, 8, 32):
        many = step_cost(SMOLLM2, k=k, context=64)
        for part in MATMUL_PARTS:
            assert many["parts"][part]["weight_bytes"] == one["parts"][part]["weight_bytes"]
            assert many["parts"][part]["flops"] == k * one["parts"][part]["flops"]
        matmul_flops = sum(many["parts"][p]["flops"] for p in MATMUL_PARTS)
        assert matmul_flops == 2 * (MATMUL_PARAMS + HEAD_PARAMS) * k
        assert many["parts"]["embedding"]["weight_bytes"] == k * 4 * D
    # a batch of sequences: the same weights, the tokens' FLOPs
    batched = step_cost(SMOLLM2, k=3, context=64, batch=5)
    single = step_cost(SMOLLM2, k=3, context=64)
    assert batched["tokens"] == 15
    for part in MATMUL_PARTS:
        assert batched["parts"][part]["weight_bytes"] == single["parts"][part]["weight_bytes"]
        assert batched["parts"][part]["flops"] == 5 * single["parts"][part]["flops"]


def test_attention_over_the_cache_by_hand():
    k, ctx = 4, 100
    cache = step_cost(SMOLLM2, k=k, context=ctx)["parts"]["attention_cache"]
    pairs = k * ctx + k * (k + 1) // 2  # causal: new token i sees ctx + i positions
    assert cache["flops"] == 4 * LAYERS * HEADS * HD * pairs
    kv_row = 2 * KV * HD * 4  # K and V of one position in one layer, float32
    assert cache["kv_bytes"] == LAYERS * kv_row * ((ctx + k) + k)  # read all, write the new
    assert cache["weight_bytes"] == 0 and cache["params"] == 0
    longer = step_cost(SMOLLM2, k=k, context=ctx + 10)["parts"]["attention_cache"]
    assert longer["kv_bytes"] - cache["kv_bytes"] == 10 * LAYERS * kv_row
    assert step_cost(SMOLLM2, k=1, context=0)["parts"]["attention_cache"]["flops"] == 4 * LAYERS * HEADS * HD


def test_quantized_formats_bytes():
    fp32 = step_cost(SMOLLM2, k=1, context=0, weight_format="float32")
    int4 = step_cost(SMOLLM2, k=1, context=0, weight_format="int4")
    # int4 group 32 with a bf16 scale and a bf16 zero per group: 0.5 + 4/32 bytes per weight
    for part in MATMUL_PARTS:
        ratio = int4["parts"][part]["weight_bytes"] / fp32["parts"][part]["weight_bytes"]
        assert ratio == pytest.approx((0.5 + 4 / 32) / 4)
        assert 1 / 8 < ratio < 1 / 4
    assert int4["bytes_per_weight"] == dict.fromkeys(("embedding", "attention", "mlp", "lm_head"), 0.625)
    q40 = step_cost(SMOLLM2, k=1, context=0, weight_format="q4_0")
    assert q40["parts"]["lm_head"]["weight_bytes"] == VOCAB * D * 18 / 32  # 18-byte blocks of 32
    int8 = step_cost(SMOLLM2, k=1, context=0, weight_format="int8")  # one bf16 scale per output row
    assert int8["parts"]["lm_head"]["weight_bytes"] == VOCAB * (D + 2)
    assert int8["parts"]["mlp"]["weight_bytes"] == LAYERS * (2 * INTER * (D + 2) + D * (INTER + 2))
    bf16 = step_cost(SMOLLM2, k=1, context=0, weight_format="bfloat16")
    assert bf16["weight_bytes"] < fp32["weight_bytes"]
    assert bf16["activation_bytes_per_value"] == 2 and fp32["activation_bytes_per_value"] == 4
    assert step_cost(SMOLLM2, k=1, context=0, weight_format=4.0)["weight_bytes"] == fp32["weight_bytes"]
    assert WEIGHT_FORMATS["int4"].matrix_bytes(1, 33) == 33 / 2 + 2 * 4  # a partial group counts whole


def test_weight_format_per_part_and_tying():
    mixed = step_cost(SMOLLM2, k=2, context=0, weight_format={"default": "int4", "lm_head": "float32"})
    assert mixed["weight_format"]["mlp"] == "int4"
    assert mixed["weight_format"]["lm_head"] == "float32"
    assert mixed["weight_format"]["embedding"] == "float32"  # tied: stored as the LM head
    assert mixed["parts"]["lm_head"]["weight_bytes"] == 4 * HEAD_PARAMS
    assert mixed["activation_bytes_per_value"] == 2  # int4 layers run bf16 activations
    untied = step_cost(
        {**SMOLLM2, "tie_word_embeddings": False},
        k=2,
        context=0,
        weight_format={"default": "int4", "lm_head": "float32"},
    )
    assert untied["weight_format"]["embedding"] == "int4"
    assert untied["params"] == mixed["params"] + VOCAB * D
    with pytest.raises(ValueError, match="weight_format"):
        step_cost(SMOLLM2, context=0, weight_format={"mlp": "int4"})  # no default for the rest
    with pytest.raises(ValueError, match="weight_format keys"):
        step_cost(SMOLLM2, context=0, weight_format={"default": "int4", "ffn": "int8"})


def test_params_match_a_transformers_model():
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    for tie in (True, False):
        config = transformers.LlamaConfig(
            vocab_size=97,
            hidden_size=64,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=tie,
        )
        model = transformers.LlamaForCausalLM(config)
        cost = step_cost(config, k=1, context=0)
        assert cost["params"] == model.num_parameters()
        assert cost["config"]["head_dim"] == 16 and cost["config"]["tie_word_embeddings"] is tie


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"k": 0, "context": 0}, r"k must be an integer >= 1; got 0"),
        ({"k": 1.5, "context": 0}, r"k must be an integer >= 1"),
        ({"k": 1, "context": -1}, r"context must be an integer >= 0; got -1"),
        ({"k": 1, "context": 0, "batch": 0}, r"batch must be an integer >= 1"),
        ({"k": 1, "context": 0, "weight_format": "int3"}, r"weight_format must be one of 'float32'"),
        ({"k": 1, "context": 0, "weight_format": -1.0}, r"weight_format must be one of"),
        ({"k": 1, "context": 0, "activation_bytes": 0}, r"activation_bytes must be a finite number > 0"),
    ],
)
def test_step_cost_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        step_cost(SMOLLM2, **kwargs)


def test_step_cost_rejects_bad_configs():
    with pytest.raises(ValueError, match="config must give vocab_size"):
        step_cost({k: v for k, v in SMOLLM2.items() if k != "vocab_size"}, context=0)
    with pytest.raises(ValueError, match=r"num_key_value_heads must be an integer in \[1, 9\]"):
        step_cost({**SMOLLM2, "num_key_value_heads": 10}, context=0)
    with pytest.raises(ValueError, match="num_key_value_heads must divide"):
        step_cost({**SMOLLM2, "num_key_value_heads": 2}, context=0)
    with pytest.raises(ValueError, match="hidden_size"):
        step_cost({**SMOLLM2, "hidden_size": 577}, context=0)
    assert step_cost({**SMOLLM2, "hidden_size": 577, "head_dim": 64}, context=0)["config"]["head_dim"] == 64


# --------------------------------------------------------------------------- predictions
def test_predict_step_time_memory_bound_at_k1():
    cost = step_cost(SMOLLM2, k=1, context=128)
    pred = predict_step_time(cost, ROOF, "float32")
    assert pred["ridge_flop_per_byte"] == pytest.approx(10.0)
    assert cost["intensity_flop_per_byte"] < pred["ridge_flop_per_byte"]
    assert pred["bound"] == "memory"
    assert pred["time_s"] == pytest.approx(cost["bytes"] / 10e9)
    assert pred["memory_time_s"] == pytest.approx(cost["bytes"] / 10e9)
    assert pred["compute_time_s"] == pytest.approx(cost["flops"] / 100e9)
    assert set(pred["parts_s"]) == set(cost["parts"])
    assert sum(pred["parts_s"].values()) >= pred["time_s"] * (1 - 1e-12)
    # many tokens in one call cross the ridge
    big = step_cost(SMOLLM2, k=512, context=0)
    assert big["intensity_flop_per_byte"] > 10
    assert predict_step_time(big, ROOF, "float32")["bound"] == "compute"
    # a faster compute roof moves the ridge up: bfloat16 here
    assert predict_step_time(big, ROOF, "bfloat16")["ridge_flop_per_byte"] == pytest.approx(40.0)


def test_predict_verify_curve():
    curve = predict_verify_curve(SMOLLM2, range(1, 33), ROOF, dtype="float32", context=128)
    assert curve["ks"] == list(range(1, 33)) and curve["ratios"][0] == 1.0
    assert all(b >= a for a, b in zip(curve["ratios"], curve["ratios"][1:], strict=False))
    bound = [b for b in curve["bounds"]]
    knee = curve["knee_k"]
    assert knee is not None and bound[knee - 1] == "compute" and set(bound[: knee - 1]) == {"memory"}
    # memory-bound: T(k)/T(1) is the bytes' ratio; compute-bound: the FLOPs' ratio
    one = step_cost(SMOLLM2, k=1, context=128)
    for k in (2, knee - 1):
        cost = step_cost(SMOLLM2, k=k, context=128)
        assert curve["ratios"][k - 1] == pytest.approx(cost["bytes"] / one["bytes"])
    assert curve["ratios"][31] == pytest.approx(
        step_cost(SMOLLM2, k=32, context=128)["flops"] / 100e9 / curve["t1_s"]
    )
    # an int4 body moves fewer bytes: the ridge is reached at a smaller k
    int4 = predict_verify_curve(
        SMOLLM2, range(1, 33), ROOF, dtype="float32", context=128, weight_format="int4"
    )
    assert int4["knee_k"] < knee


def test_predictions_reject_bad_arguments():
    cost = step_cost(SMOLLM2, context=0)
    with pytest.raises(ValueError, match=r"dtype must be one of the roofline's dtypes 'float32', 'bfloat16'"):
        predict_step_time(cost, ROOF, "float64")
    with pytest.raises(ValueError, match="bandwidth_gbps"):
        predict_step_time(cost, {"peak_gflops": {"float32": 1.0}}, "float32")
    with pytest.raises(ValueError, match="bandwidth_gbps must be a finite number > 0"):
        predict_step_time(cost, {**ROOF, "bandwidth_gbps": 0.0}, "float32")
    with pytest.raises(ValueError, match="cost must be a step_cost result"):
        predict_step_time({"bytes": 1.0}, ROOF, "float32")
    machine = {"rooflines": [{**ROOF, "threads": 1}, {**ROOF, "threads": 2}]}
    with pytest.raises(ValueError, match=r"threads must name one of the measured thread counts \[1, 2\]"):
        predict_step_time(cost, machine, "float32")
    with pytest.raises(
        ValueError, match=r"threads must be one of the measured thread counts \[1, 2\]; got 3"
    ):
        predict_step_time(cost, machine, "float32", threads=3)
    assert predict_step_time(cost, machine, "float32", threads=2)["threads"] == 2
    with pytest.raises(ValueError, match="each k in ks must be an integer >= 1"):
        predict_verify_curve(SMOLLM2, [0, 1], ROOF, context=0)
    with pytest.raises(ValueError, match="ks must hold"):
        predict_verify_curve(SMOLLM2, [], ROOF, context=0)


# --------------------------------------------------------------------------- measurements
@pytest.fixture
def torch_threads():
    """Start each measurement test from a known thread count, and put back the suite's."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(3)  # any count the measurement does not use
    yield torch
    torch.set_num_threads(before)


def _positive(x: float) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x > 0


def test_measure_bandwidth_shape_and_threads(torch_threads):
    bw = roofline.measure_bandwidth(threads=1, size_mib=2, repeats=2)
    assert torch_threads.get_num_threads() == 3  # restored
    assert bw["threads"] == 1 and bw["size_mib"] == 2 and bw["bytes"] == 2 * 2**20
    for key in ("read_gbps", "copy_gbps", "bandwidth_gbps"):
        assert _positive(bw[key]), key
    assert bw["bandwidth_gbps"] == bw["read_gbps"]
    assert bw["read"]["bytes_moved"] == bw["bytes"] and bw["copy"]["bytes_moved"] == 2 * bw["bytes"]
    assert bw["read"]["timed_calls"] == 2 and "method" in bw
    if bw["llc_bytes"]:
        assert bw["exceeds_llc"] is False  # 2 MiB is no DRAM measurement, and it says so


def test_bandwidth_and_gflops_on_a_scripted_clock(torch_threads, monkeypatch):
    """The rates against hand-computed values: each timed call's duration is scripted (the warm-up
    call 9 s, then the repeats), so a rate from the wrong median, a kept warm-up call or a wrong
    byte or FLOP count gives another number."""
    script = iter([9.0, 0.001, 0.003, 0.002, 9.0, 0.008, 0.001, 0.016] + [9.0, 0.002, 0.002, 0.004] * 8)

    def fake_time_once(fn, synchronize=None):
        fn()
        return next(script)

    monkeypatch.setattr(measure_core, "time_once", fake_time_once)  # the one timer, under time_calls
    bw = roofline.measure_bandwidth(threads=1, size_mib=2, repeats=3)
    assert bw["read"]["median_s"] == 0.002 and bw["copy"]["median_s"] == 0.008
    assert bw["read_gbps"] == pytest.approx(1.048576, rel=1e-12)  # 2 MiB read in 2 ms
    assert bw["copy_gbps"] == pytest.approx(0.524288, rel=1e-12)  # 2 x 2 MiB moved in 8 ms
    mm = roofline.measure_matmul(
        "float32", threads=1, sizes=(16,), repeats=3, gemv_mib=1, gemv_rows=(1,), budget_s=100.0
    )
    assert mm["square"][0]["timed_calls"] == 3
    assert mm["square"][0]["gflops"] == pytest.approx(0.004096, rel=1e-12)  # 2 * 16**3 FLOPs in 2 ms


def test_measure_matmul_shape_and_threads(torch_threads):
    for dtype in ("float32", "bfloat16"):
        mm = roofline.measure_matmul(dtype, threads=1, sizes=(16, 32), repeats=2, gemv_mib=1)
        assert torch_threads.get_num_threads() == 3
        assert mm["dtype"] == dtype and mm["threads"] == 1
        assert [s["n"] for s in mm["square"]] + mm["skipped"] == [16, 32]
        for s in mm["square"]:
            assert s["flops"] == 2.0 * s["n"] ** 3
            assert s["gflops"] == pytest.approx(s["flops"] / s["median_s"] / 1e9)
        assert mm["peak_gflops"] == max(s["gflops"] for s in mm["square"])
        assert [g["m"] for g in mm["gemv"]] == [1, 4]
        itemsize = 4 if dtype == "float32" else 2
        for g in mm["gemv"]:
            assert g["k"] == g["n"] and g["weight_bytes"] == g["k"] * g["n"] * itemsize >= 2**20
            assert g["flops"] == 2.0 * g["m"] * g["k"] * g["n"]
            assert _positive(g["gflops"]) and _positive(g["gbps"])


def test_measurements_reject_bad_arguments(torch_threads):
    import os

    with pytest.raises(ValueError, match=r"threads must be an integer in \[1, "):
        roofline.measure_bandwidth(threads=0, size_mib=1)
    with pytest.raises(ValueError, match=r"threads must be an integer in \[1, "):
        roofline.measure_bandwidth(threads=(os.cpu_count() or 1) + 1, size_mib=1)
    with pytest.raises(ValueError, match="size_mib must be an integer >= 1"):
        roofline.measure_bandwidth(threads=1, size_mib=0)
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        roofline.measure_bandwidth(threads=1, size_mib=1, repeats=0)
    with pytest.raises(
        ValueError, match=r"dtype must be one of 'float32', 'bfloat16', 'float16'; got 'float64'"
    ):
        roofline.measure_matmul("float64")
    with pytest.raises(ValueError, match="each size in sizes"):
        roofline.measure_matmul("float32", 1, sizes=(0,))
    with pytest.raises(ValueError, match="budget_s"):
        roofline.measure_matmul("float32", 1, sizes=(8,), budget_s=0)
    with pytest.raises(ValueError, match="dtype must be one of"):
        roofline.machine_roofline(1, dtypes=("int8",))
    assert torch_threads.get_num_threads() == 3


def test_machine_roofline_arithmetic(torch_threads):
    roof = roofline.machine_roofline(
        threads=[1, 1], dtypes=("float32",), size_mib=1, sizes=(16,), repeats=1, gemv_mib=1
    )
    assert torch_threads.get_num_threads() == 3 == roof["torch_threads"]
    assert [e["threads"] for e in roof["rooflines"]] == [1, 1]
    entry = roof["rooflines"][0]
    assert entry["bandwidth_gbps"] == entry["bandwidth"]["read_gbps"]
    assert entry["peak_gflops"]["float32"] == entry["matmul"]["float32"]["peak_gflops"]
    assert entry["ridge_flop_per_byte"]["float32"] == pytest.approx(
        entry["peak_gflops"]["float32"] / entry["bandwidth_gbps"]
    )
    assert set(entry["gemv_gbps"]["float32"]) == {"1", "4"}
    cpu = roof["cpu"]
    for key in (
        "name",
        "torch_capability",
        "numpy_simd",
        "caches_bytes",
        "available_cpus",
        "bf16_instructions",
    ):
        assert key in cpu
    assert isinstance(cpu["torch_capability"], str) and cpu["torch_capability"]
    assert roof["environment"]["device"] == "cpu"
    # the entry drives a prediction
    pred = predict_step_time(step_cost(SMOLLM2, context=0), entry, "float32")
    assert _positive(pred["time_s"]) and pred["bound"] in ("memory", "compute")
    with pytest.raises(ValueError, match="threads must name one of"):
        predict_step_time(step_cost(SMOLLM2, context=0), roof, "float32")


def test_default_threads_are_one_and_all(monkeypatch, torch_threads):
    seen = []
    monkeypatch.setattr(roofline, "available_cpus", lambda: 2)
    monkeypatch.setattr(
        roofline, "measure_bandwidth", lambda n, **kw: seen.append(n) or {"bandwidth_gbps": 1.0}
    )
    monkeypatch.setattr(
        roofline,
        "measure_matmul",
        lambda d, n, *a, **kw: {"peak_gflops": 2.0, "gemv": [{"m": 1, "gbps": 1.0}]},
    )
    roof = roofline.machine_roofline(dtypes=("float32",))
    assert seen == [1, 2] and [e["threads"] for e in roof["rooflines"]] == [1, 2]
    assert roof["rooflines"][1]["ridge_flop_per_byte"] == {"float32": 2.0}


# --------------------------------------------------------------------------- profile
def test_op_buckets():
    bucket = measure_profile._op_bucket
    assert bucket("aten::mm") == bucket("aten::addmm") == bucket("aten::linear") == "linear"
    assert bucket("aten::_weight_int4pack_mm_for_cpu") == bucket("aten::_weight_int8pack_mm") == "linear"
    assert bucket("aten::scaled_dot_product_attention") == bucket("aten::_softmax") == "attention"
    assert bucket("aten::bmm") == "attention"
    assert bucket("aten::mul") is None and bucket("aten::rsqrt") is None


def test_profile_step_by_op_names(torch_threads):
    torch = torch_threads
    torch.set_num_threads(1)
    w = torch.randn(64, 64)
    calls = []

    def forward(k):
        calls.append(k)
        x = torch.randn(k, 64) @ w
        return torch.softmax(x, dim=-1) * 2.0

    prof = measure_profile.profile_step(
        forward, k=3, repeats=2, warmup=1, reset=lambda: calls.append("reset")
    )
    assert calls == [3, "reset"] * 5  # warm-up, unprofiled, profiled: each followed by the reset
    assert prof["bucketing"] == "op names" and prof["by_label_ms"] is None
    assert set(prof["buckets_ms"]) == {"linear", "attention", "other ops", "framework overhead"}
    assert prof["buckets_ms"]["linear"] > 0 and prof["buckets_ms"]["attention"] > 0
    assert all(v >= 0 for v in prof["buckets_ms"].values())
    ops = sum(v for b, v in prof["buckets_ms"].items() if b != "framework overhead")
    assert ops == pytest.approx(prof["ops_ms"])
    assert sum(prof["buckets_ms"].values()) == pytest.approx(max(prof["wall_ms"], prof["ops_ms"]))
    assert prof["k"] == 3 and prof["repeats"] == 2 and _positive(prof["wall_ms_unprofiled"])
    assert {op["name"] for op in prof["top_ops"]} >= {"aten::mm"}
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        measure_profile.profile_step(forward, k=0)
    with pytest.raises(ValueError, match="forward_fn must be callable"):
        measure_profile.profile_step(None)


def test_profile_step_by_labels_on_a_llama(torch_threads):
    torch = torch_threads
    pytest.importorskip("transformers")
    import tiny_models

    from specdec.engine.lm import TensorSession

    torch.set_num_threads(1)
    model = tiny_models.tiny_llama(0)
    gen = torch.Generator().manual_seed(0)
    session = TensorSession(model, torch.randint(0, 97, (1, 8), generator=gen))
    new = torch.randint(0, 97, (1, 4), generator=gen)
    with measure_profile.label_modules(model) as labelled:
        assert "lm_head" in labelled and "model.layers.0.self_attn" in labelled and "model.norm" in labelled
        prof = measure_profile.profile_step(
            lambda k: session.forward(new[:, :k]), k=4, repeats=2, reset=lambda: session.crop(8)
        )
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())  # removed
    assert prof["bucketing"] == "labels"
    assert set(prof["buckets_ms"]) == {*measure_profile.LABELS, "other ops", "framework overhead"}
    for label in ("lm_head", "attention", "mlp", "norm"):
        assert prof["buckets_ms"][label] > 0, label
    assert prof["by_op_ms"]["framework overhead"] == prof["buckets_ms"]["framework overhead"]
    assert sum(prof["by_op_ms"].values()) == pytest.approx(sum(prof["buckets_ms"].values()))
    with pytest.raises(ValueError, match="labels must map to"):
        with measure_profile.label_modules(model, {"mlp": "ffn"}):
            pass


def test_a_slow_size_is_skipped_within_the_budget(torch_threads):
    mm = roofline.measure_matmul(
        "float32", 1, sizes=(16, 512), repeats=3, gemv_rows=(1,), gemv_mib=1, budget_s=1e-9
    )
    assert [s["n"] for s in mm["square"]] == [16] and mm["skipped"] == [512]
    assert mm["square"][0]["timed_calls"] == 1 and mm["gemv"][0]["timed_calls"] == 1


def test_the_accounting_needs_no_torch(root, tmp_path):
    import os
    import subprocess
    import sys

    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # import torch now raises ImportError\n"
        "from specdec.theory.cost import predict_verify_curve, step_cost\n"
        "cfg = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,\n"
        "           num_key_value_heads=2, vocab_size=97)\n"
        "roof = {'bandwidth_gbps': 10.0, 'peak_gflops': {'float32': 100.0}}\n"
        "assert step_cost(cfg, context=8)['flops'] > 0\n"
        "assert predict_verify_curve(cfg, range(1, 5), roof, context=8)['ratios'][0] == 1.0\n"
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
