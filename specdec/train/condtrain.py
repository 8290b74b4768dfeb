"""Training the target-conditioned drafters (:mod:`specdec.train.condnets`) here, on the target's samples.

Two resumable steps, each a command::

    # 1. the target's features at every position of every gen-data sequence (one file per shard)
    python -m specdec.train.condtrain features --data data/cond-s10 data/cond-s11
    # 2. one drafter (checkpoints every minute under data/cond-train/<name>; rerun to resume)
    python -m specdec.train.condtrain train --family medusa --name medusa-4 --data ... --steps N

Data: the shards of ``python -m specdec.train.distill gen-data`` (the target's own samples at
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

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from specdec.theory.checks import check_int
from specdec.theory.recordio import jsonable
from specdec.train.condnets import FAMILIES, build_conditioned, rms_norm, save_conditioned
from specdec.train.shards import sequences, shard_paths

__all__ = ["CondData", "extract_features", "load_data", "main", "train_conditioned"]

RANKS = 4  # ranks of the per-depth acceptance profile


def _feature_path(shard: Path) -> Path:
    return shard.with_name(shard.name.replace("shard-", "feat-").replace(".npz", ".npy"))


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
        tmp = _feature_path(path).with_suffix(".tmp.npy")
        np.save(tmp, out)
        tmp.replace(_feature_path(path))
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
    """Read the shards and their features; the kept vocabulary is the draftnets rule over them."""
    from specdec.train.draftnets import kept_vocabulary

    ids, feats, srow, seq, tids, tlogp = [], [], [], [], [], []
    offset = rows = 0
    shards_all = []
    for folder in folders:
        for path in shard_paths(folder):
            if not _feature_path(path).exists():
                raise ValueError(
                    f"{path} has no features: run `python -m specdec.train.condtrain features` first"
                )
            shard = dict(np.load(path))
            shards_all.append(shard)
            f = np.load(_feature_path(path), mmap_mode="r")
            for one, s0 in zip(sequences([shard]), shard["starts"], strict=True):
                n, pl, rl, s0 = len(one.ids), one.prompt_len, len(one.response), int(s0)
                start = int(offset)
                ids.append(one.ids.astype(np.int64))
                feats.append(np.asarray(f[s0 : s0 + n]))
                r = np.full(n, -1, dtype=np.int64)
                r[pl - 1 : pl - 1 + rl] = rows + np.arange(rl)
                srow.append(r)
                seq.append((start, pl, start + n))
                tids.append(one.top_ids)
                tlogp.append(one.top_logp)
                offset += n
                rows += rl
    if not ids:
        raise ValueError(f"no gen-data shards under {folders}")
    kept = kept_vocabulary(shards_all, kept_size, vocab_size, always=(eos,) if eos is not None else ())
    remap = torch.full((vocab_size,), -1, dtype=torch.long)
    remap[kept] = torch.arange(len(kept))
    return CondData(
        np.concatenate(ids), np.concatenate(feats), np.concatenate(srow), np.array(seq, dtype=np.int64),
        np.concatenate(tids), np.concatenate(tlogp), kept, remap,
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


def _eagle_batch(model: torch.nn.Module, data: CondData, seqs: list[int], max_len: int, noise: float):
    """EAGLE over whole sequences: (g, logits, true next features, label rows, sampled tokens)."""
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
    g, logits = model(feats, nxt, mask=mask, noise=noise)
    return g, logits, target, rows, hard


def _split(data: CondData, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(len(data.seq))
    n_held = max(1, len(order) // 20)
    return np.sort(order[n_held:]), np.sort(order[:n_held])


@torch.no_grad()
def heldout_profile(
    model: torch.nn.Module, family: str, depth: int, data: CondData, held: np.ndarray
) -> dict:
    """Teacher-forced on held-out sequences: ``hit[d][r]`` = P(the drafter's rank-r token at depth d+1
    is the target's top token), and ``top1_soft[d]`` = E[p(drafter's top token)] (its greedy acceptance
    under sampling is the mean of min(p, q); with a point mass, p of the token)."""
    if family == "eagle":
        g, logits, _, rows, _ = _eagle_batch(model, data, list(held[:64]), 384, 0.0)
        logits, rows = logits.reshape(-1, logits.shape[-1])[None], rows.reshape(-1)[None]
        keep = rows[0] >= 0
        logits, rows = logits[:, torch.from_numpy(keep)], rows[:, keep]
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
    out_root: str | Path | None = None,
    work_root: str | Path = "data/cond-train",
    command: str = "",
    progress: bool = True,
) -> dict:
    """Train one drafter of ``family`` for ``steps`` optimizer steps, resumable from its checkpoint
    (``work_root/name/ckpt.pt``, written every minute and at the end); save it and its card."""
    from tqdm.auto import tqdm

    from specdec.train.draftnets import DRAFT_DIR, git_commit

    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}; got {family!r}")
    check_int("steps", steps, low=1)
    check_int("depth", depth, low=1, high=16)
    check_int("batch", batch, low=1)
    commit = git_commit()  # of the code that trains (the card's weights are written at the end)
    torch.manual_seed(seed)
    eos = target.config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    data = load_data(folders, kept_size, int(target.config.vocab_size), eos)
    train_seqs, held = _split(data, seed)
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
                "phase1": phase1, "steps": steps, "data": [str(f) for f in folders]}  # fmt: skip
    work = Path(work_root) / name
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / "ckpt.pt"
    state = {"step": 0, "history": [], "seconds": 0.0}
    if ckpt.exists():
        saved = torch.load(ckpt, weights_only=False)
        if saved["settings"] != settings:
            raise ValueError(
                f"{ckpt} was made with other settings: {saved['settings']}; remove it to restart"
            )
        model.load_state_dict(saved["model"], strict=False)
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
        torch.set_rng_state(saved["torch_rng"])
    rng = np.random.default_rng([seed, state["step"]])
    soft_pos = data.positions("soft", depth, train_seqs)
    prompt_pos = data.positions("prompt", depth, train_seqs)
    warm = min(50, steps // 10 + 1)

    def lr_at(step: int) -> float:
        return lr * min(1.0, (step + 1) / warm) * 0.5 * (1 + math.cos(math.pi * step / steps))

    last_save, t0 = time.perf_counter(), time.perf_counter() - state["seconds"]
    bar = tqdm(total=steps, initial=state["step"], disable=not progress, desc=name)
    model.train()
    while state["step"] < steps:
        step = state["step"]
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        if family == "eagle":
            seqs = list(rng.choice(train_seqs, size=max(1, batch // 128), replace=False))
            g, logits, target_f, rows, hard = _eagle_batch(model, data, seqs, 384, 0.1)
            ok = torch.from_numpy(rows >= 0)
            fr = model.frozen
            reg = F.smooth_l1_loss(rms_norm(g, fr.norm, fr.eps)[ok], rms_norm(target_f, fr.norm, fr.eps)[ok])
            small, soft, hardk = _targets(data, rows[rows >= 0], hard[rows >= 0])
            loss = reg + 0.5 * token_loss(logits[ok], small, soft, hardk)
        else:
            in_phase1 = family == "mlp-speculator" and step < phase1 * steps and len(prompt_pos)
            pool = prompt_pos if in_phase1 else soft_pos
            j = rng.choice(pool, size=batch)
            logits, rows, hard = _position_batch(model, family, data, j, depth)
            loss = logits.new_zeros(())
            for d in range(depth):
                if in_phase1:
                    loss = loss + token_loss(
                        logits[:, d], None, None, data.remap[torch.from_numpy(hard[:, d])]
                    )
                else:
                    small, soft, hardk = _targets(data, rows[:, d], hard[:, d])
                    loss = loss + token_loss(logits[:, d], small, soft, hardk)
            loss = loss / depth
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        state["step"] = step + 1
        state["seconds"] = time.perf_counter() - t0
        if state["step"] % 20 == 0 or state["step"] == steps:
            state["history"].append(
                {"step": state["step"], "loss": float(loss), "minutes": round(state["seconds"] / 60, 2)}
            )
        bar.update(1)
        if time.perf_counter() - last_save > 60 or state["step"] == steps:
            trainable = {
                k: v
                for k, v in model.state_dict().items()
                if k in {n for n, p in model.named_parameters() if p.requires_grad}
            }
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"settings": settings, "model": trainable, "opt": opt.state_dict(), "state": state,
                        "torch_rng": torch.get_rng_state()}, tmp)  # fmt: skip
            tmp.replace(ckpt)
            last_save = time.perf_counter()
    bar.close()
    model.eval()
    root = Path(out_root) if out_root is not None else DRAFT_DIR
    card.update({
        "data_sequences": len(train_seqs), "heldout_sequences": len(held),
        "data_tokens": int(sum(e - s for s, _, e in data.seq[train_seqs])),
        "kept_coverage": float((data.remap[torch.from_numpy(data.ids)] >= 0).float().mean()),
        "steps": steps, "batch": batch, "lr": lr, "seed": seed,
        "phase1_fraction": phase1 if family == "mlp-speculator" else None,
        "loss": "soft CE to the target's top-32 (renormalised over kept) + 0.5 hard CE"
        + (" + smooth-L1 feature regression (weight 1; CE weight 0.5)" if family == "eagle" else ""),
        "final_loss": state["history"][-1]["loss"] if state["history"] else None,
        "train_minutes": round(state["seconds"] / 60, 2), "threads": torch.get_num_threads(),
        "command": command, "git_commit": commit,
        "weights": "int8 per output row (symmetric) for matrices, float16 for vectors",
        "history": state["history"],
    })  # fmt: skip
    card = save_conditioned(model, root / name, card)
    card["heldout_profile"] = heldout_profile(model, family, depth, data, held)  # of the int8 weights
    from specdec.theory.recordio import write_record

    write_record(root / name / "card.json", card, indent=2, sort_keys=False)
    return card


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec.train.condtrain", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("features", help="the target's features beside every gen-data shard")
    f.add_argument("--data", required=True, nargs="+")
    f.add_argument("--threads", type=int, default=2)
    t = sub.add_parser("train", help="train one target-conditioned drafter")
    t.add_argument("--family", required=True, choices=FAMILIES)
    t.add_argument("--name", required=True)
    t.add_argument("--data", required=True, nargs="+")
    t.add_argument("--steps", type=int, required=True)
    t.add_argument("--depth", type=int, default=4)
    t.add_argument("--kept", type=int, default=8192)
    t.add_argument("--batch", type=int, default=256)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--out-root", default=None)
    args = parser.parse_args(argv)
    from specdec.engine.models import load_target, set_threads

    set_threads(args.threads)
    target = load_target("float32", quiet=True).model
    if args.command == "features":
        print(json.dumps({"written": extract_features(target, args.data, threads=args.threads)}))
        return 0
    random.seed(args.seed)
    card = train_conditioned(
        target, args.data, family=args.family, name=args.name, steps=args.steps, depth=args.depth,
        kept_size=args.kept, batch=args.batch, lr=args.lr, seed=args.seed, out_root=args.out_root,
        command="python -m specdec.train.condtrain " + " ".join(argv if argv is not None else sys.argv[1:]),
    )  # fmt: skip
    print(json.dumps(jsonable({k: v for k, v in card.items() if k != "history"})))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
