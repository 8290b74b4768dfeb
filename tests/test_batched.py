"""Tests of batched decoding (specdec.engine.batched) on tiny random Llama models, fp32 CPU.

1. The masked cache: a batch with left padding and holes gives each row the logits of its own
   sequence; truncate, crop and select keep ids, slots and cache consistent.
2. Greedy: every row of batched speculative decoding equals plain greedy decoding of that
   prompt alone, for b = 1..4, prompts of different lengths, several gammas, model and
   prompt-lookup drafters, both cuts; batched plain decoding too.
3. b = 1 draws the single-sequence loops' numbers: the same tokens at temperature 1.
4. Sampling is lossless at b > 1 (Appendix A.1, row by row): a chi-square test of each row's
   first two tokens against the target's exact law, for both cuts; the same test rejects a
   residual replaced by p and a common cut that emits the wrong position's token.
5. Budgets, EOS per row, statistics; bad input raises ValueError.
6. specdec run batch-surface end to end on tiny models, derived numbers recomputed, and resumed.
"""

from __future__ import annotations

import json
import shlex
import statistics

import numpy as np
import pytest
import torch
from tiny_models import VOCAB, next_token_logits, perturbed_copy, tiny_llama

import specdec.engine.batched
import specdec.theory.sampling
import specdec.theory.treeverify
from specdec.analysis.batchcost import (
    gain_intervals,
    predicted_gains,
    round_decomposition,
    straggler_factor,
    surface,
    vanishing_batch,
)
from specdec.engine.batched import BatchedLM, batched_autoregressive, batched_speculative
from specdec.engine.decoding import autoregressive, speculative
from specdec.engine.drafters import ModelDrafter, PromptLookupDrafter
from specdec.measure.batchruns import block_plan
from specdec.theory.chisquare import chi_square_pvalue
from specdec.theory.sampling import warp
from specdec.theory.speedup import expected_tokens

pytestmark = pytest.mark.usefixtures("one_thread")

#: Prompts of different lengths (the third repeats an n-gram: prompt lookup drafts there).
PROMPTS = [[7], [3, 14, 15, 92, 65], [11, 22, 33, 44, 11, 22, 33, 55, 66, 11, 22, 33], [5, 6]]


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0)


@pytest.fixture(scope="module")
def drafts(target):
    """A close copy of the target (alpha ~ 0.8: rejections and full accepts) and an unrelated model."""
    return {"good": perturbed_copy(target, 0.05, 5), "random": tiny_llama(1, layers=1)}


@pytest.fixture(scope="module")
def greedy(target):
    return [autoregressive(target, p, max_new_tokens=20).tokens for p in PROMPTS]


# -- 1. the masked cache -------------------------------------------------------------------------


def test_left_padding_and_holes_give_each_row_its_own_logits(target):
    lm = BatchedLM(target, 3)
    rows = [[3, 14, 15, 92, 65], [7, 8], [41]]
    first = lm.feed(rows)  # rows 1 and 2 are left-padded
    for i, row in enumerate(rows):
        ref = next_token_logits(target, [row])[0]
        torch.testing.assert_close(first[i, -1], ref, rtol=1e-5, atol=1e-5)
    # rejected tokens leave holes in rows 0 and 2 only; then every row goes on
    lm.feed([[50, 51], [9, 10], [60, 61]])
    lm.truncate([5, 4, 2])
    assert lm.ids == [[3, 14, 15, 92, 65], [7, 8, 9, 10], [41, 60]]
    assert lm.width == 7  # column 6 is still used by row 1
    out = lm.feed([[12], [13, 14], [15]])
    assert bool(torch.isfinite(out[:, -1]).all())
    for i, row in enumerate(lm.ids):
        torch.testing.assert_close(out[i, -1], next_token_logits(target, [row])[0], rtol=1e-5, atol=1e-5)


