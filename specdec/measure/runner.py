"""The one runner of the book's measurements: settings as a key, cells, a deadline, resume, atomic saves.

Every run program (:mod:`specdec.experiments`: the campaigns, Part IV's real decoding, the batch
surface, the trees, the GPU runs) states its design as a settings dataclass and hands its work to this
module, so that each keeps its record the same way:

* :class:`RunSettings` -- the base of a program's settings dataclass: :meth:`RunSettings.to_record` is
  both the record's ``settings`` and the key a partial record must hold to be resumed (fields declared
  with :func:`not_key`, like the output folder or ``--fresh``, are in neither).
* :func:`open_partial` -- the saved record of an interrupted run with the same settings (None when
  there is none, or when the caller starts afresh); a damaged file or one made with other settings
  stops the run with a message that says what to do.
* :func:`run_cells` -- every cell whose id is not yet done, in order; each cell's seconds and the
  machine's load while it ran (:func:`load_during`) are recorded, a cell timed
  while other processes left too few free CPUs can be timed again (the discarded timings stay in the
  record), and after each cell the record is written (:func:`specdec.theory.recordio.write_record`:
  atomic, NaN and infinity -> null, the records' one NaN rule), so a resumed record equals a whole one
  and an interruption loses at most one cell.
* :class:`Deadline` and :class:`Recorder` -- a one-shot run cut into named sections (the GPU runs):
  what the budget cuts is listed as skipped, never run halfway; a failed section is recorded with its
  traceback and the run goes on; the record is written after every section.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from specdec.theory.checks import Refused, check_float, check_int
from specdec.theory.recordio import jsonable, write_record

__all__ = [
    "LOAD_MARGIN",
    "Deadline",
    "Recorder",
    "RunSettings",
    "as_stored",
    "cpu_counters",
    "load_during",
    "not_key",
    "open_partial",
    "run_cells",
]

T = TypeVar("T")


def cpu_counters() -> dict[str, float]:
    """CPU seconds so far: this process's (``own_s``, all its threads) and, where /proc/stat
    exists, the busy time of every CPU of the machine (``busy_s``, steal included) and ``cpus``."""
    out = {"own_s": time.process_time()}
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            lines = handle.read().splitlines()
        ticks = [int(x) for x in lines[0].split()[1:9]]  # user nice system idle iowait irq softirq steal
        out["busy_s"] = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
        out["cpus"] = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    except (OSError, ValueError, IndexError):
        pass
    return out


#: A probe is *loaded* (not cached) when other processes left fewer free CPUs than its threads
#: need, less this margin: its timings then measure the contention, not the modes.
LOAD_MARGIN = 0.25


def load_during(before: dict[str, float], after: dict[str, float], wall_s: float, threads: int) -> dict:
    """How busy the machine was while the probe timed: this process's CPU time, its share of its
    threads' worth (``cpu_share``), and from /proc/stat the CPUs kept busy by other processes
    (``others_busy_cpus``, steal included); ``loaded`` when the free CPUs fell below ``threads``
    (less :data:`LOAD_MARGIN`). Without /proc/stat, the 1-minute load average against the CPUs."""
    own = after["own_s"] - before["own_s"]
    wall_s = max(wall_s, 1e-9)
    load: dict[str, Any] = {
        "wall_s": wall_s,
        "cpu_s": own,
        "threads": threads,
        "cpu_share": own / wall_s / threads,
    }
    if "busy_s" in before and "busy_s" in after:
        others = max(0.0, after["busy_s"] - before["busy_s"] - own) / wall_s
        load |= {"cpus": int(after["cpus"]), "others_busy_cpus": others}
        load["loaded"] = after["cpus"] - others < threads - LOAD_MARGIN
    else:
        average = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        load |= {"cpus": os.cpu_count() or 1, "load_average_1min": average}
        load["loaded"] = average > load["cpus"] + LOAD_MARGIN
    return load


def as_stored(value: Any) -> Any:
    """``value`` as a record file stores and reads it back (:func:`specdec.theory.recordio.jsonable`,
    then JSON): what a resumed run's settings are compared in."""
    return json.loads(json.dumps(jsonable(value)))


def not_key(default: Any = None) -> Any:
    """A settings field that is neither recorded as a setting nor part of the resume key (where the
    record goes, whether to discard a partial run, whether to draw a progress bar)."""
    return dataclasses.field(default=default, metadata={"key": False})


