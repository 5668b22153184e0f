"""Start and stop clusters on this machine with the `rayfield` command, for the tests.

Every node is a separate process with its own store, socket and ports, listening on
loopback; ``--temp-dir`` keeps each test's sessions apart from every other's.

These multi-node helpers live here rather than in :mod:`rayfield.testing` because they
run the `rayfield` command (rayfield-cli), which rayfield-core does not depend on; the
tests wait with :func:`rayfield.testing.wait_for`.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from rayfield.util.cluster import stop_all

CLI = [sys.executable, "-m", "rayfield.cli.main"]


@contextlib.contextmanager
def cli_process(args: list[str], temp_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """``rayfield ARGS`` running, its stdout and stderr piped (text). On exit it is killed
    if it still runs, and what a failing run left under ``temp_dir`` is stopped."""
    proc = subprocess.Popen(
        [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        stop_all(5.0, temp_dir=temp_dir)


def rayfield_cmd(*args: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run ``rayfield ARGS``; with ``check``, fail the test (showing its output) on a
    non-zero exit."""
    kw.setdefault("timeout", 120)
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"rayfield {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def start_nodes(
    temp_dir: Path,
    *extra: str,
    count: int = 2,
    resources: str = '{"x": 100}',
    head_args: tuple[str, ...] = (),
    **kw: Any,
) -> str:
    """A head (1 CPU, plus ``head_args``) and ``count - 1`` more nodes (1 CPU and
    ``resources`` each); ``extra`` goes to every node. Returns the address. ``kw`` goes to
    ``subprocess.run`` (e.g. ``cwd``)."""
    rayfield_cmd(
        "start",
        "--head",
        "--port",
        "0",
        "--num-cpus",
        "1",
        "--temp-dir",
        str(temp_dir),
        *extra,
        *head_args,
        **kw,
    )
    address = json.loads((temp_dir / "session_latest" / "cluster.json").read_text())["gcs_address"]
    for _ in range(count - 1):
        add_node(address, temp_dir, resources, *extra, **kw)
    return str(address)


def add_node(address: str, temp_dir: Path, resources: str, *extra: str, **kw: Any) -> None:
    """Start one more node (1 CPU and ``resources``) in the cluster at ``address``."""
    rayfield_cmd(
        "start",
        "--address",
        address,
        "--num-cpus",
        "1",
        "--resources",
        resources,
        "--temp-dir",
        str(temp_dir),
        *extra,
        **kw,
    )


# `rayfield stop` runs still under way: (temp_dir, the process, its output file).
_stopping: list[tuple[Path, subprocess.Popen[bytes], Any]] = []


def stop_in_background(temp_dir: Path) -> None:
    """Start ``rayfield stop --temp-dir TEMP_DIR`` and return at once.

    A graceful stop takes seconds (each node ends its workers and leaves, then the GCS
    drains its calls) while the next test starts its own cluster under another temp dir.
    :func:`wait_for_stops` (run by conftest after the last test) waits for every stop
    started here and fails on one that did not succeed. A test that checks what ``stop``
    does runs it with :func:`rayfield_cmd` instead."""
    out = tempfile.TemporaryFile()  # noqa: SIM115 (read and closed by wait_for_stops)
    proc = subprocess.Popen(
        [*CLI, "stop", "--temp-dir", str(temp_dir)], stdout=out, stderr=subprocess.STDOUT
    )
    _stopping.append((temp_dir, proc, out))


def stops_in_flight() -> list[str]:
    """What the ``rayfield stop`` runs still under way hold in this process, as
    :class:`rayfield.testing.LeakCheck` patterns: each stop process (and any process it
    started) by pid, and the file descriptor of its output file by number. The leak check
    of a test module excludes exactly these: :func:`wait_for_stops` awaits them."""
    patterns = []
    for _, proc, out in _stopping:
        if not out.closed:  # open until wait_for_stops reads it, even once the stop ended
            patterns.append(rf"^fd {out.fileno()} -> ")
        if proc.poll() is None:
            pids = [proc.pid]
            with contextlib.suppress(psutil.Error):
                pids += [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
            patterns += [rf"^child process {pid} " for pid in pids]
    return patterns


def wait_for_stops(timeout_s: float = 120) -> None:
    """Wait for the stops :func:`stop_in_background` started.

    Raises:
        AssertionError: one exited non-zero or ran past ``timeout_s`` (then it is
            killed); the message has its temp dir and output.
    """
    failed = []
    while _stopping:
        temp_dir, proc, out = _stopping.pop(0)
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        out.seek(0)
        said = out.read().decode(errors="replace")
        out.close()
        if code != 0:
            failed.append(f"rayfield stop --temp-dir {temp_dir} exited {code}:\n{said}")
    if failed:
        raise AssertionError("\n".join(failed))
