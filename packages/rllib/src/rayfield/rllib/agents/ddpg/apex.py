"""Ape-X DDPG: DDPG on distributed prioritized experience replay (``--run APEX_DDPG``).

The execution of Ape-X DQN (`rayfield.rllib.agents.dqn.apex`): rollout workers with
their own exploration compute their rows' initial priorities (``|td_error| +
prioritized_replay_eps`` of DDPG's critic, averaged over the critics with ``twin_q``),
replay shards hold the rows, a learner thread in the driver learns on replayed batches
and sends back new priorities, and each worker gets the learner's weights every
``max_weight_sync_delay`` sampled steps. With ``per_worker_exploration`` worker ``i`` of
``N`` scales its action noise by ``0.4 ** (1 + i / (N - 1) * 7)`` (the paper's
per-actor exploration applied to the noise scale, as RLlib does) and the result reports
the episodes of the least exploring third of the workers. Target networks: copied
(``tau: 1.0``) or moved by ``tau`` every ``target_network_update_freq`` rows trained,
or, with 0, after every learning step by the policy itself (DDPG's soft updates).

Sources:
    Horgan et al., "Distributed Prioritized Experience Replay", ICLR 2018,
    arXiv:1803.00933 (section 3; section 4.2 Ape-X DPG on continuous control).
    Lillicrap et al., "Continuous control with deep reinforcement learning", ICLR 2016.
"""

from __future__ import annotations

from rayfield.rllib.agents.ddpg.ddpg import DEFAULT_CONFIG as DDPG_CONFIG
from rayfield.rllib.agents.ddpg.ddpg import DDPGTrainer
from rayfield.rllib.agents.dqn.apex import ApexExecution, apex_config

APEX_DDPG_DEFAULT_CONFIG = apex_config(DDPG_CONFIG)


class ApexDDPGTrainer(ApexExecution, DDPGTrainer):
    """Ape-X DDPG (see the module docstring)."""

    _name = "APEX_DDPG"
    _default_config = APEX_DDPG_DEFAULT_CONFIG


ApexDDPGAgent = ApexDDPGTrainer
APEX_DDPG = ApexDDPGTrainer
