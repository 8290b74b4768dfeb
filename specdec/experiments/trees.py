"""Issue 29's measurement: draft trees and suffix decoding against chains and the fastest plain decoder.

On held-out prompts frozen before the run (``specdec/data/workloads/heldout/trees-v1.jsonl``, its
sha256 in the record), on one clean commit (a dirty tree refuses to start), generations up to EOS
or ``new_tokens``: the lean engine's plain decoding and every configuration of :data:`CONFIGS`
(drafter specs of :mod:`specdec.drafting.registry`, each at its gammas / node budgets), timed in
paired blocks by the campaign's runner (:func:`specdec.experiments.campaign.run_campaign`: interleaved,
plain first or last alternately, resumable after every cell, load recorded per cell) and analysed by
its cross-fit (:mod:`specdec.analysis.crossfit`: a family's budget chosen on one half of the prompts
and reported on the other; bootstrap intervals over prompts). :func:`tree_summary` adds what a tree
changes: tokens per target call, per-depth acceptance, nodes per round and the draft cost per round.
``specdec run trees`` is the command (:class:`TreesRun`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from specdec.experiments.campaign import Config, Engine, spec_configs
from specdec.experiments.options import INCOMPLETE, Program, Refused, option, read_record
from specdec.measure.pairedrun import PLAIN_AT
from specdec.measure.runner import RunSettings
from specdec.measure.verifykernels import target_verify_curves
from specdec.theory.checks import check_choice, check_float, check_int, check_ints

__all__ = [
    "TreesRun",
    "analysed_with",
    "TreesSettings",
    "CONDITIONED_CONFIGS",
    "CONFIGS",
    "HELDOUT",
    "QUICK_CONFIGS",
    "SETS",
    "SELF_CONFIGS",
    "SELF_POLICIES",
    "NOHARM_CONFIGS",
    "V3_POLICIES",
    "ConfigSet",
    "build",
    "heldout_prompts",
    "policy_configs",
    "reanalyse",
    "tree_summary",
]

#: Rows of the verify calls timed for v(N) (the root included: a tree of N - 1 drafts is a call of N rows).

HELDOUT = Path(__file__).resolve().parents[1] / "data" / "workloads" / "heldout" / "trees-v1.jsonl"

#: Drafter specs and their gammas (chains) or node budgets (trees), fixed before the run on the
#: development prompts (``specdec/data/workloads``; never the held-out set): budgets above 8 lost there
#: on this machine's steep verify curve, and lookup trees from 1-gram matches lost to 2-gram ones.
#: Chains and trees meet at equal node budgets (lookup g4 vs lookup-tree 4, draft g4 vs draft-tree 4,
#: suffix as a path vs as a tree at 8).
CONFIGS: dict[str, tuple[int, ...]] = {
    "lookup": (2, 4),
    "lookup-tree,min_ngram=2": (4, 8),
    "suffix": (8, 16),
    "suffix,tree=0": (8,),
    "draft:distil-l1": (2, 4),
    "draft-tree:distil-l1,branch=2": (4,),
    "draft-tree:distil-l1,branch=3": (6,),
}
QUICK_CONFIGS: dict[str, tuple[int, ...]] = {"lookup": (4,), "lookup-tree,min_ngram=2": (4,), "suffix": (8,)}

#: Issue 30's set: the drafters conditioned on the target's features (trained here; their cards in
#: ``specdec/data/drafts``), each at two node budgets for the cross-fit to choose from, beside the
#: lookup-like families of issue 29 at their usual budgets, measured in the same run on one machine.
#: Fixed before any timing, from the drafters' held-out acceptance profiles (their cards) and the
#: trees run's verify curve, not from the held-out prompts.
CONDITIONED_CONFIGS: dict[str, tuple[int, ...]] = {
    "lookup": (4,),
    "suffix": (8,),
    "medusa:medusa-4": (4, 8),
    "mlp:mlp-4,ranks=1": (2, 4),
    "mlp:mlp-4": (4, 8),
    "eagle:eagle-1": (2, 4),
    "eagle:eagle-1,topk=4,depth=5": (4, 8),
}
QUICK_CONDITIONED: dict[str, tuple[int, ...]] = {
    "medusa:medusa-4": (4,),
    "mlp:mlp-4": (4,),
    "eagle:eagle-1": (4,),
}

#: Issue 42's set: the drafters trained on the target's own text (``eagle-ttt``: EAGLE with EAGLE-3's
#: training-time test; ``mlp-self``: the MLP speculator), beside the earlier cards (``eagle-1``,
#: ``mlp-4``) and the copying families, the hybrid (suffix decoding where confident, EAGLE elsewhere),
#: and every family under the do-no-harm policy (:data:`SELF_POLICIES`). Budgets fixed before any
#: timing, from the development prompts (``draftcost.dev_texts``) and the cards' held-out profiles.
SELF_CONFIGS: dict[str, tuple[int, ...]] = {
    "lookup": (4,),
    "suffix": (8,),
    "mlp:mlp-4": (8,),
    "eagle:eagle-1,topk=4,depth=5": (8,),
    "mlp:mlp-self": (4, 8),
    "eagle:eagle-ttt": (2, 4),
    "eagle:eagle-ttt,topk=4,depth=5": (4, 8),
    "hybrid:eagle-ttt,topk=4,depth=5": (8,),
}
#: The do-no-harm policy (:class:`specdec.theory.policies.DoNoHarm`) per family: the budgets it chooses
#: among each round (0, a plain step, always among them), its costs and prior acceptance per depth
#: calibrated on development prompts on the running machine before the run
#: (:func:`specdec.measure.draftcost.calibrate_policy`, stored in the record). The policy runs in the
#: tree loop: a chain drafter (prompt lookup) runs there as a tree of one branch
#: (:class:`specdec.engine.drafters.ChainTree`).
SELF_POLICIES: dict[str, tuple[int, ...]] = {
    "lookup": (4, 8),
    "suffix": (4, 8),
    "mlp:mlp-self": (4, 8),
    "eagle:eagle-ttt": (2, 4),
    "eagle:eagle-ttt,topk=4,depth=5": (4, 8),
    "hybrid:eagle-ttt,topk=4,depth=5": (4, 8),
}
#: Campaign v3's do-no-harm policies: :data:`SELF_POLICIES` with ``eagle-3m`` in ``eagle-ttt``'s place
#: for EAGLE-2's tree and the hybrid (the budgets unchanged); :data:`specdec.experiments.campaign3.POLICIES`.
V3_POLICIES: dict[str, tuple[int, ...]] = {
    **{k: v for k, v in SELF_POLICIES.items() if not k.startswith("hybrid:")},
    "eagle:eagle-3m,topk=4,depth=5": SELF_POLICIES["eagle:eagle-ttt,topk=4,depth=5"],
    "hybrid:eagle-3m,topk=4,depth=5": SELF_POLICIES["hybrid:eagle-ttt,topk=4,depth=5"],
}
#: Issue 42's goal 2 judged again (``--set noharm``) after a round with no node to verify became the
#: plain decoder's own step (commit d550385) and an EAGLE level one C call (546bd18): every policy of
#: campaign v3 (:data:`V3_POLICIES`), beside EAGLE (eagle-3m) as a chain and as EAGLE-2's tree and
#: Medusa trained on the target's own text (medusa-self), each at one budget fixed before the run
#: (eagle-3m's from campaign v3's cross-fit on its own prompts, medusa-self at Medusa's budget there),
#: on campaign v2's frozen prompts (``campaign-v2.jsonl``): the policy was revised on the trees' held-out
#: prompts and this loop change came from campaign v3's record, and neither ever ran on v2's prompts.
NOHARM_CONFIGS: dict[str, tuple[int, ...]] = {
    "eagle:eagle-3m": (2,),
    "eagle:eagle-3m,topk=4,depth=5": (4,),
    "medusa:medusa-self": (4,),
}
#: Issue 42's goal 2 judged a fourth time (``--set noharm-v4``), after the suffix tree left the garbage
#: collector's view (commit 80dd3bf) and a Medusa draft and an MLP stage became one C call each
#: (ecb7a08): the same policies and fixed configurations as ``noharm``, plus suffix decoding at its
#: campaign budget (8) to see the trie's change in a full run and ``mlp-3m`` (the MLP speculator on all
#: 56 self-data shards, never timed in the loop) at the MLP speculator's budget there (4), on prompts
#: frozen for it (``noharm-v4.jsonl``) that no policy or drafter has run on. Its records are of kind
#: ``noharm``, the newest of which the chapters read.
NOHARM_V4_CONFIGS: dict[str, tuple[int, ...]] = {
    **NOHARM_CONFIGS,
    "suffix": (8,),
    "mlp:mlp-3m": (4,),
}
#: Campaign v3's policies (:data:`V3_POLICIES`) with budgets of one and two nodes beside theirs: a round
#: can draft one token where a longer draft does not pay, and a probe (at the smallest budget) costs one
#: extra verify row instead of four (``noharm-v10``'s two failing cells lost their speed to probes and
#: first rounds at four nodes that were rejected).
SMALL_POLICIES: dict[str, tuple[int, ...]] = {
    spec: tuple(sorted({1, 2, *budgets})) for spec, budgets in V3_POLICIES.items()
}
#: Issue 42 asks for the policy "at temperature 0 and 1 for every family"; the sixteen judgements before
#: the seventeenth put seven under it (:data:`SMALL_POLICIES`). The others of campaign v3 (a family: a
#: drafter kind with its shape; ``suffix,tree=0`` is suffix decoding's, ``mlp-4`` and ``eagle-1`` older
#: cards of judged kinds): prompt lookup's tree, the distilled draft as a chain and as a tree, early exit
#: and Medusa (``medusa-self``, trained on the target's own text like the judged network drafters), each
#: over one and two nodes and its campaign budgets (:data:`specdec.experiments.campaign2.CONFIGS`), as
#: :data:`SMALL_POLICIES` was built.
NEW_POLICIES: dict[str, tuple[int, ...]] = {
    "lookup-tree,min_ngram=2": (1, 2, 4),
    "draft:distil-l1": (1, 2),
    "draft-tree:distil-l1,branch=2": (1, 2, 4),
    "early-exit:8": (1, 2),
    "medusa:medusa-self": (1, 2, 4),
}
#: The seventeenth judgement's one configuration at a fixed budget: Medusa (``medusa-self``) at its campaign
#: budget, beside its policy (goal 1 is judged over network configurations at fixed budgets).
NOHARM_V17_CONFIGS: dict[str, tuple[int, ...]] = {"medusa:medusa-self": (4,)}
QUICK_SELF: dict[str, tuple[int, ...]] = {"eagle:eagle-ttt": (4,), "suffix": (8,)}
QUICK_SELF_POLICIES: dict[str, tuple[int, ...]] = {"eagle:eagle-ttt": (2, 4), "lookup": (4,)}


@dataclass(frozen=True)
class ConfigSet:
    """What one ``specdec run trees --set`` runs: spec -> budgets, and spec -> the budgets of its
    do-no-harm policy, for the full run and the quick one."""

    full: Mapping[str, tuple[int, ...]]
    quick: Mapping[str, tuple[int, ...]]
    policies: Mapping[str, tuple[int, ...]]
    quick_policies: Mapping[str, tuple[int, ...]]
    prompts: Path = HELDOUT  # the frozen prompts a full run decodes
    kind: str | None = None  # the record's kind (default: the set's name)
    pool: float = 1.0  # the quantile of the run's verify curves its policies are priced by (policy_configs)
    shadow: bool = False  # the policies' probes are shadow rounds (DoNoHarm's ``shadow``)
    plain_at: str = "alternate"  # where a repetition's block puts the plain decoder (paired_block's)


def _noharm_again(
    prompts: str,
    policies: Mapping[str, tuple[int, ...]] = V3_POLICIES,
    pool: float = 1.0,
    quick_policies: Mapping[str, tuple[int, ...]] | None = None,
) -> ConfigSet:
    """The do-no-harm judgement after ``noharm`` (:data:`NOHARM_V4_CONFIGS`, ``policies``: campaign v3's
    unless given) on the held-out file ``prompts``, its records of kind ``noharm``, the policies priced by
    the ``pool`` quantile of the run's verify curves (1: the steepest); the quick run's policy is prompt
    lookup at ``quick_policies`` (default 4 nodes)."""
    return ConfigSet(NOHARM_V4_CONFIGS, {"suffix": (8,)}, policies, quick_policies or {"lookup": (4,)},
                     HELDOUT.with_name(prompts), kind="noharm", pool=pool)  # fmt: skip


def _small_again(prompts: str, *, shadow: bool = False, plain_at: str = "alternate") -> ConfigSet:
    """:func:`_noharm_again` from the eleventh judgement on: :data:`SMALL_POLICIES`, priced by the upper
    quartile of the run's verify curves, the quick run's prompt lookup at 1, 2 and 4 nodes; its probes
    shadow rounds with ``shadow``; the plain decoder placed by ``plain_at``."""
    small = _noharm_again(prompts, SMALL_POLICIES, 0.75, {"lookup": SMALL_POLICIES["lookup"][:3]})
    return replace(small, shadow=shadow, plain_at=plain_at)


#: The configuration sets ``specdec run trees --set`` runs.
SETS = {
    "trees": ConfigSet(CONFIGS, QUICK_CONFIGS, {}, {}),
    "conditioned": ConfigSet(CONDITIONED_CONFIGS, QUICK_CONDITIONED, {}, {}),
    "self": ConfigSet(SELF_CONFIGS, QUICK_SELF, SELF_POLICIES, QUICK_SELF_POLICIES),
    "noharm": ConfigSet(
        NOHARM_CONFIGS,
        {"eagle:eagle-3m": (2,)},
        V3_POLICIES,
        {"lookup": (4,)},
        HELDOUT.with_name("campaign-v2.jsonl"),
    ),
    "noharm-v4": _noharm_again("noharm-v4.jsonl"),
    # a fifth time, after suffix speculation's longest-first walk (27d6341) and the policy's runs of plain
    # rounds (048477e): the same design on prompts frozen for it
    "noharm-v5": _noharm_again("noharm-v5.jsonl"),
    # a sixth time, after the policy learns how often its drafter proposes and prices a round by the verify
    # curve at the nodes proposed (61c2a98): the same design on prompts frozen for it
    "noharm-v6": _noharm_again("noharm-v6.jsonl"),
    # a seventh time, after the calibration lets the loop's clock raise the verify curve's level (e8842d8)
    # and suffix decoding's trie moved into C (2715c07): the same design on prompts frozen for it
    "noharm-v7": _noharm_again("noharm-v7.jsonl"),
    # an eighth time, after the session's one feature buffer (28bb86b), the calibration's level as a ratio
    # of sums with empty rounds at their own cost (52e399d) and numpy's argmax (0e00f1a): on prompts frozen
    # for it
    "noharm-v8": _noharm_again("noharm-v8.jsonl"),
    # a ninth time, after a run's policies are priced by the steepest verify curve their calibrations timed
    # (59367d0): on prompts frozen for it
    "noharm-v9": _noharm_again("noharm-v9.jsonl"),
    # a tenth time, after decoding keeps its freed memory (b825da2): on prompts frozen for it
    "noharm-v10": _noharm_again("noharm-v10.jsonl"),
    # an eleventh time, after the policies may draft one or two nodes (SMALL_POLICIES: a probe at one node
    # costs a fraction of one at four), read a round's acceptance against its own budget's calibrated rates,
    # and are priced by the upper quartile of the run's verify curves instead of their maximum: on prompts
    # frozen for it
    "noharm-v11": _small_again("noharm-v11.jsonl"),
    # a twelfth time, after the policies probe in shadow rounds (a plain step that scores the drafter's
    # guess, priced as the calibration's loop paid one) and each budget's calibrated rates are shrunk
    # towards all its budgets' rounds, and the prefill reserves the generation's cache: on prompts frozen
    # for it
    "noharm-v12": _small_again("noharm-v12.jsonl", shadow=True),
    # a thirteenth time, the twelfth's design again after its calibration prices a shadow probe over every
    # probe asked (89c9c25): whether its pass holds on prompts frozen for it
    "noharm-v13": _small_again("noharm-v13.jsonl", shadow=True),
    # a fourteenth time, the thirteenth's design with the plain decoder at a position drawn uniformly in each
    # repetition's order instead of first on even repetitions (the cell's first included) and last on odd
    # ones (in the fourth to the thirteenth records, never-drafting policies read slower against plain on
    # the odd repetitions than on the even ones, 18 record x temperature pairs of 20): on prompts frozen
    # for it
    "noharm-v14": _small_again("noharm-v14.jsonl", shadow=True, plain_at="anywhere"),
    # a fifteenth time, the fourteenth's design again: whether its verdict holds on prompts frozen for it
    "noharm-v15": _small_again("noharm-v15.jsonl", shadow=True, plain_at="anywhere"),
    # a sixteenth time, the fifteenth's design after the plain step runs no torch between two C forwards
    # and draws its token in C (2c2b0d3): the step every never-drafting round shares with plain decoding
    "noharm-v16": _small_again("noharm-v16.jsonl", shadow=True, plain_at="anywhere"),
    # a seventeenth time, on the families no judgement had put under the policy (NEW_POLICIES), the
    # sixteenth's design otherwise: the seven families judged sixteen times are not drawn again
    "noharm-v17": replace(
        _small_again("noharm-v17.jsonl", shadow=True, plain_at="anywhere"),
        full=NOHARM_V17_CONFIGS,
        policies=NEW_POLICIES,
        quick_policies={"draft:distil-l1": (1, 2), "early-exit:8": (1,)},
    ),
}


@dataclass(frozen=True)
class TreesSettings(RunSettings):
    """The trees (or conditioned) measurement's design (:class:`TreesRun` builds it, the machine
    identity taken before any thread count is pinned): :meth:`to_record` is the record's settings and
    the key a partial record must hold to be resumed (generations stop at EOS)."""

    quick: bool
    new_tokens: int
    repeats: int
    threads: int
    seed: int
    configs: dict[str, tuple[int, ...]]
    prompts_file: str
    prompts_sha256: str | None
    machine: dict[str, Any]
    policies: dict[str, tuple[int, ...]] = field(default_factory=dict)
    plain_at: str = "alternate"

    def __post_init__(self) -> None:
        check_choice("plain_at", self.plain_at, PLAIN_AT)
        check_int("new_tokens", self.new_tokens, low=2, high=2048)
        check_int("repeats", self.repeats, low=1, high=100)
        check_int("threads", self.threads, low=1, high=1024)
        check_int("seed", self.seed, low=0)

    def to_record(self) -> dict[str, Any]:
        out = super().to_record() | {"eos": True}
        if not self.policies:  # the sets without policies store what they always did
            del out["policies"]
        if self.plain_at == "alternate":  # and the sets before the fourteenth judgement too
            del out["plain_at"]
        return out


def heldout_prompts(tokenizer: Any, path: str | Path = HELDOUT) -> tuple[list[dict[str, Any]], str]:
    """The held-out prompts ready to decode (``task``, ``id``, ``ids``, ``index`` in its task) and the
    file's sha256."""
    from specdec.train.workloads import chat_prompt_ids

    path = Path(path)
    raw = path.read_bytes()
    seen: dict[str, int] = {}
    out = []
    for n, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if (
            not isinstance(row, dict)
            or set(row) != {"id", "task", "prompt"}
            or not isinstance(row["prompt"], str)
        ):
            raise ValueError(f"{path.name} line {n}: expected an object with id, task and a prompt string")
        index = seen.get(row["task"], 0)
        seen[row["task"]] = index + 1
        out.append({"id": row["id"], "task": row["task"], "index": index,
                    "ids": chat_prompt_ids(tokenizer, row["prompt"])})  # fmt: skip
    return out, hashlib.sha256(raw).hexdigest()


