"""Issue 41, item 7 ("first contact"), the command line: each case a new user hit, refused clearly before
any model loads or any measurement runs (or made to work), in the option's words.

The tiny models and helpers are :mod:`test_cli`'s (``folders``: a tiny target saved with a word-level
tokenizer, context 512 positions).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_cli import folders, one_line_error, run, tiny_measure  # noqa: F401 (folders: a fixture)

from specdec.cli import app as cli
from specdec.cli.common import UsageError, out_path

ROOT = Path(__file__).resolve().parents[1]
MEASURE_RECORD = sorted((ROOT / "results" / "cli").glob("measure-lookup-*.json"))[0]
BENCH_RECORD = sorted((ROOT / "results" / "bench").glob("engine-modes-*.json"))[0]


@pytest.fixture
def no_model(monkeypatch):
    """A run that reaches a model load fails the test: the refusal must come first."""
    pytest.importorskip("torch")
    import specdec.engine.models

    def never(*a, **k):
        raise AssertionError("a bad argument must be refused before loading a model")

    monkeypatch.setattr(specdec.engine.models, "load_target", never)
    monkeypatch.setattr(specdec.engine.models, "load_model", never)


@pytest.fixture
def fake_setup(monkeypatch):
    """measure_setup replaced: records what the command handed it, returns a record --json prints."""
    pytest.importorskip("torch")
    import specdec.experiments.usermeasure as um

    seen: dict = {}

    def setup(target, draft, prompts, **kw):
        seen.update(target=target, draft=draft, prompts=prompts, **kw)
        return {"kind": "specdec-measure", "draft": draft}

    monkeypatch.setattr(um, "measure_setup", setup)
    return seen


# --------------------------------------------------------------------------- 1. every registry spec
REGISTRY_SPECS = [
    ("suffix", "suffix", "tree"),
    ("lookup-tree", "lookup-tree", "tree"),
    ("medusa:medusa-4", "medusa", "tree"),
    ("eagle:eagle-1", "eagle", "tree"),
    ("eagle:eagle-1,topk=4,depth=6", "eagle", "tree"),
    ("mlp:mlp-4", "mlp", "tree"),
    ("draft:distil-l1", "draft", "chain"),
    ("draft-tree:distil-l1,branch=2", "draft-tree", "tree"),
    ("early-exit-tree:2,branch=2", "early-exit-tree", "tree"),
    ("unigram", "unigram", "chain"),
    ("lookup,max_ngram=2", "lookup", "chain"),
]


@pytest.mark.parametrize(("text", "kind", "shape"), REGISTRY_SPECS, ids=[t for t, _, _ in REGISTRY_SPECS])
def test_every_registry_spec_is_a_draft_of_measure(capsys, fake_setup, text, kind, shape):
    """Before: 'unknown draft' for every one of them. The command hands the spec on untouched."""
    from specdec.experiments.usermeasure import parse_draft

    spec = parse_draft(text)
    assert (spec.kind, spec.shape) == (kind, shape)
    code, out, err = run(capsys, "measure", "--draft", text, "--json")
    assert code == 0, err
    assert fake_setup["draft"] == text and json.loads(out)["draft"] == text


def test_older_draft_names_map_once_to_registry_specs(tmp_path):
    """Issue 41, item 2: the command line takes registry specs; of the older spellings only a distilled
    draft's bare name stays (``specdec measure --draft distil-l1`` made a committed record whose command the
    command-line chapter shows); a bare folder and ``early-exit`` without layers are refused, naming the
    spec (before: taken as model:<folder> and early-exit:<a quarter of the layers>)."""
    pytest.importorskip("torch")
    from specdec.experiments.usermeasure import parse_draft

    assert parse_draft("distil-l1").text == "draft:distil-l1"
    assert parse_draft(f"model:{tmp_path}").argument == str(tmp_path)
    with pytest.raises(ValueError, match=f"a draft model in a folder is the spec model:{tmp_path}"):
        parse_draft(str(tmp_path))
    with pytest.raises(ValueError, match="early-exit needs ':<layers"):
        parse_draft("early-exit")
    assert parse_draft(" bigram ").text == "bigram"


def test_an_older_measure_record_is_read_with_the_registry_spec(capsys):
    """The committed record of ``--draft distil-l1`` names its drafter ``distil-l1`` (kind ``distilled``):
    ``--from-json``, the reader, prints the registry's spec; the file stays as written."""
    from specdec.experiments.usermeasure import registry_draft

    (path,) = (ROOT / "results" / "cli").glob("measure-distil-l1-*.json")
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written["draft"]["name"] == "distil-l1" and "spec" not in written["draft"]
    code, out, err = run(capsys, "measure", "--from-json", str(path))
    assert code == 0, err
    assert out.splitlines()[1].startswith("draft    draft:distil-l1: the book's distilled draft distil-l1")
    read = registry_draft(written)
    assert read["draft"] | {"about": None} == {
        **written["draft"], "name": "draft:distil-l1", "spec": "draft:distil-l1", "kind": "draft",
        "about": None,
    }  # fmt: skip
    assert registry_draft(read) == read and json.loads(path.read_text(encoding="utf-8")) == written
    old_ee = {"draft": {"name": "early-exit", "kind": "early-exit", "layers": 8, "about": "x"}}
    assert registry_draft(old_ee)["draft"]["name"] == "early-exit:8"


