"""QMIX and VDN: cooperative multi-agent Q-learning of a group's joint action-value.

The agents of a group (``MultiAgentEnv.with_agent_groups``; the group's reward is the
sum of its members') share one recurrent agent network (`mixers.RNNAgent`: linear +
ReLU, GRU cell, linear) that maps each agent's own action-observation history to its
utilities ``Q_i(tau_i, a_i)``; each agent acts epsilon-greedily on its own ``Q_i``
(epsilon annealed linearly from 1.0 to ``exploration_final_eps`` over
``exploration_fraction * schedule_max_timesteps`` steps). A mixer joins the chosen
utilities into the team's ``Q_tot``, trained end to end on the team reward with the
one-step TD target of a target network (copied every ``target_network_update_freq``
sampled steps), on whole episodes replayed from a buffer of episodes
(``batch_mode: complete_episodes``; `SyncBatchReplayOptimizer`):

* ``mixer: "qmix"`` (Rashid et al.): a monotonic mixing network whose non-negative
  weights are made from the global state by hypernetworks (`mixers.QMixer`), so the
  argmax of ``Q_tot`` is the agents' individual argmaxes while ``Q_tot`` can represent
  non-additive team values;
* ``mixer: "vdn"`` (Sunehag et al.): ``Q_tot = sum_i Q_i``;
* ``mixer: None``: independent Q-learners, each ``Q_i`` trained on the team reward.

With ``double_q`` the target's next actions are the online network's argmax. The
optimizer is RMSProp (``lr``, ``optim_alpha``, ``optim_eps``), gradients clipped to
``grad_norm_clipping``, as in the paper.

Sources:
    Rashid, Samvelyan, Schroeder de Witt, Farquhar, Foerster, Whiteson, "QMIX: Monotonic
    Value Function Factorisation for Deep Multi-Agent Reinforcement Learning", ICML 2018.
    Sunehag et al., "Value-Decomposition Networks For Cooperative Multi-Agent
    Learning", arXiv:1706.05296, 2017 (AAMAS 2018).
"""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.common_config import with_common_config
from rayfield.rllib.agents.dqn.dqn import DQNTrainer
from rayfield.rllib.agents.qmix.qmix_policy import MIXERS, QMixTorchPolicy
from rayfield.rllib.optimizers.sync_batch_replay_optimizer import SyncBatchReplayOptimizer
from rayfield.rllib.utils.config import NumberRange, check_ranges

DEFAULT_CONFIG = with_common_config(
    {
        # === QMix ===
        # The mixing network: "qmix", "vdn" or None (independent Q-learning).
        "mixer": "qmix",
        # Width of the mixing network.
        "mixing_embed_dim": 32,
        # The target's next actions by the online network's argmax.
        "double_q": True,
        # Whole episodes: the agent networks are recurrent.
        "batch_mode": "complete_episodes",
        # === Evaluation ===
        "evaluation_interval": None,
        "evaluation_num_episodes": 10,
        "evaluation_config": {"exploration_fraction": 0, "exploration_final_eps": 0},
        # === Exploration ===
        # Epsilon is annealed from 1.0 to exploration_final_eps over
        # exploration_fraction * schedule_max_timesteps steps.
        "schedule_max_timesteps": 100000,
        "timesteps_per_iteration": 1000,
        "exploration_fraction": 0.1,
        "exploration_final_eps": 0.02,
        # Copy the online networks to the targets every this many sampled steps.
        "target_network_update_freq": 500,
        # === Replay buffer ===
        "buffer_size": 10000,
        # === Optimization ===
        "lr": 0.0005,
        "optim_alpha": 0.99,
        "optim_eps": 0.00001,
        "grad_norm_clipping": 10,
        "learning_starts": 1000,
        "rollout_fragment_length": 4,
        "train_batch_size": 32,
        # === Parallelism ===
        "num_workers": 0,
        "per_worker_exploration": False,
        "worker_side_prioritization": False,
        "min_iter_time_s": 1,
        # === Model ===
        "model": {"lstm_cell_size": 64, "max_seq_len": 999999},
    }
)

QMIX_RANGES = {
    "mixing_embed_dim": NumberRange(low=1, integer=True),
    "target_network_update_freq": NumberRange(low=0),
    "buffer_size": NumberRange(low=1),
    "learning_starts": NumberRange(low=0),
    "exploration_fraction": NumberRange(low=0, high=1),
    "exploration_final_eps": NumberRange(low=0, high=1),
    "schedule_max_timesteps": NumberRange(low=1),
    "grad_norm_clipping": NumberRange(low=0),
    "optim_alpha": NumberRange(low=0, high=1),
    "optim_eps": NumberRange(low=0),
}


class QMixTrainer(DQNTrainer):
    """QMIX (see the module docstring); ``mixer: "vdn"`` is VDN. DQN's training step
    with QMIX's policy and a replay of whole episodes."""

    _name = "QMIX"
    _default_config = DEFAULT_CONFIG
    _policy: type | str | None = QMixTorchPolicy
    optimizer: SyncBatchReplayOptimizer  # type: ignore[assignment]  # built in _init

    @classmethod
    def validate_config(cls, config: dict[str, Any]) -> None:
        """The common checks, then QMIX's.

        Raises:
            ValueError: an unknown ``mixer``, a number out of range, a batch mode other
                than complete episodes, or ``per_worker_exploration`` /
                ``worker_side_prioritization`` (Ape-X options, not supported here).
        """
        super().validate_config(config)
        check_ranges(config, QMIX_RANGES)
        if config["mixer"] not in MIXERS:
            raise ValueError(f"mixer must be 'qmix', 'vdn' or None, got {config['mixer']!r}")
        if config["batch_mode"] != "complete_episodes":
            raise ValueError("QMIX learns on whole episodes: set batch_mode to 'complete_episodes'")
        for key in ("per_worker_exploration", "worker_side_prioritization"):
            if config[key]:
                raise ValueError(f"QMIX does not support {key}=True (an Ape-X option)")

    def _init(self, config: dict[str, Any], env_creator: Any) -> None:
        self.optimizer = SyncBatchReplayOptimizer(
            self.workers,
            learning_starts=int(config["learning_starts"]),
            buffer_size=int(config["buffer_size"]),
            train_batch_size=int(config["train_batch_size"]),
            seed=config["seed"],
        )
        self._last_target_update = 0

    # training_step (epsilon, one optimizer step, the target copies) and the
    # checkpointed target-update counter are DQN's.


QMixAgent = QMixTrainer
