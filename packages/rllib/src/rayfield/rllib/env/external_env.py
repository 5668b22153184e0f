"""`ExternalEnv`: an environment that drives the policy instead of being stepped.

Some environments cannot be stepped by the rollout worker: a game server, a
simulator with its own main loop, a service whose clients ask for actions. An
`ExternalEnv` inverts control. Its `run` method executes in a thread of its own
(started by the rollout worker) and, for each episode, calls:

1. ``episode_id = start_episode()``;
2. ``action = get_action(episode_id, obs)`` (on-policy: the policy picks the
   action; the call blocks until the sampler has computed it) or
   ``log_action(episode_id, obs, action)`` (off-policy: the env chose the
   action itself, e.g. a human or a legacy controller; only off-policy
   algorithms such as DQN learn correctly from such steps). `log_action` too
   blocks until the sampler has taken the step, as RLlib's does: an episode
   never runs more than one step ahead of the sampler, so a client that only
   logs is held to the sampler's pace (backpressure) instead of filling memory
   with steps the sampler must work through before it can return a batch;
3. ``log_returns(episode_id, reward, info=None)`` for the reward of that action
   (several calls add up; no call means 0.0);
4. repeat 2-3, then ``end_episode(episode_id, obs)`` with the last observation.

Several episodes may run at once (up to ``max_concurrent``, e.g. one per client
thread); each episode's calls must come in that order from one thread at a time.
The sampler (`rayfield.rllib.evaluation.external_sampler`) batches the
observations that are waiting for an action into one forward pass.

`stop` ends the env: blocked `get_action` calls and every later call raise
`ExternalEnvStopped`, which ends `run` quietly; the rollout worker calls it when
it stops.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class ExternalEnvStopped(RuntimeError):
    """Raised in the env's thread by its calls once the env was stopped."""


@dataclass
class ExternalEvent:
    """What an episode reports to the sampler.

    For an `ExternalMultiAgentEnv` ``obs``, ``reward``, ``info`` and ``action`` are
    dicts keyed by agent id.

    Attributes:
        episode_id: the episode.
        kind: ``"obs"`` (an observation that takes an action) or ``"end"``.
        obs: the raw observation.
        reward: the sum of `log_returns` since the previous observation.
        info: the last info given to `log_returns` since then (or ``{}``).
        action: the logged action of `log_action` (None: the policy picks one).
        wants_action: True: a `get_action` call waits for the policy's action;
            False (``"obs"`` of `log_action`): the call waits only for the sampler
            to take the step (`send_action` with None).
        training_enabled: the episode's steps go into training batches.
    """

    episode_id: str
    kind: str
    obs: Any
    reward: Any
    info: dict[Any, Any]
    action: Any = None
    wants_action: bool = False
    training_enabled: bool = True


@dataclass
class _Episode:
    episode_id: str
    training_enabled: bool
    multiagent: bool = False
    reward: Any = 0.0  # a float; {agent_id: float} for an ExternalMultiAgentEnv
    info: dict[Any, Any] = field(default_factory=dict)
    actions: queue.Queue[Any] = field(default_factory=lambda: queue.Queue(maxsize=1))

    def __post_init__(self) -> None:
        self.reward = {} if self.multiagent else 0.0

    def take(self) -> tuple[Any, dict[Any, Any]]:
        out = (self.reward, self.info)
        self.reward, self.info = ({} if self.multiagent else 0.0), {}
        return out


_STOP = object()


