"""The one NaN rule and the one atomic writer of every record file the package writes (JSON and CSV).

* :func:`jsonable` -- a value as plain JSON values, NaN and infinity -> ``None`` (THE NaN rule);
* :func:`write_record` -- THE JSON writer: :func:`jsonable`, strict JSON, written atomically;
* :func:`csv_cell` -- the same rule for a CSV cell: NaN and infinity -> the empty cell;
* :func:`write_text_atomic` -- any text file, written atomically (the CSV writers use it);
* :func:`read_json` -- a JSON file read back, its errors naming the file (a drafter's card, a cache).

It lives in the lowest layer (plain Python and numpy) so that every layer writes through it: the
distilled drafts' cards and the distillation data's meta (``train``) as well as the measurement
records (``measure`` and above).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DamagedFileError", "csv_cell", "jsonable", "read_json", "write_record", "write_text_atomic"]


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values, with THE NaN rule of every record the package writes.

    The rule: NaN and infinity become ``None`` (``null`` in the file): a quantity that is
    undefined (alpha when nothing was drafted) or was not measured reads null, never a number
    and never the non-standard ``NaN`` token that strict JSON readers refuse. Readers map null
    back to NaN where they compute. Besides: numpy scalars and arrays become Python numbers
    and lists, tuples lists, dict keys strings, paths POSIX strings, dataclasses their
    ``to_dict()`` (or fields); anything else is refused (TypeError).
    """
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, str | bool | int):
        return obj
    if isinstance(obj, Path):
        return obj.as_posix()
    if is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(obj.to_dict() if hasattr(obj, "to_dict") else asdict(obj))
    raise TypeError(f"cannot write a {type(obj).__name__} to JSON")


def csv_cell(value: Any) -> Any:
    """THE NaN rule in a CSV cell: NaN and infinity (Python or numpy floats) become the empty cell, as
    they become ``null`` in a JSON record (readers such as pandas read an empty cell back as NaN);
    any other value is returned unchanged."""
    if isinstance(value, float | np.floating) and not math.isfinite(float(value)):
        return ""
    return value


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically: a temporary file in the same folder, then
    :func:`os.replace` (a crash or a timeout never leaves half a file, and a reader sees the old file
    or the new one). Creates the folder."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(text.encode("utf-8"))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def write_record(path: str | Path, record: Any, *, indent: int | None = 2, sort_keys: bool = True) -> Path:
    """THE record writer: ``record`` through :func:`jsonable` (NaN and infinity -> null), as JSON, written
    atomically (:func:`write_text_atomic`), with a final newline. Creates the folder."""
    text = json.dumps(jsonable(record), indent=indent, sort_keys=sort_keys, allow_nan=False)
    return write_text_atomic(path, text + "\n")


class DamagedFileError(ValueError):
    """A file that exists but cannot be read as what it should be (JSON, safetensors): the message names
    the file and what is wrong with it."""


def read_json(path: str | Path, *, what: str = "file", kind: type | None = None) -> Any:
    """The JSON value in ``path``; a file that is not UTF-8 JSON (or not of type ``kind``, e.g. ``dict``)
    raises :class:`DamagedFileError` ``"<what> <path> is damaged: <why>"`` (line and column for a syntax
    error); a missing or unreadable file raises the OSError, whose message names the file too."""
    p = Path(path)
    text = p.read_bytes()
    try:
        value = json.loads(text.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DamagedFileError(f"{what} {p} is damaged: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DamagedFileError(
            f"{what} {p} is damaged: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    if kind is not None and not isinstance(value, kind):
        raise DamagedFileError(f"{what} {p} is damaged: a JSON {type(value).__name__}, not a {kind.__name__}")
    return value
