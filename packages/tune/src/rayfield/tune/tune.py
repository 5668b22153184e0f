"""``tune.run`` and ``tune.run_experiments``: run an experiment to completion.

The driver loop: the :class:`~rayfield.tune.runner.TrialRunner` decides, the
:class:`~rayfield.tune.executor.ActorExecutor` runs trials as actors and returns their
results in batches, loggers write each trial's files, and the experiment's state is saved
atomically (after trial completions, at most every few percent of the run's time, and at
the end) so that ``resume=True`` continues a killed run.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import rayfield
from rayfield.tune import dashboard
from rayfield.tune.analysis import ExperimentAnalysis
from rayfield.tune.arguments import check_scheduler, check_search_alg, check_time_budget
from rayfield.tune.callback import Callback
from rayfield.tune.driver_sync import DriverSync
from rayfield.tune.error import TuneError
from rayfield.tune.executor import TRUST_OPT_IN, ActorExecutor, _supports_reset
from rayfield.tune.experiment import Experiment, convert_to_experiment_list
from rayfield.tune.function_trainable import FunctionTrainable
from rayfield.tune.logger import LoggerCallback, saved_config
from rayfield.tune.pickles import UntrustedPickleError
from rayfield.tune.progress import CLIReporter, StatusPrinter, status_string
from rayfield.tune.runner import TrialRunner
from rayfield.tune.schedulers.trial_scheduler import FIFOScheduler, TrialScheduler
from rayfield.tune.search.search_algorithm import (
    BasicVariantGenerator,
    SearchAlgorithm,
    SearchGenerator,
)
from rayfield.tune.search.searcher import Searcher
from rayfield.tune.state import (
    append_finished,
    load_state,
    rebase_trial,
    trial_from_json,
    write_state_text,
)
from rayfield.tune.stopper import TimeoutStopper, _Combined
from rayfield.tune.syncer import CloudSync, SyncConfig, get_syncer, remote_dir_of
from rayfield.tune.trainable import checkpoint_pickles
from rayfield.tune.trial import Trial
from rayfield.tune.writer import BackgroundWriter
from rayfield.util import private_files

__all__ = ["run", "run_experiments"]

log = logging.getLogger(__name__)
_STATUS_INTERVAL_S = 5.0
_POLL_S = 0.5
_RESOURCE_REFRESH_S = 2.0


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
    check_scheduler(scheduler)
    check_search_alg(search_alg)
    budget_s = check_time_budget(time_budget_s)
    if sync_config is not None and upload_dir is None:
        upload_dir = sync_config.upload_dir
    if sync_to_cloud is not None and sync_function is not None:
        raise TuneError("pass sync_to_cloud or its classic name sync_function, not both")
    sync_to_cloud = sync_to_cloud if sync_to_cloud is not None else sync_function
    if mode not in (None, "min", "max"):
        raise TuneError(f"mode must be 'min' or 'max', got {mode!r}")
    if isinstance(run_or_experiment, Experiment):
        experiment = run_or_experiment
    else:
        experiment = Experiment(
            name,
            run_or_experiment,
            stop=stop,
            config=config,
            resources_per_trial=resources_per_trial,
            num_samples=num_samples,
            local_dir=storage_path or local_dir,
            trial_name_creator=trial_name_creator,
            loggers=loggers,
            checkpoint_freq=checkpoint_freq,
            checkpoint_at_end=checkpoint_at_end,
            keep_checkpoints_num=keep_checkpoints_num,
            checkpoint_score_attr=checkpoint_score_attr,
            export_formats=export_formats,
            max_failures=max_failures,
            restore=restore,
            upload_dir=upload_dir,
            sync_function=sync_to_cloud,
        )
    if ray_auto_init and not rayfield.is_initialized():
        rayfield.init()
    if search_alg is None:
        search_alg = BasicVariantGenerator(max_concurrent=max_concurrent_trials or 0)
    elif isinstance(search_alg, Searcher):
        if max_concurrent_trials:
            from rayfield.tune.search.searcher import ConcurrencyLimiter

            search_alg = ConcurrencyLimiter(search_alg, max_concurrent_trials)
        search_alg = SearchGenerator(search_alg)
    scheduler = scheduler or FIFOScheduler()
    scheduler.set_search_properties(metric, mode)
    search_alg.set_search_properties(metric, mode)
    stopper = experiment.stopper
    if budget_s is not None:
        timeout = TimeoutStopper(budget_s)
        stopper = _Combined(stopper, timeout) if stopper else timeout
    is_function = issubclass(experiment.trainable_cls, FunctionTrainable)
    if reuse_actors is None:  # on when the trainable can take another trial's config
        reuse_actors = is_function or _supports_reset(experiment.trainable_cls)
    buffer = (
        1000
        if (is_function and scheduler.buffers_results() and not experiment.checkpoint_freq)
        else 1
    )
    reporter = CLIReporter(verbose) if verbose else None
    writer = BackgroundWriter(held=True)  # released while the loop waits for results
    all_callbacks: list[Callback] = [LoggerCallback(experiment.loggers, writer=writer)]
    if reporter is not None:
        all_callbacks.append(reporter)
    all_callbacks += list(callbacks or [])
    if dashboard.enabled():  # a driver of a cluster: the dashboard's Tune page shows it
        all_callbacks.append(
            dashboard.DashboardPublisher(experiment.name, experiment.path, metric, mode)
        )
    runner = TrialRunner(
        search_alg,
        scheduler,
        stopper,
        all_callbacks,
        cluster_resources=_cluster_resources(),
        experiment_dir=experiment.path,
        max_pending=1,
        queue_trials=queue_trials,
    )
    try:  # until the loop runs: a failed setup must not leave the writer's thread behind
        cloud, executor, server = _set_up(
            runner,
            search_alg,
            experiment,
            sync_config,
            resume,
            trusted,
            sync_to_driver,
            reuse_actors,
            buffer,
            with_server,
            server_port,
        )
    except BaseException:
        writer.close()
        raise
    loop = _DriverLoop(runner, executor, experiment.path, global_checkpoint_period, verbose, writer)
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
    if verbose:
        loop.printer.show(loop.status(), trials)
        loop.printer.release()
    errored = [t for t in trials if t.status == Trial.ERROR]
    if errored:
        message = f"Trials did not complete: {[str(t) for t in errored]}"
        if raise_on_failed_trial:
            raise TuneError(message)
        log.error(message)
    if return_trials:
        return trials
    return ExperimentAnalysis(experiment.path, trials, metric, mode)


class _DriverLoop:
    """Feeds results from the executor to the runner and decisions back."""

    def __init__(
        self,
        runner: TrialRunner,
        executor: ActorExecutor,
        path: str,
        checkpoint_period: float | None,
        verbose: int,
        writer: BackgroundWriter,
    ) -> None:
        self.runner, self.executor, self.path = runner, executor, path
        self.writer = writer
        self._write_cost = 0.0  # seconds the writer thread took for the last state
        self.checkpoint_period = checkpoint_period
        self.verbose = verbose
        self._last_save = 0.0
        self._save_cost = 0.0
        self._finished_seen = 0
        self.started = time.monotonic()
        self.server: Any = None
        self.cloud: CloudSync | None = None
        self.printer = StatusPrinter()

    def run(self) -> None:
        last_status = last_resources = time.monotonic()
        if self.verbose:
            self.printer.show(self.status(), self.runner.get_trials())
        while True:
            if self.server is not None:
                self.server.apply_requests()
            errors = self.executor.apply(self.runner.step())
            for event in errors:
                if event.trial.is_finished():  # e.g. its final checkpoint could not be saved
                    log.warning("trial %s ended, then failed: %s", event.trial, event.error)
                self.runner.on_trial_error(event.trial, event.error or "")
            if errors:
                continue
            # After the decisions went out: the trials compute while this encodes.
            self.save_state()
            if self.runner.is_finished():
                break
            self.writer.release()  # the file work runs while this loop waits
            if not self.executor.has_running():
                if not self.runner.trials_with_status(
                    Trial.PENDING
                ) and not self.runner.trials_with_status(Trial.PAUSED):
                    time.sleep(0.05)  # a searcher that has nothing to suggest yet
                    continue
                self._wait_for_resources()
                continue
            for event in self.executor.poll(_POLL_S):
                if event.error is not None:
                    self.runner.on_trial_error(event.trial, event.error)
                    continue
                for result in event.results:
                    self.runner.on_trial_result(event.trial, result, event.fetch_s)
            now = time.monotonic()
            if now - last_resources > _RESOURCE_REFRESH_S:
                last_resources = now
                self.runner.set_cluster_resources(_cluster_resources())
            if self.verbose and now - last_status > _STATUS_INTERVAL_S:
                last_status = now
                if self.verbose >= 2:  # results were printed below: do not draw over them
                    self.printer.release()
                self.printer.show(self.status(), self.runner.get_trials())

    def _wait_for_resources(self) -> None:
        """Nothing runs and a trial waits: the cluster is smaller than it was."""
        time.sleep(0.2)
        self.runner.set_cluster_resources(_cluster_resources())

    def save_state(self, force: bool = False) -> None:
        finished = self.runner.num_finished()
        now = time.monotonic()
        if not force:
            if self.checkpoint_period is not None:
                due = now - self._last_save >= self.checkpoint_period
            else:
                # After a trial ends, unless saving would take over ~5% of the time.
                cost = self._save_cost + self._write_cost
                due = (
                    finished != self._finished_seen and (now - self._last_save >= 20 * cost)
                ) or now - self._last_save >= 10.0
            if not due:
                return
        start = time.monotonic()
        for cb in self.runner.callbacks:
            cb.on_checkpoint()  # the loggers' flush is queued before the state
        lines, offset, text = self.runner.encode_checkpoint()
        path = self.path

        def write() -> None:
            began = time.monotonic()
            append_finished(path, lines, offset)
            write_state_text(path, text)
            self._write_cost = time.monotonic() - began

        self.writer.submit(write)
        if self.cloud is not None and not force and self.cloud.due():
            self.writer.submit(self._upload)
        self._save_cost = time.monotonic() - start
        self._last_save = time.monotonic()
        self._finished_seen = finished

    def _upload(self) -> None:
        """A periodic upload (on the writer thread): a failure is logged, the run goes on;
        the final upload after the run raises instead."""
        assert self.cloud is not None
        try:
            self.cloud.upload()
        except TuneError as exc:
            log.warning("upload to %s failed: %s", self.cloud.remote_dir, exc)

    def status(self) -> str:
        trials = self.runner.get_trials()
        used = sum(
            t.resources.cpu + t.resources.extra_cpu for t in trials if t.status == Trial.RUNNING
        )
        total = _cluster_resources().get("CPU", 0.0)
        return status_string(
            trials, self.runner.scheduler.debug_string(), f"{used:g}/{total:g} CPUs", self.path
        )


def _set_up(
    runner: TrialRunner,
    search_alg: SearchAlgorithm,
    experiment: Experiment,
    sync_config: SyncConfig | None,
    resume: bool | str,
    trusted: bool,
    sync_to_driver: Any,
    reuse_actors: bool,
    buffer: int,
    with_server: bool,
    server_port: int,
) -> tuple[CloudSync | None, ActorExecutor, Any]:
    """The experiment directory (0700), its resumed trials, the executor and the server.

    Raises:
        UntrustedPickleError: see :func:`run`'s ``trusted``.
        UnsafeFileError: the experiment directory is not this user's alone.
    """
    cloud = _cloud_sync(experiment, sync_config)
    if cloud is not None and resume and load_state(experiment.path) is None:
        try:  # nothing here to resume: the cloud copy may have it
            cloud.download()
        except TuneError as exc:
            log.info("no experiment to resume at %s: %s", cloud.remote_dir, exc)
    private_files.ensure_private_dir(experiment.path)
    if _should_resume(resume, experiment.path):
        _restore_runner(runner, search_alg, experiment, trusted)
    if not trusted:
        _refuse_untrusted_checkpoints(runner, experiment)
    search_alg.add_configurations([experiment])
    pacing = sync_config or SyncConfig()
    driver_sync = DriverSync(sync_to_driver, pacing.sync_period, pacing.sync_on_checkpoint)
    executor = ActorExecutor(
        reuse_actors=reuse_actors, buffer_results=buffer, driver_sync=driver_sync, trusted=trusted
    )
    server = None
    if with_server:
        from rayfield.tune.web_server import TuneServer

        server = TuneServer(runner, experiment.path, server_port)
    return cloud, executor, server


def _cloud_sync(experiment: Experiment, sync_config: SyncConfig | None) -> CloudSync | None:
    """The experiment's cloud copy, when it has an ``upload_dir``."""
    if not experiment.upload_dir:
        return None
    choice = experiment.sync_function
    if choice is None and sync_config is not None:
        choice = sync_config.syncer
    period = sync_config.sync_period if sync_config is not None else 300.0
    remote = remote_dir_of(experiment.upload_dir, experiment.name)
    return CloudSync(get_syncer(experiment.upload_dir, choice), experiment.path, remote, period)


