"""The REST server's token: 401 without one, 403 with a wrong one; the client sends only
the token it is given or finds in the experiment's private address file, never the
cluster's of its own accord."""

from __future__ import annotations

import json
import os
import stat

import pytest

from rayfield import tune
from rayfield.exceptions import UnsafeFileError
from rayfield.tune.trial import Trial
from rayfield.tune.web_server import TOKEN_FILE, TuneClient, TuneServer


class FakeRunner:
    def __init__(self) -> None:
        self.trial = Trial("f", {"a": 1}, trial_id="t1")

    def get_trials(self) -> list[Trial]:
        return [self.trial]

    def get_trial(self, trial_id: str) -> Trial | None:
        return self.trial if trial_id == "t1" else None


@pytest.fixture
def served(tmp_path):
    server = TuneServer(FakeRunner(), str(tmp_path), 0, token="the-cluster-token")
    yield server
    server.shutdown()


def test_requests_without_or_with_a_wrong_token_are_refused(served):
    address = f"127.0.0.1:{served.port}"
    with pytest.raises(tune.TuneError, match="401 send 'Authorization: Bearer"):
        TuneClient(address, token="").get_all_trials()
    with pytest.raises(tune.TuneError, match="403 wrong token"):
        TuneClient(address, token="the-cluster-tokeN").get_all_trials()
    [info] = TuneClient(address, token="the-cluster-token").get_all_trials()
    assert info["id"] == "t1" and info["config"] == {"a": 1}


def test_the_client_sends_no_token_it_was_not_given(served, monkeypatch):
    address = f"127.0.0.1:{served.port}"
    monkeypatch.setenv("RAYFIELD_TOKEN", "the-cluster-token")  # found, but never sent
    with pytest.raises(tune.TuneError, match=r"401 .*was given no token.*from_experiment_dir"):
        TuneClient(address).get_trial("t1")
    assert TuneClient(address, token="the-cluster-token").get_trial("t1")["status"] == "PENDING"


def test_the_address_file_holds_the_servers_own_token_not_the_one_given(served, tmp_path):
    info = json.loads((tmp_path / TOKEN_FILE).read_text())
    assert info == {"address": f"127.0.0.1:{served.port}", "token": served.token}
    assert info["token"] != "the-cluster-token" and len(info["token"]) == 64
    assert stat.S_IMODE(os.stat(tmp_path / TOKEN_FILE).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o700
    assert TuneClient.from_experiment_dir(str(tmp_path)).get_trial("t1")["id"] == "t1"


def test_an_address_file_others_can_write_is_refused(served, tmp_path):
    os.chmod(tmp_path / TOKEN_FILE, 0o622)
    with pytest.raises(UnsafeFileError, match="group or others can write"):
        TuneClient.from_experiment_dir(str(tmp_path))
    with pytest.raises(tune.TuneError, match="no Tune server runs"):
        TuneClient.from_experiment_dir(str(tmp_path / "elsewhere"))


def test_without_a_cluster_the_token_is_random_and_kept_in_the_experiment(tmp_path):
    server = TuneServer(FakeRunner(), str(tmp_path), 0)  # rayfield is not initialized here
    try:
        assert not server.uses_cluster_token and len(server.token) == 64
        path = tmp_path / TOKEN_FILE
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert json.loads(path.read_text())["token"] == server.token
        client = TuneClient.from_experiment_dir(str(tmp_path))
        assert client.get_trial("t1")["id"] == "t1"
    finally:
        server.shutdown()