BAD_DRAFTS = [
    ("", ["--draft", "must name a drafter"]),  # before: the current folder, then a tokenizer error
    ("   ", ["--draft", "must name a drafter"]),
    ("draft:eagle-1", ["--draft", "kind: eagle", "eagle:eagle-1"]),  # before: KeyError 'init_layers'
    ("medusa:distil-l1", ["--draft", "medusa", "distil-l1"]),
    ("eagle:no-such", ["--draft", "no such saved drafter"]),
    ("suffix:3", ["--draft", "takes no ':argument'"]),
    ("suffix,depth=0", ["--draft", "option depth"]),
    ("model:no/such/folder", ["--draft", "no such model folder"]),
]


@pytest.mark.parametrize(("draft", "names"), BAD_DRAFTS, ids=[d or "empty" for d, _ in BAD_DRAFTS])
def test_bad_drafts_are_refused_before_loading(capsys, no_model, draft, names):
    one_line_error(*run(capsys, "measure", "--draft", draft), "measure", *names)


@pytest.mark.parametrize("draft", ["suffix", "lookup-tree"])
def test_a_tree_drafter_is_measured_by_the_tree_loop(capsys, folders, one_thread, monkeypatch, draft):  # noqa: F811
    import specdec.engine.decoding as decoding

    calls = {"speculative": 0, "speculative_tree": 0}
    for name in calls:
        real = getattr(decoding, name)

        def spy(*a, _real=real, _name=name, **k):
            calls[_name] += 1
            return _real(*a, **k)

        monkeypatch.setattr(decoding, name, spy)
    code, out, err = tiny_measure(capsys, folders, "--draft", draft, "--dtype", "hf-float32", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert calls["speculative_tree"] == 2 and calls["speculative"] == 0  # two prompts, one repeat
    assert r["shape"] == "tree" and r["draft"]["spec"] == draft and r["draft"]["shape"] == "tree"
    assert r["greedy_exact"] is True and r["alpha"] is None and r["prediction"] is None
    saved = folders["root"] / f"tree-{draft}.json"
    saved.write_text(out, encoding="utf-8")
    code, text, err = run(capsys, "measure", "--from-json", str(saved))
    assert code == 0, err
    assert "node budget = 4 (--gamma)" in text and "a tree drafter" in text


# --------------------------------------------------------------------------- 2. --out
def test_out_refuses_what_is_not_a_regular_file(tmp_path):
    """Before: /dev/null, a folder's link and a link to a file passed; /proc and /sys passed as root."""
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "target.json")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, words in (
        ("/dev/null", "not a regular file"),
        (str(fifo), "not a regular file"),
        (str(tmp_path), "is a folder"),
        (str(link), "symbolic link"),
        ("/proc/specdec.json", "/proc, a kernel pseudo-filesystem"),
        ("/sys/specdec.json", "/sys, a kernel pseudo-filesystem"),
        ("", "empty path"),
        (str(tmp_path / "none" / "x.json"), "does not exist"),
    ):
        with pytest.raises(UsageError, match="--out") as info:
            out_path(path)
        assert words in str(info.value), (path, str(info.value))
    assert out_path(str(tmp_path / "new.json")) == tmp_path / "new.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "link.json"]  # the probe file is gone