def build(
    *,
    threads: int,
    configs: Mapping[str, Sequence[int]] = CONFIGS,
    policies: Mapping[str, Sequence[int]] | None = None,
    calibration: Mapping[str, Any] | None = None,
    mode: str = "q4q8",
    dev_prompts: int = 4,
    pool: float = 1.0,
    shadow: bool = False,
) -> dict[str, Any]:
    """The plain engines (the lean engine in ``mode`` at ``threads``, and at one thread when ``threads``
    > 1: the candidates for the fastest plain decoder, chosen by the cross-fit) and every configuration
    on the first, drafters built by the registry; for each spec in ``policies``, one more configuration
    (``<spec>/noharm``): its drafter under :func:`specdec.measure.draftcost.no_harm_policy` over those
    budgets, calibrated on ``dev_prompts`` development prompts unless ``calibration`` (spec -> a
    :func:`~specdec.measure.draftcost.calibrate_policy` result, e.g. from a partial record) has it, priced
    by the ``pool`` quantile of the run's verify curves, probing in shadow rounds with ``shadow``
    (:func:`policy_configs`). Returns engines,
    configs, tokenizer, eos_token_id, what each draft ran in and the calibration."""
    from specdec.drafting.registry import build_drafter, parse_spec
    from specdec.engine.builder import EngineSpec, open_engine, open_model
    from specdec.measure.modes import draft_context

    policies = dict(policies or {})
    specs = {s: parse_spec(s) for s in [*configs, *policies]}  # every spec checked before anything loads
    for spec, budgets in policies.items():
        check_ints(f"the policy budgets of {spec}", budgets, low=1, distinct=True)
    opened = open_engine(EngineSpec("lean", mode, threads))
    target, loaded = opened.model, opened.base
    name = f"lean-{target.mode}-{threads}t"
    context, drafts = draft_context(opened, draft_mode="q4q8")
    drafters = {text: build_drafter(spec, context) for text, spec in specs.items()}
    out: list[Config] = []
    for text in configs:
        out += spec_configs(name, {text: drafters[text]}, list(configs[text]))
    extra, calibration = policy_configs(
        name, target, loaded.tokenizer, drafters, policies, calibration, dev_prompts=dev_prompts, pool=pool,
        shadow=shadow,
    )  # fmt: skip
    out += extra
    engines = [Engine(name, target, threads, {"engine": "lean", "mode": target.mode, "threads": threads})]
    if threads > 1:  # the same engine at one thread, plain only: a candidate for the fastest plain decoder
        one = open_model(loaded.model, EngineSpec("lean", mode, 1)).model
        engines.append(
            Engine(f"lean-{one.mode}-1t", one, 1, {"engine": "lean", "mode": one.mode, "threads": 1})
        )
    return {"engines": engines, "configs": out, "tokenizer": loaded.tokenizer,
            "eos_token_id": loaded.tokenizer.eos_token_id, "drafts": drafts,
            "calibration": calibration}  # fmt: skip


