"""The checks of the claims ledger, one per checkable claim of the source article, keyed by id.

Each check recomputes a claim's numbers with ``specdec`` (Eq. (1), Theorem 3.8, Theorem 3.11,
the sampling rules of Algorithm 1, sympy for identities) or reads them from the paper's data
(:mod:`specdec.paper.published`), and returns them keyed like the printed ones in a
:class:`~specdec.paper.ledger.registry.Result`; judgements beyond the numbers carry a reason built
from computed values. :data:`CHECKS` maps claim ids to checks; :func:`section_facts` computes
the values the chapter's prose quotes outside any one check (section 八's lenience setting,
D4's two models). Checks draw randomness only from the context's one generator.

Needs sympy (the ``book`` extra).
"""

# ruff: noqa: E741  (l is the paper's name for the lenience, Appendix A.5)

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import sympy as sp

from specdec.paper import published
from specdec.paper.article import (
    Comparison,
    article_ops_factor,
    compare_printed,
    load_article_et_table,
    load_article_table,
    printed_values,
)
from specdec.paper.audit import AGREES, DIFFERS, parse_printed, verdict
from specdec.paper.ledger.registry import IMPRECISE, NOT_CHECKABLE, TOL, Check, Result, fmt
from specdec.paper.reproduce import cost_for_best_gamma
from specdec.theory.iid import alpha_from_mean_tokens, simulate_accepted
from specdec.theory.sampling import residual, verify, warp
from specdec.theory.speedup import (
    acceptance_rate,
    accepted_pmf,
    expected_tokens,
    ops_factor,
    optimal_gamma,
    speedup_ceiling,
    walltime_speedup,
)

__all__ = ["CHECKS", "d4_models_table", "section_facts"]

#: The check of each checkable claim, by claim id (filled by :func:`check` below).
CHECKS: dict[str, Check] = {}

value = published.value  # a printed string of the paper -> its number


def check(claim_id: str) -> Callable[[Check], Check]:
    """Register the check of one claim (a function of the claim's printed values and the context)."""

    def register(fn: Check) -> Check:
        if claim_id in CHECKS:
            raise ValueError(f"claim {claim_id!r} has two checks")
        CHECKS[claim_id] = fn
        return fn

    return register


def model_size(name):
    """Parameters in millions from a paper's model name such as 'T5-small (77M)'."""
    return float(name.rsplit("(", 1)[1].rstrip("M)"))


# ---------------------------------------------------------------- the paper's printed values
T1 = published.load_table("table1")
T2 = published.load_table("table2")
T3 = published.load_table("table3")
T4 = published.load_table("table4")
T5 = published.load_table("table5")
A5 = published.load_table("appendix_a5")


def t4(task, draft, temp):
    """The one Table 4 row (= Table 2 row plus c, EXP, EMP) of a task, draft and temperature."""
    (row,) = [r for r in T4 if (r["task"], r["M_q"], r["temp"]) == (task, draft, str(temp))]
    return row


def t4_speedup(row):
    """Theorem 3.8 at a Table 4 row's printed alpha, gamma and c."""
    return float(walltime_speedup(value(row["alpha"]), int(row["gamma"]), value(row["c"])))


def t3(target, draft):
    (row,) = [r for r in T3 if (r["M_p"], r["M_q"]) == (target, draft)]
    return row


T5_SMALL_LENIENCE = {"1": "l_1", "0.5": "l_0.5", "0.3": "l_0.3", "0.1": "l_0.1"}
(T5_SMALL_ROW,) = [r for r in T5 if r["M_q"].startswith("T5-small")]
A5_STANDARD = [r for r in A5 if r["sampling"] == "standard"]


# ---------------------------------------------------------------- 引言 · the preamble


@check("引-2")
def _(v, ctx):
    low, high = (published.statement(f"abstract_speedup_{end}") for end in ("low", "high"))
    speeds = [value(r["speed"]) for r in T2]
    inside = sum(value(low) <= s <= value(high) for s in speeds)
    return Result(
        how="the paper's abstract (statements); Table 2 for context",
        values={"low": value(low), "high": value(high)},
        category=AGREES,
        note=f"The article quotes the paper's own headline, {low}-{high}. For context: Table 2's "
        f"{len(speeds)} measured factors span {fmt(min(speeds))}-{fmt(max(speeds))}, {inside} of "
        f"them inside it.",
    )


@check("引-3")
def _(v, ctx):
    return Result(
        how="by reading Chen et al. (arXiv:2302.01318), abstract",
        category=AGREES,
        note="Chen et al., which the book cites, report this range for Chinchilla 70B in a distributed "
        "setup; the book holds none of their data, so the claim is read, not recomputed.",
    )


@check("引-5")
def _(v, ctx):
    small, large = t4("EnDe", "T5-small", 0), t4("EnDe", "T5-large", 0)
    return Result(
        how="Table 2 (EnDe, temperature 0); size from the paper's model names",
        values={
            "size_small": model_size(T5_SMALL_ROW["M_q"]),
            "alpha_small": value(small["alpha"]),
            "alpha_large": value(large["alpha"]),
            "speed_small": value(small["EMP"]),
            "speed_large": value(large["EMP"]),
        },
        note="T5-large's size is printed in the paper's Section 4.1 but not in the book's data; not judged.",
    )


@check("引-6")
def _(v, ctx):
    small, large = t4("EnDe", "T5-small", 0), t4("EnDe", "T5-large", 0)
    s_small, s_large = t4_speedup(small), t4_speedup(large)
    e_small, e_large = value(small["EMP"]), value(large["EMP"])
    share = (s_small - s_large) / (e_small - e_large)
    return Result(
        how="Theorem 3.8 at Table 4's inputs (walltime_speedup)",
        values={"exp_small": s_small, "exp_large": s_large, "emp_large": e_large},
        category=IMPRECISE,
        note=f"The measured drop is {fmt(e_small)} → {fmt(e_large)}; Theorem 3.8 gives {s_small:.2f} → "
        f"{s_large:.2f}, {share:.0%} of it. The split skips that T5-small measured "
        f"{e_small - s_small:+.2f} above its expected value; the paper attributes no part of the "
        f"gap (see 五-13).",
    )


