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
* :func:`measure_setup` (``specdec measure``) measures a drafter against a target on given
  prompts on this machine: it checks the arguments (:func:`parse_draft`,
  :func:`read_prompts`), loads the target, the engine and the draft, and runs
  :func:`measure_drafter`: the paper's alpha by teacher forcing (:func:`teacher_forced_alpha`)
  and the acceptance rate observed while decoding, c, the verify cost curve, and the measured
  speedup against Theorem 3.8's prediction.

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
    "ENGINES",
    "SIMPLE_DRAFTS",
    "Timing",
    "VerifyCost",
    "engine_verify_curves",
    "environment",
    "forward_times",
    "measure_drafter",
    "measure_setup",
    "parse_draft",
    "prompt_ids",
    "read_prompts",
    "summarize_times",
    "teacher_forced_alpha",
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


# ----------------------------------------------------------------- your own setup (`specdec measure`)
#: What ``draft`` may name besides a distilled draft (:func:`specdec.draftnets.list_drafts`)
#: and a model folder: prompt lookup, a bigram table, the target's early exit.
SIMPLE_DRAFTS = ("lookup", "bigram", "early-exit")

#: The engines :func:`measure_setup` decodes with: the lean engine's modes (CPU), ``"auto"``
#: (the lean mode :func:`specdec.modes.lean_model` picks by measuring this machine), or the
#: transformers model as loaded (CPU or GPU).
ENGINES = ("auto", "float32", "bfloat16", "int4", "hf-float32", "hf-bfloat16")

#: Training prompts (and their seed) whose temperature-1 generations make the bigram table:
#: disjoint from the evaluation prompts, as in Part IV's fallback corpus.
BIGRAM_PROMPTS, BIGRAM_SEED = 12, 1000

Progress = Callable[[Iterable[Any], str], Iterable[Any]]


def _no_progress(items: Iterable[Any], desc: str) -> Iterable[Any]:
    return items


def parse_draft(draft: str) -> tuple[str, Any]:
    """What ``draft`` names, checked before anything loads: ``(kind, detail)``.

    ``"lookup"`` and ``"bigram"``: (name, None); ``"early-exit"`` or ``"early-exit:N"``:
    ("early-exit", N or None, the default depth); a distilled draft's name
    (:func:`specdec.draftnets.list_drafts`): ("distilled", name); an existing folder:
    ("model", path). Anything else raises ValueError naming the valid choices.
    """
    from specdec.draftnets import list_drafts, require_drafts

    text = str(draft).strip()
    if text in ("lookup", "bigram"):
        return text, None
    if text == "early-exit" or text.startswith("early-exit:"):
        n = text.partition(":")[2]
        if not n:
            return "early-exit", None
        if not n.isdigit() or int(n) < 1:
            raise ValueError(f"draft early-exit:N needs N, a number of target layers >= 1; got {text!r}")
        return "early-exit", int(n)
    saved = list_drafts()
    if text in saved:
        require_drafts([text])
        return "distilled", text
    path = Path(text).expanduser()
    if path.is_dir():
        return "model", path
    choices = ", ".join([*SIMPLE_DRAFTS[:2], "early-exit[:N]", *saved])
    if path.exists():
        raise ValueError(
            f"draft {text!r} is a file; a model draft is a folder (save_pretrained), or one of {choices}"
        )
    raise ValueError(
        f"unknown draft {text!r}: give one of {choices}, or a model folder (none exists at that path)"
    )


