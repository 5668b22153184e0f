"""`PolicyServerInput`: a trainer learns from episodes that HTTP clients drive.

RLlib's ``ray.rllib.env.policy_server_input.PolicyServerInput`` (Ray 0.8-2.x), given as
the trainer's ``input``; the trainer then samples no env of its own::

    config = {
        "input": lambda ioctx: PolicyServerInput(ioctx, "localhost", 9900),
        "num_workers": 0,
        "input_evaluation": [],  # Ray 2: "off_policy_estimation_methods": {}
    }
    trainer = PPOTrainer(env="CartPole-v1", config=config)  # the env gives the spaces

Applications drive episodes with a `PolicyClient` on the wire of ``serving_wire.py``
(JSON or msgpack, arrays as raw buffers, never pickle; a token in every request, see
``policy_server.py``), in one of two modes:

* ``inference_mode="remote"``: ``start_episode``/``get_action``/``log_action``/
  ``log_returns``/``end_episode`` requests go to an `ExternalEnv` here, whose steps
  become batches of ``rollout_fragment_length`` steps with a copy of the worker's
  policy (so the clients never wait for training; `next`, which the trainer calls
  between updates, copies the trainer's weights and global vars into it). There is no
  sampler thread: the request's own handler thread runs the sampler on the events
  posted so far (`ExternalEnvSampler.sample_ready`, one thread at a time), so a
  ``get_action`` computes its action, and those of the requests that came meanwhile in
  the same forward pass, without handing it to another thread and back;
* ``inference_mode="local"``: the client asks once for ``GET_WORKER_ARGS`` (the policy's
  class as a dotted path, its spaces and the JSON-able part of the config), builds its
  own copy of the policy, fetches ``GET_WEIGHTS`` (arrays by policy id, plus the
  trainer's global vars; while the trainer learns, those of its last `next`, so that
  the client never waits for an update) every ``update_interval`` seconds and posts
  the postprocessed batches it samples with ``REPORT_SAMPLES`` (a batch in the offline JSON form of
  `rayfield.rllib.offline.columns`, plus its finished episodes).

`next` hands the trainer the batches of both modes in the order they came, waiting
for one; a bounded queue holds at most ``max_queued_batches`` of them, and a client
waits when it is full (backpressure: memory stays bounded when the clients outpace
the trainer, where RLlib's queue grows without limit). The episodes the clients finished are
reported in the trainer's results (``episode_reward_mean``...).

Single-agent policies only: a multi-agent worker raises ``NotImplementedError``.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from rayfield.rllib.agents.checkpoints import space_to_json, to_json_safe
from rayfield.rllib.env.external_env import ExternalEnvStopped, ServedEnv
from rayfield.rllib.env.policy_server import PolicyServer, _RequestError
from rayfield.rllib.evaluation.episode import RolloutMetrics
from rayfield.rllib.evaluation.external_sampler import ExternalEnvSampler
from rayfield.rllib.evaluation.sampler_base import SamplerSettings
from rayfield.rllib.offline.columns import OfflineDataError, decode_batch
from rayfield.rllib.offline.input_reader import InputReader
from rayfield.rllib.offline.io_context import IOContext
from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch

__all__ = ["MAX_REPORT_BYTES", "PolicyServerInput", "ServedEnv"]

logger = logging.getLogger("rayfield.rllib")

MAX_REPORT_BYTES = 64 << 20
"""The largest request body a `PolicyServerInput` reads by default (a client in local
inference mode posts whole batches); larger ones get 413."""
_MAX_METRICS = 10_000
_REQUIRED_COLUMNS = ("obs", "actions", "rewards", "new_obs", "dones")


class _InputServer(PolicyServer):
    """A `PolicyServer` that also answers a local-inference client's commands."""

    owner: PolicyServerInput

    def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        command = request.get("command")
        if command == "GET_WORKER_ARGS":
            return self.owner.worker_args()
        if command == "GET_WEIGHTS":
            return self.owner.weights()
        if command == "REPORT_SAMPLES":
            self.owner.report(request.get("samples"), request.get("metrics"))
            return {}
        return super().execute(request)