# ---------------------------------------------------------------- 一 · decoding is bandwidth-bound

FP16_BYTES = np.dtype(np.float16).itemsize
M = N = 4096  # a square weight matrix; one matrix-vector product per decoded token
MATVEC_FLOPS = M * (2 * N - 1)  # N multiplies and N - 1 adds per output
FLOPS_PER_PARAM = MATVEC_FLOPS / (M * N)


def params_70b(ctx):
    """The model size of 一-7 (70B), which 一-8 to 一-10 reuse."""
    return float(printed_values(ctx.claims["一-7"].printed)["params_b"][0])


def weight_pass(params_b, bandwidth_tbps):
    """Seconds to read all fp16 weights once, and the tokens/s that allows (weights only)."""
    seconds = params_b * 1e9 * FP16_BYTES / (np.asarray(bandwidth_tbps, dtype=float) * 1e12)
    return seconds, 1.0 / seconds


@check("一-3")
def _(v, ctx):
    return Result(
        how="count the FLOPs of a matrix-vector product; fp16 item size",
        values={
            "flops_per_param": FLOPS_PER_PARAM,
            "bytes_per_param": FP16_BYTES,
            "intensity": FLOPS_PER_PARAM / FP16_BYTES,
        },
        note=f"{2 * N - 1} operations per {N} weights of a row (2 − 1/N each). Weights only, batch "
        f"1: the KV cache "
        "and activations are left out, as the article says.",
    )


@check("一-5")
def _(v, ctx):
    ridge = [
        10.0 ** int(e)
        for p in ("ridge_low_exp", "ridge_high_exp")
        for e in printed_values(ctx.claims["一-4"].printed)[p]
    ]
    intensity = FLOPS_PER_PARAM / FP16_BYTES
    return Result(
        how="log10(ridge / intensity) with the ridge range of 一-4",
        values={"orders_low": np.log10(ridge[0] / intensity), "orders_high": np.log10(ridge[1] / intensity)},
        note="Follows from 一-3 once the ridge range of 一-4 (not checkable here) is granted.",
    )


@check("一-7")
def _(v, ctx):
    params = float(v["params_b"][0])
    return Result(how="parameters × fp16 bytes", values={"weights_gb": params * FP16_BYTES})


@check("一-8")
def _(v, ctx):
    seconds, tps = weight_pass(params_70b(ctx), float(v["bandwidth_tbps"][0]))
    return Result(how="weight bytes ÷ bandwidth", values={"pass_ms": seconds * 1e3, "tokens_per_s": tps})


@check("一-9")
def _(v, ctx):
    _, tps = weight_pass(params_70b(ctx), [float(b) for b in v["bandwidth_tbps"]])
    return Result(how="weight bytes ÷ bandwidth", values={"tokens_per_s": tps})


@check("一-10")
def _(v, ctx):
    bandwidths = np.array([1.0, 2.0, 3.0, 4.8])
    _, tps = weight_pass(params_70b(ctx), bandwidths)
    proportional = bool(np.ptp(tps / bandwidths) < 1e-9)
    return Result(
        how="tokens/s of the weights-only model over bandwidths",
        category=AGREES if proportional else DIFFERS,
        note="Exact by construction of the weights-only model (no compute term in it); not measured here.",
    )


@check("一-11")
def _(v, ctx):
    return Result(
        how="by reading (Theorems 3.8 and 3.11)",
        category=IMPRECISE,
        note="Weights stream through on-chip memory, not registers; what is shared is one read of "
        "each weight "
        "by all positions. The extra arithmetic is real (Theorem 3.11), and Theorem 3.8 assumes the "
        "(γ+1)-position call costs one step.",
    )


@check("一-12")
def _(v, ctx):
    return Result(
        how="by reading (Algorithm 1; specdec.theory.sampling.verify)",
        category=AGREES,
        note="As in Algorithm 1, including the bonus token drawn from the target's row γ + 1 after "
        "a full accept.",
    )


@check("一-13")
def _(v, ctx):
    gamma, vocab = 3, 5
    p = ctx.rng.dirichlet(np.ones(vocab), size=gamma + 1)
    q = ctx.rng.dirichlet(np.ones(vocab), size=gamma)
    draft = [int(np.argmax(row)) for row in q]
    try:
        verify(p[:gamma], q, draft, ctx.rng)
        needs_extra_row = False
    except ValueError:
        needs_extra_row = True
    verify(p, q, draft, ctx.rng)  # gamma + 1 target rows: accepted
    return Result(
        how="specdec.theory.sampling.verify with γ and with γ + 1 target rows",
        category=IMPRECISE if needs_extra_row else AGREES,
        note="The one target call scores γ + 1 positions: the γ drafts and the bonus position after them "
        "(Algorithm 1; verify refuses γ rows). The same γ vs γ + 1 slip recurs in 五-1 and D4.",
    )


# ---------------------------------------------------------------- 二 · notation and glossary


@check("二-1")
def _(v, ctx):
    return Result(how="by reading (the book's notation chapter)", category=AGREES)


@check("二-2")
def _(v, ctx):
    return Result(
        how="by reading (Theorem 3.11)",
        category=AGREES,
        note="r is the paper's ĉ under another name, and the definition is right. The error is D4's "
        "use of it: r = 1 to reproduce Table 1, whose setting is ĉ = 0 (caught as D4b).",
    )


@check("二-3")
def _(v, ctx):
    return Result(
        how="by reading (Appendix A.5; Definition 3.1)",
        category=DIFFERS,
        note="The paper writes l for the lenience; its β is the acceptance probability at one prefix "
        "(Definition 3.1, α = E[β]), which the article's β collides with.",
    )


