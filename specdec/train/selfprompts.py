"""Issue 42's prompt set: real offline text (:mod:`specdec.train.selftext`) templated into the book's tasks.

:func:`build_prompts` draws ``n`` user messages with ``random.Random(seed)``, an equal share for each
of :data:`TASKS`:

* ``summarize`` -- summarise a passage (a manual page's section, a README, the language reference, a
  docstring, Vim's help) in one of several forms (sentences, bullets, a title, for a newcomer);
* ``extract`` -- extract from or rewrite a passage (options and what they do, names and numbers,
  terms and definitions, plain English, a numbered list, an FAQ, JSON, another tone);
* ``code`` -- explain, document, test, simplify, review or translate a standard-library function or
  class; write a function from a real docstring; write shell commands around a real command;
* ``chat`` -- conversational questions about a command, a module or a sentence of documentation;
* ``open`` -- open questions on the same subjects (trade-offs, history, design, advice).

Every piece of text is used once before any is used again (pools cycled in a seeded order); prompts
are distinct. The mix is recorded by :func:`counts`. :func:`overlap_report` and :func:`check_disjoint`
compare the set with evaluation prompts: no prompt may equal (whitespace and case aside) or contain an
evaluation prompt, nor cover half or more of one's word 8-grams; the shared 8-grams are counted and
reported either way.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specdec.theory.checks import check_int
from specdec.train.selftext import Piece

__all__ = [
    "NGRAM",
    "TASKS",
    "SelfPrompt",
    "build_prompts",
    "check_disjoint",
    "counts",
    "normalise",
    "overlap_report",
]

#: The tasks of the self-generated data, in the manifest's order.
TASKS = ("summarize", "extract", "code", "chat", "open")
#: The n of the shared word n-grams the disjointness check reports.
NGRAM = 8


@dataclass(frozen=True)
class SelfPrompt:
    """One prompt: ``index`` in the set, ``task``, ``source`` (the text's kind), ``path`` (its file),
    ``template`` (the template's name) and the user message ``prompt``."""

    index: int
    task: str
    source: str
    path: str
    template: str
    prompt: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- templates ----------------------------------------------------------------------------------------
# Each template: (name, pool, text); the pool is (kind or "*", role); {p} the passage, {t} its title,
# {cmd} / {desc} a manual page's command and description, {code} a function's source, {name} its name.

_PROSE = ("*", "prose")

_SUMMARIZE = (
    ("sum-sentences", _PROSE, "Summarize the following text in {n} sentences.\n\n{p}"),
    ("sum-newcomer", _PROSE, "Write a short summary of this documentation excerpt for a newcomer.\n\n{p}"),
    ("sum-bullets", _PROSE, "List the key points of this excerpt as short bullets.\n\n{p}"),
    ("sum-title", _PROSE, "Summarize this in one paragraph, then suggest a title for it.\n\n{p}"),
    ("sum-main-idea", _PROSE, "What is the main idea of this text? Answer in a few sentences.\n\n{p}"),
    ("sum-after", _PROSE, "{p}\n\nSummarize the text above in {n} sentences."),
    ("sum-section", _PROSE, "Here is a part of the documentation of {t}. Summarize it for someone in a hurry."
     "\n\n{p}"),
    ("sum-tldr", _PROSE, "Write a TL;DR of at most {w} words for this passage.\n\n{p}"),
    ("sum-options", ("man", "options"), "Summarize what the options described below let a user do.\n\n{p}"),
)  # fmt: skip

_EXTRACT = (
    ("ex-options", ("man", "options"), "List every option mentioned below, with a one-line description of "
     "each.\n\n{p}"),
    ("ex-options-table", ("man", "options"), "Turn the following option descriptions into a Markdown table "
     "with the columns Option and Meaning.\n\n{p}"),
    ("ex-entities", _PROSE, "Extract all the names, numbers, file paths and commands that appear in this "
     "text.\n\n{p}"),
    ("ex-terms", _PROSE, "Extract the technical terms from this passage and define each one in a line."
     "\n\n{p}"),
    ("ex-plain", _PROSE, "Put this passage into everyday language that anyone can follow.\n\n{p}"),
    ("ex-steps", _PROSE, "Rewrite this text as a numbered list of facts or steps.\n\n{p}"),
    ("ex-faq", _PROSE, "Turn the following documentation into a short FAQ with three questions and "
     "answers.\n\n{p}"),
    ("ex-json", _PROSE, 'Read the text below and return a JSON object with the fields "topic", '
     '"key_points" and "terms".\n\n{p}'),
    ("ex-tone", _PROSE, "Rewrite this passage in a {tone} tone, keeping every fact.\n\n{p}"),
    ("ex-caveats", _PROSE, "Which warnings, limits or caveats does this text mention? List them.\n\n{p}"),
    ("ex-clearer", _PROSE, "Edit the following text to make it clearer and shorter without changing its "
     "meaning.\n\n{p}"),
)  # fmt: skip

_CODE_ITEM = ("python", "code")
_CODE = (
    ("code-explain", _CODE_ITEM, "Explain what this Python code does, step by step.\n\n"
     "```python\n{code}\n```"),
    ("code-hints", _CODE_ITEM, "Add type hints and a docstring to this code.\n\n```python\n{code}\n```"),
    ("code-tests", _CODE_ITEM, "Write three pytest tests for the following code.\n\n```python\n{code}\n```"),
    ("code-simplify", _CODE_ITEM, "Rewrite this code to be simpler and more readable, keeping its "
     "behaviour.\n\n```python\n{code}\n```"),
    ("code-review", _CODE_ITEM, "Review this code: are there bugs or edge cases it does not handle?\n\n"
     "```python\n{code}\n```"),
    ("code-js", _CODE_ITEM, "Translate this Python code into JavaScript.\n\n```python\n{code}\n```"),
    ("code-comments", _CODE_ITEM, "Add comments to this code that explain each part.\n\n"
     "```python\n{code}\n```"),
    ("code-complexity", _CODE_ITEM, "What is the time complexity of this code? Explain your answer.\n\n"
     "```python\n{code}\n```"),
    ("code-name", _CODE_ITEM, "The following comes from `{name}` in Python's standard library. How would you "
     "use it? Show a short example.\n\n```python\n{code}\n```"),
    ("code-spec", ("python", "prose"), "Write a Python function that does what this docstring describes "
     "(from `{t}`):\n\n{p}"),
    ("code-shell", ("man", "name"), "Write a short shell script that uses `{cmd}` ({desc}), with comments "
     "explaining each line."),
    ("code-examples", ("man", "name"), "Give three example command lines using `{cmd}` ({desc}) and explain "
     "what each one does."),
)  # fmt: skip

_CHAT = (
    ("chat-cmd", ("man", "name"), "Hi! I found `{cmd}` on my Linux machine. Its manual says: \"{desc}\". "
     "What would I use it for?"),
    ("chat-cmd-help", ("man", "name"), "Can you help me? I need to use {cmd} ({desc}) for the first time "
     "and I don't know where to start."),
    ("chat-pair", ("man", "name2"), "Quick question: what is the difference between `{cmd}` ({desc}) and "
     "`{cmd2}` ({desc2})?"),
    ("chat-module", ("python", "module"), "I'm learning Python. When would I use the `{t}` module? Its "
     "documentation starts: \"{p}\""),
    ("chat-eli5", ("*", "sentence"), "Can you explain this to me like I'm twelve? \"{p}\""),
    ("chat-colleague", _PROSE, "My colleague sent me this and I don't get it. What does it mean, in "
     "simple words?\n\n{p}"),
    ("chat-opinion", ("*", "sentence"), "I read this in some documentation: \"{p}\" Is that a good idea? "
     "What do you think?"),
    ("chat-thanks", ("man", "name"), "Thanks for your help yesterday! Today I'd like to learn about {cmd}, "
     "which is described as \"{desc}\". Could you give me a friendly introduction?"),
)  # fmt: skip

_OPEN = (
    ("open-tradeoffs", ("man", "name"), "What are the advantages and disadvantages of a tool like {cmd} "
     "({desc})?"),
    ("open-without", ("man", "name"), "Imagine {cmd} ({desc}) did not exist. How would people work without "
     "it, and what would be harder?"),
    ("open-design", ("pydoc", "topic"), "Why do you think Python's {t} works the way it does? Discuss the "
     "design choices."),
    ("open-beginner", ("python", "module"), "What should a beginner know before using Python's `{t}` "
     "module ({p})?"),
    ("open-future", ("*", "title"), "How do you think {t} will change in the next ten years?"),
    ("open-passage", _PROSE, "{p}\n\nWhat questions does this text leave open, and how would you answer "
     "them?"),
    ("open-strengths", _PROSE, "{p}\n\nWhat are the strengths and weaknesses of the approach described "
     "above?"),
    ("open-teach", ("*", "title"), "How would you teach {t} to a class of students who have never seen it?"),
)  # fmt: skip

TEMPLATES: dict[str, tuple[tuple[str, tuple[str, str], str], ...]] = {
    "summarize": _SUMMARIZE,
    "extract": _EXTRACT,
    "code": _CODE,
    "chat": _CHAT,
    "open": _OPEN,
}

_TONES = ("formal", "friendly", "neutral, encyclopedic", "enthusiastic", "concise, technical")


class _Pools:
    """Pieces grouped by (kind, role), each pool shuffled once and cycled."""

    def __init__(self, pieces: Mapping[str, Sequence[Piece]], rng: random.Random) -> None:
        self.rng = rng
        self.pools: dict[tuple[str, str], list[Piece]] = {}
        for kind in sorted(pieces):
            for p in pieces[kind]:
                self.pools.setdefault((kind, p.role), []).append(p)
        for key in sorted(self.pools):
            rng.shuffle(self.pools[key])
        # derived pools: a sentence of prose, a title (a command's description, a module, a topic)
        for (kind, role), items in sorted(self.pools.copy().items()):
            if role == "prose":
                sentences = []
                for p in items:
                    first = _first_sentence(p.text)
                    if first:
                        sentences.append(Piece(kind, p.path, "sentence", p.title, first))
                if sentences:
                    self.pools[(kind, "sentence")] = sentences
        titles = []
        for p in self.pools.get(("man", "name"), []):
            cmd, desc = _split_name(p.text)
            titles.append(Piece("man", p.path, "title", p.title, f"`{cmd}` ({desc})"))
        for p in self.pools.get(("python", "module"), []):
            titles.append(Piece("python", p.path, "title", p.title, f"Python's `{p.title}` module"))
        if titles:
            rng.shuffle(titles)
            self.pools[("*", "title")] = titles
        topics = {}
        for p in self.pools.get(("pydoc", "prose"), []):
            topics.setdefault(p.title, p)
        if topics:
            self.pools[("pydoc", "topic")] = [topics[k] for k in sorted(topics)]
            rng.shuffle(self.pools[("pydoc", "topic")])
        self.next: dict[tuple[str, str], int] = {}

    def has(self, pool: tuple[str, str]) -> bool:
        kind, role = pool
        if role == "name2":
            return len(self.pools.get((kind, "name"), [])) >= 2
        if kind == "*":
            return any(r == role and items for (_, r), items in self.pools.items())
        return bool(self.pools.get(pool))

    def draw(self, pool: tuple[str, str]) -> list[Piece]:
        kind, role = pool
        if role == "name2":
            return [self._take((kind, "name")), self._take((kind, "name"))]
        if kind == "*":  # any kind that has the role, weighted by the kinds (not their sizes)
            kinds = sorted(k for (k, r), items in self.pools.items() if r == role and items)
            kind = self.rng.choice(kinds)
        return [self._take((kind, role))]

    def _take(self, key: tuple[str, str]) -> Piece:
        items = self.pools[key]
        i = self.next.get(key, 0)
        self.next[key] = i + 1
        if i and i % len(items) == 0:  # a new pass over the pool, in a new order
            self.rng.shuffle(items)
        return items[i % len(items)]


def _first_sentence(text: str) -> str | None:
    flat = " ".join(text.split())
    m = re.match(r"(.{40,300}?[.!?])(\s|$)", flat)
    return m.group(1) if m else None


def _split_name(text: str) -> tuple[str, str]:
    cmd, _, desc = text.partition(" - ")
    cmd = cmd.split(",")[0].strip()
    return cmd, desc.strip().rstrip(".")


def _fill(template: str, pieces: list[Piece], rng: random.Random) -> str:
    p = pieces[0]
    values = {"p": p.text, "t": p.title, "code": p.text, "name": p.title, "n": rng.choice(("two", "three")),
              "w": rng.choice((30, 50, 80)), "tone": rng.choice(_TONES)}  # fmt: skip
    if p.role == "name":
        values["cmd"], values["desc"] = _split_name(p.text)
    if p.role == "title":
        values["t"] = p.text
    if p.role == "topic":
        values["t"] = f"'{p.title}' (from the language reference)"
    if len(pieces) > 1:
        values["cmd2"], values["desc2"] = _split_name(pieces[1].text)
    return template.format(**values)


def build_prompts(pieces: Mapping[str, Sequence[Piece]], n: int, seed: int) -> list[SelfPrompt]:
    """``n`` distinct prompts, ``n // 5`` (or one more) per task of :data:`TASKS`, in a seeded order.

    Each prompt takes a task (the tasks in turn, then the whole list shuffled), a template of that task
    whose pool has pieces, and the pool's next piece. Raises ValueError when no template can be filled
    (no text at all) or when ``n`` distinct prompts cannot be made."""
    check_int("n", n, low=1)
    rng = random.Random(seed)
    pools = _Pools(pieces, rng)
    usable = {task: [t for t in TEMPLATES[task] if pools.has(t[1])] for task in TASKS}
    empty = [task for task, ts in usable.items() if not ts]
    if empty:
        raise ValueError(f"no source text fills a template of the tasks {empty}: is any source text present?")
    seen: set[str] = set()
    rows: list[tuple[str, Piece, str, str]] = []
    tries = 0
    while len(rows) < n:
        task = TASKS[len(rows) % len(TASKS)]
        name, pool, template = rng.choice(usable[task])
        drawn = pools.draw(pool)
        text = _fill(template, drawn, rng).strip()
        tries += 1
        if tries > 20 * n + 1000:
            raise ValueError(f"could not make {n} distinct prompts from the source text ({len(rows)} made)")
        if normalise(text) in seen:
            continue
        seen.add(normalise(text))
        rows.append((task, drawn[0], name, text))
    rng.shuffle(rows)
    return [SelfPrompt(i, task, p.kind, p.path, name, text) for i, (task, p, name, text) in enumerate(rows)]


def counts(prompts: Iterable[SelfPrompt]) -> dict[str, Any]:
    """Prompts per task, per source kind, per task x source and per template."""
    prompts = list(prompts)
    by_ts: dict[str, dict[str, int]] = {}
    for p in prompts:
        by_ts.setdefault(p.task, {}).setdefault(p.source, 0)
        by_ts[p.task][p.source] += 1
    return {
        "prompts": len(prompts),
        "per_task": dict(sorted(Counter(p.task for p in prompts).items())),
        "per_source": dict(sorted(Counter(p.source for p in prompts).items())),
        "per_task_source": {t: dict(sorted(v.items())) for t, v in sorted(by_ts.items())},
        "per_template": dict(sorted(Counter(p.template for p in prompts).items())),
        "source_files": len({p.path for p in prompts}),
    }


# -- disjointness ---------------------------------------------------------------------------------------


def normalise(text: str) -> str:
    """Lower case, whitespace collapsed: what equality of prompts is judged on."""
    return " ".join(text.lower().split())


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+", text.lower())


def _grams(words: Sequence[str], k: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + k]) for i in range(len(words) - k + 1)}


