"""Ctrl-C in ``rayfield logs --follow`` without processes: SIGINT stops the loop between
two reads, never inside one (``rayfield/cli/_interrupt.py`` says why). The one-shot
commands, run as real processes, are in ``integration/test_interrupt.py``."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest
from test_inspect_units import FakeLogs

from rayfield.cli import _interrupt
from rayfield.cli._interrupt import StopOnInterrupt
from rayfield.cli.logs import follow_log

pytestmark = pytest.mark.usefixtures("sigint_not_ignored")


class InterruptedLogs(FakeLogs):
    """A log whose ``read_number``-th read gets SIGINT while it runs (as a grpc call
    would, waiting for its answer), then finishes; records reads started and finished."""

    def __init__(self, data: bytes, read_number: int) -> None:
        super().__init__(data)
        self.read_number = read_number
        self.finished = 0

    def read_log(self, node: str, name: str, offset: int, max_bytes: int) -> dict[str, Any]:
        if len(self.reads) + 1 == self.read_number:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # under Python's own handler, KeyboardInterrupt comes here
            self.data += b"appended during the interrupted read\n"
        reply = super().read_log(node, name, offset, max_bytes)
        self.finished += 1
        return reply


def test_ctrl_c_during_a_read_ends_the_follow_after_that_read(
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    log = InterruptedLogs(b"old\n", read_number=3)
    with StopOnInterrupt() as interrupt:
        follow_log(log, "n", "worker-1.out", 0, 0.05, interrupt)  # type: ignore[arg-type]
    assert interrupt.stopped
    assert len(log.reads) == log.finished == 3  # the interrupted read finished; no more
    out = capsysbinary.readouterr().out
    assert out == b"old\nappended during the interrupted read\n"


@pytest.mark.timeout(120)  # a sleep that ran its hour would be a hang: failed here
def test_sleep_returns_when_sigint_comes_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGINT)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))  # from another thread
    with StopOnInterrupt() as interrupt:
        timer.start()
        interrupt.sleep(3600)  # only the signal ends it
        assert interrupt.stopped
        interrupt.sleep(3600)  # stopped already: returns at once
    timer.join()
    assert signal.getsignal(signal.SIGINT) is before
    assert signal.set_wakeup_fd(-1) == -1  # the wakeup descriptor is unset again


def test_sigint_stops_even_when_it_was_ignored_before() -> None:
    # A background command of a shell without job control starts with SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopOnInterrupt() as interrupt:
            os.kill(os.getpid(), signal.SIGINT)
            interrupt.sleep(30)  # returns at once: the signal came already
            assert interrupt.stopped
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


class _FakeClock:
    """``time`` and ``select`` of ``_interrupt`` without waiting: each select "waits" at
    most ``step`` seconds of this clock (as a select woken early by another signal would)."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 64.0, step
        self.selects: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def select(
        self, r: Any, w: Any, x: Any, timeout: float
    ) -> tuple[list[Any], list[Any], list[Any]]:
        self.selects.append(timeout)
        self.now += min(timeout, self.step)
        return [], [], []


def test_sleep_runs_its_time_without_a_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _FakeClock(step=0.125)  # binary fractions: the sums are exact
    monkeypatch.setattr(_interrupt, "time", clock)
    monkeypatch.setattr(_interrupt, "select", clock)
    with StopOnInterrupt() as interrupt:
        interrupt.sleep(0.5)
        assert not interrupt.stopped
    # woken early three times, it waited on for what was left, to its deadline exactly
    assert clock.selects == [0.5, 0.375, 0.25, 0.125] and clock.now == 64.5


def test_refused_off_the_main_thread() -> None:
    errors: list[BaseException] = []

    def enter() -> None:
        try:
            with StopOnInterrupt():
                pass
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert [str(e) for e in errors] == ["StopOnInterrupt handles SIGINT: use it on the main thread"]
