"""rayfield.sgd: distributed training of PyTorch models on a rayfield cluster.

Two ways to train, as in the reference:

* ``PyTorchTrainer``: one actor per replica, a ``torch.distributed`` process group
  across them, ``DistributedDataParallel`` and a ``DistributedSampler`` per replica;
  ``train()`` runs an epoch. Survives the death of a replica (``max_retries``).
* ``DistributedSGD``: synchronous SGD whose gradients are all-reduced worker to worker
  over a gloo/nccl group (``strategy="simple"``) or move through the object store as
  numpy arrays to sharded parameter-server actors (``strategy="ps"``). Survives the
  death of a worker or a server (``max_retries``).

``TorchVariables`` / ``get_weights`` / ``set_weights`` move a torch module's weights as
plain ``{name: numpy array}`` dicts.

Example:
    import rayfield
    from rayfield.sgd import PyTorchTrainer

    rayfield.init()
    trainer = PyTorchTrainer(model_creator, data_creator, num_replicas=2)
    stats = trainer.train()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module that defines it. Imported on first use, so that a process
# which only needs a numpy part (a parameter server) never imports torch.
_EXPORTS = {
    "DistributedSGD": "rayfield.sgd.distributed",
    "Model": "rayfield.sgd.model",
    "PyTorchTrainable": "rayfield.sgd.pytorch.trainable",
    "PyTorchTrainer": "rayfield.sgd.pytorch.trainer",
    "Resources": "rayfield.sgd.utils",
    "TorchVariables": "rayfield.sgd.variables",
    "get_weights": "rayfield.sgd.variables",
    "set_weights": "rayfield.sgd.variables",
    "sgd_mse_optimizer": "rayfield.sgd.utils",
}

__all__ = [
    "DistributedSGD",
    "Model",
    "PyTorchTrainable",
    "PyTorchTrainer",
    "Resources",
    "TorchVariables",
    "get_weights",
    "set_weights",
    "sgd_mse_optimizer",
]

if TYPE_CHECKING:
    from rayfield.sgd.distributed import DistributedSGD
    from rayfield.sgd.model import Model
    from rayfield.sgd.pytorch.trainable import PyTorchTrainable
    from rayfield.sgd.pytorch.trainer import PyTorchTrainer
    from rayfield.sgd.utils import Resources, sgd_mse_optimizer
    from rayfield.sgd.variables import TorchVariables, get_weights, set_weights


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rayfield.sgd' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
