"""The distillation data's shard format: the one writer and the one reader.

``specdec run distill-data`` (:mod:`specdec.train.distill`) stores the target's samples in batches, one file
``shard-NNNNN.npz`` per batch, holding:

* ``ids`` (int32): the prompt + response tokens of every sequence, concatenated;
* ``starts``, ``prompt_lens``, ``resp_lens`` (int64): where each sequence begins and its parts;
* ``top_ids`` (int32, (N, K)) and ``top_logp`` (float16, (N, K)): the target's top-K
  log-probabilities at the N response positions of the shard, sequence after sequence; row j
  of a sequence is p(. | prompt, response[:j]).

:func:`write_shard` writes one (atomically); :func:`load_shards` reads a folder;
:func:`sequences` walks the sequences of loaded shards (ids, prompt length, soft labels), the
only place that decodes the offsets. The distillation (:mod:`specdec.train.distill`), the drafts'
training (:mod:`specdec.train.draftnets`) and the real-decoding benchmark's n-gram tables all read
the data through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specdec.theory.checks import Refused

__all__ = [
    "PATTERN",
    "ShardSequence",
    "load_shards",
    "response_tokens",
    "sequences",
    "shard_paths",
    "write_shard",
]

#: File names of the shards in a ``gen-data`` folder.
PATTERN = "shard-*.npz"

_KEYS = ("ids", "starts", "prompt_lens", "resp_lens", "top_ids", "top_logp")


@dataclass(frozen=True)
class ShardSequence:
    """One stored sequence: prompt + response ids and the soft labels of its response positions."""

    ids: np.ndarray  #: prompt + response token ids
    prompt_len: int
    top_ids: np.ndarray  #: (response length, K)
    top_logp: np.ndarray  #: (response length, K)

    @property
    def response(self) -> np.ndarray:
        """The response tokens (what the target sampled)."""
        return self.ids[self.prompt_len :]


def shard_paths(folder: str | Path) -> list[Path]:
    """The shard files of a ``gen-data`` folder, in order (empty when there are none)."""
    return sorted(Path(folder).glob(PATTERN))


def write_shard(
    path: str | Path, rows: Sequence[tuple[Sequence[int], Sequence[int], np.ndarray, np.ndarray]]
) -> int:
    """Write one shard of (prompt ids, response ids, top_ids, top_logp) rows; returns its response tokens.

    Written to a temporary file and renamed, so a reader never sees half a shard.
    """
    if not rows:
        raise ValueError("rows must hold at least one sequence")
    for i, (_, resp, top_ids, top_logp) in enumerate(rows):
        if len(top_ids) != len(resp) or len(top_logp) != len(resp):
            raise ValueError(
                f"row {i}: top_ids and top_logp must have one row per response token ({len(resp)}); "
                f"got {len(top_ids)} and {len(top_logp)}"
            )
    path = Path(path)
    seqs = [list(p) + list(r) for p, r, _, _ in rows]
    lens = np.array([len(s) for s in seqs], dtype=np.int64)
    tmp = path.with_name(path.name + ".part")
    with tmp.open("wb") as handle:
        np.savez(
            handle,
            ids=np.concatenate([np.asarray(s, dtype=np.int32) for s in seqs]),
            starts=np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64),
            prompt_lens=np.array([len(p) for p, _, _, _ in rows], dtype=np.int64),
            resp_lens=np.array([len(r) for _, r, _, _ in rows], dtype=np.int64),
            top_ids=np.concatenate([np.asarray(i) for _, _, i, _ in rows]).astype(np.int32),
            top_logp=np.concatenate([np.asarray(lp) for _, _, _, lp in rows]).astype(np.float16),
        )
    tmp.replace(path)
    return int(sum(len(r) for _, r, _, _ in rows))


def load_shards(folder: str | Path) -> list[dict[str, np.ndarray]]:
    """Every shard of a ``gen-data`` folder, in order, as dicts of arrays."""
    paths = shard_paths(folder)
    if not paths:
        raise Refused(f"no {PATTERN} files in {str(folder)!r}: run `specdec run distill-data`")
    out = []
    for p in paths:
        shard = dict(np.load(p))
        missing = [k for k in _KEYS if k not in shard]
        if missing:
            raise ValueError(f"{p} is not a gen-data shard: it lacks {missing}")
        out.append(shard)
    return out


def sequences(shards: Iterable[dict[str, np.ndarray]]) -> Iterator[ShardSequence]:
    """Every sequence of the shards, in order, with its soft labels."""
    for s in shards:
        offsets = np.concatenate([[0], np.cumsum(s["resp_lens"])[:-1]]).astype(np.int64)
        for st, pl, rl, o in zip(s["starts"], s["prompt_lens"], s["resp_lens"], offsets, strict=True):
            st, pl, rl, o = int(st), int(pl), int(rl), int(o)
            yield ShardSequence(
                s["ids"][st : st + pl + rl], pl, s["top_ids"][o : o + rl], s["top_logp"][o : o + rl]
            )


def response_tokens(folder: str | Path) -> int:
    """Response tokens stored in a folder's shards (0 when it has none), read from the lengths only."""
    return sum(int(np.load(p)["resp_lens"].sum()) for p in shard_paths(folder))
