"""The modern API: ``Tuner(trainable, param_space=..., tune_config=..., run_config=...)``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from rayfield.tune.analysis import ExperimentAnalysis, ResultGrid
from rayfield.tune.callback import Callback
from rayfield.tune.error import TuneError
from rayfield.tune.schedulers.trial_scheduler import TrialScheduler
from rayfield.tune.search.search_algorithm import SearchAlgorithm
from rayfield.tune.search.searcher import Searcher
from rayfield.tune.state import load_state
from rayfield.tune.syncer import SyncConfig

__all__ = ["CheckpointConfig", "FailureConfig", "RunConfig", "TuneConfig", "Tuner"]


@dataclass
class TuneConfig:
    """How to search: metric, mode, searcher, scheduler, sample count, concurrency.

    Attributes:
        metric, mode: what to optimise (``"min"``/``"max"``).
        search_alg: a Searcher or SearchAlgorithm (default grid/random search).
        scheduler: a TrialScheduler (default FIFO).
        num_samples: samples of the space (a grid is repeated).
        max_concurrent_trials: at most this many trials at once.
        time_budget_s: stop everything after this many seconds.
        reuse_actors: hand finished trials' actors to new trials (default: on for
            function trainables).
        trial_name_creator, trial_dirname_creator: ``f(trial) -> str``.
    """

    metric: str | None = None
    mode: str | None = None
    search_alg: SearchAlgorithm | Searcher | None = None
    scheduler: TrialScheduler | None = None
    num_samples: int = 1
    max_concurrent_trials: int | None = None
    time_budget_s: float | None = None
    reuse_actors: bool | None = None
    trial_name_creator: Any = None
    trial_dirname_creator: Any = None


@dataclass
class FailureConfig:
    """``max_failures``: restarts of a failing trial (-1 unlimited);
    ``fail_fast`` is not supported yet."""

    max_failures: int = 0
    fail_fast: bool = False


@dataclass
class CheckpointConfig:
    """Checkpoint policy: keep ``num_to_keep`` best by ``checkpoint_score_attribute``
    (``checkpoint_score_order`` ``"max"``/``"min"``), save every ``checkpoint_frequency``
    iterations and/or ``checkpoint_at_end``."""

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: str = "max"
    checkpoint_frequency: int = 0
    checkpoint_at_end: bool | None = None


@dataclass
class RunConfig:
    """Where and how to run: name, storage path, stop rule, callbacks, checkpoints."""

    name: str | None = None
    storage_path: str | None = None
    stop: Any = None
    callbacks: list[Callback] | None = None
    failure_config: FailureConfig = field(default_factory=FailureConfig)
    checkpoint_config: CheckpointConfig = field(default_factory=CheckpointConfig)
    verbose: int = 1
    local_dir: str | None = None
    sync_config: SyncConfig | None = None


class Tuner:
    """Runs a search over ``param_space`` with ``trainable``.

    Args:
        trainable: a function, a Trainable class or a registered name (see
            ``tune.with_parameters`` / ``tune.with_resources``).
        param_space: the search space (the classic ``config``).
        tune_config: how to search.
        run_config: where and how to run.
    """

    def __init__(
        self,
        trainable: Any = None,
        *,
        param_space: dict[str, Any] | None = None,
        tune_config: TuneConfig | None = None,
        run_config: RunConfig | None = None,
        _resume: bool = False,
        _trusted: bool = False,
    ) -> None:
        if trainable is None:
            raise TuneError("Tuner() needs a trainable: a function or a Trainable class")
        self.trainable = trainable
        self.param_space = param_space or {}
        self.tune_config = tune_config or TuneConfig()
        self.run_config = run_config or RunConfig()
        self._resume = _resume
        self._trusted = _trusted

    @classmethod
    def restore(
        cls,
        path: str,
        trainable: Any,
        *,
        param_space: dict[str, Any] | None = None,
        tune_config: TuneConfig | None = None,
        run_config: RunConfig | None = None,
        trusted: bool = False,
        **_: Any,
    ) -> Tuner:
        """A Tuner that continues the experiment saved in ``path`` when fitted.

        Args:
            path: the experiment directory, or its cloud copy: a URI
                ``<upload_dir>/<name>`` (``s3://bucket/prefix/name``,
                ``file:///dir/name``) that ``RunConfig(sync_config=SyncConfig(
                upload_dir=...))`` kept. A cloud copy is downloaded into
                ``<run_config.storage_path or ~/rayfield_results>/<name>`` unless that
                directory already holds the experiment's state; the run then goes on
                uploading to ``<upload_dir>``.
            trainable, param_space, tune_config, run_config: as for ``Tuner()``; the
                run config's name and storage path are set from ``path``.
            trusted: the experiment is yours: ``fit()`` may load the pickles in it
                (configs JSON cannot hold, pickled checkpoint dicts), as
                ``tune.run(..., trusted=True)``. Without it such a pickle raises
                ``UntrustedPickleError`` when ``fit()`` resumes.

        Raises:
            TuneError: ``path`` (or its download) holds no experiment state, or the
                download failed.
        """
        run_config = run_config or RunConfig()
        if "://" in path:
            path = _download(path, run_config)
        path = os.path.expanduser(path)
        if load_state(path) is None:
            raise TuneError(f"No experiment state found in {path}!")
        run_config.name = os.path.basename(os.path.normpath(path))
        run_config.storage_path = os.path.dirname(os.path.normpath(path))
        return cls(
            trainable,
            param_space=param_space,
            tune_config=tune_config,
            run_config=run_config,
            _resume=True,
            _trusted=trusted,
        )

    @classmethod
    def can_restore(cls, path: str) -> bool:
        return load_state(os.path.expanduser(path)) is not None

    def fit(self) -> ResultGrid:
        """Run every trial to its end; returns their results (errors do not raise)."""
        from rayfield.tune.tune import run

        tc, rc = self.tune_config, self.run_config
        cc = rc.checkpoint_config
        score_attr = cc.checkpoint_score_attribute
        if score_attr and cc.checkpoint_score_order == "min":
            score_attr = "min-" + score_attr
        analysis = run(
            self.trainable,
            name=rc.name,
            metric=tc.metric,
            mode=tc.mode,
            stop=rc.stop,
            time_budget_s=tc.time_budget_s,
            config=self.param_space,
            num_samples=tc.num_samples,
            storage_path=rc.storage_path or rc.local_dir,
            search_alg=tc.search_alg,
            scheduler=tc.scheduler,
            keep_checkpoints_num=cc.num_to_keep,
            checkpoint_score_attr=score_attr,
            checkpoint_freq=cc.checkpoint_frequency,
            checkpoint_at_end=bool(cc.checkpoint_at_end),
            verbose=rc.verbose,
            callbacks=rc.callbacks,
            trial_name_creator=tc.trial_name_creator,
            max_failures=rc.failure_config.max_failures,
            resume=self._resume,
            reuse_actors=tc.reuse_actors,
            raise_on_failed_trial=False,
            max_concurrent_trials=tc.max_concurrent_trials,
            sync_config=rc.sync_config,
            trusted=self._trusted,
        )
        assert isinstance(analysis, ExperimentAnalysis)
        return ResultGrid(analysis)

    def get_results(self) -> ResultGrid:
        """The results saved in this Tuner's experiment directory."""
        from rayfield.tune.experiment import default_local_dir

        rc = self.run_config
        root = os.path.expanduser(rc.storage_path or rc.local_dir or default_local_dir())
        if rc.name is None:
            raise TuneError("get_results() needs RunConfig(name=...)")
        return ResultGrid(ExperimentAnalysis(os.path.join(root, rc.name)))


def _download(uri: str, run_config: RunConfig) -> str:
    """Fetch the experiment at ``uri`` (``<upload_dir>/<name>``) into the local storage
    path, point ``run_config`` at ``<upload_dir>`` for further uploads, and return the
    local experiment directory."""
    from rayfield.tune.experiment import default_local_dir
    from rayfield.tune.syncer import get_syncer

    upload_dir, _, name = uri.rstrip("/").rpartition("/")
    if not name or "://" not in upload_dir:
        raise TuneError(f"{uri!r} is not <upload_dir>/<experiment name>")
    sync = run_config.sync_config or SyncConfig()
    sync.upload_dir = upload_dir
    run_config.sync_config = sync
    root = os.path.expanduser(
        run_config.storage_path or run_config.local_dir or default_local_dir()
    )
    local = os.path.join(root, name)
    if load_state(local) is None:
        get_syncer(upload_dir, sync.syncer).sync_down(uri.rstrip("/"), local)
    return local