def read_prompts(path: str | Path) -> list[str]:
    """The prompts in a UTF-8 file: one a line, or, for a ``.jsonl`` file, one JSON object a line
    with a ``"prompt"`` field (the format of ``specdec/data/workloads/*.jsonl``). Blank lines are
    skipped; a missing or empty file, or a JSON line without a prompt, raises ValueError."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"prompts file {str(path)!r} does not exist (or is not a file)")
    out = []
    with p.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            if p.suffix == ".jsonl":
                try:
                    row = json.loads(line)
                except ValueError:
                    row = None
                if not isinstance(row, dict) or not str(row.get("prompt", "")).strip():
                    raise ValueError(
                        f"prompts file {p.name} line {line_no}: expected a JSON object with a 'prompt'"
                    )
                out.append(str(row["prompt"]))
            else:
                out.append(line.rstrip("\r\n"))
    if not out:
        raise ValueError(f"prompts file {str(path)!r} holds no prompt (only blank lines)")
    return out


def prompt_ids(tokenizer: Any, text: str) -> list[int]:
    """``text`` as one user turn in the tokenizer's chat template (:func:`specdec.workloads.chat_prompt_ids`),
    or plainly encoded when the tokenizer has no chat template."""
    from specdec.workloads import chat_prompt_ids

    if getattr(tokenizer, "chat_template", None):
        return chat_prompt_ids(tokenizer, text)
    return list(tokenizer.encode(text, add_special_tokens=True))


def _warp_fn(temperature: float) -> Callable[[Any], Any]:
    from functools import partial

    from specdec.sampling import warp

    return partial(warp, temperature=temperature)


def teacher_forced_alpha(
    engine: Any,
    drafter: Any,
    sequences: Sequence[tuple[Sequence[int], Sequence[int]]],
    temperature: float,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The paper's alpha on the target's own text, by teacher forcing (:mod:`specdec.acceptance`).

    ``sequences`` holds (prompt ids, the target's response) pairs; p_t comes from one forward of
    ``engine`` (any engine :func:`specdec.lm.open_lm` opens) over prompt + response, q_t from the
    drafter after the same prefix, both warped at ``temperature``; beta_t = sum_x min(p_t, q_t)
    (Corollary 3.6; p_t of the drafted token for prompt lookup). Returns ``alpha`` (mean beta over
    the positions with a draft, pooled over sequences), ``alpha_all_positions`` (a position
    without a draft counted as beta = 0), ``coverage`` (positions with a draft over all) and
    ``positions``; NaN alphas when nothing was drafted. ``progress(items, description)`` wraps
    the loop over sequences.
    """
    from specdec.acceptance import teacher_forced
    from specdec.lm import open_lm

    warp_fn = _warp_fn(temperature)
    beta_sum, drafted, positions = 0.0, 0, 0
    for prompt, response in (progress or _no_progress)(list(sequences), "teacher forcing"):
        if not response:
            continue
        seq = [*map(int, prompt), *map(int, response)]
        p = warp_fn(open_lm(engine).forward(seq[:-1], keep=len(response)))
        res = teacher_forced(engine, drafter, seq, len(prompt), warp_fn, p=p)
        beta_sum += float(np.nansum(res.beta))
        drafted += res.drafted
        positions += len(res.beta)
    nan = float("nan")
    return {
        "alpha": beta_sum / drafted if drafted else nan,
        "alpha_all_positions": beta_sum / positions if positions else nan,
        "coverage": drafted / positions if positions else nan,
        "positions": positions,
    }


