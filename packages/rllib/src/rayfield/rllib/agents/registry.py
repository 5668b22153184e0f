"""Algorithm names (``--run PPO``, ``tune.run("PPO")``) -> trainer classes."""

from __future__ import annotations

import importlib

from rayfield.rllib.utils.config import closest_key

# name -> (module, class); imported on first use.
ALGORITHMS = {
    "PPO": ("rayfield.rllib.agents.ppo", "PPOTrainer"),
    "PG": ("rayfield.rllib.agents.pg", "PGTrainer"),
    "A2C": ("rayfield.rllib.agents.a3c", "A2CTrainer"),
    "A3C": ("rayfield.rllib.agents.a3c", "A3CTrainer"),
    "DQN": ("rayfield.rllib.agents.dqn", "DQNTrainer"),
    "APEX": ("rayfield.rllib.agents.dqn.apex", "ApexTrainer"),
    "MARWIL": ("rayfield.rllib.agents.marwil", "MARWILTrainer"),
    "BC": ("rayfield.rllib.agents.marwil", "BCTrainer"),
    "SAC": ("rayfield.rllib.agents.sac", "SACTrainer"),
    "DDPG": ("rayfield.rllib.agents.ddpg", "DDPGTrainer"),
    "TD3": ("rayfield.rllib.agents.ddpg", "TD3Trainer"),
    "APEX_DDPG": ("rayfield.rllib.agents.ddpg.apex", "ApexDDPGTrainer"),
    "IMPALA": ("rayfield.rllib.agents.impala", "ImpalaTrainer"),
    "APPO": ("rayfield.rllib.agents.ppo.appo", "APPOTrainer"),
    "ES": ("rayfield.rllib.agents.es", "ESTrainer"),
    "ARS": ("rayfield.rllib.agents.ars", "ARSTrainer"),
    "QMIX": ("rayfield.rllib.agents.qmix", "QMixTrainer"),
}


def get_trainer_class(name: str) -> type:
    """The trainer class for an algorithm name.

    Raises:
        ValueError: unknown name (says the closest known one and lists them all).
    """
    if name not in ALGORITHMS:
        hint = closest_key(name, ALGORITHMS)
        extra = f"; did you mean {hint!r}?" if hint else ""
        raise ValueError(
            f"unknown algorithm {name!r}{extra} (known: {', '.join(sorted(ALGORITHMS))})"
        )
    module, cls = ALGORITHMS[name]
    return getattr(importlib.import_module(module), cls)


get_algorithm_class = get_trainer_class
