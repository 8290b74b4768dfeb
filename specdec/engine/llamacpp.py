"""llama.cpp as a target for specdec's own decoding loops (optional: needs ``llama_cpp``).

:class:`LlamaCppModel` wraps ``llama_cpp.Llama`` (llama-cpp-python) so that
:func:`specdec.engine.decoding.autoregressive` and :func:`specdec.engine.decoding.speculative` run on it
unchanged: :meth:`LlamaCppModel.session` returns an object with the interface of
:class:`specdec.engine.lm.CachedLM` (``forward``, ``crop``, ``sync``, ``ids``, ``calls``). The same
loops, drafters and statistics then compare the engines, and only the forward differs. It verifies
chains only: its sessions have no tree calls (``forward_tree`` and ``keep_path`` raise
NotImplementedError; llama.cpp's tree verification is not wrapped here).

llama-cpp-python ships as a source distribution on PyPI (a C++ build of several minutes);
install it yourself, e.g. ``pip install llama-cpp-python`` (CPU backend). It is not a
dependency of the book or of its tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from specdec.engine.lm import Session
from specdec.theory.checks import check_int

__all__ = ["LOOPS", "LlamaCppModel", "available", "requantized"]

#: How a :class:`LlamaCppModel` drives llama.cpp. ``eval``: llama-cpp-python's ``Llama.eval`` with every
#: position's logits kept (its high-level path, what ``Llama.generate`` runs); ``lowlevel``: one
#: ``llama_decode`` per call through its low-level API, logits only for the rows asked for (plain
#: decoding: the last row), as llama.cpp's own examples do: its lowest-overhead loop.
LOOPS = {
    "eval": "Llama.eval, logits of every position (llama-cpp-python's high-level path)",
    "lowlevel": "one llama_decode per call, logits of the rows asked for only (low-level API)",
}


def requantized(gguf: str | Path, ftype: str = "q4_0", *, threads: int = 1) -> Path:
    """``gguf`` requantized by llama.cpp (``llama_model_quantize`` with ``allow_requantize``) to
    ``ftype`` (``"q4_0"``: the format with llama.cpp's repacked CPU kernels), cached beside the
    package's other files. The result is NOT the same weights: a Q4_1 code re-encoded as Q4_0
    (no minimum per block) rounds every weight again."""
    import llama_cpp

    from specdec.engine.models import cache_root

    codes = {"q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0}
    if ftype not in codes:
        raise ValueError(f"ftype must be one of {sorted(codes)}; got {ftype!r}")
    src = Path(gguf)
    out = cache_root() / "llamacpp" / f"{src.stem}-requantized-{ftype}.gguf"
    if out.exists() and out.stat().st_size > 0:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = codes[ftype]
    params.allow_requantize = True
    params.nthread = threads
    status = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
    if status != 0 or not tmp.exists():
        raise OSError(f"llama_model_quantize failed ({status}) requantizing {src} to {ftype}")
    tmp.replace(out)
    return out


def available() -> bool:
    """True when ``llama_cpp`` can be imported."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


class LlamaCppModel:
    """A GGUF loaded by llama.cpp, decodable by specdec's loops (one session at a time).

    ``threads`` is llama.cpp's thread count for decoding and for prompt batches; ``n_ctx`` its
    context; ``loop`` how it is driven (:data:`LOOPS`: ``eval`` keeps every position's logits,
    ``lowlevel`` asks for the rows a call returns only).
    """

    #: its forward runs on its own threads, outside torch (:func:`specdec.engine.cores.torch_threads_for`
    #: then keeps torch on one thread, so that torch's spinning workers leave it the cores)
    runs_outside_torch = True

    def __init__(self, gguf: str | Path, *, threads: int = 1, n_ctx: int = 2048, loop: str = "eval") -> None:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ImportError(
                "LlamaCppModel needs llama-cpp-python: pip install llama-cpp-python (a C++ build)"
            ) from exc
        check_int("threads", threads, low=1, high=1024)
        check_int("n_ctx", n_ctx, low=16, high=1 << 20)
        if loop not in LOOPS:
            raise ValueError(f"loop must be one of {sorted(LOOPS)}; got {loop!r}")
        self.loop = loop
        self.llm = Llama(
            model_path=str(gguf),
            n_ctx=n_ctx,
            n_batch=n_ctx,  # one llama_decode takes any call that fits the context
            n_threads=threads,
            n_threads_batch=threads,
            logits_all=loop == "eval",
            verbose=False,
        )
        self.vocab_size = int(self.llm.n_vocab())
        self.config = SimpleNamespace(max_position_embeddings=n_ctx)
        self.device, self.dtype = torch.device("cpu"), torch.float32
        self.threads = threads
        self._active: LlamaCppSession | None = None
        self._batch: Any = None
        if loop == "lowlevel":
            from llama_cpp._internals import LlamaBatch

            self._batch = LlamaBatch(n_tokens=n_ctx, embd=0, n_seq_max=1)

    def session(self) -> LlamaCppSession:
        """A fresh decoding state; llama.cpp's context is shared, so an older session is closed."""
        if self._active is not None:
            self._active.closed = True
        self._active = LlamaCppSession(self)
        return self._active


class LlamaCppSession(Session):
    """CachedLM's interface over llama.cpp's KV cache (rewound by position)."""

    def __init__(self, model: LlamaCppModel) -> None:
        self.model = model
        self.device, self.dtype = model.device, model.dtype
        self.vocab_size = model.vocab_size
        self.calls = 0
        self.closed = False
        self.ids: list[int] = []
        model.llm.reset()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this llama.cpp session was replaced by a newer one on the same model")

    def reset(self) -> None:
        self._check_open()
        self.ids = []
        self.model.llm.reset()

    def forward(self, new_ids: Sequence[int], keep: int | None = None) -> torch.Tensor:
        """Feed ``new_ids`` after the cached tokens in one llama.cpp call; float32 logits of the last
        ``keep`` rows (default: every new row), (keep, V)."""
        self._check_open()
        n = self._check_forward(new_ids, keep)
        rows_wanted = keep or n
        if len(self.ids) + n > self.model.config.max_position_embeddings:
            raise ValueError(
                f"new_ids would take the cache to {len(self.ids) + n} tokens; this model's context holds "
                f"{self.model.config.max_position_embeddings} (LlamaCppModel's n_ctx)"
            )
        llm = self.model.llm
        tokens = [int(t) for t in new_ids]
        if self.model.loop == "eval":
            llm.n_tokens = len(self.ids)  # eval() drops every cached position from here on
            llm.eval(tokens)
            self.calls += 1
            self.ids.extend(tokens)
            rows = np.array(llm.scores[llm.n_tokens - rows_wanted : llm.n_tokens], dtype=np.float32)
            return torch.from_numpy(rows)
        # the low-level loop: one llama_decode, logits requested for the wanted rows only
        import llama_cpp

        ctx, batch = llm._ctx, self.model._batch
        ctx.kv_cache_seq_rm(0, len(self.ids), -1)  # positions past the kept prefix (a crop) go
        batch.set_batch(tokens, n_past=len(self.ids), logits_all=False)
        for i in range(n - rows_wanted, n):
            batch.batch.logits[i] = True
        ctx.decode(batch)
        self.calls += 1
        self.ids.extend(tokens)
        vocab = self.vocab_size
        out = np.empty((rows_wanted, vocab), dtype=np.float32)
        for j, i in enumerate(range(n - rows_wanted, n)):
            out[j] = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx.ctx, i), shape=(vocab,))
        return torch.from_numpy(out)

    def crop(self, n: int) -> None:
        """Keep the first ``n`` cached tokens (the next eval overwrites the rest)."""
        self._check_crop(n)
        del self.ids[n:]
