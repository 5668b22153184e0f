"""Every session file a cluster writes is its user's alone: directories 0700, files and
sockets 0600 (the head, a second node, the dashboard, a driver and its tasks' logs)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

from clusterutil import start_nodes, stop_in_background


def modes(root: Path) -> dict[str, int]:
    """Path (relative to ``root``) -> permission bits of everything under it but symlinks."""
    out = {".": stat.S_IMODE(os.stat(root).st_mode)}
    for path in root.rglob("*"):
        st = os.lstat(path)
        if not stat.S_ISLNK(st.st_mode):
            out[str(path.relative_to(root))] = stat.S_IMODE(st.st_mode)
    return out


def test_sessions_logs_tokens_and_sockets_are_owner_only(tmp_path: Path) -> None:
    temp_dir = tmp_path / "rf"  # made by `rayfield start`
    start_nodes(temp_dir, head_args=("--include-dashboard", "--dashboard-port", "0"))
    try:
        driver = textwrap.dedent(f"""
            import rayfield as rf
            rf.init(address="auto", temp_dir={str(temp_dir)!r})

            @rf.remote
            def hello():
                print("a line in a worker log")
                return 1

            assert rf.get([hello.remote() for _ in range(4)]) == [1] * 4
            rf.shutdown()
        """)
        out = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        head = (temp_dir / "session_latest").resolve()
        found = modes(temp_dir)
        expected = [
            "token", "node.json", "cluster.json", "dashboard.json", "gcs.sqlite", "gcs.port",
            "logs/gcs.out", "logs/node.out", "logs/dashboard.out",
        ]  # fmt: skip
        for name in expected:
            assert str(head.relative_to(temp_dir) / name) in found, name
        sessions = [p for p in temp_dir.iterdir() if p.name.startswith("session_2")]
        assert len(sessions) == 2  # the head's and the second node's
        assert any(p.match("logs/worker-*.out") for p in temp_dir.rglob("*"))
        assert any(p.match("logs/events-*.jsonl") for p in temp_dir.rglob("*"))
        for session in sessions:  # a long path puts the socket in a private /tmp/rayfield-*
            sock = Path(json.loads((session / "node.json").read_text())["socket"])
            found[str(sock)] = stat.S_IMODE(os.lstat(sock).st_mode)
            found[str(sock.parent)] = stat.S_IMODE(os.lstat(sock.parent).st_mode)
        loose = {
            path: oct(mode)
            for path, mode in found.items()
            if mode != (0o700 if (temp_dir / path).is_dir() else 0o600)
        }
        assert not loose, f"not owner-only (directories 0700, files 0600): {loose}"
    finally:
        stop_in_background(temp_dir)
