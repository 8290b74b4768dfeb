"""A complete install: the wheel holds every file the package loads, and a missing draft is an error.

The wheel is built offline (``pip wheel --no-deps --no-build-isolation``, no index) from a copy of
the files git tracks, as a fresh clone has them, in a temporary folder: about two seconds, and
nothing is written into the checkout.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DRAFTS = ROOT / "specdec" / "data" / "drafts"


def _tracked(*paths: str) -> list[str]:
    """Files git tracks under ``paths`` (relative to the checkout); skip, or fail on CI, without git."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--", *paths], cwd=ROOT, capture_output=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"not a git checkout or no git: {exc}")
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]  # not deleted since


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if importlib.util.find_spec("setuptools") is None:  # the dev extra installs it
        pytest.fail("setuptools is needed to build the wheel offline: pip install 'setuptools>=68'")
    src = tmp_path_factory.mktemp("clone")
    for rel in _tracked("specdec", "pyproject.toml", "README.md"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    out = tmp_path_factory.mktemp("wheel")
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(out),
        ".",
    ]
    done = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = out.glob("specdec-*.whl")
    return path


def test_wheel_holds_every_tracked_package_file(wheel):
    files = _tracked("specdec")
    data = [f for f in files if f.startswith("specdec/data/")]
    drafts = [f for f in data if f.startswith("specdec/data/drafts/") and f.count("/") == 4]
    assert any(f.endswith("/weights.safetensors") for f in drafts), "no trained draft is tracked"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        missing = sorted(set(files) - names)
        assert not missing, f"the wheel lacks {missing}"
        for f in data:  # byte for byte what the checkout holds
            assert z.read(f) == (ROOT / f).read_bytes(), f


def test_installed_wheel_finds_its_data(wheel, tmp_path):
    """Unpacked alone on sys.path (the checkout is not), the package finds its drafts and tables."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("specdec.train.draftnets needs torch")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    folders = sorted({f.split("/")[3] for f in _tracked("specdec/data/drafts") if f.count("/") == 4})
    # the distilled drafts (cards naming their init_layers), not the conditioned drafters beside them
    expected = [n for n in folders if "init_layers" in json.loads((DRAFTS / n / "card.json").read_text())]
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import specdec, specdec.train.draftnets as d, specdec.paper.published as p\n"
        "import specdec.train.workloads as w\n"
        "assert specdec.__file__.startswith(sys.argv[1]), specdec.__file__\n"
        "assert d.require_drafts() == sys.argv[2].split(','), d.list_drafts()\n"
        "assert p.load_table('table1') and all(w.load_workload(t) for t in w.TASKS)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(site), ",".join(expected)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --------------------------------------------------------------------------- a requested draft
def _draft(root: Path, name: str, weights: bool = True) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "card.json").write_text('{"init_layers": [0]}\n')  # a distilled draft's card
    if weights:
        (root / name / "weights.safetensors").write_bytes(b"")


def test_require_drafts_names_what_is_missing(tmp_path):
    pytest.importorskip("torch")
    from specdec.train.draftnets import require_drafts

    with pytest.raises(FileNotFoundError, match="no saved drafts under .*an install without"):
        require_drafts(root=tmp_path)
    with pytest.raises(FileNotFoundError, match="no saved drafts"):
        require_drafts(root=tmp_path / "absent")
    _draft(tmp_path, "a")
    _draft(tmp_path, "b")
    assert require_drafts(root=tmp_path) == ["a", "b"]
    assert require_drafts(["b"], root=tmp_path) == ["b"]
    with pytest.raises(ValueError, match=r"no draft named 'c', 'x' under .*; saved drafts: \['a', 'b'\]"):
        require_drafts(["a", "c", "x"], root=tmp_path)
    with pytest.raises(ValueError, match="at least one draft name"):
        require_drafts([], root=tmp_path)
    _draft(tmp_path, "d", weights=False)
    with pytest.raises(FileNotFoundError, match="draft 'd' has a card.json but no weights.safetensors"):
        require_drafts(root=tmp_path)


@pytest.fixture
def real_decoding(monkeypatch):
    """``specdec run real-decoding ARGS`` (its exit status), its program's target loader replaced by a
    tripwire."""
    pytest.importorskip("torch")
    pytest.importorskip("tqdm")
    from specdec.cli.app import main

    def tripwire(*args, **kwargs):
        raise AssertionError("the target was loaded before the drafts were checked")

    from specdec.experiments import realdecoding as realbench

    monkeypatch.setattr(realbench, "load_engine", tripwire)
    monkeypatch.setattr(realbench, "set_threads", lambda n: {"threads": n})  # leave torch's count alone
    return lambda argv: main(["run", "real-decoding", *argv])


def test_real_decoding_refuses_a_missing_draft_before_loading(real_decoding, monkeypatch, tmp_path, capsys):
    import specdec.train.draftnets

    assert real_decoding(["--drafts", "distil-l1,distil-l9", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no draft named 'distil-l9'" in err and "'distil-l1', 'distil-l2', 'distil-l4'" in err
    assert real_decoding(["--drafts", "distil-l1", "--no-trained", "--out", str(tmp_path)]) == 2
    assert "exclude each other" in capsys.readouterr().err
    with pytest.raises(AssertionError, match="the target was loaded"):
        real_decoding(["--out", str(tmp_path)])  # the package's drafts pass, then the target loads
    # an install without the drafts: the default run stops, it does not run without them
    monkeypatch.setattr(specdec.train.draftnets, "DRAFT_DIR", tmp_path / "drafts")
    assert real_decoding(["--out", str(tmp_path)]) == 2
    assert "no saved drafts under" in capsys.readouterr().err
    with pytest.raises(AssertionError, match="the target was loaded"):
        real_decoding(["--no-trained", "--out", str(tmp_path)])
