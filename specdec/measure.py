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
  curve of the engine benchmark (:mod:`specdec.enginebench`) and of ``specdec measure``.
* :func:`environment` and :func:`write_result` stamp every results file with the versions,
  the device, the dtype, the threads and the git commit it came from (no hostname, no user).
* ``specdec measure`` (a drafter against a target on your prompts) lives in
  :mod:`specdec.usermeasure`, on top of these.

Speed thresholds belong in benchmarks, never in tests: these functions only measure.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import json
import math
import numbers
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "Timing",
    "VerifyCost",
    "engine_verify_curves",
    "environment",
    "forward_times",
    "summarize_times",
    "time_calls",
    "verify_cost_curve",
    "write_result",
]

_ROOT = Path(__file__).resolve().parents[1]


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


def _check_count(name: str, value: int, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}; got {value!r}")
    return int(value)


def _cuda_ready() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized())


def _resolve_sync(sync: bool | None) -> Callable[[], None] | None:
    """``None``: synchronise iff CUDA is in use; ``True``: synchronise (CUDA required); ``False``: never."""
    if sync is None:
        sync = _cuda_ready()
    elif sync and not _cuda_ready():
        raise ValueError("sync=True needs an initialised CUDA device; use sync=None or False on a CPU")
    if not sync:
        return None
    import torch

    return torch.cuda.synchronize


