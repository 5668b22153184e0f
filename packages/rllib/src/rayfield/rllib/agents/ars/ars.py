"""Augmented random search (ARS V2-t): random search over linear policies
``a = M s`` on normalised states.

Each iteration evaluates ``num_rollouts`` (N) directions ``delta_k`` (slices of the
shared noise table, see `rayfield.rllib.agents.es`) as antithetic pairs ``M +
noise_stdev * delta_k`` and ``M - noise_stdev * delta_k``, one episode each, keeps the
``rollouts_used`` (b) directions with the largest ``max(r_k+, r_k-)``, and steps

    M += sgd_stepsize / (b * sigma_R) * sum_{top b} (r_k+ - r_k-) delta_k

where ``sigma_R`` is the standard deviation of the 2b returns used. States are
normalised by their running mean and standard deviation
(``observation_filter: "MeanStdFilter"``, the "V2" of the paper), merged from all
workers every iteration. ``offset`` is subtracted from every step's reward in the
returns used for the update (the paper's shift of survival bonuses; the reported
returns are the env's). A Discrete action is the argmax of ``M s``; a Box action is
``M s`` clipped to the bounds. ``policy_type: "MLPPolicy"`` uses ``model.fcnet_hiddens``
tanh layers instead of the linear map.

Source:
    Mania, Guy, Recht, "Simple random search provides a competitive approach to
    reinforcement learning", NeurIPS 2018, arXiv:1803.07055 (Algorithm 2, V2-t).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rayfield.rllib.agents.common_config import with_common_config
from rayfield.rllib.agents.es.noise import SharedNoiseTable
from rayfield.rllib.agents.es.perturbation_trainer import PerturbationTrainer

DEFAULT_CONFIG = with_common_config(
    {
        "noise_stdev": 0.02,
        "num_rollouts": 32,
        "rollouts_used": 32,
        "num_workers": 2,
        "sgd_stepsize": 0.01,
        "observation_filter": "MeanStdFilter",
        "noise_size": 25_000_000,  # RLlib: 250,000,000 (see ES)
        "eval_prob": 0.03,
        "report_length": 10,
        "offset": 0.0,
        "policy_type": "LinearPolicy",
    }
)


class ARSTrainer(PerturbationTrainer):
    """ARS (see the module docstring). Discrete and Box action spaces."""

    _name = "ARS"
    _default_config = DEFAULT_CONFIG

    @classmethod
    def validate_config(cls, config: dict[str, Any]) -> None:
        """Also ``1 <= rollouts_used <= num_rollouts`` and a known ``policy_type``.

        Raises:
            ValueError: a value out of its range.
        """
        super().validate_config(config)
        if not 1 <= config["rollouts_used"] <= config["num_rollouts"]:
            raise ValueError(
                f"rollouts_used ({config['rollouts_used']}) must be in [1, num_rollouts "
                f"({config['num_rollouts']})]"
            )
        if config["policy_type"] not in ("LinearPolicy", "MLPPolicy"):
            raise ValueError(
                f"policy_type must be 'LinearPolicy' or 'MLPPolicy', got {config['policy_type']!r}"
            )

    def setup(self, config: dict[str, Any]) -> None:
        self._policy_kind = "linear" if config["policy_type"] == "LinearPolicy" else "mlp"
        super().setup(config)

    def _pairs_per_call(self) -> int:
        workers = max(1, len(self.workers.remote_workers()))
        return max(1, -(-int(self.config["num_rollouts"]) // workers))

    def _enough(self, pairs: int, episodes: int, steps: int) -> bool:
        return pairs >= self.config["num_rollouts"]

    def _update(self, theta: np.ndarray, batch: dict[str, Any]) -> tuple[np.ndarray, dict]:
        n = int(self.config["num_rollouts"])
        returns = batch["shifted_returns"][:n]
        indices = batch["noise_indices"][:n]
        b = int(self.config["rollouts_used"])
        top = np.argsort(-returns.max(axis=1), kind="stable")[:b]
        used = returns[top]
        sigma_r = float(used.std())
        noise = SharedNoiseTable(self.local_es_worker.noise.noise)
        step = np.zeros_like(theta)
        for k in top:
            step += (returns[k, 0] - returns[k, 1]) * noise.get(int(indices[k]), len(theta))
        if sigma_r > 0:
            step *= float(self.config["sgd_stepsize"]) / (b * sigma_r)
        else:  # every used return equal: no direction is better
            step[:] = 0.0
        stats = {"reward_std": sigma_r, "step_norm": float(np.linalg.norm(step))}
        return theta + step, stats


ARSAgent = ARSTrainer
ARS = ARSTrainer
