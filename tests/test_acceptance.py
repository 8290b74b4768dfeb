"""Tests of teacher-forced acceptance (specdec.measure.acceptance), the drafters' q_rows, and pooled real
runs."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
import torch
from tiny_models import VOCAB, next_token_logits, perturbed_copy, tiny_llama

from specdec.analysis.realrun import load_records, pool_rounds
from specdec.engine.decoding import autoregressive, speculative
from specdec.engine.drafters import (
    BigramDrafter,
    EarlyExitDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    UnigramDrafter,
)
from specdec.engine.stats import Stats
from specdec.measure.acceptance import beta_rows, target_p_rows, teacher_forced
from specdec.theory.sampling import warp
from specdec.theory.speedup import acceptance_rate


@pytest.fixture(scope="module")
def target():
    return tiny_llama(0, layers=3)


@pytest.fixture(scope="module")
def sequence(target):
    """Prompt + a sampled response of the target itself (the paper's 'target-generated' text)."""
    prompt = [5, 17, 42, 8, 5, 17]
    gen = autoregressive(target, prompt, max_new_tokens=20, temperature=1.0, seed=3)
    return prompt + gen.tokens, len(prompt)


@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
def test_alpha_tv_matches_theory_row_by_row(target, sequence, temperature):
    """beta from one teacher-forced pass = theory.acceptance_rate on rows from fresh forwards."""
    ids, n = sequence
    warp_fn = partial(warp, temperature=temperature, top_k=40 if temperature == 0.7 else None)
    draft = perturbed_copy(target, 0.3, 1)
    tf = teacher_forced(target, ModelDrafter(draft, target=target), ids, n, warp_fn)
    assert tf.beta.shape == (len(ids) - n,) and tf.drafted == len(ids) - n
    for j in range(len(ids) - n):
        p = warp_fn(next_token_logits(target, [ids[: n + j]]))[0].double().numpy()
        q = warp_fn(next_token_logits(draft, [ids[: n + j]]))[0].double().numpy()
        assert tf.beta[j] == pytest.approx(float(acceptance_rate(p / p.sum(), q / q.sum())), abs=1e-5)
    assert tf.alpha == pytest.approx(float(np.mean(tf.beta)))
    assert 0.05 < tf.alpha < 0.999  # a perturbed draft is neither perfect nor useless


def test_identical_draft_gives_one_and_unrelated_draft_less(target, sequence):
    ids, n = sequence
    warp_fn = partial(warp, temperature=1.0)
    same = teacher_forced(target, EarlyExitDrafter(target, 3), ids, n, warp_fn)  # all layers: q = p
    np.testing.assert_allclose(same.beta, 1.0, atol=1e-5)
    other = teacher_forced(target, ModelDrafter(tiny_llama(9, layers=3), target=target), ids, n, warp_fn)
    assert other.alpha < 0.5
    greedy = teacher_forced(target, EarlyExitDrafter(target, 3), ids, n, partial(warp, temperature=0.0))
    np.testing.assert_array_equal(greedy.beta, 1.0)


def test_shared_p_rows_give_the_same_betas(target, sequence):
    ids, n = sequence
    warp_fn = partial(warp, temperature=1.0)
    p = target_p_rows(target, ids, n, warp_fn)
    assert p.shape == (len(ids) - n, VOCAB)
    drafter = EarlyExitDrafter(target, 1)
    np.testing.assert_allclose(
        teacher_forced(target, drafter, ids, n, warp_fn, p=p).beta,
        teacher_forced(target, drafter, ids, n, warp_fn).beta,
    )
    with pytest.raises(ValueError, match="p must have shape"):
        teacher_forced(target, drafter, ids, n, warp_fn, p=p[1:])


def test_lean_target_gives_the_hugging_face_rows(target, sequence):
    """A float32 LeanLlama target (the benchmark's engine) teacher-forces like the model it was built from."""
    from specdec.engine.lean import LeanLlama

    ids, n = sequence
    warp_fn = partial(warp, temperature=1.0)
    lean = LeanLlama(target, "float32")
    p_hf, p_lean = target_p_rows(target, ids, n, warp_fn), target_p_rows(lean, ids, n, warp_fn)
    assert p_lean.shape == p_hf.shape
    torch.testing.assert_close(p_lean, p_hf, atol=1e-5, rtol=1e-4)
    tf = teacher_forced(lean, EarlyExitDrafter(lean, 3), ids, n, warp_fn)  # the lean early exit: q = p
    np.testing.assert_allclose(tf.beta, 1.0, atol=1e-5)


def test_table_drafters_q_rows_match_their_proposals(target, sequence):
    """q_rows gives the row propose samples the first draft from, after every prefix."""
    ids, n = sequence
    warp_fn = partial(warp, temperature=0.8)
    corpus = [ids, [1, 2, 3, 1, 2, 4]]
    rng = np.random.default_rng(0)
    for drafter in (
        UnigramDrafter.from_token_ids(corpus, VOCAB),
        BigramDrafter.from_token_ids(corpus, VOCAB),
    ):
        rows = drafter.q_rows(ids[:-1], len(ids) - n, warp_fn)
        for j in range(len(ids) - n):
            prop = drafter.propose(ids[: n + j], 1, warp_fn, rng)
            torch.testing.assert_close(rows[j], prop.q[0])
        tf = teacher_forced(target, drafter, ids, n, warp_fn)
        p = target_p_rows(target, ids, n, warp_fn)
        np.testing.assert_allclose(tf.beta, beta_rows(p, rows))


def test_prompt_lookup_beta_is_p_of_the_draft(target):
    """Deterministic drafter: beta_t = p_t(x_t) where it drafts, NaN where it has no match."""
    prompt = [5, 17, 42, 8, 5, 17, 42, 8, 60]
    ids = prompt + autoregressive(target, prompt, max_new_tokens=12, temperature=1.0, seed=1).tokens
    n = len(prompt)
    warp_fn = partial(warp, temperature=1.0)
    drafter = PromptLookupDrafter(max_ngram=2)
    tf = teacher_forced(target, drafter, ids, n, warp_fn)
    p = target_p_rows(target, ids, n, warp_fn).double().numpy()
    for j in range(len(ids) - n):
        draft = drafter.lookup(ids[: n + j], 1)
        if draft:
            assert tf.beta[j] == pytest.approx(p[j, draft[0]])
        else:
            assert np.isnan(tf.beta[j])
    assert 0 < tf.drafted <= len(ids) - n
    assert tf.alpha == pytest.approx(float(np.nanmean(tf.beta)))


def test_bad_arguments(target, sequence):
    ids, n = sequence
    warp_fn = partial(warp, temperature=1.0)
    with pytest.raises(ValueError, match="prompt_len"):
        teacher_forced(target, EarlyExitDrafter(target, 1), ids, len(ids), warp_fn)
    with pytest.raises(ValueError, match="prompt_len"):
        teacher_forced(target, EarlyExitDrafter(target, 1), ids, 0, warp_fn)
    with pytest.raises(ValueError, match="keep"):
        UnigramDrafter.from_token_ids([ids], VOCAB).q_rows(ids, len(ids) + 1, warp_fn)
    with pytest.raises(ValueError, match="p and q"):
        beta_rows(torch.ones(2, 3) / 3, torch.ones(2, 4) / 4)


# -- realrun ----------------------------------------------------------------------------------------


def test_pool_rounds_counts(target):
    prompt = [5, 17, 42, 8]
    draft = perturbed_copy(target, 0.3, 2)
    runs = [
        speculative(target, ModelDrafter(draft), prompt, gamma=3, max_new_tokens=16, temperature=1.0, seed=s)
        for s in range(3)
    ]
    pooled = pool_rounds(r.stats for r in runs)
    # the record's summary dicts pool to the same numbers as the Stats themselves
    from_dicts = pool_rounds(r.stats.summary() for r in runs)
    assert {k: v for k, v in from_dicts.items() if k != "accept_at"} == {
        k: v for k, v in pooled.items() if k != "accept_at"
    }
    assert pooled["rounds"] == sum(r.stats.rounds for r in runs)
    full = [(k, a) for r in runs for k, a in zip(r.stats.drafted, r.stats.accepted, strict=True) if k == 3]
    assert pooled["full_rounds"] == len(full) == sum(pooled["accepted_hist"])
    assert pooled["rounds_none"] + pooled["rounds_short"] + pooled["full_rounds"] == pooled["rounds"]
    # the per-position counts and the rate come from the same full rounds as the histogram
    assert pooled["examined_at"] == [sum(a >= i for _, a in full) for i in range(3)]
    assert pooled["accepted_at"] == [sum(a > i for _, a in full) for i in range(3)]
    rate = sum(a for _, a in full) / sum(min(a + 1, 3) for _, a in full)
    assert pooled["full_accept_rate"] == pytest.approx(rate, rel=1e-12)
    assert sum(pooled["examined_at"]) == sum(min(a + 1, 3) for _, a in full)
    acc = sum(r.stats.accepted_tokens for r in runs)
    assert pooled["alpha_accept_rate"] == pytest.approx(acc / sum(r.stats.examined for r in runs))
    with pytest.raises(ValueError, match="gamma"):
        pool_rounds([Stats(gamma=2), Stats(gamma=3)])
    with pytest.raises(ValueError, match="at least one"):
        pool_rounds([])


def test_load_records_keeps_only_real_decoding(tmp_path):
    (tmp_path / "b.json").write_text(json.dumps({"kind": "real-decoding", "x": 1}))
    (tmp_path / "d.json").write_text(json.dumps({"kind": "real-decoding", "format": 2}))
    (tmp_path / "a.json").write_text(json.dumps({"kind": "generations"}))
    (tmp_path / "c.csv").write_text("x\n1\n")
    assert [r["file"] for r in load_records(tmp_path)] == ["b.json", "d.json"]
    assert load_records(tmp_path, 1) == [{"kind": "real-decoding", "x": 1, "file": "b.json"}]
    assert [r["file"] for r in load_records(tmp_path, 2)] == ["d.json"]
