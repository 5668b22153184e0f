"""Errors of the GCS service and its client.

The server raises these from its tables; the service layer turns each into the
gRPC status named by ``status`` and the client turns the status back into the
same class, so callers on both sides catch one family of exceptions.
This module does not import grpc.
"""

from __future__ import annotations

__all__ = [
    "GcsAlreadyExistsError",
    "GcsAuthError",
    "GcsError",
    "GcsInvalidRequestError",
    "GcsNotFoundError",
    "GcsUnavailableError",
    "NodeCallError",
]


class GcsError(Exception):
    """Base class of every GCS error; ``status`` is the gRPC status code's name."""

    status = "INTERNAL"


class GcsUnavailableError(GcsError):
    """The GCS could not be reached before the client's retry deadline."""

    status = "UNAVAILABLE"


class GcsAuthError(GcsError):
    """The call was refused: missing or wrong cluster token, or a TLS mismatch."""

    status = "UNAUTHENTICATED"


class GcsInvalidRequestError(GcsError, ValueError):
    """The request was malformed or its values are out of range."""

    status = "INVALID_ARGUMENT"


class GcsNotFoundError(GcsError, KeyError):
    """The request names a record (job, actor, node) that the GCS does not have."""

    status = "NOT_FOUND"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class GcsAlreadyExistsError(GcsError):
    """The request would take a name that a live record already holds."""

    status = "ALREADY_EXISTS"


_BY_STATUS: dict[str, type[GcsError]] = {
    cls.status: cls
    for cls in (
        GcsUnavailableError,
        GcsAuthError,
        GcsInvalidRequestError,
        GcsNotFoundError,
        GcsAlreadyExistsError,
    )
}


def error_for_status(status: str, message: str) -> GcsError:
    """Return the GcsError subclass instance for a gRPC status name."""
    return _BY_STATUS.get(status, GcsError)(message)


class NodeCallError(Exception):
    """A call to one node's service failed (the state API's node calls raise it).

    Attributes:
        status: the gRPC status name, e.g. ``"UNAVAILABLE"`` (the node did not answer in
            time or is gone) or ``"NOT_FOUND"``.
        details: the status text the node or the transport gave.
        address: the node's HOST:PORT.
    """

    def __init__(self, status: str, details: str, address: str = "") -> None:
        where = f" (node {address})" if address else ""
        super().__init__(f"{status}: {details}{where}")
        self.status = status
        self.details = details
        self.address = address
