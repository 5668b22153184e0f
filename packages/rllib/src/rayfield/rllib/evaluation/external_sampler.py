"""`ExternalEnvSampler`: turn an `ExternalEnv`'s calls into sample batches.

The env's thread posts events (see `rayfield.rllib.env.external_env`); the
sampler takes them in rounds of at most one event per episode. In a round, each
event first completes its episode's previous step (the observation then, the
action taken, the reward logged since and this observation as ``new_obs``; an
``"end"`` event marks it terminated and ends the episode), then every
observation of the round that takes an action goes through one batched forward
pass: `get_action` calls receive the policy's action, `log_action` steps keep the
env's action (the policy's other outputs, e.g. value estimates, are recorded for
it as computed).

Batch modes as in `SyncSampler`: ``truncate_episodes`` returns once
``rollout_fragment_length`` completed steps are collected and the events taken
from the env so far are processed, cutting running
episodes (bootstrapped by the policy, whose last step is still waiting for its
next observation and stays for the next batch); ``complete_episodes`` returns only
ended episodes, at least that many steps of them. Steps of episodes started with
``training_enabled=False`` are left out of batches; their returns are reported.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np

from rayfield.rllib.env.external_env import ExternalEnv, ExternalEvent
from rayfield.rllib.evaluation.callbacks import DefaultCallbacks
from rayfield.rllib.evaluation.episode import Episode, RolloutMetrics
from rayfield.rllib.evaluation.sampler import check_sampling, clip_reward
from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID, SampleBatch

_eps_ids = itertools.count(1 << 50)


class _Running:
    """The sampler's view of one running episode."""

    def __init__(self, env_index: int, training: bool) -> None:
        self.episode = Episode(env_index)
        self.eps_id = next(_eps_ids)
        self.training = training
        self.t = 0
        self.rows: list[dict[str, Any]] = []
        self.pending: dict[str, Any] | None = None  # obs and action awaiting their outcome


