"""PolicyServerInput as the trainer's input, over real HTTP: remote- and local-inference
PolicyClients drive the episodes PPO learns CartPole from; the local client's policy
copy and its weight refresh; bad local-inference requests get 4xx."""

from __future__ import annotations

import functools
import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rayfield.rllib.agents.registry import get_trainer_class
from rayfield.rllib.env.policy_client import PolicyClient, PolicyServerError
from rayfield.rllib.env.policy_server_input import PolicyServerInput
from rayfield.rllib.offline.columns import encode_batch
from rayfield.rllib.policy.sample_batch import SampleBatch


def served_trainer(config: dict[str, Any], algo: str = "PPO") -> Any:
    """A trainer whose input is a PolicyServerInput on a free port of 127.0.0.1."""
    full = {
        **config,
        "input": lambda ioctx: PolicyServerInput(ioctx, "127.0.0.1", 0),
        "num_workers": 0,
        "off_policy_estimation_methods": {},
    }
    return get_trainer_class(algo)(env="CartPole-v1", config=full)


def server_of(trainer: Any) -> PolicyServerInput:
    reader = trainer.workers.local_worker().input_reader
    assert isinstance(reader, PolicyServerInput)
    return reader


@pytest.fixture
def ppo_served(ppo_served_cartpole_config: dict[str, Any]) -> Iterator[Any]:
    trainer = served_trainer(ppo_served_cartpole_config)
    try:
        yield trainer
    finally:
        trainer.stop()


def weights_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_a_local_client_builds_the_servers_policy_and_refreshes_its_weights(
    ppo_served: Any,
) -> None:
    server = server_of(ppo_served)
    client = PolicyClient(server.address, inference_mode="local", update_interval=3600)
    local = client.local_inference
    assert local is not None
    try:
        server_policy = ppo_served.workers.local_worker().policy
        assert type(local.worker.policy) is type(server_policy)
        assert local.worker.config["sgd_minibatch_size"] == 256  # the server's config
        assert weights_equal(local.worker.policy.get_weights(), server_policy.get_weights())
        # the trainer's weights change; the client sees them at the next call after
        # update_interval has passed (here: its last update moved an hour back)
        changed = {k: v + 1.0 for k, v in server_policy.get_weights().items()}
        ppo_served.set_weights({"default_policy": changed})
        eid = client.start_episode()
        assert not weights_equal(local.worker.policy.get_weights(), changed)
        local.last_update -= 3600
        action = client.get_action(eid, np.zeros(4, np.float32))
        assert action in (0, 1)
        assert weights_equal(local.worker.policy.get_weights(), changed)
        # while the trainer learns (its policy locked) the client gets the weights of the
        # trainer's last sample, at once
        learning, done = threading.Event(), threading.Event()

        def learn() -> None:
            with server_policy.lock:
                learning.set()
                done.wait(30)

        learner = threading.Thread(target=learn)
        learner.start()
        try:
            assert learning.wait(10)
            updating = threading.Thread(target=client.update_policy)
            updating.start()
            updating.join(10)
            assert not updating.is_alive()
        finally:
            done.set()
            learner.join(10)
        synced = server_of(ppo_served).inference_policy.get_weights()
        assert weights_equal(local.worker.policy.get_weights(), synced)
        assert not weights_equal(synced, changed)
    finally:
        client.close()


def test_local_inference_needs_a_policy_server_input_and_bad_reports_get_400(
    ppo_served: Any,
) -> None:
    from rayfield.rllib.env.external_env import ExternalEnv
    from rayfield.rllib.env.policy_server import PolicyServer

    classic = PolicyServer(
        ExternalEnv(gym.spaces.Discrete(2), gym.spaces.Discrete(2)), "127.0.0.1", 0
    )
    serving = threading.Thread(target=classic.serve_forever, daemon=True)
    serving.start()
    try:
        with pytest.raises(PolicyServerError) as info:
            PolicyClient(classic.address, inference_mode="local")
        assert info.value.status == 400 and "GET_WORKER_ARGS" in info.value.message
    finally:
        classic.shutdown()
        classic.server_close()
        serving.join(5)
    server = server_of(ppo_served)
    good = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}

    def post(request: dict[str, Any], headers: dict[str, str] = good) -> tuple[int, Any]:
        host, port = server.server.server_address[:2]
        conn = http.client.HTTPConnection(str(host), port, timeout=10)
        try:
            conn.request("POST", "/", json.dumps(request).encode(), headers)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    assert post({"command": "GET_WEIGHTS"}, {"Content-Type": "application/json"})[0] == 401
    status, reply = post({"command": "REPORT_SAMPLES", "samples": [1, 2]})
    assert status == 400 and "expected a JSON object" in reply["error"]
    rows = SampleBatch({"obs": np.zeros((3, 4), np.float32), "actions": np.zeros(3, np.int64)})
    status, reply = post({"command": "REPORT_SAMPLES", "samples": encode_batch(rows)})
    assert status == 400 and "no column rewards" in reply["error"]
    wrong = SampleBatch(
        {
            c: np.zeros((3, 2) if c in ("obs", "new_obs") else 3, np.float32)
            for c in ("obs", "new_obs", "actions", "rewards", "dones")
        }
    )
    status, reply = post({"command": "REPORT_SAMPLES", "samples": encode_batch(wrong)})
    assert status == 400 and "obs are [2]" in reply["error"]
    status, reply = post({"command": "REPORT_SAMPLES", "samples": {}, "metrics": [[1, "x"]]})
    assert status == 400 and "metrics" in reply["error"]
    # still serving: the policy spec is JSON data (a class path, spaces, the config)
    status, reply = post({"command": "GET_WORKER_ARGS"})
    assert status == 200 and reply["policy_class"].endswith("PPOTorchPolicy")
    assert reply["observation_space"]["type"] == "Box" and "input" not in reply["config"]


@pytest.mark.parametrize(
    ("target", "budget"),
    [(50, 12_000), pytest.param(150, 100_000, marks=pytest.mark.slow)],
)
def test_ppo_learns_cartpole_from_remote_and_local_clients(
    target: float, budget: int, ppo_served: Any, train_to: Any, play_cartpole: Any
) -> None:
    play = play_cartpole
    """Two applications ask the server for actions, two compute them with their policy
    copy (refreshed every 0.5 s); PPO trains on all four until the mean return reaches
    ``target`` (random play: about 22)."""
    address = server_of(ppo_served).address
    clients = [
        PolicyClient(address, inference_mode=mode, update_interval=0.5)
        for mode in ("remote", "remote", "local", "local")
    ]
    apps = [functools.partial(play, c, seed=1000 * i) for i, c in enumerate(clients)]
    train_to(ppo_served, target, budget, apps)
