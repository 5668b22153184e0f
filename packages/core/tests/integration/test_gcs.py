"""The GCS service: real server processes, real sockets, real clients."""

from __future__ import annotations

import os
import queue
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from rayfield._private.driver.certs import make_test_certificates
from rayfield._private.gcs import (
    CHANNEL_ACTOR,
    CHANNEL_NODE_ALIVE,
    CHANNEL_NODE_DEAD,
    ActorInfo,
    ActorState,
    GcsAlreadyExistsError,
    GcsAuthError,
    GcsClient,
    GcsInvalidRequestError,
    GcsMessage,
    GcsNotFoundError,
    GcsUnavailableError,
    NodeInfo,
    ResourceDemand,
    TlsConfig,
    create_token_file,
    read_token,
)
from rayfield._private.protocol import codec
from rayfield.testing import wait_for
from rayfield.util.state import StateClient

SERVICE = "rayfield.Gcs"
_RECORD_OF_CHANNEL = {
    CHANNEL_NODE_ALIVE: "GcsNodeInfo",
    CHANNEL_NODE_DEAD: "GcsNodeInfo",
    CHANNEL_ACTOR: "GcsActorInfo",
}


class Subscription:
    """A raw Subscribe stream of the GCS, read into a queue by a thread."""

    def __init__(self, gcs: Gcs, channels: list[str]) -> None:
        self._channel = grpc.insecure_channel(gcs.address)
        stream = self._channel.unary_stream(f"/{SERVICE}/Subscribe")
        request = codec.encode("GcsSubscribeRequest", {"channels": channels})
        self._call = stream(request, metadata=(("authorization", f"Bearer {gcs.token}"),))
        confirmation = codec.decode("GcsPubSubMessage", next(self._call))
        assert confirmation["channel"] == ""  # the stream is subscribed
        self._queue: queue.Queue[bytes] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for raw in self._call:
                self._queue.put(raw)
        except grpc.RpcError:
            pass

    def get(self, timeout_s: float) -> GcsMessage | None:
        try:
            fields = codec.decode("GcsPubSubMessage", self._queue.get(timeout=timeout_s))
        except queue.Empty:
            return None
        message = GcsMessage(fields["channel"], fields["key"], fields["payload"])
        table = _RECORD_OF_CHANNEL.get(message.channel)
        if table is not None:
            message.value = codec.decode_record(table, message.payload)
        return message

    def close(self) -> None:
        self._call.cancel()
        self._channel.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Gcs:
    proc: subprocess.Popen[str]
    port: int
    token: str
    db: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self, **kwargs: Any) -> GcsClient:
        kwargs.setdefault("retry_deadline_s", 10.0)
        kwargs.setdefault("tls", False)
        return GcsClient(self.address, self.token, **kwargs)

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def _wait_listening(proc: subprocess.Popen[str], timeout_s: float = 30.0) -> int:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("GCS listening on "):
                return int(line.rsplit(":", 1)[1])
            if not line and proc.poll() is not None:
                break
    raise AssertionError(f"the GCS did not start (exit status {proc.poll()})")


