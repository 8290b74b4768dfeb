"""What one forward of a Llama-shaped model costs, by the roofline model: pure arithmetic, no torch.

A decode step reads every weight once to produce one token; a verify call over k tokens reads
them once too, and does k times the arithmetic. The roofline model turns that into times:
a call takes at least ``bytes / bandwidth`` and at least ``flops / throughput``, and the
larger of the two is its prediction. Below the *ridge point* (FLOPs per byte =
throughput / bandwidth) a call is bound by memory and more tokens per call are nearly free;
above it they cost in proportion.

* :func:`step_cost` -- the bytes moved and the FLOPs of one forward over k new tokens per
  sequence on a KV cache of ``context`` tokens, for a Llama-shaped config, per part
  (embedding, attention projections, attention over the cache, MLP, norms, LM head) and per
  weight format (:data:`WEIGHT_FORMATS`: float32, bfloat16, int8, int4 group-32, GGUF blocks).
* :func:`predict_step_time` -- the roofline time of such a forward and the bound that sets it;
  :func:`predict_verify_curve` -- the predicted T(k)/T(1).

A *roofline entry*, what the predictions take, is a dict with ``bandwidth_gbps`` (a number)
and ``peak_gflops`` (dtype name -> number). The running machine's entries are measured by
:func:`specdec.measure.roofline.machine_roofline` (one per thread count under ``"rooflines"``);
a hand-made one (another machine's published numbers, a GPU's from
:func:`specdec.measure.device.device_roofline`) works as well.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specdec.theory.checks import check_float, check_int

__all__ = [
    "GB",
    "WEIGHT_FORMATS",
    "WEIGHT_PARTS",
    "WeightFormat",
    "predict_step_time",
    "predict_verify_curve",
    "step_cost",
]

GB = 1e9  # bytes per GB: bandwidths are in GB/s = 1e9 bytes per second


def _check_positive(name: str, value: Any) -> float:
    return check_float(name, value, low=0, open_low=True)


def _roofline_entry(roofline: Mapping[str, Any], threads: int | None) -> Mapping[str, Any]:
    """The entry for ``threads`` from a measured roofline (``"rooflines"``), or ``roofline`` itself."""
    if not isinstance(roofline, Mapping):
        raise ValueError(f"roofline must be a mapping; got {type(roofline).__name__}")
    if "rooflines" in roofline:
        entries = list(roofline["rooflines"])
        available = [e["threads"] for e in entries]
        if threads is None:
            if len(entries) != 1:
                raise ValueError(f"threads must name one of the measured thread counts {available}; got None")
            return entries[0]
        for e in entries:
            if e["threads"] == threads:
                return e
        raise ValueError(f"threads must be one of the measured thread counts {available}; got {threads!r}")
    if "bandwidth_gbps" not in roofline or "peak_gflops" not in roofline:
        raise ValueError("roofline must hold 'bandwidth_gbps' and 'peak_gflops' (or 'rooflines')")
    return roofline


# --------------------------------------------------------------------------- weight formats
@dataclass(frozen=True)
class WeightFormat:
    """How a weight matrix is stored: bits per weight plus scale bytes per group of weights.

    Groups run along the input dimension of each output row; ``group_size`` None means one
    group per row (per-channel scales).
    """

    name: str
    bits: float
    group_size: int | None
    group_bytes: float
    description: str

    def matrix_bytes(self, out_features: int, in_features: int) -> float:
        """Bytes of an ``out_features`` x ``in_features`` weight (nn.Linear layout) in this format."""
        groups_per_row = 1 if self.group_size is None else -(-in_features // self.group_size)
        return out_features * (in_features * self.bits / 8 + groups_per_row * self.group_bytes)

    def bytes_per_param(self, in_features: int) -> float:
        """Average bytes per weight for rows of ``in_features`` weights."""
        return self.matrix_bytes(1, in_features) / in_features


#: Weight formats by name. int4 is torch's CPU int4 weight-only layout with group size 32
#: (``_weight_int4pack_mm_for_cpu``: a bf16 scale and a bf16 zero per group, 0.5 + 4/32 =
#: 0.625 bytes per weight); int8 is ``_weight_int8pack_mm`` (one bf16 scale per output row);
#: q4_0, q4_1 and q8_0 are GGUF's blocks of 32 (fp16 scale; q4_1 adds an fp16 minimum);
#: q4_1_f32 and q8_0_f32 are the same codes with float32 scales (and minimums), as the lean
#: engine's ``"q4_1"`` mode stores them for its C forward.
WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("float32", 32, None, 0, "IEEE float32, 4 bytes"),
        WeightFormat("bfloat16", 16, None, 0, "bfloat16, 2 bytes"),
        WeightFormat("float16", 16, None, 0, "float16, 2 bytes"),
        WeightFormat("int8", 8, None, 2, "int8 per output channel + one bf16 scale per row"),
        WeightFormat("int4", 4, 32, 4, "int4 in groups of 32 + bf16 scale and bf16 zero per group"),
        WeightFormat("q4_0", 4, 32, 2, "GGUF Q4_0: blocks of 32 4-bit weights + fp16 scale (18 bytes)"),
        WeightFormat("q4_1", 4, 32, 4, "GGUF Q4_1: blocks of 32 4-bit weights + fp16 scale, min (20 bytes)"),
        WeightFormat("q8_0", 8, 32, 2, "GGUF Q8_0: blocks of 32 int8 weights + fp16 scale (34 bytes)"),
        WeightFormat("q4_1_f32", 4, 32, 8, "Q4_1 codes + float32 scale, minimum per block of 32 (24 bytes)"),
        WeightFormat("q8_0_f32", 8, 32, 4, "Q8_0 codes + float32 scale per block of 32 (36 bytes)"),
    )
}

#: The parts of a forward that hold weights, as :func:`step_cost` names them.
WEIGHT_PARTS = ("embedding", "attention", "mlp", "lm_head")


def _weight_format(value: Any, name: str = "weight_format") -> WeightFormat:
    if isinstance(value, WeightFormat):
        return value
    if isinstance(value, str):
        if value in WEIGHT_FORMATS:
            return WEIGHT_FORMATS[value]
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        if math.isfinite(value) and value > 0:
            return WeightFormat(
                f"{float(value):g} bytes", 8 * float(value), None, 0, "bytes per weight, given"
            )
    raise ValueError(
        f"{name} must be one of {', '.join(map(repr, WEIGHT_FORMATS))}, a number of bytes per "
        f"weight > 0, or a mapping of {', '.join(WEIGHT_PARTS)} (or 'default') to those; got {value!r}"
    )


def _formats(weight_format: Any) -> dict[str, WeightFormat]:
    if isinstance(weight_format, Mapping):
        unknown = set(weight_format) - {*WEIGHT_PARTS, "default"}
        if unknown:
            raise ValueError(
                f"weight_format keys must be among {', '.join(WEIGHT_PARTS)}, 'default'; "
                f"got {sorted(unknown)}"
            )
        out = {}
        for part in WEIGHT_PARTS:
            if part in weight_format:
                out[part] = _weight_format(weight_format[part], f"weight_format[{part!r}]")
            elif "default" in weight_format:
                out[part] = _weight_format(weight_format["default"], "weight_format['default']")
            else:
                raise ValueError(f"weight_format must give a format for {part!r} (or a 'default')")
        return out
    fmt = _weight_format(weight_format)
    return dict.fromkeys(WEIGHT_PARTS, fmt)


# --------------------------------------------------------------------------- model accounting
_CONFIG_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
)


def _shapes(config: Any) -> dict[str, Any]:
    """The Llama shape fields of a transformers config or a plain mapping, checked."""

    def get(key: str, default: Any = None) -> Any:
        if isinstance(config, Mapping):
            return config.get(key, default)
        return getattr(config, key, default)

    out: dict[str, Any] = {}
    for key in _CONFIG_FIELDS:
        value = get(key)
        if value is None:
            raise ValueError(f"config must give {key} (an integer >= 1)")
        out[key] = check_int(f"config {key}", value, low=1)
    heads = out["num_attention_heads"]
    kv = get("num_key_value_heads")
    out["num_key_value_heads"] = (
        heads if kv is None else check_int("config num_key_value_heads", kv, low=1, high=heads)
    )
    if heads % out["num_key_value_heads"]:
        raise ValueError(
            f"config num_key_value_heads must divide num_attention_heads ({heads}); "
            f"got {out['num_key_value_heads']}"
        )
    head_dim = get("head_dim")
    if head_dim is None:
        if out["hidden_size"] % heads:
            raise ValueError(
                f"config hidden_size ({out['hidden_size']}) must be a multiple of num_attention_heads "
                f"({heads}) when head_dim is not given"
            )
        head_dim = out["hidden_size"] // heads
    out["head_dim"] = check_int("config head_dim", head_dim, low=1)
    out["tie_word_embeddings"] = bool(get("tie_word_embeddings", False))
    return out


def _default_activation_bytes(formats: Mapping[str, WeightFormat]) -> float:
    """4 (float32 activations) when the layers' weights are float32, else 2 (bf16/fp16)."""
    return 4.0 if formats["mlp"].bits >= 32 else 2.0


