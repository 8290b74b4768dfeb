"""specdec's own C forward for the ``"q4_1"`` lean mode: built on the running machine, loaded by ctypes.

torch's CPU int4 kernel runs a 4-bit weight with bfloat16 activations and decodes the weights
again for every row of a call, and a decode step in eager torch pays a few microseconds of
dispatch for each of its ~750 small operations. ``csrc/leanq4.c`` is the whole forward of a
Llama decoder in one call: the GGUF's Q4_1 code for every decoder linear layer, the Q8_0 code
for the LM head, float32 activations and sums, a float32 KV cache laid out as
:class:`specdec.engine.lean.LeanLlama`'s. Each row of a call runs the same instructions in the same
order whatever the number of rows, so a verify call's rows equal single steps bit for bit by
construction (the tests check it).

The C source is compiled here, on first use, with the system's C compiler (``$CC``, which may name a
launcher such as ``ccache gcc``, else ``cc``; GCC 9 or later, or Clang: the q4q8 source uses vector
extensions) at ``-O3 -march=native`` (the machine's own vector unit: AVX-512, AVX2 or SSE) and
``-ffp-contract=off`` (every C build: no fused multiply-adds, so the float arithmetic is the source's on
every instruction set), and the library is cached under the package cache keyed by the source, the
flags, the compiler and the CPU's flags, so another machine builds its own.
Under the Makefile's emulated CPUs (``SPECDEC_EMULATED_CPU`` = ``avx2`` or ``baseline``) it is
built for that CPU level instead (``-march=x86-64-v3`` or ``-march=x86-64``). Where no compiler
works, :func:`available` says why and the mode is simply not offered
(:func:`specdec.measure.modes.available_modes`).

The ``"q4q8"`` mode's forward (``csrc/leanq8.c``, :class:`Q8Forward`) is built the same way, with
``-pthread`` (a small thread pool per model, whose waiters yield the CPU
rather than spin on a machine shared with other processes). It
repacks the GGUF's 4-bit weights at load and computes integer dot products by the best
instruction set the build targets (AVX512-VNNI, AVX-VNNI, AVX2, else portable C: :func:`isa`), each
weight block decoded once for up to 8 rows of a call; where the CPU has AMX-INT8 (and Linux
grants the tile state), calls of many rows use its tiles (:func:`amx`), with the same integers and so the
same bits (ABI 7).
Its tree forward (``specdec_q8_forward_tree``, ABI 4; leanq4.c's ``specdec_q4_forward_tree``)
verifies a draft tree in one call, each node equal bit for bit to the chain forward over its path
(:mod:`specdec.engine.leannative`). ABI 5 adds ``specdec_q8_forward_ex`` (embedding rows in place
of token ids, and every row's pre-final-norm features out, for target-conditioned drafters) and a
standalone Q8_0 linear (:class:`specdec.engine.leannative.Q8Linear`); 8 the tree below earlier calls'
nodes and top-k; 9 and 10 an EAGLE level, a Medusa draft, an MLP stage in one call each; 11 suffix
decoding's trie (``csrc/leanq8_suffix.h``, declared by its user, :mod:`specdec.drafting.suffix`). The
cache key covers the C source and every header beside
it: ``csrc/lean_common.h`` (the model's structures, the error codes and float helpers both forwards
share), ``csrc/lean_pool.h`` (the thread pool), ``csrc/leanq8_matmul.h`` (the q4q8 int8 products),
``csrc/leanq8_rows.h`` (its row-wise work) and the other ``leanq8_*.h`` headers.

Both libraries report their ABI version and the sizes of the structures they share with Python
(``specdec_q4_abi``, ``specdec_q8_abi``; :data:`Q4_ABI`, :data:`Q8_ABI`), checked at load against the
one ctypes description of them (:class:`Model`, :class:`Layer`, :class:`Q41`, :class:`Q80`): a stale or
foreign build is refused with the mismatch named. Every exported entry point checks its own
arguments (null pointers, row counts, positions against the cache, token ids against the vocabulary)
and returns -2 instead of reading or writing out of bounds.

A cached library is checked before it is loaded (its size and SHA-256 against a sidecar written
when it was built): a damaged one (truncated, emptied, replaced) is rebuilt, and a line says
so, instead of crashing the process that maps it. Where the cache folder cannot be written (a
read-only ``SPECDEC_CACHE``), the library is built in a private per-user folder
(:func:`fallback_folder`) and a warning says so; where that fails too, the mode's reason says what,
why and what to do in one line."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specdec.theory.checks import check_int

__all__ = [
    "KINDS",
    "PHASES",
    "SOURCE",
    "SOURCE_Q8",
    "PhaseClocks",
    "Q8Forward",
    "amx",
    "available",
    "peak_work",
    "q8_library_from",
    "build_flags",
    "build_info",
    "check_threads",
    "default_threads",
    "fallback_folder",
    "isa",
    "library",
    "unavailable_reason",
]

#: The C source of the ``"q4_1"`` forward.
SOURCE = Path(__file__).with_name("csrc") / "leanq4.c"
#: The C source of the ``"q4q8"`` forward (integer dot products).
SOURCE_Q8 = Path(__file__).with_name("csrc") / "leanq8.c"
#: The C forwards, by the lean mode that runs them.
KINDS = ("q4_1", "q4q8")
#: The ABI version of leanq8.c's structures (its SPECDEC_Q8_ABI), checked at load.
Q8_ABI = 13
#: The ABI version of leanq4.c's structures (its SPECDEC_Q4_ABI), checked at load.
Q4_ABI = 3


def _source(kind: str) -> Path:
    return SOURCE if kind == "q4_1" else SOURCE_Q8


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")


def default_threads() -> int:
    """The cores this process may use (its CPU affinity), the C forward's default thread count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_threads(threads: Any, name: str = "threads") -> int:
    """``threads`` as an int >= 1 (None: :func:`default_threads`); ValueError naming ``name`` otherwise."""
    if threads is None:
        return default_threads()
    return check_int(name, threads, low=1, high=1024, note="or None: all usable cores")


