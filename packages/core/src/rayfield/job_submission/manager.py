"""The dashboard's side of job submission: records, supervisors, packages and logs.

:class:`JobManager` serves the dashboard's ``/api/job-submission/...`` routes (see
``rayfield.dashboard.jobs``). Every method blocks (GCS and node calls), so the dashboard
runs them on a thread of its own. Records are JSON in the GCS's key-value table
(:data:`~rayfield.job_submission.models.KV_NAMESPACE`), so a restarted dashboard finds
every job; supervisors are detached actors, so jobs run on while it restarts.

To create supervisors the manager joins the cluster as a driver (``rayfield.init`` with
the GCS address) on first use, on the node of this machine; each job's supervisor is
pinned there (the head, where the dashboard runs), with ``entrypoint_num_cpus``,
``entrypoint_num_gpus``, ``entrypoint_memory`` and ``entrypoint_resources`` as its
resources.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import Any

from rayfield.exceptions import ActorDiedError
from rayfield.job_submission import package
from rayfield.job_submission.models import (
    KV_NAMESPACE,
    JobDetails,
    JobStatus,
    check_submission_id,
    transition,
)
from rayfield.job_submission.supervisor import NAMESPACE, JobSupervisor, actor_name, log_name
from rayfield.util import private_files
from rayfield.util.state import StateClient

__all__ = ["JobError", "JobManager", "JobNotFoundError"]

MAX_LOG_READ = 1 << 20


class JobError(ValueError):
    """A request about jobs that cannot be served as asked (the HTTP API answers 400)."""


class JobNotFoundError(KeyError):
    """No job has that submission id (the HTTP API answers 404)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such job"


def check_runtime_env(runtime_env: Any) -> dict[str, Any]:
    """The job's runtime_env when it is a JSON object whose ``env_vars`` (if any) map
    strings to strings and whose ``working_dir`` (if any) is an uploaded package.

    Raises:
        JobError: saying which part is wrong.
    """
    if runtime_env is None:
        return {}
    if not isinstance(runtime_env, dict):
        raise JobError(f"runtime_env must be a JSON object, not {type(runtime_env).__name__}")
    env_vars = runtime_env.get("env_vars")
    if env_vars is not None and not (
        isinstance(env_vars, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items())
    ):
        raise JobError("runtime_env['env_vars'] must map names to string values")
    wd = runtime_env.get("working_dir")
    if wd is not None and not package.is_package_uri(wd):
        raise JobError(
            f"runtime_env['working_dir'] {wd!r} is not an uploaded package: "
            "JobSubmissionClient uploads a local folder and sends its pkg:// name"
        )
    return dict(runtime_env)


