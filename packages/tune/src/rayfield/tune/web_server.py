"""The Tune REST server (``tune.run(..., with_server=True)``) and its client.

The server answers on loopback, in a daemon thread of the driver, with JSON:

* ``GET /trials``: ``{"trials": [info, ...]}``;
* ``GET /trials/<id>``: ``{"trial": info}`` (404 if unknown);
* ``POST /trials`` with ``{"name": ..., "spec": {...}}``: queues the trials of that
  spec (``run`` names a registered trainable), 201 with their ids. The spec is data
  only, its paths inside the experiment directory (see :mod:`rayfield.tune.rest_spec`):
  a body over 1 MiB is answered 413, anything else it refuses 400;
* ``PUT /trials/<id>``: asks the runner to stop that trial.

``info`` is ``{"id", "trainable_name", "config", "status", "result"}`` (config and last
result as JSON). Nothing in a request is ever unpickled or evaluated, and an error while
handling one is answered 4xx with its message (no traceback); the server goes on.

Every request needs ``Authorization: Bearer <token>``: without one it gets 401, with
another token 403. The server makes a random token (256 bits) and writes it with its
address to ``<experiment dir>/.tune_server.json`` (mode 0600, in the experiment's 0700
directory; removed at shutdown). It also takes the token given to it, or else, when the
driver is connected to a cluster (``rayfield.init(address=...)``), the cluster's token
(``rayfield.util.cluster.find_token``), which is never written anywhere.

``TuneClient`` sends a token only when it has one it can trust: the one it is given
(``token=``), or the one of a ``.tune_server.json`` that passes the ownership check
(this user's, not writable by others, in directories only this user or root can change:
:func:`rayfield.util.private_files.read_json`). It never looks up the cluster token by
itself: anything may listen on an address, and the request goes in plain HTTP.
Requests that change the experiment are queued and applied by the driver loop
(:meth:`TuneServer.apply_requests`).
"""

from __future__ import annotations

import hmac
import json
import os
import queue
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from rayfield.tune.error import TuneError
from rayfield.tune.rest_spec import MAX_BODY_BYTES, check_request
from rayfield.tune.state import _jsonable
from rayfield.tune.tune_client import DEFAULT_PORT, TOKEN_FILE, TuneClient
from rayfield.util import private_files

if TYPE_CHECKING:
    from rayfield.tune.runner import TrialRunner
    from rayfield.tune.trial import Trial

__all__ = ["DEFAULT_PORT", "TOKEN_FILE", "TuneClient", "TuneServer", "cluster_token"]

_MAX_DRAIN_BYTES = 8 << 20  # a body up to this size is read before a 413


def _info(trial: Trial) -> dict[str, Any]:
    return {
        "id": trial.trial_id,
        "trainable_name": trial.trainable_name,
        "config": _jsonable(trial.config),
        "status": trial.status,
        "result": _jsonable(trial.last_result),
    }


def cluster_token() -> str | None:
    """The token of the cluster this driver is connected to; None when it runs the
    embedded local runtime (no cluster, no token) or is not initialized.

    Raises:
        ClusterError: connected, but the token is neither in ``$RAYFIELD_TOKEN`` nor in
            the head's session on this machine.
    """
    import rayfield

    if not rayfield.is_initialized():
        return None
    # A second init() with ignore_reinit_error returns the running driver's address
    # information; a driver connected to a cluster has its GCS address there.
    info = rayfield.init(ignore_reinit_error=True)
    address = info.get("gcs_address")
    if not address:
        return None
    from pathlib import Path

    from rayfield.util import cluster

    temp_dir = Path(info["temp_dir"]) if info.get("temp_dir") else None
    token: str = cluster.find_token(address, temp_dir)
    return token


