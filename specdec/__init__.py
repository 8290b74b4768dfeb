"""specdec: the shared package of the book *How much does speculative decoding really gain?*

Modules, one job each, in one folder per layer (lowest first; a module imports only from its own layer and
lower ones, which ``tests/test_layers.py`` enforces):

Theory (numpy only, no torch):

* :mod:`specdec.theory.speedup`    -- closed forms of Leviathan et al. (2023): E[T] (Eq. 1), Theorem 3.8
  (and its variant with a measured verify cost, and on a measured curve: the best gamma and the
  break-even alpha), Theorem 3.11, the optimal gamma, the acceptance rate (Corollary 3.6).
* :mod:`specdec.theory.iid`       -- simulation of the i.i.d. acceptance model behind Eq. 1.
* :mod:`specdec.theory.sampling`  -- Algorithm 1 on probability rows: warp, verify, residual, sample.
* :mod:`specdec.theory.policies`  -- draft-length policies: a fixed gamma, or one that adapts.
* :mod:`specdec.theory.intervals` -- geometric means, paired ratios and bootstrap intervals, verdicts.
* :mod:`specdec.theory.checks`    -- the one argument checker (integers, lists, numbers, probabilities).
* :mod:`specdec.theory.tokens`    -- comparing token lists: common prefix, first divergence.
* :mod:`specdec.theory.plan`      -- ``specdec plan``'s numbers: Theorem 3.8 for alpha, c, gamma and a verify
  cost, the optimal gamma by a bounded search.
* :mod:`specdec.theory.cost`      -- a forward's bytes and FLOPs by part and weight format, and the step
  time and verify curve the roofline predicts from them (pure arithmetic).
* :mod:`specdec.theory.chisquare` -- Pearson's chi-square against a law, its one p-value path (scipy or
  the tested fallback, named in the result).
* :mod:`specdec.theory.trees`     -- the draft tree (tokens, parents) every tree drafter, engine and verifier
  shares.
* :mod:`specdec.theory.treeverify` -- lossless verification of a draft tree (SpecInfer's multi-candidate
  rule, with and without replacement, deterministic drafts), greedy tree verification, a round's exact law.
* :mod:`specdec.theory.treetheory` -- trees under the i.i.d. model: E[accepted], the best static tree,
  Theorem 3.8 with draft calls and a verify curve, simulation.
* :mod:`specdec.theory.recordio` -- THE NaN rule (NaN and infinity -> null, an empty CSV cell) and the
  one atomic JSON writer of every record, draft card and manifest the package writes.

Engine (torch + transformers, the ``models`` extra):

* :mod:`specdec.engine.lm`        -- the Session protocol: a causal LM with a position-indexed,
  croppable KV cache; the transformers forward's version-dependent argument names; TensorSession
  (a transformers model fed id tensors, batched, for timing bare forwards).
* :mod:`specdec.engine.lean`      -- a lean Llama forward (preallocated cache, fused weights) in float32,
  bfloat16 or int4 (the GGUF's Q4_1 code), behind the same interface.
* :mod:`specdec.engine.leannative` -- the lean forward's C glue and the layout of tree verify calls (depths,
  paths, checked parents).
* :mod:`specdec.engine.draw`      -- a plain step's token between two C forwards: one draw from a row in C
  (sample's rule: the same index).
* :mod:`specdec.engine.native`    -- the C forwards of the ``"q4_1"`` and ``"q4q8"`` lean modes (``csrc/``),
  built here.
* :mod:`specdec.engine.machine`   -- the running machine's identity: CPU name, flags, caches, SIMD levels.
* :mod:`specdec.engine.llamacpp`  -- llama.cpp as a target of the same loops (optional).
* :mod:`specdec.engine.models`    -- loading the SmolLM2 target from its PyPI GGUF, or any model.
* :mod:`specdec.engine.builder`   -- THE engine builder: an EngineSpec (lean / hf / llama.cpp, mode,
  threads) -> an opened engine; every LeanLlama and LlamaCppModel of the package is made here.
* :mod:`specdec.engine.drafters`  -- the drafter protocol and the model / early-exit / prompt-lookup /
  unigram / bigram drafters.
* :mod:`specdec.engine.decoding`  -- the autoregressive and speculative loops.
* :mod:`specdec.engine.cores`     -- one owner of the cores: torch on one thread while a C engine decodes.
* :mod:`specdec.engine.batched`   -- speculative decoding of a batch of prompts (ragged or common cut).
* :mod:`specdec.engine.stats`     -- what a decoding call counts (accepted drafts, alpha, times, c).
* :mod:`specdec.engine.staticllama` -- the real target on a GPU: the static-cache engine with CUDA graphs.
* :mod:`specdec.engine.tinymodels` -- tiny random Llama models for the tests and the GPU record.
* :mod:`specdec.engine.randomllama` -- Llama models at real shapes with random weights (cost surfaces).

Drafting (tree drafters and the drafter registry; may import theory and engine):

* :mod:`specdec.drafting.lookuptree` -- prompt lookup merging every earlier match into a count trie.
* :mod:`specdec.drafting.suffix`     -- suffix decoding (arXiv:2411.04975; arctic-inference's semantics).
* :mod:`specdec.drafting.modeltree`  -- a model drafter's chain with side leaves.
* :mod:`specdec.drafting.conditioned` -- drafters on the target's features: Medusa, MLP speculator, EAGLE(-2).
* :mod:`specdec.drafting.hybrid`     -- suffix decoding where confident, a network drafter elsewhere.
* :mod:`specdec.drafting.registry`   -- THE drafter registry: one spec string -> one drafter; every
  drafter of the package is constructed here.

Training data and drafts:

* :mod:`specdec.train.workloads` -- the evaluation prompts (three tasks) and the distillation prompts.
* :mod:`specdec.train.shards`    -- the distillation data's shard format (its one writer and reader).
* :mod:`specdec.train.distill`   -- target samples with top-32 soft labels (``distill-data``'s).
* :mod:`specdec.train.draftnets` -- the distilled draft family: build, train, save (int8), load.
* :mod:`specdec.train.condnets`  -- the drafters conditioned on the target: models, int8 storage, loading.
* :mod:`specdec.train.condtrain` -- their features and resumable training (``cond-train``'s).
* :mod:`specdec.train.selftext`  -- real offline text (stdlib, pydoc topics, man pages, /usr/share/doc,
  Vim's help) cut into pieces for issue 42's prompts.
* :mod:`specdec.train.selfprompts` -- those pieces templated into five tasks; the disjointness check.
* :mod:`specdec.train.selfshards` -- the self-generated data's shards, prompt file and manifest hashes.

Measurement:

* :mod:`specdec.measure.core`   -- the one timer and the one T(k) loop over any session, the
  verify-cost curves and environment records (written by :mod:`specdec.theory.recordio`).
* :mod:`specdec.measure.pairedrun` -- the one paired plain-vs-speculative run driver.
* :mod:`specdec.measure.runner`   -- the one runner: a program's settings as its resume key (``RunSettings``),
  cells with their seconds and load, saved after every cell and resumed; a one-shot run's sections
  (``Recorder``) within a ``Deadline``.
* :mod:`specdec.measure.benchargs` -- what the run programs share: the repository root, the default record
  path, the target and a distilled draft loaded, the record written.
* :mod:`specdec.measure.dynamicgamma` -- the adaptive-draft-length measurement (``dynamic-gamma``'s).
* :mod:`specdec.measure.logiterror` -- a lean mode's logits against float32's (``q4q8-error``'s).
* :mod:`specdec.measure.roofline`  -- the running machine's roofline, measured (bandwidth, matmul GFLOP/s,
  ridge).
* :mod:`specdec.measure.profile`   -- where one forward's time goes (torch profiler buckets, C phase clocks).
* :mod:`specdec.measure.modes`     -- the lean mode chosen by measuring the running machine (cached).
* :mod:`specdec.measure.acceptance` -- the paper's alpha on target-generated text, by teacher forcing.
* :mod:`specdec.measure.enginebench` -- the engine benchmark: every engine side by side (``specdec bench``).
* :mod:`specdec.measure.verifykernels` -- the q4q8 engine's verify curve and its floor, an earlier commit's
  C kernels against this checkout's in one run (``verify-kernels``'s).
* :mod:`specdec.measure.loopcost` -- the decoding loop's time per token over the bare C step, an earlier
  commit's package against this checkout's in alternating processes (``loop-cost``'s).
* :mod:`specdec.measure.loopworker` -- ``loop-cost``'s worker: one version's arms timed, run as a file.
* :mod:`specdec.measure.sides` -- two versions of the package in alternating worker processes: a commit's
  ``specdec`` from git, a worker file run on either (``loop-cost``'s and ``draft-cost``'s).
* :mod:`specdec.measure.draftcost` -- a drafter's c inside the decoding loop, two checkouts alternated;
  the per-budget costs :class:`~specdec.theory.policies.DoNoHarm` needs (``calibrate_policy``).
* :mod:`specdec.measure.device`  -- the accelerator's identity, its memory, its measured roofline.
* :mod:`specdec.measure.devicechecks` -- greedy equality and losslessness checked on a device.
* :mod:`specdec.measure.batchruns` -- the batch surface's timed runs: T(b, k) block by block and batched
  decoding unit by unit, resumable.
* :mod:`specdec.measure.surfaces` -- cost surfaces T(b, k) by the one T(k) loop: wall clock, kernels' time.
* :mod:`specdec.measure.gpupayload` -- the real target's weights carried to a GPU: the payload written
  on a CPU, checked and dequantized on the device.
* :mod:`specdec.measure.gpusummary` -- the GPU run's tables, recomputed from its stored timings.

Analysis (Part IV and V's readers):

* :mod:`specdec.analysis.realrun`   -- pooling real runs and splitting the theory/measurement gap.
* :mod:`specdec.analysis.realtables` -- Part IV's tables from a real-decoding run's state.
* :mod:`specdec.analysis.hardware`  -- Part V: verify curves, GPU cost surfaces, adaptive gamma records.
* :mod:`specdec.analysis.batchcost` -- the cost surface T(b, k) and what it predicts for batched speculation.
* :mod:`specdec.analysis.oracle`    -- Section 3.5's oracle draft length, read from a record of real drafts.
* :mod:`specdec.analysis.methodgap` -- issue 44's split of a family's gap: the loop's, the implementation's
  (measured costs against the machine's floor) and the method's (acceptance against the anchors').
* :mod:`specdec.analysis.crossfit`  -- the campaign's analysis: gamma chosen by cross-fitting, speedups over
  the same engine's plain and the fastest plain decoder, with intervals (numpy only).
* :mod:`specdec.analysis.treetables` -- the trees chapter's reader: family and fixed tables, issue 29's
  goals, where the time goes, simultaneous (Bonferroni) intervals.
* :mod:`specdec.analysis.condtables` -- the conditioned drafters' reader: issue 30's goals, c per call,
  greedy equality.
* :mod:`specdec.analysis.answer`    -- Part VI's reading of the campaign: "faster than what?".
* :mod:`specdec.analysis.answerfig` -- the answer as a figure: every plain decoder and family, per task.
* :mod:`specdec.analysis.beyond`    -- the source article's section 7 comparison table, measured.
* :mod:`specdec.analysis.records`   -- the one way chapters read records: the newest of a kind, and
  where each came from (provenance).

Run programs (:mod:`specdec.experiments`: each program one options dataclass whose ``run()`` makes its
record, run as ``specdec run NAME``; ``specdec run --list`` names them):

* :mod:`specdec.experiments.options` -- a program's options: the base class, fields declared once (help,
  choices, checks), the command line generated from them, the command a record keeps.
* :mod:`specdec.experiments.programs` -- THE program table (``specdec run NAME`` -> its module).
* :mod:`specdec.experiments.campaign`  -- the first campaign (``campaign``): every plain decoder and
  speculative configuration on the same prompts, interleaved, resumable; the runner campaigns share.
* :mod:`specdec.experiments.campaign2` -- issue 31's second campaign (``campaign2``): its design as a
  settings dataclass, every plain decoder and drafter family built, its analyses (three estimators, end
  to end, simultaneous intervals).
* :mod:`specdec.experiments.campaign3` -- issue 44's third campaign (``campaign3``): v2's design with the
  self-trained drafters, the do-no-harm policies, v2's engine as a row and what the
  method-or-implementation split needs (peaks, bandwidth, the drafters' work).
* :mod:`specdec.experiments.realdecoding` -- Part IV's real decoding, its measurement; its program
  (``real-decoding``) is :mod:`specdec.experiments.realdecodingrun`.
* :mod:`specdec.experiments.hfbench`   -- our engine against transformers' assisted generation (``hf-bench``).
* :mod:`specdec.experiments.batchsurface` -- the CPU's T(b, k) and the batched decoder (``batch-surface``).
* :mod:`specdec.experiments.trees` -- issues 29, 30 and 42 (``trees``): held-out prompts, chain and tree
  configurations through the registry, the do-no-harm policies, v(N) of chain and tree calls.
* :mod:`specdec.experiments.gpurecord` -- the GPU record's run (``gpu-record``): the CUDA paths checked,
  the cost surfaces.
* :mod:`specdec.experiments.gpureal`  -- the real-weights GPU run, section by section (timers, decoding);
  its program (``gpu-real``) is :mod:`specdec.experiments.gpurealrun`.
* :mod:`specdec.experiments.selfdata` -- issue 42's data (``self-data``): the target's own text,
  resumable, hashed.
* :mod:`specdec.experiments.draftcost` -- the drafters' cost in the loop, two checkouts alternated
  (``draft-cost``).
* :mod:`specdec.experiments.dynamicgamma` -- adaptive draft lengths against fixed ones (``dynamic-gamma``).
* :mod:`specdec.experiments.oraclegamma` -- Section 3.5's oracle on real drafts (``oracle-gamma``).
* :mod:`specdec.experiments.logiterror` -- a lean mode's logits against float32's (``q4q8-error``).
* :mod:`specdec.experiments.enginemodes` -- every engine and mode side by side (``engine-modes``).
* :mod:`specdec.experiments.usermeasure` -- your own target, draft and prompts measured (``specdec
  measure``).
* :mod:`specdec.experiments.verifycost` -- the verify cost T(k) / T(1) of transformers (``verify-cost``).
* :mod:`specdec.experiments.verifykernels` -- the q4q8 verify curve, before and after a change of the C
  kernels, against its floor (``verify-kernels``).
* :mod:`specdec.experiments.loopcost` -- the decoding loop's cost over the bare C step, before and after
  a change of its Python (``loop-cost``).
* :mod:`specdec.experiments.attentionkernels` -- transformers' eager against SDPA attention
  (``attention-kernels``).
* :mod:`specdec.experiments.training` -- training's programs (``distill-*``, ``*-features``, ``cond-train``).

The paper and the book:

* :mod:`specdec.paper.audit`     -- the book's verdict rule (agrees within printed rounding).
* :mod:`specdec.paper.published` -- the paper's printed Tables 1-5 and Appendix A.5, as data.
* :mod:`specdec.paper.reproduce` -- the recomputed tables and their CSV exports.
* :mod:`specdec.paper.article`   -- the source article's printed tables and claims ledger data.
* :mod:`specdec.paper.ledger`    -- the claims ledger: each claim's check, its verdict, the tables and
  CSV exports, and measured verdicts of the article's hardware claims (needs sympy and pandas).
* :mod:`specdec.paper.book`      -- what the notebooks share: portable values and
  :func:`~specdec.paper.book.keep`.

Interface (the command line, ``specdec``, also ``python -m specdec``: :mod:`specdec.__main__`):

* :mod:`specdec.cli.app`     -- the parser, assembled from each command's part, and ``main``.
* :mod:`specdec.cli.common`  -- what the commands share: the one-line usage error, the paper's names.
* :mod:`specdec.cli.plan`, :mod:`specdec.cli.modes`, :mod:`specdec.cli.measure`, :mod:`specdec.cli.bench`,
  :mod:`specdec.cli.run` -- one module per command.

The engine's names are importable from the package root too, but lazily, so that
``import specdec`` stays free of torch for readers who only want the theory. The root is therefore the
top of the layers (with the command line): it names modules of every layer, and no module of the package
imports it (``tests/test_layers.py`` reads the lazy table as imports).
"""

