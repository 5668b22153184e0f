"""Console output: the status table of the experiment, printed by the driver."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

from rayfield.tune.callback import Callback
from rayfield.tune.logger import pretty_print
from rayfield.tune.trial import Trial

__all__ = ["CLIReporter", "status_string"]

MAX_TRIALS_SHOWN = 20


def status_string(
    trials: list[Trial],
    scheduler_line: str,
    resources: str,
    experiment_dir: str,
    max_trials: int = MAX_TRIALS_SHOWN,
) -> str:
    """The ``== Status ==`` block: scheduler, resources, counts and trials by state."""
    counts = Counter(t.status for t in trials)
    lines = [
        "== Status ==",
        scheduler_line,
        f"Resources requested: {resources}",
        f"Result logdir: {experiment_dir}",
        f"Number of trials: {len(trials)} ({dict(sorted(counts.items()))})",
    ]
    shown = 0
    for status in sorted(counts):
        group = [t for t in trials if t.status == status]
        lines.append(f"{status} trials:")
        budget = max(max_trials - shown, 1)
        head = group[: budget // 2 + budget % 2] if len(group) > budget else group
        tail = group[len(group) - budget // 2 :] if len(group) > budget else []
        for trial in head:
            lines.append(f" - {trial}:\t{trial.progress_string()}")
        if tail:
            lines.append(f"  ... {len(group) - len(head) - len(tail)} not shown")
            for trial in tail:
                lines.append(f" - {trial}:\t{trial.progress_string()}")
        shown += len(head) + len(tail)
    return "\n".join(lines) + "\n"


class CLIReporter(Callback):
    """Prints the status every ``interval_s`` (``verbose >= 1``) and, with ``verbose >= 2``,
    each trial's results (at most every ``interval_s`` per trial, and its last one)."""

    def __init__(self, verbose: int = 1, interval_s: float = 5.0, stream: Any = None) -> None:
        self.verbose = verbose
        self.interval_s = interval_s
        self.stream = stream or sys.stdout
        self._last_print: dict[str, float] = {}

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> None:
        if self.verbose < 2:
            return
        now = time.monotonic()
        if result.get("done") or now - self._last_print.get(trial.trial_id, 0.0) > self.interval_s:
            self._last_print[trial.trial_id] = now
            text = pretty_print(result).replace("\n", "\n  ")
            self.stream.write(f"Result for {trial}:\n  {text}\n")

    def on_trial_error(self, trial: Trial, error: str) -> None:
        if self.verbose >= 1:
            self.stream.write(f"Trial {trial} failed ({trial.num_failures} failures):\n{error}\n")
