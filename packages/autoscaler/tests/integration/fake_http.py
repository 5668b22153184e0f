"""A small threaded HTTP server for fakes of cloud REST APIs: the real client libraries
talk to it over HTTP on 127.0.0.1, so their request building, serialization and error
handling run as they would against the service."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

# (method, path, query, headers (lower-case names), JSON body or raw bytes)
#   -> (status, JSON-able reply)
Handler = Callable[[str, str, dict[str, str], dict[str, str], Any], tuple[int, Any]]
# (request handler, path, query (every value of each name), headers) -> None once it
# served the websocket, or (status, JSON-able reply) to refuse it
Upgrade = Callable[[Any, str, dict[str, list[str]], dict[str, str]], "tuple[int, Any] | None"]


class FakeAPIServer:
    """Serve ``handle`` on 127.0.0.1 at an ephemeral port; every request is logged in
    :attr:`requests` as ``(method, path)``. A websocket request (``Upgrade: websocket``)
    goes to ``upgrade`` when given. With ``tls`` (a server context) it serves HTTPS.
    """

    def __init__(
        self, handle: Handler, upgrade: Upgrade | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        self.requests: list[tuple[str, str]] = []
        outer = self

        class _Req(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urlsplit(self.path)
                headers = {k.lower(): v for k, v in self.headers.items()}
                if upgrade is not None and headers.get("upgrade", "").lower() == "websocket":
                    outer.requests.append(("WEBSOCKET", url.path))
                    refused = upgrade(self, url.path, parse_qs(url.query), headers)
                    if refused is None:
                        return
                    self._reply(*refused)
                    return
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size) if size else b""
                body = json.loads(raw) if raw.strip().startswith((b"{", b"[")) else raw
                outer.requests.append((self.command, url.path))
                self._reply(*handle(self.command, url.path, query, headers, body))

            def _reply(self, status: int, reply: Any) -> None:
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Req)
        self.scheme = "http"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self.scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self.scheme}://{host}:{port}"

    def __enter__(self) -> FakeAPIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
