"""The core API: init, shutdown, remote, get, put, wait and friends."""

from __future__ import annotations

import atexit
import inspect
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

import psutil

from rayfield._private import context
from rayfield._private.common.events import EventLog
from rayfield._private.common.ids import task_of
from rayfield._private.common.init_context import InitContext
from rayfield._private.common.options import check_timeout
from rayfield._private.context import Mode, ProcessContext
from rayfield._private.driver import attach, direct_calls, runtime_env_packages
from rayfield._private.runtime import gpus
from rayfield._private.runtime import runtime as _rt
from rayfield._private.runtime.object_ref import ObjectRef
from rayfield.actor import ActorClass, ActorHandle, _lookup
from rayfield.remote_function import RemoteFunction

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from rayfield._private.common.options import RemoteOptions

__all__ = [
    "get",
    "get_actor",
    "get_gpu_ids",
    "get_resource_ids",
    "init",
    "is_initialized",
    "put",
    "register_custom_serializer",
    "remote",
    "shutdown",
    "wait",
]

logger = logging.getLogger("rayfield")
T = TypeVar("T")
R = TypeVar("R")
C = TypeVar("C")


def init(
    address: str | None = None,
    *,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    resources: dict[str, float] | None = None,
    object_store_memory: int | None = None,
    local_mode: bool = False,
    ignore_reinit_error: bool = False,
    temp_dir: str | None = None,
    plasma_directory: str | None = None,
    huge_pages: bool = False,
    log_to_driver: bool = True,
    logging_level: int = logging.INFO,
    configure_logging: bool = True,
    include_dashboard: bool | None = None,
    include_webui: bool | None = None,
    redis_address: str | None = None,
    worker_preload_modules: Sequence[str] | str | None = None,
    runtime_env: dict[str, Any] | None = None,
    _metrics_export_port: int | None = None,
    **unsupported: Any,
) -> InitContext:
    """Start a local cluster (the embedded default) and connect this process to it (Ray's
    ``ray.init``).

    Args:
        address: a running node to connect to instead of starting one (classic
            ``redis_address``; default ``RAYFIELD_ADDRESS``): a cluster's GCS address
            ``host:port`` (a node of it must run on this machine), ``"auto"`` for the latest
            session under `temp_dir`, a session directory, or the node's socket path.
        num_cpus, num_gpus: the node's CPUs and GPUs (detected when None; GPUs from
            ``CUDA_VISIBLE_DEVICES`` or the NVIDIA driver, else 0).
        resources: custom resources, e.g. ``{"accelerator": 2}``.
        object_store_memory: store size in bytes (default 30% of memory, at most 20 GB).
        local_mode: run every task serially in this process (for debugging).
        ignore_reinit_error: make a second ``init()`` a no-op instead of an error.
        temp_dir: root of the session directories (default ``<tmp>/rayfield-<uid>``,
            created mode 0700). It must be this user's and not writable by others.
        plasma_directory, huge_pages: where the store's memory comes from.
        log_to_driver: print worker output here, prefixed with ``(pid=..., ip=...)``.
        logging_level, configure_logging: the level of the root logger, which ``init``
            sets up (``logging.basicConfig``) unless ``configure_logging`` is False.
        include_dashboard: (classic ``include_webui``) the dashboard is served by a
            cluster's head, not by ``init``: a true value only logs a warning saying how to
            start one (``rayfield start --head --include-dashboard``).
        worker_preload_modules: modules (e.g. ``["torch"]``) that a fork server imports
            once, so each worker starts as a fork of it with them already imported instead
            of a fresh interpreter importing them (default ``RAYFIELD_WORKER_PRELOAD_MODULES``,
            comma-separated; ``[]``: off). A module that fails to import is left out with a
            warning; a failed fork server makes the node start fresh workers, with a warning.
        runtime_env: the job's, under each task's and actor's own (``rayfield.runtime_env``;
            default: the JSON in ``RAYFIELD_JOB_RUNTIME_ENV``). Not in local mode.
        _metrics_export_port: serve the node's ``/metrics`` on this loopback port (0: any).

    Returns:
        Address information (``node_ip_address``, ``session_dir``, ``object_store_address``,
        ``webui_url``: a cluster's dashboard URL) as a dict with Ray 2's ``RayContext``
        attributes ``dashboard_url`` (for ``JobSubmissionClient``) and ``address_info``.

    Raises:
        RuntimeError: already initialized (unless ``ignore_reinit_error``).
        TypeError: an argument rayfield does not know (``**unsupported``).
        ValueError: resource arguments given together with ``address``, or an amount
            that is negative or not finite; a preload entry that is not a module name; a
            bad ``runtime_env`` (an unknown key or missing path, named; over 100 MiB).
        ConnectionError: no running node at ``address``.
        UnsafeSessionError: the root, or a session file found there, is not this user's
            alone (another user created it, or others can write it).
    """
    address = address or redis_address or os.environ.get("RAYFIELD_ADDRESS")
    if unsupported:
        raise TypeError(f"init() got unsupported arguments: {', '.join(sorted(unsupported))}")
    ctx = context.current()
    if ctx is not None:
        if ignore_reinit_error:
            return InitContext(ctx.info)
        raise RuntimeError(
            "rayfield.init() was called twice. Pass ignore_reinit_error=True or call "
            "rayfield.shutdown() first."
        )
    if include_dashboard or include_webui:
        _warn_no_dashboard(address is not None)
    job_env = runtime_env_packages.job_env(runtime_env)  # checked (and packed) first
    if address is not None:
        given = (num_cpus, num_gpus, resources, object_store_memory, worker_preload_modules)
        if any(v is not None for v in given):
            raise ValueError(
                "When connecting to an existing cluster, num_cpus, num_gpus, resources, "
                "object_store_memory and worker_preload_modules must not be given: set them "
                "with 'rayfield start'."
            )
        return attach.connect(address, temp_dir, job_env)
    if configure_logging:
        logging.basicConfig(level=logging_level, format="%(asctime)s %(levelname)s %(message)s")
    from rayfield._private.common.options import node_resources_of
    from rayfield._private.common.preload import resolve_modules

    node_resources = node_resources_of(num_cpus, gpus=num_gpus, resources=resources)
    preload = resolve_modules(worker_preload_modules)
    if local_mode:
        from rayfield._private.runtime.local_mode import LocalRuntime

        info = InitContext(node_ip_address="127.0.0.1", local_mode=True)
        context.install(ProcessContext(Mode.LOCAL, LocalRuntime(node_resources), info))
        return info
    memory = object_store_memory or min(int(psutil.virtual_memory().total * 0.3), 20 * 10**9)
    from rayfield._private.common import session_files
    from rayfield._private.node_manager.node import Node as LocalNode

    session = session_files.new_session_dir(Path(temp_dir) if temp_dir else None)
    node = LocalNode(
        session, node_resources, memory, plasma_directory, huge_pages, log_to_driver, preload
    )
    try:
        port = _metrics_export_port
        metrics = {} if port is None else {"metrics_export_address": node.export_metrics(port)}
        runtime = _rt.StoreRuntime(node.socket_path, is_worker=False)
        runtime.events = EventLog(session / "logs")
    except BaseException:
        node.shutdown()
        raise
    info = InitContext(
        node_ip_address="127.0.0.1",
        session_dir=str(session),
        object_store_address=node.socket_path,
        webui_url=None,
        **metrics,
    )
    context.install(ProcessContext(Mode.EMBEDDED, runtime, info, node, runtime.ids.job_id))
    runtime_env_packages.set_job_env(runtime, job_env)
    return info


