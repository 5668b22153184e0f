"""One ``DistributedSGD`` worker (an actor) and the parameter-server shard.

A worker holds ``devices_per_worker`` model replicas. Each step it computes every
replica's gradients over ``grads_per_step`` batches, averages them inside the worker
(the local all-reduce) into one flat float32 vector, and hands it out whole
(``strategy="simple"``) or cut into shards of at most ``grad_shard_bytes``
(``strategy="ps"``). Every replica then applies the same averaged gradient with its own
optimizer, so all replicas keep identical weights.
"""

from __future__ import annotations

import collections
import io
import itertools
import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from rayfield.sgd.collective import GradBuffer, join_group, leave_group, rendezvous_address
from rayfield.sgd.model import (
    ModuleModel,
    model_parameters,
    model_variables,
)
from rayfield.sgd.pytorch import training

__all__ = ["SGDWorker", "shard_bounds"]


def shard_bounds(
    num_elements: int, grad_shard_bytes: int, itemsize: int = 4
) -> list[tuple[int, int]]:
    """Cut a flat vector of ``num_elements`` items into contiguous shards of at most
    ``grad_shard_bytes`` bytes each (at least one item per shard).

    Returns:
        ``[(start, stop), ...]`` covering ``[0, num_elements)``, sizes as even as possible.

    Raises:
        ValueError: ``num_elements < 0`` or ``grad_shard_bytes < 1``.
    """
    if num_elements < 0 or grad_shard_bytes < 1:
        raise ValueError("num_elements must be >= 0 and grad_shard_bytes >= 1")
    if num_elements == 0:
        return [(0, 0)]
    per_shard = max(1, grad_shard_bytes // itemsize)
    count = math.ceil(num_elements / per_shard)
    edges = [round(i * num_elements / count) for i in range(count + 1)]
    return list(itertools.pairwise(edges))


class SGDWorker:
    """The replicas of one worker. Created by ``DistributedSGD`` inside an actor.

    Args:
        worker_index: this worker's index in ``[0, num_workers)``.
        spec: the options of ``DistributedSGD`` (creators, config, devices, batch size,
            ``grads_per_step``, ``grad_shard_bytes``, ``num_workers``, ``gpu``).
    """

    def __init__(self, worker_index: int, spec: dict[str, Any]) -> None:
        self.worker_index = worker_index
        self.spec = spec
        self.config: dict[str, Any] = dict(spec.get("config") or {})
        torch.set_num_threads(max(1, int(spec.get("num_threads", 1))))
        devices = int(spec["devices_per_worker"])
        self.models = [self._make_model(d) for d in range(devices)]
        self.params = [model_parameters(m) for m in self.models]
        sizes = {sum(int(p.numel()) for p in ps) for ps in self.params}
        if len(sizes) != 1:
            raise ValueError(f"the replicas of one worker differ in size: {sorted(sizes)}")
        self.num_elements = sizes.pop()
        self.bounds = shard_bounds(self.num_elements, int(spec["grad_shard_bytes"]))
        self.buffers = [GradBuffer(ps) for ps in self.params]
        self.last_loss = float("nan")
        self.steps = 0
        self.world_size = 1
        # Seconds each of the last 1000 collective all-reduces took.
        self.allreduce_times: collections.deque[float] = collections.deque(maxlen=1000)

    def _make_model(self, device_index: int) -> Any:
        spec, config = self.spec, self.config
        creator = spec["model_creator"]
        if training.required_positional(creator) >= 2:
            model = creator(self.worker_index, device_index)
        else:
            model = creator(config)
        if spec.get("gpu") and torch.cuda.is_available() and hasattr(model, "to"):
            model = model.to(torch.device("cuda", device_index % torch.cuda.device_count()))
        if callable(getattr(model, "get_loss", None)):
            return model
        if not isinstance(model, torch.nn.Module):
            raise TypeError(
                "model_creator must return a Model (get_loss() and get_optimizer()) or a "
                f"torch.nn.Module, got {type(model).__name__}"
            )
        if spec.get("data_creator") is None or spec.get("optimizer_creator") is None:
            raise TypeError(
                "a plain torch.nn.Module needs data_creator and optimizer_creator; or return a "
                "Model with get_loss() and get_optimizer() from model_creator"
            )
        if spec.get("loss_creator") is not None:
            criterion = training.make_criterion(spec["loss_creator"], config)
            optimizer = spec["optimizer_creator"](model, config)
        else:
            result = spec["optimizer_creator"](model, config)
            if not (isinstance(result, (list, tuple)) and len(result) == 2):
                raise TypeError(
                    "optimizer_creator must return (loss, optimizer) without loss_creator"
                )
            criterion, optimizer = result
        train, _ = training.call_data_creator(spec["data_creator"], spec["batch_size"], config)
        devices = int(spec["devices_per_worker"])
        return ModuleModel(
            model,
            criterion,
            optimizer,
            train,
            int(spec["batch_size"]),
            rank=self.worker_index * devices + device_index,
            world_size=int(spec["num_workers"]) * devices,
            seed=int(config.get("seed", 0)),
        )

    def _user_model(self, model: Any) -> Any:
        return model.model if isinstance(model, ModuleModel) else model

    # ------------------------------------------------------------------ gradients
    def _local_gradient(self, num_workers: int = 1) -> torch.Tensor:
        """Every replica's gradient over ``grads_per_step`` batches, averaged over the
        replicas and divided by ``num_workers``, summed into replica 0's flat buffer
        (returned; the step's mean loss is kept in ``last_loss``).

        The averaging is folded into the loss: each backward runs on
        ``loss / (grads_per_step * devices_per_worker * num_workers)``, a scalar, so the
        gradients come out already scaled and no pass over the buffer divides them. With
        ``num_workers`` > 1 the buffer then only needs an all-reduce SUM across the
        workers to hold the mean (``compute_allreduce_apply``). When the divisor is a
        power of two the result is bit for bit the sum divided afterwards.
        """
        per_step = int(self.spec.get("grads_per_step", 1))
        divisor = per_step * len(self.models) * num_workers
        losses = []
        for model, buffer in zip(self.models, self.buffers):
            buffer.zero()
            for _ in range(per_step):
                loss = model.get_loss()
                (loss / divisor if divisor > 1 else loss).backward()
                losses.append(float(loss.detach()))
            buffer.collect()
        total = self.buffers[0].flat
        for buffer in self.buffers[1:]:
            total += buffer.flat.to(total.device, total.dtype)
        self.last_loss = float(np.mean(losses))
        return total

    def compute_gradients(self) -> np.ndarray:
        """The flat float32 gradient averaged over the replicas and batches (the step's
        mean loss is kept in ``last_loss``)."""
        return self._local_gradient().detach().to("cpu", torch.float32).numpy()

    def compute_gradient_shards(self) -> Any:
        """The averaged gradient cut by ``shard_bounds`` (one return value per shard)."""
        grad = self.compute_gradients()
        shards = tuple(grad[a:b] for a, b in self.bounds)
        return shards[0] if len(shards) == 1 else shards

    def apply_gradients(self, *grads: np.ndarray) -> float:
        """Apply one averaged gradient (whole, or its shards in order) on every replica;
        return the mean loss of the step that produced this worker's share."""
        for model, buffer in zip(self.models, self.buffers):
            buffer.assign(grads)
            model.get_optimizer().step()
        self.steps += 1
        return self.last_loss

    def compute_apply(self) -> float:
        """One local step (a single worker): compute, average over replicas, apply."""
        self._local_gradient()
        return self._apply_local()

    def _apply_local(self) -> float:
        """Copy replica 0's flat buffer to the others' and step every optimizer."""
        total = self.buffers[0].flat
        for model, buffer in zip(self.models, self.buffers):
            if buffer is not self.buffers[0]:
                buffer.flat.copy_(total)
            buffer.scatter()
            model.get_optimizer().step()
        self.steps += 1
        return self.last_loss

    # ------------------------------------------------------- collective all-reduce
    def get_pid(self) -> int:
        return os.getpid()

    def group_address(self) -> str:
        """A rendezvous address on this worker's node (asked of worker 0)."""
        return rendezvous_address()

    def join_group(self, address: str, rank: int, world_size: int, backend: str) -> None:
        """Join (or re-join after a rebuild) the workers' process group."""
        join_group(address, rank, world_size, backend, float(self.spec.get("timeout_s", 60)))
        self.world_size = world_size

    def compute_allreduce_apply(self) -> float:
        """One step of ``strategy="simple"`` with a collective: the local gradient,
        already divided by the number of workers (``_local_gradient``), is all-reduced
        (SUM) in place across the workers' process group, which leaves the mean in every
        worker's buffer, and applied on every replica; returns this worker's mean loss."""
        self._allreduce(self._local_gradient(self.world_size))
        return self._apply_local()

    def _allreduce(self, total: torch.Tensor) -> None:
        """All-reduce (SUM) ``total`` in place across the group: one gloo/nccl call on
        the flat buffer, no copy and no pass of its own. The seconds it took join
        ``allreduce_times``."""
        started = time.perf_counter()
        dist.all_reduce(total)
        self.allreduce_times.append(time.perf_counter() - started)

    def time_allreduce(self, reps: int) -> list[float]:
        """Seconds of ``reps`` all-reduces of the gradient buffer by the step's own code
        (``_allreduce``), each after a barrier, so that a rank's time is the collective's
        alone and not the wait for a peer still computing (for benchmarks; every rank
        must call it). The buffer is zeroed first, so repeated sums cannot overflow; the
        next step zeroes it again anyway."""
        self.buffers[0].flat.zero_()
        times = []
        for _ in range(reps):
            dist.barrier()
            self._allreduce(self.buffers[0].flat)
            times.append(self.allreduce_times[-1])
        return times

    def shard_shapes(self) -> list[int]:
        return [b - a for a, b in self.bounds]

    # ---------------------------------------------------------------------- state
    def get_flat_weights(self) -> np.ndarray:
        return model_variables(self.models[0]).get_flat()

    def set_flat_weights(self, flat: np.ndarray) -> None:
        for model in self.models:
            model_variables(model).set_flat(flat)

    def get_state(self) -> bytes:
        """Replica 0's weights and optimizer state, as ``torch.save`` bytes."""
        model = self.models[0]
        state = {
            "weights": {
                k: torch.from_numpy(v) for k, v in model_variables(model).get_weights().items()
            },
            "optimizer": model.get_optimizer().state_dict(),
            "steps": self.steps,
        }
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return buffer.getvalue()

    def get_steps_and_state(self) -> tuple[int, bytes]:
        """``(steps applied, get_state())``: what a rebuild compares across survivors."""
        return self.steps, self.get_state()

    def set_state(self, blob: bytes) -> None:
        """Load ``get_state`` bytes into every replica (``weights_only=True``)."""
        state = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
        for model in self.models:
            model_variables(model).set_weights(state["weights"])
            model.get_optimizer().load_state_dict(state["optimizer"])
        self.steps = int(state.get("steps", self.steps))

    def warmup(self) -> int:
        """Touch a gradient-sized buffer in the object store; return its size in bytes."""
        import rayfield

        ref = rayfield.put(np.zeros(self.num_elements, dtype=np.float32))
        return int(rayfield.get(ref).nbytes)

    # ------------------------------------------------------------------ foreach
    def foreach_model(self, fn: Callable[[Any], Any]) -> list[Any]:
        return [fn(self._user_model(m)) for m in self.models]

    def for_model(self, fn: Callable[[Any], Any]) -> Any:
        return fn(self._user_model(self.models[0]))

    def foreach_worker(self, fn: Callable[[SGDWorker], Any]) -> Any:
        return fn(self)

    def shutdown(self) -> None:
        leave_group()

    def get_metrics(self) -> list[dict[str, Any]]:
        return [dict(getattr(m, "get_metrics", dict)()) for m in self.models]
