"""The node messages: each type round-trips, and its bytes stay those of the wire format."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from rayfield._private.protocol import codec, messages
from rayfield._private.protocol.constants import ID_SIZE, MAX_MESSAGE_BYTES, RESOURCE_UNIT


def oid(n: int) -> bytes:
    return bytes([n]) * ID_SIZE


SPEC: dict[str, Any] = {
    "task_id": oid(1),
    "payload": b"payload-bytes",
    "resources": {"CPU": 1.5, "GPU": 0.25},
    "dependencies": [oid(2), oid(3)],
    "actor_id": oid(4),
    "actor_creation": True,
    "max_concurrency": 3,
    "caller_id": oid(5),
    "sequence_no": 7,
    "return_ids": [oid(6)],
    "max_retries": 2,
    "actor_handles": [oid(7)],
    "runtime_env": '{"env_vars":{"A":"1"}}',
}
PLAIN: dict[str, Any] = {
    "task_id": oid(8),
    "payload": b"p",
    "resources": {},
    "return_ids": [oid(9)],
}


def encoded() -> dict[str, bytes]:
    m = messages
    return {
        "pull": m.encode_pull(oid(1), 250),
        "chunk": m.encode_chunk(True, 10, b"meta", 4, b"data"),
        "chunk_missing": m.encode_chunk(False),
        "forward_batch": m.encode_forward_batch(
            "127.0.0.1:1", [(SPEC, [oid(2)]), (PLAIN, [])], True
        ),
        "forward_batch_reply": m.encode_forward_batch_reply([None, "full"]),
        "push": m.encode_push(oid(1), "127.0.0.1:2", 4, b"m", b"abcd"),
        "push_notice": m.encode_push(oid(1), "127.0.0.1:2", 4),
        "ids": m.encode_ids([oid(1), oid(2)], 30),
        "present": m.encode_present([True, False, True]),
        "fetch": m.encode_fetch([oid(1), oid(3)], 100, 4096),
        "fetch_reply": m.encode_fetch_reply([True, False], [(oid(1), b"mm", b"dd")]),
    }


# sha256 (first 16 hex digits) of each encoding: the bytes nodes of this version send;
# a change here must be deliberate (readers decode any valid layout, see below).
WIRE = {
    "chunk": "fc6daefba65ac083",
    "chunk_missing": "233d91747466f68c",
    "fetch": "cf82de402871bead",
    "fetch_reply": "8cac6463c51840d7",  # task_wire.py, as forward_batch
    # written front to back by task_wire.py since it replaced the codec for this message
    "forward_batch": "bcf96118bd2789e3",
    "forward_batch_reply": "39c3c9b2b34c3e46",  # task_wire.py
    "ids": "cfa7d53f564bbffa",
    "present": "eb063f8442e49981",
    "pull": "384cc85acf870cb8",
    "push": "2f370699ea36783e",
    "push_notice": "1ff6738f2cb21a1a",
}


@pytest.mark.parametrize("name", sorted(WIRE))
def test_wire_bytes_are_stable(name: str) -> None:
    assert hashlib.sha256(encoded()[name]).hexdigest()[:16] == WIRE[name]


# A batch of one task without actor handles as the hand-written encoder of earlier
# versions wrote it (with an unreferenced empty actor_handles vector the codec omits).
EARLIER_BATCH = bytes.fromhex(
    "0c00000000000600080004000600000004000000010000001000000000000a0010000c0008000400"
    "0a00000078000000200000007400000018002800140010000c000000000000000000000008000400"
    "18000000280000004400000038000000380000000808080808080808080808080808080808080808"
    "000000000100000009090909090909090909090909090909090909090000000000000000010000"
    "007000000000000000010000006f000000"
)


def test_an_earlier_encoding_decodes_the_same() -> None:
    earlier = messages.decode_forward_batch(EARLIER_BATCH)
    assert earlier == messages.decode_forward_batch(
        messages.encode_forward_batch("o", [(PLAIN, [])])
    )
    [(origin, spec, pushed)] = earlier[0]
    assert (origin, spec["task_id"], spec["return_ids"], pushed) == ("o", oid(8), [oid(9)], [])
    assert spec["actor_handles"] == [] and spec["max_concurrency"] == 1


def test_constants_are_defined_once() -> None:
    assert messages.ID_SIZE is ID_SIZE and codec.ID_SIZE is ID_SIZE
    assert messages.RESOURCE_UNIT is RESOURCE_UNIT and codec.RESOURCE_UNIT is RESOURCE_UNIT
    assert MAX_MESSAGE_BYTES == 64 << 20


def test_pull_round_trip() -> None:
    assert messages.decode_pull(messages.encode_pull(oid(1), 250)) == (oid(1), 250)


def test_chunk_round_trip() -> None:
    found, size, meta, offset, data = messages.decode_chunk(
        messages.encode_chunk(True, 10, b"meta", 4, b"data")
    )
    assert (found, size, meta, offset, bytes(data)) == (True, 10, b"meta", 4, b"data")
    assert messages.decode_chunk(messages.encode_chunk(False))[0] is False


def test_forward_batch_round_trip() -> None:
    tasks, in_order = messages.decode_forward_batch(
        messages.encode_forward_batch("127.0.0.1:1", [(SPEC, [oid(2)]), (PLAIN, [])], True)
    )
    assert in_order is True
    (origin, spec, pushed), (_, plain, none_pushed) = tasks
    assert origin == "127.0.0.1:1" and pushed == [oid(2)] and none_pushed == []
    assert spec == SPEC
    assert plain["actor_id"] is None and plain["caller_id"] is None
    assert plain["resources"] == {} and plain["return_ids"] == [oid(9)]
    assert plain["runtime_env"] == ""  # the default env


def test_forward_batch_reply_round_trip() -> None:
    reply = messages.encode_forward_batch_reply([None, "full"])
    assert messages.decode_forward_batch_reply(reply) == [None, "full"]


def test_push_round_trip() -> None:
    got = messages.decode_push(messages.encode_push(oid(1), "h:2", 4, b"m", b"abcd"))
    assert got[:4] == (oid(1), "h:2", 4, b"m") and bytes(got[4] or b"") == b"abcd"
    assert messages.decode_push(messages.encode_push(oid(1), "h:2", 4))[4] is None


def test_ids_present_fetch_round_trip() -> None:
    assert messages.decode_ids(messages.encode_ids([oid(1), oid(2)], 30)) == ([oid(1), oid(2)], 30)
    assert messages.decode_present(messages.encode_present([True, False])) == [True, False]
    assert messages.decode_fetch(messages.encode_fetch([oid(3)], 100, 4096)) == (
        [oid(3)],
        100,
        4096,
    )
    reply = messages.encode_fetch_reply([True, False], [(oid(1), b"mm", b"dd")])
    assert messages.decode_fetch_reply(reply) == ([True, False], {oid(1): (b"mm", b"dd")})


def test_wrong_id_size_is_refused_when_encoding() -> None:
    with pytest.raises(ValueError, match="20 bytes"):
        messages.encode_ids([b"short"])


@pytest.mark.parametrize(
    "decode",
    [
        messages.decode_pull,
        messages.decode_forward_batch,
        messages.decode_push,
        messages.decode_ids,
        messages.decode_fetch,
        messages.decode_fetch_reply,
    ],
)
def test_garbage_is_malformed(decode: Any) -> None:
    with pytest.raises(messages.MalformedMessage):
        decode(b"\xff" * 7)
    with pytest.raises(messages.MalformedMessage):
        decode(b"\xff" * 64)
