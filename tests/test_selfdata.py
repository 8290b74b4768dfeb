"""Issue 42, item 1: the self-generated data's prompts, disjointness, shards, manifest and resume.
Tiny random models and a character tokenizer; a few tokens per prompt."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specdec.experiments import selfdata as sd
from specdec.theory.checks import Refused
from specdec.train import selfprompts as sp
from specdec.train import selfshards
from specdec.train.selftext import Piece, chunks, roff_text

pytestmark = pytest.mark.usefixtures("one_thread")


def pieces(tmp_path):
    """A small source text of every role, its files real (the manifest hashes them)."""
    out = {"man": [], "python": [], "doc": []}
    for i in range(12):
        f = tmp_path / f"src{i}.txt"
        f.write_text(f"source {i}", encoding="utf-8")
        prose = (f"Tool number {i} copies files between hosts. It keeps permissions and times, and it can "
                 f"resume a transfer that stopped half way. Option {i} makes it quiet.")  # fmt: skip
        out["man"] += [
            Piece("man", str(f), "name", f"tool{i}", f"tool{i} - copy files {i}"),
            Piece("man", str(f), "prose", f"tool{i}: description", prose),
            Piece("man", str(f), "options", f"tool{i}: options", f"-q{i} Be quiet. -v{i} Be loud."),
        ]
        out["python"] += [
            Piece("python", str(f), "code", f"mod.f{i}", f"def f{i}(x):\n    return x + {i}"),
            Piece("python", str(f), "module", f"mod{i}", f"Helpers for task {i}."),
            Piece("python", str(f), "prose", f"mod.f{i}", prose.replace("Tool", "Function")),
        ]
        out["doc"].append(Piece("doc", str(f), "prose", f"pkg{i}", prose.replace("Tool", "Package")))
    return out  # fmt: skip


def test_a_bad_setting_is_refused_naming_the_field_and_its_range():
    cases = (
        ({"prompts": 0}, r"prompts must be an integer in \[1, 1000000\]"),
        ({"max_new_tokens": 5000}, r"max_new_tokens must be an integer in \[1, 4096\]"),
        ({"shard_prompts": 0}, r"shard_prompts must be an integer in \[1, 100000\]"),
        ({"temperature": 0.0}, r"temperature must be .*\(0.0, 4.0\]"),
        ({"threads": 0}, r"threads must be an integer in \[1, 1024\]"),
        ({"min_words": 300, "max_words": 200}, r"min_words must be an integer in \[1, 200\]"),
        ({"mode": "fp8"}, "mode must be one of"),
        ({"kinds": ("man", "books")}, "kinds must be distinct names among"),
        ({"seed": -1}, "seed must be an integer"),
    )
    for bad, match in cases:
        with pytest.raises(ValueError, match=match):
            sd.SelfDataSettings(**bad)
    assert sd.SelfDataSettings().to_record()["prompts"] == 20000
    assert "partial_every_s" not in sd.SelfDataSettings().to_record()  # not part of the resume key


def test_prompts_are_seeded_balanced_distinct_and_name_their_source(tmp_path):
    src = pieces(tmp_path)
    a, b = sp.build_prompts(src, 50, seed=3), sp.build_prompts(src, 50, seed=3)
    assert a == b and a != sp.build_prompts(src, 50, seed=4)
    c = sp.counts(a)
    assert c["per_task"] == {t: 10 for t in sorted(sp.TASKS)}
    assert len({sp.normalise(p.prompt) for p in a}) == 50
    assert all(p.path.startswith(str(tmp_path)) and p.source in src for p in a)
    assert [p.index for p in a] == list(range(50))
    with pytest.raises(ValueError, match="no source text"):
        sp.build_prompts({"man": []}, 5, seed=0)


def test_roff_and_chunks():
    page = (
        ".TH X 1\n.SH NAME\nfoo \\- frobnicate files\n.SH DESCRIPTION\n\\fBfoo\\fR reads \\fIfiles\\fR.\n"
        ".PP\nSecond \\(em paragraph.\n.SH OPTIONS\n.TP\n.B \\-q\nBe quiet.\n"
    )
    sections = dict(roff_text(page))
    assert sections["NAME"] == "foo - frobnicate files"
    assert sections["DESCRIPTION"] == "foo reads files.\n\nSecond -- paragraph."
    assert sections["OPTIONS"].split() == ["-q", "Be", "quiet."]
    text = "\n\n".join(" ".join(["w"] * 30) for _ in range(5))
    assert all(20 <= len(c.split()) <= 70 for c in chunks(text, 20, 70))  # fmt: skip


def test_disjointness_fails_on_a_planted_evaluation_prompt(tmp_path):
    evaluation = sd.evaluation_sets()
    assert "heldout/campaign-v2.jsonl" in evaluation and "summarize.jsonl" in evaluation
    assert "heldout/trees-v1.jsonl" in evaluation and "experiments/hfbench.py:PROMPTS" in evaluation
    clean = [p.prompt for p in sp.build_prompts(pieces(tmp_path), 40, seed=0)]
    report = sp.check_disjoint(clean, evaluation)
    assert report["disjoint"] and set(report["sets"]) == set(evaluation)
    planted = evaluation["heldout/campaign-v2.jsonl"][5]
    with pytest.raises(ValueError, match="campaign-v2.jsonl prompt 5 equals a training prompt"):
        sp.check_disjoint([*clean, "  " + planted.upper() + " "], evaluation)
    with pytest.raises(ValueError, match="summarize.jsonl prompt 2 is contained in a training prompt"):
        sp.check_disjoint([*clean, "Please help.\n\n" + evaluation["summarize.jsonl"][2]], evaluation)
    words = evaluation["heldout/trees-v1.jsonl"][0].split()
    near = " ".join(words[: int(len(words) * 0.7)]) + " and something else entirely"
    report = sp.overlap_report([*clean, near], evaluation)
    assert not report["disjoint"] and report["sets"]["heldout/trees-v1.jsonl"]["max_cover"] >= 0.5
    assert report["sets"]["heldout/trees-v1.jsonl"]["shared_ngrams"] > 0


def _engine():
    from specdec.engine import native
    from specdec.engine.builder import EngineSpec, open_model
    from specdec.engine.tinymodels import tiny_llama

    mode = "q4q8" if native.available("q4q8") else "float32"
    return open_model(tiny_llama(0), EngineSpec("lean", mode, 1)).model


def _encode(text: str) -> list[int]:
    return [1 + ord(c) % 90 for c in text[:12]]


def _run(folder, settings, src, stop=lambda: False, model=None):
    record, prompts = sd.prepare(settings, folder, pieces=src, evaluation={"x": ["an evaluation prompt"]},
                                 log=lambda m: None)  # fmt: skip
    return sd.generate(record, prompts, settings, folder, model=model or _engine(), encode=_encode,
                       eos_token_id=7, stop=stop, progress=False, log=lambda m: None)  # fmt: skip


def test_resume_continues_without_duplicates_and_the_hashes_match(tmp_path):
    (tmp_path / "src").mkdir()
    src = pieces(tmp_path / "src")
    settings = sd.SelfDataSettings(prompts=11, shard_prompts=4, max_new_tokens=6, partial_every_s=0.0)
    model = _engine()
    whole = tmp_path / "whole"
    assert _run(whole, settings, src, model=model)
    asked = {"n": 0}

    def stop_after(k):
        def stop():
            asked["n"] += 1
            return asked["n"] > k

        return stop  # fmt: skip

    cut = tmp_path / "cut"
    assert not _run(cut, settings, src, stop=stop_after(6), model=model)  # stops inside shard 1
    manifest = json.loads((cut / sd.MANIFEST).read_text())
    assert manifest["done"] == ["0"] and manifest["partial"]["cell"] == 1
    assert manifest["partial"]["sequences"] == 2 and (cut / "shard-00001.partial.npz").exists()
    selfshards.verify_manifest(cut)  # the partial shard is hashed too
    asked["n"] = 0
    assert not _run(cut, settings, src, stop=stop_after(1), model=model)  # one more prompt, then stop
    assert _run(cut, settings, src, model=model)  # and the rest
    manifest = json.loads((cut / sd.MANIFEST).read_text())
    assert "partial" not in manifest and not list(cut.glob("*.partial.npz")) and len(manifest["runs"]) == 3
    a, b = json.loads((whole / sd.MANIFEST).read_text()), manifest
    for cid in ("0", "1", "2"):
        assert a["shards"][cid]["sha256"] == b["shards"][cid]["sha256"]  # the same bytes as one run
    seqs = list(selfshards.sequences(cut))
    assert [s.index for s in seqs] == list(range(11))  # every prompt once, in order
    assert [s.temperature for s in seqs[:4]] == [0.0, 1.0, 0.0, 1.0]
    assert [s.seed for s in seqs[:2]] == [0, 1]
    prompts = selfshards.read_prompts(cut / sd.PROMPTS)
    assert all(np.array_equal(s.prompt, _encode(p["prompt"])) for s, p in zip(seqs, prompts, strict=True))
    assert all(1 <= len(s.response) <= 6 and (s.eos == (s.response[-1] == 7)) for s in seqs)
    assert b["totals"]["greedy_tokens"] + b["totals"]["sampled_tokens"] == b["totals"]["response_tokens"]
    assert b["totals"]["sequences"] == 11 and sorted(b["prompt_set"]["per_task"].values()) == [2, 2, 2, 2, 3]
    assert all(e["sha256"] == selfshards.file_sha256(e["path"]) for e in b["sources"])
    # tampering is caught
    (cut / "shard-00002.npz").write_bytes(b"not a shard")
    with pytest.raises(ValueError, match="shard-00002.npz: sha256"):
        selfshards.verify_manifest(cut)
    # another design does not resume this folder
    with pytest.raises(Refused, match="other settings"):
        _run(cut, sd.SelfDataSettings(prompts=12, shard_prompts=4, max_new_tokens=6), src, model=model)


def test_the_command_parses_its_deadline_and_refuses_bad_arguments(root, capsys):
    import datetime as dt

    from specdec.cli.app import main

    now = dt.datetime(2026, 1, 1, 23, 0, tzinfo=dt.timezone.utc)
    assert sd._deadline("23:30", now) == now.timestamp() + 1800
    assert sd._deadline("01:00", now) == now.timestamp() + 7200  # tomorrow's
    for bad in (["--until", "25:00"], ["--minutes", "-1"]):
        assert main(["run", "self-data", *bad]) == 2
        assert bad[0] in capsys.readouterr().err
    assert main(["run", "self-data", "--prompts", "0", "--out", "/nonexistent"]) == 2
    assert "--prompts must be an integer in [1, 1000000]" in capsys.readouterr().err
