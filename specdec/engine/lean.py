"""A lean Llama forward for decoding on a CPU: preallocated KV cache, fused weights, weight modes.

Hugging Face's ``LlamaForCausalLM`` is general; a decode step of a small model pays for that
generality (module calls, cache objects, masks built per call). :class:`LeanLlama` holds the
same weights as plain tensors, fused where one matmul can do the work of several (q, k, v in
one; gate and up in one), and runs the forward as a short loop over layers with a
preallocated, position-indexed KV cache (gpt-fast's design). Its weight **modes**:

* ``"float32"``  dense float32 weights and activations (the GGUF's dequantized values, exactly);
* ``"bfloat16"`` dense bfloat16 weights and activations;
* ``"q4_1"``     the GGUF's own codes (Q4_1 decoder layers, Q8_0 LM head) with float32
  activations, run by specdec's C forward (:mod:`specdec.engine.native`, compiled on the running
  machine, single-threaded): one call per forward instead of ~750 small torch operations;
* ``"q4q8"``     the same codes, repacked at load so that each block is decoded once for every
  row of a call, times activations quantized per block of 32 to int8 (llama.cpp's Q8_1 scheme)
  by integer dot products (AVX512-VNNI, AVX-VNNI, AVX2 or portable C, ``csrc/leanq8.c``), on
  ``threads`` threads; exact across rows, threads and instruction sets by construction. Its
  logits differ from float32's by the activations' 8-bit rounding (measure it on your model:
  ``tests/test_native_q8.py`` and the engine benchmark's record report it). With
  ``codes="q8_0"`` the decoder layers are Q8_0 instead, each row's own symmetric int8 code with
  its scale in every block: a model whose matrices are int8 per output row (the distilled
  drafts, :func:`specdec.train.draftnets.load_draft`, which marks them ``int8_rows``) keeps its
  own weights, only the scales rounded to half precision (:attr:`LeanLlama.quantization_error`);
* ``"int4"``     the decoder layers' weights as 4-bit integers in groups of 32 along the input
  dimension with a scale and a zero per group (torch's CPU int4 weight-only kernel,
  ``aten._weight_int4pack_mm_for_cpu``), bfloat16 activations; the LM head as an 8-bit
  symmetric code in groups of 32 run as two int4 products (:class:`_Int8Split`); the
  embedding lookup in bfloat16. The GGUF's Q4_1 blocks are an affine code in groups of 32
  (w = d q + m, q in 0..15, with the block's minimum at q = 0 and maximum at q = 15), and its
  Q8_0 blocks a symmetric one (w = d q, q in -127..127, the largest |q| = 127), so
  re-encoding the dequantized weights recovers the very same integers:
  :attr:`LeanLlama.quantization_error` records the largest error of the integer code (0 for
  SmolLM2's Q4_1 layers and Q8_0 head). The scales and zeros are then rounded to bfloat16,
  which the kernel needs (up to 2^-9 relative): the integers are the GGUF's, the scales
  nearly so. On an AVX-512 EPYC (one thread) the two-int4 head took 1.6 ms per
  one-row call against 6.8 ms in bfloat16, but grows faster with the rows of a verify call
  (the int4 kernel decodes the weights again for each row): a decode step became about 18 %
  faster, a call over 8 tokens about 7 % slower. The engine benchmark records both.

**Exactness.** Greedy speculative decoding equals greedy plain decoding only if a verify call
over k tokens gives each row the same logits as k single steps. Two things can break that: a
matmul kernel that sums in a different order for a different number of rows, and attention
over a masked block instead of a shorter sequence. The forward therefore attends row by row
with the very shapes of a step (:meth:`LeanLlama._attend`), and in bfloat16 runs a one-row
linear layer as two equal rows (oneDNN's one-row bf16 kernel rounds differently from its
kernel for two or more rows, which agree). With both, a verify call's rows equal the steps'
**bit for bit** in ``"bfloat16"`` and ``"int4"`` (``"q4_1"``: by construction, see
:mod:`specdec.engine.native`) (checked on an AVX-512 EPYC, natively and
with torch capped at AVX2 and at the baseline; :meth:`LeanLlama.verify_matches_steps` checks
the running machine, and :mod:`specdec.measure.modes` records it per mode). In ``"float32"`` BLAS
sums a one-row product (GEMV) and a block (GEMM) in different orders: rows differ by about
1e-4 in the logits, far below any gap between the top two logits met so far (greedy equality
holds in every test and record), but a float32 block is not the same arithmetic as steps.
Sampling is lossless in every mode with respect to the model as verified (the tests'
chi-square).

Which mode is fastest depends on the CPU (bf16 matmuls need AVX512-BF16 or AMX to be fast),
so it is chosen by measuring the running machine (:mod:`specdec.measure.modes`), never by a constant.

**Trees.** ``forward(..., parents=...)`` verifies a draft tree in one call: each node attends to
the cached prefix and its ancestors at position prefix + depth, with the shapes of the chain
forward over its path, so its logits equal that chain's bit for bit in ``"q4_1"``, ``"q4q8"``,
``"bfloat16"`` and ``"int4"`` (close only in ``"float32"``, as its verify rows are to steps).
:class:`LeanSession` has ``forward_tree`` and ``keep_path``.

A model is used through a :class:`LeanSession` (one per decoding call or drafter), which has
the interface of :class:`specdec.engine.lm.CachedLM`: ``forward``, ``crop``, ``sync``, ``ids``,
``calls``, ``forward_tree``, ``keep_path``; :func:`specdec.engine.lm.open_lm` picks the right one
for a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from specdec.engine import leannative
from specdec.engine.lm import Session
from specdec.theory.checks import check_int
from specdec.theory.trees import tree_layout

__all__ = [
    "GROUP_SIZE",
    "MODES",
    "NATIVE_MODES",
    "LeanLlama",
    "LeanSession",
    "int4_supported",
]


#: The weight modes, most precise first (the order that breaks ties between equally fast modes):
#: ``"q4_1"`` computes in float32 on the GGUF's own 4-bit values, so its logits equal float32's
#: up to summation order; ``"q4q8"`` rounds the linear layers' inputs to 8 bits per block of 32;
#: ``"bfloat16"`` and ``"int4"`` round activations to bfloat16.
MODES = ("float32", "q4_1", "q4q8", "bfloat16", "int4")
#: The modes run by specdec's C forwards (:mod:`specdec.engine.native`), not by torch.
NATIVE_MODES = ("q4_1", "q4q8")
#: Group size of the int4 code along a weight's input dimension (the GGUF's Q4_1 block).
GROUP_SIZE = 32


def int4_supported() -> bool:
    """True when this torch has the CPU int4 weight-only kernels."""
    ops = torch.ops.aten
    return hasattr(ops, "_convert_weight_to_int4pack_for_cpu") and hasattr(ops, "_weight_int4pack_mm_for_cpu")


@dataclass
class _Linear:
    """One weight matrix (out x in) in a mode: dense, or int4-packed with scales and zeros."""

    weight: torch.Tensor  # dense (N, K), or the packed int4 tensor
    out_features: int
    scales_zeros: torch.Tensor | None = None  # (K / GROUP_SIZE, N, 2) for int4
    # float32 only: the same weight stored (K, N), for one-row inputs. x @ W^T through a
    # contiguous W^T takes BLAS's GEMV path: a float32 step of SmolLM2 took 38 ms instead of
    # 51 on an AVX-512 EPYC (slower from two rows on, so only M = 1); it doubles the memory
    weight_t: torch.Tensor | None = None
    # bfloat16 only: run a one-row input as two equal rows. oneDNN's bf16 kernel for one row
    # sums in another order than its kernel for two or more rows (on an AVX512-BF16 EPYC the
    # down projection's outputs differed in 14 of 120 layer/row checks), while all sizes from
    # two rows on agree; padding makes a decode step the same arithmetic as a verify call
    pad_single: bool = False

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 1:
            if self.weight_t is not None:
                return x @ self.weight_t
            if self.pad_single:
                return F.linear(x.expand(2, -1), self.weight)[:1]
        if self.scales_zeros is None:
            return F.linear(x, self.weight)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.weight, GROUP_SIZE, self.scales_zeros)


def _affine_code(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """The Q4_1 code of a dense (N, K) weight in groups of 32: w = step q + low, q in 0..15 (the
    group's minimum at q = 0, its maximum at q = 15). Returns q (N, K/32, 32) as float, step and
    low (N, K/32), and the largest absolute reconstruction error of the code."""
    w = weight.detach().float()
    n, k = w.shape
    if k % GROUP_SIZE:
        raise ValueError(f"a 4-bit mode needs every input dimension divisible by {GROUP_SIZE}; got {k}")
    groups = w.view(n, k // GROUP_SIZE, GROUP_SIZE)
    low = groups.amin(-1)
    step = (groups.amax(-1) - low) / 15
    safe = torch.where(step > 0, step, torch.ones_like(step))
    q = torch.round((groups - low[..., None]) / safe[..., None]).clamp(0, 15)
    error = float((q * step[..., None] + low[..., None] - groups).abs().max())
    return q, step, low, error


def _symmetric_code(
    weight: torch.Tensor, group: int = GROUP_SIZE
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The Q8_0 code of a dense (N, K) weight in groups of ``group`` (32; K: one code per row):
    w = d q, q in -127..127 with d = max |w| / 127. Returns q (N, K/group, group) as float,
    d (N, K/group) and the largest absolute reconstruction error (0 for a weight that was Q8_0
    already)."""
    w = weight.detach().float()
    n, k = w.shape
    if k % GROUP_SIZE:
        raise ValueError(f"a 4-bit mode needs every input dimension divisible by {GROUP_SIZE}; got {k}")
    groups = w.view(n, k // group, group)
    d = groups.abs().amax(-1) / 127
    safe = torch.where(d > 0, d, torch.ones_like(d))
    q = torch.round(groups / safe[..., None]).clamp(-127, 127)
    error = float((q * d[..., None] - groups).abs().max())
    return q, d, error


def _int4(weight: torch.Tensor, act_dtype: torch.dtype) -> tuple[_Linear, float]:
    """Encode a dense (N, K) weight as int4 in groups of 32 for torch's kernel (the Q4_1 code).

    Returns the packed linear layer and the largest absolute reconstruction error of the
    integer code (before the scales are rounded to ``act_dtype``).
    """
    q, step, low, error = _affine_code(weight)
    n, k = weight.shape
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32).view(n, k), 1)
    # torch's int4 code reads w = (q - 8) * scale + zero, so zero = min + 8 * scale
    scales_zeros = torch.stack([step.t(), (low + 8 * step).t()], dim=-1).contiguous().to(act_dtype)
    return _Linear(packed, n, scales_zeros), error


