"""Issue 42's self-generated data on disk: the shard format, its one writer and reader, and the hashes.

A data folder (``results/selfdata`` by default; :mod:`specdec.experiments.selfdata` writes it) holds:

* ``manifest.json`` -- the run's record: settings, the prompt set's counts and sha256, every source
  file's path and sha256, the disjointness report, and every shard with its sha256 (a partial shard
  too, when a run stopped inside one);
* ``prompts.jsonl.gz`` -- the prompt set (:class:`specdec.train.selfprompts.SelfPrompt` a line; gzip
  without a time stamp, so its bytes and sha256 depend on its content only);
* ``shard-NNNNN.npz`` -- the sequences of prompts ``NNNNN * shard_prompts ..``, in prompt order:

  - ``ids`` (uint16): prompt + response tokens of every sequence, concatenated;
  - ``prompt_lens``, ``resp_lens`` (int32): the parts of each sequence (``starts`` follow from them);
  - ``index`` (int32): each sequence's prompt index in the prompt set;
  - ``temperature`` (float32): 0 (greedy) or the sampled temperature;
  - ``seed`` (int64): the sampling seed of the sequence (its generator's, also stored for greedy);
  - ``eos`` (bool): whether the response ended with the end-of-sequence token (else it hit the cap).

  Written with ``numpy.savez_compressed`` to a temporary file and renamed (a reader never sees half a
  shard); zip entries carry a fixed date, so equal arrays give equal bytes.
* ``shard-NNNNN.partial.npz`` -- the same format for the first prompts of a shard a stopped run had
  finished; the next run continues after them and replaces it with the whole shard.

No soft labels are stored (32 log-probabilities a token would be ~200 bytes against 2): the trainers
recompute the target's rows when they compute its features, one forward per sequence.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DEV_EVERY",
    "KEYS",
    "SelfSequence",
    "file_sha256",
    "read_prompts",
    "read_shard",
    "sequences",
    "shard_name",
    "verify_manifest",
    "write_prompts",
    "write_shard",
]

#: Every DEV_EVERY-th prompt of the prompt set (index 0, 997, ...) is a development prompt
#: (:func:`specdec.measure.draftcost.dev_prompts`): trainers leave its sequences out.
DEV_EVERY = 997

KEYS = ("ids", "prompt_lens", "resp_lens", "index", "temperature", "seed", "eos")
_VOCAB_MAX = 2**16  # uint16 ids


@dataclass(frozen=True)
class SelfSequence:
    """One generated sequence: its prompt's index, the prompt and response ids, how it was decoded."""

    index: int
    prompt: np.ndarray
    response: np.ndarray
    temperature: float
    seed: int
    eos: bool

    @property
    def ids(self) -> np.ndarray:
        return np.concatenate([self.prompt, self.response])


def shard_name(cell: int, partial: bool = False) -> str:
    return f"shard-{cell:05d}{'.partial' if partial else ''}.npz"


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_shard(path: str | Path, rows: Sequence[SelfSequence]) -> dict[str, Any]:
    """Write ``rows`` as one shard (atomically); returns its file name, sha256, bytes and token counts."""
    if not rows:
        raise ValueError("rows must hold at least one sequence")
    for r in rows:
        ids = np.concatenate([r.prompt, r.response])
        if ids.size and (ids.min() < 0 or ids.max() >= _VOCAB_MAX):
            raise ValueError(
                f"sequence {r.index}: token ids must lie in [0, {_VOCAB_MAX}) to be stored as uint16"
            )
        if len(r.prompt) == 0:
            raise ValueError(f"sequence {r.index}: an empty prompt")
    path = Path(path)
    arrays = {
        "ids": np.concatenate([np.concatenate([r.prompt, r.response]) for r in rows]).astype(np.uint16),
        "prompt_lens": np.array([len(r.prompt) for r in rows], dtype=np.int32),
        "resp_lens": np.array([len(r.response) for r in rows], dtype=np.int32),
        "index": np.array([r.index for r in rows], dtype=np.int32),
        "temperature": np.array([r.temperature for r in rows], dtype=np.float32),
        "seed": np.array([r.seed for r in rows], dtype=np.int64),
        "eos": np.array([r.eos for r in rows], dtype=bool),
    }
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(path)
    greedy = arrays["temperature"] == 0
    return {
        "file": path.name,
        "sha256": hashlib.sha256(buf.getvalue()).hexdigest(),
        "bytes": len(buf.getvalue()),
        "sequences": len(rows),
        "first_index": int(arrays["index"][0]),
        "last_index": int(arrays["index"][-1]),
        "prompt_tokens": int(arrays["prompt_lens"].sum()),
        "response_tokens": int(arrays["resp_lens"].sum()),
        "greedy_tokens": int(arrays["resp_lens"][greedy].sum()),
        "sampled_tokens": int(arrays["resp_lens"][~greedy].sum()),
        "ended_with_eos": int(arrays["eos"].sum()),
    }


def read_shard(path: str | Path) -> list[SelfSequence]:
    """The sequences of one shard, in order."""
    with np.load(path) as z:
        missing = [k for k in KEYS if k not in z.files]
        if missing:
            raise ValueError(f"{path} is not a self-data shard: it lacks {missing}")
        a = {k: z[k] for k in KEYS}
    out, at = [], 0
    for i in range(len(a["index"])):
        p, r = int(a["prompt_lens"][i]), int(a["resp_lens"][i])
        ids = a["ids"][at : at + p + r].astype(np.int64)
        out.append(SelfSequence(int(a["index"][i]), ids[:p], ids[p:], float(a["temperature"][i]),
                                int(a["seed"][i]), bool(a["eos"][i])))  # fmt: skip
        at += p + r
    if at != len(a["ids"]):
        raise ValueError(f"{path}: the lengths cover {at} ids of {len(a['ids'])}")
    return out


def sequences(folder: str | Path, *, verify: bool = True) -> Iterator[SelfSequence]:
    """Every sequence of a data folder's whole shards, in prompt order (the manifest's shards; their
    hashes checked first when ``verify``)."""
    folder = Path(folder)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    if verify:
        verify_manifest(folder, manifest)
    for cell in sorted(manifest.get("shards", {}), key=int):
        yield from read_shard(folder / manifest["shards"][cell]["file"])


def verify_manifest(folder: str | Path, manifest: dict[str, Any] | None = None) -> dict[str, int]:
    """Check every file the manifest names (prompts, shards, a partial shard) against its sha256;
    ValueError naming the first that differs or is missing. Returns the counts checked."""
    folder = Path(folder)
    if manifest is None:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    entries = [manifest["prompt_set"]] + list(manifest.get("shards", {}).values())
    if manifest.get("partial"):
        entries.append(manifest["partial"])
    for e in entries:
        path = folder / e["file"]
        if not path.exists():
            raise ValueError(f"{path} is named in the manifest but missing")
        digest = file_sha256(path)
        if digest != e["sha256"]:
            raise ValueError(f"{path}: sha256 {digest} differs from the manifest's {e['sha256']}")
    return {"files": len(entries), "shards": len(manifest.get("shards", {}))}


def write_prompts(path: str | Path, rows: Sequence[dict[str, Any]]) -> str:
    """The prompt set as gzip'd JSON lines (no time stamp: same rows, same bytes), atomically; its sha256."""
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)
    data = gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return hashlib.sha256(data).hexdigest()


def read_prompts(path: str | Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in gzip.decompress(Path(path).read_bytes()).decode("utf-8").splitlines()
    ]
