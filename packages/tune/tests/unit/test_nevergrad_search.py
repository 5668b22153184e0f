"""NevergradSearch with the real nevergrad library (in-process)."""

from __future__ import annotations

import nevergrad as ng

from rayfield import tune
from rayfield.tune.search.nevergrad import NevergradSearch


def test_nevergrad_with_tune_domains_learns():
    space = {
        "x": tune.uniform(-5, 5),
        "opt": {"lr": tune.loguniform(1e-4, 1)},
        "k": tune.randint(1, 4),
        "act": tune.choice(["a", "b"]),
    }
    s = NevergradSearch(ng.optimizers.OnePlusOne, space, metric="loss", mode="min", budget=60)
    losses = []
    for i in range(60):
        c = s.suggest(f"t{i}")
        assert -5 <= c["x"] <= 5 and 1e-4 <= c["opt"]["lr"] <= 1
        assert c["k"] in (1, 2, 3) and c["act"] in ("a", "b")
        loss = (c["x"] - 1.0) ** 2
        s.on_trial_complete(f"t{i}", {"loss": loss})
        losses.append(loss)
    assert min(losses) < 0.05 and min(losses[30:]) <= min(losses[:5])
    s.on_trial_complete("unknown", {"loss": 0.0})


def test_nevergrad_optimizer_instance_and_max_mode():
    opt = ng.optimizers.RandomSearch(
        parametrization=ng.p.Dict(w=ng.p.Scalar(lower=0, upper=1)), budget=10
    )
    s = NevergradSearch(opt, metric="score", mode="max")
    c = s.suggest("a")
    assert 0 <= c["w"] <= 1
    s.on_trial_complete("a", {"score": 2.0})
    assert opt.num_tell == 1