def time_calls(
    fn: Callable[[], object], *, warmup: int = 3, repeats: int = 20, sync: bool | None = None
) -> Timing:
    """Call ``fn()`` ``warmup`` times untimed, then time ``repeats`` calls one by one.

    With ``sync`` (by default: whenever CUDA is in use) the GPU is synchronised before the
    clock starts and before it stops, so each time covers the kernels ``fn`` launched.
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable; got {type(fn).__name__}")
    _check_count("warmup", warmup, 0)
    _check_count("repeats", repeats, 1)
    synchronize = _resolve_sync(sync)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if synchronize is not None:
            synchronize()
        start = time.perf_counter()
        fn()
        if synchronize is not None:
            synchronize()
        times.append(time.perf_counter() - start)
    return summarize_times(times)


# --------------------------------------------------------------------------- forwards on a cache
class _CachedForward:
    """One model with a KV cache of ``prefix_len`` tokens; :meth:`__call__` feeds ``k`` more.

    After each call the cache is cropped back to ``prefix_len`` (as a speculative decoder
    crops after a rejection), so every call sees the same cache length.
    """

    def __init__(self, model: Any, prefix: Any, new: Any) -> None:
        import torch
        from transformers import DynamicCache

        self.model = model
        device = next(model.parameters()).device
        self.prefix_len = int(prefix.shape[1])
        self.new = new.to(device)
        self.cache = DynamicCache(config=model.config)
        if not getattr(self.cache, "is_croppable", True):
            raise ValueError("the model's KV cache cannot be cropped (sliding-window layers?)")
        # transformers 5.x calls the cache argument `cache` (`past_key_values` is deprecated).
        params = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        with torch.inference_mode():
            model(input_ids=prefix.to(device), use_cache=True, **{self.cache_arg: self.cache})
        self._check_length()

    def _check_length(self) -> None:
        if self.cache.get_seq_length() != self.prefix_len:
            raise RuntimeError(
                f"the KV cache holds {self.cache.get_seq_length()} tokens, expected {self.prefix_len}"
            )

    def __call__(self, k: int) -> Any:
        """One forward over the first ``k`` new tokens; returns its logits (k rows)."""
        import torch

        with torch.inference_mode():
            out = self.model(input_ids=self.new[:, :k], use_cache=True, **{self.cache_arg: self.cache})
        return out.logits

    def reset(self) -> None:
        # crop(-n) removes n tokens, in transformers 4.x and 5.x alike.
        extra = self.cache.get_seq_length() - self.prefix_len
        if extra > 0:
            self.cache.crop(-extra)
        self._check_length()


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

    For every model in ``models`` (name -> transformers causal LM) and every ``k`` in ``ks``.
    The prefix and the new tokens are random ids (seeded; the same for every model, which
    must share the vocabulary size), because the cost of a dense forward does not depend on
    which tokens it sees. The timed call is the forward alone, logits for all ``k``
    positions included (a verify pass needs every row); cropping the cache back happens
    outside the clock. Each repetition runs every (model, k) pair once, in a fresh seeded
    random order, after ``warmup`` untimed passes over all pairs. Returns a :class:`Timing`
    per ``(name, k)``.
    """
    import torch

    _check_count("prefix_len", prefix_len, 1)
    _check_count("repeats", repeats, 1)
    _check_count("warmup", warmup, 0)
    ks = tuple(_check_count("each k in ks", k, 1) for k in ks)
    if not ks:
        raise ValueError("ks must hold at least one k")
    if len(set(ks)) != len(ks):
        raise ValueError(f"ks must not repeat a value; got {ks}")
    if not models:
        raise ValueError("models must hold at least one model")
    vocab = {int(m.config.vocab_size) for m in models.values()}
    if len(vocab) != 1:
        raise ValueError(f"the models must share one vocabulary size; got {sorted(vocab)}")
    synchronize = _resolve_sync(sync)

    gen = torch.Generator().manual_seed(seed)
    size = vocab.pop()
    prefix = torch.randint(0, size, (1, prefix_len), generator=gen)
    new = torch.randint(0, size, (1, max(ks)), generator=gen)
    runners = {name: _CachedForward(model, prefix, new) for name, model in models.items()}
    pairs = [(name, k) for name in runners for k in ks]
    order = np.random.default_rng(seed)
    times: dict[tuple[str, int], list[float]] = {pair: [] for pair in pairs}
    for rep in range(warmup + repeats):
        for i in order.permutation(len(pairs)):
            name, k = pairs[i]
            run = runners[name]
            if synchronize is not None:
                synchronize()
            start = time.perf_counter()
            run(k)
            if synchronize is not None:
                synchronize()
            elapsed = time.perf_counter() - start
            run.reset()
            if rep >= warmup:
                times[(name, k)].append(elapsed)
    return {pair: summarize_times(values) for pair, values in times.items()}


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
    speedup it predicts.
    """
    ks = tuple(ks)
    if 1 not in ks:
        ks = (1, *ks)
    times = forward_times(
        {"target": model}, prefix_len, ks, repeats=repeats, warmup=warmup, seed=seed, sync=sync
    )
    one = times[("target", 1)].median_s
    ordered = tuple(sorted(ks))
    timings = tuple(times[("target", k)] for k in ordered)
    ratios = tuple(t.median_s / one if one > 0 else math.nan for t in timings)
    return VerifyCost(prefix_len=prefix_len, ks=ordered, timings=timings, ratios=ratios)


# --------------------------------------------------------------------------- environment
def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _git(*args: str) -> str | None:
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
    import specdec

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
        device_name = _cpu_name()
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "specdec": specdec.__version__,
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


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if is_dataclass(obj) and not isinstance(obj, type):
        return obj.to_dict() if hasattr(obj, "to_dict") else asdict(obj)
    if isinstance(obj, Path):
        return obj.as_posix()
    raise TypeError(f"cannot write a {type(obj).__name__} to JSON")


def write_result(
    path: str | Path, record: Mapping[str, Any], *, env: Mapping[str, Any] | None = None
) -> Path:
    """Write ``record`` as JSON (sorted keys, indent 2) with the environment under ``"environment"``.

    ``env`` defaults to :func:`environment` (called now). NaN and infinity are refused
    (they are not JSON), and so is a record that already has an ``"environment"`` key.
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"record must be a mapping; got {type(record).__name__}")
    if "environment" in record:
        raise ValueError("record must not hold an 'environment' key; pass env= instead")
    payload = {**record, "environment": dict(env) if env is not None else environment()}
    try:
        text = json.dumps(payload, sort_keys=True, indent=2, allow_nan=False, default=_json_default)
    except ValueError as exc:
        raise ValueError(f"record holds NaN or infinity, which JSON cannot store: {exc}") from exc
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n", encoding="utf-8")
    return out


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

    :func:`verify_cost_curve` needs a transformers model (it drives a ``DynamicCache``); this
    one times any engine that :func:`specdec.lm.open_lm` opens (transformers, the lean engine,
    llama.cpp) through its session's ``forward`` and ``crop``, after a real prompt. Each of
    ``repeats`` passes (after one discarded warm-up pass) runs the engines in a fresh seeded
    order and, per engine, every k in a fresh order, cropping back to the prompt after each
    call. An engine named in ``reopen`` (one llama.cpp context per model) re-feeds the prompt
    at the start of each pass. T(k)/T(1) is the geometric mean over passes of the paired ratio
    (the k-call and the 1-call of one pass ran back to back) with its 95 % bootstrap interval
    (:func:`specdec.intervals.ratio_ci`; None with a single pass). The GPU is synchronised
    around each call when CUDA is in use.

    Returns ``{"context", "ks", "repeats", "engines": {name: [cell per k]}}``, each cell with
    ``k``, ``median_s``, ``ratio_to_k1``, ``ratio_rule``, ``ratio_ci`` and ``samples_s`` (the
    format of the engine benchmark's records, ``benchmarks/engine_modes.py``). ``log`` gets
    one line per engine (None: silent).
    """
    from specdec.intervals import ratio_ci
    from specdec.lean import torch_threads_for
    from specdec.lm import open_lm, vocab_size

    _check_count("repeats", repeats, 1)
    ks = [_check_count("each k in ks", k, 1) for k in ks]
    if not ks or 1 not in ks or len(set(ks)) != len(ks):
        raise ValueError(f"ks must hold distinct integers >= 1, 1 among them (T(1) divides); got {ks}")
    if not engines:
        raise ValueError("engines must hold at least one engine")
    if len(prompt_ids) < 1:
        raise ValueError("prompt_ids must hold at least one token id")
    synchronize = _resolve_sync(None)
    rng = np.random.default_rng(0)
    names = list(engines)
    sessions = {}
    for name, model in engines.items():
        s = open_lm(model)
        s.forward(list(prompt_ids), keep=1)
        sessions[name] = s
    vocab = min(vocab_size(m) for m in engines.values())
    new = [(1000 + i) % vocab for i in range(max(ks))]  # any ids do: a forward's cost ignores them
    times: dict[str, dict[int, list[float]]] = {n: {k: [] for k in ks} for n in engines}
    context = len(prompt_ids)
    for rep in range(repeats + 1):  # the first pass warms up
        for i in rng.permutation(len(names)):
            name = names[i]
            s = sessions[name]
            if name in reopen:  # one context per model: re-feed the prompt after others ran
                s = sessions[name] = open_lm(engines[name])
                s.forward(list(prompt_ids), keep=1)
            with torch_threads_for(engines[name]):  # a q4q8 model: its C threads, torch on one
                for j in rng.permutation(len(ks)):
                    k = ks[j]
                    if synchronize is not None:
                        synchronize()
                    t0 = time.perf_counter()
                    s.forward(new[:k])
                    if synchronize is not None:
                        synchronize()
                    dt = time.perf_counter() - t0
                    s.crop(context)
                    if rep:
                        times[name][k].append(dt)
    out = {}
    for name in engines:
        one = np.asarray(times[name][1])
        cells = []
        for k in ks:
            t = np.asarray(times[name][k])
            # paired by pass (the k-call and the 1-call of one pass ran back to back)
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