from __future__ import annotations

import importlib
from typing import Any

from specdec.theory import __version__ as __version__
from specdec.theory.speedup import (
    acceptance_rate,
    accepted_pmf,
    expected_tokens,
    ops_factor,
    optimal_gamma,
    speedup_ceiling,
    walltime_speedup,
    walltime_speedup_measured,
    walltime_speedup_rounds,
)

_LAZY = {
    "autoregressive": "specdec.engine.decoding",
    "speculative": "specdec.engine.decoding",
    "Generation": "specdec.engine.decoding",
    "Stats": "specdec.engine.stats",
    "CachedLM": "specdec.engine.lm",
    "LeanLlama": "specdec.engine.lean",
    "lean_model": "specdec.measure.modes",
    "EngineSpec": "specdec.engine.builder",
    "open_target": "specdec.measure.modes",
    "build_drafter": "specdec.drafting.registry",
    "choose_mode": "specdec.measure.modes",
    "Drafter": "specdec.engine.drafters",
    "Proposal": "specdec.engine.drafters",
    "ModelDrafter": "specdec.engine.drafters",
    "EarlyExitDrafter": "specdec.engine.drafters",
    "PromptLookupDrafter": "specdec.engine.drafters",
    "UnigramDrafter": "specdec.engine.drafters",
    "BigramDrafter": "specdec.engine.drafters",
    "load_target": "specdec.engine.models",
    "load_model": "specdec.engine.models",
    "load_workload": "specdec.train.workloads",
    "chat_prompt_ids": "specdec.train.workloads",
    "load_draft": "specdec.train.draftnets",
    "list_drafts": "specdec.train.draftnets",
    "machine_roofline": "specdec.measure.roofline",
}

__all__ = [
    "acceptance_rate",
    "accepted_pmf",
    "expected_tokens",
    "ops_factor",
    "optimal_gamma",
    "speedup_ceiling",
    "walltime_speedup",
    "walltime_speedup_measured",
    "walltime_speedup_rounds",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'specdec' has no attribute {name!r}")
