"""What an actor fills into every result besides the trial's counters: the date and
this process's host (``date``, ``timestamp``, ``pid``, ``hostname``, ``node_ip``; see
:meth:`rayfield.tune.Trainable.train`), each looked up once, not once per result."""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime

import rayfield
from rayfield.util import get_node_ip_address

__all__ = ["date_now", "host", "node_address"]

# (the second, its DATE and TIMESTAMP) of the last result: one strftime per second.
_DATE: tuple[int, str, int] = (-1, "", 0)


def date_now() -> tuple[str, int]:
    """A result's ``date`` (local time, ``%Y-%m-%d_%H-%M-%S``) and ``timestamp`` (its
    Unix seconds), as Ray fills them."""
    global _DATE
    second = int(time.time())
    if second != _DATE[0]:
        now = datetime.today()
        _DATE = (second, now.strftime("%Y-%m-%d_%H-%M-%S"), int(time.mktime(now.timetuple())))
    return _DATE[1], _DATE[2]


# (pid, host name, node IP) of this process once rayfield is initialized in it: looked
# up once per process (a fork, e.g. by a worker's zygote, looks again), as an actor stays
# on its node.
_HOST: tuple[int, str, str] | None = None


def host() -> tuple[int, str, str]:
    global _HOST
    pid = os.getpid()
    if _HOST is not None and _HOST[0] == pid:
        return _HOST
    initialized, address = node_address()
    host = (pid, socket.gethostname(), address or get_node_ip_address())
    if initialized:
        _HOST = host
    return host


def node_address() -> tuple[bool, str | None]:
    """(whether rayfield is initialized in this process, the address the cluster records
    for this process's node: None in local mode or when the node is not listed).

    Where the address is known it is what ``get_node_ip_address()`` returns, read through
    the runtime context and ``rayfield.nodes()``: ``get_node_ip_address`` first asks
    ``rayfield.is_initialized()``, whose module (``rayfield.api``) a trial actor has not
    imported otherwise; the import took 21 ms, before the actor's first result.
    """
    from rayfield.exceptions import RayfieldError

    try:
        node_id = rayfield.get_runtime_context().get_node_id()
    except RayfieldError:  # not initialized
        return False, None
    if node_id is not None:
        for node in rayfield.nodes():
            if node.get("NodeID") == node_id and node.get("NodeManagerAddress"):
                return True, str(node["NodeManagerAddress"])
    return True, None
