"""The supervisor of one submitted job: a detached actor that runs its entrypoint.

The dashboard's :class:`~rayfield.job_submission.manager.JobManager` creates one
``JobSupervisor`` per job (named ``_rayfield_job_<id>`` in the namespace
:data:`NAMESPACE`, detached, on the dashboard's node) and calls :meth:`JobSupervisor.run`
once. ``run`` starts the entrypoint as a shell command in a process group of its own, its
stdout and stderr going to ``<session>/logs/job-driver-<id>.log`` (mode 0600, written
through :mod:`rayfield.util.private_files`), records each state change in the job's
record in the GCS, waits for the process and records how it ended; then the actor exits.
:meth:`JobSupervisor.stop` (another call, served while ``run`` waits: it is an async actor)
sends SIGTERM to the process group, then SIGKILL after :data:`STOP_GRACE_S`.

The entrypoint's environment is the node's, plus ``RAYFIELD_ADDRESS`` (the cluster's
GCS, so ``rayfield.init()`` joins the cluster), ``RAYFIELD_SUBMISSION_ID``,
``RAYFIELD_JOB_RUNTIME_ENV`` (the job's runtime_env as JSON, its ``working_dir`` the
unpacked local folder) and the runtime_env's ``env_vars``. Its working directory is the
unpacked ``working_dir`` package when the job has one (``<session>/jobs/<id>/``), else the
session's ``jobs/<id>/`` folder, empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from rayfield.experimental import internal_kv
from rayfield.job_submission import package
from rayfield.job_submission.models import (
    KV_NAMESPACE,
    IllegalTransition,
    JobDetails,
    JobStatus,
    transition,
)
from rayfield.util import private_files

__all__ = ["NAMESPACE", "STOP_GRACE_S", "JobSupervisor", "actor_name", "log_name"]

NAMESPACE = "_rayfield_jobs"
STOP_GRACE_S = 3.0
POLL_S = 0.05
LOG_TAIL_CHARS = 4000
# Set by the node for its workers only; a driver started from one must not inherit them.
_WORKER_ONLY_ENV = ("RAYFIELD_LOGS_DIR", "RAYFIELD_NODE_GPUS", "RAYFIELD_GCS_ADDRESS")


def actor_name(submission_id: str) -> str:
    """The name of the supervisor actor of ``submission_id``."""
    return f"_rayfield_job_{submission_id}"


def log_name(submission_id: str) -> str:
    """The bare name of the job's log file in its node's ``logs/`` folder."""
    return f"job-driver-{submission_id}.log"


def _now_ms() -> int:
    return int(time.time() * 1000)


def read_record(submission_id: str) -> JobDetails | None:
    """The job's record in the GCS, or None."""
    raw = internal_kv._internal_kv_get(submission_id, namespace=KV_NAMESPACE)
    return None if raw is None else JobDetails.from_json(raw)


def write_record(job: JobDetails) -> None:
    internal_kv._internal_kv_put(job.submission_id, job.to_json(), namespace=KV_NAMESPACE)


class JobSupervisor:
    """Runs one job's entrypoint (see the module's docstring).

    Args:
        submission_id: the job's id; its record must exist in the GCS (PENDING).
        package_dir: the folder holding the uploaded ``working_dir`` packages.
    """

    def __init__(self, submission_id: str, package_dir: str) -> None:
        self.submission_id = submission_id
        self.package_dir = Path(package_dir)
        self.process: subprocess.Popen[bytes] | None = None
        self.stop_requested = False

    def _update(self, status: JobStatus, pid: int | None = None, **kw: Any) -> None:
        job = read_record(self.submission_id)
        if job is None:  # deleted meanwhile (only terminal jobs can be)
            return
        with contextlib.suppress(IllegalTransition):
            job = transition(job, status, _now_ms(), **kw)
            write_record(job if pid is None else dataclasses.replace(job, driver_pid=pid))

    def _prepare(self, job: JobDetails, session: Path) -> tuple[Path, dict[str, str]]:
        workdir = private_files.ensure_private_dir(session / "jobs" / self.submission_id)
        runtime_env = dict(job.runtime_env or {})
        uri = runtime_env.get("working_dir")
        if uri is not None:
            if not package.is_package_uri(uri):
                raise ValueError(
                    f"working_dir {uri!r} was not uploaded: submit local folders through "
                    "JobSubmissionClient, which uploads them"
                )
            name = package.check_name(uri[len(package.PACKAGE_SCHEME) :])
            data = private_files.read_bytes(self.package_dir / name)
            package.unpack(data, workdir)
            runtime_env["working_dir"] = str(workdir)
        env = {k: v for k, v in os.environ.items() if k not in _WORKER_ONLY_ENV}
        env_vars = runtime_env.get("env_vars") or {}
        env.update({str(k): str(v) for k, v in env_vars.items()})
        gcs = os.environ.get("RAYFIELD_GCS_ADDRESS")
        if gcs:
            env["RAYFIELD_ADDRESS"] = gcs
        env["RAYFIELD_SUBMISSION_ID"] = self.submission_id
        env["RAYFIELD_JOB_RUNTIME_ENV"] = json.dumps(runtime_env)
        return workdir, env

    async def run(self) -> str:
        """Run the entrypoint to its end and record how it ended; returns the final
        state's name. The actor exits afterwards."""
        try:
            return await self._run()
        finally:
            from rayfield.actor import exit_actor

            exit_actor()  # recorded as an intended end (the reply to run() is dropped)

    async def _run(self) -> str:
        job = read_record(self.submission_id)
        if job is None or job.status.is_terminal():
            return "GONE" if job is None else job.status.value
        logs = Path(os.environ.get("RAYFIELD_LOGS_DIR", "."))
        try:
            workdir, env = self._prepare(job, logs.parent)
            with private_files.open_private(logs / log_name(self.submission_id), "ab") as out:
                if self.stop_requested:
                    self._update(JobStatus.STOPPED, message="stopped before it started")
                    return JobStatus.STOPPED.value
                self.process = subprocess.Popen(
                    job.entrypoint,
                    shell=True,
                    cwd=workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stop kills it all
                )
        except Exception as exc:  # the entrypoint never ran: say why
            self._update(JobStatus.FAILED, message=f"the job could not start: {exc}")
            return JobStatus.FAILED.value
        self._update(JobStatus.RUNNING, pid=self.process.pid, message="the entrypoint runs")
        while (code := self.process.poll()) is None:
            await asyncio.sleep(POLL_S)
        self._reap_group()
        if self.stop_requested:
            self._update(JobStatus.STOPPED, message="stopped by request", exit_code=code)
            return JobStatus.STOPPED.value
        if code == 0:
            self._update(
                JobStatus.SUCCEEDED, message="the entrypoint exited with status 0", exit_code=0
            )
            return JobStatus.SUCCEEDED.value
        tail = _tail(logs / log_name(self.submission_id))
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        self._update(
            JobStatus.FAILED,
            message=f"the entrypoint {how}; the end of its output:\n{tail}",
            exit_code=code,
        )
        return JobStatus.FAILED.value

    def _reap_group(self) -> None:
        """Kill what the entrypoint left behind in its process group."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)

    async def stop(self) -> bool:
        """Stop the job: SIGTERM to the entrypoint's process group, SIGKILL after
        :data:`STOP_GRACE_S`. Returns whether there was a running process to stop."""
        self.stop_requested = True
        proc = self.process
        if proc is None or proc.poll() is not None:
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
        self._reap_group()
        return True


def _tail(path: Path) -> str:
    try:
        with private_files.open_private(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL_CHARS))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
