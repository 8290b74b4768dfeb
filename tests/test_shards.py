"""The shard format of the distillation data (specdec.train.shards): one writer, one reader, no import
cycle."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from specdec.train.shards import load_shards, response_tokens, sequences, shard_paths, write_shard


def _rows(spec):
    """(prompt, response, top_ids, top_logp) rows whose labels encode their position."""
    rows = []
    for n, (plen, rlen) in enumerate(spec):
        prompt = [100 * n + i for i in range(plen)]
        resp = [100 * n + 50 + j for j in range(rlen)]
        top_ids = np.array([[1000 * n + j, 7] for j in range(rlen)], dtype=np.int32).reshape(rlen, 2)
        top_logp = np.full((rlen, 2), -float(n), dtype=np.float16)
        rows.append((prompt, resp, top_ids, top_logp))
    return rows


def test_sequences_round_trip_across_shards(tmp_path):
    first, second = _rows([(3, 2), (1, 4), (2, 0)]), _rows([(4, 3)])
    assert write_shard(tmp_path / "shard-00000.npz", first) == 6
    assert write_shard(tmp_path / "shard-00001.npz", second) == 3
    assert [p.name for p in shard_paths(tmp_path)] == ["shard-00000.npz", "shard-00001.npz"]
    assert response_tokens(tmp_path) == 9
    assert not list(tmp_path.glob("*.part"))
    got = list(sequences(load_shards(tmp_path)))
    assert len(got) == 4
    for seq, (prompt, resp, top_ids, top_logp) in zip(got, first + second, strict=True):
        assert seq.prompt_len == len(prompt)
        assert seq.ids.tolist() == prompt + resp
        assert seq.response.tolist() == resp
        # the soft labels belong to this sequence's response positions, in order
        assert np.array_equal(seq.top_ids, top_ids) and np.array_equal(seq.top_logp, top_logp)


def test_empty_folder_and_bad_input(tmp_path):
    assert shard_paths(tmp_path) == [] and response_tokens(tmp_path) == 0
    with pytest.raises(ValueError, match="no shard-"):
        load_shards(tmp_path)
    with pytest.raises(ValueError, match="at least one sequence"):
        write_shard(tmp_path / "shard-00000.npz", [])
    prompt, resp, top_ids, top_logp = _rows([(2, 3)])[0]
    with pytest.raises(ValueError, match="one row per response token"):
        write_shard(tmp_path / "shard-00000.npz", [(prompt, resp, top_ids[:2], top_logp)])
    np.savez(tmp_path / "shard-00000.npz", ids=np.zeros(3))
    with pytest.raises(ValueError, match="not a gen-data shard"):
        load_shards(tmp_path)


def test_draftnets_does_not_import_distill():
    """The reader lives in specdec.train.shards: draftnets and distill no longer import each other at load."""
    code = "import sys, specdec.train.draftnets; print('specdec.train.distill' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    code = "import sys, specdec.train.distill; print('specdec.train.draftnets' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
