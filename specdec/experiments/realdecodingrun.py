"""``specdec run real-decoding``: the program of Part IV's real-decoding measurement (its options, their
quick and full values), whose measurement is :mod:`specdec.experiments.realdecoding`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from specdec.experiments.options import Program, option, option_name
from specdec.experiments.realdecoding import ROOT, RealDecoding, run
from specdec.theory.checks import check_choice
from specdec.train.workloads import TASKS

__all__ = ["FULL", "QUICK", "RealDecodingRun", "full_settings"]


def _log(line: str) -> None:
    print(line, flush=True)


#: The full run's values of the options --quick changes.
FULL: dict[str, Any] = {
    "prompts": 8,
    "new_tokens": 48,
    "sweep": (1, 2, 4, 6, 8),
    "lenience": (1.0, 0.5, 0.3, 0.1),
    "verify_repeats": 15,
}
#: What --quick changes: a CI-sized run (a value given on the command line wins).
QUICK: dict[str, Any] = {
    "prompts": 3,
    "new_tokens": 32,
    "sweep": (1, 2, 4, 6),
    "lenience": (1.0, 0.3),
    "verify_repeats": 5,
}


def _listed(values: Sequence[Any]) -> str:
    """A list option as the record's settings store it: comma-separated, a whole number without its
    ``.0`` (``(1.0, 0.3)`` -> ``"1,0.3"``, as the command line wrote it)."""
    return ",".join(repr(v).removesuffix(".0") if isinstance(v, float) else str(v) for v in values)


@dataclass(frozen=True)
class RealDecodingRun(Program):
    """Real speculative decoding on SmolLM2: alpha, c, expected and measured speedups, with intervals.

    The measurement behind the chapter "Real speculative decoding on SmolLM2"
    (notebooks/src/real-decoding.md). An interrupted run resumes: run the same command again (the
    state is saved after every cell in <out>/<mode>-<threads>t[-quick].partial.json; --fresh discards
    it).

        specdec run real-decoding --quick    # the CI-sized record (minutes)
        specdec run real-decoding            # the full record (see the chapter for its runtime)

    How it measures (issue 11):

    * Engine. The target runs in the lean mode chosen by measuring this machine (of the modes
      specdec.engine.lean.MODES this machine can run, the one with the lowest single-step time T(1);
      the probe is recorded), or the mode --mode names (a lean mode, or hf-float32 / hf-bfloat16:
      transformers, e.g. on a GPU). Early exits are views of the target; a distilled draft runs in
      the lean engine when the target does (the faster of specdec.measure.modes.DRAFT_MODES), else
      through transformers beside it.
    * Equal lengths. Every generation, plain or speculative, has exactly --new-tokens new tokens:
      decoding does not stop at EOS (the target writes on past its end-of-turn token), so the
      tokens/s of plain and speculative decoding compare the same amount of work.
    * Cells. A cell is (temperature, task, prompt); --prompts prompts a task, temperatures 0 and 1.
      A cell runs --repeats repetitions; each runs plain decoding and every timed drafter once,
      plain first in even repetitions and last in odd ones, the drafters in a fresh seeded order.
      All runs of a cell share one sampling seed, so the repetitions repeat the same computation
      (checked: identical tokens). The time of a run is its decode time (prefill excluded).
    * Alpha. After each cell, the paper's alpha (teacher-forced beta) of every drafter, the timed
      ones and the --alpha-only ones, on the plain generation.
    * Extras on --sweep-task at temperature 0, cell by cell with the same interleaving: the gamma
      sweep (prompt lookup and the model draft with the highest measured speedup there) and argmax
      lenience (Appendix A.5) of that model draft at --gamma.
    * Summary. Per (temperature, task, drafter): the measured speedup, the geometric mean over
      prompts of plain time / speculative time (each the median over repetitions), with its 95 %
      bootstrap interval over prompts and a verdict; alpha, c, v, Theorem 3.8 and the
      verify-corrected model, and measured/expected ratios with intervals that re-estimate alpha
      and c on every resample; the pooled round counts and the gap's factors
      (specdec.analysis.realrun, specdec.analysis.realtables).

    Writes <out>/<device>-<mode>-<threads>t[-quick].json (command, settings, the machine and
    commit), the generations, and CSVs of the tables. A quick run also records its estimate of the
    full run's duration.
    """

    name: ClassVar[str] = "real-decoding"

    quick: bool = option(False, "a CI-sized run: prompts 3, new tokens 32, sweep 1,2,4,6, lenience 1,0.3, "
                         "verify repeats 5; a value given on the command line wins over these")  # fmt: skip
    prompts: int | None = option(None, "evaluation prompts per task (default 8; quick 3)")
    new_tokens: int | None = option(None, "new tokens of every generation (default 48; quick 32)")
    repeats: int = option(3, "timed repetitions per cell")
    gamma: int = option(4, "fixed gamma of the tables")
    sweep: tuple[int, ...] | None = option(None, "gammas of the sweep (default 1,2,4,6,8; quick 1,2,4,6)")
    sweep_drafters: tuple[str, ...] = option(
        ("auto",),
        "drafters of the gamma sweep; auto: lookup and the timed model draft with the highest measured "
        "speedup on the sweep task at temperature 0",
    )
    sweep_task: str = option("code", "the task of the gamma sweep and of argmax lenience", choices=TASKS)
    lenience: tuple[float, ...] | None = option(
        None, "argmax lenience values (A.5; default 1,0.5,0.3,0.1; quick 1,0.3); empty: skip"
    )
    timed: tuple[str, ...] = option(
        ("lookup", "bigram", "drafts"),
        "drafters timed against plain decoding, drafter registry specs: lookup, unigram, bigram, "
        "early-exit:N, draft:NAME, and 'drafts' (draft:NAME of every trained draft asked for)",
    )
    alpha_only: tuple[str, ...] = option(
        ("early-exit:8", "early-exit:20", "early-exit:28", "unigram"),
        "drafters whose alpha is measured (teacher forcing) but which are not timed",
    )
    trained: bool = option(True, "the trained drafts (specdec.train.draftnets) among the drafters")
    drafts: tuple[str, ...] | None = option(None, "trained drafts (default: every saved one)")
    mode: str = option(
        "auto",
        "auto (the mode probe: the lean mode with the fastest step here), a lean mode "
        "(specdec.engine.lean.MODES), or transformers' hf-float32, hf-bfloat16",
    )
    dtype: str | None = option(
        None,
        "the option of records made before --mode existed (results/real/cpu-bfloat16-1t-quick.json): "
        "--dtype D runs as --mode hf-D, transformers in D, as those runs did; the method has changed "
        "since (commit 238e00e), so the numbers are comparable with today's records, not with that one",
        metavar="{float32,bfloat16}",
    )
    threads: int = option(1, "torch threads, >= 1 (1, as the records)")
    seed: int = option(0, "the seed of sampling and of the run order")
    verify_repeats: int | None = option(None, "repetitions of the verify-cost curve (default 15; quick 5)")
    ngram_data: tuple[str, ...] | None = option(
        None, "gen-data folders for the n-gram tables (default: every data/distill* folder)"
    )
    fresh: bool = option(False, "discard a partial run instead of resuming it", once=True)
    out: str | None = option(
        None, "folder of the record, its CSVs and the partial state (default results/real)"
    )

    def check(self) -> None:
        if self.dtype is not None:
            check_choice("dtype", self.dtype, ("float32", "bfloat16"))
        self.settings()  # the run's settings check themselves, before anything loads

    def settings(self, say: Callable[[str], None] | None = None) -> RealDecoding:
        """The run's :class:`RealDecoding` (its checks: a ValueError naming the field): --quick's values
        (:data:`QUICK`, else :data:`FULL`) where an option is not given, a given one winning (and
        ``say`` told so); --dtype D as --mode hf-D; lists as the record stores them (comma-separated)."""
        values: dict[str, Any] = {}
        for key, value in (QUICK if self.quick else FULL).items():
            given = getattr(self, key)
            values[key] = value if given is None else given
            if given is not None and self.quick and given != value and say is not None:
                shown = _listed(given) if isinstance(given, tuple) else given
                quick = _listed(value) if isinstance(value, tuple) else value
                say(
                    f"--quick with {option_name(key)} {shown}: the value given wins (quick would use {quick})"
                )
        mode = self.mode
        if self.dtype is not None:
            if self.mode != "auto":
                raise ValueError(
                    f"dtype (the old name) and mode exclude each other; give mode hf-{self.dtype}"
                )
            mode = f"hf-{self.dtype}"
        folders = self.ngram_data
        if folders is None:
            folders = tuple(str(d) for d in sorted(ROOT.glob("data/distill*")) if d.is_dir())
        try:
            return RealDecoding(
                prompts=values["prompts"], new_tokens=values["new_tokens"], sweep=_listed(values["sweep"]),
                lenience=_listed(values["lenience"]), verify_repeats=values["verify_repeats"],
                quick=self.quick, repeats=self.repeats, gamma=self.gamma, sweep_task=self.sweep_task,
                sweep_drafters=_listed(self.sweep_drafters), timed=_listed(self.timed),
                alpha_only=_listed(self.alpha_only),
                drafts=None if self.drafts is None else _listed(self.drafts), no_trained=not self.trained,
                mode=mode, threads=self.threads, seed=self.seed,
                ngram_data=list(folders), out=self.out or str(ROOT / "results" / "real"), fresh=self.fresh,
            )  # fmt: skip
        except ValueError as exc:  # the settings' one field that is an option by another name
            raise ValueError(str(exc).replace("no_trained", "--no-trained")) from None

    def run(self) -> int:
        started = time.perf_counter()
        settings = self.settings(say=_log)
        run(
            settings,
            command=self.command(),
            started=started,
            full=full_settings() if settings.quick else None,
        )
        return 0


def full_settings() -> dict[str, Any]:
    """The full run's defaults (what a run without --quick does), for the quick run's estimate."""
    d = RealDecodingRun().settings()  # the defaults, with the package's drafts
    return {
        "prompts": d.prompts,
        "new_tokens": d.new_tokens,
        "repeats": d.repeats,
        "timed": d.timed_names,
        "sweep": d.sweep_gammas,
        "lenience": d.lenience_values,
    }
