"""The Tune REST server (``tune.run(..., with_server=True)``) and its client.

The server answers on loopback, in a daemon thread of the driver, with JSON:

* ``GET /trials``: ``{"trials": [info, ...]}``;
* ``GET /trials/<id>``: ``{"trial": info}`` (404 if unknown);
* ``POST /trials`` with ``{"name": ..., "spec": {...}}``: queues the trials of that
  spec (``run`` names a registered trainable), 201 with their ids;
* ``PUT /trials/<id>``: asks the runner to stop that trial.

``info`` is ``{"id", "trainable_name", "config", "status", "result"}`` (config and last
result as JSON). Every request needs ``Authorization: Bearer <token>``, like every other
endpoint of the project: a request without one gets 401, one with another token 403.
The token is the cluster's token (``rayfield.util.cluster.find_token``) when the driver
is connected to a cluster (``rayfield.init(address=...)``); a driver with the embedded
local runtime has no cluster token, and its server makes a random one (256 bits). The
server's address is written to ``<experiment dir>/.tune_server.json`` (mode 0600), with
the random token but never with the cluster's. ``TuneClient`` sends the token it is
given, else the one of ``.tune_server.json`` (``from_experiment_dir``), else the
cluster's (``$RAYFIELD_TOKEN``, or the head's session on this machine). Nothing in a
request is ever unpickled. Requests that change the experiment are queued and applied
by the driver loop (:meth:`TuneServer.apply_requests`).
"""

from __future__ import annotations

import hmac
import json
import os
import queue
import secrets
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from rayfield.tune.error import TuneError
from rayfield.tune.state import _jsonable

if TYPE_CHECKING:
    from rayfield.tune.runner import TrialRunner
    from rayfield.tune.trial import Trial

__all__ = ["DEFAULT_PORT", "TOKEN_FILE", "TuneClient", "TuneServer", "cluster_token"]

DEFAULT_PORT = 4321
TOKEN_FILE = ".tune_server.json"


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


def _client_token() -> str:
    """The cluster token a client sends when it was given none ('' when none is found)."""
    from rayfield.util import cluster

    try:
        token: str = cluster.find_token()
    except Exception:  # no cluster here (ClusterError) or an unsafe session directory
        return ""
    return token


class TuneServer:
    """Serves the runner's trials over HTTP on ``127.0.0.1:port`` (0: any free port).

    Args:
        runner: the experiment's runner.
        experiment_dir: where the address file is written.
        port: the TCP port.
        token: the token requests must carry; default the cluster's token
            (:func:`cluster_token`), or a random one without a cluster.

    Raises:
        OSError: the port is taken.
        ClusterError: connected to a cluster whose token cannot be found.
    """

    def __init__(
        self,
        runner: TrialRunner,
        experiment_dir: str,
        port: int = DEFAULT_PORT,
        token: str | None = None,
    ) -> None:
        self.runner = runner
        self.uses_cluster_token = False
        if token is None:
            token = cluster_token()
            self.uses_cluster_token = token is not None
        self.token = token or secrets.token_hex(32)
        os.makedirs(experiment_dir, exist_ok=True)
        self.token_file = os.path.join(experiment_dir, TOKEN_FILE)
        self._requests: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        tmp = self.token_file + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            info = {"address": f"127.0.0.1:{self.port}"}
            if self.uses_cluster_token:
                info["token_source"] = "cluster"  # the cluster's secret is not copied
            else:
                info["token"] = self.token
            json.dump(info, f)
        os.replace(tmp, self.token_file)  # a reader sees the whole file or none
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, daemon=True, name="tune-server"
        )
        self._thread.start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                given = self.headers.get("Authorization", "")
                where = (
                    "the cluster token"
                    if server.uses_cluster_token
                    else f"the token in {TOKEN_FILE} of the experiment directory"
                )
                if not given.startswith("Bearer ") or not given[7:].strip():
                    self._reply(401, {"error": f"send 'Authorization: Bearer <{where}>'"})
                    return False
                if hmac.compare_digest(given[7:].strip().encode(), server.token.encode()):
                    return True
                self._reply(403, {"error": f"wrong token: send {where}"})
                return False

            def _trial_id(self) -> str | None:
                parts = [p for p in self.path.split("/") if p]
                return parts[1] if len(parts) == 2 and parts[0] == "trials" else None

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                if self.path.rstrip("/") == "/trials":
                    self._reply(200, {"trials": [_info(t) for t in server.runner.get_trials()]})
                    return
                trial_id = self._trial_id()
                trial = server.runner.get_trial(trial_id) if trial_id else None
                if trial is None:
                    self._reply(404, {"error": f"no trial {trial_id!r}"})
                else:
                    self._reply(200, {"trial": _info(trial)})

            def do_PUT(self) -> None:
                if not self._authorized():
                    return
                trial_id = self._trial_id()
                if trial_id is None or server.runner.get_trial(trial_id) is None:
                    self._reply(404, {"error": f"no trial {trial_id!r}"})
                    return
                server._requests.put(("stop", trial_id))
                self._reply(200, {"trial": trial_id, "stop": "requested"})

            def do_POST(self) -> None:
                if not self._authorized():
                    return
                try:
                    length = int(self.headers.get("Content-Length", "0"))
                    body = json.loads(self.rfile.read(length) or b"{}")
                    name, spec = str(body["name"]), dict(body["spec"])
                    trials = server._make_trials(name, spec)
                except (KeyError, TypeError, ValueError, TuneError) as exc:
                    self._reply(400, {"error": f"bad trial spec: {exc}"})
                    return
                for trial in trials:
                    server._requests.put(("add", trial))
                self._reply(201, {"trials": [t.trial_id for t in trials]})

        return Handler

    def _make_trials(self, name: str, spec: dict[str, Any]) -> list[Trial]:
        from rayfield.tune.experiment import Experiment
        from rayfield.tune.search.search_algorithm import BasicVariantGenerator

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