@check("二-4")
def _(v, ctx):
    err = ctx.max_error(lambda p, q: (1 - 0.5 * np.abs(p - q).sum()) - np.minimum(p, q).sum())
    return Result(
        how=f"1 − ½Σ|p − q| against Σ min(p, q) on {len(ctx.pairs)} random pairs",
        category=AGREES if err < TOL else DIFFERS,
        note=f"max |difference| {err:.1e}",
    )


@check("二-5")
def _(v, ctx):
    row = t4("EnDe", "T5-small", 0)
    a, g = value(row["alpha"]), int(row["gamma"])
    e_a = float(expected_tokens(a, g)) - 1  # E[A] = E[T] - 1
    e_examined = float(expected_tokens(a, g - 1))  # sum_{i=0}^{gamma-1} alpha^i
    sim = simulate_accepted(a, g, 200_000, ctx.rng)
    examined = np.minimum(sim + 1, g)
    ctx.keep("gl_alpha", a)
    ctx.keep("gl_gamma", g)
    ctx.keep("gl_share", e_a / g)
    ctx.keep("gl_share_mc", sim.sum() / (g * sim.size))
    ctx.keep("gl_examined", e_a / e_examined)
    if abs(sim.sum() / examined.sum() - a) >= 0.01:
        raise ValueError("二-5: the simulated accepted/examined share must be alpha")
    return Result(
        how="E[A]/γ and E[A]/E[examined] under the i.i.d. model (expected_tokens; simulate_accepted)",
        category=IMPRECISE if abs(e_a / g - a) > 0.01 else AGREES,
        note=f"At α = {fmt(a)}, γ = {g} (Table 4) accepted/drafted is {e_a / g:.3f}, not α; "
        f"accepted/examined is {e_a / e_examined:.3f} = α. The definition needs 'examined'.",
    )


@check("二-6")
def _(v, ctx):
    return Result(
        how="by reading (Appendix A.1); see 三-3",
        category=AGREES,
        note="Exact in real arithmetic; floating point can flip near-ties in practice.",
    )


# ---------------------------------------------------------------- 三 · why sampling stays lossless


def out_law(p, q, lenience=1.0):
    """Exact law of the token emitted at one drafted position (accept path + reject path)."""
    return np.minimum(q, p / lenience) + (1 - acceptance_rate(p, q, lenience)) * residual(p, q, lenience)


@check("三-1")
def _(v, ctx):
    return Result(how="by reading (Algorithm 1; specdec.theory.sampling.residual)", category=AGREES)


@check("三-2")
def _(v, ctx):
    return Result(
        how="by reasoning",
        category=DIFFERS,
        note="Rejection sampling proposes again from q (accepting with p/(Mq), M ≥ max p/q) until it "
        "accepts; it never samples p itself. One residual draw is what makes a single rejection enough.",
    )


@check("三-3")
def _(v, ctx):
    err = ctx.max_error(lambda p, q: out_law(p, q) - p)
    return Result(
        how=f"min(p, q) + (1 − α) p′ against p on {len(ctx.pairs)} random pairs (residual, acceptance_rate)",
        category=AGREES if err < TOL else DIFFERS,
        note=f"max |difference| {err:.1e}",
    )


@check("三-4")
def _(v, ctx):
    err = ctx.max_error(lambda p, q: np.maximum(p - q, 0).sum() - (1 - acceptance_rate(p, q)))
    return Result(
        how=f"Σ max(0, p − q) against 1 − α on {len(ctx.pairs)} random pairs",
        category=AGREES if err < TOL else DIFFERS,
        note=f"max |difference| {err:.1e}",
    )


@check("三-5")
def _(v, ctx):
    err = ctx.max_error(lambda p, q: acceptance_rate(p, q) - (1 - 0.5 * np.abs(p - q).sum()))
    return Result(
        how=f"acceptance_rate against 1 − TV on {len(ctx.pairs)} random pairs",
        category=AGREES if err < TOL else DIFFERS,
        note=f"max |difference| {err:.1e}; per position; the paper's α is its mean over prefixes "
        f"(Corollary 3.6).",
    )


@check("三-6")
def _(v, ctx):
    p = ctx.pairs[0][0]
    return Result(
        how="acceptance_rate(p, p) and of two one-hot rows",
        values={
            "alpha_equal": acceptance_rate(p, p),
            "alpha_disjoint": acceptance_rate(np.array([1.0, 0.0]), np.array([0.0, 1.0])),
        },
    )


@check("三-8")
def _(v, ctx):
    diffs = [value(r["temp_0"]) - value(r["temp_1"]) for r in T3]
    gt, eq, lt = sum(d > 0 for d in diffs), sum(d == 0 for d in diffs), sum(d < 0 for d in diffs)
    logits_p, logits_q = np.array([0.1, 0.0]), np.array([0.0, 0.1])
    a1 = acceptance_rate(warp(logits_p, 1.0), warp(logits_q, 1.0))
    a0 = acceptance_rate(warp(logits_p, 0.0), warp(logits_q, 0.0))
    lower = "; ".join(f"{r['M_q']} for {r['M_p']}" for r, d in zip(T3, diffs, strict=True) if d < 0)
    for key, x in dict(t3_n=len(diffs), t3_gt=gt, t3_eq=eq, t3_lt=lt, t3_cx_t1=a1, t3_cx_t0=a0).items():
        ctx.keep(key, x)
    ctx.keep("t3_lt_rows", lower)
    return Result(
        how="Table 3: temperature 0 against 1, row by row; a two-token example with warp",
        category=IMPRECISE if (lt > 0 or a0 < a1) else AGREES,
        note=f"Table 3: {gt} of {len(diffs)} higher at temperature 0, {eq} equal, {lt} lower. Not a law: "
        f"α at temperature 0 is argmax agreement; the example gives {a1:.2f} at T = 1 and {fmt(a0)} "
        f"at T = 0.",
    )


@check("三-9")
def _(v, ctx):
    row = t3("T5-XXL (EnDe)", "T5-small")
    return Result(how="Table 3", values={"temp0": value(row["temp_0"]), "temp1": value(row["temp_1"])})


# ---------------------------------------------------------------- 四 · tokens per round

