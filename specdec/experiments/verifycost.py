"""The verify-cost curve T(k)/T(1) of the default target (``specdec run verify-cost``).

The measurement is :func:`specdec.measure.core.verify_cost_curve`; :class:`VerifyCostRun` is the program:
transformers' model in a dtype opened by the one engine builder, the curve printed and, with
``--out``, written as a record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specdec.engine.builder import HF_DTYPES
from specdec.experiments.options import Program, option
from specdec.theory.checks import check_int

__all__ = ["VerifyCostRun"]


@dataclass(frozen=True)
class VerifyCostRun(Program):
    """The verify-cost curve T(k)/T(1) of the default target (Theorem 3.8 assumes it is 1).

    T(k) is the median time of one forward over k new tokens on a KV cache of ``--prefix``
    tokens, the ks interleaved across repetitions (specdec.measure.core.verify_cost_curve).
    The curve is printed; ``--out`` also writes it as a JSON record.

        specdec run verify-cost --dtype float32 --threads 2 --prefix 128 --kmax 16
    """

    name: ClassVar[str] = "verify-cost"

    dtype: str = option("float32", "transformers' dtype of the target", choices=HF_DTYPES)
    threads: int = option(2, "torch's threads")
    prefix: int = option(128, "tokens in the KV cache before the timed call")
    kmax: int = option(16, "the curve's k = 1..kmax")
    repeats: int = option(20, "timed repetitions of every k")
    warmup: int = option(2, "untimed calls before the timing")
    out: str | None = option(None, "write a JSON record here (default: print only)")

    def check(self) -> None:
        for name in ("threads", "kmax", "repeats"):
            check_int(name, getattr(self, name), low=1)
        check_int("prefix", self.prefix, low=1, note="a forward on a cache of at least one token")
        check_int("warmup", self.warmup, low=0)

    def run(self) -> int:
        from specdec.engine.builder import EngineSpec, open_engine
        from specdec.measure.core import environment, verify_cost_curve, write_result

        lm = open_engine(EngineSpec("hf", self.dtype, self.threads, device="cpu")).base  # pins the threads
        print(f"load: {lm.source} in {lm.load_s:.1f} s")
        curve = verify_cost_curve(
            lm.model, self.prefix, range(1, self.kmax + 1), repeats=self.repeats, warmup=self.warmup
        )
        env = environment(model=lm.model)
        print(f"{env['device_name']}, {self.dtype}, threads={env['threads']}, prefix={self.prefix}")
        print(f"{'k':>3} {'median ms':>10} {'IQR ms':>8} {'T(k)/T(1)':>10}")
        for row in curve.rows():
            print(f"{row['k']:>3} {row['median_ms']:10.2f} {row['iqr_ms']:8.2f} {row['ratio']:10.2f}")
        if self.out:
            record = {
                "benchmark": "verify_cost",
                "command": self.command(),
                "dtype": self.dtype,
                "threads": self.threads,
                "curve": curve,
            }
            write_result(self.out, record, env=env)
        return 0
