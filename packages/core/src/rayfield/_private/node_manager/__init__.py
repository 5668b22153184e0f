"""The node manager: everything that runs in a node's process.

Layer: it imports only the layers below it: ``_private/common`` (``ids``,
``session_files``, ``actor_scope``, ``code``: ``is_code`` and ``fetch_into``),
``_private/protocol`` (messages, records, errors), ``_private/transport.py``, the GCS
client and token reading (``_private/gcs``) and ``rayfield.store``; never the context,
the runtime, the driver or the public API.

Modules:
    node: :class:`~.node.Node`, the native core, its worker pool (``worker_pool``), the
        memory monitor (``memory_monitor``) and the thread acting on its events
        (``events``: the typed form of the native core's events).
    node_main: ``python -m rayfield._private.node_manager.node_main``, the node process
        that ``rayfield start`` runs.
    agent: :class:`~.agent.NodeAgent`, which joins a node to a cluster and wires:
    membership: the heartbeat and the view of the other nodes.
    spillback, placement, forwarding: tasks sent to other nodes (decisions in
        ``placement``, batched sending in ``forwarding``).
    arg_pins: arguments pinned for tasks sent elsewhere.
    actor_routing: calls of actors hosted on other nodes.
    fetch_state, object_manager, object_push, transfer: objects between nodes (the fetch
        decisions are the pure state machine in ``fetch_state``).
    recovery, lifecycle: node deaths, actor deaths, drivers that exit, remote cancels.
    node_service: the node's gRPC service, server and peer stubs (the only module of
        the node manager that imports grpc).
    event_shipper: task events sent to the GCS.
    introspect: the answers to the node service's ``Introspect``, ``ListLogs`` and
        ``ReadLog``.
    jobs: the jobs of drivers that left without ``shutdown()``, marked finished.
    task_spec: typed task specs.
"""
