"""Asking the autoscaler for capacity from a program: :func:`request_resources`.

The request is stored in the cluster's GCS key-value store (namespace
:data:`KV_NAMESPACE`, key :data:`REQUEST_KEY`, through rayfield-core's public
``rayfield.experimental.internal_kv``); the cluster's monitor reads it at every step and
the scaling policy keeps the cluster large enough to hold every requested bundle at once
(on the nodes' total resources, busy or not) until the next call replaces the request.

Example:
    >>> import rayfield
    >>> from rayfield.autoscaler.sdk import request_resources
    >>> rayfield.init(address="auto")                               # doctest: +SKIP
    >>> request_resources(num_cpus=16)                              # doctest: +SKIP
    >>> request_resources(bundles=[{"GPU": 1, "CPU": 4}] * 2)       # doctest: +SKIP
    >>> request_resources()  # clears the request                   # doctest: +SKIP

Sources:
    ``ray.autoscaler.sdk.request_resources`` (Ray cluster docs, "Programmatic Cluster
    Scaling"): the same arguments and meaning (a target the cluster is scaled to at once,
    beyond ``upscaling_speed``, persisting until replaced).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["KV_NAMESPACE", "REQUEST_KEY", "STATUS_KEY", "parse_request", "request_resources"]

KV_NAMESPACE = "autoscaler"
"""The GCS key-value namespace of the autoscaler's keys."""
REQUEST_KEY = b"resource_request"
"""The key of the current request (JSON: ``{"num_cpus": int, "bundles": [dict]}``)."""
STATUS_KEY = b"status"
"""The key of the monitor's last report (JSON; what ``rayfield status`` shows)."""


def _check_bundles(bundles: object) -> list[dict[str, float]]:
    if not isinstance(bundles, Sequence) or isinstance(bundles, (str, bytes)):
        raise TypeError(
            f"bundles must be a list of resource dicts such as [{{'CPU': 2}}], not "
            f"{type(bundles).__name__}"
        )
    out = []
    for i, bundle in enumerate(bundles):
        if not isinstance(bundle, Mapping):
            raise TypeError(f"bundles[{i}] must be a dict of resource name -> amount")
        clean: dict[str, float] = {}
        for name, amount in bundle.items():
            ok = isinstance(amount, (int, float)) and not isinstance(amount, bool)
            if not isinstance(name, str) or not ok or not math.isfinite(amount) or amount < 0:
                raise ValueError(
                    f"bundles[{i}][{name!r}] = {amount!r}: amounts are finite numbers >= 0 "
                    "under resource names (str)"
                )
            clean[name] = float(amount)
        out.append(clean)
    return out


def request_resources(
    num_cpus: int | None = None, bundles: Sequence[Mapping[str, float]] | None = None
) -> None:
    """Ask the autoscaler to scale the cluster so that it can hold these resources at
    once, whatever runs on it; the request replaces the previous one and stays until the
    next call. ``request_resources()`` with neither argument clears it.

    The nodes launched for a request start at once (``upscaling_speed`` does not hold
    them back) and are not removed as idle while the request holds them. Bundles no node
    type can hold are reported as infeasible (``rayfield status``), never launched for.

    Args:
        num_cpus: that many 1-CPU bundles (``{"CPU": 1}`` each); None or 0: none.
        bundles: resource dicts (name -> amount), each to fit on one node, e.g.
            ``[{"CPU": 4, "GPU": 1}] * 2``; None: none. Both arguments add up.

    Raises:
        TypeError: ``num_cpus`` is not an int, or ``bundles`` is not a list of dicts.
        ValueError: ``num_cpus`` or an amount is negative (or not finite).
        RuntimeError: this process is not connected to a cluster (call
            ``rayfield.init(address=...)`` first; a local ``rayfield.init()`` has no
            GCS and no autoscaler).
    """
    if num_cpus is not None and (not isinstance(num_cpus, int) or isinstance(num_cpus, bool)):
        raise TypeError(f"num_cpus must be an int, not {type(num_cpus).__name__}")
    if num_cpus is not None and num_cpus < 0:
        raise ValueError(f"num_cpus must be >= 0, not {num_cpus}")
    checked = _check_bundles(bundles) if bundles is not None else []
    from rayfield.experimental import internal_kv

    value = json.dumps({"num_cpus": num_cpus or 0, "bundles": checked})
    internal_kv._internal_kv_put(REQUEST_KEY, value, namespace=KV_NAMESPACE)


def parse_request(raw: bytes | None) -> list[dict[str, float]]:
    """The bundles of a stored request (one dict a bundle; ``num_cpus`` expanded to
    ``{"CPU": 1}`` bundles); [] for None or a value that is not a request."""
    if not raw:
        return []
    try:
        data: Any = json.loads(raw)
        n = int(data.get("num_cpus", 0))
        bundles = _check_bundles(data.get("bundles", []))
    except (ValueError, TypeError, AttributeError):
        return []
    return [{"CPU": 1.0} for _ in range(max(0, n))] + bundles
