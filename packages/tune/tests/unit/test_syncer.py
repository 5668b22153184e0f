"""Syncers: command templates, functions, file:// and s3:// (boto3 against moto)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rayfield import tune
from rayfield.tune.syncer import (
    CommandSyncer,
    FileSyncer,
    FunctionSyncer,
    S3Syncer,
    SyncConfig,
    get_syncer,
)


def make_tree(root: Path) -> None:
    (root / "trial_1" / "checkpoint_000001").mkdir(parents=True)
    (root / "experiment_state.json").write_text('{"trials": []}')
    (root / "trial_1" / "result.json").write_text('{"loss": 1}\n')
    (root / "trial_1" / "checkpoint_000001" / "state.pkl").write_bytes(b"\x00\x01")


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_file_syncer_copies_up_incrementally_and_down(tmp_path):
    local, remote = tmp_path / "exp", tmp_path / "bucket" / "exp"
    make_tree(local)
    syncer = FileSyncer()
    syncer.sync_up(str(local), f"file://{remote}")
    assert tree(remote) == tree(local)
    (local / ".tune_server.json").write_text('{"token": "secret"}')  # never uploaded
    syncer.sync_up(str(local), f"file://{remote}")
    assert not (remote / ".tune_server.json").exists()
    (local / ".tune_server.json").unlink()
    # Only changed files are copied again: a file changed remotely but not locally stays.
    (remote / "trial_1" / "result.json").write_text("remote edit")
    (local / "trial_1" / "progress.csv").write_text("loss\n1\n")
    syncer.sync_up(str(local), f"file://{remote}")
    assert (remote / "trial_1" / "progress.csv").read_text() == "loss\n1\n"
    assert (remote / "trial_1" / "result.json").read_text() == "remote edit"
    fresh = tmp_path / "fresh"
    syncer.sync_down(f"file://{remote}", str(fresh))
    assert tree(fresh) == tree(remote)
    with pytest.raises(tune.TuneError, match="nothing to download"):
        syncer.sync_down(f"file://{tmp_path / 'missing'}", str(fresh))


@pytest.mark.parametrize(
    "template",
    [
        "mkdir -p {target} && cp -R {source}/. {target}",
        "mkdir -p {remote_dir} && cp -R {local_dir}/. {remote_dir}",  # the classic names
    ],
)
def test_command_syncer_runs_the_template_both_ways(tmp_path, template):
    local, remote = tmp_path / "my exp", tmp_path / "remote dir"  # spaces are quoted
    make_tree(local)
    syncer = get_syncer("gs://bucket/x", template)
    assert isinstance(syncer, CommandSyncer)
    syncer.sync_up(str(local), str(remote))
    assert tree(remote) == tree(local)
    back = tmp_path / "back"
    syncer.sync_down(str(remote), str(back))
    assert tree(back) == tree(local)


def test_command_syncer_errors_say_what_to_fix(tmp_path):
    with pytest.raises(tune.TuneError, match=r"must contain \{source\} and \{target\}"):
        CommandSyncer("aws s3 sync here there")
    failing = CommandSyncer("ls {source}/nope {target}")
    with pytest.raises(tune.TuneError, match="sync command failed"):
        failing.sync_up(str(tmp_path), str(tmp_path / "x"))


def test_function_syncer_gets_source_and_target(tmp_path):
    calls: list[tuple[str, str]] = []
    syncer = get_syncer("gs://b/x", tune.function(lambda s, t: calls.append((s, t))))
    assert isinstance(syncer, FunctionSyncer)
    syncer.sync_up("/local", "gs://b/x")
    syncer.sync_down("gs://b/x", str(tmp_path / "down"))
    assert calls == [("/local", "gs://b/x"), ("gs://b/x", str(tmp_path / "down"))]

    def broken(source: str, target: str) -> None:
        raise OSError("disk full")

    with pytest.raises(tune.TuneError, match="disk full"):
        FunctionSyncer(broken).sync_up("/a", "/b")


def test_get_syncer_picks_by_scheme_and_refuses_unknown_ones():
    assert isinstance(get_syncer("file:///tmp/x"), FileSyncer)
    assert isinstance(get_syncer("file:///tmp/x", SyncConfig().syncer), FileSyncer)
    with pytest.raises(tune.TuneError, match="no built-in syncer for 'gs://b'"):
        get_syncer("gs://b")
    with pytest.raises(tune.TuneError, match="sync_to_cloud must be"):
        get_syncer("s3://b", 42)
    with pytest.raises(tune.TuneError, match="set upload_dir too"):
        tune.Experiment("e", lambda config: None, sync_function="cp {source} {target}")


def test_s3_syncer_uploads_changed_files_and_downloads_them(tmp_path, monkeypatch):
    import boto3
    import moto

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with moto.mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="results")
        local = tmp_path / "exp"
        make_tree(local)
        syncer = S3Syncer()
        syncer.sync_up(str(local), "s3://results/runs/exp")
        keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket="results")["Contents"])
        assert keys == [
            "runs/exp/experiment_state.json",
            "runs/exp/trial_1/checkpoint_000001/state.pkl",
            "runs/exp/trial_1/result.json",
        ]
        uploads: list[str] = []
        real = syncer.client.upload_file
        monkeypatch.setattr(
            syncer.client, "upload_file", lambda p, b, k: (uploads.append(k), real(p, b, k))
        )
        (local / "trial_1" / "result.json").write_text('{"loss": 1}\n{"loss": 0.5}\n')
        syncer.sync_up(str(local), "s3://results/runs/exp")
        assert uploads == ["runs/exp/trial_1/result.json"]  # only the changed file
        down = tmp_path / "down"
        syncer.sync_down("s3://results/runs/exp", str(down))
        assert tree(down) == tree(local)
        with pytest.raises(tune.TuneError, match="no objects under"):
            syncer.sync_down("s3://results/other", str(tmp_path / "none"))
    assert os.path.isdir(down)
