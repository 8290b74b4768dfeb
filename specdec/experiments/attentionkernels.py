"""Eager against sdpa attention for one single-token decode step of the default target: the program.

``specdec run attention-kernels`` (:class:`AttentionKernelsRun`) times both kernels interleaved through
:func:`specdec.measure.core.forward_times`; the faster one is :data:`specdec.engine.models.DEFAULT_ATTN`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specdec.experiments.options import Program, option
from specdec.theory.checks import check_int

__all__ = ["AttentionKernelsRun"]


@dataclass(frozen=True)
class AttentionKernelsRun(Program):
    """Eager vs sdpa attention for one single-token decode step of the default target.

    Loads SmolLM2-135M-Instruct twice (from the weight cache after the first run), pins the threads,
    and times one forward over 1 new token on a KV cache of ``--prefix`` tokens for both kernels,
    interleaved (specdec.measure.core.forward_times). Prints medians and IQRs; with ``--out`` also
    writes a results file. The faster kernel is specdec.engine.models.DEFAULT_ATTN.

        specdec run attention-kernels --threads 2 --prefix 128 --repeats 200
    """

    name: ClassVar[str] = "attention-kernels"

    threads: int = option(2, "threads of the forward calls")
    dtype: str = option("float32", "the target's dtype")
    prefix: int = option(128, "cached tokens before the timed step")
    repeats: int = option(200, "timed steps per kernel")
    warmup: int = option(20, "untimed steps per kernel first")
    out: str | None = option(None, "write a JSON results file here")

    def check(self) -> None:
        check_int("threads", self.threads, low=1)
        check_int("repeats", self.repeats, low=1)
        check_int("prefix", self.prefix, low=1)  # a forward on a cache of at least one token
        check_int("warmup", self.warmup, low=0)

    def run(self) -> int:
        from specdec.engine.builder import EngineSpec, open_engine
        from specdec.engine.models import set_threads
        from specdec.measure.core import forward_times, write_result

        models = {}
        for attn in ("eager", "sdpa"):  # the builder's transformers engine, one per attention kernel
            model = open_engine(EngineSpec("hf", self.dtype, self.threads, device="cpu")).base.model
            model.set_attn_implementation(attn)
            models[attn] = model
        threads = set_threads(self.threads)
        times = forward_times(models, self.prefix, (1,), repeats=self.repeats, warmup=self.warmup)
        print(f"threads={threads['threads']} dtype={self.dtype} prefix={self.prefix} repeats={self.repeats}")
        print(f"{'kernel':>8} {'median ms':>10} {'IQR ms':>8}")
        for (attn, _), t in times.items():
            print(f"{attn:>8} {1e3 * t.median_s:10.2f} {1e3 * t.iqr_s:8.2f}")
        if self.out:
            record = {
                "benchmark": "attention_kernels",
                "command": self.command(),
                "dtype": self.dtype,
                "prefix_len": self.prefix,
                "threads": self.threads,
                "timings": {attn: t for (attn, _), t in times.items()},
            }
            write_result(self.out, record, env=None)
        return 0
