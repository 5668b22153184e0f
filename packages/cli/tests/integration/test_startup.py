"""`rayfield` imports only what the command it runs needs: every test of this package
starts it over a hundred times, and so do users (``main.py`` imports a command's module
when the command runs; ``rayfield``, ``rayfield.util`` import their names on first use)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Modules `rayfield --help` must not import: the transport, numpy (through flatbuffers),
# the dashboard's web server, the runtime and what it brings.
NOT_FOR_HELP = (
    "grpc",
    "numpy",
    "flatbuffers",
    "aiohttp",
    "pyarrow",
    "rayfield.dashboard",
    "rayfield.api",
    "rayfield._private.runtime",
    "cloudpickle",
    "asyncio",
    "rich",
)

# `python -c` program: run `rayfield ARGS` (argv), then print the modules it loaded.
RUN_AND_LIST = """
import json, sys
from rayfield.cli.main import cli
try:
    cli(sys.argv[1:], prog_name="rayfield")
except SystemExit:
    pass
print("\\nMODULES " + json.dumps(sorted(sys.modules)))
"""


def modules_loaded_by(*args: str) -> list[str]:
    """The modules of a fresh interpreter after ``rayfield ARGS``."""
    proc = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    marker = proc.stdout.rindex("\nMODULES ")
    return list(json.loads(proc.stdout[marker + len("\nMODULES ") :]))


def heavy(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in names)]


def test_help_imports_no_transport_runtime_or_dashboard() -> None:
    modules = modules_loaded_by("--help")
    assert "rayfield.cli.status" in modules  # --help lists every command: it did run
    assert heavy(modules, NOT_FOR_HELP) == []


@pytest.mark.parametrize("command", ["status", "dashboard"])
def test_a_command_imports_no_other_commands_module(command: str) -> None:
    modules = modules_loaded_by(command, "--help")
    mine = "rayfield.cli.listing" if command == "list" else f"rayfield.cli.{command}"
    assert mine in modules
    others = {f"rayfield.cli.{m}" for m in ("start", "stop", "status", "listing", "dashboard")}
    assert [m for m in modules if m in others - {mine}] == []
    assert heavy(modules, NOT_FOR_HELP) == []