class RunSettings:
    """The base of a run program's settings dataclass (a program's ``@dataclass`` subclasses it, frozen
    or not, with its fields).

    :meth:`to_record` is the one description of the run's design: the record stores it as its
    ``settings`` and a partial record is resumed only when it holds the same (:func:`open_partial`).
    A subclass checks its fields in ``__post_init__`` (:mod:`specdec.theory.checks`), so a script only
    parses its arguments into the dataclass and bad values are refused before anything loads.
    """

    def to_record(self) -> dict[str, Any]:
        """The fields that define the run (not those declared with :func:`not_key`), as stored."""
        return as_stored(
            {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata.get("key", True)}
        )


def open_partial(
    path: str | Path,
    settings: Mapping[str, Any] | RunSettings,
    *,
    fresh: bool = False,
    key: str = "settings",
    what: str = "partial run",
) -> dict[str, Any] | None:
    """The partial record at ``path`` when its ``key`` holds ``settings`` (as stored; a
    :class:`RunSettings` by its :meth:`~RunSettings.to_record`); None when there is no file or
    ``fresh`` discards it.

    Raises :class:`~specdec.theory.checks.Refused` (one line from ``specdec run``) when the file cannot
    be read as a JSON object ("damaged") or was made with other settings (naming the ones that differ):
    rerunning the file's own command resumes it,
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
        raise Refused(
            f"{path} is damaged and cannot be resumed ({' '.join(str(exc).split())}): pass --fresh to "
            "discard it and start the run again"
        ) from None
    mine = settings.to_record() if isinstance(settings, RunSettings) else as_stored(dict(settings))
    saved = record.get(key)
    if saved != mine:
        saved = saved if isinstance(saved, dict) else {}
        diff = sorted(k for k in mine if saved.get(k) != mine[k])
        raise Refused(
            f"{path} holds a {what} with other settings ({', '.join(diff) or 'keys'}): rerun its "
            "own command (in the file) to resume it, or pass --fresh to discard it"
        )
    return record


def run_cells(
    record: dict[str, Any],
    cells: Iterable[tuple[str, Callable[[], T]]],
    path: str | Path,
    *,
    keep: Callable[[str, T], Any] | None = None,
    threads: int = 1,
    retry_loaded: int = 0,
    budget_s: float | None = None,
    after: Callable[[str, float], Any] | None = None,
    done: list[str] | None = None,
    log: Callable[[str], None] | None = None,
    save: Callable[[], Any] | None = None,
) -> bool:
    """Run the cells of ``cells`` (``(id, run)`` pairs, in order) whose id is not yet done.

    ``done`` is the record's list of finished ids (default ``record["done"]``). ``run()`` computes the
    cell and returns its result, which ``keep(id, result)`` adds to ``record`` (a cell without ``keep``
    adds its results itself). The cell's seconds go to ``record["cell_seconds"][id]`` and the machine's
    load while it ran to ``record["cell_load"][id]`` (:func:`load_during` against
    ``threads``, the most threads the cell's engines use). ``retry_loaded``: a cell timed while other
    processes left fewer than ``threads`` free CPUs is run again, up to this many times (only with
    ``keep``: its first results must not be kept); the discarded results stay in
    ``record["discarded"]`` with the load and the reason, and the last attempt is kept whatever its
    load. Then the id joins ``done``, ``after(id, seconds)`` runs (bookkeeping, a log line, a progress
    bar), and the record is written to ``path`` (:func:`specdec.theory.recordio.write_record`, compact,
    keys in order; ``save()`` instead when given). ``budget_s``: stop after the cell that brings this
    call's time to or past it. Returns whether every cell is done.
    """
    check_int("threads", threads, low=1)
    check_int("retry_loaded", retry_loaded, low=0, high=10)
    if retry_loaded and keep is None:
        raise ValueError("retry_loaded needs keep: a cell timed again must not have kept its first results")
    if budget_s is not None:
        check_float("budget_s", budget_s, low=0.0)
    done = record.setdefault("done", []) if done is None else done
    start, stopped = time.perf_counter(), False
    for cid, run in cells:
        if cid in done:
            continue
        if stopped:
            return False
        for attempt in range(retry_loaded + 1):
            t0, counters = time.perf_counter(), cpu_counters()
            result = run()
            seconds = time.perf_counter() - t0
            # what else ran meanwhile (other processes' busy CPUs from /proc/stat): a cell timed on a
            # shared machine says so in the record
            load = jsonable(load_during(counters, cpu_counters(), seconds, threads))
            if load.get("loaded") and attempt < retry_loaded:
                busy = load.get("others_busy_cpus", 0.0)
                record.setdefault("discarded", []).append({
                    "cell": cid, "attempt": attempt, "load": load, "seconds": seconds,
                    "runs": jsonable(result),
                    "why": f"other processes kept {busy:.2f} CPUs busy (fewer than {threads} - "
                           f"{LOAD_MARGIN} CPUs free); the cell was timed again",
                })  # fmt: skip
                if log is not None:
                    log(f"{cid}: loaded ({busy:.2f} CPUs busy elsewhere); timing it again")
                continue
            if keep is not None:
                keep(cid, result)
            record.setdefault("cell_seconds", {})[cid] = seconds
            record.setdefault("cell_load", {})[cid] = load
            break
        done.append(cid)
        if after is not None:
            after(cid, time.perf_counter() - t0)
        if save is not None:
            save()
        else:
            write_record(path, record, indent=None, sort_keys=False)
        stopped = budget_s is not None and time.perf_counter() - start >= budget_s
    return True


class Deadline:
    """A global time budget: ``left()`` seconds remain of ``budget_s`` from creation."""

    def __init__(self, budget_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not budget_s >= 0:
            raise ValueError(f"budget_s must be >= 0; got {budget_s!r}")
        self.budget_s, self._clock = float(budget_s), clock
        self.start = clock()

    def elapsed(self) -> float:
        return self._clock() - self.start

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def allows(self, need_s: float = 0.0) -> bool:
        """True while at least ``need_s`` seconds remain (and the budget is not spent)."""
        return self.left() > max(need_s, 0.0)


class Recorder:
    """The JSON record of a one-shot run cut into sections, written (atomically) after every change.

    ``data`` holds ``record`` (the kind), ``settings`` (a :class:`RunSettings`' record, or a mapping),
    ``status`` (sections done, failed, skipped; elapsed time; ``finished``) and one key per section.
    :meth:`section` runs a block as a named section: on an exception the error and the end of its
    traceback are recorded and the run goes on with the next section.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        settings: Mapping[str, Any] | RunSettings,
        kind: str = "gpu_record",
        log: Callable[[str], None] = print,
    ):
        self.path = Path(path)
        self.log = log
        self.started = time.monotonic()
        self.data: dict[str, Any] = {
            "record": kind,
            "schema": 1,
            "settings": settings.to_record() if isinstance(settings, RunSettings) else dict(settings),
            "status": {"finished": False, "done": [], "failed": [], "skipped": [], "errors": {}},
        }

    def save(self) -> Path:
        self.data["status"]["elapsed_s"] = round(time.monotonic() - self.started, 3)
        return write_record(self.path, self.data)  # atomic; NaN and infinity -> null

    def skip(self, name: str, reason: str) -> None:
        self.data["status"]["skipped"].append({"section": name, "reason": reason})
        self.log(f"[skip] {name}: {reason}")
        self.save()

    @contextmanager
    def section(self, name: str) -> Iterator[dict[str, Any]]:
        """Run the ``with`` block as section ``name``; it fills the dict it gets (saved under ``name``)."""
        out: dict[str, Any] = {}
        self.data[name] = out
        start = time.monotonic()
        self.log(f"[start] {name} (t = {start - self.started:.1f} s)")
        try:
            yield out
        except Exception as exc:  # record and go on: one failed section must not lose the others
            tb = traceback.format_exc().splitlines()[-12:]
            self.data["status"]["failed"].append(name)
            self.data["status"]["errors"][name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": tb}
            self.log(f"[error] {name}: {type(exc).__name__}: {exc}")
        else:
            self.data["status"]["done"].append(name)
        finally:
            out["section_s"] = round(time.monotonic() - start, 3)
            self.log(f"[end] {name} in {out['section_s']:.1f} s")
            self.save()

    def finish(self, deadline: Deadline | None = None, note: str | None = None) -> Path:
        """Mark the run finished (with the seconds ``deadline`` has left, when given), save it, and
        log its last line (elapsed time, failed sections, ``note``); the record's path."""
        if deadline is not None:
            self.data["status"]["budget_left_s"] = deadline.left()
        self.data["status"]["finished"] = True
        path = self.save()
        st = self.data["status"]
        more = f"; {note}" if note else ""
        self.log(
            f"{self.data['record']}: done in {st['elapsed_s']:.0f} s; failed {st['failed']}{more} -> {path}"
        )
        return path
