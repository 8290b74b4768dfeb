"""Timing, the verify-cost curve, and the environment a measurement was taken in.

* :func:`time_calls` times any callable: warm-up calls first, a CUDA synchronise around each
  timed call when on a GPU, and the median and interquartile range of the wall-clock times
  (:func:`time.perf_counter`). Medians, because a shared machine adds slow outliers.
* :func:`forward_times` times single target forwards over ``k`` new tokens on top of a KV
  cache of a fixed length, for several models and several ``k`` interleaved, so that drift
  (other jobs, clock changes) affects every setting alike.
* :func:`verify_cost_curve` is the ratio T(k)/T(1) from those times. Theorem 3.8 of
  Leviathan et al. (2023) assumes verifying gamma drafts costs one target step: the verify
  pass feeds the last accepted token plus the gamma drafts, k = gamma + 1 tokens, and the
  theorem takes T(gamma + 1)/T(1) = 1.
* :func:`engine_verify_curves` is the same ratio for any engine (transformers, the lean
  engine, llama.cpp) after a real prompt, paired by pass, with bootstrap intervals: the verify
  curve of the engine benchmark (:mod:`specdec.measure.enginebench`) and of ``specdec measure``.
* :func:`environment` and :func:`write_result` stamp every results file with the versions,
  the device, the dtype, the threads and the git commit it came from (no hostname, no user).
  The one writer of JSON records (atomic; NaN and infinity -> null) is
  :func:`specdec.theory.recordio.write_record`.
* ``specdec measure`` (a drafter against a target on your prompts) lives in
  :mod:`specdec.experiments.usermeasure`, on top of these.

Speed thresholds belong in benchmarks, never in tests: these functions only measure.
"""

from __future__ import annotations

import datetime as _dt
import gc
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from specdec.engine.machine import cpu_name
from specdec.theory.checks import check_float, check_int
from specdec.theory.recordio import write_record

__all__ = [
    "Timing",
    "VerifyCost",
    "probe_summary",
    "cpu_name",
    "engine_verify_curves",
    "environment",
    "forward_times",
    "gc_seconds",
    "open_timing_session",
    "summarize_times",
    "sync_hook",
    "time_calls",
    "time_forwards",
    "time_once",
    "verify_cost_curve",
    "verify_cost_curves",
    "write_result",
]

_ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- timing
@dataclass(frozen=True)
class Timing:
    """Summary of repeated wall-clock times, in seconds: median, quartiles and all samples."""

    median_s: float
    q1_s: float
    q3_s: float
    n: int
    times_s: tuple[float, ...]

    @property
    def iqr_s(self) -> float:
        """Interquartile range q3 - q1."""
        return self.q3_s - self.q1_s

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (with ``iqr_s``)."""
        return {**asdict(self), "times_s": list(self.times_s), "iqr_s": self.iqr_s}


def summarize_times(times: Iterable[float]) -> Timing:
    """Median and quartiles (numpy's linear interpolation) of a non-empty list of times."""
    values = np.asarray(list(times), dtype=float)
    if values.size == 0:
        raise ValueError("times must hold at least one value")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError("times must be finite and non-negative")
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return Timing(float(med), float(q1), float(q3), int(values.size), tuple(float(v) for v in values))


def _cuda_ready() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized())


def sync_hook(sync: bool | None = None, *, device: Any = None) -> Callable[[], None] | None:
    """The one rule for synchronising a device around a timed call; None when there is nothing to wait for.

    With ``device``: that device's CUDA synchronise for a CUDA device, None for any other.
    Without: ``sync=None`` synchronises iff CUDA is in use (initialised); ``True`` synchronises
    (CUDA required); ``False`` never.
    """
    if device is not None:
        import torch

        dev = torch.device(device)
        return partial(torch.cuda.synchronize, dev) if dev.type == "cuda" else None
    if sync is None:
        sync = _cuda_ready()
    elif sync and not _cuda_ready():
        raise ValueError("sync=True needs an initialised CUDA device; use sync=None or False on a CPU")
    if not sync:
        return None
    import torch

    return torch.cuda.synchronize


_GC = {"s": 0.0, "start": None}


