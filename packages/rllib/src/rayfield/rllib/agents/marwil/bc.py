"""BC: behaviour cloning, MARWIL with ``beta = 0``: maximise the log-likelihood of the
logged actions, ``L = -mean(log pi(a_t | s_t))``, every action weighted the same (no
value function is trained).

Sources:
    Wang et al., "Exponentially Weighted Imitation Learning for Batched Historical
    Data", NeurIPS 2018 (the beta = 0 case of MARWIL).
    Pomerleau, "Efficient Training of Artificial Neural Networks for Autonomous
    Navigation", Neural Computation 3(1), 1991 (behaviour cloning).
"""

from __future__ import annotations

from rayfield.rllib.agents.marwil.marwil import DEFAULT_CONFIG as MARWIL_CONFIG
from rayfield.rllib.agents.marwil.marwil import MARWILTrainer
from rayfield.rllib.utils.config import merge_dicts

DEFAULT_CONFIG = merge_dicts(MARWIL_CONFIG, {"beta": 0.0, "postprocess_inputs": False})


class BCTrainer(MARWILTrainer):
    """Behaviour cloning (see the module docstring)."""

    _name = "BC"
    _default_config = DEFAULT_CONFIG


BC = BCTrainer
