"""The dashboard's request checks, free of any web framework so they test without sockets.

Three checks guard every request (``server.py`` applies them as middleware):

- **Host** (DNS rebinding): the ``Host`` header must name the dashboard by an address it
  is reached at (the bound address, ``localhost``, ``127.0.0.1``, ``[::1]``; with a
  wildcard bind, also this machine's interface addresses and host name) with its port.
  A page on ``evil.example`` whose name was re-pointed at 127.0.0.1 sends
  ``Host: evil.example`` and is refused.
- **Origin** (cross-site requests): a POST, PUT, PATCH or DELETE must carry an ``Origin``
  equal to ``<scheme>://<its Host>`` (``https`` when it serves HTTPS); a form on another
  site posting to the dashboard is refused.
- **Token**: the cluster token, pasted once at ``/login`` (compared with
  ``hmac.compare_digest``), gives a random session id kept here and sent back as an
  HttpOnly, SameSite=Strict cookie (named per dashboard: browsers share cookies between
  the ports of one host, so two dashboards on one machine must not overwrite each
  other's). API calls may instead send ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import socket
import time
from collections import OrderedDict

__all__ = ["Sessions", "allowed_hosts", "origin_ok", "token_ok"]

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_WILDCARDS = {"0.0.0.0", "::", ""}


def _host_form(host: str) -> str:
    """``host`` as it appears in a Host header (IPv6 literals in brackets)."""
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass
    return host.lower()


def _machine_names() -> set[str]:
    import psutil

    names = {socket.gethostname(), socket.getfqdn()}
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                names.add(a.address.split("%")[0])
    return names


def allowed_hosts(bind_host: str, port: int) -> frozenset[str]:
    """The ``Host`` header values accepted for a dashboard bound to ``bind_host:port``.

    Args:
        bind_host: the listen address; a wildcard (``0.0.0.0``, ``::``) adds every
            address and name of this machine.
        port: the bound port (not 0).
    """
    names = {"localhost", "127.0.0.1", "::1", bind_host}
    if bind_host in _WILDCARDS:
        names |= _machine_names()
    names -= _WILDCARDS
    return frozenset(f"{_host_form(n)}:{port}" for n in names)


def host_ok(host: str | None, allowed: set[str] | frozenset[str]) -> bool:
    """Whether a request's Host header names this dashboard."""
    return host is not None and host.lower() in allowed


def origin_ok(method: str, origin: str | None, host: str | None, scheme: str = "http") -> bool:
    """Whether a request may change state: safe methods always may; the others only with
    an ``Origin`` of this very host and scheme (a missing Origin is refused)."""
    if method.upper() not in STATE_CHANGING:
        return True
    if origin is None or host is None:
        return False
    return origin.lower() == f"{scheme.lower()}://{host.lower()}"


def token_ok(given: str | None, token: str) -> bool:
    """Constant-time comparison of a presented token with the cluster token."""
    if not given:
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip()
    return None


class Sessions:
    """Logged-in browser sessions: random ids (256 bits) with an expiry.

    Args:
        ttl_s: how long a session lasts after login, in seconds.
        max_sessions: the oldest sessions are forgotten past this many.
    """

    def __init__(self, ttl_s: float = 12 * 3600, max_sessions: int = 1000) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.cookie = f"rayfield_session_{secrets.token_hex(4)}"
        self._expiry: OrderedDict[str, float] = OrderedDict()

    def create(self) -> str:
        """A new session id, valid for ``ttl_s``."""
        sid = secrets.token_urlsafe(32)
        self._expiry[sid] = time.monotonic() + self.ttl_s
        while len(self._expiry) > self.max_sessions:
            self._expiry.popitem(last=False)
        return sid

    def valid(self, sid: str | None) -> bool:
        """Whether ``sid`` is a live session (expired ones are dropped)."""
        if not sid:
            return False
        expiry = self._expiry.get(sid)
        if expiry is None:
            return False
        if expiry < time.monotonic():
            del self._expiry[sid]
            return False
        return True

    def end(self, sid: str | None) -> None:
        """Forget ``sid`` (logout)."""
        if sid:
            self._expiry.pop(sid, None)