@dataclass
class _Int8Split:
    """An 8-bit symmetric code in groups of 32 (w = d q, q in -127..127: the GGUF's Q8_0) run as
    two int4 products: q = 16 h + l with h in -8..7 and l in 0..15, so w = (16 d) h + d l, each
    half one call of torch's int4 kernel (which reads w = (q4 - 8) scale + zero). The integers
    are exact; the scales d are rounded to bfloat16 as the kernel needs."""

    high: _Linear
    low: _Linear
    out_features: int

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = self.high(x) + self.low(x)
        return out if out.shape[-1] == self.out_features else out[..., : self.out_features]


def _int8_split(weight: torch.Tensor, act_dtype: torch.dtype) -> tuple[_Int8Split, float]:
    """Encode a dense (N, K) weight as Q8_0 (d = max |w| / 127 per group of 32) in two int4 halves.

    Returns the layer and the largest absolute reconstruction error of the 8-bit code (0 for a
    weight that was Q8_0 already, as SmolLM2's tied embedding is in its GGUF).
    """
    q, d, error = _symmetric_code(weight)
    n, k = weight.shape
    rows = -(-n // 16) * 16  # the packing needs a multiple of 16 output rows: pad with zeros
    q = torch.cat([q, q.new_zeros(rows - n, *q.shape[1:])])
    d = torch.cat([d, d.new_zeros(rows - n, d.shape[1])])
    high = torch.div(q, 16, rounding_mode="floor")
    low = q - 16 * high
    halves = []
    for code, scale, zero in ((high + 8, 16 * d, torch.zeros_like(d)), (low, d, 8 * d)):
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(code.to(torch.int32).view(rows, k), 1)
        scales_zeros = torch.stack([scale.t(), zero.t()], dim=-1).contiguous().to(act_dtype)
        halves.append(_Linear(packed, rows, scales_zeros))
    return _Int8Split(halves[0], halves[1], n), error


@dataclass
class _Q41:
    """A weight in the GGUF's Q4_1 layout for the C forward (``"q4_1"`` mode): per group of 32
    along the input, 16 bytes (low nibbles: elements 0..15, high nibbles: 16..31), a float32
    scale ``d`` and minimum ``m`` (w = d q + m)."""

    qs: torch.Tensor  # (N, K/2) uint8
    d: torch.Tensor  # (N, K/32) float32
    m: torch.Tensor  # (N, K/32) float32
    out_features: int

    def struct(self) -> Any:
        from specdec.engine import native

        n, half = self.qs.shape
        return native.Q41(self.qs.data_ptr(), self.d.data_ptr(), self.m.data_ptr(), n, 2 * half)

    layer_struct = struct


def _q41(weight: torch.Tensor, half_scales: bool = False) -> tuple[_Q41, float]:
    """The Q4_1 code of ``weight``; ``half_scales`` rounds the scales and minimums to IEEE half
    precision (the GGUF's own, which ``"q4q8"`` stores) and reports the error after that rounding."""
    q, step, low, error = _affine_code(weight)
    n, k = weight.shape
    if half_scales:
        step, low = step.half().float(), low.half().float()
        groups = weight.detach().float().view(n, k // GROUP_SIZE, GROUP_SIZE)
        error = float((q * step[..., None] + low[..., None] - groups).abs().max())
    code = q.to(torch.uint8)
    qs = (code[..., :16] | (code[..., 16:] << 4)).contiguous().view(n, k // 2)
    return _Q41(qs, step.contiguous(), low.contiguous(), n), error


@dataclass
class _Q80:
    """A weight in the GGUF's Q8_0 code for the C forward: int8 (N, K), float32 scales (N, K/32)."""

    qs: torch.Tensor
    d: torch.Tensor
    out_features: int

    def struct(self) -> Any:
        from specdec.engine import native

        n, k = self.qs.shape
        return native.Q80(self.qs.data_ptr(), self.d.data_ptr(), n, k)

    def layer_struct(self) -> Any:
        """A decoder layer's entry (leanq8.c's layer_t holds Q4_1 entries; with layer_codes 1 they
        carry Q8_0 codes: int8 (n, k) in qs, scales in d, no minimums)."""
        from specdec.engine import native

        n, k = self.qs.shape
        return native.Q41(self.qs.data_ptr(), self.d.data_ptr(), None, n, k)


def _q80(weight: torch.Tensor, half_scales: bool = False) -> tuple[_Q80, float]:
    q, d, error = _symmetric_code(weight)
    n, k = weight.shape
    if half_scales:  # as _q41
        d = d.half().float()
        groups = weight.detach().float().view(n, k // GROUP_SIZE, GROUP_SIZE)
        error = float((q * d[..., None] - groups).abs().max())
    return _Q80(q.to(torch.int8).view(n, k).contiguous(), d.contiguous(), n), error


def _q80_rows(weight: torch.Tensor) -> tuple[_Q80, float]:
    """A Q8_0 code of ``weight`` that keeps a per-row int8 code: each row's symmetric code
    (d = max |row| / 127) with the row's d, rounded to half precision, in every block of 32.
    Returns the code and the largest absolute error against ``weight`` (for a matrix of int8
    rows, the scales' half-precision rounding alone)."""
    w = weight.detach().float()
    n, k = w.shape
    if k % GROUP_SIZE:
        raise ValueError(f"codes 'q8_0' need every input dimension divisible by {GROUP_SIZE}; got {k}")
    q, d, _ = _symmetric_code(w, group=k)  # one group per row: (n, 1, k) and (n, 1)
    q, d = q.view(n, k), d.view(n).half().float()
    error = float((q * d[:, None] - w).abs().max())
    blocks = d[:, None].expand(n, k // GROUP_SIZE).contiguous()
    return _Q80(q.to(torch.int8).contiguous(), blocks, n), error


def _config_value(config: Any, name: str, default: Any = None) -> Any:
    return getattr(config, name, default)


def _check_supported(config: Any) -> None:
    """Refuse configurations whose forward this module does not implement."""
    if _config_value(config, "model_type") not in ("llama", None):
        raise ValueError(f"LeanLlama implements the Llama architecture; got model_type {config.model_type!r}")
    for flag in ("attention_bias", "mlp_bias"):
        if _config_value(config, flag, False):
            raise ValueError(f"LeanLlama does not implement {flag}=True")
    heads = int(config.num_attention_heads)
    kv = int(_config_value(config, "num_key_value_heads", None) or heads)
    if heads % kv:
        raise ValueError(f"LeanLlama needs num_key_value_heads ({kv}) to divide the heads ({heads})")
    if _config_value(config, "hidden_act", "silu") != "silu":
        raise ValueError(f"LeanLlama implements hidden_act 'silu'; got {config.hidden_act!r}")
    rope = _config_value(config, "rope_parameters") or _config_value(config, "rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if kind != "default":
        raise ValueError(f"LeanLlama implements the default rotary embedding; got rope_type {kind!r}")


def _rope_theta(config: Any) -> float:
    rope = _config_value(config, "rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope:
        return float(rope["rope_theta"])
    return float(_config_value(config, "rope_theta", 10000.0))


class LeanLlama:
    """A Llama causal LM's weights in one mode, and its forward over a preallocated cache.

    Build it from a Hugging Face ``LlamaForCausalLM`` (``LeanLlama(hf_model, mode)``); the
    Hugging Face model is not kept. ``layers`` limits the model to its first layers (an early
    exit, see :meth:`early_exit`). CPU only.
    """

    def __init__(
        self,
        model: Any,
        mode: str = "float32",
        *,
        int8_head: bool | None = None,
        exact_verify: bool = True,
        threads: int | None = None,
        codes: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
        if codes is None:  # a model of int8 rows (the distilled drafts) keeps its codes in q4q8
            codes = "q8_0" if mode == "q4q8" and getattr(model, "int8_rows", False) else "q4_1"
        if codes not in ("q4_1", "q8_0") or (codes == "q8_0" and mode != "q4q8"):
            raise ValueError(
                f"codes must be 'q4_1' or, in mode 'q4q8' only, 'q8_0'; got {codes!r} in mode {mode!r}"
            )
        #: the decoder layers' code in the C forwards: "q4_1" (the GGUF's) or "q8_0" (int8 rows)
        self.codes = codes
        native_mode = mode in NATIVE_MODES
        if int8_head is None:
            int8_head = mode == "int4" or native_mode
        if not isinstance(int8_head, bool):
            raise ValueError(f"int8_head must be True, False or None; got {int8_head!r}")
        if int8_head and mode != "int4" and not native_mode:
            raise ValueError(f"int8_head=True needs mode 'int4', 'q4_1' or 'q4q8'; got mode {mode!r}")
        if native_mode and not int8_head:
            raise ValueError(
                f"mode {mode!r} always runs the LM head as Q8_0; int8_head=False is not available"
            )
        if not isinstance(exact_verify, bool):
            raise ValueError(f"exact_verify must be True or False; got {exact_verify!r}")
        if native_mode and not exact_verify:
            raise ValueError(f"mode {mode!r} is exact by construction; exact_verify=False is not available")
        from specdec.engine import native

        #: threads of the ``"q4q8"`` C forward (default: the cores this process may use); the
        #: other modes run on torch's threads (``torch.set_num_threads``) and q4_1 on one
        self.threads = native.check_threads(threads)
        if native_mode:
            reason = native.unavailable_reason(mode)
            if reason is not None:
                raise ValueError(f"mode {mode!r} needs specdec's C forward, which cannot be built: {reason}")
        #: attention row by row with a step's shapes (True), or one masked call over the block
        #: (False: cheaper for long blocks, but a block's rows then differ from steps' in the
        #: last bits; kept to measure what exactness costs)
        self.exact_verify = exact_verify
        self.int8_head = bool(int8_head)
        if mode == "int4" and not int4_supported():
            raise ValueError("mode 'int4' needs torch's CPU int4 kernels (aten._weight_int4pack_mm_for_cpu)")
        config = model.config
        _check_supported(config)
        if next(model.parameters()).device.type != "cpu":
            raise ValueError("LeanLlama runs on the CPU; move the model to the CPU first")
        self.config = config
        self.mode = mode
        self.dtype = torch.float32 if mode in ("float32", *NATIVE_MODES) else torch.bfloat16
        self.device = torch.device("cpu")
        self.hidden = int(config.hidden_size)
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(_config_value(config, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(_config_value(config, "head_dim", None) or self.hidden // self.heads)
        self.eps = float(config.rms_norm_eps)
        self.max_positions = int(config.max_position_embeddings)
        self.theta = _rope_theta(config)
        self.quantization_error = 0.0
        base = model.model
        dense = mode != "int4"
        self.layers: list[dict[str, Any]] = []
        with torch.no_grad():
            for layer in base.layers:
                att, mlp = layer.self_attn, layer.mlp
                mats = {
                    "qkv": torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]),
                    "o": att.o_proj.weight,
                    "gate_up": torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                    "down": mlp.down_proj.weight,
                }
                entry: dict[str, Any] = {
                    "norm_attn": layer.input_layernorm.weight.detach().to(self.dtype).clone(),
                    "norm_mlp": layer.post_attention_layernorm.weight.detach().to(self.dtype).clone(),
                }
                for name, w in mats.items():
                    if codes == "q8_0":
                        entry[name], err = _q80_rows(w)
                        self.quantization_error = max(self.quantization_error, err)
                    elif native_mode:
                        entry[name], err = _q41(w, half_scales=mode == "q4q8")
                        self.quantization_error = max(self.quantization_error, err)
                    elif dense:
                        entry[name] = _Linear(w.detach().to(self.dtype).contiguous().clone(), w.shape[0])
                        if mode == "float32":
                            entry[name].weight_t = entry[name].weight.t().contiguous()
                        else:
                            entry[name].pad_single = True
                    else:
                        entry[name], err = _int4(w, self.dtype)
                        self.quantization_error = max(self.quantization_error, err)
                self.layers.append(entry)
            self.embed = base.embed_tokens.weight.detach().to(self.dtype).contiguous().clone()
            out_emb = model.get_output_embeddings()
            # a head over a kept vocabulary (specdec.train.draftnets.TrimmedHead: the distilled drafts)
            # gives full-width logits, -inf outside the kept ids
            self.kept = getattr(out_emb, "kept", None)
            head = (out_emb.kept_weight if self.kept is not None else out_emb.weight).detach()
            tied = head.data_ptr() == base.embed_tokens.weight.data_ptr()
            if native_mode:  # the head in Q8_0 (SmolLM2's GGUF stores it so)
                self.head, err = _q80(head, half_scales=mode == "q4q8")
                self.quantization_error = max(self.quantization_error, err)
            elif self.int8_head:  # the head as an 8-bit code in two int4 halves (SmolLM2's Q8_0)
                self.head, err = _int8_split(head, self.dtype)
                self.quantization_error = max(self.quantization_error, err)
            else:
                self.head = _Linear(
                    self.embed if tied else head.to(self.dtype).contiguous().clone(), head.shape[0]
                )
            if mode == "float32":  # one-row steps take the GEMV layout (see _Linear)
                self.head.weight_t = self.head.weight.t().contiguous()
            elif not self.int8_head and not native_mode:  # a dense bf16 head: one kernel for every row count
                self.head.pad_single = True
            self.norm = base.norm.weight.detach().to(self.dtype).clone()
        self.vocab_size = int(out_emb.vocab_size if self.kept is not None else self.head.out_features)
        inv = 1.0 / self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)
        self._inv_freq = inv
        self._cos = self._sin = torch.empty(0)
        self._native: Any = None  # the C forward's model structure ("q4_1"), built on first use
        # the "q4q8" forward's repacked model (native.Q8Forward), built on first use and shared
        # with early-exit views (which run its first layers)
        self._q8: dict[str, Any] = {}

    # -- views ------------------------------------------------------------------------------------

    @property
    def runs_outside_torch(self) -> bool:
        """True in ``"q4q8"``: its forward runs on the C forward's own threads
        (:func:`specdec.engine.cores.torch_threads_for`)."""
        return self.mode == "q4q8"

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def early_exit(self, n_layers: int) -> LeanLlama:
        """A view made of the first ``n_layers`` layers, the final norm and the LM head (shared)."""
        n_layers = check_int("n_layers", n_layers, low=1, high=self.num_layers, note="the model's depth")
        view = object.__new__(LeanLlama)
        view.__dict__.update(self.__dict__)
        self._q8.setdefault("all_layers", self.layers)  # the shared q4q8 forward holds every layer
        view.layers = self.layers[:n_layers]
        view._native = None
        return view

    def session(self) -> LeanSession:
        """A fresh decoding state (its own KV cache) over this model."""
        return LeanSession(self)

    def weight_bytes(self) -> int:
        """Bytes of the weights one forward call reads (packed int4 counted as stored)."""
        heads = [self.head.high, self.head.low] if isinstance(self.head, _Int8Split) else [self.head]
        tensors = [self.norm]
        for lin in heads:
            if isinstance(lin, _Q80):
                tensors += [lin.qs, lin.d]
                continue
            tensors.append(lin.weight)
            if lin.scales_zeros is not None:
                tensors.append(lin.scales_zeros)
        for entry in self.layers:
            for value in entry.values():
                if isinstance(value, _Q41):
                    tensors += [value.qs, value.d, value.m]
                elif isinstance(value, _Linear):
                    tensors.append(value.weight)
                    if value.scales_zeros is not None:
                        tensors.append(value.scales_zeros)
                else:
                    tensors.append(value)
        return sum(t.numel() * t.element_size() for t in tensors)

    # -- the forward ------------------------------------------------------------------------------

    def _rotary(self, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos.shape[0] < end:
            size = min(self.max_positions, max(end, 2 * self._cos.shape[0], 256))
            angles = torch.outer(torch.arange(size, dtype=torch.float32), self._inv_freq)
            angles = torch.cat([angles, angles], dim=-1)
            sign = torch.ones(self.head_dim)
            sign[: self.head_dim // 2] = -1.0  # rotate_half's negated half, folded into sin
            self._cos, self._sin = angles.cos().to(self.dtype), (angles.sin() * sign).to(self.dtype)
        return self._cos, self._sin

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm computed in float32 (as transformers does), then cast and scaled."""
        return F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(self.dtype) * weight

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotary embedding, transformers' convention: x cos + rotate_half(x) sin, where
        rotate_half(x) = (-x2, x1) = roll(x, half) with the first half's sign flipped; that
        sign is folded into ``sin`` (see :meth:`_rotary`)."""
        return x * cos + x.roll(self.head_dim // 2, dims=-1) * sin

    def _attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, end: int) -> torch.Tensor:
        """One query row's attention over cached positions ``0 .. end-1``: (1, heads * head_dim).

        One fused call (torch's scaled_dot_product_attention, grouped-query heads without
        repeating keys), in float32: the cache is float32 in every mode (small, and CPU bf16
        attention is slow). A verify call runs this once per row with the very shapes of a
        one-token step, so that its rows equal the steps' bit for bit (matmuls of different
        shapes sum in different orders; see the module docstring).
        """
        kv, hd = self.kv_heads, self.head_dim
        out = F.scaled_dot_product_attention(
            q.reshape(1, self.heads, 1, hd).float(),
            keys[None, :, :end],
            values[None, :, :end],
            enable_gqa=kv != self.heads,
        )
        return out.reshape(1, self.heads * hd)

    def verify_matches_steps(self, k: int = 5, context: int = 16, seed: int = 0) -> bool:
        """True when one call over ``k`` tokens gives logits equal, bit for bit, to ``k`` steps, measured on
        the running machine (kernels differ between CPUs), on random token ids after a prefill of ``context``
        tokens; the cache is restored afterwards."""
        k, context = check_int("k", k, low=2), check_int("context", context, low=1)
        ids = torch.randint(0, self.vocab_size, (context + k,), generator=torch.Generator().manual_seed(seed))
        cache = self.new_cache(context + k)
        self.forward(ids[:context], 0, cache)
        block = self.forward(ids[context:], context, cache.clone())
        steps = [self.forward(ids[context + i : context + i + 1], context + i, cache) for i in range(k)]
        return torch.equal(block, torch.cat(steps))

    def _attend_block(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int
    ) -> torch.Tensor:
        """All k query rows in one causal-masked call (``exact_verify=False``): (k, heads * head_dim)."""
        k, hd = q.shape[0], self.head_dim
        end = start + k
        mask = torch.ones(k, end, dtype=torch.bool).tril(start)  # query i sees keys 0 .. start + i
        out = F.scaled_dot_product_attention(
            q.reshape(k, self.heads, hd).transpose(0, 1)[None].float(),
            keys[None, :, :end],
            values[None, :, :end],
            attn_mask=mask,
            enable_gqa=self.kv_heads != self.heads,
        )  # (1, heads, k, hd)
        return out[0].transpose(0, 1).reshape(k, self.heads * hd)

    @torch.inference_mode()
    def forward(
        self,
        ids: torch.Tensor,
        start: int,
        cache: torch.Tensor,
        keep: int | None = None,
        parents: Any = None,
        *,
        embeds: torch.Tensor | None = None,
        features: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits (float32) of the tokens ``ids`` (1-D) placed at positions ``start ..``.

        ``cache`` is a (layers, 2, kv_heads, capacity, head_dim) tensor holding keys and
        values of positions ``0 .. start-1``; this call writes those of the new tokens.
        Returns (len(ids), V), or the last ``keep`` rows.

        ``parents`` (one integer per token, ``parents[r]`` in ``[-1, r - 1]``, -1 for a child of the
        cached prefix) makes the call a tree (:func:`specdec.theory.trees.tree_layout`): token r
        is written at slot ``start + r``, placed at position ``start + depth(r)``, and attends to the
        prefix and its ancestors with the shapes of the chain forward over its path, so its logits
        equal that chain's bit for bit in ``"q4_1"``, ``"q4q8"``, ``"bfloat16"`` and ``"int4"`` (a tree
        attends row by row whatever ``exact_verify``), and closely in ``"float32"`` (as its verify rows
        equal steps). None: a chain.

        ``embeds`` (len(ids), hidden) float32 replaces ``self.embed[ids]`` (``ids`` still given, checked;
        EAGLE's draft layer); ``features``, a (len(ids), hidden) float32 tensor, receives every row's
        residual after the layers and before the final norm (whatever ``keep``). Both need mode
        ``"q4q8"`` or a torch mode (:func:`specdec.engine.leannative.check_extras`).
        """
        tree = None if parents is None else tree_layout(parents, int(ids.shape[0]))
        embeds = leannative.check_extras(self, ids, embeds, features)
        if self.mode in NATIVE_MODES:
            out = leannative.native_forward(self, ids, start, cache, keep, tree, embeds, features)
            return self._full_logits(out)
        k = int(ids.shape[0])
        end = start + k
        cos_all, sin_all = self._rotary(end)
        if tree is None:
            cos, sin = cos_all[start:end, None, :], sin_all[start:end, None, :]
        else:
            positions = torch.tensor(tree.positions(start), dtype=torch.long)
            cos, sin = cos_all[positions, None, :], sin_all[positions, None, :]
        kv, hd = self.kv_heads, self.head_dim
        slots = None if tree is None else [torch.tensor(tree.keys(start, i)) for i in range(k)]
        x = self.embed[ids] if embeds is None else embeds.to(self.dtype).clone()  # new: adds in place
        for layer, entry in enumerate(self.layers):
            h = self._rms(x, entry["norm_attn"])
            qk, value = entry["qkv"](h).split([(self.heads + kv) * hd, kv * hd], dim=-1)
            qk = self._rotate(qk.view(k, self.heads + kv, hd), cos, sin)  # queries and keys at once
            q, key = qk[:, : self.heads], qk[:, self.heads :]
            cache[layer, 0, :, start:end] = key.transpose(0, 1)
            cache[layer, 1, :, start:end] = value.view(k, kv, hd).transpose(0, 1)
            keys, values = cache[layer, 0], cache[layer, 1]
            if tree is not None:  # node i over the prefix and its path: a step's shapes, so its bits
                rows = [self._attend(q[i], keys[:, s], values[:, s], len(s)) for i, s in enumerate(slots)]
                out = torch.cat(rows).to(self.dtype)
            elif self.exact_verify or k == 1:
                # row i attends to positions 0 .. start + i exactly as a one-token step there would
                rows = [self._attend(q[i], keys, values, start + i + 1) for i in range(k)]
                out = (rows[0] if k == 1 else torch.cat(rows)).to(self.dtype)
            else:
                out = self._attend_block(q, keys, values, start).to(self.dtype)
            x.add_(entry["o"](out))
            gate, up = entry["gate_up"](self._rms(x, entry["norm_mlp"])).chunk(2, dim=-1)
            x.add_(entry["down"](F.silu(gate) * up))
        if features is not None:
            features.copy_(x)
        if keep is not None:
            x = x[-keep:]
        return self._full_logits(self.head(self._rms(x, self.norm)).float())

    def _full_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """A kept-vocabulary head's logits widened to the full vocabulary (-inf elsewhere)."""
        if self.kept is None:
            return logits
        full = logits.new_full((logits.shape[0], self.vocab_size), float("-inf"))
        full[:, self.kept] = logits
        return full

    def q8_forward(self) -> Any:
        """The ``"q4q8"`` C forward's repacked model (:class:`specdec.engine.native.Q8Forward`), built on
        first use over the whole model (an early-exit view shares it and runs its first layers)."""
        return leannative.q8_forward(self)

    def new_cache(self, capacity: int) -> torch.Tensor:
        """An empty KV cache for ``capacity`` positions (float32 in every mode)."""
        return torch.zeros(self.num_layers, 2, self.kv_heads, capacity, self.head_dim, dtype=torch.float32)


class LeanSession(Session):
    """A :class:`LeanLlama` plus the KV cache of the tokens it has seen (CachedLM's interface).

    The cache starts at 256 positions and doubles when full (or grows at once: :meth:`reserve`), up to
    the model's ``max_position_embeddings``; feeding past that raises ValueError. With ``record_features``
    set, :meth:`forward` and :meth:`forward_tree` leave in ``features`` the (n, hidden) float32
    residuals before the final norm of the call's rows (every row, whatever ``keep``): a view of the
    session's feature buffer at the call's cache slots, so it stays as it is until a later call writes
    those slots (one at or below them after a :meth:`crop`; copy it to keep it longer); a grown cache or a
    reset makes a fresh buffer (views of the old one stay valid). A native mode's call runs no torch
    operation but wrapping the logits (:func:`specdec.engine.leannative.native_logits`; a kept-vocabulary
    head's widening aside). Setting ``cache`` (a property) keeps its numpy view, the C forward's, with it.
    """

    def __init__(self, model: LeanLlama) -> None:
        self.model = model
        self.device, self.dtype = model.device, model.dtype
        self.vocab_size = model.vocab_size
        self.calls = 0
        self.record_features, self.features = False, None
        self.reset()

    def _run(self, ids: list[int], start: int, keep: Any, tree: Any, embeds: Any) -> torch.Tensor:
        model, out = self.model, None
        if self.record_features:  # the call's slots of the feature buffer, filled when made (its pages
            capacity = self._cache_np.shape[3]  # touched here, not under the C forward); a grown one anew
            if self._feats is None or self._feats.shape[0] < capacity:
                self._feats = np.empty((capacity, model.hidden), np.float32)
                self._feats.fill(0.0)
            out = self._feats[start : start + len(ids)]
        self.features = out
        if model.mode in NATIVE_MODES:  # numpy only between two C forwards (leannative.native_logits)
            logits = leannative.native_logits(model, ids, start, self._cache_np, keep, tree, embeds, out)
            return model._full_logits(torch.from_numpy(logits))
        feats, embeds = (None if x is None else torch.as_tensor(x) for x in (out, embeds))  # out's memory
        parents, ids_t = None if tree is None else tree.parents, torch.tensor(ids)
        return model.forward(ids_t, start, self.cache, keep, parents, embeds=embeds, features=feats)

    def reset(self) -> None:
        self.ids: list[int] = []
        self.cache = self.model.new_cache(min(256, self.model.max_positions))
        self._tree_call = None
        self._feats: np.ndarray | None = None

    @property
    def cache(self) -> torch.Tensor:
        return self._cache

    @cache.setter
    def cache(self, cache: torch.Tensor) -> None:  # replaced with the C forward's numpy view of it
        self._cache, self._cache_np = cache, cache.numpy()

    def reserve(self, n: int) -> None:
        """Room for ``n`` positions now, at most the model's (:meth:`Session.reserve`)."""
        self._reserve(min(check_int("n", n, low=0), self.model.max_positions), exact=True)

    def _reserve(self, end: int, *, exact: bool = False) -> None:  # exact: to ``end``, not twice the size
        if end > self.model.max_positions:
            raise ValueError(
                f"the sequence would reach {end} tokens; the model's max_position_embeddings is "
                f"{self.model.max_positions}"
            )
        capacity = self._cache_np.shape[3]  # numpy's: no torch operation in a step
        if end > capacity:
            size = end if exact else min(self.model.max_positions, max(end, 2 * capacity))
            new = self.model.new_cache(size)
            new[:, :, :, : len(self.ids)] = self.cache[:, :, :, : len(self.ids)]
            self.cache = new

    def forward(self, new_ids: Sequence[int], keep: int | None = None, *, embeds: Any = None) -> torch.Tensor:
        """Feed ``new_ids`` after the cached tokens in one call; float32 logits (n, V), or the last ``keep``
        rows. ``embeds``: (n, hidden) float32 rows in place of the tokens' embeddings."""
        self._check_forward(new_ids, keep)
        return self._feed(new_ids, len(self.ids), keep, None, embeds)

    def _feed(self, new_ids: Sequence[int], start: int, keep: Any, tree: Any, embeds: Any) -> torch.Tensor:
        self._reserve(start + len(new_ids))
        ids = [int(t) for t in new_ids]
        logits = self._run(ids, start, keep, tree, embeds)
        self.calls += 1
        self.ids.extend(int(t) for t in new_ids)
        return logits

    def forward_tree(
        self, new_ids: Sequence[int], parents: Sequence[int], *, embeds: Any = None
    ) -> torch.Tensor:
        """Feed a tree of ``n`` tokens after the cached ones in one call (``parents[r]`` in ``[-1, r - 1]``,
        -1: a child of the last cached token); float32 logits (n, V), row r equal bit for bit to the
        chain forward over r's path (every mode but ``"float32"``, where it is close: see
        :meth:`LeanLlama.forward`). The nodes take slots ``len(ids) ..`` and ``ids`` becomes the prefix
        and every node: follow with :meth:`keep_path` (or :meth:`crop`). ``embeds``: as :meth:`forward`."""
        tree = tree_layout(parents, self._check_forward(new_ids, None))  # refused before the cache grows
        start = len(self.ids)
        logits = self._feed(new_ids, start, None, tree, embeds)
        self._tree_call = (start, list(tree.parents))
        return logits

    def keep_path(self, start: int, nodes: Sequence[int]) -> None:
        """After a tree call at ``start``, keep only the call's nodes ``nodes`` (ascending call indices, a
        root-down chain such as [0, 2, 5]): their keys and values (every layer) move to slots ``start,
        start + 1, ...`` and the cache ends after them, as if the chain had been fed."""
        nodes = self._check_keep_path(start, nodes)
        index = torch.tensor([start + i for i in nodes], dtype=torch.long)
        self.cache[:, :, :, start : start + len(nodes)] = self.cache[:, :, :, index]
        self.ids[start:] = [self.ids[start + i] for i in nodes]
        self._tree_call = None

    def crop(self, n: int) -> None:
        """Keep the first ``n`` cached tokens (later slots are simply overwritten)."""
        self._check_crop(n)
        del self.ids[n:]
