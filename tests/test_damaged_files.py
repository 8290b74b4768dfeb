"""Issue 41, item 7: damaged files on disk are named, never overwritten silently, and a killed writer's
temporary folder goes at once.

* a damaged ``mode-probes.json`` was re-probed and overwritten, dropping every other machine's entry
  without a word: now it is kept beside (``.damaged``) and one line names it;
* a broken drafter card gave an unnamed ``JSONDecodeError``, truncated draft weights a bare
  ``SafetensorError``: now a :class:`~specdec.theory.recordio.DamagedFileError` names the file;
* a kill during the first model conversion left a 517 MB temporary folder that the next writer kept
  for an hour (and a second kill left another): now the folder's name says which process writes it,
  and the next writer removes it at once when that process is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from specdec.theory.recordio import DamagedFileError, read_json

ROOT = Path(__file__).resolve().parents[1]
DRAFTS = ROOT / "specdec" / "data" / "drafts"


class _Config:
    hidden_size, intermediate_size, num_hidden_layers = 32, 64, 2
    num_attention_heads, num_key_value_heads, vocab_size = 4, 2, 97


TINY = type("Tiny", (), {"config": _Config()})()  # what choose_mode keys a probe by; never run


def _probe(calls):
    def probe_modes(model, wanted, threads=None):
        calls.append(wanted)
        return {"modes": {m: {"step_s": 1.0, "verify_s": 2.0} for m in wanted}, "machine": {}}

    return probe_modes


@pytest.mark.parametrize("damage", ['{"another-machine": {"mode": "int4"}, trunc', "[1, 2]", "\xff\xfe"])
def test_a_damaged_mode_probe_cache_is_kept_aside_and_named(monkeypatch, tmp_path, damage):
    from specdec.measure import modes

    calls = []
    monkeypatch.setattr(modes, "probe_modes", _probe(calls))
    monkeypatch.setattr(modes, "_IN_MEMORY", {})
    path = tmp_path / "mode-probes.json"
    raw = damage.encode("latin-1")
    path.write_bytes(raw)
    with pytest.warns(UserWarning, match=rf"mode-probe cache {path} is damaged.*kept as {path}\.damaged"):
        probe = modes.choose_mode(TINY, cache=tmp_path, modes=("float32",))
    assert probe["cached"] is False and len(calls) == 1
    assert (tmp_path / "mode-probes.json.damaged").read_bytes() == raw  # the other machines' entries
    assert len(json.loads(path.read_text())) == 1  # this machine's probe, written anew
    assert modes.choose_mode(TINY, cache=tmp_path, modes=("float32",))["cached"] is True


def test_read_json_names_the_file(tmp_path):
    bad = tmp_path / "card.json"
    bad.write_text('{"kind": "eagle",')
    with pytest.raises(DamagedFileError, match=rf"card {bad} is damaged: not JSON \(.* line 1 column 18\)"):
        read_json(bad, what="the card")
    bad.write_text("[]")
    with pytest.raises(DamagedFileError, match="a JSON list, not a dict"):
        read_json(bad, kind=dict)
    with pytest.raises(FileNotFoundError, match="missing.json"):
        read_json(tmp_path / "missing.json")


def _copy(name: str, tmp_path: Path) -> Path:
    shutil.copytree(DRAFTS / name, tmp_path / name)
    return tmp_path / name


def test_a_broken_draft_card_is_named(tmp_path):
    from specdec.train import draftnets

    folder = _copy("distil-l1", tmp_path)
    (folder / "card.json").write_text((DRAFTS / "distil-l1" / "card.json").read_text()[:500])
    with pytest.raises(DamagedFileError, match=rf"card {folder / 'card.json'} is damaged: not JSON"):
        draftnets.list_drafts(tmp_path)
    with pytest.raises(DamagedFileError, match=rf"the draft's card {folder / 'card.json'} is damaged"):
        draftnets.load_draft("distil-l1", None, root=tmp_path)


def test_a_conditioned_card_is_not_taken_for_a_draft(tmp_path):
    """``load_draft`` on EAGLE's card gave ``KeyError: 'init_layers'``."""
    from specdec.train import draftnets

    folder = _copy("eagle-1", tmp_path)
    with pytest.raises(DamagedFileError, match=r"eagle-1/card.json holds no init_layers.*kind: 'eagle'"):
        draftnets.load_draft("eagle-1", None, root=tmp_path)
    assert folder.exists()


@pytest.mark.parametrize("keep", [0, 5, 100, 20_000])
def test_truncated_draft_weights_are_named(tmp_path, keep):
    from specdec.engine.staticllama import read_safetensors
    from specdec.train import condnets, draftnets

    for name in ("distil-l1", "medusa-4"):
        folder = _copy(name, tmp_path)
        weights = folder / "weights.safetensors"
        weights.write_bytes(weights.read_bytes()[:keep])
        with pytest.raises(DamagedFileError, match=rf"{weights}"):
            read_safetensors(weights)
        with pytest.raises(DamagedFileError, match=rf"the drafter's weights {weights} are damaged"):
            draftnets.load_weights(weights)
    with pytest.raises(DamagedFileError, match="the drafter's weights .*distil-l1/weights.safetensors"):
        draftnets.load_draft("distil-l1", None, root=tmp_path)
    card = read_json(tmp_path / "medusa-4" / "card.json")
    target = SimpleNamespace(config=SimpleNamespace(hidden_size=card["hidden_size"]))
    with pytest.raises(DamagedFileError, match="the drafter's weights .*medusa-4/weights.safetensors"):
        condnets.load_conditioned(tmp_path / "medusa-4", target)


def test_a_gone_writers_temporary_folder_is_removed_at_once(tmp_path, capsys):
    from specdec.engine.models import remove_stale_temporaries, temporary_prefix

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    dead_pid = int(done.stdout)
    mine = temporary_prefix("smollm2-q4_1")
    dead = tmp_path / (mine.replace(f"-{os.getpid()}@", f"-{dead_pid}@") + "abc_12")
    alive = tmp_path / (mine + "def34")
    other_host = tmp_path / f".smollm2-q4_1-{dead_pid}@00000000-ghi56"
    for folder in (dead, alive, other_host):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "model.safetensors").write_bytes(b"x" * 10)
    assert remove_stale_temporaries(tmp_path, ".smollm2-q4_1-*") == [dead]
    assert alive.exists() and other_host.exists()  # a live writer's, and one of a host we cannot see
    assert f"its writer, process {dead_pid}, is gone" in capsys.readouterr().err


def test_a_killed_conversion_leaves_a_folder_the_next_write_removes(tmp_path):
    """The model cache's writer killed mid-write (SIGKILL: no cleanup runs), then a second write."""
    code = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from specdec.engine import models

        class Model:
            def save_pretrained(self, folder, **kw):
                (Path(folder) / "model.safetensors").write_bytes(b"x" * 1000)
                os.kill(os.getpid(), signal.SIGKILL)

        models._save_cache(Model(), None, Path({str(tmp_path / "cache")!r}), {{}})
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    (left,) = tmp_path.glob(".cache-*")
    assert (left / "model.safetensors").exists()

    from specdec.engine import models

    class Saves:
        def save_pretrained(self, folder, **kw):
            (Path(folder) / "model.safetensors").write_bytes(b"y")

    models._save_cache(Saves(), Saves(), tmp_path / "cache", {"k": 1})
    assert not left.exists() and list(tmp_path.glob(".cache-*")) == []
    assert (tmp_path / "cache" / "model.safetensors").read_bytes() == b"y"
