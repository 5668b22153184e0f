"""Job submission over the dashboard's HTTP API, with real processes: a head with a
dashboard, jobs submitted with ``JobSubmissionClient`` and ``rayfield job``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from clusterutil import rayfield_cmd, start_nodes, stop_in_background

from rayfield.job_submission import JobStatus, JobSubmissionClient, JobSubmissionError
from rayfield.testing import wait_for
from rayfield.util import cluster
from rayfield.util.state import StateClient

TASKS_SCRIPT = """
import os, sys, time
from pathlib import Path
import rayfield

context = rayfield.init()
print("dashboard", context.dashboard_url, flush=True)

@rayfield.remote
def square(x):
    return x * x

print("sum of squares", sum(rayfield.get([square.remote(i) for i in range(10)])), flush=True)
print("env", os.environ["GREETING"], "cwd has", sorted(os.listdir(".")), flush=True)
gate = Path(os.environ["GATE"])
while not gate.exists():
    time.sleep(0.05)
print("done", flush=True)
"""


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A head of 2 CPUs with a dashboard; yields (temp_dir, dashboard URL)."""
    temp_dir = tmp_path_factory.mktemp("rf")
    head_args = ("--include-dashboard", "--dashboard-port", "0")
    start_nodes(temp_dir, count=1, head_args=("--num-cpus", "2", *head_args))
    url = json.loads((temp_dir / "session_latest" / "dashboard.json").read_text())["url"]
    try:
        yield temp_dir, url
    finally:
        stop_in_background(temp_dir)


@pytest.fixture()
def client(head: tuple[Path, str]) -> JobSubmissionClient:
    return JobSubmissionClient(head[1], temp_dir=str(head[0]))


def _wait_status(client: JobSubmissionClient, job: str, *wanted: JobStatus) -> JobStatus:
    return wait_for(
        lambda: (s := client.get_job_status(job)) in wanted and s,
        60,
        f"job {job} to be {'/'.join(w.value for w in wanted)}",
        interval=0.2,
    )


def test_job_runs_tasks_and_its_logs_are_read_back_and_tailed(
    client: JobSubmissionClient, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "script.py").write_text(TASKS_SCRIPT)
    (src / "data.txt").write_text("x")
    (src / "blob.bin").write_bytes(os.urandom(300_000))  # past the dashboard's 64 KiB body cap
    gate = tmp_path / "gate"
    job = client.submit_job(
        "python script.py",
        runtime_env={"working_dir": str(src), "env_vars": {"GREETING": "hi", "GATE": str(gate)}},
        metadata={"owner": "test"},
    )
    seen = [client.get_job_status(job)]
    assert seen[0] in (JobStatus.PENDING, JobStatus.RUNNING)
    seen.append(_wait_status(client, job, JobStatus.RUNNING))
    wait_for(
        lambda: "sum of squares" in client.get_job_logs(job),
        20,
        "the job's first output",
        interval=0.2,
    )

    async def tail() -> str:
        chunks = []
        async for chunk in client.tail_job_logs(job):
            chunks.append(chunk)
            if "cwd has" in "".join(chunks):
                gate.touch()  # the job ends once the tail has seen its output
        return "".join(chunks)

    tailed = asyncio.run(asyncio.wait_for(tail(), 60))
    seen.append(_wait_status(client, job, JobStatus.SUCCEEDED))
    assert seen[-2:] == [JobStatus.RUNNING, JobStatus.SUCCEEDED]
    assert "sum of squares 285" in tailed and tailed.rstrip().endswith("done")
    assert "env hi cwd has ['blob.bin', 'data.txt', 'script.py']" in tailed
    assert f"dashboard {client.address}\n" in tailed  # init()'s context names the dashboard
    assert client.get_job_logs(job) == tailed
    info = client.get_job_info(job)
    assert info.driver_exit_code == 0 and info.metadata == {"owner": "test"}
    assert info.end_time is not None and info.start_time is not None
    assert info.start_time <= info.end_time
    assert job in [j.submission_id for j in client.list_jobs()]


def test_failing_job_is_failed_with_its_message(client: JobSubmissionClient) -> None:
    code = "import sys; sys.stderr.write('the input was bad\\n'); sys.exit(3)"
    job = client.submit_job(f"{sys.executable} -c {shlex.quote(code)}", submission_id="failing-1")
    assert job == "failing-1"
    _wait_status(client, job, JobStatus.FAILED)
    info = client.get_job_info(job)
    assert info.driver_exit_code == 3
    assert "exited with status 3" in info.message and "the input was bad" in info.message
    with pytest.raises(JobSubmissionError, match="exists already") as err:
        client.submit_job("true", submission_id="failing-1")
    assert err.value.status == 400


