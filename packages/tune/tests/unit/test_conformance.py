"""Conformance: every scheduler and every searcher honours the same contract.

Schedulers: an experiment under each one ends with every trial TERMINATED, no trial runs
past its stop criterion, the running trials never hold more than the cluster has, and the
status line is not empty. Searchers: every suggestion lies in the space, completions of
unknown trials are ignored, and ``tune``'s search generator stops after ``num_samples``.
"""

from __future__ import annotations

import math

import pytest
from simulator import Simulator, make_runner

from rayfield import tune
from rayfield.tune.schedulers import (
    PB2,
    AsyncHyperBandScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
)
from rayfield.tune.search import ConcurrencyLimiter, Repeater, SearchGenerator
from rayfield.tune.search.gp import GPSearch
from rayfield.tune.search.hyperopt import HyperOptSearch
from rayfield.tune.search.nevergrad import NevergradSearch
from rayfield.tune.search.optuna import OptunaSearch
from rayfield.tune.trial import Trial

SCHEDULERS = {
    "fifo": lambda: FIFOScheduler(),
    "median": lambda: MedianStoppingRule(
        time_attr="training_iteration",
        metric="m",
        mode="max",
        grace_period=2,
        min_samples_required=2,
    ),
    "asha": lambda: AsyncHyperBandScheduler(
        metric="m", mode="max", max_t=12, grace_period=1, reduction_factor=3
    ),
    "hyperband": lambda: HyperBandScheduler(metric="m", mode="max", max_t=9),
    "pbt": lambda: PopulationBasedTraining(
        time_attr="training_iteration",
        metric="m",
        mode="max",
        perturbation_interval=3,
        hyperparam_mutations={"q": [0.1, 0.5, 0.9]},
        seed=0,
    ),
    "pb2": lambda: PB2(
        time_attr="training_iteration",
        metric="m",
        mode="max",
        perturbation_interval=3,
        hyperparam_bounds={"q": [0.1, 0.9]},
        num_candidates=100,
        seed=0,
    ),
}


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
@pytest.mark.parametrize("cpus", [1, 3])
def test_scheduler_conformance(name, cpus):
    scheduler = SCHEDULERS[name]()
    runner = make_runner(
        {"q": tune.choice([0.1, 0.5, 0.9])},
        num_samples=12,
        cpus=cpus,
        scheduler=scheduler,
        stop={"training_iteration": 12},
    )
    sim = Simulator(runner, lambda config, it: {"m": config["q"] * math.log1p(it)})
    sim.run()
    trials = runner.get_trials()
    assert len(trials) == 12
    assert all(t.status == Trial.TERMINATED for t in trials)
    assert all(1 <= t.last_result["training_iteration"] <= 12 for t in trials)
    assert sim.max_running <= cpus
    assert scheduler.debug_string()


SPACE = {"x": tune.uniform(-1, 1), "n": tune.randint(1, 4), "c": tune.choice(["a", "b"])}
SEARCHERS = {
    "gp": lambda: GPSearch(metric="m", mode="max", random_state=0, n_initial_points=3),
    "optuna": lambda: OptunaSearch(metric="m", mode="max", seed=0),
    "nevergrad": lambda: NevergradSearch(metric="m", mode="max", budget=10),
    "hyperopt": lambda: HyperOptSearch(
        metric="m", mode="max", random_state_seed=0, n_initial_points=3
    ),
    "limited-gp": lambda: ConcurrencyLimiter(
        GPSearch(metric="m", mode="max", random_state=0), max_concurrent=2
    ),
    "repeated-optuna": lambda: Repeater(OptunaSearch(metric="m", mode="max", seed=0), 2),
}


@pytest.mark.parametrize("name", sorted(SEARCHERS))
def test_searcher_conformance(name):
    searcher = SEARCHERS[name]()
    gen = SearchGenerator(searcher)
    gen.add_configurations(
        tune.Experiment(
            "e",
            lambda c: None,
            config={**SPACE, "k": 7},
            num_samples=10,
            local_dir="/tmp/tune-unit",
        )
    )
    made = 0
    while not gen.is_finished():
        trial = gen.next_trial()
        if trial is None:  # a limiter waits for a completion
            continue
        made += 1
        c = trial.config
        assert -1 <= c["x"] <= 1 and c["n"] in (1, 2, 3) and c["c"] in ("a", "b")
        assert c["k"] == 7
        gen.on_trial_result(trial.trial_id, {"m": c["x"], "training_iteration": 1})
        gen.on_trial_complete(trial.trial_id, {"m": c["x"]})
        gen.on_trial_complete("not-a-trial", {"m": 100.0})
    assert made == 10
