"""``JobSubmissionClient``: submit and follow jobs through a cluster's dashboard (Ray's
``ray.job_submission.JobSubmissionClient``).

The client speaks HTTP(S) to the dashboard's ``/api/job-submission`` routes with the
standard library alone (no aiohttp needed on the submitting machine) and sends the
cluster token as ``Authorization: Bearer <token>``, with the ``Origin`` header the
dashboard requires of state-changing requests.

Where it connects (``address``):

- ``http://HOST:PORT`` or ``https://HOST:PORT``: that dashboard;
- ``None`` or ``"auto"``: ``$RAYFIELD_ADDRESS`` when set, else the dashboard of the
  head running on this machine (its session's ``dashboard.json``, under ``temp_dir``);
- ``HOST:PORT`` (a GCS address, as ``$RAYFIELD_ADDRESS`` holds inside a job): the URL
  that cluster's dashboard published in its GCS.

The token is ``token=``, else ``$RAYFIELD_TOKEN``, else the head's token file on this
machine. Over HTTPS the dashboard's certificate is checked against the system's
authorities (``verify=True``), a CA file (``verify="ca.pem"``), or, for a local head, the
certificate it recorded (pinned).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from rayfield.job_submission import package
from rayfield.job_submission.models import JobDetails, JobStatus

__all__ = ["JobSubmissionClient", "JobSubmissionError"]

PREFIX = "/api/job-submission"
TAIL_POLL_S = 0.25
_HOST_PORT = re.compile(r"[^/\s:]+:\d+|\[[0-9a-fA-F:]+\]:\d+")


class JobSubmissionError(RuntimeError):
    """The dashboard refused or failed a request (``status``: the HTTP status; 0 when it
    could not be reached)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def _local_dashboard(temp_dir: str | None) -> tuple[str, bytes]:
    from rayfield.util import cluster

    session = cluster.head_session(Path(temp_dir) if temp_dir else None)
    if session is None:
        raise ConnectionError(
            "no rayfield cluster runs on this machine: pass the dashboard's URL "
            "(JobSubmissionClient('http://HOST:8265'), RAYFIELD_ADDRESS or --address) or "
            "start one with `rayfield start --head --include-dashboard`"
        )
    info = cluster.read_session_json(session / "dashboard.json")
    if info is None:
        raise ConnectionError(
            f"the cluster of {session} runs without a dashboard: start the head with "
            "`rayfield start --head --include-dashboard`"
        )
    cert = Path(info["cert"]).read_bytes() if info.get("cert") else b""
    return str(info["url"]), cert


def _published_dashboard(
    gcs_address: str, token: str | None, temp_dir: str | None
) -> tuple[str, bytes]:
    from rayfield.dashboard import KV_CERT_KEY, KV_KEY, KV_NAMESPACE
    from rayfield.util.state import StateClient

    with StateClient(gcs_address, token, temp_dir=Path(temp_dir) if temp_dir else None) as client:
        url = client.kv_get(KV_NAMESPACE, KV_KEY)
        cert = client.kv_get(KV_NAMESPACE, KV_CERT_KEY) or b""
    if url is None:
        raise ConnectionError(f"the cluster at {gcs_address} runs without a dashboard")
    return url.decode(), cert


def _local_token(temp_dir: str | None) -> str | None:
    from rayfield.util import cluster

    session = cluster.head_session(Path(temp_dir) if temp_dir else None)
    if session is None or not (session / "token").exists():
        return None
    return str(cluster.read_token(session / "token"))


