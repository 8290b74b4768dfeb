"""The lean q4q8 engine's verify curve before and after a change of its C kernels (issue 40): the program.

``specdec run verify-kernels`` (:class:`VerifyKernelsRun`) takes the options; the measurement, its
design (:class:`specdec.measure.verifykernels.VerifyKernels`) and its record are
:mod:`specdec.measure.verifykernels`' (:func:`~specdec.measure.verifykernels.run_record`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from specdec.experiments.options import Program, option
from specdec.theory.checks import check_ints

__all__ = ["VerifyKernelsRun"]


@dataclass(frozen=True)
class VerifyKernelsRun(Program):
    """The lean q4q8 engine's verify curve before and after a change of its C kernels, and its floor.

    The measurement is :func:`specdec.measure.verifykernels.run_record` (its module docstring says what
    runs and how). One process loads the library of ``--before`` (a commit: its C sources built on this
    machine) and this checkout's, and times both interleaved: v(k) for k = 1 .. 33 as chains and trees
    after a 200-token context at 1 and 2 threads, their logits compared bit for bit, each library's
    phase clocks, plain greedy decoding by each, the machine's int8 / AMX / float peaks and bandwidth,
    and the floor per k. Writes ``results/bench/engine-verify-kernels-<cpu>.json`` (``--out``); an
    interrupted run with the same settings resumes (``--fresh`` discards it). About 10 minutes on a
    2-core machine.

        specdec run verify-kernels --before 747fa73
        specdec run verify-kernels --ks 1,2,4,8 --profile-ks 1,8 --threads 1 --passes 3   # shorter
    """

    name: ClassVar[str] = "verify-kernels"

    before: str = option("747fa73", "the commit whose C kernels are the 'before' library")
    context: int = option(200, "cached tokens before the timed calls")
    ks: tuple[int, ...] = option(tuple(range(1, 34)), "call sizes k (rows of one forward)")
    threads: tuple[int, ...] = option((1, 2), "thread counts")
    passes: int = option(15, "passes over every (library, shape, k) of the verify curves")
    profile_ks: tuple[int, ...] = option((1, 2, 4, 8, 16, 33), "the k of the phase-clock profiles")
    profile_repeats: int = option(5, "profiled calls per k and library")
    decode_tokens: int = option(48, "tokens of each plain greedy decoding")
    decode_repeats: int = option(7, "plain greedy decodings per library")
    seed: int = option(0, "the seed of the context and of the passes' orders")
    out: str | None = option(
        None, "the record's path (default results/bench/engine-verify-kernels-<cpu>.json)"
    )
    fresh: bool = option(False, "discard a partial record with these settings", once=True)

    def check(self) -> None:
        for name in ("ks", "threads", "profile_ks"):
            check_ints(name, getattr(self, name), low=1)
        self.settings()  # the settings check themselves, before anything loads

    def settings(self) -> Any:
        """The run's design (:class:`specdec.measure.verifykernels.VerifyKernels`, its record's
        ``settings`` and resume key)."""
        from specdec.measure.verifykernels import VerifyKernels

        given = self.options()
        given.pop("fresh")
        return VerifyKernels(**given)

    def run(self) -> int:
        from specdec.measure.benchargs import report
        from specdec.measure.verifykernels import run_record

        record, path = run_record(self.settings(), command=self.command(), fresh=self.fresh)
        for threads, entry in record["summary"].items():
            print(f"{threads}: " + "; ".join(f"{k}={v}" for k, v in entry.items() if k != "bit_equal"))
        report(path)
        return 0
