"""The "Beyond the paper" chapter's reader: the source article's section 7 comparison table, measured.

The article's section 7 puts six draft sources in one table (typical alpha, cost coefficient c, training,
extra memory, a note; ``specdec/data/article_sources_table.csv``). The second campaign
(:mod:`specdec.experiments.campaign2`) built and timed every one of them on this CPU, in one run, on
frozen prompts, and the third (:mod:`specdec.experiments.campaign3`) again with the drafters trained on
the target's own text. :func:`section7_table` sets each printed row beside what the record measured for the
families that implement it: the setting the cross-fit chose, acceptance at the first depth, tokens per
target call, the draft time per round in target steps, the training time and stored size of the
drafter (its card), and the speedup over the fastest plain decoder at both temperatures with the
Bonferroni-simultaneous interval and verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specdec.analysis.answer import NETWORK_KINDS
from specdec.theory.recordio import read_json

__all__ = ["SOURCES", "card_name", "card_of", "section7_figure", "section7_table"]

#: The article's row (as printed) -> (in English, the campaign's families that implement it; each
#: family's card is :func:`card_name`'s). A family a record did not run (campaign v2 ran no
#: self-trained drafter) gives a row without measurements.
SOURCES: dict[str, tuple[str, tuple[str, ...]]] = {
    "独立草稿模型": ("independent draft model", ("draft:distil-l1", "draft-tree:distil-l1,branch=2")),
    "Medusa（多头 MLP）": ("Medusa (multi-head MLP)", ("medusa:medusa-4",)),
    "EAGLE / EAGLE-2": (
        "EAGLE / EAGLE-2",
        (
            "eagle:eagle-1",
            "eagle:eagle-1,topk=4,depth=5",
            "eagle:eagle-ttt",
            "eagle:eagle-ttt,topk=4,depth=5",
            "eagle:eagle-3m",
            "eagle:eagle-3m,topk=4,depth=5",
        ),  # fmt: skip
    ),
    "MLP 投机头": ("MLP speculator", ("mlp:mlp-4,ranks=1", "mlp:mlp-4", "mlp:mlp-self")),
    "n-gram": ("n-gram (prompt lookup)", ("lookup", "lookup-tree,min_ngram=2", "lookup+heuristic")),
    "后缀解码": ("suffix decoding", ("suffix", "suffix,tree=0")),
    "—": ("not in the article's table", ("early-exit:8", "hybrid:eagle-3m,topk=4,depth=5")),
}


#: The committed drafters' folder (:data:`specdec.train.draftnets.DRAFT_DIR`, named here without
#: importing the training code, which imports torch).
DRAFT_DIR = Path(__file__).resolve().parents[1] / "data" / "drafts"


#: Registry kinds whose drafter is a committed, trained draft with a card: the network kinds
#: (:data:`specdec.analysis.answer.NETWORK_KINDS`) but early exit (the target's own layers) and the
#: hybrid (whose network drafter's card is its own row's).
TRAINED_KINDS = NETWORK_KINDS - {"early-exit", "hybrid"}


def card_name(spec: str) -> str | None:
    """The committed drafter a registry spec runs ("eagle:eagle-3m,topk=4,depth=5" -> "eagle-3m"), or None
    for a drafter that trains nothing (prompt lookup, suffix decoding, early exit) or the hybrid. The spec
    is read by the registry's parser (a policy suffix such as "+heuristic" dropped); a trained kind whose
    card is missing raises FileNotFoundError naming it."""
    from specdec.drafting.registry import parse_spec

    parsed = parse_spec(spec.split("+")[0])
    if parsed.kind not in TRAINED_KINDS:
        return None
    name = str(parsed.argument)
    if not (DRAFT_DIR / name / "card.json").is_file():
        raise FileNotFoundError(f"{spec!r} runs the drafter {name!r}, which has no card in {DRAFT_DIR}")
    return name


def card_of(name: str) -> dict[str, Any]:
    """A committed drafter's card (``specdec/data/drafts/<name>/card.json``)."""
    return read_json(DRAFT_DIR / name / "card.json", what="the drafter's card", kind=dict)


def _stratum(analysis: Mapping[str, Any], temp: float) -> Mapping[str, Any]:
    return next(s for s in analysis["strata"] if float(s["temperature"]) == temp and s["task"] == "all")


