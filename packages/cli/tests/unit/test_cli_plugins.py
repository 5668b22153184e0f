"""Commands other distributions add to `rayfield` through the `rayfield.cli_commands`
entry-point group (rayfield-autoscaler's `up`, `down`...)."""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

from rayfield.cli import main


class FakeEntryPoint:
    def __init__(self, name: str, target: Any) -> None:
        self.name = name
        self.value = f"fake.module:{name}"
        self._target = target

    def load(self) -> Any:
        return self._target


@click.command()
@click.option("--who", default="world")
def hello(who: str) -> None:
    """Say hello."""
    click.echo(f"hello {who}")


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    found: dict[str, Any] = {}
    monkeypatch.setattr(main, "_plugins", lambda: found)
    return found


def test_a_plugin_command_runs_and_is_listed(plugins: dict[str, Any]) -> None:
    plugins["hello"] = FakeEntryPoint("hello", hello)
    result = CliRunner().invoke(main.cli, ["hello", "--who", "rayfield"])
    assert result.exit_code == 0, result.output
    assert result.output == "hello rayfield\n"
    listing = CliRunner().invoke(main.cli, ["--help"])
    assert "hello" in listing.output and "start" in listing.output


def test_built_in_commands_win_over_a_plugin_of_the_same_name(plugins: dict[str, Any]) -> None:
    plugins["status"] = FakeEntryPoint("status", hello)
    result = CliRunner().invoke(main.cli, ["status", "--help"])
    assert "hello" not in result.output.lower().split("\n")[0]
    assert main.cli.get_command(click.Context(main.cli), "status") is not hello


def test_a_plugin_that_is_not_a_command_gives_a_one_line_error(plugins: dict[str, Any]) -> None:
    plugins["broken"] = FakeEntryPoint("broken", object())
    result = CliRunner().invoke(main.cli, ["broken"])
    assert result.exit_code != 0
    assert "is not a click command" in result.output


def test_an_unknown_command_is_still_refused(plugins: dict[str, Any]) -> None:
    result = CliRunner().invoke(main.cli, ["no-such-command"])
    assert result.exit_code == 2
    assert "No such command" in result.output
