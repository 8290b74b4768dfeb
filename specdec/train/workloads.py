"""Workloads: the prompts the book decodes, and the disjoint prompts its drafts are trained on.

Three evaluation tasks in the spirit of the paper's (Leviathan et al., 2023, Section 4 and
Table 3: summarisation, an instruction-tuned chat model's free text, and code), written for
this project (passages, code and instructions are original):

* ``summarize`` -- summarise or extract from a given passage;
* ``code`` -- edit, fix, complete or explain a short piece of code;
* ``instruct`` -- open-ended instruction following.

Each task is a JSON-lines file ``specdec/data/workloads/<task>.jsonl`` with one object a line,
``{"id": ..., "task": ..., "prompt": ...}``; the prompt is a single user message, rendered with
the target's chat template at use time by :func:`chat_prompt_ids`.

:func:`training_prompts` builds a separate, larger set of prompts for distillation data from
templates (topics x instruction styles x task kinds, synthetic passages and code snippets),
seeded; none of them equals an evaluation prompt (checked in the tests).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.theory.checks import check_int

__all__ = [
    "TASKS",
    "WORKLOAD_DIR",
    "Prompt",
    "chat_prompt_ids",
    "check_per_task",
    "evaluation_count",
    "evaluation_prompts",
    "load_workload",
    "training_prompts",
]

#: The evaluation tasks, in the order the book reports them.
TASKS = ("summarize", "code", "instruct")

WORKLOAD_DIR = Path(__file__).resolve().parents[1] / "data" / "workloads"


@dataclass(frozen=True)
class Prompt:
    """One evaluation or training prompt: a single user message."""

    id: str
    task: str
    prompt: str


def load_workload(task: str) -> list[Prompt]:
    """The evaluation prompts of ``task`` (one of :data:`TASKS`), in file order."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(map(repr, TASKS))}; got {task!r}")
    path = WORKLOAD_DIR / f"{task}.jsonl"
    out = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if set(row) != {"id", "task", "prompt"} or row["task"] != task or not row["prompt"].strip():
                raise ValueError(f"{path.name} line {line_no}: expected id, task = {task!r} and a prompt")
            out.append(Prompt(row["id"], row["task"], row["prompt"]))
    return out


