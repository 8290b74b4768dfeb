"""How far the "q4q8" lean mode's logits are from the float32 forward on the real GGUF (issue #21).

The q4q8 mode keeps the GGUF's integers and half-float scales (its weight code error is reported
as ``quantization_error``) and rounds each linear layer's input to 8 bits per block of 32; this
measures what that costs in the logits: for the first held-out prompts of every task, prefilled
through ``q4_1`` (float32 activations), ``q4q8`` and ``float32`` (the GGUF's dequantized weights),
the largest |logit difference| from float32 and how often the argmax agrees, over every prompt
position. Writes ``results/bench/q4q8-logit-error-<cpu>.json``.

    python benchmarks/q4q8_error.py --prompts-per-task 1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> Path:
    from specdec.engine import native
    from specdec.engine.lean import LeanLlama
    from specdec.engine.models import load_target
    from specdec.measure import benchargs as ba
    from specdec.measure.core import environment, write_result
    from specdec.measure.device import device_slug
    from specdec.measure.logiterror import logit_error
    from specdec.train.workloads import evaluation_prompts

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts-per-task", type=int, default=1)
    ap.add_argument(
        "--threads", type=int, default=None, help="the q4q8 forward's threads (default: all usable)"
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    ba.check_counts(ap, args, ("prompts_per_task",) + (("threads",) if args.threads is not None else ()))
    loaded = load_target("float32", quiet=True)
    prompts = evaluation_prompts(loaded.tokenizer, args.prompts_per_task)
    models = {
        mode: LeanLlama(loaded.model, mode, threads=args.threads) for mode in ("float32", "q4_1", "q4q8")
    }
    per_mode = logit_error(models, prompts, ("q4_1", "q4q8"), log=lambda line: print(line, flush=True))
    env = environment()
    record = {
        "kind": "q4q8-logit-error",
        "command": ba.command_line("q4q8_error.py", argv),
        "reference": "the lean float32 forward on the GGUF's dequantized weights",
        "prompts": [p["id"] for p in prompts],
        "modes": per_mode,
        "native_build": native.build_info("q4q8"),
    }
    slug = device_slug(env["device_name"])
    out = Path(args.out) if args.out else ROOT / "results" / "bench" / f"q4q8-logit-error-{slug}.json"
    path = write_result(out, record, env=env)
    print(f"-> {path}", flush=True)
    return path


if __name__ == "__main__":
    main()