a_sym = sp.Symbol("alpha", positive=True)
g_sym = sp.Symbol("gamma", integer=True, nonnegative=True)
j_sym, k_sym = sp.symbols("j k", integer=True, nonnegative=True)
EQ1 = (1 - a_sym ** (g_sym + 1)) / (1 - a_sym)


@check("四-1")
def _(v, ctx):
    return Result(how="by reading (Section 3.1; specdec.theory.speedup)", category=AGREES)


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


@check("五-2")
def _(v, ctx):
    return Result(how="by reading (Definition 3.7)", category=AGREES)


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


# ---------------------------------------------------------------- 六 · the article's check against the paper

SPEEDUP_TABLE = load_article_table("speedup_table")
ALPHA_TABLE = load_article_table("alpha_table")
TASKS = {"EnDe 翻译": "EnDe", "新闻摘要": "CNNDM"}  # the article's task names; 新闻摘要 = news summaries
BIGRAM = {k: published.statement(f"sec3_6_bigram_{k}") for k in ("alpha", "gamma", "c", "speedup")}


def paper_row(row):
    """The paper's printed values behind one row of the article's comparison table."""
    if row["draft"].startswith("二元模型"):  # the bigram row: Sections 3.6 / 4.2
        return {
            "gamma": BIGRAM["gamma"],
            "alpha": BIGRAM["alpha"],
            "c": BIGRAM["c"],
            "EXP": BIGRAM["speedup"],
            "EMP": "",
        }
    return t4(TASKS[row["task"]], row["draft"].split(" (")[0], row["temp"])


def inputs(row):
    return value(row["alpha"]), int(row["gamma"]), value(row["c"])


@check("六-1")
def _(v, ctx):
    extra, absent_ok = [], True
    for row in SPEEDUP_TABLE:
        paper = paper_row(row)
        name = row["draft"].split(" (")[0]
        for col, pcol in (
            ("gamma", "gamma"),
            ("alpha", "alpha"),
            ("c", "c"),
            ("paper_exp", "EXP"),
            ("paper_emp", "EMP"),
        ):
            if row[col] == "—":
                absent_ok &= paper[pcol] == ""
                continue
            extra += compare_printed(
                {f"{name} T={row['temp']} {col}": [row[col]]},
                {f"{name} T={row['temp']} {col}": value(paper[pcol])},
            )
    return Result(
        how="each cell against Table 4 (bigram row: Sections 3.6 / 4.2)",
        extra=extra,
        category=None if absent_ok else DIFFERS,
        note="" if absent_ok else "a cell left empty is printed by the paper",
    )


@check("六-2")
def _(v, ctx):
    ours = [float(walltime_speedup(*inputs(paper_row(r)))) for r in SPEEDUP_TABLE]
    printed = {
        "recomputed": [r["recomputed"] for r in SPEEDUP_TABLE],
        "paper EXP": [r["paper_exp"] for r in SPEEDUP_TABLE],
    }
    measured = [
        (r["paper_emp"], o) for r, o in zip(SPEEDUP_TABLE, ours, strict=True) if r["paper_emp"] != "—"
    ]
    n_meas = sum(verdict(p, o) == AGREES for p, o in measured)
    ctx.keep("six2_emp_agree", n_meas)
    ctx.keep("six2_emp_n", len(measured))
    return Result(
        how="Theorem 3.8 at the paper's inputs, against both columns",
        extra=compare_printed(printed, {"recomputed": ours, "paper EXP": ours}),
        category=IMPRECISE,
        note="The numbers agree, but the paper's EXP is itself Theorem 3.8 at the same α, γ and c "
        "(Table 4), so the agreement checks arithmetic, not the chain from acceptance rate to "
        f"wall-clock speedup; that needs the measured column, which the recomputation matches in "
        f"{n_meas} of {len(measured)} rows.",
    )


@check("六-3")
def _(v, ctx):
    gaps = [value(r["EMP"]) - value(r["EXP"]) for r in T4]
    above, equal, below = sum(g > 0 for g in gaps), sum(g == 0 for g in gaps), sum(g < 0 for g in gaps)
    art = [value(r["paper_emp"]) - value(r["paper_exp"]) for r in SPEEDUP_TABLE if r["paper_emp"] != "—"]
    for key, x in dict(
        t4_n=len(gaps), t4_above=above, t4_equal=equal, t4_below=below, t4_worst=-min(gaps)
    ).items():
        ctx.keep(key, x)
    return Result(
        how="Table 4: EMP against EXP, row by row",
        category=IMPRECISE if below else AGREES,
        note=f"Table 4: {above} above, {equal} equal, {below} below (down to {min(gaps):+.1f}); in "
        f"the article's "
        f"table {sum(g > 0 for g in art)} above, {sum(g < 0 for g in art)} below. 'Appendix A.3' is "
        f"not in our transcription.",
    )


@check("六-4")
def _(v, ctx):
    base, small = t4("EnDe", "T5-base", 0), t4("EnDe", "T5-small", 0)
    sb, ss = t4_speedup(base), t4_speedup(small)
    return Result(
        how="Theorem 3.8 at Table 4's inputs; Table 4's EMP",
        values={
            "exp_base": sb,
            "exp_small": ss,
            "emp_base": value(base["EMP"]),
            "emp_small": value(small["EMP"]),
        },
        category=IMPRECISE,
        note=f"T5-base's expected speedup is above T5-small's ({sb - ss:+.2f}; paper {base['EXP']} "
        f"vs {small['EXP']}), not just 'almost'; "
        "the cause offered (fixed draft overhead) is not tested by the paper or here.",
    )


@check("六-5")
def _(v, ctx):
    a, g, c = value(BIGRAM["alpha"]), int(BIGRAM["gamma"]), value(BIGRAM["c"])
    ctx.keep("bigram_speedup", BIGRAM["speedup"])
    never_loses = bool(np.all(walltime_speedup(ALPHAS[None], GAMMAS[:, None], 0.0) >= 1 - TOL))
    return Result(
        how="Theorem 3.8 at the paper's bigram inputs; c = 0 over the grid",
        values={"alpha": a, "speedup": walltime_speedup(a, g, c)},
        category=None if never_loses else DIFFERS,
        note="A formula value with c = 0, not a measurement (Table 2 has no bigram row).",
    )


