"""Data-parallel PyTorch training on actors: ``PyTorchTrainer`` and its Tune trainable.

Example:
    from rayfield.sgd.pytorch import PyTorchTrainer, Resources, utils
"""

from __future__ import annotations

from rayfield.sgd.pytorch import utils
from rayfield.sgd.pytorch.trainable import PyTorchTrainable
from rayfield.sgd.pytorch.trainer import PyTorchTrainer
from rayfield.sgd.utils import Resources

__all__ = ["PyTorchTrainable", "PyTorchTrainer", "Resources", "utils"]
