"""The model interface of ``DistributedSGD``, and its adapter for plain torch modules.

A ``DistributedSGD`` model replica is any object with ``get_loss()`` (the loss of its
next batch, a scalar tensor with a graph) and ``get_optimizer()`` (a torch optimizer
over the parameters to train); ``Model`` spells this out but subclassing it is
optional. The gradients synchronised are those of the optimizer's parameters, in
``param_groups`` order, so any torch model works without a rayfield base class.

A plain ``torch.nn.Module`` works too: ``ModuleModel`` pairs it with a loss, an optimizer
and this replica's shard of a dataset.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler

from rayfield.sgd.variables import TorchVariables

__all__ = [
    "Model",
    "ModuleModel",
    "assign_gradient",
    "flat_gradient",
    "model_parameters",
    "model_variables",
]


class Model:
    """What ``DistributedSGD`` asks of each model replica (subclassing is optional).

    Call order, per step: ``get_loss()`` once per batch (``grads_per_step`` times), then
    the gradients of the optimizer's parameters are averaged across every replica and
    ``get_optimizer().step()`` applies them.
    """

    def get_loss(self) -> torch.Tensor:
        """The loss of the next batch (a scalar tensor whose backward gives the gradients)."""
        raise NotImplementedError

    def get_optimizer(self) -> torch.optim.Optimizer:
        """The optimizer that applies the averaged gradients."""
        raise NotImplementedError

    def get_metrics(self) -> dict[str, Any]:
        """Extra values to report, such as ``{"accuracy": 0.9}``."""
        return {}

    def get_feed_dict(self) -> dict[str, Any]:
        """Kept for the reference's interface; torch models take their inputs directly."""
        return {}


def _optimizer_of(model: Any) -> torch.optim.Optimizer:
    getter = getattr(model, "get_optimizer", None)
    optimizer = getter() if callable(getter) else getattr(model, "optimizer", None)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"{type(model).__name__} must provide get_optimizer() (or an .optimizer attribute) "
            "returning a torch.optim.Optimizer"
        )
    return optimizer


def model_parameters(model: Any) -> list[torch.Tensor]:
    """The tensors whose gradients are synchronised: the optimizer's, in its order."""
    return [p for group in _optimizer_of(model).param_groups for p in group["params"]]


def model_variables(model: Any) -> TorchVariables:
    """Named weights of a replica: its module's parameters, else its optimizer's."""
    module = model if isinstance(model, torch.nn.Module) else getattr(model, "model", None)
    if isinstance(module, torch.nn.Module):
        return TorchVariables(module)
    return TorchVariables((f"param_{i}", p) for i, p in enumerate(model_parameters(model)))


class ModuleModel(Model):
    """A plain ``torch.nn.Module`` made into a ``Model``: each ``get_loss`` reads the next
    batch of this replica's shard (``DistributedSampler`` over ``world_size`` replicas,
    reshuffled each pass).

    Args:
        model: the module (``model`` attribute; what ``foreach_model`` functions receive).
        criterion: ``loss = criterion(model(features), target)``.
        optimizer: over ``model``'s parameters.
        dataset: yields ``(features, target)`` pairs.
        batch_size: samples per batch, >= 1.
        rank: this replica's index in ``[0, world_size)``.
        world_size: how many replicas share the dataset.
        seed: shuffling seed (the same on every replica).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        criterion: Any,
        optimizer: torch.optim.Optimizer,
        dataset: Any,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
    ) -> None:
        self.model = model
        self.criterion = criterion
        self.optimizer = optimizer
        self.sampler: DistributedSampler[Any] = DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed
        )
        self.loader = DataLoader(dataset, batch_size=batch_size, sampler=self.sampler)
        self.epoch = 0
        self._batches: Iterator[Any] | None = None
        self.device = next(model.parameters()).device

    def next_batch(self) -> Any:
        while True:
            if self._batches is None:
                self.sampler.set_epoch(self.epoch)
                self._batches = iter(self.loader)
            try:
                return next(self._batches)
            except StopIteration:
                self.epoch += 1
                self._batches = None

    def get_loss(self) -> torch.Tensor:
        features, target = self.next_batch()
        self.model.train()
        return self.criterion(self.model(features.to(self.device)), target.to(self.device))

    def get_optimizer(self) -> torch.optim.Optimizer:
        return self.optimizer


def flat_gradient(params: list[torch.Tensor]) -> np.ndarray:
    """The parameters' gradients as one float32 vector (zeros where a gradient is None)."""
    parts = [
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).float().cpu()
        for p in params
    ]
    return torch.cat(parts).numpy() if parts else np.zeros(0, dtype=np.float32)


def assign_gradient(params: list[torch.Tensor], flat: np.ndarray | Sequence[np.ndarray]) -> None:
    """Write a flat float32 gradient (``flat_gradient``'s layout) into ``p.grad``.

    Args:
        params: the parameters, in ``flat_gradient``'s order.
        flat: the whole vector, or its consecutive shards (read in place, not joined).

    Raises:
        ValueError: the total length differs from the parameters' total size.
    """
    chunks = [flat] if isinstance(flat, np.ndarray) else list(flat)
    total = sum(int(p.numel()) for p in params)
    if sum(int(c.size) for c in chunks) != total:
        raise ValueError(
            f"gradient has {sum(int(c.size) for c in chunks)} values, the parameters {total}"
        )
    with warnings.catch_warnings():  # read-only store views: only read from here
        warnings.simplefilter("ignore", UserWarning)
        sources = [
            torch.from_numpy(np.ascontiguousarray(c, dtype=np.float32).reshape(-1))
            for c in chunks
            if c.size
        ]
    index, offset = 0, 0
    for p in params:
        needed, pieces = p.numel(), []
        while needed:
            source = sources[index]
            take = min(needed, source.numel() - offset)
            pieces.append(source[offset : offset + take])
            offset, needed = offset + take, needed - take
            if offset == source.numel():
                index, offset = index + 1, 0
        value = (pieces[0] if len(pieces) == 1 else torch.cat(pieces)) if pieces else None
        if value is None:
            continue
        value = value.view_as(p).to(p.device, p.dtype)
        if p.grad is None:
            p.grad = value.clone()
        else:
            p.grad.copy_(value)
