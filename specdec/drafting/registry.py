"""The drafter registry: a drafter built from one spec string, in one place, checked once.

As llama.cpp's ``common_speculative`` picks a drafter type from a name and transformers builds its
candidate generator from one generation config, a drafter here is named by a *spec*::

    kind[:argument][,key=value ...]

e.g. ``lookup``, ``lookup-tree``, ``suffix``, ``suffix,factor=2,global=1``, ``draft:distil-l1``,
``draft-tree:distil-l1,branch=3``, ``early-exit:8``, ``early-exit-tree:8,branch=2``, and the drafters
conditioned on the target's features: ``medusa:medusa-4,ranks=4``, ``mlp:mlp-4,ranks=1``,
``eagle:eagle-1,topk=1`` (EAGLE's chain), ``eagle:eagle-1,topk=4,depth=6`` (EAGLE-2's dynamic tree),
``hybrid:eagle-1,min_score=1`` (suffix decoding where confident, the network drafter elsewhere),
the n-gram tables of the target's own text ``unigram`` and ``bigram``, and any draft model in a folder
``model:<folder>`` (the rest of the spec is the folder's path);
their matrix products run on the target's threads unless ``threads=N`` says otherwise (inside the
decoding loop a drafter's weights come from memory, the target's step having pushed them out of the
caches, so its calls are bound by bandwidth, which a second core doubles; the C pool's workers still
spin from the target's call, so waking them costs little: results/bench/engine-draft-cost-*.json
compares one and two drafter threads, and the hardware chapter shows it). Each kind
says whether it drafts a chain (``propose``, decoded by :func:`specdec.engine.decoding.speculative`
at a gamma) or a tree (``propose_tree``, decoded by :func:`specdec.engine.decoding.speculative_tree`
at a node budget): :data:`KINDS`. :func:`parse_spec` checks a spec before anything is loaded
(unknown kind, missing or extra argument, unknown or malformed option: one ValueError naming the
spec and what is valid); :func:`build_drafter` builds it around a target. Every drafter of the package
is constructed here (``tests/test_layers.py`` fails on one made elsewhere); the loaders a context needs
around an opened target are :func:`specdec.measure.modes.draft_context`'s. What a drafter needs
from the layers above this one (a distilled draft's weights, which live in ``train``, in the
lean engine's mode chosen by ``measure``) comes in through :class:`DraftContext`'s ``load_draft``,
so the registry imports nothing above ``engine``. The spec string is what a record stores.

Suffix decoding's global tree (earlier finished generations) is off unless ``global=1``: a
measurement that repeats a prompt would otherwise speculate from that prompt's own earlier output.
``suffix,tree=0`` speculates a single path (arctic-inference's default) instead of a tree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specdec.theory.checks import check_float, check_int

__all__ = ["KINDS", "DraftContext", "DrafterSpec", "build_drafter", "parse_spec"]


@dataclass(frozen=True)
class _Kind:
    shape: str  # "chain" or "tree"
    argument: str | None  # what the argument names, or None when the kind takes none
    options: dict[str, Callable[[str, str], Any]] = field(default_factory=dict)
    doc: str = ""


def _int_option(low: int, high: int) -> Callable[[str, str], int]:
    def read(name: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"option {name} must be an integer in [{low}, {high}]; got {text!r}") from None
        return check_int(f"option {name}", value, low=low, high=high)

    return read


def _float_option(low: float, high: float) -> Callable[[str, str], float]:
    def read(name: str, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"option {name} must be a number in [{low}, {high}]; got {text!r}") from None
        return check_float(f"option {name}", value, low=low, high=high)

    return read


_NGRAM = {"max_ngram": _int_option(1, 64), "min_ngram": _int_option(1, 64)}

#: Every kind of drafter the registry builds: its shape, its argument and its options.
KINDS: dict[str, _Kind] = {
    "lookup": _Kind("chain", None, dict(_NGRAM), "prompt lookup (transformers' prompt_lookup_num_tokens)"),
    "lookup-tree": _Kind("tree", None, dict(_NGRAM), "prompt lookup, every earlier match merged in a trie"),
    "suffix": _Kind(
        "tree",
        None,
        {
            "depth": _int_option(1, 1024),
            "factor": _float_option(0.0, 64.0),
            "offset": _float_option(-64.0, 64.0),
            "min_prob": _float_option(0.0, 1.0),
            "global": _int_option(0, 1),
            "tree": _int_option(0, 1),
        },
        "suffix decoding (arXiv:2411.04975) over the prompt and the generation so far",
    ),
    "draft": _Kind(
        "chain",
        "a saved draft's name",
        {"confidence": _float_option(0.0, 1.0)},
        "a distilled draft model (confidence: stop drafting below it, transformers' assistant rule)",
    ),
    "draft-tree": _Kind(
        "tree",
        "a saved draft's name",
        {"branch": _int_option(1, 64)},
        "a distilled draft's chain + side leaves",
    ),
    "medusa": _Kind(
        "tree",
        "a saved Medusa drafter's name",
        {"ranks": _int_option(1, 64), "threads": _int_option(1, 1024)},
        "Medusa-1 heads on the target's features, a static tree (ranks: tokens per head)",
    ),
    "mlp": _Kind(
        "tree",
        "a saved MLP speculator's name",
        {"ranks": _int_option(1, 64), "threads": _int_option(1, 1024)},
        "the MLP speculator on the target's features, a static tree (ranks=1: a chain)",
    ),
    "eagle": _Kind(
        "tree",
        "a saved EAGLE drafter's name",
        {"topk": _int_option(1, 64), "depth": _int_option(1, 64), "threads": _int_option(1, 1024)},
        "EAGLE's draft layer on the target's features (topk=1: a chain; topk>1: EAGLE-2's dynamic tree)",
    ),  # fmt: skip
    "hybrid": _Kind(
        "tree",
        "a saved Medusa, MLP speculator or EAGLE drafter's name",
        {
            "min_score": _float_option(0.0, 64.0),
            "ranks": _int_option(1, 64),
            "topk": _int_option(1, 64),
            "depth": _int_option(1, 64),
            "threads": _int_option(1, 1024),
        },
        "suffix decoding where its draft's score reaches min_score (default 1), the network drafter "
        "elsewhere",
    ),  # fmt: skip
    "early-exit": _Kind("chain", "layers (>= 1)", {}, "the target's first layers as the draft"),
    "unigram": _Kind("chain", None, {}, "unigram counts (add-1) of the target's own text"),
    "bigram": _Kind("chain", None, {}, "bigram counts (add-1) of the target's own text"),
    "model": _Kind(
        "chain", "a draft model folder (save_pretrained)", {}, "any draft model sharing the vocabulary"
    ),
    "early-exit-tree": _Kind(
        "tree", "layers (>= 1)", {"branch": _int_option(1, 64)}, "early exit's chain + side leaves"
    ),
}


@dataclass(frozen=True)
class DrafterSpec:
    """A parsed spec: the kind, its argument (or None), its options, and the text it came from."""

    kind: str
    argument: str | None
    options: dict[str, Any]
    text: str

    @property
    def shape(self) -> str:
        """ "chain" or "tree"."""
        return KINDS[self.kind].shape


def parse_spec(spec: object) -> DrafterSpec:
    """Check and split a spec string (see the module docstring); ValueError names what is wrong."""
    if isinstance(spec, DrafterSpec):
        return spec
    valid = ", ".join(sorted(KINDS))
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(
            f"a drafter spec must be a non-empty string 'kind[:argument][,key=value]' ({valid}); got {spec!r}"
        )
    head, *pairs = spec.strip().split(",")
    kind, sep, argument = head.partition(":")
    if kind == "model":  # a folder's path may hold commas: the rest of the spec is the argument
        argument, pairs = spec.strip().partition(":")[2], []
    if kind not in KINDS:
        raise ValueError(f"drafter spec {spec!r}: unknown kind {kind!r}; the kinds are {valid}")
    info = KINDS[kind]
    if info.argument is None and sep:
        raise ValueError(f"drafter spec {spec!r}: {kind} takes no ':argument'")
    if info.argument is not None and not argument:
        raise ValueError(f"drafter spec {spec!r}: {kind} needs ':<{info.argument}>'")
    if kind.startswith("early-exit"):
        try:
            check_int(f"drafter spec {spec!r}: layers", int(argument), low=1)
        except ValueError as exc:
            raise ValueError(
                f"drafter spec {spec!r}: the layers must be an integer >= 1; got {argument!r}"
            ) from exc
    options: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or key not in info.options:
            known = ", ".join(info.options) or "none"
            raise ValueError(
                f"drafter spec {spec!r}: option {pair!r} is not key=value with a key of {kind} ({known})"
            )
        if key in options:
            raise ValueError(f"drafter spec {spec!r}: option {key} given twice")
        try:
            options[key] = info.options[key](key, value)
        except ValueError as exc:
            raise ValueError(f"drafter spec {spec!r}: {exc}") from None
    return DrafterSpec(kind, argument or None, options, spec.strip())


@dataclass
class DraftContext:
    """What building a drafter needs: the opened target (a LeanLlama or a Hugging Face model) and,
    for ``draft`` kinds, ``load_draft(name)`` returning the draft model ready to run (the caller's
    loader: e.g. :func:`specdec.train.draftnets.load_draft` then :func:`specdec.measure.modes.lean_draft`)."""

    target: Any
    load_draft: Callable[[str], Any] | None = None
    #: for ``medusa``, ``mlp`` and ``eagle``: name -> (the trained module, its card), e.g.
    #: :func:`specdec.train.condnets.load_conditioned` around the Hugging Face target
    load_conditioned: Callable[[str], tuple[Any, dict]] | None = None
    #: for ``unigram`` and ``bigram``: the target's own text, as token-id lists
    corpus: Callable[[], Sequence[Sequence[int]]] | None = None
    #: for ``model``: folder -> the draft model ready to run
    load_model: Callable[[str], Any] | None = None

    def need(self, what: str, spec: DrafterSpec) -> Any:
        """The loader ``what`` that ``spec`` needs; ValueError naming it when the context has none."""
        loader = getattr(self, what)
        if loader is None:
            raise ValueError(f"drafter spec {spec.text!r} needs DraftContext.{what}")
        return loader


def build_drafter(spec: object, context: DraftContext | None = None) -> Any:
    """The drafter a spec names, built around ``context.target``; the one place drafters are made
    (``tests/test_layers.py`` fails on a drafter class constructed anywhere else in the package).
    ``context`` may be left out for the kinds that need neither a target nor a loader (``lookup``,
    ``lookup-tree``, ``suffix``)."""
    from specdec.drafting.lookuptree import LookupTreeDrafter
    from specdec.drafting.modeltree import ModelTreeDrafter
    from specdec.drafting.suffix import SuffixDecodingDrafter
    from specdec.engine.drafters import (
        BigramDrafter,
        EarlyExitDrafter,
        ModelDrafter,
        PromptLookupDrafter,
        UnigramDrafter,
    )
    from specdec.engine.lm import vocab_size

    parsed = parse_spec(spec)
    context = DraftContext(None) if context is None else context
    opts = dict(parsed.options)
    if parsed.kind == "lookup":
        return PromptLookupDrafter(**opts)
    if parsed.kind == "lookup-tree":
        return LookupTreeDrafter(**opts)
    if parsed.kind == "suffix":
        names = {"depth": "max_depth", "factor": "max_spec_factor", "offset": "max_spec_offset",
                 "min_prob": "min_token_prob", "global": "use_global", "tree": "use_tree_spec"}  # fmt: skip
        kw = {names[k]: v for k, v in opts.items()}
        kw["use_global"] = bool(kw.get("use_global", 0))
        kw["use_tree_spec"] = bool(kw.get("use_tree_spec", 1))
        return SuffixDecodingDrafter(**kw)
    if parsed.kind in ("medusa", "mlp", "eagle"):
        from specdec.drafting.conditioned import build_conditioned_drafter

        module, card = context.need("load_conditioned", parsed)(parsed.argument)
        threads = opts.pop("threads", getattr(context.target, "threads", 1))  # the target's (see above)
        return build_conditioned_drafter(parsed.kind, module, card, threads, opts)
    if parsed.kind == "hybrid":
        from specdec.drafting.conditioned import build_conditioned_drafter
        from specdec.drafting.hybrid import HybridDrafter

        module, card = context.need("load_conditioned", parsed)(parsed.argument)
        kind = {"medusa": "medusa", "mlp-speculator": "mlp", "eagle": "eagle"}.get(str(card.get("kind")))
        if kind is None:
            raise ValueError(
                f"drafter spec {parsed.text!r}: {parsed.argument!r} is a {card.get('kind')!r} card"
            )
        min_score = opts.pop("min_score", 1.0)
        threads = opts.pop("threads", getattr(context.target, "threads", 1))
        wrong = sorted(set(opts) - set(KINDS[kind].options))
        if wrong:
            raise ValueError(
                f"drafter spec {parsed.text!r}: option(s) {wrong} do not apply to {parsed.argument!r}, a "
                f"{kind} drafter (its options: {sorted(KINDS[kind].options)})"
            )
        network = build_conditioned_drafter(kind, module, card, threads, opts)
        return HybridDrafter(SuffixDecodingDrafter(), network, min_score)
    if parsed.kind in ("unigram", "bigram"):
        table = UnigramDrafter if parsed.kind == "unigram" else BigramDrafter
        vocab = vocab_size(context.need("target", parsed))
        return table.from_token_ids(context.need("corpus", parsed)(), vocab)
    if parsed.kind == "model":
        return ModelDrafter(context.need("load_model", parsed)(parsed.argument), target=context.target)
    if parsed.kind in ("draft", "draft-tree"):
        confidence = opts.pop("confidence", None)
        model = context.need("load_draft", parsed)(parsed.argument)
        chain = ModelDrafter(model, target=context.target, confidence=confidence)
    else:
        chain = EarlyExitDrafter(context.need("target", parsed), int(parsed.argument))
    if parsed.shape == "chain":
        return chain
    return ModelTreeDrafter(chain, **opts)
