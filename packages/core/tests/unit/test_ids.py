"""The id layout (`_private/common/ids.py`)."""

from __future__ import annotations

import struct
import threading

from rayfield._private.common import ids


def test_ids_of_one_process_share_origin_and_prefix() -> None:
    node_id = bytes(range(20))
    gen = ids.IdGenerator(node_id)
    task, put = gen.task_id(), gen.put_id()
    assert len(task) == len(put) == ids.ID_SIZE
    assert ids.origin_of(task) == ids.origin_of(put) == node_id[: ids.ORIGIN_BYTES]
    assert task[: ids.JOB_ID_BYTES] == put[: ids.JOB_ID_BYTES] == gen.job_id
    assert struct.unpack("<II", task[12:]) == (1, 0)
    assert struct.unpack("<II", put[12:]) == (2, 0xFFFFFFFF)
    other = ids.IdGenerator(node_id)
    assert other.job_id != gen.job_id and ids.origin_of(other.task_id()) == node_id[:6]


def test_returns_name_their_task() -> None:
    gen = ids.IdGenerator()
    task = gen.task_id()
    returns = [ids.return_id(task, i) for i in range(3)]
    assert [struct.unpack("<I", r[16:])[0] for r in returns] == [1, 2, 3]
    assert all(ids.task_of(r) == task for r in returns)
    assert ids.IdGenerator.return_id(task, 0) == returns[0]


def test_short_is_the_first_16_hex_digits() -> None:
    oid = bytes.fromhex("0123456789abcdef" + "00" * 12)
    assert ids.short(oid) == "0123456789abcdef"


def test_threads_never_share_an_id() -> None:
    gen = ids.IdGenerator()
    made: list[list[bytes]] = [[] for _ in range(4)]

    def make(out: list[bytes]) -> None:
        for _ in range(5000):
            out.append(gen.task_id())
            out.append(gen.put_id())

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counters = sorted(struct.unpack("<I", i[12:16])[0] for out in made for i in out)
    assert counters == list(range(1, 40001))  # every number once, none skipped
