"""The one definition of the draft cost c (specdec.engine.stats.cost_coefficient) and the step it divides
by."""

from __future__ import annotations

import math

import pytest

from specdec.engine.stats import Stats, cost_coefficient


def test_cost_coefficient_by_hand():
    # 4 rounds drafting 0.8 s in all: 0.2 s a round, 0.1 s per drafted position at gamma 2,
    # against a 0.05 s target step: c = 2 (a draft step costs two target steps)
    assert cost_coefficient(0.8, 4, 2, 0.05) == pytest.approx(2.0, rel=1e-12)
    assert cost_coefficient(0.0, 3, 4, 0.02) == 0.0
    # gamma c is the drafting time of a round in target steps, whatever gamma is
    for gamma in (1, 3, 8):
        assert gamma * cost_coefficient(1.2, 6, gamma, 0.1) == pytest.approx(2.0, rel=1e-12)


def test_stats_method_and_plain_step():
    spec = Stats(gamma=3, draft_s=0.6, target_s=0.9)
    spec.drafted, spec.accepted, spec.target_calls = [3] * 5, [1] * 5, 5
    plain = Stats(gamma=0, target_s=2.0, target_calls=40)
    assert plain.step_s == pytest.approx(0.05)
    assert spec.cost_coefficient(plain.step_s) == pytest.approx(0.6 / 5 / 3 / 0.05, rel=1e-12)
    # the call's own target calls verify k + 1 tokens: they are not the step c divides by
    assert spec.cost_coefficient(plain.step_s) != pytest.approx(spec.cost_coefficient(spec.step_s))
    assert math.isnan(Stats(gamma=0).step_s)
    assert "step_s" in plain.summary() and "c" not in plain.summary()
    assert not hasattr(Stats, "c")  # one definition of c: no second one on Stats


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0.1, 0, 2, 0.05), "rounds must be an integer >= 1"),
        ((0.1, 3, 0, 0.05), "gamma must be an integer >= 1"),
        (
            (0.1, 3, 2, 0.0),
            r"step_s must be a finite number > 0.0 \(a measured target step in seconds\); got 0.0",
        ),
        ((-0.1, 3, 2, 0.05), r"draft_s must be a finite number >= 0.0 \(a time in seconds\); got -0.1"),
        ((0.1, 3, 2, float("nan")), "step_s must be a finite number > 0.0"),
        ((0.1, 3.0, 2, 0.05), "rounds must be an integer"),
    ],
)
def test_cost_coefficient_refuses_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        cost_coefficient(*args)


def test_stats_without_max_drafts_grows_with_the_work():
    # no gamma-length lists up front: memory follows the rounds recorded (issue #20)
    huge = Stats(gamma=10**9)
    assert huge.max_drafts == 10**9 and huge.examined_at == [] and huge.accepted_hist == [0]
    sized = Stats(gamma=4, max_drafts=4)
    for s in (huge, sized):
        s.record_round(None, None, drafted=3, accepted=2, draft_calls=3)
        s.record_round(None, None, drafted=1, accepted=0, draft_calls=1)
    assert huge.examined_at == [2, 1, 1] and huge.accepted_at == [1, 1, 0]
    assert huge.accepted_hist == [1, 0, 1, 0]
    assert sized.examined_at == [2, 1, 1, 0] and sized.accepted_hist == [1, 0, 1, 0, 0]  # sized: as before
    assert huge.examined == sized.examined and huge.alpha_accept_rate == sized.alpha_accept_rate
    with pytest.raises(ValueError, match=r"max_drafts must be an integer in \[0, 2\] \(gamma\); got 3"):
        Stats(gamma=2, max_drafts=3)
    with pytest.raises(ValueError, match="gamma must be an integer >= 0; got -1"):
        Stats(gamma=-1)
