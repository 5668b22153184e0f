"""A trainer class as a trainable, for :mod:`rayfield.sgd.pytorch.trainable`
(``PyTorchTrainable``, ``make_trainable``) and ``PyTorchTrainer.as_trainable``:
`TrainerTrainableHooks` implements Tune's Trainable contract itself (``train``, ``save``,
``restore``, ``stop``, ``default_resource_request``, ``reset_config``: rayfield-tune's
``TrainableProtocol``), so it is used as it is without rayfield-tune; `trainable_class`
hands it to Tune's one adapter (``tune.as_trainable``) when rayfield-tune is installed,
with the restore that unpickles nothing (`UnpicklingNothing`). The trainer class is
given, not imported (the trainer's ``as_trainable`` uses this module).

rayfield-tune is not a dependency and is never imported when this module is (see
:mod:`rayfield.sgd.pytorch.trainable`).
"""

from __future__ import annotations

import inspect
import io
import os
import tempfile
import uuid
from typing import Any

from rayfield.util import private_files

__all__ = [
    "CHECKPOINT_FILE",
    "TrainerTrainableHooks",
    "UnpicklingNothing",
    "trainable_class",
]

CHECKPOINT_FILE = "model.pth"


def _trainer_parameters(trainer_cls: Any) -> set[str]:
    return set(inspect.signature(trainer_cls.__init__).parameters) - {"self"}


class TrainerTrainableHooks:
    """Tune's Trainable contract over a trainer: ``_trainer_cls`` is the trainer built
    per trial (``PyTorchTrainer``), ``_trainer_args``/``_trainer_kwargs`` hold the
    defaults that a trial's config overrides (see :meth:`trainer_kwargs`).

    Args:
        config: the trial's config.
        logger_creator: accepted for compatibility; unused.
    """

    _trainer_cls: Any = None
    _trainer_args: tuple[Any, ...] = ()
    _trainer_kwargs: dict[str, Any] = {}
    _trainer: Any = None

    @classmethod
    def trainer_kwargs(cls, config: dict[str, Any] | None) -> dict[str, Any]:
        """The ``PyTorchTrainer`` keyword arguments for a trial ``config`` (pure)."""
        names = _trainer_parameters(cls._trainer_cls)
        kwargs = dict(cls._trainer_kwargs)
        hyper = dict(kwargs.pop("config", None) or {})
        for key, value in (config or {}).items():
            if key in names and key != "config":
                kwargs[key] = value
            elif key == "config":
                hyper.update(value or {})
            else:
                hyper[key] = value
        kwargs["config"] = hyper
        return kwargs

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> dict[str, float] | None:
        """The trial's resources as a ``resources_per_trial`` dict: nothing for the trial's
        own actor (it only drives the trainer) and ``extra_cpu``/``extra_gpu`` for the
        replicas, so Tune never starts more trials than their replicas fit. None when
        ``num_replicas`` or ``resources_per_replica`` is not a plain value yet (a search
        space)."""
        from rayfield.sgd.utils import Resources

        kwargs = cls.trainer_kwargs(config)
        replicas = kwargs.get("num_replicas", 1)
        per_replica = kwargs.get("resources_per_replica") or Resources(
            num_cpus=1, num_gpus=1 if kwargs.get("use_gpu") else 0
        )
        if isinstance(replicas, bool) or not isinstance(replicas, int):
            return None
        if not isinstance(per_replica, Resources):
            return None
        request = {
            "cpu": 0.0,
            "gpu": 0.0,
            "extra_cpu": float(replicas * per_replica.num_cpus),
            "extra_gpu": float(replicas * per_replica.num_gpus),
        }
        return request

    def __init__(self, config: dict[str, Any] | None = None, logger_creator: Any = None) -> None:
        self.config = dict(config or {})
        self.iteration = 0
        self._trainer = self._trainer_cls(*self._trainer_args, **self.trainer_kwargs(self.config))

    def train(self) -> dict[str, Any]:
        """One epoch (``train()``, then ``validate()`` when there is a validation set);
        its stats with ``mean_loss`` and ``training_iteration``."""
        result = self._step()
        self.iteration += 1
        result.setdefault("training_iteration", self.iteration)
        return result

    def _step(self) -> dict[str, Any]:
        stats = dict(self._trainer.train())
        try:
            stats.update({k: v for k, v in self._trainer.validate().items() if k != "num_samples"})
        except ValueError:
            pass  # no validation set
        stats.setdefault("mean_loss", stats.get("validation_loss", stats.get("train_loss")))
        if "val_accuracy" in stats:
            stats.setdefault("mean_accuracy", stats["val_accuracy"])
        return stats

    def save(self, checkpoint_dir: str | None = None) -> str:
        """Write ``model.pth`` (0600) into ``checkpoint_dir`` (made 0700 if missing; a
        fresh temporary directory when None); return its path.

        Raises:
            UnsafeFileError: ``checkpoint_dir`` or a directory above it is another
                user's, or others can write it.
        """
        directory = checkpoint_dir or tempfile.mkdtemp(prefix="rayfield-sgd-ckpt-")
        private_files.ensure_private_dir(directory, what="the checkpoint directory")
        return str(self._trainer.save(os.path.join(directory, CHECKPOINT_FILE)))

    def restore(self, checkpoint_path: str) -> None:
        """Restore ``model.pth`` (or the directory holding it) as the trainer's
        ``restore`` reads it (ownership-checked, ``weights_only``); the iteration count
        becomes the checkpoint's epoch.

        Raises:
            FileNotFoundError: no such file.
            UnsafeFileError: the file is not this user's alone.
        """
        path = _checkpoint_file(checkpoint_path)
        self._trainer.restore(path)
        self.iteration = _read_checkpoint(path)[1]

    def stop(self) -> None:
        """Shut the trainer's replicas down (idempotent)."""
        if self._trainer is not None:
            self._trainer.shutdown()
            self._trainer = None

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """False: the replicas are built from the config (Tune starts a new trial actor)."""
        return False


