"""A causal language model with a KV cache that can be cropped: the state both decoding loops share.

:class:`CachedLM` wraps a Hugging Face causal LM (e.g. ``LlamaForCausalLM``) together with a
``transformers.DynamicCache`` and the list of token ids whose keys and values the cache holds.
The cache is *position-indexed*, as in gpt-fast: cache slot ``i`` holds token ``ids[i]``, and a
token fed next gets position id ``len(ids)`` (gpt-fast's ``input_pos``). Rolling back after a
rejection is therefore a crop of every layer to a length, never a reset.

Everything runs under ``torch.inference_mode()``; device and dtype are the model's, and the
logits come back as float32 rows whatever the model's dtype.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import Any

import torch

from specdec.theory.checks import check_int, check_optional_int
from specdec.theory.tokens import common_prefix_len

__all__ = [
    "TensorSession",
    "CachedLM",
    "Session",
    "cache_argument",
    "common_prefix_len",
    "forward_kwargs",
    "new_cache",
    "open_lm",
    "vocab_size",
]


def vocab_size(model: torch.nn.Module) -> int:
    """V: the width of the model's logits rows (rows of its output embedding)."""
    if not hasattr(model, "get_output_embeddings"):  # a specdec.engine.lean.LeanLlama
        return int(model.vocab_size)
    head = model.get_output_embeddings()
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.vocab_size)


def open_lm(model: object) -> Session:
    """A fresh decoding state over ``model``: a :class:`CachedLM` for a Hugging Face model, a
    :class:`specdec.engine.lean.LeanSession` (same interface) for a :class:`specdec.engine.lean.LeanLlama`."""
    session = getattr(model, "session", None)
    if callable(session):
        return session()
    return CachedLM(model)


