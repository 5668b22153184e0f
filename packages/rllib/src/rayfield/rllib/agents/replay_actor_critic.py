"""What SAC, DDPG and TD3 share: an actor, one or two critics and their target copies,
learned from replayed rows (`ReplayActorCriticPolicy`), and a trainer that runs DQN's
replay execution (`ReplayActorCriticTrainer`).

Continuous actions are learned in ``[-1, 1]^k``: the actor ends in ``tanh`` and an
action ``y`` goes to the env as ``low + (y + 1) / 2 * (high - low)``; replayed env
actions are mapped back before they reach the critics. Exploration noise, target
smoothing and the entropy target are therefore in these normalised units, as in the
papers' and Stable-Baselines3's implementations.

Target networks follow the online ones by Polyak averaging with ``tau`` (Lillicrap et
al. 2016, Algorithm 1): inside each learning step when ``target_network_update_freq`` is
0 (after every critic update for SAC and DDPG, after every delayed actor update for TD3),
otherwise every ``target_network_update_freq`` sampled env steps (RLlib's setting).

Sources:
    Lillicrap et al., "Continuous control with deep reinforcement learning", ICLR 2016.
    Fujimoto, van Hoof, Meger, "Addressing Function Approximation Error in Actor-Critic
    Methods", ICML 2018.
    Haarnoja et al., "Soft Actor-Critic Algorithms and Applications", arXiv:1812.05905,
    2018.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import nn

from rayfield.rllib.agents.dqn.dqn import DQNTrainer, adjust_nstep
from rayfield.rllib.models.torch_ensemble import polyak_update
from rayfield.rllib.policy.adam import Adam
from rayfield.rllib.policy.sample_batch import SampleBatch
from rayfield.rllib.policy.torch_policy import TorchPolicy
from rayfield.rllib.utils.config import NumberRange, check_ranges

__all__ = [
    "REPLAY_RANGES",
    "ActorCriticModel",
    "ReplayActorCriticPolicy",
    "ReplayActorCriticTrainer",
]

# The numbers every replay actor-critic config checks (see `validate_config`).
REPLAY_RANGES = {
    "tau": NumberRange(low=0, high=1),
    "n_step": NumberRange(low=1, integer=True),
    "buffer_size": NumberRange(low=1, integer=True),
    "learning_starts": NumberRange(low=0, integer=True),
    "target_network_update_freq": NumberRange(low=0, integer=True),
    "prioritized_replay_alpha": NumberRange(low=0),
    "prioritized_replay_beta": NumberRange(low=1e-12),
    "final_prioritized_replay_beta": NumberRange(low=1e-12),
    "prioritized_replay_eps": NumberRange(low=1e-12),
}


class ActorCriticModel(nn.Module):
    """The learned parts of an off-policy actor-critic policy.

    Args:
        actor: observations float32[B, obs_dim] -> the actor's outputs.
        critic: an `EnsembleMLP` of the critics (outputs float32[M, B, ...]).
        log_alpha: SAC's learned log entropy temperature (None for DDPG/TD3).
    """

    def __init__(self, actor: nn.Module, critic: nn.Module, log_alpha: float | None = None):
        super().__init__()
        self.actor = actor
        self.critic = critic
        self.log_alpha = None if log_alpha is None else nn.Parameter(torch.tensor(log_alpha))

    def get_initial_state(self) -> list[torch.Tensor]:
        return []  # feed-forward


class ReplayActorCriticPolicy(TorchPolicy):
    """Base policy of SAC, DDPG and TD3 (see the module docstring).

    Subclasses implement `build_model` (an `ActorCriticModel`), `actor_action`
    (acting) and `update` (one learning step on a replayed batch). The policy keeps a
    target copy of the model (``target_model``), one `Adam` per part
    (``optimizers``: ``actor``, ``critic``, and ``alpha`` for SAC), and the absolute TD
    errors of the last batch (``td_error``, float32[B], read by prioritized replay).

    Args:
        observation_space: the preprocessed observations (a Box; flattened).
        action_space: a Box with finite bounds (1-D), or Discrete where the subclass
            allows it (SAC).
        config: the trainer config.

    Raises:
        ValueError: an action space the algorithm does not support, a Box with an
            infinite bound, ``model.use_lstm`` or ``use_state_preprocessor``.
    """

    allows_discrete = False
    loss_columns = frozenset(
        {
            SampleBatch.CUR_OBS,
            SampleBatch.ACTIONS,
            SampleBatch.REWARDS,
            SampleBatch.NEXT_OBS,
            SampleBatch.TERMINATEDS,
            "weights",
            "discounts",
        }
    )

    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any]) -> None:
        import gymnasium as gym

        name = type(self).__name__
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if self.discrete and not self.allows_discrete:
            raise ValueError(f"{name} needs a Box action space, got {action_space!r}")
        if not self.discrete:
            if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
                raise ValueError(
                    f"{name} needs a 1-D Box action space"
                    f"{' or a Discrete one' if self.allows_discrete else ''}, got {action_space!r}"
                )
            if not (
                np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))
            ):
                raise ValueError(
                    f"{name} needs a Box with finite bounds (it acts in [low, high]), got "
                    f"low={action_space.low}, high={action_space.high}"
                )
        if (config.get("model") or {}).get("use_lstm"):
            raise ValueError(f"{name} does not support model.use_lstm: remove it")
        if config.get("use_state_preprocessor"):
            raise ValueError(
                f"{name}: use_state_preprocessor is not supported (the actor and critics "
                "read the flattened observation): set it to False"
            )
        self.obs_dim = int(np.prod(observation_space.shape))
        self.act_dim = 1 if self.discrete else int(action_space.shape[0])
        super().__init__(observation_space, action_space, config, dist_class=self.dist_cls())
        self.target_model = copy.deepcopy(self.model)
        for p in self.target_model.parameters():
            p.requires_grad_(False)
        if not self.discrete:
            low = torch.as_tensor(action_space.low, dtype=torch.float32)
            high = torch.as_tensor(action_space.high, dtype=torch.float32)
            self.act_mid = (high + low) / 2
            self.act_half = (high - low) / 2
        self.tau = float(config["tau"])
        self.soft_updates = int(config["target_network_update_freq"]) == 0
        self.grad_clip = config.get("grad_norm_clipping")
        self.num_updates = 0
        self.td_error = torch.zeros(0)
        self.optimizers = self.make_optimizers()
        self.rng = np.random.default_rng(
            None if config.get("seed") is None else config["seed"] + config.get("worker_index", 0)
        )

    # -- construction ---------------------------------------------------------------
    def dist_cls(self) -> type:
        """The action distribution class reported as ``dist_class``."""
        raise NotImplementedError

    def make_model(
        self, obs_space: Any, action_space: Any, num_outputs: int, config: dict[str, Any]
    ) -> ActorCriticModel:
        return self.build_model(config)

    def build_model(self, config: dict[str, Any]) -> ActorCriticModel:
        """The actor, critics (and SAC's temperature) for this policy's spaces."""
        raise NotImplementedError

    def learning_rates(self) -> dict[str, float]:
        """``{part: learning rate}`` for ``actor``, ``critic`` (and ``alpha``)."""
        raise NotImplementedError

    def make_optimizers(self) -> dict[str, Adam]:
        parts: dict[str, list[nn.Parameter]] = {
            "actor": list(self.model.actor.parameters()),
            "critic": list(self.model.critic.parameters()),
        }
        if self.model.log_alpha is not None:
            parts["alpha"] = [self.model.log_alpha]
        lrs = self.learning_rates()
        # the fused kernel: one pass per tensor (see `Adam`), where torch has it
        return {k: Adam(params, lr=lrs[k], fused=True) for k, params in parts.items()}

    def make_optimizer(self) -> Adam:
        return self.optimizers["critic"]

    # -- acting ---------------------------------------------------------------------
    def actor_action(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """Actions for float32[B, obs_dim]: float32[B, k] in [-1, 1] (Box) or int64[B]
        (Discrete)."""
        raise NotImplementedError

    def random_timesteps(self) -> int:
        """Env steps during which exploring actions are uniform over the space."""
        return 0

    def to_env(self, y: torch.Tensor) -> np.ndarray:
        """Actions in [-1, 1] -> the Box's units (float32[B, k]); Discrete unchanged."""
        if self.discrete:
            return y.numpy()
        return (self.act_mid + self.act_half * y).numpy()

    def from_env(self, actions: torch.Tensor) -> torch.Tensor:
        """Replayed env actions float32[B, k] -> [-1, 1] (clamped)."""
        return ((actions - self.act_mid) / self.act_half).clamp(-1.0, 1.0)

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
        """Actions for observations float32[B, ...]: exploring (noise or sampling, and
        uniform actions during the first ``random_timesteps`` env steps) or greedy."""
        explore = self.config.get("explore", True) if explore is None else explore
        obs_np = np.asarray(obs_batch, dtype=np.float32).reshape(len(obs_batch), -1)
        if explore and self.global_timestep < self.random_timesteps():
            n = len(obs_np)
            if self.discrete:
                return self.rng.integers(0, int(self.action_space.n), n), [], {}
            y = torch.as_tensor(self.rng.uniform(-1.0, 1.0, (n, self.act_dim)), dtype=torch.float32)
            return self.to_env(y), [], {}
        with self.lock, torch.no_grad():
            y = self.actor_action(torch.as_tensor(obs_np), bool(explore))
            return self.to_env(y), [], {}

    # -- learning -------------------------------------------------------------------
    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches: Any = None, episode: Any = None
    ) -> SampleBatch:
        n_step = int(self.config["n_step"])
        if n_step > 1:
            return adjust_nstep(sample_batch, n_step, float(self.config["gamma"]))
        return sample_batch

    def batch_parts(
        self, t: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(obs [B, obs_dim], actions, next_obs [B, obs_dim], rewards [B], bootstrap
        [B])`` of a batch: actions float32[B, k] mapped to [-1, 1] (Box) or int64[B],
        ``bootstrap = discount * (1 - terminated)`` with ``discount = gamma^m`` for
        n-step rows (``gamma`` otherwise)."""
        obs = t[SampleBatch.CUR_OBS].reshape(len(t[SampleBatch.CUR_OBS]), -1)
        next_obs = t[SampleBatch.NEXT_OBS].reshape(len(obs), -1)
        act = t[SampleBatch.ACTIONS]
        act = act.long() if self.discrete else self.from_env(act.float())
        discounts = t.get("discounts")
        gamma = float(self.config["gamma"]) if discounts is None else discounts
        bootstrap = gamma * (1.0 - t[SampleBatch.TERMINATEDS].float())
        return obs, act, next_obs, t[SampleBatch.REWARDS].float(), bootstrap

    def update(self, t: dict[str, torch.Tensor]) -> dict[str, Any]:
        """One learning step on a batch of tensors; returns the statistics."""
        raise NotImplementedError

    def step_optimizers(self, loss: torch.Tensor, parts: tuple[str, ...]) -> None:
        """Backpropagate `loss` (the sum of the parts' losses) and step the parts'
        optimizers, their gradients clipped to ``grad_norm_clipping`` (global norm per
        part) when set."""
        for name in parts:
            for p in self.optimizers[name].param_groups[0]["params"]:
                p.grad = None
        loss.backward()
        for name in parts:
            opt = self.optimizers[name]
            if self.grad_clip:
                torch.nn.utils.clip_grad_norm_(opt.param_groups[0]["params"], float(self.grad_clip))
            opt.step()

    def learn_on_batch(self, samples: SampleBatch) -> dict[str, Any]:
        """One learning step on replayed rows; returns the loss statistics."""
        with self.lock:
            stats = self.update(self.to_tensors(samples))
            self.num_updates += 1
            return {k: float(v) for k, v in stats.items()}

    def update_target(self, tau: float | None = None) -> None:
        """Polyak-average the target networks: ``target <- tau * online + (1 - tau) *
        target`` (``tau`` default: the config's)."""
        with self.lock:
            polyak_update(
                self.target_model.parameters(),
                self.model.parameters(),
                self.tau if tau is None else tau,
            )

    # -- state ----------------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        return {
            "target_model": {k: v.clone() for k, v in self.target_model.state_dict().items()},
            "optimizers": {k: opt.state_dict() for k, opt in self.optimizers.items()},
            "num_updates": self.num_updates,
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        if "target_model" in state:
            self.target_model.load_state_dict(state["target_model"])
        for k, sd in (state.get("optimizers") or {}).items():
            self.optimizers[k].load_state_dict(sd)
        self.num_updates = int(state.get("num_updates", self.num_updates))


class ReplayActorCriticTrainer(DQNTrainer):
    """DQN's execution (`SyncReplayOptimizer`: sample ``rollout_fragment_length`` steps
    per env into the replay buffer, then one learning step on ``train_batch_size``
    replayed rows once ``learning_starts`` steps are sampled); the policy updates its
    own targets, or the trainer every ``target_network_update_freq`` sampled steps when
    that is > 0."""

    @classmethod
    def validate_config(cls, config: dict[str, Any]) -> None:
        """The common checks and the replay numbers of `REPLAY_RANGES` (``tau`` in
        [0, 1], ``n_step`` an int >= 1, ``buffer_size`` an int >= 1...).

        Raises:
            ConfigTypeError: a number of the wrong type.
            ValueError: a number out of its range.
        """
        super().validate_config(config)
        check_ranges(config, REPLAY_RANGES)

    def training_step(self) -> dict[str, Any]:
        worker = self.workers.local_worker()
        worker.set_global_vars({"timestep": self._timesteps_total})
        stats = self.optimizer.step()
        freq = int(self.config["target_network_update_freq"])
        if freq > 0 and self._timesteps_total - self._last_target_update >= freq:
            for pid in worker.policies_to_train:
                worker.policy_map[pid].update_target()
            self._last_target_update = self._timesteps_total
        return stats
