"""specdec.paper.book: the rounding that makes stored notebook outputs CPU-independent, and keep()."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.paper.book import SIGNIFICANT, keep, portable


def test_floats_keep_six_significant_digits():
    assert SIGNIFICANT == 6
    assert portable(0.0036664064532916374) == 0.00366641
    assert portable(np.float64(58.197670686933)) == 58.1977
    assert portable(-1234567.89) == -1234570.0
    assert portable(np.float32(0.1)) == 0.1


def test_last_bit_noise_vanishes():
    # the pair seen on two CPUs (AVX-512 vs AVX2 exp/power kernels)
    assert portable(1.392211162481) == portable(1.392211202705) == 1.39221
    x = 0.0036664064532916374
    assert repr(portable(x)) == repr(portable(np.nextafter(x, 1.0)))


def test_other_types():
    assert portable(np.int64(7)) == 7 and type(portable(np.int64(7))) is int
    assert portable(np.bool_(True)) is True
    assert portable("ee-28") == "ee-28"
    assert (
        portable(0.0) == 0.0 and np.isnan(portable(float("nan"))) and portable(float("inf")) == float("inf")
    )
    assert portable(2.0 / 3.0, sig=3) == 0.667
    with pytest.raises(ValueError, match="sig"):
        portable(1.0, sig=0)


def test_keep_glues_the_rounded_value(monkeypatch):
    import myst_nb

    seen = {}
    monkeypatch.setattr(myst_nb, "glue", lambda key, value, display: seen.update({key: (value, display)}))
    assert keep("x", np.float64(1.392211162481)) is None
    assert seen == {"x": (1.39221, False)}
    with pytest.raises(ValueError, match="key"):
        keep("", 1.0)
