"""A `PolicyClient`'s local inference: a copy of the server's policy in the client.

With ``PolicyClient(address, inference_mode="local")`` the client asks the
`PolicyServerInput` once for ``GET_WORKER_ARGS``: the policy's class as a dotted path
(imported here and checked to be a `Policy`), its spaces (JSON descriptions) and the
JSON-able part of the trainer config. It builds a `RolloutWorker` of its own around an
`ExternalEnv` that the application's calls drive; a sampler thread computes the actions
with the local policy and posts each batch it completes (``rollout_fragment_length``
steps, postprocessed by the local policy, e.g. with its advantages) with
``REPORT_SAMPLES``, together with the episodes that finished. The weights (and the
trainer's global vars, e.g. the timestep of an exploration schedule) come with
``GET_WEIGHTS``: at the start, then at the first call after every ``update_interval``
seconds. Nothing is pickled (see ``serving_wire.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from rayfield.rllib.agents.checkpoints import drop_unserializable, space_from_json
from rayfield.rllib.env.external_env import ExternalEnv, ExternalEnvStopped
from rayfield.rllib.evaluation.episode import RolloutMetrics
from rayfield.rllib.evaluation.rollout_worker import RolloutWorker, resolve_policy_class
from rayfield.rllib.offline.columns import encode_batch
from rayfield.rllib.policy.policy import Policy

__all__ = ["LocalInference"]

logger = logging.getLogger("rayfield.rllib")

# what the client's worker does differently from the trainer's
_CLIENT_CONFIG = {
    "num_workers": 0,
    "input": "sampler",
    "output": None,
    "input_evaluation": [],
    "evaluation_interval": None,
    "callbacks": None,
    "remote_worker_envs": False,
    "num_envs_per_worker": 1,
}


class _ClientEnv(ExternalEnv):
    """The application's episodes: ``run`` only waits for `stop`."""

    def run(self) -> None:
        self._stopped.wait()


def _policy_class(path: Any) -> type:
    """The `Policy` subclass named by ``path``.

    Raises:
        ValueError: ``path`` is not a dotted path of a `Policy` subclass.
    """
    if not isinstance(path, str) or "." not in path or "<" in path:
        raise ValueError(f"the server named no importable policy class: {path!r}")
    try:
        cls = resolve_policy_class(path)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import the server's policy class {path}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise ValueError(f"the server's policy class {path} is not a Policy")
    return cls


class LocalInference:
    """The client side of local inference (see the module docstring).

    Args:
        send: ``request -> reply`` of the `PolicyClient` (its ``_send``).
        update_interval: seconds between weight fetches (None: only the first).

    Raises:
        PolicyServerError: the server refused ``GET_WORKER_ARGS`` or ``GET_WEIGHTS``.
        ValueError: the server's answer names no importable `Policy` or space.
    """

    def __init__(
        self, send: Callable[[dict[str, Any]], dict[str, Any]], update_interval: float | None
    ) -> None:
        self._send = send
        self.update_interval = update_interval
        spec = send({"command": "GET_WORKER_ARGS"})
        cls = _policy_class(spec.get("policy_class"))
        try:
            obs_space = space_from_json(spec["observation_space"])
            action_space = space_from_json(spec["action_space"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"the server's spaces are not readable: {exc!r}") from None
        config = spec.get("config")
        config = drop_unserializable(config) if isinstance(config, dict) else {}
        config.update(_CLIENT_CONFIG)
        config.pop("multiagent", None)
        self.env = _ClientEnv(action_space, obs_space)
        self.worker = RolloutWorker(lambda _ctx: self.env, cls, config)
        self.worker.sampler.event_timeout_s = float("inf")  # the application sets the pace
        self.error: BaseException | None = None
        self.last_update = 0.0
        self.update_weights()
        self._stopped = threading.Event()
        self.thread = threading.Thread(
            target=self._sample_forever, name="PolicyClient.local_inference", daemon=True
        )
        self.thread.start()

    def ready(self) -> ExternalEnv:
        """The env the application's calls go to, after fetching the weights when
        ``update_interval`` has passed.

        Raises:
            RuntimeError: the sampler thread failed (its error is the cause).
        """
        if self.error is not None:
            raise RuntimeError(f"local inference failed: {self.error!r}") from self.error
        interval = self.update_interval
        if interval is not None and time.monotonic() - self.last_update >= interval:
            self.update_weights()
        return self.env

    def update_weights(self) -> None:
        """Fetch the server's weights and global vars into the local policy."""
        reply = self._send({"command": "GET_WEIGHTS"})
        self.worker.set_weights(reply.get("weights") or {}, reply.get("global_vars") or None)
        self.last_update = time.monotonic()

    def _sample_forever(self) -> None:
        try:
            while not self._stopped.is_set():
                batch = self.worker.sample()
                episodes = [
                    [m.episode_length, m.episode_reward, m.custom_metrics]
                    for m in self.worker.get_metrics()
                    if isinstance(m, RolloutMetrics)
                ]
                samples = encode_batch(batch, ("obs", "new_obs"), "lz4")
                self._send({"command": "REPORT_SAMPLES", "samples": samples, "metrics": episodes})
        except ExternalEnvStopped:
            pass
        except BaseException as exc:
            if not self._stopped.is_set():
                logger.exception("PolicyClient: local inference failed")
                self.error = exc
                self.env.stop(timeout_s=0)  # release the application's waiting calls

    def stop(self) -> None:
        """Stop the sampler thread (the steps since its last batch are not sent)."""
        self._stopped.set()
        self.env.stop(timeout_s=1.0)
        self.thread.join(5)