def _warn_no_dashboard(connecting: bool) -> None:
    where = (
        "init(address=...) connects to a cluster and starts nothing"
        if connecting
        else "the embedded local runtime has no GCS and serves no dashboard"
    )
    logger.warning(
        "include_dashboard: %s. Start a cluster with a dashboard with `rayfield start --head "
        "--include-dashboard`, connect with rayfield.init(address=...), and get its URL "
        "with `rayfield dashboard`.",
        where,
    )


def shutdown(exiting_interpreter: bool = False) -> None:
    """Disconnect and stop everything ``init()`` started (Ray's ``ray.shutdown``).

    A driver connected to a cluster marks its job finished; the node ``init()`` started
    (with its workers) stops. Calling it again, or without ``init()``, does nothing.

    Args:
        exiting_interpreter: accepted for Ray's programs (set when called at exit).
    """
    ctx = context.clear()
    if ctx is None:
        return
    direct_calls.close_all()
    ctx.runtime.close()
    events = getattr(ctx.runtime, "events", None)  # (local mode has no event log)
    if events is not None:
        events.close()
    if ctx.info.get("gcs_address") and ctx.mode is Mode.CONNECTED:
        from rayfield._private.driver import jobs

        jobs.finish(ctx.info["gcs_address"], ctx.job_id, ctx.info.get("temp_dir"))
    if ctx.node is not None:
        ctx.node.shutdown()


atexit.register(shutdown, True)


