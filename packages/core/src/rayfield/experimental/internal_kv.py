"""The cluster's key-value store (in its GCS), under Ray's names.

``rayfield.experimental.internal_kv`` matches ``ray.experimental.internal_kv``: keys and
values are bytes (a ``str`` is UTF-8 encoded), every call goes to the GCS of the cluster
this process belongs to (a driver's ``init(address=...)``, a worker's node), and values
outlive the jobs that wrote them (the GCS keeps them in its database, across restarts).
Keys live in namespaces; ``namespace=None`` is the default one.

Example:
    >>> from rayfield.experimental import internal_kv as kv
    >>> kv._internal_kv_put("model/version", b"3")          # doctest: +SKIP
    False
    >>> kv._internal_kv_get("model/version")                 # doctest: +SKIP
    b'3'

Every function except ``_internal_kv_initialized`` raises ``RuntimeError`` outside a
cluster (a local ``rayfield.init()`` has no GCS), ``TypeError`` for a key or value that
is neither bytes nor str, and the GCS errors (``rayfield.util.state.GcsError``
subclasses) when the GCS does not answer within 10 s or refuses the token.
"""

from __future__ import annotations

from typing import Any

from rayfield._private.context import gcs_address
from rayfield._private.driver.names import client

__all__ = [
    "DEFAULT_NAMESPACE",
    "_internal_kv_del",
    "_internal_kv_exists",
    "_internal_kv_get",
    "_internal_kv_initialized",
    "_internal_kv_list",
    "_internal_kv_put",
]

DEFAULT_NAMESPACE = "internal_kv"
"""The GCS namespace of ``namespace=None``."""

Key = bytes | str


def _bytes(value: object, what: str) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"internal_kv {what}s are bytes or str, not {type(value).__name__}")


def _namespace(namespace: Key | None) -> str:
    if namespace is None:
        return DEFAULT_NAMESPACE
    return namespace.decode() if isinstance(namespace, bytes) else str(namespace)


def _gcs() -> Any:
    address = gcs_address()
    if address is None:
        raise RuntimeError(
            "internal_kv needs a cluster: the local rayfield.init() has no GCS; start one "
            "with `rayfield start --head` and connect with rayfield.init(address='auto')"
        )
    return client(address)


def _internal_kv_initialized() -> bool:
    """Whether this process belongs to a cluster whose GCS holds the store."""
    return gcs_address() is not None


def _internal_kv_get(key: Key, *, namespace: Key | None = None) -> bytes | None:
    """The value under ``key``, or None when there is none."""
    return _gcs().kv_get(_namespace(namespace), _bytes(key, "key"))


def _internal_kv_exists(key: Key, *, namespace: Key | None = None) -> bool:
    """Whether ``key`` has a value."""
    return _internal_kv_get(key, namespace=namespace) is not None


def _internal_kv_put(
    key: Key, value: Key, overwrite: bool = True, *, namespace: Key | None = None
) -> bool:
    """Store ``value`` under ``key`` (an existing value is replaced only with ``overwrite``).

    Returns:
        True when the key already had a value (Ray's ``already_exists``).
    """
    added = _gcs().kv_put(
        _namespace(namespace), _bytes(key, "key"), _bytes(value, "value"), overwrite
    )
    return not added


def _internal_kv_del(key: Key, *, del_by_prefix: bool = False, namespace: Key | None = None) -> int:
    """Delete ``key`` (with ``del_by_prefix``: every key starting with it).

    Returns:
        How many keys were deleted.
    """
    gcs, ns, raw = _gcs(), _namespace(namespace), _bytes(key, "key")
    keys = gcs.kv_keys(ns, raw) if del_by_prefix else [raw]
    return sum(1 for k in keys if gcs.kv_del(ns, k))


def _internal_kv_list(prefix: Key, *, namespace: Key | None = None) -> list[bytes]:
    """The keys that start with ``prefix``, sorted."""
    return list(_gcs().kv_keys(_namespace(namespace), _bytes(prefix, "prefix")))
