"""The inspection commands' logic without processes: filters, log tails, py-spy errors."""

from __future__ import annotations

from typing import Any

import click
import pytest

from rayfield.cli._common import human_bytes
from rayfield.cli.listing import apply_filters, parse_filters
from rayfield.cli.logs import tail
from rayfield.cli.stack import PERMISSION_HINT, attach_error

ACTORS = [
    {"actor_id": "aa01", "class_name": "A", "state": "ALIVE", "pid": 10, "detached": False},
    {"actor_id": "bb02", "class_name": "B", "state": "DEAD", "pid": None, "detached": True},
]


def test_filters_match_string_forms_and_reject_unknown_fields() -> None:
    assert parse_filters(("state=ALIVE", " pid =10", "name=")) == [
        ("state", "ALIVE"),
        ("pid", "10"),
        ("name", ""),
    ]
    assert apply_filters("actors", ACTORS, [("pid", "10")]) == ACTORS[:1]
    assert apply_filters("actors", ACTORS, [("detached", "TRUE")]) == ACTORS[1:]
    assert apply_filters("actors", ACTORS, [("pid", "")]) == ACTORS[1:]  # None is ""
    assert apply_filters("actors", ACTORS, [("state", "DEAD"), ("pid", "10")]) == []
    assert apply_filters("actors", [], [("name", "x")]) == []  # a column: known when empty
    with pytest.raises(click.BadParameter, match=r"no field 'colour'.*class_name"):
        apply_filters("actors", ACTORS, [("colour", "red")])
    for bad in ("state", "=ALIVE"):
        with pytest.raises(click.BadParameter, match="not key=value"):
            parse_filters((bad,))


class FakeLogs:
    """``read_log`` over one in-memory file, as a node answers it (4 MiB at most)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads: list[tuple[int, int]] = []

    def read_log(self, node: str, name: str, offset: int, max_bytes: int) -> dict[str, Any]:
        self.reads.append((offset, max_bytes))
        if name != "worker-1.out":
            return {"found": False, "size": 0, "offset": 0, "data": b""}
        size = len(self.data)
        start = max(0, size + offset) if offset < 0 else min(offset, size)
        return {"found": True, "size": size, "offset": start, "data": self.data[start:][:max_bytes]}


def test_tail_returns_whole_last_lines_and_the_offset_after_them() -> None:
    lines = [f"line {i:06d}\n".encode() for i in range(30_000)]  # 360 kB: several reads
    log = FakeLogs(b"".join(lines))
    data, end = tail(log, "n", "worker-1.out", 25_000)  # type: ignore[arg-type]
    assert data == b"".join(lines[-25_000:]) and end == len(log.data)
    assert len(log.reads) > 1  # grew the chunk until enough lines were in it
    assert tail(log, "n", "worker-1.out", 1)[0] == b"line 029999\n"  # type: ignore[arg-type]
    short = FakeLogs(b"only\nno newline at the end")
    assert tail(short, "n", "worker-1.out", 5)[0] == b"only\nno newline at the end"  # type: ignore[arg-type]
    assert tail(short, "n", "worker-1.out", 0) == (short.data, len(short.data))  # type: ignore[arg-type]
    with pytest.raises(click.ClickException, match="rayfield logs --list"):
        tail(short, "n", "other.out", 5)  # type: ignore[arg-type]


def test_attach_errors_say_how_to_get_permission() -> None:
    denied = "Error: Permission Denied: Try running again with elevated permissions"
    assert attach_error(42, denied) == PERMISSION_HINT.format(pid=42)
    assert "sudo" in attach_error(42, "Operation not permitted (os error 1)")
    assert "ptrace_scope" in attach_error(42, denied)
    assert attach_error(7, "\nError: No such process\nmore") == (
        "py-spy could not dump pid 7: Error: No such process"
    )


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (None, 999, 16_000_000, 7.6e9, 3e15)] == [
        "-",
        "999 B",
        "16.0 MB",
        "7.6 GB",
        "3000.0 TB",
    ]
