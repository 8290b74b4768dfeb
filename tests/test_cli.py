"""The ``specdec`` command line: its numbers are the library's, bad arguments are one line and exit 2.

Every test but one calls :func:`specdec.cli.app.main` in-process; one runs the installed script
(or ``python -m specdec`` where the script is missing) in a fresh interpreter with torch and
transformers blocked, which proves the entry point works and that ``plan`` needs no torch.
``modes`` is tested without its minute-long probe: the loader and the probe are replaced.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec.analysis.hardware import best_gamma_on_curve
from specdec.cli import app as cli
from specdec.cli import modes as modes_command
from specdec.cli import plan as plan_command
from specdec.theory.speedup import (
    expected_tokens,
    optimal_gamma,
    speedup_ceiling,
    walltime_speedup,
    walltime_speedup_measured,
)

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def plan_json(capsys, *argv: str) -> dict:
    code, out, err = run(capsys, "plan", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


# --------------------------------------------------------------------------- plan: the numbers
def test_plan_json_is_theorem_3_8(capsys):
    r = plan_json(capsys, "--alpha", "0.8", "--c", "0.05", "--gamma", "4")
    assert r["alpha"] == 0.8 and r["c"] == 0.05 and r["gamma"] == 4
    assert r["speedup"] == float(walltime_speedup(0.8, 4, 0.05))
    assert r["expected_tokens"] == float(expected_tokens(0.8, 4))
    assert r["optimal_gamma"] == int(optimal_gamma(0.8, 0.05))
    assert r["optimal_speedup"] == float(walltime_speedup(0.8, r["optimal_gamma"], 0.05))
    assert r["speedup_with_verify"] is None
    assert r["break_even"] is True
    assert r["ceiling"] == float(speedup_ceiling(0.8))
    for key in (
        "alpha",
        "c",
        "gamma",
        "expected_tokens",
        "speedup",
        "speedup_with_verify",
        "optimal_gamma",
        "optimal_speedup",
        "break_even",
        "ceiling",
    ):
        assert key in r


def test_plan_without_gamma_reports_the_optimum(capsys):
    r = plan_json(capsys, "--alpha", "0.6", "--c", "0.1", "--max-gamma", "20")
    best = int(optimal_gamma(0.6, 0.1, 20))
    assert r["gamma"] == r["optimal_gamma"] == best
    assert r["speedup"] == r["optimal_speedup"] == float(walltime_speedup(0.6, best, 0.1))


def test_plan_with_a_verify_cost(capsys):
    r = plan_json(capsys, "--alpha", "0.8", "--c", "0.05", "--gamma", "4", "--verify-cost", "1.3")
    assert r["speedup"] == float(walltime_speedup(0.8, 4, 0.05))
    assert r["speedup_with_verify"] == float(walltime_speedup_measured(0.8, 4, 0.05, 1.3))
    flat = {g + 1: 1.3 for g in range(1, 65)}
    assert (r["optimal_gamma"], r["optimal_speedup"]) == best_gamma_on_curve(0.8, 0.05, flat)


def test_plan_with_a_verify_curve(capsys):
    curve = {2: 1.1, 3: 1.2, 5: 1.4}
    r = plan_json(capsys, "--alpha", "0.5", "--c", "0", "--verify-curve", "2:1.1, 3:1.2,5:1.4")
    g, s = best_gamma_on_curve(0.5, 0.0, curve)
    assert (r["optimal_gamma"], r["optimal_speedup"]) == (g, s)
    assert r["gamma"] == g and r["speedup_with_verify"] == s
    r = plan_json(capsys, "--alpha", "0.5", "--c", "0", "--gamma", "4", "--verify-curve", "2:1.1,5:1.4")
    assert r["speedup_with_verify"] == float(walltime_speedup_measured(0.5, 4, 0.0, 1.4))


def test_plan_below_break_even(capsys):
    for alpha, c in (("0.05", "0.1"), ("0.3", "0.3")):
        r = plan_json(capsys, "--alpha", alpha, "--c", c)
        assert r["break_even"] is False
        assert r["optimal_gamma"] == 0 == int(optimal_gamma(float(alpha), float(c)))
        assert (
            r["optimal_speedup"] == float(walltime_speedup(float(alpha), 0, float(c))) == pytest.approx(1.0)
        )
    # with a verify curve too: no gamma >= 1 gains, so the optimum is plain decoding
    r = plan_json(capsys, "--alpha", "0.3", "--c", "0.3", "--verify-curve", "2:1.5,3:1.7,5:2.0")
    assert (r["optimal_gamma"], r["verify_cost"]) == (0, 1.0)  # gamma = 0: no verify pass, T(1)/T(1)
    assert r["optimal_speedup"] == r["speedup_with_verify"] == pytest.approx(1.0)


def test_plan_says_one_thing_about_break_even_when_the_verify_pass_is_priced(capsys):
    """alpha > c (Corollary 3.9) is the bar for V = 1; with measured verify costs the text states
    the priced bar (break_even_alpha) and agrees with the optimum (the referee's 0.46 / 0.26 case)."""
    from specdec.theory.speedup import break_even_alpha

    curve = "2:1.3,3:1.5,5:1.9"
    code, out, _ = run(capsys, "plan", "--alpha", "0.46", "--c", "0.26", "--verify-curve", curve)
    bar = break_even_alpha(0.26, {2: 1.3, 3: 1.5, 5: 1.9})
    assert code == 0 and bar > 0.46
    assert "optimal gamma = 0" in out and "no gamma gains" in out
    assert f"alpha must exceed {bar:.4f}; alpha = 0.46 does not" in out
    assert "so some gamma gains" not in out
    r = plan_json(capsys, "--alpha", "0.8", "--c", "0.05", "--verify-curve", curve)
    assert r["optimal_gamma"] > 0 and r["break_even_priced_alpha"] < 0.8
    code, out, _ = run(capsys, "plan", "--alpha", "0.8", "--c", "0.05", "--verify-curve", curve)
    assert "clears it" in out


def test_a_scalar_verify_cost_prices_only_the_gamma_it_was_measured_at(capsys):
    code, out, err = run(capsys, "plan", "--alpha", "0.7", "--c", "0.05", "--verify-cost", "2.26")
    assert code == 2 and "--verify-cost V prices the one gamma it was measured at" in err
    r = plan_json(capsys, "--alpha", "0.7", "--c", "0.05", "--gamma", "7", "--verify-cost", "2.26")
    assert r["gamma"] == 7 and r["verify_cost"] == 2.26


def test_plan_text_names_the_results(capsys):
    code, out, err = run(
        capsys, "plan", "--alpha", "0.8", "--c", "0.05", "--gamma", "4", "--verify-cost", "1.3"
    )
    assert code == 0 and err == ""
    assert f"{float(walltime_speedup(0.8, 4, 0.05)):.4f}x by Theorem 3.8" in out
    assert f"{float(walltime_speedup_measured(0.8, 4, 0.05, 1.3)):.4f}x" in out
    assert "Corollary 3.9" in out and "clears it" in out and "1/(1 - alpha) = 5.0000x" in out
    code, out, _ = run(capsys, "plan", "--alpha", "0.8", "--c", "0.05", "--gamma", "4")
    assert "Corollary 3.9" in out and "holds" in out
    code, out, _ = run(capsys, "plan", "--alpha", "0.1", "--c", "0.2")
    assert code == 0 and "fails" in out and "decode without speculation" in out


# --------------------------------------------------------------------------- errors: one line, exit 2
BAD_PLAN = [
    (["--alpha", "1", "--c", "0"], "--alpha"),
    (["--alpha", "-0.1", "--c", "0"], "--alpha"),
    (["--alpha", "nan", "--c", "0"], "--alpha"),
    (["--alpha", "abc", "--c", "0"], "--alpha"),
    (["--alpha", "0.5", "--c", "-1"], "--c"),
    (["--alpha", "0.5", "--c", "inf"], "--c"),
    (["--alpha", "0.5", "--c", "0", "--gamma", "0"], "--gamma"),
    (["--alpha", "0.5", "--c", "0", "--gamma", "2.5"], "--gamma"),
    (["--alpha", "0.5", "--c", "0", "--verify-cost", "0"], "--verify-cost"),
    (["--alpha", "0.5", "--c", "0", "--verify-cost", "-2"], "--verify-cost"),
    (["--alpha", "0.5", "--c", "0", "--verify-curve", "2:x"], "--verify-curve"),
    (["--alpha", "0.5", "--c", "0", "--verify-curve", "2=1.1"], "--verify-curve"),
    (["--alpha", "0.5", "--c", "0", "--verify-curve", "1:1"], "--verify-curve"),
    (["--alpha", "0.5", "--c", "0", "--verify-curve", "2:1.1,2:1.2"], "--verify-curve"),
    (["--alpha", "0.5", "--c", "0", "--verify-curve", "2:0"], "--verify-curve"),
    (["--alpha", "0.5", "--c", "0", "--gamma", "2", "--verify-curve", "2:1.1"], "--verify-curve"),
    (["--alpha", "0.5", "--c", "0", "--verify-cost", "1", "--verify-curve", "2:1"], "--verify-curve"),
    (["--alpha", "0.5", "--c", "0", "--max-gamma", "0"], "--max-gamma"),
    (["--alpha", "0.5"], "--c"),
]


@pytest.mark.parametrize(("argv", "names"), BAD_PLAN, ids=[" ".join(a) for a, _ in BAD_PLAN])
def test_plan_bad_arguments_are_one_line(capsys, argv, names):
    code, out, err = run(capsys, "plan", *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert err.startswith("specdec plan: error:") and names in err


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--alpha", "1.2"], "--alpha"),
        (["--alpha", "0.4", "--c", "-0.5"], "--c"),
        (["--c", "0.1"], "--alpha"),
        (["--threads", "0"], "--threads"),
        (["--threads", "two"], "--threads"),
    ],
)
def test_modes_bad_arguments_are_one_line(capsys, monkeypatch, argv, names):
    def never(*a, **k):
        raise AssertionError("a bad argument must be refused before loading the model")

    monkeypatch.setattr(modes_command, "load_target", never)
    code, out, err = run(capsys, "modes", *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("specdec modes: error:") and names in err


def test_library_value_errors_are_one_line(capsys, monkeypatch):
    def refuse(*a, **k):
        raise ValueError("alpha must lie in [0, 1]; got 2")

    monkeypatch.setattr(plan_command, "plan", refuse)
    code, out, err = run(capsys, "plan", "--alpha", "0.5", "--c", "0")
    assert (code, out) == (2, "")
    assert err == "specdec plan: error: alpha must lie in [0, 1]; got 2\n"


def test_missing_models_extra_is_one_line(capsys, monkeypatch):
    def no_torch(threads):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(modes_command, "load_target", no_torch)
    code, out, err = run(capsys, "modes", "--alpha", "0.4")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("specdec modes: error:") and "torch" in err and "specdec[models]" in err


def test_no_command_and_unknown_command_exit_2(capsys):
    for argv in ([], ["fly"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [[], ["plan"], ["modes"]])
def test_help_exits_0_and_names_the_paper(capsys, argv):
    code, out, err = run(capsys, *argv, "--help")
    assert code == 0 and err == ""
    assert "Theorem 3.8" in out and "alpha" in out and "Corollary 3.6" in out


# --------------------------------------------------------------------------- modes, without the probe
FAKE_PROBE = {
    "mode": "int4",
    "rule": "lowest median T(1); ties to the more precise mode",
    "cached": True,
    "k": 4,
    "machine": {"cpu": "Test CPU", "threads": 1},
    "modes": {
        "float32": {"step_s": 0.05, "verify_cost": 1.5, "curve": {"1": 1.0, "2": 1.2, "4": 1.5, "5": 1.6}},
        "int4": {"step_s": 0.02, "verify_cost": 1.3, "curve": {"1": 1.0, "2": 1.1, "4": 1.3, "5": 1.5}},
    },
}


def test_modes_reports_the_probe_and_draft_length(capsys, monkeypatch):
    pytest.importorskip("torch")
    from specdec.measure.modes import draft_length

    monkeypatch.setattr(modes_command, "load_target", lambda threads: type("T", (), {"model": None})())
    monkeypatch.setattr(modes_command, "run_probe", lambda model, refresh, threads=1: FAKE_PROBE)
    code, out, err = run(capsys, "modes", "--alpha", "0.4", "--c", "0.01", "--json")
    assert code == 0, err
    assert "timing the modes on this machine" in err
    r = json.loads(out)
    want = draft_length(FAKE_PROBE, 0.4, 0.01)
    assert (r["mode"], r["gamma"], r["speedup"]) == ("int4", want["gamma"], want["speedup"])
    assert r["modes"]["float32"]["verify_cost"] == 1.5 and r["cached"] is True
    code, out, _ = run(capsys, "modes")
    assert code == 0 and "chosen mode: int4" in out and "T(4)/T(1) = 1.300" in out


# --------------------------------------------------------------------------- the installed entry point
def test_installed_script_without_torch(tmp_path):
    """The console script (or ``python -m specdec``) runs ``plan`` with torch and transformers blocked."""
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    for name in ("torch", "transformers"):
        (blocked / f"{name}.py").write_text(f"raise ImportError('{name} is blocked by this test')\n")
    script = Path(sys.executable).with_name("specdec")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "specdec"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), str(ROOT)])}
    done = subprocess.run(
        [*command, "plan", "--alpha", "0.8", "--c", "0.05", "--gamma", "4", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)
    assert r["speedup"] == float(walltime_speedup(0.8, 4, 0.05))
    assert r["expected_tokens"] == float(expected_tokens(0.8, 4))


# --------------------------------------------------------------------------- measure and bench: help
@pytest.mark.parametrize("command", ["measure", "bench"])
def test_measure_and_bench_help_say_what_each_number_means(capsys, command):
    code, out, err = run(capsys, command, "--help")
    assert code == 0 and err == ""
    for words in ("T(1)", "alpha", "Theorem 3.8", "95 % "):
        assert words in out, words
    if command == "measure":
        assert "Corollary 3.6" in out and "Definition 3.7" in out and "teacher forcing" in out
        assert "--draft" in out and "lookup" in out and "early-exit" in out and "distil-l1" in out
    else:
        assert "--full" in out and "lean-int4" in out and "prompt lookup" in out


# --------------------------------------------------------------------------- measure: tiny models in folders
@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A tiny target, a perturbed copy of it (alpha about 0.8), a model with another vocabulary,
    each saved with a word-level tokenizer (no chat template: prompts are encoded plainly), and
    a prompts file."""
    pytest.importorskip("torch")
    from tiny_models import VOCAB, perturbed_copy, tiny_llama
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    def tokenizer(vocab: int):
        tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", eos_token="w2")

    root = tmp_path_factory.mktemp("cli-models")
    target = tiny_llama(0)
    saved = {
        "target": (target, VOCAB),
        "draft": (perturbed_copy(target, 0.05, 1), VOCAB),
        "other-vocab": (tiny_llama(2, vocab=89), 89),
    }
    for name, (model, vocab) in saved.items():
        model.save_pretrained(root / name)
        tokenizer(vocab).save_pretrained(root / name)
    prompts = root / "prompts.txt"
    prompts.write_text("w5 w6 w7 w8 w9 w5 w6 w7 w8 w9 w5 w6\n\nw3 w14 w15 w92 w65 w35\n", encoding="utf-8")
    return {name: str(root / name) for name in saved} | {"prompts": str(prompts), "root": root}


def tiny_measure(capsys, folders, *extra: str) -> tuple[int, str, str]:
    argv = ["measure", "--target", folders["target"], "--prompts", folders["prompts"]]
    argv += ["--new-tokens", "8", "--repeats", "1", "--verify-repeats", "2", *extra]
    return run(capsys, *argv)


def test_measure_json_is_consistent_with_the_theory(capsys, folders, one_thread):
    written = folders["root"] / "out.json"
    code, out, err = tiny_measure(
        capsys, folders, "--draft", f"model:{folders['draft']}", "--dtype", "float32", "--gamma", "3",
        "--json", "--out", str(written),
    )  # fmt: skip
    assert code == 0, err
    r = json.loads(out)
    assert json.loads(written.read_text(encoding="utf-8")) == r and f"record written to {written}" in err
    assert r["kind"] == "specdec-measure" and r["command"].startswith("specdec measure --target")
    assert r["target"]["engine"] == "lean-float32" and r["draft"]["kind"] == "model"
    assert r["draft"]["name"] == r["draft"]["spec"] == f"model:{folders['draft']}"  # the registry's spec
    assert "lean float32" in r["draft"]["about"]  # the draft runs in the target's lean mode
    assert r["prompts"] == 2 and r["gamma"] == 3 and r["greedy_exact"] is True
    # both alphas are rates; the perturbed copy drafts at every position and agrees often
    assert r["alpha_coverage"] == 1 and r["alpha"] == r["alpha_all_positions"]
    assert 0.5 < r["alpha"] <= 1 and 0 <= r["alpha_observed"] <= 1
    a, c, g = r["alpha"], r["c"], r["gamma"]
    assert r["expected_tokens"] == float(expected_tokens(a, g))
    p = r["prediction"]
    assert p["theorem"] == float(walltime_speedup(a, g, c))
    assert p["with_verify"] == float(walltime_speedup_measured(a, g, c, r["verify_cost"]))
    assert p["measured"] == r["measured"][0] and p["ratio"] == pytest.approx(r["measured"][0] / p["theorem"])
    assert r["verify_cost"] == r["verify_curve"]["4"] and r["verify_curve"]["1"] == 1.0
    assert r["optimal_gamma_theorem"]["gamma"] == int(optimal_gamma(a, c))
    curve = {int(k): v for k, v in r["verify_curve"].items()}
    assert (r["optimal_gamma_curve"]["gamma"], r["optimal_gamma_curve"]["speedup"]) == best_gamma_on_curve(
        a, c, curve
    )
    lo, hi = r["measured"][1:]
    assert lo <= r["measured"][0] <= hi  # two prompts: a bootstrap interval
    assert set(r["environment"]) >= {"device_name", "threads", "torch"}
    # the saved record prints again, without measuring
    saved = folders["root"] / "me.json"
    saved.write_text(out, encoding="utf-8")
    code, text, err = run(capsys, "measure", "--from-json", str(saved))
    assert code == 0 and err == ""
    assert f"alpha = {a:.4f}" in text and f"Theorem 3.8        {p['theorem']:.3f}x" in text
    assert "greedy output identical to plain decoding: yes" in text


@pytest.mark.parametrize("draft", ["lookup", "bigram", "early-exit:1"])
def test_measure_simple_drafts_on_transformers(capsys, folders, one_thread, draft):
    code, out, err = tiny_measure(capsys, folders, "--draft", draft, "--dtype", "hf-float32", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["target"]["engine"] == "hf-float32" and r["draft"]["kind"] == draft.partition(":")[0]
    assert r["greedy_exact"] is True and r["c"] >= 0
    if draft == "lookup":  # deterministic: alpha only where it drafts, over all positions counts 0
        assert r["alpha_coverage"] < 1 or r["alpha"] == r["alpha_all_positions"]
    else:
        assert r["alpha_coverage"] == 1


def one_line_error(code: int, out: str, err: str, command: str, *names: str) -> None:
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and err.startswith(f"specdec {command}: error:")
    for name in names:
        assert name in err, (name, err)


BAD_MEASURE = [
    (["--draft", "no-such-draft"], ["unknown draft", "lookup", "early-exit:8", "draft:distil-l1", "model:"]),
    (["--draft", "early-exit"], ["--draft", "early-exit needs ':<layers"]),  # before: a quarter of the layers
    (["--draft", "/tmp"], ["--draft", "is a folder", "the spec model:/tmp"]),  # before: taken as model:/tmp
    (["--draft", "early-exit:x"], ["--draft", "early-exit:x", "integer >= 1"]),
    (["--prompts", "no/such/file.txt"], ["--prompts", "no/such/file.txt"]),
    (["--target", "no/such/folder"], ["--target"]),
    (["--gamma", "0"], ["--gamma"]),
    (["--new-tokens", "-3"], ["--new-tokens"]),
    (["--repeats", "0"], ["--repeats"]),
    (["--verify-repeats", "0"], ["--verify-repeats"]),
    (["--repeats", str(2**63)], ["--repeats", "1000"]),
    (["--verify-repeats", str(2**63)], ["--verify-repeats", "1000"]),
    (["--new-tokens", "100000"], ["--new-tokens", "4096"]),
    (["--gamma", "65"], ["--gamma", "64"]),
    (["--threads", "0"], ["--threads"]),
    (["--temperature", "-1"], ["--temperature"]),
    (["--temperature", "nan"], ["--temperature"]),
    (["--dtype", "fp8"], ["--dtype"]),
    (["--gamma", "two"], ["--gamma"]),
    (["--from-json", "no/such.json"], ["--from-json"]),
    # issue 32, item 8: refused before the model loads, in the option's words (numpy's, mid-decode before)
    (["--seed", "-1"], ["--seed", "9223372036854775807"]),
    (["--seed", str(2**64)], ["--seed"]),
    (["--temperature", "1e-300"], ["--temperature", "0 (greedy) or >= 0.001"]),
    (["--out", "/proc/nope/x.json"], ["--out", "does not exist or is not writable"]),
]


@pytest.mark.parametrize(("argv", "names"), BAD_MEASURE, ids=[" ".join(a) for a, _ in BAD_MEASURE])
def test_measure_bad_arguments_are_one_line_before_loading(capsys, monkeypatch, argv, names):
    pytest.importorskip("torch")
    import specdec.engine.models

    def never(*a, **k):
        raise AssertionError("a bad argument must be refused before loading a model")

    monkeypatch.setattr(specdec.engine.models, "load_target", never)
    monkeypatch.setattr(specdec.engine.models, "load_model", never)
    one_line_error(*run(capsys, "measure", *argv), "measure", *names)


def test_measure_refuses_a_draft_with_another_vocabulary(capsys, folders, one_thread):
    other = f"model:{folders['other-vocab']}"
    code, out, err = tiny_measure(capsys, folders, "--draft", other, "--dtype", "hf-float32")
    one_line_error(code, out, err.splitlines()[-1] + "\n", "measure", "vocabulary size (89)", "(97)")
    assert "Traceback" not in err


def test_measure_refuses_more_layers_than_the_target_has(capsys, folders, one_thread):
    code, out, err = tiny_measure(capsys, folders, "--draft", "early-exit:5", "--dtype", "float32")
    one_line_error(code, out, err.splitlines()[-1] + "\n", "measure", "early-exit:5", "(2)")


def test_measure_refuses_a_bad_prompts_file_and_a_foreign_record(capsys, folders, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    one_line_error(*tiny_measure(capsys, folders, "--prompts", str(empty)), "measure", "no prompt")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "w5 w6"}\n{"text": "w7"}\n', encoding="utf-8")
    one_line_error(*tiny_measure(capsys, folders, "--prompts", str(bad)), "measure", "line 2", "'prompt'")
    other = tmp_path / "plan.json"
    other.write_text(json.dumps({"kind": "engine-modes"}), encoding="utf-8")
    one_line_error(*run(capsys, "measure", "--from-json", str(other)), "measure", "specdec measure --json")


# --------------------------------------------------------------------------- bench, on tiny engines
@pytest.fixture
def tiny_bench(monkeypatch):
    """specdec.measure.enginebench on two tiny engines: no model load, no mode probe, fixed prompts."""
    pytest.importorskip("torch")
    from tiny_models import tiny_llama

    import specdec.measure.modes
    import specdec.train.workloads
    from specdec.engine.lean import LeanLlama
    from specdec.measure import enginebench

    model = tiny_llama(0)
    base = type("Loaded", (), {"model": model, "tokenizer": None})()

    def build(names, threads):
        made = {"hf-float32": model, "lean-float32": LeanLlama(model, "float32")}
        return {n: made[n] for n in names}, base

    prompts = [
        {"id": "a-01", "task": "a", "ids": [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6]},
        {"id": "b-01", "task": "b", "ids": [3, 14, 15, 92, 65, 35]},
    ]
    monkeypatch.setattr(enginebench, "build_engines", build)
    monkeypatch.setattr(specdec.train.workloads, "evaluation_prompts", lambda tokenizer, per_task: prompts)
    monkeypatch.setattr(specdec.measure.modes, "choose_mode", lambda model, refresh, threads=None: FAKE_PROBE)
    return [
        "--engines",
        "hf-float32,lean-float32",
        "--new-tokens",
        "6",
        "--ks",
        "1,2,4",
        "--verify-repeats",
        "2",
    ]


def test_bench_json_record_and_text(capsys, tiny_bench, tmp_path, one_thread):
    from specdec.analysis.hardware import verify_curves

    out_file = tmp_path / "engine-modes.json"
    code, out, err = run(capsys, "bench", *tiny_bench, "--json", "--out", str(out_file))
    assert code == 0, err
    r = json.loads(out)
    assert r["kind"] == "engine-modes" and r["skipped"] == ["roofline", "profile"]
    assert r["roofline"] is None and r["profile"] is None
    assert r["settings"]["engine_names"] == ["hf-float32", "lean-float32"]
    assert r["settings"]["new_tokens"] == 6 and r["settings"]["prompts_per_task"] == 1  # quick default
    assert r["chosen_mode"]["mode"] == "int4" and "environment" in r
    assert set(r["summary"]["engines"]) == {"hf-float32", "lean-float32"}
    assert all(e["greedy_exact"] for e in r["summary"]["engines"].values())
    saved = json.loads(out_file.read_text(encoding="utf-8"))
    assert {k: v for k, v in saved.items() if k != "environment"} == {
        k: v for k, v in r.items() if k != "environment"
    }
    curves = verify_curves(saved)  # the book's reader of engine records reads it
    assert curves["lean-float32"][1] == 1.0 and set(curves["hf-float32"]) == {1, 2, 4}
    code, text, err = run(capsys, "bench", *tiny_bench)
    assert code == 0 and "lean-float32" in text and "lookup/plain" in text and "left out" in text


BAD_BENCH = [
    (["--engines", "gpu-magic"], ["unknown engines"]),
    (["--ks", "2,4"], ["--ks"]),
    (["--ks", "1,x"], ["--ks"]),
    (["--repeats", "0"], ["--repeats"]),
    (["--repeats", str(2**63)], ["--repeats", "1000"]),
    (["--verify-repeats", str(2**63)], ["--verify-repeats", "1000"]),
    (["--ks", f"1,{2**63}"], ["--ks", "256"]),
    (["--ks", ",".join(str(k) for k in range(1, 80))], ["--ks", "64 values"]),
    (["--new-tokens", "0"], ["--new-tokens"]),
    (["--threads", "-1"], ["--threads"]),
    # issue 32, item 8: refused before the run, not after it (or silently shortened)
    (["--verify-repeats", "1"], ["--verify-repeats", "[2, 1000]"]),
    (["--out", "/proc/nope/x.json"], ["--out", "does not exist or is not writable"]),
    (["--prompts-per-task", "1000"], ["--prompts-per-task", "[1, 12]"]),
]


@pytest.mark.parametrize(("argv", "names"), BAD_BENCH, ids=[" ".join(a) for a, _ in BAD_BENCH])
def test_bench_bad_arguments_are_one_line(capsys, monkeypatch, argv, names):
    pytest.importorskip("torch")
    from specdec.measure import enginebench

    def never(*a, **k):
        raise AssertionError("a bad argument must be refused before loading a model")

    monkeypatch.setattr(enginebench, "build_engines", never)
    one_line_error(*run(capsys, "bench", *argv), "bench", *names)


def test_bench_settings_keep_the_record_format(root):
    """``specdec bench --full`` and ``specdec run engine-modes`` store the settings the committed
    engine records hold, with the same defaults."""
    pytest.importorskip("torch")
    from specdec.measure.enginebench import BenchSettings

    # a one-thread record: the benchmark's default (superseded records live in bench/history/)
    committed = sorted((root / "results" / "bench").glob("engine-modes-*-1t.json"))
    assert committed
    stored = json.loads(committed[0].read_text(encoding="utf-8"))["settings"]
    # the engines asked for (None: every available one) and those that ran are the record's
    mine = BenchSettings(engines=stored["engines"], engine_names=tuple(stored["engine_names"])).record()
    assert mine == stored


def test_bench_prints_a_committed_record(capsys, root):
    """``--from-json`` prints the book's engine record as ``specdec bench`` prints a run: no model
    is loaded, the numbers are the record's."""
    path = sorted((root / "results" / "bench").glob("engine-modes-*.json"))[0]
    record = json.loads(path.read_text(encoding="utf-8"))
    code, out, err = run(capsys, "bench", "--from-json", str(path))
    assert code == 0 and err == ""
    for name, e in record["summary"]["engines"].items():
        line = next(row for row in out.splitlines() if row.startswith(name + " "))
        assert f"{e['step_ms']:.2f}" in line and f"{e['lookup_over_plain'][0]:.2f}" in line
    code, out, err = run(capsys, "bench", "--from-json", str(path), "--json")
    assert code == 0 and json.loads(out) == record
    one_line_error(*run(capsys, "bench", "--from-json", str(root / "README.md")), "bench", "not JSON")


# --------------------------------------------------------------------------- the library behind measure
def test_parse_draft_and_read_prompts(tmp_path):
    pytest.importorskip("torch")
    from specdec.experiments.usermeasure import parse_draft, read_prompts
    from specdec.train.draftnets import list_drafts

    assert parse_draft("lookup").text == "lookup" and parse_draft(" bigram ").text == "bigram"
    assert parse_draft("early-exit:8").text == "early-exit:8"
    for name in list_drafts():  # the one older name kept (a documented command's), mapped to the spec
        assert parse_draft(name).text == f"draft:{name}"
    assert parse_draft(f"model:{tmp_path}").text == f"model:{tmp_path}"
    for bad in (
        "early-exit",
        "early-exit:0",
        "early-exit:-1",
        "nonsense",
        str(tmp_path),
        str(tmp_path / "missing"),
    ):
        with pytest.raises(ValueError, match="draft"):
            parse_draft(bad)
    text = tmp_path / "p.txt"
    text.write_text("first prompt\n\n  second, indented\n", encoding="utf-8")
    assert read_prompts(text) == ["first prompt", "  second, indented"]
    lines = tmp_path / "p.jsonl"
    lines.write_text('{"id": 1, "prompt": "a\\nb"}\n\n{"prompt": "c"}\n', encoding="utf-8")
    assert read_prompts(lines) == ["a\nb", "c"]
    with pytest.raises(ValueError, match="does not exist"):
        read_prompts(tmp_path / "none.txt")


def test_engine_verify_curves_format_and_checks(one_thread, monkeypatch):
    pytest.importorskip("torch")
    import numpy as np
    from tiny_models import tiny_llama

    import specdec.engine.lm
    from specdec.engine.lean import LeanLlama
    from specdec.measure.core import engine_verify_curves

    model = tiny_llama(0)
    engines = {"hf": model, "lean": LeanLlama(model, "float32")}
    calls = []  # (engine, cached length before the call, tokens fed) of every forward
    real_open = specdec.engine.lm.open_lm

    def spying_open(m):
        s = real_open(m)
        name = next(n for n, e in engines.items() if e is m)
        forward = s.forward

        def spy(new_ids, keep=None):
            calls.append((name, len(s), len(new_ids)))
            return forward(new_ids, keep)

        s.forward = spy
        return s

    monkeypatch.setattr(specdec.engine.lm, "open_lm", spying_open)
    lines = []
    out = engine_verify_curves(engines, [5, 6, 7, 8], [1, 2, 4], 3, log=lines.append)
    assert (out["context"], out["ks"], out["repeats"]) == (4, [1, 2, 4], 3)
    for name in engines:
        # the prompt once, then 1 + 3 passes of one call per k, each on the 4 cached prompt tokens
        mine = [(n, k) for e, n, k in calls if e == name]
        assert mine[0] == (0, 4) and sorted(mine[1:]) == sorted([(4, 1), (4, 2), (4, 4)] * 4)
        passes = [sorted(k for _, k in mine[1 + 3 * i : 4 + 3 * i]) for i in range(4)]
        assert passes == [[1, 2, 4]] * 4  # every k once per pass
        cells = out["engines"][name]
        assert [c["k"] for c in cells] == [1, 2, 4]
        assert all(len(c["samples_s"]) == 3 for c in cells)  # the warm-up pass is not kept
        one = np.asarray(cells[0]["samples_s"])
        for c in cells:  # recomputed from the stored samples: median, and the paired geometric mean
            t = np.asarray(c["samples_s"])
            assert c["median_s"] == pytest.approx(float(np.median(t)), rel=1e-12)
            assert c["ratio_to_k1"] == pytest.approx(float(np.exp(np.mean(np.log(t / one)))), rel=1e-9)
        lo, hi = cells[2]["ratio_ci"]
        assert lo <= cells[2]["ratio_to_k1"] <= hi
    assert len(lines) == 2
    for ks in ([2, 4], [1, 1, 2], [0, 1]):
        with pytest.raises(ValueError, match="ks"):
            engine_verify_curves(engines, [5, 6], ks, 1, log=None)
    with pytest.raises(ValueError, match="repeats"):
        engine_verify_curves(engines, [5, 6], [1, 2], 0, log=None)


# --------------------------------------------------------------------------- --threads: one bound, first
BAD_THREADS = ["0", "-1", "1025", "100000", str(2**63), "two", "1e3", "9" * 5000]


@pytest.mark.parametrize("command", ["modes", "measure", "bench"])
@pytest.mark.parametrize("value", BAD_THREADS, ids=lambda v: v[:20])
def test_threads_out_of_bounds_is_one_line_before_anything_runs(capsys, command, value):
    """--threads is bounded once (common.MAX_THREADS) and checked as argparse reads it: one line naming
    --threads and the bound, exit status 2 (issue #32, item 8: 100000 segfaulted after the libraries
    started, 2**63 ended in "Overflow when unpacking long long", 5000 after the model load)."""
    from specdec.cli.common import MAX_THREADS

    code, out, err = run(capsys, command, "--threads", value)
    one_line_error(code, out, err, command, "--threads", f"[1, {MAX_THREADS}]")
    assert len(err) < 300


def test_threads_bound_is_checked_before_torch_is_imported():
    """The bound stops the command before torch (and its thread pools) is even imported."""
    code = (
        "import sys\nfrom specdec.cli import app\n"
        f"rc = app.main(['bench', '--threads', '{2**63}'])\n"
        "print(rc, 'torch' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.split() == ["2", "False"], done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "--threads" in done.stderr


def test_threads_bound_is_named_in_help_and_is_the_engines(capsys):
    """Each command's --help names the bound, and it is the C forward's (engine.native.check_threads)."""
    from specdec.cli.common import MAX_THREADS, threads_arg

    for command in ("modes", "measure", "bench"):
        code, out, _ = run(capsys, command, "--help")
        assert code == 0 and f"1 .. {MAX_THREADS}" in " ".join(out.split()), command
    assert threads_arg("1") == 1 and threads_arg(str(MAX_THREADS)) == MAX_THREADS
    native = pytest.importorskip("specdec.engine.native")
    assert native.check_threads(MAX_THREADS) == MAX_THREADS
    with pytest.raises(ValueError):
        native.check_threads(MAX_THREADS + 1)


def test_plan_help_examples_run(capsys):
    """Issue 32, item 8: plan --help's own --verify-cost example exited 2 (it needs --gamma). Every example
    in the help runs and exits 0."""
    code, out, _ = run(capsys, "plan", "--help")
    examples = [line.split()[2:] for line in out.splitlines() if line.strip().startswith("specdec plan ")]
    assert len(examples) >= 3
    for argv in examples:
        code, _, err = run(capsys, "plan", *argv)
        assert code == 0, (argv, err)
