"""What the commands share: the cluster options, the state client, errors and output.

Every command that talks to a cluster takes ``--address``, ``--token`` and ``--temp-dir``
through :func:`cluster_options`, which hands the command one :class:`Cluster`. Errors
raised by the state layer become ``click.ClickException``s (stderr, exit status 1) whose
message says what to fix.
"""

from __future__ import annotations

import functools
import json
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from rich.console import Console

    from rayfield.util.state import StateClient

F = TypeVar("F", bound=Callable[..., Any])

START_HINT = "start one with `rayfield start --head`, or pass --address HOST:PORT"


@dataclass(frozen=True)
class Cluster:
    """The cluster a command was pointed at (its ``--address``, ``--token``, ``--temp-dir``)."""

    address: str | None
    token: str | None
    temp_dir: Path | None

    def resolve(self) -> tuple[str, str]:
        """The GCS address and the token, checked: something must listen at the address.

        Raises:
            click.UsageError: when ``--address`` is not HOST:PORT.
            click.ClickException: when no head runs here (and no address was given), no
                process listens at the address, or the token cannot be found.
        """
        from rayfield.util import cluster

        try:
            address = self.address or cluster.find_gcs_address(self.temp_dir)
        except cluster.ClusterError as exc:
            raise click.ClickException(str(exc)) from None
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise click.UsageError(f"--address {address!r} is not HOST:PORT, e.g. 127.0.0.1:6379")
        try:
            socket.create_connection((host, int(port)), timeout=3).close()
        except OSError as exc:
            fix = (
                "check the address (`rayfield start --head` printed it)"
                if self.address
                else f"the head recorded on this machine is not running: {START_HINT}"
            )
            raise click.ClickException(
                f"no rayfield cluster answers at {address} ({exc.strerror or exc}): {fix}"
            ) from None
        try:
            token = self.token or cluster.find_token(address, self.temp_dir)
        except cluster.ClusterError as exc:
            raise click.ClickException(str(exc)) from None
        return address, token

    @contextmanager
    def state(self) -> Iterator[StateClient]:
        """A connected ``StateClient``; state errors inside the block become click errors."""
        from rayfield.util.state import StateClient

        address, token = self.resolve()
        with translate_errors(address), StateClient(address, token, self.temp_dir) as client:
            yield client


@contextmanager
def translate_errors(address: str) -> Iterator[None]:
    """Turn the state layer's exceptions into ``click.ClickException`` with a remedy.

    Raises:
        click.ClickException: for ``StateError`` (its message), ``GcsError`` (the GCS does
            not answer or refuses the token) and ``NodeCallError`` (a node does not).
    """
    from rayfield.util.state import GcsAuthError, GcsError, NodeCallError, StateError, call_status

    try:
        yield
    except StateError as exc:
        raise click.ClickException(str(exc)) from None
    except GcsAuthError as exc:
        raise click.ClickException(
            f"the cluster at {address} refused the token ({exc}): pass the right one with "
            "--token or RAYFIELD_TOKEN (the head keeps it in <session>/token)"
        ) from None
    except GcsError as exc:
        raise click.ClickException(
            f"cannot reach the cluster at {address}: {exc}; is it running (`rayfield status`)?"
        ) from None
    except NodeCallError as exc:
        code, details = call_status(exc)
        raise click.ClickException(
            f"a node did not answer: {code}: {details}; "
            "`rayfield status` shows which nodes are alive"
        ) from None


def cluster_options(fn: F) -> F:
    """Add ``--address``, ``--token`` and ``--temp-dir`` to a command; it receives them as
    one keyword argument ``cluster`` (a :class:`Cluster`)."""

    @click.option(
        "--address",
        metavar="HOST:PORT",
        default=None,
        help="The cluster's GCS (default: the head running on this machine).",
    )
    @click.option(
        "--token",
        envvar="RAYFIELD_TOKEN",
        default=None,
        help="The cluster token (default: from the head's session on this machine). "
        "Env: RAYFIELD_TOKEN.",
    )
    @click.option(
        "--temp-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Root of the session directories, where the head is looked for "
        "(default <tmp>/rayfield-<uid>).",
    )
    @functools.wraps(fn)
    def wrapper(
        *args: Any, address: str | None, token: str | None, temp_dir: Path | None, **kw: Any
    ) -> Any:
        return fn(*args, cluster=Cluster(address, token, temp_dir), **kw)

    return wrapper  # type: ignore[return-value]


def format_option(choices: Sequence[str], default: str) -> Callable[[F], F]:
    """``--format`` with ``choices``, passed to the command as ``fmt``."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(list(choices)),
        default=default,
        show_default=True,
        help="Output format: "
        + ", ".join(f"{c} ({'machine-readable' if c == 'json' else 'for people'})" for c in choices)
        + ".",
    )


def limit_option(what: str, default: int = 100) -> Callable[[F], F]:
    """``--limit N`` (0: no limit), passed as ``limit``."""
    return click.option(
        "--limit",
        type=click.IntRange(min=0),
        default=default,
        show_default=True,
        help=f"Show at most this many {what} (0: all).",
    )


# ---- output -----------------------------------------------------------------------------


def console(stderr: bool = False) -> Console:
    """A rich console; when not writing to a terminal it never wraps or cuts a line (the
    output is for files and pipes)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=100_000, no_color=True, highlight=False)


def print_table(
    columns: Sequence[tuple[str, str]],
    rows: Sequence[dict[str, Any]],
    title: str | None = None,
    out: Console | None = None,
) -> None:
    """Print ``rows`` as a table: ``columns`` are (key, header); values are shown as they
    are, None as "-"; numeric headers ending in a unit are right-aligned."""
    from rich import box
    from rich.table import Table

    table = Table(
        title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False
    )
    for key, header in columns:
        numeric = bool(rows) and all(isinstance(r.get(key), (int, float)) for r in rows)
        table.add_column(header, justify="right" if numeric else "left", no_wrap=True)
    for row in rows:
        table.add_row(*("-" if row.get(k) is None else str(row[k]) for k, _ in columns))
    (out or console()).print(table)


def print_json(value: Any) -> None:
    """``value`` as indented JSON on stdout."""
    click.echo(json.dumps(value, indent=2, default=str))


def human_bytes(n: float | None) -> str:
    """``n`` bytes as ``"16.0 MB"`` (powers of 1000; None: "-")."""
    if n is None:
        return "-"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


@contextmanager
def waiting(text: str) -> Iterator[None]:
    """Show ``text`` with a spinner and the seconds elapsed on stderr while the block runs
    (a plain line when stderr is not a terminal)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    out = console(stderr=True)
    if not out.is_terminal:
        click.echo(f"{text}...", err=True)
        yield
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=out, transient=True) as progress:
        progress.add_task(text, total=None)
        yield
