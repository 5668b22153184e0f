"""NevergradSearch with the real nevergrad library (in-process)."""

from __future__ import annotations

import nevergrad as ng
from simulator import MIXED_SPACE, minimise_quadratic

from rayfield.tune.search.nevergrad import NevergradSearch


def test_nevergrad_with_tune_domains_learns():
    s = NevergradSearch(ng.optimizers.OnePlusOne, MIXED_SPACE, metric="loss", mode="min", budget=60)
    losses = minimise_quadratic(s, 60)
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