def policy_configs(
    name: str,
    target: Any,
    tokenizer: Any,
    drafters: Mapping[str, Any],
    policies: Mapping[str, Sequence[int]],
    calibration: Mapping[str, Any] | None = None,
    *,
    dev_prompts: int = 4,
    pool: float = 1.0,
    shadow: bool = False,
) -> tuple[list[Config], dict[str, Any]]:
    """For each spec of ``policies`` (spec -> the budgets it chooses among), the configuration
    ``<name>/<spec>/noharm``: the drafter ``drafters[spec]`` under
    :func:`specdec.measure.draftcost.no_harm_policy`, in the tree loop (a chain drafter as a tree of one
    branch, :class:`specdec.engine.drafters.ChainTree`), calibrated on ``dev_prompts`` development prompts
    on ``target`` unless ``calibration`` (spec -> a :func:`~specdec.measure.draftcost.calibrate_policy`
    result, e.g. from a partial record: a resumed run keeps its choices) has it. Returns the
    configurations and the calibration of every policy, each priced by the elementwise ``pool`` quantile
    (default 1: the steepest; ``noharm-v11`` the upper quartile) of the verify curves the run's
    calibrations timed (:func:`~specdec.measure.draftcost.pooled_curves`: the host's wide calls can look
    cheap for minutes at a time, and one timing can be caught in a spike), stored as ``pooled_quantile``; a
    given calibration priced by another quantile (a partial record resumed under another rule) is
    refused. With ``shadow`` the policies probe in shadow rounds (:meth:`~specdec.theory.policies.
    BudgetPolicy.shadows`; the calibration is the same)."""
    from specdec.engine.cores import torch_threads_for
    from specdec.engine.drafters import ChainTree
    from specdec.measure.draftcost import (
        calibrate_policy,
        dev_texts,
        no_harm_policy,
        pooled_curves,
        price_calibration,
    )
    from specdec.train.workloads import chat_prompt_ids

    check_float("pool", pool, low=0.0, high=1.0)
    calibration = dict(calibration or {})
    for text, given in calibration.items():
        if text in policies and given.get("pooled_quantile", pool) != pool:
            raise ValueError(
                f"the calibration of {text} was priced by the {given['pooled_quantile']} quantile of its "
                f"run's verify curves; this run prices by the {pool} quantile (start afresh)"
            )
    as_tree = {
        text: drafters[text]
        if callable(getattr(drafters[text], "propose_tree", None))
        else ChainTree(drafters[text])
        for text in policies
    }
    missing = [text for text in policies if text not in calibration]
    if missing:
        dev = [chat_prompt_ids(tokenizer, t[:1500]) for t in dev_texts(dev_prompts)]
        with torch_threads_for(target):
            for text in missing:
                calibration[text] = calibrate_policy(target, as_tree[text], dev, tuple(policies[text]))
    # every calibration of the run priced by the ``pool`` quantile of the verify curves they timed
    # (new-format ones: an earlier record's calibrations are read as they were made)
    timed = {t: c["verify_timed"] for t, c in calibration.items() if t in policies and "verify_timed" in c}
    for text, curve in pooled_curves(timed, pool).items():
        calibration[text] = price_calibration(calibration[text], curve) | {"pooled_quantile": pool}
    out = []
    for text in policies:
        policy = no_harm_policy(calibration[text], shadow=shadow)
        out.append(Config(f"{name}/{text}/noharm", name, f"{name}/{text}+noharm", text, as_tree[text],
                          policy, policy.describe()))  # fmt: skip
    return out, {t: calibration[t] for t in policies}


