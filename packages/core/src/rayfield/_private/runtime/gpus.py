"""The GPUs a worker's task or actor may use, named as its node's ``CUDA_VISIBLE_DEVICES`` names
them.

A node counts its GPUs as instances ``0..n-1``. When the node itself was started with
``CUDA_VISIBLE_DEVICES`` set (say ``"2,3"``), instance ``i`` is the ``i``-th device of that list:
a task given instance 1 must see device ``"3"``, and ``get_gpu_ids()`` returns ``[3]`` (a subset
of the list, as Ray's). Workers inherit the node's environment, so the list a worker process
starts with is the node's; :data:`NODE_VISIBLE_DEVICES` keeps it before the first task changes
the variable.

The CUDA driver reads ``CUDA_VISIBLE_DEVICES`` once, when a process initialises it. A worker
that runs tasks one after another cannot change the GPUs it sees after that: a CPU task (given
``CUDA_VISIBLE_DEVICES=""``) that asked ``torch.cuda.is_available()`` leaves a process that
finds no GPU in every later task. :class:`CudaPin` tells the worker when to exit instead.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

from rayfield._private.common.devices import visible_devices

__all__ = [
    "NODE_VISIBLE_DEVICES",
    "CudaPin",
    "cuda_initialized",
    "device_ids",
    "torch_gpu_count_with_node_devices",
    "visible_devices",
]

# Modules that load the CUDA driver; a process without any of them has not initialised it.
CUDA_MODULES = ("torch", "cupy", "jax", "jaxlib", "tensorflow", "numba", "pycuda", "cuda")
CUDA_ERROR_NOT_INITIALIZED = 3


NODE_VISIBLE_DEVICES = visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))


def device_ids(
    instances: list[tuple[int, float]], node_devices: list[str] | None
) -> tuple[list[tuple[int | str, float]], str]:
    """Map a task's GPU instances to device ids.

    Args:
        instances: ``[(instance index, fraction), ...]`` as the node granted them.
        node_devices: the node's ``CUDA_VISIBLE_DEVICES`` list (None: unset, every instance
            is the device of the same index).

    Returns:
        ``(grants, cuda_visible_devices)``: the grants with each index replaced by its device
        (an int when the device is a number, else the string, e.g. a ``GPU-<uuid>``), and
        the value for the task's ``CUDA_VISIBLE_DEVICES``. An index past the end of the
        list (more GPUs declared than listed) stays as it is.
    """
    grants: list[tuple[int | str, float]] = []
    for index, fraction in instances:
        device: int | str = index
        if node_devices is not None and index < len(node_devices):
            name = node_devices[index]
            device = int(name) if name.isdigit() else name
        grants.append((device, fraction))
    return grants, ",".join(str(device) for device, _ in grants)


def cuda_initialized() -> bool:
    """Whether this process has initialised the CUDA driver (``cuInit``), after which the
    driver no longer reads ``CUDA_VISIBLE_DEVICES``.

    Cheap when no CUDA-using module (:data:`CUDA_MODULES`) is imported. Otherwise it asks
    the driver library, if the process loaded it, for the device count: an initialised
    driver answers, one never initialised returns ``CUDA_ERROR_NOT_INITIALIZED``. An
    initialisation under ``CUDA_VISIBLE_DEVICES=""`` (no device) also leaves that answer
    (seen on an H100 machine, driver 580), so a process blinded that way is not seen here.
    """
    if not any(name in sys.modules for name in CUDA_MODULES):
        return False
    driver = _loaded_driver()
    if driver is None:
        return False
    count = ctypes.c_int(0)
    return bool(driver.cuDeviceGetCount(ctypes.byref(count)) != CUDA_ERROR_NOT_INITIALIZED)


def _loaded_driver() -> ctypes.CDLL | None:
    """The CUDA driver library if this process already loaded it (never loads it)."""
    try:
        return ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD)
    except OSError:
        return None


def torch_gpu_count_with_node_devices() -> int | None:
    """The GPU count torch keeps for this process, asked with the node's own
    ``CUDA_VISIBLE_DEVICES`` in place; None when torch with CUDA is not loaded here.

    Torch counts the devices once per process and keeps the number, also 0: a process in
    which a task without GPUs asked ``torch.cuda.is_available()`` answers 0 here for good.
    A process that had not asked yet initialises CUDA now, seeing the node's devices.
    """
    torch = sys.modules.get("torch")
    count_devices = getattr(getattr(torch, "_C", None), "_cuda_getDeviceCount", None)
    if count_devices is None or _loaded_driver() is None:
        return None
    task_value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if NODE_VISIBLE_DEVICES is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(NODE_VISIBLE_DEVICES)
    try:
        return int(count_devices())
    finally:
        if task_value is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = task_value


class CudaPin:
    """When a task worker must exit because CUDA fixed the GPUs its process sees.

    After each plain task the worker calls :meth:`must_exit`. Once CUDA is initialised in
    the process the set of GPUs it sees is fixed (*pinned*), whatever later tasks'
    ``CUDA_VISIBLE_DEVICES`` say:

    * a task that initialised the driver pins the GPUs it was given;
    * after a task without GPUs in a process where torch loaded the driver, torch may have
      counted no devices for good (it asked ``is_available()`` under ``""``): the worker asks
      torch's count with the node's devices visible (:func:`torch_gpu_count_with_node_devices`)
      and is pinned to no GPU when it is 0, else to the node's devices.

    A pinned process may run later tasks only when every later GPU task is given the same
    devices: on a node with one GPU, pinned to it. Pinned to no GPU, or on a node with
    several GPUs, the worker exits after the task and the node starts a fresh one. A task
    without GPUs run later in a process pinned to the node's one GPU sees that GPU through
    CUDA although its ``CUDA_VISIBLE_DEVICES`` is ``""``: nothing enforces GPU isolation.

    Args:
        node_gpus: the GPUs of the worker's node (``RAYFIELD_NODE_GPUS``); 0 disables the
            check (nothing to pin on a node without GPUs).
        initialized: whether the driver is initialised (default :func:`cuda_initialized`).
        torch_count: default :func:`torch_gpu_count_with_node_devices`.
    """

    def __init__(
        self,
        node_gpus: float,
        initialized: Callable[[], bool] | None = None,
        torch_count: Callable[[], int | None] | None = None,
    ) -> None:
        self.node_gpus = node_gpus
        self.initialized = initialized or cuda_initialized
        self.torch_count = torch_count or torch_gpu_count_with_node_devices
        self.pinned: str | None = None

    def must_exit(self, task_visible_devices: str) -> bool:
        """Call after a plain task that ran with ``task_visible_devices``; True when the
        worker should exit after it."""
        if self.node_gpus <= 0:
            return False
        if self.pinned is None:
            if self.initialized():
                self.pinned = task_visible_devices
            elif task_visible_devices == "":
                count = self.torch_count()
                if count is None:
                    return False
                self.pinned = ",".join(NODE_VISIBLE_DEVICES or ["all"]) if count else ""
            else:
                return False
        return self.pinned == "" or self.node_gpus > 1
