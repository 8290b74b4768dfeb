"""How far a lean mode's logits are from a reference mode's (``specdec run q4q8-error``, issue #21).

:func:`logit_error` prefills every prompt through each mode and the reference (lean models with
``forward`` and ``new_cache``, :class:`specdec.engine.lean.LeanLlama`) and reports, over every
prompt position, the largest |logit difference| from the reference and how often the argmax agrees.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["logit_error"]


def logit_error(
    models: Mapping[str, Any],
    prompts: Sequence[Mapping[str, Any]],
    modes: Sequence[str],
    *,
    reference: str = "float32",
    log: Any = print,
) -> dict[str, dict[str, float]]:
    """Per mode of ``modes``: ``max_abs_logit_diff`` from ``models[reference]``, ``argmax_agreement``
    (a share of ``positions``), ``largest_abs_logit_float32`` (the reference's largest |logit|) and the
    mode's ``quantization_error``; ``log`` gets one line per mode (None: silent)."""
    import torch

    if reference not in models or any(m not in models for m in modes):
        raise ValueError(f"models must hold the reference {reference!r} and every mode of {list(modes)}")
    ref_model = models[reference]
    out: dict[str, dict[str, float]] = {}
    for mode in modes:
        worst, agree, positions, top_gap = 0.0, 0, 0, 0.0
        for p in prompts:
            ids = torch.tensor(p["ids"])
            ref = ref_model.forward(ids, 0, ref_model.new_cache(len(ids)))
            ours = models[mode].forward(ids, 0, models[mode].new_cache(len(ids)))
            diff = (ours - ref).abs().max(dim=-1).values
            worst = max(worst, float(diff.max()))
            agree += int((ours.argmax(-1) == ref.argmax(-1)).sum())
            positions += len(ids)
            top_gap = max(top_gap, float(ref.abs().max()))
        out[mode] = {
            "max_abs_logit_diff": worst,
            "argmax_agreement": agree / positions,
            "positions": positions,
            "largest_abs_logit_float32": top_gap,
            "quantization_error": models[mode].quantization_error,
        }
        if log is not None:
            log(f"{mode}: max |dlogit| {worst:.4f}, argmax agreement {agree}/{positions}")
    return out
