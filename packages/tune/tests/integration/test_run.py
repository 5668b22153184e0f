"""tune.run and Tuner end to end with real actors on a 2-CPU local cluster."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rayfield import tune
from rayfield.tune.schedulers import (
    ASHAScheduler,
    HyperBandScheduler,
    PopulationBasedTraining,
)
from rayfield.util import get_node_ip_address

pytestmark = pytest.mark.usefixtures("cluster")


def test_classic_quick_start_writes_the_trial_files(tmp_path):
    def train_func(config, reporter):
        for i in range(10):
            reporter(mean_accuracy=config["momentum"] * i)

    analysis = tune.run(
        train_func,
        name="quick-start",
        stop={"mean_accuracy": 1.0},
        config={"momentum": tune.grid_search([0.1, 0.2])},
        local_dir=str(tmp_path),
        verbose=0,
    )
    trials = list(analysis)
    assert [str(t) for t in trials] == ["train_func_0_momentum=0.1", "train_func_1_momentum=0.2"]
    assert [t.status for t in trials] == ["TERMINATED", "TERMINATED"]
    # momentum 0.1 never reaches 1.0 (all 10 reports); 0.2 reaches it at i=5 (6 reports).
    assert [t.last_result["training_iteration"] for t in trials] == [10, 6]
    logdir = trials[1].logdir
    assert os.path.dirname(logdir) == str(tmp_path / "quick-start")
    with open(os.path.join(logdir, "params.json")) as f:
        assert json.load(f) == {"momentum": 0.2}
    with open(os.path.join(logdir, "result.json")) as f:
        lines = [json.loads(line) for line in f]
    assert [r["training_iteration"] for r in lines] == [1, 2, 3, 4, 5, 6]
    assert lines[-1]["done"] and lines[-1]["trial_id"] == trials[1].trial_id
    assert all(0 <= r["tune_overhead_s"] < 1 for r in lines)  # measured per result
    with open(os.path.join(logdir, "progress.csv")) as f:
        assert len(f.read().strip().splitlines()) == 7
    assert analysis.get_best_config("mean_accuracy", "max") == {"momentum": 0.2}
    df = analysis.dataframe()
    assert sorted(df["config/momentum"]) == [0.1, 0.2]
    assert os.path.exists(tmp_path / "quick-start" / "experiment_state.json")
    reread = tune.ExperimentAnalysis(str(tmp_path / "quick-start"))
    assert reread.get_best_logdir("mean_accuracy", "max") == logdir
    assert len(reread.trial_dataframes[logdir]) == 6


def test_modern_tuner_with_checkpoints_and_result_grid(tmp_path):
    def objective(config):
        start = 0
        ckpt = tune.get_checkpoint()
        if ckpt:
            start = json.loads(Path(ckpt.path, "s.json").read_text())["step"]
        for step in range(start, 4):
            d = os.path.join(tune.get_trial_dir(), f"tmp{step}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "s.json"), "w") as f:
                json.dump({"step": step + 1}, f)
            tune.report(
                {"score": config["x"] * (step + 1)}, checkpoint=tune.Checkpoint.from_directory(d)
            )

    grid = tune.Tuner(
        objective,
        param_space={"x": tune.grid_search([1, 3, 2])},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=tune.RunConfig(name="modern", storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert len(grid) == 3 and grid.num_errors == 0
    best = grid.get_best_result()
    assert best.config == {"x": 3} and best.metrics["score"] == 12
    assert best.checkpoint is not None
    with open(os.path.join(best.checkpoint.path, "s.json")) as f:
        assert json.load(f) == {"step": 4}
    assert os.path.basename(best.checkpoint.path) == "checkpoint_000004"
    assert len(best.metrics_dataframe) == 4
    assert grid.get_best_result(metric="score", mode="min").config == {"x": 1}


class Counter(tune.Trainable):
    def setup(self, config):
        self.total = 0

    def step(self):
        self.total += self.config["inc"]
        return {"total": self.total, "episode_reward_mean": self.total}

    def save_checkpoint(self, checkpoint_dir):
        return {"total": self.total}

    def load_checkpoint(self, checkpoint):
        self.total = checkpoint["total"]

    def reset_config(self, new_config):
        self.total = 0  # a reused actor starts the next trial from scratch
        return True


class ClassicCounter(tune.Trainable):
    def _setup(self, config):
        self.total = 0

    def _train(self):
        self.total += 1
        return {"total": self.total}

    def _save(self, checkpoint_dir):
        path = os.path.join(checkpoint_dir, "total.txt")
        with open(path, "w") as f:
            f.write(str(self.total))
        return path

    def _restore(self, path):
        with open(path) as f:
            self.total = int(f.read())


def test_class_api_checkpoints_on_disk(tmp_path):
    trials = tune.run(
        Counter,
        name="cls",
        config={"inc": tune.grid_search([1, 2])},
        stop={"training_iteration": 5},
        checkpoint_freq=2,
        checkpoint_at_end=True,
        keep_checkpoints_num=2,
        checkpoint_score_attr="total",
        local_dir=str(tmp_path),
        verbose=0,
        return_trials=True,
    )
    for trial in trials:
        dirs = sorted(d for d in os.listdir(trial.logdir) if d.startswith("checkpoint_"))
        assert dirs == ["checkpoint_000004", "checkpoint_000005"]
        assert trial.last_result["total"] == 5 * trial.config["inc"]
    analysis = tune.ExperimentAnalysis(str(tmp_path / "cls"))  # read back from disk
    best_trial = analysis.get_best_trial("total", "max")
    assert best_trial.config == {"inc": 2}
    best_ckpt = analysis.get_best_checkpoint(best_trial, "total", "max")
    assert os.path.basename(best_ckpt.path) == "checkpoint_000005"
    trials = tune.run(
        ClassicCounter,
        name="classic",
        stop={"training_iteration": 3},
        checkpoint_at_end=True,
        local_dir=str(tmp_path),
        verbose=0,
        return_trials=True,
    )
    [trial] = trials
    ckpt = os.path.join(trial.logdir, "checkpoint_000003")
    assert Path(ckpt, "total.txt").read_text() == "3"
    # restore= starts a new trial from that checkpoint.
    [again] = tune.run(
        ClassicCounter,
        name="restored",
        stop={"training_iteration": 5},
        restore=ckpt,
        local_dir=str(tmp_path),
        verbose=0,
        return_trials=True,
    )
    assert again.last_result["total"] == 5 and again.last_result["iterations_since_restore"] == 2


def test_reuse_actors_runs_many_trials_on_few_processes(tmp_path):
    def f(config):
        tune.report(pid=os.getpid(), x=config["x"])

    reused = tune.run(
        f,
        name="reuse",
        config={"x": tune.grid_search(list(range(8)))},
        local_dir=str(tmp_path),
        verbose=0,
        reuse_actors=True,
    )
    assert len({t.last_result["pid"] for t in reused}) <= 2
    # The actors' node address (looked up once per actor) is the one the driver sees.
    assert {t.last_result["node_ip"] for t in reused} == {get_node_ip_address()}
    fresh = tune.run(
        f,
        name="noreuse",
        config={"x": tune.grid_search(list(range(4)))},
        local_dir=str(tmp_path),
        verbose=0,
        reuse_actors=False,
    )
    assert len({t.last_result["pid"] for t in fresh}) == 4
    assert sorted(t.last_result["x"] for t in reused) == list(range(8))


class PickyCounter(Counter):
    """Takes a reused actor's next trial unless its config says no; marks each cleanup."""

    def step(self):
        return {**super().step(), "pid": os.getpid()}

    def reset_config(self, new_config):
        self.total = 0
        return not new_config["refuse"]

    def cleanup(self):
        Path(self.logdir, "cleaned").write_text(self.trial_id)


