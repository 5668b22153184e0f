"""Exact reads from a stream socket, shared by the node's data channel and the direct
actor calls (no ssl or gRPC import, so worker processes load it cheaply)."""

from __future__ import annotations

import socket

__all__ = ["ChannelClosed", "recv_exact", "recv_into_exact"]


class ChannelClosed(ConnectionError):
    """The peer closed the connection (or sent less than the format says)."""


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``sock``.

    Raises:
        ChannelClosed: the peer closed the connection first.
        OSError: the socket failed (timeout included).
    """
    buf = bytearray(n)
    recv_into_exact(sock, memoryview(buf))
    return bytes(buf)


def recv_into_exact(sock: socket.socket, view: memoryview) -> None:
    """Fill ``view`` (writable, bytes) from ``sock``, straight into its memory.

    Raises:
        ChannelClosed: the peer closed the connection first.
        OSError: the socket failed (timeout included).
    """
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ChannelClosed(f"the peer closed the connection after {got} of {n} bytes")
        got += k