def test_truncate_crops_columns_masked_in_every_row_and_select_keeps_rows(target):
    lm = BatchedLM(target, 2)
    lm.feed([[1, 2, 3], [4]])
    lm.feed([[5, 6], [7, 8]])
    assert lm.width == 5 and lm.cache.get_seq_length() == 5
    lm.truncate([4, 2])  # row 0 keeps column 3, row 1 nothing after column 3
    assert lm.width == 4 and lm.cache.get_seq_length() == 4
    assert lm.slots == [[0, 1, 2, 3], [2, 3]]
    lm.select([1])
    assert lm.ids == [[4, 7]] and lm.mask.shape == (1, 4)
    logits = lm.sync([[4, 7, 9]])
    torch.testing.assert_close(logits[0], next_token_logits(target, [[4, 7, 9]])[0], rtol=1e-5, atol=1e-5)
    lm.truncate([0])
    assert lm.width == 0 and lm.cache.get_seq_length() == 0


# -- 2. greedy: each row equals plain decoding of its prompt alone ---------------------------------


@pytest.mark.parametrize("b", [1, 2, 3, 4])
@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_greedy_rows_equal_plain_decoding(target, drafts, greedy, b, gamma):
    prompts = PROMPTS[:b] if b > 1 else PROMPTS[1:2]
    expected = greedy[:b] if b > 1 else greedy[1:2]
    for drafter in (drafts["good"], drafts["random"], PromptLookupDrafter()):
        for cut in ("ragged", "common"):
            out = batched_speculative(target, drafter, prompts, gamma=gamma, max_new_tokens=20, cut=cut)
            assert out.tokens == expected, (type(drafter).__name__, cut)
            check_invariants(out, gamma, 20, cut)


def test_greedy_batched_plain_equals_plain(target, greedy):
    out = batched_autoregressive(target, PROMPTS, max_new_tokens=20)
    assert out.tokens == greedy
    assert out.batch_sizes == [4] * 20 and out.rounds == 20


def test_greedy_mix_of_rounds(target, drafts):
    """The greedy tests are only as strong as the rounds they see: rejections, full accepts and,
    with the common cut, rows cut below their own accepted count."""
    out = batched_speculative(target, drafts["good"], PROMPTS, gamma=3, max_new_tokens=20)
    hist = np.sum([s.accepted_hist for s in out.stats], axis=0)
    assert hist[0] > 0 and hist[3] > 0
    common = batched_speculative(target, drafts["good"], PROMPTS, gamma=3, max_new_tokens=20, cut="common")
    pairs = [
        (a, e)
        for s, em in zip(common.stats, common.emitted, strict=True)
        for a, e in zip(s.accepted, em, strict=True)
    ]
    below = sum(e - 1 < a for a, e in pairs)
    assert below > 0


# -- 3. b = 1 is the single-sequence loop ----------------------------------------------------------


@pytest.mark.parametrize("prompt", PROMPTS)
def test_batch_of_one_draws_what_the_single_sequence_loops_draw(target, drafts, prompt):
    for seed in range(4):
        kw = {"max_new_tokens": 15, "temperature": 1.0, "seed": seed}
        one = batched_speculative(target, drafts["good"], [prompt], gamma=3, **kw)
        ref = speculative(target, ModelDrafter(drafts["good"]), prompt, gamma=3, **kw)
        assert one.tokens[0] == ref.tokens
        assert one.stats[0].accepted == ref.stats.accepted
        plain = batched_autoregressive(target, [prompt], **kw)
        assert plain.tokens[0] == autoregressive(target, prompt, **kw).tokens


# -- 4. sampling is lossless at b > 1 --------------------------------------------------------------

N_RUNS = 700  # batched runs; each gives one sample per row
P_MIN = 1e-3  # pass threshold of the chi-square p-value; seeds are fixed, so the outcome is too
#: Three rows: two share a prefix, one is longer (left padding in every round).
SAMPLING_PREFIXES = [[36], [12, 50, 36], [36]]


@pytest.fixture(scope="module")
def small_target():
    """A one-layer target: the sampling tests need thousands of calls."""
    return tiny_llama(0, layers=1)


@pytest.fixture(scope="module")
def loose_draft(small_target):
    """alpha about 0.6 after the prefix [36] (tests/test_decoding.py's sampling case)."""
    return perturbed_copy(small_target, 0.3, 7)


