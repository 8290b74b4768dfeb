"""specdec.engine.builder: one spec -> one opened engine, checked once (issue #32, item 1)."""

from __future__ import annotations

import pytest
import torch
from tiny_models import VOCAB, tiny_llama

from specdec.engine import native
from specdec.engine.builder import EngineSpec, OpenedEngine, draft_modes, open_draft, open_model
from specdec.engine.decoding import autoregressive
from specdec.engine.lean import LeanLlama

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"engine": "vllm"}, r"engine must be one of \('lean', 'hf', 'llama.cpp', 'static'\); got 'vllm'"),
        ({"engine": "lean", "mode": "fp16"}, r"mode \(a lean engine's\) must be one of \('auto'"),
        ({"engine": "hf", "mode": "auto"}, r"dtype\) must be one of \('float32', 'bfloat16'\)"),
        ({"engine": "llama.cpp", "mode": "q8_0"}, r"mode \(llama.cpp's GGUF format\) must be one of"),
        ({"engine": "llama.cpp", "mode": "q4_0", "loop": "fast"}, "loop must be one of"),
        ({"threads": 0}, r"threads must be an integer in \[1, 1024\]"),
        ({"threads": 2**63}, r"threads must be an integer in \[1, 1024\]"),
        ({"threads": 1.5}, "threads must be an integer"),
        ({"device": "cuda"}, "device: only an hf or static engine takes one"),
        ({"engine": "llama.cpp", "mode": "q4_0", "device": "cpu"}, "device: only an hf or static engine"),
        ({"engine": "static", "mode": "auto"}, r"mode \(the static engine's dtype\) must be one of"),
        ({"engine": "static", "mode": "float32", "options": {"int8_head": True}}, "options: a lean engine's"),
        ({"gguf": "x.gguf"}, "gguf: only a llama.cpp engine takes one"),
        ({"options": {"fast": True}}, "options: a lean engine's"),
        ({"engine": "hf", "mode": "float32", "options": {"int8_head": True}}, "options: a lean engine's"),
    ],
)  # fmt: skip
def test_a_bad_spec_is_refused_when_made_naming_the_field(fields, words):
    with pytest.raises(ValueError, match=words):
        EngineSpec(**fields)


def test_threads_mean_one_thing_resolved_when_the_spec_is_made():
    assert EngineSpec("lean", "float32").threads == native.default_threads()  # None: every usable core
    spec = EngineSpec("llama.cpp", "q4_0", 3, loop="eval")
    assert spec.cores == 3
    assert spec.to_record() == {"engine": "llama.cpp", "mode": "q4_0", "threads": 3, "loop": "eval"}
    assert EngineSpec("hf", "bfloat16", 2).to_record() == {
        "engine": "hf", "mode": "bfloat16", "threads": 2, "device": None,
    }  # fmt: skip
    assert EngineSpec("static", "float32", 1, device="cpu").to_record() == {
        "engine": "static", "mode": "float32", "threads": 1, "device": "cpu",
    }  # fmt: skip


def _static_weights():
    """A tiny random Llama in transformers' names (the device check's model)."""
    cfg = {
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "vocab_size": VOCAB, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "max_position_embeddings": 256,
    }  # fmt: skip
    shapes = {"model.embed_tokens.weight": (VOCAB, 32), "model.norm.weight": (32,)}
    for i in range(2):
        for name, shape in (
            ("input_layernorm.weight", (32,)), ("post_attention_layernorm.weight", (32,)),
            ("self_attn.q_proj.weight", (32, 32)), ("self_attn.k_proj.weight", (16, 32)),
            ("self_attn.v_proj.weight", (16, 32)), ("self_attn.o_proj.weight", (32, 32)),
            ("mlp.gate_proj.weight", (64, 32)), ("mlp.up_proj.weight", (64, 32)),
            ("mlp.down_proj.weight", (32, 64)),
        ):  # fmt: skip
            shapes[f"model.layers.{i}.{name}"] = shape
    gen = torch.Generator().manual_seed(0)
    return {n: torch.randn(s, generator=gen) * (1.0 if len(s) == 1 else 0.3) for n, s in shapes.items()}, cfg


