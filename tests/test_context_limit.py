"""A generation that could outgrow the target's context is refused before any model call.

The tiny models have ``max_position_embeddings`` = 512: a prompt of 500 tokens may ask for 12
new tokens, not 13, in both loops.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import VOCAB, tiny_llama

from specdec.engine.decoding import autoregressive, speculative
from specdec.engine.drafters import PromptLookupDrafter

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [(7 * i) % VOCAB for i in range(500)]


@pytest.fixture(scope="module")
def target():
    model = tiny_llama(0)
    assert model.config.max_position_embeddings == 512
    return model


def test_the_context_limit_is_refused_before_any_call(target):
    calls: list[int] = []
    hook = target.register_forward_pre_hook(lambda module, args: calls.append(1))
    message = (
        r"len\(prompt_ids\) \+ max_new_tokens must be <= 512 \(the target's max_position_embeddings\); "
        r"got 500 \+ 13 = 513"
    )
    with pytest.raises(ValueError, match=message):
        autoregressive(target, PROMPT, max_new_tokens=13)
    with pytest.raises(ValueError, match=message):
        speculative(target, PromptLookupDrafter(), PROMPT, gamma=4, max_new_tokens=13)
    with pytest.raises(ValueError, match=r"got 600 \+ 1 = 601"):
        autoregressive(target, torch.zeros(1, 600, dtype=torch.long), max_new_tokens=1)
    hook.remove()
    assert calls == []


def test_up_to_the_limit_runs(target):
    plain = autoregressive(target, PROMPT, max_new_tokens=12)
    spec = speculative(target, PromptLookupDrafter(), PROMPT, gamma=4, max_new_tokens=12)
    assert len(plain.tokens) == 12 and spec.tokens == plain.tokens
