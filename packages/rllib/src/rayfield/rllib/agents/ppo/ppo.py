"""Proximal Policy Optimization (PPO): clipped surrogate objective, adaptive KL
penalty, GAE, and several epochs of minibatch SGD per batch.

Per iteration the trainer samples ``train_batch_size`` env steps with the current
policy (on the rollout workers), adds GAE advantages per episode fragment,
standardises the advantages over the batch, then runs ``num_sgd_iter`` epochs over
shuffled minibatches of ``sgd_minibatch_size`` rows minimising::

    L = mean(-min(A r, A clip(r, 1-clip_param, 1+clip_param))
             + kl_coeff KL(pi_old || pi)
             + vf_loss_coeff max((V - V_t)^2, (V_old + clip(V - V_old, +-vf_clip_param) - V_t)^2)
             - entropy_coeff H(pi))

with ``r = pi(a|s) / pi_old(a|s)``. After the epochs, ``kl_coeff`` is multiplied by
1.5 when the mean KL exceeded ``2 * kl_target`` and by 0.5 when it was under
``kl_target / 2`` (the adaptive KL penalty of the paper's section 4). Set
``kl_coeff: 0`` for the clipped objective alone.

Sources:
    Schulman, Wolski, Dhariwal, Radford, Klimov, "Proximal Policy Optimization
    Algorithms", arXiv:1707.06347, 2017 (eq. 7 clipping, section 4 adaptive KL,
    eq. 9 combined loss).
    Schulman et al., "High-Dimensional Continuous Control Using Generalized
    Advantage Estimation", ICLR 2016 (advantages).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rayfield.rllib.agents.common_config import with_common_config
from rayfield.rllib.agents.trainer import Trainer
from rayfield.rllib.evaluation.postprocessing import Postprocessing, compute_gae_for_sample_batch
from rayfield.rllib.policy.sample_batch import SampleBatch
from rayfield.rllib.policy.torch_policy import TorchPolicy

DEFAULT_CONFIG = with_common_config(
    {
        "use_critic": True,
        "use_gae": True,
        "lambda": 1.0,
        "kl_coeff": 0.2,
        "rollout_fragment_length": 200,
        "train_batch_size": 4000,
        "sgd_minibatch_size": 128,
        "shuffle_sequences": True,
        "num_sgd_iter": 30,
        "lr": 5e-5,
        "lr_schedule": None,
        "vf_share_layers": False,
        "vf_loss_coeff": 1.0,
        "entropy_coeff": 0.0,
        "entropy_coeff_schedule": None,
        "clip_param": 0.3,
        "vf_clip_param": 10.0,
        "grad_clip": None,
        "kl_target": 0.01,
        "batch_mode": "truncate_episodes",
        "observation_filter": "NoFilter",
        "simple_optimizer": False,
        "straggler_mitigation": False,
    }
)


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
        cfg = self.config
        logits, _ = self.forward_train(model, train_batch)
        mean = self.reduce_mean
        dist = dist_class(logits, model)
        prev_dist = dist_class(train_batch[SampleBatch.ACTION_DIST_INPUTS], model)
        logp_ratio = torch.exp(
            dist.logp(train_batch[SampleBatch.ACTIONS]) - train_batch[SampleBatch.ACTION_LOGP]
        )
        adv = train_batch[Postprocessing.ADVANTAGES]
        surrogate = torch.min(
            adv * logp_ratio,
            adv * torch.clamp(logp_ratio, 1 - cfg["clip_param"], 1 + cfg["clip_param"]),
        )
        kl = mean(prev_dist.kl(dist), train_batch)
        entropy = mean(dist.entropy(), train_batch)
        policy_loss = -mean(surrogate, train_batch)
        total = policy_loss - cfg["entropy_coeff"] * entropy
        if self.kl_coeff > 0:
            total = total + self.kl_coeff * kl
        vf_loss = torch.zeros(())
        if cfg["use_gae"] or cfg.get("use_critic", True):
            value = model.value_function()
            targets = train_batch[Postprocessing.VALUE_TARGETS]
            old = train_batch[SampleBatch.VF_PREDS]
            clipped = old + torch.clamp(value - old, -cfg["vf_clip_param"], cfg["vf_clip_param"])
            vf_loss = mean(torch.max((value - targets) ** 2, (clipped - targets) ** 2), train_batch)
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


class PPOTrainer(Trainer):
    """PPO (see the module docstring). Discrete and Box action spaces."""

    _name = "PPO"
    _default_config = DEFAULT_CONFIG
    _policy = PPOTorchPolicy

    @classmethod
    def validate_config(cls, config: dict[str, Any]) -> None:
        super().validate_config(config)
        if config["sgd_minibatch_size"] > config["train_batch_size"]:
            raise ValueError(
                f"sgd_minibatch_size ({config['sgd_minibatch_size']}) must be <= "
                f"train_batch_size ({config['train_batch_size']})"
            )
        if config["num_sgd_iter"] < 1:
            raise ValueError("num_sgd_iter must be >= 1")

    def training_step(self) -> dict[str, Any]:
        return self.on_policy_step()


PPOAgent = PPOTrainer
PPO = PPOTrainer
__all__ = ["DEFAULT_CONFIG", "PPO", "PPOAgent", "PPOTorchPolicy", "PPOTrainer"]
