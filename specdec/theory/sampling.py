"""Speculative sampling on probability rows: Algorithm 1 of Leviathan et al. (2023).

No models here: the functions take the target's distributions ``p`` and the draft's ``q``
as arrays (numpy arrays, or torch tensors on any device) and a numpy ``Generator`` that
supplies every random number. One generator per decoding call, seeded once, and one fresh
uniform per drafted position: the proof of losslessness (Appendix A.1)
needs independent uniforms.

* :func:`warp` turns logits into the distribution that is actually sampled from
  (temperature, top-k, top-p). Apply the *same* call to target and draft logits.
* :func:`verify` accepts or rejects a block of drafted tokens and returns the round's
  extra token (the correction after a rejection, or the bonus token after a full accept).
* :func:`residual` is the distribution a rejection resamples from, norm(max(0, p - l q)).
* :func:`verify_argmax` is the greedy variant with lenience of Appendix A.5 (deterministic;
  keep x while p(x) >= l max p).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specdec.theory.checks import check_float, check_optional_float, check_optional_int

__all__ = [
    "MIN_TEMPERATURE", "argmax", "argmax_at", "check_temperature", "float32_view", "residual", "sample",
    "verify", "verify_argmax", "warp",
]  # fmt: skip

#: The smallest positive temperature: below it logits / T leave float32's range for the logits of a
#: real model (a softmax of +-inf rows has no mass), and sampling is greedy decoding up to rounding
#: anyway; 0 means greedy.
MIN_TEMPERATURE = 1e-3


def check_temperature(name: str, temperature: Any) -> float:
    """``temperature`` as a float: 0 (greedy) or at least :data:`MIN_TEMPERATURE`, finite; else a
    ValueError naming ``name`` and the range (before any decoding starts)."""
    t = check_float(name, temperature, low=0.0, note="0: greedy")
    if 0.0 < t < MIN_TEMPERATURE:
        raise ValueError(
            f"{name} must be 0 (greedy) or >= {MIN_TEMPERATURE:g} (smaller temperatures overflow the "
            f"logits' float range and sample greedily anyway); got {temperature!r}"
        )
    return t


Array = Any  # numpy.ndarray or torch.Tensor


def _is_torch(x: object) -> bool:
    return type(x).__module__.startswith("torch")


def argmax(x: Array) -> Array:
    """The index of the largest entry over the last axis, the first of equal ones (a NaN counts as the
    largest): torch's ``argmax(-1)`` and numpy's rule alike, so the same indices. A float32 CPU torch
    tensor is read by numpy's argmax in place and the result handed back as a torch int64 tensor
    (torch's took 29 us on one 49,152-logit row where numpy's took 3, and 136 us against 11 on five
    rows, on a 2-core EPYC: a greedy step's or a greedy verification's whole cost beyond the forward);
    anything else (another device or dtype, a numpy array) goes to its own library's argmax."""
    if _is_torch(x):
        import torch

        values = float32_view(x)
        if values is not None:
            return torch.from_numpy(np.asarray(values.argmax(-1), dtype=np.int64))
        return x.argmax(-1)
    return np.asarray(x).argmax(-1)


def float32_view(x: Any) -> np.ndarray | None:
    """``x`` as a float32 numpy array read in place: a float32 numpy array itself, a float32 CPU torch
    tensor without grad by ``.numpy()`` (torch refuses the others: RuntimeError / TypeError); None for
    anything else. The one way :func:`argmax`, :func:`argmax_at`, :func:`sample` and the engine's C draw
    (:func:`specdec.engine.draw.draw_at`) leave torch for numpy."""
    if isinstance(x, np.ndarray):
        return x if x.dtype == np.float32 else None
    if not _is_torch(x):
        return None
    try:
        values = x.numpy()
    except (RuntimeError, TypeError):
        return None
    return values if values.dtype == np.float32 else None


def argmax_at(x: Array, row: int) -> int:
    """``int(argmax(x[row]))`` (:func:`argmax`'s rule) without a torch operation on a float32 CPU tensor
    but the one that reads it as numpy: the decoding loop's greedy step takes it between two C forwards,
    where each torch operation cost ~20 us and indexing the row and :func:`argmax`'s checks ~0.1 ms a
    step (dev probes on a 2-core EPYC)."""
    if _is_torch(x):
        values = float32_view(x)
        return int(argmax(x[row])) if values is None else int(values[row].argmax())
    return int(np.asarray(x)[row].argmax())


def _draft_ids(p: Array, draft: Array) -> list[int]:
    """The drafted ids as ints, checked against p: gamma + 1 rows, ids in [0, V)."""
    ids = [int(t) for t in (draft.tolist() if hasattr(draft, "tolist") else draft)]
    if p.ndim != 2 or p.shape[0] != len(ids) + 1:
        raise ValueError(f"p must have gamma + 1 = {len(ids) + 1} rows; got shape {tuple(p.shape)}")
    if any(not 0 <= t < p.shape[1] for t in ids):
        raise ValueError(f"draft token ids must lie in [0, {p.shape[1]}); got {ids}")
    return ids


