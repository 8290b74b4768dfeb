"""specdec.engine.llamacpp on a stand-in for llama_cpp.Llama (the real one is a C++ build, not a test
dependency).

The stand-in keeps llama-cpp-python's semantics that the adapter relies on: ``eval`` drops
every cached position from ``n_tokens`` on, writes one row of ``scores`` per evaluated token
(``logits_all=True``) and advances ``n_tokens``. Its logits are a deterministic function of
the whole prefix, so a wrong rewind or a wrong row shows.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from specdec.engine.decoding import autoregressive, speculative
from specdec.engine.drafters import PromptLookupDrafter

V = 11


class FakeLlama:
    def __init__(self, model_path, n_ctx, n_batch, n_threads, n_threads_batch, logits_all, verbose):
        assert logits_all, "a verify call needs every position's logits"
        self.n_ctx, self.n_tokens = n_ctx, 0
        self.tokens: list[int] = []
        self.scores = np.zeros((n_ctx, V), dtype=np.float32)

    def n_vocab(self):
        return V

    def reset(self):
        self.n_tokens = 0

    def eval(self, tokens):
        del self.tokens[self.n_tokens :]  # kv_cache_seq_rm(-1, n_tokens, -1)
        for t in tokens:
            self.tokens.append(t)
            h = (sum((i + 1) * x for i, x in enumerate(self.tokens)) * 7 + len(self.tokens)) % V
            row = np.full(V, -1.0, dtype=np.float32)
            row[h] = 2.0
            row[(h + 3) % V] = 1.0
            self.scores[self.n_tokens] = row
            self.n_tokens += 1


@pytest.fixture()
def model(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=FakeLlama))
    from specdec.engine.llamacpp import LlamaCppModel

    return LlamaCppModel("fake.gguf", threads=1, n_ctx=64)


def test_rows_rewind_and_sync(model):
    s = model.session()
    full = s.forward([1, 2, 3, 4, 5]).numpy()
    s.crop(2)  # rewind, then feed a different suffix: rows must follow the new prefix
    other = s.forward([9, 9]).numpy()
    fresh = model.session()
    assert np.array_equal(fresh.forward([1, 2, 9, 9]).numpy()[2:], other)
    s2 = model.session()
    assert np.array_equal(s2.sync([1, 2, 3, 4, 5]).numpy(), full[-1:])
    assert s2.ids == [1, 2, 3, 4, 5] and s2.calls == 1
    with pytest.raises(RuntimeError, match="replaced"):
        s.forward([1])  # an older session on the same llama.cpp context is closed
    with pytest.raises(ValueError, match="keep"):
        s2.forward([1], keep=2)


def test_specdec_loops_run_on_it_and_greedy_is_exact(model):
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    plain = autoregressive(model, prompt, max_new_tokens=12)
    spec = speculative(model, PromptLookupDrafter(), prompt, gamma=3, max_new_tokens=12)
    assert spec.tokens == plain.tokens and len(plain.tokens) == 12
    assert spec.stats.target_calls < 12 or spec.stats.accepted_tokens == 0


def test_threads_are_checked(model):
    from specdec.engine.llamacpp import LlamaCppModel

    with pytest.raises(ValueError, match="threads"):
        LlamaCppModel("fake.gguf", threads=0)


def test_loop_names_are_checked(model):
    from specdec.engine.llamacpp import LlamaCppModel

    with pytest.raises(ValueError, match="loop must be one of"):
        LlamaCppModel("fake.gguf", threads=1, n_ctx=64, loop="fast")


def test_the_low_level_loop_decodes_as_the_high_level_one():
    """On the real llama.cpp (skipped without llama-cpp-python): the low-level loop (one llama_decode,
    logits of the rows asked for) gives the high-level loop's greedy tokens, and after a crop it continues
    as a fresh session would."""
    pytest.importorskip("llama_cpp")
    from specdec.engine import llamacpp as lc
    from specdec.engine.decoding import autoregressive
    from specdec.engine.models import smollm2_gguf_path

    gguf = lc.requantized(smollm2_gguf_path(), "q4_0")
    ids = [1, 9690, 198, 2683, 359, 253, 5356, 11173, 2, 198, 1, 4093, 198, 29830, 549, 563, 260, 1484, 30]
    models = {loop: lc.LlamaCppModel(gguf, threads=1, n_ctx=256, loop=loop) for loop in lc.LOOPS}
    tokens = {loop: autoregressive(m, ids, max_new_tokens=24).tokens for loop, m in models.items()}
    assert tokens["lowlevel"] == tokens["eval"]
    low = models["lowlevel"]
    s = low.session()
    s.forward(ids, keep=1)
    s.forward([10, 20, 30])
    s.crop(len(ids))
    after = s.forward([10])
    fresh = low.session()
    fresh.forward(ids, keep=1)
    assert np.array_equal(after.numpy(), fresh.forward([10]).numpy())
