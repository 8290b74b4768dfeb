"""The decoding loop's cost over the bare C step, before and after a change of its Python (issue 40): the
program.

``specdec run loop-cost`` (:class:`LoopCostRun`) takes the options; the measurement, its design
(:class:`specdec.measure.loopcost.LoopCost`) and its record are :mod:`specdec.measure.loopcost`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from specdec.experiments.options import Program, Refused, option, read_record
from specdec.theory.checks import check_ints

__all__ = ["LoopCostRun"]


@dataclass(frozen=True)
class LoopCostRun(Program):
    """The decoding loop's time per token over the bare C step, before and after a change of its Python.

    The measurement is :func:`specdec.measure.loopcost.run_record` (its module docstring says what runs
    and how): per thread count and repetition, two worker processes in a fresh order, one on the
    package of ``--before`` (extracted from git) and one on this checkout's, each timing, per development
    prompt and round, the bare C step (the forward and numpy's argmax, nothing else),
    ``autoregressive()`` at temperatures 0 and 1 and, with ``--drafter``, ``speculative_tree()`` at both,
    in a fresh order. Writes ``results/bench/engine-loop-cost-<cpu>.json`` (``-spec.json`` with a
    drafter; ``--out``); an interrupted run with the same settings resumes (``--fresh`` discards it).
    About 20 minutes on a 2-core machine, 45 with a drafter.

        specdec run loop-cost --before bd13e7a
        specdec run loop-cost --threads 1 --prompts 2 --tokens 8 --rounds 1 --repeats 1   # a smoke run
        specdec run loop-cost --before 89fce56 --drafter 'mlp:mlp-3m@4'   # with the speculative loop
        specdec run loop-cost --summarize results/bench/engine-loop-cost-amd-epyc.json   # its summary again
    """

    name: ClassVar[str] = "loop-cost"

    before: str = option("bd13e7a", "the commit whose package is the 'before' version")
    threads: tuple[int, ...] = option((1, 2), "thread counts")
    prompts: int = option(8, "development prompts per worker")
    tokens: int = option(32, "tokens per arm, prompt and round")
    rounds: int = option(3, "rounds per prompt (each arm once per round, in a fresh order)")
    repeats: int = option(5, "repetitions per thread count (after one that warms up)")
    seed: int = option(0, "the seed of the orders and of sampling at temperature 1")
    drafter: str | None = option(None, "SPEC@BUDGET: add the speculative loop's arms with this drafter")
    out: str | None = option(
        None, "the record's path (default results/bench/engine-loop-cost-<cpu>[-spec].json)"
    )
    fresh: bool = option(False, "discard a partial record with these settings", once=True)
    summarize: str | None = option(None, "recompute this record's summary from its cells (nothing timed)")

    def check(self) -> None:
        check_ints("threads", self.threads, low=1)
        self.settings()  # the settings check themselves, before anything loads

    def settings(self) -> Any:
        """The run's design (:class:`specdec.measure.loopcost.LoopCost`)."""
        from specdec.measure.loopcost import LoopCost

        given = self.options()
        given.pop("fresh"), given.pop("summarize")
        return LoopCost(**given)

    def run(self) -> int:
        from specdec.measure.benchargs import report
        from specdec.measure.loopcost import LoopCost, run_record, summarize
        from specdec.theory.recordio import write_record

        if self.summarize:  # the record's own settings, not the options'
            record, path = read_record(self.summarize), Path(self.summarize)
            if record.get("kind") != "engine-loop-cost":
                raise Refused(f"summarize: {path} is not an engine-loop-cost record")
            record["summary"] = summarize(record["cells"], LoopCost(**record["settings"]))
            write_record(path, record)
        else:
            record, path = run_record(self.settings(), command=self.command(), fresh=self.fresh)
        for threads, entry in record["summary"].items():
            print(f"{threads}: {entry}")
        report(path)
        return 0
