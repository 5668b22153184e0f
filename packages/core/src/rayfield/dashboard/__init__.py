"""The rayfield dashboard: a web page over a cluster's state, served by the head.

Run it with ``rayfield start --head --include-dashboard`` (or on its own as
``python -m rayfield.dashboard --gcs-address HOST:PORT --token-file F``); ``rayfield
dashboard`` prints its URL. It needs the ``dashboard`` extra of rayfield-core
(``pip install 'rayfield-core[dashboard]'``, which brings aiohttp).

It listens on loopback unless told otherwise, serves HTTPS when given a certificate
(``rayfield start --dashboard-tls-cert/--dashboard-tls-key``, or the cluster's
``--tls-cert/--tls-key``), asks for the cluster token at
``/login``, and checks the Host and Origin headers of every request (see
:mod:`rayfield.dashboard.security`). Importing this package imports nothing heavy.
"""

from __future__ import annotations

__all__ = ["DEFAULT_PORT", "KV_CERT_KEY", "KV_KEY", "KV_NAMESPACE"]

DEFAULT_PORT = 8265
# Where the running dashboard publishes its URL in the GCS KV store.
KV_NAMESPACE = "dashboard"
KV_KEY = b"url"
# And, when it serves HTTPS, its certificate (PEM; empty under plain HTTP).
KV_CERT_KEY = b"cert"
