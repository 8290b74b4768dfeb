"""The one table of run programs: ``specdec run NAME`` -> the module holding its :class:`Program`.

:func:`load` finds a program's class, :func:`describe` lists them (``specdec run --list``). The programs
themselves are options dataclasses (:mod:`specdec.experiments.options`). Importing this module imports
none of them: :func:`load` imports the one asked for, and no program imports torch at import.
"""

from __future__ import annotations

import importlib

from specdec.experiments.options import Program

__all__ = ["PROGRAMS", "describe", "load"]

#: The run programs: ``specdec run NAME`` -> the module that holds its :class:`Program` (the subclass whose
#: ``name`` is NAME). Module names only, so that the layer walk reads them as imports.
PROGRAMS: dict[str, str] = {
    "attention-kernels": "specdec.experiments.attentionkernels",
    "batch-surface": "specdec.experiments.batchsurface",
    "campaign": "specdec.experiments.campaign",
    "campaign2": "specdec.experiments.campaign2",
    "campaign3": "specdec.experiments.campaign3",
    "cond-features": "specdec.experiments.training",
    "cond-heldout": "specdec.experiments.training",
    "cond-train": "specdec.experiments.training",
    "draft-cost": "specdec.experiments.draftcost",
    "distill-data": "specdec.experiments.training",
    "distill-train": "specdec.experiments.training",
    "dynamic-gamma": "specdec.experiments.dynamicgamma",
    "engine-modes": "specdec.experiments.enginemodes",
    "gpu-real": "specdec.experiments.gpurealrun",
    "gpu-record": "specdec.experiments.gpurecord",
    "hf-bench": "specdec.experiments.hfbench",
    "loop-cost": "specdec.experiments.loopcost",
    "oracle-gamma": "specdec.experiments.oraclegamma",
    "q4q8-error": "specdec.experiments.logiterror",
    "real-decoding": "specdec.experiments.realdecodingrun",
    "self-data": "specdec.experiments.selfdata",
    "self-features": "specdec.experiments.training",
    "trees": "specdec.experiments.trees",
    "verify-cost": "specdec.experiments.verifycost",
    "verify-kernels": "specdec.experiments.verifykernels",
}


def load(name: str) -> type[Program]:
    """The class of the program ``name`` (a key of :data:`PROGRAMS`): the one :class:`Program` subclass
    of its module whose ``name`` is ``name``."""
    if name not in PROGRAMS:
        raise ValueError(f"program must be one of {', '.join(sorted(PROGRAMS))}; got {name!r}")
    module = importlib.import_module(PROGRAMS[name])
    found = [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, Program) and obj.name == name
    ]
    if len(found) != 1:
        raise TypeError(f"{PROGRAMS[name]} must hold one Program named {name!r}; it holds {len(found)}")
    return found[0]


def describe() -> list[tuple[str, str]]:
    """``(name, one-line summary)`` of every program, by name."""
    return [(name, (load(name).__doc__ or "").strip().splitlines()[0]) for name in sorted(PROGRAMS)]
