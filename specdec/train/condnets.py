"""Drafters conditioned on the target: Medusa heads, an MLP speculator and EAGLE's draft layer.

All three read the target's own *features*: ``f_j``, the residual stream after the target's last
decoder layer at position ``j`` (before its final RMSNorm), and ``norm(f_j)`` the target's final
norm applied to it (so ``head(norm(f_j))`` are the target's logits of token ``x_{j+1}``). Each
predicts later tokens through the target's own LM head cut to a frequency-ranked *kept vocabulary*
(SGLang's FR-Spec; the distilled drafts' :class:`~specdec.train.draftnets.TrimmedHead`), frozen:

* :class:`MedusaHeads` (Cai et al., arXiv:2401.10774, Medusa-1): K residual blocks on
  ``u = norm(f_j)``; head ``k`` (1-based) gives ``r_k = u + SiLU(W_k u + b_k)`` and predicts
  ``x_{j+1+k}`` as ``head(r_k)``. ``W_k`` starts at zero (each head starts as the target's own
  next-token prediction), as in Medusa.
* :class:`MLPSpeculator` (Wertheimer et al., arXiv:2404.19124): stages ``n = 1..K`` on a state,
  ``s_0 = norm(f_j)``; stage ``n`` reads ``s_{n-1}`` and the embedding of ``x_{j+n}`` (the last
  sampled token), ``s_n = GELU(LN(a W_s s_{n-1} + b W_e E[x_{j+n}]))`` with IBM's weights
  ``a = 0.5^(0.5/K)``, ``b = sqrt(1 - a^2)``, and predicts ``x_{j+n+1}`` as ``head(g_n * s_n)``.
  Differs from the paper in one respect, said here: the stages share the target's frozen
  embeddings and head (a per-stage scale ``g_n`` is trained) instead of training their own.
* :class:`EagleDraft` (Li et al., arXiv:2401.15077): one decoder layer of the target's shape over
  ``fc([norm(f_j); E[x_{j+1}]])``, autoregressive at the feature level: its output ``g_j`` is the
  predicted ``f_{j+1}``; ``head(norm(g_j))`` predicts ``x_{j+2}``. The layer is a one-layer model
  of the target's class (:func:`specdec.train.draftnets.build_draft`, initialised from the
  target's last layer) whose final norm is the target's (frozen), so the lean engine runs it as
  a one-layer draft fed with embedding rows.

The weights are stored as the distilled drafts' are (int8 per output row, float16 vectors, the
kept ids) in ``specdec/data/drafts/<name>/`` with a ``card.json`` whose ``"kind"`` names the
family; :func:`save_conditioned` and :func:`load_conditioned` are the one writer and reader.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from specdec.theory.checks import check_int
from specdec.theory.recordio import DamagedFileError, read_json, write_record

__all__ = [
    "FAMILIES",
    "EagleDraft",
    "MLPSpeculator",
    "MedusaHeads",
    "load_conditioned",
    "prenorm_forward",
    "rms_norm",
    "save_conditioned",
]

#: The families of target-conditioned drafters, by the ``kind`` their cards carry.
FAMILIES = ("medusa", "mlp-speculator", "eagle")

_CARD, _WEIGHTS = "card.json", "weights.safetensors"


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The target's final RMSNorm: ``weight * x / sqrt(mean(x^2) + eps)`` over the last axis."""
    xf = x.float()
    return weight.float() * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))


class _Frozen(torch.nn.Module):
    """The target's pieces a conditioned drafter reads, frozen: embeddings, final norm, kept head."""

    def __init__(
        self, embed: torch.Tensor, norm: torch.Tensor, eps: float, head: torch.Tensor, kept: Any
    ) -> None:
        super().__init__()
        kept = torch.as_tensor(kept, dtype=torch.long)
        if kept.ndim != 1 or kept.numel() == 0 or int(kept.min()) < 0 or int(kept.max()) >= head.shape[0]:
            raise ValueError(f"kept must be a non-empty 1-D tensor of token ids in [0, {head.shape[0]})")
        self.register_buffer("embed", embed.detach().float(), persistent=False)
        self.register_buffer("norm", norm.detach().float().clone(), persistent=False)
        self.register_buffer("head", head.detach().float()[kept].clone(), persistent=False)
        self.register_buffer("kept", kept.clone(), persistent=False)
        self.eps = float(eps)
        self.hidden = int(embed.shape[1])


def frozen_parts(target: torch.nn.Module, kept: Any) -> _Frozen:
    """The frozen embeddings, final norm and kept-vocabulary head of a Llama-class ``target``."""
    base = target.model
    return _Frozen(
        base.embed_tokens.weight,
        base.norm.weight,
        float(target.config.rms_norm_eps),
        target.get_output_embeddings().weight,
        kept,
    )