@check("六-6")
def _(v, ctx):
    extra = []
    for row in ALPHA_TABLE:
        target = {"GPT-like 97M": "GPT-like (97M)", "T5-XXL (EnDe)": "T5-XXL (EnDe)"}[row["target"]]
        draft = {"unigram": "Unigram", "bigram": "Bigram", "GPT-like 6M": "GPT-like (6M)"}.get(
            row["draft"], row["draft"]
        )
        key = f"{row['draft']} T={row['temp']}"
        extra += compare_printed(
            {key: [row["alpha"]]}, {key: value(t3(target, draft)[f"temp_{row['temp']}"])}
        )
    return Result(how="each cell against Table 3", extra=extra)


@check("六-7")
def _(v, ctx):
    gpt6 = t3("GPT-like (97M)", "GPT-like (6M)")
    quoted = [
        value(t3(t, d)["temp_0"]) for t in ("GPT-like (97M)", "T5-XXL (EnDe)") for d in ("Unigram", "Bigram")
    ]
    all_ngram = [value(r[k]) for r in T3 if r["M_q"] in ("Unigram", "Bigram") for k in ("temp_0", "temp_1")]
    return Result(
        how="Table 3: the quoted rows, and all n-gram rows",
        values={
            "small_low": value(gpt6["temp_0"]),
            "small_high": value(gpt6["temp_1"]),
            "ngram_low": min(quoted),
            "ngram_high": max(quoted),
        },
        note=f"Over all of Table 3 the n-gram drafts span {fmt(min(all_ngram))}-{fmt(max(all_ngram))}.",
    )


# ---------------------------------------------------------------- 七 · where drafts come from


@check("七-1")
def _(v, ctx):
    return Result(how="by reading (Section 3.6, in our transcription)", category=AGREES)


@check("七-7")
def _(v, ctx):
    models = [r for r in T3 if r["M_q"] not in ("Unigram", "Bigram")]
    m_all = [value(r[k]) for r in models for k in ("temp_0", "temp_1")]
    m_t0 = [value(r["temp_0"]) for r in models]
    ngram = [value(r[k]) for r in T3 if r["M_q"] in ("Unigram", "Bigram") for k in ("temp_0", "temp_1")]
    return Result(
        how="Table 3: ranges of α over model drafts and n-gram drafts",
        values={
            "model_low": min(m_all),
            "model_high": max(m_all),
            "ngram_low": min(ngram),
            "ngram_high": max(ngram),
        },
        category=IMPRECISE,
        note=f"Table 3's model drafts span {fmt(min(m_all))}-{fmt(max(m_all))} "
        f"({fmt(min(m_t0))}-{fmt(max(m_t0))} at "
        f"temperature 0), n-grams {fmt(min(ngram))}-{fmt(max(ngram))}; 'typical' ranges, slightly narrow.",
    )


# ---------------------------------------------------------------- 八 · lenience

C_A5 = value(A5_STANDARD[0]["c"])
if any(value(r["c"]) != C_A5 for r in A5_STANDARD):
    raise ValueError("Appendix A.5's standard-sampling rows must share one c")
LEN_ALPHA = {r["lenience"]: value(T5_SMALL_ROW[T5_SMALL_LENIENCE[r["lenience"]]]) for r in A5_STANDARD}
LEN_BEST = {l: float(walltime_speedup(a, optimal_gamma(a, C_A5), C_A5)) for l, a in LEN_ALPHA.items()}
LENIENCE_TABLE = load_article_table("lenience_table")
A5_ARGMAX = [r for r in A5 if r["sampling"] == "argmax"]


def lenience_facts(ctx):
    """Section 八's setting, as the chapter's prose quotes it (Table 5's alpha, A.5's c, best gammas)."""
    ctx.keep("len_alphas", ", ".join(f"{T5_SMALL_ROW[T5_SMALL_LENIENCE[l]]} at l = {l}" for l in LEN_ALPHA))
    ctx.keep("len_best", ", ".join(f"{s:.2f}" for s in LEN_BEST.values()))
    ctx.keep("len_factors", ", ".join(r["speedup"] for r in A5_STANDARD))
    ctx.keep("len_c", A5_STANDARD[0]["c"])
    ctx.keep("len_a5_l1", A5_STANDARD[0]["speedup"])
    ctx.keep("len_art_alpha", printed_values(ctx.claims["八-5"].printed)["alpha"][0])
    t4_row = t4("EnDe", "T5-small", 1)
    for key, col in (("exp", "EXP"), ("emp", "EMP"), ("c", "c"), ("alpha", "alpha"), ("gamma", "gamma")):
        ctx.keep(f"len_t4_{key}", t4_row[col])
    ctx.keep(
        "len_n_article", sum(verdict(r["speedup"], LEN_BEST[r["beta"]]) == AGREES for r in LENIENCE_TABLE)
    )
    ctx.keep(
        "len_n_paper", sum(verdict(r["speedup"], LEN_BEST[r["lenience"]]) == AGREES for r in A5_STANDARD)
    )
    ctx.keep(
        "len_argmax",
        sum(
            verdict(r["speedup"], walltime_speedup(value(r["alpha"]), int(r["gamma"]), value(r["c"])))
            == AGREES
            for r in A5_ARGMAX
        ),
    )
    ctx.keep("len_argmax_n", len(A5_ARGMAX))
    ctx.keep("len_argmax_gamma", " / ".join(sorted({r["gamma"] for r in A5_ARGMAX})))


@check("八-1")
def _(v, ctx):
    return Result(how="by reading (Appendix A.5)", category=AGREES)


@check("八-2")
def _(v, ctx):
    return Result(
        how="by reading (Appendix A.5; specdec.theory.sampling.verify)",
        category=AGREES,
        note="The paper's rule with β for l. Not said: a rejection then resamples from norm(max(0, "
        "p − l q)).",
    )


