"""TrialRunner as a pure state machine, driven by the in-memory Simulator."""

from __future__ import annotations

import pytest
from simulator import Simulator, make_runner

from rayfield import tune
from rayfield.tune import actions as A
from rayfield.tune.trial import Trial


def linear(config, it):
    return {"score": config.get("slope", 1) * it}


def test_fifo_runs_every_trial_to_its_stop_criterion_within_resources():
    runner = make_runner(
        {"slope": tune.grid_search([1, 2, 3, 4, 5])}, cpus=2, stop={"training_iteration": 4}
    )
    sim = Simulator(runner, linear)
    sim.run()
    trials = runner.get_trials()
    assert len(trials) == 5
    assert all(t.status == Trial.TERMINATED for t in trials)
    assert [t.last_result["training_iteration"] for t in trials] == [4] * 5
    assert [t.last_result["score"] for t in trials] == [4, 8, 12, 16, 20]
    assert all(t.last_result["done"] for t in trials)
    assert all(0 <= t.last_result["tune_overhead_s"] < 0.1 for t in trials)
    assert sim.max_running == 2


def test_stop_when_any_criterion_is_reached_and_done_flag():
    runner = make_runner({"slope": 3}, stop={"score": 10, "training_iteration": 100})
    Simulator(runner, linear).run()
    [trial] = runner.get_trials()
    assert trial.last_result["training_iteration"] == 4  # 12 >= 10

    runner = make_runner({})
    Simulator(runner, lambda c, it: {"done": it == 3}).run()
    assert runner.get_trials()[0].last_result["training_iteration"] == 3


def test_missing_stop_key_is_a_clear_error():
    runner = make_runner({}, stop={"accuracy": 1})
    with pytest.raises(tune.TuneError, match="'accuracy' is not in the trial's result"):
        Simulator(runner, linear).run()


def test_function_stopper_and_global_stop_all():
    runner = make_runner(
        {"slope": tune.grid_search([1, 2])}, stop=lambda trial_id, result: result["score"] >= 6
    )
    Simulator(runner, linear).run()
    assert [t.last_result["training_iteration"] for t in runner.get_trials()] == [6, 3]

    class StopAfter(tune.Stopper):
        def __init__(self):
            self.n = 0

        def __call__(self, trial_id, result):
            self.n += 1
            return False

        def stop_all(self):
            return self.n >= 5

    runner = make_runner({"slope": tune.grid_search([1, 2, 3])}, stopper=StopAfter())
    Simulator(runner, linear).run()
    assert all(t.status == Trial.TERMINATED for t in runner.get_trials())
    assert sum(t.last_result.get("training_iteration", 0) for t in runner.get_trials()) == 5


def test_trial_needing_more_than_the_cluster_fails_clearly():
    runner = make_runner({}, cpus=2, resources_per_trial={"cpu": 3})
    with pytest.raises(tune.TuneError, match="Insufficient cluster resources"):
        runner.step()


def test_errors_recover_from_the_last_checkpoint_up_to_max_failures():
    runner = make_runner({}, stop={"training_iteration": 6}, checkpoint_freq=2, max_failures=2)
    failed = set()

    def fail(trial, it):
        if it == 5 and it not in failed:
            failed.add(it)
            return True
        return False

    sim = Simulator(runner, linear, fail)
    sim.run()
    [trial] = runner.get_trials()
    assert trial.status == Trial.TERMINATED and trial.num_failures == 1
    # Restarted from checkpoint_000004: iterations 5 and 6 ran again after the failure.
    starts = [k for k, _ in sim.log if k == "start"]
    assert len(starts) == 2
    assert trial.last_result["training_iteration"] == 6


def test_errors_past_max_failures_end_in_error():
    runner = make_runner({}, stop={"training_iteration": 6}, max_failures=1)
    Simulator(runner, linear, lambda t, it: it == 2).run()
    [trial] = runner.get_trials()
    assert trial.status == Trial.ERROR and trial.num_failures == 2
    assert "failure at 2" in trial.error_msg


def test_keep_checkpoints_num_keeps_the_best_by_score():
    runner = make_runner(
        {},
        stop={"training_iteration": 6},
        checkpoint_freq=1,
        keep_checkpoints_num=2,
        checkpoint_score_attr="min-loss",
    )
    losses = {1: 5.0, 2: 1.0, 3: 4.0, 4: 0.5, 5: 3.0, 6: 2.0}
    sim = Simulator(runner, lambda c, it: {"loss": losses[it]})
    sim.run()
    [trial] = runner.get_trials()
    kept = sorted(c.result["training_iteration"] for c in trial.disk_checkpoints)
    assert kept == [2, 4]
    assert sorted(sim.disk.values()) == [2, 4]  # the others were deleted


def test_checkpoint_at_end():
    runner = make_runner({}, stop={"training_iteration": 3}, checkpoint_at_end=True)
    sim = Simulator(runner, linear)
    sim.run()
    [trial] = runner.get_trials()
    assert [c.result["training_iteration"] for c in trial.disk_checkpoints] == [3]
    assert list(sim.disk.values()) == [3]


def test_trials_are_generated_lazily():
    runner = make_runner(
        {"slope": tune.uniform(0, 1)}, num_samples=1000, cpus=2, stop={"training_iteration": 1}
    )
    runner.step()
    assert len(runner.get_trials()) <= 3


def test_request_stop_trial():
    runner = make_runner({"slope": tune.grid_search([1, 2])}, stop={"training_iteration": 50})
    sim = Simulator(runner, linear)
    sim.apply(runner.step())
    first = runner.get_trials()[0]
    runner.request_stop_trial(first.trial_id)
    sim.run()
    assert first.status == Trial.TERMINATED and not first.last_result
    assert runner.get_trials()[1].last_result["training_iteration"] == 50


def test_queue_trials_launches_a_trial_the_cluster_cannot_hold_yet():
    runner = make_runner({"a": tune.grid_search([1, 2])}, cpus=2, resources_per_trial={"cpu": 3})
    runner.queue_trials = True
    starts = [d for d in runner.step() if isinstance(d, A.StartTrial)]
    assert len(starts) == 1  # one at a time: the second waits for the first
    assert runner.get_trials()[1].status == Trial.PENDING


def test_export_formats_are_exported_before_the_stop():
    runner = make_runner({}, stop={"training_iteration": 2}, export_formats=["Model"])
    sim = Simulator(runner, linear)
    sim.run()
    kinds = [k for k, _ in sim.log]
    assert kinds[-2:] == ["export", "stop"]
    with pytest.raises(tune.TuneError, match="unknown export format"):
        make_runner({}, export_formats=["onnx"])