def _cluster_resources() -> dict[str, float]:
    return {k: float(v) for k, v in rayfield.cluster_resources().items()}


def _should_resume(resume: bool | str, path: str) -> bool:
    if not resume:
        return False
    exists = load_state(path) is not None
    if isinstance(resume, str):
        if resume.upper() != "PROMPT":
            raise TuneError(f"resume must be True, False or 'PROMPT', got {resume!r}")
        if not exists:
            return False
        import click

        return bool(click.confirm(f"Resume the experiment in {path}?", default=False))
    if not exists:
        log.info("no experiment state in %s: starting a new experiment", path)
    return exists


def _restore_runner(
    runner: TrialRunner, search_alg: SearchAlgorithm, experiment: Experiment, trusted: bool
) -> None:
    """Put the saved trials back into ``runner`` (unfinished ones restart).

    Raises:
        UntrustedPickleError: the config of a trial that runs again is in its
            ``params.pkl`` and ``trusted`` is False.
    """
    state = load_state(experiment.path)
    assert state is not None
    finished = state.get("finished") or {}
    in_file = int(finished.get("count", 0))
    for i, saved in enumerate(state["trials"]):
        data = rebase_trial(saved, experiment.path)  # restored into another directory
        # A trial that runs again needs its exact config; a finished one shows its JSON copy.
        again = data["status"] not in (Trial.TERMINATED, Trial.ERROR)
        config = saved_config(data, trusted=trusted, opt_in=TRUST_OPT_IN, strict=again)
        trial = trial_from_json(data, config)
        runner.add_trial(trial, persisted=i < in_file)
        if trial.is_finished():
            trial.compact()
    runner.set_persisted_bytes(int(finished.get("bytes", 0)))
    search_alg.set_state(state.get("search_alg", {}))


def _refuse_untrusted_checkpoints(runner: TrialRunner, experiment: Experiment) -> None:
    """Fail before anything runs when a checkpoint this run would restore from disk (a
    resumed trial's, or ``restore``) holds a pickle, without ``trusted``.

    Raises:
        UntrustedPickleError: the first such pickle.
    """
    paths = [experiment.restore] if experiment.restore else []
    for trial in runner.get_trials():
        checkpoint = trial.checkpoint
        if not trial.is_finished() and checkpoint is not None and checkpoint.storage == "disk":
            paths.append(checkpoint.value)
    for path in paths:
        found = checkpoint_pickles(path) if os.path.isdir(path) else []
        if found:
            raise UntrustedPickleError(found[0], TRUST_OPT_IN)


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
