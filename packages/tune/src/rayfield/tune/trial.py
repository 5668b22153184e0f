"""A trial's metadata on the driver: its config, state, results and checkpoints.

``Trial`` is plain data; the runner changes its status and the executor runs it. States:
PENDING -> RUNNING -> (PAUSED -> PENDING/RUNNING) -> TERMINATED or ERROR.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rayfield.tune import result as R
from rayfield.tune.error import TuneError
from rayfield.tune.ids import random_hex
from rayfield.tune.placement_groups import PlacementGroupFactory

__all__ = ["MetricStats", "Resources", "Trial", "TrialCheckpoint"]

_RESOURCE_KEYS = {
    "cpu",
    "gpu",
    "memory",
    "extra_cpu",
    "extra_gpu",
    "custom_resources",
    "extra_custom_resources",
}


@dataclass(frozen=True)
class Resources:
    """What one trial holds: ``cpu``/``gpu`` for its actor, ``extra_*`` reserved for
    actors the trainable starts itself, custom resources by name (fractions allowed)."""

    cpu: float = 1.0
    gpu: float = 0.0
    extra_cpu: float = 0.0
    extra_gpu: float = 0.0
    custom_resources: tuple[tuple[str, float], ...] = ()
    extra_custom_resources: tuple[tuple[str, float], ...] = ()
    # From a PlacementGroupFactory: its bundles (bundle 0 = cpu/gpu/custom above, the
    # others summed in extra_*) and strategy; empty for a plain dict.
    bundles: tuple[tuple[tuple[str, float], ...], ...] = ()
    strategy: str = "PACK"

    @classmethod
    def from_factory(cls, pgf: PlacementGroupFactory) -> Resources:
        """From a :class:`~rayfield.tune.PlacementGroupFactory`: bundle 0 is the actor's,
        the others are its extras; the bundles are kept for the executor to reserve."""
        head = pgf.head_bundle
        total = pgf.required_resources
        rest = {k: v - head.get(k, 0.0) for k, v in total.items()}
        custom = {k: v for k, v in head.items() if k not in ("CPU", "GPU")}
        extra = {k: v for k, v in rest.items() if k not in ("CPU", "GPU") and v}
        return cls(
            cpu=head.get("CPU", 0.0),
            gpu=head.get("GPU", 0.0),
            extra_cpu=rest.get("CPU", 0.0),
            extra_gpu=rest.get("GPU", 0.0),
            custom_resources=tuple(sorted(custom.items())),
            extra_custom_resources=tuple(sorted(extra.items())),
            bundles=tuple(tuple(sorted(b.items())) for b in pgf.bundles),
            strategy=pgf.strategy,
        )

    def placement_group_factory(self) -> PlacementGroupFactory | None:
        """The factory these resources came from; None for a plain dict."""
        if not self.bundles:
            return None
        return PlacementGroupFactory([dict(b) for b in self.bundles], strategy=self.strategy)

    @classmethod
    def from_spec(cls, spec: Any) -> Resources:
        """From a ``resources_per_trial`` dict (``{"cpu": 2, "gpu": 0.5, "custom": 1}``).

        Upper-case ``CPU``/``GPU`` keys (the modern spelling) are accepted; other unknown
        keys are custom resources.

        Raises:
            TuneError: a negative amount, or the removed ``driver_cpu_limit`` keys.
        """
        if spec is None:
            return cls()
        if isinstance(spec, Resources):
            return spec
        if isinstance(spec, PlacementGroupFactory):
            return cls.from_factory(spec)
        if not isinstance(spec, dict):
            raise TuneError(
                "resources_per_trial must be a dict such as {'cpu': 1, 'gpu': 0} or a "
                f"tune.PlacementGroupFactory, got "
                f"{type(spec).__name__}"
            )
        values: dict[str, Any] = {}
        custom = dict(spec.get("custom_resources") or {})
        for key, amount in spec.items():
            if key in ("driver_cpu_limit", "driver_gpu_limit"):
                raise TuneError(f"{key} was removed: use extra_cpu / extra_gpu instead")
            low = key.lower()
            if low in ("cpu", "gpu", "extra_cpu", "extra_gpu"):
                values[low] = float(amount)
            elif key in ("custom_resources", "extra_custom_resources"):
                continue
            else:
                custom[key] = float(amount)
        for name, amount in {**values, **custom}.items():
            if amount < 0:
                raise TuneError(f"resources_per_trial[{name!r}] must be >= 0, got {amount}")
        extra = dict(spec.get("extra_custom_resources") or {})
        return cls(
            cpu=values.get("cpu", 1.0),
            gpu=values.get("gpu", 0.0),
            extra_cpu=values.get("extra_cpu", 0.0),
            extra_gpu=values.get("extra_gpu", 0.0),
            custom_resources=tuple(sorted(custom.items())),
            extra_custom_resources=tuple(sorted(extra.items())),
        )

    def total(self) -> dict[str, float]:
        """Everything this trial holds, in the cluster's names (``CPU``, ``GPU``, custom)."""
        out = {"CPU": self.cpu + self.extra_cpu, "GPU": self.gpu + self.extra_gpu}
        for name, amount in (*self.custom_resources, *self.extra_custom_resources):
            out[name] = out.get(name, 0.0) + amount
        return {k: v for k, v in out.items() if v}

    def summary_string(self) -> str:
        return f"{self.cpu + self.extra_cpu:g} CPUs, {self.gpu + self.extra_gpu:g} GPUs"


