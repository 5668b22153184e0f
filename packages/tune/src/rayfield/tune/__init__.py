"""rayfield.tune: hyperparameter search over a rayfield cluster (the Ray Tune API).

    from rayfield import tune

    def objective(config):
        for step in range(10):
            tune.report({"score": config["x"] * step})

    results = tune.Tuner(
        objective,
        param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=8),
    ).fit()
    print(results.get_best_result().config)

The classic spelling works too: ``tune.run(fn, config=..., stop=..., scheduler=...)``
with ``def fn(config, reporter)`` or ``tune.track.log(...)``.
"""

from __future__ import annotations

from rayfield.tune import schedulers, search, track
from rayfield.tune.analysis import ExperimentAnalysis, Result, ResultGrid
from rayfield.tune.callback import Callback
from rayfield.tune.checkpoint import Checkpoint
from rayfield.tune.error import TuneError
from rayfield.tune.experiment import Experiment
from rayfield.tune.registry import register_env, register_trainable
from rayfield.tune.search.sample import (
    choice,
    function,
    grid_search,
    lograndint,
    loguniform,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)
from rayfield.tune.session import (
    StatusReporter,
    get_checkpoint,
    get_trial_dir,
    get_trial_id,
    get_trial_name,
    report,
)
from rayfield.tune.stopper import Stopper
from rayfield.tune.trainable import Trainable
from rayfield.tune.trial import Trial
from rayfield.tune.tune import run, run_experiments
from rayfield.tune.tuner import CheckpointConfig, FailureConfig, RunConfig, TuneConfig, Tuner
from rayfield.tune.utils import with_parameters, with_resources

__version__ = "0.1.0"

__all__ = [
    "Callback",
    "Checkpoint",
    "CheckpointConfig",
    "Experiment",
    "ExperimentAnalysis",
    "FailureConfig",
    "Result",
    "ResultGrid",
    "RunConfig",
    "StatusReporter",
    "Stopper",
    "Trainable",
    "Trial",
    "TuneConfig",
    "TuneError",
    "Tuner",
    "choice",
    "function",
    "get_checkpoint",
    "get_trial_dir",
    "get_trial_id",
    "get_trial_name",
    "grid_search",
    "lograndint",
    "loguniform",
    "qloguniform",
    "qrandint",
    "qrandn",
    "quniform",
    "randint",
    "randn",
    "register_env",
    "register_trainable",
    "report",
    "run",
    "run_experiments",
    "sample_from",
    "schedulers",
    "search",
    "track",
    "uniform",
    "with_parameters",
    "with_resources",
]
