"""The embedded init() keeps its session to its user: directories 0700, files 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import rayfield as rf
from rayfield.testing import wait_for


@rf.remote
def hello() -> int:
    print("a line in a worker log")
    return os.getpid()


def test_embedded_session_is_owner_only(tmp_path: Path) -> None:
    root = tmp_path / "rf"  # made by init()
    info = rf.init(num_cpus=1, object_store_memory=64 << 20, temp_dir=str(root))
    try:
        pid = rf.get(hello.remote(), timeout=60)
        session = Path(info["session_dir"])
        assert session.parent == root
        worker_log = session / "logs" / f"worker-{pid}.out"
        wait_for(worker_log.exists, 20, f"the worker's log {worker_log}")  # streamed in
        paths = [root, session, session / "logs", session / "sockets", worker_log]
        paths += [Path(info["object_store_address"])]
        for path in [*paths, *(session / "logs").glob("events-*.jsonl")]:
            want = 0o700 if path.is_dir() else 0o600
            assert stat.S_IMODE(os.lstat(path).st_mode) == want, path
    finally:
        rf.shutdown()
