"""A node in its own process, that drivers connect to with ``init(address=...)``.

    python -m rayfield._private.node_main [--num-cpus N] [--num-gpus N]
        [--resources JSON] [--object-store-memory BYTES] [--temp-dir DIR]

It creates a session directory, writes ``<session>/node.json`` (socket path, resources,
pid) and points ``<temp_dir>/session_latest`` at the session, prints one line with the
session directory, and serves until SIGTERM or SIGINT, then stops its workers and removes
its socket. (``rayfield start`` builds on this.)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from rayfield._private.node import LocalNode


def default_root() -> Path:
    return Path(tempfile.gettempdir()) / "rayfield"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-cpus", type=float, default=None)
    parser.add_argument("--num-gpus", type=float, default=0)
    parser.add_argument("--resources", type=json.loads, default={}, help='e.g. {"tpu": 2}')
    parser.add_argument("--object-store-memory", type=int, default=None)
    parser.add_argument("--temp-dir", type=Path, default=default_root())
    args = parser.parse_args(argv)
    resources = {"CPU": args.num_cpus if args.num_cpus is not None else float(os.cpu_count() or 1)}
    if args.num_gpus:
        resources["GPU"] = args.num_gpus
    resources.update({k: float(v) for k, v in args.resources.items()})
    memory = args.object_store_memory or min(int(psutil.virtual_memory().total * 0.3), 20 * 10**9)
    session = args.temp_dir / f"session_{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.getpid()}"
    node = LocalNode(session, resources, memory, None, False, log_to_driver=False)
    info = {
        "socket": node.socket_path,
        "resources": resources,
        "pid": os.getpid(),
        "object_store_memory": memory,
        "node_id": node.server.node_id.hex(),
    }
    (session / "node.json").write_text(json.dumps(info))
    latest = args.temp_dir / "session_latest"
    tmp_link = args.temp_dir / f".session_latest.{os.getpid()}"
    tmp_link.unlink(missing_ok=True)
    tmp_link.symlink_to(session)
    tmp_link.replace(latest)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"rayfield node started: session {session}", flush=True)
    while not stop.wait(0.5):
        pass
    node.shutdown()
    (session / "node.json").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
