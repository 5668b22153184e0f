"""Serialization of values for the object store and for messages.

Values are pickled with protocol 5. Buffers that support out-of-band pickling (numpy arrays,
pyarrow buffers, arrays and tables, ``pickle.PickleBuffer``) are not copied into the pickle
stream: they are written next to it, each at a 64-byte aligned offset, and read back as
zero-copy, read-only views. Plain :mod:`pickle` is tried first because it is several times
faster; cloudpickle (by-value pickling of functions and classes from ``__main__``, lambdas,
closures, local classes) takes over when plain pickle fails, when the stream references
``__main__``, for functions and classes themselves, and when custom serializers are registered.
Aliasing and self-references are preserved, and subclasses of builtin containers keep their type.

Metadata tags (stored by the object store next to the data):

* ``b"RAW"``: ``bytes``/``bytearray`` stored as is; read back as ``bytes``.
* ``b"PICKLE5"``: any other value, in the layout below.
* ``b"ERROR"``: an exception stored as a task's result, in the layout below.

Layout of ``PICKLE5`` and ``ERROR`` data (little-endian; offsets from the start of the data,
which the store allocates 64-byte aligned, so that buffers are aligned in memory too)::

    0    4  magic b"RFSO"
    4    2  u16 layout version (1)
    6    2  u16 flags (0)
    8    4  u32 number of out-of-band buffers n
    12   4  u32 reserved (0)
    16   8  u64 length of the in-band pickle L
    24   16*n  buffer table: (u64 offset, u64 length) per buffer, in pickle order
    24+16n  L  the in-band pickle stream
    ...     zero padding up to the next multiple of 64, then buffer 0, padding, buffer 1, ...

``total_bytes`` is the end of the last buffer (or of the pickle stream when n is 0).
"""

from __future__ import annotations

import contextvars
import io
import pickle
import struct
import types
from collections.abc import Callable
from typing import Any

import cloudpickle

from rayfield._private.common.serialization_errors import (
    SerializationError,
    describe_failure,
    substitute_error,
)

__all__ = [
    "DeserializationContext",
    "SerializationContext",
    "SerializationError",
    "SerializedObject",
    "current_context",
    "current_deserialization_context",
    "deregister_custom_serializer",
    "deserialize",
    "register_custom_serializer",
    "serialize",
    "serialize_error",
]

RAW = b"RAW"
PICKLE5 = b"PICKLE5"
ERROR = b"ERROR"

MAGIC = b"RFSO"
LAYOUT_VERSION = 1
ALIGNMENT = 64
_HEADER = struct.Struct("<4sHHIIQ")
_ZEROS = bytes(ALIGNMENT)
_ATOMS = frozenset({int, float, bool, complex, str, type(None)})
_CODE_TYPES = (types.FunctionType, type)
# Modules registered with cloudpickle.register_pickle_by_value; plain pickle would pickle their
# functions by reference. If this cloudpickle hides the registry, never use the plain fast path.
_BY_VALUE_MODULES: Any = getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", {"?"})


class SerializationContext:
    """State of one running :func:`serialize` call, returned by :func:`current_context`.

    Attributes:
        contained_refs: objects that recorded themselves while being pickled (the runtime's
            ``ObjectRef.__reduce__`` and ``ActorHandle.__reduce__`` append ``self``).
    """

    __slots__ = ("contained_refs",)

    def __init__(self) -> None:
        self.contained_refs: list[Any] = []


class DeserializationContext:
    """State of one running :func:`deserialize` call (see :func:`current_deserialization_context`).

    Attributes:
        extra: what the caller passed as ``context_extra`` (e.g. the runtime, so that rebuilt
            object refs can find it); an empty dict when nothing was passed.
    """

    __slots__ = ("extra",)

    def __init__(self, extra: dict[str, Any]) -> None:
        self.extra = extra


_SER_CTX: contextvars.ContextVar[SerializationContext | None] = contextvars.ContextVar(
    "rayfield_serialization_context", default=None
)
_DESER_CTX: contextvars.ContextVar[DeserializationContext | None] = contextvars.ContextVar(
    "rayfield_deserialization_context", default=None
)


def current_context() -> SerializationContext | None:
    """Return the context of the :func:`serialize` call running in this thread, or ``None``."""
    return _SER_CTX.get()


def current_deserialization_context() -> DeserializationContext | None:
    """Return the context of the :func:`deserialize` call running in this thread, or ``None``."""
    return _DESER_CTX.get()