def _checkpoint_file(path: str) -> str:
    return os.path.join(path, CHECKPOINT_FILE) if os.path.isdir(path) else path


def _read_checkpoint(path: str) -> tuple[bytes, int]:
    """The bytes of the checkpoint file ``path`` and its epoch, read with the ownership
    checks and ``torch.load(weights_only=True)`` (nothing is unpickled)."""
    import torch

    data = private_files.read_bytes(path, what="the checkpoint")
    state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    return data, int(state.get("epoch", 0)) if isinstance(state, dict) else 0


class UnpicklingNothing:
    """``restore`` and ``restore_from_object`` over ``rayfield.tune.Trainable``'s that
    unpickle nothing: Tune's ``restore`` reads its ``.tune_metadata`` beside the
    checkpoint with ``pickle``, and a blob saved as a dict is a pickle too."""

    def restore(self, checkpoint_path: str) -> None:
        """Restore ``model.pth`` (or the directory holding it) as the trainer's
        ``restore`` reads it (ownership-checked, ``weights_only``); Tune's iteration
        counter becomes the checkpoint's epoch. Tune's ``.tune_metadata`` is not read.

        Raises:
            FileNotFoundError: no such file.
            UnsafeFileError: the file is not this user's alone.
        """
        data, epoch = _read_checkpoint(_checkpoint_file(checkpoint_path))
        meta = {
            "experiment_id": uuid.uuid4().hex,
            "iteration": epoch,
            "timesteps_total": None,
            "time_total": 0.0,
            "episodes_total": None,
            "saved_as_dict": False,
            "relpath": CHECKPOINT_FILE,
        }
        self.restore_from_object({"files": {CHECKPOINT_FILE: data}, "meta": meta})

    def restore_from_object(self, blob: dict[str, Any]) -> None:
        """Tune's restore of a blob, refusing one saved as a pickled dict.

        Raises:
            ValueError: the blob says it holds a pickled dict (this trainable never
                saves one).
        """
        if blob["meta"].get("saved_as_dict"):
            raise ValueError(
                "refusing to restore: the checkpoint says it holds a pickled dict, which "
                "this trainable never saves (unpickling it could run any code)"
            )
        super().restore_from_object(blob)  # type: ignore[misc]


def trainable_class(trainer_cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> type:
    """A Trainable class (named ``PyTorchTrainable``) training
    ``trainer_cls(*args, **kwargs)``; trial configs override the keyword arguments and
    extend ``config`` (see :mod:`rayfield.sgd.pytorch.trainable`).

    Without rayfield-tune it is a `TrainerTrainableHooks` subclass; with it, Tune's
    adapter of one (a ``rayfield.tune.Trainable``) with `UnpicklingNothing`'s ``restore``
    and ``restore_from_object``.
    """
    attrs = {
        "_trainer_cls": trainer_cls,
        "_trainer_args": tuple(args),
        "_trainer_kwargs": dict(kwargs),
    }
    plain: Any = type("PyTorchTrainable", (TrainerTrainableHooks,), attrs)
    try:
        import rayfield.tune as tune
    except ImportError:
        return plain
    adapted = tune.as_trainable(plain)  # Tune's one adapter
    return type(
        "PyTorchTrainable",
        (UnpicklingNothing, adapted),
        {"trainer_kwargs": plain.trainer_kwargs, "__module__": plain.__module__},
    )
