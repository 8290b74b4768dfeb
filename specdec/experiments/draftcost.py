"""``specdec run draft-cost``: what the drafters cost inside the decoding loop, two checkouts alternated.

The measurement is :mod:`specdec.measure.draftcost` (:func:`~specdec.measure.draftcost.measure`, the
samples of one process, and :func:`~specdec.measure.draftcost.compare`, after over before per
configuration); this program runs a worker process per side and repetition (that module's file, run with
``PYTHONPATH`` = the side's checkout, so an earlier checkout is measured with its own package), the sides
alternating, and writes the record (kind ``engine-draft-cost``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from specdec.experiments.options import Program, Refused, option, read_record
from specdec.theory.checks import check_int

__all__ = ["DraftCostRun"]

#: The repository of this checkout (the default ``after`` side).
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DraftCostRun(Program):
    """The drafters' cost in the decoding loop (c per round and per call), before and after a change.

        specdec run draft-cost --before /tmp/before --out results/bench/engine-draft-cost-<cpu>-2t.json \
            --change "an EAGLE level in one C call"
        specdec run draft-cost --summarize RECORD     # the summary recomputed from the record's samples

    ``--before`` is a checkout of the earlier commit (``git worktree add /tmp/before COMMIT``); the
    worker processes of the two sides alternate (``--repeats`` each), every configuration of
    :data:`specdec.measure.draftcost.CONFIGS` decoded greedily from ``--prompts`` development prompts.
    """

    name: ClassVar[str] = "draft-cost"

    before: str | None = option(None, "the earlier checkout's folder (needed unless --summarize)")
    after: str = option(str(ROOT), "the later checkout's folder (default: this checkout)")
    repeats: int = option(3, "worker processes of each side, alternating")
    threads: int = option(2, "the target's threads")
    prompts: int = option(4, "development prompts")
    drafter_threads: tuple[int, ...] = option((1,), "the drafters' threads, each measured")
    configs: str = option(
        "", "configurations as SPEC@BUDGET separated by ';' (default: the module's CONFIGS)",
        metavar="SPEC@BUDGET;...",
    )  # fmt: skip
    new_tokens: int = option(48, "tokens each generation decodes")
    change: str = option("", "what changed between the two checkouts, in words (stored in the record)")
    out: str | None = option(None, "the record's path (JSON; needed unless --summarize)")
    summarize: str | None = option(
        None, "only recompute this record's summary from its samples", metavar="RECORD", once=True
    )

    def check(self) -> None:
        check_int("repeats", self.repeats, low=1, high=100)
        check_int("threads", self.threads, low=1, high=1024)
        check_int("prompts", self.prompts, low=1, high=1000)
        if not self.drafter_threads:
            raise ValueError("drafter_threads must name at least one thread count")
        for n in self.drafter_threads:
            check_int("drafter_threads", n, low=1, high=1024)
        check_int("new_tokens", self.new_tokens, low=1, high=4096)
        self.pairs()

    def pairs(self) -> tuple[tuple[str, int], ...]:
        """``--configs`` as (spec, budget) pairs (a spec may hold commas: pairs are separated by ';'), each
        spec parsed by the registry; the default set when none is given."""
        from specdec.drafting.registry import parse_spec
        from specdec.measure.draftcost import CONFIGS

        out: list[tuple[str, int]] = []
        texts = [t.strip() for t in self.configs.split(";") if t.strip()]
        if self.configs.strip() and not texts:
            raise ValueError(f"configs: name at least one SPEC@BUDGET, or leave it out; got {self.configs!r}")
        for text in texts:
            spec, at, budget = text.rpartition("@")
            spec, budget = spec.strip(), budget.strip()
            if not at or not (budget.isascii() and budget.isdigit()):
                raise ValueError(f"configs: each must be SPEC@BUDGET (a budget >= 1); got {text!r}")
            parse_spec(spec)
            pair = (spec, check_int(f"the budget of {spec}", int(budget), low=1, high=1024))
            if pair in out:
                raise ValueError(f"configs: {text!r} is named twice")
            out.append(pair)
        return tuple(out) or CONFIGS

    def run(self) -> int:
        from specdec.measure import draftcost as dc
        from specdec.theory.recordio import write_record

        if self.summarize:
            record = read_record(self.summarize)
            if record.get("kind") != "engine-draft-cost":
                raise Refused(f"summarize: {self.summarize} is not an engine-draft-cost record")
            record["summary"] = dc.compare(record["samples"]["before"], record["samples"]["after"])
            write_record(self.summarize, record, indent=1)
            return 0
        for field in ("before", "out"):  # before any worker starts
            if not getattr(self, field):
                raise Refused(f"--{field} is needed unless --summarize is given")
        sides, loads = self._alternate(dc.__file__)
        write_record(self.out, self._record(sides, loads), indent=1)
        return 0

    def _alternate(self, worker: str) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
        """Every worker process, the sides alternating by repetition: their samples and each one's load
        (:func:`specdec.measure.sides.run_side`: this checkout's worker file on each side's package)."""
        from specdec.measure.sides import run_side

        sides: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        loads = []
        threads = ",".join(map(str, self.drafter_threads))
        for rep in range(self.repeats):
            for side in ("before", "after") if rep % 2 == 0 else ("after", "before"):
                args = ["--side", "--threads", str(self.threads), "--prompts", str(self.prompts),
                        "--drafter-threads", threads, "--new-tokens", str(self.new_tokens),
                        "--configs", json.dumps(self.pairs())]  # fmt: skip
                result, load = run_side(
                    str(getattr(self, side)), worker, threads=self.threads, args=args, what=f"{side} side"
                )
                loads.append({"side": side, "rep": rep, **load})
                sides[side] += [{**r, "rep": rep} for r in result["rows"]]
                print(f"[draft-cost] {side} rep {rep} done", file=sys.stderr)
        return sides, loads

    def _record(self, sides: dict[str, list[dict[str, Any]]], loads: list[dict[str, Any]]) -> dict[str, Any]:
        from specdec.measure import draftcost as dc
        from specdec.measure.core import environment
        from specdec.measure.modes import machine_identity

        return {
            "kind": "engine-draft-cost",
            "environment": {**environment(dtype="q4q8", device="cpu"), "threads": self.threads},
            "machine": {**machine_identity(), "threads": self.threads},
            "change": self.change or None,
            "before": {"folder": self.before, "commit": dc.git_commit(str(self.before))},
            "after": {"folder": self.after, "commit": dc.git_commit(self.after)},
            "settings": {
                "threads": self.threads,
                "prompts": self.prompts,
                "repeats": self.repeats,
                "drafter_threads": list(self.drafter_threads),
                "configs": [list(c) for c in self.pairs()],
                "new_tokens": self.new_tokens,
                "prompt_tokens": 160,
                "prompt_rule": dc.dev_prompts.__doc__,
            },
            "command": self.command(),
            "loads": loads,
            "samples": sides,
            "summary": dc.compare(sides["before"], sides["after"]),
        }