# Custom serializers: cls -> (serializer, deserializer). Replaced, never mutated, on registration.
_exact: dict[type, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {}
_subclasses: dict[type, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {}


def register_custom_serializer(
    cls: type,
    serializer: Callable[[Any], Any],
    deserializer: Callable[[Any], Any],
    *,
    include_subclasses: bool = False,
) -> None:
    """Serialize instances of ``cls`` as ``deserializer(serializer(value))``.

    ``serializer(value)`` runs at serialization time and its result is serialized normally (it
    may hold numpy arrays, which stay zero-copy); ``deserializer`` is pickled by cloudpickle and
    called with that result when reading. The registration is local to this process.

    Args:
        cls: the class whose instances are handled.
        serializer: turns an instance into serializable state; must not return an instance of
            ``cls`` itself (that would recurse forever).
        deserializer: rebuilds the instance from that state.
        include_subclasses: also handle instances of subclasses of ``cls`` (by default only
            instances whose type is exactly ``cls``).
    """
    global _exact, _subclasses
    deregister_custom_serializer(cls)
    if include_subclasses:
        _subclasses = {**_subclasses, cls: (serializer, deserializer)}
    else:
        _exact = {**_exact, cls: (serializer, deserializer)}


def deregister_custom_serializer(cls: type) -> None:
    """Remove the custom serializer of ``cls``, if any."""
    global _exact, _subclasses
    _exact = {k: v for k, v in _exact.items() if k is not cls}
    _subclasses = {k: v for k, v in _subclasses.items() if k is not cls}


class _Pickler(cloudpickle.CloudPickler):
    """cloudpickle, plus the registered custom serializers."""

    def reducer_override(self, obj: Any) -> Any:
        entry = _exact.get(type(obj))
        if entry is None and _subclasses:
            entry = next((_subclasses[c] for c in type(obj).__mro__ if c in _subclasses), None)
        if entry is not None:
            return entry[1], (entry[0](obj),)
        return super().reducer_override(obj)


def _cloudpickle(value: Any, buffer_callback: Callable[[pickle.PickleBuffer], Any]) -> bytes:
    stream = io.BytesIO()
    _Pickler(stream, 5, buffer_callback=buffer_callback).dump(value)
    return stream.getvalue()


def _probe(value: Any) -> None:
    """Pickle ``value`` like :func:`serialize` does, discarding the result (errors only)."""
    _cloudpickle(value, lambda buffer: False)


class SerializedObject:
    """A serialized value, ready to be written into a buffer of ``total_bytes`` bytes.

    The out-of-band buffers are views of the original value (not copies) until
    :meth:`write_to` runs: write before the value is mutated.

    Attributes:
        metadata: the tag (``b"RAW"``, ``b"PICKLE5"`` or ``b"ERROR"``) to store next to the data
            and to pass to :func:`deserialize`.
        total_bytes: size of the data in bytes.
        contained_refs: the objects (object refs, actor handles) recorded while pickling.
    """

    __slots__ = (
        "_buffers",
        "_head",
        "_inband",
        "_offsets",
        "contained_refs",
        "metadata",
        "total_bytes",
    )

    def __init__(
        self,
        metadata: bytes,
        inband: bytes | memoryview,
        buffers: list[memoryview],
        contained_refs: list[Any],
    ) -> None:
        self.metadata = metadata
        self.contained_refs = contained_refs
        self._inband = inband
        self._buffers = buffers
        size = len(inband)
        if not buffers:
            self._offsets: list[int] | tuple[()] = ()
            if metadata == RAW:
                self._head = b""
                self.total_bytes = size
            else:
                self._head = _HEADER.pack(MAGIC, LAYOUT_VERSION, 0, 0, 0, size)
                self.total_bytes = _HEADER.size + size
            return
        end = _HEADER.size + 16 * len(buffers) + size
        offsets = self._offsets = []
        table: list[int] = []
        for buffer in buffers:
            offset = -(-end // ALIGNMENT) * ALIGNMENT
            offsets.append(offset)
            end = offset + buffer.nbytes
            table += (offset, buffer.nbytes)
        head = _HEADER.pack(MAGIC, LAYOUT_VERSION, 0, len(buffers), 0, size)
        self._head = head + struct.pack(f"<{len(table)}Q", *table)
        self.total_bytes = end

    def write_to(self, dest: memoryview) -> None:
        """Write the data into ``dest`` (writable, contiguous, exactly ``total_bytes`` long).

        Raises:
            ValueError: ``dest`` has the wrong size.
            TypeError: ``dest`` is read-only.
        """
        if dest.ndim != 1 or dest.format != "B":
            dest = dest.cast("B")
        if dest.nbytes != self.total_bytes:
            raise ValueError(f"dest has {dest.nbytes} bytes, expected {self.total_bytes}")
        head, inband = self._head, self._inband
        end = len(head)
        dest[:end] = head
        dest[end : end + len(inband)] = inband
        end += len(inband)
        for offset, buffer in zip(self._offsets, self._buffers):
            dest[end:offset] = _ZEROS[: offset - end]
            end = offset + buffer.nbytes
            dest[offset:end] = buffer

    def to_bytes(self) -> bytes:
        """Return the data as one ``bytes`` object (one copy of each buffer)."""
        parts: list[bytes | memoryview] = [self._head, self._inband]
        end = len(self._head) + len(self._inband)
        for offset, buffer in zip(self._offsets, self._buffers):
            parts += (_ZEROS[: offset - end], buffer)
            end = offset + buffer.nbytes
        return b"".join(parts)

    def __repr__(self) -> str:
        return (
            f"SerializedObject(metadata={self.metadata!r}, total_bytes={self.total_bytes}, "
            f"buffers={len(self._buffers)}, contained_refs={len(self.contained_refs)})"
        )


def _pickle(value: Any, metadata: bytes) -> SerializedObject:
    """Pickle ``value`` (plain pickle first, then cloudpickle) inside a serialization context."""
    buffers: list[memoryview] = []

    def buffer_callback(buffer: pickle.PickleBuffer) -> bool:
        try:
            buffers.append(buffer.raw())
        except BufferError:  # neither C- nor Fortran-contiguous: keep it in-band
            return True
        return False

    context = SerializationContext()
    token = _SER_CTX.set(context)
    try:
        if not (_exact or _subclasses or _BY_VALUE_MODULES or isinstance(value, _CODE_TYPES)):
            try:
                inband = pickle.dumps(value, 5, buffer_callback=buffer_callback)
                if b"__main__" not in inband:
                    return SerializedObject(metadata, inband, buffers, context.contained_refs)
            except Exception:
                pass
            buffers.clear()
            context.contained_refs.clear()
        try:
            inband = _cloudpickle(value, buffer_callback)
        except Exception as error:
            raise describe_failure(value, error, _probe) from error
    finally:
        _SER_CTX.reset(token)
    return SerializedObject(metadata, inband, buffers, context.contained_refs)


def serialize(value: Any) -> SerializedObject:
    """Serialize ``value`` for the object store or a message.

    Args:
        value: any picklable value (with cloudpickle's extensions). ``bytes`` and ``bytearray``
            are stored as is with the tag ``b"RAW"``.

    Returns:
        The serialized object; write it with :meth:`SerializedObject.write_to`.

    Raises:
        SerializationError: some part of ``value`` cannot be pickled; the message names its
            attribute path, e.g. ``value.model.lock``.
    """
    cls = type(value)
    if cls is bytes or cls is bytearray:
        return SerializedObject(RAW, memoryview(value), [], [])
    if cls in _ATOMS and not (_exact or _subclasses):
        return SerializedObject(PICKLE5, pickle.dumps(value, 5), [], [])
    return _pickle(value, PICKLE5)


def serialize_error(exc: BaseException) -> SerializedObject:
    """Serialize an exception to be stored as a result, with the tag ``b"ERROR"``.

    If ``exc`` cannot be pickled, or its pickle cannot be loaded back (e.g. an ``__init__`` with
    arguments that ``args`` does not hold), a ``RuntimeError`` carrying its type name, message
    and formatted traceback is stored instead.
    """
    try:
        serialized = _pickle(exc, ERROR)
        if not serialized.contained_refs:  # rebuilding refs could have side effects
            pickle.loads(serialized._inband, buffers=serialized._buffers)
        return serialized
    except Exception:
        return _pickle(substitute_error(exc), ERROR)


def deserialize(
    data: memoryview | bytes | bytearray,
    metadata: bytes,
    *,
    context_extra: dict[str, Any] | None = None,
) -> Any:
    """Rebuild a value from its data and metadata tag.

    Out-of-band buffers come back as zero-copy, read-only views of ``data`` (numpy arrays are
    read-only, pyarrow buffers point into ``data``), so ``data`` must stay valid (mapped and not
    reused) while the value lives; memoryviews keep their exporter alive.

    Args:
        data: what :meth:`SerializedObject.write_to` wrote (or ``to_bytes`` returned).
        metadata: the tag, ``SerializedObject.metadata``.
        context_extra: made available to reducers as
            ``current_deserialization_context().extra`` while the value is rebuilt.

    Returns:
        The value; for ``b"ERROR"`` the exception object (not raised); for ``b"RAW"`` ``bytes``.

    Raises:
        SerializationError: unknown metadata tag, or data that is not in the layout.
        Exception: whatever unpickling raises (e.g. ``ModuleNotFoundError``).
    """
    if metadata != PICKLE5 and metadata != ERROR:
        if metadata == RAW:
            return bytes(data)
        raise SerializationError(f"unknown metadata tag {metadata!r}")
    view = memoryview(data)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    if not view.readonly:
        view = view.toreadonly()
    if view.nbytes < _HEADER.size:
        raise SerializationError(f"serialized data too short ({view.nbytes} bytes)")
    magic, version, _flags, count, _reserved, inband_len = _HEADER.unpack_from(view)
    if magic != MAGIC or version != LAYOUT_VERSION:
        raise SerializationError(f"bad serialized data header: {magic!r} version {version}")
    start = _HEADER.size + 16 * count
    end = start + inband_len
    buffers = None
    if count and start <= view.nbytes:
        table = struct.unpack_from(f"<{2 * count}Q", view, _HEADER.size)
        buffers = [view[table[i] : table[i] + table[i + 1]] for i in range(0, 2 * count, 2)]
        end = max(end, *(table[i] + table[i + 1] for i in range(0, 2 * count, 2)))
    if end > view.nbytes:
        raise SerializationError(f"serialized data truncated: {view.nbytes} of {end} bytes")
    token = _DESER_CTX.set(DeserializationContext({} if context_extra is None else context_extra))
    try:
        return pickle.loads(view[start : start + inband_len], buffers=buffers)
    finally:
        _DESER_CTX.reset(token)
