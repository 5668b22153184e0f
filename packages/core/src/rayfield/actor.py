"""Actors: ``@rayfield.remote`` on a class, actor handles and ``@method``.

An unnamed, non-detached actor lives while a handle to it exists anywhere in the cluster
or until the driver that created it exits (``_private/common/actor_scope.py`` has the design):
every ``ActorHandle`` object counts in its process, a handle pickled into task arguments
or into an object is counted by the node until the task finishes or the object is gone.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from rayfield._private import context
from rayfield._private.common import events as _events
from rayfield._private.common import options as opt
from rayfield._private.common import scheduling, serialization
from rayfield._private.common.options import ActorOptions
from rayfield._private.driver import direct_calls, groups, names, runtime_env_packages
from rayfield._private.runtime import placement
from rayfield._private.runtime.runtime import get_runtime

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ActorClass", "ActorHandle", "ActorOptions", "exit_actor", "method"]

_NO_FUNCTION = direct_calls.NO_FUNCTION
C = TypeVar("C")
F = TypeVar("F", bound=Callable[..., Any])


def method(*, num_returns: int = 1, num_return_vals: int | None = None) -> Callable[[F], F]:
    """Declare how many ObjectRefs an actor method returns (Ray's ``ray.method``):
    ``@method(num_returns=2)``.

    Args:
        num_returns: refs per call of the method (1: one ref; n > 1: a list of n).
        num_return_vals: the classic name of ``num_returns`` (wins when given).

    Returns:
        A decorator that marks the method and returns it unchanged.
    """
    n = num_return_vals if num_return_vals is not None else num_returns

    def decorate(fn: F) -> F:
        fn.__rayfield_num_returns__ = n  # type: ignore[attr-defined]
        return fn

    return decorate


def exit_actor() -> None:
    """End the current actor for good, from inside one of its methods (as Ray's).

    The actor's process exits at once and the actor is not restarted, whatever its
    ``max_restarts``: the call that exits and every call queued for the actor raise
    ActorDiedError, and later calls too. In a cluster its name is free again
    (``get_actor(name)`` raises ValueError).

    Raises:
        TypeError: when not called from inside an actor's method.
    """
    rt = get_runtime()
    actor_id = getattr(rt.local, "actor_id", None)
    if not actor_id:
        raise TypeError("exit_actor() must be called from inside an actor's method")
    if rt.events is not None:
        rt.events.flush()
    rt.client.kill_actor(actor_id, True)  # the node ends this process and records the death
    os._exit(0)


def _methods(cls: type) -> dict[str, int]:
    return {
        name: getattr(fn, "__rayfield_num_returns__", 1)
        for name, fn in inspect.getmembers(cls, callable)
        if not name.startswith("__") or name == "__call__"
    }


def name_id(name: str, namespace: str = "") -> bytes:
    """The store id under which a named actor's handle is published."""
    return hashlib.sha1(f"rayfield-actor:{namespace}:{name}".encode()).digest()


class ActorClass(Generic[C]):
    """A class whose instances live in their own worker process (Ray's ``ActorClass``);
    ``C`` is the class.

    Options: ``num_cpus``, ``num_gpus``, ``resources``, ``memory`` (bytes; held for the
    actor's lifetime; with none given the actor holds nothing), ``max_restarts`` (classic
    ``max_reconstructions``), ``max_task_retries``, ``max_concurrency`` (threaded actor),
    ``name``, ``namespace`` and ``get_if_exists`` (then ``rayfield.get_actor(name)`` finds
    it), ``lifetime="detached"``, ``scheduling_strategy`` (``"DEFAULT"``, ``"SPREAD"`` or
    ``rayfield.util.scheduling_strategies.NodeAffinitySchedulingStrategy``, as for tasks),
    ``runtime_env`` (what its worker runs in, over the job's, as for tasks).

    Args:
        cls: the class.
        options: its options (above), checked here.

    Raises:
        TypeError: an unknown option.
        ValueError: an option with a bad value.
    """

    def __init__(self, cls: type[C], options: dict[str, Any]) -> None:
        self._cls = cls
        self._options = opt.normalize(options, actor=True)
        self._methods = _methods(cls)
        # (the runtime it was exported to, weakly: a runtime shut down is not kept alive by
        # its functions; the code id there)
        self._exported: tuple[weakref.ref[Any], bytes] | None = None
        self.__name__ = cls.__name__
        self.__doc__ = cls.__doc__

    def __reduce__(self) -> Any:
        return (ActorClass, (self._cls, self._options))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"Actors cannot be instantiated directly. Instead of '{self.__name__}()', "
            f"use '{self.__name__}.remote()'."
        )

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        """Create an actor: its constructor runs on ``args`` and ``kwargs`` in a worker
        of its own (Ray's ``Cls.remote``); returns at once.

        Args:
            *args: constructor arguments; ObjectRefs among them are replaced by their
                values.
            **kwargs: keyword arguments, likewise.

        Returns:
            The handle of the new actor (or of the live one named so, with
            ``get_if_exists``); calls through it wait for the constructor.

        Raises:
            RayfieldError: rayfield is not initialized.
            ValueError: ``name`` is taken by a live actor (without ``get_if_exists``).
        """
        return self._create(args, kwargs, self._options)

    def options(self, **options: Unpack[ActorOptions]) -> _BoundActorOptions:
        """The class with other options for the actors created through the result (Ray's
        ``Cls.options``): ``Cls.options(name="a", num_gpus=1).remote()``.

        Args:
            **options: actor options (see the class; ``ActorOptions`` lists their
                names and types, so a type checker flags a misspelt one), over the
                class's own. A dict of options passes as ``**opts`` when typed as
                ``ActorOptions``.

        Returns:
            The class bound to these options: ``.remote(...)`` creates an actor with them.

        Raises:
            TypeError: an unknown option (the message names the closest valid one).
            ValueError: an option with a bad value.
        """
        merged = {**self._options, **opt.normalize(dict(options), actor=True)}
        return _BoundActorOptions(self, merged)

    def _remote(self, args: Any = None, kwargs: Any = None, **options: Any) -> ActorHandle:
        """The classic form: ``Cls._remote(args=[...], kwargs={...}, num_cpus=1)``."""
        merged = {**self._options, **opt.normalize(dict(options), actor=True)}
        return self._create(tuple(args or ()), dict(kwargs or {}), merged)

    def _create(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], o: dict[str, Any]
    ) -> ActorHandle:
        rt = get_runtime()
        if o.get("name") and o.get("get_if_exists"):
            existing = _lookup(o["name"], o.get("namespace", ""))
            if existing is not None:
                return existing
        if self._exported is None or self._exported[0]() is not rt:
            self._exported = (weakref.ref(rt), rt.export(self._cls))
        resources, group = placement.placed(o, opt.actor_resources(o))
        actor_id = rt.ids.task_id()
        cluster = context.gcs_address()
        if cluster is not None:  # every actor in the GCS; a name is taken there first
            names.register(
                cluster,
                actor_id,
                o.get("name") or "",
                o.get("namespace", ""),
                o.get("lifetime") == "detached",
                self._methods,
                self.__name__,
                o.get("max_task_retries") or 0,
            )
        is_async = any(inspect.iscoroutinefunction(f) for _, f in inspect.getmembers(self._cls))
        concurrency = o.get("max_concurrency") or (1000 if is_async else 1)
        # An unnamed, non-detached actor ends when no handle to it remains anywhere.
        scoped = not o.get("name") and o.get("lifetime") != "detached"
        handle = ActorHandle(
            actor_id,
            self._methods,
            self.__name__,
            o.get("max_task_retries") or 0,
            _scoped=scoped,
        )
        if group:
            groups.record_actor(group["id"], actor_id)
        [handle._ready] = rt.submit(
            "actor_create",
            self._exported[1],
            args,
            kwargs,
            1,
            f"{self.__name__}.__init__",
            resources,
            max_retries=o.get("max_restarts", 0),
            options={
                "max_concurrency": concurrency,
                **_name_option(o),
                **({"pg": group} if group else {}),
            },
            actor_id=actor_id,
            caller_id=handle._caller_id,
            max_concurrency=concurrency,
            detached=o.get("lifetime") == "detached",
            scheduling=scheduling.encode(o.get("scheduling_strategy")),
            runtime_env=runtime_env_packages.for_submit(rt, o.get("runtime_env")),
        )
        if o.get("name") and cluster is None:  # in a cluster the name lives in the GCS
            from rayfield.store import ObjectExistsError

            nid = name_id(o["name"], o.get("namespace", ""))
            rt.client.pin([nid])  # the name lives as long as this session
            try:
                rt.store_value(nid, handle, exist_ok=False)
            except ObjectExistsError:
                raise ValueError(
                    f"an actor named {o['name']!r} already exists; pick another name or "
                    "pass get_if_exists=True"
                ) from None
            if rt.events is not None:  # the state API lists it from now on, not once it runs
                rt.events.record(
                    _events.actor_named(actor_id, o["name"], o.get("namespace", ""), self.__name__)
                )
                rt.events.flush()
        return handle


