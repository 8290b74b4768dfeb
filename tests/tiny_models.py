"""The tests' tiny random Llama models: :mod:`specdec.engine.tinymodels` (the package owns them, so that the
GPU record and the benchmarks need no ``tests/`` folder); re-exported here for the tests."""

from specdec.engine.tinymodels import *  # noqa: F403
from specdec.engine.tinymodels import ATTN_SCALE, HEAD_SCALE, VOCAB, __all__  # noqa: F401