def overlap_report(
    prompts: Sequence[str], evaluation: Mapping[str, Sequence[str]], *, k: int = NGRAM, examples: int = 10
) -> dict[str, Any]:
    """How ``prompts`` meet each evaluation set (``name -> its prompts``): per set, prompts equal to or
    contained in a training prompt, the distinct word ``k``-grams they share with the whole training set,
    the training prompts that share any, the largest share of one evaluation prompt's k-grams that one
    training prompt holds (``max_cover``), and a few shared k-grams. ``violations`` lists what
    :func:`check_disjoint` refuses (equal, contained, or ``max_cover`` >= 0.5)."""
    check_int("k", k, low=1)
    train_norm = [normalise(p) for p in prompts]
    train_set = set(train_norm)
    sets: dict[str, Any] = {}
    violations: list[str] = []
    for name in sorted(evaluation):
        ev = list(evaluation[name])
        ev_grams = [_grams(_words(e), k) for e in ev]
        all_ev = set().union(*ev_grams) if ev_grams else set()
        shared: Counter = Counter()
        sharing_prompts = 0
        cover = [0.0] * len(ev)
        for t in train_norm:
            g = _grams(_words(t), k) & all_ev
            if not g:
                continue
            sharing_prompts += 1
            shared.update(g)
            for j, eg in enumerate(ev_grams):
                if eg:
                    cover[j] = max(cover[j], len(g & eg) / len(eg))
        equal = [j for j, e in enumerate(ev) if normalise(e) in train_set]
        contained = [
            j for j, e in enumerate(ev) if j not in equal and any(normalise(e) in t for t in train_norm)
        ]
        near = [j for j, c in enumerate(cover) if c >= 0.5 and j not in equal and j not in contained]
        for kind, js in (("equals", equal), ("is contained in", contained), ("is half-covered by", near)):
            violations += [f"{name} prompt {j} {kind} a training prompt" for j in js]
        sets[name] = {
            "prompts": len(ev),
            "ngrams": len(all_ev),
            "shared_ngrams": len(shared),
            "shared_occurrences": int(sum(shared.values())),
            "training_prompts_sharing": sharing_prompts,
            "max_cover": max(cover, default=0.0),
            "equal": len(equal),
            "contained": len(contained),
            "examples": [" ".join(g) for g, _ in shared.most_common(examples)],
        }
    return {
        "n": k,
        "training_prompts": len(prompts),
        "distinct": len(train_set) == len(train_norm),
        "sets": sets,
        "violations": violations,
        "disjoint": not violations,
    }


def check_disjoint(
    prompts: Sequence[str], evaluation: Mapping[str, Sequence[str]], *, k: int = NGRAM
) -> dict[str, Any]:
    """:func:`overlap_report`, raising ValueError (naming the first violations) unless the training
    prompts are disjoint from every evaluation set."""
    report = overlap_report(prompts, evaluation, k=k)
    if report["violations"]:
        shown = "; ".join(report["violations"][:5])
        more = len(report["violations"]) - 5
        raise ValueError(
            "the training prompts are not disjoint from the evaluation prompts: "
            + shown
            + (f"; and {more} more" if more > 0 else "")
        )
    return report
