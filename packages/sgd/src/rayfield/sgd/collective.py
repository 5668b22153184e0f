"""``torch.distributed`` process groups among actors, and flat gradient buffers.

Used inside the actors of both trainers: ``rendezvous_address`` (on rank 0) picks the
address, ``join_group`` (on every rank) forms or re-forms the group. ``GradBuffer`` keeps
a replica's gradients in one flat tensor (each ``p.grad`` a view of it, as
``DistributedDataParallel``'s ``gradient_as_bucket_view``), so that the whole gradient is
all-reduced in place with no flatten or unflatten copy.
"""

from __future__ import annotations

import os
import warnings
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from rayfield.sgd.utils import find_free_port
from rayfield.util import get_node_ip_address

__all__ = ["GradBuffer", "join_group", "leave_group", "node_ip", "rendezvous_address"]


def node_ip() -> str:
    """This process's node address as the cluster knows it (127.0.0.1 for a local init):
    ``rayfield.util.get_node_ip_address()``."""
    return get_node_ip_address()


def rendezvous_address() -> str:
    """``tcp://ip:port`` for a process group's rendezvous, with a port free on this node."""
    return f"tcp://{node_ip()}:{find_free_port()}"


def leave_group() -> None:
    """Destroy this process's default process group, if it has one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def join_group(address: str, rank: int, world_size: int, backend: str, timeout_s: float) -> None:
    """Join (or, after a rebuild, re-join) the default process group.

    Args:
        address: the rendezvous ``tcp://ip:port`` (from ``rendezvous_address`` on rank 0).
        rank: this process's rank in ``[0, world_size)``.
        world_size: the number of processes.
        backend: ``gloo``, ``nccl`` or ``mpi``.
        timeout_s: how long the rendezvous and every collective wait for a peer (s).

    Raises:
        RuntimeError: the group cannot form within ``timeout_s`` seconds.
    """
    host = address.split("//", 1)[-1].rsplit(":", 1)[0]
    if host.startswith("127.") and "GLOO_SOCKET_IFNAME" not in os.environ:
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    leave_group()
    dist.init_process_group(
        backend,
        init_method=address,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )


class GradBuffer:
    """One replica's gradients as a single flat tensor.

    When all parameters share a dtype and device, each ``p.grad`` is a view of ``flat``
    (``bind`` re-points any gradient that user code replaced, for example with
    ``zero_grad(set_to_none=True)``), so backward accumulates straight into ``flat``.
    Otherwise ``flat`` is float32 on the first parameter's device and ``collect`` /
    ``scatter`` copy the gradients in and out.

    Args:
        params: the replica's trainable parameters, in a fixed order.
    """

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        first = params[0] if params else torch.zeros(0)
        self.bound = all(p.dtype == first.dtype and p.device == first.device for p in params)
        dtype = first.dtype if self.bound else torch.float32
        self.numel = sum(int(p.numel()) for p in params)
        self.flat = torch.zeros(self.numel, dtype=dtype, device=first.device)
        self.views: list[torch.Tensor] = []
        offset = 0
        for p in params:
            self.views.append(self.flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()

    def zero(self) -> None:
        """Zero the buffer and (when bound) point every ``p.grad`` at its view."""
        self.flat.zero_()
        if not self.bound:
            for p in self.params:
                p.grad = None
            return
        for p, view in zip(self.params, self.views):
            grad = p.grad
            if grad is None or grad.data_ptr() != view.data_ptr() or grad.shape != view.shape:
                p.grad = view

    def collect(self) -> torch.Tensor:
        """``flat`` holding the current gradients (zeros where a gradient is None). A
        gradient that user code replaced since ``zero`` (for example
        ``zero_grad(set_to_none=True)`` inside ``get_loss``) is copied in and, when
        bound, re-pointed at its view."""
        for p, view in zip(self.params, self.views):
            grad = p.grad
            if grad is None or (self.bound and grad.data_ptr() == view.data_ptr()):
                continue
            view.copy_(grad.detach().to(view.device, view.dtype))
            if self.bound:
                p.grad = view
        return self.flat

    def assign(self, chunks: tuple[np.ndarray, ...] | list[np.ndarray]) -> None:
        """Copy consecutive float32 chunks (a whole gradient, or its shards in order)
        into ``flat``, one copy per chunk, and make every ``p.grad`` hold its part.

        Raises:
            ValueError: the chunks' total length is not the buffer's.
        """
        if sum(int(c.size) for c in chunks) != self.numel:
            raise ValueError(
                f"gradient has {sum(int(c.size) for c in chunks)} values, the parameters "
                f"{self.numel}"
            )
        offset = 0
        with warnings.catch_warnings():  # read-only store views: only read from here
            warnings.simplefilter("ignore", UserWarning)
            for chunk in chunks:
                source = torch.from_numpy(np.ascontiguousarray(chunk).reshape(-1))
                self.flat[offset : offset + source.numel()].copy_(source)
                offset += source.numel()
        self.scatter()

    def scatter(self) -> None:
        """Make every ``p.grad`` hold its part of ``flat`` (after ``flat`` was changed)."""
        for p, view in zip(self.params, self.views):
            grad = p.grad
            if grad is not None and grad.data_ptr() == view.data_ptr():
                continue
            value = view.detach().to(p.device, p.dtype)
            if grad is None:
                p.grad = value.clone()
            else:
                grad.copy_(value)
