"""`WorkerSet`: the local rollout worker and ``num_workers`` remote ones (actors).

The remote workers are started first, so their processes import torch and build
their envs and policies while the driver builds the local worker; the constructor
then sends them the local worker's weights and returns once every remote worker has
them, so a trainer is ready to sample when it is built (and a worker that fails to
start fails here). While it waits, a thread builds the local worker's optimizers
(`build_optimizers`).

Weights go to the remote workers as one object put in the store once per sync
(``rayfield.put``), so every worker reads the same copy. A remote call that fails
because its actor died is handled by `sample`'s failure policy: raise (default),
drop the worker (``ignore_worker_failures``) or start a new one in its place
(``recreate_failed_workers``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rayfield.rllib.evaluation.episode import RolloutMetrics
from rayfield.rllib.evaluation.rollout_worker import RolloutWorker
from rayfield.rllib.models.catalog import ModelCatalog
from rayfield.rllib.policy.sample_batch import SampleBatch
from rayfield.util import get_current_placement_group
from rayfield.util.scheduling_strategies import PlacementGroupSchedulingStrategy

logger = logging.getLogger(__name__)


def build_optimizers(worker: RolloutWorker) -> None:
    """Build the optimizer of each of ``worker``'s policies that builds one lazily (an
    ``optimizer`` property, as `TorchPolicy`'s). `WorkerSet` runs this on a thread while
    its remote workers start: the default `Adam` is cheap to build, but a
    `torch.optim.Optimizer` imports ``torch._dynamo`` when built (about a CPU-second)."""
    for policy in worker.policy_map.values():
        getattr(policy, "optimizer", None)


def worker_resources(config: dict[str, Any]) -> dict[str, float]:
    """The resources each remote worker asks for: ``CPU`` (``num_cpus_per_worker``),
    ``GPU`` (``num_gpus_per_worker``) and ``custom_resources_per_worker``."""
    return {
        "CPU": float(config.get("num_cpus_per_worker", 1) or 0),
        "GPU": float(config.get("num_gpus_per_worker", 0) or 0),
        **{k: float(v) for k, v in (config.get("custom_resources_per_worker") or {}).items()},
    }


def _current_group() -> Any:
    """The placement group this process's trainer runs in (a Tune trial's), else None."""
    import rayfield

    if not rayfield.is_initialized():
        return None
    return get_current_placement_group()


def resource_shortfall(
    num_workers: int,
    config: dict[str, Any],
    total: dict[str, float],
    available: dict[str, float] | None = None,
) -> str | None:
    """Why ``num_workers`` remote workers with ``config``'s per-worker resources cannot all
    start now, as a message that says how to fix it; None when they can.

    Args:
        total: the cluster's resources (``rayfield.cluster_resources()``).
        available: those free now (``rayfield.available_resources()``), before the
            workers are created; None: only ``total`` is checked.

    `WorkerSet` logs the message as a warning and waits: resources may free up and nodes
    may join (an autoscaler, ``rayfield start``)."""
    free = total if available is None else available
    short = []
    for name, amount in worker_resources(config).items():
        need = num_workers * amount
        if amount <= 0 or need <= free.get(name, 0.0) + 1e-9:
            continue
        has = total.get(name, 0.0)
        if need > has + 1e-9:
            short.append(f"{need:g} {name} (the cluster has {has:g})")
        else:
            short.append(
                f"{need:g} {name} ({free.get(name, 0.0):g} of the cluster's {has:g} are free "
                "now: other actors or tasks hold the rest)"
            )
    if not short:
        return None
    return (
        f"{num_workers} rollout workers need {', '.join(short)}: the trainer waits until they "
        "can all start (resources freed, nodes joining, an autoscaler). Lower num_workers or "
        "the per-worker resources (num_cpus_per_worker...), stop other actors or trainers, "
        "or add nodes."
    )


def warn_if_short(num_workers: int, config: dict[str, Any]) -> None:
    """Log :func:`resource_shortfall`'s message when ``num_workers`` remote workers with
    ``config``'s per-worker resources cannot all start on the cluster now (the caller
    then waits for them: a trainer's first iteration needs every worker). Nothing is
    checked inside a placement group (a Tune trial's), whose bundles hold the resources."""
    import rayfield

    if num_workers <= 0 or _current_group() is not None:
        return
    shortfall = resource_shortfall(
        num_workers, config, rayfield.cluster_resources(), rayfield.available_resources()
    )
    if shortfall:
        logger.warning(shortfall)


class WorkerSet:
    """A local `RolloutWorker` and remote ones on the cluster.

    Args:
        env_creator: ``f(EnvContext) -> env``.
        policy: the policy class, or its dotted path (imported by each worker).
        trainer_config: the trainer's config (``num_workers``, ``num_cpus_per_worker``,
            ``num_gpus_per_worker``, ``custom_resources_per_worker``,
            ``ignore_worker_failures``, ``recreate_failed_workers``...).
        num_workers: remote workers to start (default ``trainer_config["num_workers"]``).
        log_dir: the trainer's log directory (``output: "logdir"`` writes there).

    Raises:
        ValueError: ``ignore_worker_failures`` and ``recreate_failed_workers`` both set.
    """

    def __init__(
        self,
        env_creator: Callable[[Any], Any],
        policy: type | str,
        trainer_config: dict[str, Any],
        num_workers: int | None = None,
        log_dir: str = "",
    ) -> None:
        self._env_creator = env_creator
        self._log_dir = log_dir
        self._policy_cls = policy
        self._config = trainer_config
        self._num_workers = int(
            trainer_config.get("num_workers", 0) if num_workers is None else num_workers
        )
        if trainer_config.get("ignore_worker_failures") and trainer_config.get(
            "recreate_failed_workers"
        ):
            raise ValueError(
                "ignore_worker_failures and recreate_failed_workers are mutually exclusive: set one"
            )
        self._remote_workers: list[Any] = []
        self._indices: list[int] = []
        self._actor_cls: Any = None
        self._pending: list[Any] | None = None
        self.num_recreated = 0
        self._group = _current_group()
        warn_if_short(self._num_workers, trainer_config)
        for i in range(1, self._num_workers + 1):
            self._remote_workers.append(self._make_remote(i))
            self._indices.append(i)
        self._local_worker = RolloutWorker(
            env_creator,
            policy,
            trainer_config,
            worker_index=0,
            num_workers=self._num_workers,
            log_dir=log_dir,
        )
        if not self._remote_workers:
            build_optimizers(self._local_worker)
            return
        with ThreadPoolExecutor(1, thread_name_prefix="rllib-optimizer") as pool:
            built = pool.submit(build_optimizers, self._local_worker)
            self.sync_weights(wait=True)  # the first samples come from the learner's weights
            built.result()

    def _make_remote(self, index: int) -> Any:
        import rayfield

        if self._actor_cls is None:
            custom = worker_resources(self._config)
            self._actor_cls = rayfield.remote(
                num_cpus=custom.pop("CPU"), num_gpus=custom.pop("GPU"), resources=custom or None
            )(RolloutWorker)
        cls = self._actor_cls
        if self._group is not None:
            # Worker i goes in bundle i when that bundle can hold it, as a trainer's
            # PlacementGroupFactory lays them out; else in any bundle with room.
            specs = self._group.bundle_specs
            need = worker_resources(self._config)
            fits = index < len(specs) and all(
                specs[index].get(k, 0.0) + 1e-9 >= v for k, v in need.items()
            )
            cls = cls.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._group,
                    placement_group_bundle_index=index if fits else -1,
                    placement_group_capture_child_tasks=True,
                )
            )
        return cls.remote(
            self._env_creator,
            self._policy_cls,
            self._config,
            worker_index=index,
            num_workers=self._num_workers,
            custom_registry=ModelCatalog.snapshot(),
            log_dir=self._log_dir,
        )

    # -- access ---------------------------------------------------------------------
    def local_worker(self) -> RolloutWorker:
        return self._local_worker

    def remote_workers(self) -> list[Any]:
        return list(self._remote_workers)

    def healthy_worker_count(self) -> int:
        return len(self._remote_workers)

    def foreach_worker(self, func: Callable[[Any], Any]) -> list[Any]:
        """``func(worker)`` on the local worker and every remote one."""
        import rayfield

        local = [func(self._local_worker)]
        refs = [w.apply.remote(func) for w in self._remote_workers]
        return local + list(rayfield.get(refs))

    def foreach_worker_with_index(self, func: Callable[[Any, int], Any]) -> list[Any]:
        """``func(worker, index)``; the local worker has index 0."""
        import rayfield

        local = [func(self._local_worker, 0)]
        refs = [w.apply.remote(func, i) for w, i in zip(self._remote_workers, self._indices)]
        return local + list(rayfield.get(refs))

    def foreach_worker_with_id(self, func: Callable[[int, Any], Any]) -> list[Any]:
        return self.foreach_worker_with_index(lambda w, i: func(i, w))

    # -- weights and sampling ---------------------------------------------------------
    def sync_weights(self, global_vars: dict[str, Any] | None = None, wait: bool = False) -> None:
        """Send the local worker's weights (one shared store object) to every remote one.

        Args:
            global_vars: passed to each worker's `set_weights` (``{"timestep": ...}``).
            wait: return once every remote worker has set them (a failed worker is
                handled by the failure policy, as in `sample`); otherwise the calls run in
                the background, ahead of the workers' next calls.
        """
        if not self._remote_workers:
            return
        import rayfield
        from rayfield.exceptions import RayfieldError

        ref = rayfield.put(self._local_worker.get_weights())
        refs = [w.set_weights.remote(ref, global_vars) for w in self._remote_workers]
        if not wait:
            return
        failed = []
        for pos, done in enumerate(refs):
            try:
                rayfield.get(done)
            except RayfieldError as exc:
                self.check_failure_allowed(pos, exc)
                failed.append(pos)
        if failed:
            self.handle_failures(failed)

    def sample(self, pipelined: bool = False) -> tuple[list[SampleBatch], list[RolloutMetrics]]:
        """One batch from each remote worker (or from the local one when there are
        none), and the episodes they finished.

        Args:
            pipelined: return the batches requested by the previous call and request
                the next ones at once, so the workers sample while the caller learns
                (``sample_async``); those batches come from weights one update older.

        Raises:
            RuntimeError: every remote worker has failed.
            rayfield.exceptions.RayfieldError: a worker failed and neither
                ``ignore_worker_failures`` nor ``recreate_failed_workers`` is set.
        """
        if not self._remote_workers:
            return [self._local_worker.sample()], self._local_worker.get_metrics()
        if not pipelined:
            return self._collect([w.sample_and_metrics.remote() for w in self._remote_workers])
        refs = self._pending or [w.sample_and_metrics.remote() for w in self._remote_workers]
        self._pending = None
        out = self._collect(refs)
        self._pending = [w.sample_and_metrics.remote() for w in self._remote_workers]
        return out

    def _collect(self, refs: list[Any]) -> tuple[list[SampleBatch], list[RolloutMetrics]]:
        import rayfield
        from rayfield.exceptions import RayfieldError

        batches: list[SampleBatch] = []
        metrics: list[RolloutMetrics] = []
        failed = []
        for pos, ref in enumerate(refs):
            try:
                batch, m = rayfield.get(ref)
            except RayfieldError as exc:
                self.check_failure_allowed(pos, exc)
                failed.append(pos)
                continue
            batches.append(batch)
            metrics.extend(m)
        if failed:
            self.handle_failures(failed)
        return batches, metrics

    def check_failure_allowed(self, pos: int, exc: BaseException) -> None:
        """Log a failed remote call of the worker at `pos`; re-raise `exc` unless
        ``ignore_worker_failures`` or ``recreate_failed_workers`` is set."""
        if not (
            self._config.get("ignore_worker_failures")
            or self._config.get("recreate_failed_workers")
        ):
            logger.error(
                "rollout worker %d failed; set 'ignore_worker_failures': True or "
                "'recreate_failed_workers': True to keep training",
                self._indices[pos],
            )
            raise exc
        logger.warning("rollout worker %d failed: %s", self._indices[pos], exc)

    def handle_failures(self, positions: list[int]) -> None:
        """Drop or replace (``recreate_failed_workers``) the remote workers at these
        positions of `remote_workers()`.

        Raises:
            RuntimeError: no remote worker is left.
        """
        import rayfield

        for pos in sorted(positions, reverse=True):
            index = self._indices[pos]
            try:
                rayfield.kill(self._remote_workers[pos])
            except Exception:  # already gone
                pass
            if self._config.get("recreate_failed_workers"):
                self._remote_workers[pos] = self._make_remote(index)
                self.num_recreated += 1
                w = self._remote_workers[pos]
                w.set_weights.remote(rayfield.put(self._local_worker.get_weights()))
            else:
                del self._remote_workers[pos]
                del self._indices[pos]
        if not self._remote_workers:
            raise RuntimeError("Not enough healthy workers remain to continue.")

    def sync_filters(self) -> None:
        """Merge the remote workers' filter changes into the local filters and send
        the result back (`FilterManager.synchronize`)."""
        if not self._remote_workers:
            return
        import rayfield

        remote = rayfield.get(
            [w.get_filters.remote(flush_after=True) for w in self._remote_workers]
        )
        local = self._local_worker.filters
        for filters in remote:
            for k, f in filters.items():
                local[k].apply_changes(f, with_buffer=False)
        if self._config.get("synchronize_filters", True):
            copies = {k: f.as_serializable() for k, f in local.items()}
            ref = rayfield.put(copies)
            for w in self._remote_workers:
                w.sync_filters.remote(ref)

    def stop(self) -> None:
        """Close the local envs and end the remote workers."""
        import rayfield

        self._local_worker.stop()
        self._pending = None
        if self._remote_workers and self._config.get("output") is not None:
            # the workers close their output writers (Parquet files are written then)
            stops = [w.stop.remote() for w in self._remote_workers]
            rayfield.wait(stops, num_returns=len(stops), timeout=30)
        for w in self._remote_workers:
            try:
                rayfield.kill(w)
            except Exception:  # already gone
                pass
        self._remote_workers = []
        self._indices = []
