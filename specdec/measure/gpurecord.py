"""The GPU record: the engine's CUDA paths checked, and the cost surface T(b, k) of shape-true targets.

``benchmarks/gpu_record.py`` (``make gpu-record``) runs these functions as named steps on a
machine with one CUDA GPU, torch and transformers, and nothing else: no network, no weights,
no package install (``PYTHONPATH=.``). It needs only torch, transformers and numpy; scipy is
used when present (:func:`chi2_sf` replaces it otherwise). Issue #12, item 4.

* :func:`greedy_equality` -- greedy speculative decoding equals greedy autoregressive decoding
  on the device, with the test suite's tiny random Llama models (:mod:`specdec.engine.tinymodels`), a
  model drafter and a prompt-lookup drafter, float32.
* :func:`first_two_token_test` -- losslessness at temperature 1 on the device: Pearson's
  chi-square of the joint law of the first two tokens of N speculative runs against the
  target's exact law, as ``tests/test_decoding.py`` does on the CPU.
* :func:`random_llama` -- a Llama-style model at a real shape (:data:`SHAPES`) with random
  weights, built directly on the device in the timing dtype (no float32 copy). The cost of a
  dense forward depends on the shapes, not on the weights.
* :func:`cost_surface` -- T(b, k): the time of ONE forward call that feeds k new tokens to
  each of b sequences after a cached context of fixed length, for a grid of (b, k); the cache
  is cropped back after every call, so every call sees the same context. T(1, 1) is the plain
  decode step; T(1, k) / T(1, 1) is the verify-cost curve of Theorem 3.8.
* :func:`engine_forward_times` -- the same step through the engine's own :class:`CachedLM`.
* :class:`Deadline` and :class:`Recorder` -- a global time budget checked between cells, and a
  JSON record saved after every finished section (a timeout still leaves the data so far).

Everything is eager Hugging Face transformers (attention "sdpa"), no CUDA graphs, no
compilation: the engine the book's chapters use.
"""

from __future__ import annotations

import gc
import math
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from specdec.measure.core import (
    TensorSession,
    cpu_name,
    summarize_times,
    sync_hook,
    time_forwards,
    time_once,
    write_record,
)
from specdec.theory.tokens import first_divergence

__all__ = [
    "B1_EXTRA_KS",
    "GRID_BATCHES",
    "GRID_KS",
    "QUICK_SHAPE",
    "SHAPES",
    "Deadline",
    "Recorder",
    "chi2_sf",
    "chi_square_pvalue",
    "cost_surface",
    "device_info",
    "device_slug",
    "engine_forward_times",
    "exact_two_token_law",
    "first_two_token_test",
    "free_memory",
    "greedy_equality",
    "random_llama",
    "tiny_models",
]


#: Batch sizes b and tokens per sequence k of the cost surface T(b, k).
GRID_BATCHES = (1, 2, 4, 8, 16, 32, 64)
GRID_KS = (1, 2, 3, 4, 5, 6, 8)
#: Extra k at b = 1 only: the verify-cost curve T(k)/T(1) up to k = 32.
B1_EXTRA_KS = (7, 10, 12, 16, 20, 24, 32)

#: Real shapes (LlamaConfig arguments). The rotary base and the norm epsilon do not change a
#: forward's cost and are left at their defaults. SmolLM2-135M's shapes are those of the
#: book's target (the config transformers reads from SmolLM2-135M-Instruct.Q4_1.gguf:
#: hidden 576, 30 layers, 9 heads of 64, 3 KV heads, MLP 1536, V = 49152, tied embeddings).
SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m": {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
        "max_position_embeddings": 8192,
    },
    # SmolLM2-1.7B: Llama layout, full multi-head attention.
    "smollm2-1.7b": {
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
        "max_position_embeddings": 8192,
    },
    # Llama-2-7B: the size class of the paper's and the source article's GPU remarks.
    "llama2-7b": {
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
        "max_position_embeddings": 4096,
    },
}

#: A scaled-down shape for ``--quick`` runs on a CPU (tests).
QUICK_SHAPE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "tie_word_embeddings": True,
    "max_position_embeddings": 512,
}


