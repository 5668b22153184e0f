"""`PolicyClient`: an application outside the cluster drives episodes of a served policy.

RLlib's ``PolicyClient`` (reference: ``ray.rllib.utils.policy_client.PolicyClient``), over
the wire of ``serving_wire.py`` (msgpack by default, or JSON; never pickle) with the
server's token. Each thread keeps one HTTP/1.1 connection open to the server, so a
request costs one round trip.
"""

from __future__ import annotations

import http.client
import os
import threading
import urllib.parse
from typing import TYPE_CHECKING, Any

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


class PolicyClient:
    """Talks to a `PolicyServer` (see the module docstring).

    Args:
        address: ``"http://HOST:PORT"``, ``"https://HOST:PORT"`` or ``"HOST:PORT"`` (the
            reference's example omits the scheme; http is assumed).
        inference_mode: ``"remote"``: the server computes every action; ``"local"``: the
            client builds a copy of the server's policy (from its class path, spaces and
            JSON config; see `rayfield.rllib.env.policy_client_local`), computes the
            actions here and posts the batches it samples to the server (needs a
            `PolicyServerInput` server).
        update_interval: local inference: fetch the server's weights every this many
            seconds (checked at each call; None: only at the start and by
            `update_policy`).
        token: the server's token; None: ``$RAYFIELD_POLICY_SERVER_TOKEN``, else the token
            file a server on this machine wrote for its port.
        serialization: ``"msgpack"`` (default) or ``"json"``.
        timeout_s: how long one request may take (a ``get_action`` waits for the
            server's sampler).

    Raises:
        ValueError: a malformed address, an unknown ``inference_mode`` or serialization,
            ``update_interval`` <= 0.
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
        self.content_type = MSGPACK if serialization == "msgpack" else JSON
        self.timeout_s = float(timeout_s)
        self.inference_mode = inference_mode
        self.update_interval = update_interval
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
        reply = self._send(
            {"command": "GET_ACTION", "episode_id": episode_id, "observation": observation}
        )
        return reply["action"]

    def log_action(self, episode_id: str, observation: Any, action: Any) -> None:
        """Record an action the application chose itself at ``observation`` (off-policy)."""
        if self.local_inference is not None:
            return self.local_inference.ready().log_action(episode_id, observation, action)
        self._send(
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
        """Add ``reward`` to the reward of the episode's last action."""
        if self.local_inference is not None:
            return self.local_inference.ready().log_returns(episode_id, reward, info)
        self._send(
            {"command": "LOG_RETURNS", "episode_id": episode_id, "reward": reward, "info": info}
        )

    def end_episode(self, episode_id: str, observation: Any) -> None:
        """End the episode with its last observation."""
        if self.local_inference is not None:
            return self.local_inference.ready().end_episode(episode_id, observation)
        self._send({"command": "END_EPISODE", "episode_id": episode_id, "observation": observation})

    def update_policy(self) -> None:
        """Local inference: fetch the server's weights now (they are also fetched every
        ``update_interval`` seconds). Remote: nothing to do."""
        if self.local_inference is not None:
            self.local_inference.update_weights()

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end); local
        inference: also stop the sampler thread (the steps since its last batch are
        not sent)."""
        local = self.local_inference
        if local is not None and threading.current_thread() is not local.thread:
            local.stop()
        self._close_connection()

    def _close_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- HTTP ----------------------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = self._local.conn = cls(self._host, self._port, timeout=self.timeout_s)
        return conn

    def _send(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST ``request``; the decoded reply.

        Raises:
            PolicyServerError: a 4xx or 5xx answer.
            ConnectionError: the server cannot be reached.
        """
        body = encode(request, self.content_type)
        headers = {
            "Content-Type": self.content_type,
            "Authorization": f"Bearer {self.token}",
        }
        for attempt in (0, 1):
            conn = self._connection()
            try:
                conn.request("POST", "/", body, headers)
                response = conn.getresponse()
                data = response.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # the server closed an idle keep-alive connection: open a new one, once
                self._close_connection()
                if attempt:
                    raise ConnectionError(f"the policy server at {self.address} closed") from None
            except OSError as exc:
                self._close_connection()
                raise ConnectionError(
                    f"cannot reach the policy server at {self.address}: {exc}"
                ) from None
        kind = (response.getheader("Content-Type") or JSON).split(";")[0].strip()
        try:
            reply = decode(data, kind)
        except WireError:
            reply = {"error": data[:200].decode(errors="replace")}
        if response.status != 200:
            raise PolicyServerError(response.status, str(reply.get("error", "")))
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