_MARCH = {"native": "-march=native", "avx2": "-march=x86-64-v3", "baseline": "-march=x86-64"}


def build_flags(kind: str = "q4_1") -> list[str]:
    """The compiler flags of a forward (``kind``: ``"q4_1"`` or ``"q4q8"``), for this CPU or for the
    CPU the test suite emulates."""
    _check_kind(kind)
    target = os.environ.get("SPECDEC_EMULATED_CPU", "native")
    if target not in _MARCH:
        raise ValueError(f"SPECDEC_EMULATED_CPU must be one of {sorted(_MARCH)}; got {target!r}")
    # no contraction into FMAs, in every build: the float arithmetic is the one the source writes,
    # the same on every instruction set
    flags = ["-O3", _MARCH[target], "-std=gnu11", "-shared", "-fPIC", "-ffp-contract=off"]
    if kind == "q4q8":
        flags += ["-pthread"]
    return flags


def _compiler() -> tuple[str, ...] | None:
    """The compiler command: ``$CC`` (default ``cc``) split into words, the first resolved on PATH
    (so ``CC="ccache gcc"`` works); None if there is no such program."""
    words = shlex.split(os.environ.get("CC", "cc"))
    found = shutil.which(words[0]) if words else None
    return (found, *words[1:]) if found else None


def _compiler_version(cc: tuple[str, ...]) -> str:
    try:
        return subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _library_path(cc: tuple[str, ...], flags: list[str], kind: str = "q4_1") -> Path:
    from specdec.engine.machine import cpu_flags
    from specdec.engine.models import cache_root

    source = _source(kind)
    key = hashlib.sha256()
    # the source and every header beside it (lean_common.h, lean_pool.h, ...): editing one rebuilds
    headers = [h.name.encode() + b"\0" + h.read_bytes() for h in sorted(source.parent.glob("*.h"))]
    for part in (source.read_bytes(), *headers, " ".join(flags).encode(), _compiler_version(cc).encode()):
        key.update(part + b"\0")
    key.update(" ".join(sorted(cpu_flags())).encode() + platform.machine().encode())
    return cache_root() / "native" / f"{source.stem}-{key.hexdigest()[:20]}.so"


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".check.json")


def _digest(path: Path) -> tuple[int, str]:
    data = path.read_bytes()
    return len(data), hashlib.sha256(data).hexdigest()


