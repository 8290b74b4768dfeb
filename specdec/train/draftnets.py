"""A family of draft models M_q distilled from the target: k decoder layers on the target's embeddings.

A draft of the family is the target's architecture cut down to ``k`` decoder layers, copies
of the target's first k layers (:func:`init_layers`: the untrained draft is the target's
early exit after k layers), plus the target's final norm; these are the only trained (and
committed) weights. The token embeddings are the target's own, frozen and shared at load
time, and so is the LM head, cut to a *kept vocabulary* of the most frequent tokens of the
distillation data (:class:`TrimmedHead`). The draft's logits are -inf outside the kept
vocabulary, so q is 0 there; speculative sampling stays lossless (the proof of Appendix A.1
holds for every q), the target simply never sees those tokens drafted.

Training (:func:`train_draft`, ``specdec run distill-train``) distils the target from
``specdec run distill-data`` shards: cross-entropy to the target's top-32 probabilities
renormalised over the kept vocabulary (a KL up to a constant), plus half the cross-entropy of the
sampled token, AdamW, warm-up then cosine decay, seeded. After training the weights are rounded
to int8 per output row (:func:`quantize_int8`) *in the model* and saved as such, so the saved
draft is exactly the one evaluated; :func:`load_draft` rebuilds it around a target.

Saved under ``specdec/data/drafts/<name>/``: ``weights.safetensors`` (int8 matrices + float32
row scales, float16 vectors, the kept token ids) and ``card.json`` (what the draft is and how
it was made: data tokens, steps, seed, loss, minutes, command, git commit).
"""

from __future__ import annotations

import copy
import json
import math
import random
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specdec.theory.checks import check_float, check_int, check_optional_float, check_optional_int
from specdec.theory.recordio import DamagedFileError, jsonable, read_json, write_record
from specdec.train.shards import load_shards, sequences

__all__ = [
    "CONDITIONED_SPECS",
    "DRAFT_DIR",
    "TrimmedHead",
    "build_draft",
    "draft_param_count",
    "fit_logit_scale",
    "init_layers",
    "kept_remap",
    "kept_vocabulary",
    "list_drafts",
    "load_draft",
    "quantize_int8",
    "require_drafts",
    "save_draft",
    "train_draft",
]

DRAFT_DIR = Path(__file__).resolve().parents[1] / "data" / "drafts"
#: The drafter registry's kind for each family of conditioned drafter whose card may sit beside the drafts
#: (:data:`specdec.train.condnets.FAMILIES`), for the error that names it.
CONDITIONED_SPECS = {"medusa": "medusa", "mlp-speculator": "mlp", "eagle": "eagle"}
_WEIGHTS, _CARD = "weights.safetensors", "card.json"


