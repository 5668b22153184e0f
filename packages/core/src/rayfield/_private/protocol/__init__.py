"""The wire format of the cluster: flatbuffers messages of the GCS and of the nodes.

- ``constants``: ID_SIZE, RESOURCE_UNIT, MAX_MESSAGE_BYTES.
- ``errors``: the GCS error family (one per gRPC status).
- ``types``: the typed records of the GCS tables (NodeInfo, ActorInfo, ...).
- ``codec``: the declarative encoder: each table described once in ``SPECS``.
- ``messages``: the node-to-node messages (tasks forwarded, objects fetched and pushed),
  on the codec's primitives for ids and resources.

No module here imports grpc.
"""
