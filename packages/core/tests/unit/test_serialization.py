"""Unit tests of rayfield._private.common.serialization (no processes but one by-value check)."""

from __future__ import annotations

import collections
import dataclasses
import fractions
import os
import struct
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from rayfield._private.common import serialization as ser
from rayfield._private.common.serialization import (
    SerializationError,
    current_context,
    current_deserialization_context,
    deserialize,
    serialize,
    serialize_error,
)


def roundtrip(value: Any, **kwargs: Any) -> Any:
    """Write ``value`` into a writable buffer like the store does and read it back."""
    obj = serialize(value)
    buf = bytearray(obj.total_bytes)
    obj.write_to(memoryview(buf))
    assert bytes(buf) == obj.to_bytes()
    return deserialize(memoryview(buf), obj.metadata, **kwargs)


class MyList(list[Any]):
    pass


class MyDict(dict[str, Any]):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.note = "kept"


@dataclasses.dataclass
class Point:
    x: int
    y: float = 0.0
    tags: list[str] = dataclasses.field(default_factory=list)


Pair = collections.namedtuple("Pair", ["left", "right"])


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self) -> None:
        self.a = 1
        self.b = threading.Lock()


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(2**70),
        3.5,
        float("inf"),
        1 + 2j,
        "",
        "héllo wörld",
        "x" * 100_000,
        (),
        (1, "a", 2.0),
        [1, [2, [3, [4]]]],
        {"a": [1, 2], "b": {"c": (3, 4)}, 5: None},
        {1, 2, 3},
        frozenset({"a"}),
        fractions.Fraction(1, 3),
        list(range(1000)),
        Point(1, 2.5, ["t"]),
        Pair(1, [2]),
        b"bytes as a subclass field",  # (as a value: RAW, see below)
    ],
)
def test_roundtrip_values(value: Any) -> None:
    assert roundtrip(value) == value


def test_bytes_are_raw() -> None:
    for value in (b"", b"\x00\x01abc" * 1000, bytearray(b"mutable")):
        obj = serialize(value)
        assert obj.metadata == b"RAW"
        assert obj.total_bytes == len(value)
        assert obj.to_bytes() == bytes(value)
        assert roundtrip(value) == bytes(value)


def test_bytes_subclass_and_nested_bytes_are_pickled() -> None:
    class B(bytes):
        pass

    assert serialize(B(b"x")).metadata == b"PICKLE5"
    out = roundtrip(B(b"x"))
    assert type(out) is B and out == b"x"
    assert roundtrip([b"a", bytearray(b"b")]) == [b"a", bytearray(b"b")]


def test_subclasses_keep_their_type() -> None:
    out = roundtrip(MyList([1, 2]))
    assert type(out) is MyList and out == [1, 2]
    d = roundtrip(MyDict(a=1))
    assert type(d) is MyDict and d == {"a": 1} and d.note == "kept"
    pair = roundtrip(Pair(1, 2))
    assert type(pair) is Pair and pair.right == 2
    od = roundtrip(collections.OrderedDict([("b", 1), ("a", 2)]))
    assert type(od) is collections.OrderedDict and list(od) == ["b", "a"]


def test_aliasing_preserved() -> None:
    l1 = [0]
    l2 = [l1, l1]
    l3 = roundtrip(l2)
    assert l3 == l2
    assert l3[0] is l3[1]
    arr = np.arange(10)
    out = roundtrip({"a": arr, "b": arr})
    assert out["a"] is out["b"]


def test_self_reference() -> None:
    lst: list[Any] = []
    lst.append(lst)
    out = roundtrip(lst)
    assert out[0] is out
    d: dict[str, Any] = {}
    d["self"] = d
    assert roundtrip(d)["self"] is not None


def test_functions_lambdas_closures_classes() -> None:
    factor = 3

    def closure(x: int) -> int:
        return x * factor

    class Local:
        def value(self) -> int:
            return 42

    assert roundtrip(lambda x: x + 1)(1) == 2
    assert roundtrip(closure)(2) == 6
    assert roundtrip(Local)().value() == 42
    assert roundtrip(Local()).value() == 42
    assert roundtrip([len, os.path.join])[1]("a", "b") == os.path.join("a", "b")