def _intern(value: Any) -> Any:
    """One shared copy of a short string (field names, host names); others as they are."""
    return sys.intern(value) if type(value) is str and len(value) <= 64 else value


class MetricStats(Mapping[str, float]):
    """One metric's summary over a trial's results: ``max``, ``min``, ``avg``, ``last``
    and ``count``, read as a mapping (``stats["max"]``); slots, not a dict per metric,
    since every finished trial keeps one per numeric field."""

    __slots__ = ("avg", "count", "last", "max", "min")
    _KEYS = ("max", "min", "avg", "last", "count")

    def __init__(self, value: float) -> None:
        self.max = self.min = self.last = value
        self.avg = 0.0
        self.count = 0

    def add(self, value: float) -> None:
        if value > self.max:
            self.max = value
        if value < self.min:
            self.min = value
        self.count += 1
        self.avg += (value - self.avg) / self.count
        self.last = value

    def __getitem__(self, key: str) -> float:
        if key not in self._KEYS:
            raise KeyError(key)
        value: float = getattr(self, key)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._KEYS)

    def __len__(self) -> int:
        return len(self._KEYS)

    def __repr__(self) -> str:
        return repr(dict(self))


@dataclass
class TrialCheckpoint:
    """One checkpoint of a trial.

    Attributes:
        storage: ``"memory"`` (``value`` is an object ref or a blob) or ``"disk"``
            (``value`` is a directory on the driver).
        value: where the checkpoint is; set by the executor for memory checkpoints.
        result: the result of the iteration it saved.
    """

    storage: str
    value: Any = None
    result: dict[str, Any] = field(default_factory=dict)


