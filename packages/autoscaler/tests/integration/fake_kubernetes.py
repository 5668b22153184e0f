"""A fake of the Kubernetes API server's Pod endpoints (core/v1), as much as the
``kubernetes`` provider uses: create (``generateName``), get, list with an equality
label selector, JSON-patch of labels, delete. Pods are ``Pending`` when created and
``Running`` (with a pod IP) from the next read, as a scheduled pod becomes. Requests
need the bearer token of the test's kubeconfig; label values are checked as the API
server checks them (422 when invalid).

Also what the provider's bootstrap makes: ServiceAccounts and Services (core/v1),
Roles and RoleBindings (rbac.authorization.k8s.io/v1); get and create (409 when the
name is taken, 422 for an invalid name or a binding without ``roleRef``). A pod naming
a ``serviceAccountName`` that does not exist is refused (403), as the ServiceAccount
admission controller does. :meth:`FakeKubernetes.token_for` hands out a service
account's token; a request with it is authorized by RBAC: allowed only when a
RoleBinding of the namespace gives the account a Role whose rules cover the resource
and verb (403 otherwise). :meth:`FakeKubernetes.endpoints` lists the pods a Service
selects.

Secrets (core/v1): get, create, replace (PUT) and delete, ``data`` values base64 as
the API keeps them. The exec subresource (``pods/<name>/exec``, a websocket;
``fake_exec.py``) runs the command with bash on this machine in a directory of the
pod's own (its ``$HOME``), with the container's ``env`` (``value``, or
``valueFrom.secretKeyRef`` read from the Secret, as the kubelet does at the
container's start): authorized as ``create`` on ``pods/exec``; 404 for a missing pod,
400 for an unknown container or a pod that is not running."""

from __future__ import annotations

import base64
import copy
import ipaddress
import itertools
import os
import re
import shutil
import ssl
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml
from fake_exec import serve_exec