def is_initialized() -> bool:
    """True between ``init()`` and ``shutdown()``, and in a worker (Ray's
    ``ray.is_initialized``)."""
    return context.current() is not None


class _RemoteDecorator(Protocol):
    """What ``@remote(option=value, ...)`` returns: it makes a function a remote function
    and a class an actor class."""

    @overload
    def __call__(self, target: type[C], /) -> ActorClass[C]: ...  # type: ignore[overload-overlap]

    @overload
    def __call__(self, target: Callable[..., R], /) -> RemoteFunction[R]: ...


@overload
def remote(target: type[C], /) -> ActorClass[C]: ...  # type: ignore[overload-overlap]


@overload
def remote(target: Callable[..., R], /) -> RemoteFunction[R]: ...


@overload
def remote(**options: Unpack[RemoteOptions]) -> _RemoteDecorator: ...


def remote(*args: Any, **options: Any) -> Any:
    """Make a function a remote function, or a class an actor class (Ray's ``ray.remote``).

    ``@remote``, ``@remote(num_cpus=2, num_returns=2)``, ``remote(fn)``.

    Args:
        *args: the function or class, when used as ``@remote`` or ``remote(fn)``.
        **options: task options (:class:`~rayfield.remote_function.RemoteFunction`:
            ``num_returns``, ``num_cpus``, ``num_gpus``, ``resources``, ``memory`` in
            bytes, ``max_calls``, ``max_retries``, ``retry_exceptions``, ``name``) or actor
            options (:class:`~rayfield.actor.ActorClass`: ``max_restarts``,
            ``max_concurrency``, ``name``, ``namespace``, ``lifetime``...).

    Returns:
        A :class:`~rayfield.remote_function.RemoteFunction` for a function, an
        :class:`~rayfield.actor.ActorClass` for a class, or a decorator making one.

    Raises:
        TypeError: the target is neither a function nor a class, or positional arguments
            were given together with options.
        ValueError: an unknown option, or an option with a bad value.
    """

    def wrap(target: Any) -> Any:
        if inspect.isclass(target):
            return ActorClass(target, options)
        if callable(target):
            return RemoteFunction(target, options)
        raise TypeError(f"@remote applies to functions and classes, not {type(target).__name__}")

    if len(args) == 1 and not options and callable(args[0]):
        return wrap(args[0])
    if args:
        raise TypeError("use @remote or @remote(option=value, ...)")
    return wrap


def put(value: T) -> ObjectRef[T]:
    """Store ``value`` in the object store (Ray's ``ray.put``).

    Args:
        value: any picklable value; numpy arrays and buffers are stored without a copy of
            their data in pickle and read back zero-copy.

    Returns:
        The new object's ref; the object lives while a ref to it does.

    Raises:
        RayfieldError: rayfield is not initialized.
        TypeError: ``value`` cannot be serialized (``put`` of an ObjectRef is refused too).
        rayfield.store.StoreFullError: the store has no room for it, even after
            spilling (a MemoryError).
    """
    return _rt.get_runtime().put(value)


_GET_TAKES = "get() takes an ObjectRef or a list of ObjectRefs, got "


@overload
def get(object_refs: ObjectRef[T], *, timeout: float | None = None) -> T: ...


@overload
def get(object_refs: Sequence[ObjectRef[T]], *, timeout: float | None = None) -> list[T]: ...


def get(object_refs: Any, *, timeout: float | None = None) -> Any:
    """The value of an ObjectRef, or the values of a list of them (Ray's ``ray.get``).

    Blocks until they are ready. Numpy arrays are zero-copy, read-only views of the store.

    Args:
        object_refs: one ref, or a list (any iterable) of refs.
        timeout: seconds to wait at most; None waits as long as it takes.

    Returns:
        The value of the ref, or a list of the values in the order of the refs.

    Raises:
        RayfieldError: rayfield is not initialized.
        TaskError: the task raised (also an instance of the original exception's class).
        WorkerCrashedError, ActorDiedError: the process running the task died.
        GetTimeoutError: ``timeout`` seconds passed first.
        TypeError: ``object_refs`` is neither an ObjectRef nor a list of them.
        ValueError: ``timeout`` is negative or NaN.
    """
    check_timeout("get", timeout)
    if isinstance(object_refs, ObjectRef):
        return _rt.get_runtime().get([object_refs], timeout)[0]
    if isinstance(object_refs, (str, bytes)) or not hasattr(object_refs, "__iter__"):
        raise TypeError(_GET_TAKES + type(object_refs).__name__)
    refs = list(object_refs)
    for r in refs:
        if not isinstance(r, ObjectRef):
            raise TypeError(_GET_TAKES + type(r).__name__)
    return _rt.get_runtime().get(refs, timeout)


