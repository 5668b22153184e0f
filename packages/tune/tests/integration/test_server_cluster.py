"""On a driver connected to a cluster, the Tune server takes the cluster's token too."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import rayfield
from rayfield import tune
from rayfield.tune.trial import Trial
from rayfield.tune.web_server import TOKEN_FILE, TuneClient, TuneServer, cluster_token
from rayfield.util import cluster as cluster_util

CLI = [sys.executable, "-m", "rayfield.cli.main"]


class OneTrial:
    trial = Trial("f", {"a": 1}, trial_id="t1")

    def get_trials(self) -> list[Trial]:
        return [self.trial]

    def get_trial(self, trial_id: str) -> Trial | None:
        return self.trial if trial_id == "t1" else None


@pytest.fixture
def head(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A one-node cluster started with `rayfield start --head`; this driver connected."""
    temp_dir = tmp_path / "sessions"
    args = ["--port", "0", "--num-cpus", "1", "--temp-dir", str(temp_dir)]
    subprocess.run([*CLI, "start", "--head", *args], check=True, capture_output=True, timeout=120)
    try:
        address = json.loads((temp_dir / "session_latest" / "cluster.json").read_text())
        rayfield.init(address=address["gcs_address"], temp_dir=str(temp_dir))
        try:
            yield address["gcs_address"], temp_dir
        finally:
            rayfield.shutdown()
    finally:
        stop = [*CLI, "stop", "--temp-dir", str(temp_dir)]
        subprocess.run(stop, capture_output=True, timeout=120)


def test_the_server_requires_the_cluster_token(head, tmp_path, monkeypatch):
    address, temp_dir = head
    monkeypatch.delenv("RAYFIELD_TOKEN", raising=False)
    token = cluster_util.find_token(address, temp_dir)
    assert cluster_token() == token
    server = TuneServer(OneTrial(), str(tmp_path / "exp"), 0)
    try:
        assert server.uses_cluster_token and server.token != token
        info = json.loads((tmp_path / "exp" / TOKEN_FILE).read_text())
        assert info["token"] == server.token  # the server's own: the cluster's is not copied
        with pytest.raises(tune.TuneError, match="401"):
            TuneClient(info["address"], token="").get_all_trials()
        with pytest.raises(tune.TuneError, match="403"):
            TuneClient(info["address"], token="x" * len(token)).get_all_trials()
        # A client given the cluster's token, and one that read the address file.
        assert TuneClient(info["address"], token=token).get_trial("t1")["config"] == {"a": 1}
        client = TuneClient.from_experiment_dir(str(tmp_path / "exp"))
        assert client.get_trial("t1")["config"] == {"a": 1}
    finally:
        server.shutdown()
