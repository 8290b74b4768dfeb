"""The lean q4q8 engine's verify curve before and after a change of its C kernels, and its floor (issue 40).

A thin wrapper: the measurement is :func:`specdec.measure.verifykernels.run_record` (its module docstring
says what runs and how). One process loads the library of ``--before`` (a commit: its C sources built on
this machine) and this checkout's, and times both interleaved: v(k) for k = 1 .. 33 as chains and trees
after a 200-token context at 1 and 2 threads, their logits compared bit for bit, each library's phase
clocks, plain greedy decoding by each, the machine's int8 / AMX / float peaks and bandwidth, and the floor
per k. Writes ``results/bench/engine-verify-kernels-<cpu>.json`` (``--out``); an interrupted run with the
same settings resumes (``--fresh`` discards it). About 10 minutes on a 2-core machine.

    python benchmarks/verify_kernels.py --before 747fa73
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec.measure import benchargs as ba  # noqa: E402
from specdec.measure.verifykernels import VerifyKernels, run_record  # noqa: E402


def _ints(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out += range(int(lo), int(hi) + 1)
        else:
            out.append(int(part))
    return tuple(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = argparse.Namespace(**{f.name: f.default for f in dataclasses.fields(VerifyKernels)})
    ap.add_argument("--before", default=d.before, help="the commit whose C kernels are the 'before' library")
    ap.add_argument("--context", type=int, default=d.context)
    ap.add_argument("--ks", type=_ints, default=d.ks, help="call sizes, e.g. 1-33 or 1,2,4,8")
    ap.add_argument("--threads", type=_ints, default=d.threads, help="thread counts, e.g. 1,2")
    ap.add_argument("--passes", type=int, default=d.passes)
    ap.add_argument("--profile-ks", type=_ints, default=d.profile_ks)
    ap.add_argument("--profile-repeats", type=int, default=d.profile_repeats)
    ap.add_argument("--decode-tokens", type=int, default=d.decode_tokens)
    ap.add_argument("--decode-repeats", type=int, default=d.decode_repeats)
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--out", default=None)
    ap.add_argument("--fresh", action="store_true", help="discard a partial record with these settings")
    args = ap.parse_args(argv)
    given = {k: v for k, v in vars(args).items() if k != "fresh"}
    args.settings = ba.build_settings(VerifyKernels, given, ap.error)  # checked before anything loads
    return args


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    command = ba.command_line("verify_kernels.py", argv)
    record, path = run_record(args.settings, command=command, fresh=args.fresh)
    for threads, entry in record["summary"].items():
        print(f"{threads}: " + "; ".join(f"{k}={v}" for k, v in entry.items() if k != "bit_equal"))
    ba.report(path)
    return path


if __name__ == "__main__":
    main()
