"""Proximal Policy Optimization (PPO): clipped surrogate objective, adaptive KL
penalty, GAE, and several epochs of minibatch SGD per batch.

Per iteration the trainer samples ``train_batch_size`` env steps with the current
policy (on the rollout workers; the trainer's ``optimizer`` is a
`SyncSamplesOptimizer`), adds GAE advantages per episode fragment,
standardises the advantages over the batch, then runs ``num_sgd_iter`` epochs over
shuffled minibatches of ``sgd_minibatch_size`` rows minimising::

    L = mean(-min(A r, A clip(r, 1-clip_param, 1+clip_param))
             + kl_coeff KL(pi_old || pi)
             + vf_loss_coeff max((V - V_t)^2, (V_old + clip(V - V_old, +-vf_clip_param) - V_t)^2)
             - entropy_coeff H(pi))

with ``r = pi(a|s) / pi_old(a|s)``; ``vf_clip_param: .inf`` (YAML) or ``float("inf")`` turns
the value clipping off (the plain squared error). After the epochs, ``kl_coeff`` is multiplied by
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

from rayfield.rllib.agents.common_config import with_common_config
from rayfield.rllib.agents.trainer import Trainer
from rayfield.rllib.optimizers import SyncSamplesOptimizer

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


class PPOTrainer(Trainer):
    """PPO (see the module docstring). Discrete and Box action spaces."""

    _name = "PPO"
    _default_config = DEFAULT_CONFIG
    _policy = "rayfield.rllib.agents.ppo.ppo_torch_policy.PPOTorchPolicy"

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

    def _init(self, config: dict[str, Any], env_creator: Any) -> None:
        # num_sgd_iter stays 1 here: the policy's learn_on_batch runs the
        # num_sgd_iter minibatch epochs itself
        self.optimizer = SyncSamplesOptimizer(
            self.workers,
            train_batch_size=config["train_batch_size"],
            sample_async=config["sample_async"],
        )


PPOAgent = PPOTrainer
PPO = PPOTrainer


def __getattr__(name: str) -> Any:
    """`PPOTorchPolicy` and `explained_variance` load torch: imported on first use."""
    if name in ("PPOTorchPolicy", "explained_variance"):
        from rayfield.rllib.agents.ppo import ppo_torch_policy

        return getattr(ppo_torch_policy, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DEFAULT_CONFIG", "PPO", "PPOAgent", "PPOTrainer"]  # and PPOTorchPolicy, lazily
