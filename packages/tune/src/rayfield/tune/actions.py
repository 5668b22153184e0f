"""What the runner asks the executor to do, as values (one frozen class per action).

:meth:`rayfield.tune.runner.TrialRunner.step` returns these in the order they are to be
carried out; :class:`~rayfield.tune.executor.ActorExecutor` carries them out with actors,
and the unit tests' simulator with plain objects. ``batch`` is how many results the trial
may return in its next call. A checkpoint's ``value`` is filled in by the executor
(a memory checkpoint's object) or names the directory it writes (a disk checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rayfield.tune.trial import Trial, TrialCheckpoint

__all__ = [
    "Action",
    "DeleteCheckpoint",
    "ExportModel",
    "PauseTrial",
    "PersistCheckpoint",
    "ReleaseTrial",
    "ResetTrial",
    "SaveTrial",
    "StartTrial",
    "TrainTrial",
]


@dataclass(frozen=True)
class StartTrial:
    """Start ``trial`` on an actor (restoring ``checkpoint`` if set) and train it."""

    trial: Trial
    checkpoint: TrialCheckpoint | None
    batch: int


@dataclass(frozen=True)
class TrainTrial:
    """Run the next iteration(s) of the running ``trial``."""

    trial: Trial
    batch: int


@dataclass(frozen=True)
class PauseTrial:
    """Save ``checkpoint`` (memory) from ``trial``, then release its actor."""

    trial: Trial
    checkpoint: TrialCheckpoint


@dataclass(frozen=True)
class ReleaseTrial:
    """Release ``trial``'s actor (``error``: it failed, do not reuse the actor)."""

    trial: Trial
    error: bool = False


@dataclass(frozen=True)
class SaveTrial:
    """Save ``checkpoint`` from the running ``trial`` (memory: set its value; disk: write
    it into the directory its value names)."""

    trial: Trial
    checkpoint: TrialCheckpoint


@dataclass(frozen=True)
class PersistCheckpoint:
    """Write ``blob`` (a checkpoint a function trainable reported) into the directory
    ``checkpoint.value``."""

    trial: Trial
    checkpoint: TrialCheckpoint
    blob: Any


@dataclass(frozen=True)
class DeleteCheckpoint:
    """Delete the disk checkpoint ``checkpoint`` of ``trial``."""

    trial: Trial
    checkpoint: TrialCheckpoint


@dataclass(frozen=True)
class ResetTrial:
    """Give ``trial``'s actor ``trial.config`` and restore ``checkpoint``."""

    trial: Trial
    checkpoint: TrialCheckpoint


@dataclass(frozen=True)
class ExportModel:
    """Export ``trial``'s model in its ``export_formats`` (before its release)."""

    trial: Trial


Action = (
    StartTrial
    | TrainTrial
    | PauseTrial
    | ReleaseTrial
    | SaveTrial
    | PersistCheckpoint
    | DeleteCheckpoint
    | ResetTrial
    | ExportModel
)