def step_cost(
    config: Any,
    *,
    k: int = 1,
    context: int,
    batch: int = 1,
    weight_format: str | float | Mapping[str, str | float] = "float32",
    activation_bytes: float | None = None,
    kv_bytes: float | None = None,
) -> dict[str, Any]:
    """Bytes moved and FLOPs of one forward over ``k`` new tokens per sequence, by part.

    ``config``: a transformers ``LlamaConfig`` (or any config with the same fields) or a
    mapping with ``hidden_size``, ``intermediate_size``, ``num_hidden_layers``,
    ``num_attention_heads``, ``num_key_value_heads`` (default: the heads), ``vocab_size``,
    ``tie_word_embeddings`` (default False) and optionally ``head_dim`` (default hidden /
    heads). A Llama layer: q, k, v, o projections and a gated MLP (gate, up, down), no biases,
    two RMSNorms; one final norm; an embedding table and an LM head (the same matrix if tied).

    ``context`` tokens are already in the KV cache; the call feeds ``k`` more per sequence for
    ``batch`` sequences (``tokens = k * batch``). ``weight_format``: a name in
    :data:`WEIGHT_FORMATS`, bytes per weight as a number, or a mapping from the parts
    ``embedding``, ``attention``, ``mlp``, ``lm_head`` (or ``default``) to those; a tied
    embedding is stored as the LM head is. ``activation_bytes`` (default: 4 when the MLP
    weights are float32, else 2) and ``kv_bytes`` (default: the activations') are bytes per
    value.

    What is counted, per part (``parts[name]`` has ``params``, ``weight_bytes``,
    ``kv_bytes``, ``activation_bytes``, ``bytes`` = their sum, ``flops``):

    * weights are read once per call, whatever ``k`` and ``batch`` (they are reused across
      the tokens of the call), except the embedding, whose lookup reads only ``tokens`` rows;
      the LM head reads its whole vocab x hidden matrix;
    * matmul FLOPs are 2 x weights x tokens (``attention_projections``, ``mlp``, ``lm_head``);
    * ``attention_cache``: per layer and sequence, the K and V of ``context + k`` positions
      read and of ``k`` positions written; FLOPs 4 x heads x head_dim per (query, key) pair
      (scores and weighted sum) over the causal pairs, ``k * context + k (k + 1) / 2``;
    * activations: each matmul reads its input rows and writes its output rows once (logits
      included); norms read their weights. Elementwise work (norms, rotary, SiLU, residual
      adds, softmax) is not counted in FLOPs: O(hidden) per token, far below the matmuls.

    Totals: ``bytes``, ``flops``, ``weight_bytes``, ``kv_bytes``, ``activation_bytes``,
    ``intensity_flop_per_byte``; ``weight_format`` and ``bytes_per_weight`` per weight part,
    ``activation_bytes_per_value``, ``kv_bytes_per_value``; ``matmul_params`` (weights
    multiplied per token, the LM head included) and ``params`` (distinct parameters, a tied
    matrix once, as a model's ``num_parameters()`` counts them).
    """
    s = _shapes(config)
    k = check_int("k", k, low=1)
    context = check_int("context", context, low=0)
    batch = check_int("batch", batch, low=1)
    formats = _formats(weight_format)
    if s["tie_word_embeddings"]:
        formats["embedding"] = formats["lm_head"]
    act = (
        _default_activation_bytes(formats)
        if activation_bytes is None
        else _check_positive("activation_bytes", activation_bytes)
    )
    kvb = act if kv_bytes is None else _check_positive("kv_bytes", kv_bytes)

    d, inter, layers = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"]
    heads, kv_heads, hd, vocab = (
        s["num_attention_heads"],
        s["num_key_value_heads"],
        s["head_dim"],
        s["vocab_size"],
    )
    tokens = k * batch
    q_dim, kv_dim = heads * hd, kv_heads * hd

    def matmuls(fmt: WeightFormat, shapes: Sequence[tuple[int, int]], count: int) -> dict[str, float]:
        """``count`` copies of nn.Linear weights of the given (out, in) shapes, fed ``tokens`` rows."""
        params = count * sum(o * i for o, i in shapes)
        return {
            "params": params,
            "weight_bytes": count * sum(fmt.matrix_bytes(o, i) for o, i in shapes),
            "kv_bytes": 0.0,
            "activation_bytes": count * tokens * act * sum(o + i for o, i in shapes),
            "flops": 2.0 * params * tokens,
        }

    attn_shapes = [(q_dim, d), (kv_dim, d), (kv_dim, d), (d, q_dim)]
    mlp_shapes = [(inter, d), (inter, d), (d, inter)]
    pairs = k * context + k * (k + 1) // 2
    parts: dict[str, dict[str, float]] = {
        "embedding": {
            "params": vocab * d,
            "weight_bytes": tokens * formats["embedding"].matrix_bytes(1, d),
            "kv_bytes": 0.0,
            "activation_bytes": tokens * d * act,
            "flops": 0.0,
        },
        "attention_projections": matmuls(formats["attention"], attn_shapes, layers),
        "attention_cache": {
            "params": 0,
            "weight_bytes": 0.0,
            "kv_bytes": layers * batch * 2 * kv_dim * kvb * ((context + k) + k),
            "activation_bytes": layers * tokens * 2 * q_dim * act,
            "flops": 4.0 * layers * batch * heads * hd * pairs,
        },
        "mlp": matmuls(formats["mlp"], mlp_shapes, layers),
        "norm": {
            "params": (2 * layers + 1) * d,
            "weight_bytes": (2 * layers + 1) * d * act,
            "kv_bytes": 0.0,
            "activation_bytes": (2 * layers + 1) * tokens * 2 * d * act,
            "flops": 0.0,
        },
        "lm_head": matmuls(formats["lm_head"], [(vocab, d)], 1),
    }
    for part in parts.values():
        part["bytes"] = part["weight_bytes"] + part["kv_bytes"] + part["activation_bytes"]
    total = {
        key: sum(p[key] for p in parts.values()) for key in ("weight_bytes", "kv_bytes", "activation_bytes")
    }
    nbytes = sum(p["bytes"] for p in parts.values())
    flops = sum(p["flops"] for p in parts.values())
    distinct = sum(p["params"] for p in parts.values()) - (vocab * d if s["tie_word_embeddings"] else 0)
    return {
        "config": s,
        "k": k,
        "context": context,
        "batch": batch,
        "tokens": tokens,
        "weight_format": {p: f.name for p, f in formats.items()},
        "bytes_per_weight": {
            "embedding": formats["embedding"].bytes_per_param(d),
            "attention": parts["attention_projections"]["weight_bytes"]
            / parts["attention_projections"]["params"],
            "mlp": parts["mlp"]["weight_bytes"] / parts["mlp"]["params"],
            "lm_head": parts["lm_head"]["weight_bytes"] / parts["lm_head"]["params"],
        },
        "activation_bytes_per_value": act,
        "kv_bytes_per_value": kvb,
        "parts": parts,
        "bytes": nbytes,
        "flops": flops,
        **total,
        "intensity_flop_per_byte": flops / nbytes,
        "matmul_params": sum(parts[p]["params"] for p in ("attention_projections", "mlp", "lm_head")),
        "params": distinct,
    }