class JobSubmissionClient:
    """Submit jobs to a cluster and follow them (Ray's ``JobSubmissionClient``).

    Args:
        address: the dashboard's URL, ``None``/``"auto"``, or a GCS ``HOST:PORT`` (see
            the module's docstring).
        token: the cluster token (default ``$RAYFIELD_TOKEN``, else the local head's).
        headers: more HTTP headers sent with every request.
        verify: over HTTPS, True (the system's authorities), False (no check), or the
            path of a CA bundle.
        temp_dir: the session root of a local head (default: this user's).
        timeout_s: seconds a request may take.

    Raises:
        ConnectionError: no dashboard could be found at ``address``.
        ValueError: ``address`` is none of the forms above.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        verify: bool | str = True,
        temp_dir: str | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        if address in (None, "auto"):
            address = os.environ.get("RAYFIELD_ADDRESS") or "auto"
        token = token or os.environ.get("RAYFIELD_TOKEN") or _local_token(temp_dir)
        cert = b""
        if address == "auto":
            address, cert = _local_dashboard(temp_dir)
        elif _HOST_PORT.fullmatch(address):
            address, cert = _published_dashboard(address, token, temp_dir)
        elif not address.startswith(("http://", "https://")):
            raise ValueError(
                f"address {address!r} is not a dashboard URL (http://HOST:PORT), a GCS "
                "HOST:PORT, nor 'auto'"
            )
        parsed = urllib.parse.urlsplit(address)
        self.address = f"{parsed.scheme}://{parsed.netloc}"
        self._origin = self.address
        self._headers = dict(headers or {})
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._timeout_s = timeout_s
        self._context = self._ssl_context(verify, cert) if parsed.scheme == "https" else None

    @staticmethod
    def _ssl_context(verify: bool | str, cert: bytes) -> ssl.SSLContext:
        if verify is False:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        if isinstance(verify, str):
            return ssl.create_default_context(cafile=verify)
        if cert:  # the certificate a local head recorded: trusted as is (pinned)
            context = ssl.create_default_context(cadata=cert.decode())
            context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
            context.check_hostname = False
            return context
        return ssl.create_default_context()

    # ---- HTTP -------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str = "application/json",
    ) -> Any:
        headers = dict(self._headers)
        if method not in ("GET", "HEAD"):
            headers["Origin"] = self._origin
        if body is not None:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.address + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self._timeout_s, context=self._context) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise JobSubmissionError(_http_message(exc), exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise JobSubmissionError(
                f"cannot reach the dashboard at {self.address}: {reason}"
            ) from None

    def _json(self, method: str, path: str, value: Any = None) -> Any:
        body = None if value is None else json.dumps(value).encode()
        return self._request(method, path, body)

    # ---- jobs -------------------------------------------------------------------------

    def _upload_working_dir(self, runtime_env: dict[str, Any]) -> dict[str, Any]:
        wd = runtime_env.get("working_dir")
        if wd is None or package.is_package_uri(wd):
            return runtime_env
        data = package.zip_directory(wd, runtime_env.get("excludes") or ())
        name = package.package_name(data)
        path = f"{PREFIX}/packages/{name}"
        try:
            self._request("GET", path)
        except JobSubmissionError as exc:
            if exc.status != 404:
                raise
            self._request("PUT", path, data, "application/zip")
        return {**runtime_env, "working_dir": package.PACKAGE_SCHEME + name}

    def submit_job(
        self,
        entrypoint: str,
        *,
        runtime_env: dict[str, Any] | None = None,
        submission_id: str | None = None,
        metadata: dict[str, str] | None = None,
        entrypoint_num_cpus: float | None = None,
        entrypoint_resources: dict[str, float] | None = None,
        entrypoint_num_gpus: float | None = None,
        entrypoint_memory: int | None = None,
        job_id: str | None = None,
    ) -> str:
        """Submit a job: run the shell command ``entrypoint`` on the head; returns its
        submission id (``submission_id`` when given, else a new one).

        ``runtime_env``: ``env_vars`` (set for the entrypoint), ``working_dir`` (a local
        folder: zipped, uploaded once by content hash, unpacked for the job and made the
        entrypoint's working directory; ``excludes``: patterns left out); the whole
        runtime_env reaches the entrypoint as ``$RAYFIELD_JOB_RUNTIME_ENV``.
        ``entrypoint_num_cpus``, ``entrypoint_num_gpus``, ``entrypoint_memory`` (bytes) and
        ``entrypoint_resources`` are reserved for the entrypoint's supervisor while it runs.
        ``job_id`` is Ray's older name of ``submission_id``.

        Raises:
            JobSubmissionError: the dashboard refused the job (an id in use, a bad
                runtime_env...) or could not be reached.
            PackageTooLargeError: ``working_dir`` holds more than 100 MiB.
            FileNotFoundError: ``working_dir`` is not a folder.
        """
        env = self._upload_working_dir(dict(runtime_env or {}))
        body = {
            "entrypoint": entrypoint,
            "submission_id": submission_id or job_id,
            "runtime_env": env,
            "metadata": metadata,
            "entrypoint_num_cpus": entrypoint_num_cpus,
            "entrypoint_resources": entrypoint_resources,
            "entrypoint_num_gpus": entrypoint_num_gpus,
            "entrypoint_memory": entrypoint_memory,
        }
        return str(self._json("POST", f"{PREFIX}/jobs", body)["submission_id"])

    def _job_path(self, job_id: str) -> str:
        return f"{PREFIX}/jobs/{urllib.parse.quote(job_id, safe='')}"

    def get_job_info(self, job_id: str) -> JobDetails:
        """The job's record (``JobSubmissionError`` with status 404 when unknown)."""
        return JobDetails.from_dict(self._json("GET", self._job_path(job_id)))

    def get_job_status(self, job_id: str) -> JobStatus:
        """The job's state."""
        return self.get_job_info(job_id).status

    def list_jobs(self) -> list[JobDetails]:
        """Every job's record, oldest first."""
        return [JobDetails.from_dict(v) for v in self._json("GET", f"{PREFIX}/jobs")]

    def stop_job(self, job_id: str) -> bool:
        """Stop the job (SIGTERM to its process group, SIGKILL after 3 s); False when it
        had ended already."""
        return bool(self._json("POST", self._job_path(job_id) + "/stop", {})["stopped"])

    def delete_job(self, job_id: str) -> bool:
        """Forget an ended job (``JobSubmissionError`` 400 while it runs)."""
        return bool(self._json("DELETE", self._job_path(job_id))["deleted"])

    def _logs_from(self, job_id: str, offset: int) -> dict[str, Any]:
        reply: dict[str, Any] = self._json("GET", f"{self._job_path(job_id)}/logs?offset={offset}")
        return reply

    def get_job_logs(self, job_id: str) -> str:
        """Everything the job's entrypoint wrote so far (stdout and stderr)."""
        parts: list[str] = []
        offset = 0
        while True:
            reply = self._logs_from(job_id, offset)
            if not reply["data"]:
                return "".join(parts)
            parts.append(reply["data"])
            offset = int(reply["next_offset"])

    async def tail_job_logs(self, job_id: str) -> AsyncIterator[str]:
        """The job's output as it comes, in chunks, until the job has ended and all of it
        was read::

            async for lines in client.tail_job_logs(job_id):
                print(lines, end="")
        """
        offset = 0
        while True:
            reply = await asyncio.to_thread(self._logs_from, job_id, offset)
            if reply["data"]:
                offset = int(reply["next_offset"])
                yield reply["data"]
                continue
            if JobStatus(reply["status"]).is_terminal():
                # the output may have grown between the read and the status: read once more
                last = await asyncio.to_thread(self._logs_from, job_id, offset)
                if last["data"]:
                    offset = int(last["next_offset"])
                    yield last["data"]
                    continue
                return
            await asyncio.sleep(TAIL_POLL_S)


def _http_message(exc: urllib.error.HTTPError) -> str:
    try:
        detail = json.loads(exc.read()).get("error", "")
    except (ValueError, AttributeError, OSError):
        detail = ""
    if exc.code == 401:
        detail = detail or "the cluster token was refused"
        return f"401: {detail} (pass token=, or set RAYFIELD_TOKEN)"
    return f"{exc.code}: {detail or exc.reason}"
