"""The programs `bench_serving.py` runs, one process each: a policy server that trains PPO
from what its clients send, and a client that plays CartPole through it.

    python _bench_serving_peers.py server rayfield|rllib PORT [MAX_QUEUED_BATCHES]
    python _bench_serving_peers.py client rayfield|rllib PORT SECONDS SEED [remote|local]

Both servers are written as the libraries' CartPole server examples are: the trainer's
input is a ``PolicyServerInput`` (RLlib 2.38's on its old API stack, where it lives), no rollout
workers, no off-policy estimation, the same PPO setting (256x256 network, 200-step
fragments, 1000-step train batches, 128-row minibatches). A server prints ``READY`` once it
listens and then trains until it is killed. rayfield's ``PolicyServerInput`` holds at most
``max_queued_batches`` batches for the trainer (16 by default; then its clients wait for the
trainer), RLlib's queue has no bound: MAX_QUEUED_BATCHES sets rayfield's.

A client plays CartPole episodes with ``inference_mode="remote"`` (default: ``get_action``
asks the server, rewards go back with ``log_returns``) or ``"local"`` (a policy copy in
the client computes the actions; the client posts its sampled batches and fetches the
weights every 10 s), as the clients of the examples do: RLlib's
``PolicyClient("http://localhost:PORT")`` (a new connection per request, pickled bodies),
rayfield's ``PolicyClient("localhost:PORT")`` (one kept-alive connection, msgpack). It
plays 50 steps to warm up and prints ``READY``; then, for each line of stdin (a start
time, a Unix time), it waits for that time and plays on for SECONDS, counting the
``get_action`` calls and all calls of the client's API started in that window and the
CPU time the process spent (``cpu_s``, all its threads), and prints them as JSON (its
episode goes on across windows); an empty line or ``quit`` ends it.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

HIDDEN = [256, 256]
FRAGMENT = 200
TRAIN_BATCH = 1000
MINIBATCH = 128


def rayfield_server(port: int, max_queued_batches: int | None = None) -> None:
    from rayfield.rllib.agents.ppo import PPOTrainer
    from rayfield.rllib.env.policy_server_input import PolicyServerInput

    queue = {} if max_queued_batches is None else {"max_queued_batches": max_queued_batches}
    config = {
        "input": lambda ioctx: PolicyServerInput(ioctx, "localhost", port, **queue),
        "num_workers": 0,
        "input_evaluation": [],
        "rollout_fragment_length": FRAGMENT,
        "train_batch_size": TRAIN_BATCH,
        "sgd_minibatch_size": MINIBATCH,
        "model": {"fcnet_hiddens": HIDDEN},
    }
    trainer = PPOTrainer(env="CartPole-v1", config=config)  # the env gives the spaces
    print("READY", flush=True)
    while True:
        trainer.train()


def rllib_server(port: int) -> None:
    import gymnasium as gym
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.policy_server_input import PolicyServerInput

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

    def _input(ioctx: Any) -> Any:
        return PolicyServerInput(ioctx, "localhost", port)

    config = (
        PPOConfig()
        .api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)
        .environment(
            env=None,
            observation_space=gym.spaces.Box(float("-inf"), float("inf"), (4,)),
            action_space=gym.spaces.Discrete(2),
        )
        .framework("torch")
        .offline_data(input_=_input)
        # ExternalEnv (what the server's inference worker samples) needs the classic sampler
        .env_runners(num_env_runners=0, rollout_fragment_length=FRAGMENT, enable_connectors=False)
        .training(
            train_batch_size=TRAIN_BATCH, minibatch_size=MINIBATCH, model={"fcnet_hiddens": HIDDEN}
        )
        .evaluation(off_policy_estimation_methods={})
    )
    algo = config.build()
    print("READY", flush=True)
    while True:
        algo.train()


def client(library: str, port: int, seconds: float, seed: int, mode: str = "remote") -> None:
    import gymnasium as gym

    if library == "rayfield":
        from rayfield.rllib.env.policy_client import PolicyClient

        policy_client: Any = PolicyClient(
            f"localhost:{port}", inference_mode=mode, update_interval=10.0
        )
    else:
        from ray.rllib.env.policy_client import PolicyClient as RLlibClient

        policy_client = RLlibClient(
            f"http://localhost:{port}", inference_mode=mode, update_interval=10.0
        )
    env = gym.make("CartPole-v1")
    window = [float("inf"), float("inf")]  # [start, end) of the counted calls
    counts = {"get_action": 0, "requests": 0}
    state: dict[str, Any] = {"eid": None, "obs": None, "seed": seed}

    def call(kind: str, fn: Any, *args: Any) -> Any:
        t = time.time()
        out = fn(*args)
        if window[0] <= t < window[1]:
            counts["requests"] += 1
            counts["get_action"] += kind == "get_action"
        return out

    def step() -> None:
        """One env step of the running episode (starting or ending episodes as needed)."""
        if state["eid"] is None:
            state["eid"] = call("start", policy_client.start_episode)
            state["obs"], _ = env.reset(seed=state["seed"])
            state["seed"] += 1
        action = call("get_action", policy_client.get_action, state["eid"], state["obs"])
        state["obs"], reward, term, trunc, _ = env.step(action)
        call("log", policy_client.log_returns, state["eid"], reward)
        if term or trunc:
            call("end", policy_client.end_episode, state["eid"], state["obs"])
            state["eid"] = None

    for _ in range(50):  # warm-up (RLlib builds its inference worker at the first episode)
        step()
    print("READY", flush=True)
    for line in sys.stdin:  # one window per line: its start time
        if line.strip() in ("", "quit"):
            break
        window[:] = [float(line), float(line) + seconds]
        counts.update(get_action=0, requests=0)
        time.sleep(max(0.0, window[0] - time.time()))
        cpu = time.process_time()
        while time.time() < window[1]:
            step()
        print(json.dumps({**counts, "cpu_s": time.process_time() - cpu}), flush=True)


if __name__ == "__main__":
    role, lib, port_arg = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "server" and lib == "rayfield":
        rayfield_server(port_arg, *(int(x) for x in sys.argv[4:5]))
    elif role == "server":
        rllib_server(port_arg)
    else:
        client(lib, port_arg, float(sys.argv[4]), int(sys.argv[5]), *sys.argv[6:7])
