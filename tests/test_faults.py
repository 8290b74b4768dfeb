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
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from specdec.theory.checks import Refused

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")


# --------------------------------------------------------------------------- item 2: memory and time
def test_huge_gamma_allocates_for_the_work_not_for_gamma():
    """gamma = 10**7 with 8 new tokens: the Stats histograms span the 7 positions a round can
    reach, and the call allocates a few MB at most (two lists of gamma ints were 160 MB)."""
    from tiny_models import tiny_llama

    from specdec.engine.decoding import speculative
    from specdec.engine.drafters import PromptLookupDrafter

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
    from specdec.engine.stats import Stats

    s = Stats(gamma=10**9, max_drafts=3)
    assert s.accepted_hist == [0, 0, 0, 0]
    with pytest.raises(ValueError, match="max_drafts"):
        s.record_round(None, None, drafted=4, accepted=0, draft_calls=4)
    with pytest.raises(ValueError, match=r"max_drafts must be an integer in \[0, 2\]"):
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
        ["--alpha", "0.9", "--c", "0.01", "--verify-curve", "2:1.1,3:1.2,5:1.3"],
        ["--alpha", "0.9", "--c", "0", "--verify-curve", "2:1.1,3:1.2,5:1.3"],
    ],
)
def test_plan_huge_max_gamma_under_a_memory_limit(extra):
    """--max-gamma 10**9 under a 1 GiB address space: an answer, not a numpy MemoryError (a scalar
    --verify-cost without --gamma is refused in one line now: test_cli)."""
    done = _limited(["plan", *extra, "--max-gamma", "1000000000", "--json"])
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)
    if extra[3] == "0" and "--verify-curve" not in extra:  # c = 0, V = 1: the optimum is the limit itself
        assert r["optimal_gamma"] == 10**9 and r["optimal_at_max_gamma"]
    elif "--verify-curve" in extra:  # the best of the measured gammas (1, 2, 4)
        assert r["optimal_gamma"] in (1, 2, 4)
    else:
        assert 1 <= r["optimal_gamma"] < 100


def test_plan_search_costs_the_same_for_any_max_gamma(monkeypatch):
    """The optimum takes O(log max_gamma) speedup evaluations and no array of max_gamma values."""
    import specdec.theory.speedup
    from specdec.theory.plan import plan

    calls = []
    real = specdec.theory.speedup.walltime_speedup

    def counted(alpha, gamma, c):
        calls.append(np.size(gamma))
        return real(alpha, gamma, c)

    monkeypatch.setattr(specdec.theory.speedup, "walltime_speedup", counted)
    for max_gamma in (10**4, 10**7):
        calls.clear()
        r = plan(0.999, 1e-6, max_gamma=max_gamma)
        assert sum(calls) < 200, f"{sum(calls)} speedups evaluated for max_gamma = {max_gamma}"
        assert r["optimal_gamma"] == 6912  # by bisection; a scan of every gamma agrees:
    assert int(specdec.theory.speedup.optimal_gamma(0.999, 1e-6, 20000)) == 6912
    for verify in (None, 1.3):  # a subnormal c: the bound is inf, not a ZeroDivisionError
        r = plan(0.9, 5e-324, verify_cost=verify, max_gamma=10**9)
        assert 1 <= r["optimal_gamma"] < 10**9 and r["optimal_speedup"] > 1


@pytest.mark.parametrize(("alpha", "verify"), [(0.5, None), (0.8, None), (0.5, 1.3)])
def test_plan_c_zero_reports_the_limit_not_a_floating_tie(alpha, verify):
    """With c = 0 and alpha > 0, E[T] rises with every gamma: --help promises the limit."""
    from specdec.theory.plan import plan

    for max_gamma in (64, 200):
        r = plan(alpha, 0.0, verify_cost=verify, max_gamma=max_gamma)
        assert r["optimal_gamma"] == max_gamma and r["optimal_at_max_gamma"]
    assert plan(0.0, 0.0)["optimal_gamma"] == 0  # alpha = 0: nothing gains, plain decoding


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--gamma", "1000000000"], ["--gamma must be an integer in [1, 64]", "1000000000"]),
        (["--gamma", "64", "--new-tokens", "64"], ["--gamma must lie in 1 .. --new-tokens - 1 = 63"]),
        (["--new-tokens", "1"], ["--new-tokens must be an integer in [2, 4096]", "got 1"]),
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
        "from specdec.experiments.usermeasure import measure_drafter\n"
        "try:\n"
        "    measure_drafter(None, None, [[1, 2]], gamma=10**9, new_tokens=64)\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    done = _limited(["-c", code])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gamma must lie in 1 .. new_tokens - 1 = 63" in done.stdout


