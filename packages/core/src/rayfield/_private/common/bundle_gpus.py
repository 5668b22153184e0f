"""The GPU devices of placement group bundles on one node (as Ray gives a bundle's work
its own GPU ids).

The native scheduler counts a node's plain ``GPU`` as devices ``0..n-1`` from its total:
device ``d`` has room ``min(1, total - d)``, so the plain GPUs are a prefix of the
devices. A bundle with ``GPU`` takes devices from the top instead (:func:`place`: the
highest devices that no plain work uses and that have room; a fraction packs onto a
device other bundles use in part), and the plain total is cut so that the prefix stays
clear of every device a bundle holds (:func:`plain_total`; a bundle freed below another
leaves a gap the plain work gets back once the bundles above it are freed).

The native scheduler counts the renamed resources (``GPU_group_<i>_<pg>``,
``GPU_group_<pg>``) as devices too, numbered within the bundle (or within the group's
bundles on the node). :func:`device_table` gives, per renamed name, the node devices
those numbers stand for; the node writes it to a private file next to its socket
(:func:`write_table`) before the bundles become usable, and a worker maps the instances
of a task in a bundle to node devices with it (:func:`node_instances`), so the task's
``CUDA_VISIBLE_DEVICES`` and ``get_gpu_ids()`` name the bundle's devices.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from rayfield._private.common.placement_groups import group_resource

__all__ = [
    "capacity",
    "device_table",
    "node_instances",
    "place",
    "plain_total",
    "read_table",
    "table_path",
    "write_table",
]

_EPS = 1e-6
PREFIX = "GPU_group_"


def capacity(total: float) -> list[float]:
    """Room of each device of a node with ``total`` GPUs (the last may be a fraction)."""
    n = math.ceil(total - _EPS) if total > _EPS else 0
    return [min(1.0, total - d) for d in range(n)]


def place(
    amount: float,
    held: Sequence[float],
    plain_used: Sequence[float],
    room: Sequence[float],
) -> dict[int, float] | None:
    """Devices for a bundle of ``amount`` GPUs (whole, or a fraction up to 1), or None
    when they are not free now.

    Args:
        amount: the bundle's ``GPU``.
        held: per device, the GPU fraction bundles hold there already.
        plain_used: per device, what plain work uses there now (the native scheduler's
            instances; missing entries are 0).
        room: per device, its room (:func:`capacity`).

    Returns:
        device index -> the amount the bundle holds there.
    """

    def free(d: int) -> float:
        used = plain_used[d] if d < len(plain_used) else 0.0
        return room[d] - held[d] - used

    top_down = range(len(room) - 1, -1, -1)
    if amount >= 1.0 - _EPS:
        whole = round(amount)
        chosen = [d for d in top_down if held[d] < _EPS and free(d) >= 1.0 - _EPS][:whole]
        return dict.fromkeys(chosen, 1.0) if len(chosen) == whole else None
    fits = [d for d in top_down if free(d) + _EPS >= amount]
    if not fits:
        return None
    best = max(fits, key=lambda d: (held[d], d))  # pack onto a device bundles share
    return {best: amount}


def plain_total(total: float, held: Sequence[float]) -> float:
    """The plain ``GPU`` total that keeps the devices' prefix clear of ``held`` (per
    device, what bundles hold), at most ``total`` (the node's GPUs less the bundles')."""
    out = total
    for d, h in enumerate(held):
        if h > _EPS:
            out = min(out, d + 1.0 - h)
    return max(0.0, out)


def device_table(
    bundles: Iterable[tuple[bytes, int, Mapping[int, float]]],
) -> dict[str, list[int]]:
    """For the committed bundles ``(pg_id, index, devices)`` of a node (``devices``:
    device -> amount held), the node devices behind each renamed name: bundle ``i``'s
    ``GPU_group_<i>_<pg>`` and the group's ``GPU_group_<pg>``, the devices it holds most
    of first (the native scheduler's last instance of a name is the fractional one)."""
    wide: dict[str, dict[int, float]] = {}
    out: dict[str, list[int]] = {}
    for pg_id, index, devices in bundles:
        if not devices:
            continue
        out[group_resource("GPU", pg_id.hex(), index)] = _order(devices)
        merged = wide.setdefault(group_resource("GPU", pg_id.hex()), {})
        for d, amount in devices.items():
            merged[d] = merged.get(d, 0.0) + amount
    out.update({name: _order(devices) for name, devices in wide.items()})
    return out


def _order(devices: Mapping[int, float]) -> list[int]:
    return sorted(devices, key=lambda d: (-devices[d], d))


def node_instances(
    ids: Mapping[str, Sequence[tuple[int, float]]], table: Mapping[str, Sequence[int]]
) -> list[tuple[int, float]]:
    """A task's GPU instances as node devices: its plain ``GPU`` instances, then those
    of renamed GPU resources mapped through ``table`` (:func:`device_table`; an index the
    table lacks stays as it is)."""
    out = list(ids.get("GPU", ()))
    for name, grants in ids.items():
        if name.startswith(PREFIX):
            devices = table.get(name, ())
            out += [(devices[i] if i < len(devices) else i, f) for i, f in grants]
    return out


def table_path(socket_path: str) -> Path:
    """Where a node keeps its table: beside its socket (a private directory)."""
    return Path(f"{socket_path}.bundle_gpus.json")


def write_table(socket_path: str, table: Mapping[str, Sequence[int]]) -> None:
    """Replace the node's table (0600, written whole: readers never see a part)."""
    path = table_path(socket_path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({k: list(v) for k, v in table.items()}, f)
    os.replace(tmp, path)


def read_table(socket_path: str) -> dict[str, list[int]]:
    """The node's table; empty when it has none (no bundle with GPUs yet)."""
    try:
        return {
            str(k): [int(d) for d in v]
            for k, v in json.loads(table_path(socket_path).read_text()).items()
        }
    except (OSError, ValueError, AttributeError, TypeError):
        return {}
