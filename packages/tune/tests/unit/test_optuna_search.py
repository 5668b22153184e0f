"""OptunaSearch with the real optuna library (in-process)."""

from __future__ import annotations

import optuna

from rayfield import tune
from rayfield.tune.search.optuna import OptunaSearch


def test_optuna_search_suggests_in_the_space_and_learns():
    space = {
        "x": tune.uniform(-5, 5),
        "opt": {"lr": tune.loguniform(1e-4, 1)},
        "k": tune.randint(1, 4),
        "act": tune.choice(["a", "b"]),
    }
    s = OptunaSearch(
        space,
        metric="loss",
        mode="min",
        seed=0,
        points_to_evaluate=[{"x": 4.0, "opt/lr": 0.1, "k": 1, "act": "a"}],
    )
    first = s.suggest("t0")
    assert first == {"x": 4.0, "opt": {"lr": 0.1}, "k": 1, "act": "a"}
    s.on_trial_complete("t0", {"loss": 16.0})
    losses = []
    for i in range(1, 40):
        c = s.suggest(f"t{i}")
        assert -5 <= c["x"] <= 5 and 1e-4 <= c["opt"]["lr"] <= 1
        assert c["k"] in (1, 2, 3) and c["act"] in ("a", "b")
        loss = (c["x"] - 1.0) ** 2
        s.on_trial_result(f"t{i}", {"loss": loss, "training_iteration": 1})
        s.on_trial_complete(f"t{i}", {"loss": loss})
        losses.append(loss)
    assert min(losses) < 0.05
    s.on_trial_complete("t-unknown", {"loss": 1})
    s.suggest("failed")
    s.on_trial_complete("failed", None, error=True)
    states = [t.state for t in s._study.trials]
    assert states.count(optuna.trial.TrialState.FAIL) == 1
