"""Which committed record a chapter reads, and where it came from (issue #22's provenance).

One truth across chapters: a chapter reads the *newest* record of its kind (by the UTC timestamp
its environment stored), never the first file in name order; records compared side by side come
from one machine identity, or the text says otherwise. This module is the one way chapters read
records:

* :func:`newest` -- the newest record of a kind under a folder (``history/`` is never read),
  optionally narrowed by the thread count or the file name's stem;
* :func:`describe` -- one provenance row: file, kind, machine identity (CPU name and the digest of
  its flags where the record stored them), engine, mode, threads, commit, dirty tree, time;
* :func:`provenance` -- the rows of every record a chapter read through :func:`newest`, in order
  (the chapter prints them as its provenance table), and :func:`machines_note`, the sentence that
  says when they come from more than one machine identity.

``tests/test_provenance.py`` fails when a chapter's stored provenance table names a record that a
newer record of the same kind supersedes, or lists several machine identities without the note.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "OWN_READERS",
    "chapter_manifests",
    "clear",
    "describe",
    "every",
    "index_text",
    "kind_of",
    "machine_of",
    "machines_note",
    "manifest",
    "newest",
    "provenance",
    "read",
    "table",
]

#: The records read in this process through :func:`newest` / :func:`read`, in order.
_READ: list[dict[str, Any]] = []


def clear() -> None:
    """Forget the records read so far (a chapter calls it first)."""
    _READ.clear()


def kind_of(record: Mapping[str, Any], path: str | Path) -> str:
    """A record's kind: its ``kind`` field, else its folder's name (``gpu``, ``campaign``...); a
    smoke run (``settings.quick`` or a ``-quick`` file) is its own kind, ``<kind>-quick``."""
    p = Path(path)
    kind = str(record.get("kind") or ("gpu" if p.parent.name == "gpu" else p.parent.name))
    settings = record.get("settings") if isinstance(record.get("settings"), Mapping) else {}
    quick = bool(settings.get("quick")) or p.stem.endswith("-quick") or bool(record.get("quick"))
    return f"{kind}-quick" if quick and not kind.endswith("-quick") else kind


def machine_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """The machine identity a record stored: CPU (or device) name and the digest of its CPU flags
    (None where the record did not store one: such records cannot be shown to share a machine). Read
    from the record's ``machine``, then its chosen mode's, its settings', and its lean mode probe's
    (``mode_probe.machine``: the dynamic-gamma and Part IV records keep it there only)."""
    env = record.get("environment") if isinstance(record.get("environment"), Mapping) else {}
    chosen = record.get("chosen_mode") if isinstance(record.get("chosen_mode"), Mapping) else {}
    settings = record.get("settings") if isinstance(record.get("settings"), Mapping) else {}
    probe = record.get("mode_probe") if isinstance(record.get("mode_probe"), Mapping) else {}
    candidates = [record.get("machine"), chosen.get("machine"), settings.get("machine"), probe.get("machine")]
    for m in candidates:
        if isinstance(m, Mapping) and m.get("cpu_flags_sha256"):
            return {
                "name": str(m.get("cpu") or env.get("device_name")),
                "flags_sha256": m["cpu_flags_sha256"],
            }
    name = env.get("device_name") or record.get("device") or "unknown"
    if isinstance(name, Mapping):
        name = name.get("name", "unknown")
    return {"name": str(name), "flags_sha256": None}


def _timestamp(record: Mapping[str, Any]) -> str:
    env = record.get("environment") if isinstance(record.get("environment"), Mapping) else {}
    return str(env.get("timestamp_utc") or "")


def _threads(record: Mapping[str, Any]) -> Any:
    env = record.get("environment") if isinstance(record.get("environment"), Mapping) else {}
    settings = record.get("settings") if isinstance(record.get("settings"), Mapping) else {}
    machine = record.get("machine") if isinstance(record.get("machine"), Mapping) else {}
    for value in (settings.get("threads"), record.get("threads"), machine.get("threads"), env.get("threads")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _relative(p: Path) -> str:
    """A record's name under results/: ``<folder>/<file>``, or ``<folder>/history/<file>`` for a
    superseded record read on purpose."""
    return (
        f"{p.parent.parent.name}/history/{p.name}"
        if p.parent.name == "history"
        else f"{p.parent.name}/{p.name}"
    )


def describe(path: str | Path, record: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One provenance row of the record at ``path`` (read from disk unless given)."""
    p = Path(path)
    rec = record if record is not None else json.loads(p.read_text(encoding="utf-8"))
    env = rec.get("environment") if isinstance(rec.get("environment"), Mapping) else {}
    machine = machine_of(rec)
    engines = rec.get("engines")
    if isinstance(engines, Mapping):  # a campaign: its engines by name
        engine = ", ".join(engines)
    elif isinstance(rec.get("engine"), str):
        engine = rec["engine"]
    elif isinstance(rec.get("settings"), Mapping) and rec["settings"].get("engine_names"):
        engine = ", ".join(rec["settings"]["engine_names"])
    else:
        engine = rec.get("benchmark") or ""
    chosen = rec.get("chosen_mode") if isinstance(rec.get("chosen_mode"), Mapping) else {}
    mode = rec.get("mode") or chosen.get("mode")
    commit = env.get("git_commit")
    return {
        "file": _relative(p),
        "kind": kind_of(rec, p),
        "machine": machine["name"],
        "machine_id": machine["flags_sha256"] or "not recorded",
        "engine": str(engine)[:80],
        "mode": str(mode or ""),
        "threads": _threads(rec),
        "commit": str(commit)[:8] if commit else "not recorded",
        "dirty": env.get("git_dirty"),
        "timestamp_utc": _timestamp(rec) or "not recorded",
    }


