"""The wire format of the cluster: flatbuffers messages of the GCS and of the nodes.

- ``constants``: ID_SIZE, RESOURCE_UNIT, MAX_MESSAGE_BYTES (defined here only).
- ``errors``: the GCS error family (one per gRPC status).
- ``types``: the typed records of the GCS tables (NodeInfo, ActorInfo, ...).
- ``schema``: every table described once (``SPECS``), and the GCS's methods.
- ``codec``: the one encoder and decoder, driven by ``schema``.
- ``messages``: the node-to-node messages in their Python shapes, over ``codec``.

No module here imports grpc.
"""
