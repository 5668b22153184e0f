"""``Runtime``: what the public API asks of a process's runtime, whichever it is.

Two classes implement it: ``StoreRuntime`` (``runtime.py``: a driver or worker connected
to a node's store) and ``LocalRuntime`` (``local_mode.py``: ``init(local_mode=True)``,
every task run at once in the driver). ``rayfield.api``, ``actor.py`` and
``remote_function.py`` use only these members, so both behave the same to a program.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from rayfield._private.common.ids import IdGenerator
from rayfield._private.runtime.object_ref import ObjectRef

__all__ = ["Runtime"]


@runtime_checkable
class Runtime(Protocol):
    """A process's runtime: objects, tasks and exported code."""

    is_worker: bool
    """True in a worker process (its gets lend the worker's CPU back while blocked)."""
    node_address: str
    """The address of the node this process runs on."""
    ids: IdGenerator
    """Makes the ids of this process's objects, tasks and actors."""

    def close(self) -> None:
        """Drop this process's objects and its connection (``shutdown()``)."""

    def export(self, obj: Any) -> bytes:
        """Make a function or class callable by workers; returns its id."""

    def put(self, value: Any) -> ObjectRef[Any]:
        """``rayfield.put``: store ``value``; returns its ref."""

    def get(self, refs: Sequence[ObjectRef[Any]], timeout_s: float | None) -> list[Any]:
        """``rayfield.get``: the values of ``refs``, raising a task's error as raised.

        Raises:
            GetTimeoutError: not all ready within ``timeout_s`` seconds.
        """

    def wait(
        self,
        refs: Sequence[ObjectRef[Any]],
        num_returns: int,
        timeout_s: float | None,
        fetch_local: bool = True,
    ) -> tuple[list[ObjectRef[Any]], list[ObjectRef[Any]]]:
        """``rayfield.wait``: (ready, not ready), in the order given."""

    def submit(
        self,
        kind: str,
        function_id: bytes,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        num_returns: int,
        name: str,
        resources: dict[str, float],
        *,
        max_retries: int = 0,
        options: dict[str, Any] | None = None,
        actor_id: bytes | None = None,
        caller_id: bytes | None = None,
        sequence_no: int = 0,
        max_concurrency: int = 1,
        detached: bool = False,
        scheduling: str = "",
    ) -> list[Any]:
        """Submit a task (``kind`` "task"), an actor creation or an actor call; returns
        the refs of its ``num_returns`` results. ``resources``: the demand, by name;
        ``scheduling``: the encoded strategy (``common.scheduling.encode``)."""
