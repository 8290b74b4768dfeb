"""Training the target-conditioned drafters (:mod:`specdec.train.condnets`) here, on the target's samples.

Two resumable steps, each a program (:mod:`specdec.experiments.training`)::

    # 1. the target's features at every position of every gen-data sequence (one file per shard)
    specdec run cond-features --data data/cond-s10,data/cond-s11
    #    (or issue 42's self-generated data converted: specdec run self-features --out data/self-cond)
    # 2. one drafter (checkpoints every minute under data/cond-train/<name>; rerun to resume)
    specdec run cond-train --family medusa --draft-name medusa-4 --data ... --steps N

A card made before these programs keeps its ``python -m specdec.train.condtrain train --name X --data A B``
command: the same run is ``specdec run cond-train --draft-name X --data A,B`` with its other options.

Data: the shards of ``specdec run distill-data`` (the target's own samples at
temperature 1 with its top-32 log-probabilities, :mod:`specdec.train.shards`). Features come from
the lean engine in mode ``"q4q8"``, the engine the drafters decode with, and are stored as float16
``feat-NNNNN.npy`` beside each shard.

Losses (every family): cross-entropy to the target's top-32 probabilities renormalised over the
kept vocabulary, plus 0.5 x the cross-entropy of the sampled token (the distilled drafts' loss);
EAGLE adds its feature regression (smooth L1 between the normed predicted and true features,
weight 1; classification weight 0.5, not the paper's 0.1: acceptance, not features, is what is
judged here) and uniform noise of +-0.1 on its input features (as EAGLE's training does). The MLP
speculator trains in its paper's two stages: first on text the target *reads* (prompt positions,
the sampled tokens as labels), then on text the target *writes* (response positions, soft labels).
A held-out 5 % of sequences gives each card its per-depth acceptance profile: how often the
drafter's rank-r token is the target's top token at depth d, teacher-forced.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from specdec.theory.checks import Refused, check_int
from specdec.train.condnets import FAMILIES, build_conditioned, rms_norm, save_conditioned
from specdec.train.shards import sequences, shard_paths

__all__ = [
    "CondData",
    "data_sources",
    "extract_features",
    "load_data",
    "self_features",
    "train_conditioned",
]

RANKS = 4  # ranks of the per-depth acceptance profile


def _feature_path(shard: Path) -> Path:
    return shard.with_name(shard.name.replace("shard-", "feat-").replace(".npz", ".npy"))


def _save_features(shard: Path, feats: np.ndarray) -> None:
    """``feat-NNNNN.npy`` beside ``shard``, atomically (a reader never sees half a file)."""
    tmp = _feature_path(shard).with_suffix(".tmp.npy")
    np.save(tmp, feats)
    tmp.replace(_feature_path(shard))


def extract_features(
    target: torch.nn.Module, folders: list[str], threads: int = 2, progress: bool = True
) -> int:
    """Write ``feat-NNNNN.npy`` (float16, (tokens of the shard, hidden)) beside every shard lacking one:
    the pre-norm last-layer features at every position, from the lean engine in mode ``"q4q8"`` (the
    engine the drafters decode with, so training sees the features decoding will). Returns the count."""
    from tqdm.auto import tqdm

    from specdec.engine.builder import EngineSpec, open_model

    todo = [p for f in folders for p in shard_paths(f) if not _feature_path(p).exists()]
    lean = open_model(target, EngineSpec("lean", "q4q8", threads)).model if todo else None
    for path in tqdm(todo, disable=not progress, desc="features"):
        shard = dict(np.load(path))
        out = np.zeros((len(shard["ids"]), int(target.config.hidden_size)), dtype=np.float16)
        session = lean.session()
        session.record_features = True
        for s, p, r in zip(shard["starts"], shard["prompt_lens"], shard["resp_lens"], strict=True):
            s, e = int(s), int(s) + int(p) + int(r)
            session.reset()
            session.forward(shard["ids"][s:e].tolist(), keep=1)
            out[s:e] = session.features
        _save_features(path, out)
    return len(todo)


def self_features(
    target: torch.nn.Module,
    self_folder: str | Path,
    out_folder: str | Path,
    *,
    threads: int = 2,
    shards: int | None = None,
    top_k: int = 32,
    progress: bool = True,
) -> int:
    """Issue 42's self-generated data (:mod:`specdec.train.selfshards`) as gen-data shards with features:
    for each whole shard of ``self_folder`` (the first ``shards`` of them, or all), one lean ``"q4q8"``
    forward per sequence gives the features of every position (``feat-NNNNN.npy``) and the target's
    top-``top_k`` log-probabilities at every response position (the soft labels the self-data does not
    store), written as ``out_folder/shard-NNNNN.npz`` in :mod:`specdec.train.shards`' format. The
    manifest's hashes are checked first; a shard already converted is skipped (rerun to resume). The
    development prompts' sequences (:data:`specdec.train.selfshards.DEV_EVERY`) are left out.
    Returns the count written."""
    from tqdm.auto import tqdm

    from specdec.engine.builder import EngineSpec, open_model
    from specdec.theory.recordio import read_json, write_record
    from specdec.train.selfshards import DEV_EVERY, file_sha256, read_shard, verify_manifest
    from specdec.train.shards import write_shard

    check_int("top_k", top_k, low=1, high=256)
    src = Path(self_folder)
    manifest = read_json(src / "manifest.json", what="the self-data manifest", kind=dict)
    verify_manifest(src, manifest)
    cells = sorted(manifest.get("shards", {}), key=int)
    if shards is not None:
        check_int("shards", shards, low=1, high=len(cells))
        cells = cells[:shards]
    out = Path(out_folder)
    out.mkdir(parents=True, exist_ok=True)
    write_record(out / "source.json", {
        "self_data": str(src), "manifest_sha256": file_sha256(src / "manifest.json"),
        "shards": {c: manifest["shards"][c]["sha256"] for c in cells}, "dev_every": DEV_EVERY,
        "top_k": top_k, "engine": "lean q4q8",
    }, indent=1)  # fmt: skip
    todo = [c for c in cells if not _feature_path(out / f"shard-{int(c):05d}.npz").exists()]
    lean = open_model(target, EngineSpec("lean", "q4q8", threads)).model if todo else None
    hidden = int(target.config.hidden_size)
    for cell in tqdm(todo, disable=not progress, desc="self features"):
        rows, feats = [], []
        session = lean.session()
        session.record_features = True
        for seq in read_shard(src / manifest["shards"][cell]["file"]):
            if seq.index % DEV_EVERY == 0:  # a development prompt: never trained on
                continue
            ids = seq.ids
            session.reset()
            rl = len(seq.response)
            logits = session.forward(ids.tolist(), keep=rl + 1)  # the prompt's last row on: the laws
            feats.append(np.asarray(session.features, dtype=np.float16))
            logp = torch.log_softmax(logits[:rl].float(), -1)
            top = logp.topk(top_k, -1)
            rows.append((seq.prompt, seq.response, top.indices.numpy(), top.values.numpy()))
        path = out / f"shard-{int(cell):05d}.npz"
        write_shard(path, rows)
        _save_features(path, np.concatenate(feats) if feats else np.zeros((0, hidden), np.float16))
    return len(todo)


@dataclass
class CondData:
    """Every gen-data sequence concatenated: ids, features, and per position its soft-label row (or -1)."""

    ids: np.ndarray  # (N,) int64
    feats: np.ndarray  # (N, H) float16
    srow: np.ndarray  # (N,) int64: row of top_ids/top_logp giving p(x_{j+1} | x_{<=j}), else -1
    seq: np.ndarray  # (S, 3) int64: start, prompt length, end of each sequence
    top_ids: np.ndarray  # (R, 32)
    top_logp: np.ndarray  # (R, 32)
    kept: torch.Tensor
    remap: torch.Tensor  # vocab -> index in kept, or -1

    def positions(self, which: str, depth: int, seqs: np.ndarray) -> np.ndarray:
        """Positions j of the sequences ``seqs`` whose depth-``depth`` labels all exist: ``"soft"``:
        soft labels at j+1 .. j+depth (responses); ``"prompt"``: tokens up to j+depth+1 inside the prompt."""
        out = []
        for s, p, e in self.seq[seqs]:
            lo, hi = (s + p - 2, e - 2 - depth) if which == "soft" else (s, s + p - 2 - depth)
            if hi >= max(lo, s):
                out.append(np.arange(max(lo, s), hi + 1))
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def load_data(folders: list[str], kept_size: int, vocab_size: int, eos: int | None) -> CondData:
    """Read the folders' shards and their features; the kept vocabulary is the draftnets rule over them."""
    paths = [path for folder in folders for path in shard_paths(folder)]
    if not paths:
        raise Refused(f"no gen-data shards under {folders}")
    return load_data_paths(paths, kept_size, vocab_size, eos)


