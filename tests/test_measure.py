"""specdec.measure.core: timing summaries, forwards on a cropped KV cache, environment, results files.

Shapes and bookkeeping only: no test here asserts a speed (speed belongs in benchmarks).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import tiny_models  # noqa: E402
from transformers import LlamaForCausalLM  # noqa: E402

from specdec.measure import core as measure  # noqa: E402
from specdec.measure.core import (  # noqa: E402
    Timing,
    VerifyCost,
    environment,
    forward_times,
    summarize_times,
    time_calls,
    verify_cost_curve,
    write_result,
)
from specdec.theory import recordio  # noqa: E402


def tiny_llama(attn: str = "sdpa", seed: int = 0) -> LlamaForCausalLM:
    with torch.random.fork_rng():
        return tiny_models.tiny_llama(seed, vocab=101, attn_implementation=attn)


# --------------------------------------------------------------------------- timing
def test_summarize_times():
    t = summarize_times([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (t.median_s, t.q1_s, t.q3_s, t.iqr_s, t.n) == (3.0, 2.0, 4.0, 2.0, 5)
    assert t.times_s == (5.0, 1.0, 3.0, 2.0, 4.0)
    assert t.to_dict()["iqr_s"] == 2.0
    for bad in ([], [1.0, -1.0], [float("nan")]):
        with pytest.raises(ValueError, match="times"):
            summarize_times(bad)


def test_time_calls_counts_and_orders():
    calls = []
    t = time_calls(lambda: calls.append(1), warmup=2, repeats=5, sync=False)
    assert len(calls) == 7 and isinstance(t, Timing) and t.n == 5 == len(t.times_s)
    assert 0 <= t.q1_s <= t.median_s <= t.q3_s
    assert time_calls(lambda: None, warmup=0, repeats=1).n == 1


def test_time_calls_validates():
    with pytest.raises(ValueError, match="warmup"):
        time_calls(lambda: None, warmup=-1)
    with pytest.raises(ValueError, match="repeats"):
        time_calls(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="fn must be callable"):
        time_calls(3)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sync=True"):
            time_calls(lambda: None, sync=True)


# --------------------------------------------------------------------------- forwards on a cache
def test_cached_forward_crops_back_to_the_prefix():
    """Every call sees the same cache, and its logits equal a plain forward without a cache."""
    model = tiny_llama()
    gen = torch.Generator().manual_seed(1)
    prefix = torch.randint(0, 101, (1, 12), generator=gen)
    new = torch.randint(0, 101, (1, 4), generator=gen)
    from specdec.engine.lm import TensorSession

    run = TensorSession(model, prefix)
    first = run.forward(new[:, :3])
    assert run.cache.get_seq_length() == 15 and len(run) == 15
    run.crop(12)
    assert run.cache.get_seq_length() == 12
    second = run.forward(new[:, :3])
    run.crop(12)
    assert torch.equal(first, second) and first.shape == (1, 3, 101)
    with torch.inference_mode():
        full = model(input_ids=torch.cat([prefix, new[:, :3]], dim=1)).logits[:, -3:]
    torch.testing.assert_close(first, full, rtol=1e-4, atol=1e-5)


def test_verify_cost_curve_shapes():
    curve = verify_cost_curve(tiny_llama(), prefix_len=16, ks=(4, 1, 2), repeats=3, warmup=1)
    assert isinstance(curve, VerifyCost)
    assert curve.ks == (1, 2, 4) and curve.prefix_len == 16
    assert curve.ratios[0] == 1.0
    assert all(math.isfinite(r) and r > 0 for r in curve.ratios)
    assert [t.n for t in curve.timings] == [3, 3, 3]
    rows = curve.rows()
    assert [r["k"] for r in rows] == [1, 2, 4] and set(rows[0]) == {"k", "median_ms", "iqr_ms", "ratio"}
    as_json = json.loads(json.dumps(curve.to_dict()))
    assert as_json["ks"] == [1, 2, 4] and len(as_json["timings"]) == 3
    # k = 1 is always measured, since every ratio is relative to it.
    assert verify_cost_curve(tiny_llama(), 8, ks=np.arange(2, 4), repeats=1, warmup=0).ks == (1, 2, 3)


def test_forward_times_interleaves_models_and_ks():
    times = forward_times(
        {"eager": tiny_llama("eager"), "sdpa": tiny_llama("sdpa")}, 8, ks=(1, 3), repeats=2, warmup=0
    )
    assert set(times) == {("eager", 1), ("eager", 3), ("sdpa", 1), ("sdpa", 3)}
    assert all(t.n == 2 for t in times.values())


class _Recorder:
    """A fake session: records each call (name, k) and its cached length; ``crop`` cuts back."""

    def __init__(self, name: str, log: list, context: int = 5) -> None:
        self.name, self.log, self.ids = name, log, list(range(context))

    def __len__(self) -> int:
        return len(self.ids)

    def forward(self, new_ids, keep=None):
        self.log.append((self.name, len(new_ids), len(self.ids)))
        self.ids += list(new_ids)

    def crop(self, n: int) -> None:
        del self.ids[n:]


@pytest.mark.parametrize("order", ["pairs", "nested", "names", "fixed"])
def test_time_forwards_interleaves_every_pair_once_per_pass(order):
    """Each pass times every (name, k) exactly once, on the same cached length; "pairs" mixes the
    names within a pass, "nested" and "names" keep a name's ks together, and the orders change
    from pass to pass (a loop that ran the pairs in one fixed order, or skipped the crop, fails)."""
    log: list = []
    sessions = {n: _Recorder(n, log) for n in ("a", "b", "c")}
    ks = [1, 2, 3, 4]
    times = measure.time_forwards(
        sessions, dict.fromkeys(sessions, list(range(10, 20))), ks, repeats=6, warmup=2, order=order
    )
    assert {n: {k: len(v) for k, v in t.items()} for n, t in times.items()} == {
        n: dict.fromkeys(ks, 6) for n in sessions
    }
    assert all(context == 5 for _, _, context in log)  # cropped back after every call
    passes = [log[i : i + 12] for i in range(0, len(log), 12)]
    assert len(passes) == 8
    for p in passes:
        assert sorted((n, k) for n, k, _ in p) == sorted((n, k) for n in sessions for k in ks)
    names_of = [tuple(dict.fromkeys(n for n, _, _ in p)) for p in passes]
    ks_of = [tuple(k for n, k, _ in p if n == "a") for p in passes]
    if order == "fixed":
        assert set(names_of) == {("a", "b", "c")} and set(ks_of) == {(1, 2, 3, 4)}
        return
    assert len(set(names_of)) > 1  # the names' order changes between passes
    if order == "pairs":  # the names are mixed within a pass
        assert any(len([n for n, _ in itertools.groupby(x for x, _, _ in p)]) > 3 for p in passes)
    else:  # each name's ks run back to back
        assert all(len([n for n, _ in itertools.groupby(x for x, _, _ in p)]) == 3 for p in passes)
    assert (len(set(ks_of)) > 1) == (order != "names")


def test_time_forwards_reopens_and_checks_the_crop():
    log: list = []
    opened = []

    def reopen():
        opened.append(1)
        return _Recorder("a", log, context=7)

    times = measure.time_forwards(
        {"a": _Recorder("a", log)},
        {"a": [1, 2, 3]},
        [1, 3],
        repeats=2,
        warmup=1,
        order="nested",
        reopen={"a": reopen},
    )
    assert len(opened) == 3 and all(c == 7 for _, _, c in log) and len(times["a"][3]) == 2

    class Leaky(_Recorder):
        def crop(self, n):  # forgets to cut back
            pass

    with pytest.raises(RuntimeError, match="after cropping"):
        measure.time_forwards({"x": Leaky("x", [])}, {"x": [1, 2]}, [2], repeats=1)
    with pytest.raises(ValueError, match="reopen needs"):
        measure.time_forwards({"a": _Recorder("a", [])}, {"a": [1]}, [1], repeats=1, reopen={"a": reopen})


def test_verify_cost_curve_ratios_are_the_stored_medians(monkeypatch):
    """T(k)/T(1) recomputed from the stored timings (a curve whose ratios drifted from its timings fails)."""
    fake = {1: [2.0, 2.2, 1.0], 2: [3.0, 3.9, 2.7], 4: [5.0, 4.0, 9.0]}  # medians 2, 3, 5; means not

    def fake_forward_times(models, prefix_len, ks, **kw):
        return {("target", k): summarize_times(fake[k]) for k in ks}

    monkeypatch.setattr(measure, "forward_times", fake_forward_times)
    curve = verify_cost_curve(object(), 4, ks=(4, 2), repeats=3)
    assert curve.ks == (1, 2, 4)
    assert curve.ratios == pytest.approx((1.0, 1.5, 2.5))
    for k, t, r in zip(curve.ks, curve.timings, curve.ratios, strict=True):
        assert t.times_s == tuple(fake[k]) and r == pytest.approx(t.median_s / curve.timings[0].median_s)


def test_forward_times_validates():
    model = tiny_llama()
    with pytest.raises(ValueError, match="prefix_len"):
        forward_times({"m": model}, 0)
    with pytest.raises(ValueError, match="each k in ks"):
        forward_times({"m": model}, 4, ks=(1, 0))
    with pytest.raises(ValueError, match="must not repeat"):
        forward_times({"m": model}, 4, ks=(1, 1))
    with pytest.raises(ValueError, match="at least one k"):
        forward_times({"m": model}, 4, ks=())
    with pytest.raises(ValueError, match="at least one model"):
        forward_times({}, 4)
    with pytest.raises(ValueError, match="repeats"):
        verify_cost_curve(model, 4, repeats=0)


# --------------------------------------------------------------------------- environment
def test_environment_keys_and_no_hostname():
    env = environment(model=tiny_llama())
    expected = {
        "python",
        "platform",
        "specdec",
        "numpy",
        "torch",
        "transformers",
        "device",
        "device_name",
        "cpu_count",
        "dtype",
        "threads",
        "interop_threads",
        "git_commit",
        "git_dirty",
        "timestamp_utc",
    }
    assert set(env) == expected
    assert env["dtype"] == "float32" and env["device"] == "cpu" and env["device_name"]
    assert env["threads"] == torch.get_num_threads()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", env["timestamp_utc"])
    assert env["git_commit"] is None or re.fullmatch(r"[0-9a-f]{40}", env["git_commit"])
    host = socket.gethostname()
    if len(host) > 3:
        assert host not in json.dumps(env)
    assert environment(dtype="bfloat16")["dtype"] == "bfloat16"


def test_environment_outside_git(monkeypatch, tmp_path):
    monkeypatch.setattr(measure, "_ROOT", tmp_path)
    env = environment()
    assert env["git_commit"] is None and env["git_dirty"] is None


# --------------------------------------------------------------------------- results files
def test_write_result(tmp_path):
    env = {"torch": "x", "device": "cpu"}
    record = {"b": np.float64(0.5), "a": [np.int64(1), 2], "timing": summarize_times([1.0, 2.0])}
    path = write_result(tmp_path / "sub" / "r.json", record, env=env)
    text = path.read_text()
    data = json.loads(text)
    assert data["environment"] == env and data["b"] == 0.5 and data["a"] == [1, 2]
    assert data["timing"]["median_s"] == 1.5
    assert text == json.dumps(data, sort_keys=True, indent=2) + "\n"
    assert set(json.loads(write_result(tmp_path / "e.json", {"x": 1}).read_text())["environment"]) >= {
        "torch",
        "git_commit",
    }


def test_write_record_writes_nan_as_null_atomically(tmp_path, monkeypatch):
    """The one NaN rule: NaN and infinity -> null, in every record (numpy included); a failed
    write leaves the old record whole and no temporary file behind."""
    rec = {"x": float("nan"), "y": [np.float32("inf"), -math.inf, 1.5], "z": np.arange(2), (1, 2): "k"}
    path = recordio.write_record(tmp_path / "a" / "r.json", rec)
    assert json.loads(path.read_text()) == {"x": None, "y": [None, None, 1.5], "z": [0, 1], "(1, 2)": "k"}
    assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()
    assert json.loads(write_result(tmp_path / "r.json", {"x": math.nan}, env={}).read_text())["x"] is None
    with pytest.raises(TypeError):
        recordio.write_record(path, {"x": object()})
    assert json.loads(path.read_text())["x"] is None  # the old record is untouched
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]


def test_write_result_refuses_bad_records(tmp_path):
    with pytest.raises(ValueError, match="environment"):
        write_result(tmp_path / "r.json", {"environment": 1}, env={})
    with pytest.raises(ValueError, match="mapping"):
        write_result(tmp_path / "r.json", [1, 2], env={})
    with pytest.raises(TypeError, match="object"):
        write_result(tmp_path / "r.json", {"x": object()}, env={})