def _gc_clock(phase: str, info: dict) -> None:
    if phase == "start":
        _GC["start"] = time.perf_counter()
    elif _GC["start"] is not None:
        _GC["s"] += time.perf_counter() - _GC["start"]
        _GC["start"] = None


if not any(getattr(cb, "__name__", "") == "_gc_clock" for cb in gc.callbacks):
    gc.callbacks.append(_gc_clock)


def gc_seconds() -> float:
    """The seconds Python's cyclic garbage collector has run in this process so far (clocked by a
    ``gc.callbacks`` hook). The timed generations store its share of each run (``gc_s``): a full
    collection walks every object of the process and may land in any run, most often in one whose own
    allocations trigger it (suffix decoding's Python tree: the issue-42 self record has such runs at
    0.15-0.2 s of drafting). It is part of the measured time, and kept there; ``gc_s`` says how much."""
    return _GC["s"]


def time_once(fn: Callable[[], object], synchronize: Callable[[], None] | None = None) -> float:
    """The one timer: the wall-clock seconds (:func:`time.perf_counter`) of one call ``fn()``,
    between two calls of ``synchronize`` when given (so the time covers the GPU kernels ``fn``
    launched). Every measured time the book compares (a forward, a generation, a kernel) goes through
    here; the engine's own phase clocks (:class:`specdec.engine.stats.Stats`, below this layer) and the
    budgets and progress lines of long runs read :func:`time.perf_counter` directly; the garbage
    collector's share is :func:`gc_seconds`'s."""
    if synchronize is not None:
        synchronize()
    start = time.perf_counter()
    fn()
    if synchronize is not None:
        synchronize()
    return time.perf_counter() - start


