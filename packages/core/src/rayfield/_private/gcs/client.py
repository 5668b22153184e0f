"""``GcsClient``: one Python method per GCS call, transparent to GCS restarts.

Every call is retried on UNAVAILABLE with exponential backoff (50 ms doubling
to 1 s) until ``retry_deadline_s`` has passed since the first attempt, so a GCS
that is restarted on the same address within that time is invisible to callers
(a retried call may be applied twice: the calls are idempotent, except that a
retried ``kv_put(overwrite=False)`` may answer False for a key it added).
Calls go through ``rayfield._private.transport``.

Example:
    >>> client = GcsClient("127.0.0.1:6379", token)          # doctest: +SKIP
    >>> client.kv_put("fn", b"key", b"value")                 # doctest: +SKIP
    True
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

from rayfield._private import transport
from rayfield._private.protocol import codec
from rayfield._private.protocol.constants import MAX_MESSAGE_BYTES
from rayfield._private.protocol.errors import GcsError, GcsUnavailableError, error_for_status
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
from rayfield._private.transport import TlsConfig, auth_metadata, open_channel

__all__ = ["GcsClient", "GcsSubscription"]

_RECORD_OF_CHANNEL = {
    CHANNEL_NODE_ALIVE: "GcsNodeInfo",
    CHANNEL_NODE_DEAD: "GcsNodeInfo",
    CHANNEL_ACTOR: "GcsActorInfo",
}

_KEY = str | bytes


def _key(key: _KEY) -> bytes:
    return key.encode() if isinstance(key, str) else bytes(key)


class GcsClient:
    """Client of one GCS.

    Args:
        address: ``host:port`` of the GCS.
        token: the cluster token (see ``auth.read_token``).
        tls: mutual TLS settings; None reads RAYFIELD_TLS_CERT/KEY/CA (plaintext
            when unset); False forces plaintext.
        timeout_s: limit of one attempt of a call.
        retry_deadline_s: how long UNAVAILABLE is retried before giving up.
        max_message_bytes: largest reply accepted and request sent.

    Every method raises ``GcsUnavailableError`` when the GCS stays unreachable
    past ``retry_deadline_s`` (or does not answer an attempt within
    ``timeout_s``), ``GcsAuthError`` when the token is refused, and
    ``GcsInvalidRequestError`` when the GCS cannot decode the request.
    """

    def __init__(
        self,
        address: str,
        token: str,
        tls: TlsConfig | bool | None = None,
        timeout_s: float = 10.0,
        retry_deadline_s: float = 30.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.retry_deadline_s = retry_deadline_s
        self.metadata = auth_metadata(token)
        tls_config = TlsConfig.from_env() if tls is None else tls
        self._channel = open_channel(  # reconnects within 1 s once a restarted GCS listens
            address,
            tls_config if isinstance(tls_config, TlsConfig) else None,
            max_message_bytes,
            transport.FAST_RECONNECT,
        )
        self._stubs: dict[str, Any] = {
            name: self._channel.unary_unary(f"/{codec.SERVICE}/{name}")
            for name in codec.METHODS
            if name not in codec.STREAMING_METHODS
        }

    def close(self) -> None:
        """Close the channel (of every client made from this one by ``with_limits``)."""
        self._channel.close()

    def with_limits(self, timeout_s: float, retry_deadline_s: float) -> GcsClient:
        """This client with other limits, sharing its channel (opens nothing).

        ``retry_deadline_s=0`` makes a call that fails at once with
        ``GcsUnavailableError`` while the GCS is unreachable, for callers that have
        something better to do than wait: periodic calls (the heartbeat) and lookups with
        another source (the object directory, code that peers also hold).
        """
        view = copy.copy(self)
        view.timeout_s, view.retry_deadline_s = timeout_s, retry_deadline_s
        return view

    def __enter__(self) -> GcsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def error(self, method: str, exc: BaseException) -> GcsError:
        """The GcsError for a failed call (``exc``: the ``transport.RpcError``)."""
        code, details = transport.status(exc)
        if code in transport.UNAVAILABLE_STATUSES:
            return GcsUnavailableError(
                f"GCS at {self.address} unreachable ({method}: {code}, {details}) for "
                f"{self.retry_deadline_s:g} s: check that the GCS runs and listens there and "
                "that its TLS settings match this client's (RAYFIELD_TLS_*)"
            )
        return error_for_status(code, f"GCS {method} failed: {details}")

    def call(self, method: str, values: Any = None) -> dict[str, Any]:
        """Call ``method`` with the request's values; return the decoded reply as a dict.

        Raises:
            GcsError: a subclass chosen by the status of the failure (see the class).
        """
        req_table, rep_table = codec.METHODS[method]
        payload = codec.encode(req_table, values)
        deadline = time.monotonic() + self.retry_deadline_s
        delay = 0.05
        while True:
            try:
                raw = self._stubs[method](payload, timeout=self.timeout_s, metadata=self.metadata)
                return codec.decode(rep_table, raw)
            except transport.RpcError as exc:
                retry = transport.status(exc)[0] == "UNAVAILABLE"
                if not retry or time.monotonic() + delay > deadline:
                    raise self.error(method, exc) from None
            time.sleep(delay)
            delay = min(2 * delay, 1.0)

    # ---- nodes ------------------------------------------------------------------------

    def register_node(self, node: NodeInfo) -> None:
        """Register (or re-register) ``node`` as alive; subscribers get NODE_ALIVE."""
        self.call("RegisterNode", {"node": node})

    def heartbeat(
        self,
        node_id: bytes,
        resources_available: dict[str, float],
        demand: list[ResourceDemand] | None = None,
        idle_duration_s: float = 0.0,
    ) -> bool:
        """Report a node's free resources, pending demand and the seconds it has been
        idle (0.0: busy).

        Returns:
            True when the GCS does not know the node as alive: register it again.
        """
        req = {
            "node_id": node_id,
            "resources_available": resources_available,
            "demand": demand,
            "idle_duration_s": idle_duration_s,
        }
        return bool(self.call("Heartbeat", req)["reregister"])

    def get_nodes(self) -> list[NodeInfo]:
        """Every node known, alive or dead."""
        return list(self.call("GetNodes")["nodes"])

    def unregister_node(self, node_id: bytes) -> None:
        """Declare a node dead (clean stop). Raises GcsNotFoundError if never registered."""
        self.call("UnregisterNode", {"node_id": node_id})

    # ---- key-value -----------------------------------------------------------------

    def kv_put(self, namespace: str, key: _KEY, value: bytes, overwrite: bool = True) -> bool:
        """Store ``value`` under ``key``; return True when the key was new."""
        req = {"namespace": namespace, "key": _key(key), "value": value, "overwrite": overwrite}
        return bool(self.call("KvPut", req)["added"])

    def kv_get(self, namespace: str, key: _KEY) -> bytes | None:
        """The value under ``key``, or None."""
        reply = self.call("KvGet", {"namespace": namespace, "key": _key(key)})
        return reply["value"] if reply["found"] else None

    def kv_del(self, namespace: str, key: _KEY) -> bool:
        """Delete ``key``; return whether it existed."""
        return bool(self.call("KvDel", {"namespace": namespace, "key": _key(key)})["deleted"])

    def kv_keys(self, namespace: str, prefix: _KEY = b"") -> list[bytes]:
        """Keys of ``namespace`` that start with ``prefix``, sorted."""
        return list(self.call("KvKeys", {"namespace": namespace, "prefix": _key(prefix)})["keys"])

    # ---- actors ----------------------------------------------------------------------

    def register_actor(self, actor: ActorInfo) -> None:
        """Record an actor. Raises GcsAlreadyExistsError when a live actor has its name."""
        self.call("RegisterActor", {"actor": actor})

    def update_actor(self, actor_id: bytes, state: ActorState, node_id: bytes = b"") -> None:
        """Set an actor's state (and node). Raises GcsNotFoundError for an unknown actor."""
        self.call("UpdateActor", {"actor_id": actor_id, "state": int(state), "node_id": node_id})

    def get_actor(
        self, actor_id: bytes = b"", name: str = "", namespace: str = "default"
    ) -> ActorInfo | None:
        """The actor with ``actor_id``, else the live actor called ``name``; None if none."""
        req = {"actor_id": actor_id, "name": name, "namespace": namespace}
        reply = self.call("GetActor", req)
        return reply["actor"] if reply["found"] else None

    def list_actors(self) -> list[ActorInfo]:
        """Every actor recorded, dead ones included."""
        return list(self.call("ListActors")["actors"])

    # ---- object directory -------------------------------------------------------------

    def add_object_locations(self, node_id: bytes, object_ids: list[bytes]) -> None:
        """Record that a node holds these objects (20-byte ids).

        Raises GcsNotFoundError when the node is not registered as alive.
        """
        self.call("AddObjectLocations", {"node_id": node_id, "object_ids": object_ids})

    def remove_object_locations(self, node_id: bytes, object_ids: list[bytes]) -> None:
        """Forget that a node holds these objects (``node_id`` empty: every node, the
        objects were freed)."""
        self.call("RemoveObjectLocations", {"node_id": node_id, "object_ids": object_ids})

    def get_object_locations(self, object_ids: list[bytes]) -> dict[bytes, list[bytes]]:
        """For each object id, the ids of the alive nodes that hold it."""
        reply = self.call("GetObjectLocations", {"object_ids": object_ids})
        return {loc["object_id"]: loc["node_ids"] for loc in reply["locations"]}

    # ---- jobs and task events -----------------------------------------------------------

    def add_job(
        self, job_id: bytes, driver_pid: int, node_id: bytes = b"", entrypoint: str = ""
    ) -> None:
        """Record a running job."""
        job = JobInfo(job_id, driver_pid=driver_pid, node_id=node_id, entrypoint=entrypoint)
        self.call("AddJob", {"job": job})

    def mark_job_finished(self, job_id: bytes) -> None:
        """Record a job as finished. Raises GcsNotFoundError for an unknown job."""
        self.call("MarkJobFinished", {"job_id": job_id})

    def list_jobs(self) -> list[JobInfo]:
        """Every job recorded."""
        return list(self.call("ListJobs")["jobs"])

    def add_task_events(self, events: list[bytes]) -> None:
        """Append opaque task events (the GCS keeps the most recent 100k)."""
        self.call("AddTaskEvents", {"events": events})

    def get_task_events(self, limit: int = 0) -> list[bytes]:
        """The most recent ``limit`` task events (0: all kept), oldest first."""
        return list(self.call("GetTaskEvents", {"limit": limit})["events"])

    # ---- pub/sub ----------------------------------------------------------------------

    def publish(self, channel: str, key: _KEY, payload: bytes) -> None:
        """Publish a message to the subscribers of ``channel`` (Subscribe streams)."""
        self.call("Publish", {"channel": channel, "key": _key(key), "payload": payload})

    def subscribe(self, channels: list[str]) -> GcsSubscription:
        """Open a Subscribe stream for ``channels`` (empty: every channel); returns once
        the GCS confirmed it. One try, no retry: a caller that wants the stream back
        after a GCS restart subscribes again.

        Raises:
            GcsUnavailableError: the GCS could not be reached.
            GcsError: another refusal, e.g. ``GcsTooManySubscribersError``
                (RESOURCE_EXHAUSTED) when the GCS serves its most streams.
        """
        stream = self._channel.unary_stream(f"/{codec.SERVICE}/Subscribe")
        request = codec.encode("GcsSubscribeRequest", {"channels": channels})
        call = stream(request, metadata=self.metadata)
        try:
            next(call)  # the confirmation: an empty channel
        except transport.RpcError as exc:
            call.cancel()
            raise self.error("Subscribe", exc) from None
        except StopIteration:
            why = f"the GCS at {self.address} ended a new subscription before confirming it"
            raise GcsUnavailableError(why) from None
        return GcsSubscription(self, call)