def exact_two_token_law(model, prefix):
    p1 = warp(next_token_logits(model, [prefix]), temperature=1.0)[0].double()
    p2 = warp(next_token_logits(model, [prefix + [x] for x in range(VOCAB)]), temperature=1.0).double()
    law = (p1[:, None] * p2).numpy()
    return law / law.sum()


def first_two_counts(target, draft, cut, n=N_RUNS):
    counts = np.zeros((len(SAMPLING_PREFIXES), VOCAB, VOCAB))
    cut_below = 0
    for seed in range(n):
        out = batched_speculative(
            target, draft, SAMPLING_PREFIXES, gamma=2, max_new_tokens=3, temperature=1.0, seed=seed, cut=cut
        )
        for i, tokens in enumerate(out.tokens):
            counts[i, tokens[0], tokens[1]] += 1
        first = [(s.accepted[0], e[0]) for s, e in zip(out.stats, out.emitted, strict=True)]
        cut_below += any(e - 1 < a for a, e in first)
    return counts, cut_below


def row_pvalues(target, counts):
    return [
        chi_square_pvalue(counts[i], exact_two_token_law(target, prefix))["pvalue"]
        for i, prefix in enumerate(SAMPLING_PREFIXES)
    ]


@pytest.mark.parametrize("cut", ["ragged", "common"])
def test_each_row_has_the_target_law(small_target, loose_draft, cut):
    counts, cut_below = first_two_counts(small_target, loose_draft, cut)
    assert min(row_pvalues(small_target, counts)) > P_MIN
    if cut == "common":  # the check saw rows cut below their own accepted count
        assert cut_below > N_RUNS // 10


def test_check_rejects_a_residual_replaced_by_p(small_target, loose_draft, monkeypatch):
    """A broken verify that resamples a rejected position from p, not norm(max(0, p - q))."""
    broken = lambda p, q, lenience=1.0, token=None: p  # noqa: E731
    monkeypatch.setattr(specdec.theory.sampling, "residual", broken)
    monkeypatch.setattr(specdec.theory.treeverify, "residual", broken)  # the name the verifier calls
    counts, _ = first_two_counts(small_target, loose_draft, "ragged")
    assert min(row_pvalues(small_target, counts)) < P_MIN


def test_check_rejects_a_common_cut_that_emits_the_wrong_token(small_target, loose_draft, monkeypatch):
    """A broken common cut: a row cut below its accepted count emits its own token (drawn by
    verify after its last accepted draft) at the cut, instead of its accepted draft there."""
    monkeypatch.setattr(
        specdec.engine.batched, "_kept_tokens", lambda draft, n, own, cut_at: [*draft[:cut_at], own]
    )
    counts, _ = first_two_counts(small_target, loose_draft, "common")
    assert min(row_pvalues(small_target, counts)) < P_MIN


# -- 5. budgets, EOS, statistics -----------------------------------------------------------------


def check_invariants(out, gamma, max_new_tokens, cut="ragged"):
    assert len(out.tokens) == len(out.stats) == len(out.emitted)
    for tokens, s, emitted in zip(out.tokens, out.stats, out.emitted, strict=True):
        assert len(tokens) == s.new_tokens <= max_new_tokens
        assert sum(emitted) == s.new_tokens + s.dropped_after_eos
        assert len(emitted) == s.rounds == s.target_calls
        assert all(0 <= a <= k <= gamma for a, k in zip(s.accepted, s.drafted, strict=True))
        kept = [e - 1 for e in emitted]
        if cut == "ragged":
            assert kept == s.accepted
        else:
            assert all(k <= a + 1 for k, a in zip(kept, s.accepted, strict=True))
    assert out.batch_sizes == sorted(out.batch_sizes, reverse=True)
    assert out.batch_sizes[0] == len(out.tokens)
    assert sum(out.batch_sizes) == sum(s.rounds for s in out.stats)


def test_budget_is_exact_for_every_gamma(target, drafts):
    for n in (1, 2, 5, 7):
        for gamma in (1, 4, 8):
            out = batched_speculative(target, drafts["good"], PROMPTS, gamma=gamma, max_new_tokens=n)
            assert [len(t) for t in out.tokens] == [n] * len(PROMPTS)
            check_invariants(out, gamma, n)