@check("八-3")
def _(v, ctx):
    leniences = (0.5, 0.3, 0.1)
    excess = max(float(np.max(out_law(p, q, l) - p / l)) for p, q in ctx.pairs for l in leniences)
    # the bound is attained, P(x) = p(x)/l, on every token with p(x) <= l q(x)
    tight = all(
        np.allclose(out_law(p, q, l)[p <= l * q], (p / l)[p <= l * q])
        for p, q in ctx.pairs
        for l in leniences
    )
    # simulation of the package's sampler at one drafted position
    p, q, l, n = np.array([0.5, 0.3, 0.15, 0.05]), np.array([0.1, 0.2, 0.3, 0.4]), 0.3, 40_000
    rows = np.vstack([p, p])
    counts = np.zeros(p.size)
    for x in ctx.rng.choice(p.size, size=n, p=q):  # drafts x ~ q, then one verify call each
        x = int(x)
        n_acc, nxt = verify(rows, q[None], [x], ctx.rng, lenience=l)
        counts[x if n_acc == 1 else nxt] += 1
    closed_form = True  # P(x) = p/l - (1 - l)(p - l q) / (l Z) where p > l q, Z = sum max(0, p - l q)
    for pp, qq in ctx.pairs:
        for ll in leniences:
            hi = pp > ll * qq
            zz = np.maximum(pp - ll * qq, 0).sum()
            want = pp / ll - (1 - ll) * (pp - ll * qq) / (ll * zz)
            closed_form &= bool(np.allclose(out_law(pp, qq, ll)[hi], want[hi]))
    law = out_law(p, q, l)
    z = float(np.max(np.abs(counts / n - law) / np.sqrt(law * (1 - law) / n)))
    ctx.keep("len_pairs", len(ctx.pairs))
    ok = excess <= TOL and tight and closed_form and z < 5
    return Result(
        how="exact output law (acceptance_rate, residual) on random pairs; simulation of verify",
        category=AGREES if ok else DIFFERS,
        note=f"max (P − p/l) = {excess:.1e}; P = p/l wherever p ≤ l q (tight), the closed form "
        f"below elsewhere; "
        f"simulation within {z:.1f} standard errors.",
    )


@check("八-4")
def _(v, ctx):
    p, q, l = np.array([0.5, 0.5]), np.array([1.0, 0.0]), 0.1
    law = out_law(p, q, l)
    return Result(
        how="an example: p = (½, ½), q = (1, 0), l = 0.1",
        category=AGREES if law[1] == 0 < p[1] else DIFFERS,
        note=f"The output law is ({fmt(law[0])}, {fmt(law[1])}): a token of probability ½ is never emitted.",
    )


@check("八-5")
def _(v, ctx):
    extra = compare_printed({"α at l = 1": v["alpha"]}, {"α at l = 1": LEN_ALPHA["1"]})
    speeds = [r["speedup"] for r in LENIENCE_TABLE]
    hits = [
        sum(
            verdict(s, walltime_speedup(a, g, C_A5)) == AGREES
            for s, a in zip(speeds, LEN_ALPHA.values(), strict=True)
        )
        for g in GAMMAS[:65]
    ]
    if any(r["gamma"] or r["M_q"] for r in A5_STANDARD):
        raise ValueError("八-5 reads Appendix A.5 as printing no gamma and no draft")
    return Result(
        how="Table 5 (T5-small α at l = 1, and at each l); Theorem 3.8 at c = 0.015 for every γ ≤ 64",
        extra=extra,
        category=DIFFERS,
        note=f"'The α = {v['alpha'][0]} group' names the configuration (T5-small at l = 1) correctly. The "
        f"faults: 'γ fixed' is not in the paper, which prints no γ or draft here, and one fixed γ ≤ "
        f"{len(hits) - 1} matches at most {max(hits)} of the {len(speeds)} factors as the article prints "
        f"them; and the table leaves out α, which rises with l "
        f"({', '.join(fmt(a) for a in LEN_ALPHA.values())}).",
    )


@check("八-6")
def _(v, ctx):
    extra = []
    for art, paper in zip(LENIENCE_TABLE, A5_STANDARD, strict=True):
        l = art["beta"]
        extra += compare_printed(
            {f"l={l} speedup": [art["speedup"]]}, {f"l={l} speedup": value(paper["speedup"])}
        )
        extra += compare_printed({f"l={l} 1/l": [art["max_amplification"]]}, {f"l={l} 1/l": 1 / value(l)})
    same_l = [a["beta"] for a in LENIENCE_TABLE] == [p["lenience"] for p in A5_STANDARD]
    return Result(
        how="speedups against Appendix A.5; 1/l computed",
        extra=extra,
        category=None if same_l else DIFFERS,
        note=f"'{LENIENCE_TABLE[-1]['speedup']}' adds a digit to the paper's '{A5_STANDARD[-1]['speedup']}'. "
        "The paper's wording of 1/l as 'X' factors is not in our transcription.",
    )


@check("八-7")
def _(v, ctx):
    row = t4("EnDe", "T5-small", 1)
    a, g = value(row["alpha"]), int(row["gamma"])
    printed_value, half = parse_printed(v["speed_a5"][0])
    c_need, g_need = cost_for_best_gamma(a, printed_value - half)  # the bottom of what rounds to it
    ctx.keep("len_c02", t4_speedup(row))
    ctx.keep("len_c015", walltime_speedup(a, g, C_A5))
    ctx.keep("len_best_l1", LEN_BEST["1"])
    ctx.keep("len_c_need", c_need)
    ctx.keep("len_c_need_g", g_need)
    ctx.keep("len_c_need_share", c_need / C_A5)
    return Result(
        how="Theorem 3.8 at α = 0.62 with each c (best γ for A.5); Table 4",
        values={
            "speed_a5": LEN_BEST["1"],
            "exp_sec6": t4_speedup(row),
            "emp_sec6": value(row["EMP"]),
            "c_a5": C_A5,
            "c_sec6": value(row["c"]),
        },
        note=f"c 0.02 → 0.015 moves γ = 7 from {t4_speedup(row):.2f} to "
        f"{float(walltime_speedup(a, g, C_A5)):.2f}; "
        f"the best γ gives {LEN_BEST['1']:.2f}. {fmt(printed_value - half)} needs c ≤ {c_need:.4f}.",
    )