def measure_drafter(
    engine: Any,
    drafter: Any,
    prompts: Sequence[Sequence[int]],
    *,
    gamma: int,
    new_tokens: int,
    temperature: float = 0.0,
    repeats: int = 2,
    verify_ks: Sequence[int] | None = None,
    verify_repeats: int = 5,
    eos_token_id: int | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Measure a drafter against a target on given prompts: alpha both ways, c, the verify cost
    curve, and the measured speedup next to Theorem 3.8's.

    1. Decoding: per repeat and prompt, plain decoding (:func:`specdec.decoding.autoregressive`)
       and speculative decoding at ``gamma`` (:func:`specdec.decoding.speculative`) of up to
       ``new_tokens`` tokens, in a seeded random order (interleaved, so drift hits both alike),
       the same seed for both; each call's decoding time excludes the prompt's prefill.
    2. ``alpha`` (Corollary 3.6, :func:`teacher_forced_alpha`) on the plain generations of the
       first repeat; ``alpha_observed``: accepted over examined drafts of the speculative calls
       (:class:`specdec.stats.Stats`, pooled by :func:`specdec.realrun.pool_rounds`).
    3. ``c`` (Definition 3.7, :func:`specdec.stats.cost_coefficient`): a speculative call's draft
       time per round over gamma, in single-token steps T(1) of the paired plain call; the
       median over calls.
    4. The verify cost curve T(k)/T(1) after the first prompt (:func:`engine_verify_curves`), for
       every k in ``verify_ks`` (default 1 .. gamma + 1 and 6, 8, 12, 16).
    5. ``measured`` speedup: per prompt the median over repeats of plain time per token over
       speculative time per token, then the geometric mean over prompts with its 95 % bootstrap
       interval (:func:`specdec.intervals.bootstrap_ci`; no interval with one prompt).
       ``prediction`` is :func:`specdec.realrun.speedup_gap`: Theorem 3.8 at the measured alpha
       (over all positions) and c, then with the measured verify cost, the rounds as drafted,
       the observed tokens per round, and the factors between them. ``optimal_gamma``: Theorem
       3.8's (:func:`specdec.theory.optimal_gamma`) and the best on the measured curve
       (:func:`specdec.hardware.best_gamma_on_curve`).

    ``progress(items, description)`` wraps the loops (e.g. a tqdm bar). Returns a JSON-ready dict
    (NaN where a quantity is undefined, e.g. alpha when nothing was drafted).
    """
    from specdec.decoding import autoregressive, speculative
    from specdec.hardware import best_gamma_on_curve
    from specdec.intervals import bootstrap_ci, geomean
    from specdec.realrun import pool_rounds, speedup_gap
    from specdec.stats import cost_coefficient
    from specdec.theory import expected_tokens, optimal_gamma, walltime_speedup

    for name, value, low in (
        ("gamma", gamma, 1),
        ("new_tokens", new_tokens, 1),
        ("repeats", repeats, 1),
        ("verify_repeats", verify_repeats, 1),
    ):
        _check_count(name, value, low)
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0; got {temperature!r}")
    prompts = [[int(t) for t in p] for p in prompts]
    if not prompts or any(not p for p in prompts):
        raise ValueError("prompts must hold at least one non-empty list of token ids")
    ks = sorted({*range(1, gamma + 2), 6, 8, 12, 16} if verify_ks is None else {1, *map(int, verify_ks)})
    missing = [k for k in range(1, gamma + 2) if k not in ks]
    if missing:
        raise ValueError(f"verify_ks must hold every call size 1 .. gamma + 1 = {gamma + 1}; lacks {missing}")
    progress = progress or _no_progress

    # 1. decoding, interleaved
    order = np.random.default_rng(seed)
    runs: list[dict[str, Any]] = []
    cells = [(rep, i) for rep in range(repeats) for i in range(len(prompts))]
    for rep, i in progress(cells, "decoding"):
        pair: dict[str, Any] = {"repeat": rep, "prompt": i}
        for kind in ("plain", "speculative") if order.random() < 0.5 else ("speculative", "plain"):
            t0 = time.perf_counter()
            if kind == "plain":
                gen = autoregressive(
                    engine,
                    prompts[i],
                    max_new_tokens=new_tokens,
                    temperature=temperature,
                    seed=seed + i,
                    eos_token_id=eos_token_id,
                )
            else:
                gen = speculative(
                    engine,
                    drafter,
                    prompts[i],
                    gamma=gamma,
                    max_new_tokens=new_tokens,
                    temperature=temperature,
                    seed=seed + i,
                    eos_token_id=eos_token_id,
                )
            decode_s = time.perf_counter() - t0 - gen.stats.prefill_s
            pair[kind] = {"tokens": gen.tokens, "decode_s": decode_s, "stats": gen.stats}
        runs.append(pair)

    # 2. alpha, both definitions
    first = {r["prompt"]: r["plain"]["tokens"] for r in runs if r["repeat"] == 0}
    tf = teacher_forced_alpha(
        engine, drafter, [(prompts[i], first[i]) for i in range(len(prompts))], temperature, progress
    )
    pooled = pool_rounds(r["speculative"]["stats"] for r in runs)
    spec_stats = [r["speculative"]["stats"] for r in runs]
    drafted = sum(s.drafted_tokens for s in spec_stats)

    # 3. c against the paired plain call's step
    c_runs = [
        cost_coefficient(
            r["speculative"]["stats"].draft_s,
            r["speculative"]["stats"].rounds,
            gamma,
            r["plain"]["stats"].step_s,
        )
        for r in runs
    ]
    c = float(np.median(c_runs))
    step_s = float(np.median([r["plain"]["stats"].step_s for r in runs]))

    # 4. the verify cost curve on this engine
    curves = engine_verify_curves({"target": engine}, prompts[0], ks, verify_repeats, log=None)
    cells_v = curves["engines"]["target"]
    curve = {int(cell["k"]): float(cell["ratio_to_k1"]) for cell in cells_v}

    # 5. measured speedup and the prediction
    def per_token(run: dict[str, Any]) -> float:
        return run["decode_s"] / max(len(run["tokens"]), 1)

    per_prompt = np.array(
        [
            np.median([per_token(r["plain"]) / per_token(r["speculative"]) for r in runs if r["prompt"] == i])
            for i in range(len(prompts))
        ]
    )
    if len(per_prompt) >= 2:
        measured = list(bootstrap_ci(per_prompt, geomean))
    else:
        measured = [float(per_prompt[0]), None, None]
    alpha, alpha_all = tf["alpha"], tf["alpha_all_positions"]
    nan = float("nan")
    prediction = None
    best_theorem = best_curve = None
    if math.isfinite(alpha):
        prediction = speedup_gap(
            alpha=alpha,
            gamma=gamma,
            c=c,
            curve=curve,
            drafted=pooled["drafted"],
            tokens_per_round=pooled["tokens_per_round"],
            measured=measured[0],
            alpha_theorem=alpha_all,
        )
        g = int(optimal_gamma(alpha_all, c))
        best_theorem = {"gamma": g, "speedup": float(walltime_speedup(alpha_all, g, c))}
        g, s = best_gamma_on_curve(alpha_all, c, curve)
        best_curve = {"gamma": g, "speedup": s, "max_gamma": max(ks) - 1}
    alpha_obs = pooled["alpha_accept_rate"]
    return _finite(
        {
            "gamma": gamma,
            "new_tokens": new_tokens,
            "temperature": temperature,
            "repeats": repeats,
            "prompts": len(prompts),
            "prompt_tokens": [len(p) for p in prompts],
            "generated_tokens": [len(first[i]) for i in range(len(prompts))],
            "alpha": alpha,
            "alpha_all_positions": alpha_all,
            "alpha_coverage": tf["coverage"],
            "alpha_positions": tf["positions"],
            "alpha_observed": alpha_obs,
            "draft_acceptance_fraction": (
                sum(s.accepted_tokens for s in spec_stats) / drafted if drafted else nan
            ),
            "tokens_per_round": pooled["tokens_per_round"],
            "mean_drafted": pooled["mean_drafted"],
            "expected_tokens": float(expected_tokens(alpha_all, gamma)) if math.isfinite(alpha_all) else nan,
            "c": c,
            "step_ms": 1e3 * step_s,
            "verify_curve": {str(k): v for k, v in sorted(curve.items())},
            "verify_cost": curve[gamma + 1],
            "verify": curves,
            "measured": measured,
            "measured_per_prompt": per_prompt.tolist(),
            "theorem_observed_alpha": (
                float(walltime_speedup(alpha_obs, gamma, c)) if math.isfinite(alpha_obs) else nan
            ),
            "prediction": prediction,
            "optimal_gamma_theorem": best_theorem,
            "optimal_gamma_curve": best_curve,
            "plain_tok_s": float(
                np.median([len(r["plain"]["tokens"]) / r["plain"]["decode_s"] for r in runs])
            ),
            "speculative_tok_s": float(
                np.median([len(r["speculative"]["tokens"]) / r["speculative"]["decode_s"] for r in runs])
            ),
            "greedy_exact": (
                all(r["plain"]["tokens"] == r["speculative"]["tokens"] for r in runs)
                if temperature == 0
                else None
            ),
            "c_per_call": c_runs,
        }
    )


def _finite(obj: Any) -> Any:
    """NaN and infinity -> None, recursively (JSON has no NaN): an undefined quantity reads null."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    return obj


def _depth(engine: Any) -> int:
    n = getattr(engine, "num_layers", None)  # a LeanLlama
    return int(n if n is not None else engine.config.num_hidden_layers)


def _build_drafter(
    kind: str,
    detail: Any,
    engine: Any,
    loaded: Any,
    *,
    new_tokens: int,
    progress: Progress,
    log: Callable[[str], None],
) -> tuple[Any, dict[str, Any]]:
    """The drafter that :func:`parse_draft` named, around ``engine``, and what it is (for a model
    folder, ``detail`` is the draft :func:`_load_draft_folder` loaded)."""
    from specdec.drafters import (
        BigramDrafter,
        EarlyExitDrafter,
        ModelDrafter,
        PromptLookupDrafter,
        check_same_vocab,
    )
    from specdec.lm import vocab_size

    if kind == "lookup":
        return PromptLookupDrafter(), {
            "kind": kind,
            "about": "prompt lookup: copies what followed an earlier match of the last 1-3 tokens",
        }
    if kind == "bigram":
        from specdec.decoding import autoregressive
        from specdec.workloads import training_prompts

        log(f"building the bigram table from the target's text on {BIGRAM_PROMPTS} training prompts...")
        corpus = []
        for i, p in enumerate(progress(training_prompts(BIGRAM_PROMPTS, seed=BIGRAM_SEED), "bigram corpus")):
            ids = prompt_ids(loaded.tokenizer, p.prompt)
            g = autoregressive(engine, ids, max_new_tokens=new_tokens, temperature=1.0, seed=BIGRAM_SEED + i)
            corpus.append(g.tokens)
        about = (
            f"bigram counts (add-1) of the target's temperature-1 text on {BIGRAM_PROMPTS} training prompts "
            f"(seed {BIGRAM_SEED}), {sum(map(len, corpus))} tokens"
        )
        return BigramDrafter.from_token_ids(corpus, vocab_size(engine)), {"kind": kind, "about": about}
    if kind == "early-exit":
        depth = _depth(engine)
        n = detail if detail is not None else max(1, math.ceil(depth / 4))
        if n > depth:
            raise ValueError(f"draft early-exit:{n} asks for more layers than the target has ({depth})")
        about = f"the target's own first {n} of {depth} layers, final norm and LM head"
        return EarlyExitDrafter(engine, n), {"kind": kind, "layers": n, "about": about}
    if kind == "distilled":
        from specdec.draftnets import load_draft

        model = load_draft(detail, loaded.model)
        about = f"the book's distilled draft {detail} (specdec/data/drafts), transformers forward"
        return ModelDrafter(model, target=engine), {"kind": kind, "about": about}
    # a model folder, loaded and checked by _load_draft_folder
    dl = detail
    check_same_vocab(engine, dl.model)
    model, how = dl.model, f"transformers {loaded.dtype}"
    mode = getattr(engine, "mode", None)
    if mode is not None:  # a lean target: the draft in the same lean mode when it is a Llama
        from specdec.lean import LeanLlama

        try:
            model, how = LeanLlama(dl.model, mode), f"lean {mode}"
        except ValueError as exc:
            how = f"transformers {loaded.dtype} (the lean engine refused it: {exc})"
    about = f"the model in {dl.name} ({_depth(dl.model)} layers), {how}"
    return ModelDrafter(model, target=engine), {"kind": kind, "about": about}


def _load_draft_folder(folder: Path, loaded: Any, log: Callable[[str], None]) -> Any:
    """The draft model in ``folder``, loaded like the target; ValueError unless it has the target's
    vocabulary (logit rows of the same width) and tokenizer (the same ids for the same strings)."""
    from specdec.drafters import check_same_tokenizer, check_same_vocab
    from specdec.models import load_model

    log(f"loading the draft model {folder}...")
    dl = load_model(folder, dtype=loaded.dtype, device=loaded.device, quiet=True)
    check_same_vocab(loaded.model, dl.model)
    check_same_tokenizer(loaded.tokenizer, dl.tokenizer)
    return dl


def measure_setup(
    target: str = "default",
    draft: str = "lookup",
    prompts: str | Path | None = None,
    *,
    dtype: str = "auto",
    gamma: int = 4,
    new_tokens: int = 64,
    temperature: float = 0.0,
    repeats: int = 2,
    verify_repeats: int = 5,
    threads: int = 1,
    seed: int = 0,
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Everything ``specdec measure`` reports, for a target, a drafter and prompts on this machine.

    ``target``: ``"default"`` (SmolLM2-135M-Instruct, :func:`specdec.models.load_target`) or a
    local transformers model folder. ``draft``: see :func:`parse_draft` (a model folder must
    share the target's vocabulary and tokenizer). ``prompts``: a file (:func:`read_prompts`),
    or None for the book's first evaluation prompt of each task. ``dtype``: one of
    :data:`ENGINES`; ``"auto"`` is the lean mode chosen by timing this machine
    (:func:`specdec.modes.lean_model`, cached per machine). Every argument is checked before
    anything is loaded (ValueError). ``threads`` pins torch's threads. The measurement is
    :func:`measure_drafter`'s; the result adds what was measured (target, engine, draft,
    prompts) and :func:`environment`.
    """
    log = log or (lambda line: None)
    progress = progress or _no_progress
    for name, value, low in (
        ("gamma", gamma, 1),
        ("new_tokens", new_tokens, 1),
        ("repeats", repeats, 1),
        ("verify_repeats", verify_repeats, 1),
        ("threads", threads, 1),
    ):
        _check_count(name, value, low)
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0; got {temperature!r}")
    if dtype not in ENGINES:
        raise ValueError(f"dtype must be one of {', '.join(ENGINES)}; got {dtype!r}")
    kind, detail = parse_draft(draft)
    texts = None if prompts is None else read_prompts(prompts)
    target_path = None
    if target != "default":
        target_path = Path(target).expanduser()
        if not target_path.is_dir():
            raise ValueError(
                f"target {target!r}: no such folder; give 'default' (SmolLM2-135M-Instruct) "
                "or a local transformers model folder"
            )

    from specdec.models import load_model, load_target, set_threads
    from specdec.workloads import evaluation_prompts

    set_threads(threads)
    lean = not dtype.startswith("hf-")
    hf_dtype = "bfloat16" if dtype == "hf-bfloat16" else "float32"
    device = "cpu" if lean else None  # the lean engine runs on the CPU
    log("loading the target...")
    if target_path is None:
        loaded = load_target(hf_dtype, device=device, quiet=True)
    else:
        loaded = load_model(target_path, dtype=hf_dtype, device=device, quiet=True)
    if kind == "model":  # load and check a draft folder before the target is converted or probed
        detail = _load_draft_folder(detail, loaded, log)
    engine, probe, engine_name = loaded.model, None, dtype
    if lean:
        from specdec.modes import lean_model

        if dtype == "auto":
            log("choosing the lean mode: timing this machine takes about a minute, once (cached)...")
        try:
            engine, probe = lean_model(loaded.model, dtype)
        except ValueError as exc:
            raise ValueError(f"{exc} (--dtype hf-float32 runs any transformers model)") from exc
        engine_name = f"lean-{engine.mode}"
        if probe is not None:
            log(f"lean mode {engine.mode} ({'from the cache' if probe.get('cached') else 'measured now'})")
    tok = loaded.tokenizer
    if texts is None:
        plist = evaluation_prompts(tok, 1)
        ids = [p["ids"] for p in plist]
        source = (
            "the book's evaluation prompts, the first of each task ("
            + ", ".join(p["id"] for p in plist)
            + ")"
        )
    else:
        ids = [prompt_ids(tok, t) for t in texts]
        source = f"{len(texts)} prompt(s) from {Path(prompts).name}"
    drafter, about = _build_drafter(
        kind, detail, engine, loaded, new_tokens=new_tokens, progress=progress, log=log
    )
    env = environment(dtype=engine_name, device=loaded.device)
    log(f"measuring: {len(ids)} prompt(s) x {repeats} repeat(s), plain and speculative decoding...")
    result = measure_drafter(
        engine,
        drafter,
        ids,
        gamma=gamma,
        new_tokens=new_tokens,
        temperature=temperature,
        repeats=repeats,
        verify_repeats=verify_repeats,
        eos_token_id=tok.eos_token_id,
        seed=seed,
        progress=progress,
    )
    mode = None
    if probe is not None:
        mode = {
            "mode": probe["mode"],
            "rule": probe.get("rule"),
            "cached": bool(probe.get("cached")),
            "step_ms": {m: 1e3 * v["step_s"] for m, v in probe["modes"].items()},
        }
    return {
        "kind": "specdec-measure",
        "target": {
            "name": loaded.name,
            "engine": engine_name,
            "dtype": dtype,
            "device": loaded.device,
            "layers": _depth(engine),
        },
        "mode_probe": mode,
        "draft": {"name": str(draft), **about},
        "prompts_source": source,
        "threads": threads,
        "seed": seed,
        **result,
        "environment": env,
    }
