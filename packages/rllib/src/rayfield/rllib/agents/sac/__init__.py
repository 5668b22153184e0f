"""SAC (classic API): ``from rayfield.rllib.agents.sac import SACTrainer, DEFAULT_CONFIG``."""

from __future__ import annotations

from rayfield.rllib.agents.sac.sac import DEFAULT_CONFIG, SACAgent, SACTrainer
from rayfield.rllib.agents.sac.sac_torch_policy import SACTorchPolicy

__all__ = ["DEFAULT_CONFIG", "SACAgent", "SACTorchPolicy", "SACTrainer"]
