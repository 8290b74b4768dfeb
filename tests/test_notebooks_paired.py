"""Each executed notebook matches its MyST source cell for cell, and carries outputs."""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks" / "src").glob("*.md"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_every_source_has_a_notebook_and_back():
    assert SOURCES, "no notebook sources found"
    assert {p.stem for p in SOURCES} == {p.stem for p in NOTEBOOKS}


def test_every_notebook_is_in_the_toc():
    toc = (ROOT / "_toc.yml").read_text()
    for nb in NOTEBOOKS:
        assert f"notebooks/{nb.stem}" in toc, f"{nb.name} is not listed in _toc.yml"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_matches_source(source: Path):
    text = jupytext.read(source)
    executed = nbformat.read(ROOT / "notebooks" / f"{source.stem}.ipynb", as_version=4)
    want = [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", []))) for c in text.cells]
    have = [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", []))) for c in executed.cells]
    assert have == want, f"{source.name} and its .ipynb differ: run `make notebooks`"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_executed_in_order(notebook: Path):
    nb = nbformat.read(notebook, as_version=4)
    counts = [c.execution_count for c in nb.cells if c.cell_type == "code"]
    assert counts, f"{notebook.name} has no code"
    assert None not in counts, f"{notebook.name} has unexecuted cells: run `make notebooks`"
    assert counts == sorted(counts) and counts[0] == 1, f"{notebook.name} was not run top to bottom"
