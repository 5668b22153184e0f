"""Where a node's workers sit among the terminal's processes.

Each worker leads a process group of its own inside the node's session (the driver's,
for ``init()``'s embedded node). A Ctrl-C typed in the driver's terminal makes the
terminal send SIGINT to its foreground process group, which holds the driver and no
worker; killing one worker's whole group ends that worker alone; ``shutdown()`` still
ends them all. The driver here runs on a pseudo-terminal as its foreground job, and the
Ctrl-C is the byte the terminal turns into SIGINT (``^C``, 0x03).
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import sys
import textwrap
import time
from pathlib import Path

import psutil

from rayfield.testing import wait_for

DRIVER = textwrap.dedent(
    """
    import os, signal, sys, time
    import rayfield as rf
    from rayfield.exceptions import RayActorError
    rf.init(num_cpus=2, object_store_memory=64 << 20, temp_dir=sys.argv[1])

    @rf.remote(num_cpus=0)
    class Pid:
        def pid(self):
            return os.getpid()

    a, b = Pid.remote(), Pid.remote()
    pids = rf.get([a.pid.remote(), b.pid.remote()])
    try:  # the test types ^C as soon as it reads the pids: be inside the try by then
        print("pids", os.getpid(), *pids, flush=True)
        time.sleep(60)
    except KeyboardInterrupt:
        print("driver interrupted", flush=True)
    # Both workers lived through the Ctrl-C.
    assert rf.get([a.pid.remote(), b.pid.remote()]) == pids
    os.killpg(os.getpgid(pids[0]), signal.SIGKILL)
    try:
        rf.get(a.pid.remote())
    except RayActorError:
        print("a died", flush=True)
    assert rf.get(b.pid.remote()) == pids[1]  # b did not
    print("b alive", flush=True)
    rf.shutdown()
    print("shut down", flush=True)
    """
)


def _read_until(fd: int, pattern: str, got: list[bytes], timeout_s: float = 60) -> re.Match[str]:
    """Read the terminal into ``got`` until ``pattern`` matches what it printed."""
    deadline = time.monotonic() + timeout_s
    while (match := re.search(pattern, out := b"".join(got).decode(errors="replace"))) is None:
        left = deadline - time.monotonic()
        assert left > 0, f"no {pattern!r} on the driver's terminal within {timeout_s} s:\n{out}"
        if select.select([fd], [], [], min(left, 0.5))[0]:
            try:
                got.append(os.read(fd, 4096))
            except OSError:  # the driver exited: its terminal is closed
                raise AssertionError(f"the driver exited before {pattern!r}:\n{out}") from None
    return match


def test_ctrl_c_reaches_the_driver_and_no_worker(tmp_path: Path) -> None:
    pid, fd = pty.fork()  # the child leads a new session on the terminal, in the foreground
    if pid == 0:
        try:
            # A shell starts background jobs with SIGINT ignored, and exec keeps that: the
            # driver must see the Ctrl-C as an interactive one would.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.execv(sys.executable, [sys.executable, "-c", DRIVER, str(tmp_path)])
        finally:
            os._exit(127)
    got: list[bytes] = []
    workers: list[int] = []
    reaped = False
    try:
        driver, *workers = map(int, _read_until(fd, r"pids (\d+) (\d+) (\d+)\r?\n", got).groups())
        assert driver == pid
        foreground = os.tcgetpgrp(fd)
        assert foreground == os.getpgid(driver)
        for w in workers:
            assert os.getsid(w) == os.getsid(driver)  # the node's session: one autogroup
            assert os.getpgid(w) == w != foreground  # a group of its own, in the background
        os.write(fd, b"\x03")  # Ctrl-C: the terminal signals its foreground group
        _read_until(fd, "driver interrupted", got)
        out = _read_until(fd, "shut down", got).string
        assert "a died" in out and "b alive" in out, out
        _, status = os.waitpid(pid, 0)
        reaped = True
        assert os.waitstatus_to_exitcode(status) == 0, out
        wait_for(lambda: not any(map(psutil.pid_exists, workers)), 10, "shutdown() to end them")
    finally:
        if not reaped:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        for w in workers:
            if psutil.pid_exists(w):
                os.kill(w, signal.SIGKILL)
        os.close(fd)