class _BoundActorOptions:
    """An actor class with the options of one ``.options(...)`` call."""

    def __init__(self, cls: ActorClass[Any], options: dict[str, Any]) -> None:
        self._cls, self._options = cls, options

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        """Create an actor with these options; as :meth:`ActorClass.remote`."""
        return self._cls._create(args, kwargs, self._options)


def _name_option(o: dict[str, Any]) -> dict[str, Any]:
    """A named actor's name and namespace, carried by its creation task into the task
    events (where the state API of an embedded runtime finds named actors)."""
    if not o.get("name"):
        return {}
    return {"actor_name": [o["name"], o.get("namespace", "")]}


def _in_cluster() -> bool:
    """Whether this process's node belongs to a cluster."""
    return context.gcs_address() is not None


def _lookup(name: str, namespace: str) -> ActorHandle | None:
    cluster = context.gcs_address()
    if cluster is not None:  # the GCS knows every live named actor, and only live ones
        found = names.lookup(cluster, name, namespace)
        return None if found is None else ActorHandle(*found)
    rt = get_runtime()
    from rayfield._private.runtime.object_ref import ObjectRef

    ref: ObjectRef[Any] = ObjectRef(name_id(name, namespace))
    if rt.client.contains(ref.binary()):
        [handle] = rt.get([ref], 10)
        return handle  # type: ignore[no-any-return,unused-ignore]
    return None


