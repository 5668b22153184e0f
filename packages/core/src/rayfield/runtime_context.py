"""``get_runtime_context()``: who and where the calling code is (Ray's ``RuntimeContext``).

The ``get_*`` methods are Ray 2.x's and return hex strings (None where Ray's do: a task
id in a driver, an actor id outside an actor). The properties ``job_id``, ``node_id``,
``task_id``, ``actor_id`` are the classic API's; they are hex strings too, with the
``hex()`` and ``binary()`` of Ray's ID objects, so both ``ctx.job_id.hex()`` and
``ctx.job_id == "..."`` work.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from rayfield._private.runtime import gpus
from rayfield._private.runtime import runtime as _rt

if TYPE_CHECKING:
    from rayfield.runtime_env import RuntimeEnv

__all__ = ["RuntimeContext", "get_runtime_context"]

DEFAULT_NAMESPACE = ""
"""The namespace of every job: named actors are looked up there unless a call names one."""


class HexID(str):
    """A hex id string that also answers ``hex()`` and ``binary()`` like Ray's ID classes."""

    def hex(self) -> str:
        """The id as hex (the string itself)."""
        return str(self)

    def binary(self) -> bytes:
        """The id's bytes."""
        return bytes.fromhex(self)


def _hex(value: bytes | None) -> HexID | None:
    return HexID(value.hex()) if value else None


class RuntimeContext:
    """The current job, node, worker, task and actor, as seen by the calling code.

    Raises:
        RayfieldError: (at construction) rayfield is not initialized.
    """

    def __init__(self) -> None:
        rt = _rt.get_runtime()
        self._rt = rt
        self._local = rt.local
        self.worker_pid = os.getpid()
        self.is_worker = rt.is_worker

    # ---- Ray 2.x -------------------------------------------------------------------

    def get_job_id(self) -> str:
        """The job (driver) this code works for, as hex: in a task or actor, the job of
        the driver that submitted the work."""
        job = getattr(self._local, "job_id", None) or self._rt.ids.job_id
        return HexID(job.hex())

    def get_task_id(self) -> str | None:
        """The running task's or actor call's id (hex); None in a driver."""
        return _hex(getattr(self._local, "task_id", None))

    def get_actor_id(self) -> str | None:
        """The id (hex) of the actor this code runs in; None outside an actor."""
        return _hex(getattr(self._local, "actor_id", None))

    def get_node_id(self) -> str | None:
        """The id (hex) of the node this process is connected to (None in local mode)."""
        client = getattr(self._rt, "client", None)
        return HexID(client.node_id.hex()) if client is not None else None

    def get_worker_id(self) -> str:
        """This process's worker id (hex): a worker's registration id, a driver's own
        (local mode: the job's)."""
        worker_id = getattr(self._rt, "worker_id", None) or self._rt.ids.job_id
        return HexID(worker_id.hex())

    def get_assigned_resources(self) -> dict[str, float]:
        """What the current task or actor holds by amount, e.g. ``{"CPU": 1.0, "GPU": 0.5}``
        (an actor call: what its actor holds). Empty in a driver."""
        return dict(getattr(self._local, "resources", {}) or {})

    def get_accelerator_ids(self) -> dict[str, list[str]]:
        """The accelerators given to the current task or actor, as Ray's: ``{"GPU":
        ["0", "1"]}`` (device ids as strings; an empty list when it holds none)."""
        grants = (getattr(self._local, "resource_ids", {}) or {}).get("GPU", [])
        devices = gpus.device_ids(grants, gpus.NODE_VISIBLE_DEVICES)[0]
        return {"GPU": [str(device) for device, _ in devices]}

    @property
    def namespace(self) -> str:
        """The job's namespace: rayfield has one, ``""``, where named actors live unless
        ``get_actor``/``options(namespace=...)`` name another."""
        return DEFAULT_NAMESPACE

    @property
    def was_current_actor_reconstructed(self) -> bool:
        """True inside an actor whose constructor ran before in a process that died (a
        restart under ``max_restarts``)."""
        return bool(getattr(self._local, "actor_restarted", False))

    @property
    def current_actor(self) -> Any:
        """A handle to the actor this code runs in.

        Raises:
            RuntimeError: not inside an actor.
        """
        actor_id = getattr(self._local, "actor_id", None)
        cls = getattr(self._local, "actor_class", None)
        if not actor_id or cls is None:
            raise RuntimeError("current_actor is only available inside an actor's methods")
        from rayfield.actor import ActorHandle, _methods

        return ActorHandle(actor_id, _methods(cls), cls.__name__)

    # ---- classic properties -------------------------------------------------------

    @property
    def job_id(self) -> str:
        """The job id (hex; ``.hex()`` works as on Ray's JobID)."""
        return self.get_job_id()

    @property
    def node_id(self) -> str | None:
        """The node id (hex; ``.hex()`` works as on Ray's NodeID)."""
        return self.get_node_id()

    @property
    def task_id(self) -> str | None:
        """The running task's id (hex), None in a driver."""
        return self.get_task_id()

    @property
    def actor_id(self) -> str | None:
        """The current actor's id (hex), None outside an actor."""
        return self.get_actor_id()

    @property
    def runtime_env(self) -> RuntimeEnv:
        """The runtime_env in effect (Ray's ``runtime_env``): in a task or actor, the one
        its worker runs in; in a driver, the job's (``init(runtime_env=...)``). Local paths
        appear as the ``rayfield-pkg://`` URIs of their stored packages; ``{}``: none."""
        from rayfield.runtime_env import RuntimeEnv

        return RuntimeEnv.deserialize(self.get_runtime_env_string())

    def get_runtime_env_string(self) -> str:
        """The runtime_env in effect as JSON (Ray's ``get_runtime_env_string``; ``"{}"``
        when none)."""
        return getattr(self._rt, "runtime_env_string", "") or "{}"

    def get(self) -> dict[str, Any]:
        """The context as a dict: ``job_id``, ``node_id``, ``task_id``, ``actor_id`` (hex
        or None), ``worker_id``, ``worker_pid``, ``is_worker``, ``namespace``."""
        return {
            "job_id": self.get_job_id(),
            "node_id": self.get_node_id(),
            "task_id": self.get_task_id(),
            "actor_id": self.get_actor_id(),
            "worker_id": self.get_worker_id(),
            "worker_pid": self.worker_pid,
            "is_worker": self.is_worker,
            "namespace": self.namespace,
        }


def get_runtime_context() -> RuntimeContext:
    """The :class:`RuntimeContext` of the calling code (Ray's ``ray.get_runtime_context()``).

    Raises:
        RayfieldError: rayfield is not initialized.
    """
    return RuntimeContext()
