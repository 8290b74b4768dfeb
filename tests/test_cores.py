"""One owner of the cores (issue 40, item 3): while a C engine decodes, torch runs on one thread.

Every path a user can take to decode with a ``"q4q8"`` lean engine is run with torch at two threads
before the call, and torch's thread count is read *inside* the loop (in the engine's forward and in
the drafter): the builder, :func:`specdec.measure.modes.lean_model`, the three decoding loops, the
batched loops, ``specdec measure`` and the runner's timed generations. After the call the caller's
count is back. A torch-mode engine leaves torch's count alone. No timing is asserted.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from specdec.engine import native  # noqa: E402
from specdec.engine.lean import LeanSession  # noqa: E402

needs_q4q8 = pytest.mark.skipif(not native.available("q4q8"), reason="no C compiler for the q4q8 forward")

#: torch's count before each call: not 1, so that a loop which leaves it alone is seen
CALLER = 2


@pytest.fixture
def caller_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(CALLER)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def seen(monkeypatch):
    """torch's thread count at every forward of a lean engine (chain and tree calls)."""
    out: list[int] = []
    for name in ("forward", "forward_tree"):
        original = getattr(LeanSession, name)

        def recording(self, *args, _original=original, **kwargs):
            out.append(torch.get_num_threads())
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(LeanSession, name, recording)
    return out


def recording(drafter, seen: list[int]):
    """``drafter``, noting torch's thread count each time it is asked to draft (a chain or a tree)."""
    for name in ("propose", "propose_tree"):
        method = getattr(drafter, name, None)
        if callable(method):

            def propose(*args, _method=method, **kwargs):
                seen.append(torch.get_num_threads())
                return _method(*args, **kwargs)

            setattr(drafter, name, propose)
    return drafter


def lookup(seen: list[int], kind: str = "lookup"):
    from specdec.drafting.registry import build_drafter

    return recording(build_drafter(kind), seen)


def tiny():
    from tiny_models import tiny_llama

    return tiny_llama(0)


def decode_all_loops(model, drafted: list[int]) -> None:
    """Plain, speculative and tree decoding of ``model`` (a few tokens each)."""
    from specdec.engine.decoding import autoregressive, speculative, speculative_tree

    ids = [5, 6, 7, 8, 5, 6, 7]
    autoregressive(model, ids, max_new_tokens=4)
    speculative(model, lookup(drafted), ids, gamma=3, max_new_tokens=4)
    speculative_tree(model, lookup(drafted, "lookup-tree"), ids, budget=4, max_new_tokens=4)


@needs_q4q8
def test_the_loops_run_torch_on_one_thread_for_a_c_engine(caller_threads, seen):
    from specdec.engine.builder import EngineSpec, open_model

    lean = open_model(tiny(), EngineSpec("lean", "q4q8", 2)).model
    assert lean.runs_outside_torch and lean.threads == 2
    drafted: list[int] = []
    decode_all_loops(lean, drafted)
    assert seen and set(seen) == {1}, seen
    assert drafted and set(drafted) == {1}, drafted
    assert torch.get_num_threads() == CALLER  # given back


def test_a_torch_engine_keeps_the_callers_threads(caller_threads, seen):
    from specdec.engine.builder import EngineSpec, open_model

    lean = open_model(tiny(), EngineSpec("lean", "float32", 2)).model
    drafted: list[int] = []
    decode_all_loops(lean, drafted)
    assert seen and set(seen) == {CALLER} and set(drafted) == {CALLER}


@needs_q4q8
def test_the_builders_engine_decodes_with_torch_on_one_thread(seen):
    """open_engine pins torch to spec.threads (2 here); its C engine still decodes with torch on one."""
    from specdec.engine.builder import EngineSpec, open_engine
    from specdec.engine.decoding import autoregressive
    from specdec.engine.models import LoadedModel

    before = torch.get_num_threads()
    try:
        base = LoadedModel(tiny(), None, "tiny", "float32", "cpu", "eager", "test", 0.0)
        opened = open_engine(EngineSpec("lean", "q4q8", 2), base=base)
        assert torch.get_num_threads() == 2  # the builder's pin, for torch's own work
        autoregressive(opened.model, [5, 6, 7], max_new_tokens=4)
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@needs_q4q8
def test_lean_model_decodes_with_torch_on_one_thread(caller_threads, seen):
    """The README's path: ``lean_model(model, "q4q8")`` (C threads: every usable core)."""
    from specdec.engine.decoding import speculative
    from specdec.measure.modes import lean_model

    fast, probe = lean_model(tiny(), "q4q8")
    assert probe is None and fast.runs_outside_torch
    drafted: list[int] = []
    speculative(fast, lookup(drafted), [5, 6, 7, 8, 5, 6, 7], gamma=4, max_new_tokens=6)
    assert set(seen) == {1} and set(drafted) == {1}
    assert torch.get_num_threads() == CALLER


