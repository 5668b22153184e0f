"""Entry point of the ``rayfield`` command."""

from __future__ import annotations

from typing import Any

import click

from rayfield.cli.dashboard import dashboard
from rayfield.cli.listing import list_
from rayfield.cli.logs import logs
from rayfield.cli.memory import memory
from rayfield.cli.microbenchmark import microbenchmark
from rayfield.cli.stack import stack
from rayfield.cli.start import start
from rayfield.cli.status import status
from rayfield.cli.stop import stop
from rayfield.cli.timeline import timeline


class _Group(click.Group):
    """The command group; session files another user could control (``rayfield.exceptions.
    UnsafeSessionError``) end any command with their one-line message, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        from rayfield.exceptions import UnsafeSessionError

        try:
            return super().invoke(ctx)
        except UnsafeSessionError as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rayfield-cli", prog_name="rayfield")
def cli() -> None:
    """Start, stop and inspect rayfield clusters."""


COMMANDS = (start, stop, status, list_, memory, logs, timeline, stack, microbenchmark, dashboard)
for command in COMMANDS:
    cli.add_command(command)

if __name__ == "__main__":
    cli()
