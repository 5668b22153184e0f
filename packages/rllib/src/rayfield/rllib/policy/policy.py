"""The `Policy` interface: act on observations, postprocess trajectories, learn.

Call order in a rollout worker: `compute_actions` on every step (batched over the
worker's envs), `postprocess_trajectory` on each finished fragment of one episode,
and on the learner `learn_on_batch` (or `compute_gradients` + `apply_gradients`)
on the concatenated fragments. `get_weights` / `set_weights` move the parameters
between the learner and the workers; `get_state` / `set_state` add everything a
checkpoint needs (optimizer state, coefficients).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rayfield.rllib.policy.sample_batch import SampleBatch


class Policy:
    """Base class of policies.

    Args:
        observation_space: the preprocessed observation space.
        action_space: the env's action space.
        config: the trainer's config (with the policy's overrides).
    """

    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any]) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config
        self.global_timestep = 0

    def compute_actions(
        self,
        obs_batch: Any,
        state_batches: list[Any] | None = None,
        prev_action_batch: Any = None,
        prev_reward_batch: Any = None,
        info_batch: Any = None,
        episodes: Any = None,
        explore: bool | None = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, list[Any], dict[str, np.ndarray]]:
        """Actions for a batch of observations.

        Returns:
            ``(actions [B, ...], state_outs, extra {column: [B, ...]})``.
        """
        raise NotImplementedError

    def compute_single_action(
        self,
        obs: Any,
        state: list[Any] | None = None,
        prev_action: Any = None,
        prev_reward: Any = None,
        info: Any = None,
        episode: Any = None,
        clip_actions: bool = False,
        explore: bool | None = None,
        **kwargs: Any,
    ) -> tuple[Any, list[Any], dict[str, Any]]:
        """One observation -> ``(action, state_out, extra)``."""
        actions, states, extra = self.compute_actions(
            np.asarray(obs)[None],
            [np.asarray(s)[None] for s in state or []],
            None if prev_action is None else np.asarray(prev_action)[None],
            None if prev_reward is None else np.asarray(prev_reward, dtype=np.float32)[None],
            explore=explore,
            **kwargs,
        )
        action = actions[0]
        if clip_actions:
            action = clip_action(action, self.action_space)
        return action, [s[0] for s in states], {k: v[0] for k, v in extra.items()}

    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches: Any = None, episode: Any = None
    ) -> SampleBatch:
        """Add columns to one fragment of one episode (advantages...). Default: none."""
        return sample_batch

    def learn_on_batch(self, samples: SampleBatch) -> dict[str, Any]:
        """Update the policy on a batch; returns learner statistics."""
        grads, info = self.compute_gradients(samples)
        self.apply_gradients(grads)
        return info

    def compute_gradients(self, postprocessed_batch: SampleBatch) -> tuple[Any, dict[str, Any]]:
        raise NotImplementedError

    def apply_gradients(self, gradients: Any) -> None:
        raise NotImplementedError

    def get_weights(self) -> Any:
        raise NotImplementedError

    def set_weights(self, weights: Any) -> None:
        raise NotImplementedError

    def get_state(self) -> dict[str, Any]:
        return {"weights": self.get_weights(), "global_timestep": self.global_timestep}

    def set_state(self, state: dict[str, Any]) -> None:
        self.set_weights(state["weights"])
        self.global_timestep = int(state.get("global_timestep", 0))

    def get_initial_state(self) -> list[Any]:
        return []

    def num_state_tensors(self) -> int:
        return len(self.get_initial_state())

    def on_global_var_update(self, global_vars: dict[str, Any]) -> None:
        """Receives ``{"timestep": N}`` (env steps sampled so far) before each iteration."""
        self.global_timestep = int(global_vars.get("timestep", self.global_timestep))

    def export_model(self, export_dir: str) -> None:
        raise NotImplementedError

    def export_checkpoint(self, export_dir: str) -> None:
        raise NotImplementedError


def clip_action(action: Any, space: Any) -> Any:
    """Clip a Box action to the space's bounds; other spaces pass through."""
    low = getattr(space, "low", None)
    if (
        low is None
        or getattr(space, "dtype", None) is None
        or not np.issubdtype(space.dtype, np.floating)
    ):
        return action
    return np.clip(action, space.low, space.high)
