"""`PolicyServer`: an `ExternalEnv` served over HTTP to applications outside the cluster.

RLlib's classic serving (reference: ``ray.rllib.utils.policy_server.PolicyServer``): an
``ExternalEnv`` starts the server in its ``run``; each application drives its episodes
with a `PolicyClient` (``start_episode``, ``get_action``, ``log_action``,
``log_returns``, ``end_episode``), and the rollout worker trains on what they report.

Unlike RLlib's, nothing on the wire is pickled (``serving_wire.py``: JSON or msgpack,
arrays as raw buffers) and every request carries a token (``Authorization: Bearer``):
one given to the server, or a random one written owner-only to
``<tmp>/rayfield-rllib-<uid>/serving/<port>.json``, where a `PolicyClient` on this machine
finds it. A request that is unauthenticated (401), too large (413, the body is not read),
of an unknown type (415), malformed or invalid for the env (400), about an unknown
episode (404), or over the env's ``max_concurrent`` episodes (429) gets its status and
``{"error": message}``; the server keeps serving every other client. ``GET_ACTION``,
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
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

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


class PolicyServer(ThreadingHTTPServer):
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


_MAX_LINE = 65536  # the longest request line or header line read (bytes)
_MAX_HEADERS = 100
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    411: "Length Required",
    413: "Content Too Large",
    414: "URI Too Long",
    415: "Unsupported Media Type",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_date: tuple[int, bytes] = (0, b"")  # (second, the Date header's value for it)


def _http_date() -> bytes:
    """The Date header's value now (formatted once per second)."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, email.utils.formatdate(now, usegmt=True).encode("ascii"))
    return _date[1]


class _Handler(BaseHTTPRequestHandler):
    """One connection: its requests read and answered in turn (HTTP/1.1 keep-alive).

    The request line and headers are parsed here (the headers as a dict of lowercased
    names; lines over 64 KiB get 414/431, more than 100 headers 431, a malformed line
    400, each closing the connection) and each reply leaves in one write of its status
    line, headers and body.
    """

    server: PolicyServer
    protocol_version = "HTTP/1.1"  # keep-alive: a client reuses its connection
    disable_nagle_algorithm = True  # the reply leaves at once

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("policy server: " + format, *args)

    def handle_one_request(self) -> None:
        self.close_connection = True
        try:
            line = self.rfile.readline(_MAX_LINE + 1)
        except OSError:  # the client went away, or a socket timeout
            return
        if not line:
            return
        if len(line) > _MAX_LINE:
            self._reply(414, {"error": "the request line is too long"}, JSON)
            return
        parts = line.split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            self._reply(400, {"error": f"not an HTTP/1.x request line: {line[:80]!r}"}, JSON)
            return
        method, version = parts[0], parts[2]
        headers: dict[str, str] = {}
        while True:
            try:
                raw = self.rfile.readline(_MAX_LINE + 1)
            except OSError:
                return
            if raw in (b"\r\n", b"\n"):
                break
            if not raw:
                return  # the connection ended in the headers
            if len(raw) > _MAX_LINE or len(headers) >= _MAX_HEADERS:
                self._reply(431, {"error": "too many or too long headers"}, JSON)
                return
            name, sep, value = raw.partition(b":")
            key = name.decode("latin-1").lower()
            if not sep or not key or key != key.strip() or key in headers:
                self._reply(400, {"error": f"a malformed or repeated header: {raw[:80]!r}"}, JSON)
                return
            headers[key] = value.strip().decode("latin-1")
        connection = headers.get("connection", "").lower()
        self.close_connection = connection == "close" or (
            version == b"HTTP/1.0" and connection != "keep-alive"
        )
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("policy server: %s %s", self.client_address[0], line.strip()[:200])
        if method == b"POST":
            self._post(headers, version)
        else:
            self.close_connection = True  # a body it may have sent is not read
            self._reply(405, {"error": "only POST requests are served"}, JSON, b"Allow: POST\r\n")

    def _post(self, headers: dict[str, str], version: bytes) -> None:
        content_type = (headers.get("content-type") or JSON).split(";")[0].strip()
        reply_type = content_type if content_type in (JSON, MSGPACK) else JSON
        try:
            request = self._read_request(headers, content_type, version)
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
            self.close_connection = True
            return
        except Exception as exc:
            logger.exception("policy server: a request failed")
            reply, status = {"error": f"{type(exc).__name__}: {exc}"}, 500
        self._reply(status, reply, reply_type)

    def _reply(
        self, status: int, reply: dict[str, Any], reply_type: str, extra: bytes = b""
    ) -> None:
        """Send ``reply`` with ``status`` (and the header lines ``extra``) in one write."""
        try:
            body = encode(reply, reply_type)
        except TypeError as exc:  # an action the wire cannot carry
            body, status, reply_type = json.dumps({"error": str(exc)}).encode(), 500, JSON
        message = (
            b"HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s%s\r\n%s"
            % (
                status,
                _REASONS.get(status, "Error").encode("ascii"),
                _http_date(),
                reply_type.encode("ascii"),
                len(body),
                extra,
                b"Connection: close\r\n" if self.close_connection else b"",
                body,
            )
        )
        try:
            self.wfile.write(message)
        except OSError:  # the client went away
            self.close_connection = True

    def _read_request(
        self, headers: dict[str, str], content_type: str, version: bytes
    ) -> dict[str, Any]:
        auth = headers.get("authorization", "")
        sent = auth[len("Bearer ") :] if auth.startswith("Bearer ") else ""
        length = headers.get("content-length")
        if not hmac.compare_digest(sent.encode(), self.server.token.encode()):
            self._skip_body(length)
            raise _RequestError(401, "missing or wrong token (Authorization: Bearer TOKEN)")
        if length is None or not length.isdigit():
            self.close_connection = True
            raise _RequestError(411, "the request needs a Content-Length")
        if int(length) > self.server.max_request_bytes:
            self.close_connection = True  # the body is not read
            raise _RequestError(
                413, f"the body is {length} bytes, over {self.server.max_request_bytes}"
            )
        try:
            if headers.get("expect", "").lower() == "100-continue" and version != b"HTTP/1.0":
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            body = self.rfile.read(int(length))
        except OSError:
            raise _Gone from None
        if len(body) < int(length):
            raise _Gone
        if content_type not in (JSON, MSGPACK):
            raise _RequestError(415, f"send {JSON} or {MSGPACK}, not {content_type!r}")
        return decode(body, content_type)

    def _skip_body(self, length: str | None) -> None:
        """Read and drop a small body (so the connection can go on), else close."""
        if length is not None and length.isdigit() and int(length) <= self.server.max_request_bytes:
            try:
                self.rfile.read(int(length))
            except OSError:
                raise _Gone from None
        else:
            self.close_connection = True
