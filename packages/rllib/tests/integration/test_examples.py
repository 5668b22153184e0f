"""The examples run (one or two iterations each)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["custom_env", "custom_model", "custom_metrics_and_callbacks"])
def test_example_runs(name: str) -> None:
    result = load(name).main(2)
    assert result["training_iteration"] == 2 and result["timesteps_total"] > 0
    if name == "custom_metrics_and_callbacks":
        assert result["callback_ok"] and "pole_angle_mean" in result["custom_metrics"]


def test_the_twostep_game_example_runs() -> None:
    result = load("twostep_game").main(stop=1000, mixer="vdn")
    assert result["timesteps_total"] >= 1000 or result["episode_reward_mean"] >= 8.0


@pytest.mark.parametrize(
    ("server_args", "client_args"),
    [
        ([], ["--inference-mode", "remote"]),
        ([], ["--inference-mode", "local", "--update-interval", "1"]),
        (["--classic"], []),
    ],
    ids=["input-remote", "input-local", "classic"],
)
def test_the_cartpole_server_and_client_examples_run_together(
    server_args: list[str], client_args: list[str]
) -> None:
    """The reference's serving example as two programs: the server trains (its input a
    PolicyServerInput, or an ExternalEnv serving with --classic), the client plays its
    episodes through HTTP."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "cartpole_server.py"),
            "--port",
            str(port),
            "--iterations",
            "2",
            "--train-batch-size",
            "400",
            *server_args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    client = None
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        while line and "serving on" not in line:
            line = server.stdout.readline()
        assert "serving on" in line, "the server did not start"
        client = subprocess.Popen(
            [
                sys.executable,
                str(EXAMPLES / "cartpole_client.py"),
                "--address",
                f"localhost:{port}",
                "--stop-at",
                "1000000",
                *client_args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        out, _ = server.communicate(timeout=300)
        assert server.returncode == 0, out
        assert "iteration 2: episode_reward_mean" in out
        client.wait(60)  # the server went away: the client stops with an error
        assert client.stdout is not None and "episode 1: return" in client.stdout.read()
    finally:
        for proc in (server, client):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
