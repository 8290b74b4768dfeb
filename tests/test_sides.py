"""Two versions side by side (specdec.measure.sides): a commit's package from git, a worker file run on a
version's package, and the checks that the worker imported that package."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.measure.sides import ROOT, package_at, run_side

WORKER = """
import json, sys
import specdec
given = sys.stdin.read()
job = json.loads(given) if given else None
print("noise", file=sys.stderr)
where = sys.argv[1] if len(sys.argv) > 1 else specdec.__file__
if where == "fail":
    raise SystemExit("this worker fails on purpose")
sys.stdout.write(json.dumps({"specdec": where, "version": specdec.VERSION, "job": job, "argv": sys.argv[1:]}))
"""


def version_folder(tmp: Path, name: str) -> Path:
    folder = tmp / name
    (folder / "specdec").mkdir(parents=True)
    (folder / "specdec" / "__init__.py").write_text(f"VERSION = {name!r}\n")
    return folder


def test_a_worker_runs_on_the_folders_package_with_its_job_and_argv(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    for name in ("old", "new"):
        folder = version_folder(tmp_path, name)
        result, load = run_side(folder, worker, threads=1, job={"n": 3})
        assert result["version"] == name and result["job"] == {"n": 3}
        assert {"cpu_share", "others_busy_cpus", "wall_s"} <= set(load)
        package = str(folder / "specdec")  # the package's folder is accepted as well as its file
        result, _ = run_side(folder, worker, threads=1, args=[package])
        assert result["argv"] == [package] and result["version"] == name and result["job"] is None


def test_a_worker_that_imported_another_package_or_failed_is_refused(tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    old, new = version_folder(tmp_path, "old"), version_folder(tmp_path, "new")
    with pytest.raises(RuntimeError, match="imported .*, not that folder's package"):
        run_side(old, worker, threads=1, args=[str(new / "specdec" / "__init__.py")], what="test worker")
    with pytest.raises(RuntimeError, match=r"(?s)the test worker on .* failed:\n.*on purpose"):
        run_side(old, worker, threads=1, args=["fail"], what="test worker")


def test_package_at_extracts_a_commits_package_or_names_the_commit(tmp_path):
    import subprocess

    commit = package_at("HEAD", tmp_path)
    assert (
        commit
        == subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    )
    shown = subprocess.run(
        ["git", "show", "HEAD:specdec/__init__.py"], cwd=ROOT, capture_output=True, text=True
    )
    assert (
        tmp_path / "specdec" / "__init__.py"
    ).read_text() == shown.stdout  # the commit's, not the work tree's
    with pytest.raises(ValueError, match="git cannot archive specdec at 'no-such-commit'"):
        package_at("no-such-commit", tmp_path / "x")