TOKEN = "fake-kube-token"
_RBAC = "rbac.authorization.k8s.io"
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?$")
_OBJECTS = re.compile(
    r"^/(?:api/v1|apis/rbac\.authorization\.k8s\.io/v1)/namespaces/([^/]+)/"
    r"(serviceaccounts|services|secrets|roles|rolebindings)(?:/([^/]+))?$"
)
_EXEC = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/exec$")
_DISCOVERY: dict[str, Any] = {
    "/version": {"major": "1", "minor": "32", "gitVersion": "v1.32.0-fake"},
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/api/v1": {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {
                "name": "pods",
                "singularName": "pod",
                "namespaced": True,
                "kind": "Pod",
                "verbs": ["create", "delete", "get", "list", "patch"],
                "shortNames": ["po"],
            },
            {
                "name": "pods/exec",
                "singularName": "",
                "namespaced": True,
                "kind": "PodExecOptions",
                "verbs": ["create", "get"],
            },
        ],
    },
}
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_VERBS = {"GET": "get", "POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}


def tls_context(directory: Path) -> tuple[ssl.SSLContext, str]:
    """A server TLS context with a new self-signed certificate for 127.0.0.1, and the
    certificate (PEM) for the kubeconfig's ``certificate-authority-data``. kubectl sends
    a bearer token over HTTPS only."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kube-apiserver")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    (directory / "server.crt").write_bytes(cert_pem)
    (directory / "server.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(directory / "server.crt", directory / "server.key")
    return ctx, cert_pem.decode()


def write_kubeconfig(directory: Path, url: str, token: str, ca_pem: str | None = None) -> Path:
    """A kubeconfig naming the fake API server, authenticating with ``token`` (and
    trusting ``ca_pem`` for an HTTPS server)."""
    path = directory / "config"
    cluster: dict[str, str] = {"server": url}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem.encode()).decode()
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": cluster}],
                "users": [{"name": "me", "user": {"token": token}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "me"}}],
                "current-context": "fake",
            }
        )
    )
    return path


def _status(code: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
    return code, {**body, "reason": reason, "message": message, "code": code}


class FakeKubernetes:
    """The state and the request handler (give :meth:`handle` to ``FakeAPIServer``)."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        # (resource, namespace, name) -> object, for serviceaccounts, services, roles,
        # rolebindings
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._tokens: dict[str, tuple[str, str]] = {}  # token -> (namespace, account)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._exec_root: str | None = None
        #: The argv of every exec served, in order.
        self.execs: list[list[str]] = []

    def pod_home(self, namespace: str, pod: str) -> str:
        """The directory the pod's exec'd commands run in (their ``$HOME``)."""
        if self._exec_root is None:
            self._exec_root = tempfile.mkdtemp(prefix="fake-kube-pods-")
        home = os.path.join(self._exec_root, namespace, pod)
        os.makedirs(home, exist_ok=True)
        return home

    def close(self) -> None:
        """Delete the pods' directories."""
        if self._exec_root is not None:
            shutil.rmtree(self._exec_root, ignore_errors=True)
            self._exec_root = None

    def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        """A Secret's decoded value; None when the Secret or its key is missing."""
        data = self.objects.get(("secrets", namespace, name), {}).get("data", {})
        return base64.b64decode(data[key]).decode() if key in data else None

    def exec_upgrade(
        self, handler: Any, path: str, query: dict[str, list[str]], headers: dict[str, str]
    ) -> tuple[int, Any] | None:
        """Serve ``pods/<name>/exec`` (see the module docstring); an error reply, or None
        once the command ran."""
        token = headers.get("authorization", "").removeprefix("Bearer ")
        if token != TOKEN and token not in self._tokens:
            return _status(401, "Unauthorized", "no valid bearer token")
        m = _EXEC.match(path)
        if not m:
            return _status(404, "NotFound", f"no websocket route {path}")
        ns, name = m.groups()
        with self._lock:
            if not self._allowed(token, ns, "pods/exec", "create"):
                return _status(403, "Forbidden", f'cannot create resource "pods/exec" in "{ns}"')
            pod = self.pods.get((ns, name))
            if pod is None:
                return _status(404, "NotFound", f'pods "{name}" not found')
            pod = self._advance(pod)
        if pod["status"]["phase"] != "Running":
            return _status(400, "BadRequest", f"pod {name} is not running")
        containers = pod["spec"]["containers"]
        wanted = query.get("container", [containers[0]["name"]])[-1]
        found = [c for c in containers if c["name"] == wanted]
        if not found:
            return _status(400, "BadRequest", f"container {wanted} is not valid for pod {name}")
        home = self.pod_home(ns, name)
        self.execs.append(query.get("command", []))
        env = {"HOME": home, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        for var in found[0].get("env", []):
            ref = (var.get("valueFrom") or {}).get("secretKeyRef")
            value = self.secret_value(ns, ref["name"], ref["key"]) if ref else var.get("value")
            if value is not None:
                env[var["name"]] = value
        serve_exec(
            handler, query.get("command", []), home, env, headers.get("sec-websocket-protocol", "")
        )
        return None

    def token_for(self, namespace: str, account: str) -> str:
        """The token of an existing service account (as mounted in its pods)."""
        assert ("serviceaccounts", namespace, account) in self.objects, account
        token = f"sa-token-{namespace}-{account}"
        self._tokens[token] = (namespace, account)
        return token

    def endpoints(self, namespace: str, service: str) -> list[str]:
        """The names of the pods the Service selects."""
        selector = self.objects[("services", namespace, service)]["spec"]["selector"]
        return sorted(
            name
            for (ns, name), pod in self.pods.items()
            if ns == namespace
            and all(pod["metadata"]["labels"].get(k) == v for k, v in selector.items())
        )

    def _allowed(self, token: str, ns: str, resource: str, verb: str) -> bool:
        """RBAC: a RoleBinding in ``ns`` gives the token's account a Role whose rules
        cover ``resource`` and ``verb``."""
        if token == TOKEN:
            return True
        account = self._tokens.get(token)
        if account is None or account[0] != ns:
            return False
        core = ("pods", "pods/exec", "serviceaccounts", "services", "secrets")
        group = "" if resource in core else _RBAC
        for (kind, bns, _), binding in self.objects.items():
            if kind != "rolebindings" or bns != ns:
                continue
            subjects = binding.get("subjects", [])
            if not any(
                s.get("kind") == "ServiceAccount"
                and s.get("name") == account[1]
                and s.get("namespace", ns) == ns
                for s in subjects
            ):
                continue
            role = self.objects.get(("roles", ns, binding["roleRef"]["name"]))
            for rule in (role or {}).get("rules", []):
                if (
                    group in rule.get("apiGroups", [])
                    and resource in rule.get("resources", [])
                    and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
                ):
                    return True
        return False

    def handle(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        auth = headers.get("authorization", "")
        token = auth.removeprefix("Bearer ")
        if not auth.startswith("Bearer ") or (token != TOKEN and token not in self._tokens):
            return _status(401, "Unauthorized", "no valid bearer token")
        if path in _DISCOVERY:  # what kubectl reads before a request
            return 200, _DISCOVERY[path]
        m = _PODS.match(path)
        o = _OBJECTS.match(path)
        if m:
            ns, name, resource = m.group(1), m.group(2), "pods"
        elif o:
            ns, name, resource = o.group(1), o.group(3), o.group(2)
        else:
            return _status(404, "NotFound", f"no route {path}")
        verb = _VERBS.get(method, method.lower())
        if verb == "get" and name is None:
            verb = "list"
        with self._lock:
            if not self._allowed(token, ns, resource, verb):
                return _status(
                    403,
                    "Forbidden",
                    f'{resource} is forbidden: cannot {verb} resource "{resource}" in '
                    f'namespace "{ns}"',
                )
            if resource != "pods":
                return self._object(method, resource, ns, name, body)
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

    def _object(
        self, method: str, resource: str, ns: str, name: str | None, body: Any
    ) -> tuple[int, Any]:
        if name is not None and method in ("GET", "DELETE", "PUT"):
            found = self.objects.get((resource, ns, name))
            if found is None:
                return _status(404, "NotFound", f'{resource} "{name}" not found')
            if method == "DELETE":
                del self.objects[(resource, ns, name)]
            if method == "PUT":
                if body.get("metadata", {}).get("name") != name:
                    return _status(400, "BadRequest", "the name in the body differs")
                found = copy.deepcopy(body)
                found["metadata"].update(namespace=ns, uid=f"uid-{resource}-{name}")
                self.objects[(resource, ns, name)] = found
            return 200, copy.deepcopy(found)
        if name is not None or method != "POST":
            return _status(405, "MethodNotAllowed", f"{method} {resource}")
        new = body.get("metadata", {}).get("name", "")
        valid = _DNS_LABEL if resource == "services" else _SUBDOMAIN
        if not valid.match(new):
            return _status(422, "Invalid", f"metadata.name: Invalid value: {new!r}")
        bad = self._bad_labels(body.get("metadata", {}).get("labels", {}))
        if bad:
            return bad
        if resource == "rolebindings":
            ref = body.get("roleRef") or {}
            if ref.get("apiGroup") != _RBAC or ref.get("kind") not in ("Role", "ClusterRole"):
                return _status(422, "Invalid", f"roleRef: Invalid value: {ref}")
        if resource == "roles" and not all(r.get("verbs") for r in body.get("rules", [])):
            return _status(422, "Invalid", "rules[].verbs: Required value")
        if resource == "services":
            spec = body.get("spec", {})
            bad = self._bad_labels(spec.get("selector", {}))
            if bad:
                return bad
            if not all(isinstance(p.get("port"), int) for p in spec.get("ports", [])):
                return _status(422, "Invalid", "spec.ports[].port: Required value")
        if resource == "secrets":
            for k, v in body.get("data", {}).items():
                try:
                    base64.b64decode(v, validate=True)
                except ValueError:
                    return _status(400, "BadRequest", f"data[{k}]: illegal base64 data")
        if (resource, ns, new) in self.objects:
            return _status(409, "AlreadyExists", f'{resource} "{new}" already exists')
        obj = copy.deepcopy(body)
        obj["metadata"].update(namespace=ns, uid=f"uid-{resource}-{new}")
        self.objects[(resource, ns, new)] = obj
        return 201, copy.deepcopy(obj)

    def _create(self, ns: str, pod: dict[str, Any]) -> tuple[int, Any]:
        account = pod.get("spec", {}).get("serviceAccountName", "default")
        if account != "default" and ("serviceaccounts", ns, account) not in self.objects:
            return _status(
                403,
                "Forbidden",
                f'error looking up service account {ns}/{account}: serviceaccount "{account}" '
                "not found",
            )
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