class TrimmedHead(torch.nn.Module):
    """An LM head over a kept vocabulary whose output is full-width: -inf outside the kept ids.

    ``weight`` rows are the target's head rows of ``kept`` (a frozen buffer, not a parameter,
    and not named ``weight`` so that :func:`specdec.engine.lm.vocab_size` reads the full V from the
    config). :meth:`trimmed` gives the (..., len(kept)) logits that training uses.
    """

    def __init__(self, head_weight: torch.Tensor, kept: torch.Tensor, vocab_size: int) -> None:
        super().__init__()
        kept = torch.as_tensor(kept, dtype=torch.long)
        if kept.ndim != 1 or kept.numel() == 0 or int(kept.min()) < 0 or int(kept.max()) >= vocab_size:
            raise ValueError(f"kept must be a non-empty 1-D tensor of token ids in [0, {vocab_size})")
        if kept.unique().numel() != kept.numel():
            raise ValueError("kept must not repeat a token id")
        self.vocab_size = int(vocab_size)
        self.register_buffer("kept", kept, persistent=False)
        self.register_buffer("kept_weight", head_weight.detach()[kept].clone(), persistent=False)

    def trimmed(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.kept_weight.T

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        small = self.trimmed(hidden)
        out = small.new_full((*small.shape[:-1], self.vocab_size), float("-inf"))
        out[..., self.kept] = small
        return out


def init_layers(k: int, depth: int) -> list[int]:
    """Which target layers seed a k-layer draft: the first k, so the untrained draft is the
    target's early exit after k layers (:func:`specdec.engine.drafters.early_exit_model`).

    Other choices were no better at the start on the book's target (KL to the target's
    top-32 labels, one distillation shard): first 1, 2, 4 layers 13.0, 15.2, 15.0 nats;
    layers [0, 10, 20, 29] 13.5; [0, 15] 20.0; [0, 1, 28, 29] 18.6; [0, 29] 64.0 (a top layer
    fed the bottom of the residual stream is far off).
    """
    check_int("k (draft layers)", k, low=1, high=depth, note="the target's depth")
    return list(range(k))


def _base(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, model.base_model_prefix)


def build_draft(target: torch.nn.Module, layers: list[int], kept: torch.Tensor) -> torch.nn.Module:
    """A draft around ``target``: copies of its decoder ``layers`` (in that order) and final norm,
    its embeddings (shared, frozen) and a :class:`TrimmedHead` over ``kept`` (frozen).

    The result is the target's model class with ``num_hidden_layers = len(layers)``, so it has
    the same forward (cache, position ids, ``logits_to_keep``) and works in
    :class:`specdec.engine.drafters.ModelDrafter`. Only the copied layers and norm require grad.
    """
    base = _base(target)
    depth = len(base.layers)
    if not layers or any(not 0 <= i < depth for i in layers):
        raise ValueError(f"layers must be a non-empty list of indices in [0, {depth}); got {layers!r}")
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = len(layers)
    config.tie_word_embeddings = False
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = [config.layer_types[i] for i in layers]
    dtype = next(target.parameters()).dtype
    with torch.device("meta"):
        draft = type(target)(config)
    dbase = _base(draft)
    for child, _ in list(dbase.named_children()):  # embeddings, rotary embedding, ...: shared
        if child not in ("layers", "norm"):
            setattr(dbase, child, getattr(base, child))
    dbase.layers = torch.nn.ModuleList(copy.deepcopy(base.layers[i]) for i in layers)
    for j, layer in enumerate(dbase.layers):
        layer.self_attn.layer_idx = j
    dbase.norm = copy.deepcopy(base.norm)
    head = target.get_output_embeddings().weight
    draft.lm_head = TrimmedHead(head, kept, config.vocab_size)
    left = [n for n, t in [*draft.named_parameters(), *draft.named_buffers()] if t.is_meta]
    if left:
        raise ValueError(f"cannot build a draft of {type(target).__name__}: unset {left[:3]}")
    draft.to(dtype).eval()
    draft.requires_grad_(False)
    for module in (*dbase.layers, dbase.norm):
        module.requires_grad_(True)
    return draft


def _trainable(draft: torch.nn.Module) -> dict[str, torch.Tensor]:
    base = _base(draft)
    out = {f"layers.{n}": p for n, p in base.layers.named_parameters()}
    out.update({f"norm.{n}": p for n, p in base.norm.named_parameters()})
    return out


def draft_param_count(draft: torch.nn.Module) -> int:
    """Trained parameters of a draft (its own decoder layers and final norm)."""
    return sum(p.numel() for p in _trainable(draft).values())


@torch.no_grad()
def quantize_int8(draft: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Round every trained matrix to int8 per output row (symmetric, scale = max|row| / 127), in place.

    The draft's weights become the dequantized values, so the model in memory is exactly the
    one :func:`load_draft` rebuilds. Returns the tensors to save: ``<name>.q8`` (int8) and
    ``<name>.scale`` (float32) for matrices, ``<name>`` (float16, also rounded in place) for vectors.
    """
    out = {}
    for name, p in _trainable(draft).items():
        if p.ndim == 2:
            scale = (p.abs().amax(dim=1, keepdim=True).float() / 127).clamp(min=1e-12)
            q8 = torch.round(p.float() / scale).clamp(-127, 127).to(torch.int8)
            p.copy_((q8.float() * scale).to(p.dtype))
            out[f"{name}.q8"], out[f"{name}.scale"] = q8, scale
        else:
            half = p.to(torch.float16)
            p.copy_(half.to(p.dtype))
            out[name] = half
    return out


def save_draft(draft: torch.nn.Module, folder: str | Path, card: dict) -> dict:
    """Quantize (:func:`quantize_int8`) and save a draft's weights, kept ids and card under ``folder``."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = quantize_int8(draft)
    tensors["kept"] = draft.lm_head.kept.to(torch.int32)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / _WEIGHTS))
    card = {**card, "bytes": (folder / _WEIGHTS).stat().st_size, "params": draft_param_count(draft)}
    write_record(folder / _CARD, card, indent=2, sort_keys=False)  # atomic; NaN -> null
    return card


