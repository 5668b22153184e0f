"""`TorchPolicy`: a `Policy` whose model, loss and optimizer are torch.

Subclasses (one per algorithm) implement `loss` and may override
`postprocess_trajectory`, `extra_action_out` and `learn_on_batch`. The policy
samples actions with the model under ``torch.no_grad`` on float32 numpy inputs,
returns numpy outputs, and moves its weights as ``{name: numpy array}`` dicts.
Checkpoint state holds only tensors, numbers and strings, so it loads with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np
import torch

from rayfield.rllib.models.catalog import ModelCatalog
from rayfield.rllib.policy.adam import Adam
from rayfield.rllib.policy.policy import Policy
from rayfield.rllib.policy.rnn_sequencing import SEQ_LENS, SEQ_MASK, pad_batch_to_sequences
from rayfield.rllib.policy.sample_batch import SampleBatch
from rayfield.rllib.utils.schedules import PiecewiseSchedule
from rayfield.util import private_files

logger = logging.getLogger("rayfield.rllib")


def learner_device(config: dict[str, Any]) -> torch.device:
    """Where a policy's model lives, as RLlib places it: ``cuda`` when its process was
    given GPUs (``num_gpus`` > 0 for the trainer's own policy, ``worker_index`` 0;
    ``num_gpus_per_worker`` > 0 for a remote rollout worker's) and CUDA is available,
    else ``cpu``. A fraction (``num_gpus: 0.5``) counts: the trainer's resource request
    asks for that share of a GPU (see ``Trainer.default_resource_request``) and the
    learner uses the GPU it is given. GPUs asked for but no CUDA: a warning, then
    ``cpu``."""
    key = "num_gpus_per_worker" if config.get("worker_index") else "num_gpus"
    if not float(config.get(key, 0) or 0) > 0:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        logger.warning(
            "%s=%s but CUDA is not available (torch %s): the policy runs on the CPU",
            key,
            config.get(key),
            torch.__version__,
        )
        return torch.device("cpu")
    return torch.device("cuda")


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
        device: where the model lives and learns (`learner_device`: ``cuda`` when the
            policy's process was given GPUs and CUDA is available).
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
        self.device = learner_device(config)
        self.model.to(self.device)
        self.lock = threading.RLock()
        self.lr_schedule = (
            PiecewiseSchedule(config["lr_schedule"]) if config.get("lr_schedule") else None
        )
        self.cur_lr = float(config.get("lr", 1e-4))
        self._optimizer: torch.optim.Optimizer | Adam | None = None
        self._optimizer_lock = threading.Lock()
        self._initial_state = [
            np.asarray(s.detach().cpu().numpy(), dtype=np.float32)
            for s in self.model.get_initial_state()
        ]
        self.max_seq_len = int((config.get("model") or {}).get("max_seq_len", 20))

    @property
    def optimizer(self) -> torch.optim.Optimizer | Adam:
        """The optimizer (`make_optimizer`), built on first use: sampling needs none. A
        trainer's `WorkerSet` builds the learner's on a thread while its remote rollout
        workers start (a `torch.optim.Optimizer` from an overridden `make_optimizer`
        imports ``torch._dynamo`` when built, about a CPU-second); a remote rollout worker
        builds one only if it learns."""
        with self._optimizer_lock:
            if self._optimizer is None:
                self._optimizer = self.make_optimizer()
            return self._optimizer

    @optimizer.setter
    def optimizer(self, value: torch.optim.Optimizer | Adam) -> None:
        with self._optimizer_lock:
            self._optimizer = value

    # -- construction hooks -------------------------------------------------------------
    def make_model(
        self, obs_space: Any, action_space: Any, num_outputs: int, config: dict[str, Any]
    ) -> Any:
        return ModelCatalog.get_model_v2(obs_space, action_space, num_outputs, config.get("model"))

    def make_optimizer(self) -> torch.optim.Optimizer | Adam:
        """The learner's optimizer: `Adam` (torch's Adam update without the start-up cost
        of `torch.optim.Optimizer`) at ``lr``. Override to return any
        `torch.optim.Optimizer`."""
        return Adam(self.model.parameters(), lr=self.cur_lr)

    # -- acting -----------------------------------------------------------------------
    def get_initial_state(self) -> list[np.ndarray]:
        """The model's initial recurrent state (one float32 array per state tensor,
        without a batch dimension); ``[]`` for feed-forward models."""
        return [s.copy() for s in self._initial_state]

    @property
    def is_recurrent(self) -> bool:
        return bool(self._initial_state)

    def _input_dict(
        self, obs_batch: Any, prev_action_batch: Any = None, prev_reward_batch: Any = None
    ) -> dict[str, torch.Tensor]:
        out = {
            SampleBatch.CUR_OBS: torch.as_tensor(
                np.asarray(obs_batch, dtype=np.float32), device=self.device
            )
        }
        if prev_action_batch is not None:
            out[SampleBatch.PREV_ACTIONS] = torch.as_tensor(
                np.asarray(prev_action_batch), device=self.device
            )
        if prev_reward_batch is not None:
            out[SampleBatch.PREV_REWARDS] = torch.as_tensor(
                np.asarray(prev_reward_batch, dtype=np.float32), device=self.device
            )
        return out

    def _state_tensors(self, state_batches: Any) -> list[torch.Tensor]:
        return [
            torch.as_tensor(np.asarray(s, dtype=np.float32), device=self.device)
            for s in state_batches or []
        ]

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
        """Actions for a batch of B observations.

        Args:
            obs_batch: preprocessed observations float32[B, ...].
            state_batches: for recurrent models, one array ``[B, ...]`` per state
                tensor (default: the initial state for every row).
            prev_action_batch: the actions before these observations ``[B, ...]``
                (read by models that use them, e.g. ``lstm_use_prev_action``).
            prev_reward_batch: the rewards before these observations float32[B].
            explore: sample (True) or take the most likely action (False); default:
                the ``explore`` config key.

        Returns:
            ``(actions [B, ...], state_outs [per state tensor: [B, ...]], extra
            {column: [B, ...]})``.
        """
        explore = self.config.get("explore", True) if explore is None else explore
        with self.lock, torch.no_grad():
            input_dict = self._input_dict(obs_batch, prev_action_batch, prev_reward_batch)
            if self.is_recurrent and not state_batches:
                rows = len(input_dict[SampleBatch.CUR_OBS])
                state_batches = [np.repeat(s[None], rows, axis=0) for s in self._initial_state]
            dist_inputs, state_out = self.model(
                input_dict, self._state_tensors(state_batches), None
            )
            dist = self.dist_class(dist_inputs, self.model)
            actions = dist.sample() if explore else dist.deterministic_sample()
            logp = dist.logp(actions).cpu().numpy()
            extra = {
                SampleBatch.ACTION_DIST_INPUTS: dist_inputs.cpu().numpy(),
                SampleBatch.ACTION_LOGP: logp,
                SampleBatch.ACTION_PROB: np.exp(logp),
            }
            extra.update(self.extra_action_out(dist_inputs))
            return actions.cpu().numpy(), [s.cpu().numpy() for s in state_out], extra

    def compute_log_likelihoods(
        self,
        actions: Any,
        obs_batch: Any,
        state_batches: list[Any] | None = None,
        prev_action_batch: Any = None,
        prev_reward_batch: Any = None,
    ) -> np.ndarray:
        """``float32[B]``: the log-probability of each given action (``[B, ...]``) under
        the distribution the policy samples from, for observations ``float32[B, ...]``
        (recurrent models: with each row's state ``[B, ...]`` per tensor). Off-policy
        estimators compare these with the behaviour policy's ``action_prob``."""
        with self.lock, torch.no_grad():
            input_dict = self._input_dict(obs_batch, prev_action_batch, prev_reward_batch)
            if self.is_recurrent and not state_batches:
                rows = len(input_dict[SampleBatch.CUR_OBS])
                state_batches = [np.repeat(s[None], rows, axis=0) for s in self._initial_state]
            dist_inputs, _ = self.model(input_dict, self._state_tensors(state_batches), None)
            dist = self.dist_class(dist_inputs, self.model)
            taken = torch.as_tensor(np.asarray(actions), device=self.device)
            return dist.logp(taken).cpu().numpy()

    def extra_action_out(self, dist_inputs: torch.Tensor) -> dict[str, np.ndarray]:
        """Extra per-step columns from the last forward pass; default: ``vf_preds``."""
        return {SampleBatch.VF_PREDS: self.model.value_function().cpu().numpy()}

    def value(
        self,
        obs: Any,
        state: list[Any] | None = None,
        prev_action: Any = None,
        prev_reward: Any = None,
    ) -> np.ndarray:
        """Value estimates float32[B] for observations float32[B, ...] (with the
        recurrent state ``[B, ...]`` per tensor and previous actions / rewards for
        recurrent models)."""
        with self.lock, torch.no_grad():
            self.model(
                self._input_dict(obs, prev_action, prev_reward), self._state_tensors(state), None
            )
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
        """The numeric columns the loss reads, as tensors on the learner's device.

        For recurrent models the rows are cut into sequences padded to
        ``max_seq_len`` (see `rayfield.rllib.policy.rnn_sequencing`), with
        ``seq_lens``, ``seq_mask`` and the per-sequence ``state_in_<i>``.
        """
        if self.is_recurrent:
            cols = [
                k
                for k, v in batch.items()
                if v.dtype != object
                and not k.startswith("state_")
                and (
                    self.loss_columns is None
                    or k in self.loss_columns
                    or k in (SampleBatch.PREV_ACTIONS, SampleBatch.PREV_REWARDS)
                )
            ]
            padded = pad_batch_to_sequences(batch, self.max_seq_len, cols)
            return {k: torch.as_tensor(v, device=self.device) for k, v in padded.items()}
        out = {}
        for k, v in batch.items():
            if v.dtype != object and (self.loss_columns is None or k in self.loss_columns):
                out[k] = torch.as_tensor(v, device=self.device)
        return out

    def forward_train(
        self, model: Any, train_batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, list[Any]]:
        """The model on a training batch from `to_tensors` (with its sequences and
        start states for recurrent models)."""
        states = [train_batch[f"state_in_{i}"] for i in range(len(self._initial_state))]
        return model(train_batch, states, train_batch.get(SEQ_LENS))

    def logp_of_actions(
        self, model: Any, dist_class: type, train_batch: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``float32[B]``: ``log pi(a_t | s_t)`` of the batch's ``actions`` (one forward
        pass of `model` on the batch, with gradients)."""
        logits, _ = self.forward_train(model, train_batch)
        return dist_class(logits, model).logp(train_batch[SampleBatch.ACTIONS])

    @staticmethod
    def reduce_mean(x: torch.Tensor, train_batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean over the batch's real rows (padding rows of sequences excluded)."""
        mask = train_batch.get(SEQ_MASK)
        return x.mean() if mask is None else x[mask].mean()

    def minibatches(
        self, tensors: dict[str, torch.Tensor], size: int, shuffle: bool = True
    ) -> list[dict[str, torch.Tensor]]:
        """Split a `to_tensors` batch into minibatches of about `size` rows (whole
        padded sequences for recurrent models; a remainder under half a minibatch
        after the first is dropped)."""
        if SEQ_LENS not in tensors:
            n = len(tensors[SampleBatch.CUR_OBS])
            perm = torch.randperm(n) if shuffle else torch.arange(n)
            chunks = [perm[start : start + size] for start in range(0, n, size)]
            return [
                {k: v[idx] for k, v in tensors.items()}
                for i, idx in enumerate(chunks)
                if i == 0 or len(idx) >= size // 2
            ]
        n_seq = len(tensors[SEQ_LENS])
        per = max(1, size // self.max_seq_len)
        perm = torch.randperm(n_seq) if shuffle else torch.arange(n_seq)
        steps = torch.arange(self.max_seq_len)
        out = []
        for start in range(0, n_seq, per):
            seqs = perm[start : start + per]
            if start > 0 and len(seqs) < per // 2:
                continue
            rows = (seqs[:, None] * self.max_seq_len + steps).reshape(-1)
            out.append(
                {
                    k: v[seqs] if k == SEQ_LENS or k.startswith("state_in_") else v[rows]
                    for k, v in tensors.items()
                }
            )
        return out

    def batch_values(self, tensors: dict[str, torch.Tensor]) -> np.ndarray:
        """Value estimates of the real rows of a `to_tensors` batch, in row order."""
        with torch.no_grad():
            self.forward_train(self.model, tensors)
            values = self.model.value_function()
            mask = tensors.get(SEQ_MASK)
            return (values if mask is None else values[mask]).cpu().numpy()

    def _zero_grad(self) -> None:
        """Drop the gradients of the optimizer's parameters (``zero_grad(set_to_none=True)``
        without the optimizer's profiler hook, a noticeable share of a small model's step)."""
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                p.grad = None

    def _grad_step(self, tensors: dict[str, torch.Tensor]) -> float | None:
        loss = self.loss(self.model, self.dist_class, tensors)
        self._zero_grad()
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
            self.model.zero_grad(set_to_none=True)
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
            for group in self._optimizer.param_groups if self._optimizer is not None else []:
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
        """Write the model's state dict to ``export_dir/model.pt`` (0600; the directory,
        made if missing, 0700).

        Raises:
            UnsafeFileError: ``export_dir`` or a directory above it is another user's, or
                others can write it (see `rayfield.util.private_files`).
        """
        self._export(export_dir, "model.pt", self.model.state_dict())

    def export_checkpoint(self, export_dir: str, filename_prefix: str = "model") -> None:
        """Write the full policy state (weights and optimizer) to ``<prefix>.pt``, as
        `export_model` writes its file.

        Raises:
            UnsafeFileError: as for `export_model`.
        """
        self._export(export_dir, f"{filename_prefix}.pt", self.get_state())

    @staticmethod
    def _export(export_dir: str, name: str, state: dict[str, Any]) -> None:
        directory = private_files.ensure_private_dir(export_dir, what="the export directory")
        with private_files.atomic_write(directory / name) as f:
            torch.save(state, f)
