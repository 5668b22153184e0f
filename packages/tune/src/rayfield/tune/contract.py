"""The Trainable contract: what Tune needs of anything it trains, defined once.

:class:`TrainableProtocol` is the contract: ``train``, ``save``, ``restore``, ``stop``,
``default_resource_request`` and ``reset_config``. ``tune.Trainable`` (and so every
function trainable) implements it; so may a class of another library that does not
derive from it (RLlib's ``Trainer``, rayfield-sgd's ``PyTorchTrainable``). Tune runs such a
class through the one adapter, :func:`as_trainable`, which builds a ``tune.Trainable``
subclass calling the contract's methods and nothing else; the trial actors, the executor
and the runner never look further into the class.

:class:`rayfield.tune.testing.TrainableConformance` checks an implementation against the
contract (a pytest class that each package subclasses with a factory).
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol, runtime_checkable

from rayfield.tune.trainable import Trainable

__all__ = ["CONTRACT", "TrainableProtocol", "as_trainable", "conforms"]

CONTRACT = ("train", "save", "restore", "stop", "default_resource_request", "reset_config")


@runtime_checkable
class TrainableProtocol(Protocol):
    """What Tune calls on a trainable (one object per trial, built as ``cls(config=...)``).

    Call order: ``default_resource_request(config)`` on the class before the trial starts;
    then ``train()`` once per iteration, ``save`` / ``restore`` between iterations,
    ``reset_config`` when a reused actor takes another trial, and ``stop()`` once at the
    end.
    """

    def train(self) -> dict[str, Any]:
        """Run one iteration; returns its metrics (``done=True`` ends the trial).
        ``training_iteration`` counts the calls (filled in when missing)."""
        ...

    def save(self, checkpoint_dir: str | None = None) -> str:
        """Write the state under ``checkpoint_dir`` (mode 0700; a directory of the
        implementation's choice when None); returns the path :meth:`restore` takes."""
        ...

    def restore(self, checkpoint_path: str) -> None:
        """Restore what :meth:`save` wrote at ``checkpoint_path`` (its path or its
        directory); the next ``train()`` continues from that iteration."""
        ...

    def stop(self) -> None:
        """Release what the trainable holds (processes, files); called once."""
        ...

    @classmethod
    def default_resource_request(cls, config: dict[str, Any]) -> Any:
        """The trial's resources for ``config`` (a ``resources_per_trial`` dict or
        ``Resources``), or None to take what ``tune.run(resources_per_trial=...)`` says."""
        ...

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Take ``new_config`` in place (a reused actor's next trial); returns False when
        it cannot (Tune then starts a fresh actor)."""
        ...


def conforms(cls: Any) -> bool:
    """True when the class ``cls`` has every method of :class:`TrainableProtocol`."""
    return inspect.isclass(cls) and all(callable(getattr(cls, name, None)) for name in CONTRACT)


def missing(cls: Any) -> list[str]:
    """The methods of :class:`TrainableProtocol` that ``cls`` lacks."""
    return [name for name in CONTRACT if not callable(getattr(cls, name, None))]


def as_trainable(cls: type) -> type[Trainable]:
    """A ``tune.Trainable`` subclass (named as ``cls``) that trains ``cls(config=...)``
    through :class:`TrainableProtocol` alone: ``step`` is ``train()``, a checkpoint is
    what ``save(dir)`` writes into Tune's checkpoint directory, restoring calls
    ``restore(path)``, ``cleanup`` is ``stop()``, ``reset_config`` and
    ``default_resource_request`` are passed on. A ``tune.Trainable`` subclass is returned
    as it is.

    Raises:
        TypeError: ``cls`` is not a class, or lacks methods of the contract (named).
    """
    if not inspect.isclass(cls):
        raise TypeError(f"as_trainable() takes a class, got {type(cls).__name__}")
    if issubclass(cls, Trainable):
        return cls
    lacking = missing(cls)
    if lacking:
        raise TypeError(
            f"{cls.__name__} is not a Trainable: it lacks {', '.join(lacking)} "
            "(see rayfield.tune.contract.TrainableProtocol); subclass tune.Trainable or "
            "pass a function"
        )
    inner_cls: Any = cls

    class Adapted(Trainable):
        _inner_cls: Any = inner_cls
        inner: Any = None

        @classmethod
        def default_resource_request(cls, config: dict[str, Any]) -> Any:
            return cls._inner_cls.default_resource_request(config)

        def setup(self, config: dict[str, Any]) -> None:
            self.inner = self._inner_cls(config=config)

        def step(self) -> dict[str, Any]:
            result = dict(self.inner.train())
            result.pop("config", None)  # Tune adds the trial's own
            # Tune counts the iterations (its checkpoints restore them).
            result.pop("training_iteration", None)
            return result

        def save_checkpoint(self, checkpoint_dir: str) -> Any:
            return self.inner.save(checkpoint_dir)

        def load_checkpoint(self, checkpoint: Any) -> None:
            self.inner.restore(str(checkpoint))

        def reset_config(self, new_config: dict[str, Any]) -> bool:
            # A reused actor's previous trial may be cleaned up already (``inner`` is
            # None): the driver then starts a fresh actor.
            if self.inner is None:
                return False
            return bool(self.inner.reset_config(new_config))

        def cleanup(self) -> None:
            if self.inner is not None:
                self.inner.stop()
                self.inner = None

    Adapted.__name__ = Adapted.__qualname__ = cls.__name__
    Adapted.__doc__ = f"Tune's adapter of {cls.__module__}.{cls.__qualname__}."
    return Adapted
