"""The address of this machine (or of this process's node) as other machines reach it."""

from __future__ import annotations

import socket

__all__ = ["get_node_ip_address"]

OUTSIDE = "8.8.8.8:53"


def get_node_ip_address(address: str | None = None) -> str:
    """This node's IP address (Ray's ``ray.util.get_node_ip_address``).

    In a driver, task or actor of an initialized rayfield, and with no ``address`` given,
    it is the address of this process's node as the cluster records it (its
    ``--node-ip-address``; ``"127.0.0.1"`` for an embedded ``init()`` or a loopback
    cluster), so that the processes of one node agree on it. Otherwise, or with
    ``address``, it is the local address a packet to ``address`` would leave from (the
    route out to the world by default); nothing is sent (a UDP socket is only connected).

    Args:
        address: ``HOST:PORT`` of a peer to find the route to; None: the node's address
            when rayfield is initialized, else the route to the outside world.

    Returns:
        The address as a string, e.g. ``"10.0.0.5"``; ``"127.0.0.1"`` when there is no
        route (a machine without a network).

    Raises:
        ValueError: when ``address`` is not ``HOST:PORT``.
    """
    if address is None:
        own = _own_node_address()
        if own is not None:
            return own
        address = OUTSIDE
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not HOST:PORT, e.g. 8.8.8.8:53")
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((host.strip("[]"), int(port)))
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


# Node id -> its recorded address: a node keeps its address while it lives, so each
# process asks the cluster once per node it is on (not once per call: Tune calls this
# for every result).
_KNOWN: dict[str, str] = {}


def _own_node_address() -> str | None:
    """The address of this process's node when rayfield is initialized, else None."""
    import rayfield
    from rayfield._private import context  # not rayfield.api: a worker need not import it

    if context.current() is None:
        return None
    node_id = rayfield.get_runtime_context().get_node_id()
    if node_id is None:
        return None
    known = _KNOWN.get(node_id)
    if known is not None:
        return known
    for node in rayfield.nodes():
        if node.get("NodeID") == node_id and node.get("NodeManagerAddress"):
            _KNOWN[node_id] = str(node["NodeManagerAddress"])
            return _KNOWN[node_id]
    return None
