"""What one replica does with its model for one epoch: the default training and validation
functions, and the normalisation of what the user's creators return.

These run inside a replica's actor but are plain functions of torch objects, so they are
tested without any process.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

__all__ = ["as_list", "call_data_creator", "make_criterion", "train_epoch", "validate"]


def as_list(value: Any) -> list[Any]:
    """A creator's result as a list: a list or tuple as is, one object as ``[object]``."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def unwrap(values: list[Any]) -> Any:
    """One object alone, several as a list (what the user's functions receive)."""
    return values[0] if len(values) == 1 else values


def make_criterion(loss_creator: Any, config: dict[str, Any]) -> Any:
    """Build the loss function from ``loss_creator``.

    A loss class (a subclass of ``torch.nn.Module``, such as ``torch.nn.MSELoss``) is
    instantiated without arguments; any other callable is called with ``config``.

    Raises:
        TypeError: ``loss_creator`` is not callable.
    """
    if inspect.isclass(loss_creator) and issubclass(loss_creator, torch.nn.Module):
        return loss_creator()
    if not callable(loss_creator):
        raise TypeError(
            f"loss_creator must be a loss class or a function of config, got {loss_creator!r}"
        )
    return loss_creator(config)


def required_positional(fn: Callable[..., Any]) -> int:
    """How many positional parameters without defaults ``fn`` takes (1 when unknown)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in params if p.kind in kinds and p.default is inspect.Parameter.empty)


def call_data_creator(
    data_creator: Callable[..., Any], batch_size: int, config: dict[str, Any]
) -> tuple[Any, Any]:
    """Call ``data_creator(config)`` (or ``data_creator(batch_size, config)`` when it takes
    two arguments) and return ``(train, validation)``; validation may be None.

    Each may be a ``Dataset`` (the replica wraps it in a ``DataLoader`` reading its shard)
    or a ``DataLoader`` used as given.

    Raises:
        TypeError: the creator returned nothing usable.
    """
    if required_positional(data_creator) >= 2:
        result = data_creator(batch_size, config)
    else:
        result = data_creator(config)
    parts = as_list(result)
    if not parts or len(parts) > 2 or parts[0] is None:
        raise TypeError(
            "data_creator must return a training dataset or (train, validation) datasets, "
            f"got {type(result).__name__}"
        )
    return parts[0], parts[1] if len(parts) == 2 else None


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device) for b in batch)
    return batch


def _split(batch: Any) -> tuple[Any, Any]:
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        return batch[0], batch[1]
    raise TypeError(
        "the default train/validation functions expect (features, target) batches; "
        "pass train_function/validation_function for other batch layouts"
    )


def _single(name: str, values: Sequence[Any]) -> Any:
    if len(values) != 1:
        raise ValueError(
            f"the default functions train one model with one optimizer, got {len(values)} "
            f"{name}; pass train_function and validation_function for several"
        )
    return values[0]


def train_epoch(
    model: Any,
    train_iterator: Iterable[Any],
    criterion: Any,
    optimizer: Any,
    config: dict[str, Any],
    *,
    device: torch.device | None = None,
    schedulers: Sequence[Any] = (),
) -> dict[str, Any]:
    """One pass over ``train_iterator``: forward, loss, backward, optimizer step per batch.

    Args:
        model: the (possibly DDP-wrapped) module, or a one-element list of it.
        train_iterator: yields ``(features, target)`` batches.
        criterion: ``loss = criterion(model(features), target)``.
        optimizer: the optimizer (or a one-element list).
        config: the trainer's config (unused by the default).
        device: where batches go (default: the model's first parameter's device).
        schedulers: stepped after every batch (``scheduler_step_freq="batch"``).

    Returns:
        ``train_loss`` (mean per sample), ``num_samples``, ``batch_count``.
    """
    model = _single("models", as_list(model))
    optimizer = _single("optimizers", as_list(optimizer))
    device = device or next(model.parameters()).device
    model.train()
    total_loss, samples, batches = 0.0, 0, 0
    for batch in train_iterator:
        features, target = _split(_to_device(batch, device))
        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(features), target)
        loss.backward()
        optimizer.step()
        for scheduler in schedulers:
            scheduler.step()
        n = int(target.shape[0]) if hasattr(target, "shape") and target.dim() else 1
        total_loss += float(loss.detach()) * n
        samples += n
        batches += 1
    return {
        "train_loss": total_loss / max(samples, 1),
        "num_samples": samples,
        "batch_count": batches,
    }


def validate(
    model: Any,
    val_iterator: Iterable[Any],
    criterion: Any,
    config: dict[str, Any],
    *,
    device: torch.device | None = None,
) -> dict[str, Any]:
    """The mean loss over ``val_iterator`` without gradients, and the accuracy when the
    model outputs class scores (``float[batch, classes]``) for integer targets.

    Returns:
        ``validation_loss``, ``num_samples`` and, for classification, ``val_accuracy``
        (fraction in [0, 1]).
    """
    model = _single("models", as_list(model))
    device = device or next(model.parameters()).device
    model.eval()
    total_loss, samples, correct = 0.0, 0, 0
    classification = True
    start = time.perf_counter()
    with torch.no_grad():
        for batch in val_iterator:
            features, target = _split(_to_device(batch, device))
            output = model(features)
            n = int(target.shape[0]) if target.dim() else 1
            total_loss += float(criterion(output, target)) * n
            samples += n
            if output.dim() == 2 and not target.is_floating_point() and target.dim() == 1:
                correct += int((output.argmax(dim=1) == target).sum())
            else:
                classification = False
    stats: dict[str, Any] = {
        "validation_loss": total_loss / max(samples, 1),
        "num_samples": samples,
        "validation_time_s": time.perf_counter() - start,
    }
    if classification and samples:
        stats["val_accuracy"] = correct / samples
    return stats
