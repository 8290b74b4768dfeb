"""The claims ledger's checks of the article's sections 四 (tokens per round, Eq. (1)) and 五 (the
wall-clock speedup, Theorem 3.8).

Each check is registered in this module's :data:`CHECKS` by claim id (see
:mod:`specdec.paper.ledger.checks`, which gathers every module's). Needs sympy (the ``book`` extra).
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from specdec.paper import published
from specdec.paper.article import compare_printed, load_article_et_table
from specdec.paper.audit import AGREES, DIFFERS, parse_printed
from specdec.paper.ledger.base import T3, T5_SMALL_ROW, model_size, registrar, t4, t4_speedup, value
from specdec.paper.ledger.registry import IMPRECISE, TOL, Check, Result, fmt
from specdec.theory.iid import alpha_from_mean_tokens, simulate_accepted
from specdec.theory.speedup import (
    accepted_pmf,
    expected_tokens,
    optimal_gamma,
    speedup_ceiling,
    walltime_speedup,
)

#: The checks of this module, by claim id.
CHECKS: dict[str, Check] = {}
check = registrar(CHECKS)


# ---------------------------------------------------------------- 四 · tokens per round

a_sym = sp.Symbol("alpha", positive=True)
g_sym = sp.Symbol("gamma", integer=True, nonnegative=True)
j_sym, k_sym = sp.symbols("j k", integer=True, nonnegative=True)
EQ1 = (1 - a_sym ** (g_sym + 1)) / (1 - a_sym)


@check("四-2")
def _(v, ctx):
    total = sp.summation(a_sym**k_sym * (1 - a_sym), (k_sym, 0, g_sym - 1)) + a_sym**g_sym
    sums_to_one = sp.simplify(total - 1) == 0
    a, g, n = 0.75, 7, 400_000
    counts = np.bincount(simulate_accepted(a, g, n, ctx.rng), minlength=g + 1) / n
    k = np.arange(g + 1)
    article = np.where(k < g, a**k * (1 - a), a**g)  # the article's P(A = k)
    z = np.max(np.abs(counts - article) / np.sqrt(article * (1 - article) / n))
    ok = bool(sums_to_one and z < 5 and np.allclose(article, accepted_pmf(a, g)))
    return Result(
        how="sympy (sum to 1); simulation of the i.i.d. model; accepted_pmf",
        category=AGREES if ok else DIFFERS,
        note=f"simulation at α = {a}, γ = {g}: largest deviation {z:.1f} standard errors",
    )


@check("四-3")
def _(v, ctx):
    supports = [accepted_pmf(a, g) for a in (0.0, 0.5, 1.0) for g in (0, 1, 5)]
    ok = all(abs(pmf.sum() - 1) < TOL for pmf in supports)  # A >= 0 always, so T = A + 1 >= 1
    return Result(
        how="T = A + 1 with A ≥ 0 (accepted_pmf)",
        category=AGREES if ok else DIFFERS,
        note="One target call per round, at least one token per round. 'Section 2.1' is not in our "
        "transcription.",
    )


@check("四-4")
def _(v, ctx):
    geometric = sp.summation(a_sym**j_sym, (j_sym, 0, g_sym))
    symbolic = sp.refine(sp.simplify(geometric - EQ1), sp.Q.ne(a_sym, 1)) == 0
    grid_a, grid_g = np.meshgrid(np.linspace(0, 0.99, 12), np.arange(0, 12))
    tail_sum = sum(np.where(i <= grid_g, grid_a**i, 0.0) for i in range(12))  # sum_i P(T >= i + 1)
    err = float(np.max(np.abs(tail_sum - expected_tokens(grid_a, grid_g))))
    return Result(
        how="sympy (geometric sum = Eq. (1)); tail sum against expected_tokens",
        category=AGREES if symbolic and err < 1e-9 else DIFFERS,
        note=f"max |difference| on the grid {err:.1e}",
    )


@check("四-5")
def _(v, ctx):
    gammas = np.arange(0, 12)
    ok = bool(np.all(expected_tokens(1.0, gammas) == gammas + 1))
    return Result(
        how="expected_tokens at α = 0, α = 1 and γ = 0",
        values={"alpha_to_0": expected_tokens(0.0, 7), "gamma_0": expected_tokens(0.75, 0)},
        category=None if ok else DIFFERS,
        note="" if ok else "E[T] at α = 1 is not γ + 1",
    )


@check("四-6")
def _(v, ctx):
    cells = load_article_et_table()
    extra = compare_printed(
        {"E[T]": [c.printed for c in cells]},
        {"E[T]": [float(expected_tokens(c.alpha, c.gamma)) for c in cells]},
    )
    return Result(how="Eq. (1) for each cell (expected_tokens; load_article_et_table)", extra=extra)


def et_gain(v, ctx):
    a, g, g0 = float(v["alpha"][0]), int(v["gamma"][0]), int(v["gamma_ref"][0])
    et, et0 = float(expected_tokens(a, g)), float(expected_tokens(a, g0))
    return Result(how="Eq. (1) (expected_tokens)", values={"et": et, "et_ref": et0, "gain": et - et0})


check("四-7")(et_gain)
check("四-8")(et_gain)


@check("四-9")
def _(v, ctx):
    a, g = float(v["alpha"][0]), int(v["gamma"][0])
    et, bound = float(expected_tokens(a, g)), float(speedup_ceiling(a))
    gammas = np.arange(0, 200)
    g95 = int(gammas[np.argmax(expected_tokens(a, gammas) >= 0.95 * bound)])
    ctx.keep("et_09_10", et)
    ctx.keep("et_09_alpha", v["alpha"][0])
    ctx.keep("et_09_gamma", v["gamma"][0])
    ctx.keep("et_09_share", et / bound)
    ctx.keep("et_09_g95", g95)
    return Result(
        how="Eq. (1) and 1/(1 − α) (expected_tokens, speedup_ceiling)",
        values={"et": et, "bound": bound},
        category=IMPRECISE,
        note=f"E[T] is {et / bound:.0%} of the bound; within 5% of it needs γ ≥ {g95}.",
    )


@check("四-10")
def _(v, ctx):
    cells = load_article_et_table()
    alphas = sorted({c.alpha for c in cells})
    gains = [float(expected_tokens(a, 10) - expected_tokens(a, 1)) for a in alphas]
    ok = bool(np.all(np.diff(gains) > 0))
    return Result(
        how="gain from γ = 1 to 10 for each α of the table",
        category=AGREES if ok else DIFFERS,
        note="gains "
        + ", ".join(f"{g:.2f}" for g in gains)
        + " for α = "
        + ", ".join(fmt(a) for a in alphas),
    )


@check("四-11")
def _(v, ctx):
    a = float(v["alpha"][0])
    ets = [float(expected_tokens(a, int(g))) for g in v["gamma"]]
    return Result(how="Eq. (1) (expected_tokens)", values={"et": ets, "et_about": ets[-1]})


@check("四-12")
def _(v, ctx):
    gpt = [r["M_q"] for r in T3 if r["M_p"].startswith("GPT-like")]
    return Result(
        how="the paper's Section 1 (statements); sizes from Table 3's model names",
        values={
            "tokens": value(published.statement("sec1_tokens")),
            "runs": value(published.statement("sec1_runs")),
            "target_m": model_size(T3[0]["M_p"]),
            "draft_m": model_size(next(m for m in gpt if m.startswith("GPT-like"))),
        },
    )


# ---------------------------------------------------------------- 五 · the wall-clock speedup

c_sym = sp.Symbol("c", nonnegative=True)
ALPHAS = np.linspace(0.0, 0.95, 20)
COSTS = np.linspace(0.0, 0.95, 20)
GAMMAS = np.arange(0, 401)
SP = walltime_speedup(ALPHAS[None, :, None], GAMMAS[:, None, None], COSTS[None, None, :])  # (gamma, alpha, c)
AA, CC = np.meshgrid(ALPHAS, COSTS, indexing="ij")


@check("五-1")
def _(v, ctx):
    a, g, c = AA[None], GAMMAS[:, None, None], CC[None]
    err = float(np.max(np.abs(SP - expected_tokens(a, g) / (g * c + 1))))
    return Result(
        how="walltime_speedup against E[T]/(γc + 1) on a grid",
        category=AGREES if err < TOL else DIFFERS,
        note=f"max |difference| {err:.1e}. The '1' is one target call that scores γ + 1 positions "
        f"(see 一-13).",
    )


@check("五-4")
def _(v, ctx):
    et1 = EQ1.subs(g_sym, 1)
    ok = (
        sp.simplify(et1 - (1 + a_sym)) == 0
        and sp.simplify(et1 / (1 * c_sym + 1) - (1 + a_sym) / (1 + c_sym)) == 0
    )
    return Result(how="sympy: Eq. (1) and Theorem 3.8 at γ = 1", category=AGREES if ok else DIFFERS)


@check("五-5")
def _(v, ctx):
    ok = sp.simplify((1 + a_sym) / (1 + c_sym) - 1 - (a_sym - c_sym) / (1 + c_sym)) == 0
    return Result(
        how="sympy: (1+α)/(1+c) − 1 = (α − c)/(1 + c), and 1 + c > 0",
        category=AGREES if ok else DIFFERS,
    )


@check("五-6")
def _(v, ctx):
    mask = AA > CC
    best = SP.max(axis=0)
    bound = (1 + AA) / (1 + CC)
    ok = bool(np.all(best[mask] >= bound[mask] - TOL) and np.allclose(SP[1], bound))
    return Result(
        how="max over γ of Theorem 3.8 against (1+α)/(1+c), grid with α > c",
        category=AGREES if ok else DIFFERS,
        note=f"{int(mask.sum())} grid points; γ = 1 gives the bound exactly",
    )


@check("五-7")
def _(v, ctx):
    mask = AA <= CC
    worst = float(SP[1:].max(axis=0)[mask].max())
    return Result(
        how="max over γ ≥ 1 of Theorem 3.8 on the grid with α ≤ c",
        category=AGREES if worst <= 1 + TOL else DIFFERS,
        note=f"largest speedup {worst:.4f} over {int(mask.sum())} grid points (equal to 1 only at α "
        f"= c = 0).",
    )


@check("五-8")
def _(v, ctx):
    small, large = t4("EnDe", "T5-small", 0), t4("EnDe", "T5-large", 0)
    return Result(
        how="Table 2 / Table 4; size from the paper's model names",
        values={
            "size_small": model_size(T5_SMALL_ROW["M_q"]),
            **{f"{k}_small": value(small[k]) for k in ("alpha", "gamma", "c")},
            **{f"{k}_large": value(large[k]) for k in ("alpha", "gamma", "c")},
        },
        note="The sizes of T5-XXL and T5-large are not in the book's data; not judged.",
    )


def worked_speedup(draft):
    def run(v, ctx):
        row = t4("EnDe", draft, 0)
        a, g, c = value(row["alpha"]), int(row["gamma"]), value(row["c"])
        return Result(
            how="Theorem 3.8 at Table 4's inputs; Table 4's EXP and EMP",
            values={
                "numerator": 1 - a ** (g + 1),
                "one_minus_alpha": 1 - a,
                "cost": g * c + 1,
                "speedup": t4_speedup(row),
                "paper_exp": value(row["EXP"]),
                "paper_emp": value(row["EMP"]),
            },
        )

    return run


check("五-9")(worked_speedup("T5-small"))
check("五-10")(worked_speedup("T5-large"))


@check("五-11")
def _(v, ctx):
    small, large = t4("EnDe", "T5-small", 0), t4("EnDe", "T5-large", 0)
    ok = value(large["alpha"]) > value(small["alpha"]) and t4_speedup(large) < t4_speedup(small)
    return Result(how="Table 4 and Theorem 3.8", category=AGREES if ok else DIFFERS)


@check("五-12")
def _(v, ctx):
    small, large = t4("EnDe", "T5-small", 0), t4("EnDe", "T5-large", 0)
    cs, cl, h = value(small["c"]), value(large["c"]), parse_printed(small["c"])[1]
    g = int(small["gamma"])
    return Result(
        how="ratio of Table 4's c; γc",
        values={"cost_ratio": cl / cs, "gc_small": g * cs, "gc_large": g * cl},
        note=f"{fmt(cl / cs)} rounds to {v['cost_ratio'][0]} only at the edge of the rule; c "
        f"printed to 2 decimals allows "
        f"{(cl - h) / (cs + h):.1f}-{(cl + h) / (cs - h):.1f}.",
    )


def unimodal(seq):
    """True when seq rises (weakly) and then falls (weakly): no rise after a fall."""
    d = np.sign(np.round(np.diff(seq), 12))
    d = d[d != 0]
    return not np.any((d[:-1] < 0) & (d[1:] > 0))


@check("五-14")
def _(v, ctx):
    mask = (CC > 0) & (CC < AA)
    ok = all(
        unimodal(SP[:, i, j]) and 0 < np.argmax(SP[:, i, j]) < GAMMAS[-1]
        for i, j in zip(*np.nonzero(mask), strict=True)
    )
    ctx.keep("uni_n", int(mask.sum()))
    return Result(
        how=f"Theorem 3.8 over γ = 0..{GAMMAS[-1]}, grid with 0 < c < α",
        category=AGREES if ok else DIFFERS,
        note=f"{int(mask.sum())} settings; with c = 0 it only rises, with α ≤ c it only falls.",
    )


@check("五-15")
def _(v, ctx):
    second = EQ1.subs(g_sym, g_sym + 2) - 2 * EQ1.subs(g_sym, g_sym + 1) + EQ1  # second difference in gamma
    concave = sp.simplify(second - a_sym ** (g_sym + 1) * (a_sym - 1)) == 0  # alpha^(gamma+1)(alpha-1) < 0
    stops = np.argmax(np.diff(SP, axis=0) < 0, axis=0)  # first gamma after which the speedup drops
    mask = CC > 0
    best = optimal_gamma(AA, CC, max_gamma=int(GAMMAS[-1]))
    at_stop = np.take_along_axis(SP, stops[None], axis=0)[0]
    at_best = np.take_along_axis(SP, best[None], axis=0)[0]
    agree = bool(np.all(np.isclose(at_stop, at_best, rtol=0, atol=TOL)[mask]))
    return Result(
        how="sympy: second difference of E[T] in γ; first-drop scan against optimal_gamma",
        category=AGREES if concave and agree else DIFFERS,
        note="Second difference α^(γ+1)(α − 1) < 0: E[T] is concave; over a linear denominator the ratio is "
        "quasi-concave. The scan reaches the optimal speedup on every c > 0 setting.",
    )


@check("五-16")
def _(v, ctx):
    at0 = SP[:, :, 0]
    ok = bool(
        np.allclose(at0, expected_tokens(ALPHAS[None], GAMMAS[:, None]))
        and np.all(at0 <= speedup_ceiling(ALPHAS)[None] + TOL)
        and np.all(np.diff(at0, axis=0) >= 0)
    )
    return Result(how="Theorem 3.8 at c = 0 against E[T] and 1/(1 − α)", category=AGREES if ok else DIFFERS)


@check("五-17")
def _(v, ctx):
    a = float(v["alpha"][0])
    a_exact = sp.Rational(v["alpha"][0])
    gap = sp.simplify(1 / (1 - a_exact) - EQ1.subs(a_sym, a_exact))  # ceiling minus E[T], exactly
    below = sp.simplify(gap - a_exact ** (g_sym + 1) / (1 - a_exact)) == 0  # > 0 for every finite gamma
    return Result(
        how="1/(1 − α); sympy: 1/(1 − α) − E[T] = α^(γ+1)/(1 − α) > 0",
        values={"ceiling": speedup_ceiling(a)},
        category=None if below else DIFFERS,
        note="" if below else "some finite γ exceeds the ceiling",
    )


@check("五-18")
def _(v, ctx):
    target = float(v["speedup"][0])
    row = t4("EnDe", "T5-small", 0)
    c, g = value(row["c"]), int(row["gamma"])
    a7, a7c = alpha_from_mean_tokens(target, g), alpha_from_mean_tokens(target * (1 + g * c), g)
    ctx.keep("a4_gamma", g)
    ctx.keep("a4_g7", a7)
    ctx.keep("a4_target", v["speedup"][0])
    ctx.keep("a4_alpha", v["alpha"][0])
    ctx.keep("a4_g7_c", a7c)
    a_exact = 1 - 1 / sp.Rational(v["speedup"][0])
    shortfall = sp.simplify(sp.Rational(v["speedup"][0]) - EQ1.subs(a_sym, a_exact))
    reached = not sp.simplify(shortfall - a_exact ** (g_sym + 1) / (1 - a_exact)) == 0  # shortfall > 0 always
    return Result(
        how="1/(1 − α) = 4 solved for α; sympy: E[T] < 4 at that α for all γ; α reaching 4 at γ = 7",
        values={"speedup": speedup_ceiling(1 - 1 / target), "alpha": 1 - 1 / target},
        category=AGREES if reached else IMPRECISE,
        note=f"At α = {fmt(1 - 1 / target)} no finite γ reaches {fmt(target)}, so {fmt(target)}X needs "
        f"α > {fmt(1 - 1 / target)}; at γ = {g}: α ≥ {a7:.3f} "
        f"(c = 0), {a7c:.3f} (c = {fmt(c)}).",
    )