def _candidates(root: Path) -> Iterable[Path]:
    for p in sorted(root.rglob("*.json")):
        rel = p.relative_to(root).parts
        if "history" in rel or p.name.endswith(".partial.json"):
            continue
        yield p


def _found(root: Path, kind: str, threads: int | None, stem: str | None) -> list[tuple[str, str, Path, dict]]:
    found = []
    for p in _candidates(root):
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except ValueError:
            continue
        if not isinstance(rec, dict) or kind_of(rec, p) != kind:
            continue
        if threads is not None and _threads(rec) != threads:
            continue
        if stem is not None and stem not in p.stem:
            continue
        found.append((_timestamp(rec), p.name, p, rec))
    if not found:
        raise FileNotFoundError(
            f"no record of kind {kind!r}{f' with {threads} thread(s)' if threads else ''} under {root}"
        )
    return sorted(found, key=lambda f: (f[0], f[1]))


def _noted(path: Path, rec: dict, query: Mapping[str, Any], note: bool) -> dict[str, Any]:
    if note:
        _READ.append(describe(path, rec) | {"query": {k: v for k, v in query.items() if v is not None}})
    return {**rec, "file": path.name, "path": str(path)}


def newest(
    root: str | Path,
    kind: str,
    *,
    threads: int | None = None,
    stem: str | None = None,
    note: bool = True,
) -> dict[str, Any]:
    """The newest record of ``kind`` under ``root`` (by its stored UTC timestamp; name order breaks
    a tie), optionally with ``threads`` threads or a file name containing ``stem``; with its file
    name under ``"file"`` and its path under ``"path"``. ``note`` adds it to :func:`provenance`.
    Raises FileNotFoundError naming what was looked for when none matches."""
    _, _, path, rec = _found(Path(root), kind, threads, stem)[-1]
    return _noted(path, rec, {"kind": kind, "threads": threads, "stem": stem}, note)


def every(
    root: str | Path,
    kind: str,
    *,
    threads: int | None = None,
    like: Mapping[str, Any] | None = None,
    where: Callable[[Mapping[str, Any]], bool] | None = None,
    note: bool = True,
) -> list[dict[str, Any]]:
    """Every record of ``kind`` under ``root``, oldest first (as :func:`newest` orders them), optionally
    with ``threads`` threads, of the machine identity of record ``like`` (:func:`machine_of`) and for
    which ``where(record)`` is true (e.g. the records of one change, by its words): for a kind whose
    records each measure one change (a before/after comparison), so that a chapter can show the changes
    in turn; each record listed is noted in :func:`provenance` (none with ``note`` False, e.g. to choose
    one whose chain is then read), and no other. FileNotFoundError when none matches."""
    out = []
    for _, _, path, rec in _found(Path(root), kind, threads, None):
        if (like is None or machine_of(rec) == machine_of(like)) and (where is None or where(rec)):
            out.append(_noted(path, rec, {"kind": kind, "threads": threads, "every": True}, note))
    if not out:
        raise FileNotFoundError(f"no record of kind {kind!r} on that machine identity under {root}")
    return out


def read(path: str | Path) -> dict[str, Any]:
    """A record named by its path (for records of which only one exists by design, e.g. a fixed
    CLI example), noted in :func:`provenance` like :func:`newest`'s."""
    p = Path(path)
    rec = json.loads(p.read_text(encoding="utf-8"))
    _READ.append(describe(p, rec) | {"query": {"path": _relative(p)}})
    return {**rec, "file": p.name, "path": str(p)}


def provenance() -> list[dict[str, Any]]:
    """The provenance rows of the records read so far (each file once, in order)."""
    seen, rows = set(), []
    for row in _READ:
        if row["file"] not in seen:
            seen.add(row["file"])
            rows.append(row)
    return rows


def manifest(rows: Iterable[Mapping[str, Any]]) -> str:
    """One line naming every record read and the query that found it (``tests/test_provenance.py``
    re-runs each query against ``results/`` and fails when it now finds another, newer record)."""
    return "records read: " + json.dumps(
        [{"file": r["file"], **dict(r.get("query") or {})} for r in rows], sort_keys=True
    )


