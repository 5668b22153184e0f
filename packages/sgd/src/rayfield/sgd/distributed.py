"""``DistributedSGD``: synchronous SGD over actors, gradients through the object store.

Strategies (as in the reference):

* ``"simple"``: every worker returns its gradient (a numpy array) to the driver, which
  averages them, puts the mean in the object store once, and every worker applies it.
  The reference implementation, for debugging.
* ``"ps"``: the flat gradient is cut into shards of at most ``grad_shard_bytes``; each
  shard has its own parameter-server actor (``num_cpus=0``). Workers return their shards
  as separate objects, each shard's server averages its column and workers apply the
  averaged shards; the driver only passes object refs, so gradients go worker -> store ->
  server -> store -> worker (zero-copy reads on one node) and steps pipeline.

With ``num_workers=1`` only the worker-local average over its replicas runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

import rayfield
from rayfield.actor import ActorOptions
from rayfield.sgd.param_server import ParameterServer
from rayfield.sgd.utils import check_fits
from rayfield.sgd.worker import SGDWorker

logger = logging.getLogger(__name__)

__all__ = ["DistributedSGD"]

_STRATEGIES = ("ps", "simple")
_RemoteWorker = rayfield.remote(SGDWorker)
_RemoteServer = rayfield.remote(ParameterServer)


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

    Raises:
        TypeError: ``model_creator`` (or a given creator) is not callable.
        ValueError: a count is out of range, ``strategy``/``all_reduce_alg`` is unknown,
            or one worker asks for more than the whole cluster has.

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
        spec = {
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
        }
        resources: ActorOptions = (
            {"num_gpus": devices_per_worker} if gpu else {"num_cpus": devices_per_worker}
        )
        check_fits(resources, rayfield.cluster_resources(), "a worker")
        self.workers = [
            _RemoteWorker.options(**resources).remote(i, spec) for i in range(num_workers)
        ]
        shard_sizes = rayfield.get(self.workers[0].shard_shapes.remote())
        self.num_shards = len(shard_sizes)
        self.ps_actors: list[Any] = []
        if strategy == "ps":
            self.ps_actors = [
                _RemoteServer.options(num_cpus=0).remote(num_workers) for _ in shard_sizes
            ]
        self._in_flight: list[Any] = []
        # Every replica starts from worker 0 replica 0's weights.
        weights = rayfield.put(rayfield.get(self.workers[0].get_flat_weights.remote()))
        rayfield.get([w.set_flat_weights.remote(weights) for w in self.workers])

    def step(self, fetch_stats: bool = False) -> float | None:
        """Run one synchronous SGD step on every replica.

        Args:
            fetch_stats: wait for this step and return its loss (a global barrier). With
                ``"ps"`` and ``False`` the step is only launched (the next call waits for
                it), so the computation pipelines.

        Returns:
            The mean loss of the step over all replicas; None when the step was only
            launched.

        Raises:
            rayfield.exceptions.TaskError: the model's code failed in a worker.
            rayfield.exceptions.ActorDiedError: a worker or server died.
        """
        self._wait_in_flight()
        if self.num_workers == 1:
            refs = [self.workers[0].compute_apply.remote()]
        elif self.strategy == "simple":
            grads = rayfield.get([w.compute_gradients.remote() for w in self.workers])
            mean = np.mean(np.stack(grads), axis=0, dtype=np.float32)
            mean_ref = rayfield.put(mean)
            refs = [w.apply_gradients.remote(mean_ref) for w in self.workers]
            fetch_stats = True
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
        if not fetch_stats:
            self._in_flight = refs
            return None
        return float(np.mean(rayfield.get(refs)))

    def _wait_in_flight(self) -> None:
        refs, self._in_flight = self._in_flight, []
        if refs:
            rayfield.get(refs)

    def foreach_worker(self, fn: Callable[[SGDWorker], Any]) -> list[Any]:
        """``[fn(worker) for each worker]``, each run inside its worker's actor."""
        self._wait_in_flight()
        return rayfield.get([w.foreach_worker.remote(fn) for w in self.workers])

    def foreach_model(self, fn: Callable[[Any], Any]) -> list[Any]:
        """``fn(model)`` for every replica of every worker, as one flat list (worker-major).
        A plain-module replica passes its ``torch.nn.Module``."""
        self._wait_in_flight()
        per_worker = rayfield.get([w.foreach_model.remote(fn) for w in self.workers])
        return [result for results in per_worker for result in results]

    def for_model(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(model)`` on worker 0's first replica."""
        self._wait_in_flight()
        return rayfield.get(self.workers[0].for_model.remote(fn))

    def warmup(self) -> None:
        """Touch a gradient-sized buffer in every worker's object store (first steps then
        do not pay for mapping fresh pages)."""
        rayfield.get([w.warmup.remote() for w in self.workers])

    def save(self, checkpoint: str) -> str:
        """Write worker 0's first replica (weights, optimizer state, step count) to the
        file ``checkpoint`` with ``torch.save``; return the path."""
        self._wait_in_flight()
        blob = rayfield.get(self.workers[0].get_state.remote())
        with open(checkpoint, "wb") as f:
            f.write(blob)
        return checkpoint

    def restore(self, checkpoint: str) -> None:
        """Load a ``save`` file into every replica (``torch.load(weights_only=True)``).

        Raises:
            FileNotFoundError: no such file.
        """
        self._wait_in_flight()
        with open(checkpoint, "rb") as f:
            blob = rayfield.put(f.read())
        rayfield.get([w.set_state.remote(blob) for w in self.workers])

    def shutdown(self) -> None:
        """End the workers and the parameter servers."""
        for actor in [*self.workers, *self.ps_actors]:
            try:
                rayfield.kill(actor)
            except Exception:
                pass
        self.workers, self.ps_actors = [], []
