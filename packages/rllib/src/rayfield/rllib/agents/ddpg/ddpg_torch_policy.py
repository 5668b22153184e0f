"""DDPG's and TD3's policy: a deterministic actor ``mu(s) = tanh(f(s))`` in [-1, 1], one
or two critics (``twin_q``), their target copies, and exploration noise.

One learning step on a replayed batch (Lillicrap et al. 2016, Algorithm 1; Fujimoto et
al. 2018, Algorithm 1):

* target action ``a' = mu'(s')``; with ``smooth_target_policy`` (TD3's target policy
  smoothing, eq. 14) ``a' = clip(mu'(s') + clip(N(0, target_noise), -target_noise_clip,
  target_noise_clip), -1, 1)``;
* target ``y = r + gamma^m (1 - terminated) min_j Q'_j(s', a')`` (the minimum over the
  twin critics is TD3's clipped double Q-learning, eq. 10; one critic for DDPG);
* critic loss ``sum_j mean_B(w * 0.5 (Q_j(s, a) - y)^2)`` (Huber with ``use_huber``;
  ``w``: prioritized replay's importance weights), plus ``l2_reg * 0.5 * sum ||W||^2``
  over the critics' weight matrices;
* the critics' optimizer step, then every ``policy_delay``-th step (TD3's delayed policy
  updates, Section 5.2) the actor loss ``-mean_B Q_1(s, mu(s))`` through the critic
  just updated (as both papers' Algorithm 1 order it; plus the same L2 term over the
  actor's weights), differentiated through the first critic into the actor only, and, when
  ``target_network_update_freq`` is 0, the Polyak update of all target networks with
  ``tau``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rayfield.rllib.agents.ddpg.noise import ActionNoise, noise_settings
from rayfield.rllib.agents.dqn.dqn import add_worker_priorities, fixed_worker_exploration
from rayfield.rllib.agents.replay_actor_critic import ActorCriticModel, ReplayActorCriticPolicy
from rayfield.rllib.models.distributions import Deterministic
from rayfield.rllib.models.torch_ensemble import EnsembleMLP, mlp

__all__ = ["DDPGTorchPolicy", "smoothed_target_action"]


def smoothed_target_action(y: torch.Tensor, noise_std: float, noise_clip: float) -> torch.Tensor:
    """TD3's target policy smoothing: ``clip(y + clip(N(0, noise_std), -noise_clip,
    noise_clip), -1, 1)`` for target actions float32[B, k] in [-1, 1]."""
    noise = (torch.randn_like(y) * noise_std).clamp(-noise_clip, noise_clip)
    return (y + noise).clamp(-1.0, 1.0)


class DDPGTorchPolicy(ReplayActorCriticPolicy):
    """DDPG's and TD3's policy (see the module docstring). Statistics of a step:
    ``critic_loss``, ``mean_q``, ``max_q``, ``min_q``, and on actor steps ``actor_loss``."""

    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any]) -> None:
        super().__init__(observation_space, action_space, config)
        self.noise = ActionNoise(noise_settings(config), self.act_dim)
        # Ape-X: a remote worker's constant noise scale (see `fixed_worker_exploration`)
        self.noise.fixed_scale = fixed_worker_exploration(config)
        self.policy_delay = int(config["policy_delay"])
        if self.policy_delay < 1:
            raise ValueError(f"policy_delay must be an int >= 1, got {config['policy_delay']}")

    def dist_cls(self) -> type:
        return Deterministic

    def build_model(self, config: dict[str, Any]) -> ActorCriticModel:
        actor = mlp(
            self.obs_dim, config["actor_hiddens"], self.act_dim, config["actor_hidden_activation"]
        )
        critic = EnsembleMLP(
            2 if config["twin_q"] else 1,
            self.obs_dim + self.act_dim,
            config["critic_hiddens"],
            1,
            config["critic_hidden_activation"],
        )
        return ActorCriticModel(actor, critic)

    def learning_rates(self) -> dict[str, float]:
        return {"actor": float(self.config["actor_lr"]), "critic": float(self.config["critic_lr"])}

    def random_timesteps(self) -> int:
        return self.noise.settings.random_timesteps

    def actor_action(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        y = torch.tanh(self.model.actor(obs))
        if explore:
            y = (y + self.noise.sample(len(y), self.global_timestep)).clamp(-1.0, 1.0)
        return y

    def _l2(self, module: torch.nn.Module) -> torch.Tensor | float:
        """``l2_reg * 0.5 * sum ||W||^2`` over the weight matrices (not biases)."""
        l2 = float(self.config["l2_reg"])
        if not l2:
            return 0.0
        mats = [p for p in module.parameters() if p.dim() >= 2]
        return l2 * 0.5 * sum(p.square().sum() for p in mats)

    @torch.no_grad()
    def critic_target(
        self, next_obs: torch.Tensor, rew: torch.Tensor, bootstrap: torch.Tensor
    ) -> torch.Tensor:
        """``float32[B]``: ``y = r + bootstrap * min_j Q'_j(s', a')`` (see the module
        docstring), with the target smoothing of ``smooth_target_policy``."""
        cfg = self.config
        y_next = torch.tanh(self.target_model.actor(next_obs))
        if cfg["smooth_target_policy"]:
            y_next = smoothed_target_action(
                y_next, float(cfg["target_noise"]), float(cfg["target_noise_clip"])
            )
        q_next = self.target_model.critic(torch.cat([next_obs, y_next], 1))
        return rew + bootstrap * q_next.min(0).values.squeeze(-1)

    def compute_td_error(self, batch: Any) -> np.ndarray:
        """``float32[B]``: ``|Q(s, a) - y|`` of `batch`'s rows averaged over the critics,
        as learning reports it (``td_error``), without learning."""
        with self.lock, torch.no_grad():
            obs, act, next_obs, rew, bootstrap = self.batch_parts(self.to_tensors(batch))
            q = self.model.critic(torch.cat([obs, act], 1)).squeeze(-1)
            td = (q - self.critic_target(next_obs, rew, bootstrap)).abs().mean(0)
            return td.cpu().numpy().astype(np.float32)

    def postprocess_trajectory(
        self, sample_batch: Any, other_agent_batches: Any = None, episode: Any = None
    ) -> Any:
        batch = super().postprocess_trajectory(sample_batch, other_agent_batches, episode)
        return add_worker_priorities(self, batch)

    def update(self, t: dict[str, torch.Tensor]) -> dict[str, Any]:
        cfg = self.config
        obs, act, next_obs, rew, bootstrap = self.batch_parts(t)
        weights = t.get("weights")
        critic = self.model.critic
        target = self.critic_target(next_obs, rew, bootstrap)
        q = critic(torch.cat([obs, act], 1)).squeeze(-1)  # [M, B]
        td = q - target
        if cfg["use_huber"]:
            per_row = torch.nn.functional.huber_loss(
                q, target.expand_as(q), reduction="none", delta=float(cfg["huber_threshold"])
            )
        else:
            per_row = 0.5 * td.square()
        if weights is not None:
            per_row = weights * per_row
        critic_loss = per_row.mean(-1).sum() + self._l2(critic)
        stats: dict[str, Any] = {"critic_loss": critic_loss.detach()}
        self.step_optimizers(critic_loss, ("critic",))
        if self.num_updates % self.policy_delay == 0:  # through the critic just updated
            y_pi = torch.tanh(self.model.actor(obs))
            q_pi = critic(torch.cat([obs, y_pi], 1), detach=True, members=slice(0, 1))
            actor_loss = -q_pi.mean() + self._l2(self.model.actor)
            self.step_optimizers(actor_loss, ("actor",))
            if self.soft_updates:
                self.update_target()
            stats["actor_loss"] = actor_loss.detach()
        qd = q.detach()
        self.td_error = td.detach().abs().mean(0)
        stats.update({"mean_q": qd.mean(), "max_q": qd.max(), "min_q": qd.min()})
        return stats
