"""The dashboard's request checks (``rayfield.dashboard.security``), without a server.

Importing them must not need aiohttp: ``import rayfield`` and ``init`` stay light.
"""

from __future__ import annotations

import subprocess
import sys

from rayfield.dashboard import security


def test_host_header_must_name_the_dashboard() -> None:
    allowed = security.allowed_hosts("127.0.0.1", 8265)
    for host in ("127.0.0.1:8265", "localhost:8265", "LOCALHOST:8265", "[::1]:8265"):
        assert security.host_ok(host, allowed), host
    # DNS rebinding: another name, another port, no port, no header.
    for host in ("evil.example:8265", "127.0.0.1:8266", "localhost", "127.0.0.1", "", None):
        assert not security.host_ok(host, allowed), host


def test_wildcard_bind_accepts_this_machines_names_only() -> None:
    allowed = security.allowed_hosts("0.0.0.0", 9000)
    assert "127.0.0.1:9000" in allowed and "0.0.0.0:9000" not in allowed
    assert not security.host_ok("evil.example:9000", allowed)
    assert security.allowed_hosts("10.1.2.3", 80) >= {"10.1.2.3:80", "localhost:80"}


def test_state_changing_requests_need_this_origin() -> None:
    host = "127.0.0.1:8265"
    assert security.origin_ok("GET", None, host)  # reads carry no Origin
    assert security.origin_ok("POST", "http://127.0.0.1:8265", host)
    for origin in (None, "null", "http://evil.example", "http://127.0.0.1:8266"):
        for method in ("POST", "DELETE", "put", "PATCH"):
            assert not security.origin_ok(method, origin, host), (method, origin)
    assert not security.origin_ok("POST", "https://127.0.0.1:8265", host)


def test_token_and_bearer() -> None:
    token = "ab" * 32
    assert security.token_ok(token, token) and security.token_ok(f" {token}\n", token)
    for given in (None, "", "ab", token.upper(), token + "0"):
        assert not security.token_ok(given, token), given
    assert security.bearer(f"Bearer {token}") == token
    assert security.bearer(f"bearer {token}") == token
    assert security.bearer(f"Basic {token}") is None and security.bearer(None) is None


def test_sessions_expire_and_end() -> None:
    sessions = security.Sessions(ttl_s=60, max_sessions=2)
    a, b = sessions.create(), sessions.create()
    assert a != b and len(a) >= 40 and sessions.valid(a) and sessions.valid(b)
    assert not sessions.valid("forged") and not sessions.valid(None)
    sessions.end(a)
    assert not sessions.valid(a)
    c, d = sessions.create(), sessions.create()  # past max_sessions: the oldest goes
    assert not sessions.valid(b) and sessions.valid(c) and sessions.valid(d)
    assert sessions.cookie != security.Sessions().cookie  # one name per dashboard
    expired = security.Sessions(ttl_s=-1)
    assert not expired.valid(expired.create())


def test_importing_the_checks_needs_no_web_framework() -> None:
    code = (
        "import sys, rayfield, rayfield.dashboard.security; "
        "assert 'aiohttp' not in sys.modules, 'aiohttp imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
