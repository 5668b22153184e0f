"""``Callback``: hooks the runner calls on the driver for every trial event."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rayfield.tune.trial import Trial

__all__ = ["Callback"]


class Callback:
    """Override any of these; each is called in the driver, in the runner's loop.

    Order per trial: ``on_trial_add``, ``on_trial_start``, ``on_trial_result`` (per
    result), ``on_trial_reset`` (PBT), ``on_trial_error`` (per failure), and
    ``on_trial_complete`` once it is TERMINATED or ERROR. ``on_experiment_end`` last.
    """

    def on_trial_add(self, trial: Trial) -> None:
        pass

    def on_trial_start(self, trial: Trial) -> None:
        pass

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> None:
        pass

    def on_trial_reset(self, trial: Trial) -> None:
        pass

    def on_trial_error(self, trial: Trial, error: str) -> None:
        pass

    def on_trial_complete(self, trial: Trial) -> None:
        pass

    def on_checkpoint(self) -> None:
        """The experiment state is about to be saved: make what was written durable."""

    def on_experiment_end(self, trials: list[Trial]) -> None:
        pass
