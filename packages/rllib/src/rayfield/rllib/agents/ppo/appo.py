"""APPO: IMPALA's asynchronous architecture (`ImpalaTrainer`) with PPO's clipped
surrogate objective in the loss (`APPOTorchPolicy`), which allows several passes
(``num_sgd_iter``) over each train batch. The advantages and value targets are V-trace's
(``vtrace: True``) or GAE's (``vtrace: False``, the default, with ``use_gae`` /
``lambda``), as in RLlib's APPO; the importance ratio of the surrogate is taken against the
behaviour policy that sampled each step.

Sources:
    Schulman, Wolski, Dhariwal, Radford, Klimov, "Proximal Policy Optimization
    Algorithms", arXiv:1707.06347, 2017 (eq. 7, the clipped surrogate).
    Espeholt et al., "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
    Actor-Learner Architectures", ICML 2018, arXiv:1802.01561 (section 3 the
    architecture, section 4 V-trace).
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
        """Also ``clip_param`` > 0 and ``lambda`` in [0, 1].

        Raises:
            ValueError: a value out of its range.
        """
        super().validate_config(config)
        check_ranges(config, {"clip_param": NumberRange(low=0), "lambda": NumberRange(0, 1)})
        if not config["clip_param"] > 0:
            raise ValueError(f"clip_param must be > 0, got {config['clip_param']}")


APPOAgent = APPOTrainer
APPO = APPOTrainer
