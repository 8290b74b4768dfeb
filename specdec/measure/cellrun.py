"""The one resumable cell runner: a record saved after every finished cell, resumed by a rerun.

A long measurement (Part IV's real decoding, ``benchmarks/real_decoding.py``; the campaign,
:func:`specdec.analysis.campaign.run_campaign`) is a list of cells, each a few seconds to minutes of
paired runs (:mod:`specdec.measure.pairedrun`). The record of the run so far is written after every
finished cell, so that an interrupted run loses at most one cell, and the same command run again
continues after the last finished one:

* :func:`open_partial` -- the saved record of an interrupted run with the same settings (None when
  there is none, or when the caller starts afresh); a damaged file or one made with other settings
  stops the run with a message that says what to do.
* :func:`run_cells` -- every cell not yet in the record's ``done`` list, in order; after each, its
  id joins ``done`` and the record is written (:func:`specdec.theory.recordio.write_record`: atomic,
  NaN and infinity -> null, the one NaN rule of the records), so a resumed record equals a whole one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from specdec.theory.checks import check_float
from specdec.theory.recordio import jsonable, write_record

__all__ = ["as_stored", "open_partial", "run_cells"]


def as_stored(value: Any) -> Any:
    """``value`` as a record file stores and reads it back (:func:`specdec.theory.recordio.jsonable`,
    then JSON): what a resumed run's settings are compared in."""
    return json.loads(json.dumps(jsonable(value)))


def open_partial(
    path: str | Path,
    settings: Mapping[str, Any],
    *,
    fresh: bool = False,
    key: str = "settings",
    what: str = "partial run",
) -> dict[str, Any] | None:
    """The partial record at ``path`` when its ``key`` holds ``settings`` (as stored); None when
    there is no file or ``fresh`` discards it.

    Raises SystemExit when the file cannot be read as a JSON object ("damaged") or was made with
    other settings (naming the ones that differ): rerunning the file's own command resumes it,
    ``--fresh`` discards it. ``what`` names the record in the message (``"partial campaign"``).
    """
    path = Path(path)
    if fresh or not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record, dict):
            raise ValueError(f"a JSON {type(record).__name__}, not the record object")
    except (OSError, ValueError) as exc:
        raise SystemExit(
            f"{path} is damaged and cannot be resumed ({' '.join(str(exc).split())}): pass --fresh to "
            "discard it and start the run again"
        ) from None
    mine = as_stored(dict(settings))
    saved = record.get(key)
    if saved != mine:
        saved = saved if isinstance(saved, dict) else {}
        diff = sorted(k for k in mine if saved.get(k) != mine[k])
        raise SystemExit(
            f"{path} holds a {what} with other settings ({', '.join(diff) or 'keys'}): rerun its "
            "own command (in the file) to resume it, or pass --fresh to discard it"
        )
    return record


def run_cells(
    record: dict[str, Any],
    cells: Iterable[tuple[str, Callable[[], Any]]],
    path: str | Path,
    *,
    budget_s: float | None = None,
    after: Callable[[str, float], Any] | None = None,
) -> bool:
    """Run the cells of ``cells`` (``(id, run)`` pairs, in order) whose id is not in ``record["done"]``.

    ``run()`` adds the cell's results to ``record``; then the id joins ``record["done"]``,
    ``after(id, seconds)`` runs (bookkeeping, a log line), and the record is written to ``path``
    (:func:`specdec.theory.recordio.write_record`, compact, keys in order). ``budget_s``: stop after
    the cell that brings this call's time to or past it. Returns whether every cell is done.
    """
    if budget_s is not None:
        check_float("budget_s", budget_s, low=0.0)
    start, stopped = time.perf_counter(), False
    for cid, run in cells:
        if cid in record["done"]:
            continue
        if stopped:
            return False
        t0 = time.perf_counter()
        run()
        record["done"].append(cid)
        if after is not None:
            after(cid, time.perf_counter() - t0)
        write_record(path, record, indent=None, sort_keys=False)
        stopped = budget_s is not None and time.perf_counter() - start >= budget_s
    return True
