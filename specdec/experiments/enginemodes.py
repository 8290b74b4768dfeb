"""Issue 10: the engine benchmark's full run as a record (``specdec run engine-modes``).

The measurement is :func:`specdec.measure.enginebench.run_bench` (its docstring lists the engines and
steps), which ``specdec bench`` runs too; :class:`EngineModesRun` runs every step with the full run's
settings (:class:`specdec.measure.enginebench.BenchSettings`' defaults, as ``specdec bench --full``)
and writes the record ``results/bench/engine-modes-<cpu>-<threads>t.json`` with how busy other
processes kept the machine meanwhile (``machine_load``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from specdec.experiments.options import Program, option
from specdec.measure.enginebench import ALL_ENGINES, BenchSettings, engine_list

__all__ = ["EngineModesRun"]

#: The full run's defaults: BenchSettings' own (read from its fields: building one resolves the engines).
_FULL = {f.name: f.default for f in dataclasses.fields(BenchSettings)}


@dataclass(frozen=True)
class EngineModesRun(Program):
    """The engine benchmark (issue 10): every engine side by side on the same machine and threads.

    The measurement is :func:`specdec.measure.enginebench.run_bench` (its docstring lists the engines
    and steps), which ``specdec bench`` runs too. This program runs the full benchmark (every step,
    the mode probe re-measured unless ``--cached-probe``) and writes one JSON record (``--out``,
    default ``results/bench/engine-modes-<cpu>-<threads>t.json``) with the machine named and how
    busy other processes kept it meanwhile (``machine_load``, :func:`specdec.measure.runner.load_during`).
    About 10 minutes with the defaults on 1 thread.

        specdec run engine-modes --threads 1
    """

    name: ClassVar[str] = "engine-modes"

    threads: int = option(_FULL["threads"], "the engines' threads")
    engines: str | None = option(
        None, f"comma list from {', '.join(ALL_ENGINES)} (default: every available one)", metavar="LIST"
    )
    prompts_per_task: int = option(_FULL["prompts_per_task"], "evaluation prompts of each task")
    new_tokens: int = option(_FULL["new_tokens"], "tokens decoded per prompt")
    gamma: int = option(_FULL["gamma"], "prompt lookup's draft length")
    repeats: int = option(_FULL["repeats"], "decoding passes")
    ks: tuple[int, ...] = option(tuple(_FULL["ks"]), "call sizes k of the verify curve, 1 among them")
    verify_repeats: int = option(_FULL["verify_repeats"], "timed passes of the verify curve (>= 2)")
    out: str | None = option(
        None, "the record's path (default results/bench/engine-modes-<cpu>-<threads>t.json)"
    )
    cached_probe: bool = option(False, "read this machine's cached mode probe instead of re-timing")

    def check(self) -> None:
        self.settings(engine_names=())  # BenchSettings' checks (the counts, ks) before anything loads
        engine_list(self.engines)  # an unknown name; which engines this machine runs is asked in run()

    def settings(self, engine_names: tuple[str, ...] | None) -> Any:
        """The benchmark's settings (:class:`specdec.measure.enginebench.BenchSettings`: the record's
        ``settings``) with the engines that run."""
        given = {k: v for k, v in self.options().items() if k not in ("out", "cached_probe")}
        return BenchSettings(**given, engine_names=engine_names)

    def run(self) -> int:
        import time

        from specdec.measure import benchargs as ba
        from specdec.measure.enginebench import resolve_engines, run_bench
        from specdec.measure.runner import cpu_counters, load_during

        settings = self.settings(resolve_engines(self.engines))
        before, start = cpu_counters(), time.perf_counter()
        record, env = run_bench(settings, command=self.command(), refresh_probe=not self.cached_probe)
        wall_s = time.perf_counter() - start
        record["machine_load"] = load_during(before, cpu_counters(), wall_s, self.threads)
        ba.write_bench_record(record, env, self.out, "engine-modes", self.threads)
        return 0
