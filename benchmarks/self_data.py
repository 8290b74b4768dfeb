"""Issue 42, item 1: the target's own text for training drafters (>= 3 M response tokens), resumable.

    nohup nice -n 19 python benchmarks/self_data.py --until 02:20 > selfdata.log 2>&1 &   # start or resume
    python benchmarks/self_data.py --build-only          # the prompt set and the manifest only
    python benchmarks/self_data.py --verify              # every file against the manifest's sha256

The program is :mod:`specdec.experiments.selfdata` (prompts from offline text, checked disjoint from every
evaluation set; greedy and temperature-1 generations by the lean engine in q4q8 on one thread; shards
with sha256 in ``results/selfdata/manifest.json``). Rerunning the same command continues where the last
run stopped, inside a shard too; SIGINT / SIGTERM or ``--until`` / ``--minutes`` stop it cleanly (the
current shard's part saved), so that the folder can be committed at any time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from specdec.theory.checks import check_float  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=20000, help="prompts in the set (an equal share per task)")
    ap.add_argument("--max-new-tokens", type=int, default=256, help="the cap of a response")
    ap.add_argument("--shard-prompts", type=int, default=256, help="prompts per shard")
    ap.add_argument("--seed", type=int, default=0, help="the prompt set's and the sampling seeds' seed")
    ap.add_argument(
        "--temperature", type=float, default=1.0, help="of the sampled half (the other is greedy)"
    )
    ap.add_argument("--threads", type=int, default=1, help="the lean engine's threads (default 1)")
    ap.add_argument("--mode", default="q4q8", help="the lean engine's mode (default q4q8)")
    ap.add_argument("--out", default=None, help="the data folder (default results/selfdata)")
    ap.add_argument("--fresh", action="store_true", help="discard the folder's manifest and shards")
    ap.add_argument("--until", default=None, metavar="HH:MM", help="stop cleanly at this UTC time")
    ap.add_argument("--minutes", type=float, default=None, help="stop cleanly after this many minutes")
    ap.add_argument(
        "--build-only", action="store_true", help="build the prompt set and manifest, no decoding"
    )
    ap.add_argument("--verify", action="store_true", help="check every file against the manifest and exit")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    try:
        if args.minutes is not None:
            check_float("--minutes", args.minutes, low=0.0)
        if args.until is not None:
            _deadline(args.until)
    except ValueError as exc:
        ap.error(str(exc))
    return args


def _deadline(until: str, now: dt.datetime | None = None) -> float:
    """Seconds since the epoch of the next ``HH:MM`` UTC (today's, or tomorrow's when it has passed)."""
    try:
        hh, mm = (int(x) for x in until.split(":"))
        if not (0 <= hh < 24 and 0 <= mm < 60):
            raise ValueError
    except ValueError:
        raise ValueError(f"--until must be a UTC time HH:MM; got {until!r}") from None
    now = now or dt.datetime.now(dt.timezone.utc)
    at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    if at <= now:
        at += dt.timedelta(days=1)
    return at.timestamp()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from specdec.experiments import selfdata as sd
    from specdec.train import selfshards

    out = Path(args.out) if args.out else sd.DATA
    if args.verify:
        checked = selfshards.verify_manifest(out)
        print(
            f"self_data.py: {checked['files']} files ({checked['shards']} shards) match {out / sd.MANIFEST}"
        )
        return 0
    try:
        settings = sd.SelfDataSettings(
            prompts=args.prompts, max_new_tokens=args.max_new_tokens, shard_prompts=args.shard_prompts,
            seed=args.seed, temperature=args.temperature, mode=args.mode, threads=args.threads,
        )  # fmt: skip
    except ValueError as exc:
        print(f"self_data.py: {exc}", file=sys.stderr)
        return 2
    deadlines = []
    if args.until:
        deadlines.append(_deadline(args.until))
    if args.minutes is not None:
        deadlines.append(time.time() + 60 * args.minutes)
    asked = {"signal": None}

    def on_signal(signum, frame):  # noqa: ARG001
        asked["signal"] = signal.Signals(signum).name

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def stop() -> bool:
        return asked["signal"] is not None or any(time.time() >= d for d in deadlines)

    from specdec.engine.builder import EngineSpec
    from specdec.measure.core import environment
    from specdec.measure.modes import machine_identity, open_target
    from specdec.train.workloads import chat_prompt_ids

    command = "python benchmarks/self_data.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    header = {"command": command, "environment": environment(), "machine": machine_identity()}
    record, prompts = sd.prepare(settings, out, fresh=args.fresh, header=header)
    if args.build_only:
        return 0
    engine = open_target(EngineSpec("lean", settings.mode, settings.threads))
    tokenizer = engine.tokenizer
    record["engine"] = engine.info()
    env = header["environment"]
    run_info = {"git_commit": env.get("git_commit"), "git_dirty": env.get("git_dirty"), "engine": engine.name,
                "command": command}  # fmt: skip

    def encode(text: str) -> list[int]:
        return chat_prompt_ids(tokenizer, text)

    finished = sd.generate(record, prompts, settings, out, model=engine.model, encode=encode,
                           eos_token_id=tokenizer.eos_token_id, stop=stop, progress=not args.no_progress,
                           run_info=run_info)  # fmt: skip
    t = record["totals"]
    how = "finished" if finished else f"stopped ({asked['signal'] or 'deadline'})"
    print(f"self_data.py: {t['shards']} shards, {t['response_tokens']} response tokens "
          f"({t['greedy_tokens']} greedy, {t['sampled_tokens']} sampled); {how}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
