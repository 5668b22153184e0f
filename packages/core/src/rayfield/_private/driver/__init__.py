"""Cluster operations of a driver or worker process: the GCS actor table and names, job
records, code exports. Imports only ``_private.common``, ``_private.gcs`` and
``_private.context``."""

"""Cluster operations run by a driver or a command: find, start and stop a cluster's
processes (``launch``), query its state (``state_client``), make test certificates
(``certs``). The public API over them is ``rayfield.util.cluster`` and
``rayfield.util.state``."""