class TuneServer:
    """Serves the runner's trials over HTTP on ``127.0.0.1:port`` (0: any free port).

    Args:
        runner: the experiment's runner.
        experiment_dir: the experiment's directory (made mode 0700), where the address
            file is written and inside which requests may place trials.
        port: the TCP port.
        token: a token requests may carry besides the server's own random one; default
            the cluster's token (:func:`cluster_token`) when connected to a cluster.

    Attributes:
        token: the server's own token, written to the address file.
        uses_cluster_token: whether the cluster's token is taken too.

    Raises:
        OSError: the port is taken.
        ClusterError: connected to a cluster whose token cannot be found.
        UnsafeFileError: the experiment directory is not this user's alone.
    """

    def __init__(
        self,
        runner: TrialRunner,
        experiment_dir: str,
        port: int = DEFAULT_PORT,
        token: str | None = None,
    ) -> None:
        self.runner = runner
        self.experiment_dir = experiment_dir
        self.uses_cluster_token = False
        if token is None:
            token = cluster_token()
            self.uses_cluster_token = token is not None
        self.token = secrets.token_hex(32)
        self._accepted = [t.encode() for t in (self.token, token) if t]
        private_files.ensure_private_dir(experiment_dir)
        self.token_file = os.path.join(experiment_dir, TOKEN_FILE)
        self._requests: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        try:  # 0600, replaced atomically: a reader sees the whole file or none
            info = {"address": f"127.0.0.1:{self.port}", "token": self.token}
            private_files.write_json(self.token_file, info)
        except BaseException:
            self._httpd.server_close()
            raise
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, daemon=True, name="tune-server"
        )
        self._thread.start()

    def _authorized(self, given: str) -> bool:
        token = given[7:].strip().encode() if given.startswith("Bearer ") else b""
        # Compare with every accepted token, so the time taken does not tell which.
        return bool(token) and sum(hmac.compare_digest(token, t) for t in self._accepted) > 0

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return _handler_class(self)

    def _make_trials(self, body: Any) -> list[Trial]:
        from rayfield.tune.experiment import Experiment
        from rayfield.tune.search.search_algorithm import BasicVariantGenerator

        name, spec = check_request(body, self.experiment_dir)
        experiment = Experiment.from_json(name, spec)
        generator = BasicVariantGenerator()
        generator.add_configurations(experiment)
        return generator.next_trials()

    def apply_requests(self) -> None:
        """Apply the queued requests to the runner (call from the driver loop)."""
        while True:
            try:
                kind, arg = self._requests.get_nowait()
            except queue.Empty:
                return
            if kind == "stop":
                self.runner.request_stop_trial(arg)
            else:
                self.runner.add_trial(arg)

    def shutdown(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        try:
            os.unlink(self.token_file)
        except OSError:
            pass


class _Refused(Exception):
    """A request answered with ``code`` and ``message`` (a 4xx)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _handler_class(server: TuneServer) -> type[BaseHTTPRequestHandler]:
    """The request handler of ``server`` (one instance per request)."""

    class Handler(BaseHTTPRequestHandler):
        timeout = 30  # seconds a client may take to send its request

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _serve(self, method: str) -> None:
            """Authorize, then answer with ``method``'s handler; any error is a 4xx."""
            where = f"the token in {TOKEN_FILE} of the experiment directory" + (
                " or the cluster token" if server.uses_cluster_token else ""
            )
            given = self.headers.get("Authorization", "")
            if not given.startswith("Bearer ") or not given[7:].strip():
                self.close_connection = True  # a body is left unread
                self._reply(401, {"error": f"send 'Authorization: Bearer <{where}>'"})
                return
            if not server._authorized(given):
                self.close_connection = True
                self._reply(403, {"error": f"wrong token: send {where}"})
                return
            try:
                code, body = getattr(self, f"_{method}")()
            except _Refused as exc:
                self.close_connection = True  # the body may not have been read
                code, body = exc.code, {"error": str(exc)}
            except Exception as exc:  # a request must never take the server down
                self.close_connection = True
                code, body = 400, {"error": f"bad request: {type(exc).__name__}: {exc}"}
            self._reply(code, body)

        def _trial_id(self) -> str | None:
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            return parts[1] if len(parts) == 2 and parts[0] == "trials" else None

        def _get(self) -> tuple[int, dict[str, Any]]:
            if self.path.split("?")[0].rstrip("/") == "/trials":
                return 200, {"trials": [_info(t) for t in server.runner.get_trials()]}
            trial_id = self._trial_id()
            trial = server.runner.get_trial(trial_id) if trial_id else None
            if trial is None:
                return 404, {"error": f"no trial {trial_id!r}"}
            return 200, {"trial": _info(trial)}

        def _put(self) -> tuple[int, dict[str, Any]]:
            trial_id = self._trial_id()
            if trial_id is None or server.runner.get_trial(trial_id) is None:
                return 404, {"error": f"no trial {trial_id!r}"}
            server._requests.put(("stop", trial_id))
            return 200, {"trial": trial_id, "stop": "requested"}

        def _body(self) -> Any:
            if self.headers.get("Transfer-Encoding"):
                raise _Refused(411, "send the body with a Content-Length, not chunked")
            raw = self.headers.get("Content-Length")
            if raw is None:
                raise _Refused(411, "send a Content-Length")
            try:
                length = int(raw)
            except ValueError:
                raise _Refused(400, f"bad Content-Length {raw!r}") from None
            if length < 0:
                raise _Refused(400, f"bad Content-Length {raw!r}")
            if length > MAX_BODY_BYTES:
                if length <= _MAX_DRAIN_BYTES:  # read it, so the client sees the answer
                    self._drain(length)
                raise _Refused(413, f"the body is over {MAX_BODY_BYTES} bytes")
            data = self.rfile.read(length)
            if len(data) != length:
                raise _Refused(400, "the body ended before its Content-Length")
            try:
                return json.loads(data)
            except (ValueError, RecursionError) as exc:  # not JSON, or nested too deep
                raise _Refused(400, f"the body is not JSON: {type(exc).__name__}") from None

        def _drain(self, length: int) -> None:
            while length > 0:
                chunk = self.rfile.read(min(length, 1 << 16))
                if not chunk:
                    return
                length -= len(chunk)

        def _post(self) -> tuple[int, dict[str, Any]]:
            if self.path.split("?")[0].rstrip("/") != "/trials":
                return 404, {"error": f"no such endpoint {self.path!r}: POST /trials"}
            try:
                trials = server._make_trials(self._body())
            except _Refused:
                raise
            except (KeyError, TypeError, ValueError, TuneError) as exc:
                return 400, {"error": f"bad trial spec: {exc}"}
            for trial in trials:
                server._requests.put(("add", trial))
            return 201, {"trials": [t.trial_id for t in trials]}

        def _refuse(self) -> tuple[int, dict[str, Any]]:
            return 405, {"error": f"{self.command} is not served: use GET, POST or PUT"}

        def do_GET(self) -> None:
            self._serve("get")

        def do_PUT(self) -> None:
            self._serve("put")

        def do_POST(self) -> None:
            self._serve("post")

        def do_DELETE(self) -> None:
            self._serve("refuse")

        def do_PATCH(self) -> None:
            self._serve("refuse")

    return Handler