def _to_float(x: Array) -> float:
    return float(x.item()) if hasattr(x, "item") else float(x)


def sample(probs: Array, rng: np.random.Generator) -> int:
    """Draw one index from a row of non-negative weights by inverting its CDF with one uniform.

    The weights need not be normalised; their total must be positive. The uniform comes
    from ``rng``, so the draw is reproducible on CPU and GPU alike.

    The index is the first i with cdf[i] > u * total: it carries positive mass (cdf[i] > cdf[i - 1]
    only where w[i] > 0), and it lies within the row, since u < 1 gives u * total < total in rounded
    arithmetic. The last index with positive mass is therefore looked for only if the index ever fell
    past the row: the same draws as the rule before, min(index, last), without a pass over the row to find
    ``last`` every time (a nonzero over 49,152 entries took 0.09 ms a draw, three times the rest).

    A float32 CPU tensor is read as numpy in place and drawn from by numpy's path: torch's cumsum over the
    row in float64 adds in the same order as numpy's (tested), so the same index, without the torch
    operations that cost ~20 us each between two C forwards (:func:`argmax_at`).
    """
    if _is_torch(probs):
        values = float32_view(probs)
        if values is not None:
            return sample(values, rng)
        import torch

        if probs.dim() != 1:
            raise ValueError(f"probs must be one row (1-D); got shape {tuple(probs.shape)}")
        cdf = torch.cumsum(probs.double(), dim=-1)
        total = cdf[-1].item()
        if not total > 0:
            raise ValueError("cannot sample from a row whose total mass is 0")
        u = torch.tensor([rng.random() * total], dtype=cdf.dtype, device=cdf.device)
        idx = int(torch.searchsorted(cdf, u, right=True).item())
        if idx >= cdf.shape[-1]:  # never reached for u < 1; kept as the rule's guard
            idx = int(torch.nonzero(probs > 0)[-1].item())
        return idx
    row = np.asarray(probs, dtype=float)
    if row.ndim != 1:  # a cumsum would run over the flattened rows
        raise ValueError(f"probs must be one row (1-D); got shape {row.shape}")
    cdf = np.cumsum(row)
    total = cdf[-1]
    if not total > 0:
        raise ValueError("cannot sample from a row whose total mass is 0")
    idx = int(np.searchsorted(cdf, rng.random() * total, side="right"))
    if idx >= len(cdf):  # never reached for u < 1; kept as the rule's guard
        idx = int(np.flatnonzero(row > 0)[-1])
    return idx


def residual(p: Array, q: Array | None, lenience: float = 1.0, token: int | None = None) -> Array:
    """norm(max(0, p - l q)): what a rejected position resamples from (Algorithm 1, A.5).

    ``q`` is one row of draft probabilities, or ``None`` for a deterministic drafter, whose
    distribution is the point mass at ``token``. When the residual has no mass (p <= l q
    everywhere, e.g. p == q), a rejection has probability 0 in exact arithmetic; floating
    point can still reach it, and then ``p`` itself is returned, which is the limit of the
    residual law and keeps the output exact.
    """
    check_float("lenience", lenience, low=0.0, high=1.0, open_low=True)
    if q is None:
        if token is None:
            raise ValueError("residual needs the drafted token when q is None")
        if _is_torch(p):
            r = p.clone()
        else:  # a float32 row stays float32, as a tensor's clone does
            r = np.array(p, dtype=np.float32 if getattr(p, "dtype", None) == np.float32 else float, copy=True)
        r[token] = max(_to_float(p[token]) - lenience, 0.0)
    elif _is_torch(p) or _is_torch(q):
        r = (p - lenience * q).clamp(min=0)
    else:  # numpy: three passes over the row where l = 1 (l q is q then, bit for bit), in place
        r = np.asarray(p - q if lenience == 1.0 else p - lenience * q)
        if r.dtype.kind != "f":  # integer weights: the float row they make
            r = r.astype(float)
        np.maximum(r, 0.0, out=r)
    total = _to_float(r.sum())
    if total <= 0.0:
        return p
    if isinstance(r, np.ndarray):
        r /= total  # r is this call's own array
        return r
    return r / total