def section7_table(record: Mapping[str, Any], printed: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    """One row per (article source, campaign family): the article's printed cells (``printed``: the rows of
    :func:`specdec.paper.article.load_article_table` ``("sources_table")``, passed in: the paper layer
    reads this one, not the other way), and here: the setting
    chosen (the two halves' choices), depth-1 acceptance and tokens per target call at temperature 0 (the
    chosen configuration's repetition-0 Stats, tasks pooled), ``c_round`` (draft seconds per round over a
    plain step) and ``c_call`` (the same per draft call, the article's per-step c; None for a drafter that
    makes no call), training minutes and stored MB (the card; None for drafters that train nothing), and
    ``x_t0`` / ``x_t1``: (estimate, simultaneous low, high, verdict) against the fastest plain decoder."""
    from specdec.analysis.answer import label, setting_words

    by_source = {row["source"]: row for row in printed}
    median, sim = record["analyses"]["median"], record["analyses"]["simultaneous"]
    trees = {(float(r["temperature"]), r["config"]): r for r in record["trees"]["rows"]}
    rows = []
    for source, (english, families) in SOURCES.items():
        art = by_source.get(source, {})
        for spec in families:
            name = card_name(spec)
            card = card_of(name) if name else None
            out: dict[str, Any] = {"source": source, "source_en": english, "family": spec,
                                   "family_en": label(record, f"x/{spec}")}  # fmt: skip
            for k in ("alpha", "c", "training", "memory", "note"):
                out[f"article_{k}"] = art.get(k, "—")
            for temp, key in ((0.0, "x_t0"), (1.0, "x_t1")):
                fam = [f for f in _stratum(sim, temp)["families"] if f["family"].split("/", 1)[1] == spec]
                if not fam:
                    out[key] = None
                    continue
                x = fam[0]["vs_fastest_plain"]
                out[key] = (x["estimate"], x["low"], x["high"], x["verdict"])
            med = [f for f in _stratum(median, 0.0)["families"] if f["family"].split("/", 1)[1] == spec]
            if med:
                chosen = list(dict.fromkeys(med[0]["chosen_on_half"].values()))
                out["chosen"] = " / ".join(setting_words(record, c) for c in chosen)
                t = trees.get((0.0, chosen[0]))
                out["accept_d1"] = t["accept_at_depth"][0] if t and t["accept_at_depth"] else None
                out["tokens_per_call"] = t["tokens_per_call"] if t else None
                out["c_round"] = t["c_round_median"] if t else None
                calls = t["draft_calls_per_round"] if t else None
                out["c_call"] = t["c_round_median"] / calls if t and calls else None  # per draft call
            out["train_minutes"] = card["train_minutes"] if card else None
            out["stored_mb"] = card["bytes"] / 1e6 if card and card.get("bytes") else None
            rows.append(out)
    return rows


def section7_figure(rows: list[dict[str, Any]]) -> Any:
    """Each family of :func:`section7_table` against the fastest plain decoder (the vertical line at 1),
    at temperature 0 (circles) and 1 (squares), with the simultaneous intervals, grouped by the
    article's source; coloured by verdict (:data:`specdec.analysis.answerfig.VERDICT_COLORS`)."""
    import matplotlib.pyplot as plt

    from specdec.analysis.answerfig import VERDICT_COLORS

    shown = [r for r in rows if r["x_t0"] is not None]
    fig, ax = plt.subplots(figsize=(9.5, 0.42 * len(shown) + 1.4), dpi=150)
    for y, r in enumerate(shown):
        for key, dy, marker in (("x_t0", -0.15, "o"), ("x_t1", 0.15, "s")):
            if r[key] is None:
                continue
            est, lo, hi, verdict = r[key]
            ax.errorbar(est, y + dy, xerr=[[est - lo], [hi - est]], fmt=marker, ms=5, lw=1.4, capsize=2,
                        color=VERDICT_COLORS.get(verdict, "#777777"))  # fmt: skip
    ax.axvline(1.0, color="black", lw=1.0, ls="--")
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels([f"{r['family_en']}  [{r['source_en']}]" for r in shown], fontsize=8.5)
    ax.invert_yaxis()
    ax.set_xlabel("tokens/s over the fastest plain decoder (circles: temperature 0; squares: 1)")
    ax.grid(axis="x", color="#dddddd", lw=0.6)
    fig.tight_layout()
    return fig
