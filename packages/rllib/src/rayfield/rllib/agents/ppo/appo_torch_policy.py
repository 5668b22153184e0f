"""APPO's torch policy: PPO's clipped surrogate objective (Schulman et al. 2017,
arXiv:1707.06347, eq. 7) on V-trace advantages and targets (Espeholt et al. 2018,
arXiv:1802.01561, section 4) taken against a target network, as in IMPACT (Luo et al.
2020, arXiv:1912.00167, section 4) and RLlib's APPO; or on GAE advantages with
``vtrace: False``.

Kept apart from `appo` so that importing `APPOTrainer` does not import torch.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from rayfield.rllib.agents.impala.vtrace_torch_policy import VTraceTorchPolicy
from rayfield.rllib.evaluation.postprocessing import Postprocessing, compute_gae_for_sample_batch
from rayfield.rllib.policy.sample_batch import SampleBatch


class APPOTorchPolicy(VTraceTorchPolicy):
    """APPO's policy. With ``vtrace: True`` (RLlib's APPO, IMPACT's loss) the learner
    keeps a target network ``pi_old``, a copy of the learning network refreshed after
    every ``target_network_update_freq * num_sgd_iter * minibatch_buffer_size`` updates
    (each train batch's passes; RLlib's ``target_update_frequency``), and the loss is::

        L = - mean(min(r_s A_s, clip(r_s, 1 - clip_param, 1 + clip_param) A_s))
            + vf_loss_coeff * 0.5 * mean((v_s - V(x_s))^2)
            - entropy_coeff * mean(H(pi(.|x_s)))
            [+ kl_coeff * mean(KL(pi_old(.|x_s) || pi(.|x_s)))   with use_kl_loss]

        r_s = min(mu(a_s|x_s) / pi_old(a_s|x_s), target_worker_clipping)
              * pi(a_s|x_s) / mu(a_s|x_s)

    where ``mu`` is the behaviour policy that sampled the step (its ``action_logp``), and
    ``v_s``, ``A_s`` are V-trace's targets and advantages with ``pi_old`` as the target
    policy (the values ``V`` are the learning network's). So the surrogate's ratio is
    ``pi / pi_old``: a recent policy, however stale the workers' ``mu`` (a ratio against
    ``mu`` would clip away the gradient of every step sampled a few updates ago). With
    ``use_kl_loss`` the KL coefficient is adapted at each target update: times 1.5 when
    the last KL was above ``2 * kl_target``, times 0.5 below ``kl_target / 2``.

    With ``vtrace: False`` the advantages and value targets are GAE's (``lambda``,
    computed on the rollout worker with the behaviour policy's values, as in PPO), the
    ratio is ``pi / mu`` and the KL term is against ``mu`` (RLlib's APPO without V-trace;
    no target network).
    """

    loss_columns = VTraceTorchPolicy.loss_columns | {
        Postprocessing.ADVANTAGES,
        Postprocessing.VALUE_TARGETS,
        SampleBatch.ACTION_DIST_INPUTS,
    }

    def __init__(self, observation_space: Any, action_space: Any, config: dict[str, Any]) -> None:
        super().__init__(observation_space, action_space, config)
        self.kl_coeff = float(config.get("kl_coeff", 1.0))
        self.num_target_updates = 0
        self._updates_since_target = 0
        self._last_kl = 0.0
        # the target network: the learner's (worker_index 0) is built now; a rollout
        # worker, which does not learn, builds one only if it ever computes the loss
        self.target_model: torch.nn.Module | None = None
        if not config.get("worker_index") and config.get("vtrace", True):
            self._target()

    # -- the target network -------------------------------------------------------------
    def _target(self) -> torch.nn.Module:
        if self.target_model is None:
            # tensors a forward pass left on the model (its features) are copied detached:
            # deepcopy refuses tensors with a graph
            memo = {
                id(v): v.detach()
                for v in vars(self.model).values()
                if isinstance(v, torch.Tensor) and not v.is_leaf
            }
            self.target_model = copy.deepcopy(self.model, memo)
            for p in self.target_model.parameters():
                p.requires_grad_(False)
        return self.target_model

    def update_target(self) -> None:
        """Copy the learning network's weights into the target network."""
        with self.lock:
            self._target().load_state_dict(self.model.state_dict())
            self.num_target_updates += 1
            self._updates_since_target = 0

    def target_update_period(self) -> int:
        """Learner updates between target updates (>= 1)."""
        cfg = self.config
        return max(
            1,
            int(cfg.get("target_network_update_freq", 1))
            * int(cfg.get("num_sgd_iter", 1))
            * int(cfg.get("minibatch_buffer_size", 1)),
        )

    def extra_action_out(self, dist_inputs: torch.Tensor) -> dict[str, Any]:
        """``vf_preds`` for GAE (``vtrace: False``); none with V-trace (IMPALA's)."""
        if self.config.get("vtrace", True):
            return {}
        return {SampleBatch.VF_PREDS: self.model.value_function().cpu().numpy()}

    def postprocess_trajectory(
        self, sample_batch: SampleBatch, other_agent_batches: Any = None, episode: Any = None
    ) -> SampleBatch:
        """Mark the fragment's end; with ``vtrace: False`` also add GAE advantages."""
        sample_batch = super().postprocess_trajectory(sample_batch)
        if not self.config.get("vtrace", True):
            sample_batch = compute_gae_for_sample_batch(self, sample_batch)
        return sample_batch

    # -- the loss -------------------------------------------------------------------------
    def loss(
        self, model: Any, dist_class: type, train_batch: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """The loss of the class docstring; records ``policy_loss``, ``vf_loss``,
        ``entropy``, ``kl``, ``mean_rho`` (``pi / mu``) and ``mean_is_ratio`` (the clipped
        ``mu / pi_old``) in ``self.stats``."""
        cfg = self.config
        logits, _ = self.forward_train(model, train_batch)
        values = model.value_function()
        dist = dist_class(logits, model)
        actions = train_batch[SampleBatch.ACTIONS]
        logp = dist.logp(actions)
        behaviour_logp = train_batch[SampleBatch.ACTION_LOGP]
        if cfg.get("vtrace", True):
            target = self._target()
            with torch.no_grad():
                old_logits, _ = self.forward_train(target, train_batch)
            old_dist = dist_class(old_logits, target)
            old_logp = old_dist.logp(actions)
            vs, advantages = self.vtrace_targets(train_batch, old_logp, values)
            is_ratio = torch.clamp(
                torch.exp(behaviour_logp - old_logp), 0.0, float(cfg["target_worker_clipping"])
            )
        else:
            old_dist = dist_class(train_batch[SampleBatch.ACTION_DIST_INPUTS], model)
            vs = train_batch[Postprocessing.VALUE_TARGETS]
            advantages = train_batch[Postprocessing.ADVANTAGES]
            is_ratio = torch.ones_like(logp)
        clip = float(cfg["clip_param"])
        ratio = is_ratio * torch.exp(logp - behaviour_logp)
        surrogate = torch.min(
            advantages * ratio, advantages * torch.clamp(ratio, 1 - clip, 1 + clip)
        )
        policy_loss = -torch.mean(surrogate)
        kl = torch.mean(old_dist.kl(dist))
        return self.actor_critic_loss(
            model,
            train_batch,
            policy_loss,
            vs,
            values,
            dist,
            logp,
            extra_loss=self.kl_coeff * kl if cfg.get("use_kl_loss") else None,
            extra_stats={"kl": kl.detach(), "mean_is_ratio": is_ratio.mean()},
        )

    def learn_on_batch(self, samples: SampleBatch) -> dict[str, Any]:
        """One gradient step (`TorchPolicy.learn_on_batch`), then, every
        `target_update_period` steps, the target update and the KL coefficient's
        adaptation (class docstring). The stats add ``kl_coeff`` and
        ``num_target_updates``."""
        with self.lock:
            stats = super().learn_on_batch(samples)
            self._last_kl = float(stats.get("kl", 0.0))
            if self.config.get("vtrace", True):
                self._updates_since_target += 1
                if self._updates_since_target >= self.target_update_period():
                    self.update_target()
                    self._adapt_kl_coeff()
            elif self.config.get("use_kl_loss"):
                self._adapt_kl_coeff()
            stats["kl_coeff"] = self.kl_coeff
            stats["num_target_updates"] = self.num_target_updates
            return stats

    def _adapt_kl_coeff(self) -> None:
        if not self.config.get("use_kl_loss"):
            return
        target = float(self.config["kl_target"])
        if self._last_kl > 2.0 * target:
            self.kl_coeff *= 1.5
        elif self._last_kl < 0.5 * target:
            self.kl_coeff *= 0.5

    # -- weights and state: the target network follows the weights set --------------------
    def set_weights(self, weights: dict[str, Any]) -> None:
        """Set the weights; a target network (learner) restarts from them."""
        with self.lock:
            super().set_weights(weights)
            if self.target_model is not None:
                self.update_target()

    def set_state(self, state: dict[str, Any]) -> None:
        with self.lock:
            super().set_state(state)
            if self.target_model is not None:
                self.update_target()

    def extra_state(self) -> dict[str, Any]:
        return {"kl_coeff": self.kl_coeff}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.kl_coeff = float(state.get("kl_coeff", self.kl_coeff))


__all__ = ["APPOTorchPolicy"]