def test_eos_ends_its_row_only(target, drafts, greedy):
    """The EOS id is row 1's 4th greedy token: row 1 stops there (EOS kept), the others go on."""
    eos = greedy[1][3]
    expected = []
    for row in greedy:
        expected.append(row[: row.index(eos) + 1] if eos in row else row)
    for drafter in (drafts["good"], PromptLookupDrafter()):
        out = batched_speculative(target, drafter, PROMPTS, gamma=4, max_new_tokens=20, eos_token_id=eos)
        assert out.tokens == expected
        assert out.batch_sizes[-1] < len(PROMPTS)
        check_invariants(out, 4, 20)
    plain = batched_autoregressive(target, PROMPTS, max_new_tokens=20, eos_token_id=eos)
    assert plain.tokens == expected


def test_times_and_counts(target, drafts):
    out = batched_speculative(target, drafts["good"], PROMPTS, gamma=3, max_new_tokens=12)
    assert out.prefill_s > 0 and out.draft_s > 0 and out.target_s > 0 and out.verify_s > 0
    assert out.decode_s >= out.draft_s + out.target_s + out.verify_s
    assert out.new_tokens == 12 * len(PROMPTS)
    # one batched draft step per drafted position of the round's longest draft (gamma, budget allowing)
    assert all(s.drafted_tokens <= s.draft_calls <= 3 * s.rounds for s in out.stats)
    assert all(0 < s.alpha_accept_rate <= 1 for s in out.stats)


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompts": []}, "empty batch"),
        ({"prompts": [3, 4, 5]}, "flat list"),
        ({"prompts": "abc"}, "list of prompts"),
        ({"prompts": [[3], []]}, r"prompts\[1\].*empty prompt"),
        ({"prompts": [[3], [VOCAB]]}, r"prompts\[1\].*vocabulary"),
        ({"gamma": 0}, "gamma"),
        ({"gamma": 2.5}, "gamma"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"temperature": -1.0}, "temperature"),
        ({"cut": "smallest"}, "cut"),
        ({"drafter": "lookup"}, "drafter"),
        ({"eos_token_id": VOCAB}, "eos_token_id"),
    ],
)
def test_bad_input(target, drafts, kwargs, message):
    args = {"drafter": drafts["good"], "prompts": PROMPTS, "gamma": 3, "max_new_tokens": 5, **kwargs}
    drafter, prompts = args.pop("drafter"), args.pop("prompts")
    with pytest.raises(ValueError, match=message):
        batched_speculative(target, drafter, prompts, **args)


def test_bad_models(target, drafts):
    with pytest.raises(ValueError, match="the draft model itself"):
        batched_speculative(target, ModelDrafter(drafts["good"]), PROMPTS, gamma=2, max_new_tokens=3)
    with pytest.raises(ValueError, match="vocabulary size"):
        batched_speculative(target, tiny_llama(2, vocab=50), PROMPTS, gamma=2, max_new_tokens=3)
    with pytest.raises(ValueError, match="target must be a Hugging Face causal LM"):
        batched_autoregressive(torch.nn.Linear(2, 2), PROMPTS, max_new_tokens=3)
    with pytest.raises(ValueError, match="batch"):
        BatchedLM(target, 0)
    lm = BatchedLM(target, 2)
    with pytest.raises(ValueError, match="one block per row"):
        lm.feed([[1]])
    with pytest.raises(ValueError, match="at least one token"):
        lm.feed([[], []])
    lm.feed([[1, 2], [3]])
    with pytest.raises(ValueError, match=r"lengths\[1\]"):
        lm.truncate([1, 2])
    with pytest.raises(ValueError, match="rows"):
        lm.select([1, 0])


# -- the benchmark, end to end on tiny models ------------------------------------------------------