class JobManager:
    """Jobs of one cluster, for the dashboard.

    Args:
        client: the dashboard's state client (GCS key-value table, nodes' logs).
        package_dir: where uploaded ``working_dir`` packages are kept (created 0700).
        gcs_address: the cluster's GCS, joined as a driver to create supervisors.
        token: the cluster token (for that driver).
        temp_dir: the cluster's session root on this machine (None: the default).
    """

    def __init__(
        self,
        client: StateClient,
        package_dir: str | os.PathLike[str],
        gcs_address: str,
        token: str,
        temp_dir: str | None = None,
    ) -> None:
        self.client = client
        self.package_dir = Path(package_dir)
        self.gcs_address = gcs_address
        self.token = token
        self.temp_dir = temp_dir
        self._lock = threading.Lock()
        self._node_id: str | None = None

    # ---- records ----------------------------------------------------------------------

    def _read(self, submission_id: str) -> JobDetails | None:
        raw = self.client.kv_get(KV_NAMESPACE, submission_id)
        return None if raw is None else JobDetails.from_json(raw)

    def _write(self, job: JobDetails) -> None:
        self.client.kv_put(KV_NAMESPACE, job.submission_id, job.to_json().encode())

    def get(self, submission_id: str) -> JobDetails:
        """The job's record.

        Raises:
            JobNotFoundError: no job has that id.
        """
        job = self._read(submission_id)
        if job is None:
            raise JobNotFoundError(f"no job has the submission id {submission_id!r}")
        return self._reconcile(job)

    def _reconcile(self, job: JobDetails) -> JobDetails:
        """``job``, marked FAILED when it has not ended but its supervisor is gone (its
        node died, or it was killed); what the entrypoint left running is killed."""
        if job.status.is_terminal() or self._supervisor(job.submission_id) is not None:
            return job
        again = self._read(job.submission_id)  # it may have ended as the actor exited
        if again is None or again.status.is_terminal():
            return again or job
        if job.driver_pid and job.node_id == self._driver_node():
            with contextlib.suppress(OSError):
                os.killpg(job.driver_pid, signal.SIGKILL)
        self._finish(job.submission_id, JobStatus.FAILED, "the job's supervisor died")
        return self._read(job.submission_id) or job

    def list(self) -> list[JobDetails]:
        """Every job's record, oldest first."""
        jobs = []
        for key in self.client.kv_keys(KV_NAMESPACE):
            job = self._read(key.decode())
            if job is not None:
                jobs.append(self._reconcile(job))
        return sorted(jobs, key=lambda j: (j.start_time or 0, j.submission_id))

    # ---- packages ---------------------------------------------------------------------

    def has_package(self, name: str) -> bool:
        """Whether the package ``name`` was uploaded (``ValueError``: not a package name)."""
        return (self.package_dir / package.check_name(name)).is_file()

    def put_package(self, name: str, data: bytes) -> None:
        """Keep an uploaded package (once; its name must be the hash of ``data``).

        Raises:
            JobError: ``name`` is not ``data``'s package name, or ``data`` is too large.
        """
        package.check_name(name)
        if len(data) > package.MAX_PACKAGE_BYTES:
            raise JobError(f"package {name} is over {package.MAX_PACKAGE_BYTES >> 20} MiB")
        if package.package_name(data) != name:
            raise JobError(f"package {name} does not match its content's SHA-256")
        private_files.ensure_private_dir(self.package_dir)
        if not (self.package_dir / name).is_file():
            private_files.write_bytes(self.package_dir / name, data)

    # ---- jobs -------------------------------------------------------------------------

    def _driver_node(self) -> str:
        """Join the cluster as a driver (once); the node id of this machine's node."""
        import rayfield

        with self._lock:
            if self._node_id is None:
                os.environ.setdefault("RAYFIELD_TOKEN", self.token)
                if not rayfield.is_initialized():
                    rayfield.init(
                        address=self.gcs_address, temp_dir=self.temp_dir, configure_logging=False
                    )
                node_id = rayfield.get_runtime_context().get_node_id()
                if node_id is None:
                    raise JobError("the dashboard's driver has no node on this machine")
                self._node_id = node_id
            return self._node_id

    def submit(
        self,
        entrypoint: str,
        submission_id: str | None = None,
        runtime_env: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
        entrypoint_num_cpus: float | None = None,
        entrypoint_resources: dict[str, float] | None = None,
        entrypoint_num_gpus: float | None = None,
        entrypoint_memory: int | None = None,
    ) -> str:
        """Record a job (PENDING) and start its supervisor; returns the submission id.

        Raises:
            JobError: an empty entrypoint, an id in use, a bad runtime_env, metadata or
                resource amount, or a ``working_dir`` package that was not uploaded.
        """
        import rayfield
        from rayfield.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not isinstance(entrypoint, str) or not entrypoint.strip():
            raise JobError("the entrypoint must be a non-empty shell command")
        sid = submission_id or f"rayfield_job_{secrets.token_hex(8)}"
        try:
            check_submission_id(sid)
        except ValueError as exc:
            raise JobError(str(exc)) from None
        env = check_runtime_env(runtime_env)
        wd = env.get("working_dir")
        if wd is not None and not self.has_package(wd[len(package.PACKAGE_SCHEME) :]):
            raise JobError(f"the package {wd} was not uploaded first")
        if metadata is not None and not (
            isinstance(metadata, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
        ):
            raise JobError("metadata must map strings to strings")
        if entrypoint_resources is not None and not isinstance(entrypoint_resources, dict):
            raise JobError("entrypoint_resources must map resource names to amounts")
        resources = {str(k): float(v) for k, v in (entrypoint_resources or {}).items()}
        amounts = [
            float(a or 0) for a in (entrypoint_num_cpus, entrypoint_num_gpus, entrypoint_memory)
        ]
        if min([*amounts, *resources.values()]) < 0:
            raise JobError("the entrypoint's resource amounts must not be negative")
        node_id = self._driver_node()
        with self._lock:
            if self._read(sid) is not None:
                raise JobError(f"a job with submission id {sid!r} exists already")
            job = JobDetails(
                submission_id=sid,
                entrypoint=entrypoint,
                metadata=dict(metadata or {}),
                runtime_env=env,
                entrypoint_num_cpus=entrypoint_num_cpus,
                entrypoint_resources=entrypoint_resources,
                entrypoint_num_gpus=entrypoint_num_gpus,
                entrypoint_memory=entrypoint_memory,
                node_id=node_id,
                log_name=log_name(sid),
                start_time=int(time.time() * 1000),
                message="waiting for its supervisor",
            )
            self._write(job)
        try:
            supervisor = rayfield.remote(JobSupervisor).options(
                name=actor_name(sid),
                namespace=NAMESPACE,
                lifetime="detached",
                num_cpus=amounts[0],
                num_gpus=amounts[1],
                memory=amounts[2] or None,
                resources=resources or None,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            )
            handle = supervisor.remote(sid, str(self.package_dir))
            handle.run.remote()
        except Exception as exc:
            self._finish(sid, JobStatus.FAILED, f"its supervisor could not start: {exc}")
            raise
        return sid

    def _finish(self, submission_id: str, status: JobStatus, message: str) -> None:
        job = self._read(submission_id)
        if job is not None and not job.status.is_terminal():
            self._write(transition(job, status, int(time.time() * 1000), message=message))

    def _supervisor(self, submission_id: str) -> Any:
        import rayfield

        self._driver_node()
        try:
            return rayfield.get_actor(actor_name(submission_id), namespace=NAMESPACE)
        except ValueError:
            return None

    def stop(self, submission_id: str) -> bool:
        """Stop a job that has not ended; returns False when it had ended already.

        Raises:
            JobNotFoundError: no job has that id.
        """
        import rayfield

        job = self.get(submission_id)
        if job.status.is_terminal():
            return False
        handle = self._supervisor(submission_id)
        if handle is None:  # its supervisor is gone: record the stop ourselves
            self._finish(submission_id, JobStatus.STOPPED, "stopped (its supervisor was gone)")
            return True
        with contextlib.suppress(ActorDiedError):
            rayfield.get(handle.stop.remote(), timeout=30)
        return True

    def delete(self, submission_id: str) -> bool:
        """Forget a job that has ended (its record and the folder it ran in).

        Raises:
            JobNotFoundError: no job has that id.
            JobError: the job has not ended (stop it first).
        """
        job = self.get(submission_id)
        if not job.status.is_terminal():
            raise JobError(
                f"job {submission_id!r} is {job.status.value}: stop it before deleting it"
            )
        return bool(self.client.kv_del(KV_NAMESPACE, submission_id))

    def logs(
        self, submission_id: str, offset: int = 0, max_bytes: int = MAX_LOG_READ
    ) -> dict[str, Any]:
        """Part of the job's output: ``{"data", "offset", "next_offset", "size",
        "status"}`` from byte ``offset`` (at most ``max_bytes``); empty before the
        entrypoint starts.

        Raises:
            JobNotFoundError: no job has that id.
        """
        job = self.get(submission_id)
        empty = {"data": "", "offset": offset, "next_offset": offset, "size": 0}
        if job.node_id is None or job.log_name is None:
            return {**empty, "status": job.status.value}
        try:
            reply = self.client.read_log(job.node_id, job.log_name, offset, max_bytes)
        except Exception:  # its node is gone: no more output can be read
            return {**empty, "status": job.status.value}
        data = bytes(reply["data"]) if reply.get("found") else b""
        return {
            "data": data.decode("utf-8", errors="replace"),
            "offset": reply.get("offset", offset),
            "next_offset": reply.get("offset", offset) + len(data),
            "size": reply.get("size", 0),
            "status": job.status.value,
        }