def test_out_tests_its_folder_by_creating_a_file(tmp_path, monkeypatch):
    """Permission bits say nothing for root: the folder is tried by creating a file in it."""
    import tempfile

    seen = []

    def refuse(*a, dir=None, **k):
        seen.append(dir)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(UsageError, match="creating a file there failed: Permission denied"):
        out_path(str(tmp_path / "x.json"))
    assert seen == [tmp_path]


def test_out_is_refused_before_loading_and_written_atomically(capsys, no_model, tmp_path):
    one_line_error(*run(capsys, "measure", "--out", "/dev/null"), "measure", "--out", "not a regular file")
    from specdec.theory.recordio import write_record

    target = tmp_path / "r.json"
    target.write_text("old", encoding="utf-8")
    write_record(target, {"a": 1})
    assert json.loads(target.read_text(encoding="utf-8")) == {"a": 1}
    assert stat.S_ISREG(target.lstat().st_mode) and [p.name for p in tmp_path.iterdir()] == ["r.json"]


# --------------------------------------------------------------------------- 3. a prompt near the context
def test_a_prompt_near_the_context_is_refused_before_the_run(capsys, folders, monkeypatch, tmp_path):  # noqa: F811
    """The tiny target holds 512 positions: 500 prompt tokens + 8 new ones fit, but the verify curve's
    call of 16 after the first prompt does not. Before: nothing checked it before measuring."""
    import specdec.measure.modes

    def never(*a, **k):
        raise AssertionError("the context must be checked before the target is opened for the run")

    monkeypatch.setattr(specdec.measure.modes, "open_target", never)
    long = tmp_path / "long.txt"
    long.write_text(" ".join(f"w{3 + i % 7}" for i in range(500)) + "\n", encoding="utf-8")  # 1 token a word
    argv = ["measure", "--target", folders["target"], "--prompts", str(long), "--dtype", "hf-float32"]
    code, out, err = run(capsys, *argv, "--new-tokens", "8")
    one_line_error(code, out, err.splitlines()[-1] + "\n", "measure", "prompt 1 (500 tokens)", "16", "512")
    code, out, err = run(capsys, *argv, "--new-tokens", "40")
    one_line_error(code, out, err.splitlines()[-1] + "\n", "measure", "--new-tokens", "512", "at most 12")


def test_check_context_counts_the_whole_need():
    pytest.importorskip("torch")
    from specdec.experiments.usermeasure import check_context, curve_ks

    check_context(8192, [8000], 64, curve_ks(4))
    with pytest.raises(ValueError, match=r"8186 \+ 16|8202 positions"):  # the case
        check_context(8192, [8186], 4, curve_ks(4))
    with pytest.raises(ValueError, match="--new-tokens"):
        check_context(8192, [10, 8190], 4, curve_ks(4))
    check_context(None, [10**6], 4, curve_ks(4))  # a target without a known context: nothing to check


# --------------------------------------------------------------------------- 4. --from-json and pipes
def _without(record: dict, dotted: str) -> dict:
    out = json.loads(json.dumps(record))
    *parents, last = dotted.split(".")
    node = out
    for part in parents:
        node = node[part]
    del node[last]
    return out


@pytest.mark.parametrize(
    ("command", "source", "field"),
    [
        ("measure", MEASURE_RECORD, "target"),
        ("measure", MEASURE_RECORD, "prediction.theorem"),
        ("measure", MEASURE_RECORD, "draft.about"),
        ("bench", BENCH_RECORD, "settings"),
        ("bench", BENCH_RECORD, "chosen_mode.rule"),
    ],
)
def test_from_json_names_the_missing_field(capsys, tmp_path, command, source, field):
    """Before: KeyError: 'target' / 'settings' (a traceback)."""
    damaged = tmp_path / "damaged.json"
    damaged.write_text(json.dumps(_without(json.loads(source.read_text(encoding="utf-8")), field)), "utf-8")
    code, out, err = run(capsys, command, "--from-json", str(damaged))
    one_line_error(code, out, err, command, str(damaged), repr(field))


def test_a_closed_stdout_ends_quietly_in_process(monkeypatch):
    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())  # no file descriptor: nothing to point at /dev/null
    assert cli.main(["measure", "--from-json", str(MEASURE_RECORD)]) == cli.BROKEN_PIPE


