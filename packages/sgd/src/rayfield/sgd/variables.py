"""Get and set a torch model's weights as plain numpy arrays.

The reference's ``TensorFlowVariables`` idea for torch modules: build the model once
in each process and move only its weights, as ``{name: numpy array}`` dicts (which the
object store passes zero-copy between processes of one node) or as one flat float32
vector. A user's model needs no rayfield base class.

Example:
    variables = TorchVariables(model)
    weights = variables.get_weights()        # {"fc.weight": array(...), ...}
    other_variables.set_weights(weights)
    flat = variables.get_flat()              # float32[get_flat_size()]
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["TorchVariables", "get_weights", "set_weights"]


class TorchVariables:
    """The named parameters (and, optionally, buffers) of a torch module.

    Args:
        model: a ``torch.nn.Module``, or an iterable of ``(name, tensor)`` pairs.
        include_buffers: also move the module's buffers (for example BatchNorm's running
            statistics); only for a module.

    Raises:
        TypeError: ``model`` is neither a module nor ``(name, tensor)`` pairs.
    """

    def __init__(self, model: Any, include_buffers: bool = False) -> None:
        named: list[tuple[str, torch.Tensor]]
        if isinstance(model, torch.nn.Module):
            named = list(model.named_parameters())
            if include_buffers:
                named += [(n, b) for n, b in model.named_buffers() if b is not None]
        elif isinstance(model, Iterable):
            named = list(model)
            for pair in named:
                if not (isinstance(pair, tuple) and len(pair) == 2):
                    raise TypeError(
                        "TorchVariables takes a torch.nn.Module or (name, tensor) pairs"
                    )
        else:
            raise TypeError(
                f"TorchVariables takes a torch.nn.Module or (name, tensor) pairs, got "
                f"{type(model).__name__}"
            )
        self.variables: dict[str, torch.Tensor] = dict(named)

    def get_flat_size(self) -> int:
        """The total number of elements of all variables."""
        return sum(int(v.numel()) for v in self.variables.values())

    def get_weights(self) -> dict[str, np.ndarray]:
        """A copy of every variable, ``{name: numpy array}`` in the module's order."""
        return {name: v.detach().cpu().numpy().copy() for name, v in self.variables.items()}

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Write the given variables (all or a subset) into the model, in place.

        Args:
            weights: ``{name: array or tensor}``; names the model lacks are ignored.

        Raises:
            ValueError: no name matches the model's, or a shape differs.
        """
        matched = [name for name in weights if name in self.variables]
        if not matched:
            raise ValueError(
                "No variables in the input matched those in the model; expected names "
                f"such as {list(self.variables)[:3]}, got {list(weights)[:3]}"
            )
        with torch.no_grad():
            for name in matched:
                target = self.variables[name]
                with warnings.catch_warnings():  # maybe a read-only store view
                    warnings.simplefilter("ignore", UserWarning)
                    value = torch.as_tensor(np.asarray(weights[name]))
                if tuple(value.shape) != tuple(target.shape):
                    raise ValueError(
                        f"weights[{name!r}] has shape {tuple(value.shape)}, the model's "
                        f"has {tuple(target.shape)}"
                    )
                target.copy_(value.to(device=target.device, dtype=target.dtype))

    def get_flat(self) -> np.ndarray:
        """All variables as one float32 vector of length ``get_flat_size()``."""
        if not self.variables:
            return np.zeros(0, dtype=np.float32)
        parts = [v.detach().reshape(-1).to("cpu", torch.float32) for v in self.variables.values()]
        return torch.cat(parts).numpy()

    def set_flat(self, new_weights: Any) -> None:
        """Set all variables from one vector made by ``get_flat`` (same order).

        Raises:
            ValueError: the vector's length differs from ``get_flat_size()``.
        """
        with warnings.catch_warnings():  # maybe a read-only store view: only read here
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.as_tensor(np.asarray(new_weights).reshape(-1))
        if flat.numel() != self.get_flat_size():
            raise ValueError(
                f"set_flat got {flat.numel()} values, the model has {self.get_flat_size()}"
            )
        offset = 0
        with torch.no_grad():
            for v in self.variables.values():
                n = v.numel()
                v.copy_(flat[offset : offset + n].view_as(v).to(v.device, v.dtype))
                offset += n


def get_weights(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """``TorchVariables(model).get_weights()``: a copy of the parameters as numpy arrays."""
    return TorchVariables(model).get_weights()


def set_weights(model: torch.nn.Module, weights: Mapping[str, Any]) -> None:
    """``TorchVariables(model).set_weights(weights)``.

    Raises:
        ValueError: no name matches, or a shape differs.
    """
    TorchVariables(model).set_weights(weights)
