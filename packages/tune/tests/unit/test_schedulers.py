"""Schedulers against the rules of their papers, on synthetic curves (no processes)."""

from __future__ import annotations

import math
import random

import pytest
from simulator import Simulator, make_runner

from rayfield import tune
from rayfield.tune import actions as A
from rayfield.tune import decisions as D
from rayfield.tune.schedulers import (
    ASHAScheduler,
    AsyncHyperBandScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
)
from rayfield.tune.schedulers.pbt import explore
from rayfield.tune.trial import Trial

CONTINUE, PAUSE, STOP = D.CONTINUE, D.PAUSE, D.STOP


def trial(i):
    return Trial("t", {"i": i}, trial_id=f"t{i}")


# -- ASHA ---------------------------------------------------------------------------------


def test_asha_rungs_follow_the_paper_geometry():
    s = AsyncHyperBandScheduler(
        metric="m", mode="max", max_t=100, grace_period=10, reduction_factor=4
    )
    assert [m for m, _ in s.brackets[0].rungs] == [40, 10]
    s = AsyncHyperBandScheduler(
        metric="m", mode="max", max_t=100, grace_period=10, reduction_factor=3, brackets=3
    )
    assert [[m for m, _ in b.rungs] for b in s.brackets] == [[90, 30, 10], [90, 30], [90]]
    assert ASHAScheduler().brackets[0].rungs[-1][0] == 1  # modern default grace_period=1


def test_asha_stops_below_the_top_fraction_at_a_rung():
    s = AsyncHyperBandScheduler(
        metric="m", mode="max", max_t=100, grace_period=1, reduction_factor=2
    )
    decisions = []
    for i, score in enumerate([5.0, 3.0, 8.0, 6.0, 1.0]):
        t = trial(i)
        s.on_trial_add(None, t)
        decisions.append(s.on_trial_result(None, t, {"training_iteration": 1, "m": score}))
    # Rung 1 cutoffs (median of what was recorded before): -, 5, 4, 5, 5.5
    assert decisions == [CONTINUE, STOP, CONTINUE, CONTINUE, STOP]
    # A trial is judged once per rung: a second result at the same rung continues.
    t = trial(1)
    assert s.on_trial_result(None, t, {"training_iteration": 1, "m": -100}) == CONTINUE
    # At max_t every trial stops.
    assert s.on_trial_result(None, trial(0), {"training_iteration": 100, "m": 99}) == STOP


def test_asha_min_mode_and_missing_metric():
    s = AsyncHyperBandScheduler(metric="loss", mode="min", grace_period=1, reduction_factor=2)
    a, b = trial(0), trial(1)
    s.on_trial_add(None, a)
    s.on_trial_add(None, b)
    assert s.on_trial_result(None, a, {"training_iteration": 1, "loss": 1.0}) == CONTINUE
    assert s.on_trial_result(None, b, {"training_iteration": 1, "loss": 2.0}) == STOP
    assert s.on_trial_result(None, b, {"training_iteration": 2}) == CONTINUE


def test_asha_bad_arguments():
    with pytest.raises(tune.TuneError, match="reduction_factor"):
        AsyncHyperBandScheduler(reduction_factor=1)
    with pytest.raises(tune.TuneError, match="max_t"):
        AsyncHyperBandScheduler(max_t=1, grace_period=5)
    with pytest.raises(tune.TuneError, match="mode"):
        AsyncHyperBandScheduler(mode="best")


def saturating(config, it):
    return {"acc": config["q"] * (1 - math.exp(-it / 5))}


def test_asha_learns_the_best_config_with_a_fraction_of_the_work():
    sched = ASHAScheduler(metric="acc", mode="max", max_t=27, grace_period=1, reduction_factor=3)
    runner = make_runner(
        {"q": tune.uniform(0, 1)}, scheduler=sched, num_samples=40, stop={"training_iteration": 27}
    )
    Simulator(runner, saturating).run()
    trials = runner.get_trials()
    best_q = max(t.config["q"] for t in trials)
    best = max(trials, key=lambda t: t.last_result["acc"])
    assert best.config["q"] == best_q
    assert best.last_result["training_iteration"] == 27
    work = sum(t.last_result["training_iteration"] for t in trials)
    assert work < 0.35 * 40 * 27


# -- HyperBand ------------------------------------------------------------------------------


def test_hyperband_brackets_match_the_paper():
    assert HyperBandScheduler(max_t=100).bracket_sizes() == [
        (5, 100),
        (8, 33),
        (15, 11),
        (34, 3),
        (81, 1),
    ]
    assert HyperBandScheduler(max_t=81).bracket_sizes() == [
        (5, 81),
        (8, 27),
        (15, 9),
        (34, 3),
        (81, 1),
    ]


def test_hyperband_halving_keeps_a_third_at_cumulative_milestones():
    sched = HyperBandScheduler(metric="m", mode="max", max_t=81)
    bracket = sched._new_bracket(4)
    sizes, milestones = [bracket.n], [bracket.cumul_r]
    while not bracket.finished():
        bracket.halve(lambda r: 0.0)
        sizes.append(bracket.n)
        milestones.append(bracket.cumul_r)
    assert sizes == [81, 27, 9, 3, 1]
    assert milestones == [1, 4, 13, 40, 81]