@pytest.fixture
def start_gcs(tmp_path: Path) -> Iterator[Callable[..., Gcs]]:
    """Factory of GCS processes; every one is stopped after the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(
        db: Path | None = None, port: int = 0, *extra: str, heartbeat_timeout_s: float = 3.0
    ) -> Gcs:
        db = db or tmp_path / "gcs.sqlite"
        token_file = tmp_path / "token"
        cmd = [sys.executable, "-m", "rayfield._private.gcs.server", "--port", str(port)]
        cmd += ["--db", str(db), "--token-file", str(token_file)]
        cmd += ["--heartbeat-timeout-s", str(heartbeat_timeout_s), *extra]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=_env())
        procs.append(proc)
        bound = _wait_listening(proc)
        return Gcs(proc, bound, read_token(token_file), db)

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture(scope="module")
def shared_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gcs]:
    """One GCS (4 MiB frame cap) for the tests that do not restart or kill it."""
    tmp = tmp_path_factory.mktemp("gcs")
    cmd = [sys.executable, "-m", "rayfield._private.gcs.server", "--db", str(tmp / "db")]
    cmd += ["--token-file", str(tmp / "token"), "--max-message-bytes", str(4 << 20)]
    cmd += ["--port-file", str(tmp / "port")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=_env())
    try:
        port = _wait_listening(proc)
        assert int((tmp / "port").read_text()) == port
        yield Gcs(proc, port, read_token(tmp / "token"), tmp / "db")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0  # SIGTERM stops cleanly
        assert proc.stdout is not None
        proc.stdout.close()


def _node(node_id: bytes, cpus: float = 4.0) -> NodeInfo:
    return NodeInfo(
        node_id,
        address="127.0.0.1:7000",
        socket_path="/tmp/node.sock",
        session_dir="/tmp/session",
        hostname="host-a",
        resources_total={"CPU": cpus, "memory": 1.5e9},
    )


def _oid(i: int) -> bytes:
    return i.to_bytes(20, "big")


# ---- tables ------------------------------------------------------------------------------


def test_nodes_round_trip(shared_gcs: Gcs) -> None:
    with shared_gcs.client() as c, Subscription(shared_gcs, [CHANNEL_NODE_DEAD]) as sub:
        c.register_node(_node(b"node-rt"))
        demand = [ResourceDemand({"CPU": 1.0, "GPU": 0.5}, count=3, infeasible=True)]
        assert c.heartbeat(b"node-rt", {"CPU": 2.5}, demand, idle_duration_s=4.25) is False
        [node] = [n for n in c.get_nodes() if n.node_id == b"node-rt"]
        assert node.idle_duration_s == 4.25
        with StateClient(f"127.0.0.1:{shared_gcs.port}", token=shared_gcs.token) as state:
            [row] = [r for r in state.node_records() if r["node_id"] == b"node-rt".hex()]
        assert row["idle_duration_s"] == 4.25 and row["alive"]  # the public state API
        assert node.alive and node.address == "127.0.0.1:7000" and node.hostname == "host-a"
        assert node.socket_path == "/tmp/node.sock" and node.session_dir == "/tmp/session"
        assert node.resources_total == {"CPU": 4.0, "memory": 1.5e9}
        assert node.resources_available == {"CPU": 2.5}
        assert node.demand == demand
        assert node.last_heartbeat_s >= node.registered_s > 0
        c.unregister_node(b"node-rt")
        message = sub.get(timeout_s=5)
        assert message is not None and message.key == b"node-rt"
        assert message.value.death_reason == "unregistered" and not message.value.alive
        [node] = [n for n in c.get_nodes() if n.node_id == b"node-rt"]
        assert not node.alive
        assert c.heartbeat(b"node-rt", {}) is True  # dead: must register again
        with pytest.raises(GcsNotFoundError, match="not registered"):
            c.unregister_node(b"never-seen")


def test_kv_round_trip(shared_gcs: Gcs) -> None:
    with shared_gcs.client() as c:
        assert c.kv_put("fn", "f:1", b"one") is True
        assert c.kv_put("fn", b"f:1", b"uno", overwrite=False) is False
        assert c.kv_get("fn", "f:1") == b"one"
        assert c.kv_put("fn", "f:1", b"\x00" * 100_000) is False  # replaced, not added
        assert c.kv_get("fn", "f:1") == b"\x00" * 100_000
        c.kv_put("fn", "f:2", b"two")
        c.kv_put("fn", "g:1", b"")
        c.kv_put("other", "f:3", b"three")
        assert c.kv_keys("fn", "f:") == [b"f:1", b"f:2"]
        assert c.kv_keys("fn") == [b"f:1", b"f:2", b"g:1"]
        assert c.kv_get("fn", "g:1") == b""
        assert c.kv_del("fn", "f:2") is True and c.kv_del("fn", "f:2") is False
        assert c.kv_get("fn", "f:2") is None


def test_actors_round_trip(shared_gcs: Gcs) -> None:
    with shared_gcs.client() as c, Subscription(shared_gcs, [CHANNEL_ACTOR]) as sub:
        actor = ActorInfo(b"actor-1", name="counter", namespace="ns", detached=True)
        actor.owner_node_id, actor.node_id, actor.payload = b"n-own", b"n-run", b"\x80opaque"
        c.register_actor(actor)
        message = sub.get(timeout_s=5)
        assert message is not None and message.value == actor
        with pytest.raises(GcsAlreadyExistsError, match="'counter' in namespace 'ns' is taken"):
            c.register_actor(ActorInfo(b"actor-2", name="counter", namespace="ns"))
        c.register_actor(ActorInfo(b"actor-3", name="counter", namespace="other"))
        assert c.get_actor(name="counter", namespace="ns") == actor
        c.update_actor(b"actor-1", ActorState.ALIVE, b"n-two")
        got = c.get_actor(b"actor-1")
        assert got is not None and got.state == ActorState.ALIVE and got.node_id == b"n-two"
        c.update_actor(b"actor-1", ActorState.DEAD)
        assert c.get_actor(name="counter", namespace="ns") is None  # dead: the name is free
        c.register_actor(ActorInfo(b"actor-2", name="counter", namespace="ns"))
        ids = {a.actor_id for a in c.list_actors()}
        assert {b"actor-1", b"actor-2", b"actor-3"} <= ids
        assert c.get_actor(b"no-such-actor") is None
        with pytest.raises(GcsNotFoundError):
            c.update_actor(b"no-such-actor", ActorState.ALIVE)


def test_actor_re_record_keeps_what_it_does_not_say(shared_gcs: Gcs) -> None:
    with shared_gcs.client() as c:
        c.register_actor(ActorInfo(b"moved-1", name="ps", namespace="m", payload=b"{}"))
        # The node that placed it elsewhere records where it runs, without the name:
        c.register_actor(ActorInfo(b"moved-1", node_id=b"n-far", state=ActorState.ALIVE))
        got = c.get_actor(name="ps", namespace="m")
        assert got is not None and got.actor_id == b"moved-1"
        assert got.node_id == b"n-far" and got.payload == b"{}" and got.state == ActorState.ALIVE


def test_object_directory_round_trip(shared_gcs: Gcs) -> None:
    with shared_gcs.client() as c:
        c.register_node(_node(b"obj-a"))
        c.register_node(_node(b"obj-b"))
        c.add_object_locations(b"obj-a", [_oid(1), _oid(2)])
        c.add_object_locations(b"obj-b", [_oid(2)])
        assert c.get_object_locations([_oid(1), _oid(2), _oid(3)]) == {
            _oid(1): [b"obj-a"],
            _oid(2): [b"obj-a", b"obj-b"],
            _oid(3): [],
        }
        c.remove_object_locations(b"obj-a", [_oid(2)])
        assert c.get_object_locations([_oid(2)]) == {_oid(2): [b"obj-b"]}
        with pytest.raises(GcsNotFoundError, match="register it"):
            c.add_object_locations(b"obj-unknown", [_oid(4)])
        with pytest.raises(GcsInvalidRequestError, match="20 bytes"):
            c.add_object_locations(b"obj-a", [b"short"])
        c.unregister_node(b"obj-b")  # a dead node's locations are dropped
        assert c.get_object_locations([_oid(2)]) == {_oid(2): []}


def test_object_directory_forgets_every_copy_of_freed_objects(shared_gcs: Gcs) -> None:
    with shared_gcs.client() as c:
        c.register_node(_node(b"free-a"))
        c.register_node(_node(b"free-b"))
        c.add_object_locations(b"free-a", [_oid(41), _oid(42)])
        c.add_object_locations(b"free-b", [_oid(41), _oid(43)])
        c.remove_object_locations(b"", [_oid(41), _oid(42), _oid(44)])  # 44: never recorded
        assert c.get_object_locations([_oid(41), _oid(42), _oid(43)]) == {
            _oid(41): [],
            _oid(42): [],
            _oid(43): [b"free-b"],
        }


def test_jobs_and_task_events_round_trip(shared_gcs: Gcs) -> None:
    with shared_gcs.client() as c:
        c.add_job(b"job-1", driver_pid=1234, node_id=b"n1", entrypoint="python train.py")
        [job] = [j for j in c.list_jobs() if j.job_id == b"job-1"]
        assert (job.driver_pid, job.node_id, job.entrypoint) == (1234, b"n1", "python train.py")
        assert not job.finished and job.start_time_s > 0
        c.mark_job_finished(b"job-1")
        [job] = [j for j in c.list_jobs() if j.job_id == b"job-1"]
        assert job.finished and job.end_time_s >= job.start_time_s
        with pytest.raises(GcsNotFoundError, match="never added"):
            c.mark_job_finished(b"job-unknown")
        events = [f"event-{i}".encode() for i in range(50)]
        c.add_task_events(events[:20])
        c.add_task_events(events[20:])
        assert c.get_task_events(limit=5) == events[-5:]
        assert c.get_task_events()[-50:] == events


def test_publish_subscribe(shared_gcs: Gcs) -> None:
    with shared_gcs.client() as c, Subscription(shared_gcs, ["LOGS"]) as sub:
        c.publish("OTHER", "k", b"not for us")
        c.publish("LOGS", "k1", b"hello")
        message = sub.get(timeout_s=5)
        assert message is not None
        assert (message.channel, message.key, message.payload) == ("LOGS", b"k1", b"hello")
        assert sub.get(timeout_s=0.2) is None


# ---- liveness and persistence ---------------------------------------------------------------


def test_node_declared_dead_after_missed_heartbeats(start_gcs: Callable[..., Gcs]) -> None:
    gcs = start_gcs(heartbeat_timeout_s=1.0)
    with gcs.client() as c, Subscription(gcs, [CHANNEL_NODE_DEAD, CHANNEL_ACTOR]) as sub:
        c.register_node(_node(b"silent"))
        c.register_node(_node(b"beating"))
        c.add_object_locations(b"silent", [_oid(7)])
        c.register_actor(ActorInfo(b"a-silent", name="x", node_id=b"silent"))
        assert sub.get(timeout_s=5).channel == CHANNEL_ACTOR  # type: ignore[union-attr]

        def silent_is_dead() -> bool:  # and "beating" keeps beating meanwhile
            assert c.heartbeat(b"beating", {"CPU": 1.0}) is False
            return not {n.node_id: n.alive for n in c.get_nodes()}[b"silent"]

        wait_for(silent_is_dead, 30, "the silent node declared dead", interval=0.05)
        got = [sub.get(timeout_s=5) for _ in range(2)]
        assert [m.channel for m in got if m] == [CHANNEL_ACTOR, CHANNEL_NODE_DEAD]
        assert got[1] is not None and got[1].key == b"silent"
        assert "missed heartbeats" in got[1].value.death_reason
        alive = {n.node_id: n.alive for n in c.get_nodes()}
        assert alive == {b"silent": False, b"beating": True}
        assert c.get_object_locations([_oid(7)]) == {_oid(7): []}
        actor = c.get_actor(b"a-silent")
        assert actor is not None and actor.state == ActorState.DEAD


def test_restart_recovers_tables_and_retries(start_gcs: Callable[..., Gcs]) -> None:
    gcs = start_gcs(heartbeat_timeout_s=2.5)
    c = gcs.client(retry_deadline_s=20.0)
    c.register_node(_node(b"n-keep"))
    c.register_node(_node(b"n-gone"))
    c.kv_put("ns", "k", b"v")
    c.register_actor(ActorInfo(b"actor", name="named", detached=True, node_id=b"n-keep"))
    c.add_job(b"job", driver_pid=42)
    c.add_object_locations(b"n-keep", [_oid(1)])
    gcs.kill9()

    result: dict[str, Any] = {}
    caller = threading.Thread(target=lambda: result.update(value=c.kv_get("ns", "k")))
    caller.start()  # issued while the GCS is down: retried until it is back
    caller.join(timeout=0.5)
    assert caller.is_alive()
    gcs2 = start_gcs(gcs.db, gcs.port, heartbeat_timeout_s=2.5)
    caller.join(timeout=20)
    assert result == {"value": b"v"}
    assert c.heartbeat(b"n-keep", {"CPU": 1.0}) is False  # known from before the restart
    assert c.get_actor(name="named") is not None
    assert [j.job_id for j in c.list_jobs()] == [b"job"]
    assert c.get_object_locations([_oid(1)]) == {_oid(1): [b"n-keep"]}

    # A node that does not come back within the heartbeat timeout is declared dead.
    def n_gone_dead() -> dict[bytes, bool] | None:
        assert c.heartbeat(b"n-keep", {"CPU": 1.0}) is False
        alive = {n.node_id: n.alive for n in c.get_nodes()}
        return None if alive[b"n-gone"] else alive

    alive = wait_for(n_gone_dead, 10, "n-gone declared dead", interval=0.1)
    assert alive == {b"n-keep": True, b"n-gone": False}
    c.close()
    gcs2.proc.terminate()
    assert gcs2.proc.wait(timeout=10) == 0


def test_heartbeat_after_restart_without_the_node_asks_to_reregister(
    start_gcs: Callable[..., Gcs], tmp_path: Path
) -> None:
    gcs = start_gcs(tmp_path / "first.sqlite")
    with gcs.client() as c:
        c.register_node(_node(b"n1"))
        assert c.heartbeat(b"n1", {}) is False
        gcs.kill9()
        start_gcs(tmp_path / "fresh.sqlite", gcs.port)  # restarted without the node's record
        assert c.heartbeat(b"n1", {}) is True
        c.register_node(_node(b"n1"))
        assert c.heartbeat(b"n1", {}) is False


# ---- security -----------------------------------------------------------------------------


def _raw_call(gcs: Gcs, method: str, payload: bytes, metadata: Any = None) -> Any:
    with grpc.insecure_channel(gcs.address) as channel:
        if method == "Subscribe":
            stream = channel.unary_stream(f"/{SERVICE}/{method}")
            return list(stream(payload, timeout=5, metadata=metadata))
        return channel.unary_unary(f"/{SERVICE}/{method}")(payload, timeout=5, metadata=metadata)


def _bearer(token: str) -> Any:
    return (("authorization", f"Bearer {token}"),)


@pytest.mark.parametrize("method", ["GetNodes", "KvPut", "Subscribe"])
def test_missing_or_wrong_token_is_refused(shared_gcs: Gcs, method: str) -> None:
    for metadata in (None, _bearer("0" * 64), _bearer(shared_gcs.token[:-1])):
        with pytest.raises(grpc.RpcError) as info:
            _raw_call(shared_gcs, method, b"\xff" * 64, metadata)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "cluster token" in (info.value.details() or "")
    with pytest.raises(GcsAuthError, match="missing or wrong cluster token"):
        GcsClient(shared_gcs.address, "ab" * 32, tls=False).kv_keys("ns")
    with shared_gcs.client() as c:  # still serving
        c.kv_put("auth", "k", b"v")


def test_garbage_does_not_crash_the_server(shared_gcs: Gcs) -> None:
    for blob in (os.urandom(4096), b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(512), b""):
        with socket.create_connection(("127.0.0.1", shared_gcs.port), timeout=5) as s:
            s.sendall(blob)
            s.shutdown(socket.SHUT_WR)
            while s.recv(4096):  # the server reads it all, then closes the connection
                pass
    token = _bearer(shared_gcs.token)
    for method in ("RegisterNode", "KvPut", "GetObjectLocations", "AddTaskEvents", "Subscribe"):
        for payload in (b"", b"\x01\x02", os.urandom(64), b"\xff\xff\xff\x7f" + os.urandom(60)):
            with pytest.raises(grpc.RpcError) as info:
                _raw_call(shared_gcs, method, payload, token)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
    with pytest.raises(grpc.RpcError) as info:  # over the 4 MiB frame cap
        _raw_call(shared_gcs, "AddTaskEvents", b"\x00" * (5 << 20), token)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert shared_gcs.proc.poll() is None
    with shared_gcs.client() as c:
        assert c.kv_put("garbage", "still", b"serving") is True


def test_token_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "token"
    token = create_token_file(path)
    assert len(bytes.fromhex(token)) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_token(path) == token
    with pytest.raises(FileExistsError):
        create_token_file(path)
    path.chmod(0o644)
    with pytest.raises(GcsAuthError, match="chmod 600"):
        read_token(path)


def test_tls_refuses_plaintext_and_accepts_the_right_certs(
    start_gcs: Callable[..., Gcs], tmp_path: Path
) -> None:
    f = make_test_certificates(tmp_path)
    gcs = start_gcs(
        None,
        0,
        "--tls-cert",
        str(f["server.crt"]),
        "--tls-key",
        str(f["server.key"]),
        "--tls-ca",
        str(f["ca.crt"]),
    )
    plain = gcs.client(tls=False, retry_deadline_s=1.0)
    with plain, pytest.raises(GcsUnavailableError, match="TLS"):
        plain.kv_keys("ns")
    rogue = TlsConfig(str(f["rogue-client.crt"]), str(f["rogue-client.key"]), str(f["ca.crt"]))
    bad = gcs.client(tls=rogue, retry_deadline_s=1.0)
    with bad, pytest.raises(GcsUnavailableError):
        bad.kv_keys("ns")
    good = TlsConfig(str(f["client.crt"]), str(f["client.key"]), str(f["ca.crt"]))
    with gcs.client(tls=good) as c:
        assert c.kv_put("tls", "k", b"v") is True
        assert c.kv_get("tls", "k") == b"v"


def test_workers_and_rayfield_do_not_import_grpc() -> None:
    code = (
        "import sys, rayfield, rayfield._private.runtime.worker_main\n"
        "assert 'grpc' not in sys.modules, 'grpc imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(), timeout=60)


def test_client_subscription_decodes_node_records_and_ends_when_cancelled(
    shared_gcs: Gcs,
) -> None:
    with shared_gcs.client() as c:
        sub = c.subscribe([CHANNEL_NODE_ALIVE])
        got: queue.Queue[GcsMessage] = queue.Queue()
        errors: list[BaseException] = []

        def read() -> None:
            try:
                for m in sub:
                    got.put(m)
            except BaseException as exc:
                errors.append(exc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        node = NodeInfo(node_id=b"S" * 20, address="s:1", resources_total={"x": 2.0})
        c.register_node(node)
        message = got.get(timeout=10)
        assert message.channel == CHANNEL_NODE_ALIVE and message.key == node.node_id
        assert isinstance(message.value, NodeInfo) and message.value.resources_total == {"x": 2.0}
        sub.cancel()
        reader.join(timeout=10)
        assert not reader.is_alive() and errors == []  # cancelling ends it without an error
        c.unregister_node(node.node_id)