def wait(
    object_refs: Sequence[ObjectRef[T]],
    num_returns: int = 1,
    timeout: float | None = None,
    *,
    fetch_local: bool = True,
) -> tuple[list[ObjectRef[T]], list[ObjectRef[T]]]:
    """Wait until `num_returns` refs are ready or `timeout` seconds pass.

    Ray's ``wait(object_refs, num_returns=1, timeout=None, fetch_local=True)``; the
    classic positional form ``wait(object_ids, 2, 5.0)`` works too.

    Args:
        object_refs: the refs to wait for (unique).
        num_returns: how many must be ready, 1 to ``len(object_refs)``.
        timeout: seconds to wait at most (None: no limit; 0: look once).
        fetch_local: True: a ref is ready once its object is in this node's store
            (objects made on other nodes of a cluster are fetched here while waiting).
            False: a ref is ready once any node's store holds its object, and nothing is
            fetched here (a later ``get`` fetches it); outside a cluster both are the
            same.

    Returns:
        ``(ready, not_ready)``, each in the input order; ``ready`` has at most
        ``num_returns`` refs.

    Raises:
        TypeError: not a list of ObjectRefs, or a ``fetch_local`` that is not a bool.
        ValueError: duplicates, a bad num_returns, or a ``timeout`` that is negative or NaN.
    """
    check_timeout("wait", timeout)
    if not isinstance(fetch_local, bool):
        raise TypeError(f"fetch_local must be True or False, got {fetch_local!r}")
    refs = list(object_refs)
    if not all(isinstance(r, ObjectRef) for r in refs):
        raise TypeError("wait() takes a list of ObjectRefs")
    if len(set(refs)) != len(refs):
        raise ValueError("wait() requires a list of unique object refs")
    if not refs:
        return [], []
    if isinstance(num_returns, bool) or not isinstance(num_returns, int):
        raise TypeError(f"num_returns must be an int, got {num_returns!r}")
    if not 1 <= num_returns <= len(refs):
        raise ValueError(f"num_returns must be between 1 and {len(refs)}, got {num_returns}")
    return _rt.get_runtime().wait(refs, num_returns, timeout, fetch_local)


def get_actor(name: str, namespace: str = "") -> ActorHandle:
    """The handle of the live actor created with ``name=...`` (Ray's ``ray.get_actor``).

    Args:
        name: the actor's name.
        namespace: its namespace (``""``: the default one every job shares).

    Returns:
        A handle to the actor; in a cluster, also to an actor another driver created.

    Raises:
        ValueError: no live actor has that name in that namespace.
        TypeError: ``name`` or ``namespace`` is not a str.
        RayfieldError: rayfield is not initialized.
    """
    for what, value in (("name", name), ("namespace", namespace)):
        if not isinstance(value, str):
            raise TypeError(
                f"get_actor() takes the actor's {what} as a str, got "
                f"{type(value).__name__} {value!r}"
            )
    handle = _lookup(name, namespace)
    if handle is None:
        raise ValueError(f"no actor named {name!r}")
    return handle


def get_resource_ids() -> dict[str, list[tuple[int, float]]]:
    """The resource instances the node gave the current task or actor (classic Ray's
    ``ray.get_resource_ids()``).

    Returns:
        ``{"CPU": [(index, fraction), ...], "GPU": [...]}``: a whole CPU or GPU is
        ``(index, 1.0)``, a share of one ``(index, fraction)``, e.g. ``{"CPU": [(0, 1.0)],
        "GPU": [(1, 0.5)]}``. GPU indices are the node's GPUs ``0..n-1`` (``get_gpu_ids``
        names them as devices, as ``CUDA_VISIBLE_DEVICES`` does); CPU indices tell
        concurrent tasks' CPUs apart. An actor's calls report what the actor holds. Empty
        in a driver.

    Raises:
        RayfieldError: rayfield is not initialized.
    """
    ids = getattr(_rt.get_runtime().local, "resource_ids", {}) or {}
    return {name: list(grants) for name, grants in ids.items()}


def get_gpu_ids() -> list[int | str]:
    """GPU ids reserved for the current task or actor (Ray's ``ray.get_gpu_ids``);
    ``CUDA_VISIBLE_DEVICES`` is set to them. Empty in a driver.

    The ids are the node's devices: ``0..n-1``, or, when the node was started with
    ``CUDA_VISIBLE_DEVICES`` set (e.g. ``"2,3"``), entries of that list (``[3]`` for the
    node's second GPU); an entry that is not a number (``GPU-<uuid>``) is a string.

    Raises:
        RayfieldError: rayfield is not initialized.
    """
    grants = get_resource_ids().get("GPU", [])
    return [device for device, _ in gpus.device_ids(grants, gpus.NODE_VISIBLE_DEVICES)[0]]


