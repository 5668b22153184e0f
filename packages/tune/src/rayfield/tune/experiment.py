"""``Experiment``: one named experiment spec, and the trials it makes."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

from rayfield.tune import result as R
from rayfield.tune.error import TuneError
from rayfield.tune.registry import get_trainable_cls, trainable_name
from rayfield.tune.search.variant_generator import check_grids
from rayfield.tune.stopper import Stopper, as_stopper
from rayfield.tune.trial import Resources, Trial

__all__ = ["Experiment", "check_max_failures", "default_local_dir"]


def check_max_failures(max_failures: Any) -> int:
    """``max_failures``: -1 (unlimited) or an int >= 0.

    Raises:
        TypeError: not an int.
        ValueError: below -1.
    """
    if isinstance(max_failures, bool) or not isinstance(max_failures, int):
        raise TypeError(
            f"max_failures must be an int (-1 for unlimited, else >= 0), got "
            f"{type(max_failures).__name__}"
        )
    if max_failures < -1:
        raise ValueError(
            f"max_failures must be -1 (unlimited) or >= 0 restarts, got {max_failures}"
        )
    return max_failures


def default_local_dir() -> str:
    """``$TUNE_RESULT_DIR``, else ``~/rayfield_results``."""
    return os.path.expanduser(os.environ.get("TUNE_RESULT_DIR", "~/rayfield_results"))


class Experiment:
    """A named experiment: trainable, search space, stopping rule and trial settings.

    Args:
        name: the experiment's directory name under ``local_dir`` (default: the
            trainable's name).
        run: a function, a Trainable class, or a registered name.
        stop: ``{metric: threshold}``, a function ``(trial_id, result) -> bool``, or a
            :class:`~rayfield.tune.stopper.Stopper`.
        config: the search space (see :mod:`rayfield.tune.search.sample`).
        resources_per_trial: ``{"cpu": 1, "gpu": 0, ...}`` (values may be
            ``sample_from`` functions of the spec).
        num_samples: how many times the space is sampled (a grid is repeated).
        local_dir: results root (``storage_path`` in the modern API).
        checkpoint_freq, checkpoint_at_end, keep_checkpoints_num, checkpoint_score_attr,
            max_failures, restore: see :class:`~rayfield.tune.trial.Trial`.
        trial_name_creator: ``f(trial) -> str`` naming trials.

    Raises:
        TuneError: a bad argument (with what to pass instead).
        ValueError: an empty grid axis in ``config``, or ``max_failures`` below -1.
        TypeError: ``max_failures`` is not an int, or a grid axis is not a list.
    """

    def __init__(
        self,
        name: str | None,
        run: Any,
        stop: Any = None,
        config: dict[str, Any] | None = None,
        resources_per_trial: Any = None,
        num_samples: int = 1,
        local_dir: str | None = None,
        upload_dir: str | None = None,
        trial_name_creator: Callable[[Trial], str] | None = None,
        loggers: Any = None,
        sync_function: Any = None,
        checkpoint_freq: int = 0,
        checkpoint_at_end: bool = False,
        keep_checkpoints_num: int | None = None,
        checkpoint_score_attr: str | None = None,
        export_formats: Any = None,
        max_failures: int = 0,
        restore: str | None = None,
        repeat: int | None = None,
        trial_resources: Any = None,
        custom_loggers: Any = None,
    ) -> None:
        if sync_function is not None and upload_dir is None:
            raise TuneError(
                "sync_function (sync_to_cloud) copies the experiment to upload_dir: set "
                "upload_dir too, e.g. upload_dir='s3://bucket/experiments'"
            )
        formats = (
            [export_formats] if isinstance(export_formats, str) else list(export_formats or [])
        )
        for fmt in formats:
            if str(fmt).lower() not in ("checkpoint", "model"):
                raise TuneError(f"unknown export format {fmt!r}: use 'checkpoint' or 'model'")
        if repeat is not None:
            num_samples = repeat
        if trial_resources is not None:
            resources_per_trial = trial_resources
        if custom_loggers is not None:
            loggers = custom_loggers
        if not isinstance(num_samples, int) or (num_samples < 1 and num_samples != -1):
            raise TuneError(f"num_samples must be a positive int, got {num_samples!r}")
        if checkpoint_freq < 0:
            raise TuneError(f"checkpoint_freq must be >= 0, got {checkpoint_freq}")
        if keep_checkpoints_num is not None and keep_checkpoints_num < 1:
            raise TuneError(
                f"keep_checkpoints_num must be >= 1 or None, got {keep_checkpoints_num}"
            )
        if config is not None and not isinstance(config, dict):
            raise TuneError(f"config must be a dict, got {type(config).__name__}")
        check_grids(config or {})
        check_max_failures(max_failures)
        self.trainable_cls = get_trainable_cls(run)
        self.trainable_name = trainable_name(run)
        if isinstance(run, str):
            self.trainable_name = run
        self.name = name or self.trainable_name
        # A dict is checked per trial (it travels with the trial's state); other stoppers
        # are given to the runner.
        self.stopper: Stopper | None = None if isinstance(stop, dict) else as_stopper(stop)
        self.stop_dict = dict(stop) if isinstance(stop, dict) else {}
        self.local_dir = os.path.expanduser(local_dir) if local_dir else default_local_dir()
        self.upload_dir = upload_dir
        self.sync_function = sync_function
        self.trial_name_creator = trial_name_creator
        self.loggers = loggers
        self.num_samples = num_samples
        self.checkpoint_freq = checkpoint_freq
        self.checkpoint_at_end = checkpoint_at_end
        self.keep_checkpoints_num = keep_checkpoints_num
        self.checkpoint_score_attr = checkpoint_score_attr or R.TRAINING_ITERATION
        self.export_formats = [str(f).lower() for f in formats]
        self.max_failures = max_failures
        self.restore = os.path.expanduser(restore) if restore else None
        default = getattr(self.trainable_cls, "default_resource_request", lambda c: None)(
            config or {}
        )
        if default is not None and resources_per_trial is not None:
            raise ValueError(
                f"{self.trainable_name} sets its own resources (default_resource_request): "
                "clear the resources_per_trial option"
            )
        self.spec: dict[str, Any] = {
            "config": copy.deepcopy(config or {}),
            "resources_per_trial": default if default is not None else resources_per_trial,
        }

    @property
    def path(self) -> str:
        """``<local_dir>/<name>``, where the experiment writes its state and trials."""
        return os.path.join(self.local_dir, self.name)

    checkpoint_dir = path

    @classmethod
    def from_json(cls, name: str, spec: dict[str, Any]) -> Experiment:
        """An Experiment from a ``run_experiments`` / YAML dict (``"env"`` moves into config).

        Raises:
            TuneError: no ``"run"`` key.
        """
        spec = dict(spec)
        if "run" not in spec:
            raise TuneError("No trainable specified! Add a 'run' key to the experiment spec.")
        if "env" in spec:
            spec.setdefault("config", {})["env"] = spec.pop("env")
        return cls(name, **spec)

    def create_trial(
        self, resolved: dict[str, Any], experiment_tag: str, trial_id: str | None = None
    ) -> Trial:
        """A trial for one resolved spec (``{"config": ..., "resources_per_trial": ...}``)."""
        return Trial(
            self.trainable_name,
            config=resolved.get("config", {}),
            trial_id=trial_id,
            experiment_tag=experiment_tag,
            local_dir=self.path,
            resources=Resources.from_spec(resolved.get("resources_per_trial")),
            stopping_criterion=self.stop_dict,
            checkpoint_freq=self.checkpoint_freq,
            checkpoint_at_end=self.checkpoint_at_end,
            keep_checkpoints_num=self.keep_checkpoints_num,
            checkpoint_score_attr=self.checkpoint_score_attr,
            max_failures=self.max_failures,
            trial_name_creator=self.trial_name_creator,
            restore_path=self.restore,
            export_formats=self.export_formats,
        )


def convert_to_experiment_list(experiments: Any) -> list[Experiment]:
    """An Experiment, a list of them, or ``{name: spec}`` as a list.

    Raises:
        TuneError: anything else.
    """
    if isinstance(experiments, Experiment):
        return [experiments]
    if isinstance(experiments, dict):
        return [Experiment.from_json(name, spec) for name, spec in experiments.items()]
    if isinstance(experiments, (list, tuple)) and all(
        isinstance(e, Experiment) for e in experiments
    ):
        return list(experiments)
    raise TuneError("experiments must be an Experiment, a list of Experiments or a dict of specs")
