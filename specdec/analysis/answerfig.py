"""The answer as figures: the headline and every plain decoder and speculative family as a speedup over
the fastest plain decoder, pooled and per task (the answer chapter and the landing page lead with it), and
the headline prompt by prompt.

:func:`answer_rows` reads a complete campaign-v2 record's analyses (:mod:`specdec.experiments.campaign2`);
:func:`answer_figure` draws them with matplotlib: one panel per temperature; the first row is the
headline itself (every speculative configuration as one family, method and setting chosen on the other
half of the prompts: the choice made without hindsight) with its 95 % interval; then the plain decoders
and the families, each group by pooled speedup, each with the Bonferroni-simultaneous interval of its
*paired* ratio to the fastest plain decoder (the interval its verdict rests on), each task's estimate as a
small marker, and 1 (the fastest plain decoder, cross-fitted) as a vertical line; a row is green, red or
grey as its interval says faster, slower or not distinguishable. :func:`prompt_figure` draws the
headline's per-prompt ratios. :func:`gap_figure` draws issue 44's split of each configuration's speedup
(:func:`specdec.analysis.methodgap.split`): measured, at its measured costs, at the machine's floor, and
at its anchor's published acceptance. Every value is the record's (or the split's, a function of the
record and the anchors' file); nothing is computed here but the layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specdec.analysis.answer import label, prompt_ratios, stratum

__all__ = [
    "GAP_MARKERS",
    "HEADLINE",
    "TASK_MARKERS",
    "VERDICT_COLORS",
    "answer_figure",
    "answer_rows",
    "gap_figure",
    "prompt_figure",
]

#: Marker and colour of each task's estimate.
TASK_MARKERS = {
    "summarize": ("v", "#1f77b4"),
    "extract": ("^", "#2ca02c"),
    "code": ("s", "#9467bd"),
    "chat": ("D", "#d62728"),
}

#: Colour of a row by the verdict of its ratio's interval against the fastest plain decoder.
VERDICT_COLORS = {"faster": "#0b6e4f", "slower": "#a23b2a", "not distinguishable": "#777777"}

#: The key of the headline's row.
HEADLINE = "any speculative, chosen blind"


def _stratum(analysis: Mapping[str, Any], temp: float, task: str) -> Mapping[str, Any] | None:
    for s in analysis["strata"]:
        if float(s["temperature"]) == temp and s["task"] == task:
            return s
    return None


def answer_rows(record: Mapping[str, Any], temperature: float) -> list[dict[str, Any]]:
    """The headline's row, then one row per plain decoder and per family at ``temperature``: ``key``,
    ``label``, ``kind`` ("headline", "plain" or "family"), pooled tokens/s (``tok_s``), ``x`` (the speedup
    over the fastest plain decoder, estimate) with ``low``, ``high`` and ``verdict`` (the headline's 95 %
    interval; for the others the Bonferroni-simultaneous interval of the paired ratio), ``tasks`` (task ->
    the ratio's estimate in that task), ``fastest`` (the plain decoder chosen as fastest on both halves,
    pooled) and ``fastest_tok_s`` (the fastest plain decoder's cross-fitted tokens/s)."""
    median, sim = record["analyses"]["median"], record["analyses"]["simultaneous"]
    pooled, pooled_sim = _stratum(median, temperature, "all"), _stratum(sim, temperature, "all")
    if pooled is None or pooled_sim is None:
        raise ValueError(f"the record has no pooled stratum at temperature {temperature}")
    tasks = [t for t in TASK_MARKERS if _stratum(median, temperature, t) is not None]
    chosen = set(pooled["fastest_plain_chosen_on_half"].values())
    fastest_tok_s = float(pooled["fastest_plain_tok_s"]["estimate"])
    head = pooled["any_speculative"]
    rows = [
        {
            "key": HEADLINE,
            "label": "speculation, chosen blind (the headline)",
            "kind": "headline",
            "tok_s": float(head["tok_s"]["estimate"]),
            "x": float(head["vs_fastest_plain"]["estimate"]),
            "low": float(head["vs_fastest_plain"]["low"]),
            "high": float(head["vs_fastest_plain"]["high"]),
            "verdict": head["vs_fastest_plain"]["verdict"],
            "fastest": False,
            "fastest_tok_s": fastest_tok_s,
            "tasks": {
                t: float(_stratum(median, temperature, t)["any_speculative"]["vs_fastest_plain"]["estimate"])
                for t in tasks
            },
        }
    ]
    for kind, key_of in (("plain", "config"), ("families", "family")):
        sim_of = {e[key_of]: e for e in pooled_sim[kind]}
        for e in pooled[kind]:
            key = e[key_of]
            per_task = {}
            for t in tasks:
                match = [x for x in _stratum(median, temperature, t)[kind] if x[key_of] == key]
                if match:
                    per_task[t] = float(match[0]["vs_fastest_plain"]["estimate"])
            ratio = sim_of[key]["vs_fastest_plain"]
            rows.append(
                {
                    "key": key,
                    "label": label(record, key),
                    "kind": "plain" if kind == "plain" else "family",
                    "tok_s": float(e["tok_s"]["estimate"]),
                    "x": float(e["vs_fastest_plain"]["estimate"]),
                    "low": float(ratio["low"]),
                    "high": float(ratio["high"]),
                    "verdict": ratio.get("verdict"),
                    "tasks": per_task,
                    "fastest": kind == "plain" and chosen == {key},
                    "fastest_tok_s": fastest_tok_s,
                }
            )
    return rows


def answer_figure(record: Mapping[str, Any], *, temperatures: tuple[float, ...] = (0.0, 1.0)) -> Any:
    """The figure (matplotlib): see the module docstring. Sized for a page's width (10 inches, 10-point
    labels), so that the labels stay legible when the page shrinks it."""
    import matplotlib.pyplot as plt

    per_temp = {t: answer_rows(record, t) for t in temperatures}
    # one row order for both panels: the headline, plain decoders, then families, each by speedup at the
    # first temperature
    first = per_temp[temperatures[0]]
    rank = {"headline": 0, "plain": 1, "family": 2}
    order = sorted(first, key=lambda r: (rank[r["kind"]], -r["x"]))
    keys = [r["key"] for r in order]
    fig, axes = plt.subplots(1, len(temperatures), figsize=(8.5, 0.3 * len(keys) + 1.9), sharey=True, dpi=120)
    axes = [axes] if len(temperatures) == 1 else list(axes)
    lo = min(r["low"] for rows in per_temp.values() for r in rows)
    hi = max(r["high"] for rows in per_temp.values() for r in rows)
    lo = min(lo, *(v for rows in per_temp.values() for r in rows for v in r["tasks"].values()))
    for ax, temp in zip(axes, temperatures, strict=True):
        rows = {r["key"]: r for r in per_temp[temp]}
        ax.axvline(1.0, color="black", lw=1.0, ls="--", zorder=0)
        n_plain = sum(rows[k]["kind"] == "plain" for k in keys)
        ax.axhspan(0.5, n_plain + 0.5, color="#f0f0f0", zorder=-1)
        ax.axhspan(-0.5, 0.5, color="#fff4d6", zorder=-1)
        for y, k in enumerate(keys):
            r = rows[k]
            color = VERDICT_COLORS.get(r["verdict"], "#777777")
            big = r["kind"] == "headline"
            ax.errorbar(
                r["x"],
                y,
                xerr=[[r["x"] - r["low"]], [r["high"] - r["x"]]],
                fmt="D" if big else "o",
                ms=8 if big else 5.5,
                color=color,
                lw=2.6 if big else 1.6,
                capsize=3,
                zorder=3,
            )
            for t, v in r["tasks"].items():
                marker, c = TASK_MARKERS[t]
                ax.plot(
                    v, y + 0.25, marker, ms=3.5, color=c, alpha=0.85, zorder=2, label=t if y == 0 else None
                )
            ax.annotate(
                f"{r['x']:.2f}x",
                (max(r["high"], *r["tasks"].values(), r["x"]), y),
                xytext=(4, -4),
                textcoords="offset points",
                fontsize=9,
                color=color,
                fontweight="bold" if big else "normal",
            )
        ax.set_xscale("log")
        ax.set_xlim(lo * 0.93, hi * 1.18)
        ticks = [v for v in (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0) if lo * 0.93 <= v <= hi * 1.18]
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{v:g}" for v in ticks], fontsize=9)
        ax.minorticks_off()
        ax.set_title(
            f"temperature {temp:g}\n(1 = {next(iter(rows.values()))['fastest_tok_s']:.0f} tokens/s, dashed)",
            fontsize=10,
        )
        ax.grid(axis="x", color="#dddddd", lw=0.6)
    axes[0].set_yticks(range(len(keys)))
    fastest_keys = {r["key"] for r in first if r["fastest"]}
    names = [
        ("plain: " if r["kind"] == "plain" else "")
        + r["label"]
        + (" (fastest)" if r["key"] in fastest_keys else "")
        for r in order
    ]
    axes[0].set_yticklabels(names, fontsize=9.5)
    axes[0].get_yticklabels()[0].set_fontweight("bold")
    axes[0].invert_yaxis()
    handles, labels = axes[0].get_legend_handles_labels()
    fig.supxlabel("speedup over the fastest plain decoder (log scale)", fontsize=10, y=0.07)
    fig.legend(
        handles,
        [f"{t} (task estimate)" for t in labels],
        loc="lower center",
        ncol=4,
        frameon=False,
        fontsize=9.5,
    )
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def prompt_figure(record: Mapping[str, Any], *, temperatures: tuple[float, ...] = (0.0, 1.0)) -> Any:
    """The headline prompt by prompt (matplotlib): per temperature, each prompt's ratio of the blind
    speculative choice's tokens/s to the fastest plain decoder's (both chosen on the prompt's other half:
    :func:`specdec.analysis.answer.prompt_ratios`), sorted, coloured by task, with 1 and the headline (their
    geometric mean) marked."""
    import matplotlib.pyplot as plt
    import numpy as np

    from specdec.theory.intervals import geomean

    fig, axes = plt.subplots(1, len(temperatures), figsize=(10, 3.2), sharey=True, dpi=120)
    axes = [axes] if len(temperatures) == 1 else list(axes)
    for ax, temp in zip(axes, temperatures, strict=True):
        ratios = prompt_ratios(record, temp)
        tasks = [p[0] for p in stratum(record, temp)["prompts"]]
        order = np.argsort(ratios, kind="stable")
        for x, i in enumerate(order):
            marker, c = TASK_MARKERS.get(tasks[i], ("o", "#444444"))
            ax.plot(x, ratios[i], marker, ms=5, color=c, label=tasks[i])
        head = float(geomean(ratios))  # the cross-fit's headline (its out-of-fold ratios), not re-estimated
        ax.axhline(1.0, color="black", lw=1.0, ls="--")
        ax.axhline(head, color="#b8860b", lw=1.4, label=f"headline {head:.2f}x")
        ax.set_yscale("log")
        ax.minorticks_off()
        yt = [0.7, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0]
        ax.set_yticks(yt)
        ax.set_yticklabels([f"{v:g}" for v in yt], fontsize=9)
        ax.set_xlabel("prompts, sorted", fontsize=10)
        ax.set_title(
            f"temperature {temp:g}: {sum(r < 1 for r in ratios)} of {len(ratios)} prompts below 1",
            fontsize=10,
        )
        ax.grid(axis="y", color="#dddddd", lw=0.6)
        handles, labels = ax.get_legend_handles_labels()
        seen = dict(zip(labels, handles, strict=True))
        ax.legend(seen.values(), seen.keys(), fontsize=8, frameon=False, loc="upper left")
    axes[0].set_ylabel("x the fastest plain decoder", fontsize=10)
    fig.tight_layout()
    return fig


#: The split's four speedups: key, legend, marker, colour (:func:`gap_figure`).
GAP_MARKERS = (
    ("measured", "measured (95 % interval)", "o", "#222222"),
    ("at_measured_costs", "at its measured v and c (Theorem 3.8)", "s", "#1f77b4"),
    ("at_floor", "at the machine's floor costs", "^", "#2ca02c"),
    ("anchor_at_floor", "the anchor's published tokens/call, at the floor", "*", "#b8860b"),
)


def gap_figure(
    rows: Sequence[Mapping[str, Any]],
    labels: Mapping[str, str] | None = None,
    *,
    temperatures: tuple[float, ...] = (0.0, 1.0),
) -> Any:
    """Issue 44's split as one figure (matplotlib): per temperature a panel, per speculative configuration
    a row (``rows``: :func:`specdec.analysis.methodgap.split`), each of its four speedups over the same
    engine's plain decoding as a marker (:data:`GAP_MARKERS`; the measured one with its interval), 1 dashed.
    Between the measured marker and the square lies the loop's gap, between the square and the triangle the
    implementation's (engine and drafter), between the triangle and the star the method's acceptance as
    trained here. Rows in one order for every panel: by the floor's speedup at the first temperature;
    ``labels`` maps a configuration id to its row's name (default: the id without its engine)."""
    import matplotlib.pyplot as plt

    by = {(float(r["temperature"]), r["config"]): r for r in rows}
    configs = sorted(
        {r["config"] for r in rows},
        key=lambda c: (-(by.get((temperatures[0], c)) or {"at_floor": 0.0})["at_floor"], c),
    )
    if not configs:
        raise ValueError("gap_figure needs at least one row of methodgap.split")
    names = [(labels or {}).get(c, c.split("/", 1)[-1]) for c in configs]
    values = [
        v
        for r in rows
        for v in (
            r["measured"]["estimate"],
            r["measured"]["low"],
            r["measured"]["high"],
            r["at_measured_costs"],
            r["at_floor"],
            r["anchor_at_floor"],
        )  # fmt: skip
        if v is not None and v > 0
    ]
    lo, hi = min(values) * 0.9, max(values) * 1.12
    fig, axes = plt.subplots(
        1, len(temperatures), figsize=(10, 0.27 * len(configs) + 1.9), sharey=True, dpi=120
    )
    axes = [axes] if len(temperatures) == 1 else list(axes)
    for ax, temp in zip(axes, temperatures, strict=True):
        ax.axvline(1.0, color="black", lw=1.0, ls="--", zorder=0)
        for y, config in enumerate(configs):
            r = by.get((temp, config))
            if r is None:
                continue
            m = r["measured"]
            xs = [m["estimate"], r["at_measured_costs"], r["at_floor"], r["anchor_at_floor"]]
            present = [x for x in xs if x is not None]
            ax.plot([min(present), max(present)], [y, y], color="#cccccc", lw=1.0, zorder=1)
            if m["low"] is not None and m["high"] is not None:
                ax.plot([m["low"], m["high"]], [y, y], color="#222222", lw=1.8, zorder=2)
            for (key, legend, marker, color), x in zip(GAP_MARKERS, xs, strict=True):
                if x is None:
                    continue
                ax.plot(x, y, marker, ms=8 if marker == "*" else 5.5, color=color, zorder=3,
                        label=legend if y == 0 or key == "anchor_at_floor" else None)  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ticks = [v for v in (0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0) if lo <= v <= hi]
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{v:g}" for v in ticks], fontsize=9)
        ax.minorticks_off()
        ax.set_title(f"temperature {temp:g}", fontsize=10)
        ax.set_xlabel("x own plain decoding (log scale)", fontsize=9)
        ax.grid(axis="x", color="#dddddd", lw=0.6)
    axes[0].set_yticks(range(len(configs)))
    axes[0].set_yticklabels(names, fontsize=9)
    axes[0].invert_yaxis()
    seen: dict[str, Any] = {}
    for ax in axes:
        for handle, legend in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(legend, handle)
    fig.legend(seen.values(), seen.keys(), loc="lower center", ncol=2, frameon=False, fontsize=9)
    fig.tight_layout(rect=(0, 1.1 / (0.27 * len(configs) + 1.9), 1, 1))
    return fig
