"""Entry point of the ``rayfield`` command."""

from __future__ import annotations

import click

from rayfield.cli.dashboard import dashboard
from rayfield.cli.start import start
from rayfield.cli.status import status
from rayfield.cli.stop import stop


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rayfield-cli", prog_name="rayfield")
def cli() -> None:
    """Start, stop and inspect rayfield clusters."""


cli.add_command(start)
cli.add_command(stop)
cli.add_command(status)
cli.add_command(dashboard)

if __name__ == "__main__":
    cli()