def linear_q(config, it):
    return {"m": config["q"] * it}


def test_hyperband_runs_successive_halving_with_pauses():
    sched = HyperBandScheduler(metric="m", mode="max", max_t=9)
    assert sched.bracket_sizes() == [(3, 9), (5, 3), (9, 1)]
    runner = make_runner(
        {"q": tune.uniform(0, 1)},
        scheduler=sched,
        num_samples=17,
        cpus=2,
        stop={"training_iteration": 9},
    )
    sim = Simulator(runner, linear_q)
    sim.run()
    assert any(kind == "pause" for kind, _ in sim.log)
    [band] = sched.bands
    smallest = band[2].all_trials  # s=2: 9 trials, milestones 1, 4, 9
    assert len(smallest) == 9
    reached = sorted((t.last_result["training_iteration"] for t in smallest), reverse=True)
    assert reached[0] == 9 and reached[1:3] == [4, 4] and set(reached[3:]) == {1}
    winner = max(smallest, key=lambda t: t.last_result["training_iteration"])
    assert winner.config["q"] == max(t.config["q"] for t in smallest)
    s0 = band[0].all_trials  # s=0: no early stopping
    assert [t.last_result["training_iteration"] for t in s0] == [9, 9, 9]
    assert all(t.status == Trial.TERMINATED for t in runner.get_trials())


# -- Median stopping ----------------------------------------------------------------------


def test_median_stopping_rule_compares_best_to_the_median_of_running_averages():
    s = MedianStoppingRule(
        time_attr="training_iteration",
        metric="m",
        mode="max",
        grace_period=0,
        min_samples_required=2,
    )
    for i, scores in enumerate([[10, 10, 10], [6, 8, 10]]):
        t = trial(i)
        for it, v in enumerate(scores, 1):
            assert s.on_trial_result(None, t, {"training_iteration": it, "m": v}) == CONTINUE
        s.on_trial_complete(None, t, {"training_iteration": 3, "m": scores[-1]})
    # At t=1 the running averages are 10 and 6: median 8.
    poor, good = trial(5), trial(6)
    assert s.on_trial_result(None, good, {"training_iteration": 1, "m": 8.5}) == CONTINUE
    assert s.on_trial_result(None, poor, {"training_iteration": 1, "m": 7.9}) == STOP
    assert "num_stopped=1" in s.debug_string()


def test_median_stopping_needs_samples_and_grace():
    s = MedianStoppingRule(
        time_attr="training_iteration",
        metric="m",
        mode="max",
        grace_period=5,
        min_samples_required=1,
        hard_stop=False,
    )
    done = trial(0)
    s.on_trial_result(None, done, {"training_iteration": 1, "m": 10})
    s.on_trial_complete(None, done, {"training_iteration": 1, "m": 10})
    bad = trial(1)
    assert s.on_trial_result(None, bad, {"training_iteration": 3, "m": 0}) == CONTINUE
    assert s.on_trial_result(None, bad, {"training_iteration": 6, "m": 0}) == PAUSE
    # Once soft-stopped and resumed it runs to the end.
    assert s.on_trial_result(None, bad, {"training_iteration": 7, "m": 0}) == CONTINUE


# -- PBT ------------------------------------------------------------------------------------


def test_pbt_explore_rules():
    rng = random.Random(0)
    values = [1, 10, 100, 1000]
    for _ in range(50):
        out = explore({"c": 10}, {"c": values}, 0.0, None, rng)
        assert out["c"] in (1, 100)  # a neighbour
        edge = explore({"c": 1000}, {"c": values}, 0.0, None, rng)
        assert edge["c"] in (100, 1000)  # clamped
        out = explore({"lr": 1.0, "n": 10}, {"lr": lambda: 5.0, "n": lambda: 3}, 0.0, None, rng)
        assert out["lr"] in (pytest.approx(0.8), pytest.approx(1.2))
        assert out["n"] in (8, 12) and isinstance(out["n"], int)
        assert explore({"c": 7}, {"c": values}, 0.0, None, rng)["c"] in values  # not in list
        assert explore({"lr": 1.0}, {"lr": lambda: 5.0}, 1.0, None, rng)["lr"] == 5.0
    nested = explore(
        {"opt": {"lr": 1.0}, "keep": 3},
        {"opt": {"lr": [0.5, 1.0, 2.0]}},
        0.0,
        lambda c: {**c, "custom": True},
        rng,
    )
    assert nested["opt"]["lr"] in (0.5, 2.0) and nested["keep"] == 3 and nested["custom"]


def test_pbt_validates_arguments():
    with pytest.raises(tune.TuneError, match="hyperparam_mutations"):
        PopulationBasedTraining()
    with pytest.raises(tune.TuneError, match="quantile_fraction"):
        PopulationBasedTraining(hyperparam_mutations={"a": [1]}, quantile_fraction=0.7)
    with pytest.raises(TypeError, match="must be a list"):
        PopulationBasedTraining(hyperparam_mutations={"a": 3})