@check("八-8")
def _(v, ctx):
    lo, hi = value(A5_STANDARD[0]["speedup"]), value(A5_STANDARD[-1]["speedup"])
    return Result(
        how="Appendix A.5's first and last factors",
        values={"low": lo, "high": hi},
        note=f"ratio {fmt(hi / lo)}",
    )


# ---------------------------------------------------------------- 九 · engineering implications

OPS_TABLE = load_article_table("ops_table")


@check("九-1")
def _(v, ctx):
    ok = CHECKS["五-16"](v, ctx).category == AGREES
    increments = np.diff(expected_tokens(ALPHAS[None], GAMMAS[:, None]), axis=0)
    ok &= bool(np.all(np.diff(increments, axis=0) <= TOL))
    return Result(how="as 五-16; increments of E[T] in γ shrink", category=AGREES if ok else DIFFERS)


@check("九-2")
def _(v, ctx):
    a = float(v["alpha"][0])
    et = [float(expected_tokens(a, int(g))) for g in v["gamma"]]
    extra = [
        Comparison(f"et (γ = {g})", v["et"][0], e, verdict(v["et"][0], e))
        for g, e in zip(v["gamma"], et, strict=True)
    ]
    return Result(how="Eq. (1) (expected_tokens)", extra=extra, note=f"change {et[1] - et[0]:.1e}")


@check("九-3")
def _(v, ctx):
    extra = []
    for art, paper in zip(OPS_TABLE, T1, strict=True):
        if (art["alpha"], art["gamma"]) != (paper["alpha"], paper["gamma"]):
            raise ValueError(f"九-3: the article's row {art} is not Table 1's {paper}")
        key = f"α={art['alpha']} γ={art['gamma']}"
        extra += compare_printed(
            {f"{key} ops": [art["operations"]], f"{key} speed": [art["speed"]]},
            {f"{key} ops": value(paper["operations"]), f"{key} speed": value(paper["speed"])},
        )
    return Result(how="each cell against Table 1", extra=extra)


@check("九-4")
def _(v, ctx):
    rows = [(value(r["alpha"]), int(r["gamma"]), r["speed"]) for r in OPS_TABLE]
    extra = [Comparison(f"α={fmt(a)} γ={g}", s, float(walltime_speedup(a, g, 0.0)), "") for a, g, s in rows]
    extra = [c._replace(verdict=verdict(c.printed, c.value)) for c in extra]
    falls_with_c = bool(np.all(np.diff(SP, axis=2) <= TOL))
    return Result(
        how="Theorem 3.8 at c = 0; Theorem 3.8 falls as c grows",
        extra=extra,
        category=None if falls_with_c else DIFFERS,
        note="",
    )


@check("九-5")
def _(v, ctx):
    factors = ops_factor(
        ALPHAS[None, :, None], GAMMAS[:21, None, None], np.array([0.0, 0.01, 0.1])[None, None, :]
    )
    least = float(factors.min())
    return Result(
        how="Theorem 3.11 (ops_factor) over α, γ ≤ 20, ĉ ∈ {0, 0.01, 0.1}",
        category=AGREES if least >= 1 - TOL else DIFFERS,
        note=f"smallest factor {fmt(least)} (at γ = 0). The Section 3.4 quotation is not in our "
        f"transcription.",
    )


@check("九-6")
def _(v, ctx):
    ctx.keep("oracle_gain", published.statement("sec3_5_oracle_gain"))
    return Result(
        how="the paper's Section 3.5 (statements): the citation, not the figure",
        values={"gain": value(published.statement("sec3_5_oracle_gain"))},
        note="The article quotes the paper's own figure. The paper states no model behind it; the book's "
        "reconstruction (chapter on the wall-clock speedup) comes close to it but, read to the unit, "
        "differs: a verdict on that model, not on this citation. Measured adaptive rules: see the "
        "measured verdicts.",
    )


# ---------------------------------------------------------------- 十 · limits and summary


@check("十-1")
def _(v, ctx):
    row = t4("EnDe", "T5-large", 0)
    gap = value(row["EXP"]) - value(row["EMP"])
    largest_t4 = max(abs(value(r["EXP"]) - value(r["EMP"])) for r in T4)
    art = [abs(value(r["paper_exp"]) - value(r["paper_emp"])) for r in SPEEDUP_TABLE if r["paper_emp"] != "—"]
    largest = bool(np.isclose(max(art), gap) and np.isclose(largest_t4, gap))
    return Result(
        how="Table 4; gaps of the article's table",
        values={"exp": value(row["EXP"]), "emp": value(row["EMP"])},
        category=NOT_CHECKABLE if largest else DIFFERS,
        note=f"The gap {gap:.1f} is the largest in the article's table and in Table 4; its cause is not "
        "established by the paper or here."
        if largest
        else f"The gap {gap:.1f} is not the largest (Table 4's largest: {largest_t4:.1f}).",
    )


@check("十-3")
def _(v, ctx):
    small, large = t4("EnDe", "T5-small", 0), t4("EnDe", "T5-large", 0)
    return Result(
        how="Table 2",
        values={
            "alpha_small": value(small["alpha"]),
            "speed_small": value(small["EMP"]),
            "alpha_large": value(large["alpha"]),
            "speed_large": value(large["EMP"]),
        },
    )


# ---------------------------------------------------------------- 来源 · sources


@check("来源-1")
def _(v, ctx):
    source = (Path(published.DATA_DIR) / "SOURCE.md").read_text(encoding="utf-8")
    return Result(
        how="by reading (specdec/data/leviathan2023/SOURCE.md)",
        category=AGREES if "18 May 2023" in source else DIFFERS,
        note="The v2 date matches our transcription; the v1 date and 'Oral' are not in the book's sources.",
    )


