"""IMPALA's torch policy: the actor-critic loss on V-trace targets (Espeholt et al. 2018,
arXiv:1802.01561, section 4.2; the targets are `vtrace.from_importance_weights`).

Kept apart from `impala` so that importing `ImpalaTrainer` does not import torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rayfield.rllib.agents.impala.vtrace import from_importance_weights
from rayfield.rllib.policy.sample_batch import SampleBatch
from rayfield.rllib.policy.torch_policy import TorchPolicy

FRAGMENT_END = "fragment_end"
"""Column set by `postprocess_trajectory`: True on the last row of each fragment of one
episode, so a learner batch of fragments from several workers (and replays) is cut into
its trajectories exactly."""


class VTraceTorchPolicy(TorchPolicy):
    """IMPALA's policy. The learner's loss on a batch of episode fragments::

        L = - mean(A_s log pi(a_s|x_s))
            + vf_loss_coeff * 0.5 * mean((v_s - V(x_s))^2)
            - entropy_coeff * mean(H(pi(.|x_s)))

    with ``v_s`` and ``A_s`` the V-trace targets and advantages (paper eq. 1 and section
    4.2) of the current policy ``pi`` against the behaviour policy ``mu`` that sampled
    the batch (its ``action_logp`` column), clipped at ``vtrace_clip_rho_threshold``
    (rho_bar) and ``vtrace_clip_pg_rho_threshold``; ``c_bar`` is 1. The targets use the
    current value function, with ``V(new_obs)`` of a fragment's last step as its bootstrap
    value unless the episode terminated there (a time-limit truncation bootstraps). With
    ``vtrace: False`` every importance ratio is taken as 1 (no off-policy correction: the
    targets are the n-step bootstrapped returns of the fragment, as in A3C). Means are over
    the batch's rows (RLlib sums; ``lr`` is per mean here).

    Recurrent models are not supported (``use_lstm`` raises ValueError).
    """

    loss_columns = frozenset(
        {
            SampleBatch.CUR_OBS,
            SampleBatch.NEXT_OBS,
            SampleBatch.ACTIONS,
            SampleBatch.REWARDS,
            SampleBatch.TERMINATEDS,
            SampleBatch.ACTION_LOGP,
            FRAGMENT_END,
        }
    )

    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any]) -> None:
        if (config.get("model") or {}).get("use_lstm"):
            raise ValueError(f"{type(self).__name__} does not support use_lstm: set it to False")
        super().__init__(observation_space, action_space, config)

    def make_optimizer(self) -> Any:
        """Adam (``opt_type: "adam"``) or RMSProp (``"rmsprop"``, with ``decay``,
        ``momentum`` and ``epsilon``) at ``lr``."""
        if self.config.get("opt_type", "adam") == "rmsprop":
            return torch.optim.RMSprop(
                self.model.parameters(),
                lr=self.cur_lr,
                alpha=float(self.config["decay"]),
                momentum=float(self.config["momentum"]),
                eps=float(self.config["epsilon"]),
            )
        return super().make_optimizer()

    def extra_action_out(self, dist_inputs: torch.Tensor) -> dict[str, np.ndarray]:
        """None: the learner recomputes the values under the current weights, so the
        rollout workers skip the value branch (RLlib's IMPALA records no ``vf_preds``
        either)."""
        return {}

    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches: Any = None, episode: Any = None
    ) -> SampleBatch:
        """Mark the fragment's last row (`FRAGMENT_END`)."""
        end = np.zeros(sample_batch.count, dtype=bool)
        end[-1] = True
        sample_batch[FRAGMENT_END] = end
        return sample_batch

    def vtrace_targets(
        self, train_batch: dict[str, torch.Tensor], target_logp: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(vs, pg_advantages)``, float32[T] tensors without gradient, for the batch's
        rows given the current policy's log-probabilities and values of the taken actions."""
        cfg = self.config
        ends = train_batch[FRAGMENT_END]
        with torch.no_grad():
            self.model({SampleBatch.CUR_OBS: train_batch[SampleBatch.NEXT_OBS][ends]}, [], None)
            boot = torch.zeros_like(values)
            boot[ends] = self.model.value_function()
        terminated = train_batch[SampleBatch.TERMINATEDS].float()
        discounts = cfg["gamma"] * (1.0 - terminated)
        if cfg.get("vtrace", True):
            log_rhos = (target_logp.detach() - train_batch[SampleBatch.ACTION_LOGP]).cpu().numpy()
        else:
            log_rhos = np.zeros(len(values))
        out = from_importance_weights(
            log_rhos,
            discounts.cpu().numpy(),
            train_batch[SampleBatch.REWARDS].cpu().numpy(),
            values.detach().cpu().numpy(),
            boot.cpu().numpy(),
            ends.cpu().numpy(),
            clip_rho_threshold=cfg.get("vtrace_clip_rho_threshold"),
            clip_pg_rho_threshold=cfg.get("vtrace_clip_pg_rho_threshold"),
        )
        as_tensor = lambda a: torch.as_tensor(a, dtype=torch.float32, device=values.device)  # noqa: E731
        return as_tensor(out.vs), as_tensor(out.pg_advantages)

    def loss(
        self, model: Any, dist_class: type, train_batch: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """The loss of the class docstring; records ``policy_loss``, ``vf_loss``,
        ``entropy``, ``mean_rho`` in ``self.stats``."""
        logits, _ = self.forward_train(model, train_batch)
        values = model.value_function()
        dist = dist_class(logits, model)
        logp = dist.logp(train_batch[SampleBatch.ACTIONS])
        vs, pg_adv = self.vtrace_targets(train_batch, logp, values)
        policy_loss = self.policy_loss(logp, pg_adv, train_batch)
        return self.actor_critic_loss(model, train_batch, policy_loss, vs, values, dist, logp)

    def actor_critic_loss(
        self,
        model: Any,
        train_batch: dict[str, torch.Tensor],
        policy_loss: torch.Tensor,
        vs: torch.Tensor,
        values: torch.Tensor,
        dist: Any,
        logp: torch.Tensor,
        extra_loss: torch.Tensor | None = None,
        extra_stats: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``policy_loss + vf_loss_coeff * 0.5 * mean((vs - values)^2) - entropy_coeff *
        mean(H(dist)) [+ extra_loss]``, through the model's ``custom_loss``; records the
        terms, ``mean_rho`` (``pi / mu`` of the taken actions), ``rho_clip_frac`` (the
        share of rows with ``pi / mu > rho_bar``), ``behaviour_kl`` (``mean(log mu - log
        pi)`` of the taken actions, a sample estimate of ``KL(mu || pi)``) and
        `extra_stats` in ``self.stats``."""
        cfg = self.config
        vf_loss = 0.5 * torch.mean((vs - values) ** 2)
        entropy = torch.mean(dist.entropy())
        total = policy_loss + cfg["vf_loss_coeff"] * vf_loss - cfg["entropy_coeff"] * entropy
        if extra_loss is not None:
            total = total + extra_loss
        total = model.custom_loss(total, train_batch)
        log_rho = logp.detach() - train_batch[SampleBatch.ACTION_LOGP]
        rho_bar = cfg.get("vtrace_clip_rho_threshold")
        self.stats = {
            "total_loss": total.detach(),
            "policy_loss": policy_loss.detach(),
            "vf_loss": vf_loss.detach(),
            "entropy": entropy.detach(),
            "mean_rho": torch.exp(log_rho).mean(),
            # the share of rows whose importance ratio V-trace clips at rho_bar
            "rho_clip_frac": (
                (log_rho > float(np.log(rho_bar))).float().mean() if rho_bar else torch.zeros(())
            ),
            # mean(log mu - log pi) of the taken actions: a sample estimate of
            # KL(mu || pi), how far the learner has moved from the behaviour policy
            "behaviour_kl": (-log_rho).mean(),
            **(extra_stats or {}),
        }
        return total

    def policy_loss(
        self, logp: torch.Tensor, advantages: torch.Tensor, train_batch: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """IMPALA's policy-gradient term: ``-mean(A_s log pi(a_s|x_s))``."""
        return -torch.mean(advantages * logp)


__all__ = ["FRAGMENT_END", "VTraceTorchPolicy"]
