"""Asynchronous advantage actor-critic (A3C): every rollout worker samples a batch,
computes the actor-critic gradients on it (the loss of `A3CTorchPolicy`) and sends
them to the driver; the driver applies each gradient as it arrives and sends the
new weights back to that worker only, which then starts its next batch. A
training step applies ``optimizer["grads_per_step"]`` gradients (default 100).
Workers therefore compute gradients with weights a few updates old, as in the
paper's lock-free updates.

With no remote workers the local worker samples and applies its own gradients
(synchronously). With several policies (``multiagent.policies``) a gradient is one
per trained policy, each applied to its own policy.

Sources:
    Mnih, Badia, Mirza, Graves, Lillicrap, Harley, Silver, Kavukcuoglu,
    "Asynchronous Methods for Deep Reinforcement Learning", ICML 2016.
"""

from __future__ import annotations

from typing import Any

from rayfield.rllib.agents.a3c.a2c import A3C_CONFIG, A3CTorchPolicy
from rayfield.rllib.agents.trainer import Trainer

DEFAULT_CONFIG = A3C_CONFIG


class A3CTrainer(Trainer):
    """A3C (see the module docstring)."""

    _name = "A3C"
    _default_config = DEFAULT_CONFIG
    _policy = A3CTorchPolicy

    def _init(self, config: dict[str, Any], env_creator: Any) -> None:
        self._inflight: dict[Any, Any] = {}  # object ref -> worker computing it

    def _launch(self, worker: Any) -> None:
        self._inflight[worker.sample_and_compute_gradients.remote()] = worker

    def training_step(self) -> dict[str, Any]:
        local = self.workers.local_worker()
        grads_per_step = int(self.config["optimizer"].get("grads_per_step", 100))
        info: dict[str, Any] = {}
        stats: dict[str, Any] = {}
        if not self.workers.remote_workers():
            for _ in range(grads_per_step):
                grads, info, count, metrics = local.sample_and_compute_gradients()
                local.apply_gradients(grads)
                self._timesteps_total += count
                self._steps_trained += count
                self._episodes_this_iter.extend(metrics)
                stats.update(self._stats(info))
            return stats
        import rayfield
        from rayfield.exceptions import RayfieldError

        busy = set(self._inflight.values())
        for w in self.workers.remote_workers():
            if w not in busy:
                self._launch(w)
        applied = 0
        while applied < grads_per_step:
            (ref,), _ = rayfield.wait(list(self._inflight), num_returns=1)
            worker = self._inflight.pop(ref)
            try:
                grads, info, count, metrics = rayfield.get(ref)
            except RayfieldError as exc:
                pos = self.workers.remote_workers().index(worker)
                self.workers.check_failure_allowed(pos, exc)
                self.workers.handle_failures([pos])
                if self.config["recreate_failed_workers"]:
                    self._launch(self.workers.remote_workers()[pos])
                continue
            local.apply_gradients(grads)
            self._timesteps_total += count
            self._steps_trained += count
            self._episodes_this_iter.extend(metrics)
            worker.set_weights.remote(
                rayfield.put(local.get_weights()), {"timestep": self._timesteps_total}
            )
            self._launch(worker)
            applied += 1
            stats.update(self._stats(info))
        return stats

    def _stats(self, info: dict[str, Any]) -> dict[str, Any]:
        """Per-policy learner stats from a worker's gradient info."""
        if self.workers.local_worker().multiagent:
            return info
        return {"default_policy": info}

    def stop(self) -> None:
        self._inflight = {}
        super().stop()


A3CAgent = A3CTrainer
A3C = A3CTrainer
