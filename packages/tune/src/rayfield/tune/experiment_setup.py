"""Setting up an experiment for ``tune.run``: its directory (0700), the cloud copy, the
trials of a resumed experiment, the refusal of untrusted checkpoints, the executor and
the REST server."""

from __future__ import annotations

import logging
import os
from typing import Any

from rayfield.tune.driver_sync import DriverSync
from rayfield.tune.error import TuneError
from rayfield.tune.executor import TRUST_OPT_IN, ActorExecutor
from rayfield.tune.experiment import Experiment
from rayfield.tune.logger import saved_config
from rayfield.tune.pickles import UntrustedPickleError
from rayfield.tune.runner import TrialRunner
from rayfield.tune.search.search_algorithm import SearchAlgorithm
from rayfield.tune.state import load_state, rebase_trial, trial_from_json
from rayfield.tune.syncer import CloudSync, SyncConfig, get_syncer, remote_dir_of
from rayfield.tune.trainable import checkpoint_pickles
from rayfield.tune.trial import Trial
from rayfield.util import private_files

__all__ = ["set_up"]

log = logging.getLogger(__name__)


def set_up(
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
