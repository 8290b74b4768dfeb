"""The glue of :class:`specdec.engine.lean.LeanLlama` around its C forwards.

A tree call's layout is :func:`specdec.theory.trees.tree_layout`'s (``parents`` within the call, as
:meth:`specdec.theory.trees.DraftTree.call_parents` gives them): node ``r`` of a call at ``start`` is
written at slot ``start + r``, placed at position ``start + depth(r)``, and attends to slots
``0 .. start-1`` followed by its path's slots (root-down, itself last): the keys, in the same order,
that the chain forward over its path sees at slots ``start .. start + depth``, so that an exact engine
gives it the chain's logits.
* :func:`native_structure`, :func:`q8_forward`, :func:`native_logits` (numpy in and out, no torch
  operation: a session's step) and :func:`native_forward` (torch tensors) -- the C forwards' model
  descriptions and calls (:mod:`specdec.engine.native`), moved out of ``lean.py``.
* :func:`check_extras` -- :meth:`specdec.engine.lean.LeanLlama.forward`'s ``embeds`` (rows used in
  place of the embedding's) and ``features`` (every row's residual before the final norm), checked.
* :class:`Q8Linear` -- a standalone Q8_0 linear layer on leanq8.c's int8 kernel (small heads of
  target-conditioned drafters: Medusa, EAGLE, MLP speculators).
* :class:`EagleLevel` -- one level of EAGLE's draft in one C call: its inputs (norm, concatenation and
  ``fc``), its draft layer over them, the kept head and the rows' top tokens.
* :class:`MedusaHeads`, :class:`MlpStage` -- a Medusa draft and an MLP speculator's stage, each with
  the kept head's top tokens, in one C call (their constants checked once, when made).
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from specdec.theory.checks import check_int
from specdec.theory.trees import TreeLayout

__all__ = [
    "EagleLevel",
    "Q8Linear",
    "MedusaHeads",
    "MlpStage",
    "check_extras",
    "native_forward",
    "native_logits",
    "native_structure",
    "q8_description",
    "q8_forward",
]


def native_structure(model: Any) -> Any:
    """The ``"q4_1"`` C forward's model structure over ``model``'s tensors (kept alive by ``model``)."""
    from specdec.engine import native

    if model._native is None:
        cos, sin = model._rotary(model.max_positions)
        layers = (native.Layer * len(model.layers))()
        for i, entry in enumerate(model.layers):
            layers[i] = native.Layer(
                entry["norm_attn"].data_ptr(),
                entry["norm_mlp"].data_ptr(),
                *(entry[name].struct() for name in ("qkv", "o", "gate_up", "down")),
            )
        inter = model.layers[0]["down"].qs.shape[1] * 2
        model._native = native.Model(
            len(model.layers), model.hidden, model.heads, model.kv_heads, model.head_dim, inter,
            model.max_positions, model.eps, model.embed.data_ptr(), layers, model.norm.data_ptr(),
            model.head.struct(), cos.data_ptr(), sin.data_ptr(), int(model.embed.shape[0]), 0,
        )  # fmt: skip
        model._native_keep = (layers, cos, sin)
    return model._native


def phase_clocks(model: Any) -> Any:
    """The ``"q4_1"`` C forward's phase clocks of ``model`` (:class:`specdec.engine.native.PhaseClocks` over
    its own structure: another model, an early-exit view included, keeps its own)."""
    from specdec.engine import native

    if model.mode != "q4_1":
        raise ValueError(
            f"phase_clocks needs mode 'q4_1' (q4q8: q8_forward()); this model's is {model.mode!r}"
        )
    desc = native_structure(model)
    clocks = getattr(model, "_phase_clocks", None)
    if clocks is None or clocks.description is not desc:
        clocks = model._phase_clocks = native.PhaseClocks(desc)
    return clocks


def q8_forward(model: Any) -> Any:
    """The ``"q4q8"`` C forward's repacked model (:class:`specdec.engine.native.Q8Forward`), built on
    first use over the whole model (an early-exit view shares it and runs its first layers)."""
    from specdec.engine import native

    if model.mode != "q4q8":
        raise ValueError(f"q8_forward needs mode 'q4q8'; this model's mode is {model.mode!r}")
    if "forward" not in model._q8:
        desc, keep = q8_description(model)
        model._q8["forward"] = native.Q8Forward(desc)
        model._q8["keep"] = keep  # read in place by the C forward
    return model._q8["forward"]


def q8_description(model: Any) -> tuple[Any, tuple[Any, ...]]:
    """The ``"q4q8"`` C forward's description of ``model`` (:class:`specdec.engine.native.Model`, over every
    layer) and what it reads in place and the caller must keep alive (the rotary tables, the layer table);
    :func:`q8_forward` repacks it once per model, a benchmark may repack it for another build."""
    from specdec.engine import native

    layers = model._q8.get("all_layers", model.layers)
    cos, sin = model._rotary(model.max_positions)
    table = (native.Layer * len(layers))()
    for i, entry in enumerate(layers):
        table[i] = native.Layer(
            entry["norm_attn"].data_ptr(),
            entry["norm_mlp"].data_ptr(),
            *(entry[name].layer_struct() for name in ("qkv", "o", "gate_up", "down")),
        )
    q8_layers = model.codes == "q8_0"
    inter = layers[0]["down"].qs.shape[1] * (1 if q8_layers else 2)
    desc = native.Model(
        len(layers), model.hidden, model.heads, model.kv_heads, model.head_dim, inter,
        model.max_positions, model.eps, model.embed.data_ptr(), table, model.norm.data_ptr(),
        model.head.struct(), cos.data_ptr(), sin.data_ptr(), int(model.embed.shape[0]),
        int(q8_layers),
    )  # fmt: skip
    return desc, (cos, sin, table)


def check_extras(model: Any, ids: torch.Tensor, embeds: Any, features: Any) -> torch.Tensor | None:
    """:meth:`LeanLlama.forward`'s ``embeds`` and ``features`` checked (ValueError naming the argument):
    each None or a (len(ids), hidden) float32 tensor, ``features`` contiguous (written in place), ``ids``
    1-D in the vocabulary; mode ``"q4_1"`` takes neither. Returns ``embeds`` as a contiguous float32
    tensor (None if not given)."""
    if embeds is None and features is None:
        return None
    if model.mode == "q4_1":
        raise ValueError("embeds/features needs mode 'q4q8' or a torch mode; this model's mode is 'q4_1'")
    vocab = int(model.embed.shape[0])
    values = ids.tolist() if ids.dim() == 1 and not ids.is_floating_point() else []  # Python's min / max:
    if not values or not 0 <= min(values) <= max(values) < vocab:  # cheaper than torch's on a step's row
        raise ValueError(f"ids must be a 1-D tensor of token ids in [0, {vocab}); got {ids!r}")
    shape = (int(ids.shape[0]), model.hidden)
    for name, value in (("embeds", embeds), ("features", features)):
        if value is None:
            continue
        if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or tuple(value.shape) != shape:
            got = (
                f"{tuple(value.shape)} {value.dtype}"
                if isinstance(value, torch.Tensor)
                else type(value).__name__
            )
            raise ValueError(
                f"{name} must be a float32 tensor of shape {shape} (len(ids), hidden); got {got}"
            )
    if features is not None and not features.is_contiguous():
        raise ValueError("features must be a contiguous tensor (it is written in place)")
    return None if embeds is None else embeds.detach().contiguous()


class Q8Linear:
    """A linear layer y = x W^T on leanq8.c's int8 kernel: ``weight`` (n, k) float, k a multiple of 32,
    coded Q8_0 (int8 per block of 32 along k, one half-precision scale per block, as the ``"q4q8"``
    LM head: ``specdec.engine.lean``'s ``_q80(w, half_scales=True)``, the same formula here, as lean
    imports this module), repacked once; each call quantizes x's rows per block
    of 32 (as the head's activations) and runs the head's matmul. A row's result does not depend on
    the number of rows or of threads (bit for bit). ``weight_error``: the code's largest absolute
    error; :attr:`dequantized`: the (n, k) float32 weight the code stands for."""

    def __init__(self, weight: torch.Tensor) -> None:
        from specdec.engine import native

        if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or not weight.is_floating_point():
            raise ValueError(f"weight must be a 2-D floating-point tensor (n, k); got {weight!r:.80}")
        n, k = weight.shape
        if n < 1 or k < 32 or k % 32:
            raise ValueError(
                f"weight's input dimension k must be a positive multiple of 32; got shape {(n, k)}"
            )
        self.lib = native.library("q4q8")
        groups = weight.detach().float().reshape(n, k // 32, 32)
        d = groups.abs().amax(-1) / 127  # d = max |w| / 127 per block, q = round(w / d) (lean's Q8_0)
        q = torch.round(groups / torch.where(d > 0, d, torch.ones_like(d))[..., None]).clamp(-127, 127)
        self.d = d.half().float().contiguous()  # the head's half-precision scales
        self.qs = q.to(torch.int8).reshape(n, k).contiguous()
        self.weight_error = float((q * self.d[..., None] - groups).abs().max())
        self.out_features, self.in_features = int(n), int(k)
        status = ctypes.c_int32(0)
        struct = native.Q80(self.qs.data_ptr(), self.d.data_ptr(), int(n), int(k))
        handle = self.lib.specdec_q8_linear_new(ctypes.byref(struct), ctypes.byref(status))
        if not handle:
            if status.value == -1:
                raise MemoryError("the C linear could not allocate the repacked weight")
            raise ValueError(f"the C linear refused the weight (code {status.value})")
        self.handle = handle
        self._free = weakref.finalize(self, self.lib.specdec_q8_linear_free, handle)

    @property
    def dequantized(self) -> torch.Tensor:
        n, k = self.out_features, self.in_features
        return (self.qs.float().view(n, k // 32, 32) * self.d[..., None]).view(n, k)

    def __call__(self, x: Any, threads: int = 1) -> np.ndarray:
        """y (rows, n) float32 of x (rows, k) float32 (a NumPy array or a CPU tensor), on ``threads``
        threads (the process's pool, as the C forward)."""
        threads = check_int("threads", threads, low=1, high=1024)
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu().numpy()
        if not isinstance(x, np.ndarray) or x.dtype != np.float32:
            raise ValueError(f"x must be a float32 NumPy array or tensor; got {getattr(x, 'dtype', type(x))}")
        if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] != self.in_features:
            raise ValueError(f"x must have shape (rows >= 1, {self.in_features}); got {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError("x must hold finite values only")
        x = np.ascontiguousarray(x)
        y = np.empty((x.shape[0], self.out_features), dtype=np.float32)
        status = self.lib.specdec_q8_linear(self.handle, x.ctypes.data, x.shape[0], y.ctypes.data, threads)
        if status == -1:
            raise MemoryError("the C linear could not allocate its work buffers")
        if status != 0:
            raise ValueError(f"the C linear refused its arguments (code {status})")
        return y

    def top(self, x: Any, k: int, threads: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ``k`` largest outputs of each row of x W^T (a drafter's head and its top tokens in one C
        call, ``specdec_q8_linear_topk``): (indices (rows, k) int32, largest first, ties: the smaller index
        first; their values (rows, k); each row's log sum exp (rows,)), so ``values - lse[:, None]`` are
        the tokens' log-probabilities. The outputs are those of :meth:`__call__`, bit for bit."""
        threads = check_int("threads", threads, low=1, high=1024)
        k = check_int("k", k, low=1, high=min(TOPK_MAX, self.out_features))
        x = _rows_f32(x, self.in_features)
        idx = np.empty((x.shape[0], k), dtype=np.int32)
        val = np.empty((x.shape[0], k), dtype=np.float32)
        lse = np.empty(x.shape[0], dtype=np.float32)
        status = self.lib.specdec_q8_linear_topk(
            self.handle, x.ctypes.data, x.shape[0], k, idx.ctypes.data, val.ctypes.data, lse.ctypes.data,
            None, threads,
        )  # fmt: skip
        if status == -1:
            raise MemoryError("the C linear could not allocate its work buffers")
        if status != 0:
            raise ValueError(f"the C linear's top-k refused its arguments (code {status})")
        return idx, val, lse


#: The most entries :func:`topk` (and :meth:`Q8Linear.top`) select per row (leanq8.c's TOPK_MAX).
TOPK_MAX = 64


def _rows_f32(x: Any, width: int) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise ValueError(f"x must be a float32 NumPy array or tensor; got {getattr(x, 'dtype', type(x))}")
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] != width:
        raise ValueError(f"x must have shape (rows >= 1, {width}); got {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("x must hold finite values only")
    return np.ascontiguousarray(x)


def topk(x: Any, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``k`` largest entries of each row of ``x`` (rows, n) float32, in C (``specdec_topk``: partial
    selection, no sort of the row): (indices (rows, k) int32, largest first, ties: the smaller index first,
    as a stable sort of -x; their values; each row's log sum exp). ``k`` in [1, min(n, TOPK_MAX)]."""
    from specdec.engine import native

    x = np.asarray(x) if not isinstance(x, torch.Tensor) else x
    if getattr(x, "ndim", 0) != 2:
        raise ValueError(f"x must be a 2-D float32 array (rows, n); got {getattr(x, 'shape', type(x))}")
    x = _rows_f32(x, int(x.shape[1]))
    k = check_int("k", k, low=1, high=min(TOPK_MAX, x.shape[1]))
    idx = np.empty((x.shape[0], k), dtype=np.int32)
    val = np.empty((x.shape[0], k), dtype=np.float32)
    lse = np.empty(x.shape[0], dtype=np.float32)
    status = native.library("q4q8").specdec_topk(
        x.ctypes.data, x.shape[0], x.shape[1], k, idx.ctypes.data, val.ctypes.data, lse.ctypes.data
    )
    if status != 0:
        raise ValueError(f"specdec_topk refused its arguments (code {status}): shape {x.shape}, k={k}")
    return idx, val, lse


def native_forward(
    model: Any,
    ids: torch.Tensor,
    start: int,
    cache: torch.Tensor,
    keep: int | None,
    tree: TreeLayout | None,
    embeds: torch.Tensor | None = None,
    features: torch.Tensor | None = None,
    prefix: int | None = None,
) -> torch.Tensor:
    """:func:`native_logits` on torch tensors (``ids`` a 1-D integer tensor, ``cache``, ``embeds`` and
    ``features`` float32 CPU tensors, ``features`` written in place), its logits as a tensor."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.is_floating_point():
        is_t = isinstance(ids, torch.Tensor)
        got = f"shape {tuple(ids.shape)}, {ids.dtype}" if is_t else type(ids).__name__
        raise ValueError(f"ids must be a 1-D integer tensor; got {got}")
    arrays = []
    for name, value in (("cache", cache), ("embeds", embeds), ("features", features)):
        if value is not None and (not isinstance(value, torch.Tensor) or value.device.type != "cpu"):
            raise ValueError(f"{name} must be a CPU tensor; got {type(value).__name__}")
        arrays.append(None if value is None else value.detach().numpy())
    out = native_logits(model, ids.tolist(), start, arrays[0], keep, tree, arrays[1], arrays[2], prefix)
    return torch.from_numpy(out)


def _float_rows(name: str, value: Any, shape: tuple[int, int], *, written: bool = False) -> np.ndarray:
    """``value`` (a numpy array, a float32 CPU tensor read in place, or a list read as float32) checked as a
    float32 array of ``shape`` (C-contiguous if ``written``; a read one is copied to contiguous rows), or
    ValueError naming it."""
    if isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dtype == torch.float32:
        value = value.detach().numpy()
    elif not written and isinstance(value, list | tuple):  # as torch.as_tensor reads a list: float32
        value = np.asarray(value, dtype=np.float32)
    if not isinstance(value, np.ndarray) or value.dtype != np.float32 or value.shape != shape:
        described = hasattr(value, "shape") and hasattr(value, "dtype")
        got = f"{tuple(value.shape)} {value.dtype}" if described else type(value).__name__
        raise ValueError(f"{name} must be a float32 array of shape {shape} (len(ids), hidden); got {got}")
    if written and not value.flags.c_contiguous:
        raise ValueError(f"{name} must be a contiguous array (it is written in place)")
    return value if value.flags.c_contiguous else np.ascontiguousarray(value)


def native_logits(
    model: Any,
    ids: Sequence[int],
    start: int,
    cache: np.ndarray,
    keep: int | None,
    tree: TreeLayout | None,
    embeds: np.ndarray | None = None,
    features: np.ndarray | None = None,
    prefix: int | None = None,
) -> np.ndarray:
    """The C forward of ``model`` (mode ``"q4_1"`` or ``"q4q8"``) over ``ids`` (a list of token ids) at
    ``start`` into ``cache`` (the float32 numpy view of :meth:`LeanLlama.new_cache`'s tensor), its
    arguments checked first (ValueError naming the argument); ``tree`` runs the tree forward. Logits over
    the head's rows, (keep or len(ids), head rows) float32. ``embeds`` and ``features`` (``"q4q8"`` only):
    (len(ids), hidden) float32 rows in place of the embedding's, and the array that receives every row's
    residual before the final norm. ``prefix`` (``"q4q8"``, a tree only; None: ``start``): the call's tree
    hangs below nodes earlier calls wrote at slots ``prefix`` .. ``start`` - 1, and ``tree`` is the layout
    of that whole region (start - prefix + len(ids) nodes, this call's rows last): each row attends to
    slots 0 .. prefix-1 and its path, rotated at ``prefix`` + its depth, so its logits equal the chain's
    over its path.

    No torch operation runs here: the decoding loop calls this between two C forwards, where one costs
    about 20 us (a dev probe on a 2-core EPYC; 1 us when timed alone)."""
    from specdec.engine import native

    k = len(ids)
    rows = k if keep is None else keep
    shape = (model.num_layers, 2, model.kv_heads, cache.shape[3] if cache.ndim == 5 else -1, model.head_dim)
    if cache.dtype != np.float32 or not cache.flags.c_contiguous or cache.shape != shape:
        raise ValueError(
            f"cache must be a contiguous float32 tensor of shape {shape} "
            "(LeanLlama.new_cache; here its numpy view)"
        )
    # the C code indexes raw memory: check what torch's indexing would have checked
    if k < 1 or not 1 <= rows <= k:
        raise ValueError(f"need 1 <= keep <= len(ids) (len(ids) = {k}); got keep={keep!r}")
    if start < 0 or start + k > min(shape[3], model.max_positions):
        raise ValueError(
            f"positions {start}..{start + k - 1} do not fit the cache ({shape[3]} slots) "
            f"and max_position_embeddings ({model.max_positions})"
        )
    vocab = int(model.embed.shape[0])
    if not all(type(t) is int for t in ids) or not 0 <= min(ids) <= max(ids) < vocab:
        raise ValueError(f"token ids must lie in [0, {vocab}) as integers; got {list(ids)!r}")
    if (embeds is not None or features is not None) and model.mode != "q4q8":
        raise ValueError(
            f"embeds/features needs mode 'q4q8' or a torch mode; this model's mode is {model.mode!r}"
        )
    if embeds is not None:
        embeds = _float_rows("embeds", embeds, (k, model.hidden))
    if features is not None:
        features = _float_rows("features", features, (k, model.hidden), written=True)
    if tree is not None and (prefix is None or prefix == start) and len(tree.parents) != k:
        raise ValueError(f"tree must lay out the call's {k} nodes; got a layout of {len(tree.parents)}")
    if prefix is not None and prefix != start:
        if model.mode != "q4q8" or tree is None:
            raise ValueError("prefix below start needs mode 'q4q8' and a tree (the region's layout)")
        if not 0 <= prefix < start or len(tree.parents) != start - prefix + k:
            raise ValueError(
                f"prefix must lie in [0, start={start}) and the tree cover slots prefix..start+k-1 "
                f"({start - (prefix if isinstance(prefix, int) else 0) + k} nodes); got prefix={prefix!r}, "
                f"{len(tree.parents)} nodes"
            )
    ids_a = np.array(ids, dtype=np.int64)
    logits = np.empty((rows, model.head.out_features), dtype=np.float32)
    parents = None if tree is None else np.array(tree.parents, dtype=np.int32)
    pointer = {
        "ids": ids_a.ctypes.data, "cache": cache.ctypes.data, "logits": logits.ctypes.data,
        "parents": None if parents is None else parents.ctypes.data,
    }  # fmt: skip
    if model.mode == "q4q8":
        q8_forward(model).forward(
            None if embeds is not None else pointer["ids"], k, start, pointer["cache"], shape[3],
            pointer["logits"], rows, model.num_layers, model.threads, pointer["parents"],
            None if embeds is None else embeds.ctypes.data,
            None if features is None else features.ctypes.data, prefix,
        )  # fmt: skip
        return logits
    lib, structure = native.library(), ctypes.byref(native_structure(model))
    if parents is None:
        status = lib.specdec_q4_forward(
            structure, pointer["ids"], k, start, pointer["cache"], shape[3], pointer["logits"], rows
        )
    else:
        status = lib.specdec_q4_forward_tree(
            structure, pointer["ids"], pointer["parents"], k, start, pointer["cache"], shape[3],
            pointer["logits"], rows,
        )  # fmt: skip
    if status == -2:
        raise ValueError(
            f"the C forward refused its arguments: k={k}, start={start}, keep={rows}"
            + ("" if parents is None else ", or a parent outside [-1, r - 1]")
        )
    if status != 0:
        raise MemoryError("the C forward could not allocate its work buffers")
    return logits


class EagleLevel:
    """One level of EAGLE's draft in one C call (``specdec_q8_eagle_level``, issue 40 item 4).

    For k rows of (pre-norm features f, token x): the inputs ``fc([norm(f), embed[x]])`` (the target's
    final norm and embedding table, ``fc`` a :class:`Q8Linear` of (hidden, 2 hidden)), the draft layer
    (``layer``: a ``"q4q8"`` :class:`~specdec.engine.lean.LeanLlama` whose head is the kept vocabulary)
    over them at slots ``start`` .. in ``cache`` (a chain; or a tree region's ``parents`` below
    ``prefix``, as :func:`native_forward` takes them), every row's pre-norm output, and the top ``top``
    kept-vocabulary entries of the last ``keep`` rows with their log-probabilities. The same bits as
    :meth:`inputs`, :func:`native_forward` and :func:`topk` called one after another (tested), without
    Python between them: one call per level, as the issue asks. The norm is the C engine's RMS norm
    (``rms`` of ``lean_common.h``), as every norm of the q4q8 forward."""

    def __init__(
        self, layer: Any, fc: Q8Linear, norm: np.ndarray, eps: float, embed: np.ndarray, threads: int = 1
    ) -> None:
        from specdec.engine import native

        self.lib = native.library("q4q8")
        self.forward = q8_forward(layer)  # the layer's repacked model (its handle)
        self.layer, self.fc = layer, fc
        self.hidden = int(layer.hidden)
        if fc.in_features != 2 * self.hidden or fc.out_features != self.hidden:
            raise ValueError(
                f"fc must map 2 x hidden = {2 * self.hidden} to hidden = {self.hidden}; got "
                f"({fc.out_features}, {fc.in_features})"
            )
        self.norm = np.ascontiguousarray(norm, dtype=np.float32)
        self.embed = np.ascontiguousarray(embed, dtype=np.float32)
        if self.norm.shape != (self.hidden,) or self.embed.ndim != 2 or self.embed.shape[1] != self.hidden:
            raise ValueError(
                f"norm must have shape ({self.hidden},) and embed (vocab, {self.hidden}); got "
                f"{self.norm.shape}, {self.embed.shape}"
            )
        self.eps = float(eps)
        if not self.eps > 0:
            raise ValueError(f"eps must be > 0; got {eps!r}")
        if not np.isfinite(self.norm).all():
            raise ValueError("norm must hold finite values only")
        self.threads = check_int("threads", threads, low=1, high=1024)
        self.vocab = int(self.embed.shape[0])
        self.kept = int(layer.head.out_features)

    def _rows(self, feats: Any, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        feats = np.ascontiguousarray(feats, dtype=np.float32)
        ids = _ids("ids", ids)
        if feats.ndim != 2 or feats.shape[1] != self.hidden or ids.shape != (feats.shape[0],) or not len(ids):
            raise ValueError(
                f"feats must have shape (k >= 1, {self.hidden}) and ids (k,); got {feats.shape}, {ids.shape}"
            )
        return feats, ids

    def inputs(self, feats: Any, ids: Any) -> np.ndarray:
        """The draft layer's input rows ``fc([norm(f), embed[x]])`` (k, hidden), in C
        (``specdec_q8_eagle_inputs``)."""
        feats, ids = self._rows(feats, ids)
        out = np.empty((len(ids), self.hidden), dtype=np.float32)
        status = self.lib.specdec_q8_eagle_inputs(
            self.forward.handle, self.fc.handle, self.norm.ctypes.data, self.eps, self.embed.ctypes.data,
            self.vocab, feats.ctypes.data, ids.ctypes.data, len(ids), out.ctypes.data, self.threads,
        )  # fmt: skip
        self._raise(status, len(ids))
        return out

    def __call__(
        self,
        feats: Any,
        ids: Any,
        cache: torch.Tensor,
        start: int,
        keep: int,
        top: int,
        parents: Sequence[int] | None = None,
        prefix: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(every row's pre-norm output (k, hidden), the last ``keep`` rows' top ``top`` kept indices
        (keep, top) and their log-probabilities) of the level whose rows are (``feats``, ``ids``) at slots
        ``start`` ..; ``parents`` None: a chain (``prefix`` must then be None or ``start``)."""
        feats, ids = self._rows(feats, ids)
        k = len(ids)
        layer, slots = self.layer, int(cache.shape[3]) if cache.dim() == 5 else -1
        shape = (layer.num_layers, 2, layer.kv_heads, slots, layer.head_dim)
        if cache.dtype != torch.float32 or not cache.is_contiguous() or tuple(cache.shape) != shape:
            raise ValueError(
                f"cache must be a contiguous float32 tensor of shape {shape} (LeanLlama.new_cache)"
            )
        prefix = start if prefix is None else prefix
        top = check_int("top", top, low=1, high=min(TOPK_MAX, self.kept))  # before any buffer is made
        for name, value, low in (("start", start, 0), ("prefix", prefix, 0), ("keep", keep, 1)):
            check_int(name, value, low=low, high=2**31 - 1)
        if prefix > start:
            raise ValueError(f"prefix must lie in [0, start = {start}]; got {prefix}")
        par = None
        if parents is not None:  # the C code reads start - prefix + k entries: check that many are given
            par = np.ascontiguousarray(parents, dtype=np.int32)
            if par.ndim != 1 or len(par) != start - prefix + k:
                raise ValueError(
                    f"parents must be one entry per node of the region, start - prefix + k = "
                    f"{start - prefix + k}; got shape {par.shape}"
                )
        elif prefix != start:
            raise ValueError(
                f"a chain (parents None) needs prefix == start; got prefix={prefix}, start={start}"
            )
        if keep > k:
            raise ValueError(f"need 1 <= keep <= k = {k} and top >= 1; got keep={keep!r}, top={top!r}")
        out = np.empty((k, self.hidden), dtype=np.float32)
        idx = np.empty((keep, top), dtype=np.int32)
        val = np.empty((keep, top), dtype=np.float32)
        lse = np.empty(keep, dtype=np.float32)
        status = self.lib.specdec_q8_eagle_level(
            self.forward.handle, self.fc.handle, self.norm.ctypes.data, self.eps, self.embed.ctypes.data,
            self.vocab, feats.ctypes.data, ids.ctypes.data, None if par is None else par.ctypes.data, k,
            start, prefix, cache.data_ptr(), int(cache.shape[3]), keep, self.threads, out.ctypes.data, top,
            idx.ctypes.data, val.ctypes.data, lse.ctypes.data,
        )  # fmt: skip
        self._raise(status, k, start=start, keep=keep, top=top, prefix=prefix, capacity=int(cache.shape[3]))
        return out, idx, val - lse[:, None]

    def _raise(self, status: int, k: int, **what: Any) -> None:
        if status == -1:
            raise MemoryError("EAGLE's level could not allocate its work buffers")
        if status != 0:
            said = ", ".join(f"{name}={value}" for name, value in what.items())
            raise ValueError(
                f"EAGLE's level refused its arguments (code {status}): k={k}{', ' + said if said else ''}; "
                f"token ids must lie in [0, {self.vocab}), features be finite, top in [1, "
                f"{min(TOPK_MAX, self.kept)}], the slots fit the cache and parents lie in [-1, i - 1]"
            )


def _vector(name: str, x: Any, n: int, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``x`` as n contiguous finite float32 values (of ``shape`` or flat), or ValueError naming it."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.size != n or (x.ndim > 1 and shape is not None and x.shape != shape):
        raise ValueError(
            f"{name} must hold {n} float32 values{f' of shape {shape}' if shape else ''}; got {x.shape}"
        )
    if not np.isfinite(x).all():
        raise ValueError(f"{name} must hold finite values only")
    return x


def _ids(name: str, ids: Any) -> np.ndarray:
    """Token ids as int64, refusing anything that is not an integer (a float id is not truncated)."""
    arr = np.asarray(ids)
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers; got {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _raise_head(what: str, status: int, **said: Any) -> None:
    if status == -1:
        raise MemoryError(f"{what} could not allocate its work buffers")
    if status != 0:
        raise ValueError(
            f"{what} refused its arguments (code {status}): "
            + ", ".join(f"{k}={v}" for k, v in said.items())
            + f"; top must lie in [1, {TOPK_MAX}] and the kept head's rows, token ids in the vocabulary, "
            "and the inputs be finite"
        )


class MedusaHeads:
    """Medusa-1's draft in one C call (``specdec_q8_medusa``): u = rms(feat) * norm, z = w u + bias (heads x
    hidden), r_k = u + SiLU(z_k), and each head's top ``top`` kept-vocabulary indices (heads, top) with
    their log-probabilities under the head's softmax. The heads' constants are checked once, here; a call
    checks only its feature and ``top``."""

    def __init__(
        self, w: Q8Linear, bias: Any, head: Q8Linear, norm: Any, eps: float, threads: int = 1
    ) -> None:
        hidden = head.in_features
        if w.in_features != hidden or w.out_features % hidden:
            raise ValueError(
                f"w must map hidden = {hidden} to a multiple of it; got ({w.out_features}, {w.in_features})"
            )
        self.w, self.head, self.hidden, self.heads = w, head, hidden, w.out_features // hidden
        self.bias = _vector("bias", bias, self.heads * hidden, (self.heads, hidden))
        self.norm = _vector("norm", norm, hidden)
        if not float(eps) > 0:
            raise ValueError(f"eps must be > 0; got {eps!r}")
        self.eps = float(eps)
        self.threads = check_int("threads", threads, low=1, high=1024)

    def __call__(self, feat: Any, top: int) -> tuple[np.ndarray, np.ndarray]:
        feat = _vector("feat", feat, self.hidden)
        top = check_int("top", top, low=1, high=min(TOPK_MAX, self.head.out_features))
        idx = np.empty((self.heads, top), dtype=np.int32)
        val = np.empty((self.heads, top), dtype=np.float32)
        lse = np.empty(self.heads, dtype=np.float32)
        status = self.head.lib.specdec_q8_medusa(
            self.w.handle, self.bias.ctypes.data, self.head.handle, self.norm.ctypes.data, self.eps,
            feat.ctypes.data, self.heads, top, idx.ctypes.data, val.ctypes.data, lse.ctypes.data,
            self.threads,
        )  # fmt: skip
        _raise_head("Medusa's draft", status, heads=self.heads, top=top, eps=self.eps)
        return idx, val - lse[:, None]


class MlpStage:
    """An MLP speculator's stage in one C call (``specdec_q8_mlp_stage``): for each row, its state
    (``norm`` = (weight, eps): rms-normalized first, as the first stage reads the target's feature) beside
    the embedding of the token it consumes, z = w [state, embed[id]], the next state gelu_tanh(layer_norm(z)
    * ln[0] + ln[1]), and the kept head's top ``top`` tokens of state * out_scale. The stage's constants
    are checked once, here; a call checks only its states, ids and ``top``, and returns (the next states
    (rows, hidden), indices (rows, top), their log-probabilities)."""

    def __init__(
        self,
        w: Q8Linear,
        ln: tuple[Any, Any],
        out_scale: Any,
        head: Q8Linear,
        embed: np.ndarray,
        norm: tuple[Any, float] | None = None,
        threads: int = 1,
    ) -> None:
        hidden = head.in_features
        if w.in_features != 2 * hidden or w.out_features != hidden:
            raise ValueError(
                f"w must map 2 x hidden = {2 * hidden} to {hidden}; got ({w.out_features}, {w.in_features})"
            )
        if (
            not isinstance(embed, np.ndarray)
            or embed.dtype != np.float32
            or embed.ndim != 2
            or embed.shape[1] != hidden
        ):
            raise ValueError(f"embed must be a float32 array (vocab, {hidden})")
        self.w, self.head, self.hidden, self.embed = w, head, hidden, np.ascontiguousarray(embed)
        self.ln_w, self.ln_b = _vector("ln weight", ln[0], hidden), _vector("ln bias", ln[1], hidden)
        self.scale = _vector("out_scale", out_scale, hidden)
        self.norm_w, self.eps = (
            (None, 0.0) if norm is None else (_vector("norm", norm[0], hidden), float(norm[1]))
        )
        if norm is not None and not self.eps > 0:
            raise ValueError(f"norm's eps must be > 0; got {norm[1]!r}")
        self.threads = check_int("threads", threads, low=1, high=1024)

    def __call__(self, states: Any, ids: Any, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        hidden = self.hidden
        states = np.ascontiguousarray(states, dtype=np.float32)
        ids = _ids("ids", ids)
        if states.ndim != 2 or states.shape[1] != hidden or ids.shape != (states.shape[0],) or not len(ids):
            raise ValueError(
                f"states must have shape (rows >= 1, {hidden}) and ids (rows,); "
                f"got {states.shape}, {ids.shape}"
            )
        top = check_int("top", top, low=1, high=min(TOPK_MAX, self.head.out_features))
        rows = len(ids)
        out = np.empty((rows, hidden), dtype=np.float32)
        idx = np.empty((rows, top), dtype=np.int32)
        val = np.empty((rows, top), dtype=np.float32)
        lse = np.empty(rows, dtype=np.float32)
        status = self.head.lib.specdec_q8_mlp_stage(
            self.w.handle, self.ln_w.ctypes.data, self.ln_b.ctypes.data, self.scale.ctypes.data,
            self.head.handle, None if self.norm_w is None else self.norm_w.ctypes.data, self.eps,
            states.ctypes.data, self.embed.ctypes.data, int(self.embed.shape[0]), ids.ctypes.data, rows, top,
            out.ctypes.data, idx.ctypes.data, val.ctypes.data, lse.ctypes.data, self.threads,
        )  # fmt: skip
        _raise_head("the MLP speculator's stage", status, rows=rows, top=top)
        return out, idx, val - lse[:, None]
