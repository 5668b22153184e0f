"""Job submission without processes: the job state machine, records, packages, checks."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from rayfield.job_submission import JobDetails, JobInfo, JobStatus, PackageTooLargeError, package
from rayfield.job_submission.manager import JobError, check_runtime_env
from rayfield.job_submission.models import IllegalTransition, check_submission_id, transition


def _job(**kw: object) -> JobDetails:
    return JobDetails(submission_id="j1", entrypoint="python a.py", start_time=100, **kw)  # type: ignore[arg-type]


def test_terminal_states() -> None:
    assert {s for s in JobStatus if s.is_terminal()} == {
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.STOPPED,
    }
    assert str(JobStatus.RUNNING) == "RUNNING" and JobInfo is JobDetails


def test_transitions_follow_the_state_machine() -> None:
    running = transition(_job(), JobStatus.RUNNING, 200, message="runs")
    assert (running.status, running.end_time, running.message) == (JobStatus.RUNNING, None, "runs")
    done = transition(running, JobStatus.FAILED, 300, message="exit 2", exit_code=2)
    assert (done.end_time, done.driver_exit_code, done.start_time) == (300, 2, 100)
    stopped = transition(_job(), JobStatus.STOPPED, 150)  # before it ever ran
    assert stopped.status is JobStatus.STOPPED and stopped.end_time == 150
    for terminal in (done, stopped):
        for status in JobStatus:
            with pytest.raises(IllegalTransition, match="cannot become"):
                transition(terminal, status, 400)
    with pytest.raises(IllegalTransition):
        transition(running, JobStatus.PENDING, 400)
    with pytest.raises(IllegalTransition):
        transition(running, JobStatus.RUNNING, 400)


def test_record_round_trips_through_json() -> None:
    job = _job(metadata={"a": "b"}, runtime_env={"env_vars": {"X": "1"}}, entrypoint_num_cpus=1.5)
    again = JobDetails.from_json(job.to_json())
    assert again == job and again.job_id == "j1"
    assert JobDetails.from_dict({**job.to_dict(), "future_field": 1}) == job
    with pytest.raises(ValueError, match="not a job record"):
        JobDetails.from_dict({"status": "RUNNING"})
    with pytest.raises(ValueError):
        JobDetails.from_dict({**job.to_dict(), "status": "EXPLODED"})


@pytest.mark.parametrize("bad", ["", "a b", "../x", "..", ".", "-rf", "x" * 129, "é"])
def test_bad_submission_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="submission id"):
        check_submission_id(bad)
    assert check_submission_id("raysubmit_1.a-b") == "raysubmit_1.a-b"


def test_package_is_deterministic_and_unpacks(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "main.py").write_text("print(1)")
    (src / "pkg" / "mod.py").write_text("X = 2")
    (src / "pkg" / "big.bin").write_bytes(b"0" * 10)
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "main.pyc").write_bytes(b"x")
    first = package.zip_directory(src, excludes=["*.bin"])
    assert first == package.zip_directory(src, excludes=["*.bin"])  # same files, same bytes
    name = package.package_name(first)
    assert package.is_package_uri(package.PACKAGE_SCHEME + name)
    assert not package.is_package_uri("pkg://../../etc/passwd")
    names = zipfile.ZipFile(io.BytesIO(first)).namelist()
    assert sorted(names) == ["main.py", "pkg/mod.py"]
    out = package.unpack(first, tmp_path / "out")
    assert (out / "pkg" / "mod.py").read_text() == "X = 2"
    (src / "main.py").write_text("print(2)")
    assert package.package_name(package.zip_directory(src)) != name


def test_package_limits_and_bad_archives(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"0" * 2000)
    with pytest.raises(PackageTooLargeError, match="more than"):
        package.zip_directory(tmp_path, max_bytes=1000)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        package.zip_directory(tmp_path / "missing")
    with pytest.raises(ValueError, match="not a zip"):
        package.unpack(b"nope", tmp_path / "o")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("../escape.txt", "x")
    with pytest.raises(ValueError, match="outside"):
        package.unpack(buffer.getvalue(), tmp_path / "o2")
    with pytest.raises(ValueError, match="not a package name"):
        package.check_name("../token")


def test_runtime_env_checks() -> None:
    assert check_runtime_env(None) == {}
    assert check_runtime_env({"env_vars": {"A": "1"}}) == {"env_vars": {"A": "1"}}
    with pytest.raises(JobError, match="JSON object"):
        check_runtime_env(["x"])
    with pytest.raises(JobError, match="env_vars"):
        check_runtime_env({"env_vars": {"A": 1}})
    with pytest.raises(JobError, match="not an uploaded package"):
        check_runtime_env({"working_dir": "/home/me/project"})
