"""The book builds with warnings as errors, and its pages show glued values."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_book_builds_strictly(tmp_path: Path):
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb if jb.exists() else shutil.which("jupyter-book")), "build", str(ROOT)]
    cmd += ["--path-output", str(tmp_path), "--warningiserror", "--keep-going"]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    html = tmp_path / "_build" / "html"
    for page in ["index.html", "notebooks/losslessness.html", "book/references.html"]:
        assert (html / page).exists(), page
    # Glued values reach the rendered page (a glue key that is missing renders nothing).
    text = (html / "notebooks" / "losslessness.html").read_text()
    assert "pasted-text" in text or "pasted-inline" in text


def test_no_prose_line_starts_a_blockquote_by_accident():
    """A wrapped line that begins with ">=" or "<=" renders as a blockquote (">") or raw HTML ("<"); only
    lines of a deliberate quote ("> " and text) may begin with ">"."""
    bad = []
    for page in sorted((ROOT / "notebooks" / "src").glob("*.md")) + sorted(ROOT.glob("*.md")):
        fence = False
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                fence = not fence
            elif not fence and re.match(r"[<>][=>\d]", line):
                bad.append(f"{page.name}:{n}: {line[:60]}")
    assert not bad, bad
