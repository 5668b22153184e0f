"""Console output: the status table of the experiment, printed by the driver."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

from rayfield.tune.callback import Callback
from rayfield.tune.logger import pretty_print
from rayfield.tune.trial import Trial

__all__ = ["CLIReporter", "StatusPrinter", "status_html", "status_string"]

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


def status_html(trials: list[Trial], header: str) -> str:
    """The status as an HTML table (for Jupyter)."""
    import html

    rows = "".join(
        f"<tr><td>{html.escape(str(t))}</td><td>{t.status}</td>"
        f"<td>{html.escape(t.progress_string())}</td></tr>"
        for t in trials[:MAX_TRIALS_SHOWN]
    )
    more = len(trials) - MAX_TRIALS_SHOWN
    tail = f"<p>... {more} more</p>" if more > 0 else ""
    return (
        f"<pre>{html.escape(header)}</pre><table><tr><th>Trial</th><th>Status</th>"
        f"<th>Progress</th></tr>{rows}</table>{tail}"
    )


def _in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel. A kernel has imported IPython already, so
    outside one IPython (about 0.2 s of imports) is never imported here."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class StatusPrinter:
    """Shows the status block: redrawn in place on a terminal, as plain successive blocks
    when the output is not a terminal, and as one HTML table updated in place in Jupyter."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stdout
        self._lines_shown = 0
        self._handle: Any = None
        self.notebook = _in_notebook()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def show(self, text: str, trials: list[Trial]) -> None:
        if self.notebook:
            from IPython.display import HTML, display

            header = "\n".join(text.splitlines()[:5])
            if self._handle is None:
                self._handle = display(HTML(status_html(trials, header)), display_id=True)
            else:
                self._handle.update(HTML(status_html(trials, header)))
            return
        if self.tty and self._lines_shown:
            # Move up over the previous block and clear it.
            self.stream.write(f"\x1b[{self._lines_shown}F\x1b[J")
        self.stream.write(text + "\n")
        self.stream.flush()
        self._lines_shown = text.count("\n") + 1 if self.tty else 0

    def release(self) -> None:
        """Keep what is shown; the next block starts below it."""
        self._lines_shown = 0
