"""The engine's mode chosen by measuring the running machine, never by a constant.

Which weight format decodes fastest depends on the CPU: bfloat16 matmuls are fast only with
AVX512-BF16 or AMX, the int4 kernel's speed depends on the vector units, and memory
bandwidth sets the floor. :func:`probe_modes` times, on this machine and thread count, one
decode step T(1) and one verify call T(k) of every lean mode (:mod:`specdec.engine.lean`) on the
given model, interleaved and repeated; :func:`choose_mode` picks the mode with the lowest
median T(1) (the baseline every speedup divides by) and caches the probe, keyed by the
machine's identity (CPU name, torch's and numpy's SIMD dispatch, versions, threads) and the
model's shape, so later calls on the same machine reuse it and a different machine measures
anew. :func:`lean_model` builds the model in the chosen mode, and :func:`draft_length` picks
the draft length gamma from the probe's verify curve and the drafter's alpha and c.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specdec.drafting.registry import DraftContext
from specdec.engine.builder import (
    DRAFT_MODES,
    EngineSpec,
    OpenedEngine,
    available_modes,
    draft_modes,
    open_draft,
    open_engine,
    open_model,
)
from specdec.engine.cores import torch_threads_for
from specdec.engine.lean import MODES, NATIVE_MODES, LeanLlama
from specdec.measure.core import cpu_name, probe_summary, time_forwards
from specdec.measure.runner import cpu_counters, load_during
from specdec.theory.checks import check_float, check_int, check_ints
from specdec.theory.recordio import DamagedFileError, read_json, write_record

__all__ = [
    "DRAFT_MODES",
    "TIMING_GROUPS",
    "available_modes",
    "choose_mode",
    "draft_context",
    "draft_length",
    "draft_modes",
    "lean_draft",
    "lean_model",
    "machine_identity",
    "open_target",
    "probe_modes",
    "timing_groups",
]

#: Bump when the probe's method changes: older cached probes are then ignored.
PROBE_VERSION = 7


def left_out_modes() -> dict[str, str]:
    """The lean modes of :data:`specdec.engine.lean.MODES` this machine cannot run, each with why (empty if
    none)."""
    from specdec.engine import native

    runs = available_modes()
    missing = [m for m in MODES if m not in runs]
    if not missing:
        return {}
    own = {"int4": "torch has no CPU int4 kernels here (torch.ops.aten._weight_int4pack_mm_for_cpu)"}
    # each C forward says why it cannot run (q4_1's and q4q8's reasons may differ)
    return {
        m: own.get(m)
        or f"the C forward cannot be built or loaded: {native.unavailable_reason(m) or 'no reason given'}"
        for m in missing
    }


def _progress_line(line: str) -> None:
    """One progress line on stderr, where no bar shows (a slow first call says what it does); a
    progress report is not a warning, so it is neither filtered as a repeat nor given a source line."""
    print(line, file=sys.stderr, flush=True)


def _say(line: str) -> None:
    """One line for the user (a UserWarning; the ``specdec`` command prints it as one line)."""
    warnings.warn(line, UserWarning, stacklevel=3)


def machine_identity() -> dict[str, Any]:
    """What makes timings comparable: CPU name and flags digest, SIMD dispatch, torch version, threads."""
    from specdec.engine.machine import cpu_flags, numpy_simd

    flags = " ".join(sorted(cpu_flags()))
    return {
        "cpu": cpu_name(),
        "cpu_flags_sha256": hashlib.sha256(flags.encode()).hexdigest()[:16],
        "torch_capability": str(torch.backends.cpu.get_cpu_capability()),
        "numpy_simd": numpy_simd()["dispatch"],
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def _model_key(model: Any) -> dict[str, Any]:
    c = model.config
    return {
        name: getattr(c, name, None)
        for name in (
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "vocab_size",
        )
    }


#: The call sizes a probe times: the step (1) and verify calls for gamma = 1..15.
PROBE_KS = (1, 2, 3, 4, 5, 6, 8, 12, 16)


def probe_modes(
    model: Any,
    modes: Sequence[str] | None = None,
    *,
    ks: Sequence[int] = PROBE_KS,
    k: int = 4,
    context: int = 128,
    repeats: int = 5,
    warmup: int = 1,
    threads: int | None = None,
) -> dict[str, Any]:
    """Time the calls T(k) of each mode on this machine, for every k in ``ks``.

    ``model`` is a Hugging Face Llama (the weights are converted per mode). After a prefill
    of ``context`` tokens, each pass times one call of every size in ``ks`` for every mode,
    modes in a fresh order per pass (interleaved, so drift affects all modes alike; the C forwards'
    modes and torch's in two such groups, one after the other), cropping
    back each time; ``warmup`` passes are discarded. Returns per mode the medians ``step_s``
    (k = 1) and ``verify_s`` (k = ``k``), ``verify_cost`` = their ratio, the whole curve
    ``curve`` ({k: median T(k) / median T(1)}), ``exact`` (whether a verify call's rows equal
    single steps bit for bit on this machine, :meth:`LeanLlama.verify_matches_steps`) and the
    samples, plus the machine's identity. ``threads``: the C forward's threads in ``"q4q8"``
    (default: the cores this process may use; torch's modes run on torch's threads).
    """
    from specdec.engine import native

    threads = native.check_threads(threads)
    modes = tuple(modes) if modes is not None else available_modes()
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise ValueError(f"modes must be a non-empty subset of {MODES}; got {modes!r}")
    for name, value, low in (
        ("k", k, 2),
        ("context", context, 1),
        ("repeats", repeats, 1),
        ("warmup", warmup, 0),
    ):
        check_int(name, value, low=low)
    sizes = sorted({1, k, *(check_ints("ks", ks, low=1) if len(ks) else ())})
    gen = np.random.default_rng(0)
    vocab = int(model.config.vocab_size)
    ids = gen.integers(0, vocab, context + sizes[-1]).tolist()
    sessions = {}
    leans = {}
    exact = {}
    what = f"timing the lean modes ({', '.join(modes)})"
    bar = _progress_bar(len(modes) + warmup + repeats, what)
    quiet = bar.disable  # no bar off a terminal: one line now and one at the end say what is slow
    if quiet:
        _progress_line(f"{what} on this machine ({warmup + repeats} passes of every call size) ...")
    began = time.perf_counter()
    for mode in modes:
        bar.set_postfix_str(f"preparing {mode}", refresh=True)
        lean = leans[mode] = open_model(model, EngineSpec("lean", mode, threads)).model
        exact[mode] = lean.verify_matches_steps(k=max(sizes))  # the longest verify call probed
        s = lean.session()
        s.forward(ids[:context], keep=1)
        sessions[mode] = s
        bar.update()
    bar.set_postfix_str("timing", refresh=True)
    counters, start = cpu_counters(), time.perf_counter()
    # the C forwards' modes and torch's in two groups, each interleaved: torch's OpenMP workers keep
    # spinning after an op on several threads and would take the cores of the next C call
    times: dict[str, Any] = {}
    for _, group in timing_groups({m: m for m in modes}):
        times |= time_forwards(
            {m: sessions[m] for m in group},
            dict.fromkeys(group, ids[context:]),
            sizes,
            repeats=repeats,
            warmup=warmup,
            order="names",
            rng=gen,
            # q4q8's C threads need the cores: torch on one thread while it runs (as when it decodes)
            around={mode: partial(torch_threads_for, leans[mode]) for mode in group},
        )
    load = load_during(
        counters,
        cpu_counters(),
        time.perf_counter() - start,
        max(torch.get_num_threads(), threads if "q4q8" in modes else 1),  # the C pool only in q4q8
    )
    bar.update(warmup + repeats)
    bar.close()
    if quiet:
        _progress_line(f"{what}: done in {time.perf_counter() - began:.1f} s")
    result = {}
    for mode in modes:
        med = {n: float(np.median(times[mode][n])) for n in sizes}
        result[mode] = {
            "step_s": med[1],
            "verify_s": med[k],
            "verify_cost": med[k] / med[1],
            "curve": {str(n): med[n] / med[1] for n in sizes},
            "exact": exact[mode],
            "samples_s": {str(n): times[mode][n] for n in sizes},
        }
    return {
        "probe_version": PROBE_VERSION,
        "k": k,
        "ks": sizes,
        "context": context,
        "repeats": repeats,
        "native_threads": threads,
        "machine": machine_identity(),
        "model": _model_key(model),
        "modes": result,
        "load": load,
    }


#: The two groups a timing splits lean models into, in the order they run (:func:`timing_groups`).
TIMING_GROUPS = ("C forward", "torch")


def timing_groups(modes: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    """The names of ``modes`` ({name: lean mode}) split into the C forwards' modes
    (:data:`specdec.engine.lean.NATIVE_MODES`) and torch's, as ``[(label, names)]`` in the order
    of :data:`TIMING_GROUPS`, each group in the given order, empty ones left out.

    A timing interleaves the models of one group, and runs the groups one after the other:
    torch's OpenMP workers keep spinning after a torch op on several threads and would take the
    cores the C forward's threads need in the next call."""
    native = [name for name, mode in modes.items() if mode in NATIVE_MODES]
    rest = [name for name, mode in modes.items() if mode not in NATIVE_MODES]
    return [(label, names) for label, names in zip(TIMING_GROUPS, (native, rest), strict=True) if names]


def _progress_bar(total: int, desc: str) -> Any:
    """A tqdm bar on stderr (off when stderr is not a terminal, as the command line's bars)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, disable=None)


def draft_length(
    probe: dict[str, Any], alpha: float, c: float = 0.0, mode: str | None = None
) -> dict[str, Any]:
    """The draft length gamma that maximises Theorem 3.8 with this machine's verify curve.

    ``probe`` is :func:`choose_mode`'s (or :func:`probe_modes`') result; ``mode`` defaults to
    the chosen one. ``alpha`` is the drafter's acceptance rate on your workload (measure it:
    prompt lookup's ranged from about 0.2 to 0.6 over Part IV's tasks) and ``c`` its cost per
    drafted token in target steps (about 0 for prompt lookup). Returns ``gamma``, the
    predicted ``speedup`` and the ``mode``. It replaces a fixed default measured elsewhere.
    """
    from specdec.theory.speedup import best_gamma_on_curve

    mode = mode or probe.get("mode")
    if mode not in probe.get("modes", {}):
        raise ValueError(
            f"mode must be one of the probed modes {sorted(probe.get('modes', {}))}; got {mode!r}"
        )
    alpha = check_float("alpha", alpha, low=0.0, high=1.0, open_high=True)
    c = check_float("c", c, low=0.0)
    curve = {int(n): float(v) for n, v in probe["modes"][mode]["curve"].items()}
    gamma, speedup = best_gamma_on_curve(alpha, c, curve)
    return {"gamma": gamma, "speedup": speedup, "mode": mode}


def _entry_ok(entry: Mapping[str, Any], wanted: Sequence[str]) -> bool:
    """A cached probe that can be used: its chosen mode among ``wanted`` and a positive finite single-step
    time for every mode (a cache edited or written by another version is measured again, not trusted)."""
    import math

    modes = entry.get("modes")
    if entry.get("mode") not in wanted or not isinstance(modes, Mapping):
        return False
    for m in wanted:
        step = modes.get(m, {}).get("step_s") if isinstance(modes.get(m), Mapping) else None
        if (
            isinstance(step, bool)
            or not isinstance(step, (int, float))
            or not (math.isfinite(step) and step > 0)
        ):
            return False
    return True


def _cache_file(root: Path | None) -> Path:
    from specdec.engine.models import cache_root

    return (root if root is not None else cache_root()) / "mode-probes.json"


def _probe_key(model: Any, threads: int | None = None) -> str:
    from specdec.engine import native

    key = {"probe_version": PROBE_VERSION, "machine": machine_identity(), "model": _model_key(model)}
    if threads is not None and threads != native.default_threads():  # the C forward's own threads
        key["native_threads"] = threads
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def choose_mode(
    model: Any,
    *,
    refresh: bool = False,
    cache: Path | None = None,
    modes: Sequence[str] | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """The fastest lean mode for ``model`` on this machine, from a probe (cached per machine).

    The rule: the lowest median single-step time T(1), since plain decoding at T(1) is the
    baseline of every speedup; ties (equal medians) go to the more precise mode, in the order
    of :data:`specdec.engine.lean.MODES`. Returns the probe with ``"mode"`` (the choice), ``"rule"``
    and ``"cached"`` (True when read from the cache). ``refresh`` re-measures; ``cache`` is
    the folder of the cache file (default: :func:`specdec.engine.models.cache_root`); ``threads`` the C
    forward's threads in ``"q4q8"`` (default: the usable cores). A damaged cache file (not a JSON
    object) is kept beside as ``mode-probes.json.damaged`` with every machine's entries, and a new
    one written. Each of these is said in one line (a UserWarning): the damaged file; modes this machine
    cannot run (:func:`left_out_modes`, when ``modes`` is not given); a cache that cannot be
    written (the probe is then kept in memory for this process); a probe timed while other
    processes kept the CPUs busy (its ``load``, :func:`load_during`): it is used for this call
    but not cached, so the next call measures again.
    """
    from specdec.engine import native

    threads = native.check_threads(threads)
    path = _cache_file(cache)
    key = _probe_key(model, threads)
    if modes is None and (missing := left_out_modes()):
        reasons = "; ".join(f"{m}: {why}" for m, why in missing.items())
        _say_once(f"lean modes left out on this machine ({reasons}); the mode is chosen among the others")
    asked = None if modes is None else tuple(modes)
    if not refresh and (path, key, asked) in _IN_MEMORY:
        return {**_IN_MEMORY[path, key, asked], "cached": True}
    store = _read_store(path)
    wanted = tuple(modes) if modes is not None else available_modes()
    entry = store.get(key)
    if not refresh and isinstance(entry, dict) and tuple(entry.get("modes", {}) or {}) == wanted:
        if _entry_ok(entry, wanted):
            return {**entry, "cached": True}
        _say(
            f"the mode-probe cache {path} holds a damaged entry for this machine (a mode outside "
            f"{', '.join(wanted)} or a step time that is not a positive number); measuring again"
        )
    probe = probe_modes(model, wanted, threads=threads)
    order = {m: i for i, m in enumerate(MODES)}
    best = min(wanted, key=lambda m: (probe["modes"][m]["step_s"], order[m]))
    entry = {**probe, "mode": best, "rule": "lowest median T(1); ties to the more precise mode"}
    load = probe.get("load") or {}
    if load.get("loaded"):
        _say(
            f"mode probe not cached: other processes kept {load.get('others_busy_cpus', 0):.1f} of "
            f"{load.get('cpus')} CPUs busy while it timed {load.get('threads')} thread(s), so its "
            "timings may not hold; used for this call only, measured again next time (on a quieter machine)"
        )
        return {**entry, "cached": False}
    store[key] = entry
    try:
        write_record(path, store, indent=1, sort_keys=False)  # one temporary file per writer; atomic
    except OSError as exc:  # an unwritable cache: keep the probe for this process
        _IN_MEMORY[path, key, asked] = entry
        _say(
            f"mode probe kept for this process only: cannot write {path} ({exc.strerror or exc}); "
            "set SPECDEC_CACHE to a writable folder to keep it"
        )
    return {**entry, "cached": False}


def _read_store(path: Path) -> dict[str, Any]:
    """The mode-probe cache's entries (every machine's), {} when there is none or it cannot be read. A
    damaged file (not JSON, or not an object) is not overwritten silently: it is kept beside as
    ``mode-probes.json.damaged`` (the other machines' entries are in it) and a line says so."""
    try:
        return read_json(path, what="the mode-probe cache", kind=dict)
    except OSError:  # none yet, or unreadable: measured, and the write says whether it can keep it
        return {}
    except DamagedFileError as exc:
        aside = path.with_name(path.name + ".damaged")
        try:
            os.replace(path, aside)
            kept = f"kept as {aside} (the other machines' probes, if any, are in it)"
        except OSError as move:
            kept = f"could not be kept aside ({move.strerror or move}); it is replaced"
        _say(f"{exc}; {kept}; measuring this machine's modes again")
        return {}


#: Probes whose cache file could not be written, by (file, key, modes asked): kept for the process.
_IN_MEMORY: dict[tuple[Path, str, Any], dict[str, Any]] = {}
_SAID: set[str] = set()


def _say_once(line: str) -> None:
    if line not in _SAID:
        _SAID.add(line)
        _say(line)


def _chooser(**choose: Any) -> Any:
    """The builder's :data:`~specdec.engine.builder.Chooser`: :func:`choose_mode` with ``choose``'s
    keywords (``refresh``, ``cache``, ``modes``)."""
    asked = choose.pop("modes", None)  # a caller's own list of modes (lean_model's keyword)

    def chooser(model: Any, modes: Sequence[str] | None, threads: int) -> dict[str, Any]:
        return choose_mode(model, modes=modes if asked is None else asked, threads=threads, **choose)

    return chooser


def open_target(spec: EngineSpec, *, base: Any = None, **choose: Any) -> OpenedEngine:
    """The default target opened in ``spec`` by the one engine builder
    (:func:`specdec.engine.builder.open_engine`), a lean ``"auto"`` chosen by :func:`choose_mode`
    (``choose``: its ``refresh`` and ``cache``). ``base``: a loaded model to build on."""
    return open_engine(spec, base=base, choose=_chooser(**choose))


def lean_model(
    model: Any, mode: str = "auto", *, threads: int | None = None, **choose: Any
) -> tuple[LeanLlama, dict[str, Any] | None]:
    """``model`` as a :class:`~specdec.engine.lean.LeanLlama` in ``mode``; ``"auto"`` measures first
    (the builder's :func:`~specdec.engine.builder.open_model` with :func:`choose_mode`).

    ``threads``: the C forward's threads (``"q4q8"``; default: the cores this process may use).
    Returns the lean model and the probe behind an ``"auto"`` choice (None for a named mode).
    """
    opened = open_model(model, EngineSpec("lean", mode, threads), choose=_chooser(**choose))
    return opened.model, opened.probe


def lean_draft(
    model: Any, mode: str = "auto", *, threads: int | None = None, **choose: Any
) -> tuple[LeanLlama, dict[str, Any] | None]:
    """A draft model (e.g. :func:`specdec.train.draftnets.load_draft`) in the lean engine
    (:func:`specdec.engine.builder.open_draft`).

    ``"auto"`` picks the fastest of :func:`~specdec.engine.builder.draft_modes` on this machine by
    :func:`choose_mode` (cached like the target's probe); the 4-bit modes are left out because they
    would round the draft's own trained weights to a 4-bit code, changing the draft, and q4q8 runs a
    draft of int8 rows on its own codes. A small draft is where the lean engine saves most: its step
    is mostly fixed overhead, and c is the draft's step over the target's. ``threads``: the C
    forward's threads in q4q8 (default: the cores this process may use). Returns the lean draft and
    the probe behind an ``"auto"`` choice.
    """
    opened = open_draft(model, EngineSpec("lean", mode, threads), choose=_chooser(**choose))
    return opened.model, opened.probe


def draft_context(
    target: OpenedEngine,
    *,
    draft_mode: str = "auto",
    corpus: Callable[[], Sequence[Sequence[int]]] | None = None,
    load_model: Callable[[str], Any] | None = None,
) -> tuple[DraftContext, dict[str, Any]]:
    """The registry's :class:`~specdec.drafting.registry.DraftContext` around an opened target: one
    way to load what a drafter spec names.

    A distilled draft (``draft:<name>``, :func:`specdec.train.draftnets.load_draft` on the target's
    base model) runs in the lean engine at the target's threads in ``draft_mode`` (``"auto"``: the
    fastest of :data:`DRAFT_MODES` that keeps its weights, by :func:`choose_mode`) when the target is
    lean, and as loaded when it is a transformers model; Medusa, the MLP speculator and EAGLE load by
    :func:`specdec.train.condnets.load_conditioned` (their matrices in int8 rows on the target's threads);
    ``corpus`` gives the n-gram drafters' text, ``load_model`` a model folder's draft. Returns the
    context and ``drafts``: what each draft ran in, filled as each loads (for the record).
    """
    from specdec.drafting.registry import DraftContext
    from specdec.train.condnets import load_conditioned
    from specdec.train.draftnets import DRAFT_DIR, load_draft

    base = target.base.model
    drafts: dict[str, Any] = {}

    def load(name: str) -> Any:
        model = load_draft(name, base)
        if target.spec.engine != "lean":
            drafts[name] = {"engine": target.spec.engine, "mode": target.mode}
            return model
        opened = open_draft(model, EngineSpec("lean", draft_mode, target.threads), choose=_chooser())
        drafts[name] = {"mode": opened.mode, "codes": opened.model.codes, "threads": target.threads}
        if opened.probe is not None:
            drafts[name]["probe"] = probe_summary(opened.probe)
        return opened.model

    def load_cond(name: str) -> tuple[Any, dict]:
        module, card = load_conditioned(DRAFT_DIR / name, base)
        drafts[name] = {"kind": card["kind"], "steps": card.get("steps"), "threads": 1,
                        "runs_in": "int8 rows (Q8Linear; EAGLE's layer: q4q8)"}  # fmt: skip
        return module, card

    context = DraftContext(
        target.model, load_draft=load, load_conditioned=load_cond, corpus=corpus, load_model=load_model
    )
    return context, drafts