class Trial:
    """One configuration being trained (``tune`` keeps one per sampled config).

    Args:
        trainable_name: the registered trainable's name.
        config: the resolved hyperparameters.
        experiment_tag: ``"<index>_<resolved vars>"``, part of the trial's name.
        local_dir: the experiment directory.
        stopping_criterion: ``{metric: threshold}``: stop when any result reaches one.
        checkpoint_freq: save every N iterations (0: never); ``checkpoint_at_end``: at the end.
        keep_checkpoints_num: keep the N best disk checkpoints by ``checkpoint_score_attr``
            (a ``min-`` prefix means smaller is better); None keeps all.
        max_failures: restarts after errors (-1: unlimited).
        export_formats: ``"checkpoint"`` / ``"model"``: exported into ``<logdir>/export``
            when the trial ends.
    """

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"

    def __init__(
        self,
        trainable_name: str,
        config: dict[str, Any] | None = None,
        trial_id: str | None = None,
        experiment_tag: str = "",
        local_dir: str = "",
        resources: Resources | None = None,
        stopping_criterion: dict[str, Any] | None = None,
        checkpoint_freq: int = 0,
        checkpoint_at_end: bool = False,
        keep_checkpoints_num: int | None = None,
        checkpoint_score_attr: str = R.TRAINING_ITERATION,
        max_failures: int = 0,
        trial_name_creator: Callable[[Trial], str] | None = None,
        restore_path: str | None = None,
        evaluated_params: dict[str, Any] | None = None,
        export_formats: list[str] | None = None,
    ) -> None:
        self.trainable_name = trainable_name
        self.config = dict(config or {})
        self.trial_id = trial_id or random_hex(8)
        self.experiment_tag = experiment_tag
        self.local_dir = local_dir
        self.resources = resources or Resources()
        self.stopping_criterion = dict(stopping_criterion or {})
        self.checkpoint_freq = checkpoint_freq
        self.checkpoint_at_end = checkpoint_at_end
        self.keep_checkpoints_num = keep_checkpoints_num
        self.checkpoint_score_attr = checkpoint_score_attr
        self.max_failures = max_failures
        self.evaluated_params = dict(evaluated_params or {})
        self.export_formats = list(export_formats or [])
        self.status = Trial.PENDING
        self.last_result: dict[str, Any] = {}
        self.metric_analysis: dict[str, MetricStats] = {}
        self.last_update_time = time.time()
        self.num_failures = 0
        self.error_msg: str | None = None
        self.error_file: str | None = None
        self.checkpoint: TrialCheckpoint | None = None
        self.disk_checkpoints: list[TrialCheckpoint] = []
        self.restore_path = restore_path
        self.custom_trial_name = trial_name_creator(self) if trial_name_creator else None
        self.logdir = os.path.join(local_dir, self._dirname()) if local_dir else ""
        # Scheduler-private bookkeeping (PBT's last score, HyperBand's bracket ...).
        self.scheduler_state: dict[str, Any] = {}

    def _dirname(self) -> str:
        name = str(self)[:100]
        return f"{name}_{self.trial_id}".replace("/", "_").replace(os.sep, "_")

    def __str__(self) -> str:
        if self.custom_trial_name:
            return self.custom_trial_name
        name = self.trainable_name
        env = self.config.get("env")
        if env:
            name += "_" + (env.__name__ if isinstance(env, type) else str(env))
        if self.experiment_tag:
            name += "_" + self.experiment_tag
        return name.replace("/", "_")

    def __repr__(self) -> str:
        return str(self)

    def is_finished(self) -> bool:
        return self.status in (Trial.TERMINATED, Trial.ERROR)

    def should_checkpoint(self, result: dict[str, Any]) -> bool:
        """True after ``checkpoint_freq`` iterations, or at the end with ``checkpoint_at_end``."""
        if result.get(R.DONE) and self.checkpoint_at_end:
            return True
        it = result.get(R.TRAINING_ITERATION, 0)
        return bool(self.checkpoint_freq) and it % self.checkpoint_freq == 0

    def should_recover(self) -> bool:
        return self.max_failures < 0 or self.num_failures <= self.max_failures

    def update_last_result(self, result: dict[str, Any]) -> None:
        self.last_result = result
        self.last_update_time = time.time()
        analysis = self.metric_analysis
        for key, value in result.items():
            kind = type(value)  # exact ints and floats first: no isinstance calls
            if (kind is float or kind is int) or (
                kind is not bool and kind is not str and isinstance(value, (int, float))
            ):
                stats = analysis.get(key)
                if stats is None:
                    if key in R.AUTO_FIELDS:  # pid, timestamp: not metrics
                        continue
                    stats = analysis[key] = MetricStats(value)
                stats.add(value)

    def compact(self) -> None:
        """Drop what a finished trial no longer needs, keeping what the analysis reads
        (config, last result, metric summaries, disk checkpoints, paths).

        The last result's ``config`` (a copy made for every result) becomes the trial's
        own config, and an in-memory checkpoint (an object-store ref or a blob) is
        released; the full result history is in the trial's ``result.json``.
        """
        result = self.last_result
        if R.CONFIG in result and result[R.CONFIG] == self.config:
            result[R.CONFIG] = self.config
        # Each result arrives with its own copies of the field names (and of the host
        # and experiment names): interned, every finished trial shares one copy.
        self.last_result = {
            _intern(key): _intern(value) if type(value) is str else value
            for key, value in result.items()
        }
        self.metric_analysis = {_intern(k): v for k, v in self.metric_analysis.items()}
        if self.checkpoint is not None and self.checkpoint.storage == "memory":
            self.checkpoint = None

    def checkpoint_score(self, result: dict[str, Any]) -> float | None:
        attr = self.checkpoint_score_attr
        sign = 1.0
        if attr.startswith("min-"):
            attr, sign = attr[4:], -1.0
        value = result.get(attr)
        if value is None or value != value:
            return None
        return sign * float(value)

    def progress_string(self) -> str:
        parts = [self.status]
        if self.num_failures:
            parts[0] += f", {self.num_failures} failures: {self.error_file}"
        r = self.last_result
        if r.get(R.PID):
            parts.append(f"[pid={r[R.PID]}]")
        if r.get(R.TIME_TOTAL_S) is not None:
            parts.append(f"{int(r[R.TIME_TOTAL_S])} s")
        if r.get(R.TRAINING_ITERATION) is not None:
            parts.append(f"{r[R.TRAINING_ITERATION]} iter")
        if r.get(R.TIMESTEPS_TOTAL) is not None:
            parts.append(f"{r[R.TIMESTEPS_TOTAL]} ts")
        for key, label in (
            (R.EPISODE_REWARD_MEAN, "rew"),
            (R.MEAN_LOSS, "loss"),
            (R.MEAN_ACCURACY, "acc"),
        ):
            if r.get(key) is not None:
                parts.append(f"{r[key]:.3g} {label}")
        return ", ".join(parts)
