"""``specdec plan``: what Theorem 3.8 predicts for alpha, c, gamma (and a verify cost).

The numbers come from :func:`specdec.theory.plan.plan`; this module parses, checks and prints.
numpy only: it works without torch.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from specdec.cli.common import NAMES, UsageError, alpha_arg, c_arg, checked, json_out, para
from specdec.theory.checks import check_float, check_int
from specdec.theory.plan import MAX_GAMMA, plan

__all__ = ["add_parser", "print_plan", "run", "verify_cost_arg", "verify_curve_arg"]


def verify_cost_arg(value: float) -> float:
    """--verify-cost: V = T(gamma+1)/T(1) > 0."""
    return checked(
        check_float, "--verify-cost", value, low=0, open_low=True,
        note="V = T(gamma+1)/T(1), about 1 to 3 on real hardware",
    )  # fmt: skip


def verify_curve_arg(text: str) -> dict[int, float]:
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


def print_plan(r: dict[str, Any]) -> None:
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
    elif r["optimal_at_max_gamma"] and c == 0:
        line += " -- the limit: with c = 0 every extra draft gains, up to the ceiling below"
    elif r["optimal_at_max_gamma"]:
        line += " -- at the limit: raise --max-gamma"
    print(line)
    bar = r.get("break_even_priced_alpha")
    if bar is not None:
        where = (
            "over the measured verify curve"
            if r["verify_curve"]
            else f"at gamma = {g} with V = {r['verify_cost']:g}"
        )
        verdict = "clears it" if a > bar else "does not: no gamma gains, decode without speculation"
        print(
            f"break-even with the verify pass priced ({where}): alpha must exceed {bar:.4f}; "
            f"alpha = {a:g} {verdict} (Corollary 3.9's alpha > c = {c:g} is the bar when V = 1)"
        )
    elif r["break_even"]:
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


def run(args: argparse.Namespace) -> int:
    alpha = alpha_arg(args.alpha)
    c = c_arg(args.c)
    digits = "10**15: beyond it gamma + 1 loses digits in the formulas"
    for name, value, what in (
        ("--gamma", args.gamma, "drafted tokens per round"),
        ("--max-gamma", args.max_gamma, "the largest gamma the optimum may take"),
    ):
        if value is not None:
            checked(check_int, name, value, low=1, high=MAX_GAMMA, note=f"{what}; {digits}")
    verify_cost = None if args.verify_cost is None else verify_cost_arg(args.verify_cost)
    verify_curve = None if args.verify_curve is None else verify_curve_arg(args.verify_curve)
    if verify_cost is not None and args.gamma is None:
        raise UsageError(
            "--verify-cost V prices the one gamma it was measured at (V = T(gamma+1)/T(1)): give that "
            "--gamma, or --verify-curve k:T(k)/T(1),... to choose gamma from measured costs"
        )
    r = plan(
        alpha,
        c,
        args.gamma,
        verify_cost=verify_cost,
        verify_curve=verify_curve,
        max_gamma=args.max_gamma,
        names={"gamma": "--gamma", "max_gamma": "--max-gamma", "verify_curve": "--verify-curve"},
    )
    if args.json:
        print(json_out(r))
    else:
        print_plan(r)
    return 0


def add_parser(sub: Any, formatter: Any) -> None:
    """Add this command's parser to ``sub`` (the subparsers of :func:`specdec.cli.app.parser`)."""
    p = sub.add_parser(
        "plan",
        help="the speedup Theorem 3.8 predicts for alpha, c, gamma (and a verify cost)",
        description=para(
            "Predict the speedup of speculative decoding from the acceptance rate alpha "
            "and the draft cost c: E[T] (Eq. 1), the speedup by Theorem 3.8 (and with a measured "
            "verify cost), the optimal gamma, the break-even condition alpha > c (Corollary 3.9) "
            "and the ceiling 1/(1-alpha). Without --gamma it reports the optimal gamma."
        )
        + NAMES,
        epilog="Examples:\n  specdec plan --alpha 0.8 --c 0.05 --gamma 4\n"
        "  specdec plan --alpha 0.8 --c 0.05 --gamma 4 --verify-cost 1.3\n"
        "  specdec plan --alpha 0.5 --c 0 --verify-curve 2:1.1,3:1.2,5:1.4,9:2.0 --json",
        formatter_class=formatter,
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
        help="measured verify cost V = T(gamma+1)/T(1) > 0 at the --gamma it was measured at (required "
        "with it; Theorem 3.8 assumes 1) -- give --verify-curve to choose gamma from measured costs",
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
        help="the largest gamma the optimum may take, 1 .. 10**15 (default 64; with c = 0 the speedup "
        "grows with gamma, so the optimum sits at this limit; the search costs the same for any N)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")
    p.set_defaults(run=run)
