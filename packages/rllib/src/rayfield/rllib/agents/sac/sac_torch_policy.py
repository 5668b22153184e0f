"""SAC's policy: a squashed Gaussian (Box actions) or categorical (Discrete) actor, twin
soft Q-functions with target copies, and the learned entropy temperature alpha.

One learning step on a replayed batch (Haarnoja et al. 2018, "Soft Actor-Critic
Algorithms and Applications", Algorithm 1 and eqs. 5-7, 17-18), all three losses from
one forward pass of the current parameters and one backward pass, as RLlib computes them:

* soft Q target (eq. 3 with the clipped double-Q minimum of Section 5 / Fujimoto et al.
  2018): ``y = r + gamma^m (1 - terminated) (min_j Q'_j(s', a') - alpha log pi(a'|s'))``
  with ``a' ~ pi(.|s')`` and ``Q'`` the target critics;
* critic loss ``0.5 * sum_j mean_B(w (Q_j(s, a) - y)^2)`` (``w``: prioritized replay's
  importance weights, 1 otherwise);
* actor loss (eq. 7, reparameterised) ``mean_B(alpha log pi(a~|s) - min_j Q_j(s, a~))``,
  ``a~ ~ pi(.|s)``, differentiated through the critics into the actor only;
* temperature loss (eq. 18, on ``log alpha``)
  ``-mean_B(log alpha * (log pi(a~|s) + target_entropy))``: alpha grows when the
  policy's entropy ``-log pi`` falls below ``target_entropy`` and shrinks above it.

Discrete actions (Christodoulou 2019, "Soft Actor-Critic for Discrete Action Settings",
eqs. 10-12): the critics output ``Q(s, .)`` for every action, and the expectations over
the policy are computed exactly: ``V(s') = sum_a pi(a|s') (min_j Q'_j(s', a) - alpha log
pi(a|s'))``, actor loss ``sum_a pi(a|s) (alpha log pi(a|s) - min_j Q_j(s, a))``, and the
temperature loss with ``sum_a pi(a|s) log pi(a|s)``. Its ``target_entropy: "auto"`` is
``0.98 * log(n_actions)`` (98% of the uniform policy's entropy); for Box actions
``-dim(A)`` (Haarnoja et al. 2018, Section 5).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from rayfield.rllib.agents.replay_actor_critic import ActorCriticModel, ReplayActorCriticPolicy
from rayfield.rllib.models.distributions import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    Categorical,
    SquashedGaussian,
    tanh_gaussian_rsample,
)
from rayfield.rllib.models.torch_ensemble import EnsembleMLP, mlp

__all__ = ["SACTorchPolicy", "sac_target_entropy"]


def sac_target_entropy(action_space: Any, setting: Any) -> float:
    """The entropy target: `setting` as a number, or for ``"auto"`` / None ``-dim(A)``
    (Box) or ``0.98 * log(n)`` (Discrete with n actions).

    Raises:
        ValueError: `setting` is neither ``"auto"``, None nor a number.
    """
    if setting is None or setting == "auto":
        if hasattr(action_space, "n"):
            return 0.98 * math.log(int(action_space.n))
        return -float(np.prod(action_space.shape))
    if isinstance(setting, (int, float)) and not isinstance(setting, bool):
        return float(setting)
    raise ValueError(f"target_entropy must be 'auto', None or a number, got {setting!r}")


class SACTorchPolicy(ReplayActorCriticPolicy):
    """SAC's policy (see the module docstring). Statistics of a step: ``critic_loss``,
    ``actor_loss``, ``alpha_loss``, ``alpha``, ``mean_q``, ``entropy`` (the batch's
    mean ``-log pi``) and ``target_entropy``."""

    allows_discrete = True

    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any]) -> None:
        super().__init__(observation_space, action_space, config)
        self.target_entropy = sac_target_entropy(action_space, config["target_entropy"])
        explore = config.get("exploration_config") or {}
        self._random_timesteps = int(explore.get("random_timesteps", 0))

    def dist_cls(self) -> type:
        return Categorical if self.discrete else SquashedGaussian

    def build_model(self, config: dict[str, Any]) -> ActorCriticModel:
        pm, qm = config["policy_model"], config["Q_model"]
        n_out = int(self.action_space.n) if self.discrete else 2 * self.act_dim
        actor = mlp(self.obs_dim, pm["fcnet_hiddens"], n_out, pm["fcnet_activation"])
        critic = EnsembleMLP(
            2 if config["twin_q"] else 1,
            self.obs_dim if self.discrete else self.obs_dim + self.act_dim,
            qm["fcnet_hiddens"],
            int(self.action_space.n) if self.discrete else 1,
            qm["fcnet_activation"],
        )
        alpha = float(config["initial_alpha"])
        if not alpha > 0:
            raise ValueError(f"initial_alpha must be > 0, got {alpha}")
        return ActorCriticModel(actor, critic, log_alpha=math.log(alpha))

    def learning_rates(self) -> dict[str, float]:
        opt = self.config["optimization"]
        return {
            "actor": float(opt["actor_learning_rate"]),
            "critic": float(opt["critic_learning_rate"]),
            "alpha": float(opt["entropy_learning_rate"]),
        }

    def random_timesteps(self) -> int:
        return self._random_timesteps

    def _gaussian(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = out.chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def actor_action(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        out = self.model.actor(obs)
        if self.discrete:
            if explore:
                return torch.multinomial(torch.softmax(out, -1), 1).squeeze(1)
            return out.argmax(-1)
        y, _ = tanh_gaussian_rsample(*self._gaussian(out), deterministic=not explore)
        return y

    def update(self, t: dict[str, torch.Tensor]) -> dict[str, Any]:
        obs, act, next_obs, rew, bootstrap = self.batch_parts(t)
        weights = t.get("weights")
        log_alpha = self.model.log_alpha
        alpha = log_alpha.detach().exp()
        critic = self.model.critic
        if self.discrete:
            with torch.no_grad():
                logp_next = torch.log_softmax(self.model.actor(next_obs), -1)
                q_next = self.target_model.critic(next_obs).min(0).values  # [B, n]
                v_next = (logp_next.exp() * (q_next - alpha * logp_next)).sum(-1)
                target = rew + bootstrap * v_next
            q_all = critic(obs)  # [M, B, n]
            q = q_all.gather(2, act.view(1, -1, 1).expand(q_all.shape[0], -1, 1)).squeeze(2)
            logp = torch.log_softmax(self.model.actor(obs), -1)
            probs = logp.exp()
            q_min = q_all.detach().min(0).values
            actor_loss = (probs * (alpha * logp - q_min)).sum(-1).mean()
            logp_pi = (probs * logp).sum(-1).detach()  # -entropy per row
        else:
            with torch.no_grad():
                y_next, logp_next = tanh_gaussian_rsample(
                    *self._gaussian(self.model.actor(next_obs))
                )
                q_next = self.target_model.critic(torch.cat([next_obs, y_next], 1))
                target = rew + bootstrap * (q_next.min(0).values.squeeze(-1) - alpha * logp_next)
            q = critic(torch.cat([obs, act], 1)).squeeze(-1)  # [M, B]
            y_pi, logp_pi = tanh_gaussian_rsample(*self._gaussian(self.model.actor(obs)))
            q_pi = critic(torch.cat([obs, y_pi], 1), detach=True).min(0).values.squeeze(-1)
            actor_loss = (alpha * logp_pi - q_pi).mean()
            logp_pi = logp_pi.detach()
        td = q - target  # [M, B]
        sq = td.square() if weights is None else weights * td.square()
        critic_loss = 0.5 * sq.mean(-1).sum()
        alpha_loss = -(log_alpha * (logp_pi + self.target_entropy)).mean()
        self.step_optimizers(critic_loss + actor_loss + alpha_loss, ("actor", "critic", "alpha"))
        if self.soft_updates:
            self.update_target()
        self.td_error = td.detach().abs().mean(0)
        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha_loss": alpha_loss.detach(),
            "alpha": alpha,
            "mean_q": q.detach().mean(),
            "entropy": -logp_pi.mean(),
            "target_entropy": self.target_entropy,
        }
