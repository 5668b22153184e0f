"""`PolicyServer`: an `ExternalEnv` served over HTTP to applications outside the cluster.

RLlib's classic serving (reference: ``ray.rllib.utils.policy_server.PolicyServer``): an
``ExternalEnv`` starts the server in its ``run``; each application drives its episodes
with a `PolicyClient` (``start_episode``, ``get_action``, ``log_action``,
``log_returns``, ``end_episode``), and the rollout worker trains on what they report.

Unlike RLlib's, nothing on the wire is pickled (``serving_wire.py``: JSON or msgpack,
arrays as raw buffers) and every request carries a token (``Authorization: Bearer``):
one given to the server, or a random one written owner-only to
``<tmp>/rayfield-rllib-<uid>/serving/<port>.json``, where a `PolicyClient` on this machine
finds it. The HTTP/1.1 framing (keep-alive, pipelining, ``Expect: 100-continue``,
Content-Length or chunked bodies) is ``h11``'s. A request that is unauthenticated (401),
too large (413, the body is not read; 414/431 for its head), of an unknown type (415),
malformed or invalid for the env (400), about an unknown episode (404), or over the env's
``max_concurrent`` episodes (429) gets its status and ``{"error": message}``; the server
keeps serving every other client. ``GET_ACTION``,
``LOG_ACTION`` and ``END_EPISODE`` may carry the ``reward`` (and ``info``) logged since the
episode's previous request, taken as a ``LOG_RETURNS`` just before them (a `PolicyClient`
sends its rewards so: one round trip per step).

Example (the reference's CartPole server)::

    class CartpoleServing(ExternalEnv):
        def __init__(self, config):
            super().__init__(gym.spaces.Discrete(2), gym.spaces.Box(-10, 10, (4,)))

        def run(self):
            PolicyServer(self, "localhost", 8900).serve_forever()
"""

from __future__ import annotations

import email.utils
import hmac
import json
import logging
import os
import secrets
import socket
import socketserver
import tempfile
import threading
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any

import h11
import numpy as np

from rayfield.rllib.env.external_env import ExternalEnv, ExternalEnvStopped
from rayfield.rllib.env.serving_wire import JSON, MSGPACK, WireError, decode, encode
from rayfield.util import private_files

__all__ = ["MAX_REQUEST_BYTES", "PolicyServer", "server_token_path"]

logger = logging.getLogger("rayfield.rllib")

MAX_REQUEST_BYTES = 1 << 20
"""The largest request body a server reads by default (bytes); larger ones get 413."""
_MAX_EPISODE_ID = 256


def server_token_path(port: int) -> Path:
    """Where a server on ``port`` of this machine keeps the token it made (0600 in a
    0700 directory of this user)."""
    root = Path(tempfile.gettempdir()) / f"rayfield-rllib-{os.getuid()}" / "serving"
    return root / f"{int(port)}.json"


class _Gone(Exception):
    """The client's connection broke while its request was read (nothing to answer)."""


class _RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _check_value(value: Any, space: Any, what: str) -> Any:
    """``value`` converted to ``space``'s form (Box: an array of its dtype and shape)."""
    shape = getattr(space, "shape", None)
    dtype = getattr(space, "dtype", None)
    if shape is None or dtype is None or not hasattr(space, "low"):  # not a Box
        return value
    try:
        arr = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise _RequestError(400, f"{what} is not numeric: {exc}") from None
    if arr.shape != tuple(shape):
        raise _RequestError(400, f"{what} has shape {list(arr.shape)}, the space {list(shape)}")
    return arr


