"""The AWS client the ``aws`` provider (:mod:`rayfield.autoscaler.providers.aws`) and its
bootstrap (:mod:`rayfield.autoscaler.providers.aws_bootstrap`) share: one boto3 session
per process, and the text of a botocore error. boto3 (the ``[aws]`` extra) is imported
when the first client is made.
"""

from __future__ import annotations

import threading
from typing import Any

from rayfield.autoscaler.provider_base import ProviderError

__all__ = ["aws_client", "aws_error"]


# One boto3 session for the process: it loads each service's model (megabytes of JSON)
# once, not per client.
_session: Any = None
_session_lock = threading.Lock()


def aws_client(provider_config: dict[str, Any], service: str) -> Any:
    """A boto3 client of ``service`` ("ec2", "iam") for the provider's region.

    ``provider.endpoint_url`` sends the calls elsewhere than AWS (a moto server, a
    mirror); credentials come from boto3's usual chain (environment, ``~/.aws``, the
    instance profile).

    Raises:
        ProviderError: boto3 is not installed, or no region is set.
    """
    try:
        import boto3
    except ImportError:
        raise ProviderError(
            "provider type 'aws' needs boto3: pip install 'rayfield-autoscaler[aws]'"
        ) from None
    region = provider_config.get("region")
    if not region:
        raise ProviderError("provider type 'aws' needs provider.region (e.g. us-west-2)")
    global _session
    with _session_lock:  # a boto3 Session is not thread-safe; its clients are
        if _session is None:
            _session = boto3.session.Session()
        return _session.client(
            service, region_name=region, endpoint_url=provider_config.get("endpoint_url")
        )


def aws_error(exc: Exception) -> str:
    """``Code: message`` of a botocore ClientError (which never carries credentials)."""
    err = getattr(exc, "response", {}).get("Error", {})
    return f"{err.get('Code', type(exc).__name__)}: {err.get('Message', exc)}"