# --------------------------------------------------------------------------- item 3: quiet degradations
def test_a_draft_with_a_shorter_context_than_the_prompt_is_refused():
    """A draft of 64 positions under a prompt of 100 tokens was accepted silently."""
    from tiny_models import tiny_llama

    from specdec.engine.decoding import speculative
    from specdec.engine.drafters import ModelDrafter

    target, draft = tiny_llama(0), tiny_llama(1)
    draft.config.max_position_embeddings = 64
    drafter = ModelDrafter(draft)
    assert drafter.context == 64
    with pytest.raises(ValueError, match=r"the draft's context window \(64 positions.*100 \+ 8 = 108"):
        speculative(target, drafter, [1 + i % 90 for i in range(100)], gamma=3, max_new_tokens=8)
    speculative(target, drafter, list(range(1, 51)), gamma=3, max_new_tokens=8)  # 58 <= 64: fine


@pytest.fixture
def no_compiler(monkeypatch, tmp_path):
    """No working C compiler (CC names nothing) and a fresh SPECDEC_CACHE: q4_1 cannot be built."""
    from specdec.engine import native
    from specdec.measure import modes

    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(modes, "_SAID", set())
    clear = getattr(native._load, "cache_clear", lambda: None)
    clear()
    yield tmp_path / "cache"
    clear()


@pytest.fixture
def fake_build(monkeypatch, tmp_path):
    """A compiler that writes a non-library (nothing is compiled) and a fresh fallback folder;
    yields a function pointing SPECDEC_CACHE at a cache folder and returning the build's reason."""
    from specdec.engine import native

    def fake_compiler(cc, flags, out, source):
        out.write_bytes(b"not a library")
        return None

    monkeypatch.setattr(native, "_compiler", lambda: ("cc",))
    monkeypatch.setattr(native, "_run_compiler", fake_compiler)
    monkeypatch.setattr(native, "fallback_folder", lambda: tmp_path / "fallback")

    def reason(cache):
        monkeypatch.setenv("SPECDEC_CACHE", str(cache))
        native._load.cache_clear()
        return native.unavailable_reason("q4_1")

    yield reason
    native._load.cache_clear()


def test_a_read_only_library_cache_builds_in_a_per_user_folder(fake_build, tmp_path, monkeypatch):
    """It ended in a raw '[Errno 20]' / '[Errno 30]' / PermissionError; now one line says where the
    library goes instead, or (no folder can be written) what failed, why and what to do."""
    from specdec.engine import native

    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a cache folder under a file cannot be created: like a read-only one
    with pytest.warns(
        UserWarning, match=r"cannot be written \(Not a directory\); the q4_1 C forward is built"
    ):
        why = fake_build(blocker / "cache")
    assert "[Errno" not in why  # the (fake) library was built in the fallback, then failed to load
    assert len(list((tmp_path / "fallback").glob("leanq4-*.so"))) == 1
    monkeypatch.setattr(native, "fallback_folder", lambda: blocker / "fallback")
    why = fake_build(blocker / "cache")
    assert why.startswith("cannot build the q4_1 C forward: the cache folder ") and "[Errno" not in why
    assert why.endswith("; point SPECDEC_CACHE at a writable folder") and "\n" not in why
    with pytest.raises(OSError, match="point SPECDEC_CACHE at a writable folder$"):
        native.library("q4_1")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)  # open to others: a library found there must not be trusted
    monkeypatch.setattr(native, "fallback_folder", lambda: shared)
    assert "not this user's own private folder" in fake_build(blocker / "cache")


