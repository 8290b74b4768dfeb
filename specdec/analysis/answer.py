"""Part VI's reading of the campaign record: "faster than what?", from one interleaved run.

The campaign (:mod:`specdec.analysis.campaign`, ``benchmarks/campaign.py``) times every plain
decoder and every speculative configuration on the same prompts; its cross-fit analysis
(:mod:`specdec.analysis.crossfit`) chooses gamma (and, for the headline, the method and engine
too) on one half of the prompts and reports on the other. These functions only read that stored
analysis and shape it for the answer chapter and the landing page:

* :func:`engine_label` -- what an engine is, in words (engine, mode or format, threads);
* :func:`stratum` -- the analysis of one temperature and task ("all": the tasks pooled);
* :func:`faster_than_what` -- one row per plain decoder and per speculative family: absolute
  tokens/s, the speedup over the same engine's plain decoding and over the fastest plain
  decoder, each with its 95 % interval and the verdict the interval gives;
* :func:`headline` -- the fastest plain decoder and the blind choice among all speculative
  configurations against it, for one temperature and task;
* :func:`task_verdicts` -- the headline's verdict per task.

Verdicts are the record's (from intervals only: faster, slower, not distinguishable).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["engine_label", "faster_than_what", "headline", "stratum", "task_verdicts"]


def engine_label(record: Mapping[str, Any], engine: str) -> str:
    """E.g. "lean q4q8, 1 thread", "llama.cpp Q4_0 (requantized), 2 threads", "transformers float32"."""
    info = record["engines"][engine]
    threads = info.get("threads")
    t = f"{threads} thread{'s' if threads != 1 else ''}"
    kind = info.get("engine")
    if kind == "lean":
        return f"lean {info.get('mode')}, {t}"
    if kind == "llama.cpp":
        fmt = "Q4_0 (requantized)" if "Q4_0" in str(info.get("format", "")) else str(info.get("gguf", ""))
        return f"llama.cpp {fmt}, {t}"
    if kind == "transformers":
        return f"transformers {info.get('mode')}, {t}"
    return f"{engine}, {t}"


def stratum(record: Mapping[str, Any], temperature: float, task: str = "all") -> dict[str, Any]:
    """The cross-fit analysis of one (temperature, task) of a complete campaign record."""
    if not record.get("complete") or "crossfit" not in record:
        raise ValueError("the campaign record is not complete: it has no cross-fit analysis yet")
    for s in record["crossfit"]["strata"]:
        if float(s["temperature"]) == float(temperature) and s["task"] == task:
            return s
    raise ValueError(f"no stratum at temperature {temperature} and task {task!r} in the record")


def _config_engine(record: Mapping[str, Any], config: str) -> str:
    return next(c["engine"] for c in record["configs"] if c["id"] == config)


def _chosen(halves: Mapping[str, str]) -> str:
    """The configurations chosen on the two halves, once if they agree."""
    a, b = halves["0"], halves["1"]
    return a if a == b else f"{a} (half 0) / {b} (half 1)"


def _gammas(record: Mapping[str, Any], halves: Mapping[str, str]) -> str:
    gamma = {c["id"]: c["gamma"] for c in record["configs"]}
    vals = [gamma[halves[h]] for h in ("0", "1")]
    return vals[0] if vals[0] == vals[1] else f"{vals[0]} / {vals[1]}"


def faster_than_what(
    record: Mapping[str, Any], temperature: float, task: str = "all"
) -> list[dict[str, Any]]:
    """Rows for the table "faster than what?": every plain decoder, then every speculative family
    (its gamma chosen on the other half), then the blind choice among all speculative configurations.
    Each row: ``what``, ``engine`` (in words), ``gamma``, ``tok_s`` (estimate, low, high), ``vs_own``
    and ``vs_fastest`` (estimate, low, high, verdict); ``vs_own`` is None for plain decoders and
    for the blind choice (whose engine differs by half)."""
    s = stratum(record, temperature, task)

    def triple(d: Mapping[str, Any]) -> tuple[float, float, float]:
        return (float(d["estimate"]), float(d["low"]), float(d["high"]))

    def quad(d: Mapping[str, Any]) -> tuple[float, float, float, str]:
        return (*triple(d), str(d["verdict"]))

    rows = []
    for p in s["plain"]:
        rows.append(
            {
                "what": "plain decoding",
                "config": p["config"],
                "engine": engine_label(record, _config_engine(record, p["config"])),
                "gamma": "",
                "tok_s": triple(p["tok_s"]),
                "vs_own": None,
                "vs_fastest": quad(p["vs_fastest_plain"]),
            }
        )
    for f in s["families"]:
        method = f["family"].split("/", 1)[1]
        rows.append(
            {
                "what": method,
                "config": f["family"],
                "engine": engine_label(record, f["engine"]),
                "gamma": _gammas(record, f["chosen_on_half"]),
                "tok_s": triple(f["tok_s"]),
                "vs_own": quad(f["vs_same_plain"]),
                "vs_fastest": quad(f["vs_fastest_plain"]),
            }
        )
    a = s.get("any_speculative")
    if a is not None:
        rows.append(
            {
                "what": "any speculative configuration, chosen blind",
                "config": _chosen(a["chosen_on_half"]),
                "engine": "as chosen",
                "gamma": _gammas(record, a["chosen_on_half"]),
                "tok_s": triple(a["tok_s"]),
                "vs_own": None,
                "vs_fastest": quad(a["vs_fastest_plain"]),
            }
        )
    return rows


def headline(record: Mapping[str, Any], temperature: float, task: str = "all") -> dict[str, Any]:
    """The fastest plain decoder (chosen on each half; its engine in words and its tokens/s with
    interval) and the blind speculative choice against it: its configurations, tokens/s, speedup over
    the fastest plain decoder with interval and verdict; plus how many families beat their own
    engine's plain decoding and how many beat the fastest plain decoder, by their intervals."""
    s = stratum(record, temperature, task)
    fastest = s["fastest_plain_chosen_on_half"]
    fastest_engines = sorted({engine_label(record, _config_engine(record, c)) for c in fastest.values()})
    a = s["any_speculative"]
    fams = s["families"]
    return {
        "temperature": float(temperature),
        "task": task,
        "prompts": len(s["prompts"]),
        "fastest_plain": " / ".join(fastest_engines),
        "fastest_plain_tok_s": (
            float(s["fastest_plain_tok_s"]["estimate"]),
            float(s["fastest_plain_tok_s"]["low"]),
            float(s["fastest_plain_tok_s"]["high"]),
        ),
        "spec_chosen": _chosen(a["chosen_on_half"]),
        "spec_tok_s": (float(a["tok_s"]["estimate"]), float(a["tok_s"]["low"]), float(a["tok_s"]["high"])),
        "spec_vs_fastest": (
            float(a["vs_fastest_plain"]["estimate"]),
            float(a["vs_fastest_plain"]["low"]),
            float(a["vs_fastest_plain"]["high"]),
        ),
        "spec_verdict": str(a["vs_fastest_plain"]["verdict"]),
        "families": len(fams),
        "families_faster_than_own": sum(f["vs_same_plain"]["verdict"] == "faster" for f in fams),
        "families_faster_than_fastest": sum(f["vs_fastest_plain"]["verdict"] == "faster" for f in fams),
        "families_slower_than_fastest": sum(f["vs_fastest_plain"]["verdict"] == "slower" for f in fams),
    }


def task_verdicts(
    record: Mapping[str, Any], temperature: float, tasks: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Per task: the blind speculative choice against the fastest plain decoder (estimate,
    interval, verdict) and the configurations chosen."""
    if tasks is None:
        tasks = list(dict.fromkeys(p["task"] for p in record["prompts"]))
    out = []
    for task in tasks:
        h = headline(record, temperature, task)
        out.append(
            {
                "task": task,
                "prompts": h["prompts"],
                "fastest plain": h["fastest_plain"],
                "fastest plain tok/s": h["fastest_plain_tok_s"][0],
                "speculative, chosen blind": h["spec_chosen"],
                "tok/s": h["spec_tok_s"][0],
                "x fastest plain": h["spec_vs_fastest"][0],
                "low": h["spec_vs_fastest"][1],
                "high": h["spec_vs_fastest"][2],
                "verdict": h["spec_verdict"],
            }
        )
    return out
