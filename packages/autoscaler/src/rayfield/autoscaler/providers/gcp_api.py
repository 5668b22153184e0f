"""The Google API clients the ``gcp`` provider (:mod:`rayfield.autoscaler.providers.gcp`)
and its bootstrap (:mod:`rayfield.autoscaler.providers.gcp_bootstrap`) share, and the
text of a Google API error. The client library (the ``[gcp]`` extra) is imported when
the first client is made.
"""

from __future__ import annotations

from typing import Any

from rayfield.autoscaler.provider_base import ProviderError

__all__ = ["gcp_error", "google_api"]


def google_api(provider_config: dict[str, Any], api: str = "compute", version: str = "v1") -> Any:
    """A client of a Google API (``compute``, ``iam``, ``cloudresourcemanager``) with
    Application Default Credentials and the library's bundled discovery document.

    ``provider.endpoint_url`` replaces Compute Engine's base URL, and
    ``provider.api_endpoints.<api>`` any API's (a test server, a mirror).

    Raises:
        ProviderError: the client library or the credentials are missing.
    """
    try:
        import google.auth
        from googleapiclient import discovery
    except ImportError:
        raise ProviderError(
            "provider type 'gcp' needs google-api-python-client: "
            "pip install 'rayfield-autoscaler[gcp]'"
        ) from None
    try:
        creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except google.auth.exceptions.DefaultCredentialsError as exc:
        raise ProviderError(f"no Google Cloud credentials ({exc})") from None
    endpoint = provider_config.get("api_endpoints", {}).get(api)
    if api == "compute" and provider_config.get("endpoint_url"):
        endpoint = provider_config["endpoint_url"]
    return discovery.build(
        api,
        version,
        credentials=creds,
        client_options={"api_endpoint": endpoint} if endpoint else None,
        static_discovery=True,
        cache_discovery=False,
    )


def gcp_error(exc: Exception) -> str:
    status = getattr(getattr(exc, "resp", None), "status", None)
    reason = exc._get_reason() if hasattr(exc, "_get_reason") else str(exc)  # HttpError
    return f"HTTP {status}: {reason}" if status else reason
