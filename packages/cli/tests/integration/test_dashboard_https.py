"""The dashboard over HTTPS: with its own certificate or the cluster's, plain HTTP refused,
and bad query values answered 400 (real processes, throwaway certificates)."""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from clusterutil import rayfield_cmd, start_nodes, stop_in_background

from rayfield.job_submission import JobSubmissionClient, JobSubmissionError
from rayfield.testing import wait_for
from rayfield.util.cluster import make_test_certificates


def fetch(url: str, ca: Path | None, token: str | None = None) -> tuple[int, Any]:
    """GET ``url`` trusting only ``ca``; (status, JSON body or text)."""
    context = ssl.create_default_context(cafile=str(ca)) if ca else None
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as reply:
            status, body = int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as err:
        status, body = err.code, err.read().decode()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def serves_https_only(temp_dir: Path, certs: dict[str, Path]) -> None:
    session = (temp_dir / "session_latest").resolve()
    url = json.loads((session / "dashboard.json").read_text())["url"]
    assert url.startswith("https://127.0.0.1:")
    printed = rayfield_cmd("dashboard", "--temp-dir", str(temp_dir)).stdout.strip()
    assert printed == url  # `rayfield dashboard` reaches it (pinning its certificate)
    status, page = fetch(url + "login", certs["ca.crt"])
    assert status == 200 and "<form" in page
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        fetch(url + "login", certs["rogue-ca.crt"])  # another CA's trust is not enough
    plain = "http://" + url.removeprefix("https://")
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
        fetch(plain + "login", None)  # no answer in clear text
    token = (session / "token").read_text().strip()
    for query, says in (
        ("/api/log?node=x&name=node.out&offset=99999999999999999999", "offset must be between"),
        ("/api/log?node=x&name=node.out&offset=abc", "offset must be a decimal integer"),
        ("/api/log?node=x&name=node.out&max_bytes=-1", "max_bytes must be between"),
        ("/api/timeline?limit=1000000000000", "limit must be between"),
        ("/api/timeline?limit=-1", "limit must be between"),
        ("/api/timeline?download=maybe", "download must be 0 or 1"),
        ("/api/tasks?recent=-5", "recent must be between"),
        ("/api/tasks?recent=1e3", "recent must be a decimal integer"),
    ):
        status, body = fetch(url.rstrip("/") + query, certs["ca.crt"], token)
        assert status == 400 and says in body["error"], (query, status, body)
    status, body = fetch(url.rstrip("/") + "/api/timeline?limit=5", certs["ca.crt"], token)
    assert status == 200 and isinstance(body, list)
    jobs = JobSubmissionClient(temp_dir=str(temp_dir))  # the local head's URL and certificate
    assert jobs.address == url.rstrip("/") and jobs.list_jobs() == []
    rogue = JobSubmissionClient(url, temp_dir=str(temp_dir), verify=str(certs["rogue-ca.crt"]))
    with pytest.raises(JobSubmissionError, match="CERTIFICATE_VERIFY_FAILED"):
        rogue.list_jobs()


def test_dashboard_with_its_own_certificate(tmp_path: Path) -> None:
    certs = make_test_certificates(tmp_path)
    temp_dir = tmp_path / "rf"
    own = ("--dashboard-tls-cert", str(certs["server.crt"]))
    own += ("--dashboard-tls-key", str(certs["server.key"]))
    start_nodes(temp_dir, count=1, head_args=("--include-dashboard", "--dashboard-port", "0", *own))
    try:
        serves_https_only(temp_dir, certs)
        jobs = JobSubmissionClient(temp_dir=str(temp_dir), verify=str(certs["ca.crt"]))
        job = jobs.submit_job("echo submitted over https")
        wait_for(
            lambda: jobs.get_job_status(job).is_terminal(),
            20,
            "the job over HTTPS to end",
            interval=0.2,
        )
        assert jobs.get_job_status(job).value == "SUCCEEDED"
        assert jobs.get_job_logs(job) == "submitted over https\n"
    finally:
        stop_in_background(temp_dir)


def test_dashboard_with_the_clusters_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs = make_test_certificates(tmp_path)
    for name, file in (("CERT", "server.crt"), ("KEY", "server.key"), ("CA", "ca.crt")):
        monkeypatch.setenv(f"RAYFIELD_TLS_{name}", str(certs[file]))  # the CLI's --tls-*
    temp_dir = tmp_path / "rf"
    start_nodes(temp_dir, count=1, head_args=("--include-dashboard", "--dashboard-port", "0"))
    try:
        serves_https_only(temp_dir, certs)
        remote = rayfield_cmd(
            "dashboard", "--address", _address(temp_dir), "--temp-dir", str(temp_dir)
        )
        assert remote.stdout.strip().startswith("https://")  # the URL and cert from the GCS
    finally:
        stop_in_background(temp_dir)


def _address(temp_dir: Path) -> str:
    cluster = json.loads((temp_dir / "session_latest" / "cluster.json").read_text())
    return str(cluster["gcs_address"])