class ExternalEnvSampler:
    """Samples an `ExternalEnv` with one policy (see the module docstring).

    Args:
        env: the env; its thread is started by the first `sample`.
        policy, preprocessor, obs_filter, callbacks, fragment_length, batch_mode,
        clip_rewards, clip_actions, worker: as for `SyncSampler`.
        event_timeout_s: how long to wait for the env's next event before raising.

    Raises:
        ValueError: bad batch mode or fragment length.
        NotImplementedError: a recurrent policy.
    """

    def __init__(
        self,
        env: ExternalEnv,
        policy: Any,
        preprocessor: Any,
        obs_filter: Any,
        callbacks: DefaultCallbacks,
        *,
        fragment_length: int,
        batch_mode: str = "truncate_episodes",
        clip_rewards: Any = None,
        clip_actions: bool = True,
        worker: Any = None,
        event_timeout_s: float = 60.0,
        **_: Any,
    ) -> None:
        check_sampling(batch_mode, fragment_length)
        if policy.get_initial_state():
            raise NotImplementedError(
                "an ExternalEnv is sampled with feed-forward policies only: set model.use_lstm "
                "to False"
            )
        self.env = env
        self.policy = policy
        self.preprocessor = preprocessor
        self.obs_filter = obs_filter
        self.callbacks = callbacks
        self.fragment_length = int(fragment_length)
        self.batch_mode = batch_mode
        self.clip_rewards = clip_rewards
        self.worker = worker
        self.event_timeout_s = float(event_timeout_s)
        space = policy.action_space
        self._clip_box = (
            clip_actions and hasattr(space, "low") and np.issubdtype(space.dtype, np.floating)
        )
        self.metrics: list[RolloutMetrics] = []
        self._running: dict[str, _Running] = {}
        self._held: list[ExternalEvent] = []
        self._pieces: list[SampleBatch] = []
        self._steps = 0

    # -- events ---------------------------------------------------------------------
    def _next_round(self) -> list[ExternalEvent]:
        """Events with at most one per episode, waiting for the env if none is held."""
        self.env.start()  # on first use: a local worker that never samples leaves it idle
        deadline = time.monotonic() + self.event_timeout_s
        while not self._held:
            self._held = self.env.poll_events(0.05)
            if self._held:
                break
            if self.env.error is not None:
                raise RuntimeError(
                    f"{type(self.env).__name__}.run() raised {self.env.error!r}"
                ) from self.env.error
            if not self.env.is_alive():
                raise RuntimeError(
                    f"{type(self.env).__name__}.run() returned: the env gives no more experience"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{type(self.env).__name__} posted no observation in {self.event_timeout_s} s"
                )
        out: list[ExternalEvent] = []
        seen: set[str] = set()
        rest: list[ExternalEvent] = []
        for ev in self._held:
            if ev.episode_id in seen:
                rest.append(ev)
            else:
                seen.add(ev.episode_id)
                out.append(ev)
        self._held = rest
        return out

    def _process(self, raw: Any) -> np.ndarray:
        return self.obs_filter(self.preprocessor.transform_batch([raw]))[0]

    def _round(self) -> None:
        acting: list[tuple[_Running, ExternalEvent, np.ndarray]] = []
        for ev in self._next_round():
            run = self._running.get(ev.episode_id)
            if run is None:
                run = self._start(ev)
            obs = self._process(ev.obs)
            ep = run.episode
            if run.pending is not None:
                row = run.pending
                run.pending = None
                row.update(
                    rewards=clip_reward(np.float32(ev.reward), self.clip_rewards),
                    new_obs=obs,
                    terminateds=ev.kind == "end",
                    truncateds=False,
                    t=run.t,
                    eps_id=run.eps_id,
                )
                run.t += 1
                ep.length += 1
                ep.total_reward += ev.reward
                ep._last_info = ev.info
                if run.training:
                    run.rows.append(row)
                    self._steps += 1
                if self.callbacks.overrides("on_episode_step"):
                    self.callbacks.on_episode_step(
                        worker=self.worker, base_env=self.env, episode=ep, env_index=0
                    )
            ep._last_obs, ep._last_raw_obs = obs, ev.obs
            if ev.kind == "end":
                self._end(ev.episode_id, run)
            else:
                acting.append((run, ev, obs))
        if not acting:
            return
        actions, _, extra = self.policy.compute_actions(np.stack([o for _, _, o in acting]))
        space = self.policy.action_space
        for i, (run, ev, obs) in enumerate(acting):
            logged = not ev.wants_action
            action = np.asarray(ev.action, dtype=space.dtype) if logged else actions[i]
            run.pending = {"obs": obs, "actions": action, **{k: v[i] for k, v in extra.items()}}
            run.episode._last_action = action
            if not logged:
                out = np.clip(action, space.low, space.high) if self._clip_box else action
                self.env.send_action(ev.episode_id, out.item() if out.ndim == 0 else out)

    # -- episodes -------------------------------------------------------------------
    def _start(self, ev: ExternalEvent) -> _Running:
        run = _Running(0, ev.training_enabled)
        self._running[ev.episode_id] = run
        if self.callbacks.overrides("on_episode_start"):
            self.callbacks.on_episode_start(
                worker=self.worker,
                base_env=self.env,
                policies={DEFAULT_POLICY_ID: self.policy},
                episode=run.episode,
                env_index=0,
            )
        return run

    def _end(self, episode_id: str, run: _Running) -> None:
        del self._running[episode_id]
        ep = run.episode
        if self.callbacks.overrides("on_episode_end"):
            self.callbacks.on_episode_end(
                worker=self.worker,
                base_env=self.env,
                policies={DEFAULT_POLICY_ID: self.policy},
                episode=ep,
                env_index=0,
            )
        self.metrics.append(RolloutMetrics(ep.length, ep.total_reward, dict(ep.custom_metrics)))
        self._flush(run)

    def _flush(self, run: _Running) -> None:
        if not run.rows:
            return
        cols = {k: np.asarray([r[k] for r in run.rows]) for k in run.rows[0]}
        run.rows = []
        batch = SampleBatch(cols)
        batch["dones"] = batch["terminateds"] | batch["truncateds"]
        self._pieces.append(self.policy.postprocess_trajectory(batch))

    # -- batches ----------------------------------------------------------------------
    def sample(self) -> SampleBatch:
        """One batch, per the batch mode (see the module docstring)."""
        if self.batch_mode == "truncate_episodes":
            while self._steps < self.fragment_length or self._held:
                self._round()
            for run in self._running.values():
                self._flush(run)
        else:
            while sum(p.count for p in self._pieces) < self.fragment_length or self._held:
                self._round()
        pieces, self._pieces = self._pieces, []
        self._steps = sum(len(r.rows) for r in self._running.values())
        batch = SampleBatch.concat_samples(pieces)
        if self.callbacks.overrides("on_sample_end"):
            self.callbacks.on_sample_end(worker=self.worker, samples=batch)
        return batch

    def get_metrics(self) -> list[RolloutMetrics]:
        """Episodes ended since the last call."""
        out, self.metrics = self.metrics, []
        return out
