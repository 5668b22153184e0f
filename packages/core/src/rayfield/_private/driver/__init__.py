"""Cluster operations of a driver or worker process: the GCS actor table and names, job
records, code exports. Imports only ``_private.common``, ``_private.gcs`` and
``_private.context``."""