def test_main_module_functions_are_pickled_by_value(tmp_path: Any) -> None:
    """A class and function from another process's ``__main__`` load here."""
    script = textwrap.dedent(
        """
        import sys
        from rayfield._private.common.serialization import serialize

        class Point:
            def __init__(self, x):
                self.x = x

        def double(p):
            return p.x * 2

        sys.stdout.buffer.write(serialize([double, Point(21)]).to_bytes())
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    data = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, env=env
    ).stdout
    func, point = deserialize(data, b"PICKLE5")
    assert func(point) == 42


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.int64).reshape(3, 4),
        np.linspace(0, 1, 7, dtype=np.float32),
        np.array([True, False]),
        np.zeros((2, 0, 3)),
        np.array(3.0),
        np.arange(6, dtype=np.complex128).reshape(2, 3),
        np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")]),
        np.asfortranarray(np.arange(20, dtype=np.uint16).reshape(4, 5)),
        np.arange(100).reshape(10, 10)[::2, 1::3],  # non-contiguous
        np.arange(10)[::-1],  # negative stride
        np.array(["a", "bc"]),
        np.array([{"x": 1}, None], dtype=object),
    ],
)
def test_numpy_roundtrip(array: np.ndarray) -> None:
    out = roundtrip(array)
    assert out.dtype == array.dtype and out.shape == array.shape
    if array.dtype != object:
        np.testing.assert_array_equal(out, array)
    else:
        assert list(out) == list(array)


def test_numpy_zero_copy_read_only_and_aligned() -> None:
    arrays: list[np.ndarray] = [
        np.arange(1001, dtype=np.int8),
        np.ones((64, 3)),
        np.arange(5, dtype=np.int32),
    ]
    obj = serialize({"arrays": arrays, "other": "x" * 37})
    assert obj.to_bytes().count(arrays[1].tobytes()) == 1
    buf = bytearray(obj.total_bytes)
    view = memoryview(buf)
    obj.write_to(view)
    out = deserialize(view, obj.metadata)
    source = np.frombuffer(buf, dtype=np.uint8)
    for original, copy in zip(arrays, out["arrays"]):
        np.testing.assert_array_equal(copy, original)
        assert np.shares_memory(copy, source)
        assert not copy.flags.writeable
        with pytest.raises(ValueError):
            copy[...] = 0
        assert (copy.ctypes.data - source.ctypes.data) % 64 == 0
    # the in-band pickle holds no array data
    _, _, _, count, _, inband_len = struct.unpack_from("<4sHHIIQ", buf)
    assert count == 3 and inband_len < 1000


def test_layout_header_and_table() -> None:
    arr = np.arange(100, dtype=np.float64)
    obj = serialize([arr, arr[::-1].copy()])
    data = obj.to_bytes()
    magic, version, flags, count, _, inband_len = struct.unpack_from("<4sHHIIQ", data)
    assert (magic, version, flags, count) == (b"RFSO", 1, 0, 2)
    table = struct.unpack_from("<4Q", data, 24)
    assert table[0] % 64 == 0 and table[2] % 64 == 0
    assert table[0] >= 24 + 32 + inband_len
    assert table[1] == table[3] == 800
    assert data[table[0] : table[0] + 800] == arr.tobytes()
    assert obj.total_bytes == len(data) == table[2] + table[3]


def test_write_to_checks_size_and_accepts_other_formats() -> None:
    obj = serialize(np.arange(3))
    with pytest.raises(ValueError):
        obj.write_to(memoryview(bytearray(obj.total_bytes + 1)))
    with pytest.raises(TypeError):
        obj.write_to(memoryview(bytes(obj.total_bytes)))
    buf = np.zeros(obj.total_bytes, dtype=np.uint8)
    obj.write_to(memoryview(buf))  # type: ignore[arg-type]
    np.testing.assert_array_equal(deserialize(buf.tobytes(), obj.metadata), np.arange(3))


def test_deserialize_from_bytes_and_bad_input() -> None:
    obj = serialize({"k": np.arange(4)})
    assert list(deserialize(obj.to_bytes(), obj.metadata)["k"]) == [0, 1, 2, 3]
    with pytest.raises(SerializationError, match="WHAT"):
        deserialize(obj.to_bytes(), b"WHAT")
    with pytest.raises(SerializationError, match="header"):
        deserialize(b"XXXX" + obj.to_bytes()[4:], b"PICKLE5")
    with pytest.raises(SerializationError, match="truncated"):
        deserialize(obj.to_bytes()[:-1], b"PICKLE5")
    with pytest.raises(SerializationError, match="short"):
        deserialize(b"", b"PICKLE5")
    huge_table = struct.pack("<4sHHIIQ", b"RFSO", 1, 0, 10**6, 0, 0)
    with pytest.raises(SerializationError, match="truncated"):
        deserialize(huge_table, b"PICKLE5")


def test_pyarrow_table_and_array_zero_copy() -> None:
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"a": np.arange(1000), "b": [str(i) for i in range(1000)]})
    obj = serialize(table)
    buf = bytearray(obj.total_bytes)
    obj.write_to(memoryview(buf))
    out = deserialize(memoryview(buf), obj.metadata)
    assert out.equals(table)
    base = np.frombuffer(buf, dtype=np.uint8).ctypes.data
    address = out.column("a").chunk(0).buffers()[1].address
    assert base <= address < base + len(buf) and (address - base) % 64 == 0
    array = pa.array([1, None, 3])
    assert roundtrip(array).equals(array)


def test_heavy_modules_not_imported_eagerly() -> None:
    code = (
        "import sys, rayfield._private.common.serialization; "
        "print('pyarrow' in sys.modules, 'numpy' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=env)
    assert out.stdout.split() == [b"False", b"False"]


class Opaque:
    def __init__(self, payload: Any) -> None:
        self.payload = payload


class OpaqueChild(Opaque):
    pass


@pytest.fixture
def registered() -> Iterator[list[Any]]:
    seen: list[Any] = []

    def to_state(value: Opaque) -> Any:
        seen.append(value)
        return {"payload": value.payload}

    ser.register_custom_serializer(Opaque, to_state, lambda state: Opaque(state["payload"] * 2))
    yield seen
    ser.deregister_custom_serializer(Opaque)


def test_custom_serializer(registered: list[Any]) -> None:
    arr = np.arange(8)
    out = roundtrip([Opaque(arr), Opaque(arr)])
    assert len(registered) == 2
    np.testing.assert_array_equal(out[0].payload, arr * 2)
    # subclasses are not covered by default
    child = roundtrip(OpaqueChild(3))
    assert type(child) is OpaqueChild and child.payload == 3
    ser.register_custom_serializer(
        Opaque, lambda v: v.payload, lambda p: Opaque(-p), include_subclasses=True
    )
    child = roundtrip(OpaqueChild(3))
    assert type(child) is Opaque and child.payload == -3


def test_custom_serializer_state_is_zero_copy(registered: list[Any]) -> None:
    obj = serialize(Opaque(np.ones(1000)))
    assert obj.total_bytes > 8000 and len(obj._buffers) == 1
    ser.deregister_custom_serializer(Opaque)
    assert roundtrip(Opaque(5)).payload == 5


def test_error_names_attribute_path() -> None:
    model = Opaque(None)
    model.lock = threading.Lock()  # type: ignore[attr-defined]
    value = Opaque(None)
    value.model = model  # type: ignore[attr-defined]
    with pytest.raises(SerializationError) as info:
        serialize(value)
    message = str(info.value)
    assert message.startswith("cannot serialize value.model.lock (a _thread.lock): ")
    assert "cannot pickle '_thread.lock' object" in message
    assert info.value.path == "value.model.lock"
    assert isinstance(info.value, TypeError)
    assert info.value.__cause__ is not None


def test_error_paths_in_containers_slots_and_closures() -> None:
    lock = threading.Lock()
    cases = [
        ({"a": [1, (2, lock)]}, "value['a'][1][1]"),
        ([1, Slotted()], "value[1].b"),
        (lambda: lock, "value.<nonlocal lock>"),
        (lock, "value"),
    ]
    for value, path in cases:
        with pytest.raises(SerializationError) as info:
            serialize(value)
        assert info.value.path == path, str(info.value)


def test_error_path_with_cycle() -> None:
    node: dict[str, Any] = {"name": "root"}
    node["child"] = {"parent": node, "gen": (i for i in range(3))}
    with pytest.raises(SerializationError) as info:
        serialize(node)
    assert info.value.path == "value['child']['gen']"
    assert "(a generator)" in str(info.value)


class BadInitError(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a}-{b}")


def test_serialize_error_objects() -> None:
    obj = serialize_error(ValueError("bad value", 3))
    assert obj.metadata == b"ERROR"
    out = deserialize(obj.to_bytes(), b"ERROR")
    assert type(out) is ValueError and out.args == ("bad value", 3)

    try:
        raise BadInitError(1, 2)
    except BadInitError as exc:
        out = deserialize(serialize_error(exc).to_bytes(), b"ERROR")
    assert type(out) is RuntimeError
    assert "test_serialization.BadInitError: 1-2" in str(out)
    assert "raise BadInitError(1, 2)" in str(out)  # the traceback

    unpicklable = ValueError("with lock")
    unpicklable.lock = threading.Lock()  # type: ignore[attr-defined]
    out = deserialize(serialize_error(unpicklable).to_bytes(), b"ERROR")
    assert type(out) is RuntimeError and "ValueError: with lock" in str(out)


class FakeRef:
    """Records itself like the runtime's ObjectRef; rebuilt through the deserialization context."""

    def __init__(self, object_id: bytes, runtime: Any = None) -> None:
        self.object_id = object_id
        self.runtime = runtime

    def __reduce__(self) -> Any:
        context = current_context()
        assert context is not None
        context.contained_refs.append(self)
        return _rebuild_ref, (self.object_id,)


def _rebuild_ref(object_id: bytes) -> FakeRef:
    context = current_deserialization_context()
    assert context is not None
    return FakeRef(object_id, context.extra.get("runtime"))


def test_contained_refs_and_contexts() -> None:
    refs = [FakeRef(b"a"), FakeRef(b"b")]
    assert current_context() is None and current_deserialization_context() is None
    obj = serialize({"refs": refs, "again": refs[0]})
    assert obj.contained_refs == refs  # memoized: the repeated ref is pickled once
    assert current_context() is None
    out = deserialize(obj.to_bytes(), obj.metadata, context_extra={"runtime": "RT"})
    assert [r.object_id for r in out["refs"]] == [b"a", b"b"] and out["again"] is out["refs"][0]
    assert out["refs"][0].runtime == "RT"
    assert current_deserialization_context() is None
    assert serialize(1).contained_refs == [] and serialize([1]).contained_refs == []


def test_contained_refs_not_duplicated_on_cloudpickle_fallback() -> None:
    ref = FakeRef(b"x")
    obj = serialize([ref, lambda: 1])  # plain pickle fails on the lambda, cloudpickle retries
    assert obj.contained_refs == [ref]
    out = deserialize(obj.to_bytes(), obj.metadata)
    assert out[1]() == 1
    assert serialize_error(RuntimeError(ref)).contained_refs == [ref]


def test_contexts_are_per_thread() -> None:
    results: list[Any] = []
    barrier = threading.Barrier(2)

    class Waiter:
        def __reduce__(self) -> Any:
            results.append(current_context())
            barrier.wait(timeout=5)
            return int, ()

    threads = [threading.Thread(target=serialize, args=([Waiter()],)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and results[0] is not results[1]