def test_pbt_quantiles_use_the_fraction_capped_at_half():
    pbt = PopulationBasedTraining(
        metric="m", mode="max", hyperparam_mutations={"a": [1]}, quantile_fraction=0.25
    )
    trials = [trial(i) for i in range(7)]
    for t, score in zip(trials, [3, 1, 4, 1.5, 9, 2, 6]):
        pbt.on_trial_add(None, t)
        pbt._state[t.trial_id]["last_score"] = score
    lower, upper = pbt.quantiles()
    assert [t.trial_id for t in lower] == ["t1", "t3"]  # ceil(7 * 0.25) = 2
    assert [t.trial_id for t in upper] == ["t6", "t4"]


def test_pbt_exploits_the_top_and_improves_the_population():
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        metric="m",
        mode="max",
        perturbation_interval=2,
        hyperparam_mutations={"lr": tune.uniform(0.0, 1.0)},
        quantile_fraction=0.25,
        resample_probability=0.25,
        seed=1,
    )

    def score(config, it):  # the current lr sets the score; state is the iteration count
        return {"m": config["lr"] * 100 + it * 0.001}

    runner = make_runner(
        {"lr": tune.uniform(0, 0.5)},
        scheduler=pbt,
        num_samples=8,
        cpus=4,
        stop={"training_iteration": 30},
    )
    start_lrs: dict[str, float] = {}

    class Record(tune.Callback):
        def on_trial_add(self, trial):
            start_lrs[trial.trial_id] = trial.config["lr"]

    runner.callbacks.append(Record())
    sim = Simulator(runner, score)
    sim.run()
    trials = runner.get_trials()
    assert pbt.num_perturbations > 0
    assert any(kind == "reset" for kind, _ in sim.log)
    assert any("@perturbed[" in t.experiment_tag for t in trials)
    assert len(start_lrs) == 8
    final_mean = sum(t.config["lr"] for t in trials) / 8
    assert final_mean > sum(start_lrs.values()) / 8
    assert all(t.status == Trial.TERMINATED for t in trials)


def test_fifo_debug_string():
    assert FIFOScheduler().debug_string() == "Using FIFO scheduling algorithm."


# -- PB2 ------------------------------------------------------------------------------------


def test_pb2_moves_the_population_toward_the_best_rate():
    from rayfield.tune.schedulers import PB2

    def curve(config, it):  # the improvement rate peaks at lr = 0.7
        return {"m": it * (1 - 4 * (config["lr"] - 0.7) ** 2)}

    start: dict[str, float] = {}

    class Record(tune.Callback):
        def on_trial_add(self, trial):
            start[trial.trial_id] = trial.config["lr"]

    pb2 = PB2(
        time_attr="training_iteration",
        metric="m",
        mode="max",
        perturbation_interval=2,
        hyperparam_bounds={"lr": [0.0, 1.0]},
        seed=0,
    )
    runner = make_runner(
        {"lr": tune.uniform(0.0, 0.3)},
        num_samples=8,
        cpus=4,
        scheduler=pb2,
        stop={"training_iteration": 40},
    )
    runner.callbacks.append(Record())
    Simulator(runner, curve).run()
    trials = runner.get_trials()
    assert pb2.num_perturbations > 0 and len(pb2._records) > 10
    before = sum(abs(v - 0.7) for v in start.values()) / len(start)
    after = sum(abs(t.config["lr"] - 0.7) for t in trials) / len(trials)
    assert after < before / 2
    with pytest.raises(tune.TuneError, match="hyperparam_bounds"):
        PB2()
    with pytest.raises(tune.TuneError, match="low must be < high"):
        PB2(hyperparam_bounds={"lr": [1, 0]})


def test_asha_lets_results_between_milestones_come_in_one_batch():
    from simulator import make_runner

    from rayfield.tune.schedulers import ASHAScheduler

    sched = ASHAScheduler(metric="m", mode="max", max_t=20, grace_period=1, reduction_factor=3)
    runner = make_runner({"x": tune.uniform(0, 1)}, num_samples=1, scheduler=sched)
    [start] = runner.step()
    assert isinstance(start, A.StartTrial) and start.batch == 1  # the first milestone is 1
    trial = start.trial
    hints = {}
    for t in (1, 2, 3, 9, 15):
        result = {"training_iteration": t, "m": 1.0}
        assert sched.results_to_buffer(trial, result) >= 1
        hints[t] = sched.results_to_buffer(trial, result)
    assert hints == {1: 2, 2: 1, 3: 6, 9: 11, 15: 5}  # milestones 1, 3, 9; max_t 20
    runner.on_trial_result(trial, {"training_iteration": 1, "m": 1.0})
    runner.on_trial_result(trial, {"training_iteration": 2, "m": 1.0})
    continues = [d for d in runner.step() if isinstance(d, A.TrainTrial)]
    assert [d.batch for d in continues] == [1]  # only the latest result's decision is kept
