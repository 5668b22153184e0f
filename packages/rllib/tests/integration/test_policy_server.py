"""Policy serving over real HTTP: PolicyServer in an ExternalEnv, PolicyClient and raw
HTTP clients, good and bad; the reference's CartPole server learns through its client."""

from __future__ import annotations

import functools
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rayfield.rllib.agents.registry import get_trainer_class
from rayfield.rllib.env import ExternalEnv, register_env
from rayfield.rllib.env.policy_client import PolicyClient, PolicyServerError
from rayfield.rllib.env.policy_server import PolicyServer, server_token_path
from rayfield.testing import wait_for

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, (4,), np.float32)


class AnsweringEnv(ExternalEnv):
    """An ExternalEnv whose 'sampler' is a thread here: action 1 when obs[0] > 0."""

    def __init__(self) -> None:
        super().__init__(gym.spaces.Discrete(2), OBS_SPACE, max_concurrent=4)
        self.events: list[Any] = []

    def run(self) -> None:
        pass

    def answer_forever(self) -> None:
        while not self._stopped.is_set():
            for e in self.poll_events(0.1):
                self.events.append(e)
                if e.kind == "obs":
                    reply = int(e.obs[0] > 0) if e.wants_action else None
                    self.send_action(e.episode_id, reply)


@pytest.fixture
def served() -> Iterator[tuple[AnsweringEnv, PolicyServer]]:
    env = AnsweringEnv()
    server = PolicyServer(env, "127.0.0.1", 0)
    threads = [
        threading.Thread(target=server.serve_forever, daemon=True),
        threading.Thread(target=env.answer_forever, daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        yield env, server
    finally:
        env.stop()
        server.shutdown()
        server.server_close()
        for t in threads:
            t.join(5)


def post(server: PolicyServer, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    try:
        conn.request("POST", "/", body, headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


@pytest.mark.parametrize("serialization", ["msgpack", "json"])
def test_an_episode_through_the_client(served: Any, serialization: str) -> None:
    env, server = served
    client = PolicyClient(f"127.0.0.1:{server.server_port}", serialization=serialization)
    eid = client.start_episode(training_enabled=False)
    assert client.get_action(eid, np.array([0.5, 0, 0, 0], np.float32)) == 1
    assert client.get_action(eid, [-0.5, 0.0, 0.0, 0.0]) == 0  # lists are fine too
    client.log_returns(eid, 1.0, {"note": "ok"})
    client.log_returns(eid, 0.5)
    client.log_action(eid, np.zeros(4, np.float32), 1)
    client.end_episode(eid, np.zeros(4, np.float32))
    client.close()
    # the env's thread takes the end event after the reply: wait for it
    wait_for(lambda: len(env.events) == 4, 30, "the episode's four events")
    kinds = [(e.kind, e.reward, e.training_enabled) for e in env.events]
    assert kinds == [
        ("obs", 0.0, False),
        ("obs", 0.0, False),
        ("obs", 1.5, False),
        ("end", 0.0, False),
    ]
    assert env.events[2].action == 1 and env.events[2].info == {"note": "ok"}


def test_bad_requests_get_4xx_and_the_server_keeps_serving(served: Any) -> None:
    _, server = served
    good = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    start = json.dumps({"command": "START_EPISODE", "episode_id": "e"}).encode()
    assert post(server, start, {"Content-Type": "application/json"})[0] == 401
    assert post(server, start, {**good, "Authorization": "Bearer nope"})[0] == 401
    assert post(server, b"{not json", good)[0] == 400
    assert post(server, b"[1]", good)[0] == 400
    assert post(server, json.dumps({"command": "FORK"}).encode(), good)[0] == 400
    status, reply = post(server, b"\x80\x04K.", {**good, "Content-Type": "application/pickle"})
    assert status == 415 and "application/json" in reply["error"]
    # an oversized body is refused from its headers, before it is read
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    conn.putrequest("POST", "/")
    for key, value in {**good, "Content-Length": str(2 << 20)}.items():
        conn.putheader(key, value)
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()
    unknown = {"command": "GET_ACTION", "episode_id": "nope", "observation": [0, 0, 0, 0]}
    status, reply = post(server, json.dumps(unknown).encode(), good)
    assert status == 404 and "never started" in reply["error"]
    assert post(server, start, good) == (200, {"episode_id": "e"})
    assert post(server, start, good)[0] == 409  # the id is in use
    wrong = {"command": "GET_ACTION", "episode_id": "e", "observation": [1, 2]}
    status, reply = post(server, json.dumps(wrong).encode(), good)
    assert status == 400 and "shape [2]" in reply["error"]
    for _ in range(3):  # max_concurrent=4 with "e" running
        post(server, json.dumps({"command": "START_EPISODE"}).encode(), good)
    assert post(server, json.dumps({"command": "START_EPISODE"}).encode(), good)[0] == 429
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    conn.request("GET", "/")
    assert conn.getresponse().status == 405
    conn.close()
    # and still serves a good client
    ok = {"command": "GET_ACTION", "episode_id": "e", "observation": [1, 0, 0, 0]}
    assert post(server, json.dumps(ok).encode(), good) == (200, {"action": 1})
    client = PolicyClient(server.address, token="wrong")
    with pytest.raises(PolicyServerError) as info:
        client.start_episode()
    assert info.value.status == 401


def raw_exchange(server: PolicyServer, data: bytes) -> bytes:
    """Send `data` on a new connection and end it; all the server sends until it closes."""
    import socket

    with socket.create_connection(("127.0.0.1", server.server_port), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


def test_raw_http_keep_alive_and_malformed_heads(served: Any) -> None:
    env, server = served
    body = json.dumps({"command": "START_EPISODE", "episode_id": "k"}).encode()

    def head_of(length: int) -> bytes:
        return (
            f"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n"
        ).encode()

    head = head_of(len(body))
    action = json.dumps({"command": "GET_ACTION", "episode_id": "k", "observation": [1, 0, 0, 0]})
    second = head_of(len(action))  # (a replace of the length's digits could hit the token)
    # two requests on one connection (the second says it is the last), each answered in turn
    out = raw_exchange(
        server, head + b"\r\n" + body + second + b"Connection: close\r\n\r\n" + action.encode()
    )
    replies = out.split(b"HTTP/1.1 ")[1:]
    assert [r[:3] for r in replies] == [b"200", b"200"]
    assert replies[0].endswith(b'{"episode_id": "k"}') and replies[1].endswith(b'{"action": 1}')
    assert b"Connection: close" in replies[1] and b"Date: " in replies[0]
    # HTTP/1.0 closes after one request; Expect: 100-continue is answered before the body
    out = raw_exchange(server, second.replace(b"HTTP/1.1", b"HTTP/1.0") + b"\r\n" + action.encode())
    assert out.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close" in out
    out = raw_exchange(
        server,
        head + b"Expect: 100-continue\r\nConnection: close\r\n\r\n" + body.replace(b"k", b"l"),
    )
    assert out.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    for bad, status in [
        (b"NONSENSE\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nHost: x\r\nA: 1\r\nA: 2\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"400"),  # no Host (RFC 9112)
        (
            b"POST / HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"H%d: x\r\n" % i for i in range(100))
            + b"\r\n",
            b"431",
        ),
        (b"POST / HTTP/1.1\r\nHost: x\r\nBig: " + b"x" * 70_000 + b"\r\n\r\n", b"431"),
        (b"POST /" + b"x" * 65_600 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"414"),
        (b"POST /" + b"x" * 200_000, b"414"),  # the rest unread, drained: no reset
        (b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n", b"405"),
    ]:
        out = raw_exchange(server, bad)
        assert out.startswith(b"HTTP/1.1 " + status), (bad[:40], out[:80])
        assert b"Connection: close" in out
    assert raw_exchange(server, b"POST / HTTP/1.1\r\nHost: x\r\n") == b""  # ends in the head
    # a chunked body is read to its end (and held to max_request_bytes)
    chunked = head.replace(b"Content-Length: %d" % len(body), b"Transfer-Encoding: chunked")
    half = len(body) // 2
    pieces = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        half,
        body[:half],
        len(body) - half,
        body[half:],
    )
    out = raw_exchange(server, chunked + b"Connection: close\r\n\r\n" + pieces.replace(b"k", b"m"))
    assert out.startswith(b"HTTP/1.1 200 OK\r\n") and out.endswith(b'{"episode_id": "m"}')
    server.max_request_bytes = 16
    out = raw_exchange(server, chunked + b"\r\n" + pieces)
    assert out.startswith(b"HTTP/1.1 413 ") and b"Connection: close" in out
    server.max_request_bytes = 1 << 20
    assert set(env._episodes) == {"k", "l", "m"}  # and it serves on


def one_reply_server(reply: bytes) -> tuple[int, threading.Thread]:
    """A server on a free port that answers one connection's first request with `reply`
    (read up to the end of a msgpack request's body) and closes."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        with listener, listener.accept()[0] as conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(reply)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def test_the_client_reads_chunked_replies_and_refuses_non_http() -> None:
    import msgpack

    body = msgpack.packb({"episode_id": "c"})
    chunked = b"HTTP/1.1 200 OK\r\nContent-Type: application/msgpack\r\n"
    chunked += b"Transfer-Encoding: chunked\r\n\r\n"
    chunked += b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (3, body[:3], len(body) - 3, body[3:])
    port, thread = one_reply_server(chunked)
    client = PolicyClient(f"127.0.0.1:{port}", token="t")
    assert client.start_episode() == "c"
    thread.join(10)
    client.close()
    port, thread = one_reply_server(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
    client = PolicyClient(f"127.0.0.1:{port}", token="t")
    with pytest.raises(ConnectionError, match=r"not an HTTP/1\.1 reply"):
        client.start_episode()
    thread.join(10)


def test_returns_go_with_the_next_request_or_at_close(served: Any) -> None:
    env, server = served
    client = PolicyClient(server.address)
    eid = client.start_episode()
    client.get_action(eid, [1.0, 0, 0, 0])
    client.log_returns(eid, 1.0)
    client.log_returns(eid, 2.0, {"n": 1})
    assert env._episodes[eid].reward == 0.0  # held in the client
    with pytest.raises(TypeError, match="reward must be a number"):
        client.log_returns(eid, "lots")  # type: ignore[arg-type]
    client.get_action(eid, [1.0, 0, 0, 0])
    assert (env.events[-1].reward, env.events[-1].info) == (3.0, {"n": 1})
    client.log_returns(eid, 0.5)
    client.close()  # sends what it holds
    assert env._episodes[eid].reward == 0.5
    direct = PolicyClient(server.address, defer_returns=False)
    direct.log_returns(eid, 0.25)
    assert env._episodes[eid].reward == 0.75
    with pytest.raises(PolicyServerError) as info:
        direct.log_returns("nope", 1.0)
    assert info.value.status == 404
    direct.close()


def test_the_token_is_private_and_found_on_this_machine(
    served: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, server = served
    path = server_token_path(server.server_port)
    assert server.token_file == path and (path.stat().st_mode & 0o077) == 0
    assert PolicyClient(server.address).token == server.token
    monkeypatch.setenv("RAYFIELD_POLICY_SERVER_TOKEN", "from-env")
    assert PolicyClient(server.address).token == "from-env"
    monkeypatch.delenv("RAYFIELD_POLICY_SERVER_TOKEN")
    with pytest.raises(PermissionError, match="no token for the policy server"):
        PolicyClient("127.0.0.1:1")
    with pytest.raises(ValueError, match="inference_mode"):
        PolicyClient(server.address, inference_mode="magic")


KILLED_CLIENT = """
import sys
import numpy as np
from rayfield.rllib.env.policy_client import PolicyClient
client = PolicyClient(sys.argv[1], token=sys.argv[2])
eid = client.start_episode("killed")
client.get_action(eid, np.zeros(4, np.float32))
print("mid-episode", flush=True)
sys.stdin.read()
"""


def test_a_client_killed_mid_episode_does_not_stop_the_others(served: Any) -> None:
    _, server = served
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, server.address, server.token],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "mid-episode"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(10)
    client = PolicyClient(server.address)
    eid = client.start_episode()
    assert client.get_action(eid, [1.0, 0, 0, 0]) == 1
    client.end_episode(eid, [0.0, 0, 0, 0])
    client.close()


class CartpoleServing(ExternalEnv):
    """The reference's example: the env's run() serves HTTP clients."""

    servers: list[PolicyServer] = []

    def __init__(self, config: Any) -> None:
        super().__init__(gym.spaces.Discrete(2), gym.make("CartPole-v1").observation_space)

    def run(self) -> None:
        server = PolicyServer(self, "127.0.0.1", 0)
        CartpoleServing.servers.append(server)
        try:
            server.serve_forever(poll_interval=0.1)
        finally:
            server.server_close()

    def stop(self, timeout_s: float = 5.0) -> None:
        for server in CartpoleServing.servers:
            server.shutdown()
        super().stop(timeout_s)


register_env("served_http_cartpole", lambda ctx: CartpoleServing(ctx))


@pytest.mark.parametrize(
    ("target", "budget"),
    [(50, 12_000), pytest.param(120, 60_000, marks=pytest.mark.slow)],
)
def test_the_reference_cartpole_server_learns_through_http_clients(
    target: float,
    budget: int,
    ppo_served_cartpole_config: dict[str, Any],
    train_to: Any,
    play_cartpole: Any,
) -> None:
    """Four applications play CartPole through PolicyClient; PPO trains on what they
    report until the mean return reaches ``target`` (random play: about 22)."""
    CartpoleServing.servers.clear()
    trainer = get_trainer_class("PPO")(
        env="served_http_cartpole", config=ppo_served_cartpole_config
    )

    def application(seed: int, stop: threading.Event) -> None:
        # plays once the env's server listens
        server = wait_for(lambda: CartpoleServing.servers, 60, "the env's server")[0]
        play_cartpole(PolicyClient(server.address), stop, seed)

    apps = [functools.partial(application, 1000 * i) for i in range(4)]
    train_to(trainer, target, budget, apps)
