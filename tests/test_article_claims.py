"""The claims ledger's data and helpers in specdec.paper.article: claims, the article's tables, the
printed-value parser, the comparison with the verdict rule, and the article's D4 model."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

import specdec.paper.article as article
from specdec.paper.article import (
    ARTICLE_TABLES,
    CHECK_KINDS,
    Comparison,
    article_ops_factor,
    compare_printed,
    load_article_claims,
    load_article_table,
    printed_values,
)
from specdec.paper.audit import AGREES, DIFFERS, parse_printed
from specdec.theory.speedup import ops_factor

SEED = Path("/work/shared/seed/article-zh.txt")
SECTIONS = ["引言", "一", "二", "三", "四", "五", "六", "七", "八", "九", "十", "来源", "D"]
needs_seed = pytest.mark.skipif(not SEED.exists(), reason="the source article is not on this machine")


# --------------------------------------------------------------------------- claims
def test_claims_are_well_formed():
    claims = load_article_claims()
    assert len(claims) > 100
    assert len({c.id for c in claims}) == len(claims)
    assert {c.check_kind for c in claims} <= set(CHECK_KINDS)
    # sections appear in the article's order, each in one block
    order = [c.section for c in claims]
    blocks = [s for i, s in enumerate(order) if i == 0 or order[i - 1] != s]
    assert blocks == SECTIONS
    for c in claims:
        assert c.claim_en.strip() and c.claim_zh.strip(), c.id
        assert (c.check_kind in ("none", "target")) == bool(c.reason.strip()), c.id
        for values in printed_values(c.printed).values():
            for v in values:
                parse_printed(v)  # every printed value is a decimal number as printed


def test_claims_cover_the_articles_own_derivations():
    ids = {c.id for c in load_article_claims()}
    assert {"D1", "D2", "D3", "D4a", "D4b", "D5", "D6"} <= ids


@needs_seed
def test_claims_quote_the_article_verbatim():
    text = SEED.read_text(encoding="utf-8")
    for c in load_article_claims():
        assert c.claim_zh in text, c.id
        for values in printed_values(c.printed).values():
            for v in values:
                assert v.rstrip("%") in text, (c.id, v)


def _fake_claims(monkeypatch, body: str) -> None:
    header = "id,section,claim_en,claim_zh,printed,check_kind,cites,reason\n"
    real = article._data_lines

    def fake(name: str) -> list[str]:
        if name == article.CLAIMS_FILE:
            return (header + body).splitlines()
        return real(name)

    monkeypatch.setattr(article, "_data_lines", fake)


@pytest.mark.parametrize(
    "body, match",
    [
        ("a,一,x,y,,compute,,\na,一,x,y,,compute,,\n", "unique"),
        ("a,一,x,y,,guess,,\n", "check_kind"),
        ("a,一,x,y,,none,,\n", "reason"),
        ("a,一,x,y,,target,,\n", "reason"),
        ("a,一,x,y,,compute,,why\n", "reason"),
    ],
)
def test_bad_claims_files_are_refused(monkeypatch, body, match):
    _fake_claims(monkeypatch, body)
    with pytest.raises(ValueError, match=match):
        load_article_claims()


# --------------------------------------------------------------------------- tables
def test_tables_load_as_printed():
    speed = load_article_table("speedup_table")
    assert len(speed) == 6
    assert speed[1]["alpha"] == "0.80"  # trailing zero kept
    assert speed[-1]["c"] == "≈0" and speed[-1]["paper_emp"] == "—"
    assert [r["operations"] for r in load_article_table("ops_table")][0] == "1.53×"
    assert len(load_article_table("alpha_table")) == 10
    assert [r["speedup"] for r in load_article_table("lenience_table")] == ["2.5", "3.1", "3.6", "5.0"]


def test_unknown_table_is_refused():
    with pytest.raises(ValueError, match="name must be one of"):
        load_article_table("table9")


@needs_seed
@pytest.mark.parametrize("name", ARTICLE_TABLES)
def test_tables_are_the_articles(name):
    lines = {line.strip() for line in SEED.read_text(encoding="utf-8").splitlines()}
    columns = {
        "speedup_table": "task draft temp gamma alpha c paper_exp recomputed paper_emp".split(),
        "alpha_table": ["target", "draft", "temp", "alpha"],
        "lenience_table": ["beta_cell", "amplification_cell", "speedup"],
        "ops_table": ["alpha", "gamma", "operations", "speed"],
        "sources_table": ["source", "alpha", "c", "training", "memory", "note"],
    }[name]
    for row in load_article_table(name):
        assert "\t".join(row[c] for c in columns) in lines, row


# --------------------------------------------------------------------------- printed values
def test_printed_values_parse():
    assert printed_values("") == {}
    assert printed_values("alpha=0.8; gamma=4|5; et=3.36|3.69;") == {
        "alpha": ["0.8"],
        "gamma": ["4", "5"],
        "et": ["3.36", "3.69"],
    }
    assert list(printed_values("b=1; a=2")) == ["b", "a"]


@pytest.mark.parametrize("text", ["alpha", "alpha=", "=0.5", "a=1; a=2"])
def test_printed_values_refuse_malformed_text(text):
    with pytest.raises(ValueError):
        printed_values(text)


# --------------------------------------------------------------------------- comparisons
def test_compare_printed_applies_the_verdict_rule():
    printed = printed_values("alpha=0.75; speedup=3.16; et=3.36|3.69")
    out = compare_printed(printed, {"speedup": 3.1575, "et": [3.3616, 3.70]})
    assert out == [
        Comparison("speedup", "3.16", 3.1575, AGREES),
        Comparison("et", "3.36", 3.3616, AGREES),
        Comparison("et", "3.69", 3.70, DIFFERS),
    ]
    # inputs (keys absent from `computed`) are not judged
    assert all(c.key != "alpha" for c in out)


def test_compare_printed_refuses_mismatches():
    printed = printed_values("et=3.36|3.69")
    with pytest.raises(ValueError, match="not among the printed keys"):
        compare_printed(printed, {"speedup": 3.0})
    with pytest.raises(ValueError, match="2 value"):
        compare_printed(printed, {"et": 3.36})


# --------------------------------------------------------------------------- the D4 model
def test_article_ops_model_matches_theorem_3_11_only_on_r_equal_c_hat_plus_one():
    alpha = np.linspace(0.05, 0.95, 10)[:, None]
    gamma = np.arange(1, 12)[None, :]
    for c_hat in (0.0, 0.05, 0.5, 2.0):
        same = article_ops_factor(alpha, gamma, c_hat + 1)
        np.testing.assert_allclose(same, ops_factor(alpha, gamma, c_hat))
        # read with r = c_hat, its own definition, the article's model is lower by gamma / E[T]
        assert np.all(article_ops_factor(alpha, gamma, c_hat) < ops_factor(alpha, gamma, c_hat))
    # Table 1 (c_hat = 0) at r = 1: the article's numbers
    assert round(float(article_ops_factor(0.6, 2, 1.0)), 2) == 1.53
    # at gamma = 0 both are 1 whatever r is
    assert float(article_ops_factor(0.5, 0, 3.0)) == 1.0


def test_article_ops_model_rejects_bad_input():
    with pytest.raises(ValueError, match="r must be"):
        article_ops_factor(0.5, 2, -0.1)
    with pytest.raises(ValueError, match="r must be"):
        article_ops_factor(0.5, 2, float("nan"))
    with pytest.raises(ValueError, match="alpha"):
        article_ops_factor(1.5, 2, 1.0)
    with pytest.raises(ValueError, match="gamma"):
        article_ops_factor(0.5, 2.5, 1.0)


# --------------------------------------------------------------------------- the exported ledger
def test_exported_ledger_lists_every_claim_in_order():
    """results/ledger/claims-ledger.csv (written by the claims-ledger chapter) is not stale."""
    path = Path(__file__).resolve().parents[1] / "results" / "ledger" / "claims-ledger.csv"
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    claims = load_article_claims()
    assert [r["id"] for r in rows] == [c.id for c in claims]
    assert [r["claim_zh"] for r in rows] == [c.claim_zh for c in claims]
    verdicts = {"agrees", "differs", "imprecise", "not checkable here"}
    for r, c in zip(rows, claims, strict=True):
        if c.check_kind == "target":  # judged on the book's target: section 7's verdicts
            assert r["verdict"].startswith(("holds for", "fails for", "undecided for", "not recorded")), c.id
            continue
        assert r["verdict"] in verdicts, c.id
        assert (r["verdict"] == "not checkable here") >= (c.check_kind == "none"), c.id
        if r["verdict"] in ("differs", "imprecise"):
            assert r["explanation"].strip(), c.id
