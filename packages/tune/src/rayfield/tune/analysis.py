"""Reading an experiment's results: ``ExperimentAnalysis`` (classic) and ``ResultGrid``."""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rayfield.tune.checkpoint import Checkpoint
from rayfield.tune.error import TuneError
from rayfield.tune.logger import flatten, saved_config
from rayfield.tune.state import load_state, rebase_trial, trial_from_json
from rayfield.tune.trial import Trial
from rayfield.util import private_files

__all__ = ["ExperimentAnalysis", "Result", "ResultGrid"]


def _score(value: Any, mode: str) -> float:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return -math.inf
    return float(value) if mode == "max" else -float(value)


def _progress(logdir: str) -> Any:
    """The trial's ``progress.csv`` as a DataFrame (empty if it has none).

    Raises:
        UnsafeFileError: the file is not this user's alone.
    """
    import pandas as pd

    path = os.path.join(logdir, "progress.csv")
    if not os.path.lexists(path):
        return pd.DataFrame()
    data = private_files.read_bytes(path)
    return pd.read_csv(io.BytesIO(data)) if data else pd.DataFrame()


def _checkpoint(path: str, trusted: bool) -> Checkpoint:
    """A Checkpoint of ``path``; ``trusted``: its pickled dict may be loaded by
    ``to_dict()`` without ``trusted=True`` (this run wrote it, or the caller trusts it)."""
    checkpoint = Checkpoint(path)
    checkpoint._trusted = trusted
    return checkpoint


def _check_mode(mode: str) -> None:
    if mode not in ("min", "max"):
        raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")