def test_batched_loops_give_a_marked_engine_the_cores(caller_threads, monkeypatch):
    """The batched loops take transformers models (torch's threads: left alone); a target marked as
    running outside torch gets torch on one thread there too, by the same decorator."""
    from specdec.engine.batched import batched_autoregressive, batched_speculative
    from specdec.engine.drafters import PromptLookupDrafter

    for marked in (False, True):
        model, inside = tiny(), []
        original = model.forward

        def recording(*args, _original=original, _inside=inside, **kwargs):
            _inside.append(torch.get_num_threads())
            return _original(*args, **kwargs)

        monkeypatch.setattr(model, "forward", recording)
        if marked:
            model.runs_outside_torch = True
        prompts = [[5, 6, 7, 5, 6], [3, 4, 3, 4]]
        batched_autoregressive(model, prompts, max_new_tokens=3)
        batched_speculative(model, PromptLookupDrafter(), prompts, gamma=2, max_new_tokens=3)
        assert inside and set(inside) == ({1} if marked else {CALLER})
        assert torch.get_num_threads() == CALLER


@needs_q4q8
def test_the_runner_decodes_with_torch_on_one_thread(caller_threads, seen):
    """The runner's timed generations (:func:`specdec.measure.pairedrun.timed_generation`, what every
    run program and ``specdec measure`` time) own no thread setting of their own: the loop's."""
    from specdec.engine.builder import EngineSpec, open_model
    from specdec.measure.pairedrun import timed_generation

    lean = open_model(tiny(), EngineSpec("lean", "q4q8", 2)).model
    drafted: list[int] = []
    for drafter in (None, lookup(drafted)):
        timed_generation(lean, drafter, [5, 6, 7, 8, 5, 6, 7], gamma=3, new_tokens=4)
        assert torch.get_num_threads() == CALLER
    assert set(seen) == {1} and set(drafted) == {1}


@needs_q4q8
def test_the_command_line_decodes_with_torch_on_one_thread(tmp_path, capsys, seen, monkeypatch):
    """``specdec measure --dtype q4q8 --threads 2``: the builder pins torch to 2, and every decoding
    loop of the measurement (plain and prompt lookup, interleaved) runs with torch on one thread."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from specdec.cli import app as cli
    from specdec.engine import decoding

    inside: list[int] = []
    prefill = decoding._prefill  # every decoding loop prefills its prompt: read torch's count there

    def recording(*args, **kwargs):
        inside.append(torch.get_num_threads())
        return prefill(*args, **kwargs)

    monkeypatch.setattr(decoding, "_prefill", recording)

    from tiny_models import VOCAB

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tiny().save_pretrained(tmp_path / "target")
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", eos_token="w2").save_pretrained(
        tmp_path / "target"
    )
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("w5 w6 w7 w8 w9 w5 w6 w7 w8 w9\n", encoding="utf-8")
    before = torch.get_num_threads()
    try:
        code = cli.main(
            ["measure", "--target", str(tmp_path / "target"), "--prompts", str(prompts), "--dtype", "q4q8",
             "--threads", "2", "--new-tokens", "6", "--gamma", "2", "--repeats", "1", "--verify-repeats", "1",
             "--json"]
        )  # fmt: skip
        out, err = capsys.readouterr()
        assert code == 0, err
        assert json.loads(out)["threads"] == 2
        assert torch.get_num_threads() == 2  # the command line's pin, given back after each loop
    finally:
        torch.set_num_threads(before)
    assert inside and set(inside) == {1}, inside