def test_reused_actors_switch_trials_in_one_call_and_refusals_get_new_actors(tmp_path):
    # Six trials on at most two actors at a time: each switch is one next_trial call
    # (stop, reset, train); a refused reset starts the trial on a fresh actor.
    trials = tune.run(
        PickyCounter,
        name="picky",
        config={"inc": tune.grid_search([1, 2, 3, 4, 5, 6]), "refuse": False},
        stop={"training_iteration": 2},
        local_dir=str(tmp_path),
        verbose=0,
        reuse_actors=True,
        return_trials=True,
    )
    assert sorted(t.last_result["total"] for t in trials) == [2, 4, 6, 8, 10, 12]
    assert len({t.last_result["pid"] for t in trials}) <= 2
    assert all(Path(t.logdir, "cleaned").read_text() == t.trial_id for t in trials)
    refused = tune.run(
        PickyCounter,
        name="refused",
        config={"inc": tune.grid_search([1, 2, 3, 4]), "refuse": True},
        stop={"training_iteration": 2},
        local_dir=str(tmp_path),
        verbose=0,
        reuse_actors=True,
        return_trials=True,
    )
    assert sorted(t.last_result["total"] for t in refused) == [2, 4, 6, 8]
    assert len({t.last_result["pid"] for t in refused}) == 4
    assert all(t.status == "TERMINATED" for t in refused)


