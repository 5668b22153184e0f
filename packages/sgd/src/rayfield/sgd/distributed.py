"""``DistributedSGD``: synchronous SGD over actors.

Strategies (as in the reference):

* ``"simple"``: a plain all-reduce (mean) of the workers' gradients, applied by every
  worker. By default (``allreduce="auto"``) the workers form a ``torch.distributed``
  process group (gloo on CPUs, nccl on GPUs) and all-reduce each step's flat gradient in
  place, worker to worker; ``allreduce="driver"`` is the reference's debugging form:
  every worker returns its gradient (a numpy array) to the driver, which averages them
  and puts the mean in the object store for every worker to apply.
* ``"ps"``: the flat gradient is cut into shards of at most ``grad_shard_bytes``; each
  shard has its own parameter-server actor (``num_cpus=0``). Workers return their shards
  as separate objects, each shard's server averages its column and workers apply the
  averaged shards; the driver only passes object refs, so gradients go worker -> store ->
  server -> store -> worker (zero-copy reads on one node) and steps pipeline.

With ``num_workers=1`` only the worker-local average over its replicas runs.

Faults: a step applies its gradient on a worker only once every worker's contribution
has arrived, so when a worker or a server dies during a step, no survivor has applied
it. ``step()`` then replaces the dead actors, loads the state of the surviving worker
with the most steps (or, when no worker survived, the driver's copy, refreshed every
``checkpoint_freq`` steps) into every worker, re-forms the process group and runs the
step again, at most ``max_retries`` times per call. ``foreach_worker``, ``foreach_model``,
``for_model``, ``warmup``, ``save`` and ``restore`` recover the same way and run their
call again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

import rayfield
from rayfield.actor import ActorOptions
from rayfield.sgd.faults import gather, retrying
from rayfield.sgd.param_server import ParameterServer
from rayfield.sgd.placement import ActorGroup, check_strategy
from rayfield.sgd.utils import check_fits, check_fits_all, check_seconds
from rayfield.sgd.worker import SGDWorker
from rayfield.util import private_files

logger = logging.getLogger(__name__)

__all__ = ["DistributedSGD"]

_STRATEGIES = ("ps", "simple")
_ALLREDUCE = ("auto", "gloo", "nccl", "driver")
_RemoteWorker = rayfield.remote(SGDWorker)
_RemoteServer = rayfield.remote(ParameterServer)
_T = TypeVar("_T")


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return value


class DistributedSGD:
    """Experimental distributed SGD: data-parallel synchronous steps on actors.

    Args:
        model_creator: ``(worker_idx, device_idx) -> model`` (or ``config -> model``). A
            model is a ``rayfield.sgd.Model`` (any object with ``get_loss()`` and
            ``get_optimizer()``), or a plain ``torch.nn.Module`` when ``data_creator``
            and ``optimizer_creator`` are given.
        num_workers: worker actors, >= 1.
        devices_per_worker: model replicas per worker (one per device), >= 1.
        gpu: place replicas on GPUs (each worker then holds ``devices_per_worker`` GPUs);
            else each worker holds ``devices_per_worker`` CPUs.
        strategy: ``"ps"`` (sharded parameter server) or ``"simple"`` (average on the
            driver); only matters when ``num_workers > 1``.
        grad_shard_bytes: the largest gradient shard, in bytes; with ``"ps"`` this sets
            how many server actors there are (``ceil(4 * num_params / grad_shard_bytes)``).
        all_reduce_alg: accepted for the reference's signature; only ``"simple"`` (mean
            of the replicas' gradients inside a worker) exists.
        optimizer_creator: ``(module, config) -> (loss, optimizer)`` (or ``-> optimizer``
            with ``loss_creator``), for plain modules.
        data_creator: ``config -> train dataset`` (or ``(train, validation)``), for plain
            modules; each replica reads its shard.
        loss_creator: a loss class or ``config -> loss``, for plain modules.
        batch_size: samples per batch per replica, for plain modules.
        grads_per_step: batches whose gradients each replica accumulates per step.
        config: passed to the creators (None means ``{}``).
        allreduce: how ``"simple"`` all-reduces across workers: ``"auto"`` (``"nccl"``
            with ``gpu``, else ``"gloo"``), ``"gloo"``, ``"nccl"``, or ``"driver"`` (the
            reference's average on the driver through the object store).
        max_retries: rebuilds after actor deaths allowed per call (``step()``,
            ``foreach_worker``, ``save``...), >= 0.
        timeout_s: how long a collective waits for a peer, and a rebuild for a worker
            to answer (seconds).
        checkpoint_freq: every this many steps the driver keeps worker 0's state (the
            state a rebuild loads when no worker survived); 0 keeps only the first one
            and those ``restore`` loads.
        placement_strategy: None (each actor placed on its own, as before: the
            parameter-server shards SPREAD over the nodes) or ``"PACK"``, ``"SPREAD"``,
            ``"STRICT_PACK"``, ``"STRICT_SPREAD"``: the workers' resources are reserved at
            once as one placement group (one bundle a worker, worker ``i`` in bundle
            ``i``) with that strategy, and shard ``j`` runs in bundle ``j % num_workers``
            (so with ``"SPREAD"`` the shards follow the workers over the nodes). The
            group is waited for up to ``timeout_s`` and removed by :meth:`shutdown`.

    Raises:
        TypeError: ``model_creator`` (or a given creator) is not callable.
        ValueError: a count is out of range, ``strategy``/``all_reduce_alg`` is unknown,
            or one worker, or ``num_workers`` workers together, ask for more than the
            whole cluster has (``rayfield.cluster_resources()``, checked before any
            worker starts), or an unknown ``placement_strategy``.
        RuntimeError: the placement group was not placed within ``timeout_s``.

    Example:
        sgd = DistributedSGD(model_creator, num_workers=2, devices_per_worker=1, strategy="ps")
        for i in range(100):
            loss = sgd.step(fetch_stats=i % 10 == 0)
        sgd.foreach_model(lambda model: ...)

    Sources:
        Dean et al., "Large Scale Distributed Deep Networks", NeurIPS 2012 (sharded
        parameter servers); Goyal et al., "Accurate, Large Minibatch SGD", 2017
        (synchronous data-parallel SGD with averaged gradients).
    """

    def __init__(
        self,
        model_creator: Callable[..., Any],
        num_workers: int,
        devices_per_worker: int = 1,
        gpu: bool = False,
        strategy: str = "ps",
        grad_shard_bytes: int = 10_000_000,
        all_reduce_alg: str = "simple",
        *,
        optimizer_creator: Callable[..., Any] | None = None,
        data_creator: Callable[..., Any] | None = None,
        loss_creator: Any = None,
        batch_size: int = 32,
        grads_per_step: int = 1,
        config: dict[str, Any] | None = None,
        allreduce: str = "auto",
        max_retries: int = 3,
        timeout_s: float = 60.0,
        checkpoint_freq: int = 100,
        placement_strategy: str | None = None,
    ) -> None:
        for name, fn in (
            ("model_creator", model_creator),
            ("optimizer_creator", optimizer_creator),
            ("data_creator", data_creator),
            ("loss_creator", loss_creator),
        ):
            if (fn is not None or name == "model_creator") and not callable(fn):
                raise TypeError(f"{name} must be a function, got {type(fn).__name__}")
        _positive_int("num_workers", num_workers)
        _positive_int("devices_per_worker", devices_per_worker)
        _positive_int("grad_shard_bytes", grad_shard_bytes)
        _positive_int("batch_size", batch_size)
        _positive_int("grads_per_step", grads_per_step)
        if strategy not in _STRATEGIES:
            raise ValueError(f"strategy must be one of 'ps', 'simple', got {strategy!r}")
        if allreduce not in _ALLREDUCE:
            raise ValueError(
                f"allreduce must be one of {', '.join(map(repr, _ALLREDUCE))}, got {allreduce!r}"
            )
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        if isinstance(checkpoint_freq, bool) or not isinstance(checkpoint_freq, int):
            raise ValueError(f"checkpoint_freq must be an int >= 0, got {checkpoint_freq!r}")
        if checkpoint_freq < 0:
            raise ValueError(f"checkpoint_freq must be an int >= 0, got {checkpoint_freq!r}")
        check_seconds("timeout_s", timeout_s)
        check_strategy(placement_strategy)
        if all_reduce_alg != "simple":
            raise ValueError(f"unsupported all_reduce_alg {all_reduce_alg!r}: only 'simple' exists")
        if config is not None and not isinstance(config, dict):
            raise TypeError(f"config must be a dict, got {type(config).__name__}")
        if num_workers == 1 and strategy == "ps":
            logger.warning(
                "The parameter server strategy does not make sense for single worker "
                "operation, falling back to simple mode."
            )
            strategy = "simple"
        self.strategy = strategy
        self.num_workers = num_workers
        self.devices_per_worker = devices_per_worker
        self.allreduce = ("nccl" if gpu else "gloo") if allreduce == "auto" else allreduce
        self._collective = strategy == "simple" and self.allreduce != "driver" and num_workers > 1
        self.max_retries = max_retries
        self.timeout_s = float(timeout_s)
        self.checkpoint_freq = checkpoint_freq
        self.num_failures = 0
        self.num_steps = 0
        self._spec = {
            "model_creator": model_creator,
            "optimizer_creator": optimizer_creator,
            "data_creator": data_creator,
            "loss_creator": loss_creator,
            "config": dict(config or {}),
            "devices_per_worker": devices_per_worker,
            "num_workers": num_workers,
            "gpu": gpu,
            "batch_size": batch_size,
            "grads_per_step": grads_per_step,
            "grad_shard_bytes": grad_shard_bytes,
            "num_threads": devices_per_worker,
            "timeout_s": self.timeout_s,
        }
        self._worker_resources: ActorOptions = (
            {"num_gpus": devices_per_worker} if gpu else {"num_cpus": devices_per_worker}
        )
        total = rayfield.cluster_resources()
        check_fits(self._worker_resources, total, "a worker")
        check_fits_all(self._worker_resources, num_workers, total, "num_workers")
        self._group = (
            ActorGroup(placement_strategy, self._worker_resources, num_workers, self.timeout_s)
            if placement_strategy is not None
            else None
        )
        self.ps_actors: list[Any] = []
        self._in_flight: list[Any] = []
        self.workers: list[Any] = []
        try:
            self.workers = [self._new_worker(i) for i in range(num_workers)]
            shard_sizes = rayfield.get(self.workers[0].shard_shapes.remote())
            self.num_shards = len(shard_sizes)
            if strategy == "ps":
                self.ps_actors = [self._new_server(j) for j in range(len(shard_sizes))]
            self._form_group()
            # Every replica starts from worker 0 replica 0's weights.
            weights = rayfield.put(rayfield.get(self.workers[0].get_flat_weights.remote()))
            rayfield.get([w.set_flat_weights.remote(weights) for w in self.workers])
            self._last_state: bytes = rayfield.get(self.workers[0].get_state.remote())
        except BaseException:
            self.shutdown()  # no actor outlives a DistributedSGD that failed to start
            raise

    # ------------------------------------------------------------------ actors
    def _new_worker(self, index: int) -> Any:
        placed = self._group.options(index) if self._group else {}
        return _RemoteWorker.options(**self._worker_resources, **placed).remote(index, self._spec)

    def _new_server(self, shard: int) -> Any:
        # SPREAD: the shards go round robin over the nodes, as the reference placed its
        # parameter servers across the machines; in a group, round robin over its bundles.
        placed: dict[str, Any] = {"scheduling_strategy": "SPREAD"}
        if self._group is not None:
            placed = self._group.options(shard)
        return _RemoteServer.options(num_cpus=0, **placed).remote(self.num_workers)

    def _form_group(self) -> None:
        """(Re)form the workers' process group for the collective all-reduce."""
        if not self._collective:
            return
        # Every worker first finishes starting (a new one imports torch and builds its
        # models), so that the rendezvous' timeout only covers the rendezvous.
        self._gather([w.get_pid.remote() for w in self.workers])
        address = rayfield.get(self.workers[0].group_address.remote())
        self._gather(
            [
                w.join_group.remote(address, rank, self.num_workers, self.allreduce)
                for rank, w in enumerate(self.workers)
            ]
        )

    def _gather(self, refs: list[Any]) -> list[Any]:
        return gather(refs, [*self.workers, *self.ps_actors], min(self.timeout_s, 30.0))

    def _alive(self, actors: list[Any]) -> list[bool]:
        """Whether each actor answers (a dead one's probe fails; a stuck one times out)."""
        probes = [a.get_pid.remote() for a in actors]
        alive = []
        for probe in probes:
            try:
                rayfield.get(probe, timeout=self.timeout_s)
                alive.append(True)
            except Exception:
                alive.append(False)
        return alive

    def _recover(self) -> None:
        """Replace the dead workers and servers; load the last good state into every
        worker: that of the surviving worker with the most steps (a failed step applies
        nowhere, so a survivor holds the state before it), else the driver's copy."""
        self.num_failures += 1
        self._in_flight = []
        workers_alive = self._alive(self.workers)
        servers_alive = self._alive(self.ps_actors)
        state: bytes | None = None
        best = -1
        for worker, alive in zip(self.workers, workers_alive):
            if not alive:
                continue
            try:
                steps, blob = rayfield.get(worker.get_steps_and_state.remote(), timeout=60)
            except Exception:
                continue
            if steps > best:
                best, state = steps, blob
        if state is None:
            state = self._last_state
        for i, alive in enumerate(workers_alive):
            if not alive:
                _kill(self.workers[i])
                self.workers[i] = self._new_worker(i)
        for j, alive in enumerate(servers_alive):
            if not alive:
                _kill(self.ps_actors[j])
                self.ps_actors[j] = self._new_server(j)
        logger.warning(
            "Replaced %d worker(s) and %d parameter server(s); resuming from step %s",
            workers_alive.count(False),
            servers_alive.count(False),
            best if best >= 0 else "of the driver's copy",
        )
        self._form_group()
        state_ref = rayfield.put(state)
        self._gather([w.set_state.remote(state_ref) for w in self.workers])

    # ---------------------------------------------------------------- training
    def _retrying(self, what: str, call: Callable[[], _T], max_retries: int | None) -> _T:
        """``call()``, rebuilt (``_recover``) and called again when an actor dies during
        it, at most ``max_retries`` times (None: the constructor's)."""
        retries = self.max_retries if max_retries is None else max_retries
        return retrying(what, call, self._recover, retries)

    def step(self, fetch_stats: bool = False, max_retries: int | None = None) -> float | None:
        """Run one synchronous SGD step on every replica.

        When a worker or parameter-server actor dies during the step (or during the
        pipelined step before it), the dead actors are replaced, every worker loads the
        last good state (see ``max_retries``) and the step runs again.

        Args:
            fetch_stats: wait for this step and return its loss (a global barrier). With
                ``"ps"`` and ``False`` the step is only launched (the next call waits for
                it), so the computation pipelines.
            max_retries: rebuilds allowed in this call (default: the constructor's).

        Returns:
            The mean loss of the step over all replicas; None when the step was only
            launched.

        Raises:
            rayfield.exceptions.TaskError: the model's code failed in a worker.
            RuntimeError: actors died more than ``max_retries`` times in this call.
        """
        loss = self._retrying("step", lambda: self._step(fetch_stats), max_retries)
        self.num_steps += 1
        if self.checkpoint_freq and self.num_steps % self.checkpoint_freq == 0:
            self._keep_state()
        return loss

    def _keep_state(self) -> None:
        self._wait_in_flight()
        [self._last_state] = self._gather([self.workers[0].get_state.remote()])

    def _step(self, fetch_stats: bool) -> float | None:
        self._wait_in_flight()
        if self.num_workers == 1:
            refs = [self.workers[0].compute_apply.remote()]
        elif self._collective:
            refs = [w.compute_allreduce_apply.remote() for w in self.workers]
        elif self.strategy == "simple":
            grads = self._gather([w.compute_gradients.remote() for w in self.workers])
            mean = np.mean(np.stack(grads), axis=0, dtype=np.float32)
            mean_ref = rayfield.put(mean)
            refs = [w.apply_gradients.remote(mean_ref) for w in self.workers]
        else:
            shards = []
            for w in self.workers:
                out = w.compute_gradient_shards.options(num_returns=self.num_shards).remote()
                shards.append(out if self.num_shards > 1 else [out])
            averaged = [
                server.aggregate.remote(*[shards[w][j] for w in range(self.num_workers)])
                for j, server in enumerate(self.ps_actors)
            ]
            refs = [w.apply_gradients.remote(*averaged) for w in self.workers]
        if not fetch_stats and self.strategy == "ps":
            self._in_flight = refs
            return None
        return float(np.mean(self._gather(refs)))

    def _wait_in_flight(self) -> None:
        refs, self._in_flight = self._in_flight, []
        if refs:
            self._gather(refs)

    def foreach_worker(
        self, fn: Callable[[SGDWorker], Any], max_retries: int | None = None
    ) -> list[Any]:
        """``[fn(worker) for each worker]``, each run inside its worker's actor.

        When a worker dies during the call, the dead actors are replaced and reloaded as
        in ``step()`` and ``fn`` runs again on every worker (so on a survivor it may run
        twice: keep it idempotent), at most ``max_retries`` times (default: the
        constructor's).

        Raises:
            rayfield.exceptions.TaskError: ``fn`` raised in a worker.
            RuntimeError: actors died more than ``max_retries`` times in this call.
        """
        return self._on_workers("foreach_worker", fn, max_retries)

    def foreach_model(self, fn: Callable[[Any], Any], max_retries: int | None = None) -> list[Any]:
        """``fn(model)`` for every replica of every worker, as one flat list (worker-major).
        A plain-module replica passes its ``torch.nn.Module``. Survives a worker's death
        as ``foreach_worker`` does."""
        per_worker = self._on_workers("foreach_model", fn, max_retries)
        return [result for results in per_worker for result in results]

    def for_model(self, fn: Callable[[Any], Any], max_retries: int | None = None) -> Any:
        """``fn(model)`` on worker 0's first replica. Survives worker 0's death as
        ``foreach_worker`` does (``fn`` then runs on its replacement)."""
        return self._on_workers("for_model", fn, max_retries, only_first=True)[0]

    def _on_workers(
        self, method: str, fn: Any, max_retries: int | None, only_first: bool = False
    ) -> list[Any]:
        """The worker method ``method(fn)`` on every worker (or worker 0), retried after
        actor deaths; waits for a pipelined step first."""

        def call() -> list[Any]:
            self._wait_in_flight()
            workers = self.workers[:1] if only_first else self.workers
            return self._gather([getattr(w, method).remote(fn) for w in workers])

        return self._retrying(method, call, max_retries)

    def warmup(self, max_retries: int | None = None) -> None:
        """Touch a gradient-sized buffer in every worker's object store (first steps then
        do not pay for mapping fresh pages). Survives a worker's death as ``step()``."""
        self._retrying(
            "warmup",
            lambda: self._gather([w.warmup.remote() for w in self.workers]),
            max_retries,
        )

    def save(self, checkpoint: str, max_retries: int | None = None) -> str:
        """Write worker 0's first replica (weights, optimizer state, step count) to the
        file ``checkpoint`` with ``torch.save``; return the path. The file is mode 0600
        and replaced whole, through `rayfield.util.private_files`: its directory must be
        this user's and only theirs to write.

        When worker 0 dies during the call, the dead actors are replaced and reloaded as
        in ``step()`` (from the surviving worker with the most steps) and the state is
        read again, at most ``max_retries`` times (default: the constructor's).

        Raises:
            OSError: the file cannot be written.
            UnsafeFileError: the file's directory (or one above) is another user's, or
                group or others can write it.
            RuntimeError: actors died more than ``max_retries`` times in this call.
        """

        def read_state() -> bytes:
            self._wait_in_flight()
            [blob] = self._gather([self.workers[0].get_state.remote()])
            return bytes(blob)

        blob = self._retrying("save", read_state, max_retries)
        private_files.write_bytes(checkpoint, blob)
        return checkpoint

    def restore(self, checkpoint: str, max_retries: int | None = None) -> None:
        """Load a ``save`` file into every replica (``torch.load(weights_only=True)``),
        after checking that the file is this user's alone (`rayfield.util.private_files`).

        The file's state also becomes the driver's copy (what a rebuild loads when no
        worker survives). When a worker dies during the call, the dead actors are
        replaced and the file's state is loaded again into every worker, at most
        ``max_retries`` times (default: the constructor's).

        Raises:
            FileNotFoundError: no such file.
            UnsafeFileError: the file is a symlink, another user's or writable by group
                or others, or a directory above it fails the checks.
            RuntimeError: actors died more than ``max_retries`` times in this call.
        """
        state = private_files.read_bytes(checkpoint, what="the checkpoint")

        def load() -> None:
            self._wait_in_flight()
            blob = rayfield.put(state)
            self._gather([w.set_state.remote(blob) for w in self.workers])

        self._last_state = state
        self._retrying("restore", load, max_retries)

    @property
    def placement_group(self) -> Any:
        """The placement group the workers and shards run in (``placement_strategy``), else None."""
        return None if self._group is None else self._group.group

    def shutdown(self) -> None:
        """End the workers and the parameter servers."""
        for actor in [*self.workers, *self.ps_actors]:
            _kill(actor)
        self.workers, self.ps_actors = [], []
        if self._group is not None:
            self._group.remove()
            self._group = None


def _kill(actor: Any) -> None:
    try:
        rayfield.kill(actor)
    except Exception:
        pass
