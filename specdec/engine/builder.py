"""The one engine builder: an :class:`EngineSpec` -> an :class:`OpenedEngine`.

A target (or a draft) is decoded by one of four engines, each named the same way everywhere:

* ``lean``: :class:`~specdec.engine.lean.LeanLlama` in a weight mode (:data:`specdec.engine.lean.MODES`)
  or ``"auto"``, the mode measured fastest on this machine;
* ``hf``: the transformers model as loaded, in a dtype (:data:`HF_DTYPES`), on a device;
* ``llama.cpp``: :class:`~specdec.engine.llamacpp.LlamaCppModel` on a GGUF in a format
  (:data:`LLAMACPP_FORMATS`: the shipped Q4_1 as is, or Q4_0 requantized from it, llama.cpp's best CPU
  format and not the same weights) driven by a loop (:data:`specdec.engine.llamacpp.LOOPS`);
* ``static``: :class:`~specdec.engine.staticllama.StaticLlama`, the static-cache forward with CUDA graphs
  (the real target on a GPU), in a dtype (:data:`STATIC_DTYPES`), on a device, over a KV cache of a fixed
  capacity, opened from transformers-named weights (:func:`open_weights`; its distilled drafts by
  :func:`open_static_draft`, its early exits are views of it: ``model.early_exit(n)``).

``threads`` means one thing for all four: the threads the engine's forward computes on (the C pool of
the lean native modes, torch's intra-op threads for the torch modes, transformers and the static engine,
llama.cpp's
``n_threads``). It is checked once, when the spec is made (1..1024; None: every core this process may
use), and every engine is opened at it; torch is pinned to it (:func:`specdec.engine.models.set_threads`).
An engine whose forward runs outside torch (the C pool, llama.cpp) owns the cores while it decodes: every
decoding loop puts torch on one thread for its call and gives the caller's count back after
(:mod:`specdec.engine.cores`).

The ``"auto"`` mode is a measurement, which lives in ``measure`` (above this layer): the caller passes
a :data:`Chooser` (:func:`specdec.measure.modes.open_target` does), so this module imports nothing above
``engine``. Every engine of the package is built here: ``tests/test_layers.py`` fails on a
``LeanLlama(...)``, ``LlamaCppModel(...)``, ``StaticLlama(...)`` (``StaticLlama.from_weights``) or
``distilled_draft(...)`` made elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec.theory.checks import check_choice

__all__ = [
    "DRAFT_MODES",
    "ENGINES",
    "HF_DTYPES",
    "LLAMACPP_FORMATS",
    "STATIC_DTYPES",
    "Chooser",
    "EngineSpec",
    "OpenedEngine",
    "available_modes",
    "draft_modes",
    "open_draft",
    "open_engine",
    "open_model",
    "open_static_draft",
    "open_weights",
]

#: The engines a spec may name.
ENGINES = ("lean", "hf", "llama.cpp", "static")
#: transformers' dtypes a spec may name (``mode`` of an ``hf`` engine).
HF_DTYPES = ("float32", "bfloat16")
#: The static-cache engine's dtypes (``mode`` of a ``static`` engine).
STATIC_DTYPES = ("float32", "bfloat16")
#: llama.cpp's GGUF formats (``mode`` of a ``llama.cpp`` engine): the shipped Q4_1 file, or Q4_0
#: requantized from it (:func:`specdec.engine.llamacpp.requantized`).
LLAMACPP_FORMATS = ("q4_1", "q4_0")
#: The lean engine's options a spec may set (:class:`~specdec.engine.lean.LeanLlama`'s keywords).
LEAN_OPTIONS = ("int8_head", "exact_verify")

#: ``(hf_model, modes, threads) -> probe``: measures the lean ``modes`` of ``hf_model`` (None: every mode
#: this machine runs) at ``threads`` and returns a probe whose ``"mode"`` is the choice
#: (:func:`specdec.measure.modes.choose_mode`).
Chooser = Callable[[Any, "Sequence[str] | None", int], dict[str, Any]]


def _threads(threads: Any) -> int:
    from specdec.engine import native

    return native.check_threads(threads)  # 1..1024, None: every usable core


@dataclass(frozen=True)
class EngineSpec:
    """Which engine, in which mode, at how many threads: checked when made (ValueError naming the field).

    ``mode``: ``"auto"`` or a lean mode (``lean``), a dtype (``hf``, ``static``), a GGUF format
    (``llama.cpp``).
    ``threads``: see the module docstring; stored resolved (None becomes this process's usable cores).
    ``device``: ``hf`` and ``static`` only (None: CUDA when present, else the CPU); ``loop``: ``llama.cpp``
    only;
    ``gguf``: ``llama.cpp`` only, a GGUF to load as given instead of the shipped model in ``mode``'s
    format; ``options``: ``lean`` only, among :data:`LEAN_OPTIONS`.
    """

    engine: str = "lean"
    mode: str = "auto"
    threads: int | None = None
    device: str | None = None
    loop: str = "lowlevel"
    gguf: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_choice("engine", self.engine, ENGINES)
        object.__setattr__(self, "threads", _threads(self.threads))
        if self.engine == "lean":
            from specdec.engine.lean import MODES

            check_choice("mode (a lean engine's)", self.mode, ("auto", *MODES))
        elif self.engine == "hf":
            check_choice("mode (transformers' dtype)", self.mode, HF_DTYPES)
        elif self.engine == "static":
            check_choice("mode (the static engine's dtype)", self.mode, STATIC_DTYPES)
        else:
            from specdec.engine.llamacpp import LOOPS

            check_choice("mode (llama.cpp's GGUF format)", self.mode, LLAMACPP_FORMATS)
            check_choice("loop", self.loop, tuple(sorted(LOOPS)))
        if self.device is not None and self.engine not in ("hf", "static"):
            raise ValueError(
                f"device: only an hf or static engine takes one (the {self.engine} engine runs on the CPU)"
            )
        if self.gguf is not None and self.engine != "llama.cpp":
            raise ValueError("gguf: only a llama.cpp engine takes one")
        if not isinstance(self.options, Mapping) or not all(isinstance(k, str) for k in self.options):
            raise ValueError(
                f"options must be a mapping of a lean engine's option names (among {LEAN_OPTIONS}) to "
                f"values, e.g. {{'int8_head': True}}; got {self.options!r}"
            )
        unknown = sorted(set(self.options) - set(LEAN_OPTIONS))
        if self.options and (self.engine != "lean" or unknown):
            raise ValueError(f"options: a lean engine's, among {LEAN_OPTIONS}; got {dict(self.options)}")

    @property
    def cores(self) -> int:
        """``threads`` as resolved when the spec was made."""
        return int(self.threads or 1)

    def to_record(self) -> dict[str, Any]:
        """The spec as a record keeps it (only the fields that apply to its engine)."""
        out: dict[str, Any] = {"engine": self.engine, "mode": self.mode, "threads": self.threads}
        if self.engine in ("hf", "static"):
            out["device"] = self.device
        if self.engine == "llama.cpp":
            out["loop"] = self.loop
            if self.gguf is not None:
                out["gguf"] = self.gguf
        if self.options:
            out["options"] = dict(self.options)
        return out


@dataclass
class OpenedEngine:
    """An engine ready to decode: ``model`` (what :mod:`specdec.engine.decoding` runs), the spec it was
    opened from, the mode it runs in (the choice behind ``"auto"``), the probe behind that choice (or
    None), and ``base``: the transformers model and tokenizer it came from
    (:class:`specdec.engine.models.LoadedModel`; a llama.cpp engine's is the float32 target, for its
    tokenizer)."""

    spec: EngineSpec
    model: Any
    mode: str
    base: Any = None
    probe: dict[str, Any] | None = None
    about: dict[str, Any] = field(default_factory=dict)

    @property
    def threads(self) -> int:
        return self.spec.cores

    @property
    def tokenizer(self) -> Any:
        return None if self.base is None else self.base.tokenizer

    @property
    def name(self) -> str:
        """``lean-q4q8-2t``, ``hf-float32-2t``, ``static-bfloat16-2t``, ``llama.cpp-q4_0-lowlevel-2t``."""
        if self.spec.engine == "llama.cpp":
            return f"llama.cpp-{self.mode}-{self.spec.loop}-{self.threads}t"
        return f"{self.spec.engine}-{self.mode}-{self.threads}t"

    def info(self) -> dict[str, Any]:
        """What a record says about the engine: the spec with the mode it ran in, and what it adds."""
        return {**self.spec.to_record(), "mode": self.mode, **self.about}


def _lean(
    model: Any, spec: EngineSpec, allowed: Sequence[str] | None, choose: Chooser | None
) -> OpenedEngine:
    from specdec.engine.lean import LeanLlama

    probe = None
    mode = spec.mode
    if mode == "auto":
        if choose is None:
            raise ValueError(
                "mode 'auto' is chosen by measuring this machine: open the engine with a chooser "
                "(specdec.measure.modes.open_target), or name a mode"
            )
        probe = choose(model, allowed, spec.cores)
        mode = probe["mode"]
    elif allowed is not None and mode not in allowed:
        raise ValueError(f"mode must be 'auto' or one of {tuple(allowed)} for this model; got {mode!r}")
    lean = LeanLlama(model, mode, threads=spec.threads, **dict(spec.options))
    return OpenedEngine(spec, lean, lean.mode, probe=probe)


def open_engine(spec: EngineSpec, *, base: Any = None, choose: Chooser | None = None) -> OpenedEngine:
    """Open the default target (SmolLM2-135M-Instruct, :func:`specdec.engine.models.load_target`) in ``spec``.

    ``base``: a :class:`~specdec.engine.models.LoadedModel` already loaded (float32 for ``lean`` and
    ``llama.cpp``, the spec's dtype for ``hf``), reused instead of loading again; ``choose``: the
    :data:`Chooser` behind a lean ``"auto"``. Pins torch's threads to ``spec.threads``; while an engine
    that runs outside torch decodes, the loops hold torch on one thread (:mod:`specdec.engine.cores`)."""
    from specdec.engine.models import load_target, set_threads

    if not isinstance(spec, EngineSpec):
        raise TypeError(f"spec must be an EngineSpec; got {type(spec).__name__}")
    if spec.engine == "static":
        raise ValueError("spec: a static engine opens from weights (open_weights), not the default target")
    set_threads(spec.cores)
    dtype = spec.mode if spec.engine == "hf" else "float32"
    device = spec.device if spec.engine == "hf" else "cpu"
    if base is None:
        base = load_target(dtype, device=device, quiet=True)
    elif base.dtype != dtype:
        raise ValueError(
            f"base: a {spec.engine} engine in {spec.mode} is built on a {dtype} model; got {base.dtype}"
        )
    if spec.engine == "hf":
        return OpenedEngine(spec, base.model, spec.mode, base=base, about={"device": base.device})
    if spec.engine == "lean":
        opened = open_model(base.model, spec, choose=choose)
        opened.base = base
        return opened
    from specdec.engine import llamacpp
    from specdec.engine.models import smollm2_gguf_path

    if spec.gguf is not None:
        gguf, fmt = Path(spec.gguf), "as given"
    elif spec.mode == "q4_0":
        gguf = llamacpp.requantized(smollm2_gguf_path(), "q4_0", threads=spec.cores)
        fmt = (
            "Q4_0 requantized from the shipped Q4_1 GGUF (llama.cpp's best CPU format; not the same weights)"
        )
    else:
        gguf, fmt = smollm2_gguf_path(), "the shipped Q4_1 GGUF as is"
    model = llamacpp.LlamaCppModel(gguf, threads=spec.cores, loop=spec.loop)
    return OpenedEngine(spec, model, spec.mode, base=base, about={"gguf": gguf.name, "format": fmt})


def open_model(model: Any, spec: EngineSpec, *, choose: Chooser | None = None) -> OpenedEngine:
    """Any transformers Llama (a model folder's, a test's tiny model) in ``spec``: ``lean`` in a mode (or
    ``"auto"`` with ``choose``), or ``hf``: the model as it is. ``base`` is left None."""
    if not isinstance(spec, EngineSpec):
        raise TypeError(f"spec must be an EngineSpec; got {type(spec).__name__}")
    if spec.engine == "hf":
        return OpenedEngine(spec, model, spec.mode)
    if spec.engine != "lean":
        raise ValueError(f"spec: a given model opens in the lean or hf engine; got {spec.engine!r}")
    return _lean(model, spec, None, choose)


def open_weights(
    weights: Mapping[str, Any], config: Mapping[str, Any], spec: EngineSpec, *, capacity: int
) -> OpenedEngine:
    """The static-cache engine (:class:`~specdec.engine.staticllama.StaticLlama`) of transformers-named
    float32 ``weights`` (e.g. :attr:`specdec.measure.gpupayload.Payload.weights`) and a Llama ``config``,
    in ``spec``: ``EngineSpec("static", dtype, threads, device=...)`` (device None: CUDA when present,
    else the CPU), over a KV cache of ``capacity`` positions. Pins torch's threads to ``spec.threads``."""
    import torch

    from specdec.engine.models import pick_device, set_threads
    from specdec.engine.staticllama import StaticLlama

    if not isinstance(spec, EngineSpec) or spec.engine != "static":
        raise ValueError(f"spec: weights open in the static engine (EngineSpec('static', ...)); got {spec!r}")
    set_threads(spec.cores)
    device = spec.device if spec.device is not None else pick_device(None)
    model = StaticLlama.from_weights(
        dict(weights), dict(config), device=device, dtype=getattr(torch, spec.mode), capacity=capacity
    )
    return OpenedEngine(spec, model, spec.mode, about={"device": str(model.device), "capacity": capacity})


def open_static_draft(target: OpenedEngine, folder: str | Path) -> OpenedEngine:
    """A distilled draft (``specdec/data/drafts/<name>``, :func:`specdec.engine.staticllama.distilled_draft`)
    as a static engine beside ``target`` (an engine :func:`open_weights` opened): the target's device,
    dtype, capacity and embeddings; its spec is the target's."""
    from specdec.engine.staticllama import distilled_draft

    if not isinstance(target, OpenedEngine) or target.spec.engine != "static":
        raise ValueError(f"target: a static engine (open_weights); got {target!r}")
    model = distilled_draft(target.model, folder)
    return OpenedEngine(target.spec, model, target.mode, about={"draft": Path(folder).name})


def open_draft(model: Any, spec: EngineSpec, *, choose: Chooser | None = None) -> OpenedEngine:
    """A draft model (a transformers Llama, e.g. :func:`specdec.train.draftnets.load_draft`) in the lean
    engine: ``spec.engine`` must be ``lean``; its mode is one that keeps the draft's trained weights
    (:func:`draft_modes`; ``"auto"`` measures them); ``base`` is left None (the target's is the base)."""
    if not isinstance(spec, EngineSpec) or spec.engine != "lean":
        raise ValueError(f"spec: a draft runs in the lean engine (EngineSpec('lean', ...)); got {spec!r}")
    return _lean(model, spec, draft_modes(model), choose)


#: The lean modes that keep a draft's trained weights as they are (int4 and q4_1 would re-quantize
#: them to 4 bits); "q4q8" only for a model of int8 rows (``int8_rows``: the distilled drafts),
#: whose codes it keeps (Q8_0 layers, :class:`specdec.engine.lean.LeanLlama`'s ``codes``).
DRAFT_MODES = ("float32", "bfloat16", "q4q8")


def available_modes() -> tuple[str, ...]:
    """The lean modes this machine can run (int4 needs torch's CPU int4 kernels, q4_1 and q4q8 a C
    compiler)."""
    from specdec.engine import native
    from specdec.engine.lean import MODES, int4_supported

    runs = {"int4": int4_supported(), "q4_1": native.available("q4_1"), "q4q8": native.available("q4q8")}
    return tuple(m for m in MODES if runs.get(m, True))


def draft_modes(model: Any) -> tuple[str, ...]:
    """The :data:`DRAFT_MODES` that keep ``model``'s weights and run on this machine."""
    keeps = [m for m in DRAFT_MODES if m != "q4q8" or getattr(model, "int8_rows", False)]
    return tuple(m for m in keeps if m in available_modes())
