"""upload_dir: the experiment is copied to a file:// target while it runs and at its end,
and resume=True with an empty local directory continues from that copy."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rayfield import tune
from rayfield.tune.state import STATE_FILE

pytestmark = pytest.mark.usefixtures("cluster")


def quadratic(config):
    for i in range(3):
        tune.report(loss=(config["x"] - 1) ** 2 + 1.0 / (i + 1))


def test_upload_dir_keeps_a_copy_and_resume_restores_from_it(tmp_path):
    local, bucket = tmp_path / "local", tmp_path / "bucket"
    kw = dict(
        name="synced",
        config={"x": tune.grid_search([0.0, 1.0, 2.0])},
        local_dir=str(local),
        verbose=0,
    )
    analysis = tune.run(
        quadratic,
        sync_config=tune.SyncConfig(upload_dir=f"file://{bucket}", sync_period=0),
        **kw,
    )
    remote = bucket / "synced"
    assert (remote / STATE_FILE).exists()
    for trial in analysis:
        copied = remote / Path(trial.logdir).name / "result.json"
        lines = [json.loads(line) for line in copied.read_text().splitlines()]
        assert [r["training_iteration"] for r in lines] == [1, 2, 3]
    best = analysis.get_best_config("loss", "min")
    assert best == {"x": 1.0}

    # The local copy is lost; resume=True finds nothing here and downloads the cloud copy.
    shutil.rmtree(local)
    started: list[str] = []

    class Starts(tune.Callback):
        def on_trial_start(self, trial):
            started.append(trial.trial_id)

    resumed = tune.run(
        quadratic,
        upload_dir=f"file://{bucket}",
        resume=True,
        callbacks=[Starts()],
        **kw,
    )
    assert started == []  # every trial had finished: none runs again
    assert sorted(t.trial_id for t in resumed) == sorted(t.trial_id for t in analysis)
    assert resumed.get_best_config("loss", "min") == best
    assert all(t.status == "TERMINATED" for t in resumed)


def test_sync_to_cloud_takes_a_command_template(tmp_path):
    target = tmp_path / "remote"
    tune.run(
        quadratic,
        name="by-command",
        config={"x": 1.0},
        local_dir=str(tmp_path / "local"),
        upload_dir=str(target),
        sync_to_cloud="mkdir -p {target} && cp -R {source}/. {target}",
        verbose=0,
    )
    assert (target / "by-command" / STATE_FILE).exists()
    [trial_dir] = [p for p in (target / "by-command").iterdir() if p.is_dir()]
    assert (trial_dir / "result.json").read_text().count("\n") == 3


def test_tuner_run_config_sync_config(tmp_path):
    copies: list[tuple[str, str]] = []

    def copy(source: str, target: str) -> None:
        copies.append((source, target))
        assert os.path.exists(os.path.join(source, STATE_FILE))

    sync = tune.SyncConfig(upload_dir="mem://bucket", syncer=copy)
    grid = tune.Tuner(
        quadratic,
        param_space={"x": 2.0},
        run_config=tune.RunConfig(
            name="tuned", storage_path=str(tmp_path / "local"), sync_config=sync, verbose=0
        ),
    ).fit()
    assert grid.get_best_result("loss", "min").metrics["loss"] == pytest.approx(4 / 3)
    assert copies[-1] == (str(tmp_path / "local" / "tuned"), "mem://bucket/tuned")


@pytest.fixture
def s3(monkeypatch):
    """A moto S3 with a bucket ``results`` (this process only: the driver uploads)."""
    boto3 = pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with moto.mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="results")
        yield "s3://results/runs"


@pytest.mark.parametrize("scheme", ["s3", "file"])
def test_tuner_restore_from_the_cloud_copy_into_another_dir(tmp_path, scheme, request):
    upload_dir = request.getfixturevalue("s3") if scheme == "s3" else f"file://{tmp_path}/bucket"
    first_dir = tmp_path / "first"
    grid = tune.Tuner(
        quadratic,
        param_space={"x": tune.grid_search([0.0, 1.0])},
        run_config=tune.RunConfig(
            name="cloudy",
            storage_path=str(first_dir),
            sync_config=tune.SyncConfig(upload_dir=upload_dir),
            verbose=0,
        ),
    ).fit()
    first = {r.config["x"]: r.metrics["loss"] for r in grid}
    shutil.rmtree(first_dir)  # the machine is gone; the cloud copy stays
    with pytest.raises(tune.TuneError, match="not <upload_dir>/<experiment name>"):
        tune.Tuner.restore("s3://", quadratic)

    started: list[str] = []

    class Starts(tune.Callback):
        def on_trial_start(self, trial):
            started.append(trial.trial_id)

    second_dir = tmp_path / "second"
    tuner = tune.Tuner.restore(
        f"{upload_dir}/cloudy",
        quadratic,
        run_config=tune.RunConfig(storage_path=str(second_dir), callbacks=[Starts()], verbose=0),
    )
    assert (second_dir / "cloudy" / STATE_FILE).exists()  # downloaded there
    resumed = tuner.fit()
    assert started == []  # both trials had finished: none runs again
    assert {r.config["x"]: r.metrics["loss"] for r in resumed} == first
    for result in resumed:  # the trials live in the new directory now
        assert Path(result.path).parent == second_dir / "cloudy"
        assert (Path(result.path) / "result.json").read_text().count("\n") == 3
    assert not first_dir.exists()
