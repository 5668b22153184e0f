"""The Kubernetes API client the ``kubernetes`` provider
(:mod:`rayfield.autoscaler.providers.kubernetes`) and its exec runner
(:mod:`rayfield.autoscaler.providers.kubernetes_runner`) share, configured as ``kubectl``
is: inside a cluster from the pod's service account, elsewhere from ``$KUBECONFIG``
(default ``~/.kube/config``), current context. The client (the ``[kubernetes]`` extra) is
imported when the first one is made.
"""

from __future__ import annotations

import os
from typing import Any

from rayfield.autoscaler.provider_base import ProviderError

__all__ = ["api_client"]


def api_client(provider_config: dict[str, Any]) -> Any:
    """A ``kubernetes.client.ApiClient`` of its own (no global configuration is
    changed), configured as ``kubectl`` is (see the module docstring).

    Raises:
        ProviderError: the client is not installed or finds no cluster configuration.
    """
    try:
        from kubernetes import client, config
    except ImportError:
        raise ProviderError(
            "provider type 'kubernetes' needs the kubernetes client: "
            "pip install 'rayfield-autoscaler[kubernetes]'"
        ) from None
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            conf = client.Configuration()
            config.load_incluster_config(client_configuration=conf)
            return client.ApiClient(conf)
        # read $KUBECONFIG now (the client reads it once, at its import)
        path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        return config.new_client_from_config(config_file=path)
    except config.ConfigException as exc:
        raise ProviderError(
            f"no Kubernetes cluster to talk to ({exc}): set KUBECONFIG or run inside a pod"
        ) from None