def test_the_static_engine_opens_from_weights_by_the_builder_only():
    """Issue 41, item 2: the static-cache engine (the GPU run's) is opened by the builder, like the others."""
    from specdec.drafting.registry import DraftContext, build_drafter
    from specdec.engine.builder import open_engine, open_weights
    from specdec.engine.decoding import speculative
    from specdec.engine.staticllama import StaticLlama

    weights, cfg = _static_weights()
    opened = open_weights(weights, cfg, EngineSpec("static", "float32", 1, device="cpu"), capacity=64)
    assert isinstance(opened.model, StaticLlama) and opened.name == "static-float32-1t"
    info = {"engine": "static", "mode": "float32", "threads": 1, "device": "cpu", "capacity": 64}
    assert opened.info() == info
    target = opened.model
    early = target.early_exit(1)
    assert target.early_exit(1) is early and early.name == "early-exit:1"  # one view per depth
    drafter = build_drafter("early-exit:1", DraftContext(target))  # the registry's drafter runs that view
    assert drafter.lm.model is early
    ids = torch.randint(3, VOCAB, (9,), generator=torch.Generator().manual_seed(1)).tolist()
    plain = autoregressive(target, ids, max_new_tokens=8).tokens
    assert speculative(target, drafter, ids, gamma=3, max_new_tokens=8).tokens == plain
    with pytest.raises(ValueError, match="weights open in the static engine"):
        open_weights(weights, cfg, EngineSpec("lean", "float32", 1), capacity=64)
    with pytest.raises(ValueError, match="a static engine opens from weights"):
        open_engine(EngineSpec("static", "float32", 1))
    with pytest.raises(ValueError, match="a given model opens in the lean or hf engine"):
        open_model(tiny_llama(0), EngineSpec("static", "float32", 1))


def test_open_model_in_a_named_mode_and_auto_through_a_chooser():
    model = tiny_llama(0)
    opened = open_model(model, EngineSpec("lean", "float32", 1))
    assert isinstance(opened, OpenedEngine) and isinstance(opened.model, LeanLlama)
    assert opened.mode == "float32" and opened.probe is None and opened.name == "lean-float32-1t"
    ids = torch.randint(3, VOCAB, (7,), generator=torch.Generator().manual_seed(0)).tolist()
    assert (
        autoregressive(opened.model, ids, max_new_tokens=6).tokens
        == autoregressive(model, ids, max_new_tokens=6).tokens
    )
    with pytest.raises(ValueError, match="mode 'auto' is chosen by measuring this machine"):
        open_model(model, EngineSpec("lean", "auto", 1))
    asked = []

    def chooser(m, modes, threads):
        asked.append((m is model, modes, threads))
        return {"mode": "bfloat16"}

    auto = open_model(model, EngineSpec("lean", "auto", 2), choose=chooser)
    assert auto.mode == auto.model.mode == "bfloat16" and auto.probe == {"mode": "bfloat16"}
    assert asked == [(True, None, 2)]  # a target: every mode this machine runs
    assert open_model(model, EngineSpec("hf", "float32", 1)).model is model


def test_a_draft_opens_only_in_the_modes_that_keep_its_weights():
    draft = tiny_llama(1)
    assert "int4" not in draft_modes(draft) and "q4_1" not in draft_modes(draft)
    with pytest.raises(ValueError, match="for this model; got 'int4'"):
        open_draft(draft, EngineSpec("lean", "int4", 1))
    with pytest.raises(ValueError, match="a draft runs in the lean engine"):
        open_draft(draft, EngineSpec("hf", "float32", 1))
    seen = []
    opened = open_draft(
        draft,
        EngineSpec("lean", "auto", 1),
        choose=lambda m, modes, t: seen.append(modes) or {"mode": "float32"},
    )
    assert opened.mode == "float32" and seen == [draft_modes(draft)]