def time_calls(
    fn: Callable[[], object],
    *,
    warmup: int = 3,
    repeats: int = 20,
    sync: bool | None = None,
    budget_s: float = math.inf,
) -> Timing:
    """Call ``fn()`` ``warmup`` times untimed, then time ``repeats`` calls one by one (:func:`time_once`).

    With ``sync`` (by default: whenever CUDA is in use) the GPU is synchronised before the
    clock starts and before it stops, so each time covers the kernels ``fn`` launched. A finite
    ``budget_s`` (seconds, with ``warmup`` >= 1) times the first warm-up call and cuts the timed
    calls to ``max(1, min(repeats, int(budget_s / first) - 1))``: a slow call is not repeated past
    the budget, and at least one timed call always runs.
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable; got {type(fn).__name__}")
    check_int("warmup", warmup, low=0)
    check_int("repeats", repeats, low=1)
    budget_s = math.inf if budget_s == math.inf else check_float("budget_s", budget_s, low=0, open_low=True)
    if math.isfinite(budget_s) and warmup < 1:
        raise ValueError(
            f"warmup must be an integer >= 1 with a finite budget_s (it sizes the calls); got {warmup}"
        )
    synchronize = sync_hook(sync)
    n = repeats
    for i in range(warmup):
        first = time_once(fn, synchronize)
        if i == 0 and math.isfinite(budget_s) and first > 0:
            n = max(1, min(repeats, int(budget_s / first) - 1))
    return summarize_times(time_once(fn, synchronize) for _ in range(n))


# --------------------------------------------------------------------------- forwards on a cache
def open_timing_session(model: Any, prefix_ids: Any) -> Any:
    """A session at ``prefix_ids`` for timing: a :class:`specdec.engine.lm.TensorSession` for a
    transformers model (fed a (1, n) tensor), the engine's own session (:func:`specdec.engine.lm.open_lm`)
    for any other (the lean engine, llama.cpp), fed the ids as a list."""
    import torch

    from specdec.engine.lm import TensorSession, open_lm

    if callable(getattr(model, "session", None)):
        s = open_lm(model)
        s.forward([int(t) for t in torch.as_tensor(prefix_ids).reshape(-1)], keep=1)
        return s
    return TensorSession(model, torch.as_tensor(prefix_ids).reshape(1, -1))


def _head(ids: Any, k: int) -> Any:
    """The first k new ids: columns of a (b, n) tensor, items of a list."""
    return ids[:, :k] if getattr(ids, "ndim", 1) == 2 else ids[:k]


def time_forwards(
    sessions: Mapping[str, Any],
    new_ids: Mapping[str, Any],
    ks: Sequence[int],
    *,
    repeats: int,
    warmup: int = 0,
    order: str = "pairs",
    rng: np.random.Generator | None = None,
    synchronize: Callable[[], None] | None = None,
    reopen: Mapping[str, Callable[[], Any]] | None = None,
    around: Mapping[str, Callable[[], Any]] | None = None,
    timers: Mapping[str, Callable[[Callable[[], object], Callable[[], None] | None], float]] | None = None,
) -> dict[str, dict[int, list[float]]]:
    """The one T(k) loop: times of ONE forward over k new tokens on a cache cut back afterwards.

    ``sessions`` maps a name to anything with the :class:`specdec.engine.lm.Session` interface
    (``forward(new_ids)``, ``crop(n)``, ``len``): :class:`specdec.engine.lm.CachedLM`, the lean and
    llama.cpp sessions, a :class:`specdec.engine.lm.TensorSession` (batched too). Each session's
    cached length when the loop starts is its context; after every call it is cropped back to it, outside
    the clock, and its length checked. ``new_ids[name]`` holds at least ``max(ks)`` ids (a
    list, or a (b, n) tensor for a TensorSession); the call at k feeds the first k.

    ``warmup + repeats`` passes; each pass times every (name, k) once, in an order drawn from
    ``rng`` (default: ``np.random.default_rng(0)``) so that drift affects every setting alike:
    ``"pairs"``, one permutation of all (name, k) pairs; ``"nested"``, the names permuted and
    each name's ks permuted; ``"names"``, the names permuted, the ks in the given order;
    ``"fixed"``, everything in the given order. ``reopen[name]`` (with ``"nested"`` or
    ``"names"``) makes a fresh session at the start of that name's turn in each pass (one
    llama.cpp context per model). The timer is :func:`time_once` with ``synchronize``. The
    first ``warmup`` passes are discarded. ``around[name]()`` is a context manager entered around
    each of that name's timed calls, outside the clock (a q4q8 model: torch on one thread).
    ``timers[name]`` replaces :func:`time_once` for that name: called as ``timer(fn, synchronize)``,
    it returns the seconds of one call ``fn()`` by another clock (CUDA events on the device).
    Returns ``{name: {k: [seconds per kept pass]}}``.
    """
    if order not in ("pairs", "nested", "names", "fixed"):
        raise ValueError(f"order must be 'pairs', 'nested', 'names' or 'fixed'; got {order!r}")
    if reopen and order not in ("nested", "names"):
        raise ValueError("reopen needs order='nested' or 'names' (a session is reopened once per turn)")
    check_int("repeats", repeats, low=0)
    check_int("warmup", warmup, low=0)
    ks = [check_int("each k in ks", k, low=1) for k in ks]
    sessions = dict(sessions)
    names = list(sessions)
    context = {name: len(s) for name, s in sessions.items()}
    rng = np.random.default_rng(0) if rng is None else rng
    timer = dict(timers or {})
    times: dict[str, dict[int, list[float]]] = {n: {k: [] for k in ks} for n in names}

    def one(name: str, k: int, keep: bool) -> None:
        s, ids = sessions[name], _head(new_ids[name], k)
        with around[name]() if around and name in around else nullcontext():
            elapsed = timer.get(name, time_once)(lambda: s.forward(ids), synchronize)
        s.crop(context[name])
        if len(s) != context[name]:
            raise RuntimeError(f"after cropping, {name!r} holds {len(s)} tokens, not {context[name]}")
        if keep:
            times[name][k].append(elapsed)

    for rep in range(warmup + repeats):
        keep = rep >= warmup
        if order == "pairs":
            pairs = [(n, k) for n in names for k in ks]
            for i in rng.permutation(len(pairs)):
                one(*pairs[i], keep)
            continue
        turn = rng.permutation(len(names)) if order != "fixed" else range(len(names))
        for i in turn:
            name = names[i]
            if reopen and name in reopen:
                sessions[name] = reopen[name]()
                context[name] = len(sessions[name])
            for j in rng.permutation(len(ks)) if order == "nested" else range(len(ks)):
                one(name, ks[j], keep)
    return times


def forward_times(
    models: Mapping[str, Any],
    prefix_len: int,
    ks: Iterable[int] = (1,),
    *,
    repeats: int = 20,
    warmup: int = 2,
    seed: int = 0,
    sync: bool | None = None,
) -> dict[tuple[str, int], Timing]:
    """Time one forward over ``k`` new tokens with a KV cache of ``prefix_len`` tokens.

    For every model in ``models`` (name -> transformers causal LM, or any model
    :func:`specdec.engine.lm.open_lm` opens) and every ``k`` in ``ks``. The prefix and the new tokens
    are random ids (seeded; the same for every model, which must share the vocabulary size),
    because the cost of a dense forward does not depend on which tokens it sees. The timed
    call is the forward alone, logits for all ``k`` positions included (a verify pass needs
    every row); cropping the cache back happens outside the clock. Each repetition runs every
    (model, k) pair once, in a fresh seeded random order, after ``warmup`` untimed passes over
    all pairs (:func:`time_forwards`, ``order="pairs"``). Returns a :class:`Timing` per
    ``(name, k)``.
    """
    import torch

    from specdec.engine.lm import vocab_size

    check_int("prefix_len", prefix_len, low=1)
    check_int("repeats", repeats, low=1)
    check_int("warmup", warmup, low=0)
    ks = tuple(check_int("each k in ks", k, low=1) for k in ks)
    if not ks:
        raise ValueError("ks must hold at least one k")
    if len(set(ks)) != len(ks):
        raise ValueError(f"ks must not repeat a value; got {ks}")
    if not models:
        raise ValueError("models must hold at least one model")
    vocab = {vocab_size(m) for m in models.values()}
    if len(vocab) != 1:
        raise ValueError(f"the models must share one vocabulary size; got {sorted(vocab)}")
    synchronize = sync_hook(sync)

    gen = torch.Generator().manual_seed(seed)
    size = vocab.pop()
    prefix = torch.randint(0, size, (1, prefix_len), generator=gen)
    new = torch.randint(0, size, (1, max(ks)), generator=gen)
    from specdec.engine.lm import TensorSession

    sessions = {name: open_timing_session(model, prefix) for name, model in models.items()}
    feeds = {
        name: new.to(s.device) if isinstance(s, TensorSession) else new[0].tolist()
        for name, s in sessions.items()
    }
    times = time_forwards(
        sessions,
        feeds,
        ks,
        repeats=repeats,
        warmup=warmup,
        order="pairs",
        rng=np.random.default_rng(seed),
        synchronize=synchronize,
    )
    return {(name, k): summarize_times(times[name][k]) for name in models for k in ks}


@dataclass(frozen=True)
class VerifyCost:
    """T(k)/T(1): the time of one forward over k new tokens over that of a single-token step."""

    prefix_len: int
    ks: tuple[int, ...]
    timings: tuple[Timing, ...]
    ratios: tuple[float, ...]  # median T(k) / median T(1)

    def rows(self) -> list[dict[str, float | int]]:
        """One row per k: ``k``, ``median_ms``, ``iqr_ms``, ``ratio``."""
        return [
            {"k": k, "median_ms": 1e3 * t.median_s, "iqr_ms": 1e3 * t.iqr_s, "ratio": r}
            for k, t, r in zip(self.ks, self.timings, self.ratios, strict=True)
        ]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "prefix_len": self.prefix_len,
            "ks": list(self.ks),
            "ratios": list(self.ratios),
            "timings": [t.to_dict() for t in self.timings],
        }


def verify_cost_curves(
    models: Mapping[str, Any],
    prefix_len: int,
    ks: Iterable[int] = range(1, 17),
    *,
    repeats: int = 20,
    warmup: int = 2,
    seed: int = 0,
    sync: bool | None = None,
) -> dict[str, VerifyCost]:
    """:func:`verify_cost_curve` of several target ``models`` at once, every (model, k) pair
    interleaved in one :func:`forward_times` run: one :class:`VerifyCost` per name."""
    ks = tuple(ks)
    if 1 not in ks:
        ks = (1, *ks)
    times = forward_times(dict(models), prefix_len, ks, repeats=repeats, warmup=warmup, seed=seed, sync=sync)
    ordered = tuple(sorted(ks))
    out = {}
    for name in models:
        one = times[(name, 1)].median_s
        timings = tuple(times[(name, k)] for k in ordered)
        ratios = tuple(t.median_s / one if one > 0 else math.nan for t in timings)
        out[name] = VerifyCost(prefix_len=prefix_len, ks=ordered, timings=timings, ratios=ratios)
    return out


def verify_cost_curve(
    model: Any,
    prefix_len: int,
    ks: Iterable[int] = range(1, 17),
    *,
    repeats: int = 20,
    warmup: int = 2,
    seed: int = 0,
    sync: bool | None = None,
) -> VerifyCost:
    """T(k)/T(1) for a target ``model``: the cost of a verify pass relative to one decode step.

    T(k) is the median time of ONE forward over k new tokens with a KV cache of
    ``prefix_len`` tokens (:func:`forward_times`; k = 1 is always measured). A speculative
    round with gamma drafts verifies k = gamma + 1 tokens; Theorem 3.8 of Leviathan et al.
    (2023) assumes T(gamma + 1)/T(1) = 1, so a measured ratio above 1 lowers the wall-clock
    speedup it predicts. Several models interleaved: :func:`verify_cost_curves`.
    """
    curves = verify_cost_curves(
        {"target": model}, prefix_len, ks, repeats=repeats, warmup=warmup, seed=seed, sync=sync
    )
    return curves["target"]


# --------------------------------------------------------------------------- environment
def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_output(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def environment(*, model: Any = None, dtype: str | None = None, device: str | None = None) -> dict[str, Any]:
    """Where a measurement was taken: versions, device, dtype, threads, git commit, UTC time.

    ``dtype`` and ``device`` default to those of ``model`` when one is given; otherwise the
    device is CUDA's when available, else the CPU. The CPU is named from ``/proc/cpuinfo``,
    a GPU by ``torch.cuda.get_device_name``. No hostname, user name or path is recorded. The
    git fields are None outside a git checkout (or without git); ``git_dirty`` is True when a
    tracked file differs from the commit (untracked files are not counted).
    """
    from specdec.theory import __version__

    torch = None
    try:
        import torch
    except ImportError:
        pass
    if model is not None:
        param = next(model.parameters())
        dtype = dtype or str(param.dtype).removeprefix("torch.")
        device = device or str(param.device)
    if device is None:
        device = "cuda" if torch is not None and torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and torch is not None and torch.cuda.is_available():
        device_name = torch.cuda.get_device_name(torch.device(device))
    else:
        device_name = cpu_name()
    commit = git_output("rev-parse", "HEAD")
    status = git_output("status", "--porcelain", "--untracked-files=no") if commit else None
    return {
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "specdec": __version__,
        "numpy": np.__version__,
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "device": device,
        "device_name": device_name,
        "cpu_count": os.cpu_count(),
        "dtype": dtype,
        "threads": torch.get_num_threads() if torch is not None else None,
        "interop_threads": torch.get_num_interop_threads() if torch is not None else None,
        "git_commit": commit,
        "git_dirty": bool(status) if status is not None else None,
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def write_result(
    path: str | Path, record: Mapping[str, Any], *, env: Mapping[str, Any] | None = None
) -> Path:
    """Write ``record`` (:func:`~specdec.theory.recordio.write_record`: sorted keys, indent 2, atomic,
    NaN -> null) with the environment under ``"environment"``.

    ``env`` defaults to :func:`environment` (called now). A record that already has an
    ``"environment"`` key is refused.
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"record must be a mapping; got {type(record).__name__}")
    if "environment" in record:
        raise ValueError("record must not hold an 'environment' key; pass env= instead")
    return write_record(path, {**record, "environment": dict(env) if env is not None else environment()})


