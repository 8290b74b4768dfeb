"""Issue #20: faults and first contact. Cost follows the work, never an argument's size;
quiet degradations say why; slow first calls show progress; every failure ends in one line.

No test here has a wall-clock threshold: work is bounded by counting (list lengths, traced
Python allocations, evaluated gammas) instead.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")


# --------------------------------------------------------------------------- item 2: memory and time
def test_huge_gamma_allocates_for_the_work_not_for_gamma():
    """gamma = 10**7 with 8 new tokens: the Stats histograms span the 7 positions a round can
    reach, and the call allocates a few MB at most (two lists of gamma ints were 160 MB)."""
    from tiny_models import tiny_llama

    from specdec.decoding import speculative
    from specdec.drafters import PromptLookupDrafter

    target = tiny_llama(0)
    tracemalloc.start()
    try:
        gen = speculative(target, PromptLookupDrafter(), [5, 6, 7, 5, 6], gamma=10**7, max_new_tokens=8)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    s = gen.stats
    assert peak < 16 * 2**20, f"traced peak {peak / 2**20:.0f} MiB for 8 tokens"
    assert len(gen.tokens) == 8 and s.gamma == 10**7
    assert s.max_drafts == 7 and len(s.examined_at) == len(s.accepted_at) == 7
    assert len(s.accepted_hist) == 8 and sum(s.accepted_hist) == s.rounds


def test_stats_refuses_drafts_beyond_its_positions():
    from specdec.stats import Stats

    s = Stats(gamma=10**9, max_drafts=3)
    assert s.accepted_hist == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="max_drafts"):
        s.record_round(None, None, drafted=4, accepted=0, draft_calls=4)
    with pytest.raises(ValueError, match="max_drafts must lie in"):
        Stats(gamma=2, max_drafts=3)


def _limited(args: list[str], limit_bytes: int = 1 << 30) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` (default ``-m specdec ...``) with its address space capped at ``limit_bytes``."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, *(args if args[0] == "-c" else ["-m", "specdec", *args])],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=cap,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize(
    "extra",
    [
        ["--alpha", "0.9", "--c", "0.01"],
        ["--alpha", "0.5", "--c", "0"],
        ["--alpha", "0.9", "--c", "0.01", "--verify-cost", "1.3"],
        ["--alpha", "0.9", "--c", "0", "--verify-cost", "1.3"],
    ],
)
def test_plan_huge_max_gamma_under_a_memory_limit(extra):
    """--max-gamma 10**9 under a 1 GiB address space: an answer, not a numpy MemoryError."""
    done = _limited(["plan", *extra, "--max-gamma", "1000000000", "--json"])
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)
    if extra[3] == "0":  # c = 0: the speedup rises with gamma, the optimum is the limit itself
        assert r["optimal_gamma"] == 10**9 and r["optimal_at_max_gamma"]
    else:
        assert 1 <= r["optimal_gamma"] < 100


def test_plan_search_costs_the_same_for_any_max_gamma(monkeypatch):
    """The optimum takes O(log max_gamma) speedup evaluations and no array of max_gamma values."""
    import specdec.theory
    from specdec.cli import plan

    calls = []
    real = specdec.theory.walltime_speedup

    def counted(alpha, gamma, c):
        calls.append(np.size(gamma))
        return real(alpha, gamma, c)

    monkeypatch.setattr(specdec.theory, "walltime_speedup", counted)
    for max_gamma in (10**4, 10**7):
        calls.clear()
        r = plan(0.999, 1e-6, max_gamma=max_gamma)
        assert sum(calls) < 200, f"{sum(calls)} speedups evaluated for max_gamma = {max_gamma}"
        assert r["optimal_gamma"] == 6912  # by bisection; a scan of every gamma agrees:
    assert int(specdec.theory.optimal_gamma(0.999, 1e-6, 20000)) == 6912


@pytest.mark.parametrize(("alpha", "verify"), [(0.5, None), (0.8, None), (0.5, 1.3)])
def test_plan_c_zero_reports_the_limit_not_a_floating_tie(alpha, verify):
    """With c = 0 and alpha > 0, E[T] rises with every gamma: --help promises the limit."""
    from specdec.cli import plan

    for max_gamma in (64, 200):
        r = plan(alpha, 0.0, verify_cost=verify, max_gamma=max_gamma)
        assert r["optimal_gamma"] == max_gamma and r["optimal_at_max_gamma"]
    assert plan(0.0, 0.0)["optimal_gamma"] == 0  # alpha = 0: nothing gains, plain decoding


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--gamma", "1000000000"], ["--gamma must lie in 1 .. --new-tokens - 1 = 63", "1000000000"]),
        (["--new-tokens", "1"], ["--new-tokens must be >= 2", "got 1"]),
        (["--gamma", "8", "--new-tokens", "8"], ["--gamma must lie in 1 .. --new-tokens - 1 = 7"]),
    ],
)
def test_measure_refuses_gamma_beyond_the_work_in_one_line(argv, names):
    """Under a 1 GiB cap: one line and status 2 before anything loads (it was a MemoryError at
    range(1, gamma + 2), and --new-tokens 1 reported alpha = 0 from no speculation at all)."""
    done = _limited(["measure", *argv])
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr[-2000:]
    assert done.stderr.startswith("specdec measure: error: ")
    for name in names:
        assert name in done.stderr


def test_measure_drafter_refuses_gamma_beyond_the_work_under_a_memory_limit():
    code = (
        "from specdec.usermeasure import measure_drafter\n"
        "try:\n"
        "    measure_drafter(None, None, [[1, 2]], gamma=10**9, new_tokens=64)\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    done = _limited(["-c", code])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gamma must lie in 1 .. new_tokens - 1 = 63" in done.stdout