def _metrics_from_wire(rows: Any) -> list[RolloutMetrics]:
    """``[[length, reward, custom_metrics], ...]`` as `RolloutMetrics`.

    Raises:
        _RequestError: (400) not a list of such rows.
    """
    if rows is None:
        return []
    if not isinstance(rows, list) or len(rows) > _MAX_METRICS:
        raise _RequestError(400, f"metrics must be a list of at most {_MAX_METRICS} episodes")
    out = []
    for row in rows:
        ok = isinstance(row, list) and len(row) == 3 and isinstance(row[2], dict)
        if not ok or isinstance(row[0], bool) or isinstance(row[1], bool):
            raise _RequestError(400, "an episode's metrics are [length, reward, custom_metrics]")
        try:
            custom = {str(k): float(v) for k, v in row[2].items()}
            out.append(RolloutMetrics(int(row[0]), float(row[1]), custom))
        except (TypeError, ValueError) as exc:
            raise _RequestError(400, f"bad episode metrics {row!r}: {exc}") from None
    return out


class PolicyServerInput(InputReader):
    """Serves HTTP clients and reads their experience (see the module docstring).

    Args:
        ioctx: the worker's context (``ioctx.worker``: the rollout worker whose policy
            the clients use).
        address: the host to listen on (``"localhost"``: this machine only).
        port: the TCP port (0: any free one; see ``server.server_port``).
        token: the token clients must send; None: a random one written owner-only for
            this machine's clients (`rayfield.rllib.env.policy_server.server_token_path`).
        max_request_bytes: the largest request body read (larger: 413).
        max_concurrent: the most remote-inference episodes running at once (more: 429).
        max_queued_batches: batches waiting for the trainer before clients must wait.

    Raises:
        ValueError: ``ioctx`` has no worker.
        NotImplementedError: the worker is multi-agent.
        OSError: the address cannot be bound (e.g. the port is in use).
    """

    def __init__(
        self,
        ioctx: IOContext,
        address: str,
        port: int,
        *,
        token: str | None = None,
        max_request_bytes: int = MAX_REPORT_BYTES,
        max_concurrent: int = 100,
        max_queued_batches: int = 16,
    ) -> None:
        worker = ioctx.worker
        if worker is None:
            raise ValueError("PolicyServerInput needs a rollout worker (ioctx.worker is None)")
        if worker.multiagent:
            raise NotImplementedError(
                "PolicyServerInput serves a single-agent policy; this worker is multi-agent"
            )
        self.worker = worker
        self.policy = worker.policy_map[DEFAULT_POLICY_ID]
        env = getattr(worker, "env", None)
        obs_space = getattr(env, "observation_space", None) or self.policy.observation_space
        self.env = ServedEnv(self.policy.action_space, obs_space, max_concurrent, self._pump)
        # the clients' actions come from a copy of the policy, so that they never wait
        # for training (the trainer's policy is locked while it learns); `next`, called
        # by the trainer between its updates, copies the weights over
        self.inference_policy = type(self.policy)(
            self.policy.observation_space, self.policy.action_space, self.policy.config
        )
        self._sync_inference_policy()
        self.sampler = ExternalEnvSampler(
            self.env,
            {DEFAULT_POLICY_ID: self.inference_policy},
            None,
            worker.preprocessors,
            worker.filters,
            worker.callbacks,
            SamplerSettings.from_config(worker.config, worker.worker_index),
            worker,
            event_timeout_s=float("inf"),  # clients may come and go at any time
        )
        self._batches: queue.Queue[SampleBatch] = queue.Queue(maxsize=max(1, max_queued_batches))
        self._metrics: list[RolloutMetrics] = []
        self._lock = threading.Lock()  # guards _metrics
        self._pump_lock = threading.Lock()  # one request thread runs the sampler at a time
        self._closed = threading.Event()
        self.error: BaseException | None = None
        self.server = _InputServer(
            self.env, address, port, token=token, max_request_bytes=max_request_bytes
        )
        self.server.owner = self
        self.token = self.server.token
        self._thread = threading.Thread(
            target=self.server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="PolicyServerInput.serve",
            daemon=True,
        )
        self._thread.start()
        logger.info("PolicyServerInput serving on %s", self.server.address)

    @property
    def address(self) -> str:
        """``http://HOST:PORT`` of the server, for a `PolicyClient`."""
        return self.server.address

    # -- the trainer's side -------------------------------------------------------------
    def next(self) -> SampleBatch:
        """The next batch a client's episodes gave; waits for one.

        Raises:
            RuntimeError: sampling failed (its error is the cause), or the reader was
                closed.
        """
        self._sync_inference_policy()
        while True:
            try:
                return self._batches.get(timeout=0.5)
            except queue.Empty:
                if self.error is not None:
                    raise RuntimeError(f"PolicyServerInput failed: {self.error!r}") from self.error
                if self._closed.is_set():
                    raise RuntimeError("PolicyServerInput was closed") from None

    def _sync_inference_policy(self) -> None:
        """The trainer's weights and global vars (e.g. the timestep of an exploration
        schedule) into the inference policy."""
        self.inference_policy.set_weights(self.policy.get_weights())
        global_vars = getattr(self.worker, "global_vars", None)
        if global_vars:
            self.inference_policy.on_global_var_update(global_vars)

    def get_metrics(self) -> list[Any]:
        """Episodes the clients finished since the last call (local-inference clients
        report theirs; the remote ones' come from the sampler here)."""
        with self._lock:
            out, self._metrics = self._metrics, []
        return out

    def close(self) -> None:
        """Stop serving: running requests get 503, the port is released."""
        self._closed.set()
        self.env.stop(timeout_s=1.0)
        self.server.shutdown()
        self.server.server_close()

    # -- sampling in the request threads ------------------------------------------------
    def _pump(self) -> None:
        """Run the sampler on the events posted so far (in the calling request thread)
        and queue the batches they completed, waiting while the queue is full (which
        holds every client's next step: backpressure).

        Raises:
            ExternalEnvStopped: the reader was closed or sampling failed before (its
                waiting requests are released with it).
            Exception: sampling failed now (kept as ``error``; the env is stopped).
        """
        with self._pump_lock:
            if self.error is not None:
                raise ExternalEnvStopped(f"PolicyServerInput failed: {self.error!r}")
            try:
                batches = self.sampler.sample_ready()
            except ExternalEnvStopped:
                raise
            except BaseException as exc:
                if not self._closed.is_set():
                    logger.exception("PolicyServerInput: sampling failed")
                    self.error = exc
                self.env.stop(timeout_s=0)  # release the requests waiting for actions
                raise
            finished = self.sampler.get_metrics()
            if finished:
                with self._lock:
                    self._metrics.extend(finished)
            for batch in batches:
                self._put(batch)

    def _put(self, batch: Any) -> None:
        """Queue `batch` for the trainer, waiting while the queue is full.

        Raises:
            ExternalEnvStopped: the reader was closed while waiting.
        """
        while True:
            try:
                self._batches.put(batch, timeout=0.5)
                return
            except queue.Full:
                if self._closed.is_set():
                    raise ExternalEnvStopped("PolicyServerInput was closed") from None

    # -- the local-inference commands ------------------------------------------------------
    def worker_args(self) -> dict[str, Any]:
        """What a local-inference client builds its policy copy from (JSON data only)."""
        cls = type(self.policy)
        config = {
            k: v
            for k, v in to_json_safe(self.worker.config).items()
            if not (isinstance(v, dict) and "__unserializable__" in v)
        }
        return {
            "policy_class": f"{cls.__module__}.{cls.__qualname__}",
            "observation_space": space_to_json(self.env.observation_space),
            "action_space": space_to_json(self.policy.action_space),
            "config": config,
        }

    def weights(self) -> dict[str, Any]:
        """The worker's weights (by policy id, arrays by name) and global vars; while the
        trainer learns (its policy's lock is held for the whole update, seconds for
        PPO's epochs), the weights it had at its last `next` (the inference copy's),
        so that a client never waits for training."""
        lock = getattr(self.policy, "lock", None)
        if lock is not None and not lock.acquire(blocking=False):
            weights = {DEFAULT_POLICY_ID: self.inference_policy.get_weights()}
        else:
            try:
                weights = self.worker.get_weights()
            finally:
                if lock is not None:
                    lock.release()
        return {
            "weights": weights,
            "global_vars": to_json_safe(getattr(self.worker, "global_vars", {}) or {}),
        }

    def report(self, samples: Any, metrics: Any) -> None:
        """Queue a batch a local-inference client sampled.

        Raises:
            _RequestError: (400) the batch or the metrics are malformed, or the batch
                is a multi-agent one; (503) the reader was closed.
        """
        episodes = _metrics_from_wire(metrics)
        try:
            batch = decode_batch(samples, "REPORT_SAMPLES")
        except OfflineDataError as exc:
            raise _RequestError(400, str(exc)) from None
        if not isinstance(batch, SampleBatch):
            raise _RequestError(400, "REPORT_SAMPLES takes a SampleBatch")
        missing = [c for c in _REQUIRED_COLUMNS if c not in batch]
        if missing:
            raise _RequestError(400, f"the batch has no column {', '.join(missing)}")
        shape = tuple(self.policy.observation_space.shape)
        if tuple(batch["obs"].shape[1:]) != shape:
            raise _RequestError(
                400,
                f"the batch's obs are {list(batch['obs'].shape[1:])}, the policy's {list(shape)}",
            )
        try:
            self._put(batch)
        except ExternalEnvStopped:
            raise _RequestError(503, "the server is closing") from None
        with self._lock:
            self._metrics.extend(episodes)
