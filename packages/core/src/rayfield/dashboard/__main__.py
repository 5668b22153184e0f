"""The dashboard process: ``python -m rayfield.dashboard``.

Usage::

    python -m rayfield.dashboard --gcs-address HOST:PORT --token-file F \\
        [--host 127.0.0.1] [--port 8265] [--session-dir S] [--tls-cert F --tls-key F --tls-ca F]

Once listening it prints ``dashboard listening on URL``, writes ``S/dashboard.json``
(``{"url", "pid"}``) and publishes the URL in the GCS KV store (namespace
``dashboard``, key ``url``) for ``rayfield dashboard``; SIGTERM removes both and stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path

from aiohttp import web

from rayfield._private.cluster.state_client import StateClient
from rayfield._private.gcs.auth import TlsConfig, read_token
from rayfield.dashboard import DEFAULT_PORT, KV_KEY, KV_NAMESPACE, security
from rayfield.dashboard.api import StateApi
from rayfield.dashboard.server import ALLOWED_HOSTS, make_app

log = logging.getLogger("rayfield.dashboard")


def _url(host: str, port: int) -> str:
    # A wildcard bind is reached on this machine through loopback.
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{'[' + shown + ']' if ':' in shown else shown}:{port}/"


async def serve(args: argparse.Namespace, tls: TlsConfig | None) -> None:
    """Serve until SIGTERM or SIGINT."""
    token = read_token(args.token_file)
    client = StateClient(args.gcs_address, token, tls=tls)
    api = StateApi(client)
    app = make_app(api, token, ())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, reuse_address=False)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        api.close()
        client.close()
        raise SystemExit(f"cannot listen on {args.host}:{args.port}: {exc}") from None
    port = int(runner.addresses[0][1])
    app[ALLOWED_HOSTS].update(security.allowed_hosts(args.host, port))
    url = _url(args.host, port)
    info = Path(args.session_dir) / "dashboard.json" if args.session_dir else None
    if info is not None:
        tmp = info.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}))
        tmp.replace(info)
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, client.gcs.kv_put, KV_NAMESPACE, KV_KEY, url.encode())
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
            loop.run_in_executor(None, client.gcs.kv_del, KV_NAMESPACE, KV_KEY), timeout=2
        )
    await runner.cleanup()
    api.close()
    client.close()


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
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    given = [args.tls_cert, args.tls_key, args.tls_ca]
    if any(given) and not all(given):
        sys.exit("--tls-cert, --tls-key and --tls-ca go together: give all three or none")
    tls = TlsConfig(*given) if all(given) else None
    asyncio.run(serve(args, tls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
