"""``rllib train`` through rayfield-tune (the optional extra ``rayfield-rllib[tune]``).

`rayfield.rllib.scripts` sends a run here when it needs Tune: ``--num-samples > 1``, a
Tune-only flag (`TUNE_FLAGS`), a YAML experiment with a Tune-only key (`TUNE_SPEC_KEYS`),
or a ``grid_search`` / ``eval`` value in its config. Each experiment becomes the
reference's spec (``{"run", "checkpoint_freq", "checkpoint_at_end", "local_dir",
"resources_per_trial", "stop", "config": dict(config, env=env), "restore", "num_samples",
"upload_dir", "keep_checkpoints_num", "checkpoint_score_attr", "max_failures"}``) and runs
with ``rayfield.tune.run_experiments``; a summary line per trial follows.

Tune runs each trial as a ``tune.Trainable`` actor: `make_trainable`
(`rayfield.rllib.tune_wrapper`, exported here too) wraps an rllib trainer in one (train,
save into Tune's checkpoint directory, restore, export, stop) and `run_with_tune`
registers it under the algorithm's name. Only rayfield-tune's public API is used.

No file of an experiment or checkpoint directory is unpickled here: a checkpoint is
restored from rllib's own files (JSON and tensors read with ``weights_only=True``, each
checked to be this user's alone), never from the pickled ``.tune_metadata`` Tune keeps
beside them. So ``--restore`` is not handed to Tune (whose driver would unpickle that
file): each trial's trainable restores the checkpoint itself when it starts. Tune's own
``--resume`` still reads the pickles Tune wrote (``params.pkl``, ``.tune_metadata``):
resume only experiments you wrote.
"""

from __future__ import annotations

import importlib
import inspect
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from rayfield.rllib.tune_wrapper import checkpoint_blob, make_trainable

__all__ = [
    "INSTALL_HINT",
    "SCHEDULERS",
    "TUNE_FLAGS",
    "TUNE_SPEC_KEYS",
    "checkpoint_blob",
    "import_tune",
    "make_scheduler",
    "make_trainable",
    "restore_path",
    "run_with_tune",
    "tune_reason",
]

INSTALL_HINT = "pip install 'rayfield-rllib[tune]'"

#: ``rllib train`` options that only Tune runs (click parameter name -> flag).
TUNE_FLAGS = {
    "resources_json": "--resources-per-trial",
    "upload_dir": "--upload-dir",
    "keep_checkpoints_num": "--keep-checkpoints-num",
    "checkpoint_score_attr": "--checkpoint-score-attr",
    "max_failures": "--max-failures",
    "export_formats": "--export-formats",
    "scheduler": "--scheduler",
    "scheduler_json": "--scheduler-config",
    "resume": "--resume",
    "queue_trials": "--queue-trials",
}

#: Experiment-spec keys (YAML or flags) that only Tune runs.
TUNE_SPEC_KEYS = (
    "resources_per_trial",
    "upload_dir",
    "keep_checkpoints_num",
    "checkpoint_score_attr",
    "max_failures",
    "export_formats",
)

#: ``--scheduler`` names -> ``rayfield.tune.schedulers`` classes (HyperOpt is a searcher).
SCHEDULERS = {
    "FIFO": "FIFOScheduler",
    "MedianStopping": "MedianStoppingRule",
    "AsyncHyperBand": "AsyncHyperBandScheduler",
    "HyperBand": "HyperBandScheduler",
}
HYPEROPT = "HyperOpt"

DEFAULT_MAX_FAILURES = 3
DEFAULT_SCORE_ATTR = "training_iteration"
DEFAULT_METRIC = "episode_reward_mean"  # what the schedulers rank by unless told


def import_tune() -> Any | None:
    """``rayfield.tune``, or None when rayfield-tune is not installed."""
    try:
        return importlib.import_module("rayfield.tune")
    except ImportError:
        return None


