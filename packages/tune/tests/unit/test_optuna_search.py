"""OptunaSearch with the real optuna library (in-process)."""

from __future__ import annotations

import optuna
from simulator import MIXED_SPACE, minimise_quadratic

from rayfield.tune.search.optuna import OptunaSearch


def test_optuna_search_suggests_in_the_space_and_learns():
    s = OptunaSearch(
        MIXED_SPACE,
        metric="loss",
        mode="min",
        seed=0,
        points_to_evaluate=[{"x": 4.0, "opt/lr": 0.1, "k": 1, "act": "a"}],
    )
    first = s.suggest("t0")
    assert first == {"x": 4.0, "opt": {"lr": 0.1}, "k": 1, "act": "a"}
    s.on_trial_complete("t0", {"loss": 16.0})
    losses = minimise_quadratic(s, 39, first=1)
    assert min(losses) < 0.05
    s.on_trial_complete("t-unknown", {"loss": 1})
    s.suggest("failed")
    s.on_trial_complete("failed", None, error=True)
    states = [t.state for t in s._study.trials]
    assert states.count(optuna.trial.TrialState.FAIL) == 1
