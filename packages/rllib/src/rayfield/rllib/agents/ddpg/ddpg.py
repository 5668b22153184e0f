"""Deep Deterministic Policy Gradient, with TD3's three changes available (off by
default, as in RLlib): twin critics (``twin_q``), delayed policy updates
(``policy_delay``) and target policy smoothing (``smooth_target_policy`` with
``target_noise`` / ``target_noise_clip``).

Each training step (DQN's replay execution, `ReplayActorCriticTrainer`) samples
``rollout_fragment_length`` steps per env with the actor plus exploration noise
(`rayfield.rllib.agents.ddpg.noise`: Ornstein-Uhlenbeck by default, Gaussian with
``exploration_noise_type: "gaussian"`` or an ``exploration_config``; uniform actions
for the first ``pure_exploration_steps``), stores them in the replay buffer and, after
``learning_starts`` steps, takes one learning step on ``train_batch_size`` replayed rows
(losses in `rayfield.rllib.agents.ddpg.ddpg_torch_policy`) with Adam at ``critic_lr``
and ``actor_lr``. Networks: ``actor_hiddens`` / ``critic_hiddens`` with their
activations. ``evaluation_config`` turns exploration off (``explore: False``).

Not supported (an error says so): ``use_state_preprocessor`` and ``parameter_noise``.

Sources:
    Lillicrap, Hunt, Pritzel, Heess, Erez, Tassa, Silver, Wierstra, "Continuous control
    with deep reinforcement learning", ICLR 2016.
    Silver et al., "Deterministic Policy Gradient Algorithms", ICML 2014.
    Fujimoto, van Hoof, Meger, "Addressing Function Approximation Error in Actor-Critic
    Methods", ICML 2018 (TD3).
"""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.common_config import with_common_config
from rayfield.rllib.agents.ddpg.ddpg_torch_policy import DDPGTorchPolicy
from rayfield.rllib.agents.ddpg.noise import noise_settings
from rayfield.rllib.agents.replay_actor_critic import REPLAY_RANGES, ReplayActorCriticTrainer
from rayfield.rllib.utils.config import NumberRange, check_ranges

DEFAULT_CONFIG = with_common_config(
    {
        # TD3's changes
        "twin_q": False,
        "policy_delay": 1,
        "smooth_target_policy": False,
        "target_noise": 0.2,
        "target_noise_clip": 0.5,
        # evaluation
        "evaluation_interval": None,
        "evaluation_num_episodes": 10,
        "evaluation_config": {"explore": False},
        # model
        "use_state_preprocessor": False,
        "actor_hiddens": [400, 300],
        "actor_hidden_activation": "relu",
        "critic_hiddens": [400, 300],
        "critic_hidden_activation": "relu",
        "n_step": 1,
        # exploration (RLlib 0.7 keys; a non-empty exploration_config replaces them)
        "exploration_config": {},
        "exploration_should_anneal": False,
        "schedule_max_timesteps": 100000,
        "timesteps_per_iteration": 1000,
        "exploration_fraction": 0.1,
        "exploration_final_scale": 0.02,
        "exploration_noise_type": "ou",
        "exploration_ou_noise_scale": 0.1,
        "exploration_ou_theta": 0.15,
        "exploration_ou_sigma": 0.2,
        "exploration_gaussian_sigma": 0.1,
        "parameter_noise": False,
        "pure_exploration_steps": 1000,
        # replay buffer
        "buffer_size": 50000,
        "prioritized_replay": True,
        "prioritized_replay_alpha": 0.6,
        "prioritized_replay_beta": 0.4,
        "beta_annealing_fraction": 0.2,
        "final_prioritized_replay_beta": 0.4,
        "prioritized_replay_eps": 1e-6,
        "compress_observations": False,
        # optimization
        "critic_lr": 1e-3,
        "actor_lr": 1e-3,
        "target_network_update_freq": 0,
        "tau": 0.002,
        "use_huber": False,
        "huber_threshold": 1.0,
        "l2_reg": 1e-6,
        "grad_norm_clipping": None,
        "learning_starts": 1500,
        "rollout_fragment_length": 1,
        "train_batch_size": 256,
        # parallelism
        "num_workers": 0,
        "per_worker_exploration": False,
        "worker_side_prioritization": False,
        "min_iter_time_s": 1,
    }
)

DDPG_RANGES = {
    **REPLAY_RANGES,
    "policy_delay": NumberRange(low=1, integer=True),
    "target_noise": NumberRange(low=0),
    "target_noise_clip": NumberRange(low=0),
    "actor_lr": NumberRange(low=0),
    "critic_lr": NumberRange(low=0),
    "l2_reg": NumberRange(low=0),
    "huber_threshold": NumberRange(low=1e-12),
}


class DDPGTrainer(ReplayActorCriticTrainer):
    """DDPG (see the module docstring)."""

    _name = "DDPG"
    _default_config = DEFAULT_CONFIG
    _policy = DDPGTorchPolicy

    @classmethod
    def validate_config(cls, config: dict[str, Any]) -> None:
        """The common and replay checks, `DDPG_RANGES`, and the exploration settings.

        Raises:
            ConfigTypeError: a number of the wrong type.
            ValueError: a number out of range, a bad exploration setting, or
                ``parameter_noise`` (not supported).
        """
        super().validate_config(config)
        check_ranges(config, DDPG_RANGES)
        if config["parameter_noise"]:
            raise ValueError(
                "parameter_noise is not supported by DDPG/TD3 here: use action noise "
                "(exploration_noise_type or exploration_config)"
            )
        noise_settings(config)


DDPGAgent = DDPGTrainer
DDPG = DDPGTrainer
