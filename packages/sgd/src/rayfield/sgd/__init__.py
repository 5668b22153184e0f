"""rayfield.sgd: distributed training of PyTorch models on a rayfield cluster.

Two ways to train, as in the reference:

* ``PyTorchTrainer``: one actor per replica, a ``torch.distributed`` process group
  across them, ``DistributedDataParallel`` and a ``DistributedSampler`` per replica;
  ``train()`` runs an epoch. Survives the death of a replica (``max_retries``).
* ``DistributedSGD``: synchronous SGD whose gradients move through the object store as
  numpy arrays, averaged on the driver (``strategy="simple"``) or by sharded parameter
  server actors (``strategy="ps"``).

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

from rayfield.sgd.distributed import DistributedSGD
from rayfield.sgd.model import Model
from rayfield.sgd.pytorch.trainable import PyTorchTrainable
from rayfield.sgd.pytorch.trainer import PyTorchTrainer
from rayfield.sgd.utils import Resources, sgd_mse_optimizer
from rayfield.sgd.variables import TorchVariables, get_weights, set_weights

__version__ = "0.1.0"

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
