"""Issue 12, item 3: adaptive draft lengths against every fixed gamma (``specdec run dynamic-gamma``).

The measurement is :mod:`specdec.measure.dynamicgamma` (the configurations, the paired passes, the
summary with intervals); :class:`DynamicGammaRun` is the program: its options, the lean target and the
distilled draft loaded (:func:`start_lean`), the record written to
``results/bench/dynamic-gamma-<cpu>-<threads>t.json``. :func:`start_lean` and :func:`check_draft` are
shared with the oracle's program (:mod:`specdec.experiments.oraclegamma`), which runs on the same
target and draft.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from specdec.experiments.options import Program, option
from specdec.theory.checks import check_float, check_int, check_ints

__all__ = ["DynamicGammaRun", "LeanDraftRun", "check_draft", "start_lean"]


def check_draft(name: str) -> None:
    """ValueError naming the field ``draft`` unless the distilled draft ``name`` is saved (checked before
    anything loads, :func:`specdec.train.draftnets.require_drafts`)."""
    from specdec.train.draftnets import require_drafts

    try:
        require_drafts([name])
    except (ValueError, FileNotFoundError) as exc:
        raise ValueError(f"draft: {exc}") from None


@dataclass(frozen=True)
class LeanDraftRun(Program):
    """The options of a program that decodes the default lean target with a saved distilled draft on
    evaluation prompts (dynamic-gamma, oracle-gamma), and their checks: a base, not a program."""

    threads: int = option(1, "the target's threads")
    mode: str = option("auto", "the lean mode, or auto (measured on this machine)")
    prompts_per_task: int = option(3, "evaluation prompts of each task")
    new_tokens: int = option(64, "tokens decoded per prompt")
    draft: str = option("distil-l1", "the saved distilled draft")
    out: str | None = option(
        None, "the record's path (default results/bench/<program>-<cpu>-<threads>t.json)"
    )

    def check(self) -> None:
        for name in ("threads", "prompts_per_task", "new_tokens"):
            check_int(name, getattr(self, name), low=1)
        check_draft(self.draft)


def start_lean(program: Any) -> Any:
    """What a lean-target program's run starts with (:class:`specdec.measure.benchargs.LeanRun`): the
    default target in ``program.mode`` at ``program.threads`` and the draft ``program.draft``
    (:func:`specdec.measure.benchargs.load_lean_with_draft`), said in one line; ``program.prompts_per_task``
    evaluation prompts per task; the environment; and ``program.command()``, the command the record
    keeps."""
    from specdec.measure import benchargs as ba
    from specdec.measure.core import environment
    from specdec.train.workloads import evaluation_prompts

    target, probe, base, draft_model = ba.load_lean_with_draft(program.mode, program.draft, program.threads)
    print(f"target: lean {target.mode}; draft {program.draft}; threads {program.threads}", flush=True)
    prompts = evaluation_prompts(base.tokenizer, program.prompts_per_task)
    env = environment(dtype=target.mode, device="cpu")
    return ba.LeanRun(program.command(), target, probe, base, draft_model, prompts, env)


@dataclass(frozen=True)
class DynamicGammaRun(LeanDraftRun):
    """Dynamic draft length (issue 12, item 3): adaptive policies against every fixed gamma, intervals.

    On the default target in the mode chosen for this machine (``--mode auto``,
    :func:`specdec.measure.modes.lean_model`), greedy decoding of ``--new-tokens`` tokens (EOS
    suppressed, equal lengths) per prompt:

    * plain decoding (the baseline of every speedup);
    * prompt lookup with fixed gamma in ``--gammas`` and with transformers' heuristic schedule;
    * the distilled draft ``--draft`` with fixed gammas, the heuristic schedule, and the
      confidence stop at each of ``--confidences`` (drafting up to the largest gamma).

    Every configuration runs on every prompt in each pass, configurations in a fresh order per
    prompt and pass (interleaved); the speedup of a configuration on a prompt is the median over
    passes of plain time / its time, and the record holds per configuration the geometric mean over
    prompts with a 95 % bootstrap interval (specdec.theory.intervals), mean drafts and tokens per
    round. The record: ``results/bench/dynamic-gamma-<cpu>-<threads>t.json`` (``--out``).

        specdec run dynamic-gamma --threads 1
    """

    name: ClassVar[str] = "dynamic-gamma"

    repeats: int = option(2, "passes over the prompts")
    gammas: tuple[int, ...] = option((1, 2, 3, 4, 6, 8), "the fixed draft lengths (each >= 1)")
    confidences: tuple[float, ...] = option((0.3, 0.6), "the draft's confidence stops (each in [0, 1))")

    def check(self) -> None:
        super().check()
        check_int("repeats", self.repeats, low=1)
        check_ints("gammas", self.gammas, low=1)
        for c in self.confidences:
            check_float("confidences", c, low=0.0, high=1.0, open_high=True)

    def settings(self) -> dict[str, Any]:
        """The record's settings: every option but ``out``, the gammas sorted without repeats."""
        given = {k: v for k, v in self.options().items() if k != "out"}
        return given | {"gammas": sorted(set(self.gammas)), "confidences": list(self.confidences)}

    def run(self) -> int:
        import time

        from specdec.measure import benchargs as ba
        from specdec.measure import dynamicgamma as dg

        settings = self.settings()
        lean = start_lean(self)
        target, probe = lean.target, lean.probe
        configs = dg.configurations(settings["gammas"], settings["confidences"], self.draft, target,
                                    lean.draft_model)  # fmt: skip
        t0 = time.time()
        rows = dg.run(target, configs, lean.prompts, new_tokens=self.new_tokens, repeats=self.repeats)
        record = {
            "kind": "dynamic-gamma",
            "command": lean.command,
            "settings": settings,
            "mode": target.mode,
            "mode_probe": None if probe is None else {k: v for k, v in probe.items() if k not in ("cached",)},
            "rows": rows,
            "summary": dg.summarize(rows, list(configs)),
            "wall_s": time.time() - t0,
        }
        ba.write_bench_record(record, lean.env, self.out, "dynamic-gamma", self.threads)
        return 0