# --------------------------------------------------------------------------- budget and record
class Deadline:
    """A global time budget: ``left()`` seconds remain of ``budget_s`` from creation."""

    def __init__(self, budget_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not budget_s >= 0:
            raise ValueError(f"budget_s must be >= 0; got {budget_s!r}")
        self.budget_s, self._clock = float(budget_s), clock
        self.start = clock()

    def elapsed(self) -> float:
        return self._clock() - self.start

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def allows(self, need_s: float = 0.0) -> bool:
        """True while at least ``need_s`` seconds remain (and the budget is not spent)."""
        return self.left() > max(need_s, 0.0)


class Recorder:
    """The JSON record of one run, written (atomically) to ``path`` after every change worth keeping.

    ``data`` holds ``settings``, ``environment``, ``status`` (sections done, failed, skipped;
    elapsed time; ``finished``) and one key per section. :meth:`section` runs a block as a
    named section: on an exception the error and the end of its traceback are recorded and
    the run goes on with the next section.
    """

    def __init__(self, path: str | Path, *, settings: dict[str, Any], log: Callable[[str], None] = print):
        self.path = Path(path)
        self.log = log
        self.started = time.monotonic()
        self.data: dict[str, Any] = {
            "record": "gpu_record",
            "schema": 1,
            "settings": dict(settings),
            "status": {"finished": False, "done": [], "failed": [], "skipped": [], "errors": {}},
        }

    def save(self) -> Path:
        self.data["status"]["elapsed_s"] = round(time.monotonic() - self.started, 3)
        return write_record(self.path, self.data)  # atomic; NaN and infinity -> null

    def skip(self, name: str, reason: str) -> None:
        self.data["status"]["skipped"].append({"section": name, "reason": reason})
        self.log(f"[skip] {name}: {reason}")
        self.save()

    @contextmanager
    def section(self, name: str) -> Iterator[dict[str, Any]]:
        """Run the ``with`` block as section ``name``; it fills the dict it gets (saved under ``name``)."""
        out: dict[str, Any] = {}
        self.data[name] = out
        start = time.monotonic()
        self.log(f"[start] {name} (t = {start - self.started:.1f} s)")
        try:
            yield out
        except Exception as exc:  # record and go on: one failed section must not lose the others
            tb = traceback.format_exc().splitlines()[-12:]
            self.data["status"]["failed"].append(name)
            self.data["status"]["errors"][name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": tb}
            self.log(f"[error] {name}: {type(exc).__name__}: {exc}")
        else:
            self.data["status"]["done"].append(name)
        finally:
            out["section_s"] = round(time.monotonic() - start, 3)
            self.log(f"[end] {name} in {out['section_s']:.1f} s")
            self.save()

    def finish(self) -> Path:
        self.data["status"]["finished"] = True
        return self.save()


# --------------------------------------------------------------------------- device
def device_slug(name: str) -> str:
    """A file-name slug of a device name: 'NVIDIA H200' -> 'nvidia-h200'."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "device"


def device_info(device: str) -> dict[str, Any]:
    """The accelerator's name and properties and the CUDA stack's versions (CPU: the CPU's name)."""
    import torch
    import transformers

    info: dict[str, Any] = {
        "device": device,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
    }
    if torch.device(device).type == "cuda":
        dev = torch.device(device)
        props = torch.cuda.get_device_properties(dev)
        info.update(
            name=torch.cuda.get_device_name(dev),
            total_memory_gib=round(props.total_memory / 2**30, 2),
            multiprocessors=props.multi_processor_count,
            capability=f"{props.major}.{props.minor}",
            cudnn=torch.backends.cudnn.version(),
            tf32_matmul=bool(torch.backends.cuda.matmul.allow_tf32),
            flash_sdp=bool(torch.backends.cuda.flash_sdp_enabled()),
            mem_efficient_sdp=bool(torch.backends.cuda.mem_efficient_sdp_enabled()),
            cpu_name=cpu_name(),
        )
    else:
        info.update(name=cpu_name(), threads=torch.get_num_threads())
    return info


def free_memory(device: str) -> dict[str, float] | None:
    """Collect garbage and empty CUDA's cache; return the peak and current allocation (GiB)."""
    import torch

    gc.collect()
    if torch.device(device).type != "cuda":
        return None
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() / 2**30
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return {
        "peak_allocated_gib": round(peak, 3),
        "allocated_after_gib": torch.cuda.memory_allocated() / 2**30,
    }


# --------------------------------------------------------------------------- roofline
def device_roofline(
    device: str,
    dtype: Any,
    *,
    copy_mib: int = 1024,
    matmul_n: tuple[int, ...] = (4096, 8192),
    repeats: int = 10,
) -> dict[str, Any]:
    """The device's two roofline numbers, measured: memory bandwidth and matmul throughput.

    Bandwidth: ``y.copy_(x)`` of a ``copy_mib`` MiB tensor, which reads and writes it
    (2 x bytes moved), median of ``repeats`` timed calls after one warm-up. Throughput:
    an n x n by n x n matmul in ``dtype`` (2 n^3 FLOPs) for each n. The ridge point
    (FLOPs per byte at which a kernel stops being bandwidth-bound) is their ratio.
    """
    import torch

    sync = sync_hook(device=device)
    x = torch.empty(copy_mib * 2**20, dtype=torch.uint8, device=device).random_(0, 255)
    y = torch.empty_like(x)
    times = [time_once(partial(y.copy_, x), sync) for _ in range(repeats + 1)][1:]
    moved = 2 * x.numel()
    bandwidth = moved / float(np.median(times))
    del x, y
    out: dict[str, Any] = {
        "copy_bytes_moved": moved,
        "copy": summarize_times(times).to_dict(),
        "bandwidth_gb_s": bandwidth / 1e9,
        "matmul": [],
    }
    for n in matmul_n:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        times = [time_once(partial(torch.matmul, a, b), sync) for _ in range(repeats + 1)][1:]
        flops = 2.0 * n**3
        out["matmul"].append(
            {"n": n, **summarize_times(times).to_dict(), "tflop_s": flops / float(np.median(times)) / 1e12}
        )
        del a, b
    best = max(m["tflop_s"] for m in out["matmul"])
    out["peak_tflop_s"] = best
    out["ridge_flop_per_byte"] = best * 1e12 / bandwidth
    return out


# --------------------------------------------------------------------------- correctness
def tiny_models() -> Any:
    """The tiny random Llama models of the correctness checks: :mod:`specdec.engine.tinymodels` (the test
    suite's ``tests/tiny_models.py`` re-exports it)."""
    from specdec.engine import tinymodels

    return tinymodels


#: The prompts of tests/test_decoding.py (the last one repeats an n-gram: prompt lookup drafts).
PROMPTS = ([7], [3, 14, 15, 92, 65], [11, 22, 33, 44, 11, 22, 33, 55, 66, 11, 22, 33])


def greedy_equality(
    device: str,
    *,
    prompts: Sequence[Sequence[int]] = PROMPTS,
    gamma: int = 3,
    max_new_tokens: int = 20,
) -> dict[str, Any]:
    """Greedy speculative == greedy autoregressive on ``device`` (float32, tiny random Llamas).

    The target is ``tiny_llama(0)``; the drafters a perturbed copy of it (noise 0.05, alpha ~ 0.8:
    both rejections and full accepts) and prompt lookup. The models are built on the CPU with
    the test suite's seeds and then moved, so they are the tests' models. Also recorded: whether
    the device's greedy tokens equal the CPU's (information: different kernels may break a
    near-tie), and the largest difference between the logits of one k-token forward and of k
    one-token forwards (what verification sees against what plain decoding sees).
    """
    import torch

    from specdec.engine.decoding import autoregressive, speculative
    from specdec.engine.drafters import ModelDrafter, PromptLookupDrafter
    from specdec.engine.lm import CachedLM

    tm = tiny_models()
    cpu_target = tm.tiny_llama(0)
    target = tm.tiny_llama(0).to(device)
    draft = tm.perturbed_copy(tm.tiny_llama(0), 0.05, 5).to(device)
    drafters = {"model": ModelDrafter(draft, target=target), "prompt-lookup": PromptLookupDrafter()}
    runs = []
    for prompt in prompts:
        ar = autoregressive(target, list(prompt), max_new_tokens=max_new_tokens)
        cpu = autoregressive(cpu_target, list(prompt), max_new_tokens=max_new_tokens)
        row: dict[str, Any] = {
            "prompt": list(prompt),
            "autoregressive": ar.tokens,
            "matches_cpu": ar.tokens == cpu.tokens,
            "drafters": {},
        }
        for name, drafter in drafters.items():
            sp = speculative(target, drafter, list(prompt), gamma=gamma, max_new_tokens=max_new_tokens)
            row["drafters"][name] = {
                "equal": sp.tokens == ar.tokens,
                "first_difference": first_divergence(sp.tokens, ar.tokens),
                "new_tokens": len(sp.tokens),
                "rounds": sp.stats.rounds,
                "accepted_hist": sp.stats.accepted_hist,
            }
        runs.append(row)

    # One forward over k tokens against k single-token forwards, same cache, same positions.
    ids = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43]
    block, step = CachedLM(target), CachedLM(target)
    block.forward(ids[:4])
    step.forward(ids[:4])
    rows_block = block.forward(ids[4:])
    rows_step = torch.cat([step.forward([t]) for t in ids[4:]])
    diff = float((rows_block - rows_step).abs().max().cpu())
    all_equal = all(d["equal"] for r in runs for d in r["drafters"].values())
    return {
        "dtype": "float32",
        "gamma": gamma,
        "max_new_tokens": max_new_tokens,
        "all_equal": all_equal,
        "all_match_cpu": all(r["matches_cpu"] for r in runs),
        "block_vs_step_logits_max_abs_diff": diff,
        "runs": runs,
    }


def exact_two_token_law(model: Any, prefix: Sequence[int], **warp_kw: Any) -> np.ndarray:
    """P(x1, x2 | prefix) of ``model`` under ``warp`` from full (uncached) forwards, float64 (V, V)."""
    import torch

    from specdec.engine.lm import vocab_size
    from specdec.theory.sampling import warp

    device = next(model.parameters()).device
    vocab = vocab_size(model)
    with torch.inference_mode():
        first = torch.tensor([list(prefix)], dtype=torch.long, device=device)
        p1 = warp(model(input_ids=first, use_cache=False).logits[:, -1].float(), **warp_kw)[0].double()
        second = torch.tensor([[*prefix, x] for x in range(vocab)], dtype=torch.long, device=device)
        p2 = warp(model(input_ids=second, use_cache=False).logits[:, -1].float(), **warp_kw).double()
    law = (p1[:, None] * p2).cpu().numpy()
    return law / law.sum()


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square(df): the regularised upper incomplete gamma Q(df/2, x/2).

    Series for x/2 < df/2 + 1, Lentz's continued fraction otherwise (Numerical Recipes 6.2);
    relative accuracy about 1e-12. Used when scipy is missing.
    """
    if df < 1:
        raise ValueError(f"df must be >= 1; got {df!r}")
    if x <= 0:
        return 1.0
    a, z = df / 2.0, x / 2.0
    log_front = a * math.log(z) - z - math.lgamma(a)
    if z < a + 1.0:  # P(a, z) by its series; Q = 1 - P
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1.0
            term *= z / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = z + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return min(1.0, math.exp(log_front) * h)


def chi_square_pvalue(counts: np.ndarray, law: np.ndarray, min_expected: float = 5.0) -> dict[str, Any]:
    """Pearson's chi-square of observed counts against a law (the test suite's checks use it too).

    Cells expected fewer than ``min_expected`` times are pooled into one; if the pool itself is
    expected fewer times, it joins the smallest other cell. An observation in a cell of
    probability 0 gives p-value 0. The p-value comes from scipy when it is installed, else
    from :func:`chi2_sf`; ``method`` says which.
    """
    obs, expected = np.asarray(counts, float).ravel(), np.asarray(law, float).ravel() * float(np.sum(counts))
    if obs[np.asarray(law).ravel() == 0].sum() > 0:
        return {"pvalue": 0.0, "statistic": math.inf, "df": None, "cells": None, "method": "impossible cell"}
    big = expected >= min_expected
    order = np.argsort(expected[big])
    obs_big, exp_big = obs[big][order], expected[big][order]
    pool_obs, pool_exp = obs[~big].sum(), expected[~big].sum()
    if pool_exp >= min_expected:
        obs_big, exp_big = np.append(obs_big, pool_obs), np.append(exp_big, pool_exp)
    else:
        obs_big[0] += pool_obs
        exp_big[0] += pool_exp
    stat = float(np.sum((obs_big - exp_big) ** 2 / exp_big))
    df = len(obs_big) - 1
    try:
        import scipy.stats

        pvalue, method = float(scipy.stats.chi2.sf(stat, df)), "scipy.stats.chi2.sf"
    except ImportError:
        pvalue, method = chi2_sf(stat, df), "specdec.measure.gpurecord.chi2_sf"
    return {"pvalue": pvalue, "statistic": stat, "df": df, "cells": len(obs_big), "method": method}


def first_two_token_test(
    device: str,
    *,
    n: int = 3000,
    time_cap_s: float = 45.0,
    gamma: int = 2,
    prefix: Sequence[int] = (36,),
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Losslessness on ``device``: the first two tokens of speculative runs at temperature 1.

    The target is the one-layer ``tiny_llama(0, layers=1)``, the drafter a perturbed copy (noise
    0.3, alpha about 0.6 after the prefix [36]) -- the "model-gamma2" case of the test suite.
    Runs use seeds 0, 1, ... until ``n`` runs or ``time_cap_s`` seconds (a stopping rule that
    does not look at the outcomes), then the counts are tested against the exact law. The test
    suite passes at p > 1e-3.
    """
    from specdec.engine.decoding import speculative
    from specdec.engine.drafters import ModelDrafter

    tm = tiny_models()
    target = tm.tiny_llama(0, layers=1).to(device)
    draft = tm.perturbed_copy(tm.tiny_llama(0, layers=1), 0.3, 7).to(device)
    drafter = ModelDrafter(draft, target=target)
    vocab = tm.VOCAB
    counts = np.zeros((vocab, vocab))
    accepted = examined = 0
    start = time.monotonic()
    runs = 0
    while runs < n and time.monotonic() - start < time_cap_s:
        gen = speculative(
            target, drafter, list(prefix), gamma=gamma, max_new_tokens=gamma + 1, temperature=1.0, seed=runs
        )
        counts[gen.tokens[0], gen.tokens[1]] += 1
        accepted += gen.stats.accepted_tokens
        examined += gen.stats.examined
        runs += 1
        if progress is not None and runs % 500 == 0:
            progress(f"  chi-square: {runs} runs in {time.monotonic() - start:.1f} s")
    elapsed = time.monotonic() - start
    law = exact_two_token_law(target, prefix, temperature=1.0)
    test = chi_square_pvalue(counts, law)
    return {
        "case": "model drafter (tiny_llama(0, layers=1) + 0.3 noise), temperature 1",
        "prefix": list(prefix),
        "gamma": gamma,
        "runs": runs,
        "runs_asked": n,
        "stopped_by_time_cap": runs < n,
        "elapsed_s": elapsed,
        "ms_per_run": 1e3 * elapsed / max(runs, 1),
        "alpha_accept_rate": accepted / examined if examined else None,
        "pass_threshold": 1e-3,
        "passed": test["pvalue"] > 1e-3,
        **test,
    }


# --------------------------------------------------------------------------- shape-true targets
def random_llama(shape: dict[str, Any], device: str, dtype: Any, seed: int = 0) -> Any:
    """A LlamaForCausalLM at ``shape`` with random weights (std 0.02), built on ``device`` in ``dtype``.

    The parameters are created on the device in the target dtype (torch's default dtype and
    device are switched for the construction), so no float32 copy is ever materialised.
    Attention is "sdpa".
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**shape, attn_implementation="sdpa")
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    if any(t.dtype != dtype for t in model.parameters()):
        model = model.to(dtype)
    model.eval().requires_grad_(False)
    return model


def cost_surface(
    model: Any,
    *,
    batches: Iterable[int] = GRID_BATCHES,
    ks: Iterable[int] = GRID_KS,
    b1_extra_ks: Iterable[int] = B1_EXTRA_KS,
    context: int = 128,
    repeats: int = 20,
    warmup: int = 3,
    seed: int = 0,
    deadline: Deadline | None = None,
    on_block: Callable[[dict[str, Any]], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """T(b, k): one forward over k new tokens per sequence, b sequences, on a cache of ``context`` tokens.

    For each b (in order): one prefill of b random sequences of ``context`` tokens, then
    ``warmup`` untimed and ``repeats`` timed passes over the ks (a fresh seeded order each
    pass, so drift affects every k alike); b = 1 also gets ``b1_extra_ks``. A timed call is the
    forward alone, every position's logits included (a verify pass needs every row), between
    two device synchronisations; the cache is cropped back to ``context`` after each call,
    outside the clock, and its length checked. The deadline is checked before each b: the
    batches it leaves out are listed in ``skipped``. ``on_block`` gets the result so far after
    each b (to save it). Cells: b, k, the median / quartiles / IQR / samples of the time,
    ``per_token_s`` (median / (b k)), ``ratio_to_k1`` (median over T(b, 1)) and
    ``cache_len_after`` (the cache's length after the cell's last crop: ``context``).
    """
    import torch

    batches, ks, extra = tuple(batches), tuple(ks), tuple(b1_extra_ks)
    if not batches or not ks or 1 not in ks:
        raise ValueError(f"batches must be non-empty and ks must hold 1; got {batches}, {ks}")
    device = next(model.parameters()).device
    sync = sync_hook(device=device)
    vocab = int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    order = np.random.default_rng(seed)
    result: dict[str, Any] = {
        "context": context,
        "repeats": repeats,
        "warmup": warmup,
        "batches": list(batches),
        "ks": list(ks),
        "b1_extra_ks": list(extra),
        "timer": "time.perf_counter between device synchronisations",
        "cells": [],
        "skipped": [],
        "finite_logits": True,
    }
    for b in batches:
        cell_ks = tuple(sorted(set(ks) | set(extra))) if b == 1 else ks
        if deadline is not None and not deadline.allows():
            result["skipped"] += [{"b": b, "k": k} for k in cell_ks]
            continue
        block_start = time.monotonic()
        prefix = torch.randint(0, vocab, (b, context), generator=gen).to(device)
        new = torch.randint(0, vocab, (b, max(cell_ks)), generator=gen).to(device)
        session = TensorSession(model, prefix)
        result["finite_logits"] &= bool(torch.isfinite(session.prefill_logits).all())
        session.prefill_logits = None
        times = time_forwards(
            {"model": session},
            {"model": new},
            cell_ks,
            repeats=repeats,
            warmup=warmup,
            order="pairs",
            rng=order,
            synchronize=sync,
        )["model"]
        one = float(np.median(times[1]))
        for k in cell_ks:
            cell = {"b": b, "k": k, **summarize_times(times[k]).to_dict()}
            cell["per_token_s"] = cell["median_s"] / (b * k)
            cell["ratio_to_k1"] = cell["median_s"] / one
            cell["cache_len_after"] = int(session.cache.get_seq_length())
            result["cells"].append(cell)
        del session, prefix, new
        if log is not None:
            line = " ".join(f"k={k}:{1e3 * np.median(times[k]):.2f}" for k in cell_ks)
            log(f"  b={b:<3} ({time.monotonic() - block_start:.1f} s) ms  {line}")
        if on_block is not None:
            on_block(result)
    return result


def _step_and_crop(model: Any, cache: Any, cache_arg: str, ids: Any, positions: Any) -> None:
    """One forward over ``ids`` after the cached context, then the cache cropped back."""
    model(input_ids=ids, position_ids=positions, use_cache=True, **{cache_arg: cache})
    cache.crop(-ids.shape[1])


def kernel_time_surface(
    model: Any,
    *,
    batches: Iterable[int] = (1, 4, 16, 64),
    ks: Iterable[int] = (1, 2, 4, 8),
    b1_extra_ks: Iterable[int] = (3, 5, 6, 12, 16, 32),
    context: int = 128,
    calls: int = 3,
    seed: int = 0,
    deadline: Deadline | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The GPU's busy time per forward call: the sum of its kernels' durations (torch.profiler).

    Eager transformers launches hundreds of small kernels per call; when the CPU cannot
    launch them as fast as the GPU runs them, the wall clock of :func:`cost_surface` measures
    the launcher, not the hardware. The kernels' own time is what a launch-free engine
    (CUDA graphs, a compiled step) approaches: the hardware's T(b, k). Per cell: the device
    time of ``calls`` forwards (same set-up as :func:`cost_surface`: a cached context, every
    row's logits, the cache cropped back after each call) divided by ``calls``, after one
    untimed warm-up call. Needs a CUDA device.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    from specdec.engine.lm import forward_kwargs, new_cache

    device = next(model.parameters()).device
    if device.type != "cuda":
        raise ValueError(f"kernel_time_surface needs a model on a CUDA device; got {device}")
    cache_arg, keep_arg = forward_kwargs(model)
    vocab = int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    batches, ks, extra = tuple(batches), tuple(ks), tuple(b1_extra_ks)
    result: dict[str, Any] = {
        "context": context,
        "calls": calls,
        "timer": "sum of self device time of all profiled events (torch.profiler, CUDA activity) / calls",
        "cells": [],
        "skipped": [],
    }

    def device_us(prof: Any) -> float:
        total = 0.0
        for evt in prof.key_averages():
            value = getattr(evt, "self_device_time_total", None)
            if value is None:
                value = getattr(evt, "self_cuda_time_total", 0.0)
            total += float(value)
        return total

    for b in batches:
        cell_ks = tuple(sorted(set(ks) | set(extra))) if b == 1 else ks
        if deadline is not None and not deadline.allows():
            result["skipped"] += [{"b": b, "k": k} for k in cell_ks]
            continue
        cache = new_cache(model.config)
        prefix = torch.randint(0, vocab, (b, context), generator=gen).to(device)
        new = torch.randint(0, vocab, (b, max(cell_ks)), generator=gen).to(device)
        positions = torch.arange(context + max(cell_ks), device=device).unsqueeze(0).expand(b, -1)
        keep = {keep_arg: 1} if keep_arg else {}
        line = []
        with torch.inference_mode():
            model(
                input_ids=prefix,
                position_ids=positions[:, :context],
                use_cache=True,
                **{cache_arg: cache},
                **keep,
            )
            for k in cell_ks:
                args = (model, cache, cache_arg, new[:, :k], positions[:, context : context + k])
                _step_and_crop(*args)  # warm-up (allocator, kernel selection)
                torch.cuda.synchronize(device)
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(calls):
                        _step_and_crop(*args)
                    torch.cuda.synchronize(device)
                per_call = device_us(prof) / calls / 1e6
                result["cells"].append({"b": b, "k": k, "kernel_s": per_call})
                line.append(f"k={k}:{1e3 * per_call:.2f}")
        del cache, prefix, new
        if log is not None:
            log(f"  kernels b={b:<3} ms  {' '.join(line)}")
    return result


def engine_forward_times(
    model: Any, *, context: int = 128, ks: Iterable[int] = (1, 4, 8), repeats: int = 20, warmup: int = 3
) -> dict[str, Any]:
    """T(1, k) through the engine's :class:`~specdec.engine.lm.CachedLM` (tensor building, float32 logits).

    What ``autoregressive`` (k = 1) and ``speculative`` (k = gamma + 1) pay per target call,
    on a cache of ``context`` random tokens, cropped back after each call.
    """
    import torch

    from specdec.engine.lm import CachedLM

    lm = CachedLM(model)
    gen = torch.Generator().manual_seed(1)
    ks = tuple(ks)
    ids = torch.randint(0, lm.vocab_size, (context + max(ks),), generator=gen).tolist()
    lm.forward(ids[:context], keep=1)
    times = time_forwards(
        {"lm": lm},
        {"lm": ids[context:]},
        ks,
        repeats=repeats,
        warmup=warmup,
        order="fixed",
        synchronize=sync_hook(device=lm.device),
    )["lm"]
    cells = [{"k": k, **summarize_times(times[k]).to_dict()} for k in ks]
    return {"context": context, "path": "specdec.engine.lm.CachedLM.forward", "cells": cells}
