"""The Tune REST server (``tune.run(..., with_server=True)``) and its client.

The server answers on loopback, in a daemon thread of the driver, with JSON:

* ``GET /trials``: ``{"trials": [info, ...]}``;
* ``GET /trials/<id>``: ``{"trial": info}`` (404 if unknown);
* ``POST /trials`` with ``{"name": ..., "spec": {...}}``: queues the trials of that
  spec (``run`` names a registered trainable), 201 with their ids;
* ``PUT /trials/<id>``: asks the runner to stop that trial.

``info`` is ``{"id", "trainable_name", "config", "status", "result"}`` (config and last
result as JSON). Every request needs ``Authorization: Bearer <token>``: the token is random
(256 bits), written with the server's address to ``<experiment dir>/.tune_server.json``
(readable by its owner only; ``TuneClient.from_experiment_dir`` reads it),
and nothing in a request is ever unpickled. Requests that change the experiment are
queued and applied by the driver loop (:meth:`TuneServer.apply_requests`).
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

__all__ = ["DEFAULT_PORT", "TOKEN_FILE", "TuneClient", "TuneServer"]

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


class TuneServer:
    """Serves the runner's trials over HTTP on ``127.0.0.1:port`` (0: any free port).

    Args:
        runner: the experiment's runner.
        experiment_dir: where the token file is written.
        port: the TCP port.

    Raises:
        OSError: the port is taken.
    """

    def __init__(self, runner: TrialRunner, experiment_dir: str, port: int = DEFAULT_PORT) -> None:
        self.runner = runner
        self.token = secrets.token_hex(32)
        os.makedirs(experiment_dir, exist_ok=True)
        self.token_file = os.path.join(experiment_dir, TOKEN_FILE)
        self._requests: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        tmp = self.token_file + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"address": f"127.0.0.1:{self.port}", "token": self.token}, f)
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
                if given.startswith("Bearer ") and hmac.compare_digest(
                    given[7:].strip(), server.token
                ):
                    return True
                self._reply(
                    401,
                    {
                        "error": f"send 'Authorization: Bearer <token>' (the token "
                        f"is in {TOKEN_FILE} of the experiment directory)"
                    },
                )
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
        token: the server's token (its ``.tune_server_token`` file).

    Raises:
        TuneError: (from the methods) the server refused the request or is unreachable.
    """

    def __init__(
        self, tune_address: str, port_forward: int = DEFAULT_PORT, token: str = ""
    ) -> None:
        host, _, port = tune_address.partition(":")
        self.tune_address = host or "127.0.0.1"
        self.port_forward = int(port) if port else port_forward
        self._token = token

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
        return cls(info["address"], token=info["token"])

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
