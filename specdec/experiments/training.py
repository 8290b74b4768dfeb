"""The training programs: the distillation data and the distilled drafts, the conditioned drafters'
features and their training (``specdec run distill-data | distill-train | cond-features | self-features |
cond-train``).

The training itself is :mod:`specdec.train` (:mod:`~specdec.train.distill`, :mod:`~specdec.train.draftnets`,
:mod:`~specdec.train.condtrain`); these are its command lines, one options dataclass per step. Each opens
the default target through the one engine builder (transformers' model in the dtype asked, torch pinned
to ``--threads``). A card written by training keeps the command that made it (:meth:`Program.command`).
The cards made before these programs keep the commands they were made with
(``python -m specdec.train.distill train ...``, ``python -m specdec.train.condtrain train ...``): the same
options are ``specdec run distill-train`` / ``cond-train`` with ``--name X`` written ``--draft-name X``
and a list such as ``--data A B C`` written ``--data A,B,C``. The book's commands are in
:mod:`specdec.train.distill` and :mod:`specdec.train.condtrain`.

Every step resumes: ``distill-data`` keeps the shards already written and appends (exit status 3 when
``--minutes`` stopped it short of ``--tokens``), the feature steps skip the shards that have their
features, and ``cond-train`` continues from its checkpoint (model, optimizer and torch's generator).
Nothing here imports torch at import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from specdec.engine.builder import HF_DTYPES
from specdec.experiments.options import INCOMPLETE, Program, option
from specdec.theory.checks import Refused, check_float, check_int, check_optional_float, check_seed

__all__ = ["CondFeaturesRun", "CondTrainRun", "DistillDataRun", "DistillTrainRun", "SelfFeaturesRun"]

#: The conditioned drafters' families (:data:`specdec.train.condnets.FAMILIES`, which imports torch).
FAMILIES = ("medusa", "mlp-speculator", "eagle")
#: The conditioned drafters' distill-data folders (seeds 10 and 11), as the book made them.
COND_DATA = ("data/cond-s10", "data/cond-s11")
#: distill-train's length when neither ``--steps`` nor ``--minutes`` is given.
DISTILL_STEPS = 2000


def _target(dtype: str, threads: int) -> Any:
    """The default target as transformers' model in ``dtype`` with its tokenizer (a
    :class:`~specdec.engine.models.LoadedModel`), from the one engine builder; torch on ``threads``."""
    from specdec.engine.builder import EngineSpec, open_engine

    return open_engine(EngineSpec("hf", dtype, threads)).base


def _check_threads(threads: int) -> None:
    check_int("threads", threads, low=1, high=1024)


def _check_folders(name: str, folders: tuple[str, ...]) -> None:
    if not folders or not all(f.strip() for f in folders):
        raise ValueError(f"{name} must name one or more folders (comma-separated); got {folders!r}")


def _check_name(name: str) -> None:
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(f"draft_name must be a plain folder name (no path separator); got {name!r}")


def _print_card(card: dict) -> None:
    from specdec.theory.recordio import jsonable

    print(json.dumps(jsonable({k: v for k, v in card.items() if k != "history"})))


def _not_committed(name: str, out_root: str | None, replace: bool) -> None:
    """Refuse, before anything loads, a training run that would overwrite a draft committed in the
    package (its card under ``specdec/data/drafts/<name>/``) unless ``--replace`` says so."""
    from specdec.train.draftnets import DRAFT_DIR

    if out_root is None and not replace and (DRAFT_DIR / name / "card.json").exists():
        raise Refused(
            f"{name} is a committed draft in {DRAFT_DIR}: pass --out-root to write elsewhere, another "
            "--draft-name, or --replace to retrain it in place"
        )


@dataclass(frozen=True)
class DistillDataRun(Program):
    """The distillation data: the target's samples at temperature 1 with its top-32 log-probabilities.

    Shards ``shard-NNNNN.npz`` under ``--out`` (:mod:`specdec.train.distill`), then ``meta.json``. The
    shards already there are kept and counted: the same command continues the folder (same seed, batch
    size and sort window). ``--minutes`` stops starting batches after that much time; the run then ends
    with exit status 3 when it has fewer than ``--tokens`` tokens (rerun to add more).

        specdec run distill-data --tokens 400000 --out data/distill-s1 --seed 1 --batch-size 64 \\
            --max-new-tokens 192 --dtype bfloat16 --threads 1 --sort-window 8
    """

    name: ClassVar[str] = "distill-data"

    tokens: int = option(400000, "response tokens to store")
    out: str | None = option(None, "the data folder, shards appended to it (needed: no default folder)")
    seed: int = option(0, "the prompts' and the sampling generator's seed")
    batch_size: int = option(64, "prompts sampled together")
    max_new_tokens: int = option(256, "the cap of a response")
    minutes: float | None = option(None, "start no batch after this many minutes")
    dtype: str = option("float32", "the target's dtype while sampling", choices=HF_DTYPES)
    sort_window: int = option(1, "batches whose prompts are sorted together by length")
    threads: int = option(2, "torch's threads (1 where the cores are shared)")

    def check(self) -> None:
        for name in ("tokens", "batch_size", "max_new_tokens", "sort_window"):
            check_int(name, getattr(self, name), low=1)
        check_seed("seed", self.seed)
        check_optional_float("minutes", self.minutes, low=0.0, open_low=True)
        _check_threads(self.threads)
        if self.out is not None and not self.out.strip():
            raise ValueError("out must name a folder; got ''")

    def run(self) -> int:
        from specdec.theory.recordio import jsonable
        from specdec.train import distill

        if self.out is None:  # the book's data folders must never be appended to by a bare command
            raise Refused("--out is needed: a new folder, or one this program made with these settings")
        loaded = _target(self.dtype, self.threads)
        meta = distill.generate_data(
            loaded.model, loaded.tokenizer, self.out, tokens=self.tokens, seed=self.seed,
            batch_size=self.batch_size, max_new_tokens=self.max_new_tokens, minutes=self.minutes,
            sort_window=self.sort_window,
        )  # fmt: skip
        print(json.dumps(jsonable(meta)))  # the records' NaN rule: NaN -> null
        return 0 if meta["tokens"] >= self.tokens else INCOMPLETE


@dataclass(frozen=True)
class DistillTrainRun(Program):
    """One distilled draft: k of the target's layers trained on distill-data's shards, saved in int8.

    :func:`specdec.train.draftnets.train_draft`; the draft and its card (the command included) go to
    ``<out-root>/<name>/``. ``--steps`` fixes the run's length (a card's steps reproduce it);
    ``--minutes`` instead takes as many steps as the first five steps' pace says fit.

        specdec run distill-train --data data/distill,data/distill-s1,data/distill-s2 --layers 1 \\
            --draft-name distil-l1 --steps 3600 --threads 1 --autocast --out-root data/drafts-new
    """

    name: ClassVar[str] = "distill-train"

    data: tuple[str, ...] = option(("data/distill",), "distill-data folders, comma-separated (pooled)")
    layers: int = option(1, "the draft's decoder layers k (the target's first k, then trained)")
    draft_name: str | None = option(None, "the draft's name: <out-root>/<name>/ (default distil-l<k>-new)")
    steps: int | None = option(None, f"optimizer steps (default {DISTILL_STEPS} unless --minutes)")
    minutes: float | None = option(None, "a time budget instead of --steps")
    seed: int = option(0, "the split's, the batches' and torch's seed")
    vocab: int = option(16384, "the kept vocabulary's size")
    lr: float = option(1e-3, "AdamW's peak learning rate")
    batch_tokens: int = option(1024, "tokens per optimizer step")
    threads: int = option(1, "torch's threads")
    autocast: bool = option(False, "train in bfloat16 autocast (CPU)")
    out_root: str | None = option(None, "the drafts' folder (default: the package's)")
    replace: bool = option(False, "replace the package's committed draft of the same name")

    def check(self) -> None:
        _check_folders("data", self.data)
        check_int("layers", self.layers, low=1)
        if self.draft_name is not None:
            _check_name(self.draft_name)
        if self.steps is not None and self.minutes is not None:
            raise ValueError("steps must not be given with --minutes (one of them sets the run's length)")
        if self.steps is not None:
            check_int("steps", self.steps, low=1)
        check_optional_float("minutes", self.minutes, low=0.0, open_low=True)
        check_seed("seed", self.seed)
        check_int("vocab", self.vocab, low=1)
        check_float("lr", self.lr, low=0.0, open_low=True)
        check_int("batch_tokens", self.batch_tokens, low=1)
        _check_threads(self.threads)

    def run(self) -> int:
        from specdec.train.draftnets import train_draft

        name = self.draft_name or f"distil-l{self.layers}-new"
        _not_committed(name, self.out_root, self.replace)
        loaded = _target("float32", self.threads)
        steps = self.steps if self.steps is not None or self.minutes is not None else DISTILL_STEPS
        _, card = train_draft(
            loaded.model, list(self.data), layers=self.layers,
            name=name,
            minutes=self.minutes, steps=steps, seed=self.seed, vocab=self.vocab, lr=self.lr,
            batch_tokens=self.batch_tokens, autocast=self.autocast, out_root=self.out_root,
            command=self.command(),
        )  # fmt: skip
        _print_card(card)
        return 0


@dataclass(frozen=True)
class CondFeaturesRun(Program):
    """The target's features beside every distill-data shard, for the conditioned drafters' training.

    ``feat-NNNNN.npy`` (float16) beside each ``shard-NNNNN.npz`` that lacks one: the pre-norm last-layer
    features at every position, from the lean engine in mode q4q8 (the engine the drafters decode with;
    :func:`specdec.train.condtrain.extract_features`). Rerun to resume.

        specdec run cond-features --data data/cond-s10,data/cond-s11
    """

    name: ClassVar[str] = "cond-features"

    data: tuple[str, ...] = option(COND_DATA, "distill-data folders, comma-separated")
    threads: int = option(2, "torch's and the lean engine's threads")

    def check(self) -> None:
        _check_folders("data", self.data)
        _check_threads(self.threads)

    def run(self) -> int:
        from specdec.train import condtrain

        target = _target("float32", self.threads).model
        n = condtrain.extract_features(target, list(self.data), threads=self.threads)
        print(json.dumps({"written": n}))
        return 0


@dataclass(frozen=True)
class SelfFeaturesRun(Program):
    """Issue 42's self-generated data as distill-data shards with the target's features and soft labels.

    For each whole shard of ``--self-data`` (its manifest's hashes checked first), one lean q4q8 forward
    per sequence gives the features and the top-32 log-probabilities, written as ``shard-NNNNN.npz`` and
    ``feat-NNNNN.npy`` under ``--out`` (:func:`specdec.train.condtrain.self_features`; the development
    prompts' sequences left out). A shard already converted is skipped: rerun to resume.

        specdec run self-features --out data/self-cond --threads 1
    """

    name: ClassVar[str] = "self-features"

    self_data: str = option("results/selfdata", "the self-data folder (its manifest.json)")
    out: str | None = option(None, "the folder of converted shards (needed: no default folder)")
    shards: int | None = option(None, "convert the first this many shards (default: every one)")
    threads: int = option(2, "torch's and the lean engine's threads")

    def check(self) -> None:
        if self.shards is not None:
            check_int("shards", self.shards, low=1)
        _check_threads(self.threads)
        for name in ("self_data", "out"):
            if getattr(self, name) is not None and not getattr(self, name).strip():
                raise ValueError(f"{name} must name a folder; got ''")

    def run(self) -> int:
        from specdec.train import condtrain

        if self.out is None:  # a trained drafter's features must never be overwritten by a bare command
            raise Refused("--out is needed: a new folder, or one this program made from the same data")
        target = _target("float32", self.threads).model
        n = condtrain.self_features(
            target, self.self_data, self.out, threads=self.threads, shards=self.shards
        )
        print(json.dumps({"written": n}))
        return 0


@dataclass(frozen=True)
class CondTrainRun(Program):
    """One drafter conditioned on the target (Medusa, MLP speculator, EAGLE), resumable.

    :func:`specdec.train.condtrain.train_conditioned` on folders with features (``cond-features`` or
    ``self-features``): a checkpoint every minute under ``data/cond-train/<name>/``, from which the same
    command continues (model, optimizer, torch's generator); the drafter and its card (the command
    included) go to ``<out-root>/<name>/``.

        specdec run cond-train --family medusa --draft-name medusa-4 --data data/cond-s10,data/cond-s11 \\
            --steps 2500 --batch 256 --threads 1 --out-root data/drafts-new
        specdec run cond-train --family eagle --draft-name eagle-ttt --data data/self-cond --ttt 3 \\
            --batch 512 --steps 1800 --replace      # retrains the committed eagle-ttt in place

    A committed drafter's name is refused unless ``--out-root`` writes elsewhere or ``--replace`` says so.
    """

    name: ClassVar[str] = "cond-train"

    family: str = option("medusa", "the drafter's family", choices=FAMILIES)
    draft_name: str | None = option(None, "the drafter's name: <out-root>/<name>/ (default <family>-new)")
    data: tuple[str, ...] = option(COND_DATA, "folders with features, comma-separated")
    steps: int = option(2000, "optimizer steps")
    depth: int = option(4, "heads / stages / EAGLE's depth")
    kept: int = option(8192, "the kept vocabulary's size")
    batch: int = option(256, "positions per step (EAGLE: batch / 128 whole sequences)")
    lr: float = option(1e-3, "AdamW's peak learning rate")
    seed: int = option(0, "the split's, the steps' draws' and torch's seed")
    threads: int = option(2, "torch's threads")
    ttt: int = option(1, "EAGLE: steps of the training-time test (1: none)")
    out_root: str | None = option(None, "the drafters' folder (default: the package's)")
    replace: bool = option(False, "replace the package's committed drafter of the same name")

    def check(self) -> None:
        if self.draft_name is not None:
            _check_name(self.draft_name)
        _check_folders("data", self.data)
        check_int("steps", self.steps, low=1)
        check_int("depth", self.depth, low=1, high=16)
        check_int("kept", self.kept, low=1)
        check_int("batch", self.batch, low=1)
        check_float("lr", self.lr, low=0.0, open_low=True)
        check_seed("seed", self.seed)
        _check_threads(self.threads)
        check_int("ttt", self.ttt, low=1, high=self.depth)
        if self.ttt > 1 and self.family != "eagle":
            raise ValueError(
                f"ttt (the training-time test's steps) is EAGLE's; family {self.family!r} takes 1"
            )

    def run(self) -> int:
        import random

        from specdec.train.condtrain import train_conditioned

        name = self.draft_name or f"{self.family}-new"
        _not_committed(name, self.out_root, self.replace)
        target = _target("float32", self.threads).model
        random.seed(self.seed)
        card = train_conditioned(
            target, list(self.data), family=self.family, name=name,
            steps=self.steps, depth=self.depth, kept_size=self.kept, batch=self.batch, lr=self.lr,
            seed=self.seed, ttt=self.ttt, out_root=self.out_root, command=self.command(),
        )  # fmt: skip
        _print_card(card)
        return 0


@dataclass(frozen=True)
class CondHeldoutRun(Program):
    """Conditioned drafters side by side on held-out text none of them trained on (issue 42).

    :func:`specdec.train.condtrain.unseen_heldout`: the sequences of ``--data``'s shards from
    ``--first-shard`` on (past what an earlier drafter was trained on) that are in the held-out split of
    a run over every shard, the first ``--sequences`` of them; per drafter, teacher-forced, how often its
    rank-r token at each depth is the target's top token. Writes ``results/bench/cond-heldout.json``
    (``--out``).

        specdec run cond-heldout --drafters eagle-1,eagle-ttt,eagle-3m --first-shard 22
    """

    name: ClassVar[str] = "cond-heldout"

    drafters: tuple[str, ...] = option(("eagle-1", "eagle-ttt"), "the package's drafters, comma-separated")
    data: str = option("data/self-cond", "the folder of shards with features (self-features)")
    first_shard: int = option(22, "the first shard whose held-out sequences are read")
    sequences: int = option(64, "held-out sequences read (1 .. 64)")
    seed: int = option(0, "the held-out split's seed (the training runs' --seed)")
    threads: int = option(2, "torch's threads")
    out: str | None = option(None, "the record's path (default results/bench/cond-heldout.json)")

    def check(self) -> None:
        if not self.drafters:
            raise ValueError("--drafters must name at least one drafter")
        for name in self.drafters:
            _check_name(name)
        _check_folders("data", (self.data,))
        check_int("first_shard", self.first_shard, low=0)
        check_int("sequences", self.sequences, low=1, high=64)
        check_seed("seed", self.seed)
        _check_threads(self.threads)

    def run(self) -> int:
        from pathlib import Path

        from specdec.measure.benchargs import ROOT
        from specdec.measure.core import environment, write_result
        from specdec.train.condnets import load_conditioned
        from specdec.train.condtrain import unseen_heldout
        from specdec.train.draftnets import DRAFT_DIR

        target = _target("float32", self.threads).model
        loaded = {name: load_conditioned(DRAFT_DIR / name, target) for name in self.drafters}
        result = unseen_heldout(target, loaded, self.data, first_shard=self.first_shard,
                                n_sequences=self.sequences, seed=self.seed)  # fmt: skip
        cards = {
            name: {k: card.get(k) for k in ("kind", "data_tokens", "steps", "batch", "ttt", "train_minutes",
                                              "threads", "git_commit")}
            for name, (_, card) in loaded.items()
        }  # fmt: skip
        record = {"kind": "cond-heldout", "command": self.command(), "drafters": cards, **result}
        out = Path(self.out) if self.out else ROOT / "results" / "bench" / "cond-heldout.json"
        path = write_result(out, record, env=environment())
        for name, prof in result["profiles"].items():
            print(f"{name}: top-1 hit per depth {[round(h[0], 3) for h in prof['hit']]}", flush=True)
        print(f"-> {path}", flush=True)
        return 0
