"""The driver loop of ``tune.run``: feeds the executor's results to the runner and the
runner's actions back to the executor, and saves the experiment's state.

The state is saved atomically (after trial completions, at most every few percent of the
run's time, and at the end) so that ``resume=True`` continues a killed run.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import rayfield
from rayfield.tune.error import TuneError
from rayfield.tune.executor import ActorExecutor
from rayfield.tune.progress import StatusPrinter, status_string
from rayfield.tune.runner import TrialRunner
from rayfield.tune.state import append_finished, write_state_text
from rayfield.tune.syncer import CloudSync
from rayfield.tune.trial import Trial
from rayfield.tune.writer import BackgroundWriter

__all__ = ["DriverLoop", "cluster_resources"]

log = logging.getLogger(__name__)
_STATUS_INTERVAL_S = 5.0
_POLL_S = 0.5
_RESOURCE_REFRESH_S = 2.0


class DriverLoop:
    """Feeds results from the executor to the runner and decisions back."""

    def __init__(
        self,
        runner: TrialRunner,
        executor: ActorExecutor,
        path: str,
        checkpoint_period: float | None,
        verbose: int,
        writer: BackgroundWriter,
    ) -> None:
        self.runner, self.executor, self.path = runner, executor, path
        self.writer = writer
        self._write_cost = 0.0  # seconds the writer thread took for the last state
        self.checkpoint_period = checkpoint_period
        self.verbose = verbose
        self._last_save = 0.0
        self._save_cost = 0.0
        self._finished_seen = 0
        self.started = time.monotonic()
        self.server: Any = None
        self.cloud: CloudSync | None = None
        self.printer = StatusPrinter()

    def run(self) -> None:
        last_status = last_resources = time.monotonic()
        if self.verbose:
            self.printer.show(self.status(), self.runner.get_trials())
        while True:
            if self.server is not None:
                self.server.apply_requests()
            errors = self.executor.apply(self.runner.step())
            for event in errors:
                if event.trial.is_finished():  # e.g. its final checkpoint could not be saved
                    log.warning("trial %s ended, then failed: %s", event.trial, event.error)
                self.runner.on_trial_error(event.trial, event.error or "")
            if errors:
                continue
            # After the decisions went out: the trials compute while this encodes.
            self.save_state()
            if self.runner.is_finished():
                break
            self.writer.release()  # the file work runs while this loop waits
            if not self.executor.has_running():
                if not self.runner.trials_with_status(
                    Trial.PENDING
                ) and not self.runner.trials_with_status(Trial.PAUSED):
                    time.sleep(0.05)  # a searcher that has nothing to suggest yet
                    continue
                self._wait_for_resources()
                continue
            for event in self.executor.poll(_POLL_S):
                if event.error is not None:
                    self.runner.on_trial_error(event.trial, event.error)
                    continue
                for result in event.results:
                    self.runner.on_trial_result(event.trial, result, event.fetch_s)
            now = time.monotonic()
            if now - last_resources > _RESOURCE_REFRESH_S:
                last_resources = now
                self.runner.set_cluster_resources(cluster_resources())
            if self.verbose and now - last_status > _STATUS_INTERVAL_S:
                last_status = now
                if self.verbose >= 2:  # results were printed below: do not draw over them
                    self.printer.release()
                self.printer.show(self.status(), self.runner.get_trials())

    def _wait_for_resources(self) -> None:
        """Nothing runs and a trial waits: the cluster is smaller than it was."""
        time.sleep(0.2)
        self.runner.set_cluster_resources(cluster_resources())

    def save_state(self, force: bool = False) -> None:
        finished = self.runner.num_finished()
        now = time.monotonic()
        if not force:
            if self.checkpoint_period is not None:
                due = now - self._last_save >= self.checkpoint_period
            else:
                # After a trial ends, unless saving would take over ~5% of the time.
                cost = self._save_cost + self._write_cost
                due = (
                    finished != self._finished_seen and (now - self._last_save >= 20 * cost)
                ) or now - self._last_save >= 10.0
            if not due:
                return
        start = time.monotonic()
        for cb in self.runner.callbacks:
            cb.on_checkpoint()  # the loggers' flush is queued before the state
        lines, offset, text = self.runner.encode_checkpoint()
        path = self.path

        def write() -> None:
            began = time.monotonic()
            append_finished(path, lines, offset)
            write_state_text(path, text)
            self._write_cost = time.monotonic() - began

        self.writer.submit(write)
        if self.cloud is not None and not force and self.cloud.due():
            self.writer.submit(self._upload)
        self._save_cost = time.monotonic() - start
        self._last_save = time.monotonic()
        self._finished_seen = finished

    def _upload(self) -> None:
        """A periodic upload (on the writer thread): a failure is logged, the run goes on;
        the final upload after the run raises instead."""
        assert self.cloud is not None
        try:
            self.cloud.upload()
        except TuneError as exc:
            log.warning("upload to %s failed: %s", self.cloud.remote_dir, exc)

    def status(self) -> str:
        trials = self.runner.get_trials()
        used = sum(
            t.resources.cpu + t.resources.extra_cpu for t in trials if t.status == Trial.RUNNING
        )
        total = cluster_resources().get("CPU", 0.0)
        return status_string(
            trials, self.runner.scheduler.debug_string(), f"{used:g}/{total:g} CPUs", self.path
        )


def cluster_resources() -> dict[str, float]:
    return {k: float(v) for k, v in rayfield.cluster_resources().items()}