def load_data_paths(paths: list[Path], kept_size: int, vocab_size: int, eos: int | None) -> CondData:
    """:func:`load_data` over the shard files ``paths`` (each with its ``feat-`` file)."""
    from specdec.train.draftnets import kept_remap, kept_vocabulary

    ids, srow, seq, tids, tlogp = [], [], [], [], []
    offset = rows = 0
    for path in paths:
        if not _feature_path(path).exists():
            raise Refused(f"{path} has no features: run `specdec run cond-features` first")
    # one array for every sequence's features, filled in place: a list of pieces and their concatenation
    # would hold them twice (56 self-data shards: 7 GB of float16 features, 15 GB at the peak)
    shards_all = [dict(np.load(path)) for path in paths]
    total = sum(len(one.ids) for one in sequences(shards_all))
    width = np.load(_feature_path(paths[0]), mmap_mode="r").shape[1] if paths else 0
    feats = np.empty((total, width), dtype=np.float16)
    for path, shard in zip(paths, shards_all, strict=True):
        f = np.load(_feature_path(path), mmap_mode="r")
        for one, s0 in zip(sequences([shard]), shard["starts"], strict=True):
            n, pl, rl, s0 = len(one.ids), one.prompt_len, len(one.response), int(s0)
            start = int(offset)
            ids.append(one.ids.astype(np.int64))
            feats[start : start + n] = f[s0 : s0 + n]
            r = np.full(n, -1, dtype=np.int64)
            r[pl - 1 : pl - 1 + rl] = rows + np.arange(rl)
            srow.append(r)
            seq.append((start, pl, start + n))
            tids.append(one.top_ids)
            tlogp.append(one.top_logp)
            offset += n
            rows += rl
    if not ids:
        raise Refused(f"no sequences in the shards {[str(p) for p in paths]}")
    kept = kept_vocabulary(shards_all, kept_size, vocab_size, always=(eos,) if eos is not None else ())
    return CondData(
        np.concatenate(ids), feats, np.concatenate(srow), np.array(seq, dtype=np.int64),
        np.concatenate(tids), np.concatenate(tlogp), kept, kept_remap(kept, vocab_size),
    )  # fmt: skip


