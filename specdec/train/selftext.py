"""Real text found offline on this machine, cut into pieces the self-generated prompts are made from.

Issue 42's data (:mod:`specdec.train.selfprompts`) is built from text that ships with the machine, never
downloaded and never written for the evaluation sets:

* ``python`` -- the Python standard library's source (``sysconfig``'s ``stdlib``, tests and encodings
  left out): functions and classes of 5 to 40 lines as code, and the longer docstrings as prose;
* ``pydoc`` -- the language reference's topics shipped with the standard library (``pydoc_data.topics``);
* ``man`` -- Debian's manual pages (``/usr/share/man/man1`` .. ``man8``, English), their roff stripped:
  each page's NAME line and its sections as prose;
* ``doc`` -- Debian's ``/usr/share/doc/<package>`` READMEs, NEWS, FAQs and text or Markdown files;
* ``vim`` -- Vim's help files (``/usr/share/vim/vim*/doc/*.txt``).

:func:`collect` walks these (a seeded sample of the files of the large kinds, so the build stays fast),
and returns :class:`Piece` objects, each naming its source file; :func:`file_sha256` is what the
manifest records for every file a prompt was made from. Everything is deterministic for a given set of
files and seed (sorted walks, ``random.Random(seed)``).
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import random
import re
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KINDS", "Piece", "chunks", "collect", "file_sha256", "roff_text", "source_roots"]

#: The kinds of source text, in the order the manifest reports them.
KINDS = ("python", "pydoc", "man", "doc", "vim")

MAN_ROOT = Path("/usr/share/man")
DOC_ROOT = Path("/usr/share/doc")
VIM_ROOT = Path("/usr/share/vim")
_SKIP_STDLIB = {"test", "tests", "idle_test", "encodings", "site-packages", "dist-packages", "__pycache__"}
_DOC_NAME = re.compile(r"^(readme|news|faq|changes|history|todo|usage|howto|intro)|\.(txt|md|rst)$", re.I)
_MAX_FILE_BYTES = 400_000


@dataclass(frozen=True)
class Piece:
    """A piece of source text: ``kind`` (:data:`KINDS`), ``path`` (its file), ``role`` (``"prose"``,
    ``"code"``, ``"options"`` or ``"name"``), ``title`` (the page, module or function it belongs to)
    and ``text``."""

    kind: str
    path: str
    role: str
    title: str
    text: str


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def source_roots() -> dict[str, str]:
    """Where each kind is read from on this machine (for the manifest)."""
    return {
        "python": sysconfig.get_paths()["stdlib"],
        "pydoc": str(Path(sysconfig.get_paths()["stdlib"]) / "pydoc_data" / "topics.py"),
        "man": str(MAN_ROOT),
        "doc": str(DOC_ROOT),
        "vim": str(VIM_ROOT),
    }


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return raw[:_MAX_FILE_BYTES].decode("utf-8", errors="replace")


def _words(text: str) -> int:
    return len(text.split())


def chunks(text: str, min_words: int, max_words: int) -> list[str]:
    """``text`` cut at blank lines into passages of ``min_words`` .. ``max_words`` words (paragraphs
    merged while they fit; a longer paragraph cut at sentence ends, else at ``max_words``)."""
    paras = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    pieces: list[str] = []
    for p in paras:
        if _words(p) <= max_words:
            pieces.append(p)
            continue
        sentences = re.split(r"(?<=[.!?])\s+", p)
        cur: list[str] = []
        for s in sentences:
            if cur and _words(" ".join(cur + [s])) > max_words:
                pieces.append(" ".join(cur))
                cur = []
            words = s.split()
            while len(words) > max_words:
                pieces.append(" ".join(words[:max_words]))
                words = words[max_words:]
            if words:
                cur.append(" ".join(words))
        if cur:
            pieces.append(" ".join(cur))
    out: list[str] = []
    cur_text = ""
    for p in pieces:
        joined = f"{cur_text}\n\n{p}" if cur_text else p
        if cur_text and _words(joined) > max_words:
            if _words(cur_text) >= min_words:
                out.append(cur_text)
            cur_text = p
        else:
            cur_text = joined
    if cur_text and _words(cur_text) >= min_words:
        out.append(cur_text)
    return out


# -- the Python standard library -------------------------------------------------------------------


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if any(part in _SKIP_STDLIB for part in rel) or rel[-1].startswith("test_"):
            continue
        out.append(path)
    return out


def _python_pieces(path: Path, root: Path, min_words: int, max_words: int) -> Iterator[Piece]:
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return
    module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
    lines = source.splitlines()
    doc = ast.get_docstring(tree)
    if doc:
        first = " ".join(doc.strip().split("\n\n")[0].split())
        if 3 <= _words(first) <= 40 and not module.startswith("_"):
            yield Piece("python", str(path), "module", module, first)
        for text in chunks(doc, min_words, max_words):
            yield Piece("python", str(path), "prose", module, text)
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        name = f"{module}.{node.name}"
        doc = ast.get_docstring(node)
        if doc and _words(doc) >= min_words:
            for text in chunks(doc, min_words, max_words):
                yield Piece("python", str(path), "prose", name, text)
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        n = node.end_lineno - start + 1
        if 5 <= n <= 40:
            code = "\n".join(lines[start - 1 : node.end_lineno])
            indent = len(code) - len(code.lstrip(" "))
            code = "\n".join(
                line[indent:] if line[:indent].strip() == "" else line for line in code.split("\n")
            )
            if len(code) <= 1800:
                yield Piece("python", str(path), "code", name, code)


def _pydoc_pieces(min_words: int, max_words: int) -> Iterator[Piece]:
    try:
        from pydoc_data import topics
    except ImportError:  # a stripped Python
        return
    path = str(Path(topics.__file__).resolve())
    for key in sorted(topics.topics):
        for text in chunks(topics.topics[key], min_words, max_words):
            yield Piece("pydoc", path, "prose", key, text)


# -- manual pages ----------------------------------------------------------------------------------

_ESCAPES = {
    r"\-": "-", r"\(em": "--", r"\(en": "-", r"\(bu": "*", r"\(aq": "'", r"\(cq": "'", r"\(oq": "'",
    r"\(dq": '"', r"\(lq": '"', r"\(rq": '"', r"\(co": "(c)", r"\(rg": "(R)", r"\(ti": "~", r"\(ha": "^",
    r"\(lh": "<=", r"\(rh": "=>", r"\(mu": "x", r"\(>=": ">=", r"\(<=": "<=", r"\e": "\\", r"\~": " ",
    r"\ ": " ", r"\0": " ", r"\|": "", r"\^": "", r"\&": "", r"\:": "", r"\/": "", r"\,": "", r"\%": "",
    r"\c": "",
}  # fmt: skip
_ESCAPE_RE = re.compile("|".join(re.escape(k) for k in sorted(_ESCAPES, key=len, reverse=True)))
_FONT_RE = re.compile(r"\\f(\[[^\]]*\]|\(..|.)")
_OTHER_ESCAPE_RE = re.compile(
    r"\\\*(\(..|\[[^\]]*\]|.)|\\s[-+]?\d|\\[nk]\(..|\\[nk]\[[^\]]*\]|\\[nk].|\\[hvwoxlLDbXNRZ]'[^']*'|\\\((..)|\\\[[^\]]*\]"
)
_ALTERNATING = {".BR", ".BI", ".IB", ".IR", ".RB", ".RI"}


def _inline(text: str) -> str:
    text = _FONT_RE.sub("", text)
    text = _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], text)
    return _OTHER_ESCAPE_RE.sub("", text).replace("\\", "")


def _macro_args(rest: str) -> list[str]:
    return [a[1:-1] if len(a) > 1 and a[0] == a[-1] == '"' else a for a in re.findall(r'"[^"]*"|\S+', rest)]


def roff_text(source: str) -> list[tuple[str, str]]:
    """A man page's roff as ``(section, text)`` pairs: macros read (``.SH``, ``.TP``, ``.B``, ``.BR``,
    ``.PP``, ...), fonts and escapes stripped, paragraphs separated by blank lines. A rough reading,
    not groff's: good enough for prompts."""
    sections: list[tuple[str, list[str]]] = [("", [])]
    for raw in source.splitlines():
        line = raw.rstrip()
        if line.startswith(('.\\"', "'\\\"", '.\\\\"')) or line in (".", "'"):
            continue
        if line.startswith((".", "'")) and len(line) > 1:
            macro, _, rest = line.partition(" ")
            if macro in (".SH", ".SS", ".Sh", ".Ss"):
                title = _inline(" ".join(_macro_args(rest))).strip()
                if macro in (".SH", ".Sh"):
                    sections.append((title.upper(), []))
                else:
                    sections[-1][1].extend(["", title, ""])
            elif macro in (".PP", ".P", ".LP", ".sp", ".br", ".TP", ".IP", ".HP", ".Pp", ".TQ"):
                sections[-1][1].append("")
                if macro == ".IP" and rest:
                    args = _macro_args(rest)
                    if args and args[0] not in ("", "\\(bu", "*"):
                        sections[-1][1].append(_inline(args[0]))
            elif macro in (".B", ".I", ".SM", ".SB", ".Nm", ".Ar", ".Fl", ".Nd", ".Dv", ".Em", ".Sy"):
                sections[-1][1].append(_inline(" ".join(_macro_args(rest))))
            elif macro in _ALTERNATING:
                sections[-1][1].append(_inline("".join(_macro_args(rest))))
            elif macro in (".nf", ".fi", ".RS", ".RE", ".in", ".ad", ".na", ".ft", ".ne", ".hy", ".nh",
                           ".ds", ".de", ".if", ".ie", ".el", ".TH", ".Dd", ".Dt", ".Os", ".so", ".ll",
                           ".UR", ".UE", ".EX", ".EE", ".PD", ".ti", ".tr", ".nr", ".ig", ".ps", ".vs",
                           ".cs", ".bp", ".ce", ".rm", ".als", ".mso", ".ta", ".\\}", ".."):  # fmt: skip
                continue
            else:
                continue
        else:
            sections[-1][1].append(_inline(line))
    out = []
    for title, lines in sections:
        text = "\n".join(lines)
        text = re.sub(r"[ \t]+", " ", text)
        paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
        text = "\n\n".join(p for p in paras if p)
        if text:
            out.append((title, text))
    return out