def kill(actor: ActorHandle, *, no_restart: bool = True) -> None:
    """Kill an actor's process now. Its pending and future calls raise ActorDiedError.

    With ``no_restart=False`` the actor is restarted if its ``max_restarts`` allows.

    Raises:
        TypeError: `actor` is not an actor handle.
    """
    if not isinstance(actor, ActorHandle):
        raise TypeError(f"kill() takes an actor handle, got {type(actor).__name__}")
    from rayfield._private.driver import names
    from rayfield.store.errors import ObjectNotFoundError

    cluster = context.gcs_address()
    try:
        _rt.get_runtime().client.kill_actor(actor._actor_id, no_restart)
    except ObjectNotFoundError:
        if cluster is None:
            raise
        from rayfield._private.driver.state_client import kill_actor_elsewhere

        if not kill_actor_elsewhere(actor._actor_id, no_restart):  # it lives on another node
            raise
    if cluster is not None and no_restart:
        names.mark_dead(cluster, actor._actor_id)  # its name, if any, is free again


def cancel(object_ref: ObjectRef[Any], *, force: bool = False, recursive: bool = True) -> None:
    """Cancel the task that returns `object_ref` (Ray's ``ray.cancel``).

    A queued task never runs. A running task gets ``KeyboardInterrupt`` raised in its code
    and its worker goes on with other tasks (``_private/runtime/interrupts.py``); with
    ``force=True`` its worker process is killed instead. ``get`` on its results then raises
    TaskCancelledError. With ``recursive`` (the default) the tasks it submitted are
    cancelled too, also those that were forwarded to other nodes. Cancelling a finished
    task does nothing. In a cluster this also reaches a task that was forwarded to
    another node (the node it was submitted to knows where).

    Args:
        object_ref: a result of the task to cancel.
        force: kill the worker process running it instead of interrupting the task.
        recursive: also cancel the tasks it submitted (and theirs).

    Raises:
        TypeError: not an ObjectRef.
    """
    if not isinstance(object_ref, ObjectRef):
        raise TypeError(f"cancel() takes an ObjectRef, got {type(object_ref).__name__}")
    task_id = task_of(object_ref.binary())
    client = _rt.get_runtime().client
    state = client.cancel_task(task_id, force, recursive)
    if state != "done" or client.contains(object_ref.binary()):
        return
    if context.gcs_address() is not None:  # not on this node: maybe forwarded to another
        from rayfield._private.driver.remote_cancel import cancel_elsewhere

        cancel_elsewhere(client.node_id, task_id, force, recursive)


def register_custom_serializer(
    cls: type,
    serializer: Any = None,
    deserializer: Any = None,
    *,
    use_pickle: bool = False,
    use_dict: bool = False,
    include_subclasses: bool = False,
) -> None:
    """Serialize instances of `cls` as ``deserializer(serializer(value))``, in this process
    and in every worker (registered before their next task).

    ``use_pickle=True`` pickles the class as is; ``use_dict=True`` stores its ``__dict__``.

    Raises:
        ValueError: not exactly one of serializer/deserializer, use_pickle, use_dict.
    """
    from rayfield._private.common import serialization

    modes = [serializer is not None or deserializer is not None, use_pickle, use_dict]
    if sum(modes) != 1 or (modes[0] and (serializer is None or deserializer is None)):
        raise ValueError(
            "pass either serializer and deserializer, or use_pickle=True, or use_dict=True"
        )
    if use_pickle:
        return
    if use_dict:
        serializer, deserializer = _dict_serializer, _dict_deserializer(cls)
    serialization.register_custom_serializer(
        cls, serializer, deserializer, include_subclasses=include_subclasses
    )
    rt = _rt.get_runtime()
    if hasattr(rt, "client"):
        sid = rt.export((cls, serializer, deserializer, include_subclasses))
        rt.serializer_ids = (*rt.serializer_ids, sid)


def _dict_serializer(value: Any) -> dict[str, Any]:
    return dict(vars(value))


class _dict_deserializer:
    def __init__(self, cls: type) -> None:
        self.cls = cls

    def __call__(self, fields: dict[str, Any]) -> Any:
        obj: Any = object.__new__(self.cls)
        obj.__dict__.update(fields)
        return obj