class PolicyServer(socketserver.ThreadingTCPServer):
    """Serves ``external_env``'s episodes over HTTP (see the module docstring).

    Args:
        external_env: the env whose ``start_episode``/``get_action``/... the requests call.
        address: the host to listen on (``"localhost"``: this machine only).
        port: the TCP port (0: any free one; see ``server_port``).
        token: the token clients must send; None: a random one, written owner-only to
            :func:`server_token_path` so a `PolicyClient` on this machine finds it.
        max_request_bytes: the largest body read (larger: 413).

    Raises:
        OSError: the address cannot be bound (e.g. the port is in use).
        TypeError: ``external_env`` is not an `ExternalEnv`.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        external_env: ExternalEnv,
        address: str,
        port: int,
        *,
        token: str | None = None,
        max_request_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        if not isinstance(external_env, ExternalEnv):
            raise TypeError(
                f"PolicyServer serves an ExternalEnv, got {type(external_env).__name__}"
            )
        self.external_env = external_env
        self.max_request_bytes = int(max_request_bytes)
        super().__init__((address, int(port)), _Handler)
        self.token_file: Path | None = None
        if token is None:
            token = secrets.token_urlsafe(32)
            self.token_file = server_token_path(self.server_port)
            private_files.ensure_private_dir(self.token_file.parent)
            private_files.write_json(
                self.token_file, {"address": address, "port": self.server_port, "token": token}
            )
        self.token = token
        self._stopped = threading.Event()

    @property
    def server_port(self) -> int:
        """The TCP port it listens on (the one chosen when given 0)."""
        return int(self.server_address[1])

    @property
    def address(self) -> str:
        """``http://HOST:PORT`` of this server, for a `PolicyClient`."""
        host, port = str(self.server_address[0]), self.server_port
        return f"http://{host}:{port}"

    def server_close(self) -> None:
        super().server_close()
        if self.token_file is not None:
            self.token_file.unlink(missing_ok=True)

    # -- the commands -----------------------------------------------------------------
    def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        """Carry out one decoded request; returns the reply object.

        Raises:
            _RequestError: the request is invalid (its status says how).
        """
        env = self.external_env
        command = request.get("command")
        if command == "START_EPISODE":
            eid = request.get("episode_id")
            if eid is not None and (not isinstance(eid, str) or len(eid) > _MAX_EPISODE_ID):
                raise _RequestError(400, "episode_id must be a string of at most 256 chars")
            enabled = request.get("training_enabled", True)
            if not isinstance(enabled, bool):
                raise _RequestError(400, "training_enabled must be true or false")
            try:
                return {"episode_id": env.start_episode(eid, enabled)}
            except ValueError as exc:
                raise _RequestError(409, str(exc)) from None
            except ExternalEnvStopped:
                raise  # 503 (it is a RuntimeError too)
            except RuntimeError as exc:
                raise _RequestError(429, str(exc)) from None
        eid = request.get("episode_id")
        if not isinstance(eid, str):
            raise _RequestError(400, f"{command} needs an episode_id string")
        if command == "LOG_RETURNS":
            self._log_returns(eid, request, required=True)
            return {}
        if command not in ("GET_ACTION", "LOG_ACTION", "END_EPISODE"):
            raise _RequestError(
                400,
                f"unknown command {command!r}: one of START_EPISODE, GET_ACTION, LOG_ACTION, "
                "LOG_RETURNS, END_EPISODE",
            )
        obs = _check_value(request.get("observation"), env.observation_space, "observation")
        action = None
        if command == "LOG_ACTION":
            action = _check_value(request.get("action"), env.action_space, "action")
        # the rewards logged since the episode's last request may come with this one
        self._log_returns(eid, request, required=False)
        if command == "GET_ACTION":
            return {"action": env.get_action(eid, obs)}
        if command == "LOG_ACTION":
            env.log_action(eid, obs, action)
        else:
            env.end_episode(eid, obs)
        return {}

    def _log_returns(self, eid: str, request: dict[str, Any], required: bool) -> None:
        """``env.log_returns`` with the request's ``reward`` and ``info`` (when not
        ``required``: only if it gives a reward).

        Raises:
            _RequestError: (400) a reward that is not a number, an info not an object.
            KeyError: an unknown episode.
        """
        reward, info = request.get("reward"), request.get("info")
        if reward is None and not required:
            return
        if isinstance(reward, bool) or not isinstance(reward, (int, float, dict)):
            raise _RequestError(400, "reward must be a number")
        if info is not None and not isinstance(info, dict):
            raise _RequestError(400, "info must be an object")
        try:
            self.external_env.log_returns(eid, reward, info)
        except TypeError as exc:
            raise _RequestError(400, str(exc)) from None


_MAX_HEAD = 65536
"""The largest request head (request line and headers) read (bytes): a longer request
target gets 414, a longer head 431."""
_MAX_HEADERS = 100
_RECV_BYTES = 65536
_LINGER_S = 1.0  # how long a refused request's unread rest is drained before closing
_date: tuple[int, bytes] = (0, b"")  # (second, the Date header's value for it)