def chat_prompt_ids(tokenizer: Any, text: str, system: str | None = None) -> list[int]:
    """Token ids of ``text`` as one user turn in the tokenizer's chat template, ready for the reply.

    The template's own default system message is kept unless ``system`` is given; the
    generation prompt (``<|im_start|>assistant\\n`` for SmolLM2) ends the ids.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be a non-empty string")
    messages = [{"role": "user", "content": text}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer.encode(rendered, add_special_tokens=False))


def evaluation_count() -> int:
    """How many evaluation prompts every task has (the smallest task's count): the most a run can take
    per task."""
    return min(len(load_workload(task)) for task in TASKS)


def check_per_task(name: str, per_task: Any) -> int:
    """``per_task`` prompts of each task, checked against what the workloads hold (a ValueError naming
    ``name`` and the range; never silently fewer)."""
    return check_int(name, per_task, low=1, high=evaluation_count(), note="evaluation prompts per task")


def evaluation_prompts(tokenizer: Any, per_task: int) -> list[dict[str, Any]]:
    """The first ``per_task`` prompts of every task, ready to decode: dicts with ``id``,
    ``task`` and ``ids`` (:func:`chat_prompt_ids`), tasks in :data:`TASKS` order. More than a task
    holds is a ValueError (:func:`check_per_task`)."""
    check_per_task("per_task", per_task)
    return [
        {"id": p.id, "task": task, "ids": chat_prompt_ids(tokenizer, p.prompt)}
        for task in TASKS
        for p in load_workload(task)[:per_task]
    ]


# -- training prompts (templated, seeded) ----------------------------------------------------------

_TOPICS = (
    "photosynthesis",
    "the history of the bicycle",
    "volcanoes",
    "saving money",
    "time management",
    "the moon",
    "recycling plastic",
    "learning a language",
    "bread baking",
    "honey bees",
    "public transport",
    "sleep",
    "ocean tides",
    "the printing press",
    "composting",
    "chess openings",
    "electric cars",
    "deserts",
    "first aid for small cuts",
    "writing a CV",
    "friendship",
    "rain forests",
    "the human heart",
    "solar panels",
    "board games",
    "birdwatching",
    "the Roman roads",
    "clouds",
    "mountain hiking",
    "coffee",
    "team meetings",
    "reading habits",
    "caring for a puppy",
    "earthquakes",
    "the internet",
    "music practice",
    "recipes with lentils",
    "the solar system",
    "kindness",
    "renting a flat",
    "origami",
    "rivers",
    "public speaking",
    "vaccines",
    "wind energy",
    "penguins",
    "healthy breakfasts",
    "museums",
    "bridges",
    "winter clothing",
    "spreadsheets",
    "gardening tools",
    "camping",
    "libraries",
    "the seasons",
    "painting with watercolours",
    "bees and flowers",
    "maps",
    "running shoes",
    "the post office",
    "tea",
    "online privacy",
    "snow",
    "cooking rice",
    "lighthouses",
)

_STYLES = (
    "Explain {t} to a complete beginner.",
    "Give me three practical tips about {t}.",
    "Write a short poem about {t}.",
    "What are the most common misconceptions about {t}?",
    "Write a short story in which {t} plays an important role.",
    "Describe {t} in exactly five sentences.",
    "What are the advantages and disadvantages of {t}?",
    "Write a friendly paragraph for a school newsletter about {t}.",
    "List five interesting facts about {t}.",
    "How would you teach a child about {t}?",
    "Write a short dialogue between two friends talking about {t}.",
    "Summarize what everyone should know about {t} in a few bullet points.",
    "Answer briefly: why does {t} matter?",
    "Write a tweet-length message about {t}.",
)

_NAMES = ("Ana", "Ben", "Chloe", "Dev", "Elif", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Luca")
_PLACES = ("Millbrook", "Port Avery", "Stonehill", "Redwater", "Kestrel Bay", "Oakmere", "Linden Vale")
_THINGS = (
    "a new cycle path",
    "a school garden",
    "a repair cafe",
    "a night market",
    "a rooftop solar array",
    "a free coding club",
    "a river clean-up",
    "a tool library",
    "a community choir",
    "a food bank",
)
_OUTCOMES = (
    "more visitors than expected",
    "a shortage of volunteers",
    "complaints about noise",
    "a grant from the regional council",
    "delays caused by heavy rain",
    "strong support from shops",
)

_PASSAGE_TASKS = (
    "Summarize the following passage in two sentences.",
    "Extract every name, place and number from the passage below.",
    "Write a one-line headline and a short summary for this passage.",
    "List the main facts in the passage as bullet points.",
    "What problem does the passage describe, and how was it handled?",
    "Summarize this passage for a ten-year-old.",
)

_CODE_FUNCS = (
    "def total(xs):\n    s = 0\n    for x in xs:\n        s += x\n    return s",
    "def count_even(xs):\n    n = 0\n    for x in xs:\n"
    "        if x % 2 == 0:\n            n += 1\n    return n",
    "def reverse_words(s):\n    return ' '.join(s.split()[::-1])",
    "def average_length(words):\n    return sum(len(w) for w in words) / len(words)",
    "def merge_dicts(a, b):\n    out = dict(a)\n    out.update(b)\n    return out",
    "def unique(xs):\n    seen = []\n    for x in xs:\n"
    "        if x not in seen:\n            seen.append(x)\n    return seen",
    "def fizzbuzz(n):\n    for i in range(1, n + 1):\n        if i % 15 == 0:\n"
    "            print('FizzBuzz')\n        elif i % 3 == 0:\n            print('Fizz')\n"
    "        elif i % 5 == 0:\n            print('Buzz')\n        else:\n            print(i)",
    "def read_numbers(path):\n    f = open(path)\n    nums = [int(line) for line in f]\n    return nums",
    "def factorial(n):\n    if n == 0:\n        return 1\n    return n * factorial(n - 1)",
    "def word_lengths(text):\n    result = {}\n    for w in text.split():\n"
    "        result[w] = len(w)\n    return result",
)

_CODE_EDITS = (
    "Add type hints and a docstring to this function.",
    "Explain what this function does, line by line.",
    "Rewrite this function to be shorter and more idiomatic.",
    "Write two pytest tests for this function.",
    "What happens if this function gets an empty input? Make it handle that case.",
    "Translate this Python function into JavaScript.",
    "Suggest a better name for this function and its variables.",
)

_CODE_WRITES = (
    "Write a Python function that {x}.",
    "Write a short Python script that {x}, with comments.",
    "Show how to write a function in JavaScript that {x}.",
)

_CODE_GOALS = (
    "returns the second largest number in a list",
    "checks whether a year is a leap year",
    "counts the vowels in a string",
    "converts kilometres to miles",
    "removes duplicate lines from a file",
    "returns the n-th Fibonacci number",
    "sorts a list of names by their length",
    "finds the most common letter in a string",
    "computes the median of a list",
    "capitalises the first letter of every word",
    "checks whether two strings are anagrams",
    "returns all prime numbers below a limit",
    "flattens a list of lists",
    "reads a CSV file and sums a column",
)


def _passage(rng: random.Random) -> str:
    name, other = rng.sample(_NAMES, 2)
    place, thing, outcome = rng.choice(_PLACES), rng.choice(_THINGS), rng.choice(_OUTCOMES)
    year, people, cost = rng.randint(2005, 2023), rng.randint(12, 900), rng.randint(2, 90) * 100
    return (
        f"In {year}, residents of {place} started {thing}. The idea came from {name}, who had seen "
        f"something similar in another town. About {people} people took part in the first months, "
        f"and the project cost around {cost} euros, most of it raised locally. The organisers reported "
        f"{outcome}. {other}, who joined as a volunteer, said the project had changed how neighbours "
        f"talk to each other, and the group now plans to continue next year."
    )


def training_prompts(n: int, seed: int = 0) -> list[Prompt]:
    """``n`` distillation prompts from templates, drawn with ``random.Random(seed)``.

    The mix is 50% instruction following (topic x style), 25% passage tasks on synthetic
    passages, 25% code tasks (edits of template functions, or writing a function); the same
    (n, seed) always gives the same prompts. They are disjoint from the evaluation workloads.
    """
    check_int("n", n, low=1)
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = rng.choices(("instruct", "summarize", "code"), weights=(2, 1, 1))[0]
        if kind == "instruct":
            text = rng.choice(_STYLES).format(t=rng.choice(_TOPICS))
        elif kind == "summarize":
            text = f"{rng.choice(_PASSAGE_TASKS)}\n\n{_passage(rng)}"
        elif rng.random() < 0.6:
            code = rng.choice(_CODE_FUNCS)
            text = f"{rng.choice(_CODE_EDITS)}\n\n```python\n{code}\n```"
        else:
            text = rng.choice(_CODE_WRITES).format(x=rng.choice(_CODE_GOALS))
        out.append(Prompt(f"train-{seed}-{i:05d}", kind, text))
    return out