def test_a_closed_pipe_ends_quietly():
    """``specdec measure --from-json f.json | head -3``: before, a BrokenPipeError traceback."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "specdec", "measure", "--from-json", str(MEASURE_RECORD)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
    )  # fmt: skip
    proc.stdout.close()  # the reader is gone before the command prints (it is still importing)
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, err
    assert err == "", err


# --------------------------------------------------------------------------- 5. the loops and the registry
def test_draft_spec_of_a_conditioned_card_names_its_kind():
    """Before: build_drafter('draft:eagle-1', ...) gave KeyError: 'init_layers'."""
    pytest.importorskip("torch")
    from specdec.drafting.registry import DraftContext, build_drafter
    from specdec.train.draftnets import load_draft, require_drafts

    context = DraftContext(None, load_draft=lambda name: load_draft(name, None))
    with pytest.raises(ValueError, match=r"not a distilled draft's card \(its kind: 'eagle'\)"):
        build_drafter("draft:eagle-1", context)
    with pytest.raises(ValueError, match=r"its card's kind: mlp-speculator; the drafter spec mlp:mlp-4"):
        require_drafts(["mlp-4"])  # the check before anything loads (measure's --draft)


def test_a_tree_drafter_in_the_chain_loop_names_the_tree_loop():
    """Before: AttributeError: ... has no attribute 'propose'."""
    pytest.importorskip("torch")
    from tiny_models import tiny_llama

    from specdec.drafting.registry import build_drafter
    from specdec.engine.decoding import speculative

    with pytest.raises(TypeError, match=r"SuffixDecodingDrafter drafts trees: .* speculative_tree"):
        speculative(tiny_llama(0), build_drafter("suffix"), [5, 6, 7], gamma=2, max_new_tokens=4)
    with pytest.raises(TypeError, match="has no propose method"):
        speculative(tiny_llama(0), object(), [5, 6, 7], gamma=2, max_new_tokens=4)


# --------------------------------------------------------------------------- 6. prompts, options, help
def test_a_prompts_file_that_is_not_utf8_names_the_file_and_the_option(capsys, no_model, tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    code, out, err = run(capsys, "measure", "--prompts", str(bad))
    one_line_error(code, out, err, "measure", "--prompts", str(bad), "not UTF-8", "0xe9")


def test_prompts_from_a_pipe_are_read_once(capsys, fake_setup, tmp_path):
    """``--prompts /dev/stdin``: before, 'no such file'. A named pipe stands for stdin here."""
    fifo = tmp_path / "prompts.fifo"
    os.mkfifo(fifo)

    def write():
        with open(fifo, "w", encoding="utf-8") as f:
            f.write("first prompt\n\nsecond prompt\n")

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    code, out, err = run(capsys, "measure", "--prompts", str(fifo), "--json")
    if writer.is_alive():  # nobody read the pipe: open it once so that the writer is not left waiting
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    writer.join(timeout=10)
    assert code == 0, err
    assert fake_setup["prompts"] == ["first prompt", "second prompt"]


def test_an_unknown_top_level_option_is_named(capsys):
    """Before: 'the following arguments are required: COMMAND'."""
    for argv in (["--bogus"], ["--bogus", "plan", "--alpha", "0.5", "--c", "0.1"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and "unknown option --bogus" in err and "COMMAND" not in err
    code, out, err = run(capsys)
    assert code == 2 and "required: COMMAND" in err


def test_engine_spec_options_must_be_a_mapping():
    """Before: 'dictionary update sequence element #0 has length 1; 2 is required'."""
    pytest.importorskip("torch")
    from specdec.engine.builder import EngineSpec

    for bad in ("int8_head", ["int8_head"], 5, {1: True}):
        with pytest.raises(ValueError, match=r"options must be a mapping .*'int8_head': True"):
            EngineSpec("lean", "float32", 1, options=bad)
    assert EngineSpec("lean", "float32", 1, options={"int8_head": True}).options == {"int8_head": True}


def test_new_tokens_help_and_check_agree(capsys, fake_setup):
    """Before: the help said >= 1, and 1 was refused (a round needs a draft and the target's own token)."""
    import re

    code, out, _ = run(capsys, "measure", "--help")
    low = int(re.search(r"--new-tokens N\s+tokens to generate per prompt, >= (\d+)", out).group(1))
    assert low == 2
    one_line_error(*run(capsys, "measure", "--new-tokens", str(low - 1)), "measure", "--new-tokens", "[2,")
    code, out, err = run(capsys, "measure", "--new-tokens", str(low), "--gamma", "1", "--json")
    assert code == 0, err
