"""Ctrl-C in a one-shot command, run as a real process: exit status 130 and one line,
and what ``rayfield start`` had started is stopped. ``StopOnInterrupt`` itself is tested
without processes in ``unit/test_stop_on_interrupt.py``."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import pytest
from clusterutil import CLI, cli_process

from rayfield.cli._interrupt import INTERRUPTED_EXIT_STATUS
from rayfield.testing import wait_for
from rayfield.util.cluster import rayfield_processes

pytestmark = pytest.mark.usefixtures("sigint_not_ignored")


def test_ctrl_c_ends_a_one_shot_command_with_status_130(tmp_path: Path) -> None:
    # A "GCS" that accepts connections and never answers: `rayfield status` waits in its
    # first call until Ctrl-C.
    with socket.socket() as gcs:
        gcs.bind(("127.0.0.1", 0))
        gcs.listen(4)
        gcs.settimeout(60)
        address = f"127.0.0.1:{gcs.getsockname()[1]}"
        cmd = [*CLI, "status", "--address", address, "--token", "t", "--temp-dir", str(tmp_path)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            gcs.accept()[0].close()  # the command's check that something listens
            call, _ = gcs.accept()  # its gRPC channel: the call is under way
            with call:
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=20)
        finally:
            proc.kill()
            proc.communicate()
    assert proc.returncode == INTERRUPTED_EXIT_STATUS == 130, err
    assert err.strip() == "rayfield: interrupted (Ctrl-C)"  # no "Aborted!", no traceback


def test_ctrl_c_while_start_starts_stops_what_it_started(tmp_path: Path) -> None:
    args = ["start", "--head", "--port", "0", "--num-cpus", "1", "--temp-dir", str(tmp_path)]
    with cli_process(args, tmp_path) as proc:
        wait_for(lambda: rayfield_processes(tmp_path), 60, "the GCS started", interval=0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        left = rayfield_processes(tmp_path)
    assert proc.returncode == 130, err
    assert "rayfield: interrupted (Ctrl-C)" in err and "Traceback" not in err, err
    assert left == [], f"left running: {[p.cmdline() for p in left]}"
