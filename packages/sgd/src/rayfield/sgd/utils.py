"""Small pure helpers shared by the trainers: resources, the default optimizer, batch
splitting, stats averaging and a free-port finder.

Nothing here starts a process; the trainers' actors call these from inside.
"""

from __future__ import annotations

import logging
import math
import socket
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from rayfield.actor import ActorOptions

logger = logging.getLogger(__name__)

__all__ = [
    "Resources",
    "aggregate_stats",
    "check_distinct_gpus",
    "check_fits",
    "check_fits_all",
    "check_seconds",
    "find_free_port",
    "sgd_mse_optimizer",
    "split_batch_size",
]


class Resources(NamedTuple):
    """What one replica (one actor) holds while it lives.

    Attributes:
        num_cpus: CPU cores (may be fractional; 0 means none reserved).
        num_gpus: GPUs (a replica with ``num_gpus > 0`` trains on ``cuda``).
        resources: custom resources by name, for example ``{"machine_a": 1}``.
    """

    num_cpus: float = 1
    num_gpus: float = 0
    resources: dict[str, float] | None = None

    def validate(self) -> Resources:
        """Return self when every amount is a non-negative number.

        Raises:
            TypeError: an amount is not a number, or ``resources`` is not a mapping.
            ValueError: an amount is negative.
        """
        for name, value in (("num_cpus", self.num_cpus), ("num_gpus", self.num_gpus)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Resources.{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"Resources.{name} must be a finite number >= 0, got {value}")
        if self.resources is not None:
            if not isinstance(self.resources, Mapping):
                raise TypeError(
                    f"Resources.resources must be a dict of name -> amount, got "
                    f"{type(self.resources).__name__}"
                )
            for key, value in self.resources.items():
                if (
                    isinstance(value, bool)
                    or not isinstance(value, (int, float))
                    or not math.isfinite(value)
                    or value < 0
                ):
                    raise ValueError(
                        f"Resources.resources[{key!r}] must be a finite number >= 0, got {value!r}"
                    )
        return self

    def actor_options(self) -> ActorOptions:
        """The keyword options of ``ActorClass.options`` that reserve these resources."""
        options: ActorOptions = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.resources:
            options["resources"] = dict(self.resources)
        return options


def check_fits(options: Mapping[str, Any], total: Mapping[str, float], what: str) -> None:
    """Raise at once when one actor's request exceeds the whole cluster's resources.

    Args:
        options: actor options (``num_cpus``, ``num_gpus``, ``resources``).
        total: ``rayfield.cluster_resources()`` (``CPU``, ``GPU``, custom names).
        what: what is being started, for the message (for example ``"a replica"``).

    Raises:
        ValueError: a request is larger than the cluster's total of that resource.
    """
    wanted = {"CPU": options.get("num_cpus", 0), "GPU": options.get("num_gpus", 0)}
    wanted.update(options.get("resources") or {})
    for name, amount in wanted.items():
        if amount and amount > total.get(name, 0):
            raise ValueError(
                f"{what} needs {name}={amount:g} but the cluster has {total.get(name, 0):g} in "
                f"all; ask for less (Resources(...), use_gpu=False) or add nodes that have it"
            )


def check_fits_all(
    options: Mapping[str, Any], count: int, total: Mapping[str, float], argument: str
) -> None:
    """Raise at once when ``count`` actors with ``options`` need more of a resource than
    the whole cluster has (so that a trainer does not spend minutes creating actors that
    can never all run).

    Args:
        options: one actor's options (``num_cpus``, ``num_gpus``, ``resources``).
        count: how many such actors.
        total: ``rayfield.cluster_resources()`` (``CPU``, ``GPU``, custom names).
        argument: the argument that set ``count``, for the message (``"num_replicas"``).

    Raises:
        ValueError: ``count`` times a request is larger than the cluster's total of that
            resource; the message names the argument, the need, the total and the fix.
    """
    wanted = {"CPU": options.get("num_cpus", 0), "GPU": options.get("num_gpus", 0)}
    wanted.update(options.get("resources") or {})
    for name, amount in wanted.items():
        have = total.get(name, 0)
        if amount and count * amount > have:
            raise ValueError(
                f"{argument}={count} needs {count * amount:g} {name} ({amount:g} each), the "
                f"cluster has {have:g}; lower {argument} to at most {int(have // amount)}, "
                f"ask for less each, or add nodes"
            )


def check_distinct_gpus(
    placements: Iterable[tuple[Any, Iterable[int | str]]], backend: str
) -> None:
    """Raise when two ranks of an NCCL process group were given the same GPU.

    NCCL puts one rank on one device: two ranks on one GPU (replicas of half a GPU
    each, for example) fail in NCCL's own initialisation ("Duplicate GPU detected").
    Other backends (gloo) run such groups, so only ``backend="nccl"`` is checked.

    Args:
        placements: per rank, in rank order, ``(node_id, gpu_ids)`` as the replica's
            ``rayfield.get_runtime_context().get_node_id()`` and ``rayfield.get_gpu_ids()``.
        backend: the process group's backend.

    Raises:
        ValueError: under ``nccl``, two ranks hold the same GPU of the same node; the
            message names the ranks and the GPU and how to fix it.
    """
    if backend != "nccl":
        return
    owner: dict[tuple[Any, int | str], int] = {}
    for rank, (node, gpu_ids) in enumerate(placements):
        for gpu in gpu_ids:
            other = owner.setdefault((node, gpu), rank)
            if other != rank:
                raise ValueError(
                    f'backend="nccl" needs one GPU per replica, but replicas {other} and '
                    f"{rank} share GPU {gpu} of node {node}: give each replica whole GPUs "
                    '(Resources(num_gpus=1)) or use backend="gloo" for fractional GPUs'
                )


def sgd_mse_optimizer(model: Any, config: Mapping[str, Any]) -> tuple[Any, Any]:
    """The default ``optimizer_creator``: mean squared error and plain SGD.

    Args:
        model: the ``torch.nn.Module`` whose parameters the optimizer updates.
        config: the trainer's config; ``config["lr"]`` is the learning rate (default 0.01).

    Returns:
        ``(torch.nn.MSELoss(), torch.optim.SGD(model.parameters(), lr))``.
    """
    import torch

    return torch.nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=config.get("lr", 0.01))


