"""A Tune trainable around ``PyTorchTrainer``: one training iteration is one epoch
(``train()`` then, when there is a validation set, ``validate()``), and a checkpoint is
the trainer's ``save`` file.

rayfield-tune is not a dependency and is never imported when this module is: the
trainable implements Tune's Trainable contract itself (``train``, ``save``, ``restore``,
``stop``, ``default_resource_request``, ``reset_config``; rayfield-tune's
``TrainableProtocol``), and Tune runs it through its one adapter (``tune.as_trainable``).
``PyTorchTrainer.as_trainable(...)`` (or ``make_trainable``) builds the class when it is
called: that adapter's ``rayfield.tune.Trainable`` when rayfield-tune is installed, else
the plain class. The machinery, which takes the trainer class, is
:mod:`rayfield.sgd.pytorch.trainable_hooks`.

A checkpoint is ``model.pth`` (mode 0600, in a 0700 directory), the trainer's ``save``
file; restoring reads it with the ownership checks of `rayfield.util.private_files` and
``torch.load(weights_only=True)``. On Tune's Trainable, ``restore`` does not read the
pickled ``.tune_metadata`` Tune keeps beside it, and a blob saved as a pickled dict is
refused (`UnpicklingNothing`): restoring unpickles nothing.

How a trial's config is read: keys named like ``PyTorchTrainer`` parameters
(``num_replicas``, ``batch_size``, ``model_creator``...) are passed to the trainer as
those; every other key joins the trainer's ``config`` dict (the hyperparameters the
creators read, such as ``lr``).
"""

from __future__ import annotations

from typing import Any

from rayfield.sgd.pytorch.trainable_hooks import (
    CHECKPOINT_FILE as CHECKPOINT_FILE,
)
from rayfield.sgd.pytorch.trainable_hooks import (
    TrainerTrainableHooks,
    trainable_class,
)
from rayfield.sgd.pytorch.trainable_hooks import (
    UnpicklingNothing as UnpicklingNothing,
)
from rayfield.sgd.pytorch.trainer import PyTorchTrainer

__all__ = ["PyTorchTrainable", "make_trainable"]


class PyTorchTrainable(TrainerTrainableHooks):
    """A trainable whose trial config names every trainer argument, as in the reference
    (``config={"model_creator": ..., "data_creator": ..., "num_replicas": 2, "lr": 0.1}``);
    ``tune.run(PyTorchTrainable, ...)`` runs it through Tune's adapter. Use
    ``PyTorchTrainer.as_trainable`` for a class with fixed creators."""

    _trainer_cls = PyTorchTrainer


def make_trainable(*args: Any, **kwargs: Any) -> type:
    """A Trainable class training ``PyTorchTrainer(*args, **kwargs)``; trial configs
    override the keyword arguments and extend ``config`` (see the module docstring).

    With rayfield-tune installed the class is Tune's adapter of the trainable (a
    ``rayfield.tune.Trainable``), with `UnpicklingNothing`'s ``restore`` and
    ``restore_from_object``.
    """
    return trainable_class(PyTorchTrainer, args, kwargs)
