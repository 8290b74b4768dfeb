"""The lean q4q8 engine's verify curve and its floor, before and after a change of its C kernels (issue 40).

One process loads two builds of ``csrc/leanq8.c``: the library of an earlier commit (``before``: its C
sources read from git and compiled with this machine's flags into the package cache, :func:`library_at`)
and this checkout's (``after``), each repacking the same model (SmolLM2-135M-Instruct's q4q8 weights).
Everything then runs interleaved, in one run, on one machine:

* ``verify`` -- T(k) of one bare forward over k new tokens after a cached context of ``context`` tokens, as
  a chain and as a tree (node r's parent (r - 1) // 2: a binary tree), k = 1 .. 33, through
  :func:`specdec.measure.core.time_forwards` (the one T(k) loop: every pass runs the four
  (library, shape) sessions in a fresh order, each one's ks in a fresh order, cropping back outside the
  clock), at each thread count. v(k) = T(k) / T(1) with T(1) the chain's one-row call of the same pass
  and library (a tree's one-row call is the chain's), the geometric mean over passes with its bootstrap
  interval; after / before per k the same way (:func:`specdec.theory.intervals.ratio_ci`).
* ``equal`` -- every k, chain and tree: the two libraries' logits compared bit for bit.
* ``profile`` -- where a call's time goes, from each library's own phase clocks
  (:func:`specdec.measure.profile.profile_native_step`) at a few k, the libraries interleaved.
* ``decode`` -- plain greedy decoding of ``decode_tokens`` tokens through a session of each library,
  interleaved: seconds per token, after / before with its interval (plain decoding must not be slower).
* ``peaks`` and ``bandwidth`` -- the machine's roofs as the kernels meet them: int8 multiply-adds per
  second of the register tiles' instruction and of AMX's, 16-lane float32 vector operations per second
  (the exact epilogue's unit; :func:`specdec.engine.native.peak_work`), and the read bandwidth over an
  array the size of the weights and over one far past the caches
  (:func:`specdec.measure.roofline.measure_bandwidth`).
* ``floor`` -- per k and thread count: max(weight bytes / bandwidth, k x multiply-adds / int8 peak) plus
  the attention the after library's phase clocks measured at k (interpolated between the profiled k);
  beside it the register tiles' own floor (their int8 products and the exact float epilogue share the
  vector units) and AMX's (its products beside the epilogue, which no integer unit removes):
  :func:`floor_table`.

The record (``results/bench/engine-verify-kernels-<cpu>.json``, :func:`run_record`) names the machine
(:func:`specdec.measure.modes.machine_identity`, :func:`specdec.engine.machine.cpu_identity`), both
builds, the AMX setting, and the load other processes put on the machine while each cell ran
(:mod:`specdec.measure.runner`). No timing threshold is asserted anywhere: the goals are read off the
record.
"""

from __future__ import annotations

import contextlib
import ctypes
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specdec.measure.runner import RunSettings, not_key
from specdec.theory.checks import check_int

__all__ = [
    "VERIFY_KS",
    "TreeCalls",
    "VerifyKernels",
    "call_shape",
    "floor_table",
    "forwards_of",
    "library_at",
    "library_views",
    "measure_peaks",
    "model_counts",
    "run_record",
    "target_verify_curves",
    "tree_parents",
]

ROOT = Path(__file__).resolve().parents[2]
#: The C sources of the q4q8 forward, relative to the repository (all of them make a build).
CSRC = "specdec/engine/csrc"
#: The call sizes of a target's verify curve in the runners' records (:func:`target_verify_curves`).
VERIFY_KS = (1, 2, 3, 4, 6, 8, 10, 12, 17, 24, 33)
Log = Callable[[str], None]