#: At most this many manual pages per name prefix (the text before the first ``_``, ``-`` or ``.``):
#: one tool's thousands of generated pages (``gcloud_*``) must not crowd out the others.
MAN_PER_PREFIX = 40


def _man_files() -> list[Path]:
    out, per_prefix = [], {}
    for n in range(1, 9):
        folder = MAN_ROOT / f"man{n}"
        if not folder.is_dir():
            continue
        for p in sorted(folder.iterdir()):
            prefix = re.split(r"[._-]", p.name, maxsplit=1)[0]
            if p.is_file() and not p.is_symlink() and per_prefix.get(prefix, 0) < MAN_PER_PREFIX:
                per_prefix[prefix] = per_prefix.get(prefix, 0) + 1
                out.append(p)
    return out


def _man_pieces(path: Path, min_words: int, max_words: int) -> Iterator[Piece]:
    try:
        source = _read_text(path)
    except (OSError, EOFError, gzip.BadGzipFile):
        return
    if source.lstrip().startswith(".so ") or "\n.so " in source[:200]:
        return
    sections = roff_text(source)
    page = path.name.split(".")[0]
    for title, text in sections:
        if title == "NAME":
            name = " ".join(text.split())
            if " - " in name and 3 <= _words(name) <= 30:
                yield Piece("man", str(path), "name", page, name)
            continue
        if title in ("SYNOPSIS", "AUTHOR", "AUTHORS", "COPYRIGHT", "SEE ALSO", "REPORTING BUGS", "COLOPHON"):
            continue
        role = "options" if "OPTION" in title or title == "COMMANDS" else "prose"
        for chunk in chunks(text, min_words, max_words):
            yield Piece("man", str(path), role, f"{page}: {title.lower()}", chunk)