class ExperimentAnalysis:
    """The trials of one experiment and their results.

    Iterating it (or indexing it) gives its :class:`Trial` objects, as the list that
    classic ``tune.run`` returned.

    Reading a directory takes JSON only: the experiment state (each trial's config,
    results and checkpoints) and the trials' ``progress.csv``, all checked to be this
    user's alone. A config that JSON could not hold (functions, classes, tuples...) shows
    its JSON copy, with strings for those values, unless ``trusted=True`` lets Tune load
    the trial's ``params.pkl``. The checkpoints it hands out load a pickled dict
    (``Checkpoint.to_dict()``) only when the trials came from the running experiment
    (``trials`` given) or ``trusted=True``.

    Args:
        experiment_checkpoint_path: the experiment directory (``<local_dir>/<name>``).
        trials: the trials, when already in memory (else read from the directory).
        default_metric, default_mode: used when a method is called without them.
        trusted: the directory is yours: the trials' ``params.pkl`` pickles may be
            loaded for configs that JSON could not hold. Never for a directory someone
            else made, copied or could write: loading a pickle runs its code.

    Raises:
        TuneError: the directory does not exist or holds no experiment state.
        UnsafeFileError: the state is not this user's alone.
    """

    def __init__(
        self,
        experiment_checkpoint_path: str,
        trials: list[Trial] | None = None,
        default_metric: str | None = None,
        default_mode: str | None = None,
        *,
        trusted: bool = False,
    ) -> None:
        path = os.path.expanduser(experiment_checkpoint_path)
        self.experiment_path = path
        self.default_metric = default_metric
        self.default_mode = default_mode
        self._trusted = trusted or trials is not None  # in memory: this run wrote them
        if trials is None:
            if not os.path.isdir(path):
                raise TuneError(f"{path} is not a valid directory.")
            state = load_state(path)
            if state is None:
                raise TuneError(f"No experiment state found in {path}!")
            saved = [rebase_trial(t, path) for t in state["trials"]]  # copied elsewhere
            opt_in = "ExperimentAnalysis(path, trusted=True)"
            trials = [
                trial_from_json(t, saved_config(t, trusted=trusted, opt_in=opt_in, strict=False))
                for t in saved
            ]
        self.trials = trials

    def __iter__(self) -> Iterator[Trial]:
        return iter(self.trials)

    def __len__(self) -> int:
        return len(self.trials)

    def __getitem__(self, index: int) -> Trial:
        return self.trials[index]

    def _metric_mode(self, metric: str | None, mode: str | None) -> tuple[str, str]:
        metric = metric or self.default_metric
        mode = mode or self.default_mode
        if metric is None or mode is None:
            raise ValueError("pass metric= and mode= (or set them in tune.run / TuneConfig)")
        _check_mode(mode)
        return metric, mode

    def get_best_trial(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last"
    ) -> Trial | None:
        """The trial with the best ``metric``.

        Args:
            scope: ``"last"`` (each trial's last result), ``"all"`` (its best result
                ever), ``"avg"``, ``"last-5-avg"``, ``"last-10-avg"``.

        Raises:
            ValueError: no metric/mode given or set by default, or a bad scope.
        """
        metric, mode = self._metric_mode(metric, mode)
        if scope not in ("last", "all", "avg", "last-5-avg", "last-10-avg"):
            raise ValueError(
                f"scope must be last, all, avg, last-5-avg or last-10-avg, not {scope!r}"
            )
        best, best_score = None, -math.inf
        for trial in self.trials:
            value: Any
            if scope == "last":
                value = trial.last_result.get(metric)
            else:
                stats = trial.metric_analysis.get(metric)
                if stats is None:
                    value = trial.last_result.get(metric)
                elif scope == "all":
                    value = stats["max"] if mode == "max" else stats["min"]
                elif scope == "avg":
                    value = stats["avg"]
                else:
                    value = stats["last"]
            score = _score(value, mode)
            if best is None or score > best_score:
                best, best_score = trial, score
        if best is not None and best_score == -math.inf:
            return None
        return best

    def get_best_config(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last"
    ) -> dict[str, Any] | None:
        trial = self.get_best_trial(metric, mode, scope)
        return trial.config if trial else None

    def get_best_logdir(
        self, metric: str | None = None, mode: str | None = None, scope: str = "last"
    ) -> str | None:
        trial = self.get_best_trial(metric, mode, scope)
        return trial.logdir if trial else None

    def get_best_checkpoint(
        self, trial: Trial, metric: str | None = None, mode: str | None = None
    ) -> Checkpoint | None:
        """The trial's disk checkpoint with the best ``metric``."""
        metric, mode = self._metric_mode(metric, mode)
        ckpts = [c for c in trial.disk_checkpoints if isinstance(c.value, str)]
        if not ckpts:
            return None
        best = max(ckpts, key=lambda c: _score(c.result.get(metric), mode))
        return _checkpoint(best.value, self._trusted)

    @property
    def best_trial(self) -> Trial | None:
        return self.get_best_trial()

    @property
    def best_config(self) -> dict[str, Any] | None:
        return self.get_best_config()

    @property
    def best_logdir(self) -> str | None:
        return self.get_best_logdir()

    @property
    def best_result(self) -> dict[str, Any] | None:
        trial = self.get_best_trial()
        return trial.last_result if trial else None

    def rows(self) -> list[dict[str, Any]]:
        """One flat dict per trial: last result, ``config/<key>``, ``logdir``, ``status``."""
        rows = []
        for trial in self.trials:
            row = flatten({k: v for k, v in trial.last_result.items() if k != "config"})
            row.update(flatten(trial.config, prefix="config/"))
            row.update({"trial_id": trial.trial_id, "logdir": trial.logdir, "status": trial.status})
            rows.append(row)
        return rows

    def dataframe(self, metric: str | None = None, mode: str | None = None) -> Any:
        """A pandas DataFrame with one row per trial (see :meth:`rows`)."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    def trial_dataframe(self, trial: Trial) -> Any:
        """The trial's ``progress.csv`` as a DataFrame (empty if it has none).

        Raises:
            UnsafeFileError: the file is not this user's alone.
        """
        return _progress(trial.logdir)

    @property
    def trial_dataframes(self) -> dict[str, Any]:
        """``{logdir: progress DataFrame}`` for every trial."""
        return {t.logdir: self.trial_dataframe(t) for t in self.trials}

    def get_all_trial_dataframes(self) -> dict[str, Any]:
        return self.trial_dataframes

    def fetch_trial_dataframes(self) -> dict[str, Any]:
        return self.trial_dataframes

    @property
    def results(self) -> dict[str, dict[str, Any]]:
        return {t.trial_id: t.last_result for t in self.trials}

    @property
    def errors(self) -> list[Trial]:
        return [t for t in self.trials if t.status == Trial.ERROR]


@dataclass
class Result:
    """One trial's outcome (``Tuner.fit()``'s ``ResultGrid`` holds one per trial).

    Attributes:
        metrics: its last result.
        config: its config.
        path: its directory.
        checkpoint: its latest disk checkpoint, if any.
        error: a TuneError with the traceback when the trial failed.
        best_checkpoints: ``(checkpoint, metrics)`` of every kept disk checkpoint.
    """

    metrics: dict[str, Any]
    config: dict[str, Any]
    path: str
    checkpoint: Checkpoint | None = None
    error: Exception | None = None
    best_checkpoints: list[tuple[Checkpoint, dict[str, Any]]] = field(default_factory=list)

    @property
    def log_dir(self) -> str:
        return self.path

    @property
    def metrics_dataframe(self) -> Any:
        return _progress(self.path)

    @classmethod
    def from_trial(cls, trial: Trial, trusted: bool = False) -> Result:
        """The result of ``trial``; ``trusted``: its checkpoints' pickled dicts may be
        loaded by ``to_dict()`` (see :class:`ExperimentAnalysis`)."""
        ckpts = [c for c in trial.disk_checkpoints if isinstance(c.value, str)]
        latest = trial.checkpoint if trial.checkpoint in ckpts else (ckpts[-1] if ckpts else None)
        return cls(
            metrics=dict(trial.last_result),
            config=dict(trial.config),
            path=trial.logdir,
            checkpoint=_checkpoint(latest.value, trusted) if latest is not None else None,
            error=TuneError(trial.error_msg) if trial.status == Trial.ERROR else None,
            best_checkpoints=[(_checkpoint(c.value, trusted), dict(c.result)) for c in ckpts],
        )


class ResultGrid:
    """The results of ``Tuner.fit()``: indexable, iterable, with the best one by metric."""

    def __init__(self, analysis: ExperimentAnalysis) -> None:
        self._analysis = analysis
        self._results = [Result.from_trial(t, analysis._trusted) for t in analysis.trials]

    @property
    def experiment_path(self) -> str:
        return self._analysis.experiment_path

    def __len__(self) -> int:
        return len(self._results)

    def __getitem__(self, index: int) -> Result:
        return self._results[index]

    def __iter__(self) -> Iterator[Result]:
        return iter(self._results)

    def get_best_result(
        self,
        metric: str | None = None,
        mode: str | None = None,
        scope: str = "last",
        filter_nan_and_inf: bool = True,
    ) -> Result:
        """The result of the best trial.

        Raises:
            ValueError: no metric/mode here nor in ``TuneConfig``.
            RuntimeError: no trial reported ``metric``.
        """
        trial = self._analysis.get_best_trial(metric, mode, scope)
        if trial is None:
            raise RuntimeError(
                f"no trial reported the metric {metric or self._analysis.default_metric!r}"
            )
        return self._results[self._analysis.trials.index(trial)]

    def get_dataframe(
        self, filter_metric: str | None = None, filter_mode: str | None = None
    ) -> Any:
        return self._analysis.dataframe()

    @property
    def errors(self) -> list[Exception]:
        return [r.error for r in self._results if r.error is not None]

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    @property
    def num_terminated(self) -> int:
        return sum(1 for t in self._analysis.trials if t.status == Trial.TERMINATED)