def test_a_chmod_555_library_cache_builds_in_a_per_user_folder(fake_build, tmp_path, monkeypatch):
    """SPECDEC_CACHE at a read-only folder (chmod 555; root may write anyway, so for root the write
    is refused as it would be for another user)."""
    import errno
    import tempfile

    from specdec.engine import native

    cache = tmp_path / "cache"
    (cache / "native").mkdir(parents=True)
    (cache / "native").chmod(0o555)
    if not hasattr(os, "geteuid") or os.geteuid() == 0:
        real = tempfile.TemporaryFile

        def refused(*args, dir=None, **kw):
            if dir is not None and Path(dir) == cache / "native":
                raise PermissionError(errno.EACCES, "Permission denied", str(dir))
            return real(*args, dir=dir, **kw)

        monkeypatch.setattr(native.tempfile, "TemporaryFile", refused)
    try:
        with pytest.warns(UserWarning, match=r"cannot be written \(Permission denied\)"):
            assert "[Errno" not in fake_build(cache)
    finally:
        (cache / "native").chmod(0o755)
    assert len(list((tmp_path / "fallback").glob("leanq4-*.so"))) == 1


def test_lean_model_auto_says_which_modes_are_left_out_and_why(no_compiler):
    from tiny_models import tiny_llama

    from specdec.measure import modes

    assert "q4_1" in modes.left_out_modes() and "no-such-cc" in modes.left_out_modes()["q4_1"]
    with pytest.warns(UserWarning, match=r"lean modes left out on this machine \(q4_1: .*no-such-cc"):
        lean, probe = modes.lean_model(tiny_llama(0), "auto")
    assert "q4_1" not in probe["modes"] and lean.mode in probe["modes"]