class ActorHandle:
    """A reference to an actor. Calls through one handle run in call order.

    Handles can be passed to tasks and actors, returned, and put in the object store; each
    copy orders its own calls. Every copy keeps an unnamed, non-detached actor alive: it
    ends when the last one anywhere in the cluster is gone (calls made before still run).
    """

    def __init__(
        self,
        actor_id: bytes,
        methods: dict[str, int],
        class_name: str,
        max_task_retries: int = 0,
        *,
        _scoped: bool = False,
    ) -> None:
        rt = get_runtime()
        self._actor_id = actor_id
        self._methods = methods
        self._class_name = class_name
        self._max_task_retries = max_task_retries
        self._caller_id = rt.ids.put_id()
        self._seq = 0
        self._lock = threading.Lock()
        self._ready: Any = None
        # The direct path of this handle's calls (a driver in a cluster; made lazily).
        self._direct: Any = None
        self._direct_checked = False
        self._counter = getattr(rt, "handles", None)  # (local mode counts nothing)
        if self._counter is not None:
            self._counter.add(actor_id, _scoped)

    def __del__(self) -> None:
        counter = self.__dict__.get("_counter")
        if counter is None:
            return
        actor_id = self._actor_id

        def drop() -> None:
            try:
                counter.remove(actor_id)
            except Exception:  # interpreter shutdown, closed connection
                pass

        direct = self.__dict__.get("_direct")
        if direct is None:
            drop()
            return
        try:  # the actor stays held until the direct calls in flight are answered
            direct.release(drop)
        except Exception:
            drop()

    def __getattr__(self, name: str) -> ActorMethod:
        methods = self.__dict__.get("_methods", {})
        if name not in methods:
            raise AttributeError(f"actor {self.__dict__.get('_class_name')} has no method {name!r}")
        return ActorMethod(self, name, methods[name])

    def __repr__(self) -> str:
        return f"ActorHandle({self._class_name}, {self._actor_id.hex()})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self) -> int:
        return hash(self._actor_id)

    def __reduce__(self) -> Any:
        ctx = serialization.current_context()
        if ctx is not None:  # the task or object that carries it holds the actor
            ctx.contained_refs.append(self)
        return (
            ActorHandle,
            (self._actor_id, self._methods, self._class_name, self._max_task_retries),
        )

    def _direct_caller(self) -> Any:
        """This handle's direct path (``_private/driver/direct_calls.py``), or None where
        its calls go through the node only (under ``_lock``)."""
        if not self._direct_checked:
            self._direct_checked = True
            rt = get_runtime()
            if direct_calls.enabled(rt):
                self._direct = direct_calls.DirectCaller(
                    rt,
                    self._actor_id,
                    self._class_name,
                    self._max_task_retries,
                    self._lock,
                    self._seq,
                    self._caller_id,
                )
        return self._direct

    def _call(self, name: str, args: Any, kwargs: Any, num_returns: int) -> Any:
        with self._lock:
            direct = self._direct_caller()
            if direct is not None:
                refs = direct.call(name, args, kwargs, num_returns)
                return refs[0] if num_returns == 1 else refs
            seq = self._seq
            self._seq += 1
            refs = get_runtime().submit(
                "actor_method",
                _NO_FUNCTION,
                args,
                kwargs,
                num_returns,
                f"{self._class_name}.{name}",
                {},
                max_retries=self._max_task_retries,
                actor_id=self._actor_id,
                caller_id=self._caller_id,
                sequence_no=seq,
            )
        return refs[0] if num_returns == 1 else refs


class ActorMethod:
    """``handle.method.remote(*args)``; ``.options(num_returns=...)`` per call (Ray's
    ``ActorMethod``)."""

    def __init__(self, handle: ActorHandle, name: str, num_returns: int) -> None:
        self._handle, self._name, self._num_returns = handle, name, num_returns

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Call the method on the actor (Ray's ``handle.method.remote``); returns at
        once. Calls through one handle run in the order made.

        Args:
            *args: the method's arguments; ObjectRefs among them are replaced by their
                values.
            **kwargs: keyword arguments, likewise.

        Returns:
            The ``ObjectRef`` of the result, or a list of ``num_returns`` refs (the
            method's value type is not known statically: annotate the result).

        Raises:
            RayfieldError: rayfield is not initialized.
        """
        return self._handle._call(self._name, args, kwargs, self._num_returns)

    def options(self, *, num_returns: int | None = None, **_: Any) -> ActorMethod:
        """The method with another ``num_returns`` for the calls through the result
        (Ray's ``handle.method.options``); other options are accepted and ignored."""
        return ActorMethod(self._handle, self._name, num_returns or self._num_returns)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"Actor methods cannot be called directly. Instead of running "
            f"'handle.{self._name}()', try 'handle.{self._name}.remote()'."
        )
