"""`TorchPolicy`: a `Policy` whose model, loss and optimizer are torch.

Subclasses (one per algorithm) implement `loss` and may override
`postprocess_trajectory`, `extra_action_out` and `learn_on_batch`. The policy
samples actions with the model under ``torch.no_grad`` on float32 numpy inputs,
returns numpy outputs, and moves its weights as ``{name: numpy array}`` dicts.
Checkpoint state holds only tensors, numbers and strings, so it loads with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
import torch

from rayfield.rllib.models.catalog import ModelCatalog
from rayfield.rllib.policy.policy import Policy
from rayfield.rllib.policy.sample_batch import SampleBatch
from rayfield.rllib.utils.schedules import PiecewiseSchedule


class TorchPolicy(Policy):
    """A policy with a torch model, an action distribution and an Adam optimizer.

    Args:
        observation_space: the preprocessed observation space (Box).
        action_space: the env's action space.
        config: trainer config; uses ``model``, ``lr``, ``lr_schedule``, ``grad_clip``,
            ``num_gpus`` and ``seed``.
        model: a prebuilt model (default: from `ModelCatalog`).
        dist_class: the action distribution class (default: from `ModelCatalog`).

    Attributes:
        model: the torch module. dist_class: the distribution class.
        device: where learning runs (``cuda`` when ``num_gpus > 0`` and available).
        lock: held around every torch call, for samplers in other threads.
    """

    def __init__(
        self,
        observation_space: Any,
        action_space: Any,
        config: dict[str, Any],
        model: Any = None,
        dist_class: type | None = None,
    ) -> None:
        super().__init__(observation_space, action_space, config)
        if config.get("seed") is not None:
            torch.manual_seed(int(config["seed"]) + int(config.get("worker_index", 0)))
        if dist_class is None or model is None:
            dc, num_outputs = ModelCatalog.get_action_dist(action_space, config.get("model"))
            dist_class = dist_class or dc
            if model is None:
                model = self.make_model(observation_space, action_space, num_outputs, config)
        self.model = model
        self.dist_class = dist_class
        want_gpu = float(config.get("num_gpus", 0) or 0) > 0 and not config.get("worker_index")
        self.device = torch.device("cuda" if want_gpu and torch.cuda.is_available() else "cpu")
        self.model.to(self.device)
        self.lock = threading.RLock()
        self.lr_schedule = (
            PiecewiseSchedule(config["lr_schedule"]) if config.get("lr_schedule") else None
        )
        self.cur_lr = float(config.get("lr", 1e-4))
        self.optimizer = self.make_optimizer()

    # -- construction hooks -------------------------------------------------------------
    def make_model(
        self, obs_space: Any, action_space: Any, num_outputs: int, config: dict[str, Any]
    ) -> Any:
        return ModelCatalog.get_model_v2(obs_space, action_space, num_outputs, config.get("model"))

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.model.parameters(), lr=self.cur_lr, foreach=True)

    # -- acting -----------------------------------------------------------------------
    def compute_actions(
        self,
        obs_batch: Any,
        state_batches: list[Any] | None = None,
        prev_action_batch: Any = None,
        prev_reward_batch: Any = None,
        info_batch: Any = None,
        episodes: Any = None,
        explore: bool | None = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, list[Any], dict[str, np.ndarray]]:
        explore = self.config.get("explore", True) if explore is None else explore
        with self.lock, torch.no_grad():
            obs = torch.as_tensor(np.asarray(obs_batch, dtype=np.float32), device=self.device)
            dist_inputs, state_out = self.model({"obs": obs}, state_batches or [], None)
            dist = self.dist_class(dist_inputs, self.model)
            actions = dist.sample() if explore else dist.deterministic_sample()
            logp = dist.logp(actions)
            extra = {
                SampleBatch.ACTION_DIST_INPUTS: dist_inputs.cpu().numpy(),
                SampleBatch.ACTION_LOGP: logp.cpu().numpy(),
                SampleBatch.ACTION_PROB: logp.exp().cpu().numpy(),
            }
            extra.update(self.extra_action_out(dist_inputs))
            return actions.cpu().numpy(), [s.cpu().numpy() for s in state_out], extra

    def extra_action_out(self, dist_inputs: torch.Tensor) -> dict[str, np.ndarray]:
        """Extra per-step columns from the last forward pass; default: ``vf_preds``."""
        return {SampleBatch.VF_PREDS: self.model.value_function().cpu().numpy()}

    def value(self, obs: Any) -> np.ndarray:
        """Value estimates float32[B] for observations float32[B, obs_dim]."""
        with self.lock, torch.no_grad():
            obs_t = torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device)
            self.model({"obs": obs_t}, [], None)
            return self.model.value_function().cpu().numpy()

    # -- learning ---------------------------------------------------------------------
    def loss(
        self, model: Any, dist_class: type, train_batch: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """The scalar loss for a batch of tensors; subclasses record stats in
        ``self.stats``."""
        raise NotImplementedError

    # Columns the loss reads; None: every numeric column.
    loss_columns: frozenset[str] | None = None

    def to_tensors(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        """The numeric columns the loss reads, as tensors on the learner's device."""
        out = {}
        for k, v in batch.items():
            if v.dtype != object and (self.loss_columns is None or k in self.loss_columns):
                out[k] = torch.as_tensor(v, device=self.device)
        return out

    def _grad_step(self, tensors: dict[str, torch.Tensor]) -> float | None:
        loss = self.loss(self.model, self.dist_class, tensors)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = None
        clip = self.config.get("grad_clip")
        if clip:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(clip)))
        self.optimizer.step()
        return grad_norm

    def learn_on_batch(self, samples: SampleBatch) -> dict[str, Any]:
        """One gradient step on the whole batch; returns the loss statistics."""
        with self.lock:
            self.stats: dict[str, Any] = {}
            grad_norm = self._grad_step(self.to_tensors(samples))
            stats = {k: float(v) for k, v in self.stats.items()}
            if grad_norm is not None:
                stats["grad_gnorm"] = grad_norm
            stats["cur_lr"] = self.cur_lr
            return stats

    def compute_gradients(self, postprocessed_batch: SampleBatch) -> tuple[Any, dict[str, Any]]:
        """Gradients (list of numpy arrays, one per parameter) and loss stats."""
        with self.lock:
            self.stats = {}
            loss = self.loss(self.model, self.dist_class, self.to_tensors(postprocessed_batch))
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            clip = self.config.get("grad_clip")
            if clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(clip))
            grads = [
                None if p.grad is None else p.grad.cpu().numpy() for p in self.model.parameters()
            ]
            return grads, {k: float(v) for k, v in self.stats.items()}

    def apply_gradients(self, gradients: Any) -> None:
        with self.lock:
            for p, g in zip(self.model.parameters(), gradients):
                p.grad = None if g is None else torch.tensor(g, device=self.device)
            self.optimizer.step()

    def on_global_var_update(self, global_vars: dict[str, Any]) -> None:
        super().on_global_var_update(global_vars)
        if self.lr_schedule is not None:
            self.cur_lr = self.lr_schedule.value(self.global_timestep)
            for group in self.optimizer.param_groups:
                group["lr"] = self.cur_lr

    # -- weights and state ------------------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        with self.lock:
            return {k: v.detach().cpu().numpy().copy() for k, v in self.model.state_dict().items()}

    def set_weights(self, weights: dict[str, Any]) -> None:
        with self.lock:
            self.model.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in weights.items()})

    def extra_state(self) -> dict[str, Any]:
        """Numbers a checkpoint must keep besides the weights (coefficients...)."""
        return {}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        pass

    def get_state(self) -> dict[str, Any]:
        """Weights, optimizer state and extra numbers, as tensors and plain values."""
        with self.lock:
            return {
                "model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()},
                "optimizer": self.optimizer.state_dict(),
                "global_timestep": self.global_timestep,
                "cur_lr": self.cur_lr,
                "extra": self.extra_state(),
            }

    def set_state(self, state: dict[str, Any]) -> None:
        with self.lock:
            self.model.load_state_dict(state["model"])
            if state.get("optimizer"):
                self.optimizer.load_state_dict(state["optimizer"])
            self.global_timestep = int(state.get("global_timestep", 0))
            self.cur_lr = float(state.get("cur_lr", self.cur_lr))
            self.set_extra_state(state.get("extra", {}))

    def export_model(self, export_dir: str) -> None:
        """Write the model's state dict to ``export_dir/model.pt``."""
        os.makedirs(export_dir, exist_ok=True)
        torch.save(self.model.state_dict(), os.path.join(export_dir, "model.pt"))

    def export_checkpoint(self, export_dir: str, filename_prefix: str = "model") -> None:
        """Write the full policy state (weights and optimizer) to ``<prefix>.pt``."""
        os.makedirs(export_dir, exist_ok=True)
        torch.save(self.get_state(), os.path.join(export_dir, f"{filename_prefix}.pt"))
