"""Two versions of the package side by side, in alternating worker processes (issue 40's change records).

A change of the decoding loop's Python or of a drafter's calls is measured where it runs: a worker process
per version, the versions alternating, each worker importing its own version's ``specdec``. The one way
``loop-cost`` (:mod:`specdec.measure.loopcost`) and ``draft-cost`` (:mod:`specdec.experiments.draftcost`)
do it:

* :func:`package_at` -- a commit's ``specdec`` extracted from git (``git archive``) into a folder: the
  earlier version, without a second checkout;
* :func:`run_side` -- one worker: a file of this checkout (so that the worker's code is the same on both
  sides and uses only the API both versions share), run as ``__main__`` by ``runpy`` in a fresh Python
  whose ``PYTHONPATH`` and working folder are the version's folder (``python -c`` puts the working folder
  first on the path, before ``PYTHONPATH``; and the worker's own folder is never on it, where
  ``measure/profile.py`` would shadow the standard library's ``profile``). Its JSON result comes from
  its stdout and must say which ``specdec`` it imported (``"specdec"``: that package's ``__init__.py``
  or its folder), checked to be the version's; its load (:func:`specdec.measure.runner.load_during`, its
  CPU time counted as this process's) comes back beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Mapping, Sequence
from io import BytesIO
from pathlib import Path
from typing import Any

__all__ = ["ROOT", "package_at", "run_side", "with_children"]

ROOT = Path(__file__).resolve().parents[2]


def package_at(commit: str, folder: Path, root: Path = ROOT) -> str:
    """Extract ``specdec`` of ``commit`` (``git archive`` in ``root``) into ``folder``; returns the full
    commit id. ValueError naming the commit where git cannot archive it."""
    done = subprocess.run(["git", "archive", commit, "specdec"], cwd=root, capture_output=True, timeout=120)
    if done.returncode != 0:
        raise ValueError(f"git cannot archive specdec at {commit!r}: {done.stderr.decode(errors='replace')}")
    with tarfile.open(fileobj=BytesIO(done.stdout)) as archive:
        archive.extractall(folder, filter="data")
    return subprocess.run(
        ["git", "rev-parse", commit], cwd=root, capture_output=True, text=True, timeout=60
    ).stdout.strip()


def with_children(counters: Mapping[str, float]) -> dict[str, float]:
    """:func:`specdec.measure.runner.cpu_counters` with the finished children's CPU seconds added to this
    process's own."""
    import resource

    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {**counters, "own_s": counters["own_s"] + child.ru_utime + child.ru_stime}


def run_side(
    folder: str | Path,
    worker: str | Path,
    *,
    threads: int,
    args: Sequence[str] = (),
    job: Any = None,
    timeout_s: float = 3600,
    what: str = "worker",
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the file ``worker`` as ``__main__`` on the ``specdec`` under ``folder`` (``args`` its argv,
    ``job`` JSON on its stdin, else an empty stdin) and return its JSON result and its load; a worker
    running past ``timeout_s`` raises subprocess.TimeoutExpired. RuntimeError (naming ``what``)
    when it fails or imported another package than the folder's."""
    from specdec.measure.runner import cpu_counters, load_during

    folder = Path(folder).resolve()
    code = f"import runpy, sys; sys.argv[0] = {str(worker)!r}; "
    code += "runpy.run_path(sys.argv[0], run_name='__main__')"
    c0, t0 = with_children(cpu_counters()), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        input="" if job is None else json.dumps(job),  # never the parent's stdin
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(folder)},
        cwd=folder,
        timeout=timeout_s,
        check=False,
    )
    load = load_during(c0, with_children(cpu_counters()), time.perf_counter() - t0, int(threads))
    if done.returncode != 0:
        raise RuntimeError(f"the {what} on {folder} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout)
    imported = Path(result["specdec"]).resolve()
    if imported.name == "__init__.py":  # the package's file, or its folder
        imported = imported.parent
    if imported != folder / "specdec":
        raise RuntimeError(f"the {what} on {folder} imported {result['specdec']}, not that folder's package")
    return result, load