def test_specdec_modes_lists_the_left_out_modes(capsys, monkeypatch):
    pytest.importorskip("torch")
    from specdec.cli import app as cli
    from specdec.cli import modes as modes_command
    from specdec.measure import modes

    probe = {
        "mode": "float32",
        "rule": "lowest median T(1); ties to the more precise mode",
        "cached": True,
        "k": 4,
        "machine": {"cpu": "Test CPU", "threads": 1},
        "modes": {
            m: {"step_s": 0.01, "verify_cost": 1.2, "curve": {"1": 1.0, "4": 1.2}}
            for m in ("float32", "bfloat16", "int4")
        },
    }
    monkeypatch.setattr(modes_command, "load_target", lambda threads: type("T", (), {"model": None})())
    monkeypatch.setattr(modes_command, "run_probe", lambda model, refresh, threads=None: probe)
    monkeypatch.setattr(modes, "left_out_modes", lambda: {"q4_1": "no C compiler found (set $CC)"})
    assert cli.main(["modes"]) == 0
    assert "q4_1      left out: no C compiler found (set $CC)" in capsys.readouterr().out
    assert cli.main(["modes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["left_out"] == {"q4_1": "no C compiler found (set $CC)"}


class _Config:
    hidden_size, intermediate_size, num_hidden_layers = 32, 64, 2
    num_attention_heads, num_key_value_heads, vocab_size = 4, 2, 97


TINY = type("Tiny", (), {"config": _Config()})()  # what choose_mode keys a probe by; never run


def _fake_probe(calls, load=None):
    def probe_modes(model, wanted, threads=None):
        calls.append(wanted)
        out = {"modes": {m: {"step_s": 1.0, "verify_s": 2.0} for m in wanted}, "machine": {}}
        return out if load is None else {**out, "load": load}

    return probe_modes


def test_a_read_only_cache_keeps_the_probe_for_the_process(monkeypatch, tmp_path):
    """It re-ran the probe on every call; now one line says so, and the probe is kept in memory."""
    from specdec.measure import modes

    calls = []
    monkeypatch.setattr(modes, "probe_modes", _fake_probe(calls))
    monkeypatch.setattr(modes, "_IN_MEMORY", {})
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a cache folder under a file cannot be created: like a read-only one
    with pytest.warns(
        UserWarning, match=r"mode probe kept for this process only: cannot write .*SPECDEC_CACHE"
    ):
        first = modes.choose_mode(TINY, cache=blocker / "cache", modes=("float32",))
    again = modes.choose_mode(TINY, cache=blocker / "cache", modes=("float32",))
    assert first["cached"] is False and again["cached"] is True and len(calls) == 1


@pytest.mark.parametrize(
    "damage",
    [{"mode": "fp8"}, {"mode": None}, {"modes": {"float32": {"step_s": None}}}, {"modes": {"float32": {}}}],
)
def test_a_damaged_probe_entry_is_measured_again_naming_the_file(monkeypatch, tmp_path, damage):
    """Issue 32, item 8: a cache entry that is valid JSON with a bad mode or null fields broke every run with
    a traceback; now it is measured again, one line naming the file."""
    import json

    from specdec.measure import modes

    calls = []
    monkeypatch.setattr(modes, "probe_modes", _fake_probe(calls))
    monkeypatch.setattr(modes, "_IN_MEMORY", {})
    first = modes.choose_mode(TINY, cache=tmp_path, modes=("float32",))
    path = tmp_path / "mode-probes.json"
    store = json.loads(path.read_text())
    (key,) = store
    store[key] |= damage
    path.write_text(json.dumps(store))
    monkeypatch.setattr(modes, "_IN_MEMORY", {})
    with pytest.warns(UserWarning, match=rf"mode-probe cache {path} holds a damaged entry"):
        again = modes.choose_mode(TINY, cache=tmp_path, modes=("float32",))
    assert len(calls) == 2 and again["mode"] == first["mode"] == "float32" and again["cached"] is False


def test_a_probe_timed_on_a_busy_machine_is_not_cached(monkeypatch, tmp_path):
    """The load check mocked: other processes kept every CPU busy while the probe timed."""
    from specdec.measure import modes, runner

    busy = iter([{"own_s": 0.0, "busy_s": 100.0, "cpus": 2}, {"own_s": 1.0, "busy_s": 104.0, "cpus": 2}])
    monkeypatch.setattr(modes, "cpu_counters", lambda: next(busy))
    load = runner.load_during(*[modes.cpu_counters() for _ in range(2)], wall_s=2.0, threads=1)
    assert load["others_busy_cpus"] == pytest.approx(1.5) and load["loaded"] is True
    assert load["cpu_share"] == pytest.approx(0.5)
    quiet = runner.load_during(
        {"own_s": 0.0, "busy_s": 0.0, "cpus": 2}, {"own_s": 2.0, "busy_s": 2.2, "cpus": 2}, 2.0, 1
    )
    assert quiet["loaded"] is False

    calls = []
    monkeypatch.setattr(modes, "probe_modes", _fake_probe(calls, load))
    with pytest.warns(UserWarning, match=r"mode probe not cached: other processes kept 1\.5 of 2 CPUs busy"):
        first = modes.choose_mode(TINY, cache=tmp_path, modes=("float32",))
    assert first["cached"] is False and first["load"]["loaded"] is True
    assert not (tmp_path / "mode-probes.json").exists()
    with pytest.warns(UserWarning, match="mode probe not cached"):
        assert modes.choose_mode(TINY, cache=tmp_path, modes=("float32",))["cached"] is False
    assert len(calls) == 2  # measured again: a busy machine's probe is not reused
    monkeypatch.setattr(modes, "probe_modes", _fake_probe(calls, quiet))
    modes.choose_mode(TINY, cache=tmp_path, modes=("float32",))
    assert modes.choose_mode(TINY, cache=tmp_path, modes=("float32",))["cached"] is True


def test_the_probe_records_its_load_and_shows_progress(monkeypatch, capsys):
    """A real (tiny) probe: its record holds the load measure; the tqdm bar counts the steps."""
    from tiny_models import tiny_llama

    from specdec.measure import modes

    bars = []
    real = modes._progress_bar

    def spy(total, desc):
        bar = real(total, desc)
        bars.append((total, desc))
        return bar

    monkeypatch.setattr(modes, "_progress_bar", spy)
    # off a terminal (pytest's stderr) the bar is off: one line at the start and one at the end say
    # what the slow first call does (it said nothing: issue #20)
    capsys.readouterr()
    probe = modes.probe_modes(tiny_llama(0), ("float32",), ks=(1, 2), k=2, context=4, repeats=2, warmup=1)
    assert bars == [(1 + 1 + 2, "timing the lean modes (float32)")]
    lines = capsys.readouterr().err.splitlines()  # plain lines on stderr, each whole (not warnings)
    assert len(lines) == 2
    assert lines[0] == "timing the lean modes (float32) on this machine (3 passes of every call size) ..."
    assert lines[-1].startswith("timing the lean modes (float32): done in ") and lines[-1].endswith(" s")
    import io
    import warnings

    from tqdm import tqdm

    monkeypatch.setattr(modes, "_progress_bar", lambda total, desc: tqdm(total=total, file=io.StringIO()))
    with warnings.catch_warnings(record=True) as on_a_terminal:  # the bar shows: no line besides it
        warnings.simplefilter("always")
        modes.probe_modes(tiny_llama(0), ("float32",), ks=(1, 2), k=2, context=4, repeats=2, warmup=1)
    assert "timing the lean modes" not in capsys.readouterr().err
    assert not [str(w.message) for w in on_a_terminal if "timing the lean modes" in str(w.message)]
    load = probe["load"]
    assert load["threads"] == 1 and load["wall_s"] > 0 and load["cpu_s"] >= 0 and "loaded" in load


def test_specdec_cache_naming_a_file_is_one_line_in_the_cli(capsys, monkeypatch, tmp_path):
    pytest.importorskip("torch")
    from specdec.cli import app as cli

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SPECDEC_CACHE", str(blocker))
    assert cli.main(["modes"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("specdec modes: error: SPECDEC_CACHE=") and "is a file, not a folder" in err[-1]


def test_the_cli_prints_a_library_warning_as_one_line(capsys, monkeypatch):
    import warnings

    from specdec.cli import app as cli

    def warn(args):
        warnings.warn("could not write the model cache /x: read-only", UserWarning, stacklevel=1)
        return 0

    parser = cli.parser()
    cli.subparser(parser, "plan").set_defaults(run=warn)
    monkeypatch.setattr(cli, "parser", lambda: parser)
    assert cli.main(["plan", "--alpha", "0.5", "--c", "0"]) == 0
    assert capsys.readouterr().err == "specdec plan: warning: could not write the model cache /x: read-only\n"


# --------------------------------------------------------------------------- item 6: CLI details
def test_an_unknown_option_under_a_command_is_reported_by_that_command(capsys):
    from specdec.cli import app as cli

    assert cli.main(["plan", "--alpha", "0.5", "--c", "0", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("specdec plan: error: unrecognized arguments: --bogus") and len(err.splitlines()) == 1
    )


def test_bench_help_counts_the_engines_it_runs(capsys):
    from specdec.cli import app as cli
    from specdec.cli.bench import BENCH_QUICK

    assert cli.main(["bench", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    quick = BENCH_QUICK["engines"].split(",")
    assert f"{len(quick)} engines ({', '.join(quick)}" in out and "four engines" not in out


@pytest.fixture(scope="module")
def rd():
    """``specdec run real-decoding``'s program (:class:`specdec.experiments.realdecodingrun.RealDecodingRun`):
    ``rd(argv)`` is the program of those options, from its generated parser (nothing runs)."""
    pytest.importorskip("torch")
    from specdec.experiments import options
    from specdec.experiments.realdecodingrun import RealDecodingRun

    parser = options.parser(RealDecodingRun)
    return lambda argv: options.build(RealDecodingRun, vars(parser.parse_args(argv)))


def test_real_decoding_quick_lets_explicit_values_win_and_says_so(rd):
    from specdec.experiments.realdecodingrun import QUICK

    said = []
    args = rd(["--no-trained", "--quick", "--prompts", "5", "--new-tokens", "40"]).settings(say=said.append)
    assert (args.prompts, args.new_tokens, args.verify_repeats) == (5, 40, QUICK["verify_repeats"])
    assert "--quick with --prompts 5: the value given wins (quick would use 3)" in said
    assert any("--new-tokens 40" in line for line in said) and len(said) == 2
    full = rd(["--no-trained"]).settings(say=said.append)
    assert (full.prompts, full.new_tokens, full.sweep, full.verify_repeats) == (8, 48, "1,2,4,6,8", 15)
    assert full.lenience == "1,0.5,0.3,0.1" and len(said) == 2  # as the records store it; nothing said


def test_real_decoding_help_names_resuming_and_every_option(capsys):
    from specdec.cli.app import main

    assert main(["run", "real-decoding", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "resumes" in out and "--fresh discards it" in out
    for option in ("--out", "--threads", "--seed"):
        after = out.split(option, 2)[-1]  # the option's own entry in the options list
        assert len(after.split("--")[0].split()) > 3, option  # a help text, not the bare option


def test_a_damaged_partial_state_is_one_line_naming_the_file(rd, tmp_path):
    args = rd(["--no-trained", "--quick", "--out", str(tmp_path)]).settings()
    path = tmp_path / "auto-1t-quick.partial.json"
    path.write_text('{"settings_key": {"quick": tr')  # killed mid-write by another tool
    from specdec.measure.runner import open_partial

    with pytest.raises(Refused) as caught:
        open_partial(path, args, key="settings_key")
    message = str(caught.value)
    assert str(path) in message and "--fresh" in message and "\n" not in message


def test_the_stored_quick_record_command_is_accepted(rd):
    """results/real/cpu-bfloat16-1t-quick.json was made before --dtype became --mode (238e00e)."""
    record = json.loads((ROOT / "results" / "real" / "cpu-bfloat16-1t-quick.json").read_text())
    argv = record["command"].split()[2:]
    assert argv == ["--quick", "--dtype", "bfloat16"]
    args = rd(["--no-trained", *argv]).settings()
    assert args.mode == "hf-bfloat16" and args.quick
    with pytest.raises(ValueError, match="^--dtype .* and mode exclude each other"):
        rd(["--no-trained", "--dtype", "bfloat16", "--mode", "int4"])


def test_plan_refuses_a_gamma_beyond_its_documented_maximum(capsys):
    """2**63 - 1 overflowed int64 to a speedup of -inf; now one line naming the range."""
    from specdec.cli import app as cli
    from specdec.theory.plan import MAX_GAMMA

    what = {"--gamma": "drafted tokens per round", "--max-gamma": "the largest gamma the optimum may take"}
    for option in ("--gamma", "--max-gamma"):
        assert cli.main(["plan", "--alpha", "0.5", "--c", "0", option, str(2**63 - 1)]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"specdec plan: error: {option} must be an integer in [1, {MAX_GAMMA}] ({what[option]}; 10**15: "
            f"beyond it gamma + 1 loses digits in the formulas); got {2**63 - 1}\n"
        )
    assert cli.main(["plan", "--alpha", "0.5", "--c", "0", "--max-gamma", str(MAX_GAMMA), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["optimal_gamma"] == MAX_GAMMA


def test_batched_speculative_refuses_a_draft_with_a_shorter_context():
    from tiny_models import tiny_llama

    from specdec.engine.batched import batched_speculative

    target, draft = tiny_llama(0), tiny_llama(1)
    draft.config.max_position_embeddings = 64
    prompts = [[1, 2, 3], [1 + i % 90 for i in range(60)]]
    with pytest.raises(ValueError, match=r"the draft's context window \(64 positions.*60 \+ 8 = 68"):
        batched_speculative(target, draft, prompts, gamma=3, max_new_tokens=8)
    assert len(batched_speculative(target, draft, prompts, gamma=3, max_new_tokens=4).tokens) == 2


def test_plan_from_python_takes_alpha_one_and_both_verify_prices():
    """The referee's two regressions of the bounded search: alpha = 1 divided by zero, and a
    verify curve given beside a scalar left the scalar branch without its bound."""
    from specdec.theory.plan import plan

    assert plan(1.0, 0.05)["optimal_gamma"] == 64  # every draft accepted: the limit, as on main
    assert plan(1.0, 0.05, verify_cost=1.2)["optimal_gamma"] >= 1
    both = plan(0.8, 0.05, verify_cost=1.3, verify_curve={2: 1.1, 3: 1.2, 5: 1.4})
    assert both["optimal_gamma"] in (1, 2, 4)  # read from the curve, whose k are 2, 3 and 5


def test_each_left_out_c_mode_says_its_own_reason(monkeypatch):
    """q4q8 failing while q4_1 builds is reported with q4q8's reason, not q4_1's (empty) one."""
    from specdec.engine import native
    from specdec.measure import modes

    monkeypatch.setattr(modes, "available_modes", lambda: ("float32", "q4_1", "bfloat16", "int4"))
    reasons = {"q4_1": None, "q4q8": "leanq8.c: unknown instruction (test)"}
    monkeypatch.setattr(native, "unavailable_reason", lambda kind="q4_1": reasons[kind])
    assert modes.left_out_modes() == {
        "q4q8": "the C forward cannot be built or loaded: leanq8.c: unknown instruction (test)"
    }


def test_first_contact_refusals_in_the_api_name_the_argument_and_the_range():
    """Issue 32, item 8: a temperature that overflows the logits, a negative seed and more prompts per task
    than the workloads hold are refused where they enter, not mid-decode or silently."""
    from specdec.theory.checks import SEED_MAX, check_seed
    from specdec.theory.sampling import MIN_TEMPERATURE, check_temperature, warp
    from specdec.train.workloads import evaluation_count, evaluation_prompts

    with pytest.raises(ValueError, match=r"temperature must be 0 \(greedy\) or >= 0.001"):
        warp(np.zeros(4), temperature=1e-300)
    assert check_temperature("t", 0) == 0.0 and check_temperature("t", MIN_TEMPERATURE) == MIN_TEMPERATURE
    assert np.isfinite(warp(np.array([30.0, 0.0, -30.0]), temperature=MIN_TEMPERATURE)).all()
    for bad in (-1, SEED_MAX + 1, 0.5, None):
        with pytest.raises(ValueError, match="seed must be an integer in"):
            check_seed("seed", bad)
    n = evaluation_count()
    with pytest.raises(ValueError, match=rf"per_task must be an integer in \[1, {n}\]"):
        evaluation_prompts(None, n + 1)  # before any tokenizing


@pytest.mark.parametrize("foreign", ["another library", "not a library"])
def test_a_cached_library_that_does_not_load_is_rebuilt(tmp_path, foreign):
    """Issue 32, item 8: a cached library whose checksum record matches but which does not load as the
    forward (another library there, or bytes dlopen refuses) ended in a traceback; now it is rebuilt,
    one line naming it. Each step in its own process, as a cache is shared between runs."""
    import ctypes.util
    import json
    import shutil
    import subprocess
    import sys

    from specdec.engine import native

    if native._compiler() is None:
        pytest.skip("no C compiler")
    code = (
        "import sys; from specdec.engine import native; r = native.unavailable_reason('q4_1'); "
        "print(r); sys.exit(0 if r is None else 1)"
    )
    env = {**os.environ, "SPECDEC_CACHE": str(tmp_path)}

    def load() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )

    assert load().returncode == 0
    (lib,) = (tmp_path / "native").glob("leanq4-*.so")
    other = ctypes.util.find_library("m")
    folders = [
        p
        for p in map(Path, ("/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64"))
        if other and (p / other).exists()
    ]
    if foreign == "another library" and folders:
        shutil.copy(folders[0] / other, lib)
    else:
        lib.write_bytes(b"\x7fELF" + bytes(range(256)) * 4)
    size, sha = native._digest(lib)
    native._sidecar(lib).write_text(json.dumps({"size": size, "sha256": sha}))  # the record matches
    done = load()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"rebuilding the cached library {lib}: it does not load" in done.stderr
    assert native._damage(lib) is None and sorted(p.name for p in lib.parent.iterdir()) == [
        lib.name,
        lib.name + ".check.json",
    ]
    assert load().stderr == ""  # rebuilt once: the next run loads it as it is


def test_a_killed_writes_temporary_folder_is_removed_by_the_next_writer(tmp_path, capsys):
    """Issue 32, item 8: a kill during the model cache's write left a hidden 517 MB folder, one during a
    compile a native/tmp* folder, forever; the next writer removes those untouched for an hour, and
    leaves a younger one (another process's write in progress) alone."""
    from specdec.engine.models import STALE_TEMPORARY_S, remove_stale_temporaries

    old, young = tmp_path / ".smollm2-q4_1-abc", tmp_path / ".smollm2-q4_1-def"
    for folder in (old, young):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "model.safetensors").write_bytes(b"x" * 10)
    then = time.time() - STALE_TEMPORARY_S - 60
    for p in (old, old / "sub", old / "sub" / "model.safetensors"):
        os.utime(p, (then, then))
    (tmp_path / "keep.txt").write_text("not a temporary")
    assert remove_stale_temporaries(tmp_path, ".smollm2-q4_1-*") == [old]
    assert not old.exists() and young.exists() and (tmp_path / "keep.txt").exists()
    assert f"removed {old}" in capsys.readouterr().err
    assert remove_stale_temporaries(tmp_path / "missing", "tmp*") == []
