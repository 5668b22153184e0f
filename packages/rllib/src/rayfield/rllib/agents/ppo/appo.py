"""APPO: IMPALA's asynchronous architecture (`ImpalaTrainer`) with PPO's clipped
surrogate objective in the loss (`APPOTorchPolicy`), which allows several passes
(``num_sgd_iter``) over each train batch. The advantages and value targets are V-trace's
(``vtrace: True``) or GAE's (``vtrace: False``, the default, with ``use_gae`` /
``lambda``), as in RLlib's APPO. With V-trace the learner keeps a target network, refreshed
after each train batch's passes (``target_network_update_freq``), against which the
V-trace targets and the surrogate's ratio are taken (IMPACT's clipped target network), so
that steps the workers sampled with stale weights still move the policy; an optional KL
term (``use_kl_loss``, ``kl_coeff``, ``kl_target``) keeps the policy near the target.

Sources:
    Schulman, Wolski, Dhariwal, Radford, Klimov, "Proximal Policy Optimization
    Algorithms", arXiv:1707.06347, 2017 (eq. 7, the clipped surrogate).
    Espeholt et al., "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
    Actor-Learner Architectures", ICML 2018, arXiv:1802.01561 (section 3 the
    architecture, section 4 V-trace).
    Luo, Zhu, Yang, Liang, Chen, Xing, Dai, "IMPACT: Importance Weighted Asynchronous
    Architectures with Clipped Target Networks", ICLR 2020, arXiv:1912.00167 (section 4,
    the target network and the clipped importance ratio).
"""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.common_config import with_base_config
from rayfield.rllib.agents.impala.impala import DEFAULT_CONFIG as IMPALA_CONFIG
from rayfield.rllib.agents.impala.impala import ImpalaTrainer
from rayfield.rllib.utils.config import NumberRange, check_ranges

DEFAULT_CONFIG = with_base_config(
    IMPALA_CONFIG,
    {
        "vtrace": False,
        "use_gae": True,
        "lambda": 1.0,
        "use_critic": True,
        "clip_param": 0.4,
        # the target network (vtrace: True): refreshed after every
        # target_network_update_freq * num_sgd_iter * minibatch_buffer_size updates
        "target_network_update_freq": 1,
        # the clip of mu / pi_old in the surrogate's ratio (RLlib's name)
        "target_worker_clipping": 2.0,
        "use_kl_loss": False,
        "kl_coeff": 1.0,
        "kl_target": 0.01,
        "replay_buffer_num_slots": 100,
    },
)


class APPOTrainer(ImpalaTrainer):
    """APPO (see the module docstring)."""

    _name = "APPO"
    _default_config = DEFAULT_CONFIG
    _policy: Any = "rayfield.rllib.agents.ppo.appo_torch_policy.APPOTorchPolicy"

    @classmethod
    def validate_config(cls, config: dict[str, Any]) -> None:
        """Also ``clip_param`` > 0, ``lambda`` in [0, 1], ``target_network_update_freq``
        >= 1, ``target_worker_clipping`` > 0, ``kl_coeff`` >= 0 and ``kl_target`` > 0.

        Raises:
            ValueError: a value out of its range.
        """
        super().validate_config(config)
        check_ranges(
            config,
            {
                "clip_param": NumberRange(low=0),
                "lambda": NumberRange(0, 1),
                "target_network_update_freq": NumberRange(low=1, integer=True),
                "kl_coeff": NumberRange(low=0),
            },
        )
        for key in ("clip_param", "target_worker_clipping", "kl_target"):
            if not config[key] > 0:
                raise ValueError(f"{key} must be > 0, got {config[key]}")


APPOAgent = APPOTrainer
APPO = APPOTrainer