class TuneClient:
    """Talks to a :class:`TuneServer`.

    Args:
        tune_address: ``"host"`` or ``"host:port"`` of the server.
        port_forward: the port, when ``tune_address`` has none.
        token: the server's token; default the cluster token (``$RAYFIELD_TOKEN``, or
            the head's session on this machine), and none when there is no cluster.

    Raises:
        TuneError: (from the methods) the server refused the request or is unreachable.
    """

    def __init__(
        self, tune_address: str, port_forward: int = DEFAULT_PORT, token: str | None = None
    ) -> None:
        host, _, port = tune_address.partition(":")
        self.tune_address = host or "127.0.0.1"
        self.port_forward = int(port) if port else port_forward
        self._token = token if token is not None else _client_token()

    @classmethod
    def from_experiment_dir(cls, path: str) -> TuneClient:
        """A client of the server of the experiment running in ``path``.

        Raises:
            TuneError: no server runs for that experiment.
        """
        try:
            with open(os.path.join(os.path.expanduser(path), TOKEN_FILE)) as f:
                info = json.load(f)
        except OSError:
            raise TuneError(f"no Tune server runs for {path} (start it with_server=True)") from None
        return cls(info["address"], token=info.get("token"))

    @property
    def server_address(self) -> str:
        return self.tune_address

    @property
    def server_port(self) -> int:
        return self.port_forward

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"http://{self.tune_address}:{self.port_forward}{path}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = json.loads(exc.read() or b"{}").get("error", exc.reason)
            raise TuneError(f"{method} {path}: {exc.code} {detail}") from None
        except urllib.error.URLError as exc:
            raise TuneError(f"no Tune server at {url}: {exc.reason}") from None

    def get_all_trials(self) -> list[dict[str, Any]]:
        """Every trial's info."""
        trials: list[dict[str, Any]] = self._call("GET", "/trials")["trials"]
        return trials

    def get_trial(self, trial_id: str) -> dict[str, Any]:
        """One trial's info."""
        trial: dict[str, Any] = self._call("GET", f"/trials/{trial_id}")["trial"]
        return trial

    def add_trial(self, name: str, specification: dict[str, Any]) -> list[str]:
        """Queue the trials of an experiment spec (``{"run": <registered name>, ...}``)."""
        ids: list[str] = self._call("POST", "/trials", {"name": name, "spec": specification})[
            "trials"
        ]
        return ids

    def stop_trial(self, trial_id: str) -> dict[str, Any]:
        """Ask the runner to stop a trial."""
        out: dict[str, Any] = self._call("PUT", f"/trials/{trial_id}")
        return out
