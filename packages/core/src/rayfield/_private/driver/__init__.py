"""Cluster operations run by a driver or a command: find, start and stop a cluster's
processes (``launch``), query its state (``state_client``), make test certificates
(``certs``). The public API over them is ``rayfield.util.cluster`` and
``rayfield.util.state``."""
