"""PPO's torch policy: GAE postprocessing, the clipped surrogate loss with the adaptive
KL penalty, and ``num_sgd_iter`` epochs of minibatch SGD per batch (see `ppo` for the
objective and its sources: Schulman et al. 2017, arXiv:1707.06347; GAE, ICLR 2016).

Kept apart from `ppo` so that importing `PPOTrainer` does not import torch: the trainer
starts its rollout workers first and imports this module while they start.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from rayfield.rllib.evaluation.postprocessing import Postprocessing, compute_gae_for_sample_batch
from rayfield.rllib.policy.sample_batch import SampleBatch
from rayfield.rllib.policy.torch_policy import TorchPolicy


class PPOTorchPolicy(TorchPolicy):
    """PPO's policy: GAE postprocessing, the clipped surrogate loss and the KL
    coefficient."""

    loss_columns = frozenset(
        {
            SampleBatch.CUR_OBS,
            SampleBatch.ACTIONS,
            SampleBatch.ACTION_LOGP,
            SampleBatch.ACTION_DIST_INPUTS,
            SampleBatch.VF_PREDS,
            Postprocessing.ADVANTAGES,
            Postprocessing.VALUE_TARGETS,
        }
    )

    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any]) -> None:
        if config.get("vf_share_layers"):
            config = {**config, "model": {**config.get("model", {}), "vf_share_layers": True}}
        super().__init__(observation_space, action_space, config)
        self.kl_coeff = float(config["kl_coeff"])
        self.kl_target = float(config["kl_target"])

    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches: Any = None, episode: Any = None
    ) -> SampleBatch:
        """GAE advantages; bootstraps from ``V(new_obs[-1])`` unless the fragment
        ends in a terminal state."""
        return compute_gae_for_sample_batch(self, sample_batch)

    def loss(
        self, model: Any, dist_class: type, train_batch: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """The combined loss of the module docstring. Terms whose coefficient is 0 (the
        KL penalty, the entropy bonus) are computed for the statistics only, outside
        autograd, and an infinite ``vf_clip_param`` leaves the value loss unclipped
        without computing the clipped branch."""
        cfg = self.config
        logits, _ = self.forward_train(model, train_batch)
        mean = self.reduce_mean
        dist = dist_class(logits, model)
        logp_ratio = torch.exp(
            dist.logp(train_batch[SampleBatch.ACTIONS]) - train_batch[SampleBatch.ACTION_LOGP]
        )
        adv = train_batch[Postprocessing.ADVANTAGES]
        surrogate = torch.min(
            adv * logp_ratio,
            adv * torch.clamp(logp_ratio, 1 - cfg["clip_param"], 1 + cfg["clip_param"]),
        )
        policy_loss = -mean(surrogate, train_batch)
        total = policy_loss
        with torch.set_grad_enabled(self.kl_coeff > 0):
            prev_dist = dist_class(train_batch[SampleBatch.ACTION_DIST_INPUTS], model)
            kl = mean(prev_dist.kl(dist), train_batch)
        if self.kl_coeff > 0:
            total = total + self.kl_coeff * kl
        with torch.set_grad_enabled(cfg["entropy_coeff"] != 0):
            entropy = mean(dist.entropy(), train_batch)
        if cfg["entropy_coeff"] != 0:
            total = total - cfg["entropy_coeff"] * entropy
        vf_loss = torch.zeros(())
        if cfg["use_gae"] or cfg.get("use_critic", True):
            value = model.value_function()
            targets = train_batch[Postprocessing.VALUE_TARGETS]
            vf_clip = cfg["vf_clip_param"]
            if vf_clip is None or math.isinf(vf_clip):
                vf_loss = mean((value - targets) ** 2, train_batch)
            else:
                old = train_batch[SampleBatch.VF_PREDS]
                clipped = old + torch.clamp(value - old, -vf_clip, vf_clip)
                vf_loss = mean(
                    torch.max((value - targets) ** 2, (clipped - targets) ** 2), train_batch
                )
            total = total + cfg["vf_loss_coeff"] * vf_loss
        total = model.custom_loss(total, train_batch)
        self.stats = {
            "total_loss": total.detach(),
            "policy_loss": policy_loss.detach(),
            "vf_loss": vf_loss.detach(),
            "kl": kl.detach(),
            "entropy": entropy.detach(),
        }
        return total

    def learn_on_batch(self, samples: SampleBatch) -> dict[str, Any]:
        """``num_sgd_iter`` epochs of minibatch SGD; then the KL coefficient update.

        Returns:
            Means over the last epoch's minibatches of ``total_loss``, ``policy_loss``,
            ``vf_loss``, ``kl``, ``entropy``, plus ``cur_kl_coeff``, ``cur_lr`` and
            ``vf_explained_var``.
        """
        cfg = self.config
        with self.lock:
            adv = samples[Postprocessing.ADVANTAGES]
            samples[Postprocessing.ADVANTAGES] = (
                (adv - adv.mean()) / max(1e-4, float(adv.std()))
            ).astype(np.float32)
            tensors = self.to_tensors(samples)
            n = samples.count
            size = min(int(cfg["sgd_minibatch_size"]), n) if not cfg.get("simple_optimizer") else n
            kl_coeff_used = self.kl_coeff
            epoch_stats: list[dict[str, torch.Tensor]] = []
            grad_norms: list[float] = []
            for _ in range(int(cfg["num_sgd_iter"])):
                epoch_stats = []
                for minibatch in self.minibatches(
                    tensors, size, shuffle=cfg.get("shuffle_sequences", True)
                ):
                    gn = self._grad_step(minibatch)
                    if gn is not None:
                        grad_norms.append(gn)
                    epoch_stats.append(self.stats)
            stats = {
                k: float(torch.stack([s[k] for s in epoch_stats]).mean()) for k in epoch_stats[0]
            }
            self.update_kl(stats["kl"])
            values = self.batch_values(tensors)
            stats.update(
                {
                    "cur_kl_coeff": kl_coeff_used,
                    "cur_lr": self.cur_lr,
                    "vf_explained_var": explained_variance(
                        samples[Postprocessing.VALUE_TARGETS], values
                    ),
                }
            )
            if grad_norms:
                stats["grad_gnorm"] = float(np.mean(grad_norms))
            return stats

    def update_kl(self, sampled_kl: float) -> float:
        """The adaptive KL rule (PPO paper, section 4); returns the new coefficient."""
        if sampled_kl > 2.0 * self.kl_target:
            self.kl_coeff *= 1.5
        elif sampled_kl < 0.5 * self.kl_target:
            self.kl_coeff *= 0.5
        return self.kl_coeff

    def extra_state(self) -> dict[str, Any]:
        return {"kl_coeff": self.kl_coeff}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.kl_coeff = float(state.get("kl_coeff", self.kl_coeff))


def explained_variance(targets: np.ndarray, preds: np.ndarray) -> float:
    """``1 - Var(targets - preds) / Var(targets)``, floored at -1."""
    var = float(np.var(targets))
    if var == 0:
        return 0.0
    return max(-1.0, 1.0 - float(np.var(targets - preds)) / var)


__all__ = ["PPOTorchPolicy", "explained_variance"]
