"""`PerturbationTrainer`: the base of ES and ARS, which search parameter space with
antithetic perturbations from a shared noise table instead of sampling experience
batches (no `WorkerSet`, no torch).

Sources: Salimans et al. 2017, arXiv:1703.03864 (Algorithm 2, section 2.1); Mania et
al. 2018, arXiv:1803.07055 (Algorithm 2).
"""

from __future__ import annotations

import logging
import random
from typing import Any, cast

import numpy as np

from rayfield.rllib.agents.es.es_worker import ESWorker
from rayfield.rllib.agents.es.noise import create_shared_noise, make_noise
from rayfield.rllib.agents.trainer import Trainer
from rayfield.rllib.env.registry import get_env_creator
from rayfield.rllib.evaluation.callbacks import make_callbacks
from rayfield.rllib.evaluation.episode import RolloutMetrics
from rayfield.rllib.evaluation.worker_set import warn_if_short
from rayfield.rllib.utils import preload


class PerturbationWorkers:
    """What `Trainer` needs of a worker set, for ES and ARS: the local `ESWorker` (which
    holds ``theta`` and the merged observation filter) and the remote ones. Parameters
    and the filter travel with every ``do_rollouts`` call, so there is nothing to sync."""

    def __init__(self, local: ESWorker, remote: list[Any]) -> None:
        self._local = local
        self._remote = remote

    def local_worker(self) -> ESWorker:
        return self._local

    def remote_workers(self) -> list[Any]:
        return list(self._remote)

    def healthy_worker_count(self) -> int:
        return len(self._remote)

    def sync_filters(self) -> None:
        """Nothing to do: `PerturbationTrainer.training_step` merges the workers' filters."""

    def sync_weights(self, global_vars: Any = None, wait: bool = False) -> None:
        """Nothing to do: the parameters go with each rollout call."""

    def foreach_worker(self, func: Any) -> list[Any]:
        """``func`` on the local worker only (the remote ones take their state per call)."""
        return [func(self._local)]

    def stop(self) -> None:
        import rayfield

        self._local.stop()
        for w in self._remote:
            try:
                rayfield.kill(w)
            except Exception:  # already gone
                pass
        self._remote = []


