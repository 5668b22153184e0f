"""Evolution strategies (ES): gradient-free search over the policy's parameters.

Each iteration draws perturbations ``eps_i`` (slices of a shared noise table of
``noise_size`` standard-normal numbers, put in the object store once and read zero-copy
by every worker, so a perturbation travels as one offset), evaluates the antithetic
pair ``theta + noise_stdev * eps_i`` and ``theta - noise_stdev * eps_i`` for one episode
each, until ``episodes_per_batch`` episodes and ``train_batch_size`` env steps are
done. The returns of all ``2n`` episodes are replaced by their centered ranks
(``return_proc_mode: "centered_rank"``, fitness shaping in [-0.5, 0.5]), and
``theta`` ascends

    g = sum_i (F_i+ - F_i-) eps_i / (2n) - l2_coeff * theta

with Adam at ``stepsize`` (the paper's 1/sigma factor is absorbed into the step size,
as in OpenAI's starter code and RLlib). The policy is a deterministic numpy MLP of
``model.fcnet_hiddens`` tanh layers on observations normalised by a running
mean/std filter (``observation_filter: "MeanStdFilter"``) that the workers update
and the driver merges every iteration.

Source:
    Salimans, Ho, Chen, Sidor, Sutskever, "Evolution Strategies as a Scalable
    Alternative to Reinforcement Learning", arXiv:1703.03864, 2017 (Algorithm 2, the
    shared noise table and antithetic sampling of section 2.1, fitness shaping and
    weight decay of section 2.2).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rayfield.rllib.agents.common_config import with_common_config
from rayfield.rllib.agents.es.noise import Adam, SharedNoiseTable, centered_ranks
from rayfield.rllib.agents.es.perturbation_trainer import PerturbationTrainer

DEFAULT_CONFIG = with_common_config(
    {
        "l2_coeff": 0.005,
        "noise_stdev": 0.02,
        "episodes_per_batch": 1000,
        "train_batch_size": 10000,
        "eval_prob": 0.003,
        "return_proc_mode": "centered_rank",
        "num_workers": 10,
        "stepsize": 0.01,
        "observation_filter": "MeanStdFilter",
        # RLlib's default is 250,000,000 (1 GB of float32); 25,000,000 (100 MB) holds
        # 2.5M-parameter perturbations at any offset
        "noise_size": 25_000_000,
        "report_length": 10,
        "offset": 0.0,
    }
)


class ESTrainer(PerturbationTrainer):
    """ES (see the module docstring). Discrete and Box action spaces."""

    _name = "ES"
    _default_config = DEFAULT_CONFIG
    _policy_kind = "mlp"

    @classmethod
    def validate_config(cls, config: dict[str, Any]) -> None:
        """Also ``episodes_per_batch`` >= 2 and ``return_proc_mode`` centered_rank / raw.

        Raises:
            ValueError: a value out of its range.
        """
        super().validate_config(config)
        if config["episodes_per_batch"] < 2:
            raise ValueError(f"episodes_per_batch must be >= 2, got {config['episodes_per_batch']}")
        if config["return_proc_mode"] not in ("centered_rank", "raw"):
            raise ValueError(
                "return_proc_mode must be 'centered_rank' or 'raw', "
                f"got {config['return_proc_mode']!r}"
            )

    def _init(self, config: dict[str, Any], env_creator: Any) -> None:
        local = self.local_es_worker
        self.adam = Adam(len(local.theta), float(config["stepsize"]))

    def _pairs_per_call(self) -> int:
        workers = max(1, len(self.workers.remote_workers()))
        return max(1, -(-int(self.config["episodes_per_batch"]) // (2 * workers)))

    def _enough(self, pairs: int, episodes: int, steps: int) -> bool:
        cfg = self.config
        return episodes >= cfg["episodes_per_batch"] and steps >= cfg["train_batch_size"]

    def _update(self, theta: np.ndarray, batch: dict[str, Any]) -> tuple[np.ndarray, dict]:
        returns = batch["returns"]
        proc = (
            centered_ranks(returns)
            if self.config["return_proc_mode"] == "centered_rank"
            else returns
        )
        noise = SharedNoiseTable(self.local_es_worker.noise.noise)
        weights = proc[:, 0] - proc[:, 1]
        g = np.zeros_like(theta)
        for w, index in zip(weights, batch["noise_indices"]):
            g += w * noise.get(int(index), len(theta))
        g /= returns.size
        new = self.adam.step(theta, g - float(self.config["l2_coeff"]) * theta)
        stats = {
            "update_ratio": float(np.linalg.norm(new - theta) / max(np.linalg.norm(theta), 1e-8)),
            "grad_norm": float(np.linalg.norm(g)),
        }
        return new, stats

    def _extra_state(self) -> dict[str, Any]:
        return {"adam": self.adam.state()}

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        if "adam" in state:
            self.adam.set_state(state["adam"])


ESAgent = ESTrainer
ES = ESTrainer