# -- /usr/share/doc and Vim's help -----------------------------------------------------------------


def _doc_files() -> list[Path]:
    if not DOC_ROOT.is_dir():
        return []
    out = []
    for pkg in sorted(DOC_ROOT.iterdir()):
        if not pkg.is_dir() or pkg.is_symlink():
            continue
        for path in sorted(pkg.rglob("*")):
            name = path.name.removesuffix(".gz")
            if (
                path.is_file()
                and not path.is_symlink()
                and _DOC_NAME.search(name)
                and "changelog" not in name
            ):
                out.append(path)
    return out


def _doc_pieces(path: Path, min_words: int, max_words: int) -> Iterator[Piece]:
    try:
        text = _read_text(path)
    except (OSError, EOFError, gzip.BadGzipFile):
        return
    if text.count("\ufffd") > 10:
        return
    title = path.relative_to(DOC_ROOT).parts[0]
    for chunk in chunks(text, min_words, max_words):
        letters = sum(c.isalpha() for c in chunk)
        if letters >= 0.55 * len(chunk):  # prose, not tables or hex dumps
            yield Piece("doc", str(path), "prose", title, chunk)


def _vim_files() -> list[Path]:
    return sorted(VIM_ROOT.glob("vim*/doc/*.txt")) if VIM_ROOT.is_dir() else []


