"""The ``specdec`` command line: its numbers are the library's, bad arguments are one line and exit 2.

Every test but one calls :func:`specdec.cli.main` in-process; one runs the installed script
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

from specdec import cli
from specdec.hardware import best_gamma_on_curve
from specdec.theory import (
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
    # with a verify cost too: no gamma >= 1 gains, so the optimum is plain decoding
    r = plan_json(capsys, "--alpha", "0.3", "--c", "0.3", "--verify-cost", "1.5")
    assert (r["optimal_gamma"], r["verify_cost"]) == (0, 1.0)  # gamma = 0: no verify pass, T(1)/T(1)
    assert r["optimal_speedup"] == r["speedup_with_verify"] == pytest.approx(1.0)


def test_plan_text_names_the_results(capsys):
    code, out, err = run(
        capsys, "plan", "--alpha", "0.8", "--c", "0.05", "--gamma", "4", "--verify-cost", "1.3"
    )
    assert code == 0 and err == ""
    assert f"{float(walltime_speedup(0.8, 4, 0.05)):.4f}x by Theorem 3.8" in out
    assert f"{float(walltime_speedup_measured(0.8, 4, 0.05, 1.3)):.4f}x" in out
    assert "Corollary 3.9" in out and "holds" in out and "1/(1 - alpha) = 5.0000x" in out
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

    monkeypatch.setattr(cli, "_load_target", never)
    code, out, err = run(capsys, "modes", *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("specdec modes: error:") and names in err


def test_library_value_errors_are_one_line(capsys, monkeypatch):
    def refuse(*a, **k):
        raise ValueError("alpha must lie in [0, 1]; got 2")

    monkeypatch.setattr(cli, "plan", refuse)
    code, out, err = run(capsys, "plan", "--alpha", "0.5", "--c", "0")
    assert (code, out) == (2, "")
    assert err == "specdec plan: error: alpha must lie in [0, 1]; got 2\n"


def test_missing_models_extra_is_one_line(capsys, monkeypatch):
    def no_torch(threads):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(cli, "_load_target", no_torch)
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
    from specdec.modes import draft_length

    monkeypatch.setattr(cli, "_load_target", lambda threads: type("T", (), {"model": None})())
    monkeypatch.setattr(cli, "_choose_mode", lambda model, refresh: FAKE_PROBE)
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
