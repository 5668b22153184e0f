"""What a trial scheduler decides, as values: the runner acts on them.

A scheduler's ``on_trial_result`` returns one decision or a list of them; its
``on_trial_complete``, ``on_trial_error``, ``on_trial_remove`` and ``on_step`` may
return a list (None: nothing to do). The scheduler never calls the runner to act.

* :class:`Continue`, :class:`Pause`, :class:`Stop`: what happens to the trial whose
  result it is (``on_trial_result`` only; Continue when none of them is given);
* :class:`StopTrial`, :class:`Unpause`, :class:`SaveToMemory`, :class:`Reset`: what
  happens to a given trial (the reporting one or any other).

The runner applies a list in order, and a decision's consequences (a stopped trial's
``on_trial_remove``) may bring more decisions, applied after it. Classic schedulers that
return the strings ``"CONTINUE"``/``"PAUSE"``/``"STOP"`` keep working (:func:`as_list`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rayfield.tune.trial import Trial, TrialCheckpoint

__all__ = [
    "CONTINUE",
    "PAUSE",
    "STOP",
    "Continue",
    "Pause",
    "Reset",
    "SaveToMemory",
    "SchedulerDecision",
    "Stop",
    "StopTrial",
    "Unpause",
    "as_list",
]


@dataclass(frozen=True)
class Continue:
    """The reporting trial trains on."""


@dataclass(frozen=True)
class Pause:
    """The reporting trial is checkpointed in memory and frees its resources (PAUSED)."""


@dataclass(frozen=True)
class Stop:
    """The reporting trial ends (TERMINATED)."""


@dataclass(frozen=True)
class StopTrial:
    """``trial`` ends now, whatever its state (a paused or pending one is removed)."""

    trial: Trial


@dataclass(frozen=True)
class Unpause:
    """A PAUSED ``trial`` becomes PENDING: it runs again when resources allow."""

    trial: Trial


@dataclass(frozen=True)
class SaveToMemory:
    """Checkpoint the running ``trial`` into ``checkpoint`` (a memory checkpoint the
    scheduler made and keeps; the executor fills its ``value``)."""

    trial: Trial
    checkpoint: TrialCheckpoint


@dataclass(frozen=True)
class Reset:
    """Give the running ``trial`` ``config`` (tagged ``tag``) and the state in
    ``checkpoint`` (PBT's exploit)."""

    trial: Trial
    config: dict[str, Any]
    tag: str
    checkpoint: TrialCheckpoint


SchedulerDecision = Continue | Pause | Stop | StopTrial | Unpause | SaveToMemory | Reset

CONTINUE = Continue()
PAUSE = Pause()
STOP = Stop()

_CLASSIC: dict[str, SchedulerDecision] = {"CONTINUE": CONTINUE, "PAUSE": PAUSE, "STOP": STOP}


def as_list(out: Any) -> list[SchedulerDecision]:
    """A hook's return value as a list of decisions: None is none, a decision is one,
    a classic string (``"CONTINUE"``, ``"PAUSE"``, ``"STOP"``) is its decision.

    Raises:
        TypeError: something else (names the value and what a hook may return).
    """
    if out is None:
        return []
    if isinstance(out, str):
        if out not in _CLASSIC:
            raise TypeError(
                f"a scheduler returned {out!r}: return a decision of rayfield.tune.decisions "
                "(or one of 'CONTINUE', 'PAUSE', 'STOP')"
            )
        return [_CLASSIC[out]]
    if isinstance(out, (Continue, Pause, Stop, StopTrial, Unpause, SaveToMemory, Reset)):
        return [out]
    if isinstance(out, Iterable):
        decisions: list[SchedulerDecision] = []
        for item in out:
            decisions += as_list(item)
        return decisions
    raise TypeError(
        f"a scheduler returned {out!r}: return a decision of rayfield.tune.decisions, a "
        "list of them, or None"
    )
