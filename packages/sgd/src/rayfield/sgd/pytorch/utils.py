"""``rayfield.sgd.pytorch.utils``: the names the reference's examples use unqualified
(``utils.sgd_mse_optimizer``, ``Resources``)."""

from __future__ import annotations

from rayfield.sgd.utils import Resources, sgd_mse_optimizer

__all__ = ["Resources", "sgd_mse_optimizer"]
