"""Cluster code of the node process and of drivers (agent, GCS records, transfers)."""
