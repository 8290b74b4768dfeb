"""The answer as a figure: tokens/s of every plain decoder and of each speculative family, per task and
pooled, the fastest plain decoder marked (the answer chapter and the landing page lead with it).

:func:`answer_rows` reads a complete campaign-v2 record's analyses (:mod:`specdec.experiments.campaign2`);
:func:`answer_figure` draws them with matplotlib: one panel per temperature, one row per decoder (plain
decoders, then the families, each group by pooled tokens/s), the pooled estimate as a dot with its 95 %
interval, each task's estimate as a small marker, and the fastest plain decoder's pooled tokens/s
(cross-fitted, as the analysis reports it) as a vertical line; a family's dot is green, red or grey as
the Bonferroni-simultaneous interval of its ratio to the fastest plain decoder says faster, slower or not
distinguishable. Every value is the record's; nothing is computed here but the layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specdec.analysis.answer import label

__all__ = ["TASK_MARKERS", "VERDICT_COLORS", "answer_figure", "answer_rows"]

#: Marker and colour of each task's estimate.
TASK_MARKERS = {
    "summarize": ("v", "#1f77b4"),
    "extract": ("^", "#2ca02c"),
    "code": ("s", "#9467bd"),
    "chat": ("D", "#d62728"),
}

#: Colour of a family's dot by its simultaneous verdict against the fastest plain decoder.
VERDICT_COLORS = {"faster": "#0b6e4f", "slower": "#a23b2a", "not distinguishable": "#777777"}


def _stratum(analysis: Mapping[str, Any], temp: float, task: str) -> Mapping[str, Any] | None:
    for s in analysis["strata"]:
        if float(s["temperature"]) == temp and s["task"] == task:
            return s
    return None


def answer_rows(record: Mapping[str, Any], temperature: float) -> list[dict[str, Any]]:
    """One row per plain decoder and per family at ``temperature``: ``key``, ``label``, ``plain``,
    pooled tokens/s (``tok_s``, ``low``, ``high``: its 95 % interval), ``x`` (over the fastest
    plain decoder, estimate) and ``tasks`` (task -> tokens/s estimate); ``fastest`` marks the plain decoder
    chosen as fastest on both halves (pooled); ``verdict``: the simultaneous verdict of the ratio against
    it; ``fastest_tok_s``: the fastest plain decoder's cross-fitted tokens/s."""
    median, sim = record["analyses"]["median"], record["analyses"]["simultaneous"]
    pooled, pooled_sim = _stratum(median, temperature, "all"), _stratum(sim, temperature, "all")
    if pooled is None or pooled_sim is None:
        raise ValueError(f"the record has no pooled stratum at temperature {temperature}")
    tasks = [t for t in TASK_MARKERS if _stratum(median, temperature, t) is not None]
    chosen = set(pooled["fastest_plain_chosen_on_half"].values())
    rows = []
    for kind, key_of in (("plain", "config"), ("families", "family")):
        sim_of = {e[key_of]: e for e in pooled_sim[kind]}
        for e in pooled[kind]:
            key = e[key_of]
            per_task = {}
            for t in tasks:
                st = _stratum(median, temperature, t)
                match = [x for x in st[kind] if x[key_of] == key]
                if match:
                    per_task[t] = float(match[0]["tok_s"]["estimate"])
            s = e["tok_s"]  # its 95 % interval (the colour says the simultaneous verdict on the ratio)
            verdict = sim_of[key]["vs_fastest_plain"].get("verdict")
            rows.append({
                "key": key, "label": label(record, key), "plain": kind == "plain",
                "tok_s": float(e["tok_s"]["estimate"]), "low": float(s["low"]), "high": float(s["high"]),
                "x": float(e["vs_fastest_plain"]["estimate"]), "tasks": per_task,
                "fastest": kind == "plain" and chosen == {key}, "verdict": verdict,
                "fastest_tok_s": float(pooled["fastest_plain_tok_s"]["estimate"]),
            })  # fmt: skip
    return rows


def answer_figure(record: Mapping[str, Any], *, temperatures: tuple[float, ...] = (0.0, 1.0)) -> Any:
    """The figure (matplotlib): see the module docstring."""
    import matplotlib.pyplot as plt

    per_temp = {t: answer_rows(record, t) for t in temperatures}
    # one row order for both panels: plain decoders, then families, each by tokens/s at the first temperature
    first = per_temp[temperatures[0]]
    order = sorted(first, key=lambda r: (not r["plain"], -r["tok_s"]))
    keys = [r["key"] for r in order]
    fig, axes = plt.subplots(
        1, len(temperatures), figsize=(12.5, 0.36 * len(keys) + 1.9), sharey=True, dpi=150
    )  # 150 dpi: the row labels stay legible when the page shrinks the figure
    axes = [axes] if len(temperatures) == 1 else list(axes)
    for ax, temp in zip(axes, temperatures, strict=True):
        rows = {r["key"]: r for r in per_temp[temp]}
        line = next(iter(rows.values()))["fastest_tok_s"]  # cross-fitted: chosen on the other half
        ax.axvline(line, color="black", lw=1.0, ls="--", zorder=0)
        n_plain = sum(rows[k]["plain"] for k in keys)
        ax.axhspan(-0.5, n_plain - 0.5, color="#f0f0f0", zorder=-1)
        for y, k in enumerate(keys):
            r = rows[k]
            color = "black" if r["plain"] else VERDICT_COLORS.get(r["verdict"], "#777777")
            ax.errorbar(r["tok_s"], y, xerr=[[r["tok_s"] - r["low"]], [r["high"] - r["tok_s"]]], fmt="o",
                        ms=6, color=color, lw=1.6, capsize=2, zorder=3)  # fmt: skip
            for t, v in r["tasks"].items():
                marker, c = TASK_MARKERS[t]
                ax.plot(
                    v, y + 0.22, marker, ms=3.5, color=c, alpha=0.85, zorder=2, label=t if y == 0 else None
                )
            ax.annotate(f"{r['x']:.2f}x", (r["high"], y), xytext=(4, -3), textcoords="offset points",
                        fontsize=7.5, color=color)  # fmt: skip
        ax.set_xscale("log")
        ticks = [v for v in (10, 20, 50, 100, 200, 400) if v >= 0.8 * min(r["low"] for r in rows.values())]
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(v) for v in ticks])
        ax.minorticks_off()
        ax.set_xlabel("tokens/s (decoding, log scale)")
        ax.set_title(
            f"temperature {temp:g}: the fastest plain decoder, {line:.0f} tok/s (dashed)", fontsize=9.5
        )
        ax.grid(axis="x", color="#dddddd", lw=0.6)
    axes[0].set_yticks(range(len(keys)))
    fastest_keys = {r["key"] for r in first if r["fastest"]}
    names = [
        ("plain: " if r["plain"] else "") + r["label"] + (" (fastest)" if r["key"] in fastest_keys else "")
        for r in order
    ]
    axes[0].set_yticklabels(names, fontsize=8.5)
    axes[0].invert_yaxis()
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, [f"{t} (task estimate)" for t in labels], loc="lower center", ncol=4, frameon=False,
               fontsize=8)  # fmt: skip
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig
