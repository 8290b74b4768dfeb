"""The paper's alpha on real text: teacher-forced acceptance rates of a drafter against the target.

Leviathan et al. (2023) define alpha = E[beta] (Definition 3.1, Corollary 3.6), with
beta = sum_x min(p(x), q(x)) = 1 - TV(p, q) the probability that a draft from q is accepted
where the target's next-token law is p, the expectation running over prefixes of text the
target generates (their Table 3 measures it "on the outputs of the target"). This module
computes beta at every response position of such text by *teacher forcing*: one full forward
of the target over prompt + response gives p_t for every position t, and the drafter gives
q_t after the same prefix (:meth:`specdec.engine.drafters.Drafter.q_rows`: one full forward for a
model drafter, table rows for unigram and bigram drafters). Both are warped alike
(temperature, top-k, top-p), as in the decoding loop.

A deterministic drafter (prompt lookup, q = None) drafts one token x_t or none; its draft is
accepted with probability p_t(x_t) (a point mass q; Algorithm 1), so beta_t = p_t(x_t) where
it drafts and is undefined (NaN) where it has nothing to propose.

These betas are the *first-draft* acceptance probabilities on the target's own text. Inside a
real round, draft i > 1 is conditioned on drafts 1..i-1 rather than on the target's tokens;
the two agree while the drafts are accepted, which is when draft i is examined at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from specdec.engine.drafters import Drafter, WarpFn
from specdec.engine.lm import open_lm
from specdec.theory.checks import check_int

__all__ = ["TeacherForced", "beta_rows", "target_p_rows", "teacher_forced"]


def _check_ids(ids: Sequence[int], prompt_len: int) -> list[int]:
    out = [int(t) for t in ids]
    check_int(
        "prompt_len", prompt_len, low=1, high=len(out) - 1, note="at least one prompt and one response token"
    )
    return out


@torch.inference_mode()
def target_p_rows(
    target: torch.nn.Module, ids: Sequence[int], prompt_len: int, warp_fn: WarpFn
) -> torch.Tensor:
    """p_t for every response position t = prompt_len .. len(ids) - 1, from one full forward.

    Row j is warp_fn(target logits after ids[: prompt_len + j]), the law of token
    ids[prompt_len + j]. Shape (len(ids) - prompt_len, V), float32, on the target's device.
    ``target`` is a Hugging Face causal LM or a :class:`specdec.engine.lean.LeanLlama` (a fresh
    session, fed once: the mode the runs decode with).
    """
    ids = _check_ids(ids, prompt_len)
    keep = len(ids) - prompt_len
    if callable(getattr(target, "session", None)):  # a lean model
        return warp_fn(open_lm(target).forward(ids[:-1], keep=keep))
    device = next(target.parameters()).device
    input_ids = torch.tensor([ids[:-1]], dtype=torch.long, device=device)
    out = target(input_ids=input_ids, use_cache=False, logits_to_keep=keep)
    return warp_fn(out.logits[0, -keep:].float())


def beta_rows(p: torch.Tensor, q: torch.Tensor) -> np.ndarray:
    """beta = sum_x min(p(x), q(x)) for each row (Corollary 3.6), as a float64 numpy array."""
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape; got {tuple(p.shape)} and {tuple(q.shape)}")
    return torch.minimum(p, q.to(p.device)).double().sum(-1).cpu().numpy()


@dataclass(frozen=True)
class TeacherForced:
    """beta at each response position of one sequence; NaN where a deterministic drafter had no draft."""

    beta: np.ndarray

    @property
    def drafted(self) -> int:
        """Positions with a draft (all of them for a drafter with q rows)."""
        return int(np.isfinite(self.beta).sum())

    @property
    def alpha(self) -> float:
        """Mean beta over the positions with a draft (the paper's alpha on this sequence); NaN if none."""
        return float(np.nanmean(self.beta)) if self.drafted else float("nan")


def teacher_forced(
    target: torch.nn.Module,
    drafter: Drafter,
    ids: Sequence[int],
    prompt_len: int,
    warp_fn: WarpFn,
    p: torch.Tensor | None = None,
) -> TeacherForced:
    """beta_t = sum_x min(p_t, q_t) at every response position of ``ids`` (prompt + target's response).

    ``p`` may be passed (the output of :func:`target_p_rows` for the same ids, prompt_len and
    warp_fn) to share one target forward among several drafters. A deterministic drafter
    (``q_rows`` returns None) must have ``lookup(prefix, n)``, e.g.
    :class:`specdec.engine.drafters.PromptLookupDrafter`; beta_t is then p_t(x_t) for its draft x_t.
    """
    ids = _check_ids(ids, prompt_len)
    keep = len(ids) - prompt_len
    if p is None:
        p = target_p_rows(target, ids, prompt_len, warp_fn)
    elif p.ndim != 2 or p.shape[0] != keep:
        raise ValueError(f"p must have shape ({keep}, V) (one row per response token); got {tuple(p.shape)}")
    q = drafter.q_rows(ids[:-1], keep, warp_fn)
    if q is not None:
        return TeacherForced(beta_rows(p, q))
    lookup = getattr(drafter, "lookup", None)
    if lookup is None:
        raise ValueError(f"{type(drafter).__name__} gives no q rows and has no lookup(prefix, n)")
    beta = np.full(keep, np.nan)
    p_cpu = p.double().cpu()
    for j in range(keep):
        draft = lookup(ids[: prompt_len + j], 1)
        if draft:
            beta[j] = float(p_cpu[j, int(draft[0])])
    return TeacherForced(beta)
