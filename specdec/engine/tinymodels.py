"""Tiny random Llama models for the tests and the GPU record's checks: no hub, no files, ~100 KB each.

A random initialisation gives nearly uniform next-token distributions and nearly uniform
attention, which would hide bugs: the LM head is scaled up so that the distributions are
peaked (entropy about 2 nats over V = 97), and the query and key projections are scaled up
so that attention is sharp and the logits depend on positions and on every cached key
(a wrong position id or a stale cache entry changes the greedy output). Drafts are either
an unrelated random model (alpha near 0) or a perturbed copy of the target (alpha set by
the noise: about 0.8 for noise 0.05, 0.4 to 0.6 for noise 0.3).
"""

from __future__ import annotations

import copy

import torch
from transformers import LlamaConfig, LlamaForCausalLM

__all__ = ["ATTN_SCALE", "HEAD_SCALE", "VOCAB", "next_token_logits", "perturbed_copy", "tiny_llama"]

VOCAB = 97
HEAD_SCALE = 30.0
ATTN_SCALE = 20.0


def tiny_llama(
    seed: int,
    *,
    layers: int = 2,
    vocab: int = VOCAB,
    head_scale: float = HEAD_SCALE,
    attn_scale: float = ATTN_SCALE,
    **config: object,
):
    """A random LlamaForCausalLM (hidden 32, 4 heads, 2 KV heads) built with torch seed ``seed``.

    Extra keyword arguments go to ``LlamaConfig`` (e.g. ``attn_implementation``, token ids).
    """
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        **config,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(attn_scale)
            layer.self_attn.k_proj.weight.mul_(attn_scale)
    return model


def perturbed_copy(model, noise: float, seed: int):
    """A copy of ``model`` with Gaussian noise of ``noise`` times each tensor's std added."""
    out = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(noise * p.std() * torch.randn(p.shape, generator=gen))
    return out


@torch.no_grad()
def next_token_logits(model, prefixes: list[list[int]]) -> torch.Tensor:
    """Float32 logits after the last token of each prefix (equal lengths), full forward, no cache."""
    out = model(input_ids=torch.tensor(prefixes, dtype=torch.long), use_cache=False)
    return out.logits[:, -1].float()