def test_stop_kills_the_process_group(client: JobSubmissionClient) -> None:
    code = (
        "import os, subprocess, time; c = subprocess.Popen(['sleep', '300']); "
        "print('pids', os.getpid(), c.pid, flush=True); time.sleep(300)"
    )
    job = client.submit_job(f"{sys.executable} -c {shlex.quote(code)}")
    logs = wait_for(
        lambda: re.search(r"pids (\d+) (\d+)", client.get_job_logs(job)),
        20,
        "the pids",
        interval=0.2,
    )
    pids = [int(p) for p in logs.groups()]
    assert all(psutil.pid_exists(p) for p in pids)
    assert client.stop_job(job) is True
    _wait_status(client, job, JobStatus.STOPPED)
    wait_for(
        lambda: not any(_alive(p) for p in pids), 20, "the job's processes to end", interval=0.2
    )
    assert client.stop_job(job) is False  # it has ended already


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_job_whose_supervisor_dies_fails(
    client: JobSubmissionClient, head: tuple[Path, str]
) -> None:
    job = client.submit_job("sleep 300")
    _wait_status(client, job, JobStatus.RUNNING)
    pid = client.get_job_info(job).driver_pid
    assert pid is not None and _alive(pid)
    with StateClient(_gcs_address(head[0]), temp_dir=head[0]) as state:

        def supervisors() -> list[dict[str, Any]]:
            return [a for a in state.actors() if a.get("name") == f"_rayfield_job_{job}"]

        # The record is ALIVE once the node placed the actor; its pid comes with the
        # worker's events, shipped a moment later.
        wait_for(lambda: (supervisors() or [{}])[0].get("pid"), 20, "the supervisor's pid")
        supervisor = supervisors()
    assert len(supervisor) == 1 and supervisor[0]["state"] == "ALIVE"
    assert supervisor[0]["pid"] != os.getpid()
    psutil.Process(supervisor[0]["pid"]).kill()
    _wait_status(client, job, JobStatus.FAILED)
    assert "supervisor died" in (client.get_job_info(job).message or "")
    wait_for(lambda: not _alive(pid), 20, "the orphaned entrypoint to be killed", interval=0.2)


def test_list_and_delete(client: JobSubmissionClient, head: tuple[Path, str]) -> None:
    running = client.submit_job("sleep 300", entrypoint_num_cpus=1)
    _wait_status(client, running, JobStatus.RUNNING)
    with StateClient(_gcs_address(head[0]), temp_dir=head[0]) as state:
        wait_for(
            lambda: state.node_records()[0]["resources_available"].get("CPU") == 1.0,
            20,
            "the entrypoint's CPU reserved",
            interval=0.2,
        )
    with pytest.raises(JobSubmissionError, match="stop it before deleting") as err:
        client.delete_job(running)
    assert err.value.status == 400
    client.stop_job(running)
    _wait_status(client, running, JobStatus.STOPPED)
    assert running in [j.submission_id for j in client.list_jobs()]
    assert client.delete_job(running) is True
    assert running not in [j.submission_id for j in client.list_jobs()]
    with pytest.raises(JobSubmissionError) as err:
        client.get_job_info(running)
    assert err.value.status == 404


def test_wrong_token_and_foreign_origin_are_refused(head: tuple[Path, str]) -> None:
    temp_dir, url = head
    bad = JobSubmissionClient(url, token="0" * 64)
    with pytest.raises(JobSubmissionError) as err:
        bad.list_jobs()
    assert err.value.status == 401
    token = (temp_dir / "session_latest" / "token").read_text().strip()
    request = urllib.request.Request(
        url + "api/job-submission/jobs",
        data=json.dumps({"entrypoint": "true"}).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Origin": "http://evil.example"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403


def test_cli_round_trip(
    head: tuple[Path, str], client: JobSubmissionClient, tmp_path: Path
) -> None:
    temp_dir, url = head
    where = ("--address", url, "--temp-dir", str(temp_dir))
    (tmp_path / "hello.py").write_text(textwrap.dedent("print('hello from the cli job')\n"))
    out = rayfield_cmd(
        "job",
        "submit",
        *where,
        "--working-dir",
        str(tmp_path),
        "--no-wait",
        "--submission-id",
        "cli-1",
        "--",
        "python",
        "hello.py",
    ).stdout
    assert "Job 'cli-1' submitted" in out
    _wait_status(client, "cli-1", JobStatus.SUCCEEDED)  # (each CLI run starts Python)
    status = rayfield_cmd("job", "status", "cli-1", *where).stdout
    assert "Status for job 'cli-1': SUCCEEDED" in status
    assert "hello from the cli job" in rayfield_cmd("job", "logs", "cli-1", *where).stdout
    waited = rayfield_cmd("job", "submit", *where, "--", "python", "-c", "print(6*7)", check=False)
    assert waited.returncode == 0 and "42" in waited.stdout and "SUCCEEDED" in waited.stdout
    rayfield_cmd("job", "delete", "cli-1", *where)
    missing = rayfield_cmd("job", "status", "cli-1", *where, check=False)
    assert missing.returncode == 1 and "404" in missing.stderr


def test_jobs_outlive_a_dashboard_restart(head: tuple[Path, str], tmp_path: Path) -> None:
    """(Last in the module: the head's dashboard has another URL afterwards.)"""
    temp_dir, url = head
    client = JobSubmissionClient(url, temp_dir=str(temp_dir))
    gate = tmp_path / "gate"
    code = (
        "import os, time; print('waiting', flush=True)\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
        "print('through', flush=True)"
    )
    job = client.submit_job(f"{sys.executable} -c {shlex.quote(code)}")
    wait_for(lambda: "waiting" in client.get_job_logs(job), 20, "the job to run", interval=0.2)
    session = (temp_dir / "session_latest").resolve()
    pid = json.loads((session / "dashboard.json").read_text())["pid"]
    psutil.Process(pid).terminate()
    psutil.Process(pid).wait(30)
    new_url = cluster.start_dashboard(
        session, _gcs_address(temp_dir), "127.0.0.1", 0, cluster.NodeOptions(temp_dir=temp_dir)
    )
    again = JobSubmissionClient(new_url, temp_dir=str(temp_dir))
    assert again.get_job_status(job) is JobStatus.RUNNING  # the record is in the GCS
    gate.touch()
    _wait_status(again, job, JobStatus.SUCCEEDED)
    assert again.get_job_logs(job) == "waiting\nthrough\n"
    assert job in [j.submission_id for j in again.list_jobs()]
    assert again.delete_job(job) is True


def _gcs_address(temp_dir: Path) -> str:
    return str(
        json.loads((temp_dir / "session_latest" / "cluster.json").read_text())["gcs_address"]
    )
