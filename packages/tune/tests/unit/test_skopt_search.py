"""SkOptSearch with the real scikit-optimize library (in-process)."""

from __future__ import annotations

import pytest
import skopt
from simulator import MIXED_SPACE

from rayfield.tune.search.skopt import SkOptSearch


@pytest.mark.slow  # a GP fit per suggestion: about 30 s on 2 loaded cores
def test_skopt_with_tune_domains_learns():
    s = SkOptSearch(space=MIXED_SPACE_FLAT, metric="loss", mode="min", random_state=0)
    losses = []
    for i in range(20):
        c = s.suggest(f"t{i}")
        assert -5 <= c["x"] <= 5 and c["k"] in (1, 2, 3) and c["act"] in ("a", "b")
        loss = (c["x"] - 1.0) ** 2
        s.on_trial_complete(f"t{i}", {"loss": loss})
        losses.append(loss)
    assert min(losses) < 0.05


MIXED_SPACE_FLAT = {k: v for k, v in MIXED_SPACE.items() if k != "opt"}


def test_skopt_suggests_within_tune_domains():
    s = SkOptSearch(space=MIXED_SPACE_FLAT, metric="loss", mode="min", random_state=0)
    for i in range(6):  # past the random start: one GP-guided suggestion
        c = s.suggest(f"t{i}")
        assert -5 <= c["x"] <= 5 and c["k"] in (1, 2, 3) and c["act"] in ("a", "b")
        assert isinstance(c["k"], int)
        s.on_trial_complete(f"t{i}", {"loss": (c["x"] - 1.0) ** 2})
    s.on_trial_complete("unknown", {"loss": 0.0})


def test_skopt_classic_form_with_known_points():
    opt = skopt.Optimizer([(0.0, 20.0), (-100.0, 100.0)], random_state=0)
    s = SkOptSearch(
        opt,
        ["width", "height"],
        metric="score",
        mode="max",
        points_to_evaluate=[[10.0, 0.0], [15.0, -20.0]],
        evaluated_rewards=[1.0, 2.0],
    )
    c = s.suggest("a")
    assert 0 <= c["width"] <= 20 and -100 <= c["height"] <= 100
    assert len(opt.yi) == 2 and sorted(opt.yi) == [-2.0, -1.0]  # told, never run
    s.on_trial_complete("a", {"score": 3.0})
    assert len(opt.yi) == 3
    with pytest.raises(ValueError, match="parameter_names"):
        SkOptSearch(opt)
    with pytest.raises(ValueError, match="one reward per"):
        SkOptSearch(opt, ["w", "h"], points_to_evaluate=[[1, 2]], evaluated_rewards=[])
