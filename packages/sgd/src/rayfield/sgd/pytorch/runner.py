"""One replica of a ``PyTorchTrainer``: the object that lives inside each replica's actor.

It builds the user's models, optimizers, schedulers and data from the creators, joins
the trainers' ``torch.distributed`` process group (when there are several replicas),
wraps each model in ``DistributedDataParallel`` and reads its shard of the training set
through a ``DistributedSampler``. Its state (weights, optimizer and scheduler states,
epoch) moves as the bytes of one ``torch.save`` dict, loaded with ``weights_only=True``.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

from rayfield.sgd.collective import join_group, leave_group, rendezvous_address
from rayfield.sgd.pytorch import training

__all__ = ["TorchRunner", "wrap_ddp"]


def wrap_ddp(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``module`` wrapped in ``DistributedDataParallel`` as every replica trains it (the
    default process group; torch's default buckets: the first of 1 MB, then 25 MB, each
    all-reduced as soon as its gradients are ready during backward), or ``module`` itself
    when it has no trainable parameter.

    Args:
        module: the replica's model, already on ``device``.
        device: the replica's device; for CUDA its index is DDP's ``device_ids``.
    """
    if not any(p.requires_grad for p in module.parameters()):
        return module
    ids = [device.index or 0] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(module, device_ids=ids)