def check_seconds(name: str, value: Any) -> float:
    """``value`` as a float when it is a finite number of seconds > 0.

    Raises:
        TypeError: not a number (a bool is not one).
        ValueError: zero, negative, NaN or infinite.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds > 0, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def split_batch_size(batch_size: int, num_replicas: int) -> int:
    """The per-replica batch size for a global ``batch_size`` shared by ``num_replicas``.

    When the global size does not divide evenly, the per-replica size is rounded down
    (at least 1) and a warning says so, as the reference trainer does.

    Raises:
        TypeError: either argument is not an int.
        ValueError: either argument is < 1.
    """
    for name, value in (("batch_size", batch_size), ("num_replicas", num_replicas)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    per_replica = max(1, batch_size // num_replicas)
    if per_replica * num_replicas != batch_size:
        logger.warning(
            "Changing batch size from %d to %d to evenly distribute batches across %d replicas.",
            batch_size,
            per_replica * num_replicas,
            num_replicas,
        )
    return per_replica


def aggregate_stats(per_replica: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Average the stats dicts of several replicas into one.

    ``num_samples`` is summed; every other numeric value is averaged, weighted by each
    replica's ``num_samples`` when all have one (so a loss is the mean over all samples),
    else plainly. Times (keys ending in ``_s`` or ``_time``) are averaged too. Values
    that are not numbers are taken from the first replica.

    Raises:
        ValueError: ``per_replica`` is empty.
    """
    stats = [dict(s) for s in per_replica]
    if not stats:
        raise ValueError("aggregate_stats needs the stats of at least one replica")
    raw_weights = [s.get("num_samples") for s in stats]
    weighted = all(isinstance(w, (int, float)) and w > 0 for w in raw_weights)
    weights = [float(w) if weighted else 1.0 for w in raw_weights]  # type: ignore[arg-type]
    out: dict[str, Any] = {}
    for key in stats[0]:
        values = [s.get(key) for s in stats]
        if key == "num_samples":
            out[key] = sum(int(v or 0) for v in values)
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            numbers = [float(v) for v in values]  # type: ignore[arg-type]
            out[key] = math.fsum(v * w for v, w in zip(numbers, weights)) / math.fsum(weights)
        else:
            out[key] = values[0]
    return out


def find_free_port() -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        return int(s.getsockname()[1])