def table(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The provenance rows as a chapter shows them (the query left out)."""
    return [{k: v for k, v in r.items() if k != "query"} for r in rows]


def machines_note(rows: Iterable[Mapping[str, Any]]) -> str:
    """One sentence: all the records come from one machine identity, or which identities there are
    (a record without a flags digest counts as its own, unknown identity)."""
    rows = list(rows)
    ids = sorted({(r["machine"], r["machine_id"]) for r in rows})
    if len(ids) == 1 and ids[0][1] != "not recorded":
        return f"All {len(rows)} records come from one machine identity ({ids[0][0]}, CPU flags {ids[0][1]})."
    parts = []
    for name, mid in ids:
        files = [r["file"] for r in rows if (r["machine"], r["machine_id"]) == (name, mid)]
        flags = f"flags {mid}" if mid != "not recorded" else "flags not recorded"
        parts.append(f"{name} ({flags}): {', '.join(files)}")
    return (
        f"These records come from {len(ids)} machine identities, so numbers from different groups are not "
        "measured on one machine: " + "; ".join(parts) + "."
    )


#: Chapters that read records through their own, older readers, not :func:`newest` (no manifest):
#: Part IV (:func:`specdec.analysis.realrun.main_record`, newest of the current format by its own rule).
OWN_READERS: dict[str, str] = {"real-decoding": "specdec.analysis.realrun.main_record"}


def chapter_manifests(notebooks: str | Path) -> dict[str, tuple[list[dict[str, Any]], str]]:
    """Per executed chapter (``notebooks/*.ipynb``) that prints :func:`manifest`: the records it read
    (file and query) and the machine note printed under them, from its stored outputs."""
    out: dict[str, tuple[list[dict[str, Any]], str]] = {}
    for nb in sorted(Path(notebooks).glob("*.ipynb")):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code" or "records.manifest(" not in "".join(cell["source"]):
                continue
            text = "".join(
                "".join(o.get("text", ""))
                for o in cell.get("outputs", [])
                if o.get("output_type") == "stream"
            )
            lines = text.splitlines()
            i = next(i for i, line in enumerate(lines) if line.startswith("records read: "))
            out[nb.stem] = (json.loads(lines[i].removeprefix("records read: ")), lines[i + 1])
    return out


def index_text(results: str | Path, notebooks: str | Path) -> str:
    """``results/INDEX.md``: for each chapter, the records it reads (from its stored manifest) with their
    kind and the query that found them; then every record under ``results`` that no chapter's manifest
    names, by folder (``history/`` holds superseded records, read only by path)."""
    results = Path(results)
    chapters = chapter_manifests(notebooks)
    lines = [
        "# What each chapter reads",
        "",
        "Generated by `python -m specdec.analysis.records --index` from the executed chapters'",
        "provenance cells (`tests/test_records_index.py` fails when it is stale). A chapter reads the",
        "newest record of its kind (`specdec.analysis.records.newest`); `history/` holds superseded",
        "records, which `newest` never returns: a chapter reads one only by its path, on purpose (the",
        "`found by` column says `path=`).",
        "",
        "| chapter | record | kind | found by |",
        "|---|---|---|---|",
    ]
    named = set()
    for chapter, (entries, _) in sorted(chapters.items()):
        for e in entries:
            named.add(e["file"])
            query = ", ".join(f"{k}={v}" for k, v in sorted(e.items()) if k not in ("file", "kind"))
            lines.append(
                f"| {chapter} | `{e['file']}` | {e.get('kind', '')} | {query or 'newest of its kind'} |"
            )
    for chapter, reader in sorted(OWN_READERS.items()):
        lines.append(f"| {chapter} | (its own reader: `{reader}`) | | |")
    lines += ["", "## Records no chapter's manifest names", ""]
    unread: dict[str, list[str]] = {}
    for p in _candidates(results):
        rel = p.relative_to(results).as_posix()
        if rel not in named:
            unread.setdefault(p.parent.relative_to(results).as_posix(), []).append(p.name)
    for folder, files in sorted(unread.items()):
        lines.append(f"* `{folder}/`: " + ", ".join(f"`{f}`" for f in files))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``--index``: write ``results/INDEX.md`` (:func:`index_text`)."""
    import argparse

    from specdec.theory.recordio import write_text_atomic

    ap = argparse.ArgumentParser(description="the book's records: which chapter reads which")
    ap.add_argument("--index", action="store_true", help="write results/INDEX.md from the executed chapters")
    args = ap.parse_args(argv)
    if not args.index:
        ap.error("nothing to do: pass --index")
    root = Path(__file__).resolve().parents[2]
    write_text_atomic(root / "results" / "INDEX.md", index_text(root / "results", root / "notebooks"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
