"""ForwardBatchRequest written and read with ``struct`` (``protocol/task_wire.py``): the
codec reads what it writes, it reads what the codec writes, and bad bytes are refused."""

from __future__ import annotations

import random
from typing import Any

import pytest

from rayfield._private.protocol import codec, messages, task_wire
from rayfield._private.protocol.constants import ID_SIZE


def oid(n: int) -> bytes:
    return bytes([n]) * ID_SIZE


FULL: dict[str, Any] = {
    "task_id": oid(1),
    "payload": b"payload-bytes",
    "resources": {"CPU": 1.5, "GPU": 0.25, "zero": 0.0},
    "dependencies": [oid(2), oid(3)],
    "actor_id": oid(4),
    "actor_creation": True,
    "max_concurrency": 3,
    "caller_id": oid(5),
    "sequence_no": 2**40 + 7,
    "return_ids": [oid(6)],
    "max_retries": -1,
    "actor_handles": [oid(7)],
    "runtime_env": '{"env_vars": {"A": "é"}}',
}
PLAIN: dict[str, Any] = {"task_id": oid(8), "payload": b"", "return_ids": [oid(9)]}
DEFAULTS: dict[str, Any] = {
    "resources": {},
    "dependencies": [],
    "actor_id": None,
    "actor_creation": False,
    "max_concurrency": 1,
    "caller_id": None,
    "sequence_no": 0,
    "max_retries": 0,
    "actor_handles": [],
    "runtime_env": "",
}
BATCH = [(FULL, [oid(2)]), (PLAIN, []), ({**PLAIN, "task_id": oid(10)}, [oid(11), oid(12)])]


def codec_values(origin: str, tasks: Any, in_order: bool) -> dict[str, Any]:
    """The values the declarative codec writes for the same batch."""
    rows = []
    for spec, pushed in tasks:
        task = {**DEFAULTS, **spec}
        task = {k: (v if v not in ([], "") else None) for k, v in task.items()}
        task["payload"] = spec["payload"]
        rows.append({"origin": origin, "task": task, "pushed": pushed})
    return {"tasks": rows, "in_order": in_order}


def expected(spec: dict[str, Any]) -> dict[str, Any]:
    return {**DEFAULTS, **spec}


@pytest.mark.parametrize("in_order", [True, False])
def test_the_codec_reads_what_task_wire_writes(in_order: bool) -> None:
    raw = task_wire.write_forward_batch("10.0.0.1:7", BATCH, in_order)
    got = codec.decode("ForwardBatchRequest", raw)
    assert got["in_order"] is in_order
    assert [(t["origin"], t["pushed"]) for t in got["tasks"]] == [
        ("10.0.0.1:7", pushed) for _, pushed in BATCH
    ]
    for (spec, _), row in zip(BATCH, got["tasks"], strict=True):
        assert row["task"] == expected(spec)


def test_task_wire_reads_what_the_codec_writes() -> None:
    raw = codec.encode("ForwardBatchRequest", codec_values("h:1", BATCH, True))
    tasks, in_order = task_wire.read_forward_batch(raw)
    assert in_order is True
    assert [t["origin"] for t in tasks] == ["h:1"] * 3
    assert [t["pushed"] for t in tasks] == [p for _, p in BATCH]
    assert [t["task"] for t in tasks] == [expected(s) for s, _ in BATCH]


def test_an_empty_batch_and_the_message_round_trip() -> None:
    assert task_wire.read_forward_batch(task_wire.write_forward_batch("a:1", [], False)) == (
        [],
        False,
    )
    decoded, _ = messages.decode_forward_batch(messages.encode_forward_batch("a:1", BATCH))
    assert [spec for _, spec, _ in decoded] == [expected(s) for s, _ in BATCH]


def test_a_bad_id_is_refused_when_written() -> None:
    with pytest.raises(ValueError, match="20 bytes"):
        task_wire.write_forward_batch("a:1", [({**PLAIN, "task_id": b"short"}, [])], False)
    with pytest.raises(ValueError, match="20 bytes"):
        task_wire.write_forward_batch("a:1", [(PLAIN, [b"short"])], False)


def test_truncated_or_scrambled_bytes_are_malformed_never_another_error() -> None:
    raw = messages.encode_forward_batch("a:1", BATCH, True)
    for n in range(0, len(raw), 7):
        with pytest.raises(messages.MalformedMessage):
            messages.decode_forward_batch(raw[:n])
    rng = random.Random(5)
    for _ in range(300):
        bad = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        try:
            messages.decode_forward_batch(bytes(bad))
        except messages.MalformedMessage:
            pass  # refused; any other exception fails the test


FETCHED = [(oid(1), b"meta", b"data" * 100), (oid(3), b"", b""), (oid(4), b"m", b"")]


def test_fetch_replies_read_both_ways_with_the_codec() -> None:
    present = [True, False, True, True]
    raw = task_wire.write_fetch_reply(present, FETCHED)
    got = codec.decode("FetchObjectsReply", raw)
    assert got["present"] == present
    assert [(o["object_id"], o["metadata"], o["data"]) for o in got["objects"]] == FETCHED
    rows = [{"object_id": i, "metadata": m, "data": d} for i, m, d in FETCHED]
    theirs = codec.encode("FetchObjectsReply", {"present": present, "objects": rows})
    assert task_wire.read_fetch_reply(theirs) == (present, FETCHED)
    assert task_wire.read_fetch_reply(task_wire.write_fetch_reply([], [])) == ([], [])


def test_a_truncated_fetch_reply_is_malformed() -> None:
    raw = messages.encode_fetch_reply([True, True, True], FETCHED)
    assert messages.decode_fetch_reply(raw)[1][oid(1)] == (b"meta", b"data" * 100)
    for n in range(0, len(raw), 5):
        with pytest.raises(messages.MalformedMessage):
            messages.decode_fetch_reply(raw[:n])


def test_forward_replies_read_both_ways_with_the_codec() -> None:
    replies = [None, "full", None, "", "ValueError: é"]
    got = codec.decode("ForwardBatchReply", task_wire.write_forward_replies(replies))
    assert [None if x["accepted"] else x["message"] for x in got["replies"]] == replies
    rows = [{"accepted": why is None, "message": why or ""} for why in replies]
    theirs = codec.encode("ForwardBatchReply", {"replies": rows})
    assert task_wire.read_forward_replies(theirs) == replies
    assert task_wire.read_forward_replies(task_wire.write_forward_replies([])) == []


@pytest.mark.parametrize("n", [0, 1, 3, 50])
def test_blob_vectors_copied_in_as_blocks_decode_alone_and_nested(n: int) -> None:
    blobs = [bytes([i]) * (i % 7) for i in range(n)]
    events = {"events": blobs}
    assert (
        codec.decode("GcsAddTaskEventsRequest", codec.encode("GcsAddTaskEventsRequest", events))
        == events
    )
    locations = {
        "locations": [{"object_id": oid(i), "node_ids": blobs[: i + 1] or [b"x"]} for i in range(3)]
    }
    got = codec.decode(
        "GcsGetObjectLocationsReply", codec.encode("GcsGetObjectLocationsReply", locations)
    )
    assert got == locations
