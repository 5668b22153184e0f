"""The node manager: everything that runs in a node's process.

Layer: it imports only the common modules below it (``_private`` basics, the protocol
messages), the GCS client, ``rayfield.store`` and ``rayfield.exceptions``.

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
    task_spec, ids: typed task specs, and the id layout the node reads.
"""
