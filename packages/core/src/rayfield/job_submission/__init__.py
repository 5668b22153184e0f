"""Job submission (Ray's ``ray.job_submission``): run a script on a cluster's head and
follow it over HTTP.

Example::

    from rayfield.job_submission import JobSubmissionClient, JobStatus

    client = JobSubmissionClient("http://127.0.0.1:8265")
    job = client.submit_job(
        entrypoint="python script.py", runtime_env={"working_dir": "./", "env_vars": {"A": "1"}}
    )
    print(client.get_job_status(job), client.get_job_logs(job))

The dashboard (``rayfield start --head --include-dashboard``) serves the API; each job's
entrypoint runs under a supervisor actor on the head, with ``RAYFIELD_ADDRESS`` set so the
script's ``rayfield.init()`` joins the cluster, its output in the head's session
``logs/job-driver-<id>.log``; records live in the GCS. ``rayfield job ...`` (rayfield-cli)
is the command line over the same client.

Importing this package loads neither the runtime nor aiohttp.
"""

from __future__ import annotations

from rayfield.job_submission.client import JobSubmissionClient, JobSubmissionError
from rayfield.job_submission.models import JobDetails, JobInfo, JobStatus, JobType
from rayfield.job_submission.package import PackageTooLargeError

__all__ = [
    "JobDetails",
    "JobInfo",
    "JobStatus",
    "JobSubmissionClient",
    "JobSubmissionError",
    "JobType",
    "PackageTooLargeError",
]