def _targets(data: CondData, srows: np.ndarray, hard: np.ndarray) -> tuple[torch.Tensor, ...]:
    """(kept index of the top-32 labels, their renormalised probabilities, the sampled token's kept index)."""
    small = data.remap[torch.from_numpy(data.top_ids[srows].astype(np.int64))]
    soft = torch.where(
        small >= 0, torch.from_numpy(data.top_logp[srows].astype(np.float32)).exp(), torch.zeros(())
    )
    soft = soft / soft.sum(-1, keepdim=True).clamp(min=1e-12)
    return small.clamp(min=0), soft, data.remap[torch.from_numpy(hard)]


def token_loss(
    logits: torch.Tensor, small: torch.Tensor | None, soft: torch.Tensor | None, hard: torch.Tensor
) -> torch.Tensor:
    """Soft CE (when labels are given) + 0.5 x hard CE over the kept vocabulary (other tokens skipped)."""
    logq = torch.log_softmax(logits.float(), -1)
    ok = hard >= 0
    hard_ce = -logq[ok].gather(1, hard[ok, None]).mean() if bool(ok.any()) else logq.new_zeros(())
    if soft is None:
        return hard_ce
    return -(soft * logq.gather(1, small)).sum(-1).mean() + 0.5 * hard_ce


def _position_batch(model: torch.nn.Module, family: str, data: CondData, j: np.ndarray, depth: int):
    """Logits (B, depth, |kept|) of depth-``depth`` samples at positions ``j``, the rows of their soft
    labels and their sampled tokens: depth d (0-based) predicts x_{j+2+d}, whose law p is at j+1+d
    (Medusa's head d+1 on f_j; the MLP speculator's stage d+1, which consumes x_{j+1+d})."""
    feats = torch.from_numpy(data.feats[j].astype(np.float32))
    if family == "medusa":
        logits = model(feats)
    else:
        logits = model(feats, torch.from_numpy(np.stack([data.ids[j + 1 + n] for n in range(depth)], 1)))
    hard = np.stack([data.ids[j + 2 + n] for n in range(depth)], 1)
    rows = np.stack([data.srow[j + 1 + n] for n in range(depth)], 1)
    return logits, rows, hard