def has_search_space(value: Any) -> bool:
    """Whether a config holds a Tune search space: ``{"grid_search": [...]}``,
    ``{"eval": "..."}`` or a Tune domain object, at any depth."""
    if isinstance(value, dict):
        if len(value) == 1 and ("grid_search" in value or "eval" in value):
            return True
        return any(has_search_space(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_search_space(v) for v in value)
    return type(value).__module__.startswith("rayfield.tune.")


def spec_flags(flags: dict[str, Any], resources: dict[str, Any]) -> dict[str, Any]:
    """The experiment-spec keys of the Tune-only flags given (``--resources-per-trial``,
    ``--upload-dir``, ``--keep-checkpoints-num``, ``--checkpoint-score-attr``,
    ``--max-failures``, ``--export-formats``).

    Raises:
        click.BadParameter: an unknown export format.
    """
    out: dict[str, Any] = {
        "resources_per_trial": resources or None,
        "upload_dir": flags["upload_dir"],
        "keep_checkpoints_num": flags["keep_checkpoints_num"],
        "checkpoint_score_attr": flags["checkpoint_score_attr"],
        "max_failures": flags["max_failures"],
    }
    if flags["export_formats"]:
        formats = [f.strip().lower() for f in flags["export_formats"].split(",") if f.strip()]
        for fmt in formats:
            if fmt not in ("checkpoint", "model"):
                raise click.BadParameter(
                    f"unknown format {fmt!r}: use 'checkpoint' and/or 'model'",
                    param_hint="--export-formats",
                )
        out["export_formats"] = formats
    return {k: v for k, v in out.items() if v is not None}


def flags_given(flags: dict[str, Any]) -> list[str]:
    """The Tune-only flags given on the command line (`TUNE_FLAGS` spellings)."""
    given = [name for name, value in flags.items() if value is not None and value is not False]
    return [flag for name, flag in TUNE_FLAGS.items() if name in given]


def tune_options(command: Any) -> Any:
    """Add the Tune-only options of ``rllib train`` (`TUNE_FLAGS`) to ``command``."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


_OPTIONS = [
    click.option(
        "--resources-per-trial",
        "resources_json",
        default=None,
        help='Tune: a trial\'s resources, e.g. \'{"cpu": 2, "gpu": 0}\' (replaces the '
        "trainer's own request from num_workers, num_gpus...).",
    ),
    click.option(
        "--upload-dir", default=None, help="Tune: a URI (file://, s3://) to copy results to."
    ),
    click.option(
        "--keep-checkpoints-num", type=int, default=None, help="Tune: keep the N best checkpoints."
    ),
    click.option(
        "--checkpoint-score-attr",
        default=None,
        help="Tune: the result key ranking checkpoints [default: training_iteration]; a 'min-' "
        "prefix ranks smaller values higher.",
    ),
    click.option(
        "--max-failures",
        type=int,
        default=None,
        help="Tune: restarts of a failing trial from its last checkpoint [default: 3].",
    ),
    click.option(
        "--scheduler",
        type=click.Choice(["FIFO", "MedianStopping", "AsyncHyperBand", "HyperBand", "HyperOpt"]),
        default=None,
        help="Tune: the trial scheduler [default: FIFO]; HyperOpt is Tune's HyperOptSearch "
        "(needs hyperopt).",
    ),
    click.option(
        "--scheduler-config",
        "scheduler_json",
        default=None,
        help="Tune: the scheduler's arguments (JSON); the metric defaults to "
        "episode_reward_mean (max).",
    ),
    click.option("--resume", is_flag=True, help="Tune: continue the experiment in --local-dir."),
    click.option(
        "--queue-trials",
        is_flag=True,
        help="Tune: start a trial the cluster cannot hold yet (ignored if rayfield-tune lacks it).",
    ),
    click.option(
        "--export-formats",
        default=None,
        help="Tune: export each trial's policy at its end into <trial>/export: 'model' (the "
        "model's state dict), 'checkpoint' (the policy state), comma-separated.",
    ),
]


def tune_reason(experiments: dict[str, Any], flags_given: list[str]) -> str | None:
    """Why this run needs Tune (a flag or a key to name in messages), or None."""
    if flags_given:
        return flags_given[0]
    for name, spec in experiments.items():
        if int(spec.get("num_samples") or 1) != 1:
            return "--num-samples > 1"
        for key in TUNE_SPEC_KEYS:
            if spec.get(key) is not None:
                return f"{key!r} (experiment {name!r})"
        if has_search_space(spec.get("config")):
            return f"a grid_search or sampled value in the config of {name!r}"
    return None


def make_scheduler(tune: Any, name: str | None, config: dict[str, Any]) -> tuple[Any, Any]:
    """``(scheduler, search_alg)`` for ``--scheduler NAME --scheduler-config JSON``.

    Schedulers other than FIFO rank trials by ``episode_reward_mean`` (max) unless the
    config names ``metric`` (or the classic ``reward_attr``).

    Raises:
        click.BadParameter: an unknown name, or a config the class rejects.
        click.UsageError: HyperOpt without the hyperopt package.
    """
    name = name or "FIFO"
    kwargs = dict(config)
    if name != "FIFO" and "metric" not in kwargs and "reward_attr" not in kwargs:
        kwargs["metric"] = DEFAULT_METRIC
    if "metric" in kwargs:
        kwargs.setdefault("mode", "max")
    if name == HYPEROPT:
        return None, _hyperopt(kwargs)
    cls_name = SCHEDULERS.get(name)
    if cls_name is None:
        choices = ", ".join([*SCHEDULERS, HYPEROPT])
        raise click.BadParameter(f"{name!r} is not one of {choices}", param_hint="--scheduler")
    cls = getattr(tune.schedulers, cls_name)
    try:
        return cls(**kwargs), None
    except (TypeError, ValueError, tune.TuneError) as exc:
        raise click.BadParameter(f"{name}: {exc}", param_hint="--scheduler-config") from None


def _hyperopt(kwargs: dict[str, Any]) -> Any:
    """rayfield-tune's HyperOptSearch (its space: the config's Tune domains)."""
    try:
        from rayfield.tune.search.hyperopt import HyperOptSearch

        return HyperOptSearch(**kwargs)
    except ImportError as exc:
        raise click.UsageError(f"--scheduler HyperOpt: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise click.BadParameter(f"HyperOpt: {exc}", param_hint="--scheduler-config") from None


def experiment_basics(spec: dict[str, Any], verbose: int) -> tuple[str, str, dict[str, Any]]:
    """``(run, env, config)`` of an ``rllib train`` experiment; ``-v`` / ``-vv`` set the
    config's ``log_level``.

    Raises:
        click.UsageError: no ``--run``, or no ``--env`` (nor ``config.env``).
    """
    config = dict(spec.get("config") or {})
    run, env = spec.get("run"), spec.get("env") or config.get("env")
    if not run:
        raise click.UsageError("the following arguments are required: --run (or --algo)")
    if not env:
        raise click.UsageError("the following arguments are required: --env")
    if verbose:
        config["log_level"] = "DEBUG" if verbose > 1 else "INFO"
    return run, env, config


def tune_spec(spec: dict[str, Any], verbose: int) -> dict[str, Any]:
    """The reference's Tune experiment spec for one ``rllib train`` experiment.

    Raises:
        click.UsageError: no ``--run`` / ``--env``, or an unknown algorithm.
    """
    run, env, config = experiment_basics(spec, verbose)
    from rayfield.rllib.agents.registry import get_trainer_class

    try:
        get_trainer_class(run)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    extra = {k: v for k, v in spec.items() if k != "env"}  # other Experiment keys of a YAML
    return {
        **extra,
        "run": run,
        "checkpoint_freq": int(spec.get("checkpoint_freq") or 0),
        "checkpoint_at_end": bool(spec.get("checkpoint_at_end")),
        "local_dir": os.path.expanduser(spec.get("local_dir") or "~/ray_results"),
        "resources_per_trial": spec.get("resources_per_trial"),
        "stop": dict(spec.get("stop") or {}),
        "config": dict(config, env=env),
        "restore": None,  # the trainable restores it (`restore_path`), not Tune
        "num_samples": int(spec.get("num_samples") or 1),
        "upload_dir": spec.get("upload_dir"),
        "keep_checkpoints_num": spec.get("keep_checkpoints_num"),
        "checkpoint_score_attr": spec.get("checkpoint_score_attr") or DEFAULT_SCORE_ATTR,
        "max_failures": int(
            DEFAULT_MAX_FAILURES if spec.get("max_failures") is None else spec["max_failures"]
        ),
    }


def restore_path(spec: dict[str, Any]) -> str | None:
    """The rllib checkpoint an ``rllib train`` experiment starts from (``--restore``), as
    an absolute path (the trials' actors run in their own directories)."""
    restore = spec.get("restore")
    return os.path.abspath(os.path.expanduser(restore)) if restore else None


@contextmanager
def _runtime(init_options: dict[str, Any]) -> Iterator[None]:
    """A local rayfield runtime for the run unless this process is already connected
    (then it is left as it is); one started here is shut down at the end."""
    import rayfield

    if rayfield.is_initialized():
        yield
        return
    from rayfield.rllib.utils import preload

    rayfield.init(**preload.init_options(), **init_options)
    try:
        yield
    finally:
        rayfield.shutdown()


def run_with_tune(
    tune: Any,
    experiments: dict[str, Any],
    *,
    scheduler: str | None,
    scheduler_config: dict[str, Any],
    resume: bool,
    queue_trials: bool,
    verbose: int,
    init_options: dict[str, Any],
) -> list[Any]:
    """Run every experiment with ``tune.run_experiments`` (one after the other), print a
    line per trial, and return the trials.

    Raises:
        click.UsageError: a bad spec or flag (Tune's message).
        click.ClickException: a trial ended in error (its error file is named).
    """
    from rayfield.rllib import tune_trainables

    specs = {name: tune_spec(spec, verbose) for name, spec in experiments.items()}
    sched, search_alg = make_scheduler(tune, scheduler, scheduler_config)
    kwargs: dict[str, Any] = {}
    if queue_trials and "queue_trials" in inspect.signature(tune.run).parameters:
        kwargs["queue_trials"] = True
    start = time.time()
    trials: list[Any] = []
    with _runtime(init_options):
        for name, spec in specs.items():
            own_resources = spec["resources_per_trial"] is None  # the trainer's own request
            restore = restore_path(experiments[name])
            by_name = getattr(tune_trainables, spec["run"])
            trainable = (
                by_name
                if own_resources and restore is None
                else make_trainable(tune, spec["run"], own_resources, restore)
            )
            tune.register_trainable(spec["run"], trainable)
            try:
                trials += tune.run_experiments(
                    {name: spec},
                    scheduler=sched,
                    search_alg=search_alg,
                    resume=resume,
                    verbose=1 + min(verbose, 1),
                    raise_on_failed_trial=False,
                    **kwargs,
                )
            except (tune.TuneError, TypeError, ValueError) as exc:
                raise click.UsageError(f"experiment {name!r}: {exc}") from None
            finally:  # a later tune.run("PPO") in this process gets the plain class back
                tune.register_trainable(spec["run"], by_name)
    _print_summary(trials, time.time() - start)
    failed = [t for t in trials if t.status == tune.Trial.ERROR]
    if failed:
        files = ", ".join(str(t.error_file) for t in failed)
        raise click.ClickException(f"{len(failed)} of {len(trials)} trials failed: see {files}")
    return trials


def _last_checkpoint(trial: Any) -> str | None:
    """The ``checkpoint-<N>`` file of a trial's latest kept disk checkpoint."""
    kept = [c for c in trial.disk_checkpoints if c.value and os.path.isdir(str(c.value))]
    if not kept:
        return None
    latest = max(kept, key=lambda c: c.result.get("training_iteration", 0))
    files = sorted(Path(str(latest.value)).glob("checkpoint-*"))
    return str(files[0] if files else latest.value)


def _print_summary(trials: list[Any], wall_s: float) -> None:
    """One line per trial: name, status, reward, iterations, checkpoint."""
    for trial in trials:
        result = trial.last_result or {}
        reward = result.get("episode_reward_mean")
        shown = f"{reward:.2f}" if isinstance(reward, (int, float)) else "n/a"
        line = (
            f"trial {trial}: {trial.status}, episode_reward_mean {shown}, "
            f"{result.get('training_iteration', 0)} iterations, dir {trial.logdir}"
        )
        checkpoint = _last_checkpoint(trial)
        if checkpoint:
            line += f", checkpoint {checkpoint}"
        click.echo(line)
        if checkpoint:
            from rayfield.rllib.result_files import evaluate_command

            run = getattr(trial, "trainable_name", None) or "ALGO"
            env = (getattr(trial, "config", None) or {}).get("env", "ENV")
            click.echo(f"evaluate with: {evaluate_command(checkpoint, run, env)}")
    click.echo(f"tune: {len(trials)} trials, {wall_s:.1f} s wall")
