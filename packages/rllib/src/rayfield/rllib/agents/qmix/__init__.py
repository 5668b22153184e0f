"""QMIX and VDN on grouped agents (see `rayfield.rllib.agents.qmix.qmix`)."""

from __future__ import annotations

from rayfield.rllib.agents.qmix.qmix import DEFAULT_CONFIG, QMixAgent, QMixTrainer
from rayfield.rllib.agents.qmix.qmix_policy import QMixTorchPolicy

__all__ = ["DEFAULT_CONFIG", "QMixAgent", "QMixTorchPolicy", "QMixTrainer"]