class ExternalEnv:
    """Base class of externally driven envs: override `run` (see the module docstring).

    Args:
        action_space: the space of the actions `get_action` returns.
        observation_space: the space of the observations passed in.
        max_concurrent: the most episodes running at once.

    Example:
        >>> import gymnasium as gym
        >>> class Served(ExternalEnv):
        ...     def __init__(self, config):
        ...         self.game = gym.make("CartPole-v1")
        ...         super().__init__(self.game.action_space, self.game.observation_space)
        ...     def run(self):
        ...         while True:
        ...             eid = self.start_episode()
        ...             obs, _ = self.game.reset()
        ...             done = False
        ...             while not done:
        ...                 obs, r, term, trunc, _ = self.game.step(self.get_action(eid, obs))
        ...                 self.log_returns(eid, r)
        ...                 done = term or trunc
        ...             self.end_episode(eid, obs)
    """

    # True in ExternalMultiAgentEnv: observations, actions and rewards are dicts by agent id
    _multiagent = False

    def __init__(
        self, action_space: Any, observation_space: Any, max_concurrent: int = 100
    ) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
        self.action_space = action_space
        self.observation_space = observation_space
        self.max_concurrent = int(max_concurrent)
        self._episodes: dict[str, _Episode] = {}
        self._finished: set[str] = set()
        self._events: queue.Queue[ExternalEvent] = queue.Queue()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    # -- the env's side ------------------------------------------------------------
    def run(self) -> None:
        """The env's main loop, run in its own thread: override it."""
        raise NotImplementedError("an ExternalEnv subclass must implement run()")

    def start_episode(self, episode_id: str | None = None, training_enabled: bool = True) -> str:
        """Start an episode and return its id (`episode_id`, or a new random one).

        Args:
            episode_id: the id to use (None: a random one).
            training_enabled: False keeps the episode's steps out of training batches
                (its return is still reported).

        Raises:
            ValueError: the id is in use or was used by an ended episode.
            RuntimeError: ``max_concurrent`` episodes are running already.
            ExternalEnvStopped: the env was stopped.
        """
        self._check_running()
        eid = episode_id if episode_id is not None else uuid.uuid4().hex
        with self._lock:
            if eid in self._episodes or eid in self._finished:
                raise ValueError(f"episode id {eid!r} is already in use or has ended")
            if len(self._episodes) >= self.max_concurrent:
                raise RuntimeError(
                    f"{len(self._episodes)} episodes are running, the most max_concurrent="
                    f"{self.max_concurrent} allows: end one first or raise max_concurrent"
                )
            self._episodes[eid] = _Episode(eid, bool(training_enabled), self._multiagent)
        return eid

    def get_action(self, episode_id: str, observation: Any) -> Any:
        """The policy's action for `observation`; blocks until the sampler computes it.

        Raises:
            KeyError: no running episode has this id.
            ExternalEnvStopped: the env was stopped (also while waiting).
        """
        ep = self._episode(episode_id)
        self._post(ep, "obs", observation, wants_action=True)
        return self._reply(ep)

    def log_action(self, episode_id: str, observation: Any, action: Any) -> None:
        """Record that the env took `action` at `observation` (off-policy); blocks
        until the sampler has taken the step (see the module docstring).

        Raises:
            KeyError: no running episode has this id.
            ExternalEnvStopped: the env was stopped (also while waiting).
        """
        ep = self._episode(episode_id)
        self._post(ep, "obs", observation, action=action)
        self._reply(ep)

    def log_returns(
        self,
        episode_id: str,
        reward: float | dict[Any, float],
        info: dict[Any, Any] | None = None,
    ) -> None:
        """Add `reward` (a number; a dict by agent id only in `ExternalMultiAgentEnv`)
        to the reward of the episode's last action.

        Raises:
            TypeError: `reward` is a dict.
            KeyError: no running episode has this id.
        """
        if isinstance(reward, dict):
            raise TypeError(
                "an ExternalEnv's reward is a number, got a dict: for rewards by agent id "
                "subclass ExternalMultiAgentEnv"
            )
        ep = self._episode(episode_id)
        ep.reward += float(reward)
        if info:
            ep.info = dict(info)

    def end_episode(self, episode_id: str, observation: Any) -> None:
        """End the episode in a terminal state with its last observation.

        Raises:
            KeyError: no running episode has this id.
            ExternalEnvStopped: the env was stopped.
        """
        ep = self._episode(episode_id)
        with self._lock:
            del self._episodes[episode_id]
            self._finished.add(episode_id)
        self._post(ep, "end", observation)

    # -- the thread ------------------------------------------------------------------
    def start(self) -> None:
        """Run `run` in a daemon thread (the rollout worker calls this once)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run_guarded, name=f"{type(self).__name__}.run", daemon=True
            )
            self._thread.start()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the env: its blocked and later calls raise `ExternalEnvStopped`;
        waits up to `timeout_s` for `run` to return."""
        self._stopped.set()
        with self._lock:
            episodes = list(self._episodes.values())
        for ep in episodes:
            try:
                ep.actions.put_nowait(_STOP)
            except queue.Full:
                pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def close(self) -> None:
        self.stop()

    def _run_guarded(self) -> None:
        try:
            self.run()
        except ExternalEnvStopped:
            pass
        except BaseException as exc:  # reported to the sampler, which raises it
            self.error = exc

    # -- the sampler's side -------------------------------------------------------------
    def poll_events(self, timeout_s: float | None) -> list[ExternalEvent]:
        """The events reported so far, waiting up to `timeout_s` for the first (None:
        not at all)."""
        try:
            if timeout_s is None:
                out = [self._events.get_nowait()]
            else:
                out = [self._events.get(timeout=timeout_s)]
        except queue.Empty:
            return []
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out

    def send_action(self, episode_id: str, action: Any) -> None:
        """Hand `action` to the `get_action` call waiting in episode `episode_id`
        (None to a waiting `log_action` call: the sampler took its step)."""
        with self._lock:
            ep = self._episodes.get(episode_id)
        if ep is not None:
            ep.actions.put(action)

    # -- helpers -----------------------------------------------------------------------
    def _check_running(self) -> None:
        if self._stopped.is_set():
            raise ExternalEnvStopped("the ExternalEnv was stopped")

    def _episode(self, episode_id: str) -> _Episode:
        self._check_running()
        with self._lock:
            ep = self._episodes.get(episode_id)
        if ep is None:
            state = "has ended" if episode_id in self._finished else "was never started"
            raise KeyError(f"episode {episode_id!r} {state}: call start_episode() first")
        return ep

    def _reply(self, ep: _Episode) -> Any:
        """Wait for the sampler's reply to the episode's last observation."""
        reply = ep.actions.get()
        if reply is _STOP:
            raise ExternalEnvStopped("the ExternalEnv was stopped")
        return reply

    def _post(self, ep: _Episode, kind: str, obs: Any, **kw: Any) -> None:
        self._check_running()
        reward, info = ep.take()
        self._events.put(
            ExternalEvent(
                ep.episode_id, kind, obs, reward, info, training_enabled=ep.training_enabled, **kw
            )
        )


class ServedEnv(ExternalEnv):
    """An `ExternalEnv` whose episodes other threads drive (HTTP requests of a
    `PolicyServerInput`, the application's calls of a local-inference `PolicyClient`):
    ``run`` only waits for `stop`. Each call that posts an event (``get_action``,
    ``log_action``, ``end_episode``) then calls ``pump`` in its own thread, which is
    meant to run the sampler on the events posted so far
    (`ExternalEnvSampler.sample_ready`): the call's reply is then ready, and it does
    not wait for a sampler thread.

    Args:
        action_space, observation_space, max_concurrent: as for `ExternalEnv`.
        pump: called after each posted event (None: nothing; a sampler thread must
            then answer, as for any `ExternalEnv`).
    """

    def __init__(
        self,
        action_space: Any,
        observation_space: Any,
        max_concurrent: int = 100,
        pump: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(action_space, observation_space, max_concurrent)
        self.pump = pump

    def run(self) -> None:
        self._stopped.wait()

    def _post(self, ep: _Episode, kind: str, obs: Any, **kw: Any) -> None:
        super()._post(ep, kind, obs, **kw)
        if self.pump is not None:
            self.pump()
