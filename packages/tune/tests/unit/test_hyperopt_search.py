"""HyperOptSearch with the real hyperopt library (in-process)."""

from __future__ import annotations

from hyperopt import hp
from simulator import MIXED_SPACE, minimise_quadratic

from rayfield.tune.search.hyperopt import HyperOptSearch


def test_hyperopt_with_tune_domains_learns_and_handles_errors():
    s = HyperOptSearch(
        MIXED_SPACE, metric="loss", mode="min", n_initial_points=5, random_state_seed=0
    )
    losses = minimise_quadratic(s, 40)
    assert min(losses[20:]) < min(losses[:5])  # TPE improves on its random start
    assert min(losses) < 0.05
    s.suggest("bad")
    s.on_trial_complete("bad", None, error=True)
    s.on_trial_complete("unknown", {"loss": 0.0})


def test_hyperopt_native_space_and_points_to_evaluate():
    space = {"width": hp.uniform("width", 0, 20), "act": hp.choice("act", ["relu", "tanh"])}
    s = HyperOptSearch(
        space,
        metric="score",
        mode="max",
        random_state_seed=1,
        points_to_evaluate=[{"width": 3.0, "act": 1}],
    )
    first = s.suggest("a")
    assert first == {"width": 3.0, "act": "tanh"}
    s.on_trial_complete("a", {"score": 1.0})
    second = s.suggest("b")
    assert 0 <= second["width"] <= 20 and second["act"] in ("relu", "tanh")