def _ttt_mask(steps: int, valid: torch.Tensor) -> torch.Tensor:
    """The training-time test's attention (EAGLE-3, arXiv:2503.01840) over the rows of steps
    1..``steps`` laid end to end (step m's W rows at ``(m - 1) * W ..``): a boolean (B, 1, steps W,
    steps W) mask, True where a row sees a key. Step q's row i is the draft at depth q whose context
    ends at position i - q + 1: it sees step 1's keys (the true features) at positions 0 .. i - q + 1
    and step m's key at i - q + m for m = 2 .. q, the keys decoding's draft cache holds at that depth.
    ``valid`` (B, W) marks real positions; padding is never seen, and every row sees its own key."""
    width = valid.shape[1]
    i = torch.arange(width)
    blocks = []
    for q in range(1, steps + 1):
        row = []
        for m in range(1, steps + 1):
            if m == 1:
                row.append(i[None, :] <= (i[:, None] - q + 1))
            elif m <= q:
                row.append(i[None, :] == (i[:, None] - q + m))
            else:
                row.append(torch.zeros(width, width, dtype=torch.bool))
        blocks.append(torch.cat(row, 1))
    mask = torch.cat(blocks, 0)[None] & valid.bool().repeat(1, steps)[:, None, :]
    return (mask | torch.eye(steps * width, dtype=torch.bool)[None])[:, None]


def _eagle_batch(
    model: torch.nn.Module, data: CondData, seqs: list[int], max_len: int, noise: float, steps: int = 1
):
    """EAGLE over whole sequences, with ``steps`` steps of the training-time test: lists (one entry
    per step k = 1 .. steps) of predicted features g_k and logits, and the true next features, label
    rows and sampled tokens (the same for every step). Step k's row j predicts x_{j+2} (and f_{j+1})
    from the true features up to position j - k + 1 and the drafter's own k - 1 later predictions:
    its depth-k draft, teacher-forced on the tokens (the accepted path). Step 1 is EAGLE's training."""
    spans = [(int(s), min(int(e), int(s) + max_len)) for s, _, e in data.seq[seqs]]
    width = max(e - s for s, e in spans) - 1
    feats = torch.zeros(len(spans), width, data.feats.shape[1])
    target = torch.zeros_like(feats)
    nxt = torch.zeros(len(spans), width, dtype=torch.long)
    mask = torch.zeros(len(spans), width, dtype=torch.long)
    rows = np.full((len(spans), width), -1, dtype=np.int64)
    hard = np.zeros((len(spans), width), dtype=np.int64)
    for b, (s, e) in enumerate(spans):
        n = e - s - 1
        feats[b, :n] = torch.from_numpy(data.feats[s : e - 1].astype(np.float32))
        target[b, :n] = torch.from_numpy(data.feats[s + 1 : e].astype(np.float32))
        nxt[b, :n] = torch.from_numpy(data.ids[s + 1 : e])
        mask[b, :n] = 1
        rows[b, : n - 1] = data.srow[s + 1 : e - 1]  # row j predicts x_{j+2}: p at j+1
        hard[b, : n - 1] = data.ids[s + 2 : e]
    if steps == 1:
        g, logits = model(feats, nxt, mask=mask, noise=noise)
        return [g], [logits], target, rows, hard
    gs, outs = _ttt_passes(model, model.inputs(feats, nxt, noise), nxt, mask, steps)
    return gs, outs, target, rows, hard