def test_max_failures_restarts_from_the_last_checkpoint(tmp_path):
    marker = tmp_path / "crashed"

    class Crashy(Counter):
        def step(self):
            result = super().step()
            if self.iteration == 3 and not marker.exists():
                marker.write_text("x")
                os._exit(1)  # the actor's process dies
            return result

    [trial] = tune.run(
        Crashy,
        name="crashy",
        config={"inc": 1},
        stop={"training_iteration": 6},
        checkpoint_freq=2,
        max_failures=1,
        local_dir=str(tmp_path),
        verbose=0,
        return_trials=True,
    )
    assert trial.status == "TERMINATED" and trial.num_failures == 1
    assert trial.last_result["total"] == 6  # the state came back from checkpoint_000002
    assert trial.error_file and os.path.exists(trial.error_file)
    with pytest.raises(tune.TuneError, match="Trials did not complete"):
        tune.run(lambda config: 1 / 0, name="fails", local_dir=str(tmp_path), verbose=0)
    analysis = tune.run(
        lambda config: 1 / 0,
        name="fails2",
        local_dir=str(tmp_path),
        verbose=0,
        raise_on_failed_trial=False,
    )
    assert "ZeroDivisionError" in analysis.trials[0].error_msg


def test_asha_stops_poor_trials_early(tmp_path):
    def f(config):
        for i in range(1, 28):
            tune.report(acc=config["q"] * i)

    analysis = tune.run(
        f,
        name="asha",
        config={"q": tune.grid_search([1.0, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])},
        scheduler=ASHAScheduler(
            metric="acc", mode="max", max_t=27, grace_period=1, reduction_factor=3
        ),
        local_dir=str(tmp_path),
        verbose=0,
    )
    its = {t.config["q"]: t.last_result["training_iteration"] for t in analysis}
    assert its[1.0] == 27
    assert sum(its.values()) < 7 * 27 * 0.6
    assert analysis.get_best_config("acc", "max") == {"q": 1.0}


def test_hyperband_pauses_and_resumes_class_trials(tmp_path):
    analysis = tune.run(
        Counter,
        name="hb",
        config={"inc": tune.grid_search([1, 2, 3, 4, 5, 6, 7, 8])},
        scheduler=HyperBandScheduler(metric="total", mode="max", max_t=9),
        stop={"training_iteration": 9},
        local_dir=str(tmp_path),
        verbose=0,
    )
    its = sorted(t.last_result["training_iteration"] for t in analysis)
    assert its[-1] == 9
    for trial in analysis:  # paused and restored: the state went through checkpoints
        assert (
            trial.last_result["total"]
            == trial.config["inc"] * trial.last_result["training_iteration"]
        )


def test_pbt_exploits_through_checkpoints(tmp_path):
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        metric="total",
        mode="max",
        perturbation_interval=2,
        hyperparam_mutations={"inc": [1, 2, 4, 8, 16]},
        seed=0,
    )
    analysis = tune.run(
        Counter,
        name="pbt",
        config={"inc": tune.grid_search([1, 2, 8, 16])},
        scheduler=pbt,
        stop={"training_iteration": 10},
        local_dir=str(tmp_path),
        verbose=0,
    )
    assert pbt.num_perturbations > 0
    assert os.path.exists(tmp_path / "pbt" / "pbt_global.txt")
    perturbed = [t for t in analysis if "@perturbed" in t.experiment_tag]
    assert perturbed
    # An exploited trial continued from a better trial's state, beyond what its own
    # starting increment could reach in 10 iterations.
    assert max(t.last_result["total"] for t in perturbed) > 10 * 1