@dataclass
class VerifyKernels(RunSettings):
    """The run's design (its record's ``settings``): the commit of the ``before`` library, the context,
    the call sizes, the thread counts, passes and repeats. ``out`` is where the record goes. The program
    ``specdec run verify-kernels`` (:class:`specdec.experiments.verifykernels.VerifyKernelsRun`) makes
    it from its options."""

    before: str = "747fa73"
    context: int = 200
    ks: tuple[int, ...] = tuple(range(1, 34))
    threads: tuple[int, ...] = (1, 2)
    passes: int = 15
    profile_ks: tuple[int, ...] = (1, 2, 4, 8, 16, 33)
    profile_repeats: int = 5
    decode_tokens: int = 48
    decode_repeats: int = 7
    seed: int = 0
    out: str | None = not_key()

    def __post_init__(self) -> None:
        if not isinstance(self.before, str) or not self.before.strip():
            raise ValueError(f"before must name a git commit; got {self.before!r}")
        for name in ("context", "passes", "profile_repeats", "decode_tokens", "decode_repeats"):
            check_int(name, getattr(self, name), low=1)
        check_int("seed", self.seed, low=0)
        for name in ("ks", "threads", "profile_ks"):
            values = tuple(sorted({check_int(f"each of {name}", v, low=1) for v in getattr(self, name)}))
            if not values:
                raise ValueError(f"{name} must hold at least one value")
            setattr(self, name, values)
        if self.ks[0] != 1:
            raise ValueError(f"ks must include 1 (the one-row call every v(k) divides by); got {self.ks}")
        if not set(self.profile_ks) <= set(self.ks):
            raise ValueError(f"profile_ks must be among ks; got {self.profile_ks}")


# --------------------------------------------------------------------------- the before library
def _git_show(commit: str, path: str) -> bytes:
    done = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, timeout=60)
    if done.returncode != 0:
        raise ValueError(
            f"git cannot show {path} at {commit!r}: {done.stderr.decode(errors='replace').strip()}"
        )
    return done.stdout