# ---------------------------------------------------------------- D · the article's own derivations

T1_INPUTS = [(value(r["alpha"]), int(r["gamma"])) for r in OPS_TABLE]
D4_OWN = [float(article_ops_factor(a, g, 0.0)) for a, g in T1_INPUTS]  # the article's model at r = ĉ = 0


def d4_facts(ctx):
    """D4 solved by sympy: the article's model equals Theorem 3.11's exactly when r = ĉ + 1."""
    r_sym, chat_sym = sp.symbols("r c_hat", nonnegative=True)
    article_model = (g_sym * r_sym + 1) / EQ1
    paper_model = (g_sym * chat_sym + g_sym + 1) / EQ1
    (solution,) = sp.solve(sp.Eq(article_model, paper_model), r_sym)
    if sp.simplify(solution - (chat_sym + 1)) != 0:
        raise ValueError(f"D4: expected the models to agree at r = ĉ + 1; sympy gives r = {solution}")
    ctx.keep("d4_solution", str(solution).replace("c_hat", "ĉ"))
    ctx.keep("d4_own_min", min(D4_OWN))
    ctx.keep("d4_own_max", max(D4_OWN))


def d4_models_table() -> list[dict[str, Any]]:
    """Theorem 3.11 against the article's D4 model on Table 1's inputs, for a few ĉ (and r = 1, 1.5)."""
    rows = []
    for a, g in T1_INPUTS:
        row: dict[str, Any] = {"α": fmt(a), "γ": g}
        for ch in (0.0, 0.05, 0.5):
            row[f"Thm 3.11, ĉ={fmt(ch)}"] = f"{float(ops_factor(a, g, ch)):.2f}"
            row[f"article, r=ĉ={fmt(ch)}"] = f"{float(article_ops_factor(a, g, ch)):.2f}"
        row["article, r=1"] = f"{float(article_ops_factor(a, g, 1.0)):.2f}"
        row["article, r=1.5"] = f"{float(article_ops_factor(a, g, 1.5)):.2f}"
        rows.append(row)
    return rows


def section_facts(ctx):
    """The values the chapter quotes outside any one check (section 八's setting, D4's models)."""
    lenience_facts(ctx)
    d4_facts(ctx)


@check("D1")
def _(v, ctx):
    return Result(
        how="as 一-3",
        values={"intensity": FLOPS_PER_PARAM / FP16_BYTES},
        note="The ridge range is not checkable here (一-4).",
    )


@check("D2")
def _(v, ctx):
    params = float(v["params_b"][0])
    _, tps = weight_pass(params, [float(b) for b in v["bandwidth_tbps"]])
    return Result(how="as 一-7 to 一-9", values={"weights_gb": params * FP16_BYTES, "tokens_per_s": tps})


@check("D3")
def _(v, ctx):
    ours = [float(walltime_speedup(*inputs(r))) for r in SPEEDUP_TABLE]
    papers = [paper_row(r)["EXP"] for r in SPEEDUP_TABLE]
    extra = [Comparison("paper EXP", p, o, verdict(p, o)) for p, o in zip(papers, ours, strict=True)]
    measured = [
        (r["paper_emp"], o) for r, o in zip(SPEEDUP_TABLE, ours, strict=True) if r["paper_emp"] != "—"
    ]
    n_meas = sum(verdict(p, o) == AGREES for p, o in measured)
    return Result(
        how="Theorem 3.8 at the article's inputs; against the paper's expected values",
        values={"speedup": ours},
        extra=extra,
        category=IMPRECISE,
        note=f"They match Table 4's expected column, which is Theorem 3.8 at the same inputs (a check of "
        f"arithmetic, see 六-2); against Table 2's measured speeds, which the claim also names, "
        f"{n_meas} of {len(measured)} agree.",
    )


@check("D4a")
def _(v, ctx):
    r = float(v["r"][0])
    return Result(
        how="the article's model (article_ops_factor) at r = 1; Theorem 3.8 at c = 0",
        values={
            "operations": [article_ops_factor(a, g, r) for a, g in T1_INPUTS],
            "speed": [walltime_speedup(a, g, 0.0) for a, g in T1_INPUTS],
        },
    )


@check("D4b")
def _(v, ctx):
    r = float(v["r"][0])
    same_at_r1 = np.allclose(
        [article_ops_factor(a, g, r) for a, g in T1_INPUTS], [ops_factor(a, g, 0.0) for a, g in T1_INPUTS]
    )
    differ_elsewhere = not np.allclose(
        [article_ops_factor(a, g, 0.5) for a, g in T1_INPUTS], [ops_factor(a, g, 0.5) for a, g in T1_INPUTS]
    )
    return Result(
        how="sympy: article model = Theorem 3.11 solved for r; both models on Table 1's inputs",
        category=DIFFERS if (same_at_r1 and differ_elsewhere) else AGREES,
        note=f"Equal iff r = ĉ + 1: r = 1 stands for ĉ = 0 plus the target's γ extra positions, not a draft "
        f"as costly as the target. With r = ĉ = 0 the model gives {min(D4_OWN):.2f}-{max(D4_OWN):.2f} < 1.",
    )


@check("D5")
def _(v, ctx):
    ok = all(
        sp.limit(EQ1.subs(a_sym, a), g_sym, sp.oo) == 1 / (1 - a)
        for a in (sp.Rational(1, 5), sp.Rational(1, 2), sp.Rational(9, 10))
    )
    return Result(how="sympy: limit of Eq. (1) as γ → ∞", category=AGREES if ok else DIFFERS)


@check("D6")
def _(v, ctx):
    tokens, runs = value(published.statement("sec1_tokens")), value(published.statement("sec1_runs"))
    return Result(
        how="the paper's Section 1 (statements)",
        values={"tokens": tokens, "runs": runs, "per_run": tokens / runs},
    )
