"""specdec.measure.pairedrun: the one paired plain-vs-speculative driver (order, rows, slimming), on a fake
timer
and, once, on a tiny model (greedy speculative decoding equals plain decoding)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from specdec.measure.pairedrun import finish_cell, paired_block, timing_row, tokens_digest
from specdec.theory.tokens import common_prefix_len, first_divergence


class FakeStats:
    prefill_s, draft_s, target_s, verify_s, rounds, target_calls, new_tokens = 0.5, 0.1, 1.0, 0.2, 3, 4, 5

    def summary(self):
        return {"rounds": 3, "draft_s": 0.1}


def fake_timer(calls):
    def timer(target, drafter, ids, **kw):
        calls.append(drafter)
        return [1, 2, 3] if drafter is None else [1, 2, 4], FakeStats(), 2.0

    return timer


def configs(*names):
    return [{"drafter": n, "object": n, "gamma": 2, "lenience": 1.0} for n in names]


def test_paired_block_alternates_plain_and_shuffles_the_configs():
    calls: list = []
    rng = np.random.default_rng(0)
    orders = []
    for rep in range(6):
        calls.clear()
        rows = paired_block(
            None,
            configs("a", "b", "c"),
            [0],
            temperature=0.0,
            new_tokens=3,
            seed=0,
            rep=rep,
            rng=rng,
            timer=fake_timer(calls),
        )
        assert sorted(map(str, calls)) == ["None", "a", "b", "c"]  # each once
        assert (calls[0] is None) == (rep % 2 == 0) and (calls[-1] is None) == (rep % 2 == 1)
        assert [r["drafter"] for r in rows] == ["plain" if c is None else c for c in calls]
        assert all(r["rep"] == rep and r["decode_s"] == 1.5 for r in rows)  # total - prefill
        orders.append(tuple(c for c in calls if c is not None))
    assert len(set(orders)) > 1


def test_paired_block_random_puts_plain_first_about_half_the_time():
    calls: list = []
    rng = np.random.default_rng(1)
    firsts = []
    for rep in range(200):
        calls.clear()
        paired_block(
            None,
            configs("s"),
            [0],
            temperature=0.0,
            new_tokens=3,
            seed=0,
            rep=rep,
            rng=rng,
            plain_at="random",
            timer=fake_timer(calls),
        )
        firsts.append(calls[0] is None)
    assert 70 < sum(firsts) < 130
    with pytest.raises(ValueError, match="plain_at"):
        paired_block(None, [], [0], temperature=0, new_tokens=1, seed=0, rep=0, rng=rng, plain_at="x")


def test_paired_block_anywhere_puts_plain_at_each_position_alike():
    """``plain_at="anywhere"``: every configuration once, plain among them at a position drawn uniformly
    (a chi-square over 600 repetitions of 3 configurations: 4 places), independent of the repetition's
    parity (the alternating rule's first and last); the configurations' own order is the alternating
    rule's (the same draws, then one for plain's place)."""
    from scipy import stats

    calls: list = []
    rng, twin = np.random.default_rng(3), np.random.default_rng(3)
    where = {0: [0] * 4, 1: [0] * 4}
    for rep in range(600):
        calls.clear()
        paired_block(None, configs("a", "b", "c"), [0], temperature=0.0, new_tokens=3, seed=0, rep=rep,
                     rng=rng, plain_at="anywhere", timer=fake_timer(calls))  # fmt: skip
        assert sorted(map(str, calls)) == ["None", "a", "b", "c"]
        at = calls.index(None)
        where[rep % 2][at] += 1
        order = [["a", "b", "c"][i] for i in twin.permutation(3)]
        assert [c for c in calls if c is not None] == order and at == int(twin.integers(4))
    for parity in (0, 1):  # each parity's 300 repetitions spread over the 4 places
        assert stats.chisquare(where[parity]).pvalue > 1e-4, where
    refusal = r"plain_at must be one of \('alternate', 'random', 'anywhere'\); got 'middle'"
    with pytest.raises(ValueError, match=refusal):
        paired_block(None, [], [0], temperature=0, new_tokens=1, seed=0, rep=0, rng=rng, plain_at="middle")


def test_alternate_and_random_draw_what_they_drew_before_anywhere_existed():
    """The orders of the earlier rules, draw for draw: "alternate" one permutation, plain first on even
    repetitions and last on odd ones; "random" one uniform (plain first below 1/2), then the permutation."""
    for plain_at in ("alternate", "random"):
        calls: list = []
        rng, twin = np.random.default_rng(7), np.random.default_rng(7)
        for rep in range(20):
            calls.clear()
            paired_block(None, configs("a", "b", "c"), [0], temperature=0.0, new_tokens=3, seed=0, rep=rep,
                         rng=rng, plain_at=plain_at, timer=fake_timer(calls))  # fmt: skip
            first = rep % 2 == 0 if plain_at == "alternate" else twin.random() < 0.5
            order = [["a", "b", "c"][i] for i in twin.permutation(3)]
            assert calls == ([None, *order] if first else [*order, None])


def test_finish_cell_and_timing_row():
    rows = paired_block(
        None,
        configs("a"),
        [0],
        temperature=0.0,
        new_tokens=3,
        seed=0,
        rep=0,
        rng=np.random.default_rng(0),
        timer=fake_timer([]),
    )
    slim = finish_cell(rows, {"task": "t"}, keep_tokens=lambda r: r["drafter"] == "a")
    by = {r["drafter"]: r for r in slim}
    assert by["a"]["first_divergence_from_plain"] == 2 and by["plain"]["first_divergence_from_plain"] is None
    assert by["a"]["tokens"] == [1, 2, 4] and "tokens" not in by["plain"]
    assert all(r["task"] == "t" and r["same_as_rep0"] and not any(k.startswith("_") for k in r) for r in slim)
    assert timing_row(FakeStats(), 2.0)["decode_s"] == 1.5
    # each run's digest: equal tokens, equal digests; the digest is the sha256 of "1,2,4"
    assert by["a"]["tokens_sha256"] == tokens_digest([1, 2, 4]) != by["plain"]["tokens_sha256"]
    assert tokens_digest(np.array([1, 2, 4])) == hashlib.sha256(b"1,2,4").hexdigest()[:16]


def test_token_comparisons():
    assert common_prefix_len([1, 2, 3], [1, 2, 4]) == 2 and common_prefix_len([], [1]) == 0
    assert first_divergence([1, 2], [1, 2]) is None and first_divergence([1, 2], [1, 2, 3]) == 2
    assert first_divergence(np.array([5, 6]), (5, 7)) == 1


def test_paired_block_on_a_tiny_model_greedy_is_exact():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import tiny_models

    from specdec.engine.drafters import PromptLookupDrafter

    model = tiny_models.tiny_llama(0)
    rows = paired_block(
        model,
        [{"drafter": "pld", "object": PromptLookupDrafter(), "gamma": 3, "lenience": 1.0}],
        [5, 6, 7, 5, 6],
        temperature=0.0,
        new_tokens=8,
        seed=0,
        rep=0,
        rng=np.random.default_rng(0),
    )
    by = {r["drafter"]: r for r in rows}
    assert by["pld"]["_tokens"] == by["plain"]["_tokens"] and len(by["plain"]["_tokens"]) == 8
    assert by["pld"]["rounds"] >= 1 and by["plain"]["decode_s"] > 0


def test_a_q4q8_target_decodes_with_torch_on_one_thread(monkeypatch):
    """torch's spinning OpenMP workers would take the cores the q4q8 C pool needs (measured: plain
    decoding at 2 C threads ran at less than half speed with torch on 2): every timed generation of
    a q4q8 target runs with torch on one thread and restores it after; other targets are untouched.
    The decoding loop sets it (:mod:`specdec.engine.cores`), so the target's forward reads the count."""
    import torch

    from specdec.engine import decoding
    from specdec.measure import pairedrun

    seen = []

    class Session:  # the loop's view of a target: a forward that notes torch's count
        vocab_size, device = 5, torch.device("cpu")

        def __init__(self, target):
            self.target = target

        def forward(self, ids, keep=None):
            seen.append((self.target.mode, torch.get_num_threads()))
            return torch.zeros(len(ids) if keep is None else keep, self.vocab_size)

    monkeypatch.setattr(decoding, "open_lm", Session)

    class Target:  # as a LeanLlama: runs_outside_torch in q4q8 only
        def __init__(self, mode):
            self.mode = mode
            self.runs_outside_torch = mode == "q4q8"

    class LlamaLike:
        mode = None
        runs_outside_torch = True  # as specdec.engine.llamacpp.LlamaCppModel

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for target in (Target("q4q8"), Target("q4_1"), LlamaLike()):
            pairedrun.timed_generation(target, None, [1], new_tokens=1)
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen == [("q4q8", 1), ("q4_1", 2), (None, 1)]
    from specdec.engine.llamacpp import LlamaCppModel

    assert LlamaCppModel.runs_outside_torch is True


def test_the_garbage_collectors_time_is_clocked_and_stored_per_run():
    """gc_seconds clocks the cyclic collector (a collection inside a timed call adds to it); a timed
    generation stores its share in Stats.gc_s and the timing row; the time stays in the measured total."""
    import gc

    from specdec.measure import core

    before = core.gc_seconds()
    core.time_once(gc.collect)
    assert core.gc_seconds() > before
    from specdec.engine.stats import Stats

    row = timing_row(Stats(gamma=0), 1.0)
    assert row["gc_s"] == 0.0
