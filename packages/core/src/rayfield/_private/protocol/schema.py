"""What the messages of the cluster hold: each flatbuffers table described once.

``SPECS`` maps a table name to its fields (field name -> kind, in the order the fields
are added to the table); ``CREATE_ORDER`` gives the order a table's children are
written in when it differs; ``RECORDS`` the tables that decode to the typed records of
``types.py``; ``METHODS`` the GCS's gRPC methods. ``codec`` encodes and decodes by
these descriptions.

Kinds: ``STR``, ``SHARED_STR`` (written once per message however often it occurs),
``BYTES``, ``BOOL``, ``INT``, ``FLOAT``, ``RES`` (resource name -> amount), ``ID`` (an
inline UniqueID struct; None when absent), ``IDS`` (a vector of them), ``FLAGS`` (bools
as a ubyte vector), ``STRS``, ``BLOBS`` and ``Table`` (nested, ``many`` for a vector).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rayfield._private.protocol.types import ActorInfo, JobInfo, NodeInfo, ResourceDemand

__all__ = [
    "BLOBS",
    "BOOL",
    "BYTES",
    "CREATE_ORDER",
    "FLAGS",
    "FLOAT",
    "ID",
    "IDS",
    "INT",
    "METHODS",
    "RECORDS",
    "RES",
    "SERVICE",
    "SHARED_STR",
    "SPECS",
    "STR",
    "STREAMING_METHODS",
    "STRS",
    "Table",
]

STR, BYTES, BOOL, INT, FLOAT, RES, IDS, STRS, BLOBS = (
    "str",
    "bytes",
    "bool",
    "int",
    "float",
    "resources",
    "ids",
    "strings",
    "blobs",
)
ID, FLAGS, SHARED_STR = "id", "flags", "shared_str"


@dataclass(frozen=True)
class Table:
    """A nested table field (``many``: a vector of them)."""

    name: str
    many: bool = False


_DEMANDS = Table("GcsResourceDemand", many=True)
SPECS: dict[str, dict[str, Any]] = {
    "GcsEmpty": {},
    "GcsBlob": {"data": BYTES},
    "GcsResourceDemand": {"shape": RES, "count": INT, "infeasible": BOOL},
    "GcsNodeInfo": {
        "node_id": BYTES,
        "address": STR,
        "socket_path": STR,
        "session_dir": STR,
        "hostname": STR,
        "resources_total": RES,
        "resources_available": RES,
        "demand": _DEMANDS,
        "alive": BOOL,
        "last_heartbeat_s": FLOAT,
        "registered_s": FLOAT,
        "death_reason": STR,
        "idle_duration_s": FLOAT,
    },
    "GcsActorInfo": {
        "actor_id": BYTES,
        "name": STR,
        "namespace": STR,
        "detached": BOOL,
        "owner_node_id": BYTES,
        "node_id": BYTES,
        "state": INT,
        "payload": BYTES,
    },
    "GcsJobInfo": {
        "job_id": BYTES,
        "driver_pid": INT,
        "node_id": BYTES,
        "entrypoint": STR,
        "start_time_s": FLOAT,
        "end_time_s": FLOAT,
        "finished": BOOL,
    },
    "GcsRegisterNodeRequest": {"node": Table("GcsNodeInfo")},
    "GcsHeartbeatRequest": {
        "node_id": BYTES,
        "resources_available": RES,
        "demand": _DEMANDS,
        "idle_duration_s": FLOAT,
    },
    "GcsHeartbeatReply": {"reregister": BOOL},
    "GcsGetNodesReply": {"nodes": Table("GcsNodeInfo", many=True)},
    "GcsUnregisterNodeRequest": {"node_id": BYTES},
    "GcsKvPutRequest": {"namespace": STR, "key": BYTES, "value": BYTES, "overwrite": BOOL},
    "GcsKvPutReply": {"added": BOOL},
    "GcsKvKeyRequest": {"namespace": STR, "key": BYTES},
    "GcsKvGetReply": {"found": BOOL, "value": BYTES},
    "GcsKvDelReply": {"deleted": BOOL},
    "GcsKvKeysRequest": {"namespace": STR, "prefix": BYTES},
    "GcsKvKeysReply": {"keys": BLOBS},
    "GcsRegisterActorRequest": {"actor": Table("GcsActorInfo")},
    "GcsUpdateActorRequest": {"actor_id": BYTES, "state": INT, "node_id": BYTES},
    "GcsGetActorRequest": {"actor_id": BYTES, "name": STR, "namespace": STR},
    "GcsGetActorReply": {"found": BOOL, "actor": Table("GcsActorInfo")},
    "GcsListActorsReply": {"actors": Table("GcsActorInfo", many=True)},
    "GcsObjectLocationsRequest": {"node_id": BYTES, "object_ids": IDS},
    "GcsGetObjectLocationsRequest": {"object_ids": IDS},
    "GcsObjectLocations": {"object_id": BYTES, "node_ids": BLOBS},
    "GcsGetObjectLocationsReply": {"locations": Table("GcsObjectLocations", many=True)},
    "GcsAddJobRequest": {"job": Table("GcsJobInfo")},
    "GcsMarkJobFinishedRequest": {"job_id": BYTES},
    "GcsListJobsReply": {"jobs": Table("GcsJobInfo", many=True)},
    "GcsAddTaskEventsRequest": {"events": BLOBS},
    "GcsGetTaskEventsRequest": {"limit": INT},
    "GcsGetTaskEventsReply": {"events": BLOBS, "dropped": INT},
    "GcsPubSubMessage": {"channel": STR, "key": BYTES, "payload": BYTES},
    "GcsSubscribeRequest": {"channels": STRS},
    # Node introspection (cluster.fbs), served by each node's /rayfield.Node service.
    "NodeIntrospectRequest": {"objects": BOOL, "max_objects": INT},
    "WorkerState": {
        "pid": INT,
        "state": STR,
        "cpu_percent": FLOAT,
        "rss_bytes": INT,
        "started_s": FLOAT,
    },
    "RunningTask": {"task_id": BYTES, "pid": INT, "actor_task": BOOL},
    "StoredObject": {
        "object_id": BYTES,
        "data_size": INT,
        "metadata_size": INT,
        "sealed": BOOL,
        "ref_count": INT,
        "pin_count": INT,
        "buffer_count": INT,
        "owner_pid": INT,
        "spilled": BOOL,
        "create_time_ms": INT,
    },
    "NodeIntrospectReply": {
        "node_id": BYTES,
        "address": STR,
        "hostname": STR,
        "session_dir": STR,
        "cpu_percent": FLOAT,
        "memory_used": INT,
        "memory_total": INT,
        "store_capacity": INT,
        "store_used": INT,
        "num_objects": INT,
        "num_spilled": INT,
        "spilled_bytes": INT,
        "resources_total": RES,
        "resources_available": RES,
        "tasks_queued": INT,
        "tasks_waiting": INT,
        "tasks_infeasible": INT,
        "actor_tasks_queued": INT,
        "workers": Table("WorkerState", many=True),
        "running": Table("RunningTask", many=True),
        "objects": Table("StoredObject", many=True),
    },
    "LogFile": {"name": STR, "size": INT, "mtime_s": FLOAT},
    "ListLogsReply": {"files": Table("LogFile", many=True)},
    "ReadLogRequest": {"name": STR, "offset": INT, "max_bytes": INT},
    "ReadLogReply": {"found": BOOL, "size": INT, "offset": INT, "data": BYTES},
    "RemoteKillActorRequest": {"actor_id": BYTES, "no_restart": BOOL},
    "RemoteKillActorReply": {"killed": BOOL, "message": STR},
    "RemoteCancelTaskRequest": {
        "task_id": BYTES,
        "force": BOOL,
        "hops": INT,
        "recursive": BOOL,
    },
    "RemoteCancelTaskReply": {"state": STR},
    "CancelJobRequest": {"job_id": BYTES},
    "CancelJobReply": {"cancelled": INT},
    "DataChannelRequest": {"version": INT},
    "DataChannelReply": {"port": INT},
    # Node-to-node transfers and forwarding (cluster.fbs, node.fbs): messages.py.
    "PullObjectRequest": {"object_id": ID, "timeout_ms": INT},
    "ObjectChunk": {"found": BOOL, "data_size": INT, "offset": INT, "metadata": BYTES},
    "PushObjectRequest": {
        "object_id": ID,
        "sender": STR,
        "data_size": INT,
        "metadata": BYTES,
        "data_inline": BOOL,
    },
    "ObjectIdsRequest": {"object_ids": IDS, "wait_ms": INT},
    "HasObjectsReply": {"present": FLAGS},
    "FetchObjectsRequest": {"object_ids": IDS, "wait_ms": INT, "inline_max_bytes": INT},
    "FetchedObject": {"object_id": ID, "metadata": BYTES, "data": BYTES},
    "FetchObjectsReply": {"present": FLAGS, "objects": Table("FetchedObject", many=True)},
    "SubmitTaskRequest": {
        "task_id": ID,
        "resources": RES,
        "dependencies": IDS,
        "actor_id": ID,
        "actor_creation": BOOL,
        "max_concurrency": INT,
        "caller_id": ID,
        "sequence_no": INT,
        "payload": BYTES,
        "return_ids": IDS,
        "max_retries": INT,
        "actor_handles": IDS,
        "runtime_env": STR,
    },
    "ForwardTaskRequest": {
        "origin": SHARED_STR,
        "task": Table("SubmitTaskRequest"),
        "pushed": IDS,
    },
    "ForwardBatchRequest": {
        "tasks": Table("ForwardTaskRequest", many=True),
        "in_order": BOOL,
    },
    "ForwardTaskReply": {"accepted": BOOL, "message": STR},
    "ForwardBatchReply": {"replies": Table("ForwardTaskReply", many=True)},
}

CREATE_ORDER: dict[str, tuple[str, ...]] = {
    "PushObjectRequest": ("metadata", "sender"),
    "FetchObjectsReply": ("objects", "present"),
    "SubmitTaskRequest": (
        "payload",
        "resources",
        "dependencies",
        "return_ids",
        "actor_handles",
        "runtime_env",
    ),
    "ForwardTaskRequest": ("origin", "pushed", "task"),
}
"""Tables whose children are written in another order than their fields are added."""

RECORDS: dict[str, Callable[..., Any]] = {
    "GcsResourceDemand": ResourceDemand,
    "GcsNodeInfo": NodeInfo,
    "GcsActorInfo": ActorInfo,
    "GcsJobInfo": JobInfo,
}


SERVICE = "rayfield.Gcs"
"""gRPC service name: methods are called as ``/rayfield.Gcs/<Method>``."""

METHODS: dict[str, tuple[str, str]] = {
    "RegisterNode": ("GcsRegisterNodeRequest", "GcsEmpty"),
    "Heartbeat": ("GcsHeartbeatRequest", "GcsHeartbeatReply"),
    "GetNodes": ("GcsEmpty", "GcsGetNodesReply"),
    "UnregisterNode": ("GcsUnregisterNodeRequest", "GcsEmpty"),
    "KvPut": ("GcsKvPutRequest", "GcsKvPutReply"),
    "KvGet": ("GcsKvKeyRequest", "GcsKvGetReply"),
    "KvDel": ("GcsKvKeyRequest", "GcsKvDelReply"),
    "KvKeys": ("GcsKvKeysRequest", "GcsKvKeysReply"),
    "RegisterActor": ("GcsRegisterActorRequest", "GcsEmpty"),
    "UpdateActor": ("GcsUpdateActorRequest", "GcsEmpty"),
    "GetActor": ("GcsGetActorRequest", "GcsGetActorReply"),
    "ListActors": ("GcsEmpty", "GcsListActorsReply"),
    "AddObjectLocations": ("GcsObjectLocationsRequest", "GcsEmpty"),
    "RemoveObjectLocations": ("GcsObjectLocationsRequest", "GcsEmpty"),
    "GetObjectLocations": ("GcsGetObjectLocationsRequest", "GcsGetObjectLocationsReply"),
    "AddJob": ("GcsAddJobRequest", "GcsEmpty"),
    "MarkJobFinished": ("GcsMarkJobFinishedRequest", "GcsEmpty"),
    "ListJobs": ("GcsEmpty", "GcsListJobsReply"),
    "AddTaskEvents": ("GcsAddTaskEventsRequest", "GcsEmpty"),
    "GetTaskEvents": ("GcsGetTaskEventsRequest", "GcsGetTaskEventsReply"),
    "Publish": ("GcsPubSubMessage", "GcsEmpty"),
    "Subscribe": ("GcsSubscribeRequest", "GcsPubSubMessage"),
    # Placement groups: a JSON object each way (gcs/groups.py says what it holds).
    "PlacementGroup": ("GcsBlob", "GcsBlob"),
    "SyncBundles": ("GcsBlob", "GcsBlob"),
}
"""Method name -> (request table, reply table). Subscribe streams its replies."""
STREAMING_METHODS = frozenset({"Subscribe"})
