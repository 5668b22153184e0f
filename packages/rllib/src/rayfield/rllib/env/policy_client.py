"""`PolicyClient`: an application outside the cluster drives episodes of a served policy.

RLlib's ``PolicyClient`` (reference: ``ray.rllib.utils.policy_client.PolicyClient``), over
the wire of ``serving_wire.py`` (msgpack by default, or JSON; never pickle) with the
server's token. Each thread keeps one HTTP/1.1 connection open to the server, so a
request costs one round trip: a single write of the request's head and body, and a read
of the reply; ``h11`` writes the one and parses the other.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
import urllib.parse
from typing import TYPE_CHECKING, Any

import h11
import numpy as np

from rayfield.rllib.env.policy_server import server_token_path
from rayfield.rllib.env.serving_wire import JSON, MSGPACK, WireError, decode, encode
from rayfield.util import private_files

if TYPE_CHECKING:
    from rayfield.rllib.env.policy_client_local import LocalInference

__all__ = ["ENV_TOKEN", "PolicyClient", "PolicyServerError"]

ENV_TOKEN = "RAYFIELD_POLICY_SERVER_TOKEN"
"""The environment variable a client reads the server's token from when none is given."""


class PolicyServerError(RuntimeError):
    """The server refused or failed a request.

    Attributes:
        status: the HTTP status (401 token, 404 unknown episode, 409 episode id in use,
            413 too large, 429 too many episodes, 400 invalid, 5xx server side).
        message: the server's explanation.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"policy server answered {status}: {message}")
        self.status = status
        self.message = message


_MAX_HEAD = 65536  # the longest status line and headers of a reply read (bytes)
_RECV_BYTES = 65536


class _Connection:
    """One kept-alive HTTP/1.1 connection to the server (TLS for https), its framing
    ``h11``'s: a request is one write of its head and body, the reply is read until
    ``h11`` has it whole (a Content-Length, chunked or until-close body).

    Raises (from `post`):
        ConnectionResetError: the server closed the connection before replying (an idle
            keep-alive connection it dropped: the caller may retry on a new one).
        ConnectionError: a reply that is not HTTP/1.1 (``h11`` refused it) or ended early.
        OSError: the socket failed (timeouts included).
    """

    def __init__(self, host: str, port: int, timeout_s: float, tls: bool) -> None:
        sock = socket.create_connection((host, port), timeout=timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.http = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)

    def close(self) -> None:
        self.sock.close()

    def post(self, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, str, bytes, bool]:
        """Send a POST of ``body`` with ``headers`` (Content-Length added); ``(status,
        content type, body, the connection must close)``."""
        http = self.http
        if http.our_state is h11.DONE and http.their_state is h11.DONE:
            http.start_next_cycle()  # the connection's previous exchange is over
        head = h11.Request(
            method=b"POST",
            target=b"/",
            headers=[*headers, (b"Content-Length", b"%d" % len(body))],
        )
        message = http.send(head) + http.send(h11.Data(data=body)) + http.send(h11.EndOfMessage())
        self.sock.sendall(message)
        status, kind, chunks = 0, "", []
        try:
            while True:
                event = http.next_event()
                if event is h11.NEED_DATA:
                    data = self.sock.recv(_RECV_BYTES)
                    if not data and not status:
                        raise ConnectionResetError("the policy server closed the connection")
                    http.receive_data(data)
                elif type(event) is h11.Response:
                    status = event.status_code
                    for name, value in event.headers:  # names come lowercased
                        if name == b"content-type":
                            kind = value.decode("latin-1").split(";")[0].strip()
                elif type(event) is h11.Data:
                    chunks.append(event.data)
                elif type(event) is h11.EndOfMessage:
                    break
                elif type(event) is h11.ConnectionClosed:
                    raise ConnectionResetError("the policy server closed the connection")
                # an InformationalResponse (100 Continue) is skipped
        except h11.RemoteProtocolError as exc:
            raise ConnectionError(f"not an HTTP/1.1 reply: {exc}") from None
        closes = http.our_state is h11.MUST_CLOSE or http.their_state is h11.MUST_CLOSE
        return status, kind, b"".join(chunks), closes


class PolicyClient:
    """Talks to a `PolicyServer` (see the module docstring).

    Args:
        address: ``"http://HOST:PORT"``, ``"https://HOST:PORT"`` or ``"HOST:PORT"`` (the
            reference's example omits the scheme; http is assumed).
        inference_mode: ``"remote"``: the server computes every action; ``"local"``: the
            client builds a copy of the server's policy (from its class path, spaces and
            JSON config; see `rayfield.rllib.env.policy_client_local`), computes the
            actions here and posts the batches it samples to the server (needs a
            `PolicyServerInput` server); it sets torch to one intra-op thread for the
            process (``torch.set_num_threads(1)``, as a rollout worker does).
        update_interval: local inference: fetch the server's weights every this many
            seconds (checked at each call; None: only at the start and by
            `update_policy`).
        token: the server's token; None: ``$RAYFIELD_POLICY_SERVER_TOKEN``, else the token
            file a server on this machine wrote for its port.
        serialization: ``"msgpack"`` (default) or ``"json"``.
        timeout_s: how long one request may take (a ``get_action`` waits for the
            server's sampler).
        defer_returns: remote inference: keep the rewards (and info) of `log_returns`
            here and send them with the episode's next request through this client
            (``get_action``, ``log_action`` or ``end_episode``), which the server adds
            up as separate calls would have been: one round trip per step instead of
            two. Rewards still held are sent by `close`. A reward that is not a number
            raises ``TypeError`` at once; an unknown episode is reported by the next
            request. False: one ``LOG_RETURNS`` request per call (as RLlib's client).

    Raises:
        ValueError: a malformed address, an unknown ``inference_mode`` or serialization,
            ``update_interval`` <= 0, a token that is not printable ASCII.
        PermissionError: no token given and none can be found for this address.
        PolicyServerError: local inference, and the server has no policy to give (a
            classic `PolicyServer`: 400) or refused the token (401).
    """

    def __init__(
        self,
        address: str,
        inference_mode: str = "remote",
        update_interval: float | None = 10.0,
        *,
        token: str | None = None,
        serialization: str = "msgpack",
        timeout_s: float = 60.0,
        defer_returns: bool = True,
    ) -> None:
        if inference_mode not in ("remote", "local"):
            raise ValueError(
                f"inference_mode={inference_mode!r}: use 'remote' (the server computes "
                "actions) or 'local' (a policy copy here; needs a PolicyServerInput server)"
            )
        if update_interval is not None and not update_interval > 0:
            raise ValueError(f"update_interval must be > 0 seconds or None, not {update_interval}")
        if serialization not in ("msgpack", "json"):
            raise ValueError(f"serialization must be 'msgpack' or 'json', not {serialization!r}")
        url = urllib.parse.urlsplit(address if "://" in address else f"http://{address}")
        if url.scheme not in ("http", "https") or not url.hostname or not url.port:
            raise ValueError(f"address {address!r} is not HOST:PORT or http(s)://HOST:PORT")
        self.address = f"{url.scheme}://{url.hostname}:{url.port}"
        self._https = url.scheme == "https"
        self._host, self._port = url.hostname, url.port
        self.token = token or os.environ.get(ENV_TOKEN) or _local_token(url.hostname, url.port)
        if not self.token.isprintable() or not self.token.isascii():
            raise ValueError("the token must be printable ASCII (it goes into an HTTP header)")
        self.content_type = MSGPACK if serialization == "msgpack" else JSON
        host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
        self._headers = [
            (b"Host", f"{host}:{url.port}".encode("ascii")),
            (b"Content-Type", self.content_type.encode("ascii")),
            (b"Authorization", f"Bearer {self.token}".encode("ascii")),
        ]
        self.timeout_s = float(timeout_s)
        self.inference_mode = inference_mode
        self.update_interval = update_interval
        self.defer_returns = bool(defer_returns)
        self._returns: dict[str, list[Any]] = {}  # episode id -> [reward, info] held back
        self._local = threading.local()
        self.local_inference: LocalInference | None = None
        if inference_mode == "local":
            from rayfield.rllib.env.policy_client_local import LocalInference

            self.local_inference = LocalInference(self._send, update_interval)

    # -- the episode API ---------------------------------------------------------------
    def start_episode(self, episode_id: str | None = None, training_enabled: bool = True) -> str:
        """Start an episode on the server; returns its id (``episode_id`` or a new one)."""
        if self.local_inference is not None:
            return self.local_inference.ready().start_episode(episode_id, training_enabled)
        reply = self._send(
            {
                "command": "START_EPISODE",
                "episode_id": episode_id,
                "training_enabled": training_enabled,
            }
        )
        return str(reply["episode_id"])

    def get_action(self, episode_id: str, observation: Any) -> Any:
        """The policy's action for ``observation`` (an int, float or numpy array)."""
        if self.local_inference is not None:
            return self.local_inference.ready().get_action(episode_id, observation)
        reply = self._send_step(
            {"command": "GET_ACTION", "episode_id": episode_id, "observation": observation}
        )
        return reply["action"]

    def log_action(self, episode_id: str, observation: Any, action: Any) -> None:
        """Record an action the application chose itself at ``observation`` (off-policy)."""
        if self.local_inference is not None:
            return self.local_inference.ready().log_action(episode_id, observation, action)
        self._send_step(
            {
                "command": "LOG_ACTION",
                "episode_id": episode_id,
                "observation": observation,
                "action": action,
            }
        )

    def log_returns(
        self, episode_id: str, reward: float, info: dict[str, Any] | None = None
    ) -> None:
        """Add ``reward`` to the reward of the episode's last action (held and sent with
        the episode's next request: see ``defer_returns``).

        Raises:
            TypeError: ``reward`` is not a number (deferred returns).
        """
        if self.local_inference is not None:
            return self.local_inference.ready().log_returns(episode_id, reward, info)
        if not self.defer_returns:
            self._send(
                {"command": "LOG_RETURNS", "episode_id": episode_id, "reward": reward, "info": info}
            )
            return None
        if isinstance(reward, (bool, np.bool_)) or not isinstance(reward, (int, float, np.number)):
            raise TypeError(f"reward must be a number, not {type(reward).__name__}")
        held = self._returns.get(episode_id)
        if held is None:
            self._returns[episode_id] = [float(reward), info or None]
        else:
            held[0] += float(reward)
            if info:
                held[1] = info
        return None

    def end_episode(self, episode_id: str, observation: Any) -> None:
        """End the episode with its last observation."""
        if self.local_inference is not None:
            return self.local_inference.ready().end_episode(episode_id, observation)
        self._send_step(
            {"command": "END_EPISODE", "episode_id": episode_id, "observation": observation}
        )

    def update_policy(self) -> None:
        """Local inference: fetch the server's weights now (they are also fetched every
        ``update_interval`` seconds). Remote: nothing to do."""
        if self.local_inference is not None:
            self.local_inference.update_weights()

    def close(self) -> None:
        """Send the rewards still held (``defer_returns``), then close this thread's
        connection (others close when their threads end); local inference: also stop
        sampling (the steps since its last batch are not sent).

        Raises:
            PolicyServerError, ConnectionError: sending the held rewards failed (e.g.
                404: they were logged for an unknown episode); the connection is closed.
        """
        local = self.local_inference
        if local is not None and threading.current_thread() is not local.thread:
            local.stop()
        try:
            for episode_id in list(self._returns):
                held = self._returns.pop(episode_id, None)
                if held is not None:
                    request = {"command": "LOG_RETURNS", "episode_id": episode_id}
                    self._send({**request, "reward": held[0], "info": held[1]})
        finally:
            self._close_connection()

    def _close_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- HTTP ----------------------------------------------------------------------------
    def _send_step(self, request: dict[str, Any]) -> dict[str, Any]:
        """`_send` with the rewards held for the request's episode (they go with it,
        whatever its fate, as a ``LOG_RETURNS`` request of their own would)."""
        held = self._returns.pop(request["episode_id"], None)
        if held is not None:
            request["reward"], request["info"] = held
        return self._send(request)

    def _send(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST ``request``; the decoded reply.

        Raises:
            PolicyServerError: a 4xx or 5xx answer.
            ConnectionError: the server cannot be reached.
        """
        body = encode(request, self.content_type)
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            try:
                if conn is None:
                    conn = self._local.conn = _Connection(
                        self._host, self._port, self.timeout_s, self._https
                    )
                status, kind, data, closes = conn.post(self._headers, body)
                break
            except (BrokenPipeError, ConnectionResetError):
                # the server closed an idle keep-alive connection: open a new one, once
                self._close_connection()
                if attempt:
                    raise ConnectionError(f"the policy server at {self.address} closed") from None
            except OSError as exc:  # ConnectionError too: a reply that is not HTTP
                self._close_connection()
                raise ConnectionError(
                    f"cannot reach the policy server at {self.address}: {exc}"
                ) from None
        if closes:
            self._close_connection()
        try:
            reply = decode(data, kind or JSON)
        except WireError:
            reply = {"error": data[:200].decode(errors="replace")}
        if status != 200:
            raise PolicyServerError(status, str(reply.get("error", "")))
        return reply


def _local_token(host: str, port: int) -> str:
    """The token a server on this machine wrote for ``port``.

    Raises:
        PermissionError: there is none (the server runs elsewhere or was given a token).
    """
    path = server_token_path(port)
    try:
        record = private_files.read_json(path, max_bytes=4096, what="the policy server's token")
    except FileNotFoundError:
        raise PermissionError(
            f"no token for the policy server at {host}:{port}: pass token=... (the server's "
            f".token) or set ${ENV_TOKEN}; a server on this machine that made its own "
            f"token writes it to {path}"
        ) from None
    return str(record["token"])
