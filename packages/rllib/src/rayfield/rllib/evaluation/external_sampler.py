"""`ExternalEnvSampler`: turn an `ExternalEnv`'s calls into sample batches.

The env's thread posts events (see `rayfield.rllib.env.external_env`); the
sampler takes them in rounds of at most one event per episode. A single-agent
`ExternalEnv` is sampled as one agent (``"agent0"``) of the default policy; an
`ExternalMultiAgentEnv` posts dicts keyed by agent id, and each agent acts with
the policy ``policy_mapping_fn`` bound it to (once per agent and episode).

In a round, each event first adds its rewards to the agents they were logged for,
then completes the previous step of each agent it observes (that step's
observation, its action, the rewards logged for the agent since and this
observation as ``new_obs``); an ``"end"`` event completes the step of every agent
of the episode as terminated and ends the episode. Then the observations of the
round that take an action go through one batched forward pass per policy:
`get_action` calls receive the policies' actions, `log_action` steps keep the
env's actions (the policies' other outputs, e.g. value estimates, are recorded
for them as computed) and their calls are released once the round is done: an
episode posts its next observation only after the sampler took the previous one.

Batch modes as in `SyncSampler`: ``truncate_episodes`` returns once
``rollout_fragment_length`` env steps are collected and the events taken from the
env so far are processed, cutting running episodes (bootstrapped by the policy,
whose last step is still waiting for its next observation and stays for the next
batch); ``complete_episodes`` returns only ended episodes, at least that many env
steps of them. An env step is an event that completed at least one agent's step.
Steps of episodes started with ``training_enabled=False`` are left out of
batches; their returns are reported. A single-agent env gives a `SampleBatch`, a
multi-agent one a `MultiAgentBatch`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rayfield.rllib.env.external_env import ExternalEnv, ExternalEvent
from rayfield.rllib.evaluation.callbacks import DefaultCallbacks
from rayfield.rllib.evaluation.episode import Episode, RolloutMetrics
from rayfield.rllib.evaluation.multi_agent_sampler import MultiAgentEpisode, map_agent
from rayfield.rllib.evaluation.sampler_base import SamplerBase, SamplerSettings, clip_reward
from rayfield.rllib.policy.sample_batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch

_eps_ids = itertools.count(1 << 50)
AGENT = "agent0"  # the agent id of a single-agent ExternalEnv


class _Running:
    """The sampler's view of one running episode."""

    def __init__(self, episode_id: str, episode: Episode, training: bool) -> None:
        self.episode_id = episode_id  # the env's id of the episode
        self.episode = episode
        self.eps_id = next(_eps_ids)
        self.training = training
        self.steps = 0  # env steps of this episode in batches not yet returned
        self.t: dict[Any, int] = {}
        self.agent_index: dict[Any, int] = {}
        self.rows: dict[Any, list[dict[str, Any]]] = {}
        self.pending: dict[Any, dict[str, Any]] = {}  # obs and action awaiting the outcome
        self.reward: dict[Any, float] = {}  # rewards logged since each agent's observation


