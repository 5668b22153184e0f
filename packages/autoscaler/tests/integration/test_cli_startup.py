"""``rayfield-autoscaler --help`` and ``rayfield --help`` (which loads the autoscaler's
plug-in commands to list them) import none of the launcher's heavy dependencies: only
the command that runs imports what it needs (``cli.py``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rayfield.autoscaler import cli, commands

# What --help must not import: the config schema's validator, YAML, process tools, the
# cloud clients, and the launcher's own modules that bring them.
HEAVY = (
    "jsonschema",
    "referencing",
    "yaml",
    "psutil",
    "boto3",
    "botocore",
    "kubernetes",
    "googleapiclient",
    "google.auth",
    "rayfield.autoscaler.config",
    "rayfield.autoscaler.commands",
    "rayfield.autoscaler.decisions",
    "rayfield.autoscaler.node_provider",
)

# `python -c` program: run the group in argv[1] (module:attribute) with the rest of
# argv, then print its output marker and the modules loaded.
RUN_AND_LIST = """
import importlib, json, sys
module, attribute = sys.argv[1].split(":")
group = getattr(importlib.import_module(module), attribute)
try:
    group(sys.argv[2:], prog_name="prog")
except SystemExit:
    pass
print("\\nMODULES " + json.dumps(sorted(sys.modules)))
"""


def run(entry: str, *args: str) -> tuple[str, list[str]]:
    """The output of ``entry ARGS`` in a fresh interpreter, and the modules it loaded."""
    proc = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, entry, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    marker = proc.stdout.rindex("\nMODULES ")
    return proc.stdout[:marker], json.loads(proc.stdout[marker + len("\nMODULES ") :])


def heavy(modules: list[str], names: tuple[str, ...] = HEAVY) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in names)]


def test_autoscaler_help_imports_nothing_heavy() -> None:
    out, modules = run("rayfield.autoscaler.cli:cli", "--help")
    assert "rsync-up" in out and "get-worker-ips" in out  # it listed every command
    assert heavy(modules) == []
    out, modules = run("rayfield.autoscaler.cli:cli", "up", "--help")
    assert "--max-workers" in out
    assert heavy(modules) == []


def test_rayfield_help_with_the_plugin_imports_nothing_heavy() -> None:
    pytest.importorskip("rayfield.cli.main", reason="rayfield-cli is not installed")
    out, modules = run("rayfield.cli.main:cli", "--help")
    assert "get-head-ip" in out  # the autoscaler's plug-in commands were loaded
    assert "rayfield.autoscaler.cli" in modules
    # psutil is rayfield-cli's own (rayfield.util.cluster): not checked here
    assert heavy(modules, tuple(n for n in HEAVY if n != "psutil")) == []


def test_a_command_imports_what_it_needs() -> None:
    # a config error still ends the command with its one line (the lazy imports ran)
    _, modules = run("rayfield.autoscaler.cli:cli", "get-head-ip", __file__)
    assert "rayfield.autoscaler.config" in modules and "jsonschema" in modules


def test_the_default_update_interval_is_the_launchers() -> None:
    assert cli.DEFAULT_UPDATE_INTERVAL_S == commands.DEFAULT_UPDATE_INTERVAL_S
