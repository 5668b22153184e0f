"""The REST server and TuneClient against a running experiment."""

from __future__ import annotations

import os
import stat
import threading
import time

import pytest

from rayfield import tune
from rayfield.testing import wait_for
from rayfield.tune.web_server import TOKEN_FILE, TuneClient

pytestmark = pytest.mark.usefixtures("cluster")


def long_trial(config):
    for i in range(600):
        time.sleep(0.05)
        tune.report(i=i, a=config["a"])


def test_client_lists_stops_and_adds_trials(tmp_path):
    tune.register_trainable("long_trial", long_trial)
    exp_dir = tmp_path / "served"
    outcome: dict = {}

    def run():
        outcome["analysis"] = tune.run(
            "long_trial",
            name="served",
            config={"a": 1},
            local_dir=str(tmp_path),
            with_server=True,
            server_port=0,
            verbose=0,
        )

    driver = threading.Thread(target=run)
    driver.start()
    token_file = exp_dir / TOKEN_FILE
    wait_for(token_file.exists, 60, "the server's token file")
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    client = TuneClient.from_experiment_dir(str(exp_dir))
    with pytest.raises(tune.TuneError, match="403 wrong token"):
        TuneClient(client.tune_address, client.port_forward, token="wrong").get_all_trials()
    with pytest.raises(tune.TuneError, match="401"):  # no token at all
        TuneClient(client.tune_address, client.port_forward, token="").get_all_trials()

    def running() -> list[dict]:
        trials = client.get_all_trials()
        return trials if trials and trials[0]["status"] == "RUNNING" else []

    [first] = wait_for(running, 60, "the first trial RUNNING in the server's list")
    assert first["config"] == {"a": 1}
    [added] = client.add_trial("more", {"run": "long_trial", "config": {"a": 2}, "stop": {"i": 3}})
    with pytest.raises(tune.TuneError, match="404"):
        client.get_trial("nope")
    with pytest.raises(tune.TuneError, match="400"):
        client.add_trial("bad", {"config": {}})
    client.stop_trial(first["id"])
    driver.join(timeout=120)
    assert not driver.is_alive()
    trials = {t.trial_id: t for t in outcome["analysis"]}
    assert trials[first["id"]].status == "TERMINATED"
    assert trials[first["id"]].last_result.get("i", 0) < 500  # stopped early
    assert trials[added].last_result["i"] == 3 and trials[added].config == {"a": 2}
    assert not token_file.exists()
