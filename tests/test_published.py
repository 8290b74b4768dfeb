"""The published values of Leviathan et al. (2023) load exactly as printed, and all parse."""

from __future__ import annotations

import csv

import pytest

from specdec.paper import published
from specdec.paper.audit import parse_printed

ROW_COUNTS = {
    "table1": 6,
    "table2": 12,
    "table3": 16,
    "table4": 12,
    "table5": 4,
    "appendix_a5": 8,
    "statements": 10,
}

# Columns that hold printed numbers (the others are labels). Empty cells mark values the
# paper does not print and are allowed only where listed in EMPTY_ALLOWED.
NUMERIC = {
    "table1": ["alpha", "gamma", "operations", "speed"],
    "table2": ["temp", "gamma", "alpha", "speed"],
    "table3": ["temp_0", "temp_1"],
    "table4": ["temp", "gamma", "alpha", "c", "EXP", "EMP"],
    "table5": ["l_1", "l_0.5", "l_0.3", "l_0.1"],
    "appendix_a5": ["lenience", "alpha", "c", "gamma", "speedup"],
    "statements": ["value"],
}
EMPTY_ALLOWED = {("appendix_a5", "alpha"), ("appendix_a5", "gamma"), ("appendix_a5", "M_q")}


def test_every_table_has_its_file_and_nothing_else():
    files = {p.stem for p in published.DATA_DIR.glob("*.csv")}
    assert files == set(published.TABLES) == set(ROW_COUNTS)
    assert (published.DATA_DIR / "SOURCE.md").exists()


def test_source_note_cites_the_paper():
    text = (published.DATA_DIR / "SOURCE.md").read_text(encoding="utf-8")
    for needle in ["Leviathan", "Kalman", "Matias", "ICML 2023", "arXiv:2211.17192 v2"]:
        assert needle in text
    for name in published.TABLES:
        assert f"`{name}.csv`" in text, f"SOURCE.md does not describe {name}.csv"


@pytest.mark.parametrize("name", sorted(ROW_COUNTS))
def test_row_counts(name):
    assert len(published.load_table(name)) == ROW_COUNTS[name]


@pytest.mark.parametrize("name", sorted(ROW_COUNTS))
def test_loading_is_exact(name):
    """load_table returns the raw cells of the file: every row, every column, every character."""
    path = published.DATA_DIR / f"{name}.csv"
    raw = list(csv.reader(path.read_text(encoding="utf-8").splitlines()))
    rows = published.load_table(name)
    assert published.columns(name) == raw[0]
    assert [list(r) for r in rows] == [raw[0]] * len(rows)
    assert [list(r.values()) for r in rows] == raw[1:]
    for row in rows:
        assert all(isinstance(v, str) for v in row.values())


@pytest.mark.parametrize("name", sorted(ROW_COUNTS))
def test_every_printed_value_parses(name):
    rows = published.load_table(name)
    for row in rows:
        for key in row:
            cell = row[key]
            if cell == "":
                assert (name, key) in EMPTY_ALLOWED, f"{name}: empty {key}"
                continue
            if key in NUMERIC[name]:
                # Checked against an independent reading of the printed string.
                digits = cell.strip().lstrip("~≈").rstrip("Xx×%").strip()
                decimals = len(digits.split(".")[1]) if "." in digits else 0
                assert published.value(cell) == float(digits), f"{name}.{key}: {cell!r}"
                assert parse_printed(cell)[1] == pytest.approx(0.5 * 10.0**-decimals)
            assert cell == cell.strip(), f"{name}.{key} has stray whitespace: {cell!r}"


def test_parse_printed_known_values():
    assert parse_printed("1.53X") == (1.53, pytest.approx(0.005))
    assert parse_printed("0.8") == (0.8, pytest.approx(0.05))
    assert parse_printed("5X") == (5.0, pytest.approx(0.5))
    assert parse_printed("0.90")[1] == pytest.approx(0.005)


def test_printed_precision_is_kept():
    table1 = published.load_table("table1")
    assert table1[0] == {"alpha": "0.6", "gamma": "2", "operations": "1.53X", "speed": "1.96X"}
    assert table1[-1]["operations"] == "1.60X"  # the trailing zero is printed
    table5 = {r["M_q"]: r for r in published.load_table("table5")}
    assert table5["T5-base (250M)"]["l_0.5"] == "0.8"
    assert table5["T5-base (250M)"]["l_0.1"] == "0.90"
    assert parse_printed(table5["T5-base (250M)"]["l_0.1"])[1] == pytest.approx(0.005)
    assert published.statement("sec3_6_bigram_alpha") == "~0.2"


def test_table2_and_table4_share_their_rows():
    """Table 4 repeats Table 2's rows; EMP is Table 2's measured speed."""
    t2, t4 = published.load_table("table2"), published.load_table("table4")
    keys = ["task", "M_q", "temp", "gamma", "alpha"]
    assert [[r[k] for k in keys] for r in t2] == [[r[k] for k in keys] for r in t4]
    assert [published.value(r["speed"]) for r in t2] == [published.value(r["EMP"]) for r in t4]


def test_table3_and_table5_agree_on_the_lossless_alphas():
    """Table 5's l = 1 column is Table 3's T5-XXL EnDe alpha at temperature 1."""
    t3 = {(r["M_p"], r["M_q"]): r["temp_1"] for r in published.load_table("table3")}
    t5 = {r["M_q"].split(" (")[0]: r["l_1"] for r in published.load_table("table5")}
    for draft, alpha in t5.items():
        assert published.value(t3["T5-XXL (EnDe)", draft]) == published.value(alpha)


def test_numbers_converts_named_columns():
    row = published.load_table("table4")[0]
    assert published.numbers(row, ["alpha", "c", "EXP"]) == {"alpha": 0.75, "c": 0.02, "EXP": 3.2}


def test_bad_names_raise():
    with pytest.raises(ValueError, match="name must be one of"):
        published.load_table("table6")
    with pytest.raises(ValueError, match="name must be one of"):
        published.columns("../pyproject")
    with pytest.raises(ValueError, match="keys must name columns"):
        published.numbers({"alpha": "0.6"}, ["gamma"])
    with pytest.raises(ValueError, match="key must be one of"):
        published.statement("nope")
    with pytest.raises(ValueError):
        published.value("")
