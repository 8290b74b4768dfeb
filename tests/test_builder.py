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
        ({"engine": "vllm"}, r"engine must be one of \('lean', 'hf', 'llama.cpp'\); got 'vllm'"),
        ({"engine": "lean", "mode": "fp16"}, r"mode \(a lean engine's\) must be one of \('auto'"),
        ({"engine": "hf", "mode": "auto"}, r"dtype\) must be one of \('float32', 'bfloat16'\)"),
        ({"engine": "llama.cpp", "mode": "q8_0"}, r"mode \(llama.cpp's GGUF format\) must be one of"),
        ({"engine": "llama.cpp", "mode": "q4_0", "loop": "fast"}, "loop must be one of"),
        ({"threads": 0}, r"threads must be an integer in \[1, 1024\]"),
        ({"threads": 2**63}, r"threads must be an integer in \[1, 1024\]"),
        ({"threads": 1.5}, "threads must be an integer"),
        ({"device": "cuda"}, "device: only an hf engine takes one"),
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