def tree_summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """Per (temperature, configuration), from every repetition-0 run's Stats: tokens per target call
    (new tokens / target calls), nodes per round, accepted drafts per round, acceptance at each depth
    (accepted_at / examined_at, pooled over prompts), draft calls per round, and the draft time per
    round in plain steps (c per round: draft_s / rounds over the decode_s / new_tokens of the plain
    run of the same engine, prompt, temperature and repetition; median over prompts and repetitions:
    :func:`specdec.theory.speedup.cost_coefficient` with gamma = 1 in its loop-step unit)."""
    from specdec.theory.speedup import cost_coefficient

    plain_step: dict[tuple[Any, ...], float] = {}
    for r in record["runs"]:
        if r["drafter"] == "plain":
            key = (r["engine"], r["temperature"], r["prompt"], r["rep"])
            plain_step[key] = r["decode_s"] / max(r["new_tokens"], 1)
    groups: dict[tuple[float, str], dict[str, Any]] = {}
    for r in record["runs"]:
        if r["drafter"] == "plain":
            continue
        g = groups.setdefault((float(r["temperature"]), r["config"]), {"c": [], "stats": []})
        step = plain_step.get((r["engine"], r["temperature"], r["prompt"], r["rep"]))
        if step and r["rounds"]:  # c per round (gamma = 1) in the loop-step unit
            g["c"].append(cost_coefficient(r["draft_s"], r["rounds"], 1, step))
        if r["rep"] == 0 and "stats" in r:
            g["stats"].append(r["stats"])
    out = []
    for (temp, config), g in sorted(groups.items()):
        st = g["stats"]
        calls = sum(s["target_calls"] for s in st)
        rounds = sum(s["rounds"] for s in st)
        depth = max((len(s["examined_at"]) for s in st), default=0)
        examined = [sum(s["examined_at"][d] for s in st if d < len(s["examined_at"])) for d in range(depth)]
        accepted = [sum(s["accepted_at"][d] for s in st if d < len(s["accepted_at"])) for d in range(depth)]
        out.append({
            "temperature": temp,
            "config": config,
            "tokens_per_call": sum(s["new_tokens"] for s in st) / calls if calls else None,
            "nodes_per_round": sum(s["drafted_tokens"] for s in st) / rounds if rounds else None,
            "accepted_per_round": sum(s["accepted_tokens"] for s in st) / rounds if rounds else None,
            "draft_calls_per_round": sum(s["draft_calls"] for s in st) / rounds if rounds else None,
            "accept_at_depth": [a / e if e else None for a, e in zip(accepted, examined, strict=True)],
            "examined_at_depth": examined,
            "c_round_median": float(np.median(g["c"])) if g["c"] else None,
        })  # fmt: skip
    return {"rows": out, "note": "rep-0 Stats pooled over prompts; c_round over every repetition"}