def _damage(path: Path) -> str | None:
    """Why the cached library at ``path`` must not be loaded (None: it is as built)."""
    try:
        size, sha = _digest(path)
    except OSError as err:
        return f"unreadable: {err}"
    if size == 0:
        return "empty file"
    try:
        check = json.loads(_sidecar(path).read_text(encoding="utf-8"))
        want_size, want_sha = int(check["size"]), str(check["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return "no valid size and checksum record beside it"
    if size != want_size:
        return f"{size} bytes, built as {want_size}"
    if sha != want_sha:
        return "checksum differs from the build's"
    return None


def _run_compiler(cc: tuple[str, ...], flags: list[str], out: Path, source: Path) -> str | None:
    """Compile; None on success, else why (never empty: stderr, else stdout, else the exit status)."""
    done = subprocess.run(
        [*cc, *flags, "-o", str(out), str(source), "-lm"], capture_output=True, text=True, timeout=300
    )
    if done.returncode == 0 and out.exists():
        return None
    said = done.stderr.strip() or done.stdout.strip()
    why = f"exit status {done.returncode}" + (f": {said[-2000:]}" if said else " and no output")
    if done.returncode == 0:
        why = "the compiler wrote no library"
    return f"{' '.join(cc)} failed to build {source.name}: {why}"


def _build(cc: tuple[str, ...], flags: list[str], target: Path, kind: str = "q4_1") -> None:
    source = _source(kind)
    target.parent.mkdir(parents=True, exist_ok=True)
    # a first use is slow (seconds): say what is happening, once per build, on a terminal (as the
    # command line's progress bars: a notebook's or a log's stored output must not depend on a cache)
    if sys.stderr is not None and sys.stderr.isatty():
        print(f"[specdec] compiling the {kind} C forward ({source.name}, {cc[0]}) into {target.parent} ...",
              file=sys.stderr, flush=True)  # fmt: skip
    from specdec.engine.models import remove_stale_temporaries

    for pattern in (".build-*", "tmp*"):  # killed compiles' folders (tmp*: before they were named)
        remove_stale_temporaries(target.parent, pattern)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        out = Path(tmp) / target.name
        error = _run_compiler(cc, flags, out, source)
        if error is not None:
            raise OSError(error)
        size, sha = _digest(out)
        side = Path(tmp) / "check.json"
        side.write_text(json.dumps({"size": size, "sha256": sha}), encoding="utf-8")
        # the record first, then the library, each by an atomic rename: a reader that sees the
        # new library sees its record; one that sees a new record beside an old library rebuilds
        os.replace(side, _sidecar(target))
        os.replace(out, target)


class Q41(ctypes.Structure):
    """A Q4_1 weight: nibbles (n, k/2) uint8, scales d and minimums m (n, k/32) float32."""

    _fields_ = [
        ("qs", ctypes.c_void_p),
        ("d", ctypes.c_void_p),
        ("m", ctypes.c_void_p),
        ("n", ctypes.c_int32),
        ("k", ctypes.c_int32),
    ]


class Q80(ctypes.Structure):
    """A Q8_0 weight: int8 codes (n, k) and scales d (n, k/32) float32."""

    _fields_ = [("qs", ctypes.c_void_p), ("d", ctypes.c_void_p), ("n", ctypes.c_int32), ("k", ctypes.c_int32)]


class Layer(ctypes.Structure):
    _fields_ = [
        ("norm_attn", ctypes.c_void_p),
        ("norm_mlp", ctypes.c_void_p),
        ("qkv", Q41),
        ("o", Q41),
        ("gate_up", Q41),
        ("down", Q41),
    ]


class Model(ctypes.Structure):
    """The model as both C forwards read it (``model_t`` of csrc/lean_common.h): shapes, the weights'
    addresses, ``vocab`` (the embedding's rows: every id is checked against it in C) and the layers'
    code (``layer_codes``: 0 Q4_1, 1 Q8_0, whose :class:`Q41` entries then hold int8 codes (n, k) in
    ``qs``, scales in ``d`` and no ``m``; leanq4.c takes 0 only) and ``phase_s``, the q4_1 forward's
    own phase clocks while profiling (:class:`PhaseClocks`; NULL when off)."""

    _fields_ = [
        ("n_layers", ctypes.c_int32),
        ("hidden", ctypes.c_int32),
        ("heads", ctypes.c_int32),
        ("kv_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("inter", ctypes.c_int32),
        ("positions", ctypes.c_int32),
        ("eps", ctypes.c_float),
        ("embed", ctypes.c_void_p),
        ("layers", ctypes.POINTER(Layer)),
        ("norm", ctypes.c_void_p),
        ("head", Q80),
        ("cos", ctypes.c_void_p),
        ("sin", ctypes.c_void_p),
        ("vocab", ctypes.c_int32),
        ("layer_codes", ctypes.c_int32),
        ("phase_s", ctypes.POINTER(ctypes.c_double)),  # the q4_1 forward's clocks while profiling; NULL off
    ]


#: Return codes of leanq8.c's exported functions (and specdec_q8_amx's "no AMX here").
_ERR_MEMORY, _ERR_ARGUMENT, _AMX_NONE = -1, -2, -3


def _declare_q8(lib: ctypes.CDLL, newer: bool = True) -> ctypes.CDLL:
    """leanq8's entry points declared; ``newer=False`` (an earlier build's library) skips those of
    :data:`_Q8_NEWER` that it lacks."""
    p, i32, f32, i64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_float, ctypes.c_int64
    signatures = {  # name: (argument types, result type)
        "specdec_q8_abi": ([ctypes.POINTER(i64), i32], i32),
        "specdec_q8_isa": ([], ctypes.c_char_p),
        "specdec_q8_new": ([ctypes.POINTER(Model), ctypes.POINTER(i32)], p),
        "specdec_q8_free": ([p], None),
        "specdec_q8_forward": ([p, p, i32, i32, p, i32, p, i32, i32, i32], i32),
        "specdec_q8_forward_tree": ([p, p, p, i32, i32, p, i32, p, i32, i32, i32], i32),
        "specdec_q8_forward_ex": ([p, p, p, p, i32, i32, p, i32, p, i32, i32, i32, p], i32),
        "specdec_q8_linear_new": ([ctypes.POINTER(Q80), ctypes.POINTER(i32)], p),
        "specdec_q8_linear_free": ([p], None),
        "specdec_q8_linear": ([p, p, i32, p, i32], i32),
        "specdec_q8_set_profiling": ([p, i32], i32),
        "specdec_q8_profile": ([p, ctypes.POINTER(ctypes.c_double), i32], i32),
        "specdec_q8_amx": ([i32], i32),  # ABI 7
        "specdec_q8_peak": ([i32, i64, i32], ctypes.c_double),
        "specdec_q8_forward_spec": ([p, p, p, p, i32, i32, i32, p, i32, p, i32, i32, i32, p], i32),  # ABI 8
        "specdec_topk": ([p, i32, i32, i32, p, p, p], i32),
        "specdec_q8_linear_topk": ([p, p, i32, i32, p, p, p, p, i32], i32),
        "specdec_q8_eagle_inputs": ([p, p, p, f32, p, i32, p, p, i32, p, i32], i32),  # ABI 9
        "specdec_q8_eagle_level": (
            [p, p, p, f32, p, i32, p, p, p, i32, i32, i32, p, i32, i32, i32, p, i32, p, p, p],
            i32,
        ),
        "specdec_q8_medusa": ([p, p, p, p, f32, p, i32, i32, p, p, p, i32], i32),  # ABI 10
        "specdec_q8_mlp_stage": ([p, p, p, p, p, p, f32, p, p, i32, p, i32, i32, p, p, p, p, i32], i32),
    }
    for name, (args, result) in signatures.items():
        if newer or name not in _Q8_NEWER or hasattr(lib, name):
            function = getattr(lib, name)
            function.argtypes, function.restype = args, result
    return lib


class PhaseClocks:
    """A ``"q4_1"`` model's own phase clocks (the q4q8 forward's are :class:`Q8Forward`'s): profiling on
    points the model structure's ``phase_s`` at this object's :data:`PHASES` seconds, off sets it NULL.
    Per model, so two models profile independently (the library kept one global set before)."""

    def __init__(self, description: Model) -> None:
        self.description = description
        self.seconds = (ctypes.c_double * len(PHASES))()

    def set_profiling(self, on: bool) -> None:
        self.description.phase_s = (
            ctypes.cast(self.seconds, ctypes.POINTER(ctypes.c_double))
            if on
            else ctypes.POINTER(ctypes.c_double)()
        )

    def read_clocks(self) -> list[float]:
        """The phase clocks (seconds, in :data:`PHASES` order) since the last read, which resets them."""
        out = list(self.seconds)
        for i in range(len(PHASES)):
            self.seconds[i] = 0.0
        return out


class Q8Forward:
    """A model repacked for leanq8.c (the ``"q4q8"`` mode): owns the C handle, frees it when dropped.

    ``description`` is a :class:`Model` over tensors the caller keeps alive (the embedding,
    norms and rotary tables are read in place; the linear layers and head are copied into the
    repacked layout). Each instance has its own phase clocks. ``lib``: another loaded build of
    leanq8.c whose model structures are these (None: :func:`library`).
    """

    def __init__(self, description: Model, lib: ctypes.CDLL | None = None) -> None:
        # lib: another build of leanq8.c with the same model structures (a benchmark's library of an
        # earlier commit, :func:`specdec.measure.verifykernels.library_at`); None: this build's
        self.lib = library("q4q8") if lib is None else lib
        status = ctypes.c_int32(0)
        handle = self.lib.specdec_q8_new(ctypes.byref(description), ctypes.byref(status))
        if not handle:
            if status.value == _ERR_MEMORY:
                raise MemoryError("the C forward could not allocate the repacked weights")
            raise ValueError(f"the C forward refused the model description (code {status.value})")
        self.handle = handle
        self.layers = int(description.n_layers)
        self._free = weakref.finalize(self, self.lib.specdec_q8_free, handle)

    def forward(
        self,
        ids: Any,
        k: int,
        start: int,
        cache: Any,
        capacity: int,
        logits: Any,
        keep: int,
        layers: int,
        threads: int,
        parents: Any = None,
        embeds: Any = None,
        features: Any = None,
        prefix: int | None = None,
    ) -> None:
        """Run leanq8.c's forward on raw pointers (``ids``, ``cache``, ``logits``: addresses).

        ``parents`` (the address of k int32 parent indices, each in [-1, r - 1]) runs the tree forward
        (``specdec_q8_forward_tree``): node r at slot start + r, position start + its depth, attending
        to the prefix and its ancestors; None runs the chain. ``embeds`` (the address of (k, hidden)
        float32 rows, used in place of the embedding's rows of ``ids``, which must then be None) and
        ``features`` (the address of a (k, hidden) float32 output: every row's residual after the
        layers, before the final norm) run ``specdec_q8_forward_ex`` (ABI 5). ``prefix`` (below
        ``start``) hangs the tree below nodes earlier calls wrote at slots prefix .. start-1
        (``specdec_q8_forward_spec``, ABI 8): ``parents`` then holds start - prefix + k entries, each in
        [-1, i - 1] over that region."""
        if prefix is not None and prefix != start:
            if parents is None:
                raise ValueError("a call below earlier calls' nodes (prefix < start) needs their parents")
            status = self.lib.specdec_q8_forward_spec(
                self.handle, ids, embeds, parents, k, start, prefix, cache, capacity, logits, keep, layers,
                threads, features,
            )  # fmt: skip
        elif embeds is not None or features is not None:
            status = self.lib.specdec_q8_forward_ex(
                self.handle, ids, embeds, parents, k, start, cache, capacity, logits, keep, layers, threads,
                features,
            )  # fmt: skip
        elif parents is None:
            status = self.lib.specdec_q8_forward(
                self.handle, ids, k, start, cache, capacity, logits, keep, layers, threads
            )
        else:
            status = self.lib.specdec_q8_forward_tree(
                self.handle, ids, parents, k, start, cache, capacity, logits, keep, layers, threads
            )
        if status == _ERR_MEMORY:
            raise MemoryError("the C forward could not allocate its work buffers")
        if status != 0:
            raise ValueError(
                f"the C forward refused its arguments (code {status}): k={k}, start={start}, "
                f"capacity={capacity}, keep={keep}, layers={layers} (of {self.layers}), threads={threads}, "
                "or a token id outside the vocabulary, or not exactly one of ids and embeds"
                + ("" if parents is None else ", or a parent outside [-1, r - 1]")
                + ("" if prefix is None else f", or prefix={prefix} outside [0, start]")
            )

    def set_profiling(self, on: bool) -> None:
        self.lib.specdec_q8_set_profiling(self.handle, int(on))

    def read_clocks(self) -> list[float]:
        """The phase clocks (seconds, in :data:`PHASES` order) since the last read, which resets them."""
        out = (ctypes.c_double * len(PHASES))()
        if self.lib.specdec_q8_profile(self.handle, out, len(PHASES)) != 0:
            raise ValueError("specdec_q8_profile refused its arguments")
        return list(out)


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    p = ctypes.c_void_p
    lib.specdec_q4_forward.argtypes = [
        ctypes.POINTER(Model),
        p,
        ctypes.c_int32,
        ctypes.c_int32,
        p,
        ctypes.c_int32,
        p,
        ctypes.c_int32,
    ]
    lib.specdec_q4_forward.restype = ctypes.c_int
    lib.specdec_q4_forward_tree.argtypes = [
        ctypes.POINTER(Model),
        p,
        p,
        ctypes.c_int32,
        ctypes.c_int32,
        p,
        ctypes.c_int32,
        p,
        ctypes.c_int32,
    ]
    lib.specdec_q4_forward_tree.restype = ctypes.c_int
    lib.specdec_q41_mm.argtypes = [ctypes.POINTER(Q41), p, ctypes.c_int32, p]
    lib.specdec_q41_mm.restype = ctypes.c_int32
    lib.specdec_q80_mm.argtypes = [ctypes.POINTER(Q80), p, ctypes.c_int32, p]
    lib.specdec_q80_mm.restype = ctypes.c_int32
    lib.specdec_q4_abi.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int32]
    lib.specdec_q4_abi.restype = ctypes.c_int32
    return lib


def _check_abi(lib: ctypes.CDLL, kind: str = "q4q8") -> None:
    """The C structures must match the ctypes ones (a stale or foreign library must not be used): the
    library's ABI version and the sizes of its four shared structures, for either C forward."""
    sizes = (ctypes.c_int64 * 4)()
    name, report, abi, model = (
        ("leanq8", lib.specdec_q8_abi, Q8_ABI, Model)
        if kind == "q4q8"
        else ("leanq4", lib.specdec_q4_abi, Q4_ABI, Model)
    )
    version = report(sizes, 4)
    want = [ctypes.sizeof(t) for t in (Q41, Q80, Layer, model)]
    if version != abi or list(sizes) != want:
        raise OSError(
            f"{name} ABI mismatch: the library has version {version} and structure sizes {list(sizes)}, "
            f"Python expects version {abi} and {want}"
        )


def fallback_folder() -> Path:
    """Where a library is built when the cache folder cannot be written (a read-only
    ``SPECDEC_CACHE``): ``specdec-<uid>`` in the system's temporary folder, private to the user."""
    user = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    return Path(tempfile.gettempdir()) / f"specdec-{user}"


def _unwritable(folder: Path, private: bool = False) -> str | None:
    """Why no library can be built in ``folder`` (made when missing), or None when one can.
    ``private``: the folder must also be the user's own and closed to others (a shared temporary
    folder must not hand this process a library someone else put there)."""
    try:
        folder.mkdir(parents=True, exist_ok=True, **({"mode": 0o700} if private else {}))
        if private and hasattr(os, "getuid"):
            st = folder.stat()
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                return "not this user's own private folder"
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        return err.strerror or type(err).__name__
    return None


def _intact(path: Path) -> bool:
    """True when a library as built is cached at ``path``; a damaged one is removed (a line says so)."""
    if not path.exists():
        return False
    why = _damage(path)
    if why is None:
        return True
    print(f"specdec: rebuilding damaged library {path} ({why})", file=sys.stderr)
    with contextlib.suppress(OSError):
        path.unlink()
    return False


def _placed(cc: tuple[str, ...], flags: list[str], path: Path, kind: str) -> Path | str:
    """The path of an intact library of ``kind``: cached at ``path``, else built there, else (the
    cache folder cannot be written) in :func:`fallback_folder`, which a warning names; a one-line
    reason (what, why, what to do) when neither folder can be written."""
    if _intact(path):
        return path
    why = _unwritable(path.parent)
    if why is None:
        _build(cc, flags, path, kind)
        return path
    folder = fallback_folder()
    other = _unwritable(folder, private=True)
    if other is not None:
        return (
            f"cannot build the {kind} C forward: the cache folder {path.parent} cannot be written ({why}), "
            f"nor can {folder} ({other}); point SPECDEC_CACHE at a writable folder"
        )
    warnings.warn(
        f"the C forward's cache folder {path.parent} cannot be written ({why}); the {kind} C forward is "
        f"built and kept in {folder} instead (point SPECDEC_CACHE at a writable folder to keep it there)",
        stacklevel=4,
    )
    target = folder / path.name
    if not _intact(target):
        _build(cc, flags, target, kind)
    return target


def _open(path: Path, kind: str) -> ctypes.CDLL:
    """The library at ``path`` loaded, its entry points declared and its ABI checked."""
    lib = ctypes.CDLL(str(path))
    (_declare_q8 if kind == "q4q8" else _declare)(lib)
    _check_abi(lib, kind)
    return lib


def _open_fresh(path: Path, kind: str) -> ctypes.CDLL:
    """:func:`_open` of a library rebuilt at ``path`` after a foreign one there was loaded: dlopen would
    hand back the loaded one by its name, so the new file is opened under a second name (a hard link,
    removed at once; the process keeps the mapping)."""
    link = path.with_name(f".{path.stem}-{os.getpid()}-{time.monotonic_ns()}.so")
    try:
        os.link(path, link)
    except OSError:  # a file system without hard links: a fresh process will load it
        return _open(path, kind)
    try:
        return _open(link, kind)
    finally:
        with contextlib.suppress(OSError):
            link.unlink()


#: What loading a library that is not this build's forward raises: dlopen's error (OSError, whose text
#: may not even decode), a missing entry point (AttributeError), an ABI mismatch (OSError).
_LOAD_ERRORS = (OSError, AttributeError, UnicodeDecodeError)


@functools.cache
def _load(flags: tuple[str, ...], kind: str = "q4_1") -> ctypes.CDLL | str:
    cc = _compiler()
    if cc is None:
        return f"no C compiler found (looked for {os.environ.get('CC', 'cc')!r}; set $CC)"
    try:
        path = _placed(cc, list(flags), _library_path(cc, list(flags), kind), kind)
        if isinstance(path, str):
            return path
        try:
            return _open(path, kind)
        except _LOAD_ERRORS as err:  # its checksum record matches, but it is not a forward that loads
            why = " ".join((str(err) or type(err).__name__).split())
            print(f"specdec: rebuilding the cached library {path}: it does not load as the {kind} C forward "
                  f"({why})", file=sys.stderr)  # fmt: skip
            for stale in (path, _sidecar(path)):
                with contextlib.suppress(OSError):
                    stale.unlink()
            path = _placed(cc, list(flags), path, kind)
            return path if isinstance(path, str) else _open_fresh(path, kind)
    except (*_LOAD_ERRORS, subprocess.SubprocessError) as err:
        return " ".join((str(err) or type(err).__name__).split())


def library(kind: str = "q4_1") -> ctypes.CDLL:
    """The compiled forward of ``kind`` for this machine (built and cached on first use); OSError if
    it cannot be."""
    _check_kind(kind)
    lib = _load(tuple(build_flags(kind)), kind)
    if isinstance(lib, str):
        raise OSError(f"specdec's C forward is unavailable ({kind}): {lib}")
    return lib


def unavailable_reason(kind: str = "q4_1") -> str | None:
    """None when the C forward of ``kind`` builds and loads here, else why not."""
    _check_kind(kind)
    lib = _load(tuple(build_flags(kind)), kind)
    return lib if isinstance(lib, str) else None


def available(kind: str = "q4_1") -> bool:
    """True when the C forward of ``kind`` builds and loads on this machine."""
    return unavailable_reason(kind) is None


def isa(kind: str = "q4q8") -> str | None:
    """The integer instruction set the ``"q4q8"`` library was compiled for (``"avx512vnni"``,
    ``"avxvnni"``, ``"avx2"`` or ``"portable"``), or None where it is unavailable."""
    if not available(kind):
        return None
    return library(kind).specdec_q8_isa().decode()


#: :func:`amx`'s settings: off, on for calls of enough rows (the default), on for every call of 2+ rows.
AMX_MODES = {"off": 0, "on": 1, "always": 2}


def amx(mode: str | None = None) -> str | None:
    """The ``"q4q8"`` forward's AMX tiles (``csrc/leanq8_matmul.h``): None where this library has none (not an
    AVX512-VNNI build whose compiler targets AMX-INT8, no AMX-INT8 in CPUID, or Linux refused the tile
    state), else the setting in effect: ``"off"``, ``"on"`` (calls of enough rows use them: the default) or
    ``"always"`` (every call of 2 rows or more: tests). ``mode`` sets it first, for the whole process.
    Either way a call's integer sums, hence its logits, are the same bits: only the time differs."""
    if mode is not None and mode not in AMX_MODES:
        raise ValueError(f"mode must be one of {tuple(AMX_MODES)} or None; got {mode!r}")
    code = library("q4q8").specdec_q8_amx(-1 if mode is None else AMX_MODES[mode])
    return None if code == _AMX_NONE else {v: k for k, v in AMX_MODES.items()}[code]


#: The loops of leanq8.c's ``specdec_q8_peak`` (csrc/leanq8_peak.h): the register tiles' int8 dot product
#: (vpdpbusd, or its AVX2 / portable equivalent), AMX's TDPBSSD, and float32 vector operations of 16 lanes
#: (the unit the exact float epilogue is counted in).
PEAK_KINDS = {"int8": 0, "amx_int8": 1, "float32_vector": 2}


def peak_work(kind: str, iters: int, threads: int) -> float:
    """Run ``iters`` iterations of the ``"q4q8"`` library's peak loop ``kind`` (:data:`PEAK_KINDS`) on each of
    ``threads`` threads (the forward's pool) and return the work done: int8 multiply-adds, or 16-lane float
    vector operations. The caller times the call (:func:`specdec.measure.verifykernels.measure_peaks`).
    ValueError for an unknown kind or a bad count, and for ``"amx_int8"`` where :func:`amx` is None."""
    if kind not in PEAK_KINDS:
        raise ValueError(f"kind must be one of {tuple(PEAK_KINDS)}; got {kind!r}")
    iters = check_int("iters", iters, low=1)
    threads = check_threads(threads)
    work = library("q4q8").specdec_q8_peak(PEAK_KINDS[kind], iters, threads)
    if work < 0:
        raise ValueError(f"specdec_q8_peak refused kind {kind!r} (no AMX here?) or its counts")
    return float(work)


#: ABI -> (the earliest ABI whose layout it only extends, {structure index: bytes appended at its end})
#: (``csrc/leanq8.c``'s history): 6 appended model_t's phase_s pointer to ABI 5's structures.
_Q8_APPENDED: dict[int, tuple[int, dict[int, int]]] = {6: (5, {3: ctypes.sizeof(ctypes.c_void_p)})}

#: The q4q8 entry points an earlier ABI may lack (:func:`q8_library_from` lists those missing).
_Q8_NEWER = (
    "specdec_q8_amx",
    "specdec_q8_peak",
    "specdec_q8_forward_spec",
    "specdec_q8_linear_topk",
    "specdec_topk",
    "specdec_q8_eagle_inputs",
    "specdec_q8_eagle_level",
    "specdec_q8_medusa",
    "specdec_q8_mlp_stage",
)


def q8_library_from(sources: Mapping[str, bytes]) -> tuple[ctypes.CDLL, dict[str, Any]]:
    """A ``"q4q8"`` library built from other C sources (another commit's ``csrc``: file name -> bytes,
    ``leanq8.c`` among them) with this machine's flags and compiler, cached under the package cache by the
    sources, flags and compiler, and loaded beside this build under its own name: for a benchmark that
    compares builds in one process (:mod:`specdec.measure.verifykernels`). Its entry points are declared;
    an earlier ABI lacks the newer ones (listed under ``"lacks"``). Its model structures must be this
    checkout's (the sizes its ABI function reports; its version may be older), or those of an earlier ABI
    whose structures ours only extend at their end (:data:`_Q8_APPENDED`): OSError otherwise, and
    when no compiler builds it. Returns the library and what a record says of it."""
    from specdec.engine.models import cache_root

    if "leanq8.c" not in sources:
        raise ValueError(f"sources must hold leanq8.c; got {sorted(sources)}")
    cc = _compiler()
    if cc is None:
        raise OSError(f"no C compiler found (looked for {os.environ.get('CC', 'cc')!r}; set $CC)")
    flags = build_flags("q4q8")
    key = hashlib.sha256()
    for name in sorted(sources):
        key.update(name.encode() + b"\0" + bytes(sources[name]) + b"\0")
    key.update(" ".join(flags).encode() + _compiler_version(cc).encode())
    path = cache_root() / "native" / f"leanq8-from-{key.hexdigest()[:20]}.so"
    if not _intact(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as tmp:
            for name, data in sources.items():
                (Path(tmp) / name).write_bytes(bytes(data))
            out = Path(tmp) / path.name
            error = _run_compiler(cc, flags, out, Path(tmp) / "leanq8.c")
            if error is not None:
                raise OSError(error)
            size, sha = _digest(out)
            _sidecar(out).write_text(json.dumps({"size": size, "sha256": sha}), encoding="utf-8")
            os.replace(_sidecar(out), _sidecar(path))
            os.replace(out, path)
    lib = _declare_q8(ctypes.CDLL(str(path)), newer=False)
    lacks = [name for name in _Q8_NEWER if not hasattr(lib, name)]
    sizes = (ctypes.c_int64 * 4)()
    version = lib.specdec_q8_abi(sizes, 4)
    want = [ctypes.sizeof(t) for t in (Q41, Q80, Layer, Model)]
    prefix = list(want)  # the sizes an earlier ABI's structures have: ours less what later ABIs appended
    for abi, (since, grown) in _Q8_APPENDED.items():
        if since <= int(version) < abi:  # an ABI before ``since`` laid its fields out otherwise
            for i, extra in grown.items():
                prefix[i] -= extra
    if list(sizes) != prefix:
        raise OSError(f"that leanq8 has structure sizes {list(sizes)} (ABI {version}); here: {want}")
    isa_name = lib.specdec_q8_isa().decode()
    info = {"abi": int(version), "isa": isa_name, "flags": flags, "library": path.name, "lacks": lacks}
    if prefix != want:  # said in the record: the library reads a leading part of our structures
        info["structures"] = {"its_sizes": list(sizes), "ours": want, "rule": "fields appended since its ABI"}
    return lib, info


def build_info(kind: str = "q4_1") -> dict[str, Any] | None:
    """What a record names about the C forward it ran: the compiler, its version line, the flags
    and the cached library's file name (and, for ``"q4q8"``, the integer path); None where the
    forward is unavailable."""
    cc = _compiler()
    if cc is None or not available(kind):
        return None
    flags = build_flags(kind)
    version = _compiler_version(cc).splitlines()
    info = {
        "compiler": " ".join(cc),
        "compiler_version": version[0] if version else "",
        "flags": flags,
        "emulated_cpu": os.environ.get("SPECDEC_EMULATED_CPU", "native"),
        "library": _library_path(cc, flags, kind).name,
    }
    if kind == "q4q8":
        lib = library(kind)
        info |= {"isa": lib.specdec_q8_isa().decode(), "amx": amx()}
    return info


#: The phases the C forward clocks, in the order of its ``phase_s`` array (the names of
#: :func:`specdec.measure.profile.profile_step`'s buckets where they mean the same).
PHASES = ("linear", "lm_head", "attention", "other ops")
