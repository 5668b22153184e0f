"""TuneBOHB (KDE sampler) and HyperBandForBOHB, driven through the runner in memory."""

from __future__ import annotations

import math

import pytest
from simulator import MIXED_SPACE, Simulator, minimise_quadratic

from rayfield import tune
from rayfield.tune.runner import TrialRunner
from rayfield.tune.schedulers import HyperBandForBOHB, HyperBandScheduler
from rayfield.tune.search import BasicVariantGenerator, SearchGenerator
from rayfield.tune.search.bohb import TuneBOHB

SPACE = {
    "x": tune.uniform(-5.0, 5.0),
    "y": tune.uniform(-5.0, 5.0),
    "lr": tune.loguniform(1e-4, 1.0),
    "act": tune.choice(["relu", "tanh", "sigmoid"]),
}


def curve(config: dict, it: int) -> dict:
    """A learning curve whose final loss depends on the config: optimum at x=1, y=-2,
    lr=1e-2, act=tanh; more iterations lower the loss towards it."""
    final = (
        (config["x"] - 1.0) ** 2
        + (config["y"] + 2.0) ** 2
        + 4 * (math.log10(config["lr"]) + 2.0) ** 2
        + (0.0 if config["act"] == "tanh" else 3.0)
    )
    return {"loss": final + 10.0 / it}


def best_loss(searcher, scheduler, num_samples: int) -> float:
    exp = tune.Experiment(
        "exp", lambda c: None, config=SPACE, num_samples=num_samples, local_dir="/tmp/tune-unit"
    )
    if searcher is None:
        gen = BasicVariantGenerator(seed=scheduler.seed)
    else:
        gen = SearchGenerator(searcher)
    gen.add_configurations(exp)
    runner = TrialRunner(gen, scheduler, cluster_resources={"CPU": 2})
    Simulator(runner, curve).run()
    finals = [
        t.last_result["loss"]
        for t in runner.get_trials()
        if t.last_result.get("training_iteration") == scheduler.max_t
    ]
    return min(finals)


def hb(cls, seed):
    s = cls(metric="loss", mode="min", max_t=27)
    s.seed = seed
    return s


def test_bohb_beats_random_search_under_hyperband_on_the_same_budget():
    bohb, random = [], []
    for seed in range(4):
        searcher = TuneBOHB(metric="loss", mode="min", seed=seed)
        bohb.append(best_loss(searcher, hb(HyperBandForBOHB, seed), 98))
        random.append(best_loss(None, hb(HyperBandScheduler, seed), 98))
    wins = sum(b < r for b, r in zip(bohb, random))
    assert wins >= 3, (bohb, random)
    assert sum(bohb) < 0.5 * sum(random), (bohb, random)


def test_hyperband_for_bohb_fills_the_most_aggressive_bracket_first_and_labels_budgets():
    sched = HyperBandForBOHB(metric="loss", mode="min", max_t=27)
    assert sched.bracket_sizes() == [(27, 1), (12, 3), (6, 9), (4, 27)]
    searcher = TuneBOHB(metric="loss", mode="min", seed=0)
    exp = tune.Experiment(
        "exp", lambda c: None, config=SPACE, num_samples=30, local_dir="/tmp/tune-unit"
    )
    gen = SearchGenerator(searcher)
    gen.add_configurations(exp)
    runner = TrialRunner(gen, sched, cluster_resources={"CPU": 2})
    Simulator(runner, curve).run()
    budgets = {t.last_result["hyperband_info"]["budget"] for t in runner.get_trials()}
    # Cumulative milestones: the 27-trial bracket 1, 1+3, 4+9, 27; the next 3, 3+9, 27.
    assert budgets <= {1, 4, 13, 3, 12, 27} and 1 in budgets
    for t in runner.get_trials():  # a trial is labelled with the rung it was trained to
        assert t.last_result["hyperband_info"]["budget"] >= t.last_result["training_iteration"]
    assert set(searcher._observations) <= {1.0, 4.0, 13.0, 3.0, 12.0, 27.0}
    assert len(searcher._observations[1.0]) == 27  # every trial of the bracket, once


def test_bohb_sampler_alone_learns_and_round_trips(tmp_path):
    s = TuneBOHB(
        MIXED_SPACE,
        metric="loss",
        mode="min",
        seed=0,
        points_to_evaluate=[{"x": 4.0, "opt": {"lr": 0.1}, "k": 1, "act": "a"}],
    )
    assert s.suggest("t-first") == {"x": 4.0, "opt": {"lr": 0.1}, "k": 1, "act": "a"}
    s.on_trial_complete("t-first", {"loss": 9.0, "training_iteration": 1})
    losses = minimise_quadratic(s, 60, first=1)
    assert s.model_budget == 1.0  # the model was used
    assert min(losses[30:]) < 0.05
    assert sorted(losses[30:])[10] < sorted(losses[:30])[10]  # the later half is better
    path = str(tmp_path / "bohb.pkl")
    s.save(path)
    other = TuneBOHB(MIXED_SPACE, metric="loss", mode="min", seed=1)
    other.restore(path)
    assert other.suggest("a") == s.suggest("a")


def test_bohb_rejects_unknown_settings_and_empty_spaces():
    with pytest.raises(ValueError, match="unknown bohb_config keys"):
        TuneBOHB(bohb_config={"top_n": 10})
    with pytest.raises(ValueError, match="no search space"):
        TuneBOHB(metric="loss", mode="min").suggest("t")
