"""The accelerators a node has, as ``init()`` and ``rayfield start`` count them when they are
not given."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["detect_gpus", "visible_devices"]

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


def visible_devices(value: str | None) -> list[str] | None:
    """The devices a ``CUDA_VISIBLE_DEVICES`` value lists (None when it is unset)."""
    if value is None:
        return None
    return [d.strip() for d in value.split(",") if d.strip()]


def detect_gpus(environ: dict[str, str] | None = None, nvidia_gpus: Path = NVIDIA_GPUS) -> int:
    """The number of GPUs this process may use.

    ``CUDA_VISIBLE_DEVICES``, when set, decides: the devices it lists (``""``: none).
    Otherwise the NVIDIA driver's list of GPUs (one folder per GPU under
    ``/proc/driver/nvidia/gpus``); 0 where no NVIDIA driver is loaded. Ray counts the same
    way.

    Args:
        environ: the environment to read (default ``os.environ``).
        nvidia_gpus: the driver's folder of GPUs.
    """
    env = os.environ if environ is None else environ
    visible = visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None:
        return len(visible)
    return len(list(nvidia_gpus.iterdir())) if nvidia_gpus.is_dir() else 0
