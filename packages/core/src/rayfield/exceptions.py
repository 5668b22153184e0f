"""Errors raised by the rayfield API.

Every error a task, an actor or the runtime can produce is a :class:`RayfieldError`.
Classic Ray names are aliases: ``RayError``, ``RayTaskError``, ``RayWorkerError``,
``RayActorError``, ``UnreconstructableError``, ``GetTimeoutError``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ActorDiedError",
    "GetTimeoutError",
    "ObjectLostError",
    "OutOfMemoryError",
    "RayActorError",
    "RayError",
    "RayTaskError",
    "RayWorkerError",
    "RayfieldError",
    "RuntimeEnvSetupError",
    "TaskCancelledError",
    "TaskError",
    "UnreconstructableError",
    "UnsafeFileError",
    "UnsafeSessionError",
    "WorkerCrashedError",
]


class RayfieldError(Exception):
    """Base class of every rayfield error."""


class TaskError(RayfieldError):
    """A task or actor method raised an exception.

    ``get`` raises an instance of a class derived from both ``TaskError`` and the
    original exception's class, so ``except ValueError`` catches a remote
    ``ValueError``. Its message is the remote traceback.

    Attributes:
        function_name: the task's function or method.
        traceback_str: the formatted remote traceback.
        pid: the worker process that ran the task.
        node: the node's address.
        cause: the original exception object.
    """

    function_name: str = ""
    traceback_str: str = ""
    pid: int = 0
    node: str = ""
    cause: BaseException | None = None

    def __str__(self) -> str:
        return (
            f"{self.function_name} failed in worker pid={self.pid} on node {self.node}:\n"
            f"{self.traceback_str}"
        )

    def __reduce__(self) -> Any:
        return (
            _rebuild_task_error,
            (self.cause, self.function_name, self.traceback_str, self.pid, self.node),
        )

    @staticmethod
    def wrap(
        cause: BaseException, function_name: str, traceback_str: str, pid: int, node: str
    ) -> TaskError:
        """Build the error raised for `cause`, an instance of TaskError and of type(cause).

        A `cause` that is itself a task error (a task that let the error of a ``get`` of
        another task's result propagate) keeps the class of the original exception: a
        ``KeyError`` raised two tasks away is still caught by ``except KeyError``.
        """
        if isinstance(cause, TaskError) and cause.cause is not None:
            cause = cause.cause
        cls: type = type(cause)
        if isinstance(cause, TaskError):
            cls = next(c for c in cls.__mro__ if not issubclass(c, TaskError))
        try:
            derived = _derived_class(cls)
            err: TaskError = derived.__new__(derived)  # type: ignore[call-overload]
            err.args = cause.args
            err.__dict__.update(getattr(cause, "__dict__", {}))
        except TypeError:  # a class that cannot be subclassed or instantiated this way
            err = TaskError.__new__(TaskError)
            err.args = cause.args
        err.function_name, err.traceback_str = function_name, traceback_str
        err.pid, err.node, err.cause = pid, node, cause
        return err


_DERIVED: dict[type, type] = {}


def _derived_class(cls: type) -> type:
    if cls is TaskError or issubclass(cls, TaskError):
        return cls
    derived = _DERIVED.get(cls)
    if derived is None:
        derived = type(f"TaskError({cls.__name__})", (TaskError, cls), {"__module__": __name__})
        _DERIVED[cls] = derived
    return derived


def _rebuild_task_error(cause: BaseException, name: str, tb: str, pid: int, node: str) -> TaskError:
    return TaskError.wrap(cause, name, tb, pid, node)


class WorkerCrashedError(RayfieldError):
    """The worker process died while running the task (and no retry was left)."""


class OutOfMemoryError(WorkerCrashedError):
    """The node's memory monitor killed the worker running the task (and no retry was left).

    The node's memory usage passed the monitor's threshold
    (``RAYFIELD_MEMORY_USAGE_THRESHOLD``, default 0.95) while the task ran; the message
    says how much memory was in use and how to change the threshold or turn the monitor
    off.
    """


class ActorDiedError(RayfieldError):
    """The actor is dead: its process died, it was killed, or its constructor failed."""


class ObjectLostError(RayfieldError):
    """The object was lost (evicted or its node died) and cannot be rebuilt."""


class GetTimeoutError(RayfieldError, TimeoutError):
    """``get`` timed out before the object was ready."""


class TaskCancelledError(RayfieldError):
    """The task was cancelled before it finished."""


class TaskUnschedulableError(RayfieldError):
    """The task cannot be scheduled (Ray's ``TaskUnschedulableError``): its
    ``NodeAffinitySchedulingStrategy(node_id, soft=False)`` names a node that is dead,
    unknown, or whose resources can never fit the task. The message names the node."""


class ActorUnschedulableError(ActorDiedError):
    """The actor cannot be scheduled (Ray's ``ActorUnschedulableError``): its hard node
    affinity names a node that is dead, unknown, or too small for it. The actor is dead
    for good: its creation and every call raise this (an ``ActorDiedError``)."""


class RuntimeEnvSetupError(RayfieldError):
    """A task's or actor's runtime_env could not be set up on its node (Ray's
    ``RuntimeEnvSetupError``): a pip install failed (the message ends with pip's output),
    a package could not be fetched or unpacked, or the setup ran past
    ``config["setup_timeout_seconds"]``. The task fails with it, and so does the actor's
    creation and every call of that actor; the node and its other workers go on.

    Attributes:
        error_message: what failed, as the node reported it.
    """

    def __init__(self, error_message: str = "") -> None:
        super().__init__(f"the runtime_env could not be set up: {error_message}")
        self.error_message = error_message

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.error_message,))


class UnsafeFileError(RayfieldError, PermissionError):
    """A directory or file that another local user could control was refused.

    Every rayfield package keeps its files through :mod:`rayfield.util.private_files`:
    a path is trusted only when the current user owns it, neither group nor others can
    write it, and every directory above it is owned by the current user or root and, if
    others can write it, has the sticky bit (as ``/tmp``). The message names the path,
    its owner and mode, and what to do.
    """


class UnsafeSessionError(UnsafeFileError):
    """A session directory, file or socket that another user could control was refused.

    rayfield trusts what it finds under its temp root (``session_latest``, ``node.json``,
    ``cluster.json``, the node's socket), so each must be owned by the current user and
    not writable by group or others. The message names the path, its owner and mode, and
    what to do: remove it, or pass another root with ``temp_dir=`` / ``--temp-dir``.
    """


# Classic Ray names.
RayError = RayfieldError
RayTaskError = TaskError
RayWorkerError = WorkerCrashedError
RayActorError = ActorDiedError
UnreconstructableError = ObjectLostError
