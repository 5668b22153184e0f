"""A fake of the Kubernetes API server's Pod endpoints (core/v1), as much as the
``kubernetes`` provider uses: create (``generateName``), get, list with an equality
label selector, JSON-patch of labels, delete. Pods are ``Pending`` when created and
``Running`` (with a pod IP) from the next read, as a scheduled pod becomes. Requests
need the bearer token of the test's kubeconfig; label values are checked as the API
server checks them (422 when invalid)."""

from __future__ import annotations

import copy
import itertools
import re
import threading
from typing import Any

TOKEN = "fake-kube-token"
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?$")


def _status(code: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
    return code, {**body, "reason": reason, "message": message, "code": code}


class FakeKubernetes:
    """The state and the request handler (give :meth:`handle` to ``FakeAPIServer``)."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def handle(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        if headers.get("authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized", "no valid bearer token")
        m = _PODS.match(path)
        if not m:
            return _status(404, "NotFound", f"no route {path}")
        ns, name = m.groups()
        with self._lock:
            if name is None and method == "GET":
                return 200, self._list(ns, query.get("labelSelector", ""))
            if name is None and method == "POST":
                return self._create(ns, body)
            pod = self.pods.get((ns, name or ""))
            if pod is None:
                return _status(404, "NotFound", f'pods "{name}" not found')
            if method == "GET":
                return 200, self._advance(pod)
            if method == "PATCH":
                return self._patch(pod, body, headers.get("content-type", ""))
            if method == "DELETE":
                del self.pods[(ns, name or "")]
                return 200, pod
        return _status(405, "MethodNotAllowed", method)

    def _advance(self, pod: dict[str, Any]) -> dict[str, Any]:
        if pod["status"]["phase"] == "Pending":
            pod["status"] = {"phase": "Running", "podIP": f"10.1.0.{len(self.pods) + 1}"}
            return copy.deepcopy({**pod, "status": {"phase": "Pending"}})  # seen once pending
        return copy.deepcopy(pod)

    def _list(self, ns: str, selector: str) -> dict[str, Any]:
        wanted = dict(kv.split("=", 1) for kv in selector.split(",") if kv)
        items = [
            self._advance(p)
            for (pns, _), p in sorted(self.pods.items())
            if pns == ns and all(p["metadata"]["labels"].get(k) == v for k, v in wanted.items())
        ]
        return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}

    def _bad_labels(self, labels: dict[str, str]) -> tuple[int, Any] | None:
        for k, v in labels.items():
            if not isinstance(v, str) or len(v) > 63 or not _VALUE.match(v):
                return _status(422, "Invalid", f"metadata.labels: Invalid value: {v!r} for {k}")
        return None

    def _create(self, ns: str, pod: dict[str, Any]) -> tuple[int, Any]:
        meta = pod.setdefault("metadata", {})
        if "generateName" in meta:
            meta["name"] = f"{meta['generateName']}{next(self._ids):05d}"
        bad = self._bad_labels(meta.get("labels", {}))
        if bad:
            return bad
        meta.update(namespace=ns, uid=f"uid-{meta['name']}")
        pod["status"] = {"phase": "Pending"}
        self.pods[(ns, meta["name"])] = pod
        return 201, copy.deepcopy(pod)

    def _patch(self, pod: dict[str, Any], patch: Any, content_type: str) -> tuple[int, Any]:
        if "json-patch" not in content_type or not isinstance(patch, list):
            return _status(
                415, "UnsupportedMediaType", f"this fake takes JSON patches, not {content_type}"
            )
        labels = dict(pod["metadata"]["labels"])
        for op in patch:
            prefix = "/metadata/labels/"
            if op["op"] not in ("add", "replace") or not op["path"].startswith(prefix):
                return _status(422, "Invalid", f"unsupported patch {op}")
            key = op["path"][len(prefix) :].replace("~1", "/").replace("~0", "~")
            labels[key] = op["value"]
        bad = self._bad_labels(labels)
        if bad:
            return bad
        pod["metadata"]["labels"] = labels
        return 200, copy.deepcopy(pod)
