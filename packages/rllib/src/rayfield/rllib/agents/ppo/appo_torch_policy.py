"""APPO's torch policy: PPO's clipped surrogate objective (Schulman et al. 2017,
arXiv:1707.06347, eq. 7) on V-trace advantages and targets (Espeholt et al. 2018,
arXiv:1802.01561, section 4), or on GAE advantages with ``vtrace: False``.

Kept apart from `appo` so that importing `APPOTrainer` does not import torch.
"""

from __future__ import annotations

from typing import Any

import torch

from rayfield.rllib.agents.impala.vtrace_torch_policy import VTraceTorchPolicy
from rayfield.rllib.evaluation.postprocessing import Postprocessing, compute_gae_for_sample_batch
from rayfield.rllib.policy.sample_batch import SampleBatch


class APPOTorchPolicy(VTraceTorchPolicy):
    """APPO's policy. The loss is IMPALA's (`VTraceTorchPolicy`) with the policy term
    replaced by PPO's clipped surrogate::

        -mean(min(r_s A_s, clip(r_s, 1 - clip_param, 1 + clip_param) A_s)),
        r_s = pi(a_s|x_s) / mu(a_s|x_s)

    where ``mu`` is the behaviour policy that sampled the step (its ``action_logp``),
    ``A_s`` the V-trace policy-gradient advantage and the value target ``v_s`` (as in
    RLlib's APPO). With ``vtrace: False`` the advantages and value targets are GAE's
    (``lambda``, computed on the rollout worker with the behaviour policy's values, as in
    PPO) and ``r_s`` is still taken against the behaviour policy.
    """

    loss_columns = VTraceTorchPolicy.loss_columns | {
        Postprocessing.ADVANTAGES,
        Postprocessing.VALUE_TARGETS,
    }

    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches: Any = None, episode: Any = None
    ) -> SampleBatch:
        """Mark the fragment's end; with ``vtrace: False`` also add GAE advantages."""
        sample_batch = super().postprocess_trajectory(sample_batch)
        if not self.config.get("vtrace", True):
            sample_batch = compute_gae_for_sample_batch(self, sample_batch)
        return sample_batch

    def vtrace_targets(
        self, train_batch: dict[str, torch.Tensor], target_logp: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """V-trace's ``(vs, pg_advantages)``; GAE's value targets and advantages when
        ``vtrace`` is False."""
        if self.config.get("vtrace", True):
            return super().vtrace_targets(train_batch, target_logp, values)
        return (
            train_batch[Postprocessing.VALUE_TARGETS],
            train_batch[Postprocessing.ADVANTAGES],
        )

    def policy_loss(
        self, logp: torch.Tensor, advantages: torch.Tensor, train_batch: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """PPO's clipped surrogate against the behaviour policy (class docstring)."""
        clip = float(self.config["clip_param"])
        ratio = torch.exp(logp - train_batch[SampleBatch.ACTION_LOGP])
        surrogate = torch.min(
            advantages * ratio, advantages * torch.clamp(ratio, 1 - clip, 1 + clip)
        )
        return -torch.mean(surrogate)


__all__ = ["APPOTorchPolicy"]