def test_batch_surface_benchmark_end_to_end_and_resume(tmp_path, one_thread, capsys):
    """The program's steps on tiny models: every derived number recomputed from the raw times and
    counts, greedy rows equal to plain decoding's, then a resume that measures only what is missing."""
    from specdec.cli.app import main
    from specdec.experiments import batchsurface as bench

    out = tmp_path / "record.json"
    options = ["--quick", "--tiny", "--no-progress", "--modes", "float32", "--out", str(out)]
    args = ["run", "batch-surface", *options]
    assert main(args) == 0
    rec = json.loads(out.read_text())
    assert rec["kind"] == "batch-surface" and rec["status"]["finished"]
    want = ["--quick", "--tiny", "--modes", "float32", "--out", str(out), "--no-progress"]
    assert rec["command"] == shlex.join(["specdec", "run", "batch-surface", *want])
    assert rec["status"]["steps_done"] == list(bench.STEPS)
    assert rec["machine"]["name"] and rec["environment"]["device_name"] == rec["machine"]["name"]
    models = ["target-float32", "draft-float32"]
    plan = block_plan(models, bench.QUICK["batches"], bench.QUICK["passes"])
    blocks = rec["surface"]["blocks"]
    assert [(b["pass"], b["model"], b["b"]) for b in blocks] == plan
    for cell in rec["surface"]["cells"]["target-float32"]:
        mine = [b for b in blocks if b["model"] == "target-float32" and b["b"] == cell["b"]]
        times = [b["times_s"][str(cell["k"])] for b in mine]
        ones = [b["times_s"]["1"] for b in mine]
        assert cell["median_s"] == pytest.approx(statistics.median(times), rel=1e-12)
        assert cell["ratio_to_k1"] == pytest.approx(
            statistics.median(times) / statistics.median(ones), rel=1e-12
        )
    # the prediction at gamma: Theorem 3.8 with the measured verify cost and c(b), by hand
    gamma, dec = rec["settings"]["gamma"], rec["decoding"]
    draft_cfg = dec["draft_config"]
    alpha = rec["prediction"]["alpha"][draft_cfg]
    accepted = sum(sum(u["runs"][draft_cfg]["accepted"]) for u in dec["units"])
    examined = sum(sum(u["runs"][draft_cfg]["examined"]) for u in dec["units"])
    assert alpha == pytest.approx(accepted / examined, rel=1e-12)
    for b in dec["batches"]:
        row = rec["prediction"]["at_gamma"]["configs"][draft_cfg][str(b)]
        t = {
            k: statistics.median(
                x["times_s"][str(k)] for x in blocks if x["model"] == models[0] and x["b"] == b
            )
            for k in (1, gamma + 1)
        }
        d1 = statistics.median(x["times_s"]["1"] for x in blocks if x["model"] == models[1] and x["b"] == b)
        expected = expected_tokens(alpha, gamma) / (gamma * d1 / t[1] + t[gamma + 1] / t[1])
        assert row["predicted"] == pytest.approx(float(expected), rel=1e-9)
        units = [u for u in dec["units"] if u["b"] == b]
        ratios = [u["runs"]["plain"]["decode_s"] / u["runs"][draft_cfg]["decode_s"] for u in units]
        assert row["measured"][0] == pytest.approx(float(np.exp(np.mean(np.log(ratios)))), rel=1e-9)
    for b, row in dec["summary"].items():  # greedy, float32: every row equals plain decoding's
        for name in dec["configs"]:
            assert row[name]["rows_equal_plain"] == 1.0, (b, name)
    assert all(
        u["runs"][n]["tokens"] == u["b"] * rec["settings"]["new_tokens"]
        for u in dec["units"]
        for n in u["runs"]
    )

    # the speedup splits exactly into tokens per batch round over the round's cost in plain steps
    for name in dec["configs"]:
        for b, parts in round_decomposition(dec["units"], name).items():
            ratio = parts["tokens_per_batch_round"] / parts["round_cost_steps"]
            assert ratio == pytest.approx(dec["summary"][str(b)][name]["speedup"][0], rel=1e-9)
    # a static batch runs as many rounds as its slowest row; a common cut keeps rows together
    assert all(f == pytest.approx(1.0) for f in straggler_factor(dec["units"], "lookup, common cut").values())
    assert straggler_factor(dec["units"], draft_cfg)[1] == pytest.approx(1.0)
    assert all(f >= 1.0 - 1e-12 for f in straggler_factor(dec["units"], "lookup").values())

    # an interrupted run: the last blocks and unit are missing; the rerun measures only those
    units = list(dec["units"])
    rec["surface"]["blocks"], rec["decoding"]["units"] = blocks[:-3], units[:-1]
    rec["status"]["steps_done"] = []
    out.write_text(json.dumps(rec))
    assert main(args) == 0
    again = json.loads(out.read_text())
    assert again["surface"]["blocks"][:-3] == blocks[:-3]
    assert [(b["pass"], b["model"], b["b"]) for b in again["surface"]["blocks"]] == [
        (b["pass"], b["model"], b["b"]) for b in blocks
    ]
    assert again["decoding"]["units"][:-1] == units[:-1]
    assert len(again["decoding"]["units"]) == len(units) and len(again["sessions"]) == 2
    assert main([*args, "--passes", "3"]) == 2  # refused, one line: a partial record of other settings
    assert "other settings" in capsys.readouterr().err
    # a step measured again on demand: its data replaced, the reason kept
    assert main([*args, "--redo", "decoding", "--redo-reason", "test"]) == 0
    redone = json.loads(out.read_text())
    assert redone["status"]["redone"][-1]["step"] == "decoding" and redone["status"]["finished"]
    assert len(redone["decoding"]["units"]) == len(units)
    common = redone["prediction"]["at_gamma"]["configs"]["lookup, common cut"]
    a = redone["prediction"]["alpha"]["lookup"]
    for b, row in common.items():
        assert row["predicted_tokens_per_round"] == pytest.approx(float(expected_tokens(a ** int(b), gamma)))


