"""The README's Python examples, run as written (issue #20, item 5), on the real default target.

Example 1 must print a reply, not the prompt, stop at the end of the turn, and print what its
``# prints:`` comment says; example 2 (the lean engine, mode "auto") must stop at <|im_end|>
too: without ``eos_token_id`` it ran into a new turn. The target loads from the model cache
after its first conversion, the mode probe from the probe cache after its first timing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)


def test_the_readme_has_its_three_decoding_examples():
    blocks = python_blocks()
    assert len(blocks) == 3
    assert all("eos_token_id=eos" in b for b in blocks)  # each stops at the end of the reply


def test_the_readme_examples_run_as_written(capsys, one_thread):
    first, second, trees = python_blocks()
    space: dict = {"__name__": "readme"}
    exec(compile(first, "README.md: example 1", "exec"), space)
    printed = capsys.readouterr().out.splitlines()
    out, ids, t = space["out"], space["ids"], space["t"]
    eos = t.tokenizer.eos_token_id
    asked = space["request"]
    reply = t.tokenizer.decode(out.tokens, skip_special_tokens=True).strip()
    assert reply != asked and out.tokens[: len(ids)] != ids  # a reply, not the prompt echoed
    assert out.tokens[-1] == eos and out.tokens.count(eos) == 1  # it stops at <|im_end|>
    promised = re.search(r"^# prints: (.*)$", first, re.M)
    assert promised is not None and printed[0] == promised.group(1)  # as the README shows it
    assert float(printed[1].split()[0]) > 1  # prompt lookup gains tokens per round here

    exec(compile(second, "README.md: example 2", "exec"), space)
    printed = capsys.readouterr().out.splitlines()
    out, fast = space["out"], space["fast"]
    assert out.tokens[-1] == eos and out.tokens.count(eos) == 1 and len(out.tokens) < 64
    shown = "\n".join(printed)  # the mode, then the reply (which may span lines)
    assert shown.startswith(fast.mode + " ") and "<|im_start|>" not in shown

    exec(compile(trees, "README.md: the trees example", "exec"), space)
    printed = capsys.readouterr().out.splitlines()
    tree_out = space["out"]
    assert tree_out.tokens[-1] == eos and float(printed[0]) > 1  # it stops, and rounds emit > 1 token
    if fast.mode != "float32":  # every exact mode: the tree decode is greedy plain decoding, bit for bit
        from specdec.engine.decoding import autoregressive

        plain = autoregressive(fast, ids, max_new_tokens=64, eos_token_id=eos)
        assert tree_out.tokens == plain.tokens