def test_with_parameters_passes_data_through_the_object_store(tmp_path):
    import numpy as np

    data = np.arange(100_000, dtype=np.float64)

    def f(config, data=None):
        tune.report(total=float(data.sum()) * config["k"])

    analysis = tune.run(
        tune.with_parameters(f, data=data),
        name="wp",
        config={"k": tune.grid_search([1, 2])},
        local_dir=str(tmp_path),
        verbose=0,
    )
    assert sorted(t.last_result["total"] for t in analysis) == [data.sum(), 2 * data.sum()]
    trainable = tune.with_resources(f, {"cpu": 2})
    assert trainable.default_resource_request({}) == {"cpu": 2}


def test_registered_trainable_and_run_experiments(tmp_path):
    tune.register_trainable("double", lambda config, reporter: reporter(v=config["a"] * 2))
    trials = tune.run_experiments(
        {
            "exp": {
                "run": "double",
                "config": {"a": tune.grid_search([1, 2])},
                "local_dir": str(tmp_path),
            },
        },
        verbose=0,
    )
    assert sorted(t.last_result["v"] for t in trials) == [2, 4]
    with pytest.raises(tune.TuneError, match="unknown trainable"):
        tune.run("not-registered", verbose=0)


def test_export_formats_write_the_model_and_a_checkpoint(tmp_path):
    class Exporting(Counter):
        def _export_model(self, export_formats, export_dir):
            path = os.path.join(export_dir, "model.txt")
            with open(path, "w") as f:
                f.write(str(self.total))
            return {"model": path}

    [trial] = tune.run(
        Exporting,
        name="export",
        config={"inc": 2},
        stop={"training_iteration": 3},
        export_formats=["model", "checkpoint"],
        local_dir=str(tmp_path),
        verbose=0,
        return_trials=True,
    )
    export = Path(trial.logdir, "export")
    assert (export / "model.txt").read_text() == "6"
    assert (export / "checkpoint_3" / ".tune_metadata.json").exists()


def test_trial_name_creator_pinned_objects_and_custom_loggers(tmp_path):
    from rayfield.tune.logger import DEFAULT_LOGGERS, Logger
    from rayfield.tune.util import get_pinned_object, pin_in_object_store

    seen: list[float] = []

    class Collect(Logger):
        def on_result(self, result):
            seen.append(result["v"])

    pinned = pin_in_object_store(list(range(1000)))

    def f(config):
        tune.report(v=float(sum(get_pinned_object(pinned))) * config["a"])

    trials = tune.run(
        f,
        name="named",
        config={"a": tune.grid_search([1, 2])},
        trial_name_creator=lambda t: f"custom_{t.config['a']}",
        loggers=(*DEFAULT_LOGGERS, Collect),
        local_dir=str(tmp_path),
        verbose=2,
        return_trials=True,
    )
    assert [str(t) for t in trials] == ["custom_1", "custom_2"]
    assert all(os.path.basename(t.logdir).startswith(str(t)) for t in trials)
    assert sorted(seen) == [499500.0, 999000.0]


def test_time_budget_stops_the_experiment(tmp_path):
    import time

    def forever(config):
        while True:
            time.sleep(0.02)
            tune.report(x=1)

    analysis = tune.run(  # returns (a run past the budget would hit pytest's timeout)
        forever, name="budget", num_samples=3, time_budget_s=1.5, local_dir=str(tmp_path), verbose=0
    )
    assert all(t.status == "TERMINATED" for t in analysis)


def test_bohb_runs_class_trials_through_its_hyperband(tmp_path):
    from rayfield.tune.schedulers import HyperBandForBOHB
    from rayfield.tune.search.bohb import TuneBOHB

    searcher = TuneBOHB(metric="total", mode="max", seed=0)
    analysis = tune.run(
        Counter,
        name="bohb",
        config={"inc": tune.uniform(0, 10)},
        search_alg=searcher,
        scheduler=HyperBandForBOHB(metric="total", mode="max", max_t=9),
        num_samples=12,
        local_dir=str(tmp_path),
        verbose=0,
    )
    trials = list(analysis)
    assert len(trials) == 12 and all(t.status == "TERMINATED" for t in trials)
    assert max(t.last_result["training_iteration"] for t in trials) == 9
    for trial in trials:  # paused and restored through checkpoints; labelled by budget
        r = trial.last_result
        assert r["total"] == pytest.approx(trial.config["inc"] * r["training_iteration"])
        assert r["hyperband_info"]["budget"] >= r["training_iteration"]
    assert 1.0 in searcher._observations  # the first bracket's budget, one per trial