def test_gain_intervals_resample_whole_passes():
    """The vectorised bootstrap of gain_intervals, redone draw by draw with the same resampled passes."""
    rng = np.random.default_rng(3)
    blocks = []
    for r in range(4):
        for b in (1, 8):
            slow = 1 + 0.3 * rng.random()  # a pass-wide slowdown
            times = {str(k): slow * (0.05 + 0.01 * b * k) * (1 + 0.05 * rng.random()) for k in (1, 2, 3, 4)}
            blocks.append({"pass": r, "model": "t", "b": b, "times_s": times})
            blocks.append({"pass": r, "model": "d", "b": b, "times_s": {"1": slow * 0.004 * (1 + 0.1 * b)}})
    out = gain_intervals(blocks, "t", 0.6, draft="d", n_boot=300, seed=5)
    idx = np.random.default_rng(5).integers(0, 4, size=(300, 4))
    for b in (1, 8):
        best = []
        for draw in idx:
            med = {
                k: np.median(
                    [
                        blk["times_s"][str(k)]
                        for p in draw
                        for blk in blocks
                        if blk["pass"] == p and blk["model"] == "t" and blk["b"] == b
                    ]
                )
                for k in (1, 2, 3, 4)
            }
            cd = (
                np.median(
                    [
                        blk["times_s"]["1"]
                        for p in draw
                        for blk in blocks
                        if blk["pass"] == p and blk["model"] == "d" and blk["b"] == b
                    ]
                )
                / med[1]
            )
            best.append(
                max(float(expected_tokens(0.6, g)) / (g * cd + med[g + 1] / med[1]) for g in (1, 2, 3))
            )
        est, lo, hi = out["batches"][b]["gain"]
        assert (lo, hi) == pytest.approx(tuple(np.percentile(best, [2.5, 97.5])), rel=1e-12)
        point = predicted_gains(
            surface(blocks, "t"),
            0.6,
            {bb: surface(blocks, "d")[(bb, 1)] / surface(blocks, "t")[(bb, 1)] for bb in (1, 8)},
        )
        assert est == pytest.approx(point[b]["gain"], rel=1e-12)
    assert vanishing_batch({1: 1.2, 2: 0.9, 4: 1.1, 8: 0.8}) == 8
    assert vanishing_batch({1: 0.9, 2: 0.8}) == 1 and vanishing_batch({1: 1.3, 2: 1.1}) is None
