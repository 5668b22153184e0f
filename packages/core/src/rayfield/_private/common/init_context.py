"""What ``rayfield.init()`` returns: the address information as a dict that also answers
Ray 2's ``RayContext`` attributes."""

from __future__ import annotations

from typing import Any

__all__ = ["InitContext"]


class InitContext(dict[str, Any]):
    """``init()``'s address information (``node_ip_address``, ``session_dir``,
    ``object_store_address``, ``webui_url``, and for a cluster ``gcs_address``), readable
    as a dict (the classic API) and through Ray 2's ``RayContext`` attributes:

    - ``dashboard_url``: the cluster's dashboard (``http(s)://HOST:PORT``, as
      ``JobSubmissionClient`` takes it), or None when it has none (the embedded local
      runtime never has one);
    - ``address_info``: the dict itself (a copy).
    """

    @property
    def dashboard_url(self) -> str | None:
        url = self.get("webui_url")
        return str(url).rstrip("/") if url else None

    @property
    def address_info(self) -> dict[str, Any]:
        return dict(self)
