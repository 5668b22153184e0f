"""The ``tune`` command: list the trials of an experiment and the experiments of a folder.

It reads the experiment state and the trials' files as JSON only, and only files of this
user that no one else can write (:mod:`rayfield.util.private_files`); it never loads a
pickle (a config JSON could not hold shows its JSON copy). ``--output x.pkl`` writes one.
"""

from __future__ import annotations

import operator
import os
from typing import Any

import click

from rayfield.exceptions import UnsafeFileError
from rayfield.tune.analysis import ExperimentAnalysis
from rayfield.tune.error import TuneError
from rayfield.tune.state import load_state

__all__ = ["cli"]

_OPS = {
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    ">": operator.gt,
}
_TRIAL_COLUMNS = ["trial_id", "status", "training_iteration", "mean_accuracy", "mean_loss"]


def _filter(rows: list[dict[str, Any]], expression: str | None) -> list[dict[str, Any]]:
    if not expression:
        return rows
    parts = expression.split()
    if len(parts) != 3 or parts[1] not in _OPS:
        raise click.BadParameter(
            f"{expression!r}: use '<column> <op> <value>' with op one of {' '.join(_OPS)}"
        )
    column, op, raw = parts
    out = []
    for row in rows:
        value = row.get(column)
        if value is None:
            continue
        target: Any = raw
        if isinstance(value, (int, float)):
            target = float(raw)
        if _OPS[op](value, target):
            out.append(row)
    return out


def _show(
    rows: list[dict[str, Any]], columns: list[str], sort: str | None, output: str | None
) -> None:
    if sort:
        if rows and sort not in rows[0]:
            raise click.BadParameter(f"unknown column {sort!r} for --sort")
        rows = sorted(rows, key=lambda r: (r.get(sort) is None, r.get(sort)))
    columns = [c for c in columns if any(r.get(c) is not None for r in rows)]
    if output:
        import pandas as pd

        frame = pd.DataFrame([{c: r.get(c) for c in columns} for r in rows])
        if output.endswith(".csv"):
            frame.to_csv(output, index=False)
        elif output.endswith((".p", ".pkl", ".pickle")):
            frame.to_pickle(output)
        else:
            raise click.BadParameter(f"--output must end with .csv, .p, .pkl or .pickle: {output}")
        click.echo(f"Output saved at: {output}")
        return
    widths = {c: max([len(c)] + [len(str(r.get(c, ""))) for r in rows]) for c in columns}
    click.echo(" | ".join(c.ljust(widths[c]) for c in columns))
    click.echo("-+-".join("-" * widths[c] for c in columns))
    for row in rows:
        click.echo(" | ".join(str(row.get(c, "")).ljust(widths[c]) for c in columns))


@click.group()
def cli() -> None:
    """Inspect Tune experiments."""


@cli.command("ls")
@click.argument("experiment_path")
@click.option("--sort", default=None, help="column to sort by")
@click.option("--filter", "filter_", default=None, help="'<column> <op> <value>'")
@click.option("--output", default=None, help="write a .csv or .pkl file instead")
@click.option("--columns", default=None, help="comma-separated columns")
def list_trials(
    experiment_path: str,
    sort: str | None,
    filter_: str | None,
    output: str | None,
    columns: str | None,
) -> None:
    """List the trials of the experiment in EXPERIMENT_PATH."""
    path = os.path.expanduser(experiment_path)
    try:
        if load_state(path) is None:
            click.echo("No experiment state found!")
            raise SystemExit(1)
        rows = _filter(ExperimentAnalysis(path).rows(), filter_)
    except (UnsafeFileError, TuneError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    _show(rows, columns.split(",") if columns else _TRIAL_COLUMNS, sort, output)


@cli.command("lsx")
@click.argument("project_path")
@click.option("--sort", default=None)
@click.option("--filter", "filter_", default=None)
@click.option("--output", default=None)
def list_experiments(
    project_path: str, sort: str | None, filter_: str | None, output: str | None
) -> None:
    """List the experiments in PROJECT_PATH (e.g. ~/rayfield_results)."""
    root = os.path.expanduser(project_path)
    rows = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        try:
            state = load_state(os.path.join(root, name))
        except (UnsafeFileError, TuneError, ValueError) as exc:  # not ours alone, not a state
            click.echo(f"skipped {name}: {exc}", err=True)
            continue
        if state is None:
            continue
        statuses = [t["status"] for t in state["trials"]]
        rows.append(
            {
                "name": name,
                "total_trials": len(statuses),
                "running_trials": statuses.count("RUNNING"),
                "terminated_trials": statuses.count("TERMINATED"),
                "error_trials": statuses.count("ERROR"),
            }
        )
    if not rows:
        click.echo("No experiments found!")
        raise SystemExit(1)
    rows = _filter(rows, filter_)
    _show(rows, list(rows[0]) if rows else ["name"], sort, output)


@cli.command("add-note")
@click.argument("path")
@click.option("--filename", default="note.txt", help="the note's file name in PATH")
def add_note(path: str, filename: str) -> None:
    """Open $EDITOR (default vim) on a note file in the experiment or trial folder PATH."""
    folder = os.path.expanduser(path)
    if not os.path.isdir(folder):
        raise click.BadParameter(f"{path} is not a directory")
    target = os.path.join(folder, filename)
    click.edit(filename=target, editor=os.environ.get("EDITOR", "vim"))
    click.echo(f"Note saved at: {target}" if os.path.exists(target) else "No note written.")


cli.add_command(list_trials, "list-trials")
cli.add_command(list_experiments, "list-experiments")