@dataclass(frozen=True)
class TreesRun(Program):
    """Draft trees, suffix decoding and conditioned drafters against chains and plain decoding.

    On the held-out prompts frozen before the run (``trees-v1.jsonl``; ``--set noharm``:
    ``campaign-v2.jsonl``; ``--set noharm-v4`` to ``noharm-v17``: the file of that name;
    a ``--quick`` smoke run uses
    development prompts and never touches them), on one clean commit (a full run refuses a dirty
    working tree), with v(N) of chain and tree calls. ``--set trees`` (issue 29), ``conditioned``
    (issue 30: Medusa, the MLP speculator, EAGLE / EAGLE-2), ``self`` (issue 42: the drafters
    trained on the target's own text, the hybrid and the do-no-harm policy) or ``noharm`` (issue 42's
    goal 2 again: campaign v3's policies once the loop's plain round is the plain decoder's own step,
    beside eagle-3m and medusa-self at one budget each: :data:`NOHARM_CONFIGS`) or ``noharm-v4`` (the
    same after the suffix tree's change, with suffix decoding and mlp-3m added, on prompts frozen for it:
    :data:`NOHARM_V4_CONFIGS`, records of kind ``noharm``; ``noharm-v5`` the same again after the
    suffix walk and the policy's runs of plain rounds, on its own frozen prompts; ``noharm-v6`` again after
    the policy's pricing of empty and partial proposals; ``noharm-v7`` after the calibration's level from
    the loop's clock and the C trie; ``noharm-v8`` after the session's feature buffer, numpy's argmax
    and the level as a ratio of sums; ``noharm-v9`` after the policies are priced by the steepest curve
    their calibrations timed; ``noharm-v10`` after decoding keeps its freed memory; ``noharm-v11`` with
    budgets of one and two nodes, acceptance per budget and the run's curves pooled by their upper
    quartile; ``noharm-v12`` and ``noharm-v13`` the same with shadow probes; ``noharm-v14`` and
    ``noharm-v15`` the same with the plain decoder anywhere in each repetition's order; ``noharm-v16``
    the same after the plain step's torch-free path; ``noharm-v17`` the families no judgement before had
    under the policy, :data:`NEW_POLICIES`, beside Medusa at its fixed budget). The record is
    ``results/bench/<set>-<cpu>-<threads>t[-quick].json``; the same command resumes it.

        specdec run trees --quick                      # a smoke run (a minute)
        specdec run trees --set self --budget-s 3900   # the run; the same command resumes it
        specdec run trees --set noharm --repeats 3     # the policies again
        specdec run trees --reanalyse RECORD           # the analyses of a complete record, anew
    """

    name: ClassVar[str] = "trees"

    set: str = option("trees", "which configurations", choices=tuple(SETS))
    quick: bool = option(False, "a smoke run: a few configurations, 16 tokens, 1 repetition")
    new_tokens: int | None = option(
        None, "new tokens at most, generations stop at EOS (default 128; 16 quick)"
    )
    repeats: int | None = option(None, "repetitions per cell (default 3; 1 quick)")
    threads: int | None = option(None, "the engine's threads (default: every usable core)")
    budget_s: float | None = option(None, "stop after the cell that exhausts this many seconds")
    seed: int = option(0, "the sampling seeds start here (cell i: seed + i)")
    fresh: bool = option(False, "discard a partial record instead of resuming it", once=True)
    out: str | None = option(None, "the record's path (default results/bench/<set>-<cpu>-<n>t.json)")
    reanalyse: str | None = option(
        None,
        "only recompute the intervals and tree summary of this complete record",
        metavar="RECORD",
        once=True,
    )

    def check(self) -> None:
        if self.new_tokens is not None:
            check_int("new_tokens", self.new_tokens, low=2, high=2048)
        if self.repeats is not None:
            check_int("repeats", self.repeats, low=1, high=100)
        check_int("seed", self.seed, low=0)
        if self.threads is not None:
            check_int("threads", self.threads, low=1, high=1024)
        if self.budget_s is not None:
            check_float("budget_s", self.budget_s, low=0.0)

    def run(self) -> int:
        if self.reanalyse:
            return reanalyse(self.reanalyse)
        from specdec.analysis.treetables import simultaneous
        from specdec.engine import native
        from specdec.engine.models import set_threads
        from specdec.experiments.campaign import evaluation_cells, partial_path, resumable, run_campaign
        from specdec.measure.benchargs import ROOT
        from specdec.measure.core import cpu_name, environment
        from specdec.measure.device import device_slug
        from specdec.measure.modes import machine_identity
        from specdec.theory.recordio import read_json, write_record

        env = environment()
        if env.get("git_dirty") and not self.quick:
            raise Refused("the working tree is dirty; commit first (a full run is timed on one clean commit)")
        new_tokens = self.new_tokens or (16 if self.quick else 128)
        repeats = self.repeats or (1 if self.quick else 3)
        threads = self.threads or native.default_threads()
        machine = machine_identity()  # before any thread count is pinned
        chosen = SETS[self.set]
        configs = chosen.quick if self.quick else chosen.full
        policies = chosen.quick_policies if self.quick else chosen.policies
        slug = device_slug(cpu_name())[:40]
        out = Path(self.out) if self.out else (
            ROOT / "results" / "bench" / f"{self.set}-{slug}-{threads}t{'-quick' if self.quick else ''}.json"
        )  # fmt: skip
        calibration = None  # a resumed run keeps its policies' calibration (their choices stay the run's)
        part = partial_path(out)
        if part.exists() and not self.fresh:
            calibration = read_json(part).get("policy_calibration")
        built = build(
            threads=threads, configs=configs, policies=policies, calibration=calibration, pool=chosen.pool,
            shadow=chosen.shadow,
        )  # fmt: skip
        if self.quick:  # the development prompts: a smoke run never touches the held-out set
            prompts, sha = evaluation_cells(built["tokenizer"], per_task=2), None
        else:
            prompts, sha = heldout_prompts(built["tokenizer"], chosen.prompts)
        settings = TreesSettings(
            quick=self.quick, new_tokens=new_tokens, repeats=repeats, threads=threads, seed=self.seed,
            configs={k: tuple(v) for k, v in configs.items()},
            prompts_file="development" if self.quick else chosen.prompts.name,
            prompts_sha256=sha, machine=machine, policies={k: tuple(v) for k, v in policies.items()},
            plain_at=chosen.plain_at,
        )  # fmt: skip
        resumable(out, built["engines"], built["configs"], settings, fresh=self.fresh)  # before any timing
        target = built["engines"][0].model
        print("[trees] timing verify calls of N rows, chain and tree (v(N))", file=sys.stderr)
        curves = target_verify_curves(target, repeats=3 if self.quick else 15)
        header = {
            "kind": chosen.kind or self.set,
            "verify_curves": curves,
            "command": self.command(),
            "environment": env,
            "machine": machine,
            "drafts": built["drafts"],
            **({"policy_calibration": built["calibration"]} if built["calibration"] else {}),
        }
        record = run_campaign(
            built["engines"], built["configs"], prompts, out, settings=settings, header=header,
            new_tokens=new_tokens, repeats=repeats, seed=self.seed, budget_s=self.budget_s,
            fresh=self.fresh, set_threads=set_threads, eos_token_id=built["eos_token_id"],
        )  # fmt: skip
        if not record["complete"]:
            return INCOMPLETE
        record["kind"] = chosen.kind or self.set
        record["trees"] = tree_summary(record)
        record["simultaneous"] = simultaneous(record)  # as --reanalyse computes it
        write_record(out, record, indent=1, sort_keys=False)
        return 0


def reanalyse(path: str | Path) -> int:
    """The record's analyses (the simultaneous intervals and the tree summary) recomputed from its
    stored runs (pure functions of them), with the commit that computed them."""
    from specdec.analysis.treetables import simultaneous
    from specdec.theory.recordio import write_record

    record = read_record(path)
    if not record.get("complete"):
        raise Refused(f"reanalyse: {path} is not a complete record")
    record["trees"] = tree_summary(record)
    record["simultaneous"] = simultaneous(record)
    record["analysed_with"] = analysed_with()
    write_record(path, record, indent=1, sort_keys=False)
    return 0


def analysed_with() -> dict[str, Any]:
    """What a record's re-computed analyses say of the code that computed them: the commit, whether the
    tree was dirty, and when."""
    from specdec.measure.core import environment

    env = environment()
    return {k: env.get(k) for k in ("git_commit", "git_dirty", "timestamp_utc")}
