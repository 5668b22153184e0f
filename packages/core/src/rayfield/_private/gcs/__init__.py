"""The GCS (global control store) of a rayfield cluster: server, client, security.

Only processes that talk to the GCS (the head, nodes, drivers connecting to a
cluster) import this package: it imports grpc (through ``rayfield._private.transport``),
which workers never do. Nothing in ``rayfield/__init__.py`` or the worker path may
import it at import time.

- ``server``: the GCS process (``python -m rayfield._private.gcs.server``).
- ``client``: ``GcsClient``, one method per call, retried across GCS restarts.
- ``auth``: the cluster token file.
- ``service``: the methods over the tables and the publisher (``pubsub``).
- ``tables``: the tables and their SQLite persistence.
The messages, records and errors are in ``rayfield._private.protocol``.
"""

from __future__ import annotations

from rayfield._private.gcs.auth import create_token_file, read_token
from rayfield._private.gcs.client import GcsClient
from rayfield._private.protocol.errors import (
    GcsAlreadyExistsError,
    GcsAuthError,
    GcsError,
    GcsInvalidRequestError,
    GcsNotFoundError,
    GcsUnavailableError,
)
from rayfield._private.protocol.types import (
    CHANNEL_ACTOR,
    CHANNEL_NODE_ALIVE,
    CHANNEL_NODE_DEAD,
    ActorInfo,
    ActorState,
    GcsMessage,
    JobInfo,
    NodeInfo,
    ResourceDemand,
)
from rayfield._private.transport import TlsConfig

__all__ = [
    "CHANNEL_ACTOR",
    "CHANNEL_NODE_ALIVE",
    "CHANNEL_NODE_DEAD",
    "ActorInfo",
    "ActorState",
    "GcsAlreadyExistsError",
    "GcsAuthError",
    "GcsClient",
    "GcsError",
    "GcsInvalidRequestError",
    "GcsMessage",
    "GcsNotFoundError",
    "GcsUnavailableError",
    "JobInfo",
    "NodeInfo",
    "ResourceDemand",
    "TlsConfig",
    "create_token_file",
    "read_token",
]
