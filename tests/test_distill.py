"""specdec.train.distill and specdec.train.draftnets on tiny random Llama models: data, training, saving,
decoding.

1. gen-data stores the target's own samples and its top-k log-probabilities (checked against
   a full uncached forward), responses ending at EOS or at the token budget.
2. A short training run lowers the loss; the saved draft reloads with identical logits; the
   draft's structure is exact (all layers + full vocabulary = the target).
3. A vocabulary-trimmed draft (q = 0 outside the kept ids) in speculative decoding: greedy
   output equals autoregressive output, and sampling keeps the target's law (chi-square).
4. Bad input raises ValueError; ``specdec run distill-data`` / ``distill-train`` refuse it before loading.
5. The two programs run the data and the training: the data resumes (exit status 3 when ``--minutes``
   stopped it short), the card keeps the program's command.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_decoding import N_SAMPLES, P_MIN, chi_square_pvalue, exact_two_token_law, first_two_counts
from tiny_models import VOCAB, next_token_logits, tiny_llama

from specdec.engine.decoding import autoregressive, speculative
from specdec.engine.drafters import ModelDrafter
from specdec.train import draftnets
from specdec.train.distill import generate_data, load_shards
from specdec.train.draftnets import (
    TrimmedHead,
    build_draft,
    draft_param_count,
    fit_logit_scale,
    init_layers,
    kept_vocabulary,
    list_drafts,
    load_draft,
    train_draft,
)

EOS = 2
PROMPTS = [[i, (7 * i) % VOCAB, 5] for i in range(3, 60)]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target():
    model = tiny_llama(0, layers=4)
    model.config.eos_token_id = EOS
    return model.requires_grad_(False)


@pytest.fixture(scope="module")
def data(target, tmp_path_factory):
    folder = tmp_path_factory.mktemp("distill")
    meta = generate_data(
        target, None, folder, tokens=3000, seed=0, batch_size=16, max_new_tokens=40, top_k=8,
        prompt_ids=PROMPTS, progress=False,
    )  # fmt: skip
    return folder, meta


@pytest.fixture(scope="module")
def trained(target, data, tmp_path_factory):
    root = tmp_path_factory.mktemp("drafts")
    logs = []
    draft, card = train_draft(
        target, data[0], layers=2, name="tiny2", steps=80, vocab=60, lr=3e-3, batch_tokens=256,
        out_root=root, log=logs.append, log_every=10,
    )  # fmt: skip
    return draft, card, root


# -- 1. data ---------------------------------------------------------------------------------------


def test_gen_data_stores_target_samples_with_their_top_k_log_probs(target, data):
    folder, meta = data
    shards = load_shards(folder)
    assert meta["tokens"] >= 3000 and meta["tokens"] == sum(int(s["resp_lens"].sum()) for s in shards)
    assert json.loads((folder / "meta.json").read_text())["tokens"] == meta["tokens"]
    s = shards[0]
    assert s["top_ids"].shape == (s["resp_lens"].sum(), 8) and s["top_logp"].dtype == np.float16
    offsets = np.concatenate([[0], np.cumsum(s["resp_lens"])])
    for i in range(4):
        st, pl, rl = s["starts"][i], s["prompt_lens"][i], s["resp_lens"][i]
        seq = s["ids"][st : st + pl + rl].tolist()
        assert seq[:pl] == PROMPTS[i]
        resp = seq[pl:]
        assert (resp[-1] == EOS and EOS not in resp[:-1]) or (rl == 40 and EOS not in resp)
        logp = torch.log_softmax(target(torch.tensor([seq])).logits[0, pl - 1 : pl + rl - 1].float(), -1)
        top = logp.topk(8, -1)
        rows = slice(offsets[i], offsets[i] + rl)
        np.testing.assert_array_equal(s["top_ids"][rows], top.indices.numpy())
        np.testing.assert_allclose(s["top_logp"][rows].astype(np.float32), top.values.numpy(), atol=2e-2)


def test_gen_data_is_seeded(target, tmp_path):
    kw = {"tokens": 200, "batch_size": 8, "max_new_tokens": 20, "prompt_ids": PROMPTS, "progress": False}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        generate_data(target, None, tmp_path / name, seed=seed, **kw)
    a, b, c = (load_shards(tmp_path / n)[0]["ids"] for n in "abc")
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_gen_data_sort_window_batches_prompts_of_similar_length(target, tmp_path):
    prompts = [[5] * n for n in (9, 2, 7, 4, 3, 8, 6, 5)]  # lengths 2..9, shuffled
    kw = {"tokens": 30, "batch_size": 4, "max_new_tokens": 3, "prompt_ids": prompts, "progress": False}
    generate_data(target, None, tmp_path, sort_window=2, **kw)
    shards = load_shards(tmp_path)
    assert [s["prompt_lens"].tolist() for s in shards[:2]] == [[2, 3, 4, 5], [6, 7, 8, 9]]
    with pytest.raises(ValueError, match="sort_window"):
        generate_data(target, None, tmp_path / "x", sort_window=0, **kw)
    with pytest.raises(ValueError, match="sort_window=2; resume it with the same value"):
        generate_data(target, None, tmp_path, sort_window=1, **(kw | {"tokens": 60}))
    assert not list(tmp_path.glob("*.part"))  # shards are renamed into place


def test_training_in_bfloat16_autocast_follows_float32(target, data, tmp_path):
    curves = {}
    for amp in (False, True):
        _, card = train_draft(
            target, [data[0]], layers=1, name=f"amp{amp}", steps=40, vocab=60, lr=3e-3, batch_tokens=256,
            out_root=tmp_path, log=lambda _: None, log_every=10, autocast=amp,
        )  # fmt: skip
        assert card["autocast"] == ("bfloat16" if amp else None)
        curves[amp] = np.array([h["loss"] for h in card["history"]])
    assert curves[True][-1] < 0.9 * curves[True][0]
    assert not np.array_equal(curves[True], curves[False])  # autocast did change the arithmetic
    np.testing.assert_allclose(curves[True], curves[False], rtol=0.01)


# -- 2. training, saving, structure --------------------------------------------------------------------


def test_training_lowers_the_loss(trained):
    _, card, _ = trained
    history = card["history"]
    assert len(history) == 8 and card["steps"] == 80
    first = np.mean([h["loss"] for h in history[:2]])
    last = np.mean([h["loss"] for h in history[-2:]])
    assert last < 0.8 * first
    assert card["kept_vocab"] == 60 and 0.5 < card["kept_coverage"] <= 1
    assert 0 < card["kept_coverage_heldout"] <= 1
    assert card["heldout"]["kl"] > 0 and card["params"] == draft_param_count(trained[0])
    assert 0.02 <= card["init_logit_scale"] <= 2


def test_saved_draft_reloads_with_identical_logits(target, trained):
    draft, card, root = trained
    assert list_drafts(root) == ["tiny2"]
    loaded = load_draft("tiny2", target, root=root)
    assert not any(p.requires_grad for p in loaded.parameters())
    prefixes = [[3, 14, 15, 92, 65], [7, 8, 9, 10, 11]]
    torch.testing.assert_close(
        next_token_logits(loaded, prefixes), next_token_logits(draft, prefixes), rtol=0, atol=0
    )
    saved = json.loads((root / "tiny2" / "card.json").read_text())
    assert saved["steps"] == 80 and saved["seed"] == 0 and saved["init_layers"] == [0, 1]


def test_draft_logits_are_minus_inf_outside_the_kept_vocabulary(target, trained):
    draft = trained[0]
    logits = next_token_logits(draft, [[3, 14, 15]])[0]
    kept = draft.lm_head.kept
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[kept] = False
    assert torch.isinf(logits[outside]).all() and torch.isfinite(logits[kept]).all()


def test_a_draft_of_every_layer_and_the_whole_vocabulary_is_the_target(target):
    draft = build_draft(target, [0, 1, 2, 3], torch.arange(VOCAB))
    prefixes = [[3, 14, 15, 92, 65]]
    torch.testing.assert_close(next_token_logits(draft, prefixes), next_token_logits(target, prefixes))
    before = [p.clone() for p in target.parameters()]
    with torch.no_grad():
        for p in draft.model.layers.parameters():
            p.add_(1.0)
    assert all(torch.equal(a, b) for a, b in zip(before, target.parameters(), strict=True))  # copies
    assert draft.model.embed_tokens is target.model.embed_tokens  # shared


def test_fitted_logit_scale_lowers_the_initial_kl(target, data):
    shards = load_shards(data[0])
    kept = kept_vocabulary(shards, 60, VOCAB, always=(EOS,))
    remap = torch.full((VOCAB,), -1, dtype=torch.long)
    remap[kept] = torch.arange(60)
    batch = draftnets._collate(draftnets._sequences(shards, 64)[:8], remap, 0)
    draft = build_draft(target, [0], kept)
    norm = draft.model.norm.weight.clone()
    with torch.no_grad():
        before = float(draftnets._loss(draft, *batch)[2])
        scale = fit_logit_scale(draft, batch)
        after = float(draftnets._loss(draft, *batch)[2])
    assert 0.02 <= scale <= 2 and after <= before
    torch.testing.assert_close(draft.model.norm.weight, norm * scale)


def test_init_layers_are_the_first_k_and_checked():
    assert init_layers(1, 30) == [0]
    assert init_layers(4, 30) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"k \(draft layers\) must be an integer in \[1, 30\]"):
        init_layers(31, 30)


# -- 3. the trimmed draft in speculative decoding ------------------------------------------------------


def test_trimmed_draft_greedy_equals_autoregressive(target, trained):
    drafter = ModelDrafter(trained[0], target=target)
    for prompt in ([7], [3, 14, 15, 92, 65]):
        expected = autoregressive(target, prompt, max_new_tokens=20).tokens
        for gamma in (1, 4):
            assert speculative(target, drafter, prompt, gamma=gamma, max_new_tokens=20).tokens == expected


def test_trimmed_draft_sampling_keeps_the_target_law():
    """The target's own layer with the most probable token after [36] cut from the kept vocabulary:
    q = p renormalised elsewhere and 0 there, so the residual must supply that token."""
    small = tiny_llama(0, layers=1)
    prefix = [36]
    p1 = torch.softmax(next_token_logits(small, [prefix])[0], -1)
    top = int(p1.argmax())
    assert p1[top] > 0.1
    kept = torch.tensor([t for t in range(VOCAB) if t != top and t % 3 != 0])
    drafter = ModelDrafter(build_draft(small, [0], kept), target=small)
    kw = {"temperature": 1.0}
    counts = first_two_counts(small, drafter, prefix, 2, n=N_SAMPLES, **kw)
    assert counts[top].sum() > 0  # the uncovered token is produced, by the residual
    assert chi_square_pvalue(counts, exact_two_token_law(small, prefix, **kw)) > P_MIN
    # alpha = sum_x min(p, q) is the kept mass of p here
    stats = speculative(small, drafter, prefix, gamma=1, max_new_tokens=2, temperature=1.0).stats
    q1 = torch.zeros(VOCAB)
    q1[kept] = p1[kept] / p1[kept].sum()
    assert stats.beta_count == 1  # one round examines one draft; the next has no room to draft
    assert abs(stats.beta_sum - float(torch.minimum(p1, q1).sum())) < 1e-5
    assert abs(stats.beta_sum - float(p1[kept].sum())) < 1e-5


# -- 4. errors ------------------------------------------------------------------------------------


def test_errors(target, data, tmp_path):
    with pytest.raises(ValueError, match="no draft named 'nope'"):
        load_draft("nope", target, root=tmp_path)
    with pytest.raises(ValueError, match="give exactly one of minutes and steps"):
        train_draft(target, data[0], layers=1, name="x", out_root=tmp_path)
    with pytest.raises(ValueError, match=r"k \(draft layers\) must be an integer in \[1, 4\]"):
        train_draft(target, data[0], layers=5, name="x", steps=1, out_root=tmp_path)
    with pytest.raises(ValueError, match=r"^minutes must be a finite number > 0.0 \(or None\); got 0$"):
        train_draft(target, data[0], layers=1, name="x", minutes=0, out_root=tmp_path)
    with pytest.raises(ValueError, match=r"^holdout must be a finite number in \(0.0, 1.0\); got 1.0$"):
        train_draft(target, data[0], layers=1, name="x", steps=1, holdout=1.0, out_root=tmp_path)
    with pytest.raises(ValueError, match="no shard"):
        train_draft(target, tmp_path, layers=1, name="x", steps=1, out_root=tmp_path)
    with pytest.raises(ValueError, match=r"size \(kept vocabulary\) must be an integer in \[1, 97\]"):
        kept_vocabulary(load_shards(data[0]), 0, VOCAB)
    with pytest.raises(ValueError, match="kept must not repeat"):
        TrimmedHead(torch.zeros(VOCAB, 4), torch.tensor([1, 1]), VOCAB)
    with pytest.raises(ValueError, match="tokens must be an integer >= 1"):
        generate_data(target, None, tmp_path, tokens=0, prompt_ids=PROMPTS)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["distill-data", "--tokens", "0"], "--tokens must be an integer >= 1; got 0"),
        (["distill-data", "--dtype", "float16"], "--dtype must be one of float32, bfloat16"),
        (["distill-data", "--minutes", "0"], "--minutes must be a finite number > 0.0"),
        (["distill-train", "--steps", "5", "--minutes", "1"], "--steps must not be given with --minutes"),
        (["distill-train", "--data", ""], "--data must name one or more folders"),
        (["distill-train", "--draft-name", "../x"], "--draft-name must be a plain folder name"),
        # no default folder of the book's data or drafters is written to by a bare command
        (["distill-data"], "--out is needed"),
        (["self-features"], "--out is needed"),
        (["distill-train", "--draft-name", "distil-l1"], "distil-l1 is a committed draft"),
        (["cond-train", "--family", "eagle", "--draft-name", "eagle-ttt"], "eagle-ttt is a committed draft"),
    ],
)
def test_the_programs_refuse_bad_options_before_loading(argv, message, capsys, monkeypatch):
    from specdec.cli.app import main
    from specdec.experiments import training

    def no_load(*a, **k):
        raise AssertionError("refused only after loading the target")

    monkeypatch.setattr(training, "_target", no_load)
    assert main(["run", *argv]) == 2
    assert message in capsys.readouterr().err


# -- 5. the programs ----------------------------------------------------------------------------------


def test_specdec_run_makes_the_data_resumably_and_a_draft_whose_card_keeps_its_command(
    target, tmp_path, monkeypatch, capsys
):
    import itertools
    import shlex

    from specdec.cli.app import main
    from specdec.experiments import training
    from specdec.train import distill

    loaded = type("Loaded", (), {"model": target, "tokenizer": None})()
    opened = []
    monkeypatch.setattr(training, "_target", lambda *spec: opened.append(spec) or loaded)
    real = distill.generate_data  # the tiny target has no tokenizer: token-id prompts

    def generate(*args, **kwargs):
        return real(*args, **kwargs, prompt_ids=PROMPTS, progress=False)

    monkeypatch.setattr(distill, "generate_data", generate)
    clock = itertools.count(0, 30)  # 30 s a look: one batch fits in --minutes 1
    monkeypatch.setattr(distill.time, "perf_counter", lambda: float(next(clock)))
    folder = tmp_path / "data"
    data = ["run", "distill-data", "--tokens", "400", "--out", str(folder), "--batch-size", "8",
            "--max-new-tokens", "20", "--minutes", "1", "--threads", "1"]  # fmt: skip
    made = []
    while (status := main(data)) == 3:  # the budget stopped it short: the same command resumes
        made.append(json.loads(capsys.readouterr().out))
        assert made[-1]["shards"] == len(made) and 0 < made[-1]["tokens"] < 400
    assert status == 0 and len(made) >= 2
    assert json.loads(capsys.readouterr().out)["tokens"] >= 400
    assert set(opened) == {("float32", 1)}
    train = ["distill-train", "--data", str(folder), "--layers", "2", "--draft-name", "tiny1", "--steps", "3",
             "--vocab", "60", "--batch-tokens", "128", "--out-root", str(tmp_path / "d")]  # fmt: skip
    assert main(["run", *train]) == 0
    card = json.loads((tmp_path / "d" / "tiny1" / "card.json").read_text())
    assert card["command"] == shlex.join(["specdec", "run", *train]) and card["steps"] == 3
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["name"] == "tiny1"


def test_specdec_measure_runs_a_distilled_draft_in_the_lean_engine_of_a_lean_target(
    target, trained, monkeypatch
):
    """``specdec measure --draft <distilled>`` against a lean target builds the draft in the lean engine too
    (its fastest draft mode here), as every benchmark does, not on transformers' forward (issue 32: the two
    commands measured c ~1.25 and ~0.2 for one draft); against a transformers target it stays there."""
    from specdec.engine.builder import EngineSpec, open_model
    from specdec.engine.lean import LeanLlama
    from specdec.experiments import usermeasure
    from specdec.train import draftnets

    _, _, root = trained
    monkeypatch.setattr(draftnets, "load_draft", lambda name, t: load_draft(name, t, root=root))
    loaded = type("Loaded", (), {"model": target, "dtype": "float32"})()
    kw = {"new_tokens": 4, "progress": lambda it, *a, **k: it, "log": lambda m: None}
    engine = open_model(target, EngineSpec("lean", "float32", 1))
    engine.base = loaded
    from specdec.drafting.registry import parse_spec

    spec = parse_spec("draft:tiny2")  # what parse_draft makes of the older name "tiny2"
    drafter, about = usermeasure._build_drafter(spec, None, engine, **kw)
    lean = getattr(drafter.lm, "model", None)  # a LeanSession holds its LeanLlama
    assert isinstance(lean, LeanLlama) and about["engine"].startswith(f"lean {lean.mode}")
    hf = open_model(target, EngineSpec("hf", "float32", 1))
    hf.base = loaded
    drafter, about = usermeasure._build_drafter(spec, None, hf, **kw)
    assert not isinstance(getattr(drafter.lm, "model", None), LeanLlama)
    assert about["engine"] == "transformers forward"
