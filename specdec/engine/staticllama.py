"""Real weights on a GPU (issue #23), the engine: a static-cache Llama forward with CUDA graphs.

:class:`StaticLlama` is a Llama forward in plain torch over a preallocated,
position-indexed KV cache of fixed capacity: the position is a device tensor, the new keys and
values are written with ``index_copy_``, and attention runs over the whole capacity with a
causal mask, so a call over k tokens has the same shapes at every position. That makes each
call shape capturable as a CUDA graph (:meth:`StaticLlama.capture`, one graph per k, replayed
after copying the token ids and the position into static buffers); the eager engine runs the
very same code without the graph (same kernels, launched from Python), so eager and graph
times compare launch overhead and nothing else. Early exits (:meth:`StaticLlama.early_exit`, one view
per depth) and the distilled drafts (:func:`distilled_draft`, read from their safetensors file by
:func:`read_safetensors`) are engines of the same class sharing the
target's weights; each is named by the drafter registry's spec (``early-exit:8``, ``draft:distil-l1``).
Engines are opened by the builder (:func:`specdec.engine.builder.open_weights`,
:func:`specdec.engine.builder.open_static_draft`): ``tests/test_layers.py`` fails on one made elsewhere.
A :class:`StaticSession` gives an engine the :class:`specdec.engine.lm.Session` interface, so
:func:`specdec.engine.decoding.speculative` and
:class:`specdec.engine.drafters.ModelDrafter` run unchanged.

The weights come from the payload (:mod:`specdec.measure.gpupayload`, a draft's file read by
:func:`read_safetensors`); the run's tables from :mod:`specdec.measure.gpusummary`.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from specdec.engine.lm import Session
from specdec.theory.checks import check_int
from specdec.theory.recordio import DamagedFileError, read_json

__all__ = [
    "StaticLlama",
    "read_safetensors",
    "StaticSession",
    "distilled_draft",
]


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
        self._exits: dict[int, StaticLlama] = {}
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
        """The first ``n_layers`` layers, final norm and head (weights shared; own cache and graphs): one
        view per depth, so the registry's ``early-exit:N`` drafter (which asks the target for its view)
        runs the engine whose graphs were captured."""
        check_int("n_layers", n_layers, low=1, high=len(self.layers))
        if n_layers in self._exits:
            return self._exits[n_layers]
        self._exits[n_layers] = view = StaticLlama(
            self.config,
            embed=self.embed,
            layers=self.layers[:n_layers],
            norm=self.norm,
            head=self.head,
            capacity=self.capacity,
            kept=self.kept,
            name=f"early-exit:{n_layers}",
        )
        return view

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
    card = read_json(folder / "card.json", what="the draft's card", kind=dict)
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
        name=f"draft:{folder.name}",
    )


_ST_DTYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "I8": np.int8,
    "I32": np.int32,
    "I64": np.int64,
    "U8": np.uint8,
}


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file, read with numpy (8-byte header length, JSON header, data).
    A truncated or damaged file raises :class:`~specdec.theory.recordio.DamagedFileError` naming it."""
    blob = Path(path).read_bytes()

    def damaged(why: str) -> DamagedFileError:
        return DamagedFileError(f"the safetensors file {path} is damaged: {why}")

    if len(blob) < 8:
        raise damaged(f"{len(blob)} bytes, shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise damaged(f"its header needs {8 + n} bytes, the file has {len(blob)} (truncated?)")
    try:
        header = json.loads(blob[8 : 8 + n])
    except ValueError as exc:
        raise damaged(f"its header is not JSON ({exc})") from None
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
        if base + hi > len(blob):
            raise damaged(f"tensor {name} ends at byte {base + hi}, the file at {len(blob)} (truncated?)")
        out[name] = (
            np.frombuffer(blob[base + lo : base + hi], dtype=_ST_DTYPES[info["dtype"]])
            .reshape(info["shape"])
            .copy()
        )
    return out