# --------------------------------------------------------------------------- predictions
def predict_step_time(
    cost: Mapping[str, Any],
    roofline: Mapping[str, Any],
    dtype: str = "float32",
    *,
    threads: int | None = None,
) -> dict[str, Any]:
    """The roofline time of a forward: max(bytes / bandwidth, FLOPs / throughput), in seconds.

    ``cost`` is a :func:`step_cost` result; ``roofline`` a roofline entry (``bandwidth_gbps``,
    ``peak_gflops[dtype]``) or :func:`specdec.measure.roofline.machine_roofline`'s result, in which
    case ``threads`` picks the entry (required when it holds several). ``dtype`` is the dtype the matmuls run
    in (int4 weights with bf16 activations compute in bfloat16). ``bound`` is ``"memory"``
    when the bytes take longer, i.e. when the call's FLOPs per byte fall below the ridge
    point, else ``"compute"``. ``parts_s`` gives each part's own roofline time (their sum is
    at least ``time_s``: a part may be bound differently from the whole). A lower bound: real
    kernels reach neither roof, and framework overhead comes on top.
    """
    entry = _roofline_entry(roofline, threads)
    for key in ("bytes", "flops", "parts"):
        if key not in cost:
            raise ValueError(f"cost must be a step_cost result (missing {key!r})")
    peaks = entry["peak_gflops"]
    if dtype not in peaks:
        raise ValueError(
            f"dtype must be one of the roofline's dtypes {', '.join(map(repr, peaks))}; got {dtype!r}"
        )
    bandwidth = _check_positive("roofline bandwidth_gbps", entry["bandwidth_gbps"]) * GB
    throughput = _check_positive(f"roofline peak_gflops[{dtype!r}]", peaks[dtype]) * GB
    memory_s = cost["bytes"] / bandwidth
    compute_s = cost["flops"] / throughput
    return {
        "time_s": max(memory_s, compute_s),
        "memory_time_s": memory_s,
        "compute_time_s": compute_s,
        "bound": "memory" if memory_s >= compute_s else "compute",
        "intensity_flop_per_byte": cost["flops"] / cost["bytes"],
        "ridge_flop_per_byte": throughput / bandwidth,
        "parts_s": {
            name: max(p["bytes"] / bandwidth, p["flops"] / throughput) for name, p in cost["parts"].items()
        },
        "dtype": dtype,
        "threads": entry.get("threads"),
        "bandwidth_gbps": bandwidth / GB,
        "peak_gflops": throughput / GB,
    }


