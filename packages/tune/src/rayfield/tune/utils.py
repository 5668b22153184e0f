"""``tune.with_parameters`` and ``tune.with_resources``."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import rayfield
from rayfield.tune.error import TuneError
from rayfield.tune.registry import get_trainable_cls
from rayfield.tune.trainable import Trainable

__all__ = ["get_pinned_object", "pin_in_object_store", "with_parameters", "with_resources"]

_PINNED: dict[str, Any] = {}
_PIN_PREFIX = "rayfield.tune.PinnedObject:"


def with_parameters(trainable: Any, **kwargs: Any) -> Any:
    """A trainable that gets ``kwargs`` (large data) from the object store.

    Each value is put in the object store once; every trial fetches it from there (shared
    memory on its node) instead of receiving a copy in its config. A function trainable
    is called as ``fn(config, **kwargs)``; a Trainable class gets them in ``setup``.

    Raises:
        TuneError: rayfield is not initialised (the values need the object store).
        TypeError: ``trainable`` is neither a function nor a Trainable class.
    """
    if not rayfield.is_initialized():
        raise TuneError("with_parameters() needs rayfield.init() first (it uses the object store)")
    refs = {name: rayfield.put(value) for name, value in kwargs.items()}
    if inspect.isclass(trainable):
        if not issubclass(trainable, Trainable):
            raise TypeError(f"{trainable.__name__} is not a Trainable")
        base = trainable

        class _WithParameters(base):  # type: ignore[valid-type,misc]
            def _setup_hook(self, config: dict[str, Any]) -> None:
                values = {n: rayfield.get(r) for n, r in refs.items()}
                if type(self).setup is not Trainable.setup:
                    self.setup(config, **values)
                else:
                    self._setup(config, **values)

        _WithParameters.__name__ = base.__name__
        _WithParameters.__qualname__ = base.__qualname__
        return _WithParameters

    if not callable(trainable):
        raise TypeError(
            f"with_parameters() takes a function or a Trainable class, got {trainable!r}"
        )
    fn = trainable

    @functools.wraps(fn)
    def inner(config: dict[str, Any]) -> Any:
        return fn(config, **{n: rayfield.get(r) for n, r in refs.items()})

    inner.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("config", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    )
    return inner


def with_resources(trainable: Any, resources: Any) -> Any:
    """A trainable whose trials hold ``resources``: a dict (``{"cpu": 2, "gpu": 1}``), a
    :class:`~rayfield.tune.PlacementGroupFactory` (the trial reserves its bundles as one
    placement group), or a function of the config returning either.

    Raises:
        TuneError: ``resources`` is none of these (a function's result is checked when
            the trial is made).
    """
    from rayfield.tune.placement_groups import PlacementGroupFactory

    if not (isinstance(resources, (dict, PlacementGroupFactory)) or callable(resources)):
        raise TuneError(
            "with_resources() takes a dict such as {'cpu': 2}, a tune.PlacementGroupFactory "
            f"or a function of the config returning one, got {type(resources).__name__}"
        )
    cls = get_trainable_cls(trainable)
    spec = resources

    class _WithResources(cls):  # type: ignore[valid-type,misc]
        @classmethod
        def default_resource_request(cls, config: dict[str, Any]) -> Any:
            return spec(config) if callable(spec) else spec

    _WithResources.__name__ = getattr(trainable, "__name__", cls.__name__)
    _WithResources.__qualname__ = _WithResources.__name__
    return _WithResources


class PinnedObject:
    """The id :func:`pin_in_object_store` returns; it can be captured in trainables."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def __repr__(self) -> str:
        return f"{_PIN_PREFIX}{self.ref!r}"


def pin_in_object_store(obj: Any) -> PinnedObject:
    """Put ``obj`` in the object store, held for the driver's lifetime; returns its id."""
    pinned = PinnedObject(rayfield.put(obj))
    _PINNED[repr(pinned)] = pinned
    return pinned


def get_pinned_object(pinned_id: PinnedObject) -> Any:
    """The object pinned by :func:`pin_in_object_store` (in a trial or the driver).

    Raises:
        TuneError: not an id from :func:`pin_in_object_store`.
    """
    if not isinstance(pinned_id, PinnedObject):
        raise TuneError(f"{pinned_id!r} is not an id from pin_in_object_store()")
    return rayfield.get(pinned_id.ref)
