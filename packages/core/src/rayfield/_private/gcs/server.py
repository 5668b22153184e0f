"""The GCS server process: ``python -m rayfield._private.gcs.server``.

One gRPC service, ``/rayfield.Gcs/<Method>``, served by ``transport.serve`` with
raw-bytes payloads (flatbuffers, ``gcs.fbs``, encoded by ``protocol.codec``). Every
call passes the token check (``transport.TokenInterceptor``) before its payload is
decoded; a payload that does not decode gets INVALID_ARGUMENT and the server keeps
serving.
A thread declares nodes dead when their heartbeats stop.

Usage::

    python -m rayfield._private.gcs.server --port 0 --db gcs.sqlite \\
        --token-file token [--port-file F] [--tls-cert F --tls-key F --tls-ca F]

It prints ``GCS listening on HOST:PORT`` once serving and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rayfield._private import transport
from rayfield._private.common.session_files import ERROR_MARK, STOPPED_SUFFIX, write_private
from rayfield._private.gcs.auth import create_token_file, read_token
from rayfield._private.gcs.pubsub import PubSub
from rayfield._private.gcs.service import GcsService
from rayfield._private.protocol import codec
from rayfield._private.protocol.constants import MAX_MESSAGE_BYTES
from rayfield._private.protocol.errors import GcsError
from rayfield._private.transport import TlsConfig

__all__ = ["GcsServer", "main"]

log = logging.getLogger("rayfield.gcs")
DEFAULT_MAX_MESSAGE_BYTES = MAX_MESSAGE_BYTES


def _error_status(method: str, exc: Exception) -> tuple[str, str]:
    """The status a failed call of ``method`` answers: a GcsError's own, else INTERNAL."""
    if isinstance(exc, GcsError):
        return exc.status, str(exc)
    log.exception("internal error in %s", method)
    return "INTERNAL", f"internal GCS error in {method}: {exc!r}"


def _unary(method: str, fn: Callable[[dict[str, Any]], Any]) -> Callable[[bytes], bytes]:
    req_table, rep_table = codec.METHODS[method]
    return lambda raw: codec.encode(rep_table, fn(codec.decode(req_table, raw)))


def _streaming(
    method: str, fn: Callable[..., Iterator[Any]]
) -> Callable[[bytes, Callable[[], bool]], Iterator[bytes]]:
    req_table, rep_table = codec.METHODS[method]

    def handle(raw: bytes, is_active: Callable[[], bool]) -> Iterator[bytes]:
        for item in fn(codec.decode(req_table, raw), is_active):
            yield codec.encode(rep_table, item)

    return handle


class GcsServer:
    """A GCS serving on ``host:port`` until ``stop``.

    Args:
        db_path: SQLite database (created if missing) holding the tables.
        token: the cluster token every call must carry.
        host: address to listen on; loopback unless another is given on purpose.
        port: TCP port; 0 picks a free one (see ``port`` after ``start``).
        tls: mutual TLS when given, plaintext otherwise.
        heartbeat_timeout_s: a node silent this long is declared dead.
        max_message_bytes: largest request accepted and reply sent.
        max_workers: server threads (Subscribe streams take one each; at most
            half of them may be streams).
    """

    def __init__(
        self,
        db_path: str,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: TlsConfig | None = None,
        heartbeat_timeout_s: float = 3.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        max_workers: int = 32,
    ) -> None:
        self.service = GcsService(
            db_path,
            heartbeat_timeout_s,
            max_message_bytes,
            PubSub(max_subscribers=max(1, max_workers // 2)),
        )
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._stopped = threading.Event()
        handlers = self.service.handlers()
        streaming = {
            name: _streaming(name, fn)
            for name, fn in handlers.items()
            if name in codec.STREAMING_METHODS
        }
        unary = {
            name: _unary(name, fn)
            for name, fn in handlers.items()
            if name not in codec.STREAMING_METHODS
        }
        try:
            self._server, self.port = transport.serve(
                codec.SERVICE,
                unary,
                streaming,
                _error_status,
                token,
                host,
                port,
                tls,
                max_message_bytes,
                max_workers,
            )
        except OSError as exc:
            self.service.close()
            raise OSError(f"the GCS {exc}") from None
        self.host = host
        self._monitor = threading.Thread(
            target=self._check_heartbeats, name="gcs-heartbeats", daemon=True
        )

    def start(self) -> int:
        """Start serving; return the bound port."""
        self._server.start()
        self._monitor.start()
        return self.port

    def _check_heartbeats(self) -> None:
        period = max(0.05, self._heartbeat_timeout_s / 5)
        while not self._stopped.wait(period):
            try:
                for node_id in self.service.tables.check_heartbeats():
                    log.warning("node %s missed its heartbeats: declared dead", node_id.hex())
            except Exception:
                log.exception("heartbeat check failed")

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop serving (in-flight calls get ``grace_s``), end streams, close the database."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.service.pubsub.close_all()
        self._server.stop(grace_s).wait()
        if self._monitor.is_alive():
            self._monitor.join()
        self.service.close()


def _tls_from_args(args: argparse.Namespace) -> TlsConfig | None:
    given = [args.tls_cert, args.tls_key, args.tls_ca]
    if any(given) and not all(given):
        sys.exit("--tls-cert, --tls-key and --tls-ca go together: give all three or none")
    return TlsConfig(*given) if all(given) else TlsConfig.from_env()


def _write_port_file(path: str, port: int) -> None:
    write_private(Path(path), f"{port}\n")  # atomic, mode 0600


def main(argv: list[str] | None = None) -> int:
    """Run a GCS until SIGTERM or SIGINT; return the exit status."""
    p = argparse.ArgumentParser(description="rayfield GCS (global control store) server")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default: loopback)")
    p.add_argument("--port", type=int, default=0, help="TCP port; 0 picks a free one")
    p.add_argument("--port-file", help="write the bound port to this file")
    p.add_argument("--db", required=True, help="SQLite database of the tables")
    p.add_argument("--token-file", required=True, help="cluster token (created if missing)")
    p.add_argument("--tls-cert", help="PEM certificate (or RAYFIELD_TLS_CERT)")
    p.add_argument("--tls-key", help="PEM private key (or RAYFIELD_TLS_KEY)")
    p.add_argument("--tls-ca", help="PEM CA certificate (or RAYFIELD_TLS_CA)")
    p.add_argument("--heartbeat-timeout-s", type=float, default=3.0)
    p.add_argument("--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s gcs: %(message)s")
    stopped_mark = Path(args.db + STOPPED_SUFFIX)
    try:
        stopped_mark.unlink(missing_ok=True)  # the database is in use again
        if not os.path.exists(args.token_file):
            create_token_file(args.token_file)
            log.info("created the cluster token file %s", args.token_file)
        server = GcsServer(
            args.db,
            read_token(args.token_file),
            host=args.host,
            port=args.port,
            tls=_tls_from_args(args),
            heartbeat_timeout_s=args.heartbeat_timeout_s,
            max_message_bytes=args.max_message_bytes,
        )
    except (GcsError, OSError) as exc:
        sys.exit(f"{ERROR_MARK}the GCS did not start: {exc}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    port = server.start()
    if args.port_file:
        _write_port_file(args.port_file, port)
    print(f"GCS listening on {args.host}:{port}", flush=True)
    stop.wait()
    log.info("stopping")
    server.stop()
    write_private(stopped_mark, "stopped cleanly\n")  # a head restarted later starts afresh
    return 0


if __name__ == "__main__":
    from rayfield._private.common.fast_exit import exit_now

    exit_now(main())  # the server and its database are closed: no interpreter teardown