def _ttt_passes(
    model: torch.nn.Module, x1: torch.Tensor, nxt: torch.Tensor, valid: torch.Tensor, steps: int
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The training-time test's ``steps`` passes of EAGLE's one-layer draft model, each computing its
    own step's W rows only: step k's queries attend to the keys and values of steps 1 .. k (kept from
    the earlier passes, gradients flowing through them) under rows (k - 1) W .. k W of
    :func:`_ttt_mask`. What one forward over every step's rows laid end to end gives (a step's rows
    see only earlier steps' keys, so recomputing them in every later pass, as that forward would,
    changes nothing), at the cost of each row once: the layer's matrices over steps x W rows instead of
    steps (steps + 1) / 2 x W, attention over W x k W per step instead of (k W)^2. ``x1``: step 1's
    inputs (B, W, H); returns each step's pre-norm outputs and its kept-vocabulary logits."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    base = model.model.model  # the one-layer LM's decoder stack
    if len(base.layers) != 1:
        raise ValueError(f"EAGLE's draft model must have one decoder layer; it has {len(base.layers)}")
    layer = base.layers[0]
    attn = layer.self_attn
    batch, width, _ = x1.shape
    cos, sin = base.rotary_emb(x1, torch.arange(width).expand(batch, -1))  # row j at position j in every step
    full = _ttt_mask(steps, valid)  # (B, 1, steps W, steps W)
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    gs: list[torch.Tensor] = []
    outs: list[torch.Tensor] = []
    x = x1
    for k in range(1, steps + 1):
        if k > 1:  # step k's row j reads g_{k-1} of row j-1: its own prediction of f_j
            prev = torch.cat([torch.zeros_like(gs[-1][:, :1]), gs[-1][:, :-1]], 1)
            x = model.inputs(prev, nxt, 0.0)
        h = layer.input_layernorm(x)
        shape = (batch, width, -1, attn.head_dim)
        q = attn.q_proj(h).view(shape).transpose(1, 2)
        key = attn.k_proj(h).view(shape).transpose(1, 2)
        value = attn.v_proj(h).view(shape).transpose(1, 2)
        q, key = apply_rotary_pos_emb(q, key, cos, sin)
        keys.append(key), values.append(value)
        groups = q.shape[1] // key.shape[1]
        out = F.scaled_dot_product_attention(
            q,
            torch.cat(keys, 2).repeat_interleave(groups, 1),
            torch.cat(values, 2).repeat_interleave(groups, 1),
            attn_mask=full[:, :, (k - 1) * width : k * width, : k * width],
            scale=attn.scaling,
        )
        r = x + attn.o_proj(out.transpose(1, 2).reshape(batch, width, -1))
        g = r + layer.mlp(layer.post_attention_layernorm(r))
        gs.append(g)
        outs.append(base.norm(g) @ model.frozen.head.T)
    return gs, outs


def _step_rows(rows: np.ndarray, step: int) -> np.ndarray:
    """The rows of a (B, W) label-row array that step ``step`` of the training-time test is judged on:
    a soft label exists and the draft's context is not empty (row j >= step - 1)."""
    ok = rows >= 0
    ok[:, : step - 1] = False
    return ok


def _split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The (training, held-out) sequence indices of ``n`` sequences: a twentieth held out (at least one)."""
    order = np.random.default_rng(seed).permutation(n)
    n_held = max(1, len(order) // 20)
    return np.sort(order[n_held:]), np.sort(order[:n_held])


@torch.no_grad()
def heldout_profile(
    model: torch.nn.Module, family: str, depth: int, data: CondData, held: np.ndarray
) -> dict:
    """Teacher-forced on held-out sequences: ``hit[d][r]`` = P(the drafter's rank-r token at depth d+1
    is the target's top token), and ``top1_soft[d]`` = E[p(drafter's top token)] (its greedy acceptance
    under sampling is the mean of min(p, q); with a point mass, p of the token)."""
    if family == "eagle":  # depth d: step d of the training-time test (the draft's own d - 1 features)
        per_depth: list[list[torch.Tensor]] = [[] for _ in range(depth)]
        per_rows: list[list[np.ndarray]] = [[] for _ in range(depth)]
        for at in range(0, min(64, len(held)), 8):
            _, outs, _, rows, _ = _eagle_batch(model, data, list(held[at : min(at + 8, 64)]), 384, 0.0, depth)
            for d, logits in enumerate(outs):
                ok = _step_rows(rows, d + 1)
                per_depth[d].append(logits[torch.from_numpy(ok)])
                per_rows[d].append(rows[ok])
        n = min(sum(len(r) for r in per_rows[d]) for d in range(depth))  # the same rows count at every depth
        logits = torch.stack([torch.cat(per_depth[d])[-n:] for d in range(depth)])
        rows = np.stack([np.concatenate(per_rows[d])[-n:] for d in range(depth)])
    else:
        j = data.positions("soft", depth, held)[:4000]
        logits, rows, _ = _position_batch(model, family, data, j, depth)
        logits, rows = logits.transpose(0, 1), rows.T
    hit, p_top = [], []
    for d in range(logits.shape[0]):
        top = data.kept[logits[d].topk(RANKS, -1).indices]  # (B, RANKS) token ids
        best = torch.from_numpy(data.top_ids[rows[d], 0].astype(np.int64))
        hit.append([float((top[:, r] == best).float().mean()) for r in range(RANKS)])
        tid = torch.from_numpy(data.top_ids[rows[d]].astype(np.int64))
        plog = torch.from_numpy(data.top_logp[rows[d]].astype(np.float32)).exp()
        p_top.append(float((plog * (tid == top[:, :1])).sum(-1).mean()))
    return {"hit": hit, "top1_soft": p_top, "rows": int(logits.shape[1])}


def _eos(target: torch.nn.Module) -> int | None:
    """The target's end-of-sequence id (the first, where the config lists several)."""
    eos = target.config.eos_token_id
    return eos[0] if isinstance(eos, list) else eos


