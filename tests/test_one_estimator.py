"""Issue 41, item 4: a speedup computed anywhere in ``specdec`` is
:func:`specdec.theory.intervals.paired_speedup`'s, to the last bit (synthetic timings; no thresholds). Before,
several places wrote their own geometric mean of ratios (of tokens/s rather than of times, or ``exp(log x)``
for one prompt), equal only up to rounding."""

from __future__ import annotations

import numpy as np

from specdec.theory.intervals import paired_speedup

RNG = np.random.default_rng(41)


def test_a_fixed_configuration_over_its_own_plain_is_paired_speedup_of_time_per_token():
    from specdec.analysis.crossfit import _ratio

    strata = [("t", i % 2) for i in range(12)]
    for _ in range(10):  # the old geometric mean of tokens/s ratios differed in the last bits half the time
        num, den = 100 * np.exp(RNG.normal(0.1, 0.2, 12)), 100 * np.exp(RNG.normal(0, 0.2, 12))
        got = _ratio(num, den, strata, 500, 3, 0.9)
        want = paired_speedup(1 / den, 1 / num, strata=strata, n_boot=500, seed=3, level=0.9)
        assert (got["estimate"], got["low"], got["high"]) == want


def test_dynamic_gamma_per_task_is_paired_speedup_on_the_tasks_prompts(capsys):
    from specdec.measure.dynamicgamma import summarize

    prompts = [("a", "p0"), ("a", "p1"), ("a", "p2"), ("b", "p3")]  # task b: a single prompt
    rows = []
    for config, scale in (("plain", 1.0), ("x", 0.7)):
        for task, p in prompts:
            for rep in range(3):
                t = scale * float(np.exp(RNG.normal(0, 0.3)))
                if p == "p3":  # a ratio that exp(log(.)) does not return exactly: 1.724 / 0.504
                    t = 1.724 if config == "plain" else 0.504
                rows.append({"config": config, "prompt": p, "task": task, "repeat": rep, "decode_s": t,
                             "mean_drafted": 1.0, "tokens_per_round": 1.5})  # fmt: skip
    out = summarize(rows, ["x"])["configs"]["x"]
    capsys.readouterr()

    def med(config: str, p: str) -> float:
        return float(np.median([r["decode_s"] for r in rows if r["config"] == config and r["prompt"] == p]))

    a = [p for t, p in prompts if t == "a"]
    assert out["per_task"]["a"] == paired_speedup([med("plain", p) for p in a], [med("x", p) for p in a])[0]
    assert out["per_task"]["b"] == med("plain", "p3") / med("x", "p3")  # one prompt: its ratio, exactly


def test_seen_and_unseen_prompts_are_paired_speedup_of_time_per_token():
    from specdec.analysis.treetables import seen_unseen

    configs = [
        {"id": "e/plain", "engine": "e", "plain": True},
        {"id": "e/lookup", "engine": "e", "plain": False},
    ]
    prompts = [f"p{i}" for i in range(6)]
    runs = [
        {"temperature": 0.0, "task": "t", "prompt": p, "config": c["id"], "drafter": "x", "rep": rep,
         "decode_s": float(np.exp(RNG.normal(0, 0.3))), "new_tokens": 32}
        for c in configs for p in prompts for rep in range(3)
    ]  # fmt: skip

    def time_per_token(config: str, p: str) -> float:
        return 1 / float(np.median([r["new_tokens"] / r["decode_s"] for r in runs
                                    if r["config"] == config and r["prompt"] == p]))  # fmt: skip

    for _ in range(10):
        for r in runs:
            r["decode_s"] = float(np.exp(RNG.normal(0, 0.3)))
        (row,) = seen_unseen({"runs": runs, "configs": configs}, prompts[:3])
        for key, group in (("seen", prompts[:3]), ("unseen", prompts[3:])):
            base = [time_per_token("e/plain", p) for p in group]
            assert row[key] == paired_speedup(base, [time_per_token("e/lookup", p) for p in group])[0]


def test_the_engine_benchmarks_speedups_are_paired_speedup_of_time_per_token():
    from specdec.measure.enginebench import summarize

    engines, prompts = ["lean", "llama.cpp"], ["p0", "p1", "p2", "p3"]
    cell = {"k": 1, "median_s": 0.01, "ratio_to_k1": 1.0, "ratio_ci": [1.0, 1.0]}
    verify = {"engines": {e: [cell] for e in engines}}
    for _ in range(10):
        rows = [
            {"engine": e, "prompt": p, "plain_tok_s": float(50 * np.exp(RNG.normal(0, 0.2))),
             "lookup_tok_s": float(70 * np.exp(RNG.normal(0, 0.2))), "greedy_exact": True}
            for e in engines for p in prompts for _ in range(3)
        ]  # fmt: skip
        out = summarize(verify, {"rows": rows}, engines, log=lambda _line: None)["engines"]["lean"]

        def time_per_token(e: str, key: str, rows: list = rows) -> np.ndarray:
            return np.array([1 / np.median([r[key] for r in rows if r["engine"] == e and r["prompt"] == p])
                             for p in prompts])  # fmt: skip

        plain = {e: time_per_token(e, "plain_tok_s") for e in engines}
        lookup = time_per_token("lean", "lookup_tok_s")
        assert out["lookup_over_plain"] == paired_speedup(plain["lean"], lookup)
        assert out["plain_over_llama.cpp"] == paired_speedup(plain["llama.cpp"], plain["lean"])