def library_at(commit: str) -> tuple[ctypes.CDLL, dict[str, Any]]:
    """The q4q8 library of ``commit``: its ``specdec/engine/csrc`` read from git, compiled with this
    machine's flags (:func:`specdec.engine.native.build_flags`, the same compiler) into the package cache
    (keyed by the sources, flags and compiler; reused), loaded under its own name beside this checkout's.
    Its model structures must be this checkout's (the sizes its ABI function reports); its ABI version may
    be older. Returns the library and what a record says of it."""
    from specdec.engine import native

    files = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{commit}:{CSRC}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if files.returncode != 0:
        raise ValueError(f"no {CSRC} at commit {commit!r}: {files.stderr.strip()}")
    names = [n for n in files.stdout.split() if n.endswith((".c", ".h"))]
    if "leanq8.c" not in names:
        raise ValueError(f"commit {commit!r} has no {CSRC}/leanq8.c")
    lib, info = native.q8_library_from({n: _git_show(commit, f"{CSRC}/{n}") for n in names})
    commit_id = subprocess.run(
        ["git", "rev-parse", commit], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout.strip()
    info = {"commit": commit_id or commit, **info}
    return lib, info


# --------------------------------------------------------------------------- sessions of each library
def tree_parents(n: int) -> list[int]:
    """The benchmark's tree of ``n`` nodes: node r's parent is (r - 1) // 2 (a binary tree, root -1)."""
    return [-1] + [(r - 1) // 2 for r in range(1, n)]


class TreeCalls:
    """A session whose ``forward(ids)`` is ONE tree call over ``ids`` (:func:`tree_parents`): what
    :func:`specdec.measure.core.time_forwards` times as a chain call otherwise."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def forward(self, new_ids: Sequence[int], keep: int | None = None) -> Any:
        return self.session.forward_tree(list(new_ids), tree_parents(len(new_ids)))

    def crop(self, n: int) -> None:
        self.session.crop(n)

    def __len__(self) -> int:
        return len(self.session)


def call_shape(name: str) -> str:
    """``"chain"`` or ``"tree"``, from a session name ``<library>-<shape>``."""
    return name.rsplit("-", 1)[1]


def forwards_of(model: Any, libs: Mapping[str, Any]) -> dict[str, Any]:
    """``model`` repacked once per library (None: this checkout's, the model's own C forward)."""
    from specdec.engine import leannative, native

    out = {}
    for name, lib in libs.items():
        if lib is None:
            out[name] = (model.q8_forward(), model._q8.get("keep"))
        else:
            desc, keep = leannative.q8_description(model)
            out[name] = (native.Q8Forward(desc, lib=lib), keep)
    return out


def library_views(model: Any, forwards: Mapping[str, Any], threads: int) -> dict[str, Any]:
    """A view of ``model`` per library (sharing its weights and that library's repacked forward, from
    :func:`forwards_of`) at ``threads`` threads: a model that decodes like ``model`` with another
    library's kernels (campaign v3's row of v2's engine)."""
    from specdec.engine.lean import LeanLlama

    out = {}
    for name, (forward, keep) in forwards.items():
        view = object.__new__(LeanLlama)
        view.__dict__.update(model.__dict__)
        view.threads = threads
        view._q8 = {**model._q8, "forward": forward, "keep": keep}
        out[name] = view
    return out


def _sessions(views: Mapping[str, Any], prompt: Sequence[int]) -> dict[str, Any]:
    out = {}
    for lib, view in views.items():
        for shape in ("chain", "tree"):
            s = view.session()
            s.forward(list(prompt), keep=1)
            out[f"{lib}-{shape}"] = s if shape == "chain" else TreeCalls(s)
    return out


# --------------------------------------------------------------------------- the measurements
def target_verify_curves(
    target: Any, *, prefix_len: int = 200, ks: Sequence[int] = VERIFY_KS, repeats: int = 15, seed: int = 0
) -> dict[str, Any]:
    """T(N) of one verify call of N rows after ``prefix_len`` cached tokens, as a chain and as a binary
    tree (tree attention), interleaved pass by pass in the one T(k) loop
    (:func:`specdec.measure.core.time_forwards`, 2 warm-up passes); medians and v(N) = T(N) / T(1) of the
    chain (a tree of one row is a chain). Runs on ``target``'s own threads (q4q8: the C pool)."""
    from specdec.engine.cores import torch_threads_for
    from specdec.engine.lm import open_lm
    from specdec.measure.core import time_forwards

    check_int("prefix_len", prefix_len, low=1)
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, min(1000, int(target.vocab_size)), prefix_len + max(ks)).tolist()
    chain, tree = open_lm(target), open_lm(target)
    chain.forward(ids[:prefix_len])
    tree.forward(ids[:prefix_len])
    new = ids[prefix_len:]
    with torch_threads_for(target):
        times = time_forwards(
            {"chain": chain, "tree": TreeCalls(tree)}, {"chain": new, "tree": new}, list(ks),
            repeats=repeats, warmup=2, rng=rng,
        )  # fmt: skip
    med = {name: {k: float(np.median(v)) for k, v in by_k.items()} for name, by_k in times.items()}
    one = med["chain"][1]
    return {
        "prefix_len": prefix_len,
        "ks": list(ks),
        "median_s": {name: [med[name][k] for k in ks] for name in med},
        "v_chain": [med["chain"][k] / one for k in ks],
        "v_tree": [med["tree"][k] / one for k in ks],
        "samples_s": {name: [times[name][k] for k in ks] for name in times},
        "rule": "median over passes; v(N) = T(N) / T(1) of the chain",
    }


def verify_curves(
    views: Mapping[str, Any], prompt: Sequence[int], ks: Sequence[int], passes: int, seed: int
) -> dict[str, Any]:
    """T(k) of every (library, shape) session, interleaved, and v(k) and after / before per k."""
    from specdec.engine.cores import torch_threads_for
    from specdec.measure.core import time_forwards
    from specdec.theory.intervals import ratio_ci

    sessions = _sessions(views, prompt)
    vocab = next(iter(views.values())).vocab_size
    new = [(1000 + 37 * i) % vocab for i in range(max(ks))]
    model = next(iter(views.values()))
    times = time_forwards(
        sessions,
        dict.fromkeys(sessions, new),
        ks,
        repeats=passes,
        warmup=1,
        order="nested",
        rng=np.random.default_rng(seed),
        around=dict.fromkeys(sessions, lambda: torch_threads_for(model)),
    )
    curves: dict[str, Any] = {}
    for name, by_k in times.items():
        one = np.asarray(times[f"{name.rsplit('-', 1)[0]}-chain"][1])
        cells = []
        for k in ks:
            t = np.asarray(by_k[k])
            est, lo, hi = ratio_ci(t, one)  # v(k): a verify-cost ratio of one library, not a speedup
            cells.append(
                {"k": k, "median_s": float(np.median(t)), "v": est, "v_ci": [lo, hi], "samples_s": t.tolist()}
            )
        curves[name] = cells
    ratios: dict[str, Any] = {}
    for shape in ("chain", "tree"):
        if f"before-{shape}" not in times:
            continue
        ratios[shape] = [
            {
                "k": k,
                **dict(
                    zip(
                        ("after_over_before", "lo", "hi"),
                        # one call's time after / before, paired by pass: a kernel's cost ratio at k
                        # (like v(k)), not a decoding speedup, so ratio_ci and not paired_speedup
                        ratio_ci(times[f"after-{shape}"][k], times[f"before-{shape}"][k]),
                        strict=True,
                    )
                ),
            }
            for k in ks
        ]
    return {
        "curves": curves,
        "after_over_before": ratios,
        "rule": "v(k): geometric mean over passes of T(k) / T(1), T(1) the same library's one-row chain call "
        "of the same pass; after_over_before: geometric mean over passes of the paired ratio; 95 % bootstrap",
    }


def equal_logits(views: Mapping[str, Any], prompt: Sequence[int], ks: Sequence[int]) -> dict[str, Any]:
    """Whether the libraries give the same logits, bit for bit, for every k as a chain and as a tree."""
    import torch

    sessions = _sessions(views, prompt)
    vocab = next(iter(views.values())).vocab_size
    new = [(7 + 101 * i) % vocab for i in range(max(ks))]
    unequal = []
    for shape in ("chain", "tree"):
        for k in ks:
            out = {}
            for lib in views:
                s = sessions[f"{lib}-{shape}"]
                out[lib] = s.forward(new[:k])
                s.crop(len(prompt))
            first = next(iter(out.values()))
            if not all(torch.equal(first, o) for o in out.values()):
                unequal.append({"shape": shape, "k": k})
    return {"bit_equal": not unequal, "unequal": unequal, "calls": 2 * len(ks)}


def profiles(
    views: Mapping[str, Any],
    prompt: Sequence[int],
    ks: Sequence[int],
    repeats: int,
    threads: int,
    rounds: int = 3,
    seed: int = 0,
) -> dict[str, Any]:
    """Each library's phase clocks over chain calls of k rows (ms per call, per phase): ``rounds`` rounds,
    each over the ks in a fresh order and, per k, the libraries in a fresh order (so that the machine's
    drifting load falls on both alike), ``repeats`` profiled calls each; the mean over rounds."""
    from specdec.engine.cores import torch_threads_for
    from specdec.measure.profile import profile_native_step

    rng = np.random.default_rng(seed)
    names = list(views)
    sessions = {}
    for lib, view in views.items():
        sessions[lib] = view.session()
        sessions[lib].forward(list(prompt), keep=1)
    sums: dict[tuple[str, int], dict[str, float]] = {}
    for _ in range(rounds):
        for j in rng.permutation(len(ks)):
            k = int(ks[j])
            for i in rng.permutation(len(names)):
                lib, view, s = names[i], views[names[i]], sessions[names[i]]
                with torch_threads_for(view):
                    prof = profile_native_step(
                        lambda n, s=s: s.forward([11] * n),
                        k=k,
                        repeats=repeats,
                        reset=lambda s=s: s.crop(len(prompt)),
                        clocks=view.q8_forward(),
                        threads=threads,
                    )
                into = sums.setdefault((lib, k), {})
                for name, value in (
                    ("wall_ms", prof["wall_ms"]),
                    ("wall_ms_unprofiled", prof["wall_ms_unprofiled"]),
                    *((f"bucket:{b}", v) for b, v in prof["buckets_ms"].items()),
                ):
                    into[name] = into.get(name, 0.0) + value / rounds
    out: dict[str, Any] = {}
    for lib in names:
        rows = []
        for k in ks:
            got = sums[lib, k]
            buckets = {n.removeprefix("bucket:"): v for n, v in got.items() if n.startswith("bucket:")}
            rows.append(
                {
                    "k": k,
                    "wall_ms": got["wall_ms"],
                    "wall_ms_unprofiled": got["wall_ms_unprofiled"],
                    "buckets_ms": buckets,
                }
            )
        out[lib] = rows
    return out


def plain_decode(
    views: Mapping[str, Any], prompt: Sequence[int], tokens: int, repeats: int, seed: int
) -> dict[str, Any]:
    """Greedy decoding of ``tokens`` tokens by each library in turn (a fresh order per repetition):
    seconds per token, and after / before paired by repetition."""
    from specdec.engine.cores import torch_threads_for
    from specdec.theory.intervals import paired_speedup

    rng = np.random.default_rng(seed)
    per_token: dict[str, list[float]] = {lib: [] for lib in views}
    texts: dict[str, list[int]] = {}
    names = list(views)
    for _ in range(repeats + 1):  # the first repetition warms up
        for i in rng.permutation(len(names)):
            lib = names[i]
            view = views[lib]
            s = view.session()
            with torch_threads_for(view):
                tok = int(s.forward(list(prompt), keep=1)[-1].argmax())
                out = [tok]
                t0 = time.perf_counter()
                for _ in range(tokens - 1):
                    tok = int(s.forward([tok])[-1].argmax())
                    out.append(tok)
                per_token[lib].append((time.perf_counter() - t0) / (tokens - 1))
            texts[lib] = out
    per_token = {lib: v[1:] for lib, v in per_token.items()}
    record: dict[str, Any] = {
        "tokens": tokens,
        "seconds_per_token": per_token,
        "median_tok_s": {lib: 1.0 / float(np.median(v)) for lib, v in per_token.items()},
        "same_tokens": len({tuple(t) for t in texts.values()}) == 1,
    }
    if "before" in per_token and "after" in per_token:
        # after / before: paired_speedup with "after" as the base (its inverse speedup), repetitions as units
        est, lo, hi = paired_speedup(per_token["after"], per_token["before"])
        record["after_over_before"] = {
            "ratio": est,
            "ci": [lo, hi],
            "rule": "time per token, paired by repetition",
        }
    return record


def measure_peaks(threads: int, seconds: float = 0.1, repeats: int = 7) -> dict[str, Any]:
    """The arithmetic roofs as the kernels meet them: each :data:`specdec.engine.native.PEAK_KINDS` loop
    (AMX's only where :func:`specdec.engine.native.amx` is not None) on ``threads`` threads, each run sized
    to about ``seconds`` (after a warm-up run), the kinds in turn ``repeats`` times (so that a change of
    the clock falls on every kind alike); the median rate (work per second) per kind."""
    from specdec.engine import native

    kinds = [k for k in native.PEAK_KINDS if k != "amx_int8" or native.amx() is not None]
    iters: dict[str, int] = {}
    for kind in kinds:
        n = 1000
        for _ in range(2):  # the second sizing runs warm
            t0 = time.perf_counter()
            native.peak_work(kind, n, threads)
            n = max(1000, int(n * seconds / max(time.perf_counter() - t0, 1e-6)))
        iters[kind] = n
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(repeats):
        for kind in kinds:
            t0 = time.perf_counter()
            work = native.peak_work(kind, iters[kind], threads)
            rates[kind].append(work / (time.perf_counter() - t0))
    out: dict[str, Any] = {"threads": threads, "seconds": seconds}
    for kind in kinds:
        unit = (
            "16-lane float32 vector operations per second"
            if kind == "float32_vector"
            else "int8 multiply-adds per second"
        )
        median = float(np.median(rates[kind]))
        out[kind] = {"median_per_s": median, "rates": rates[kind], "iters": iters[kind], "unit": unit}
    return out


# --------------------------------------------------------------------------- the floor
def model_counts(model: Any) -> dict[str, Any]:
    """Per row of a call: the int8 multiply-adds of the decoder layers and of the head, the exact float
    epilogue's 16-lane vector operations (per block of 32 inputs and 16 outputs: 6 on Q4_1 layers, a
    conversion, three products and two sums; 4 on Q8_0), and the bytes the C forward streams per call:
    its repacked matrices (a Q4_1 block of 16 columns 320 bytes, a Q8_0 one 544: csrc/leanq8.c)."""
    hd, layers, hidden = model.head_dim, model.num_layers, model.hidden
    inter = int(model.config.intermediate_size)
    shapes = [
        ((model.heads + 2 * model.kv_heads) * hd, hidden),
        (hidden, model.heads * hd),
        (2 * inter, hidden),
        (hidden, inter),
    ]
    q4 = model.codes == "q4_1"
    per_layer = sum(n * k for n, k in shapes)
    head = int(model.head.out_features) * hidden
    tiles = sum(-(-n // 16) * (k // 32) for n, k in shapes)
    repacked = (
        layers * tiles * (320 if q4 else 544) + -(-int(model.head.out_features) // 16) * (hidden // 32) * 544
    )
    epilogue = layers * per_layer / 512 * (6 if q4 else 4) + head / 512 * 4
    return {
        "layer_macs": layers * per_layer,
        "head_macs": head,
        "macs": layers * per_layer + head,
        "epilogue_vector_ops": epilogue,
        "weight_bytes": repacked,
        "weight_bytes_rule": "the repacked matrices the C forward streams (Q4_1: 320 bytes per block of "
        "32 inputs x 16 columns, Q8_0: 544)",
    }


def _attention_ms(profile_rows: Sequence[Mapping[str, Any]], k: int) -> float:
    ks = [r["k"] for r in profile_rows]
    return float(np.interp(k, ks, [r["buckets_ms"]["attention"] for r in profile_rows]))


def floor_table(
    counts: Mapping[str, Any],
    peaks: Mapping[str, Any],
    bandwidth_gbps: float,
    profile_rows: Sequence[Mapping[str, Any]],
    ks: Sequence[int],
) -> list[dict[str, Any]]:
    """Per k, in milliseconds and each over its own k = 1 (``*_v``):

    * ``floor``: the issue's, max(weight bytes / bandwidth, k x multiply-adds / int8 peak) + attention (the
      after library's attention phase at k, interpolated between the profiled k);
    * ``floor_registers``: the register tiles' own, whose int8 products and exact float epilogue share the
      vector units: max(weights, k x (multiply-adds / int8 peak + epilogue operations / float peak)) +
      attention;
    * ``floor_amx`` (where there is AMX): the tiles' products beside the epilogue on the vector units:
      max(weights, k x max(multiply-adds / AMX peak, epilogue operations / float peak)) + attention."""
    weights_ms = counts["weight_bytes"] / (bandwidth_gbps * 1e9) * 1e3
    int8 = peaks["int8"]["median_per_s"]
    amx = peaks.get("amx_int8", {}).get("median_per_s")
    flt = peaks["float32_vector"]["median_per_s"]
    rows = []
    for k in ks:
        att = _attention_ms(profile_rows, k)
        row = {
            "k": k,
            "weights_ms": weights_ms,
            "int8_ms": k * counts["macs"] / int8 * 1e3,
            "epilogue_ms": k * counts["epilogue_vector_ops"] / flt * 1e3,
            "attention_ms": att,
        }
        row["floor_ms"] = max(weights_ms, row["int8_ms"]) + att
        row["floor_registers_ms"] = max(weights_ms, row["int8_ms"] + row["epilogue_ms"]) + att
        if amx:
            row["amx_int8_ms"] = k * counts["macs"] / amx * 1e3
            row["floor_amx_ms"] = max(weights_ms, row["amx_int8_ms"], row["epilogue_ms"]) + att
        rows.append(row)
    for name in ("floor_ms", "floor_registers_ms", "floor_amx_ms"):
        if name in rows[0]:
            for row in rows:
                row[name.replace("_ms", "_v")] = row[name] / rows[0][name]
    return rows


# --------------------------------------------------------------------------- the run
@contextlib.contextmanager
def _amx_default() -> Iterator[None]:
    from specdec.engine import native

    try:
        yield
    finally:
        if native.amx() is not None:
            native.amx("on")


def run_record(
    settings: VerifyKernels, *, command: str, fresh: bool = False, log: Log = print
) -> tuple[dict[str, Any], Path]:
    """Run every cell of ``settings`` (resuming a partial record with the same settings unless ``fresh``)
    and write the record; returns it and its path."""
    from specdec.engine import native
    from specdec.engine.builder import EngineSpec, open_engine
    from specdec.engine.machine import cpu_identity
    from specdec.measure.core import environment
    from specdec.measure.device import device_slug
    from specdec.measure.modes import machine_identity
    from specdec.measure.roofline import measure_bandwidth
    from specdec.measure.runner import open_partial, run_cells
    from specdec.theory.recordio import write_record

    env = environment(dtype="q4q8", device="cpu")
    path = (
        Path(settings.out)
        if settings.out
        else (ROOT / "results" / "bench" / f"engine-verify-kernels-{device_slug(env['device_name'])}.json")
    )
    record = open_partial(path, settings, fresh=fresh, what="verify-kernels run") or {
        "kind": "engine-verify-kernels",
        "command": command,
        "settings": settings.to_record(),
    }
    old, old_info = library_at(settings.before)
    opened = open_engine(EngineSpec("lean", "q4q8", max(settings.threads)))
    model = opened.model
    gen = np.random.default_rng(settings.seed)
    prompt = gen.integers(100, model.vocab_size, settings.context).tolist()
    record |= {
        "machine": machine_identity(),
        "cpu": cpu_identity(),
        "environment": env,
        "before": old_info,
        "after": {**(native.build_info("q4q8") or {}), "commit": env.get("git_commit")},
        "model": {
            "name": "SmolLM2-135M-Instruct",
            "mode": "q4q8",
            "codes": model.codes,
            **model_counts(model),
        },
        "context": settings.context,
        "tree": "node r's parent (r - 1) // 2 (a binary tree)",
        "timed": "the bare forward of a lean session (LeanSession.forward / forward_tree): Python's checks, "
        "the ctypes call and the C forward; cropping outside the clock",
    }
    forwards = forwards_of(model, {"before": old, "after": None})
    cells: list[tuple[str, Callable[[], Any]]] = []
    for threads in settings.threads:
        views = library_views(model, forwards, threads)
        cells += [
            (f"equal-{threads}t", lambda v=views: equal_logits(v, prompt, settings.ks)),
            (
                f"verify-{threads}t",
                lambda v=views: verify_curves(v, prompt, settings.ks, settings.passes, settings.seed),
            ),
            (
                f"profile-{threads}t",
                lambda v=views, t=threads: profiles(
                    v, prompt, settings.profile_ks, settings.profile_repeats, t, seed=settings.seed
                ),
            ),
            (
                f"decode-{threads}t",
                lambda v=views: plain_decode(
                    v, prompt, settings.decode_tokens, settings.decode_repeats, settings.seed
                ),
            ),
            (f"peaks-{threads}t", lambda t=threads: measure_peaks(t)),
            (
                f"bandwidth-{threads}t",
                lambda t=threads: {
                    "weights": measure_bandwidth(
                        t, size_mib=max(1, -(-model_counts(model)["weight_bytes"] // 2**20))
                    ),
                    "dram": measure_bandwidth(t, size_mib=1024, repeats=3),
                },
            ),
        ]
    if native.amx() is not None:
        views = library_views(model, {"after": forwards["after"]}, max(settings.threads))

        def amx_off_on() -> dict[str, Any]:
            with _amx_default():
                out = {}
                for mode in ("off", "on"):
                    native.amx(mode)
                    out[mode] = verify_curves(
                        views, prompt, settings.ks, max(3, settings.passes // 3), settings.seed
                    )
                return out

        cells.append((f"amx-{max(settings.threads)}t", amx_off_on))

    def keep(cid: str, result: Any) -> None:
        record.setdefault("cells", {})[cid] = result
        log(f"{cid}: done")

    run_cells(
        record,
        cells,
        path,
        keep=keep,
        threads=max(settings.threads),
        log=log,
        save=lambda: write_record(path, record),
    )
    record["floor"] = {}
    for threads in settings.threads:
        c = record["cells"]
        bw = c[f"bandwidth-{threads}t"]["weights"]["bandwidth_gbps"]
        record["floor"][f"{threads}t"] = {
            "bandwidth_gbps": bw,
            "bandwidth_rule": "read stream over an array the size of the weights (the engine's stream)",
            "rows": floor_table(
                record["model"], c[f"peaks-{threads}t"], bw, c[f"profile-{threads}t"]["after"], settings.ks
            ),
        }
    record["summary"] = summarize(record, settings)
    write_record(path, record)
    return record, path


def summarize(record: Mapping[str, Any], settings: VerifyKernels) -> dict[str, Any]:
    """v(2), v(4), v(8), v(16) (chain and tree) before and after, the floor's, and the plain step's
    after / before, per thread count."""
    out: dict[str, Any] = {}
    for threads in settings.threads:
        cells = record["cells"]
        ver = cells[f"verify-{threads}t"]
        floor = {r["k"]: r for r in record["floor"][f"{threads}t"]["rows"]}
        entry: dict[str, Any] = {}
        for name, rows in ver["curves"].items():
            by_k = {r["k"]: r for r in rows}
            entry[name] = {str(k): [by_k[k]["v"], *by_k[k]["v_ci"]] for k in (2, 4, 8, 16) if k in by_k}
            entry[name]["T1_ms"] = by_k[1]["median_s"] * 1e3
        entry["floor_v"] = {str(k): floor[k]["floor_v"] for k in (2, 4, 8, 16) if k in floor}
        for name in ("floor_registers_v", "floor_amx_v"):
            if name in floor[1]:
                entry[name] = {str(k): floor[k][name] for k in (2, 4, 8, 16) if k in floor}
        chain = {r["k"]: r for r in ver["after_over_before"].get("chain", [])}
        if 1 in chain:
            entry["plain_step_after_over_before"] = [
                chain[1]["after_over_before"],
                chain[1]["lo"],
                chain[1]["hi"],
            ]
        dec = cells[f"decode-{threads}t"].get("after_over_before")
        if dec:
            entry["plain_decode_after_over_before"] = [dec["ratio"], *dec["ci"]]
        entry["bit_equal"] = cells[f"equal-{threads}t"]["bit_equal"]
        out[f"{threads}t"] = entry
    return out
