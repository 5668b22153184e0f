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

from rayfield.tune import track
from rayfield.tune.callback import Callback
from rayfield.tune.checkpoint import Checkpoint
from rayfield.tune.error import TuneError
from rayfield.tune.lazy import lazy_getattr
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

# The driver's side (runner, executor, loggers, analysis, schedulers, searchers) is
# imported on first use: a trial's actor imports this package to run its trainable and
# needs none of it, so actors start faster.
__getattr__ = lazy_getattr(
    __name__,
    {
        "schedulers": "rayfield.tune.schedulers",
        "search": "rayfield.tune.search",
        "ExperimentAnalysis": "rayfield.tune.analysis:ExperimentAnalysis",
        "Result": "rayfield.tune.analysis:Result",
        "ResultGrid": "rayfield.tune.analysis:ResultGrid",
        "Experiment": "rayfield.tune.experiment:Experiment",
        "register_env": "rayfield.tune.registry:register_env",
        "register_trainable": "rayfield.tune.registry:register_trainable",
        "Trial": "rayfield.tune.trial:Trial",
        "PlacementGroupFactory": "rayfield.tune.placement_groups:PlacementGroupFactory",
        "TrainableProtocol": "rayfield.tune.contract:TrainableProtocol",
        "as_trainable": "rayfield.tune.contract:as_trainable",
        "run": "rayfield.tune.tune:run",
        "run_experiments": "rayfield.tune.tune:run_experiments",
        "CheckpointConfig": "rayfield.tune.tuner:CheckpointConfig",
        "FailureConfig": "rayfield.tune.tuner:FailureConfig",
        "RunConfig": "rayfield.tune.tuner:RunConfig",
        "SyncConfig": "rayfield.tune.syncer:SyncConfig",
        "Syncer": "rayfield.tune.syncer:Syncer",
        "TuneConfig": "rayfield.tune.tuner:TuneConfig",
        "UntrustedPickleError": "rayfield.tune.pickles:UntrustedPickleError",
        "Tuner": "rayfield.tune.tuner:Tuner",
        "with_parameters": "rayfield.tune.utils:with_parameters",
        "with_resources": "rayfield.tune.utils:with_resources",
    },
)

__version__ = "0.1.0"

__all__ = [
    "Callback",
    "Checkpoint",
    "CheckpointConfig",
    "Experiment",
    "ExperimentAnalysis",
    "FailureConfig",
    "PlacementGroupFactory",
    "Result",
    "ResultGrid",
    "RunConfig",
    "StatusReporter",
    "Stopper",
    "SyncConfig",
    "Syncer",
    "Trainable",
    "TrainableProtocol",
    "Trial",
    "TuneConfig",
    "TuneError",
    "Tuner",
    "UntrustedPickleError",
    "as_trainable",
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