def verify(
    p: Array,
    q: Array | None,
    draft: Array,
    rng: np.random.Generator,
    lenience: float = 1.0,
) -> tuple[int, int]:
    """Accept or reject drafted tokens; Algorithm 1 of the paper (lenience: Appendix A.5).

    Parameters
    ----------
    p : (gamma + 1, V) target distributions at each drafted position and at the bonus
        position after the last draft, already warped (temperature, top-k, top-p).
    q : (gamma, V) draft distributions the drafts were sampled from, warped the same way,
        or ``None`` for a deterministic drafter (each draft is then a point mass).
    draft : the gamma drafted token ids.
    rng : a numpy ``Generator``; one uniform per examined position, one more for the
        resample or the bonus token.
    lenience : l in (0, 1]; 1 is lossless.

    Returns
    -------
    (n_accepted, next_token) : the drafts ``draft[:n_accepted]`` are kept and ``next_token``
    follows them. Draft i is accepted iff ``u * l * q_i(x_i) < p_i(x_i)`` with u ~ U[0, 1),
    i.e. with probability min(1, p_i(x_i) / (l q_i(x_i))); a draft with q_i(x_i) = 0 is
    accepted iff p_i(x_i) > 0. On the first rejection the token is drawn from
    :func:`residual`; after a full accept it is drawn from p[gamma] (the bonus token).
    Greedy decoding is the same call with one-hot rows.
    """
    check_float("lenience", lenience, low=0.0, high=1.0, open_low=True)
    draft_ids = _draft_ids(p, draft)
    gamma, vocab = len(draft_ids), p.shape[1]
    if q is not None and (q.ndim != 2 or tuple(q.shape) != (gamma, vocab)):
        raise ValueError(
            f"q must have shape (gamma, V) = ({gamma}, {vocab}) like p's rows; got {tuple(q.shape)}"
        )

    for i, x in enumerate(draft_ids):
        p_x = _to_float(p[i, x])
        q_x = 1.0 if q is None else _to_float(q[i, x])
        if rng.random() * lenience * q_x < p_x:
            continue
        r = residual(p[i], None if q is None else q[i], lenience, token=x)
        return i, sample(r, rng)
    return gamma, sample(p[gamma], rng)


def verify_argmax(p: Array, draft: Array, lenience: float = 1.0) -> tuple[int, int]:
    """Greedy verification with lenience: the argmax case of Appendix A.5 of the paper.

    ``p`` is (gamma + 1, V): the target's probabilities at temperature 1 (not one-hot rows),
    ``draft`` the gamma drafted ids. Draft i is accepted iff it is the argmax of p_i, or
    ``lenience`` l < 1 and p_i(x_i) >= l max p_i. On the first rejection the round's token is
    argmax p_i; after a full accept it is argmax p_gamma. Deterministic: no uniforms.

    With l = 1 this is exact matching, i.e. greedy decoding, token for token (ties go to the
    smallest id, like :func:`warp` at temperature 0). With l < 1 it is *not* lossless: it may
    keep a drafted token the target would not have chosen, as long as the target gives it at
    least l times the probability of its favourite.
    """
    check_float("lenience", lenience, low=0.0, high=1.0, open_low=True)
    draft_ids = _draft_ids(p, draft)
    gamma = len(draft_ids)
    for i, x in enumerate(draft_ids):
        best = int(argmax(p[i]))
        if x == best or (lenience < 1.0 and _to_float(p[i, x]) >= lenience * _to_float(p[i, best])):
            continue
        return i, best
    return gamma, int(argmax(p[gamma]))


def warp(
    logits: Array,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> Array:
    """Logits -> the probabilities actually sampled from, over the last axis.

    Temperature 0 gives a one-hot row at the argmax (greedy). Otherwise logits are divided
    by the temperature, then top-k keeps the k largest, then top-p keeps the smallest set
    of most probable tokens whose mass reaches ``top_p`` (the token that crosses it
    included), and the result is renormalised. Use the same settings for p and q: the
    proof needs q to be exactly the law the draft sampled from.
    """
    check_temperature("temperature", temperature)
    check_optional_int("top_k", top_k, low=1)
    check_optional_float("top_p", top_p, low=0.0, high=1.0, open_low=True)
    if _is_torch(logits):
        import torch

        x = logits if logits.dtype == torch.float32 else logits.float()  # no operation where none is needed
        if temperature == 0:
            return torch.nn.functional.one_hot(argmax(x), x.shape[-1]).to(x.dtype)
        if temperature != 1.0:  # x / 1 is x, bit for bit
            x = x / temperature
        if top_k is not None and top_k < x.shape[-1]:
            kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
            x = x.masked_fill(x < kth, float("-inf"))
        probs = torch.softmax(x, dim=-1)
        if top_p is not None and top_p < 1.0:
            sorted_p, order = torch.sort(probs, dim=-1, descending=True)
            keep_sorted = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p
            keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
            probs = probs * keep
            probs = probs / probs.sum(-1, keepdim=True)
        return probs
    x = np.asarray(logits, dtype=float)
    if temperature == 0:
        return np.eye(x.shape[-1])[x.argmax(-1)]
    x = x / temperature
    if top_k is not None and top_k < x.shape[-1]:
        kth = np.sort(x, axis=-1)[..., -top_k][..., None]
        x = np.where(x < kth, -np.inf, x)
    x = x - x.max(-1, keepdims=True)
    probs = np.exp(x)
    probs = probs / probs.sum(-1, keepdims=True)
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-probs, axis=-1, kind="stable")
        sorted_p = np.take_along_axis(probs, order, -1)
        keep_sorted = (np.cumsum(sorted_p, -1) - sorted_p) < top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, -1)
        probs = probs * keep
        probs = probs / probs.sum(-1, keepdims=True)
    return probs
