"""The theory half of the package needs numpy and scipy only: importing it does not import torch,
and it works where torch is not installed (simulated in a fresh interpreter by blocking it).

The modules are not a hand-kept list: they are those that ``tests/test_layers.py``'s import
walk finds torch-free at import (no module-level torch or transformers import, directly or
through a specdec module) -- every theory module among them, and the package root, whose
engine names load lazily.
"""

from __future__ import annotations

import os
import subprocess
import sys

from test_layers import light_modules

TORCH_FREE = light_modules()


def run(root, tmp_path, code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_importing_the_theory_does_not_import_torch(root, tmp_path):
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "    assert 'torch' not in sys.modules, f'importing {name} imported torch'\n"
    )
    done = run(root, tmp_path, code, *TORCH_FREE)
    assert done.returncode == 0, done.stderr


def test_the_theory_works_without_torch(root, tmp_path):
    code = (
        "import importlib, sys\n"
        "for name in ('torch', 'transformers'):\n"
        "    sys.modules[name] = None  # import torch now raises ImportError, as without it\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "import numpy as np\n"
        "import specdec\n"
        "from specdec.paper import published, reproduce\nfrom specdec.theory import sampling\n"
        "assert abs(specdec.expected_tokens(0.8, 4) - (1 - 0.8**5) / 0.2) < 1e-12\n"
        "assert sampling.sample(np.array([0.0, 1.0, 0.0]), np.random.default_rng(0)) == 1\n"
        "assert published.load_table('table1') and len(reproduce.export_tables('tables')) >= 1\n"
        "try:\n"
        "    specdec.autoregressive\n"
        "except ImportError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('the engine imported although torch is blocked')\n"
    )
    done = run(root, tmp_path, code, *TORCH_FREE)
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "tables").glob("*.csv"))