class TorchRunner:
    """Builds and trains one replica. Created by ``PyTorchTrainer`` inside an actor.

    Args:
        spec: the trainer's creators and options (see ``PyTorchTrainer``), a dict with
            ``model_creator``, ``data_creator``, ``optimizer_creator``, ``loss_creator``,
            ``scheduler_creator``, ``scheduler_step_freq``, ``train_function``,
            ``validation_function``, ``initialization_hook``, ``config``, ``use_gpu``,
            ``num_threads``.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.config: dict[str, Any] = dict(spec["config"])
        self.batch_size = 1
        self.epoch = 0
        self.rank, self.world_size = 0, 1
        self.models: list[Any] = []
        self.optimizers: list[Any] = []
        self.schedulers: list[Any] = []
        self.criterion: Any = None
        self.train_loader: Any = None
        self.validation_loader: Any = None
        if spec.get("num_threads"):
            torch.set_num_threads(int(spec["num_threads"]))
        if spec.get("initialization_hook"):
            spec["initialization_hook"]()
        use_gpu = bool(spec.get("use_gpu")) and torch.cuda.is_available()
        self.device = torch.device("cuda" if use_gpu else "cpu")

    # Process-level facts the driver asks for.
    def get_pid(self) -> int:
        return os.getpid()

    def gpu_placement(self) -> tuple[str | None, list[int | str]]:
        """``(node_id, gpu_ids)``: this replica's node and the GPUs it holds there."""
        import rayfield

        return rayfield.get_runtime_context().get_node_id(), rayfield.get_gpu_ids()

    def setup_address(self) -> str:
        """``tcp://ip:port`` for the process group's rendezvous, with a port free here."""
        return rendezvous_address()

    def setup(
        self,
        address: str | None,
        rank: int,
        world_size: int,
        backend: str,
        timeout_s: float,
        batch_size: int,
    ) -> None:
        """Join the process group (when ``world_size > 1``) and build everything.

        Args:
            address: the rendezvous ``tcp://ip:port`` (None for a single replica).
            rank: this replica's rank in ``[0, world_size)``.
            world_size: the number of replicas.
            backend: ``gloo``, ``nccl`` or ``mpi``.
            timeout_s: how long collectives wait for a peer (seconds).
            batch_size: this replica's batch size (the global one split).

        Raises:
            RuntimeError: the group cannot form within ``timeout_s`` seconds.
        """
        self.rank, self.world_size, self.batch_size = rank, world_size, batch_size
        if world_size > 1:
            assert address is not None
            join_group(address, rank, world_size, backend, timeout_s)
        self._build()

    def _build(self) -> None:
        spec, config = self.spec, self.config
        self.models = [m.to(self.device) for m in training.as_list(spec["model_creator"](config))]
        if not self.models:
            raise TypeError("model_creator returned no model")
        model_arg = training.unwrap(self.models)
        if spec.get("loss_creator") is not None:
            self.criterion = training.make_criterion(spec["loss_creator"], config)
            self.optimizers = training.as_list(spec["optimizer_creator"](model_arg, config))
        else:
            result = spec["optimizer_creator"](model_arg, config)
            if not (isinstance(result, (list, tuple)) and len(result) == 2):
                raise TypeError(
                    "optimizer_creator(model, config) must return (loss, optimizer) when no "
                    "loss_creator is given; pass loss_creator=... to return only optimizers"
                )
            self.criterion, optimizers = result
            self.optimizers = training.as_list(optimizers)
        if hasattr(self.criterion, "to"):
            self.criterion = self.criterion.to(self.device)
        if spec.get("scheduler_creator") is not None:
            self.schedulers = training.as_list(
                spec["scheduler_creator"](training.unwrap(self.optimizers), config)
            )
        train, validation = training.call_data_creator(
            spec["data_creator"], self.batch_size, config
        )
        self.train_loader = self._loader(train, shuffle=True)
        self.validation_loader = (
            self._loader(validation, shuffle=False) if validation is not None else None
        )
        if self.world_size > 1:
            self.models = [wrap_ddp(m, self.device) for m in self.models]

    def _loader(self, data: Any, shuffle: bool) -> Any:
        if isinstance(data, DataLoader) or not isinstance(data, Dataset):
            return data  # a loader (or any iterable) the user built: used as given
        if shuffle:
            sampler: DistributedSampler[Any] = DistributedSampler(
                data,
                num_replicas=self.world_size,
                rank=self.rank,
                shuffle=True,
                seed=int(self.config.get("seed", 0)),
            )
            return DataLoader(data, batch_size=self.batch_size, sampler=sampler)
        # Validation: every sample exactly once across the replicas (no padding).
        shard = Subset(data, range(self.rank, len(data), self.world_size))  # type: ignore[arg-type]
        return DataLoader(shard, batch_size=self.batch_size, shuffle=False)

    def _user_models(self) -> list[Any]:
        return [getattr(m, "module", m) for m in self.models]

    def train_epoch(self) -> dict[str, Any]:
        """Run one epoch over this replica's shard; return its stats."""
        sampler: Any = getattr(self.train_loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)
        freq = self.spec.get("scheduler_step_freq", "epoch")
        start = time.perf_counter()
        fn: Callable[..., dict[str, Any]] | None = self.spec.get("train_function")
        model, optimizer = training.unwrap(self.models), training.unwrap(self.optimizers)
        if fn is None:
            stats = training.train_epoch(
                model,
                self.train_loader,
                self.criterion,
                optimizer,
                self.config,
                device=self.device,
                schedulers=self.schedulers if freq == "batch" else (),
            )
        else:
            stats = dict(fn(model, self.train_loader, self.criterion, optimizer, self.config) or {})
        if freq == "epoch":
            for scheduler in self.schedulers:
                scheduler.step()
        self.epoch += 1
        stats["epoch"] = self.epoch
        elapsed = time.perf_counter() - start
        stats.setdefault("epoch_time_s", elapsed)
        if stats.get("batch_count"):
            stats.setdefault("batch_time", elapsed / stats["batch_count"])
        return stats

    def validate(self) -> dict[str, Any]:
        """Stats of this replica's share of the validation set.

        Raises:
            ValueError: ``data_creator`` gave no validation set.
        """
        if self.validation_loader is None:
            raise ValueError("validate() needs data_creator to return (train, validation) datasets")
        fn = self.spec.get("validation_function")
        model = training.unwrap(self.models)
        if fn is None:
            return training.validate(
                model, self.validation_loader, self.criterion, self.config, device=self.device
            )
        return dict(fn(model, self.validation_loader, self.criterion, self.config) or {})

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "models": [m.state_dict() for m in self._user_models()],
            "optimizers": [o.state_dict() for o in self.optimizers],
            "schedulers": [s.state_dict() for s in self.schedulers],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state.get("epoch", self.epoch))
        for model, sd in zip(self._user_models(), state["models"]):
            model.load_state_dict(sd)
        for optimizer, sd in zip(self.optimizers, state.get("optimizers", [])):
            optimizer.load_state_dict(sd)
        for scheduler, sd in zip(self.schedulers, state.get("schedulers", [])):
            scheduler.load_state_dict(sd)

    def get_state(self) -> bytes:
        """The state as the bytes of ``torch.save`` (tensors moved to the CPU)."""
        buffer = io.BytesIO()
        torch.save(_to_cpu(self.state_dict()), buffer)
        return buffer.getvalue()

    def set_state(self, blob: bytes) -> None:
        """Load state bytes made by ``get_state`` (read with ``weights_only=True``)."""
        state = torch.load(io.BytesIO(blob), map_location=self.device, weights_only=True)
        self.load_state_dict(state)

    def apply(self, fn: Callable[[TorchRunner], Any]) -> Any:
        """``fn(self)`` inside the replica's process (for inspection and tests)."""
        return fn(self)

    def shutdown(self) -> None:
        leave_group()


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value
