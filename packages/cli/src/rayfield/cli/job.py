"""``rayfield job submit|status|logs|stop|list|delete``: jobs through the dashboard (Ray's
``ray job``), over :class:`rayfield.job_submission.JobSubmissionClient`."""

from __future__ import annotations

import functools
import json
import shlex
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from rayfield.job_submission import JobSubmissionClient

F = TypeVar("F", bound=Callable[..., Any])
WAIT_POLL_S = 0.25


def _client_options(fn: F) -> F:
    """``--address``, ``--token`` and ``--temp-dir``; the command gets a ``client``."""

    @click.option(
        "--address",
        envvar="RAYFIELD_ADDRESS",
        help="The dashboard's URL (http://HOST:8265), or a GCS HOST:PORT whose cluster "
        "published one. Default: $RAYFIELD_ADDRESS, else the head running on this machine.",
    )
    @click.option(
        "--token", envvar="RAYFIELD_TOKEN", help="The cluster token (default: the local head's)."
    )
    @click.option(
        "--temp-dir",
        type=click.Path(file_okay=False),
        help="The session root of a head on this machine (default: this user's).",
    )
    @functools.wraps(fn)
    def wrapped(address: str | None, token: str | None, temp_dir: str | None, **kw: Any) -> Any:
        from rayfield.job_submission import JobSubmissionClient, JobSubmissionError

        try:
            client = JobSubmissionClient(address, token=token, temp_dir=temp_dir)
            return fn(client=client, **kw)
        except (JobSubmissionError, ConnectionError, ValueError, OSError) as exc:
            raise click.ClickException(str(exc)) from None

    return wrapped  # type: ignore[return-value]


def _json_option(value: str | None, what: str) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=what) from None


def _follow(client: JobSubmissionClient, job_id: str) -> None:
    import asyncio  # here: `rayfield --help` loads no event loop

    async def tail() -> None:
        async for chunk in client.tail_job_logs(job_id):
            click.echo(chunk, nl=False)

    asyncio.run(tail())


@click.group()
def job() -> None:
    """Submit jobs to a cluster's dashboard and follow them."""


@job.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "--working-dir",
    type=click.Path(exists=True, file_okay=False),
    help="A local folder: uploaded and made the entrypoint's working directory.",
)
@click.option(
    "--runtime-env-json", help='The runtime_env as JSON, e.g. \'{"env_vars": {"A": "1"}}\'.'
)
@click.option("--submission-id", help="The job's id (default: a new one).")
@click.option("--metadata-json", help="Metadata (a JSON object of strings) kept with the job.")
@click.option("--entrypoint-num-cpus", type=float, help="CPUs reserved for the entrypoint.")
@click.option("--entrypoint-resources", help="Custom resources reserved for it, as JSON.")
@click.option("--no-wait", is_flag=True, help="Print the id and return; do not follow the logs.")
@click.argument("entrypoint", nargs=-1, required=True, type=click.UNPROCESSED)
@_client_options
def submit(
    client: JobSubmissionClient,
    working_dir: str | None,
    runtime_env_json: str | None,
    submission_id: str | None,
    metadata_json: str | None,
    entrypoint_num_cpus: float | None,
    entrypoint_resources: str | None,
    no_wait: bool,
    entrypoint: tuple[str, ...],
) -> None:
    """Run ENTRYPOINT (after --, e.g. `-- python script.py`) on the cluster's head.

    Without --no-wait, follows its output until it ends and exits 1 unless it succeeded.
    """
    runtime_env = _json_option(runtime_env_json, "--runtime-env-json") or {}
    if not isinstance(runtime_env, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--runtime-env-json")
    if working_dir:
        runtime_env["working_dir"] = working_dir
    job_id = client.submit_job(
        shlex.join(entrypoint) if len(entrypoint) > 1 else entrypoint[0],
        runtime_env=runtime_env,
        submission_id=submission_id,
        metadata=_json_option(metadata_json, "--metadata-json"),
        entrypoint_num_cpus=entrypoint_num_cpus,
        entrypoint_resources=_json_option(entrypoint_resources, "--entrypoint-resources"),
    )
    click.echo(f"Job '{job_id}' submitted successfully")
    if no_wait:
        click.echo(f"Follow it with: rayfield job logs --follow {job_id}")
        return
    _follow(client, job_id)
    status = client.get_job_status(job_id)
    click.echo(f"Job '{job_id}' {status.value}")
    if status.value != "SUCCEEDED":
        raise SystemExit(1)


@job.command()
@click.argument("job_id")
@_client_options
def status(client: JobSubmissionClient, job_id: str) -> None:
    """Print the state of JOB_ID (and the message saying why)."""
    info = client.get_job_info(job_id)
    click.echo(f"Status for job '{job_id}': {info.status.value}")
    if info.message:
        click.echo(f"Status message: {info.message}")


@job.command()
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="Follow the output until the job ends.")
@_client_options
def logs(client: JobSubmissionClient, job_id: str, follow: bool) -> None:
    """Print the output of JOB_ID."""
    if follow:
        _follow(client, job_id)
    else:
        click.echo(client.get_job_logs(job_id), nl=False)


@job.command()
@click.argument("job_id")
@click.option("--no-wait", is_flag=True, help="Return without waiting for it to stop.")
@_client_options
def stop(client: JobSubmissionClient, job_id: str, no_wait: bool) -> None:
    """Stop JOB_ID (SIGTERM to its processes, SIGKILL after 3 s)."""
    if not client.stop_job(job_id):
        click.echo(f"Job '{job_id}' had already ended: {client.get_job_status(job_id).value}")
        return
    while not no_wait and not client.get_job_status(job_id).is_terminal():
        time.sleep(WAIT_POLL_S)
    click.echo(
        f"Job '{job_id}' {'is stopping' if no_wait else client.get_job_status(job_id).value}"
    )


@job.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@_client_options
def list_(client: JobSubmissionClient, as_json: bool) -> None:
    """List the cluster's jobs."""
    jobs = client.list_jobs()
    if as_json:
        click.echo(json.dumps([j.to_dict() for j in jobs], indent=2))
        return
    for j in jobs:
        click.echo(f"{j.submission_id}\t{j.status.value}\t{j.entrypoint}")
    click.echo(f"{len(jobs)} jobs")


@job.command()
@click.argument("job_id")
@_client_options
def delete(client: JobSubmissionClient, job_id: str) -> None:
    """Forget JOB_ID, which must have ended."""
    client.delete_job(job_id)
    click.echo(f"Job '{job_id}' deleted")
