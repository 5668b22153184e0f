"""Entry point of the ``rayfield`` command."""

from __future__ import annotations

import importlib
from typing import Any

import click

# The built-in commands: name -> (module, attribute). A command's module is imported when
# the command runs (or for --help), so `rayfield status` loads neither what `start` nor
# what `dashboard` needs.
BUILT_IN = {
    "start": ("rayfield.cli.start", "start"),
    "stop": ("rayfield.cli.stop", "stop"),
    "status": ("rayfield.cli.status", "status"),
    "list": ("rayfield.cli.listing", "list_"),
    "memory": ("rayfield.cli.memory", "memory"),
    "logs": ("rayfield.cli.logs", "logs"),
    "timeline": ("rayfield.cli.timeline", "timeline"),
    "stack": ("rayfield.cli.stack", "stack"),
    "microbenchmark": ("rayfield.cli.microbenchmark", "microbenchmark"),
    "dashboard": ("rayfield.cli.dashboard", "dashboard"),
    "job": ("rayfield.cli.job", "job"),
}

PLUGIN_GROUP = "rayfield.cli_commands"


def _plugins() -> dict[str, Any]:
    """Commands other distributions add (entry points of group ``rayfield.cli_commands``,
    each naming one click command; rayfield-autoscaler adds ``up``, ``down``...)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=PLUGIN_GROUP)}


class _Group(click.Group):
    """The command group; session files another user could control (``rayfield.exceptions.
    UnsafeSessionError``) end any command with their one-line message, not a traceback,
    and Ctrl-C ends any command with exit status 130 (``_interrupt.interrupted``).
    Built-in commands are imported when named (:data:`BUILT_IN`); plug-in commands are
    looked up only when a name is not built in (or for ``--help``), so the built-in
    commands start without reading every installed distribution."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(BUILT_IN) | set(super().list_commands(ctx)) | set(_plugins()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in BUILT_IN:
            module, attribute = BUILT_IN[cmd_name]
            built_in: click.Command = getattr(importlib.import_module(module), attribute)
            return built_in
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        entry = _plugins().get(cmd_name)
        if entry is None:
            return None
        loaded = entry.load()
        if not isinstance(loaded, click.Command):
            raise click.ClickException(
                f"plug-in command {cmd_name!r} ({entry.value}) is not a click command; "
                f"reinstall the distribution that provides it"
            )
        return loaded

    def invoke(self, ctx: click.Context) -> Any:
        from rayfield.cli._interrupt import interrupted
        from rayfield.exceptions import UnsafeSessionError

        try:
            return super().invoke(ctx)
        except UnsafeSessionError as exc:
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            raise interrupted() from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rayfield-cli", prog_name="rayfield")
def cli() -> None:
    """Start, stop and inspect rayfield clusters."""


if __name__ == "__main__":
    cli()
