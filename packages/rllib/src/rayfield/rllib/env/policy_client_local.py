"""A `PolicyClient`'s local inference: a copy of the server's policy in the client.

With ``PolicyClient(address, inference_mode="local")`` the client asks the
`PolicyServerInput` once for ``GET_WORKER_ARGS``: the policy's class as a dotted path
(imported here and checked to be a `Policy`), its spaces (JSON descriptions) and the
JSON-able part of the trainer config. It builds a `RolloutWorker` of its own around an
`ExternalEnv` that the application's calls drive. Each call that posts an event runs the
worker's sampler in the application's own thread (`ExternalEnvSampler.sample_ready`, one
thread at a time), so ``get_action`` computes its action with the local policy without a
hand-off to another thread; each batch completed (``rollout_fragment_length`` steps,
postprocessed by the local policy, e.g. with its advantages) goes to a sender thread,
which posts it with ``REPORT_SAMPLES`` together with the episodes that finished (at most
``MAX_UNSENT_BATCHES`` wait for it; then the application's next step waits). The weights (and the
trainer's global vars, e.g. the timestep of an exploration schedule) come with
``GET_WEIGHTS``: at the start, then at the first call after every ``update_interval``
seconds. Nothing is pickled (see ``serving_wire.py``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from rayfield.rllib.agents.checkpoints import drop_unserializable, space_from_json
from rayfield.rllib.env.external_env import ExternalEnvStopped, ServedEnv
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


MAX_UNSENT_BATCHES = 4
"""Batches sampled but not yet posted before the application's calls wait."""


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
        self.env = ServedEnv(action_space, obs_space)
        # the policy computes one row per call, where a second intra-op thread only
        # spins (about 1 ms of CPU per call on a busy 2-core machine, against 0.03 ms):
        # one torch thread, process-wide, as in a rollout worker
        import torch

        torch.set_num_threads(1)
        self.worker = RolloutWorker(lambda _ctx: self.env, cls, config)
        self.error: BaseException | None = None
        self.last_update = 0.0
        self.update_weights()
        self._stopped = threading.Event()
        self._pump_lock = threading.Lock()
        self._episodes: list[list[Any]] = []  # finished since the last batch cut
        self._unsent: queue.Queue[tuple[Any, list[list[Any]]] | None] = queue.Queue(
            MAX_UNSENT_BATCHES
        )
        self.env.pump = self._pump  # the application's calls sample in their own thread
        self.thread = threading.Thread(
            target=self._send_forever, name="PolicyClient.local_inference", daemon=True
        )
        self.thread.start()

    def ready(self) -> ServedEnv:
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

    def _pump(self) -> None:
        """Run the sampler on the events posted so far (in the application's thread)
        and hand the batches completed to the sender thread, waiting while
        ``MAX_UNSENT_BATCHES`` are unsent.

        Raises:
            ExternalEnvStopped: local inference was stopped or failed.
        """
        with self._pump_lock:
            if self.error is not None:
                raise ExternalEnvStopped(f"local inference failed: {self.error!r}")
            sampler = self.worker.sampler
            try:
                batches = sampler.sample_ready()
            except ExternalEnvStopped:
                raise
            except BaseException as exc:
                self._fail(exc)
                raise
            self._episodes.extend(
                [m.episode_length, m.episode_reward, m.custom_metrics]
                for m in sampler.get_metrics()
                if isinstance(m, RolloutMetrics)
            )
            for batch in batches:
                episodes, self._episodes = self._episodes, []
                while True:
                    try:
                        self._unsent.put((batch, episodes), timeout=0.5)
                        break
                    except queue.Full:
                        if self._stopped.is_set() or self.error is not None:
                            raise ExternalEnvStopped("local inference stopped") from None

    def _send_forever(self) -> None:
        try:
            while not self._stopped.is_set():
                try:
                    item = self._unsent.get(timeout=0.5)
                except queue.Empty:
                    continue
                if item is None:
                    return
                batch, episodes = item
                samples = encode_batch(batch, ("obs", "new_obs"), "lz4")
                self._send({"command": "REPORT_SAMPLES", "samples": samples, "metrics": episodes})
        except BaseException as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        """Keep `exc` as ``error`` and release the application's waiting calls."""
        if not self._stopped.is_set():
            logger.exception("PolicyClient: local inference failed", exc_info=exc)
            self.error = exc
            self.env.stop(timeout_s=0)

    def stop(self) -> None:
        """Stop sampling and the sender thread (the steps since the last batch, and the
        batches not yet sent, are not sent)."""
        self._stopped.set()
        self.env.stop(timeout_s=1.0)
        try:
            self._unsent.put_nowait(None)  # wakes the sender thread (else it sees _stopped)
        except queue.Full:
            pass
        self.thread.join(5)
