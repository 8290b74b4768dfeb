"""Run programs as data (issue 41, item 1): every program is one options dataclass, its command line
generated from it, its checks the same from Python and from ``specdec run``, and nothing else parses a
program's arguments."""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from specdec.cli.app import main
from specdec.experiments import options, programs
from specdec.experiments.options import Program, option

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(programs.PROGRAMS))
def test_every_program_is_a_documented_dataclass_whose_command_rebuilds_it(name):
    cls = programs.load(name)
    assert cls.name == name and dataclasses.is_dataclass(cls)
    summary = (cls.__doc__ or "").strip().splitlines()
    assert summary and len(summary[0]) <= 100, f"{name}: a one-line summary first"
    for f in dataclasses.fields(cls):
        assert f.metadata.get("help"), f"{name}.{f.name} has no help"
    ap = options.parser(cls)
    assert ap.format_help()  # every field's type is one the generated parser knows
    default = options.build(cls, vars(ap.parse_args([])))
    assert default.command() == f"specdec run {name}"
    # the command a record keeps parses back to the same options
    again = options.build(cls, vars(ap.parse_args(shlex.split(default.command())[3:])))
    assert again == default


@dataclass(frozen=True)
class _Toy(Program):
    """A toy program.

    Its options exercise every kind of field the generator knows."""

    name: ClassVar[str] = "toy"

    count: int = option(3, "how many")
    ratio: float | None = option(None, "a ratio")
    label: str = option("a", "which label", choices=("a", "b"))
    ks: tuple[int, ...] = option((1, 2), "row counts")
    loud: bool = option(False, "say more")
    quiet: bool = option(True, "say less")

    def check(self) -> None:
        from specdec.theory.checks import check_int

        check_int("count", self.count, low=1)

    def run(self) -> int:
        return self.count


def test_the_generated_parser_round_trips_every_kind_of_field():
    ap = options.parser(_Toy)
    argv = ["--count", "5", "--ratio", "0.5", "--label", "b", "--ks", "1,4,8", "--loud", "--no-quiet"]
    toy = options.build(_Toy, vars(ap.parse_args(argv)))
    assert toy == _Toy(count=5, ratio=0.5, label="b", ks=(1, 4, 8), loud=True, quiet=False)
    assert shlex.split(toy.command())[3:] == argv
    assert options.build(_Toy, vars(ap.parse_args(shlex.split(toy.command())[3:]))) == toy
    assert options.build(_Toy, vars(ap.parse_args([]))) == _Toy()
    assert toy.run() == 5


def test_a_refused_value_names_its_option_the_same_from_python_and_the_command_line():
    with pytest.raises(ValueError, match=r"^count must be an integer >= 1; got 0"):
        _Toy(count=0)
    with pytest.raises(ValueError, match=r"^--count must be an integer >= 1; got 0"):
        options.build(_Toy, {"count": 0})
    with pytest.raises(ValueError, match=r"^--label must be one of a, b; got 'c'"):
        options.build(_Toy, {"label": "c"})
    with pytest.raises(ValueError, match="option needs its help"):
        option(1)
    with pytest.raises(ValueError, match="immutable"):
        option([1], "a list")


def test_specdec_run_lists_refuses_and_helps_with_one_line_errors(capsys):
    assert main(["run", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in programs.PROGRAMS)
    assert main(["run", "no-such-program"]) == 2
    assert "program must be one of" in capsys.readouterr().err
    assert main(["run"]) == 2
    assert main(["run", "trees", "--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
    assert main(["run", "trees", "--help"]) == 0
    assert "--budget-s" in capsys.readouterr().out
    assert main(["run", "trees", "--repeats", "x"]) == 2
    assert "invalid int value" in capsys.readouterr().err


def test_listing_and_checking_the_programs_imports_no_torch():
    code = (
        "import sys\n"
        "from specdec.cli.app import main\n"
        "assert main(['run', '--list']) == 0\n"
        "assert main(['run', 'trees', '--threads', '0']) == 2\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_no_program_keeps_a_hand_written_parser():
    """The run programs' options come only from their dataclasses: no argparse under experiments/ but
    the generator, none under train/ (no parser, no ``__main__``: its commands are experiments.training's
    programs), and benchmarks/ holds no program."""
    users = [
        p.name
        for p in (ROOT / "specdec" / "experiments").glob("*.py")
        if p.name != "options.py" and "argparse" in p.read_text(encoding="utf-8")
    ]
    assert users == []
    trainers = [
        p.name
        for p in (ROOT / "specdec" / "train").glob("*.py")
        if any(word in p.read_text(encoding="utf-8") for word in ("argparse", '__name__ == "__main__"'))
    ]
    assert trainers == [], "training keeps a command line: make it a program in experiments/training.py"
    for name in (
        "trees.py",
        "self_data.py",
        "campaign.py",
        "campaign2.py",
        "real_decoding.py",
        "gpu_real.py",
        "gpu_record.py",
        "batch_surface.py",
        "verify_kernels.py",
        "attention_kernels.py",
        "bench_engine.py",
        "dynamic_gamma.py",
        "oracle_gamma.py",
        "q4q8_error.py",
        "engine_modes.py",
        "verify_cost.py",
    ):
        assert not (ROOT / "benchmarks" / name).exists()