def unseen_heldout(
    target: torch.nn.Module,
    drafters: dict[str, tuple[torch.nn.Module, dict]],
    folder: str,
    *,
    first_shard: int,
    n_sequences: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """Several conditioned drafters on the same held-out sequences, none of which any of them trained
    on: the sequences of ``folder``'s shards ``first_shard`` .. (past the shards an earlier drafter saw)
    that are in the held-out split a run over *every* shard of ``folder`` makes (:func:`_split` with
    ``seed``), the first ``n_sequences`` of them (at most 64: :func:`heldout_profile` reads no more of
    EAGLE's). Each drafter's :func:`heldout_profile` there, its logits
    read through its own kept vocabulary. Returns the selection and a profile per drafter."""
    from specdec.train.draftnets import kept_remap

    check_int("first_shard", first_shard, low=0)
    check_int("n_sequences", n_sequences, low=1, high=64)
    paths = shard_paths(folder)
    if not first_shard < len(paths):
        raise ValueError(f"first_shard must be in [0, {len(paths) - 1}] ({folder} has {len(paths)} shards)")
    counts = [len(np.load(p)["starts"]) for p in paths]
    _, held = _split(sum(counts), seed)  # the split a run over every shard makes
    offset = sum(counts[:first_shard])
    local = held[held >= offset] - offset
    if not len(local):
        raise ValueError(f"no held-out sequence in shards {first_shard}.. of {folder}")
    chosen = local[:n_sequences]
    eos = _eos(target)
    vocab = int(target.config.vocab_size)
    # the data's kept vocabulary is replaced by each drafter's own below
    data = load_data_paths(paths[first_shard:], min(8192, vocab), vocab, eos)
    out: dict[str, Any] = {}
    for name, (module, card) in drafters.items():
        kept = module.frozen.kept.long()
        data.kept, data.remap = kept, kept_remap(kept, vocab)
        out[name] = heldout_profile(module, card["kind"], int(card["depth"]), data, chosen)
    return {
        "folder": str(folder), "first_shard": first_shard, "shards": len(paths), "seed": seed,
        "held_out_in_range": int(len(local)), "sequences": [int(i) for i in chosen],
        "tokens": int(sum(int(e - s) for s, _, e in data.seq[chosen])), "profiles": out,
    }  # fmt: skip


def _eagle_loss(model: torch.nn.Module, data: CondData, seqs: list[int], ttt: int) -> torch.Tensor:
    """EAGLE's loss on whole sequences, averaged over the ``ttt`` steps of the training-time test:
    per step, smooth-L1 between the normed predicted and true next features plus 0.5 x the token loss."""
    gs, outs, target_f, rows, hard = _eagle_batch(model, data, seqs, 384, 0.1, ttt)
    fr = model.frozen
    true_n = rms_norm(target_f, fr.norm, fr.eps)
    loss = target_f.new_zeros(())
    for k, (g, logits) in enumerate(zip(gs, outs, strict=True), start=1):
        okn = _step_rows(rows, k)
        ok = torch.from_numpy(okn)
        reg = F.smooth_l1_loss(rms_norm(g, fr.norm, fr.eps)[ok], true_n[ok])
        small, soft, hardk = _targets(data, rows[okn], hard[okn])
        loss = loss + reg + 0.5 * token_loss(logits[ok], small, soft, hardk)
    return loss / ttt


def _position_loss(
    model: torch.nn.Module, family: str, data: CondData, j: np.ndarray, depth: int, soft_labels: bool
) -> torch.Tensor:
    """Medusa's or the MLP speculator's loss at positions ``j``, averaged over depths: soft labels on
    the target's writing, the read tokens alone (``soft_labels`` False: the MLP's first stage)."""
    logits, rows, hard = _position_batch(model, family, data, j, depth)
    loss = logits.new_zeros(())
    for d in range(depth):
        if soft_labels:
            small, soft, hardk = _targets(data, rows[:, d], hard[:, d])
            loss = loss + token_loss(logits[:, d], small, soft, hardk)
        else:
            loss = loss + token_loss(logits[:, d], None, None, data.remap[torch.from_numpy(hard[:, d])])
    return loss / depth


def _resume(ckpt: Path, settings: dict, model: torch.nn.Module, opt: Any) -> dict:
    """The training state of ``ckpt`` loaded into ``model`` and ``opt`` (torch's generator restored),
    or a fresh state; Refused (a ValueError) when the checkpoint was made with other settings."""
    if not ckpt.exists():
        return {"step": 0, "history": [], "heldout": [], "seconds": 0.0}
    saved = torch.load(ckpt, weights_only=False)
    if saved["settings"] != settings:
        raise Refused(f"{ckpt} was made with other settings: {saved['settings']}; remove it to restart")
    model.load_state_dict(saved["model"], strict=False)
    opt.load_state_dict(saved["opt"])
    torch.set_rng_state(saved["torch_rng"])
    return {"heldout": [], **saved["state"]}


def _save_checkpoint(ckpt: Path, settings: dict, model: torch.nn.Module, opt: Any, state: dict) -> None:
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    weights = {k: v for k, v in model.state_dict().items() if k in trainable}
    tmp = ckpt.with_suffix(".tmp")
    torch.save({"settings": settings, "model": weights, "opt": opt.state_dict(), "state": state,
                "torch_rng": torch.get_rng_state()}, tmp)  # fmt: skip
    tmp.replace(ckpt)


def _heldout_point(model: torch.nn.Module, family: str, depth: int, data: CondData, held: np.ndarray) -> dict:
    """A point of the held-out curve: the top-1 hit per depth on 16 held-out sequences (float weights)."""
    model.eval()
    try:
        prof = heldout_profile(model, family, depth, data, held[:16])
    finally:
        model.train()
    return {"top1_hit": [round(h[0], 4) for h in prof["hit"]], "rows": prof["rows"]}


def data_sources(folders: list[str]) -> list[dict]:
    """Each data folder's ``source.json`` (written by :func:`self_features`: the self-data manifest's
    sha256 and the shards converted), or its name alone."""
    from specdec.theory.recordio import read_json

    out = []
    for f in folders:
        src = Path(f) / "source.json"
        out.append(
            read_json(src, what="the data folder's source", kind=dict) if src.exists() else {"folder": str(f)}
        )
    return out


def train_conditioned(
    target: torch.nn.Module,
    folders: list[str],
    *,
    family: str,
    name: str,
    steps: int,
    depth: int = 4,
    kept_size: int = 8192,
    batch: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
    phase1: float = 0.3,
    ttt: int = 1,
    out_root: str | Path | None = None,
    work_root: str | Path = "data/cond-train",
    command: str = "",
    progress: bool = True,
) -> dict:
    """Train one drafter of ``family`` for ``steps`` optimizer steps, resumable from its checkpoint
    (``work_root/name/ckpt.pt``, written every minute and at the end); save it and its card. EAGLE
    with ``ttt`` > 1 trains on ``ttt`` steps of EAGLE-3's training-time test (:func:`_eagle_batch`).
    The card holds the loss every 20 steps and the held-out top-1 hit per depth every tenth of the run."""
    from tqdm.auto import tqdm

    from specdec.train.draftnets import DRAFT_DIR, git_commit

    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}; got {family!r}")
    check_int("steps", steps, low=1)
    check_int("depth", depth, low=1, high=16)
    check_int("batch", batch, low=1)
    check_int("ttt", ttt, low=1, high=depth)
    if ttt > 1 and family != "eagle":
        raise ValueError(f"ttt (the training-time test's steps) is EAGLE's; family {family!r} takes ttt=1")
    commit = git_commit()  # of the code that trains (the card's weights are written at the end)
    torch.manual_seed(seed)
    eos = _eos(target)
    data = load_data(folders, kept_size, int(target.config.vocab_size), eos)
    train_seqs, held = _split(len(data.seq), seed)
    shape = (
        {"heads": depth} if family == "medusa" else {"stages": depth} if family == "mlp-speculator" else {}
    )
    card: dict[str, Any] = {
        "name": name, "kind": family, **shape, "depth": depth, "hidden_size": int(target.config.hidden_size),
        "init_layer": int(target.config.num_hidden_layers) - 1, "kept_vocab": len(data.kept),
    }  # fmt: skip
    model = build_conditioned(card, target, data.kept)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    settings = {"family": family, "depth": depth, "kept": len(data.kept), "batch": batch, "lr": lr,
                "seed": seed,
                "phase1": phase1, "steps": steps, "data": [str(f) for f in folders],
                **({"ttt": ttt} if ttt > 1 else {})}  # fmt: skip
    work = Path(work_root) / name
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / "ckpt.pt"
    state = _resume(ckpt, settings, model, opt)
    soft_pos = data.positions("soft", depth, train_seqs)
    prompt_pos = data.positions("prompt", depth, train_seqs)
    warm = min(50, steps // 10 + 1)
    every = max(1, steps // 10)

    def lr_at(step: int) -> float:
        return lr * min(1.0, (step + 1) / warm) * 0.5 * (1 + math.cos(math.pi * step / steps))

    last_save, t0 = time.perf_counter(), time.perf_counter() - state["seconds"]
    bar = tqdm(total=steps, initial=state["step"], disable=not progress, desc=name)
    model.train()
    while state["step"] < steps:
        step = state["step"]
        rng = np.random.default_rng([seed, step])  # the step's own draws: a resumed run draws the same
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        if family == "eagle":
            loss = _eagle_loss(model, data, list(rng.choice(train_seqs, size=max(1, batch // 128),
                                                            replace=False)), ttt)  # fmt: skip
        else:
            phase_one = family == "mlp-speculator" and step < phase1 * steps and len(prompt_pos) > 0
            j = rng.choice(prompt_pos if phase_one else soft_pos, size=batch)
            loss = _position_loss(model, family, data, j, depth, soft_labels=not phase_one)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        state["step"] = step + 1
        state["seconds"] = time.perf_counter() - t0
        if state["step"] % 20 == 0 or state["step"] == steps:
            state["history"].append(
                {
                    "step": state["step"],
                    "loss": float(loss.detach()),
                    "minutes": round(state["seconds"] / 60, 2),
                }
            )
        if state["step"] % every == 0 and state["step"] < steps:
            point = _heldout_point(model, family, depth, data, held)
            state["heldout"].append({"step": state["step"], **point})
        bar.update(1)
        if time.perf_counter() - last_save > 60 or state["step"] == steps:
            _save_checkpoint(ckpt, settings, model, opt, state)
            last_save = time.perf_counter()
    bar.close()
    model.eval()
    root = Path(out_root) if out_root is not None else DRAFT_DIR
    card.update({
        "data_sequences": len(train_seqs), "heldout_sequences": len(held),
        "data_tokens": int(sum(e - s for s, _, e in data.seq[train_seqs])),
        "data_sources": data_sources(folders),
        "kept_coverage": float((data.remap[torch.from_numpy(data.ids)] >= 0).float().mean()),
        "steps": steps, "batch": batch, "lr": lr, "seed": seed,
        "phase1_fraction": phase1 if family == "mlp-speculator" else None,
        "loss": "soft CE to the target's top-32 (renormalised over kept) + 0.5 hard CE"
        + (" + smooth-L1 feature regression (weight 1; CE weight 0.5)" if family == "eagle" else "")
        + (f", averaged over {ttt} steps of EAGLE-3's training-time test" if ttt > 1 else ""),
        "ttt": ttt,
        "final_loss": state["history"][-1]["loss"] if state["history"] else None,
        "train_minutes": round(state["seconds"] / 60, 2), "threads": torch.get_num_threads(),
        "command": command, "git_commit": commit,
        "weights": "int8 per output row (symmetric) for matrices, float16 for vectors",
        "history": state["history"],
        "heldout_curve": state["heldout"],
    })  # fmt: skip
    card = save_conditioned(model, root / name, card)
    card["heldout_profile"] = heldout_profile(model, family, depth, data, held)  # of the int8 weights
    from specdec.theory.recordio import write_record

    write_record(root / name / "card.json", card, indent=2, sort_keys=False)
    return card
