"""Soft Actor-Critic: off-policy maximum-entropy actor-critic with twin Q-functions and
automatic entropy tuning, for Box (squashed Gaussian policy) and Discrete (categorical
policy) action spaces.

Each training step (DQN's replay execution, `ReplayActorCriticTrainer`) samples
``rollout_fragment_length`` steps per env with the stochastic policy (uniform actions
during ``exploration_config["random_timesteps"]`` steps), stores them in the replay
buffer (``buffer_size`` rows; prioritized with ``prioritized_replay``) and, after
``learning_starts`` steps, takes one gradient step of the critics, the actor and the
temperature on ``train_batch_size`` replayed rows (losses in
`rayfield.rllib.agents.sac.sac_torch_policy`), then Polyak-averages the target critics
with ``tau``. Learning rates: ``optimization`` = ``{"actor_learning_rate",
"critic_learning_rate", "entropy_learning_rate"}``; networks: ``policy_model`` and
``Q_model`` (``fcnet_hiddens``, ``fcnet_activation``; Ray 2: ``policy_model_config``,
``q_model_config``); ``twin_q`` (two critics, the minimum as target); ``initial_alpha``;
``target_entropy`` (None or ``"auto"``: ``-dim(A)``, or ``0.98 log(n)`` for n discrete
actions); ``n_step`` returns.

Sources:
    Haarnoja, Zhou, Abbeel, Levine, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep
    Reinforcement Learning with a Stochastic Actor", ICML 2018.
    Haarnoja et al., "Soft Actor-Critic Algorithms and Applications", arXiv:1812.05905,
    2018 (twin Q-functions, automatic temperature with a target entropy, Algorithm 1).
    Christodoulou, "Soft Actor-Critic for Discrete Action Settings", arXiv:1910.07207,
    2019.
"""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.common_config import with_common_config
from rayfield.rllib.agents.replay_actor_critic import REPLAY_RANGES, ReplayActorCriticTrainer
from rayfield.rllib.agents.sac.sac_torch_policy import SACTorchPolicy
from rayfield.rllib.utils.config import NumberRange, check_ranges

DEFAULT_CONFIG = with_common_config(
    {
        "twin_q": True,
        "use_state_preprocessor": False,
        "Q_model": {"fcnet_activation": "relu", "fcnet_hiddens": [256, 256]},
        "policy_model": {"fcnet_activation": "relu", "fcnet_hiddens": [256, 256]},
        "tau": 5e-3,
        "initial_alpha": 1.0,
        "target_entropy": None,
        "n_step": 1,
        "exploration_config": {"type": "StochasticSampling", "random_timesteps": 0},
        "normalize_actions": True,
        "clip_actions": False,
        "timesteps_per_iteration": 100,
        "buffer_size": 1_000_000,
        "prioritized_replay": False,
        "prioritized_replay_alpha": 0.6,
        "prioritized_replay_beta": 0.4,
        "prioritized_replay_eps": 1e-6,
        "beta_annealing_fraction": 0.2,
        "final_prioritized_replay_beta": 0.4,
        "schedule_max_timesteps": 100000,
        "compress_observations": False,
        "optimization": {
            "actor_learning_rate": 3e-4,
            "critic_learning_rate": 3e-4,
            "entropy_learning_rate": 3e-4,
        },
        "grad_norm_clipping": None,
        "learning_starts": 1500,
        "rollout_fragment_length": 1,
        "train_batch_size": 256,
        "target_network_update_freq": 0,
        "num_workers": 0,
        "worker_side_prioritization": False,
        "min_iter_time_s": 1,
    }
)

SAC_RANGES = {
    **REPLAY_RANGES,
    "initial_alpha": NumberRange(low=1e-12),
    "actor_learning_rate": NumberRange(low=0),
    "critic_learning_rate": NumberRange(low=0),
    "entropy_learning_rate": NumberRange(low=0),
}


class SACTrainer(ReplayActorCriticTrainer):
    """SAC (see the module docstring)."""

    _name = "SAC"
    _default_config = DEFAULT_CONFIG
    _policy = SACTorchPolicy

    @classmethod
    def validate_config(cls, config: dict[str, Any]) -> None:
        """The common checks, the replay numbers (`REPLAY_RANGES`), ``initial_alpha`` > 0,
        the ``optimization`` learning rates >= 0, and ``exploration_config`` of type
        ``StochasticSampling``.

        Raises:
            ConfigTypeError: a number of the wrong type.
            ValueError: a number out of range, or another exploration type.
        """
        super().validate_config(config)
        check_ranges({**config, **config["optimization"]}, SAC_RANGES)
        explore = config["exploration_config"]
        if explore.get("type", "StochasticSampling") != "StochasticSampling":
            raise ValueError(
                "SAC explores by sampling its stochastic policy: exploration_config type "
                f"must be 'StochasticSampling', got {explore.get('type')!r}"
            )
        check_ranges(explore, {"random_timesteps": NumberRange(low=0, integer=True)})


SACAgent = SACTrainer
SAC = SACTrainer