class ExternalEnvSampler(SamplerBase):
    """Samples an `ExternalEnv` or `ExternalMultiAgentEnv` (see the module docstring).

    Args:
        env: the env; its thread is started by the first `sample`.
        policies: ``{policy_id: Policy}`` (a single-agent env uses ``default_policy``).
        policy_mapping_fn: agent id -> policy id (0.7 or Ray 2 signature); None:
            every agent uses ``default_policy``.
        preprocessors: ``{policy_id: Preprocessor}``.
        obs_filters: ``{policy_id: filter}``.
        callbacks, settings, worker: as for `SyncSampler` (``horizon`` and ``seed``
            are the env's business and unused).
        event_timeout_s: how long to wait for the env's next event before raising.

    Raises:
        NotImplementedError: a recurrent policy.
    """

    def __init__(
        self,
        env: ExternalEnv,
        policies: dict[str, Any],
        policy_mapping_fn: Callable[..., str] | None,
        preprocessors: dict[str, Any],
        obs_filters: dict[str, Any],
        callbacks: DefaultCallbacks,
        settings: SamplerSettings,
        worker: Any = None,
        event_timeout_s: float = 60.0,
    ) -> None:
        super().__init__(callbacks, settings, worker)
        if any(p.get_initial_state() for p in policies.values()):
            raise NotImplementedError(
                "an ExternalEnv is sampled with feed-forward policies only: set model.use_lstm "
                "to False"
            )
        self.env = env
        self.multiagent = bool(env._multiagent)
        self.policies = policies
        self.mapping_fn = policy_mapping_fn or (lambda agent_id: DEFAULT_POLICY_ID)
        self.preprocessors = preprocessors
        self.filters = obs_filters
        self.event_timeout_s = float(event_timeout_s)
        self._running: dict[str, _Running] = {}
        self._held: list[ExternalEvent] = []
        self._pieces: dict[str, list[SampleBatch]] = {}
        self._steps = 0  # env steps collected since the last batch (truncate_episodes)
        self._done_steps = 0  # env steps of episodes ended since then (complete_episodes)

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
        return self._take_round()

    def _take_round(self) -> list[ExternalEvent]:
        """The held events with at most one per episode (the rest stay held)."""
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

    def _as_dicts(self, ev: ExternalEvent) -> tuple[dict, dict, dict, dict | None]:
        """``(obs, rewards, infos, logged actions or None)`` of an event, by agent id."""
        if self.multiagent:
            return ev.obs, ev.reward, ev.info, ev.action
        logged = None if ev.wants_action or ev.kind == "end" else {AGENT: ev.action}
        return {AGENT: ev.obs}, {AGENT: ev.reward}, {AGENT: ev.info}, logged

    def _round(self, events: list[ExternalEvent] | None = None) -> None:
        """Process one round of events (default: the next, waiting for the env)."""
        acting: dict[str, list[tuple[_Running, Any, np.ndarray]]] = {}
        logged: dict[tuple[str, Any], Any] = {}
        replies: dict[str, dict[Any, Any]] = {}  # get_action calls waiting for actions
        released: list[str] = []  # log_action calls waiting for the round
        for ev in self._next_round() if events is None else events:
            run = self._running.get(ev.episode_id) or self._start(ev)
            obs_d, rew_d, info_d, act_d = self._as_dicts(ev)
            ep = run.episode
            for aid, r in rew_d.items():
                run.reward[aid] = run.reward.get(aid, 0.0) + float(r)
                self._add_reward(ep, aid, float(r))
            obs = {aid: self._process(ep.policy_for(aid), raw) for aid, raw in obs_d.items()}
            ending = ev.kind == "end"
            self._complete(run, obs, ending)
            for aid, o in obs.items():
                self._note(ep, "obs", aid, o)
                self._note(ep, "raw", aid, obs_d[aid])
                self._note(ep, "info", aid, info_d.get(aid) if self.multiagent else ev.info)
            if ending:
                self._end(ev.episode_id, run)
                continue
            if ev.wants_action:
                replies[ev.episode_id] = {}
            else:
                released.append(ev.episode_id)
            for aid, o in obs.items():
                acting.setdefault(ep.policy_for(aid), []).append((run, aid, o))
                if act_d is not None:
                    logged[(ev.episode_id, aid)] = act_d[aid]
        for pid, members in acting.items():
            self._act(pid, members, logged, replies)
        for eid, actions in replies.items():
            self.env.send_action(eid, actions if self.multiagent else actions[AGENT])
        for eid in released:
            self.env.send_action(eid, None)

    def _complete(self, run: _Running, obs: dict[Any, np.ndarray], ending: bool) -> None:
        """Complete the pending step of each agent in `obs` (all agents when
        `ending`); count an env step if any was completed."""
        agents = list(run.pending) if ending else [a for a in obs if a in run.pending]
        for aid in agents:
            row = run.pending.pop(aid)
            reward = np.float32(run.reward.pop(aid, 0.0))
            row.update(
                rewards=clip_reward(reward, self.clip_rewards),
                new_obs=obs.get(aid, row["obs"]),
                terminateds=ending,
                truncateds=False,
                t=run.t.get(aid, 0),
                eps_id=run.eps_id,
            )
            if self.multiagent:
                row["agent_index"] = run.agent_index.setdefault(aid, len(run.agent_index))
            run.t[aid] = run.t.get(aid, 0) + 1
            if run.training:
                run.rows.setdefault(aid, []).append(row)
        if not agents:
            return
        run.episode.length += 1
        if run.training:
            run.steps += 1
            self._steps += 1
        if self.callbacks.overrides("on_episode_step"):
            self.callbacks.on_episode_step(
                worker=self.worker, base_env=self.env, episode=run.episode, env_index=0
            )

    def _act(
        self,
        pid: str,
        members: list[tuple[_Running, Any, np.ndarray]],
        logged: dict[tuple[str, Any], Any],
        replies: dict[str, dict[Any, Any]],
    ) -> None:
        """One forward pass of policy `pid` for its acting agents."""
        policy = self.policies[pid]
        actions, _, extra = policy.compute_actions(np.stack([o for _, _, o in members]))
        space = policy.action_space
        clip = self.clips_box(space)
        for i, (run, aid, o) in enumerate(members):
            eid = run.episode_id
            key = (eid, aid)
            action = np.asarray(logged[key], dtype=space.dtype) if key in logged else actions[i]
            run.pending[aid] = {"obs": o, "actions": action, **{k: v[i] for k, v in extra.items()}}
            self._note(run.episode, "action", aid, action)
            if key not in logged and eid in replies:
                out = np.clip(action, space.low, space.high) if clip else action
                replies[eid][aid] = out.item() if out.ndim == 0 else out

    # -- episodes -------------------------------------------------------------------
    def _mapping(self, agent_id: Any, episode: Any) -> str:
        return map_agent(self.mapping_fn, self.policies, agent_id, episode, self.worker)

    def _process(self, pid: str, raw: Any) -> np.ndarray:
        return self.filters[pid](self.preprocessors[pid].transform_batch([raw]))[0]

    def _add_reward(self, ep: Episode, aid: Any, reward: float) -> None:
        ep.total_reward += reward
        if isinstance(ep, MultiAgentEpisode):
            key = (aid, ep.policy_for(aid))
            ep._agent_rewards[key] = ep._agent_rewards.get(key, 0.0) + reward

    @staticmethod
    def _note(ep: Episode, what: str, aid: Any, value: Any) -> None:
        """Record the agent's last obs / raw obs / info / action on the episode."""
        if isinstance(ep, MultiAgentEpisode):
            ep._last[what][aid] = value
        else:
            setattr(ep, f"_last_{'raw_obs' if what == 'raw' else what}", value)

    def _start(self, ev: ExternalEvent) -> _Running:
        episode = MultiAgentEpisode(0, self._mapping) if self.multiagent else Episode(0)
        run = _Running(ev.episode_id, episode, ev.training_enabled)
        self._running[ev.episode_id] = run
        if self.callbacks.overrides("on_episode_start"):
            self.callbacks.on_episode_start(
                worker=self.worker,
                base_env=self.env,
                policies=self.policies,
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
                policies=self.policies,
                episode=ep,
                env_index=0,
            )
        agent_rewards = dict(ep.agent_rewards) if self.multiagent else {}
        self.metrics.append(
            RolloutMetrics(ep.length, ep.total_reward, dict(ep.custom_metrics), agent_rewards)
        )
        self._flush(run)
        self._done_steps += run.steps
        run.steps = 0

    def _flush(self, run: _Running) -> None:
        """Postprocess each agent's completed steps with its policy and keep them."""
        batches = {aid: self._batch_of(rows) for aid, rows in run.rows.items() if rows}
        run.rows = {}
        policy_for = run.episode.policy_for
        for aid, batch in batches.items():
            pid = policy_for(aid)
            others = None
            if self.multiagent:
                others = {
                    a: (self.policies[policy_for(a)], b) for a, b in batches.items() if a != aid
                }
            out = self.policies[pid].postprocess_trajectory(batch, others, run.episode)
            self._pieces.setdefault(pid, []).append(out)

    @staticmethod
    def _batch_of(rows: list[dict[str, Any]]) -> SampleBatch:
        batch = SampleBatch({k: np.asarray([r[k] for r in rows]) for k in rows[0]})
        batch["dones"] = batch["terminateds"] | batch["truncateds"]
        return batch

    # -- batches ----------------------------------------------------------------------
    def sample(self) -> SampleBatch | MultiAgentBatch:
        """One batch, per the batch mode (see the module docstring)."""
        while not self._batch_due():
            self._round()
        return self._cut()

    def sample_ready(self) -> list[SampleBatch | MultiAgentBatch]:
        """Process the events the env posted so far, in the calling thread and without
        waiting for more; returns the batches they completed (usually none or one).

        This is `sample` turned around for an env whose calls come from several
        threads: each thread that posts an event calls this (one at a time, under the
        caller's lock) and so computes its own action, and those of the events posted
        meanwhile in one batched forward pass, without handing them to a sampler
        thread. Batches are cut as `sample` cuts them. Do not mix with `sample`.
        """
        out: list[SampleBatch | MultiAgentBatch] = []
        while True:
            if not self._held:
                self._held = self.env.poll_events(None)
                if not self._held:
                    return out
            self._round(self._take_round())
            if self._batch_due():
                out.append(self._cut())

    def _batch_due(self) -> bool:
        """Whether enough env steps are collected and no event is held back."""
        done = self._steps if self.batch_mode == "truncate_episodes" else self._done_steps
        return done >= self.fragment_length and not self._held

    def _cut(self) -> SampleBatch | MultiAgentBatch:
        """The batch of the steps collected so far (running episodes are cut in
        ``truncate_episodes`` mode)."""
        if self.batch_mode == "truncate_episodes":
            for run in self._running.values():
                self._flush(run)
                run.steps = 0
            steps = self._steps
        else:
            steps = self._done_steps
        self._steps = self._done_steps = 0
        pieces, self._pieces = self._pieces, {}
        batches = {pid: SampleBatch.concat_samples(p) for pid, p in pieces.items()}
        batch: SampleBatch | MultiAgentBatch
        if self.multiagent:
            batch = MultiAgentBatch(batches, steps)
        else:
            batch = batches.get(DEFAULT_POLICY_ID) or SampleBatch.concat_samples([])
        if self.callbacks.overrides("on_sample_end"):
            self.callbacks.on_sample_end(worker=self.worker, samples=batch)
        return batch
