"""A worker process: runs the tasks its node dispatches to it, or hosts one actor.

Started by the node as ``python -m rayfield._private.runtime.worker_main SOCKET``. It imports
nothing heavy (no grpc) so a warm pool fills quickly. It exits when the node closes the
connection, after ``max_calls`` runs of a function, or after a task that initialised CUDA
with GPUs that later tasks may not be given (``gpus.CudaPin``).
"""

from __future__ import annotations

import inspect
import os
import pickle
import sys
import threading
import time
import traceback
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import rayfield.exceptions as exceptions
from rayfield._private import context
from rayfield._private.common import bundle_gpus, serialization, task_retry
from rayfield._private.common.events import EventLog
from rayfield._private.runtime import direct_server, gpus, signals
from rayfield._private.runtime.interrupts import Interrupts
from rayfield._private.runtime.object_ref import ObjectRef
from rayfield._private.runtime.runtime import StoreRuntime
from rayfield._private.runtime.task_context import TaskContext
from rayfield.store import StoreConnectionError

if TYPE_CHECKING:  # asyncio (30 ms of imports) loads with the first async actor
    import asyncio


class Worker:
    """The worker loop of one process: connects to its node (``socket_path``), takes its tasks one
    by one and stores their results or errors."""

    def __init__(self, socket_path: str) -> None:
        self.rt = StoreRuntime(socket_path, is_worker=True)
        context.install(context.ProcessContext(context.Mode.WORKER, self.rt))
        self.rt.local = TaskContext()
        # A worker of a runtime_env sets it up first (runtime_env_setup.py, imported only
        # then); a failure fails its tasks instead.
        self.env_error = os.environ.get("RAYFIELD_RUNTIME_ENV_ERROR")
        env_string = os.environ.get("RAYFIELD_RUNTIME_ENV", "")
        if env_string:
            self.env_error = self.env_error or self.setup_runtime_env(env_string)
        self.rt.client.register_worker(self.rt.worker_id, runtime_env=env_string)
        self.interrupts = Interrupts(self.rt.client)
        self.interrupts.install()
        self.actor: Any = None
        self.actor_context: dict[str, Any] = {}  # TaskContext fields of this worker's actor
        self.loop: asyncio.AbstractEventLoop | None = None
        self.calls: dict[bytes, int] = {}
        self.exit_after = False
        # Exits after a task that left CUDA fixed to GPUs a later task may not get.
        self.cuda_pin = gpus.CudaPin(float(os.environ.get("RAYFIELD_NODE_GPUS") or 0))
        self.serializers: set[bytes] = set()
        # A sequential actor's server of direct calls, and the lock its calls and the
        # node's take to run one at a time.
        self.direct: direct_server.DirectServer | None = None
        self.exec_lock = threading.Lock()
        self.direct_actor_id = b""
        logs = os.environ.get("RAYFIELD_LOGS_DIR")
        self.events = EventLog(logs) if logs else None
        self.rt.events = self.events

    def setup_runtime_env(self, env_string: str) -> str | None:
        """Enter the runtime_env ``env_string`` (canonical JSON); None, or why it failed."""
        from pathlib import Path

        from rayfield._private.common import runtime_env as renv
        from rayfield._private.driver import runtime_env_packages
        from rayfield._private.runtime import runtime_env_setup

        try:
            env = renv.parse(env_string)
            cache = Path(os.environ[runtime_env_setup.ENV_DIR_VAR])
            runtime_env_setup.apply(self.rt.client, env, cache)
            runtime_env_packages.set_job_env(self.rt, (env, {}))  # what its tasks inherit
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def send_error_signal(self, err: BaseException) -> None:
        """Send the signal API's ErrorSignal for the failed task or actor."""
        ctx = self.rt.local
        source = ctx.actor_id or ctx.task_id
        try:
            signals.send_from(bytes(source), signals.ErrorSignal(err))
        except Exception:  # an error that cannot be stored is still in the task's result
            pass

    def apply_serializers(self, ids: Any) -> None:
        """Register the custom serializers the driver registered, once each."""
        for sid in ids:
            if sid not in self.serializers:
                cls, ser, deser, subclasses = self.rt.load(sid)
                serialization.register_custom_serializer(
                    cls, ser, deser, include_subclasses=subclasses
                )
                self.serializers.add(sid)

    def run(self) -> None:
        """Run tasks until the node closes the connection or ``max_calls`` is reached."""
        while not self.exit_after:
            try:
                task = self.rt.client.next_task(timeout_s=None)
            except StoreConnectionError:
                return  # the node is gone
            if task is None:
                continue
            is_call = task["actor_id"] is not None and not task["actor_creation"]
            if is_call and self.loop is not None:  # async actor: calls run on its loop
                import asyncio

                asyncio.run_coroutine_threadsafe(self.execute_async(task), self.loop)
            elif self.direct is not None:
                with self.exec_lock:
                    self.execute(task)
            else:
                self.execute(task)

    def execute(self, task: dict[str, Any]) -> None:
        """Run a task on this thread (a coroutine method, if any, on the actor's loop)."""
        steps, value = self.steps(task), None
        while True:
            try:
                coro = steps.send(value)
            except StopIteration:
                return
            try:
                import asyncio

                assert self.loop is not None
                value = (True, asyncio.run_coroutine_threadsafe(coro, self.loop).result())
            except BaseException as exc:
                value = (False, exc)

    async def execute_async(self, task: dict[str, Any]) -> None:
        """Run an actor call on the actor's event loop, awaiting a coroutine method."""
        steps, value = self.steps(task), None
        while True:
            try:
                coro = steps.send(value)
            except StopIteration:
                return
            try:
                value = (True, await coro)
            except BaseException as exc:
                value = (False, exc)

    def steps(self, task: dict[str, Any]) -> Generator[Any, Any, None]:
        """Execute a task; yields the coroutine of an `async def` method to be awaited."""
        start = time.time()
        kind, fid, args_part, return_ids, name, options = pickle.loads(task["payload"])
        options = options or {}
        ctx = self.rt.local
        ctx.task_id, ctx.actor_id = task["task_id"], task["actor_id"]
        ctx.job_id = options.get("job")
        ctx.placement_group = options.get("pg")  # an actor call: its actor's, below
        if task["instances"] or kind != "actor_method":
            ids: dict[str, list[tuple[int, float]]] = {}
            for res, index, amount in task["instances"]:
                ids.setdefault(res, []).append((index, amount))
            if any(name.startswith(bundle_gpus.PREFIX) for name in ids):
                # In a bundle with GPUs: its instances, as the node's devices.
                table = bundle_gpus.read_table(self.rt.socket_path)
                ids["GPU"] = bundle_gpus.node_instances(ids, table)
            ctx.resource_ids, ctx.resources = ids, task.get("resources", {})
            _, visible = gpus.device_ids(ids.get("GPU", []), gpus.NODE_VISIBLE_DEVICES)
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        if kind == "actor_create":
            self.actor_context = {
                "resource_ids": ctx.resource_ids,
                "resources": ctx.resources,
                "job_id": ctx.job_id,
                "placement_group": ctx.placement_group,
                "actor_restarted": task.get("attempt", 0) > 0,
            }
            # Threads the actor starts (a Tune function trainable's) see its group too:
            # get_current_placement_group() and child capture work there.
            TaskContext.placement_group = ctx.placement_group
        elif kind == "actor_method":  # a call: its actor's, unless it holds resources itself
            own = bool(task["instances"] or task.get("resources"))
            for key, value in self.actor_context.items():
                if not (own and key in ("resource_ids", "resources")):
                    setattr(ctx, key, value)
        event = self.task_event(name, task["task_id"], task["actor_id"], options, start)
        if options.get("actor_name"):
            event["actor_name"], event["namespace"] = options["actor_name"]
        staged: list[tuple[bytes, bytes, bytes]] = []  # small results, sent with task_done
        retry = False
        try:
            if self.env_error is not None:
                self.exit_after = kind == "task"  # the next task gets a fresh worker
                raise exceptions.RuntimeEnvSetupError(self.env_error)
            self.apply_serializers(options.get("serializers", ()))
            if kind in ("task", "actor_create"):
                self.rt.load(fid)  # first: it extends sys.path for the arguments' classes
            args, kwargs = self.rt.resolve_args(args_part)
            event["args"] = time.time()
            if kind == "task":  # plain tasks run on the main thread: cancel interrupts them
                self.interrupts.enter(task["task_id"])
                try:
                    result = self.call(kind, fid, name, args, kwargs, options)
                finally:
                    self.interrupts.leave()
            else:
                result = self.call(kind, fid, name, args, kwargs, options)
            if inspect.iscoroutine(result):
                ok, result = yield result
                if not ok:
                    raise result
            event["run"] = time.time()
            self.store_results(return_ids, result, staged)
        except BaseException as exc:  # the task's own error: stored, never fatal
            event["ok"] = False
            event.setdefault("run", time.time())
            staged.clear()
            retry = self.failed(task, kind, name, options, return_ids, exc, "args" in event)
            event.setdefault("args", time.time())
        self.rt.refs.flush()
        event["end"] = time.time()
        if self.events is not None:
            self.events.record(event)
            if "actor_name" in event:  # written before the creation is done: the state
                self.events.flush()  # API of an embedded runtime lists it at once
        max_calls = options.get("max_calls") or 0
        if kind == "task" and max_calls:
            self.calls[fid] = self.calls.get(fid, 0) + 1
            self.exit_after = self.exit_after or self.calls[fid] >= max_calls
        if kind == "task" and not self.exit_after:
            try:
                self.exit_after = self.cuda_pin.must_exit(
                    os.environ.get("CUDA_VISIBLE_DEVICES", "")
                )
            except Exception:  # CUDA's state unknown: a fresh worker takes the next task
                self.exit_after = True
        self.rt.client.task_done(task["task_id"], self.exit_after, staged, retry)

    def failed(
        self,
        task: dict[str, Any],
        kind: str,
        name: str,
        options: dict[str, Any],
        return_ids: list[bytes],
        exc: BaseException,
        ran: bool,
    ) -> bool:
        """Store the error of a task that raised ``exc``; True when it is to run again.

        ``ran``: the task's code ran (False: its arguments could not be fetched, and an
        argument's error, e.g. the ``TaskError`` of the task that made it, is stored as it
        is). A task cancelled while it ran, or one retried (``retry_exceptions``), stores
        nothing: the node seals ``CANCELLED`` errors, or runs it again.
        """
        if isinstance(exc, KeyboardInterrupt) and self.interrupts.raised_for(task["task_id"]):
            return False
        retry_option = options.get("retry_exceptions")
        if (
            ran
            and kind == "task"
            and retry_option
            and task.get("retries_left", 0) != 0
            and task_retry.allows(exc, task_retry.unpack(retry_option))
        ):
            return True
        err: BaseException
        if not ran and isinstance(exc, exceptions.RayfieldError):
            err = exc  # an argument's error, e.g. KeyError raised by the task that made it
        else:
            err = exceptions.TaskError.wrap(
                exc, name, traceback.format_exc(), os.getpid(), self.rt.node_address
            )
        if kind == "actor_create":
            self.actor = _FailedActor(err)
        self.send_error_signal(err)
        obj = serialization.serialize_error(err)
        for rid in return_ids:
            self.rt.store_serialized(rid, obj)
        return False

    def call(
        self,
        kind: str,
        fid: bytes,
        name: str,
        args: list[Any],
        kwargs: dict[str, Any],
        options: dict[str, Any],
    ) -> Any:
        """Run one task's code: the function, the actor's constructor (the worker then hosts the
        actor) or an actor method; returns its value."""
        if kind == "task":
            return self.rt.load(fid)(*args, **kwargs)
        if kind == "actor_create":
            cls = self.rt.load(fid)
            self.rt.local.actor_class = cls
            self.actor_context["actor_class"] = cls
            self.actor = cls.__new__(cls)
            self.actor.__init__(*args, **kwargs)
            self.setup_concurrency(cls, options.get("max_concurrency", 1))
            if self.loop is None and options.get("max_concurrency", 1) == 1:
                self.serve_direct()
            return None
        if isinstance(self.actor, _FailedActor):
            raise exceptions.ActorDiedError(f"the actor's constructor failed: {self.actor.error}")
        return getattr(self.actor, name.rsplit(".", 1)[-1])(*args, **kwargs)

    def setup_concurrency(self, cls: type, max_concurrency: int) -> None:
        """Start the event loop of an async actor, or the extra threads of a threaded actor
        (``max_concurrency`` > 1)."""
        is_async = any(inspect.iscoroutinefunction(m) for _, m in inspect.getmembers(cls))
        if is_async:
            import asyncio

            self.loop = asyncio.new_event_loop()
            threading.Thread(target=self.loop.run_forever, daemon=True, name="actor-loop").start()
        if max_concurrency > 1 and not is_async:
            # Threaded actor: more threads run the same loop. A thread that finishes a call
            # takes the next queued one without a switch; the client sends one idle thread
            # at a time to the calls left queued, and it gets to run one only when the
            # running calls let go of the GIL (block), so cheap calls stay on one thread.
            for i in range(max_concurrency - 1):
                threading.Thread(target=self.run, daemon=True, name=f"actor-{i}").start()

    def serve_direct(self) -> None:
        """Serve direct calls of this sequential actor, when its node allows them."""
        if self.direct is not None or not direct_server.enabled_here():
            return
        self.direct_actor_id = bytes(self.rt.local.actor_id or b"")
        try:
            self.direct = direct_server.DirectServer(
                self.execute_direct, os.environ[direct_server.ENV_NODE_IP]
            )
            self.direct.publish(self.rt.client, self.direct_actor_id)
        except Exception as exc:  # calls take the node's path
            print(f"rayfield: no direct calls for this actor: {exc}", file=sys.stderr)

    def execute_direct(self, call: tuple[Any, ...]) -> list[tuple[bytes, bytes, list[bytes]]]:
        """Run one direct call (``direct_wire.decode_call``'s tuple); its reply's entries."""
        task_id, return_ids, name, data, meta, options = call
        with self.exec_lock:
            ctx = self.rt.local
            ctx.task_id, ctx.actor_id = task_id, self.direct_actor_id
            ctx.job_id = options.get("job")
            ctx.placement_group = None
            for key, value in self.actor_context.items():
                setattr(ctx, key, value)
            start = time.time()
            ok = True
            try:
                self.apply_serializers(options.get("serializers", ()))
                args, kwargs = serialization.deserialize(data, meta)
                result = self.call("actor_method", b"", name, list(args), kwargs, options)
                values = _split_returns(return_ids, result)
                objs = [serialization.serialize(v) for v in values]
            except BaseException as exc:  # the call's own error: its result, never fatal
                ok = False
                err = exceptions.TaskError.wrap(
                    exc, name, traceback.format_exc(), os.getpid(), self.rt.node_address
                )
                self.send_error_signal(err)
                objs = [serialization.serialize_error(err)] * len(return_ids)
            entries = [
                (
                    obj.to_bytes(),
                    bytes(obj.metadata),
                    [h._actor_id for h in obj.contained_refs if not isinstance(h, ObjectRef)],
                )
                for obj in objs
            ]
            self.rt.refs.flush()
            if self.events is not None:
                event = self.task_event(name, task_id, self.direct_actor_id, options, start)
                end = time.time()
                event.update(args=start, run=end, end=end, ok=ok)
                self.events.record(event)
        return entries

    def task_event(
        self,
        name: str,
        task_id: bytes,
        actor_id: bytes | None,
        options: dict[str, Any],
        start: float,
    ) -> dict[str, Any]:
        """The event of a task or call started at ``start`` (seconds since the epoch),
        before its timings and outcome are added."""
        return {
            "kind": "task",
            "name": name,
            "task": task_id.hex(),
            "actor": actor_id.hex() if actor_id else None,
            "pid": os.getpid(),
            "node": self.rt.node_address,
            "submit": options.get("submitted"),
            "start": start,
            "ok": True,
        }

    def store_results(
        self, return_ids: list[bytes], result: Any, staged: list[tuple[bytes, bytes, bytes]]
    ) -> None:
        """Store a task's results: small ones are appended to ``staged`` for task_done."""
        for rid, value in zip(return_ids, _split_returns(return_ids, result)):
            self.rt.stage_result(rid, value, staged)


def _split_returns(return_ids: list[bytes], result: Any) -> list[Any]:
    """The value of each return id: ``result`` itself for one, its items for several.

    Raises:
        ValueError: ``result`` does not have one item per return id.
    """
    if len(return_ids) == 1:
        return [result]
    values = list(result) if isinstance(result, (tuple, list)) else None
    if values is None or len(values) != len(return_ids):
        raise ValueError(
            f"the task declared num_returns={len(return_ids)} but returned "
            f"{type(result).__name__} {'of length ' + str(len(values)) if values else ''}"
        )
    return values


class _FailedActor:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def main() -> None:
    """Entry point: ``python -m rayfield._private.runtime.worker_main SOCKET``."""
    worker = Worker(sys.argv[1])
    try:
        worker.run()
    finally:
        if worker.events is not None:
            worker.events.flush()
        worker.rt.close()


if __name__ == "__main__":
    main()