def _http_date() -> bytes:
    """The Date header's value now (formatted once per second)."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, email.utils.formatdate(now, usegmt=True).encode("ascii"))
    return _date[1]


_REASONS = {status.value: status.phrase.encode("ascii") for status in HTTPStatus}


class _Handler(socketserver.BaseRequestHandler):
    """One connection: its requests read and answered in turn (HTTP/1.1 keep-alive).

    The HTTP/1.1 framing is ``h11``'s (a state machine fed with what the socket reads):
    it parses each request's head and body and writes each reply, and says whether the
    connection goes on. Here: the limits (a request target over 64 KiB gets 414, a head
    over 64 KiB or with more than 100 headers 431, a repeated header 400, a head ``h11``
    cannot parse its status, 400 mostly), each closing the connection after the reply,
    and the order of the checks of a POST (token, length, then the body). A connection
    that ends before its request is whole gets no reply.
    """

    server: PolicyServer
    request: socket.socket

    def setup(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # replies leave at once
        self.http = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
        self.eof = False  # the client ended its side of the connection

    def handle(self) -> None:
        http = self.http
        while True:
            try:
                event = self._next_event()
            except h11.RemoteProtocolError as exc:
                if not self.eof:  # a malformed or oversized head: say why, then close
                    self._refuse_head(exc)
                return
            except OSError:  # the client went away, or a socket timeout
                return
            if type(event) is not h11.Request:  # ConnectionClosed: the client is done
                return
            if logger.isEnabledFor(logging.DEBUG):
                target = event.target[:200].decode("latin-1")
                logger.debug(
                    "policy server: %s %s %s", self.client_address[0], event.method, target
                )
            self._request(event)
            if http.our_state is not h11.DONE or http.their_state is not h11.DONE:
                return  # a reply that closes the connection (or a client gone)
            http.start_next_cycle()

    def _next_event(self) -> Any:
        """The next ``h11`` event, reading from the socket as it needs.

        Raises:
            h11.RemoteProtocolError: what came is not HTTP/1.1 or breaks a limit, or the
                connection ended in the middle of a request (``eof`` is then set).
            OSError: the socket failed.
        """
        while True:
            event = self.http.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = self.request.recv(_RECV_BYTES)
            self.eof = not data
            self.http.receive_data(data)

    def _refuse_head(self, exc: h11.RemoteProtocolError) -> None:
        """Answer a head ``h11`` refused (414 for an overlong request line)."""
        status = exc.error_status_hint
        if status == 431:  # over _MAX_HEAD before the head ended
            pending, _ = self.http.trailing_data
            if b"\n" not in pending[:_MAX_HEAD]:
                status = 414
        message = "the request line is too long" if status == 414 else f"a malformed head: {exc}"
        self._reply(status, {"error": message}, JSON, close=True)

    def _request(self, request: h11.Request) -> None:
        names = [name for name, _ in request.headers]
        size = len(request.target) + sum(len(k) + len(v) + 4 for k, v in request.headers)
        if len(request.target) > _MAX_HEAD:
            self._reply(414, {"error": "the request line is too long"}, JSON, close=True)
        elif len(names) > _MAX_HEADERS or size > _MAX_HEAD:  # (h11 passes a head it has whole)
            self._reply(431, {"error": "too many or too long headers"}, JSON, close=True)
        elif len(set(names)) < len(names):
            self._reply(400, {"error": "a repeated header"}, JSON, close=True)
        elif request.method != b"POST":  # a body it may have sent is not read
            error = {"error": "only POST requests are served"}
            self._reply(405, error, JSON, [(b"Allow", b"POST")], close=True)
        else:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers}
            self._post(headers)

    def _post(self, headers: dict[str, str]) -> None:
        content_type = (headers.get("content-type") or JSON).split(";")[0].strip()
        reply_type = content_type if content_type in (JSON, MSGPACK) else JSON
        try:
            request = self._read_request(headers, content_type)
            reply, status = self.server.execute(request), 200
        except _RequestError as exc:
            reply, status = {"error": str(exc)}, exc.status
        except WireError as exc:
            reply, status = {"error": str(exc)}, 400
        except KeyError as exc:  # an episode the env does not know
            reply, status = {"error": str(exc.args[0] if exc.args else exc)}, 404
        except ExternalEnvStopped:
            reply, status = {"error": "the server's env was stopped"}, 503
        except _Gone:  # the connection broke while the request was read
            return
        except Exception as exc:
            logger.exception("policy server: a request failed")
            reply, status = {"error": f"{type(exc).__name__}: {exc}"}, 500
        # a body left unread (refused from the headers) ends the connection
        close = self.http.their_state is not h11.DONE
        self._reply(status, reply, reply_type, close=close)

    def _reply(
        self,
        status: int,
        reply: dict[str, Any],
        reply_type: str,
        extra: list[tuple[bytes, bytes]] | None = None,
        *,
        close: bool = False,
    ) -> None:
        """Send ``reply`` with ``status`` (and the headers ``extra``) in one write;
        ``close``: say so and drain what the client still sends (so that it reads the
        reply rather than a reset)."""
        http = self.http
        if http.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return  # a reply was sent already
        try:
            body = encode(reply, reply_type)
        except TypeError as exc:  # an action the wire cannot carry
            body, status, reply_type = json.dumps({"error": str(exc)}).encode(), 500, JSON
        headers = [
            (b"Date", _http_date()),
            (b"Content-Type", reply_type.encode("ascii")),
            (b"Content-Length", b"%d" % len(body)),
            *(extra or ()),
        ]
        if close:
            headers.append((b"Connection", b"close"))
        message = http.send(
            h11.Response(status_code=status, headers=headers, reason=_REASONS.get(status, b"Error"))
        )
        message += http.send(h11.Data(data=body)) + http.send(h11.EndOfMessage())
        try:
            self.request.sendall(message)
            if close and not self.eof:
                self._drain()
        except OSError:  # the client went away
            pass

    def _drain(self) -> None:
        """End our side and read what the client still sends, for up to a second."""
        self.request.shutdown(socket.SHUT_WR)
        self.request.settimeout(_LINGER_S)
        deadline = time.monotonic() + _LINGER_S
        while time.monotonic() < deadline and self.request.recv(_RECV_BYTES):
            pass

    def _read_request(self, headers: dict[str, str], content_type: str) -> dict[str, Any]:
        http = self.http
        auth = headers.get("authorization", "")
        sent = auth[len("Bearer ") :] if auth.startswith("Bearer ") else ""
        length = headers.get("content-length")  # h11 checked that it is a number
        chunked = "transfer-encoding" in headers  # h11 takes only "chunked"
        limit = self.server.max_request_bytes
        if not hmac.compare_digest(sent.encode(), self.server.token.encode()):
            if length is not None and int(length) <= limit:
                self._read_body(limit)  # read and dropped: the connection goes on
            raise _RequestError(401, "missing or wrong token (Authorization: Bearer TOKEN)")
        if length is None and not chunked:
            raise _RequestError(411, "the request needs a Content-Length")
        if length is not None and int(length) > limit:  # the body is not read
            raise _RequestError(413, f"the body is {length} bytes, over {limit}")
        if http.they_are_waiting_for_100_continue:
            self.request.sendall(
                http.send(
                    h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")
                )
            )
        body = self._read_body(limit)
        if content_type not in (JSON, MSGPACK):
            raise _RequestError(415, f"send {JSON} or {MSGPACK}, not {content_type!r}")
        return decode(body, content_type)

    def _read_body(self, limit: int) -> bytes:
        """The request's body, read to its end.

        Raises:
            _Gone: the connection ended or failed before the body did.
            _RequestError: (413) a chunked body over ``limit`` bytes; (400) a malformed one.
        """
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                event = self._next_event()
            except h11.RemoteProtocolError as exc:
                if self.eof:
                    raise _Gone from None
                raise _RequestError(400, f"a malformed body: {exc}") from None
            except OSError:
                raise _Gone from None
            if type(event) is h11.EndOfMessage:
                return b"".join(chunks)
            if type(event) is h11.Data:
                size += len(event.data)
                if size > limit:
                    raise _RequestError(413, f"the chunked body is over {limit} bytes")
                chunks.append(event.data)
