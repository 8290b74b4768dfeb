"""specdec.train.workloads: the evaluation prompts, the chat rendering and the templated training prompts."""

from __future__ import annotations

import pytest

from specdec.train.workloads import (
    TASKS,
    chat_prompt_ids,
    evaluation_prompts,
    load_workload,
    training_prompts,
)


@pytest.mark.parametrize("task", TASKS)
def test_each_workload_has_at_least_12_distinct_prompts(task):
    prompts = load_workload(task)
    assert len(prompts) >= 12
    assert all(p.task == task and p.prompt.strip() for p in prompts)
    assert len({p.id for p in prompts}) == len(prompts)
    assert len({p.prompt for p in prompts}) == len(prompts)


def test_unknown_task_raises():
    with pytest.raises(ValueError, match="task must be one of 'summarize', 'code', 'instruct'"):
        load_workload("translate")


class ChatMLStub:
    """A character-level tokenizer with SmolLM2's ChatML chat template (no hub access needed)."""

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert tokenize is False
        if messages[0]["role"] != "system":
            messages = [{"role": "system", "content": "default system"}, *messages]
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def encode(self, text, add_special_tokens):
        assert add_special_tokens is False
        return [ord(ch) for ch in text]


def test_chat_prompt_ids_renders_one_user_turn_ready_for_the_reply():
    ids = chat_prompt_ids(ChatMLStub(), "Say hi.")
    text = "".join(map(chr, ids))
    assert text == (
        "<|im_start|>system\ndefault system<|im_end|>\n"
        "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n"
    )
    custom = "".join(map(chr, chat_prompt_ids(ChatMLStub(), "Say hi.", system="Be brief.")))
    assert custom.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    with pytest.raises(ValueError, match="text must be a non-empty string"):
        chat_prompt_ids(ChatMLStub(), "  ")


def test_training_prompts_are_seeded_mixed_and_disjoint_from_the_evaluation_prompts():
    a, b, c = training_prompts(600, seed=0), training_prompts(600, seed=0), training_prompts(600, seed=1)
    assert a == b != c
    assert len(a) == 600 and len({p.id for p in a}) == 600
    kinds = {t: sum(p.task == t for p in a) for t in TASKS}
    assert kinds["instruct"] > 200 and kinds["summarize"] > 100 and kinds["code"] > 100
    assert len({p.prompt for p in a}) > 400  # templated, but varied
    evaluation = {p.prompt for t in TASKS for p in load_workload(t)}
    assert not evaluation & {p.prompt for p in training_prompts(5000, seed=0)}
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="n must be an integer >= 1"):
            training_prompts(bad)


def test_evaluation_prompts_take_the_first_of_every_task():
    got = evaluation_prompts(ChatMLStub(), 2)
    assert [(g["task"], g["id"]) for g in got] == [(t, p.id) for t in TASKS for p in load_workload(t)[:2]]
    first = load_workload(TASKS[0])[0]
    assert got[0]["ids"] == chat_prompt_ids(ChatMLStub(), first.prompt)
    with pytest.raises(ValueError, match="per_task"):
        evaluation_prompts(ChatMLStub(), 0)
