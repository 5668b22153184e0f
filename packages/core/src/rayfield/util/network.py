"""The address of this machine as other machines reach it."""

from __future__ import annotations

import socket

__all__ = ["get_node_ip_address"]


def get_node_ip_address(address: str = "8.8.8.8:53") -> str:
    """The IP address of this machine on the route to ``address`` (Ray's
    ``ray.util.get_node_ip_address``): the local address a packet to ``address`` would
    leave from. Nothing is sent (a UDP socket is only connected).

    Args:
        address: ``HOST:PORT`` of a peer; the default stands for "the outside world".

    Returns:
        The address as a string, e.g. ``"10.0.0.5"``; ``"127.0.0.1"`` when there is no
        route to ``address`` (a machine without a network).

    Raises:
        ValueError: when ``address`` is not ``HOST:PORT``.
    """
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
