"""A measurement run's budget and its JSON record, saved after every section.

* :class:`Deadline` -- a global time budget, checked between cells (what it cuts is listed as
  skipped, never run halfway).
* :class:`Recorder` -- the record of one run (``settings``, ``status`` and one key per section),
  written atomically by :func:`specdec.theory.recordio.write_record` after every section, so a
  timeout still leaves the data so far. The GPU record (:mod:`specdec.measure.gpurecord`) and the
  real-weights GPU run (:mod:`specdec.measure.gpurun`) both keep their records here.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specdec.theory.recordio import write_record

__all__ = ["Deadline", "Recorder"]


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
    """The JSON record of one run, written (atomically) to ``path`` after every change worth keeping.

    ``data`` holds ``settings``, ``environment``, ``status`` (sections done, failed, skipped;
    elapsed time; ``finished``) and one key per section. :meth:`section` runs a block as a
    named section: on an exception the error and the end of its traceback are recorded and
    the run goes on with the next section.
    """

    def __init__(self, path: str | Path, *, settings: dict[str, Any], log: Callable[[str], None] = print):
        self.path = Path(path)
        self.log = log
        self.started = time.monotonic()
        self.data: dict[str, Any] = {
            "record": "gpu_record",
            "schema": 1,
            "settings": dict(settings),
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
