"""`MultiAgentSampler`: step a worker's multi-agent envs with several policies.

Per env step, the agents that received an observation are grouped by the policy
``policy_mapping_fn`` bound them to (once per agent and episode); each policy
computes the actions of its group in one batched forward pass (recurrent policies
with each agent's own state, previous action and previous reward, recorded as in
`SyncSampler`). Each agent's steps
are collected in its own buffer; when the agent leaves (its terminated / truncated
flag or the episode's ``"__all__"``), or at the end of a fragment in
``truncate_episodes`` mode, the buffer becomes one `SampleBatch` that its policy
postprocesses (with the other agents' buffered batches as
``other_agent_batches``). `sample` returns a `MultiAgentBatch` whose ``count`` is
env steps.

Batch modes as in `SyncSampler`: ``truncate_episodes`` returns
``rollout_fragment_length * num_envs`` env steps; ``complete_episodes`` returns
only finished episodes, at least that many env steps of them.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from rayfield.rllib.env.multi_agent_env import ALL, normalize_reset, normalize_step
from rayfield.rllib.evaluation.callbacks import DefaultCallbacks
from rayfield.rllib.evaluation.episode import Episode, RolloutMetrics
from rayfield.rllib.evaluation.sampler_base import SamplerBase, SamplerSettings, clip_reward
from rayfield.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

_eps_ids = itertools.count(1 << 40)


def call_mapping_fn(fn: Callable[..., str], agent_id: Any, episode: Any, worker: Any) -> str:
    """Call ``policy_mapping_fn`` in its RLlib 0.7 form ``fn(agent_id)`` or its Ray 2
    form ``fn(agent_id, episode, worker, **kwargs)``."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(agent_id)
    positional = [
        p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    varargs = any(p.kind == p.VAR_POSITIONAL for p in params.values())
    if varargs or len(positional) >= 3:
        return fn(agent_id, episode, worker)
    if len(positional) == 2:
        return fn(agent_id, episode)
    return fn(agent_id)


def map_agent(
    fn: Callable[..., str], policies: dict[str, Any], agent_id: Any, episode: Any, worker: Any
) -> str:
    """The policy id `fn` binds `agent_id` to (see `call_mapping_fn`).

    Raises:
        KeyError: the id is not in `policies`.
    """
    pid = call_mapping_fn(fn, agent_id, episode, worker)
    if pid not in policies:
        raise KeyError(
            f"policy_mapping_fn mapped agent {agent_id!r} to {pid!r}, which is not in "
            f"multiagent.policies {sorted(policies)}"
        )
    return pid


class MultiAgentEpisode(Episode):
    """An episode of a multi-agent env: per-agent policies, rewards and last values."""

    def __init__(self, env_index: int, mapping: Callable[[Any, Any], str]) -> None:
        super().__init__(env_index)
        self._mapping = mapping
        self._policy_for: dict[Any, str] = {}
        self._agent_rewards: dict[tuple[Any, str], float] = {}
        self._last: dict[str, dict[Any, Any]] = {"obs": {}, "raw": {}, "action": {}, "info": {}}

    @property
    def agent_rewards(self) -> dict[tuple[Any, str], float]:
        return self._agent_rewards

    def policy_for(self, agent_id: Any = "agent0") -> str:
        if agent_id not in self._policy_for:
            self._policy_for[agent_id] = self._mapping(agent_id, self)
        return self._policy_for[agent_id]

    def last_observation_for(self, agent_id: Any = "agent0") -> Any:
        return self._last["obs"].get(agent_id)

    def last_raw_obs_for(self, agent_id: Any = "agent0") -> Any:
        return self._last["raw"].get(agent_id)

    def last_action_for(self, agent_id: Any = "agent0") -> Any:
        return self._last["action"].get(agent_id)

    def last_info_for(self, agent_id: Any = "agent0") -> Any:
        return self._last["info"].get(agent_id)


class _EnvState:
    """One env's running episode: buffers, live agents and their last observations."""

    def __init__(self, episode: MultiAgentEpisode) -> None:
        self.episode = episode
        self.eps_id = next(_eps_ids)
        self.obs: dict[Any, np.ndarray] = {}
        self.buffers: dict[Any, dict[str, list[Any]]] = {}
        self.t: dict[Any, int] = {}
        self.agent_index: dict[Any, int] = {}
        self.pieces: dict[str, list[SampleBatch]] = {}
        self.steps = 0
        # recurrent policies: each agent's state, previous action and reward
        self.rnn: dict[Any, list[np.ndarray]] = {}
        self.prev_action: dict[Any, Any] = {}
        self.prev_reward: dict[Any, float] = {}


class MultiAgentSampler(SamplerBase):
    """Samples multi-agent envs with a map of policies.

    Args:
        envs: `MultiAgentEnv` instances (the worker's ``num_envs_per_worker``).
        policies: ``{policy_id: Policy}``.
        policy_mapping_fn: agent id -> policy id (0.7 or Ray 2 signature).
        preprocessors: ``{policy_id: Preprocessor}``.
        obs_filters: ``{policy_id: filter}``.
        callbacks: episode and sample hooks.
        settings, worker: as for `SyncSampler`.
    """

    def __init__(
        self,
        envs: list[Any],
        policies: dict[str, Any],
        policy_mapping_fn: Callable[..., str],
        preprocessors: dict[str, Any],
        obs_filters: dict[str, Any],
        callbacks: DefaultCallbacks,
        settings: SamplerSettings,
        worker: Any = None,
    ) -> None:
        super().__init__(callbacks, settings, worker)
        self._init_states = {pid: p.get_initial_state() for pid, p in policies.items()}
        self.envs = envs
        self.policies = policies
        self.mapping_fn = policy_mapping_fn
        self.preprocessors = preprocessors
        self.filters = obs_filters
        self._done_pieces: dict[str, list[SampleBatch]] = {}
        self._done_steps = 0
        self._states = [
            self._reset(j, None if settings.seed is None else settings.seed + j)
            for j in range(len(envs))
        ]

    # -- episodes -------------------------------------------------------------------
    def _mapping(self, agent_id: Any, episode: Any) -> str:
        return map_agent(self.mapping_fn, self.policies, agent_id, episode, self.worker)

    def _process(self, pid: str, raw: Any) -> np.ndarray:
        return self.filters[pid](self.preprocessors[pid].transform_batch([raw]))[0]

    def _reset(self, j: int, seed: int | None) -> _EnvState:
        state = _EnvState(MultiAgentEpisode(j, self._mapping))
        obs, infos = normalize_reset(self.envs[j].reset(seed=seed))
        self._observe(state, obs, infos)
        if self.callbacks.overrides("on_episode_start"):
            self.callbacks.on_episode_start(
                worker=self.worker,
                base_env=self.envs,
                policies=self.policies,
                episode=state.episode,
                env_index=j,
            )
        return state

    def _observe(self, state: _EnvState, obs: dict[Any, Any], infos: dict[Any, Any]) -> None:
        ep = state.episode
        state.obs = {}
        for aid, raw in obs.items():
            pid = ep.policy_for(aid)
            state.agent_index.setdefault(aid, len(state.agent_index))
            state.obs[aid] = self._process(pid, raw)
            ep._last["obs"][aid] = state.obs[aid]
            ep._last["raw"][aid] = raw
            ep._last["info"][aid] = infos.get(aid)

    # -- stepping -------------------------------------------------------------------
    def _step_all(self) -> None:
        """One step of every env: batched actions per policy, then the env steps."""
        groups: dict[str, list[tuple[int, Any]]] = {}
        for j, st in enumerate(self._states):
            for aid in st.obs:
                groups.setdefault(st.episode.policy_for(aid), []).append((j, aid))
        actions: list[dict[Any, Any]] = [{} for _ in self._states]
        rows: list[dict[Any, dict[str, Any]]] = [{} for _ in self._states]
        for pid, members in groups.items():
            policy = self.policies[pid]
            obs = np.stack([self._states[j].obs[aid] for j, aid in members])
            space = policy.action_space
            init = self._init_states[pid]
            if init:
                sts = [self._states[j] for j, _ in members]
                states = [
                    np.stack([st.rnn.get(aid, init)[i] for st, (_, aid) in zip(sts, members)])
                    for i in range(len(init))
                ]
                zero = zero_action(space)
                prev_a = np.stack([st.prev_action.get(a, zero) for st, (_, a) in zip(sts, members)])
                prev_r = np.array(
                    [st.prev_reward.get(a, 0.0) for st, (_, a) in zip(sts, members)], np.float32
                )
                acts, state_out, extra = policy.compute_actions(obs, states, prev_a, prev_r)
                extra = {
                    **extra,
                    SampleBatch.PREV_ACTIONS: prev_a,
                    SampleBatch.PREV_REWARDS: prev_r,
                    **{f"state_in_{i}": s for i, s in enumerate(states)},
                    **{f"state_out_{i}": s for i, s in enumerate(state_out)},
                }
                for k, (st, (_, aid)) in enumerate(zip(sts, members)):
                    st.rnn[aid] = [s[k] for s in state_out]
            else:
                acts, _, extra = policy.compute_actions(obs)
            clip = self.clips_box(space)
            for i, (j, aid) in enumerate(members):
                act = acts[i]
                actions[j][aid] = np.clip(act, space.low, space.high) if clip else act
                row = {"obs": obs[i], "actions": act}
                row.update({k: v[i] for k, v in extra.items()})
                rows[j][aid] = row
        for j, env in enumerate(self.envs):  # envs in actors: all steps start at once
            send = getattr(env, "send_step", None)
            if send is not None:
                send(actions[j])
        for j, st in enumerate(self._states):
            self._step_env(j, st, actions[j], rows[j])

    def _step_env(
        self, j: int, st: _EnvState, action_dict: dict[Any, Any], rows: dict[Any, dict[str, Any]]
    ) -> None:
        ep = st.episode
        obs, rewards, terms, truncs, infos = normalize_step(self.envs[j].step(action_dict))
        st.steps += 1
        ep.length += 1
        ep.total_reward += float(sum(float(r) for r in rewards.values() if r is not None))
        over = bool(terms[ALL] or truncs[ALL]) or (
            self.horizon is not None and st.steps >= self.horizon
        )
        for aid, r in rewards.items():
            if r is not None:
                key = (aid, ep.policy_for(aid))
                ep._agent_rewards[key] = ep._agent_rewards.get(key, 0.0) + float(r)
        prev_obs = st.obs
        self._observe(st, obs, infos)
        for aid, row in rows.items():
            pid = ep.policy_for(aid)
            term = bool(terms.get(aid, False) or terms[ALL])
            trunc = bool(truncs.get(aid, False) or truncs[ALL]) or (over and not term)
            r = rewards.get(aid)
            row.update(
                {
                    "rewards": clip_reward(np.float32(0.0 if r is None else r), self.clip_rewards),
                    "terminateds": term,
                    "truncateds": trunc,
                    "new_obs": st.obs.get(aid, prev_obs[aid]),
                    "eps_id": st.eps_id,
                    "agent_index": st.agent_index[aid],
                    "t": st.t.get(aid, 0),
                }
            )
            st.t[aid] = st.t.get(aid, 0) + 1
            st.prev_action[aid] = row["actions"]
            st.prev_reward[aid] = float(row["rewards"])
            ep._last["action"][aid] = row["actions"]
            buf = st.buffers.setdefault(aid, {})
            for k, v in row.items():
                buf.setdefault(k, []).append(v)
            if term or trunc:
                st.obs.pop(aid, None)
                self._flush(st, aid, pid)
        if self.callbacks.overrides("on_episode_step"):
            self.callbacks.on_episode_step(
                worker=self.worker, base_env=self.envs, episode=ep, env_index=j
            )
        if over:
            for aid in list(st.buffers):
                self._flush(st, aid, ep.policy_for(aid))
            self._end_episode(j, st)
            self._states[j] = self._reset(j, None)

    def _batch_of(self, st: _EnvState, aid: Any) -> SampleBatch:
        cols = {k: np.asarray(v) for k, v in st.buffers[aid].items()}
        batch = SampleBatch(cols)
        batch["dones"] = batch["terminateds"] | batch["truncateds"]
        return batch

    def _flush(self, st: _EnvState, aid: Any, pid: str) -> None:
        """Postprocess the agent's buffered steps with its policy and keep the result."""
        if aid not in st.buffers or not st.buffers[aid].get("obs"):
            st.buffers.pop(aid, None)
            return
        batch = self._batch_of(st, aid)
        others = {
            a: (self.policies[st.episode.policy_for(a)], self._batch_of(st, a))
            for a in st.buffers
            if a != aid and st.buffers[a].get("obs")
        }
        del st.buffers[aid]
        original = batch.copy() if self.callbacks.overrides("on_postprocess_trajectory") else None
        out = self.policies[pid].postprocess_trajectory(batch, others, st.episode)
        if original is not None:
            self.callbacks.on_postprocess_trajectory(
                worker=self.worker,
                episode=st.episode,
                agent_id=aid,
                policy_id=pid,
                policies=self.policies,
                postprocessed_batch=out,
                original_batches={aid: original},
            )
        st.pieces.setdefault(pid, []).append(out)

    def _end_episode(self, j: int, st: _EnvState) -> None:
        ep = st.episode
        if self.callbacks.overrides("on_episode_end"):
            self.callbacks.on_episode_end(
                worker=self.worker,
                base_env=self.envs,
                policies=self.policies,
                episode=ep,
                env_index=j,
            )
        self.metrics.append(
            RolloutMetrics(
                ep.length, ep.total_reward, dict(ep.custom_metrics), dict(ep._agent_rewards)
            )
        )
        for pid, pieces in st.pieces.items():
            self._done_pieces.setdefault(pid, []).extend(pieces)
        self._done_steps += st.steps

    # -- batches --------------------------------------------------------------------
    def sample(self) -> MultiAgentBatch:
        """One `MultiAgentBatch` per the batch mode (see the module docstring)."""
        n = len(self.envs)
        target = self.fragment_length * n
        if self.batch_mode == "truncate_episodes":
            for _ in range(self.fragment_length):
                self._step_all()
            for st in self._states:
                for aid in list(st.buffers):
                    self._flush(st, aid, st.episode.policy_for(aid))
                for pid, pieces in st.pieces.items():
                    self._done_pieces.setdefault(pid, []).extend(pieces)
                st.pieces = {}
            steps = target
        else:
            while self._done_steps < target:
                self._step_all()
            steps = self._done_steps
        batches = {
            pid: SampleBatch.concat_samples(pieces) for pid, pieces in self._done_pieces.items()
        }
        self._done_pieces, self._done_steps = {}, 0
        out = MultiAgentBatch(batches, steps)
        if self.callbacks.overrides("on_sample_end"):
            self.callbacks.on_sample_end(worker=self.worker, samples=out)
        return out


def zero_action(space: Any) -> np.ndarray:
    """The "no previous action" of a recurrent policy's first step: zeros of the
    action's shape; for a `Tuple` of scalar spaces (a group's joint action) one zero a
    part, ``[n_parts]``."""
    if space.shape is not None:
        return np.zeros(space.shape, space.dtype)
    parts = getattr(space, "spaces", None)
    if parts is None:
        raise TypeError(f"no zero action for the action space {space!r}")
    zeros = [zero_action(p) for p in parts]
    if all(z.shape == () for z in zeros):
        return np.array([z.item() for z in zeros])
    return np.concatenate([z.ravel().astype(np.float32) for z in zeros])