# --------------------------------------------------------------------------- verify curves of any engine
def engine_verify_curves(
    engines: Mapping[str, Any],
    prompt_ids: Sequence[int],
    ks: Sequence[int],
    repeats: int,
    *,
    reopen: Collection[str] = ("llama.cpp",),
    log: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """T(k) of one call over k new tokens after ``prompt_ids`` is cached, per engine, and T(k)/T(1).

    :func:`verify_cost_curve` times random ids on a random prefix, every (model, k) pair in one
    permuted order; this one times any engine that :func:`specdec.engine.lm.open_lm` opens
    (transformers, the lean engine, llama.cpp) through its session's ``forward`` and ``crop``,
    after a real prompt, with a paired ratio and its interval per k. Each of
    ``repeats`` passes (after one discarded warm-up pass) runs the engines in a fresh seeded
    order and, per engine, every k in a fresh order, cropping back to the prompt after each
    call. An engine named in ``reopen`` (one llama.cpp context per model) re-feeds the prompt
    at the start of each pass. T(k)/T(1) is the geometric mean over passes of the paired ratio
    (the k-call and the 1-call of one pass ran back to back) with its 95 % bootstrap interval
    (:func:`specdec.theory.intervals.ratio_ci`; None with a single pass). The GPU is synchronised
    around each call when CUDA is in use.

    Returns ``{"context", "ks", "repeats", "engines": {name: [cell per k]}}``, each cell with
    ``k``, ``median_s``, ``ratio_to_k1``, ``ratio_rule``, ``ratio_ci`` and ``samples_s`` (the
    format of the engine benchmark's records, ``specdec run engine-modes``). ``log`` gets
    one line per engine (None: silent).
    """
    from specdec.engine.cores import torch_threads_for
    from specdec.engine.lm import open_lm, vocab_size
    from specdec.theory.intervals import ratio_ci

    check_int("repeats", repeats, low=1)
    ks = [check_int("each k in ks", k, low=1) for k in ks]
    if not ks or 1 not in ks or len(set(ks)) != len(ks):
        raise ValueError(f"ks must hold distinct integers >= 1, 1 among them (T(1) divides); got {ks}")
    if not engines:
        raise ValueError("engines must hold at least one engine")
    if len(prompt_ids) < 1:
        raise ValueError("prompt_ids must hold at least one token id")

    def opened(model: Any) -> Any:
        s = open_lm(model)
        s.forward(list(prompt_ids), keep=1)
        return s

    sessions = {name: opened(model) for name, model in engines.items()}
    vocab = min(vocab_size(m) for m in engines.values())
    new = [(1000 + i) % vocab for i in range(max(ks))]  # any ids do: a forward's cost ignores them
    context = len(prompt_ids)
    times = time_forwards(
        sessions,
        dict.fromkeys(engines, new),
        ks,
        repeats=repeats,
        warmup=1,
        order="nested",
        rng=np.random.default_rng(0),
        synchronize=sync_hook(None),
        # one context per model: re-feed the prompt after others ran
        reopen={name: partial(opened, engines[name]) for name in engines if name in reopen},
        around={name: partial(torch_threads_for, engines[name]) for name in engines},
    )
    out = {}
    for name in engines:
        one = np.asarray(times[name][1])
        cells = []
        for k in ks:
            t = np.asarray(times[name][k])
            # paired by pass (the k-call and the 1-call of one pass ran back to back); a verify-cost ratio
            # T(k)/T(1) of one engine, not a speedup between decoders, so ratio_ci and not paired_speedup
            est, lo, hi = (
                ratio_ci(t, one) if len(t) > 1 else (float(np.median(t) / np.median(one)), None, None)
            )
            cells.append(
                {
                    "k": k,
                    "median_s": float(np.median(t)),
                    "ratio_to_k1": est,
                    "ratio_rule": "geometric mean over passes of T(k)/T(1), paired by pass",
                    "ratio_ci": [lo, hi],
                    "samples_s": t.tolist(),
                }
            )
        out[name] = cells
        if log is not None:
            line = " ".join(f"{c['k']}:{c['ratio_to_k1']:.2f}" for c in cells)
            log(f"  verify {name:14s} T(1) = {1e3 * np.median(one):6.1f} ms  T(k)/T(1) {line}")
    return {"context": context, "ks": ks, "repeats": repeats, "engines": out}


def probe_summary(probe: dict[str, Any]) -> dict[str, Any]:
    """What a record keeps of a mode probe (:func:`specdec.measure.modes.choose_mode`'s answer): the
    rule, the chosen mode, whether it came from the cache, the machine, and each mode's single-step time
    in ms (pure: the readers of records use it without torch)."""
    return {
        "rule": probe["rule"],
        "chosen": probe["mode"],
        "cached": probe.get("cached", False),
        "step_ms": {m: 1e3 * v["step_s"] for m, v in probe["modes"].items()},
        "machine": probe["machine"],
    }
