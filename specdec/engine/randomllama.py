"""Llama-style models at real shapes with random weights: the cost of a dense forward depends on the
shapes, not on the weights, so these stand in for the real targets when timing (the GPU record's
cost surfaces, :mod:`specdec.measure.surfaces`).

* :data:`SHAPES` -- SmolLM2-135M (the book's target), SmolLM2-1.7B and Llama-2-7B, as
  ``LlamaConfig`` arguments; :data:`QUICK_SHAPE` a scaled-down one for CPU runs (tests).
* :func:`random_llama` -- such a model, built directly on the device in the timing dtype.

The tiny random Llamas of the correctness checks are :mod:`specdec.engine.tinymodels`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["QUICK_SHAPE", "SHAPES", "random_llama"]


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
