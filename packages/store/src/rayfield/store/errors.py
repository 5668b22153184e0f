"""Typed errors raised by :mod:`rayfield.store`.

Every error carries ``code``, the protocol's numeric error code
(``schema/common.fbs``, enum ``ErrorCode``), so a reply decoded anywhere maps to
the same class.
"""

from __future__ import annotations

__all__ = [
    "GetTimeoutError",
    "InvalidRequestError",
    "NotAWorkerError",
    "NotOwnerError",
    "ObjectAlreadySealedError",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "ObjectNotSealedError",
    "ObjectTooLargeError",
    "ProtocolMismatchError",
    "StoreConnectionError",
    "StoreError",
    "StoreFullError",
]


class StoreError(Exception):
    """Base class of every error of the object store and node protocol."""

    code = 11  # Internal


class ProtocolMismatchError(StoreError):
    """The client and the node speak different protocol versions.

    Attributes:
        client_version: the version this client speaks.
        node_version: the version the node speaks.
    """

    code = 1

    def __init__(self, message: str, client_version: int = 0, node_version: int = 0) -> None:
        super().__init__(message)
        self.client_version = client_version
        self.node_version = node_version


class InvalidRequestError(StoreError, ValueError):
    """A request was malformed (wrong ID size, negative size, bad argument)."""

    code = 2


class ObjectExistsError(StoreError):
    """An object with this ID was already created on this node."""

    code = 3


class ObjectNotFoundError(StoreError, KeyError):
    """No object with this ID is in the store."""

    code = 4

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ObjectNotSealedError(StoreError):
    """The operation needs a sealed object and this one is still being written."""

    code = 5


class ObjectAlreadySealedError(StoreError):
    """The object is sealed already: it cannot be sealed or aborted again."""

    code = 6


class StoreFullError(StoreError, MemoryError):
    """No space for a new object, even after evicting every unreferenced one.

    Attributes:
        requested_bytes: size of the object that did not fit (data + metadata).
        capacity_bytes: the store's capacity.
        used_bytes: bytes held by objects when the request failed.
    """

    code = 7

    def __init__(
        self, message: str, requested_bytes: int = 0, capacity_bytes: int = 0, used_bytes: int = 0
    ) -> None:
        super().__init__(message)
        self.requested_bytes = requested_bytes
        self.capacity_bytes = capacity_bytes
        self.used_bytes = used_bytes


class ObjectTooLargeError(StoreFullError):
    """The object is larger than the whole store (or than a frame may carry)."""

    code = 8


class NotOwnerError(StoreError):
    """Only the client that created an unsealed object may seal or abort it."""

    code = 9


class GetTimeoutError(StoreError, TimeoutError):
    """A blocking call ran past its timeout."""

    code = 10


class NotAWorkerError(StoreError):
    """A worker-only call (next task, task done) came from a non-worker client."""

    code = 12


class StoreConnectionError(StoreError, ConnectionError):
    """The node's socket could not be reached, or the node closed the connection."""

    code = 11


_BY_CODE: dict[int, type[StoreError]] = {
    cls.code: cls
    for cls in (
        ProtocolMismatchError,
        InvalidRequestError,
        ObjectExistsError,
        ObjectNotFoundError,
        ObjectNotSealedError,
        ObjectAlreadySealedError,
        StoreFullError,
        ObjectTooLargeError,
        NotOwnerError,
        GetTimeoutError,
        NotAWorkerError,
    )
}


def _from_code(
    code: int, message: str, requested: int = 0, capacity: int = 0, used: int = 0
) -> StoreError:
    """Build the exception for a protocol error code (called by the native module)."""
    if code == -1:
        return StoreConnectionError(message)
    cls = _BY_CODE.get(code, StoreError)
    if issubclass(cls, StoreFullError):
        return cls(message, requested, capacity, used)
    if cls is ProtocolMismatchError:
        return cls(message, requested, capacity)
    return cls(message)