class GcsSubscription:
    """An open Subscribe stream (see :meth:`GcsClient.subscribe`): iterate it for the
    messages, :meth:`cancel` it (from any thread) to end it.

    Iterating yields :class:`GcsMessage` values; the records of the built-in channels
    (``NODE_ALIVE``, ``NODE_DEAD``: ``NodeInfo``; ``ACTOR``: ``ActorInfo``) are decoded
    into ``value``. It ends without error when cancelled, and raises ``GcsError`` when the
    stream breaks (the GCS stopped, or dropped this subscriber for falling behind).
    """

    def __init__(self, client: GcsClient, call: Any) -> None:
        self._client = client
        self._call = call
        self.cancelled = False

    def __iter__(self) -> Iterator[GcsMessage]:
        try:
            for raw in self._call:
                fields = codec.decode("GcsPubSubMessage", raw)
                message = GcsMessage(fields["channel"], fields["key"], fields["payload"])
                table = _RECORD_OF_CHANNEL.get(message.channel)
                if table is not None:
                    message.value = codec.decode_record(table, message.payload)
                yield message
        except transport.RpcError as exc:
            if not self.cancelled:
                raise self._client.error("Subscribe", exc) from None

    def cancel(self) -> None:
        """End the stream; an iteration in progress ends."""
        self.cancelled = True
        self._call.cancel()