def _vim_pieces(path: Path, min_words: int, max_words: int) -> Iterator[Piece]:
    try:
        text = _read_text(path)
    except OSError:
        return
    text = re.sub(r"^[=\-]{20,}\s*$", "", text, flags=re.M)
    for chunk in chunks(text, min_words, max_words):
        if sum(c.isalpha() for c in chunk) >= 0.5 * len(chunk):
            yield Piece("vim", str(path), "prose", f"vim help: {path.stem}", chunk)


# -- all together ----------------------------------------------------------------------------------


def _sample(paths: list[Path], n: int, rng: random.Random) -> list[Path]:
    return sorted(rng.sample(paths, n)) if len(paths) > n else paths


def collect(
    seed: int, *, min_words: int = 40, max_words: int = 200, files_per_kind: int = 3000,
    kinds: Iterable[str] = KINDS,
) -> dict[str, list[Piece]]:  # fmt: skip
    """Every kind's pieces: the standard library and pydoc whole, and of the manual pages, Debian's docs
    and Vim's help a sample of at most ``files_per_kind`` files drawn with ``random.Random(seed)``.
    A kind absent from this machine gives an empty list."""
    rng = random.Random(seed)
    kinds = tuple(kinds)
    out: dict[str, list[Piece]] = {k: [] for k in kinds}
    if "python" in kinds:
        root = Path(sysconfig.get_paths()["stdlib"])
        for path in _stdlib_files():
            out["python"] += _python_pieces(path, root, min_words, max_words)
    if "pydoc" in kinds:
        out["pydoc"] += _pydoc_pieces(min_words, max_words)
    walks = {
        "man": (_man_files, _man_pieces),
        "doc": (_doc_files, _doc_pieces),
        "vim": (_vim_files, _vim_pieces),
    }
    for kind, (files, pieces) in walks.items():
        if kind in kinds:
            for path in _sample(files(), files_per_kind, rng):
                out[kind] += pieces(path, min_words, max_words)
    return out
