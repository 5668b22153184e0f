"""The dashboard process: ``python -m rayfield.dashboard``.

Usage::

    python -m rayfield.dashboard --gcs-address HOST:PORT --token-file F \\
        [--host 127.0.0.1] [--port 8265] [--session-dir S] [--tls-cert F --tls-key F --tls-ca F]
        [--https-cert F --https-key F]

With ``--https-cert/--https-key`` it serves HTTPS only (TLS 1.2 or later; a plain HTTP
request gets no answer). ``--tls-*`` is the mutual TLS of the cluster's gRPC channels.
Once listening it prints ``dashboard listening on URL``, writes ``S/dashboard.json``
(``{"url", "pid", "cert"}``, mode 0600) and publishes the URL (and under HTTPS its
certificate, key ``cert``) in the GCS KV store (namespace ``dashboard``, key ``url``) for
``rayfield dashboard``; SIGTERM removes them and stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import ssl
import sys
from pathlib import Path

from aiohttp import web

from rayfield.dashboard import DEFAULT_PORT, KV_CERT_KEY, KV_KEY, KV_NAMESPACE, security
from rayfield.dashboard.api import StateApi
from rayfield.dashboard.jobs import JobApi
from rayfield.dashboard.metrics_page import MetricsHistory, metrics_page
from rayfield.dashboard.pages import discover
from rayfield.dashboard.server import ALLOWED_HOSTS, make_app
from rayfield.job_submission.manager import JobManager
from rayfield.util.cluster import (
    ERROR_MARK,
    TlsConfig,
    default_temp_dir,
    read_token,
    write_private,
)
from rayfield.util.state import StateClient

log = logging.getLogger("rayfield.dashboard")


def _url(host: str, port: int, https: bool = False) -> str:
    # A wildcard bind is reached on this machine through loopback.
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    scheme = "https" if https else "http"
    return f"{scheme}://{'[' + shown + ']' if ':' in shown else shown}:{port}/"


def https_context(cert: str, key: str) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 or later) with ``cert`` (PEM, its chain after
    it) and its private ``key``.

    Raises:
        SystemExit: a file is missing or the key does not match the certificate.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise SystemExit(
            f"{ERROR_MARK}the dashboard cannot serve HTTPS with {cert} and {key}: {exc}"
        ) from None
    return context


async def serve(args: argparse.Namespace, tls: TlsConfig | None) -> None:
    """Serve until SIGTERM or SIGINT."""
    token = read_token(args.token_file)
    client = StateClient(args.gcs_address, token, tls=tls)
    api = StateApi(client)
    history = MetricsHistory(client).start()
    pages = [p for p in discover() if p.name != "metrics"] + [metrics_page(history)]
    if pages:
        log.info("dashboard pages: %s", ", ".join(p.name for p in pages))
    jobs = JobApi(_job_manager(args, client, token))
    app = make_app(api, token, (), pages, jobs.routes())
    https = https_context(args.https_cert, args.https_key) if args.https_cert else None
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, reuse_address=False, ssl_context=https)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        api.close()
        jobs.close()
        history.close()
        client.close()
        raise SystemExit(
            f"{ERROR_MARK}the dashboard cannot listen on {args.host}:"
            f"{args.port} ({os.strerror(exc.errno) if exc.errno else exc}): pick another "
            "port with --dashboard-port "
            "(0: any free one)"
        ) from None
    port = int(runner.addresses[0][1])
    app[ALLOWED_HOSTS].update(security.allowed_hosts(args.host, port))
    url = _url(args.host, port, https is not None)
    cert = str(Path(args.https_cert).resolve()) if args.https_cert else None
    info = Path(args.session_dir) / "dashboard.json" if args.session_dir else None
    if info is not None:
        record = {"url": url, "pid": os.getpid(), "cert": cert}
        write_private(info, json.dumps(record))
    loop = asyncio.get_running_loop()
    pem = Path(cert).read_bytes() if cert else b""
    try:
        await loop.run_in_executor(None, client.kv_put, KV_NAMESPACE, KV_CERT_KEY, pem)
        await loop.run_in_executor(None, client.kv_put, KV_NAMESPACE, KV_KEY, url.encode())
    except Exception as exc:  # the page works without it; only `--address` lookups need it
        log.warning("could not publish the dashboard's URL in the GCS: %s", exc)
    print(f"dashboard listening on {url}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if info is not None:
        info.unlink(missing_ok=True)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(
            loop.run_in_executor(None, client.kv_del, KV_NAMESPACE, KV_KEY), timeout=2
        )
    await runner.cleanup()
    api.close()
    jobs.close()
    history.close()
    client.close()


def _job_manager(args: argparse.Namespace, client: StateClient, token: str) -> JobManager:
    """The jobs of this cluster: packages kept in the session's ``job_packages/`` (else
    in a folder of the session root), supervisors started from this machine's node."""
    session = Path(args.session_dir) if args.session_dir else None
    packages = session / "job_packages" if session else default_temp_dir() / "job_packages"
    temp_dir = str(session.parent) if session else None
    return JobManager(client, packages, args.gcs_address, token, temp_dir)


def main(argv: list[str] | None = None) -> int:
    """Run the dashboard until SIGTERM; return the exit status."""
    p = argparse.ArgumentParser(description="rayfield dashboard: a web page over a cluster")
    p.add_argument("--gcs-address", required=True, help="the cluster's GCS, HOST:PORT")
    p.add_argument("--token-file", required=True, help="the cluster token (mode 0600)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default: loopback)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="TCP port; 0 picks a free one")
    p.add_argument("--session-dir", help="write dashboard.json (url, pid) here")
    p.add_argument("--tls-cert", help="PEM certificate for mutual TLS to the cluster")
    p.add_argument("--tls-key", help="its private key")
    p.add_argument("--tls-ca", help="the cluster's CA certificate")
    p.add_argument("--https-cert", help="serve HTTPS with this PEM certificate (and chain)")
    p.add_argument("--https-key", help="the private key of --https-cert")
    args = p.parse_args(argv)
    if bool(args.https_cert) != bool(args.https_key):
        sys.exit("--https-cert and --https-key go together: give both or neither")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    given = [args.tls_cert, args.tls_key, args.tls_ca]
    if any(given) and not all(given):
        sys.exit("--tls-cert, --tls-key and --tls-ca go together: give all three or none")
    tls = TlsConfig(*given) if all(given) else None
    asyncio.run(serve(args, tls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
