"""Job records and their states (Ray's ``ray.job_submission.JobStatus`` and ``JobDetails``).

A submitted job moves through a small state machine, kept pure here (no processes, no
cluster) so it is tested on its own::

    PENDING --start--> RUNNING --exit 0--> SUCCEEDED
       |                  |----exit != 0--> FAILED
       |                  '----stop-------> STOPPED
       |----stop----> STOPPED
       '----failure--> FAILED   (the supervisor could not start the entrypoint)

A terminal state (SUCCEEDED, FAILED, STOPPED) never changes again. The record is stored
as JSON in the GCS's key-value table (namespace :data:`KV_NAMESPACE`, key the submission
id), so it outlives the dashboard that wrote it.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
from typing import Any

__all__ = [
    "KV_NAMESPACE",
    "IllegalTransition",
    "JobDetails",
    "JobInfo",
    "JobStatus",
    "JobType",
    "check_submission_id",
    "transition",
]

KV_NAMESPACE = "job_submission"
"""The GCS key-value namespace of the job records."""

_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # never "." or "..": it names folders


class JobStatus(str, enum.Enum):
    """The state of a submitted job."""

    PENDING = "PENDING"
    """Submitted; its supervisor has not started the entrypoint yet."""
    RUNNING = "RUNNING"
    """The entrypoint's process runs."""
    STOPPED = "STOPPED"
    """Stopped by ``stop_job`` (its process group was killed)."""
    SUCCEEDED = "SUCCEEDED"
    """The entrypoint exited with status 0."""
    FAILED = "FAILED"
    """The entrypoint exited with another status, or could not be started."""

    def __str__(self) -> str:
        return self.value

    def is_terminal(self) -> bool:
        """Whether the job has ended (SUCCEEDED, FAILED or STOPPED): it never changes
        again."""
        return self in _TERMINAL


_TERMINAL = frozenset({JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED})
_ALLOWED = {
    JobStatus.PENDING: {JobStatus.RUNNING, JobStatus.STOPPED, JobStatus.FAILED},
    JobStatus.RUNNING: {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED},
}


class JobType(str, enum.Enum):
    """Ray's job types: a job submitted through the API, or a driver started by hand."""

    SUBMISSION = "SUBMISSION"
    DRIVER = "DRIVER"


class IllegalTransition(ValueError):
    """A job record was asked to move to a state its current state cannot reach."""


@dataclasses.dataclass(frozen=True)
class JobDetails:
    """What is known of one submitted job (Ray's ``JobDetails``; ``JobInfo`` is the same).

    Times are in milliseconds since the epoch (as Ray's): ``start_time`` when it was
    submitted, ``end_time`` when it ended (None until then). ``driver_exit_code`` is the
    entrypoint's exit status once it exited (negative: killed by that signal), and
    ``driver_pid`` its process id (it leads a process group of its own).
    ``message`` says why the job is in its state (for FAILED: the exit status and the end
    of its output). ``node_id`` is the node whose
    supervisor runs the entrypoint; ``log_name`` the file of its output in that node's
    session ``logs/`` folder.
    """

    submission_id: str
    entrypoint: str
    status: JobStatus = JobStatus.PENDING
    message: str | None = None
    type: JobType = JobType.SUBMISSION
    start_time: int | None = None
    end_time: int | None = None
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)
    runtime_env: dict[str, Any] = dataclasses.field(default_factory=dict)
    entrypoint_num_cpus: float | None = None
    entrypoint_resources: dict[str, float] | None = None
    entrypoint_num_gpus: float | None = None
    entrypoint_memory: int | None = None
    driver_exit_code: int | None = None
    driver_pid: int | None = None
    node_id: str | None = None
    log_name: str | None = None

    @property
    def job_id(self) -> str:
        """Ray's ``job_id`` of a submission: here the submission id."""
        return self.submission_id

    def to_json(self) -> str:
        """The record as JSON (what the GCS keeps and the HTTP API sends)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_dict(self) -> dict[str, Any]:
        value = dataclasses.asdict(self)
        value["status"] = self.status.value
        value["type"] = self.type.value
        return value

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> JobDetails:
        """A record from :meth:`to_dict`'s form; unknown fields are ignored.

        Raises:
            ValueError: a field has a value that is no job state or type, or the id or
                entrypoint is missing.
        """
        if not isinstance(value, dict) or "submission_id" not in value or "entrypoint" not in value:
            raise ValueError(f"not a job record: {value!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in value.items() if k in names}
        fields["status"] = JobStatus(fields.get("status", "PENDING"))
        fields["type"] = JobType(fields.get("type", "SUBMISSION"))
        return cls(**fields)

    @classmethod
    def from_json(cls, text: str | bytes) -> JobDetails:
        """A record from :meth:`to_json`'s text (``ValueError`` when it is not one)."""
        return cls.from_dict(json.loads(text))


JobInfo = JobDetails
"""Ray's older name of :class:`JobDetails`."""


def transition(
    job: JobDetails,
    status: JobStatus,
    now_ms: int,
    *,
    message: str | None = None,
    exit_code: int | None = None,
) -> JobDetails:
    """``job`` moved to ``status`` at ``now_ms`` (epoch milliseconds).

    A terminal state sets ``end_time`` (``start_time``, the submission's time, is set
    when the record is made). ``message`` and ``exit_code`` replace the record's when given.

    Raises:
        IllegalTransition: ``job``'s state cannot reach ``status`` (a terminal state
            reaches nothing; RUNNING does not go back to PENDING).
    """
    if status not in _ALLOWED.get(job.status, set()):
        raise IllegalTransition(
            f"job {job.submission_id!r} is {job.status.value}: it cannot become {status.value}"
        )
    changes: dict[str, Any] = {"status": status}
    if status.is_terminal():
        changes["end_time"] = now_ms
    if message is not None:
        changes["message"] = message
    if exit_code is not None:
        changes["driver_exit_code"] = exit_code
    return dataclasses.replace(job, **changes)


def check_submission_id(submission_id: str) -> str:
    """``submission_id`` when it is a usable id (1 to 128 of ``A-Z a-z 0-9 _ . -``, the
    first a letter, digit or ``_``).

    Raises:
        ValueError: it is not, saying what is allowed.
    """
    if not isinstance(submission_id, str) or not _ID.fullmatch(submission_id):
        raise ValueError(
            f"submission id {submission_id!r} is not valid: use 1 to 128 letters, digits, "
            "'_', '.' or '-', starting with a letter, digit or '_'"
        )
    return submission_id
