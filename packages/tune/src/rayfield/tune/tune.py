"""``tune.run`` and ``tune.run_experiments``: run an experiment to completion.

``tune.run`` keeps its reference signature and builds a
:class:`~rayfield.tune.run_options.RunOptions` from its arguments; :func:`run_with` puts
the experiment together: the :class:`~rayfield.tune.runner.TrialRunner` decides, the
:class:`~rayfield.tune.executor.ActorExecutor` runs trials as actors and returns their
results in batches, loggers write each trial's files, and the
:class:`~rayfield.tune.driver_loop.DriverLoop` feeds one to the other and saves the
experiment's state (set up by :mod:`rayfield.tune.experiment_setup`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import rayfield
from rayfield.tune import dashboard
from rayfield.tune.analysis import ExperimentAnalysis
from rayfield.tune.callback import Callback
from rayfield.tune.driver_loop import DriverLoop, cluster_resources
from rayfield.tune.error import TuneError
from rayfield.tune.executor import _supports_reset
from rayfield.tune.experiment import Experiment, convert_to_experiment_list
from rayfield.tune.experiment_setup import set_up
from rayfield.tune.function_trainable import FunctionTrainable
from rayfield.tune.logger_callback import LoggerCallback
from rayfield.tune.progress import CLIReporter
from rayfield.tune.run_options import RunOptions
from rayfield.tune.runner import TrialRunner
from rayfield.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler
from rayfield.tune.search.search_algorithm import (
    BasicVariantGenerator,
    SearchAlgorithm,
    SearchGenerator,
)
from rayfield.tune.search.searcher import Searcher
from rayfield.tune.stopper import TimeoutStopper, _Combined
from rayfield.tune.syncer import SyncConfig
from rayfield.tune.trial import Trial
from rayfield.tune.writer import BackgroundWriter

__all__ = ["run", "run_experiments", "run_with"]

log = logging.getLogger(__name__)


def run(
    run_or_experiment: Any,
    name: str | None = None,
    metric: str | None = None,
    mode: str | None = None,
    stop: Any = None,
    time_budget_s: float | None = None,
    config: dict[str, Any] | None = None,
    resources_per_trial: Any = None,
    num_samples: int = 1,
    local_dir: str | None = None,
    storage_path: str | None = None,
    search_alg: SearchAlgorithm | Searcher | None = None,
    scheduler: TrialScheduler | None = None,
    keep_checkpoints_num: int | None = None,
    checkpoint_score_attr: str | None = None,
    checkpoint_freq: int = 0,
    checkpoint_at_end: bool = False,
    verbose: int = 2,
    loggers: Sequence[Any] | None = None,
    callbacks: Sequence[Callback] | None = None,
    trial_name_creator: Callable[[Trial], str] | None = None,
    max_failures: int = 0,
    restore: str | None = None,
    resume: bool | str = False,
    reuse_actors: bool | None = None,
    raise_on_failed_trial: bool = True,
    return_trials: bool = False,
    max_concurrent_trials: int | None = None,
    upload_dir: str | None = None,
    sync_to_cloud: Any = None,
    sync_function: Any = None,
    sync_config: SyncConfig | None = None,
    sync_to_driver: Any = None,
    export_formats: Any = None,
    queue_trials: bool = False,
    global_checkpoint_period: float | None = None,
    with_server: bool = False,
    server_port: int = 4321,
    ray_auto_init: bool = True,
    trusted: bool = False,
    **unsupported: Any,
) -> Any:
    """Run one experiment until every trial ends; blocks.

    Args:
        run_or_experiment: a function (``f(config)``, ``f(config, reporter)``), a
            Trainable class, a registered name, or an :class:`Experiment`.
        name: the experiment's directory name (default: the trainable's name).
        metric, mode: the default metric and ``"min"``/``"max"`` for schedulers,
            searchers and the returned analysis.
        stop: ``{metric: threshold}``, ``f(trial_id, result) -> bool`` or a ``Stopper``.
        time_budget_s: stop the whole experiment after this many seconds (> 0, or a
            ``datetime.timedelta``).
        config: the search space.
        resources_per_trial: ``{"cpu": 1, "gpu": 0, "extra_cpu": 0, <custom>: n}``.
        num_samples: how often the space is sampled (a grid is repeated).
        local_dir, storage_path: results root (default ``~/rayfield_results``).
        search_alg: a SearchAlgorithm or a Searcher (default grid/random search).
        scheduler: a TrialScheduler instance (default FIFO; a name such as ``"asha"`` is
            not resolved).
        keep_checkpoints_num, checkpoint_score_attr, checkpoint_freq, checkpoint_at_end:
            the checkpoint policy of every trial.
        verbose: 0 silent, 1 status table, 2 also results.
        loggers: Logger classes per trial (default JSON, CSV, TensorBoard if installed).
        callbacks: more :class:`Callback` objects.
        trial_name_creator: ``f(trial) -> str``.
        max_failures: restarts of a failing trial (from its last checkpoint); -1 unlimited.
        restore: a checkpoint directory the (single) trial starts from.
        resume: True continues the experiment saved in ``<local_dir>/<name>``;
            ``"PROMPT"`` asks; False starts afresh.
        reuse_actors: hand finished trials' actors to new trials (default: on for
            function trainables and Trainables that define ``reset_config``).
        raise_on_failed_trial: raise TuneError if a trial ends in ERROR.
        return_trials: return the list of trials instead of the analysis.
        max_concurrent_trials: at most this many trials at once.
        queue_trials: when nothing runs, launch a trial the cluster cannot hold yet (its
            actor waits for resources, e.g. from an autoscaler) instead of failing.
        export_formats: ``"checkpoint"`` and/or ``"model"``, exported into
            ``<trial dir>/export`` when a trial ends.
        global_checkpoint_period: seconds between state saves (default adaptive).
        upload_dir: a URI (``file://...``, ``s3://bucket/prefix``) that keeps a copy of
            the experiment directory at ``<upload_dir>/<name>`` (see
            :mod:`rayfield.tune.syncer`); with ``resume=True`` and no local state, the
            experiment is first downloaded from there.
        sync_to_cloud, sync_function: how to copy (``sync_function`` is the 0.7 name):
            a command template with ``{source}`` and ``{target}`` (or ``{local_dir}`` and
            ``{remote_dir}``), a function ``f(source, target)`` or a ``Syncer``; default:
            built in for ``file://`` and ``s3://``.
        sync_config: the modern form of the three (``SyncConfig(upload_dir=...,
            syncer=..., sync_period=...)``).
        sync_to_driver: how files a trial writes on another node reach the driver's
            trial directory: None/True copies them through the cluster (while the trial
            runs, after each checkpoint and every ``sync_config.sync_period`` seconds
            (default 300), and when it ends), False does not, a command template
            (``{source}`` is ``<node ip>:<dir>``, ``{target}`` the driver's dir) or a
            function ``f(source, target)`` does it at the same moments (see
            :mod:`rayfield.tune.driver_sync`).
        with_server, server_port: serve the trials over REST on loopback (see
            :mod:`rayfield.tune.web_server`; 0 picks a free port).
        trusted: the experiment directory (with ``resume``) and the ``restore``
            checkpoint are yours, so Tune may load the pickles in them: a trial's
            ``params.pkl`` (a config JSON cannot hold: functions, classes, tuples...),
            a checkpoint dict saved as ``checkpoint_dict.pkl``, the pickled
            ``.tune_metadata`` of older checkpoints. Without it, a resume or restore
            that needs one raises :class:`~rayfield.tune.pickles.UntrustedPickleError`
            (loading a pickle runs any code its author put in it). Checkpoints this run
            wrote itself need no opt-in.

    Returns:
        An :class:`ExperimentAnalysis` (iterating it gives the trials, as the classic
        list), or the list of trials with ``return_trials=True``.

    Raises:
        TuneError: failed trials (with ``raise_on_failed_trial``), bad arguments, a stop
            criterion missing from the results, or a trial that needs more resources than
            the cluster has.
        ValueError: ``time_budget_s`` not > 0 (or NaN), ``max_failures`` below -1, an
            empty ``grid_search``.
        TypeError: ``scheduler`` not a TrialScheduler, ``search_alg`` not a Searcher or
            SearchAlgorithm, ``time_budget_s`` not a number or timedelta.
        UntrustedPickleError: (a TuneError) ``resume`` or ``restore`` needs a pickle and
            ``trusted`` is False.
        UnsafeFileError: the experiment directory (made mode 0700) or a file Tune keeps
            in it is not this user's alone.
    """
    if unsupported:
        raise TuneError(
            f"tune.run() got arguments rayfield-tune does not support: {sorted(unsupported)}"
        )
    options = RunOptions(
        name=name,
        metric=metric,
        mode=mode,
        stop=stop,
        time_budget_s=time_budget_s,
        config=config,
        resources_per_trial=resources_per_trial,
        num_samples=num_samples,
        local_dir=local_dir,
        storage_path=storage_path,
        search_alg=search_alg,
        scheduler=scheduler,
        keep_checkpoints_num=keep_checkpoints_num,
        checkpoint_score_attr=checkpoint_score_attr,
        checkpoint_freq=checkpoint_freq,
        checkpoint_at_end=checkpoint_at_end,
        verbose=verbose,
        loggers=loggers,
        callbacks=callbacks,
        trial_name_creator=trial_name_creator,
        max_failures=max_failures,
        restore=restore,
        resume=resume,
        reuse_actors=reuse_actors,
        raise_on_failed_trial=raise_on_failed_trial,
        return_trials=return_trials,
        max_concurrent_trials=max_concurrent_trials,
        upload_dir=upload_dir,
        sync_to_cloud=sync_to_cloud,
        sync_function=sync_function,
        sync_config=sync_config,
        sync_to_driver=sync_to_driver,
        export_formats=export_formats,
        queue_trials=queue_trials,
        global_checkpoint_period=global_checkpoint_period,
        with_server=with_server,
        server_port=server_port,
        ray_auto_init=ray_auto_init,
        trusted=trusted,
    )
    return run_with(run_or_experiment, options)


def run_with(run_or_experiment: Any, options: RunOptions) -> Any:
    """Run one experiment with ``options`` (what :func:`run` does with its arguments).

    Raises:
        TuneError, UntrustedPickleError, UnsafeFileError: as :func:`run`.
    """
    o = options
    if isinstance(run_or_experiment, Experiment):
        experiment = run_or_experiment
    else:
        experiment = Experiment(
            o.name,
            run_or_experiment,
            stop=o.stop,
            config=o.config,
            resources_per_trial=o.resources_per_trial,
            num_samples=o.num_samples,
            local_dir=o.storage_path or o.local_dir,
            trial_name_creator=o.trial_name_creator,
            loggers=o.loggers,
            checkpoint_freq=o.checkpoint_freq,
            checkpoint_at_end=o.checkpoint_at_end,
            keep_checkpoints_num=o.keep_checkpoints_num,
            checkpoint_score_attr=o.checkpoint_score_attr,
            export_formats=o.export_formats,
            max_failures=o.max_failures,
            restore=o.restore,
            upload_dir=o.upload_uri,
            sync_function=o.cloud_syncer,
        )
    if o.ray_auto_init and not rayfield.is_initialized():
        rayfield.init()
    search_alg: Any = o.search_alg
    if search_alg is None:
        search_alg = BasicVariantGenerator(max_concurrent=o.max_concurrent_trials or 0)
    elif isinstance(search_alg, Searcher):
        if o.max_concurrent_trials:
            from rayfield.tune.search.searcher import ConcurrencyLimiter

            search_alg = ConcurrencyLimiter(search_alg, o.max_concurrent_trials)
        search_alg = SearchGenerator(search_alg)
    scheduler = o.scheduler or FIFOScheduler()
    scheduler.set_search_properties(o.metric, o.mode)
    search_alg.set_search_properties(o.metric, o.mode)
    stopper = experiment.stopper
    if o.budget_s is not None:
        timeout = TimeoutStopper(o.budget_s)
        stopper = _Combined(stopper, timeout) if stopper else timeout
    is_function = issubclass(experiment.trainable_cls, FunctionTrainable)
    reuse_actors = o.reuse_actors
    if reuse_actors is None:  # on when the trainable can take another trial's config
        reuse_actors = is_function or _supports_reset(experiment.trainable_cls)
    buffer = (
        1000
        if (is_function and scheduler.buffers_results() and not experiment.checkpoint_freq)
        else 1
    )
    reporter = CLIReporter(o.verbose) if o.verbose else None
    writer = BackgroundWriter(held=True)  # released while the loop waits for results
    all_callbacks: list[Callback] = [LoggerCallback(experiment.loggers, writer=writer)]
    if reporter is not None:
        all_callbacks.append(reporter)
    all_callbacks += list(o.callbacks or [])
    if dashboard.enabled():  # a driver of a cluster: the dashboard's Tune page shows it
        all_callbacks.append(
            dashboard.DashboardPublisher(experiment.name, experiment.path, o.metric, o.mode)
        )
    runner = TrialRunner(
        search_alg,
        scheduler,
        stopper,
        all_callbacks,
        cluster_resources=cluster_resources(),
        experiment_dir=experiment.path,
        max_pending=1,
        queue_trials=o.queue_trials,
    )
    try:  # until the loop runs: a failed setup must not leave the writer's thread behind
        cloud, executor, server = set_up(
            runner,
            search_alg,
            experiment,
            o.sync_config,
            o.resume,
            o.trusted,
            o.sync_to_driver,
            reuse_actors,
            buffer,
            o.with_server,
            o.server_port,
        )
    except BaseException:
        writer.close()
        raise
    loop = DriverLoop(
        runner, executor, experiment.path, o.global_checkpoint_period, o.verbose, writer
    )
    loop.server = server
    loop.cloud = cloud
    try:
        loop.run()
    finally:
        try:
            if server is not None:
                server.shutdown()
            executor.shutdown()
            loop.save_state(force=True)
            for cb in all_callbacks:
                cb.on_experiment_end(runner.get_trials())
        finally:
            writer.close()
    if cloud is not None:  # the final copy, after every file was written
        cloud.upload()
    trials = runner.get_trials()
    if o.verbose:
        loop.printer.show(loop.status(), trials)
        loop.printer.release()
    errored = [t for t in trials if t.status == Trial.ERROR]
    if errored:
        message = f"Trials did not complete: {[str(t) for t in errored]}"
        if o.raise_on_failed_trial:
            raise TuneError(message)
        log.error(message)
    if o.return_trials:
        return trials
    return ExperimentAnalysis(experiment.path, trials, o.metric, o.mode)


def run_experiments(
    experiments: Any,
    search_alg: SearchAlgorithm | None = None,
    scheduler: TrialScheduler | None = None,
    verbose: int = 2,
    resume: bool | str = False,
    reuse_actors: bool = False,
    raise_on_failed_trial: bool = True,
    **kwargs: Any,
) -> list[Trial]:
    """Run several experiments one after the other; returns all their trials.

    Args:
        experiments: an Experiment, a list of them, or ``{name: spec}`` dicts.

    Raises:
        TuneError: as :func:`run`.
    """
    trials: list[Trial] = []
    for experiment in convert_to_experiment_list(experiments):
        trials += run(
            experiment,
            search_alg=search_alg,
            scheduler=scheduler,
            verbose=verbose,
            resume=resume,
            reuse_actors=reuse_actors,
            raise_on_failed_trial=raise_on_failed_trial,
            return_trials=True,
            **kwargs,
        )
    return trials
