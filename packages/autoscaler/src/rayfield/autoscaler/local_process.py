"""The ``local_process`` provider: each node is a rayfield node process tree on this
machine, with a temp dir (so its own session, store and ports) of its own. The head is
started with ``rayfield start --head`` (rayfield-cli); workers are started from the
calling process with rayfield-core's ``rayfield.util.cluster.start_node`` (what
``rayfield start --address`` runs), which saves starting an interpreter for the command
on every launch.

Layout under the cluster directory (``provider.cluster_dir``, default
``<tmp>/rayfield-autoscaler-<uid>/<cluster_name>``, both levels mode 0700; every file
kept and read through :mod:`rayfield.util.private_files`, see
:mod:`rayfield.autoscaler.cluster_state`)::

    state.json          the nodes and their tags (0600, replaced atomically)
    state.lock          serializes read-modify-write of state.json across processes (0600)
    nodes/<node_id>/    the node's --temp-dir (0700); start.log (0600) says how its start
                        went

The head is started with ``rayfield start --head --port 0`` and its GCS address is read
from its session's ``cluster.json``; unless ``provider.link_latest_session`` is false,
``<tmp>/rayfield-<uid>/session_latest`` is then pointed at the head's session (rayfield-core's
``rayfield.util.cluster.point_latest_session``), so ``rayfield.init(address="auto")`` and
``rayfield status`` on this machine find the cluster as they find one ``rayfield start``
began, and the link is removed when the head is terminated. Workers join it with the
cluster token in their node process's environment (never on the command line or in a
tag). A node's resources are its type's ``resources`` (``CPU``, ``GPU`` and custom ones);
``node_config`` may set ``object_store_memory`` (bytes, default 200 MB: many nodes share
this machine).
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from rayfield.autoscaler.cluster_state import (
    StatefulProvider,
    UnsafeFileError,
    default_cluster_dir,
    open_log,
    read_json,
)
from rayfield.autoscaler.provider_base import KIND_HEAD, TAG_NODE_KIND, ProviderError
from rayfield.util import private_files

logger = logging.getLogger("rayfield.autoscaler")

__all__ = ["LocalProcessProvider", "default_cluster_dir", "rayfield_command"]

DEFAULT_OBJECT_STORE_MEMORY = 200 * 1024 * 1024
START_TIMEOUT_S = 120.0
STOP_GRACE_S = 5.0


def rayfield_command() -> list[str]:
    """The ``rayfield`` command (rayfield-cli) this interpreter runs.

    Raises:
        ProviderError: rayfield-cli is not installed.
    """
    beside = Path(sys.executable).parent / "rayfield"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("rayfield")
    if found:
        return [found]
    raise ProviderError(
        "the local_process provider starts nodes with `rayfield start`, which is not "
        "installed: pip install 'rayfield-autoscaler[local]' (or rayfield-cli)"
    )


def _session(temp_dir: Path) -> Path | None:
    sessions = sorted(p for p in temp_dir.glob("session_*") if p.name != "session_latest")
    return sessions[-1] if sessions else None


class LocalProcessProvider(StatefulProvider):
    """Nodes as ``rayfield start`` processes on this machine (see the module docstring).

    Args:
        provider_config: ``type: local_process`` and optionally ``cluster_dir``.
        cluster_name: names the cluster directory.

    Raises:
        UnsafeFileError: the cluster directory (or one above it) is not this user's
            alone.
    """

    # ---- NodeProvider -----------------------------------------------------------------

    def is_running(self, node_id: str) -> bool:
        rec = self._records().get(node_id)
        return rec is not None and self._node_pid_alive(Path(rec["temp_dir"]))

    def external_ip(self, node_id: str) -> str | None:
        return "127.0.0.1" if not self.is_terminated(node_id) else None

    def internal_ip(self, node_id: str) -> str | None:
        return self.external_ip(node_id)

    def create_node(self, node_config: dict[str, Any], tags: dict[str, str], count: int) -> None:
        for _ in range(count):
            self._create_one(node_config, tags)

    def terminate_node(self, node_id: str) -> None:
        rec = self._records().get(node_id)
        if rec is None:
            return
        temp_dir = Path(rec["temp_dir"])
        session = _session(temp_dir) if rec.get("head") else None
        self._stop(temp_dir)
        if session is not None:
            from rayfield.util import cluster

            try:
                cluster.unpoint_latest_session(session)
            except cluster.UnsafeSessionError as exc:
                logger.warning("session_latest left as it is: %s", exc)
        with self._locked() as nodes:
            nodes.pop(node_id, None)

    # ---- beyond the interface: what a driver needs to reach the cluster ----------------

    def token(self, node_id: str) -> str:
        """The cluster token, read from the head's session (0600 there) through
        :func:`rayfield.util.private_files.read_text`.

        Raises:
            ProviderError: ``node_id`` is not a head, or its token cannot be read.
            UnsafeFileError: the token file (or a directory above) is not this user's
                alone.
        """
        session = _session(Path(self._record(node_id)["temp_dir"]))
        try:
            if session is None:
                raise FileNotFoundError("no session")
            return private_files.read_text(session / "token", what="the head's token").strip()
        except UnsafeFileError:
            raise
        except (OSError, ValueError) as exc:
            raise ProviderError(f"cannot read the token of {node_id}: {exc}") from None

    def cluster_node_id(self, node_id: str) -> str | None:
        rec = self._records().get(node_id)
        session = _session(Path(rec["temp_dir"])) if rec else None
        info = read_json(session / "node.json") if session else None
        value = info.get("node_id") if info else None
        return str(value) if value else None

    def log_path(self, node_id: str) -> Path:
        """The node's ``start.log`` (the output of the command that started it)."""
        return self.root / "nodes" / node_id / "start.log"

    # ---- starting and stopping ---------------------------------------------------------

    def _create_one(self, node_config: dict[str, Any], tags: dict[str, str]) -> str:
        head = tags.get(TAG_NODE_KIND) == KIND_HEAD
        node_id = f"{'head' if head else 'worker'}-{secrets.token_hex(4)}"
        temp_dir = self.node_dir(node_id)
        with self._locked() as nodes:
            nodes[node_id] = {"tags": dict(tags), "temp_dir": str(temp_dir), "head": head}
        log = temp_dir / "start.log"
        try:
            if head:
                self._start_head(temp_dir, node_config, log)
            else:
                self._start_worker(temp_dir, node_config, log)
        except ProviderError:
            self._stop(temp_dir)
            with self._locked() as nodes:
                nodes.pop(node_id, None)
            raise
        if head:
            session = _session(temp_dir)
            cluster = read_json(session / "cluster.json") if session else None
            if not cluster or "gcs_address" not in cluster:
                self._stop(temp_dir)
                with self._locked() as nodes:
                    nodes.pop(node_id, None)
                raise ProviderError(f"the head {node_id} recorded no GCS address; see {log}")
            with self._locked() as nodes:
                nodes[node_id]["gcs_address"] = cluster["gcs_address"]
            if session is not None and self.provider_config.get("link_latest_session", True):
                self._link_latest(session)
        return node_id

    @staticmethod
    def _link_latest(session: Path) -> None:
        """Point the default session root's ``session_latest`` at the head's session; a
        root that is not this user's alone only costs a warning (the cluster runs)."""
        from rayfield.util import cluster

        try:
            link = cluster.point_latest_session(session)
        except (cluster.UnsafeSessionError, cluster.ClusterError, OSError) as exc:
            logger.warning("the cluster is not findable with address='auto': %s", exc)
            return
        logger.info("%s -> %s (init(address='auto') finds this cluster)", link, session)

    @staticmethod
    def _start_head(temp_dir: Path, node_config: dict[str, Any], log: Path) -> None:
        """``rayfield start --head`` (its GCS and first node), output to ``log``."""
        args = [*rayfield_command(), "start", "--temp-dir", str(temp_dir), "--head"]
        args += ["--port", "0", *_resource_args(node_config)]
        with open_log(log) as out:
            try:
                subprocess.run(
                    args,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    timeout=START_TIMEOUT_S,
                    check=True,
                )
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                why = "timed out" if isinstance(exc, subprocess.TimeoutExpired) else "failed"
                raise ProviderError(f"starting the head {why}; see {log}") from None

    def _start_worker(self, temp_dir: Path, node_config: dict[str, Any], log: Path) -> None:
        """Start a node process joining the head, from this process (rayfield-core's
        ``rayfield.util.cluster.start_node``, what ``rayfield start --address`` runs,
        without starting that command's interpreter first); waits for its ``node.json``
        (it has joined the cluster). One line about it goes to ``log``; the node's own
        output is ``<session>/logs/node.out``."""
        from rayfield.util import cluster

        head_id = self.head_id()
        address, token = self.gcs_address(head_id), self.token(head_id)
        resources = dict(node_config.get("resources", {}))
        opts = cluster.NodeOptions(
            num_cpus=float(resources.pop("CPU", 1)),
            num_gpus=float(resources.pop("GPU")) if "GPU" in resources else None,
            resources={k: float(v) for k, v in resources.items()},
            object_store_memory=_object_store_memory(node_config),
            temp_dir=temp_dir,
        )
        with open_log(log) as out:
            try:
                session = cluster.new_session_dir(temp_dir)
                info = cluster.start_node(session, address, token, opts, timeout_s=START_TIMEOUT_S)
            except (cluster.ClusterError, OSError) as exc:
                out.write(f"starting the node failed: {exc}\n".encode())
                raise ProviderError(f"starting a node failed: {exc}; see {log}") from None
            line = f"rayfield node started: {info['node_id'][:12]}, session {session}\n"
            out.write(line.encode())

    @staticmethod
    def _node_pid_alive(temp_dir: Path) -> bool:
        session = _session(temp_dir)
        info = read_json(session / "node.json") if session else None
        pid = info.get("pid") if info else None
        if not isinstance(pid, int):
            return False
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def _stop(self, temp_dir: Path) -> None:
        """Stop the node whose sessions are under ``temp_dir``, in this process (no
        ``rayfield stop`` subprocess to start, about a second on a loaded machine): its
        node process first, then the head's GCS; SIGKILL for what outlives
        ``STOP_GRACE_S``; then remove what they left (sockets, ``node.json``). A process
        counts as stopped once it has exited, without waiting for init to reap it."""
        from rayfield.util import cluster

        cluster.stop_all(STOP_GRACE_S, temp_dir=temp_dir)
        cluster.clean_stopped_sessions(temp_dir)


def _resource_args(node_config: dict[str, Any]) -> list[str]:
    resources = dict(node_config.get("resources", {}))
    args = ["--num-cpus", f"{float(resources.pop('CPU', 1)):g}"]
    if "GPU" in resources:
        args += ["--num-gpus", f"{float(resources.pop('GPU')):g}"]
    if resources:
        args += ["--resources", json.dumps(resources)]
    return [*args, "--object-store-memory", str(_object_store_memory(node_config))]


def _object_store_memory(node_config: dict[str, Any]) -> int:
    return int(node_config.get("object_store_memory", DEFAULT_OBJECT_STORE_MEMORY))