class MedusaHeads(torch.nn.Module):
    """K Medusa-1 heads: ``head_k(f) = head(u + SiLU(W_k u + b_k))``, ``u = norm(f)``; head k: x_{j+1+k}."""

    def __init__(self, frozen: _Frozen, heads: int) -> None:
        super().__init__()
        self.frozen, self.heads = frozen, check_int("heads", heads, low=1, high=16)
        h = frozen.hidden
        self.w = torch.nn.Parameter(torch.zeros(heads, h, h))
        self.b = torch.nn.Parameter(torch.zeros(heads, h))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """(B, H) pre-norm features -> (B, K, |kept|) logits of heads 1..K."""
        u = rms_norm(features, self.frozen.norm, self.frozen.eps)
        r = u[:, None, :] + F.silu(torch.einsum("bh,kgh->bkg", u, self.w) + self.b)
        return r @ self.frozen.head.T


class MLPSpeculator(torch.nn.Module):
    """IBM's multi-stage MLP speculator on the target's state (see the module docstring)."""

    def __init__(self, frozen: _Frozen, stages: int) -> None:
        super().__init__()
        self.frozen, self.stages = frozen, check_int("stages", stages, low=1, high=16)
        h = frozen.hidden
        self.state_weight = 0.5 ** (0.5 / stages)
        self.emb_weight = math.sqrt(1 - self.state_weight**2)
        scale = 1 / math.sqrt(h)
        self.w_state = torch.nn.Parameter(torch.randn(stages, h, h) * scale)
        self.w_emb = torch.nn.Parameter(torch.randn(stages, h, h) * scale)
        self.ln_w = torch.nn.Parameter(torch.ones(stages, h))
        self.ln_b = torch.nn.Parameter(torch.zeros(stages, h))
        self.out_scale = torch.nn.Parameter(frozen.norm.clone().expand(stages, h).clone())

    def stage(
        self, n: int, state: torch.Tensor, token_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Stage ``n`` (0-based): (new state (B, H), logits (B, |kept|)) from a state and the last token."""
        z = (
            self.state_weight * state @ self.w_state[n].T
            + self.emb_weight * self.frozen.embed[token_ids] @ self.w_emb[n].T
        )
        state = F.gelu(F.layer_norm(z, (z.shape[-1],), self.ln_w[n], self.ln_b[n]), approximate="tanh")
        return state, (state * self.out_scale[n]) @ self.frozen.head.T

    def forward(self, features: torch.Tensor, next_ids: torch.Tensor) -> torch.Tensor:
        """(B, H) features at j and (B, K) tokens x_{j+1..j+K} -> (B, K, |kept|) logits of x_{j+2..j+K+1}."""
        state = rms_norm(features, self.frozen.norm, self.frozen.eps)
        out = []
        for n in range(self.stages):
            state, logits = self.stage(n, state, next_ids[:, n])
            out.append(logits)
        return torch.stack(out, 1)


class EagleDraft(torch.nn.Module):
    """EAGLE's draft: ``fc`` over [norm(f_j); E[x_{j+1}]] and one decoder layer (a one-layer model)."""

    def __init__(self, frozen: _Frozen, layer_model: torch.nn.Module) -> None:
        super().__init__()
        self.frozen = frozen
        h = frozen.hidden
        self.fc = torch.nn.Linear(2 * h, h, bias=False)
        with torch.no_grad():  # start as "the token's embedding plus the feature"
            self.fc.weight.zero_()
            self.fc.weight[:, :h].copy_(torch.eye(h))
            self.fc.weight[:, h:].copy_(torch.eye(h))
        self.model = layer_model  # a one-layer causal LM of the target's class (build_draft)

    def inputs(self, features: torch.Tensor, next_ids: torch.Tensor, noise: float = 0.0) -> torch.Tensor:
        """fc([norm(f); E[x]]) for (..., H) features and (...) token ids (``noise``: uniform, training)."""
        u = rms_norm(features, self.frozen.norm, self.frozen.eps)
        if noise:
            u = u + noise * (2 * torch.rand_like(u) - 1)
        return self.fc(torch.cat([u, self.frozen.embed[next_ids]], -1))

    def forward(
        self,
        features: torch.Tensor,
        next_ids: torch.Tensor,
        mask: torch.Tensor | None = None,
        noise: float = 0.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, L, H) features and (B, L) next tokens -> (predicted features g (B, L, H) pre-norm,
        logits over the kept vocabulary (B, L, |kept|))."""
        x = self.inputs(features, next_ids, noise)
        positions = torch.arange(x.shape[1]).expand(x.shape[0], -1)
        g, normed = prenorm_forward(self.model, inputs_embeds=x, attention_mask=mask, position_ids=positions)
        return g, normed @ self.frozen.head.T


def prenorm_forward(model: torch.nn.Module, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a Llama-class causal LM's base model: (the residual stream before its final norm, after it)."""
    seen: list[torch.Tensor] = []
    hook = model.model.norm.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    try:
        out = model.model(use_cache=False, **kwargs)
    finally:
        hook.remove()
    return seen[-1], out.last_hidden_state


# -- storage ---------------------------------------------------------------------------------------


def _matrices(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p for n, p in module.named_parameters() if p.requires_grad}


@torch.no_grad()
def save_conditioned(drafter: torch.nn.Module, folder: str | Path, card: dict) -> dict:
    """Round the trained tensors (matrices to int8 per output row, vectors to float16) in place and
    save them with the kept ids and ``card`` under ``folder``; returns the card written."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    for name, p in _matrices(drafter).items():
        if p.ndim >= 2:  # every output row of every matrix its own scale
            flat = p.reshape(-1, p.shape[-1])
            scale = (flat.abs().amax(dim=1, keepdim=True).float() / 127).clamp(min=1e-12)
            q8 = torch.round(flat.float() / scale).clamp(-127, 127).to(torch.int8)
            p.copy_((q8.float() * scale).reshape(p.shape).to(p.dtype))
            tensors[f"{name}.q8"], tensors[f"{name}.scale"] = q8.reshape(p.shape), scale
        else:
            tensors[name] = p.to(torch.float16)
            p.copy_(tensors[name].to(p.dtype))
    tensors["kept"] = drafter.frozen.kept.to(torch.int32)
    tmp = folder / (_WEIGHTS + ".tmp")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))
    tmp.replace(folder / _WEIGHTS)
    params = sum(p.numel() for p in _matrices(drafter).values())
    card = {**card, "bytes": (folder / _WEIGHTS).stat().st_size, "params": params}
    write_record(folder / _CARD, card, indent=2, sort_keys=False)
    return card


def build_conditioned(card: dict, target: torch.nn.Module, kept: Any) -> torch.nn.Module:
    """An untrained drafter of the family and shape ``card`` names, around ``target``."""
    kind = card.get("kind")
    frozen = frozen_parts(target, kept)
    if kind == "medusa":
        return MedusaHeads(frozen, int(card["heads"]))
    if kind == "mlp-speculator":
        return MLPSpeculator(frozen, int(card["stages"]))
    if kind == "eagle":
        from specdec.train.draftnets import build_draft

        layer_model = build_draft(target, [int(card["init_layer"])], kept).float()
        layer_model.requires_grad_(False)
        layer_model.model.layers.requires_grad_(True)  # the norm stays the target's
        return EagleDraft(frozen, layer_model)
    raise ValueError(f"card kind must be one of {FAMILIES}; got {kind!r}")


def load_conditioned(folder: str | Path, target: torch.nn.Module) -> tuple[torch.nn.Module, dict]:
    """Rebuild a saved conditioned drafter around ``target``: (the module in eval mode, its card)."""
    from specdec.train.draftnets import load_weights

    folder = Path(folder)
    if not (folder / _CARD).exists() or not (folder / _WEIGHTS).exists():
        raise ValueError(f"no conditioned drafter under {str(folder)!r} (needs {_CARD} and {_WEIGHTS})")
    card = read_json(folder / _CARD, what="the drafter's card", kind=dict)
    if card.get("hidden_size") != target.config.hidden_size:
        raise ValueError(
            f"{folder.name!r} was made for another target (hidden_size {card.get('hidden_size')})"
        )
    tensors = load_weights(folder / _WEIGHTS)

    def get(key: str) -> torch.Tensor:
        if key not in tensors:
            raise DamagedFileError(f"the drafter's weights {folder / _WEIGHTS} lack the tensor {key!r}")
        return tensors[key]

    drafter = build_conditioned(card, target, get("kept").long())
    with torch.no_grad():
        for name, p in _matrices(drafter).items():
            if p.ndim >= 2:
                p.copy_((get(f"{name}.q8").float() * get(f"{name}.scale").reshape(
                    *get(f"{name}.q8").shape[:-1], 1)).to(p.dtype))  # fmt: skip
            else:
                p.copy_(get(name).to(p.dtype))
    drafter.requires_grad_(False)
    return drafter.eval(), card
