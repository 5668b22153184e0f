"""`SyncSampler`: step a worker's envs together and cut the steps into batches.

Every step runs one batched forward pass for all ``N`` envs of the worker, then
steps each env with its action. Per step the sampler keeps one array per column
for all envs (``[N, ...]``); at the end of a chunk it stacks them to ``[T, N, ...]``,
lays them out env by env (``[N*T, ...]``) and splits the rows where the episode id
changes. Each piece is one fragment of one episode and goes through the policy's
`postprocess_trajectory`.

Batch modes: ``truncate_episodes`` returns exactly ``rollout_fragment_length * N``
steps (unfinished episodes are cut and bootstrapped by the policy);
``complete_episodes`` steps on until at least that many steps belong to finished
episodes, returns only those, and keeps the unfinished parts for the next call.
An episode ends when the env says terminated or truncated, or at ``horizon`` steps.

For a recurrent policy the sampler keeps each env's model state and previous
action and reward, passes them to `compute_actions`, and records them per step in
``state_in_<i>`` / ``state_out_<i>``, ``prev_actions`` and ``prev_rewards``; they
start from the policy's initial state and zeros at every episode start.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from rayfield.rllib.env.vector_env import VectorEnv
from rayfield.rllib.evaluation.callbacks import DefaultCallbacks
from rayfield.rllib.evaluation.episode import Episode, RolloutMetrics
from rayfield.rllib.evaluation.sampler_base import (
    SamplerBase,
    SamplerSettings,
    check_sampling,
    clip_reward,
)
from rayfield.rllib.policy.policy import Policy
from rayfield.rllib.policy.sample_batch import SampleBatch

__all__ = ["SamplerSettings", "SyncSampler", "check_sampling", "clip_reward"]

_eps_ids = itertools.count(1)


class SyncSampler(SamplerBase):
    """Samples a list of envs with one policy.

    Args:
        envs: a `VectorEnv`, or gymnasium envs (the worker's ``num_envs_per_worker``
            copies), which are wrapped into one.
        policy: acts on batches of preprocessed, filtered observations.
        preprocessor: turns raw observations into float vectors.
        obs_filter: applied after the preprocessor (updated with every observation).
        callbacks: hooks for episodes and samples.
        settings: fragment length, batch mode, horizon, reward and action clipping,
            seed (see `SamplerSettings`).
        worker: the rollout worker, passed to callbacks.
    """

    def __init__(
        self,
        envs: Any,
        policy: Policy,
        preprocessor: Any,
        obs_filter: Any,
        callbacks: DefaultCallbacks,
        settings: SamplerSettings,
        worker: Any = None,
    ) -> None:
        super().__init__(callbacks, settings, worker)
        self.vector_env = (
            envs
            if isinstance(envs, VectorEnv)
            else VectorEnv.vectorize_gym_envs(existing_envs=list(envs), num_envs=len(envs))
        )
        self.envs = self.vector_env.get_sub_environments()
        self.num_envs = self.vector_env.num_envs
        self.policy = policy
        self.preprocessor = preprocessor
        self.obs_filter = obs_filter
        space = policy.action_space
        self._clip_box = self.clips_box(space)
        self._cb_step = callbacks.overrides("on_episode_step")
        self._cb_start = callbacks.overrides("on_episode_start")
        self._cb_end = callbacks.overrides("on_episode_end")
        self._cb_post = callbacks.overrides("on_postprocess_trajectory")
        self._cb_sample = callbacks.overrides("on_sample_end")
        n = self.num_envs
        self._pending: list[SampleBatch | None] = [None] * n
        raw, _ = self.vector_env.vector_reset(
            seeds=None if settings.seed is None else [settings.seed + j for j in range(n)]
        )
        raw = list(raw)
        self._obs = self._process(raw)
        self._raw = raw
        self._eps = np.array([next(_eps_ids) for _ in range(n)], dtype=np.int64)
        self._t = np.zeros(n, dtype=np.int64)
        self._episodes = [Episode(j) for j in range(n)]
        self._init_state = list(policy.get_initial_state())
        self._recurrent = bool(self._init_state)
        self._states = [np.repeat(s[None], n, axis=0) for s in self._init_state]
        self._prev_actions = np.zeros((n, *space.shape), dtype=space.dtype)
        self._prev_rewards = np.zeros(n, dtype=np.float32)
        for j in range(n):
            self._start_episode(j)

    def _process(self, raw: list[Any]) -> np.ndarray:
        return self.obs_filter(self.preprocessor.transform_batch(raw))

    def _start_episode(self, j: int) -> None:
        ep = self._episodes[j]
        ep._last_obs, ep._last_raw_obs = self._obs[j], self._raw[j]
        if self._cb_start:
            self.callbacks.on_episode_start(
                worker=self.worker,
                base_env=self.envs,
                policies={"default_policy": self.policy},
                episode=ep,
                env_index=j,
            )

    # -- stepping -----------------------------------------------------------------
    def _run_chunk(self, steps: int) -> SampleBatch:
        """Step every env `steps` times; the rows laid out env by env."""
        n = self.num_envs
        cols: dict[str, list[np.ndarray]] = {
            k: []
            for k in (
                "obs",
                "actions",
                "rewards",
                "terminateds",
                "truncateds",
                "new_obs",
                "eps_id",
                "t",
            )
        }
        extra_cols: dict[str, list[np.ndarray]] = {}
        envs, policy = self.envs, self.policy
        vector_env = self.vector_env
        for _ in range(steps):
            obs = self._obs
            if self._recurrent:
                actions, state_out, extra = policy.compute_actions(
                    obs, self._states, self._prev_actions, self._prev_rewards
                )
                extra = {
                    **extra,
                    SampleBatch.PREV_ACTIONS: self._prev_actions,
                    SampleBatch.PREV_REWARDS: self._prev_rewards,
                    **{f"state_in_{i}": s for i, s in enumerate(self._states)},
                    **{f"state_out_{i}": s for i, s in enumerate(state_out)},
                }
                self._states = [np.array(s, copy=True) for s in state_out]
            else:
                actions, _, extra = policy.compute_actions(obs)
            env_actions = (
                np.clip(actions, policy.action_space.low, policy.action_space.high)
                if self._clip_box
                else actions
            )
            rewards = np.empty(n, dtype=np.float32)
            terms = np.zeros(n, dtype=bool)
            truncs = np.zeros(n, dtype=bool)
            t = self._t + 1
            next_raw, step_r, step_term, step_trunc, step_info = vector_env.vector_step(env_actions)
            for j, (o, r, term, trunc, info) in enumerate(
                zip(next_raw, step_r, step_term, step_trunc, step_info)
            ):
                rewards[j] = r
                terms[j] = term
                truncs[j] = trunc or (self.horizon is not None and t[j] >= self.horizon)
                ep = self._episodes[j]
                ep.length += 1
                ep.total_reward += float(r)
                ep._last_action, ep._last_info, ep._last_raw_obs = actions[j], info, o
            new_obs = self._process(next_raw)
            cols["obs"].append(obs)
            cols["actions"].append(actions)
            clipped = clip_reward(rewards, self.clip_rewards)
            cols["rewards"].append(clipped)
            if self._recurrent:
                self._prev_actions = np.array(actions, copy=True).reshape(self._prev_actions.shape)
                self._prev_rewards = np.array(clipped, dtype=np.float32, copy=True)
            cols["terminateds"].append(terms)
            cols["truncateds"].append(truncs)
            cols["new_obs"].append(new_obs)
            cols["eps_id"].append(self._eps.copy())
            cols["t"].append(self._t.copy())
            for k, v in extra.items():
                extra_cols.setdefault(k, []).append(v)
            self._t = t
            next_obs = new_obs.copy()
            for j in range(n):
                ep = self._episodes[j]
                ep._last_obs = new_obs[j]
                if self._cb_step:
                    self.callbacks.on_episode_step(
                        worker=self.worker, base_env=envs, episode=ep, env_index=j
                    )
                if terms[j] or truncs[j]:
                    if self._recurrent:
                        for s, init in zip(self._states, self._init_state):
                            s[j] = init
                        self._prev_actions[j] = 0
                        self._prev_rewards[j] = 0.0
                    self._end_episode(j)
                    o, _ = vector_env.reset_at(j)
                    self._raw[j] = o
                    next_obs[j] = self._process([o])[0]
                    self._obs = next_obs
                    self._start_episode(j)
                else:
                    self._raw[j] = next_raw[j]
            self._obs = next_obs
        cols.update(extra_cols)
        out = {}
        for k, per_step in cols.items():
            arr = np.stack(per_step)  # [T, N, ...]
            out[k] = np.swapaxes(arr, 0, 1).reshape(n * steps, *arr.shape[2:])
        out["dones"] = out["terminateds"] | out["truncateds"]
        return SampleBatch(out)

    def _end_episode(self, j: int) -> None:
        ep = self._episodes[j]
        if self._cb_end:
            self.callbacks.on_episode_end(
                worker=self.worker,
                base_env=self.envs,
                policies={"default_policy": self.policy},
                episode=ep,
                env_index=j,
            )
        self.metrics.append(RolloutMetrics(ep.length, ep.total_reward, dict(ep.custom_metrics)))
        self._episodes[j] = Episode(j)
        self._eps[j] = next(_eps_ids)
        self._t[j] = 0

    def _postprocess(self, fragment: SampleBatch) -> SampleBatch:
        original = fragment.copy() if self._cb_post else None
        out = self.policy.postprocess_trajectory(fragment)
        if self._cb_post:
            self.callbacks.on_postprocess_trajectory(
                worker=self.worker,
                episode=None,
                agent_id="agent0",
                policy_id="default_policy",
                policies={"default_policy": self.policy},
                postprocessed_batch=out,
                original_batches={"agent0": original},
            )
        return out

    # -- batches ------------------------------------------------------------------
    def sample(self) -> SampleBatch:
        """One batch, per the batch mode (see the module docstring)."""
        target = self.fragment_length * self.num_envs
        if self.batch_mode == "truncate_episodes":
            chunk = self._run_chunk(self.fragment_length)
            pieces = [self._postprocess(f) for f in chunk.split_by_episode()]
        else:
            pieces, rows = [], 0
            while rows < target:
                chunk = self._run_chunk(self.fragment_length)
                for f in self._complete_fragments(chunk):
                    pieces.append(self._postprocess(f))
                    rows += f.count
        batch = SampleBatch.concat_samples(pieces)
        if self._cb_sample:
            self.callbacks.on_sample_end(worker=self.worker, samples=batch)
        return batch

    def _complete_fragments(self, chunk: SampleBatch) -> list[SampleBatch]:
        """Whole episodes from this chunk (joined with held-over parts); the last,
        unfinished part of each env is held over."""
        steps = chunk.count // self.num_envs
        done_eps = []
        for j in range(self.num_envs):
            part = chunk.slice(j * steps, (j + 1) * steps)
            frags = part.split_by_episode()
            held = self._pending[j]
            if held is not None:
                frags[0] = held.concat(frags[0])
            last = frags[-1]
            if last["dones"][-1]:
                self._pending[j] = None
                done_eps.extend(frags)
            else:
                self._pending[j] = last
                done_eps.extend(frags[:-1])
        return done_eps
