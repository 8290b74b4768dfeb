"""Real speculative decoding on SmolLM2: alpha, c, expected and measured speedups, with intervals.

The measurement behind the chapter "Real speculative decoding on SmolLM2"
(notebooks/src/real-decoding.md).

    python benchmarks/real_decoding.py --quick    # the CI-sized record (minutes)
    python benchmarks/real_decoding.py            # the full record (see the chapter for its runtime)

Run it again with the same arguments after an interruption: it resumes after the last finished
cell (the state is saved after every cell in ``<tag>.partial.json``; ``--fresh`` discards it).

How it measures (issue 11):

* **Engine.** The target runs in the lean mode chosen by measuring this machine
  (:func:`specdec.measure.modes.lean_model` with ``"auto"``: of the modes :data:`specdec.engine.lean.MODES`
  this machine can run, :func:`specdec.measure.modes.available_modes`, the one with the lowest
  single-step time T(1); the probe is recorded), or the mode ``--mode`` names (a lean mode, or
  ``hf-float32``/``hf-bfloat16``: transformers, e.g. on a GPU). Early exits are views of the
  target; a distilled draft runs in the lean engine when the target does
  (:func:`specdec.measure.modes.lean_draft`: the faster of :data:`specdec.measure.modes.DRAFT_MODES`), else
  through transformers beside it.
* **Equal lengths.** Every generation, plain or speculative, has exactly ``--new-tokens`` new
  tokens: decoding does not stop at EOS (the target writes on past its end-of-turn token), so
  the tokens/s of plain and speculative decoding compare the same amount of work.
* **Cells.** A cell is (temperature, task, prompt); ``--prompts`` prompts a task
  (:func:`specdec.train.workloads.evaluation_prompts`), temperatures 0 and 1. A cell runs
  ``--repeats`` repetitions; each runs plain decoding and every timed drafter once, plain first
  in even repetitions and last in odd ones, the drafters in a fresh seeded order: the order
  alternates between plain and speculative. All runs of a cell share one sampling seed, so the
  repetitions repeat the same computation (checked: identical tokens). The time of a run is its
  decode time (prefill excluded).
* **Alpha.** After each cell, the paper's alpha (teacher-forced beta, :mod:`specdec.measure.acceptance`)
  of every drafter, the timed ones and the ``--alpha-only`` ones, on the plain generation.
* **Extras** on ``--sweep-task`` at temperature 0, cell by cell with the same interleaving: the
  gamma sweep (prompt lookup and the model draft with the highest measured speedup there) and
  argmax lenience (Appendix A.5) of that model draft at ``--gamma``.
* **Summary.** Per (temperature, task, drafter): the measured speedup, the geometric mean over
  prompts of plain time / speculative time (each the median over repetitions), with its 95 %
  bootstrap interval over prompts (:func:`specdec.theory.intervals.paired_speedup`) and a verdict; alpha,
  c (:func:`specdec.engine.stats.cost_coefficient`), v, Theorem 3.8 and the verify-corrected model,
  and measured/expected ratios with intervals that re-estimate alpha and c on every resample
  (:func:`specdec.analysis.realrun.unit_bootstrap`); the pooled round counts
  (:func:`specdec.analysis.realrun.pool_rounds`) and the gap's factors
  (:func:`specdec.analysis.realrun.speedup_gap`).

The program is :mod:`specdec.experiments.realdecoding` (its cells run through the one resumable runner,
:mod:`specdec.measure.runner`); this script parses the arguments and names the paths.

Writes ``results/real/<device>-<mode>-<threads>t[-quick].json`` (command, settings, the
machine and commit via :func:`specdec.measure.core.environment`), the generations, and CSVs of
the tables. A quick run also records its estimate of the full run's duration.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec.engine.lean import MODES  # noqa: E402
from specdec.experiments import realdecoding as realbench  # noqa: E402
from specdec.experiments.realdecoding import HF_MODES  # noqa: E402
from specdec.measure import benchargs as ba  # noqa: E402

#: The full run's values of the settings --quick changes.
FULL = {
    "prompts": 8,
    "new_tokens": 48,
    "sweep": "1,2,4,6,8",
    "lenience": "1,0.5,0.3,0.1",
    "verify_repeats": 15,
}
#: What --quick changes: a CI-sized run (a value given on the command line wins).
QUICK = {
    "prompts": 3,
    "new_tokens": 32,
    "sweep": "1,2,4,6",
    "lenience": "1,0.3",
    "verify_repeats": 5,
}
# -- 1. arguments -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> realbench.RealDecoding:
    """The run's settings, checked before anything is loaded (a missing draft is an error here)."""
    from specdec.train.workloads import TASKS

    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0]
        + " An interrupted run resumes: run the same command again (the state is saved after every "
        "cell in <out>/<mode>-<threads>t[-quick].partial.json; --fresh discards it).",
        epilog="python benchmarks/real_decoding.py --quick  (the CI-sized record, minutes); without "
        "--quick: the full record. The lean modes are specdec.engine.lean.MODES.",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"a CI-sized run: {QUICK}; a value given on the command line wins over these",
    )
    ap.add_argument(
        "--prompts", type=int, default=None, help="evaluation prompts per task (default 8; quick 3)"
    )
    ap.add_argument(
        "--new-tokens", type=int, default=None, help="new tokens of every generation (default 48; quick 32)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="timed repetitions per cell (default 3)")
    ap.add_argument("--gamma", type=int, default=4, help="fixed gamma of the tables (default 4)")
    ap.add_argument("--sweep", default=None, help="gammas of the sweep (default 1,2,4,6,8; quick 1,2,4,6)")
    ap.add_argument(
        "--sweep-drafters",
        default="auto",
        help="comma-separated drafters of the gamma sweep; auto: lookup and the timed model draft "
        "with the highest measured speedup on the sweep task at temperature 0",
    )
    ap.add_argument("--sweep-task", default="code", choices=TASKS)
    ap.add_argument(
        "--lenience",
        default=None,
        help="argmax lenience values (A.5; default 1,0.5,0.3,0.1; quick 1,0.3); empty: skip",
    )
    ap.add_argument(
        "--timed",
        default="lookup,bigram,drafts",
        help="drafters timed against plain decoding: lookup, unigram, bigram, ee-N, and 'drafts' "
        "(every trained draft asked for)",
    )
    ap.add_argument(
        "--alpha-only",
        default="ee-8,ee-20,ee-28,unigram",
        help="drafters whose alpha is measured (teacher forcing) but which are not timed",
    )
    ap.add_argument("--no-trained", action="store_true", help="no trained drafts (specdec.train.draftnets)")
    ap.add_argument("--drafts", default=None, help="comma-separated trained drafts (default: all saved)")
    ap.add_argument(
        "--mode",
        default="auto",
        help=f"auto (the mode probe: the lean mode with the fastest step here), a lean mode "
        f"({', '.join(MODES)}), or transformers' {', '.join(HF_MODES)}",
    )
    ap.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default=None,
        help="the option of records made before --mode existed (results/real/cpu-bfloat16-1t-quick.json): "
        "--dtype D runs as --mode hf-D, transformers in D, as those runs did; the method has changed "
        "since (commit 238e00e), so the numbers are comparable with today's records, not with that one",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch threads, >= 1 (default 1, as the records)")
    ap.add_argument(
        "--seed", type=int, default=0, help="the seed of sampling and of the run order (default 0)"
    )
    ap.add_argument(
        "--verify-repeats",
        type=int,
        default=None,
        help="repetitions of the verify-cost curve (default 15; quick 5)",
    )
    ap.add_argument(
        "--ngram-data",
        nargs="+",
        default=[str(d) for d in sorted(ROOT.glob("data/distill*")) if d.is_dir()],
        help="gen-data folders for the n-gram tables (default: every data/distill* folder)",
    )
    ap.add_argument("--fresh", action="store_true", help="discard a partial run instead of resuming it")
    ap.add_argument(
        "--out",
        default=str(ROOT / "results" / "real"),
        help="folder of the record, its CSVs and the partial state (default results/real)",
    )
    args = ap.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        given = getattr(args, key)
        if given is None:
            setattr(args, key, value)
        elif args.quick and given != value:
            flag = "--" + key.replace("_", "-")
            print(
                f"--quick with {flag} {given}: the value given wins (quick would use {value})",
                file=sys.stderr,
            )
    if args.dtype is not None:
        if args.mode != "auto":
            ap.error(f"--dtype (the old name) and --mode exclude each other; give --mode hf-{args.dtype}")
        args.mode = f"hf-{args.dtype}"
    given = {k: v for k, v in vars(args).items() if k not in ("dtype",)}
    return ba.build_settings(realbench.RealDecoding, given, ap.error)  # the settings check themselves


def full_settings() -> dict[str, Any]:
    """The full run's defaults (what a run without --quick does), for the quick run's estimate."""
    d = parse_args([])  # the defaults, with the package's drafts
    return {
        "prompts": d.prompts,
        "new_tokens": d.new_tokens,
        "repeats": d.repeats,
        "timed": d.timed_names,
        "sweep": d.sweep_gammas,
        "lenience": d.lenience_values,
    }


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    command = "python benchmarks/real_decoding.py " + " ".join(sys.argv[1:] if argv is None else argv)
    realbench.run(
        settings,
        command=command,
        started=time.perf_counter(),
        full=full_settings() if settings.quick else None,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