def predict_verify_curve(
    config: Any,
    ks: Iterable[int],
    roofline: Mapping[str, Any],
    *,
    dtype: str = "float32",
    context: int,
    batch: int = 1,
    weight_format: str | float | Mapping[str, str | float] | None = None,
    activation_bytes: float | None = None,
    kv_bytes: float | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """The roofline's T(k)/T(1): the predicted cost of a verify call over k tokens per decode step.

    For each k in ``ks`` (e.g. ``range(1, 33)``; k = 1 is always computed), T(k) is
    :func:`predict_step_time` of :func:`step_cost` with that k. ``weight_format`` defaults to
    ``dtype``. While the call stays memory-bound, T(k)/T(1) grows only by the extra
    activation and KV bytes; past the ridge it grows like k. ``knee_k`` is the first k
    predicted compute-bound (None if none is).
    """
    ks = tuple(check_int("each k in ks", k, low=1) for k in ks)
    if not ks:
        raise ValueError("ks must hold at least one k >= 1")
    fmt = dtype if weight_format is None else weight_format

    def predict(k: int) -> dict[str, Any]:
        cost = step_cost(
            config,
            k=k,
            context=context,
            batch=batch,
            weight_format=fmt,
            activation_bytes=activation_bytes,
            kv_bytes=kv_bytes,
        )
        return predict_step_time(cost, roofline, dtype, threads=threads)

    one = predict(1)
    ordered = sorted(set(ks))
    preds = [predict(k) for k in ordered]
    knee = next((k for k, p in zip(ordered, preds, strict=True) if p["bound"] == "compute"), None)
    return {
        "ks": ordered,
        "times_s": [p["time_s"] for p in preds],
        "ratios": [p["time_s"] / one["time_s"] for p in preds],
        "bounds": [p["bound"] for p in preds],
        "knee_k": knee,
        "t1_s": one["time_s"],
        "dtype": dtype,
        "context": context,
        "batch": batch,
        "threads": one["threads"],
        "ridge_flop_per_byte": one["ridge_flop_per_byte"],
    }
