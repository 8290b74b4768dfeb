from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="module")
def one_thread():
    """Run a module's torch work on one thread, then restore torch's count.

    Tiny models run fastest on one thread, and it leaves the other core to other jobs.
    Use it with ``pytestmark = pytest.mark.usefixtures("one_thread")`` or as an argument.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
