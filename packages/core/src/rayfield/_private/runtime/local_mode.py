"""``init(local_mode=True)``: every task runs at once, serially, in the driver.

Same API and errors, no processes: for debugging with pdb and print. Arguments are
deep-copied as a remote call would copy them; results and errors live in memory.
"""

from __future__ import annotations

import copy
import os
import threading
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import rayfield.exceptions as exceptions
from rayfield._private.common.ids import IdGenerator
from rayfield._private.runtime.object_ref import ObjectRef


class LocalRuntime:
    """Implements ``interface.Runtime`` with an in-memory object table."""

    is_worker = False
    node_address = "127.0.0.1"

    def __init__(self, resources: dict[str, float]) -> None:
        self.resources = resources
        self.ids = IdGenerator()
        self.values: dict[bytes, tuple[bool, Any]] = {}  # id -> (is_error, value)
        self.code: dict[bytes, Any] = {}
        self.actors: dict[bytes, Any] = {}
        self.local = threading.local()

    def close(self) -> None:
        """Drop every value."""
        self.values.clear()

    def export(self, obj: Any) -> bytes:
        """Keep ``obj`` (a function or class) under a new id; returns the id."""
        fid = self.ids.put_id()
        self.code[fid] = obj
        return fid

    def put(self, value: Any) -> ObjectRef[Any]:
        """A deep copy of ``value`` under a new ref."""
        oid = self.ids.put_id()
        self.values[oid] = (False, copy.deepcopy(value))
        return ObjectRef(oid)

    def get(self, refs: Sequence[ObjectRef[Any]], timeout_s: float | None) -> list[Any]:
        """The values of ``refs``; raises a task's error as it was raised."""
        out = []
        for r in refs:
            if r.binary() not in self.values:
                raise exceptions.ObjectLostError(f"{r} is unknown in local mode")
            is_error, value = self.values[r.binary()]
            if is_error:
                raise value
            out.append(value)
        return out

    def wait(
        self,
        refs: Sequence[ObjectRef[Any]],
        num_returns: int,
        timeout_s: float | None,
        fetch_local: bool = True,
    ) -> Any:
        """Every task has run already: the first ``num_returns`` refs are ready."""
        return list(refs[:num_returns]), list(refs[num_returns:])

    def submit(
        self,
        kind: str,
        function_id: bytes,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        num_returns: int,
        name: str,
        resources: dict[str, float],
        **kw: Any,
    ) -> list[Any]:
        """Run the task now, in this thread; returns the refs of its results."""
        task_id = self.ids.task_id()
        refs: list[ObjectRef[Any]] = [
            ObjectRef(IdGenerator.return_id(task_id, i)) for i in range(num_returns)
        ]
        resolved = [
            self.get([a], None)[0] if isinstance(a, ObjectRef) else copy.deepcopy(a) for a in args
        ]
        kwargs = {
            k: self.get([v], None)[0] if isinstance(v, ObjectRef) else copy.deepcopy(v)
            for k, v in kwargs.items()
        }
        try:
            if kind == "task":
                result = self.code[function_id](*resolved, **kwargs)
            elif kind == "actor_create":
                self.actors[kw["actor_id"]] = self.code[function_id](*resolved, **kwargs)
                result = None
            else:
                method = getattr(self.actors[kw["actor_id"]], name.rsplit(".", 1)[-1])
                result = method(*resolved, **kwargs)
            values = [result] if num_returns == 1 else list(result)
            for r, v in zip(refs, values):
                self.values[r.binary()] = (False, v)
        except Exception as exc:
            err = exceptions.TaskError.wrap(
                exc, name, traceback.format_exc(), os.getpid(), self.node_address
            )
            for r in refs:
                self.values[r.binary()] = (True, err)
        return refs


if TYPE_CHECKING:
    from rayfield._private.runtime.interface import Runtime

    _implements: type[Runtime] = LocalRuntime  # checked by mypy
