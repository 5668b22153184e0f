"""Ctrl-C in ``rayfield`` commands.

A one-shot command (``status``, ``list``, ``start``...) that gets Ctrl-C ends at once
with exit status :data:`INTERRUPTED_EXIT_STATUS` (130, 128 + SIGINT: what a shell
reports for a command SIGINT ended, so scripts can tell it from a failure) and one line
on stderr: :func:`interrupted` makes that exit, and the command group turns every
``KeyboardInterrupt`` into it (click's own handling prints "Aborted!" and exits 1).

A command that runs until Ctrl-C (``rayfield logs --follow``) ends that way normally:
it reads a stop request between two calls, never an exception inside one, and exits 0.

Python turns SIGINT into ``KeyboardInterrupt`` only when SIGINT's action was the
default at start-up: a process started with SIGINT ignored (what a shell without job
control gives every background command, by POSIX, and what children inherit across
``exec``) keeps ignoring it, and a command that loops until Ctrl-C never ends.
:class:`StopOnInterrupt` therefore installs its own SIGINT handler while its block runs,
whatever the action before. The handler only records the signal, and
:meth:`StopOnInterrupt.sleep` returns early through a wakeup file descriptor
(``signal.set_wakeup_fd``), so the grpc call under way when Ctrl-C comes finishes
(within its timeout), the loop stops before the next one, and the channels close with
no call in flight.
"""

from __future__ import annotations

import select
import signal
import socket
import threading
import time
from types import FrameType, TracebackType
from typing import Any

import click

__all__ = ["INTERRUPTED_EXIT_STATUS", "StopOnInterrupt", "interrupted"]

INTERRUPTED_EXIT_STATUS = 130  # 128 + SIGINT (2)


def interrupted() -> click.exceptions.Exit:
    """Say on stderr that Ctrl-C ended the command; returns the exit (status 130) to
    raise, e.g. ``except KeyboardInterrupt: raise interrupted() from None``."""
    click.echo("rayfield: interrupted (Ctrl-C)", err=True)
    return click.exceptions.Exit(INTERRUPTED_EXIT_STATUS)


class StopOnInterrupt:
    """While the ``with`` block runs, SIGINT sets :attr:`stopped` instead of raising.

    Use on the main thread only (Python runs signal handlers there)::

        with StopOnInterrupt() as interrupt:
            while not interrupt.stopped:
                work()
                interrupt.sleep(0.5)

    The previous SIGINT handler and wakeup descriptor are restored when the block ends.

    Raises:
        RuntimeError: when entered from a thread other than the main thread.
    """

    def __init__(self) -> None:
        self.stopped = False
        self._wake_read, self._wake_write = socket.socketpair()
        for end in (self._wake_read, self._wake_write):
            end.setblocking(False)
        self._previous_handler: Any = signal.SIG_DFL
        self._previous_fd = -1

    def __enter__(self) -> StopOnInterrupt:
        if threading.current_thread() is not threading.main_thread():
            self._close()
            raise RuntimeError("StopOnInterrupt handles SIGINT: use it on the main thread")
        self._previous_handler = signal.signal(signal.SIGINT, self._on_sigint)
        self._previous_fd = signal.set_wakeup_fd(
            self._wake_write.fileno(), warn_on_full_buffer=False
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        signal.set_wakeup_fd(self._previous_fd)
        signal.signal(signal.SIGINT, self._previous_handler)
        self._close()

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or until SIGINT comes; return at once if one came already."""
        deadline = time.monotonic() + seconds
        while not self.stopped:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            # The C-level handler writes to the wakeup socket whichever thread the signal
            # reaches, so a signal that came before this select makes it return at once.
            readable, _, _ = select.select([self._wake_read], [], [], left)
            if readable:
                self._drain()

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.stopped = True

    def _drain(self) -> None:
        try:
            while self._wake_read.recv(64):
                pass
        except BlockingIOError:
            pass

    def _close(self) -> None:
        self._wake_read.close()
        self._wake_write.close()
