"""Issue 21: how far the "q4q8" lean mode's logits are from float32's (``specdec run q4q8-error``).

The measurement is :func:`specdec.measure.logiterror.logit_error`; :class:`LogitErrorRun` is the
program: the default target opened by the one engine builder in the lean modes ``float32`` (the
reference), ``q4_1`` and ``q4q8`` on one float32 load, and the record written to
``results/bench/q4q8-logit-error-<cpu>.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specdec.experiments.options import Program, option
from specdec.theory.checks import check_int

__all__ = ["MODES", "REFERENCE", "LogitErrorRun"]

#: The reference mode and the modes measured against it.
REFERENCE, MODES = "float32", ("q4_1", "q4q8")


@dataclass(frozen=True)
class LogitErrorRun(Program):
    """How far the "q4q8" lean mode's logits are from the float32 forward on the real GGUF (issue 21).

    The q4q8 mode keeps the GGUF's integers and half-float scales (its weight code error is reported
    as ``quantization_error``) and rounds each linear layer's input to 8 bits per block of 32; this
    measures what that costs in the logits: for the first held-out prompts of every task, prefilled
    through ``q4_1`` (float32 activations), ``q4q8`` and ``float32`` (the GGUF's dequantized weights),
    the largest |logit difference| from float32 and how often the argmax agrees, over every prompt
    position. Writes ``results/bench/q4q8-logit-error-<cpu>.json`` (``--out``).

        specdec run q4q8-error --prompts-per-task 1
    """

    name: ClassVar[str] = "q4q8-error"

    prompts_per_task: int = option(1, "held-out prompts of each task")
    threads: int | None = option(None, "the lean engines' threads (default: every usable core)")
    out: str | None = option(None, "the record's path (default results/bench/q4q8-logit-error-<cpu>.json)")

    def check(self) -> None:
        check_int("prompts_per_task", self.prompts_per_task, low=1)
        if self.threads is not None:
            check_int("threads", self.threads, low=1)

    def run(self) -> int:
        from pathlib import Path

        from specdec.engine import native
        from specdec.engine.builder import EngineSpec, open_engine
        from specdec.measure.benchargs import ROOT
        from specdec.measure.core import environment, write_result
        from specdec.measure.device import device_slug
        from specdec.measure.logiterror import logit_error
        from specdec.train.workloads import evaluation_prompts

        reference = open_engine(EngineSpec("lean", REFERENCE, self.threads))
        loaded = reference.base  # the float32 load every mode is built on
        prompts = evaluation_prompts(loaded.tokenizer, self.prompts_per_task)
        models = {REFERENCE: reference.model}
        for mode in MODES:
            models[mode] = open_engine(EngineSpec("lean", mode, self.threads), base=loaded).model
        per_mode = logit_error(models, prompts, MODES, reference=REFERENCE,
                               log=lambda line: print(line, flush=True))  # fmt: skip
        env = environment()
        record = {
            "kind": "q4q8-logit-error",
            "command": self.command(),
            "reference": "the lean float32 forward on the GGUF's dequantized weights",
            "prompts": [p["id"] for p in prompts],
            "modes": per_mode,
            "native_build": native.build_info("q4q8"),
        }
        slug = device_slug(env["device_name"])
        out = Path(self.out) if self.out else ROOT / "results" / "bench" / f"q4q8-logit-error-{slug}.json"
        path = write_result(out, record, env=env)
        print(f"-> {path}", flush=True)
        return 0
