"""``PyTorchTrainer``: data-parallel training of a PyTorch model on a set of actors.

The driver side. Each replica is an actor holding a ``TorchRunner``; the replicas form a
``torch.distributed`` process group whose rendezvous address replica 0 picks (its node's
address and a port free there), so gradients are all-reduced by ``DistributedDataParallel``
directly between the replicas, never through the driver.

Faults: after every successful epoch the trainer keeps replica 0's state (weights,
optimizer and scheduler states, epoch number). When a replica's process or node dies
during ``train()``, ``validate()``, ``get_model()``, ``save()`` or ``restore()``, the
trainer ends the other replicas, starts as many new ones as the cluster's remaining
resources hold (at least one, at most ``num_replicas``), loads the kept state into them
and runs the call again: at most the epoch in progress is lost. ``max_retries`` bounds
how often this happens per call.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

import rayfield
from rayfield.sgd.faults import gather, retrying
from rayfield.sgd.placement import ActorGroup, check_strategy
from rayfield.sgd.pytorch.runner import TorchRunner
from rayfield.sgd.pytorch.trainable_hooks import trainable_class
from rayfield.sgd.utils import (
    Resources,
    aggregate_stats,
    check_distinct_gpus,
    check_fits,
    check_fits_all,
    check_seconds,
    sgd_mse_optimizer,
    split_batch_size,
)
from rayfield.util import private_files

logger = logging.getLogger(__name__)

__all__ = ["PyTorchTrainer"]

_BACKENDS = ("auto", "gloo", "nccl", "mpi")
_STEP_FREQS = ("epoch", "batch", "manual")

_RemoteRunner = rayfield.remote(TorchRunner)
_T = TypeVar("_T")


def _check_callable(name: str, value: Any, required: bool = False) -> None:
    if value is None and not required:
        return
    if not callable(value):
        raise TypeError(f"{name} must be a function, got {type(value).__name__}")


class PyTorchTrainer:
    """Train a PyTorch model using distributed PyTorch.

    Launches a set of actors which connect via ``torch.distributed`` and coordinate
    gradient updates (``DistributedDataParallel``) to train the provided model.

    Args:
        model_creator: ``config -> torch.nn.Module`` (or a list of modules).
        data_creator: ``config -> (train, validation)`` datasets (``torch.utils.data.Dataset``,
            or ``DataLoader`` used as given); a lone training set is accepted too, and
            ``(batch_size, config) -> ...`` when the function takes two arguments.
        optimizer_creator: ``(model, config) -> (loss, optimizer)``; with ``loss_creator``
            given, ``(model, config) -> optimizer`` (or a list). ``model`` is the list
            of models when ``model_creator`` returns several.
        config: passed to every creator (None means ``{}``).
        num_replicas: replicas (actors) training in parallel, >= 1.
        resources_per_replica: what each replica holds; None means ``Resources(num_cpus=1)``
            (``num_gpus=1`` as well when ``use_gpu``).
        batch_size: the GLOBAL batch size of one update, split evenly across replicas
            (rounded down with a warning when it does not divide).
        backend: ``"auto"`` (nccl when every replica holds whole GPUs, gloo when it
            holds a fraction of one, which other replicas may share, or none),
            ``"gloo"``, ``"nccl"`` (one GPU per replica: NCCL refuses two ranks on one
            device) or ``"mpi"``.
        loss_creator: a loss class such as ``torch.nn.MSELoss`` or ``config -> loss``.
        train_function: ``(model, train_iterator, criterion, optimizer, config) -> stats``
            for one epoch; default: ``training.train_epoch``.
        validation_function: ``(model, val_iterator, criterion, config) -> stats``.
        initialization_hook: ``() -> None`` run first in every replica's process (for
            example to set environment variables).
        scheduler_creator: ``(optimizer, config) -> scheduler`` (or a list).
        scheduler_step_freq: ``"epoch"`` (after each epoch), ``"batch"`` (after each
            batch, default train function only) or ``"manual"``.
        use_gpu: train on GPUs (each replica gets one unless ``resources_per_replica``
            says otherwise).
        max_retries: how many times one call (``train()``, ``validate()``, ``get_model()``,
            ``save()``, ``restore()``) rebuilds the replicas after a replica died, >= 0.
        timeout_s: how long a collective operation waits for a peer before failing
            (seconds), so that a dead peer never hangs the others.
        startup_timeout_s: how long to wait for the replicas' actors to start (seconds).
            When rebuilding, the trainer waits that long for the first replica, then
            twice the first one's start time (at least 5 s) for the others, and goes on
            with those that started.
        placement_strategy: None (each replica placed on its own, as before) or
            ``"PACK"``, ``"SPREAD"``, ``"STRICT_PACK"``, ``"STRICT_SPREAD"``: the
            replicas' resources are reserved at once as one placement group (one bundle
            a replica, replica ``i`` in bundle ``i``) with that strategy; ``"SPREAD"``
            puts them on distinct nodes where it can. The group is waited for up to
            ``startup_timeout_s`` and removed by :meth:`shutdown`.

    Raises:
        TypeError: a creator is not callable, ``config`` is not a dict, or
            ``resources_per_replica`` is not a ``Resources``.
        ValueError: a count is out of range, or ``backend``/``scheduler_step_freq`` is
            not one of the names above, or ``nccl`` is asked for without GPUs or for
            replicas that share a GPU (fractional ``num_gpus``; use ``gloo`` for those).
        ValueError: one replica asks for more than the whole cluster has (for example
            a GPU on a cluster without one), or ``num_replicas`` replicas together ask
            for more than it has (``rayfield.cluster_resources()``, checked before any
            replica starts).
        RuntimeError: the replicas (or their placement group) could not start within
            ``startup_timeout_s``.

    Example:
        trainer = PyTorchTrainer(model_creator, data_creator, config={"lr": 1e-2},
                                 num_replicas=2, batch_size=64)
        for _ in range(5):
            print(trainer.train())
        model = trainer.get_model()
        trainer.shutdown()

    Sources:
        Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel
        Training", VLDB 2020 (DistributedDataParallel's bucketed all-reduce).
    """

    def __init__(
        self,
        model_creator: Callable[..., Any],
        data_creator: Callable[..., Any],
        optimizer_creator: Callable[..., Any] = sgd_mse_optimizer,
        config: dict[str, Any] | None = None,
        num_replicas: int = 1,
        resources_per_replica: Resources | None = None,
        batch_size: int = 16,
        backend: str = "auto",
        *,
        loss_creator: Any = None,
        train_function: Callable[..., Any] | None = None,
        validation_function: Callable[..., Any] | None = None,
        initialization_hook: Callable[[], Any] | None = None,
        scheduler_creator: Callable[..., Any] | None = None,
        scheduler_step_freq: str = "epoch",
        use_gpu: bool = False,
        max_retries: int = 3,
        timeout_s: float = 300.0,
        startup_timeout_s: float = 120.0,
        placement_strategy: str | None = None,
    ) -> None:
        _check_callable("model_creator", model_creator, required=True)
        _check_callable("data_creator", data_creator, required=True)
        _check_callable("optimizer_creator", optimizer_creator, required=True)
        for name, fn in (
            ("train_function", train_function),
            ("validation_function", validation_function),
            ("initialization_hook", initialization_hook),
            ("scheduler_creator", scheduler_creator),
        ):
            _check_callable(name, fn)
        if loss_creator is not None and not callable(loss_creator):
            raise TypeError(
                f"loss_creator must be a loss class or a function, got {loss_creator!r}"
            )
        if config is not None and not isinstance(config, dict):
            hint = " (pass loss_creator=... by keyword)" if callable(config) else ""
            raise TypeError(f"config must be a dict, got {type(config).__name__}{hint}")
        if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"num_replicas must be an int >= 1, got {num_replicas!r}")
        split_batch_size(batch_size, 1)  # type and range of batch_size
        if backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
        if scheduler_step_freq not in _STEP_FREQS:
            raise ValueError(
                f"scheduler_step_freq must be one of {_STEP_FREQS}, got {scheduler_step_freq!r}"
            )
        if scheduler_step_freq == "batch" and train_function is not None:
            raise ValueError('scheduler_step_freq="batch" needs the default train_function')
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        check_seconds("timeout_s", timeout_s)
        check_seconds("startup_timeout_s", startup_timeout_s)
        self.placement_strategy = check_strategy(placement_strategy)
        self._group: ActorGroup | None = None
        if resources_per_replica is None:
            resources_per_replica = Resources(num_cpus=1, num_gpus=1 if use_gpu else 0)
        if not isinstance(resources_per_replica, Resources):
            raise TypeError(
                "resources_per_replica must be rayfield.sgd.Resources(num_cpus, num_gpus, "
                f"resources), got {type(resources_per_replica).__name__}"
            )
        self.resources_per_replica = resources_per_replica.validate()
        use_gpu = use_gpu or resources_per_replica.num_gpus > 0
        if backend == "auto":
            shared = resources_per_replica.num_gpus != int(resources_per_replica.num_gpus)
            backend = "nccl" if use_gpu and not shared else "gloo"
            logger.info("Using %s as backend.", backend)
        if num_replicas > 1 and not torch.distributed.is_available():
            raise ValueError("num_replicas > 1 needs torch.distributed, which this torch lacks")
        if backend == "nccl" and not use_gpu:
            raise ValueError(
                'backend="nccl" needs GPUs: pass use_gpu=True or Resources(num_gpus=1)'
            )
        self.model_creator = model_creator
        self.config: dict[str, Any] = dict(config or {})
        self.num_replicas = num_replicas
        self.batch_size = batch_size
        self.backend = backend
        self.max_retries = max_retries
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self._spec: dict[str, Any] = {
            "model_creator": model_creator,
            "data_creator": data_creator,
            "optimizer_creator": optimizer_creator,
            "loss_creator": loss_creator,
            "train_function": train_function,
            "validation_function": validation_function,
            "initialization_hook": initialization_hook,
            "scheduler_creator": scheduler_creator,
            "scheduler_step_freq": scheduler_step_freq,
            "config": self.config,
            "use_gpu": use_gpu,
            "num_threads": max(1, int(resources_per_replica.num_cpus)),
        }
        self.workers: list[Any] = []
        self.num_failures = 0
        self._last_state: bytes | None = None
        options, total = self.resources_per_replica.actor_options(), rayfield.cluster_resources()
        check_fits(options, total, "a replica")
        check_fits_all(options, num_replicas, total, "num_replicas")
        try:
            self._start_workers(num_replicas, allow_fewer=False)
            self._last_state = rayfield.get(self.workers[0].get_state.remote())
        except BaseException:
            self._kill_workers()  # no replica outlives a trainer that failed to start
            self._remove_group()
            raise

    # ----------------------------------------------------------------- replicas
    def _start_workers(self, num: int, allow_fewer: bool) -> None:
        """Start ``num`` replicas (fewer, at least one, when ``allow_fewer`` and the
        cluster cannot hold them all) and form their process group."""
        options = self.resources_per_replica.actor_options()
        check_fits(options, rayfield.cluster_resources(), "a replica")
        if self.placement_strategy is not None and self._group is None:
            self._group = ActorGroup(
                self.placement_strategy, options, self.num_replicas, self.startup_timeout_s
            )
        handles = [
            _RemoteRunner.options(
                **options, **(self._group.options(i) if self._group else {})
            ).remote(self._spec)
            for i in range(num)
        ]
        probes = [h.get_pid.remote() for h in handles]
        if allow_fewer:
            # Replicas that the cluster can hold start at about the same time as the
            # first one; those still waiting after twice that are waiting for resources.
            began = time.monotonic()
            ready, _ = rayfield.wait(probes, num_returns=1, timeout=self.startup_timeout_s)
            if ready:
                grace = max(5.0, 2 * (time.monotonic() - began))
                ready, _ = rayfield.wait(probes, num_returns=num, timeout=grace)
        else:
            ready, _ = rayfield.wait(probes, num_returns=num, timeout=self.startup_timeout_s)
        if len(ready) < num:
            started = set(ready)
            for h, probe in zip(handles, probes):
                if probe not in started or not allow_fewer:
                    rayfield.kill(h)
            if not allow_fewer or not ready:
                raise RuntimeError(
                    f"only {len(ready)} of {num} replicas started within "
                    f"{self.startup_timeout_s:.0f} s; each needs {options} and the cluster "
                    f"has {rayfield.available_resources()} free"
                )
            handles = [h for h, p in zip(handles, probes) if p in started]
            logger.warning("Continuing with %d of %d replicas", len(handles), num)
        self.workers = handles
        self._gather(probes if len(handles) == num else [h.get_pid.remote() for h in handles])
        world = len(handles)
        if self.backend == "nccl" and world > 1:
            placements = self._gather([h.gpu_placement.remote() for h in handles])
            check_distinct_gpus(placements, self.backend)
        per_replica = split_batch_size(self.batch_size, world)
        address = rayfield.get(handles[0].setup_address.remote()) if world > 1 else None
        self._gather(
            [
                h.setup.remote(address, rank, world, self.backend, self.timeout_s, per_replica)
                for rank, h in enumerate(handles)
            ]
        )

    def _gather(self, refs: list[Any]) -> list[Any]:
        """The results of one call on every replica, in order; fails fast (see
        ``faults.gather``: ``ReplicaFailure`` when a replica died, else user errors)."""
        return gather(refs, self.workers, min(self.timeout_s, 30.0))

    def _kill_workers(self) -> None:
        for h in self.workers:
            try:
                rayfield.kill(h)
            except Exception:
                pass
        self.workers = []

    def _recover(self) -> None:
        self.num_failures += 1
        self._kill_workers()
        self._start_workers(self.num_replicas, allow_fewer=True)
        if self._last_state is not None:
            state_ref = rayfield.put(self._last_state)
            self._gather([w.set_state.remote(state_ref) for w in self.workers])

    def _retrying(self, what: str, call: Callable[[], _T], max_retries: int | None) -> _T:
        """``call()``, with the replicas rebuilt (``_recover``) and ``call`` run again when
        a replica dies during it, at most ``max_retries`` times (None: the trainer's).

        Raises:
            RuntimeError: the trainer is shut down, or replicas died more than
                ``max_retries`` times.
        """
        if not self.workers:
            raise RuntimeError("the trainer is shut down")
        retries = self.max_retries if max_retries is None else max_retries
        return retrying(what, call, self._recover, retries)

    def _call_all(
        self, method: str, max_retries: int | None, keep_state: bool = False
    ) -> list[Any]:
        """``method`` on every replica; with ``keep_state``, then keep replica 0's state.
        A replica's death rebuilds the group and reruns both (``max_retries`` times)."""

        def call() -> list[Any]:
            results = self._gather([getattr(w, method).remote() for w in self.workers])
            if keep_state:
                [self._last_state] = self._gather([self.workers[0].get_state.remote()])
            return results

        return self._retrying(method, call, max_retries)

    # --------------------------------------------------------------- public API
    @classmethod
    def as_trainable(cls, *args: Any, **kwargs: Any) -> type:
        """A Tune Trainable class training ``PyTorchTrainer(*args, **kwargs)``: one
        iteration is one epoch (train, then validate when there is a validation set);
        trial config keys override these arguments or join ``config``. Works without
        rayfield-tune; derives from ``rayfield.tune.Trainable`` when it is installed."""
        return trainable_class(PyTorchTrainer, args, kwargs)

    def train(self, max_retries: int | None = None) -> dict[str, Any]:
        """Run one training epoch on every replica.

        Args:
            max_retries: overrides the trainer's ``max_retries`` for this call.

        Returns:
            The replicas' stats averaged (weighted by samples): ``train_loss``,
            ``num_samples`` (summed), ``epoch_time_s``, ``batch_count``, ``batch_time``
            (s), ``samples_per_s``, ``epoch`` (epochs done), ``num_replicas``.

        Raises:
            RuntimeError: replicas kept dying after ``max_retries`` rebuilds.
            rayfield.exceptions.TaskError: the user's code raised in a replica.
        """
        start = time.perf_counter()
        stats = aggregate_stats(self._call_all("train_epoch", max_retries, keep_state=True))
        wall = time.perf_counter() - start
        stats["samples_per_s"] = stats.get("num_samples", 0) / max(wall, 1e-9)
        stats["num_replicas"] = len(self.workers)
        stats["epoch"] = round(stats["epoch"])
        return stats

    def validate(self, max_retries: int | None = None) -> dict[str, Any]:
        """Evaluate the validation set, shared across the replicas.

        When a replica dies during the call, the replicas are rebuilt from the last
        epoch's state (as in ``train()``) and the validation runs again.

        Args:
            max_retries: overrides the trainer's ``max_retries`` for this call.

        Returns:
            ``validation_loss`` (mean per sample), ``num_samples``, ``val_accuracy``
            (classification) and ``validation_time_s``.

        Raises:
            rayfield.exceptions.TaskError: no validation set, or user code failed.
            RuntimeError: replicas kept dying after ``max_retries`` rebuilds.
        """
        return aggregate_stats(self._call_all("validate", max_retries))

    def _state(self, what: str, max_retries: int | None) -> dict[str, Any]:
        """Replica 0's state dict, read again after a rebuild when replica 0 died."""
        [blob] = self._retrying(
            what, lambda: self._gather([self.workers[0].get_state.remote()]), max_retries
        )
        return dict(torch.load(io.BytesIO(blob), weights_only=True))

    def get_model(self, max_retries: int | None = None) -> Any:
        """A fresh ``model_creator(config)`` holding replica 0's current weights (a list
        when the creator returns several models).

        When replica 0 dies during the call, the replicas are rebuilt from the last
        epoch's state (as in ``train()``) and the weights are read from the new replica 0,
        at most ``max_retries`` times (default: the trainer's).

        Raises:
            RuntimeError: replicas kept dying after ``max_retries`` rebuilds.
        """
        state = self._state("get_model", max_retries)
        models = _as_list(self.model_creator(self.config))
        for model, sd in zip(models, state["models"]):
            model.load_state_dict(sd)
        return models[0] if len(models) == 1 else models

    def save(self, checkpoint: str, max_retries: int | None = None) -> str:
        """Write replica 0's state (``torch.save`` dict: ``epoch``, ``models``,
        ``optimizers``, ``schedulers``) to the file ``checkpoint``; return the path.

        The file is mode 0600 and replaced whole (a temporary file beside it renamed
        over it), through `rayfield.util.private_files`: its directory must be this
        user's and only theirs to write.

        Survives replica 0's death as ``get_model`` does (the file then holds the last
        epoch's state, which the rebuilt replicas loaded).

        Raises:
            OSError: the file cannot be written.
            UnsafeFileError: the file's directory (or one above) is another user's, or
                group or others can write it.
            RuntimeError: replicas kept dying after ``max_retries`` rebuilds.
        """
        state = self._state("save", max_retries)
        with private_files.atomic_write(checkpoint) as f:
            torch.save(state, f)
        return checkpoint

    def restore(self, checkpoint: str, max_retries: int | None = None) -> None:
        """Load a file written by ``save`` (or a bare model ``state_dict``) into every
        replica. Read with ``torch.load(weights_only=True)``, after checking that the
        file is this user's alone (`rayfield.util.private_files`).

        The file's state also becomes the state a rebuild loads. When a replica dies
        during the call, the replicas are rebuilt and the file's state is loaded into
        the new ones, at most ``max_retries`` times (default: the trainer's).

        Raises:
            FileNotFoundError: no such file.
            UnsafeFileError: the file is a symlink, another user's or writable by group
                or others, or a directory above it fails the checks.
            ValueError: the file holds neither a trainer state nor a model state dict.
            RuntimeError: replicas kept dying after ``max_retries`` rebuilds.
        """
        data = private_files.read_bytes(checkpoint, what="the checkpoint")
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        if not isinstance(state, dict):
            raise ValueError(f"{checkpoint} holds no state dict")
        if "models" not in state:
            if not all(isinstance(v, torch.Tensor) for v in state.values()):
                raise ValueError(
                    f"{checkpoint} is neither a trainer checkpoint nor a model state_dict"
                )
            current = self._state("restore", max_retries)
            current["models"] = [state]
            state = current
        buffer = io.BytesIO()
        torch.save(state, buffer)
        self._last_state = buffer.getvalue()

        def load() -> None:
            ref = rayfield.put(self._last_state)
            self._gather([w.set_state.remote(ref) for w in self.workers])

        # A rebuild loads the new _last_state, then ``load`` runs again on the new replicas.
        self._retrying("restore", load, max_retries)

    def shutdown(self) -> None:
        """Leave the process group and end every replica's actor."""
        refs = [w.shutdown.remote() for w in self.workers]
        try:
            rayfield.wait(refs, num_returns=len(refs), timeout=10)
        finally:
            self._kill_workers()
            self._remove_group()

    @property
    def placement_group(self) -> Any:
        """The placement group the replicas run in (``placement_strategy``), else None."""
        return None if self._group is None else self._group.group

    def _remove_group(self) -> None:
        if self._group is not None:
            self._group.remove()
            self._group = None


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]
