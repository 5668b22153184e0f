"""``TuneClient``: talks to the Tune REST server (:mod:`rayfield.tune.web_server`).

It sends ``Authorization: Bearer <token>`` only with a token it can trust: the one it is
given, or the one in an experiment's ``.tune_server.json`` that passes the ownership
check (:func:`rayfield.util.private_files.read_json`). It never looks up the cluster's
token by itself.
"""

from __future__ import annotations

import http.client
import json
import os
from typing import Any

from rayfield.tune.error import TuneError
from rayfield.util import private_files

__all__ = ["DEFAULT_PORT", "TOKEN_FILE", "TuneClient"]

DEFAULT_PORT = 4321
TOKEN_FILE = ".tune_server.json"


class TuneClient:
    """Talks to a :class:`TuneServer`.

    It sends ``Authorization: Bearer <token>`` only with the token it is given; with
    none, it sends none (a server then answers 401). It never looks up the cluster's
    token itself: whatever listens on ``tune_address`` would get it, in plain HTTP. Pass
    the token explicitly (e.g. ``token=rayfield.util.cluster.find_token()`` for a server
    you know takes the cluster's), or use :meth:`from_experiment_dir`. Requests go
    straight to the address: no proxy from the environment, no redirects followed.

    Args:
        tune_address: ``"host"`` or ``"host:port"`` of the server.
        port_forward: the port, when ``tune_address`` has none.
        token: the server's token; None or ``""``: none is sent.

    Raises:
        ValueError: the port is not a number from 1 to 65535.
        TuneError: (from the methods) the server refused the request or is unreachable.
    """

    def __init__(
        self, tune_address: str, port_forward: int = DEFAULT_PORT, token: str | None = None
    ) -> None:
        host, _, port = tune_address.partition(":")
        self.tune_address = host or "127.0.0.1"
        self.port_forward = int(port) if port else int(port_forward)
        if not 0 < self.port_forward < 65536:
            raise ValueError(f"port must be from 1 to 65535, got {self.port_forward}")
        self._token = token or None

    @classmethod
    def from_experiment_dir(cls, path: str) -> TuneClient:
        """A client of the server of the experiment running in ``path``, with the token
        from its ``.tune_server.json``.

        The file is read only when it passes the ownership check: this user's, writable
        by no one else, in directories only this user or root can change. Another user
        could otherwise name their own listener there and get what the client sends.

        Raises:
            TuneError: no server runs for that experiment, or the file is not a server's.
            UnsafeFileError: the file or a directory above it is not this user's alone.
        """
        file = os.path.join(os.path.expanduser(path), TOKEN_FILE)
        try:
            info = private_files.read_json(file, max_bytes=1 << 16)
        except FileNotFoundError:
            raise TuneError(f"no Tune server runs for {path} (start it with_server=True)") from None
        except ValueError as exc:  # not JSON (UnsafeFileError is not a ValueError)
            raise TuneError(f"{file} is not a Tune server's address file: {exc}") from None
        if (
            not isinstance(info, dict)
            or not isinstance(info.get("address"), str)
            or not isinstance(info.get("token"), str)
        ):
            raise TuneError(f"{file} is not a Tune server's address file")
        return cls(info["address"], token=info["token"])

    @property
    def server_address(self) -> str:
        return self.tune_address

    @property
    def server_port(self) -> int:
        return self.port_forward

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"http://{self.tune_address}:{self.port_forward}{path}"
        headers = {}
        data = json.dumps(body).encode() if body is not None else None
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        connection = http.client.HTTPConnection(self.tune_address, self.port_forward, timeout=30)
        try:
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise TuneError(f"no Tune server at {url}: {exc}") from None
        finally:
            connection.close()
        try:
            answer = json.loads(raw or b"{}")
        except ValueError:
            answer = {}
        if response.status >= 400:
            detail = answer.get("error", response.reason) if isinstance(answer, dict) else ""
            if response.status == 401 and not self._token:
                detail += (
                    " (this client was given no token: pass token=..., or use "
                    "TuneClient.from_experiment_dir(path))"
                )
            raise TuneError(f"{method} {path}: {response.status} {detail}")
        return answer

    def get_all_trials(self) -> list[dict[str, Any]]:
        """Every trial's info."""
        trials: list[dict[str, Any]] = self._call("GET", "/trials")["trials"]
        return trials

    def get_trial(self, trial_id: str) -> dict[str, Any]:
        """One trial's info."""
        trial: dict[str, Any] = self._call("GET", f"/trials/{trial_id}")["trial"]
        return trial

    def add_trial(self, name: str, specification: dict[str, Any]) -> list[str]:
        """Queue the trials of an experiment spec (``{"run": <registered name>, ...}``;
        see :mod:`rayfield.tune.rest_spec` for what the server takes)."""
        ids: list[str] = self._call("POST", "/trials", {"name": name, "spec": specification})[
            "trials"
        ]
        return ids

    def stop_trial(self, trial_id: str) -> dict[str, Any]:
        """Ask the runner to stop a trial."""
        out: dict[str, Any] = self._call("PUT", f"/trials/{trial_id}")
        return out