def list_drafts(root: str | Path | None = None) -> list[str]:
    """Names of the saved distilled drafts (folders with a card naming their ``init_layers``) under
    ``root`` (default: the package's); the drafters conditioned on the target that live beside them
    (:mod:`specdec.train.condnets`: no layers of the target's copied) are left out."""
    root = DRAFT_DIR if root is None else Path(root)
    if not root.exists():
        return []
    cards = sorted(root.glob(f"*/{_CARD}"))
    return [p.parent.name for p in cards if "init_layers" in read_json(p, what="the card", kind=dict)]


def require_drafts(names: Sequence[str] | None = None, root: str | Path | None = None) -> list[str]:
    """The drafts a run asks for, checked before anything is loaded: never a silent drop.

    ``names=None`` asks for every saved draft under ``root`` (default: the package's) and
    raises :class:`FileNotFoundError` when there is none, e.g. in an install that left out
    ``specdec/data/drafts``. Otherwise each name must be a saved draft; a missing one raises
    :class:`ValueError` naming it and the saved drafts. A draft whose card has no weights file
    next to it raises :class:`FileNotFoundError`. Returns the names, in the order asked.
    """
    root = DRAFT_DIR if root is None else Path(root)
    saved = list_drafts(root)
    if names is None:
        if not saved:
            raise FileNotFoundError(
                f"no saved drafts under {str(root)!r} (folders with a {_CARD}); "
                "an install without specdec/data/drafts?"
            )
        names = saved
    names = [str(n) for n in names]
    if not names:
        raise ValueError("names must hold at least one draft name, or be None for every saved draft")
    missing = [n for n in names if n not in saved]
    for n in missing:  # a conditioned drafter's card beside the drafts: say which kind it is
        card = root / n / _CARD
        kind = read_json(card, what="the card", kind=dict).get("kind") if card.is_file() else None
        if kind is not None:
            spec = CONDITIONED_SPECS.get(kind, "<its kind>")
            raise ValueError(
                f"{n!r} is a drafter conditioned on the target's features (its card's kind: {kind}; the "
                f"drafter spec {spec}:{n}), not a distilled draft (a card with init_layers); saved drafts: "
                f"{saved}"
            )
    if missing:
        raise ValueError(
            f"no draft named {', '.join(map(repr, missing))} under {str(root)!r}; saved drafts: {saved}"
        )
    for n in names:
        if not (root / n / _WEIGHTS).is_file():
            raise FileNotFoundError(f"draft {n!r} has a {_CARD} but no {_WEIGHTS} in {str(root / n)!r}")
    return names


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a saved drafter's safetensors file; a truncated or damaged file raises
    :class:`~specdec.theory.recordio.DamagedFileError` naming it (not the library's bare SafetensorError)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, ValueError) as exc:
        raise DamagedFileError(
            f"the drafter's weights {path} are damaged ({exc}); restore the file (git checkout) or train "
            "the drafter again"
        ) from None


def load_draft(name: str, target: torch.nn.Module, root: str | Path | None = None) -> torch.nn.Module:
    """Rebuild the saved draft ``name`` around ``target`` (its embeddings and head are shared).

    Returns a causal LM of the target's class with full-width logits (-inf outside the kept
    vocabulary), in eval mode, in the target's dtype, no parameter requiring grad; use it as
    ``ModelDrafter(load_draft(name, target), target=target)``.
    """
    root = DRAFT_DIR if root is None else Path(root)
    folder = root / str(name)
    if not (folder / _CARD).exists() or not (folder / _WEIGHTS).exists():
        raise ValueError(f"no draft named {name!r} under {str(root)!r}; saved drafts: {list_drafts(root)}")
    card = read_json(folder / _CARD, what="the draft's card", kind=dict)
    layers = card.get("init_layers")
    if not (isinstance(layers, list) and layers and all(isinstance(i, int) for i in layers)):
        kind = f" (its kind: {card['kind']!r})" if "kind" in card else ""
        raise DamagedFileError(
            f"the draft's card {folder / _CARD} holds no init_layers (a list of layer indices): it is not a "
            f"distilled draft's card{kind}"
        )
    tensors = load_weights(folder / _WEIGHTS)
    base = _base(target)
    if card.get("hidden_size") != target.config.hidden_size or max(layers) >= len(base.layers):
        raise ValueError(
            f"draft {name!r} was made for another target (card: hidden_size {card.get('hidden_size')})"
        )

    def get(key: str) -> torch.Tensor:
        if key not in tensors:
            raise DamagedFileError(f"the draft's weights {folder / _WEIGHTS} lack the tensor {key!r}")
        return tensors[key]

    draft = build_draft(target, layers, get("kept").long())
    with torch.no_grad():
        for pname, p in _trainable(draft).items():
            if p.ndim == 2:
                p.copy_((get(f"{pname}.q8").float() * get(f"{pname}.scale")).to(p.dtype))
            else:
                p.copy_(get(pname).to(p.dtype))
    draft.requires_grad_(False)
    draft.int8_rows = True  # its matrices are int8 per output row: the lean q4q8 engine keeps the codes
    return draft.eval()


# -- training --------------------------------------------------------------------------------------


def kept_remap(kept: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Vocabulary id -> its index in ``kept``, or -1 outside it."""
    remap = torch.full((vocab_size,), -1, dtype=torch.long)
    remap[kept] = torch.arange(len(kept))
    return remap


def kept_vocabulary(
    shards: list[dict[str, np.ndarray]], size: int, vocab_size: int, always: tuple = ()
) -> torch.Tensor:
    """The ``size`` most frequent ids among the sampled response tokens and the target's top-1
    labels (ties: smaller id first), plus the ids in ``always`` (e.g. EOS); sorted."""
    check_int("size (kept vocabulary)", size, low=1, high=vocab_size)
    counts = np.zeros(vocab_size, dtype=np.int64)
    for seq in sequences(shards):
        np.add.at(counts, seq.response, 1)
        np.add.at(counts, seq.top_ids[:, 0], 1)
    order = np.lexsort((np.arange(vocab_size), -counts))
    kept = set(order[: size - len(set(always))].tolist()) | set(always)
    for t in order:
        if len(kept) >= size:
            break
        kept.add(int(t))
    return torch.tensor(sorted(kept), dtype=torch.long)


def _sequences(shards: list[dict[str, np.ndarray]], max_len: int) -> list[tuple]:
    """(ids, prompt_len, top_ids, top_logp) per sequence, cut to ``max_len`` tokens."""
    out = []
    for seq in sequences(shards):
        pl, rl = seq.prompt_len, len(seq.response)
        if pl >= max_len or rl == 0:
            continue
        n = min(rl, max_len - pl)
        out.append((seq.ids[: pl + n], pl, seq.top_ids[:n], seq.top_logp[:n]))
    return out


def _batches(seqs: list[tuple], batch_tokens: int, rng: random.Random):
    """Endless shuffled batches of sequences of similar length, about ``batch_tokens`` tokens each."""
    while True:
        order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i][0]), rng.random()))
        groups, cur, width = [], [], 0
        for i in order:
            width = max(width, len(seqs[i][0]))
            if cur and width * (len(cur) + 1) > batch_tokens:
                groups.append(cur)
                cur, width = [], len(seqs[i][0])
            cur.append(i)
        groups.append(cur)
        rng.shuffle(groups)
        yield from ([seqs[i] for i in g] for g in groups)


def _collate(batch: list[tuple], remap: torch.Tensor, pad_id: int):
    """Right-padded ids; flat indices of the response positions' logits; soft and hard labels."""
    width = max(len(s[0]) for s in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    where, top_ids, top_logp, hard = [], [], [], []
    for b, (seq, pl, ti, tl) in enumerate(batch):
        ids[b, : len(seq)] = torch.from_numpy(seq.astype(np.int64))
        n = len(seq) - pl
        where.append(b * width + pl - 1 + torch.arange(n))  # row pl-1+j predicts response token j
        top_ids.append(torch.from_numpy(ti.astype(np.int64)))
        top_logp.append(torch.from_numpy(tl.astype(np.float32)))
        hard.append(torch.from_numpy(seq[pl:].astype(np.int64)))
    top_ids, top_logp, hard = torch.cat(top_ids), torch.cat(top_logp), torch.cat(hard)
    small = remap[top_ids]  # index in the kept vocabulary, or -1
    soft = torch.where(small >= 0, top_logp.exp(), torch.zeros(()))
    soft = soft / soft.sum(-1, keepdim=True).clamp(min=1e-12)
    return ids, torch.cat(where), small.clamp(min=0), soft, remap[hard]


def _loss(draft: torch.nn.Module, ids, where, small, soft, hard):
    """(loss, soft CE, KL to the renormalised top-k labels, hard CE over kept tokens)."""
    positions = torch.arange(ids.shape[1]).expand_as(ids)
    hidden = _base(draft)(input_ids=ids, position_ids=positions, use_cache=False).last_hidden_state
    logq = torch.log_softmax(draft.lm_head.trimmed(hidden.reshape(-1, hidden.shape[-1])[where]).float(), -1)
    soft_ce = -(soft * logq.gather(1, small)).sum(-1).mean()
    entropy = -(soft * soft.clamp(min=1e-12).log()).sum(-1).mean()
    ok = hard >= 0
    hard_ce = -logq[ok].gather(1, hard[ok, None]).mean() if bool(ok.any()) else logq.new_zeros(())
    return soft_ce + 0.5 * hard_ce, soft_ce, soft_ce - entropy, hard_ce


@torch.no_grad()
def fit_logit_scale(draft: torch.nn.Module, batch: tuple) -> float:
    """Rescale the draft's final-norm weight by the factor s that minimises the KL on ``batch``.

    The head is linear, so scaling the norm weight by s scales the logits by s. A copied
    early layer feeds the final norm a residual stream of another scale than the last layer
    does, and the untrained draft is then confidently wrong (hard CE above log |kept|); Adam
    moves the norm weight only about lr per step, so the scale is fitted once, on a grid of
    s in [0.02, 2], before training. Returns s (recorded in the card).
    """
    ids, where, small, soft, _ = batch
    positions = torch.arange(ids.shape[1]).expand_as(ids)
    hidden = _base(draft)(input_ids=ids, position_ids=positions, use_cache=False).last_hidden_state
    logits = draft.lm_head.trimmed(hidden.reshape(-1, hidden.shape[-1])[where]).float()
    best, best_kl = 1.0, math.inf
    for scale in np.geomspace(0.02, 2.0, 41):
        logq = torch.log_softmax(float(scale) * logits, -1)
        kl = float(-(soft * logq.gather(1, small)).sum(-1).mean())
        if kl < best_kl:
            best, best_kl = float(scale), kl
    _base(draft).norm.weight.mul_(best)
    return best


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).parent)
        return out.stdout.strip() if out.returncode == 0 else None
    except OSError:
        return None


def git_commit() -> str | None:
    """HEAD's commit, suffixed ``+dirty`` when the package's folder has uncommitted changes."""
    head = _git("rev-parse", "HEAD")
    dirty = _git("status", "--porcelain", "--", ".")
    return None if not head else head + ("+dirty" if dirty else "")


def train_draft(
    target: torch.nn.Module,
    data: str | Path | list[str | Path] | list[dict[str, np.ndarray]],
    *,
    layers: int,
    name: str,
    minutes: float | None = None,
    steps: int | None = None,
    seed: int = 0,
    vocab: int = 16384,
    lr: float = 1e-3,
    batch_tokens: int = 1024,
    max_len: int = 512,
    holdout: float = 0.03,
    autocast: bool = False,
    out_root: str | Path | None = None,
    command: str = "",
    log_every: int = 20,
    log: Any = print,
) -> tuple[torch.nn.Module, dict]:
    """Distil a ``layers``-layer draft from ``gen-data`` shards; save it as ``<out_root>/<name>``.

    ``data`` is a ``gen-data`` folder, a list of folders (their shards are pooled in order), or
    a list of already loaded shards.

    The run lasts ``steps`` optimizer steps, or, given ``minutes`` instead, as many steps as
    the first 5 steps' pace says fit in that time (the card records the steps taken, so
    ``--steps`` reproduces the run exactly). Sequences are split once (seeded) into training
    and a held-out ``holdout`` fraction, on which the final KL is reported. The kept vocabulary
    is counted over every shard, held-out sequences included, so ``kept_coverage_heldout`` is
    optimistic; measure coverage on other text (e.g. the evaluation workloads' generations).
    ``autocast`` runs the training forward and backward in bfloat16 autocast (weights and the
    optimizer stay float32; about 1.5-2x faster on a CPU with AVX512-BF16); evaluation is float32.
    Returns the trained draft (int8-rounded, as saved) and its card.
    """
    if (minutes is None) == (steps is None):
        raise ValueError("give exactly one of minutes and steps")
    check_optional_int("steps", steps, low=1)
    check_optional_float("minutes", minutes, low=0.0, open_low=True)
    check_float("holdout", holdout, low=0.0, high=1.0, open_low=True, open_high=True)
    init = init_layers(layers, len(_base(target).layers))
    torch.manual_seed(seed)
    rng = random.Random(seed)
    if isinstance(data, str | Path):
        data = [data]
    shards = [s for d in data for s in (load_shards(d) if isinstance(d, str | Path) else [d])]
    V = target.config.vocab_size
    eos = getattr(target.config, "eos_token_id", None)
    kept = kept_vocabulary(shards, vocab, V, always=(eos,) if isinstance(eos, int) else ())
    remap = kept_remap(kept, V)
    seqs = _sequences(shards, max_len)
    rng.shuffle(seqs)
    n_hold = max(1, int(len(seqs) * holdout))
    held, seqs = seqs[:n_hold], seqs[n_hold:]
    resp_tokens = sum(len(s[0]) - s[1] for s in seqs)

    def coverage(part: list[tuple]) -> float:
        resp = [torch.from_numpy(s[0][s[1] :].astype(np.int64)) for s in part]
        return sum(int((remap[r] >= 0).sum()) for r in resp) / max(sum(len(r) for r in resp), 1)

    draft = build_draft(target, init, kept)
    pad = int(getattr(target.config, "pad_token_id", None) or 0)
    logit_scale = fit_logit_scale(draft, _collate(seqs[:16], remap, pad))
    params = list(_trainable(draft).values())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    batches = _batches(seqs, batch_tokens, rng)
    warmup, history, start = 20, [], time.perf_counter()
    total = steps if steps is not None else 10**9
    step = 0
    draft.train()
    while step < total:
        frac = step / total if step >= 5 else 0.0  # the same schedule for --minutes and --steps
        mult = min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for group in opt.param_groups:
            group["lr"] = lr * mult
        with torch.autocast(params[0].device.type, dtype=torch.bfloat16, enabled=autocast):
            loss, soft_ce, kl, hard_ce = _loss(draft, *_collate(next(batches), remap, pad))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if minutes is not None and step == 5:
            pace = (time.perf_counter() - start) / 5
            total = max(6, int(60 * minutes / pace))
            log(f"pace {pace:.2f} s/step -> {total} steps in {minutes} min")
        if step % log_every == 0 or step == total:
            row = {
                "step": step,
                "loss": loss.item(),
                "kl": kl.item(),
                "hard_ce": hard_ce.item(),
                "minutes": round((time.perf_counter() - start) / 60, 2),
            }
            history.append(row)
            log(json.dumps(jsonable(row)))  # the records' NaN rule: NaN -> null
    draft.eval()
    train_minutes = (time.perf_counter() - start) / 60
    card = {
        "name": name,
        "kind": "distilled draft: k target-initialised decoder layers on the target's frozen embeddings "
        "and kept-vocabulary head",
        "layers": layers,
        "init_layers": init,
        "hidden_size": target.config.hidden_size,
        "kept_vocab": len(kept),
        "kept_coverage": coverage(seqs),  # of the training responses' tokens
        "kept_coverage_heldout": coverage(held),
        "data_sequences": len(seqs),
        "data_tokens": resp_tokens,
        "heldout_sequences": n_hold,
        "steps": step,
        "batch_tokens": batch_tokens,
        "max_len": max_len,
        "lr": lr,
        "seed": seed,
        "autocast": "bfloat16" if autocast else None,
        "init_logit_scale": logit_scale,
        "loss": "CE to top-32 target probs renormalised over kept vocab + 0.5 CE of sampled token",
        "final_train": history[-1] if history else None,
        "train_minutes": round(train_minutes, 2),
        "threads": torch.get_num_threads(),
        "command": command,
        "git_commit": git_commit(),
        "weights": "int8 per output row (symmetric) for matrices, float16 for norms",
        "history": history,
    }
    card["heldout_before_quant"] = _evaluate(draft, held, remap, pad, batch_tokens)
    root = DRAFT_DIR if out_root is None else Path(out_root)
    card = save_draft(draft, root / name, card)
    card["heldout"] = _evaluate(draft, held, remap, pad, batch_tokens)  # after int8 rounding
    write_record(root / name / _CARD, card, indent=2, sort_keys=False)
    return draft, card


@torch.no_grad()
def _evaluate(
    draft: torch.nn.Module, seqs: list[tuple], remap: torch.Tensor, pad: int, batch_tokens: int
) -> dict:
    """Mean KL (to renormalised top-k labels) and hard CE over held-out sequences, token-weighted."""
    tot = {"kl": 0.0, "hard_ce": 0.0}
    n = 0
    gen = _batches(seqs, batch_tokens, random.Random(0))
    batches, seen = [], 0
    while seen < len(seqs):
        b = next(gen)
        batches.append(b)
        seen += len(b)
    for b in batches:
        col = _collate(b, remap, pad)
        _, _, kl, hard_ce = _loss(draft, *col)
        m = len(col[1])
        tot["kl"] += float(kl) * m
        tot["hard_ce"] += float(hard_ce) * m
        n += m
    return {k: v / max(n, 1) for k, v in tot.items()} | {"tokens": n}