@functools.cache
def _forward_params(model_class: type) -> tuple[str, str | None]:
    params = inspect.signature(model_class.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"
    keep_arg = next((a for a in ("logits_to_keep", "num_logits_to_keep") if a in params), None)
    return cache_arg, keep_arg


def forward_kwargs(model: object) -> tuple[str, str | None]:
    """The names of a transformers model's forward arguments that moved between versions:
    ``(cache argument, keep-last-logits argument or None)``. transformers 5.x names the cache
    argument ``cache``, 4.x ``past_key_values``; the logits argument is ``logits_to_keep``
    (``num_logits_to_keep`` before 4.50). The one place that asks."""
    return _forward_params(model if isinstance(model, type) else type(model))


def cache_argument(model: object) -> str:
    """The name of the forward's cache argument (:func:`forward_kwargs`)."""
    return forward_kwargs(model)[0]


def new_cache(config: object) -> Any:
    """An empty DynamicCache (transformers >= 4.56 takes the config; older versions do not).
    transformers is imported here, not at import: sessions without transformers (the GPU run)."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=config)
    except TypeError:
        return DynamicCache()


class Session:
    """What every decoding state shares: the cached ids, argument checks, and :meth:`sync`.

    Subclasses (:class:`CachedLM`, :class:`specdec.engine.lean.LeanSession`,
    :class:`specdec.engine.llamacpp.LlamaCppSession`) implement ``forward`` and ``crop``; those that
    verify draft trees (:class:`CachedLM`, :class:`specdec.engine.lean.LeanSession`) also
    ``forward_tree`` and ``keep_path``.
    """

    ids: list[int]
    #: the last tree call, (start, parents), so that keep_path can check its nodes form a path
    _tree_call: tuple[int, list[int]] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def forward(self, new_ids: Sequence[int], keep: int | None = None) -> torch.Tensor:
        raise NotImplementedError

    def crop(self, n: int) -> None:
        raise NotImplementedError

    def reserve(self, n: int) -> None:  # noqa: B027 (an optional hint)
        """Make room for ``n`` cached positions now, so that a generation's calls do not grow the cache
        on the way (a hint: the decoding loops give the prompt, the new tokens and the widest round;
        by default nothing, for a session whose cache needs no growing)."""

    def forward_tree(self, new_ids: Sequence[int], parents: Sequence[int]) -> torch.Tensor:
        """Feed a draft tree after the cached tokens in one call: ``parents[r]`` in ``[-1, r - 1]`` (-1:
        a child of the last cached token); logits (n, V), row r those of the chain over r's path.
        The nodes take the slots after the cache, and ``ids`` becomes the prefix plus every node."""
        raise NotImplementedError(
            f"{type(self).__name__} verifies chains only: tree calls (forward_tree, keep_path) need a "
            "LeanSession (any lean mode) or a CachedLM (Hugging Face)"
        )

    def keep_path(self, start: int, nodes: Sequence[int]) -> None:
        """After a tree call at ``start``, keep only its nodes ``nodes`` (ascending call indices forming a
        root-down chain, e.g. [0, 2, 5]): their keys and values move to slots ``start, start + 1, ...``,
        the cache ends after them and ``ids`` is the prefix plus their tokens."""
        raise NotImplementedError(
            f"{type(self).__name__} verifies chains only: tree calls (forward_tree, keep_path) need a "
            "LeanSession (any lean mode) or a CachedLM (Hugging Face)"
        )

    def _check_keep_path(self, start: int, nodes: Sequence[int]) -> list[int]:
        """Refuse a ``start`` outside the cache or ``nodes`` that are not ascending call indices after it
        (nor, after a tree call at ``start``, a root-down chain of its tree); return the nodes."""
        start = check_int("start", start, low=0, high=len(self.ids), note="the cached length")
        n = len(self.ids) - start
        out = []
        for j, node in enumerate(nodes):
            node = check_int(f"nodes[{j}]", node, low=0, high=n - 1, note="the nodes after start")
            if out and node <= out[-1]:
                raise ValueError(f"nodes must be ascending (a root-down path); got {list(nodes)!r}")
            out.append(node)
        if self._tree_call is not None and self._tree_call[0] == start and len(self._tree_call[1]) == n:
            parents = self._tree_call[1]
            for j, node in enumerate(out):
                above = out[j - 1] if j else -1
                if parents[node] != above:
                    raise ValueError(
                        f"nodes must be a root-down path of the tree call at {start}: node {node}'s "
                        f"parent is {parents[node]}, not {above}; got {out!r}"
                    )
        return out

    def _check_forward(self, new_ids: Sequence[int], keep: int | None) -> int:
        """Refuse an empty feed or a ``keep`` outside [1, n]; return n."""
        n = len(new_ids)
        if n == 0:
            raise ValueError("new_ids must hold at least one token id")
        check_optional_int("keep", keep, low=1, high=n)
        return n

    def _check_crop(self, n: int) -> None:
        check_int("n", n, low=0, high=len(self.ids), note="the cached length")

    def sync(self, prefix: Sequence[int]) -> torch.Tensor:
        """Make the cache hold exactly ``prefix``; return the logits after its last token, (1, V).

        Cached keys and values depend only on the tokens up to their position, so the
        longest common prefix of ``ids`` and ``prefix`` stays; the rest is cropped and the
        missing tokens are fed in one call (at least the last token, whose logits are
        returned). This is how a draft model catches up after a round: one token after a
        rejection, two after a full accept (the last draft, which the draft never fed, and
        the bonus token: the "draft-cache gap" that gpt-fast closes with an extra forward).
        """
        if len(prefix) == 0:
            raise ValueError("prefix must hold at least one token id")
        keep = min(common_prefix_len(self.ids, prefix), len(prefix) - 1)
        self.crop(keep)
        return self.forward(prefix[keep:], keep=1)


class CachedLM(Session):
    """A Hugging Face causal LM plus the KV cache of the tokens it has already seen.

    ``ids`` lists the cached tokens in order. :meth:`forward` feeds new tokens after them
    and returns their logits; :meth:`crop` forgets a suffix (every layer alike);
    :meth:`sync` makes the cache hold a given prefix by keeping the longest common prefix
    and feeding only what is missing. ``calls`` counts model forward calls.

    The model is put in eval mode (dropout off). Batch size is 1.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model.eval() if model.training else model
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.vocab_size = vocab_size(model)
        self._cache_arg = cache_argument(model)
        self.calls = 0
        self.reset()

    def reset(self) -> None:
        """Forget every cached token."""
        self.cache = new_cache(self.model.config)
        self.ids: list[int] = []
        self._tree_call = None

    @torch.inference_mode()
    def forward(self, new_ids: Sequence[int], keep: int | None = None) -> torch.Tensor:
        """Feed ``new_ids`` after the cached tokens in one model call; return their logits.

        Returns a float32 tensor of shape (n, V) on the model's device, row j being the
        logits of the token that follows ``new_ids[j]`` (only the last ``keep`` rows when
        ``keep`` is given: transformers' ``logits_to_keep``, which skips the LM head elsewhere).
        """
        n = self._check_forward(new_ids, keep)
        start = len(self.ids)
        input_ids = torch.tensor([[int(t) for t in new_ids]], dtype=torch.long, device=self.device)
        position_ids = torch.arange(start, start + n, device=self.device).unsqueeze(0)
        out = self.model(
            input_ids=input_ids,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=keep or 0,
            **{self._cache_arg: self.cache},
        )
        self.calls += 1
        self.ids.extend(int(t) for t in new_ids)
        return out.logits[0].float()

    @torch.inference_mode()
    def forward_tree(self, new_ids: Sequence[int], parents: Sequence[int]) -> torch.Tensor:
        """:meth:`Session.forward_tree` through a 4D additive attention mask (each node sees the prefix,
        its ancestors and itself) and position ids (prefix length + depth). Close to the chain over each
        path (about 1e-5 in float32), not bit for bit: the model's kernels see other shapes."""
        from specdec.theory.trees import tree_layout

        n = self._check_forward(new_ids, None)
        tree = tree_layout(parents, n)
        start = len(self.ids)
        visible = torch.zeros(n, start + n, dtype=torch.bool)
        visible[:, :start] = True
        for r, path in enumerate(tree.paths):
            visible[r, [start + i for i in path]] = True
        mask = torch.zeros(visible.shape, dtype=self.dtype).masked_fill(~visible, torch.finfo(self.dtype).min)
        input_ids = torch.tensor([[int(t) for t in new_ids]], dtype=torch.long, device=self.device)
        position_ids = torch.tensor(tree.positions(start))[None].to(self.device)
        out = self.model(
            input_ids=input_ids,
            position_ids=position_ids,
            attention_mask=mask[None, None].to(self.device),
            use_cache=True,
            **{self._cache_arg: self.cache},
        )
        self.calls += 1
        self.ids.extend(int(t) for t in new_ids)
        self._tree_call = (start, list(tree.parents))
        return out.logits[0].float()

    @torch.inference_mode()
    def keep_path(self, start: int, nodes: Sequence[int]) -> None:
        """:meth:`Session.keep_path` by an index_select on every layer's keys and values."""
        nodes = self._check_keep_path(start, nodes)
        index = torch.tensor([start + i for i in nodes], dtype=torch.long, device=self.device)
        layers = getattr(self.cache, "layers", None)
        if layers is not None:  # transformers >= 4.56: one object per layer
            for layer in layers:
                if getattr(layer, "keys", None) is not None and layer.keys.numel():
                    for name in ("keys", "values"):
                        t = getattr(layer, name)
                        setattr(layer, name, torch.cat([t[..., :start, :], t.index_select(-2, index)], -2))
        else:  # older: key_cache and value_cache lists
            for caches in (self.cache.key_cache, self.cache.value_cache):
                for i, t in enumerate(caches):
                    caches[i] = torch.cat([t[..., :start, :], t.index_select(-2, index)], -2)
        self.ids[start:] = [self.ids[start + i] for i in nodes]
        self._tree_call = None

    @torch.inference_mode()
    def crop(self, n: int) -> None:
        """Keep the first ``n`` cached tokens and drop the rest from every layer."""
        self._check_crop(n)
        drop = len(self.ids) - n
        if drop == 0:
            return
        if n == 0:
            self.reset()
            return
        # A negative argument removes that many tokens, in transformers 4.x and 5.x alike
        # (5.x refuses positive "keep this many" arguments).
        self.cache.crop(-drop)
        del self.ids[n:]


class TensorSession:
    """A transformers model and its KV cache over b sequences, fed id tensors: a
    :class:`specdec.engine.lm.Session`
    (``forward``, ``crop``, ``len``) for timing the bare forward, batched or not.

    Unlike :class:`specdec.engine.lm.CachedLM` it builds no tensor and copies no logits inside the
    call: :meth:`forward` takes a (b, k) id tensor on the model's device and returns the
    model's logits for every position (a verify pass needs every row). ``prefix`` (b, n) is
    fed at construction unless ``cache`` already holds it; ``prefill_logits`` keeps the last
    row's logits of that feed (to check they are finite).
    """

    def __init__(
        self, model: Any, prefix: Any = None, *, cache: Any = None, context: int | None = None
    ) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.cache_arg, keep_arg = forward_kwargs(model)
        self.prefill_logits = None
        if cache is None:
            self.cache = new_cache(model.config)
            if not getattr(self.cache, "is_croppable", True):
                raise ValueError("the model's KV cache cannot be cropped (sliding-window layers?)")
            prefix = prefix.to(self.device)
            positions = torch.arange(prefix.shape[1], device=self.device).expand(prefix.shape[0], -1)
            keep = {keep_arg: 1} if keep_arg else {}
            with torch.inference_mode():
                out = self.model(
                    input_ids=prefix,
                    position_ids=positions,
                    use_cache=True,
                    **{self.cache_arg: self.cache},
                    **keep,
                )
            self.prefill_logits = out.logits[:, -1]
        else:
            self.cache = cache
        self._len = int(self.cache.get_seq_length())
        if context is not None and self._len != context:
            raise RuntimeError(f"the KV cache holds {self._len} tokens, expected {context}")

    def __len__(self) -> int:
        return self._len

    def forward(self, new_ids: Any, keep: int | None = None) -> Any:
        """One forward over the (b, k) ids ``new_ids`` after the cached tokens; every row's logits."""
        k = int(new_ids.shape[1])
        positions = torch.arange(self._len, self._len + k, device=self.device).expand(new_ids.shape[0], -1)
        with torch.inference_mode():
            out = self.model(
                input_ids=new_ids,
                position_ids=positions,
                use_cache=True,
                **{self.cache_arg: self.cache},
            )
        self._len += k
        return out.logits

    def crop(self, n: int) -> None:
        """Keep the first ``n`` cached positions (a negative argument to ``DynamicCache.crop`` removes
        that many, in transformers 4.x and 5.x alike), and check the cache's own length."""
        drop = self._len - n
        if drop > 0:
            with torch.inference_mode():
                self.cache.crop(-drop)
        self._len = n
        held = int(self.cache.get_seq_length())
        if held != n:
            raise RuntimeError(f"after cropping, the cache holds {held} tokens, not {n}")
