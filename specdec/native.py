"""specdec's own C forward for the ``"q4_1"`` lean mode: built on the running machine, loaded by ctypes.

torch's CPU int4 kernel runs a 4-bit weight with bfloat16 activations and decodes the weights
again for every row of a call, and a decode step in eager torch pays a few microseconds of
dispatch for each of its ~750 small operations. ``csrc/leanq4.c`` is the whole forward of a
Llama decoder in one call: the GGUF's Q4_1 code for every decoder linear layer, the Q8_0 code
for the LM head, float32 activations and sums, a float32 KV cache laid out as
:class:`specdec.lean.LeanLlama`'s. Each row of a call runs the same instructions in the same
order whatever the number of rows, so a verify call's rows equal single steps bit for bit by
construction (the tests check it).

The C source is compiled here, on first use, with the system's C compiler (``$CC``, which may
name a launcher such as ``ccache gcc``, else ``cc``) at ``-O3 -march=native`` (the machine's
own vector unit: AVX-512, AVX2 or SSE), and the library is cached under the package cache keyed
by the source, the flags, the compiler and the CPU's flags, so another machine builds its own.
Under the Makefile's emulated CPUs (``SPECDEC_EMULATED_CPU`` = ``avx2`` or ``baseline``) it is
built for that CPU level instead (``-march=x86-64-v3`` or ``-march=x86-64``). Where no compiler
works, :func:`available` says why and the mode is simply not offered
(:func:`specdec.modes.available_modes`)."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "PHASES",
    "SOURCE",
    "available",
    "build_flags",
    "build_info",
    "library",
    "profile_step",
    "unavailable_reason",
]

#: The C source of the forward.
SOURCE = Path(__file__).with_name("csrc") / "leanq4.c"

_MARCH = {"native": "-march=native", "avx2": "-march=x86-64-v3", "baseline": "-march=x86-64"}


def build_flags() -> list[str]:
    """The compiler flags, for this CPU or for the CPU the test suite emulates."""
    target = os.environ.get("SPECDEC_EMULATED_CPU", "native")
    if target not in _MARCH:
        raise ValueError(f"SPECDEC_EMULATED_CPU must be one of {sorted(_MARCH)}; got {target!r}")
    return ["-O3", _MARCH[target], "-std=gnu11", "-shared", "-fPIC"]


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


def _library_path(cc: tuple[str, ...], flags: list[str]) -> Path:
    from specdec.models import cache_root
    from specdec.roofline import cpu_flags

    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(flags).encode(), _compiler_version(cc).encode()):
        key.update(part + b"\0")
    key.update(" ".join(sorted(cpu_flags())).encode() + platform.machine().encode())
    return cache_root() / "native" / f"leanq4-{key.hexdigest()[:20]}.so"


def _build(cc: tuple[str, ...], flags: list[str], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        done = subprocess.run(
            [*cc, *flags, "-o", str(out), str(SOURCE), "-lm"], capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            raise OSError(f"{' '.join(cc)} failed to build {SOURCE.name}: {done.stderr.strip()[-2000:]}")
        os.replace(out, target)  # atomic: a concurrent build never sees half a library


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
    ]


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
    lib.specdec_q41_mm.argtypes = [ctypes.POINTER(Q41), p, ctypes.c_int32, p]
    lib.specdec_q41_mm.restype = None
    lib.specdec_q80_mm.argtypes = [ctypes.POINTER(Q80), p, ctypes.c_int32, p]
    lib.specdec_q80_mm.restype = None
    lib.specdec_q4_set_profiling.argtypes = [ctypes.c_int]
    lib.specdec_q4_set_profiling.restype = None
    lib.specdec_q4_profile.argtypes = [ctypes.POINTER(ctypes.c_double)]
    lib.specdec_q4_profile.restype = None
    return lib


@functools.cache
def _load(flags: tuple[str, ...]) -> ctypes.CDLL | str:
    cc = _compiler()
    if cc is None:
        return f"no C compiler found (looked for {os.environ.get('CC', 'cc')!r}; set $CC)"
    path = _library_path(cc, list(flags))
    try:
        if not path.exists():
            _build(cc, list(flags), path)
        return _declare(ctypes.CDLL(str(path)))
    except (OSError, subprocess.SubprocessError) as err:
        return str(err)


def library() -> ctypes.CDLL:
    """The compiled forward for this machine (built and cached on first use); OSError if it cannot be."""
    lib = _load(tuple(build_flags()))
    if isinstance(lib, str):
        raise OSError(f"specdec's C forward is unavailable: {lib}")
    return lib


def unavailable_reason() -> str | None:
    """None when the C forward builds and loads here, else why not."""
    lib = _load(tuple(build_flags()))
    return lib if isinstance(lib, str) else None


def available() -> bool:
    """True when the C forward builds and loads on this machine."""
    return unavailable_reason() is None


def build_info() -> dict[str, Any] | None:
    """What a record names about the C forward it ran: the compiler, its version line, the flags
    and the cached library's file name; None where the forward is unavailable."""
    cc = _compiler()
    if cc is None or not available():
        return None
    flags = build_flags()
    version = _compiler_version(cc).splitlines()
    return {
        "compiler": " ".join(cc),
        "compiler_version": version[0] if version else "",
        "flags": flags,
        "emulated_cpu": os.environ.get("SPECDEC_EMULATED_CPU", "native"),
        "library": _library_path(cc, flags).name,
    }


#: The phases the C forward clocks, in the order of its ``phase_s`` array (the names of
#: :func:`specdec.roofline.profile_step`'s buckets where they mean the same).
PHASES = ("linear", "lm_head", "attention", "other ops")


def profile_step(
    forward_fn: Callable[[int], object],
    k: int = 1,
    repeats: int = 5,
    *,
    warmup: int = 1,
    reset: Callable[[], object] | None = None,
) -> dict[str, Any]:
    """Where one C forward's time goes, from its own phase clocks (the torch profiler sees one call).

    The C counterpart of :func:`specdec.roofline.profile_step`, with the same arguments and
    result keys: ``buckets_ms`` per call holds ``linear`` (the decoder's Q4_1 layers),
    ``lm_head`` (the Q8_0 head), ``attention`` (rotary, cache writes, attention), ``other ops``
    (embedding, norms, SiLU) and ``framework overhead`` (the call's wall time minus the phases:
    Python, ctypes, the session's bookkeeping); ``wall_ms_unprofiled`` is the median of as many
    calls with the clocks off.
    """
    for name, value, low in (("k", k, 1), ("repeats", repeats, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}; got {value!r}")
    from specdec.roofline import timed_call

    lib = library()
    out = (ctypes.c_double * len(PHASES))()
    call = timed_call(forward_fn, k, reset)
    for _ in range(warmup):
        call()
    unprofiled = [call() for _ in range(repeats)]
    lib.specdec_q4_profile(out)  # clears the clocks
    lib.specdec_q4_set_profiling(1)
    try:
        walls = [call() for _ in range(repeats)]
        lib.specdec_q4_profile(out)
    finally:
        lib.specdec_q4_set_profiling(0)
    phases = {name: 1e3 * out[i] / repeats for i, name in enumerate(PHASES)}
    wall_ms = 1e3 * float(np.mean(walls))
    buckets = phases | {"framework overhead": max(0.0, wall_ms - sum(phases.values()))}
    return {
        "k": k,
        "repeats": repeats,
        "threads": 1,
        "wall_ms": wall_ms,
        "wall_ms_unprofiled": 1e3 * float(np.median(unprofiled)),
        "bucketing": "C phase clocks",
        "buckets_ms": buckets,
        "top_ops": [],
    }