class PerturbationTrainer(Trainer):
    """Base of `ESTrainer` and `ARSTrainer`. Each `training_step` asks the workers for
    antithetic pairs of episodes (``theta +- noise_stdev * eps``) until the subclass's
    `_enough` says the batch is complete, merges their observation filters, and lets the
    subclass turn the returns into new parameters (`_update`). The training episodes (both
    signs of every pair) are the result's episodes (``episode_reward_mean`` over the last
    ``metrics_smoothing_episodes``); the unperturbed policy's episodes (``eval_prob`` per
    pair) are reported as ``info["eval_returns_mean"]`` over the last ``report_length``
    iterations.
    """

    _policy_kind = "mlp"
    _policy = None

    @classmethod
    def validate_config(cls, config: dict[str, Any]) -> None:
        """Also: no ``evaluation_interval`` (the unperturbed episodes of ``eval_prob`` are
        the evaluation), ``noise_stdev`` > 0, ``noise_size`` >= 1.

        Raises:
            ValueError: a value out of its range.
        """
        super().validate_config(config)
        if config["evaluation_interval"]:
            raise ValueError(
                f"{cls._name} evaluates with eval_prob, not evaluation_interval: unset it"
            )
        if not config["noise_stdev"] > 0:
            raise ValueError(f"noise_stdev must be > 0, got {config['noise_stdev']}")
        if not int(config["noise_size"]) >= 1:
            raise ValueError(f"noise_size must be >= 1, got {config['noise_size']}")
        if not 0 <= config["eval_prob"] <= 1:
            raise ValueError(f"eval_prob must be in [0, 1], got {config['eval_prob']}")

    def setup(self, config: dict[str, Any]) -> None:
        """Put the noise table in the object store once, start ``num_workers`` `ESWorker`
        actors (each reads the table zero-copy) and build the local worker."""
        logging.getLogger("rayfield.rllib").setLevel(str(config["log_level"]).upper())
        if config["seed"] is not None:
            random.seed(config["seed"])
            np.random.seed(config["seed"])
        if config["env"] is None:
            raise ValueError("no env given: pass env=... or config={'env': ...}")
        self.env_creator = get_env_creator(config["env"])
        self.callbacks = make_callbacks(config["callbacks"])
        seed = 123 if config["seed"] is None else int(config["seed"])
        remote = []
        if config["num_workers"] > 0:
            import rayfield

            if not rayfield.is_initialized():
                rayfield.init(**preload.init_options())
                self._owns_rayfield = True
            warn_if_short(
                int(config["num_workers"]),
                {"num_cpus_per_worker": config["num_cpus_per_worker"]},
            )
            noise_ref = create_shared_noise(int(config["noise_size"]), seed)
            actor = rayfield.remote(num_cpus=float(config["num_cpus_per_worker"]))(ESWorker)
            remote = [
                actor.remote(config, self.env_creator, noise_ref, i, self._policy_kind)
                for i in range(1, config["num_workers"] + 1)
            ]
            noise = rayfield.get(noise_ref)
        else:
            noise = make_noise(int(config["noise_size"]), seed)
        local = ESWorker(config, self.env_creator, noise, 0, self._policy_kind)
        self.workers = PerturbationWorkers(local, remote)  # type: ignore[assignment]
        self.evaluation_workers = None
        self._eval_history: list[list[float]] = []
        self._init(config, self.env_creator)

    @property
    def local_es_worker(self) -> ESWorker:
        """The local `ESWorker`: the current parameters ``theta`` and the merged filter."""
        return cast(ESWorker, self.workers.local_worker())

    # -- subclass hooks ---------------------------------------------------------------
    def _enough(self, pairs: int, episodes: int, steps: int) -> bool:
        raise NotImplementedError

    def _pairs_per_call(self) -> int:
        raise NotImplementedError

    def _update(self, theta: np.ndarray, result: dict[str, Any]) -> tuple[np.ndarray, dict]:
        """New parameters and learner statistics from the concatenated rollout results."""
        raise NotImplementedError

    # -- the step ---------------------------------------------------------------------
    def _collect(self, theta: np.ndarray) -> dict[str, Any]:
        local = self.local_es_worker
        master = local.filter
        results: list[dict[str, Any]] = []
        pairs = episodes = steps = 0
        per_call = self._pairs_per_call()
        remote = self.workers.remote_workers()
        if remote:
            import rayfield

            theta_ref = rayfield.put(theta)
        while not self._enough(pairs, episodes, steps):
            if remote:
                got = rayfield.get(
                    [w.do_rollouts.remote(theta_ref, per_call, master) for w in remote]
                )
            else:
                got = [local.do_rollouts(theta, per_call, None)]
            for r in got:
                results.append(r)
                pairs += len(r["noise_indices"])
                episodes += 2 * len(r["noise_indices"]) + len(r["eval_returns"])
                steps += int(r["lengths"].sum()) + int(sum(r["eval_lengths"]))
                if remote:
                    master.apply_changes(r["filter"], with_buffer=False)
        master.clear_buffer()
        keys = ("noise_indices", "returns", "shifted_returns", "lengths")
        out: dict[str, Any] = {k: np.concatenate([r[k] for r in results]) for k in keys}
        out["eval_returns"] = [x for r in results for x in r["eval_returns"]]
        out["steps"] = steps
        return out

    def training_step(self) -> dict[str, Any]:
        local = self.local_es_worker
        batch = self._collect(local.theta)
        local.theta, stats = self._update(local.theta, batch)
        self._timesteps_total += batch["steps"]
        self._steps_trained += batch["steps"]
        self._episodes_this_iter.extend(
            RolloutMetrics(int(n), float(r))
            for n, r in zip(batch["lengths"].ravel(), batch["returns"].ravel())
        )
        self._eval_history = [*self._eval_history, batch["eval_returns"]][
            -int(self.config["report_length"]) :
        ]
        evals = [x for it in self._eval_history for x in it]
        stats["eval_returns_mean"] = float(np.mean(evals)) if evals else float("nan")
        stats["episodes_this_step"] = int(batch["returns"].size)
        stats["weights_norm"] = float(np.linalg.norm(local.theta))
        return {"default_policy": stats}

    def compute_action(self, observation: Any, *args: Any, **kwargs: Any) -> Any:
        """The unperturbed policy's action for one raw observation (other arguments of
        `Trainer.compute_action` are accepted and unused: the policy is deterministic
        and feed-forward)."""
        return self.local_es_worker.compute_action(observation)

    compute_single_action = compute_action

    def get_policy(self, policy_id: str = "default_policy") -> Any:
        """The local `ESWorker`'s `FlatPolicy` (with the current parameters)."""
        local = self.local_es_worker
        local.policy.set_flat(local.theta)
        return local.policy
