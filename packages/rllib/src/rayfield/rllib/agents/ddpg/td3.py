"""TD3: DDPG with its three changes on (Fujimoto et al. 2018): twin critics and the
minimum of their targets (clipped double Q-learning), the actor and the targets updated
every second critic update (``policy_delay: 2``), and target policy smoothing (noise
``N(0, 0.2)`` clipped to +-0.5 on the target action). Exploration is IID Gaussian noise
(sigma 0.1) after 10,000 uniform steps; no prioritized replay, no L2 penalty, ``tau``
0.005, batches of 100 rows: the paper's settings, as RLlib's TD3 defaults.

Sources:
    Fujimoto, van Hoof, Meger, "Addressing Function Approximation Error in Actor-Critic
    Methods", ICML 2018 (Algorithm 1, Table 3).
"""

from __future__ import annotations

from rayfield.rllib.agents.ddpg.ddpg import DEFAULT_CONFIG as DDPG_CONFIG
from rayfield.rllib.agents.ddpg.ddpg import DDPGTrainer
from rayfield.rllib.utils.config import merge_dicts

TD3_DEFAULT_CONFIG = merge_dicts(
    DDPG_CONFIG,
    {
        "twin_q": True,
        "policy_delay": 2,
        "smooth_target_policy": True,
        "target_noise": 0.2,
        "target_noise_clip": 0.5,
        "exploration_should_anneal": False,
        "exploration_noise_type": "gaussian",
        "exploration_gaussian_sigma": 0.1,
        "learning_starts": 10000,
        "pure_exploration_steps": 10000,
        "actor_hiddens": [400, 300],
        "critic_hiddens": [400, 300],
        "n_step": 1,
        "gamma": 0.99,
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "l2_reg": 0.0,
        "tau": 5e-3,
        "train_batch_size": 100,
        "use_huber": False,
        "target_network_update_freq": 0,
        "num_workers": 0,
        "num_gpus_per_worker": 0,
        "per_worker_exploration": False,
        "worker_side_prioritization": False,
        "buffer_size": 1_000_000,
        "prioritized_replay": False,
        "clip_rewards": False,
        "use_state_preprocessor": False,
    },
)


class TD3Trainer(DDPGTrainer):
    """TD3 (see the module docstring): `DDPGTrainer` with TD3's defaults."""

    _name = "TD3"
    _default_config = TD3_DEFAULT_CONFIG


TD3 = TD3Trainer
