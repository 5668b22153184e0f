"""``rayfield dashboard``: print the URL of a cluster's dashboard, or open it."""

from __future__ import annotations

from pathlib import Path

import click

from rayfield.cli._common import Cluster, cluster_options

START_HINT = "start the head with `rayfield start --head --include-dashboard`"


def _local_url(temp_dir: Path | None) -> tuple[str, bytes]:
    import psutil

    from rayfield.util import cluster as clusters

    session = clusters.head_session(temp_dir)
    if session is None:
        raise click.ClickException(f"no rayfield cluster runs on this machine: {START_HINT}")
    info = clusters.read_session_json(session / "dashboard.json")
    if info is None:
        raise click.ClickException(
            f"the cluster of {session} runs without a dashboard: stop it (`rayfield stop`) "
            f"and {START_HINT}"
        ) from None
    if not psutil.pid_exists(int(info.get("pid", 0))):
        raise click.ClickException(
            f"the dashboard of {session} has stopped (see {session / 'logs' / 'dashboard.out'})"
            f": `rayfield stop`, then {START_HINT}"
        )
    try:
        cert = Path(info["cert"]).read_bytes() if info.get("cert") else b""
    except OSError as exc:
        raise click.ClickException(
            f"cannot read the dashboard's certificate {info['cert']}: {exc.strerror or exc}"
        ) from None
    return str(info["url"]), cert


def _remote_url(cluster: Cluster) -> tuple[str, bytes]:
    from rayfield.dashboard import KV_CERT_KEY, KV_KEY, KV_NAMESPACE

    with cluster.state() as client:
        value = client.kv_get(KV_NAMESPACE, KV_KEY)
        cert = client.kv_get(KV_NAMESPACE, KV_CERT_KEY) or b""
    if value is None:
        raise click.ClickException(
            f"the cluster at {client.address} runs without a dashboard: {START_HINT}"
        )
    return value.decode(), cert


def _answers(url: str, cert: bytes) -> bool:
    """Whether the dashboard's login page answers; over HTTPS the dashboard must present
    ``cert`` (PEM), the certificate it published (pinned: trusted as is)."""
    import ssl
    import urllib.error
    import urllib.request

    context = None
    if url.startswith("https:"):
        context = ssl.create_default_context(cadata=cert.decode() if cert else None)
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # the leaf itself is trusted
        context.check_hostname = False  # the pinned certificate, whatever names it has
    try:
        with urllib.request.urlopen(url + "login", timeout=3, context=context) as reply:
            return int(reply.status) == 200
    except (urllib.error.URLError, OSError):
        return False


@click.command()
@click.option("--open", "open_browser", is_flag=True, help="Open the dashboard in a web browser.")
@cluster_options
def dashboard(cluster: Cluster, open_browser: bool) -> None:
    """Print the URL of the cluster's dashboard (or open it with --open).

    The dashboard runs on the head when it was started with --include-dashboard; log in
    with the cluster token (``<head session>/token``).
    """
    url, cert = _remote_url(cluster) if cluster.address else _local_url(cluster.temp_dir)
    if not _answers(url, cert):
        raise click.ClickException(
            f"the dashboard at {url} does not answer: if it listens on another machine's "
            "loopback, forward its port (ssh -L PORT:127.0.0.1:PORT HEAD); else `rayfield "
            f"stop` and {START_HINT}"
        )
    click.echo(url)
    if not open_browser:
        return
    import webbrowser

    if not webbrowser.open(url):
        raise click.ClickException(f"no web browser could be started here: open {url} yourself")
