"""A fake of the Compute Engine v1 instance endpoints and Google's OAuth token endpoint,
as much as the ``gcp`` provider uses: instances insert/get/list (with a
``labels.KEY = "VALUE"`` filter)/setLabels (fingerprint checked)/delete, zone
operations wait, and ``POST /token`` (a service account's JWT grant). An inserted
instance is ``PROVISIONING`` until its operation is waited for, then ``RUNNING``.
Compute requests need the bearer token the token endpoint handed out; instance names
and labels are checked as Compute Engine checks them, an instance's service account
must exist and its metadata items be ``{key, value}`` strings with unique keys.

Under ``/iam/`` the IAM API's service accounts (get, create; account ids checked) and
under ``/crm/`` Resource Manager's project IAM policy (``getIamPolicy``,
``setIamPolicy``: refused with 409 when the etag is stale, with 400 when a member
names a service account that does not exist, and, ``iam_lag`` times, with 400 as IAM
does while a new account propagates)."""

from __future__ import annotations

import copy
import itertools
import re
import threading
from typing import Any
from urllib.parse import unquote

ACCESS_TOKEN = "fake-gcp-access-token"
_BASE = re.compile(
    r"^/compute/v1/projects/([^/]+)/zones/([^/]+)/(instances|operations)(?:/([^/]+))?(?:/(\w+))?$"
)
_GLOBAL = re.compile(
    r"^/compute/v1/projects/([^/]+)/global/(firewalls|operations)(?:/([^/]+))?(?:/(\w+))?$"
)
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL = re.compile(r"^[a-z0-9_-]{0,63}$")
_FILTER = re.compile(r'^labels\.([\w-]+) = "([^"]*)"$')
_IAM = re.compile(r"^/iam/v1/projects/([^/]+)/serviceAccounts(?:/([^/]+))?$")
_CRM = re.compile(r"^/crm/v1/projects/([^/:]+):(getIamPolicy|setIamPolicy)$")
_ACCOUNT_ID = re.compile(r"^[a-z]([-a-z0-9]{4,28}[a-z0-9])$")


def _error(code: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
    return code, {
        "error": {
            "code": code,
            "message": message,
            "errors": [{"reason": reason, "message": message}],
        }
    }


class FakeCompute:
    """The state and the request handler (give :meth:`handle` to ``FakeAPIServer``)."""

    def __init__(self) -> None:
        self.instances: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.firewalls: dict[tuple[str, str], dict[str, Any]] = {}
        self.tokens_issued = 0
        self.service_accounts: dict[str, dict[str, Any]] = {}  # by email
        self.policies: dict[str, dict[str, Any]] = {}  # by project
        self.policy_writes = 0
        self.iam_lag = 0  # setIamPolicy calls still to refuse as "not visible yet"
        self._ops: dict[str, dict[str, Any]] = {}
        self._n = itertools.count(1)
        self._lock = threading.Lock()

    def handle(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        with self._lock:
            if path == "/token" and method == "POST":
                if b"assertion=" not in body:
                    return 400, {"error": "invalid_grant"}
                self.tokens_issued += 1
                return 200, {
                    "access_token": ACCESS_TOKEN,
                    "expires_in": 3600,
                    "token_type": "Bearer",
                }
            if headers.get("authorization") != f"Bearer {ACCESS_TOKEN}":
                return _error(401, "unauthorized", "no valid access token")
            path = unquote(path)
            i = _IAM.match(path)
            if i:
                return self._iam(method, *i.groups(), body)
            c = _CRM.match(path)
            if c and method == "POST":
                return self._crm(*c.groups(), body)
            g = _GLOBAL.match(path)
            if g:
                return self._global(method, *g.groups(), body)
            m = _BASE.match(path)
            if not m:
                return _error(404, "notFound", f"no route {path}")
            project, zone, coll, name, verb = m.groups()
            if coll == "operations":
                op = self._ops.get(name or "")
                if op is None:
                    return _error(404, "notFound", f"operation {name}")
                return 200, self._finish(op)
            key = (project, zone, name or "")
            if name is None:
                if method == "POST":
                    return self._insert(project, zone, body)
                return 200, self._list(project, zone, query.get("filter", ""))
            inst = self.instances.get(key)
            if inst is None:
                return _error(
                    404,
                    "notFound",
                    f"The resource 'projects/{project}/zones/{zone}/instances/{name}' "
                    "was not found",
                )
            if method == "GET" and verb is None:
                return 200, inst
            if method == "POST" and verb == "setLabels":
                if body.get("labelFingerprint") != inst["labelFingerprint"]:
                    return _error(
                        412,
                        "conditionNotMet",
                        "Labels fingerprint either invalid or resource labels have changed",
                    )
                bad = self._bad_labels(body.get("labels", {}))
                if bad:
                    return bad
                inst["labels"] = dict(body["labels"])
                inst["labelFingerprint"] = f"fp{next(self._n)}"
                return 200, self._op(project, zone, "setLabels", inst)
            if method == "DELETE" and verb is None:
                inst["status"] = "STOPPING"
                return 200, self._op(
                    project, zone, "delete", inst, then=lambda: self.instances.pop(key, None)
                )
        return _error(405, "badRequest", method)

    def _iam(self, method: str, project: str, email: str | None, body: Any) -> tuple[int, Any]:
        if email is None and method == "POST":
            account_id = str(body.get("accountId", ""))
            if not _ACCOUNT_ID.match(account_id):
                return _error(400, "badRequest", f"Invalid accountId {account_id!r}")
            email = f"{account_id}@{project}.iam.gserviceaccount.com"
            if email in self.service_accounts:
                return _error(409, "alreadyExists", f"Service account {account_id} already exists")
            account = {
                "name": f"projects/{project}/serviceAccounts/{email}",
                "projectId": project,
                "email": email,
                **body.get("serviceAccount", {}),
            }
            self.service_accounts[email] = account
            return 200, account
        account = self.service_accounts.get(email or "")
        if method == "GET" and account is not None:
            return 200, account
        return _error(404, "notFound", f"Unknown service account {email}")

    def _crm(self, project: str, verb: str, body: Any) -> tuple[int, Any]:
        policy = self.policies.setdefault(project, {"version": 1, "etag": "e0", "bindings": []})
        if verb == "getIamPolicy":
            return 200, copy.deepcopy(policy)
        new = body.get("policy", {})
        if new.get("etag") != policy["etag"]:
            return _error(409, "aborted", "There were concurrent policy changes")
        for binding in new.get("bindings", []):
            for member in binding.get("members", []):
                email = member.removeprefix("serviceAccount:")
                if member.startswith("serviceAccount:") and email not in self.service_accounts:
                    return _error(400, "badRequest", f"Service account {email} does not exist.")
                if member.startswith("serviceAccount:") and self.iam_lag > 0:
                    self.iam_lag -= 1
                    return _error(400, "badRequest", f"Service account {email} does not exist.")
        self.policy_writes += 1
        policy.update(
            bindings=copy.deepcopy(new.get("bindings", [])), etag=f"e{self.policy_writes}"
        )
        return 200, copy.deepcopy(policy)

    def _global(
        self, method: str, project: str, coll: str, name: str | None, verb: str | None, body: Any
    ) -> tuple[int, Any]:
        if coll == "operations":
            op = self._ops.get(name or "")
            return (200, self._finish(op)) if op else _error(404, "notFound", f"operation {name}")
        if name is None and method == "POST":
            fw_name = str(body.get("name", ""))
            if not _NAME.match(fw_name) or not body.get("allowed") or not body.get("network"):
                return _error(400, "invalid", f"Invalid firewall {body}")
            if (project, fw_name) in self.firewalls:
                return _error(409, "alreadyExists", f"The resource '{fw_name}' already exists")
            rule = {**body, "selfLink": f"projects/{project}/global/firewalls/{fw_name}"}

            def made() -> None:
                self.firewalls[(project, fw_name)] = rule

            return 200, self._op(project, "", "insert", rule, then=made)
        rule = self.firewalls.get((project, name or ""))
        if method == "GET" and rule is not None:
            return 200, rule
        return _error(404, "notFound", f"firewall 'projects/{project}/global/firewalls/{name}'")

    def _op(
        self, project: str, zone: str, kind: str, inst: dict[str, Any], then: Any = None
    ) -> dict[str, Any]:
        name = f"operation-{next(self._n)}"
        op = {
            "kind": "compute#operation",
            "name": name,
            "operationType": kind,
            "status": "RUNNING",
            "targetLink": inst["selfLink"],
        }
        self._ops[name] = op
        op["_then"] = then
        return {k: v for k, v in op.items() if not k.startswith("_")}

    def _finish(self, op: dict[str, Any]) -> dict[str, Any]:
        if op["status"] != "DONE":
            op["status"] = "DONE"
            if op["_then"]:
                op["_then"]()
        return {k: v for k, v in op.items() if not k.startswith("_")}

    def _bad_labels(self, labels: dict[str, str]) -> tuple[int, Any] | None:
        for k, v in labels.items():
            if not _LABEL.match(k) or not _LABEL.match(str(v)):
                return _error(400, "invalid", f"Invalid value for field 'labels': {k}={v}")
        return None

    def _insert(self, project: str, zone: str, body: dict[str, Any]) -> tuple[int, Any]:
        name = str(body.get("name", ""))
        if not _NAME.match(name):
            return _error(400, "invalid", f"Invalid value for field 'resource.name': '{name}'")
        if not str(body.get("machineType", "")).startswith(f"zones/{zone}/machineTypes/"):
            return _error(
                400,
                "invalid",
                f"Invalid value for field 'resource.machineType': {body.get('machineType')}",
            )
        bad = self._bad_labels(body.get("labels", {}))
        if bad:
            return bad
        for account in body.get("serviceAccounts", []):
            if account.get("email") not in self.service_accounts:
                return _error(
                    400, "invalid", f"The resource '{account.get('email')}' was not found"
                )
        items = body.get("metadata", {}).get("items", [])
        keys = [i.get("key") for i in items]
        if len(set(keys)) != len(keys) or not all(
            isinstance(i.get("key"), str) and isinstance(i.get("value"), str) for i in items
        ):
            return _error(400, "invalid", f"Invalid value for field 'resource.metadata': {items}")
        key = (project, zone, name)
        if key in self.instances:
            return _error(409, "alreadyExists", f"The resource '{name}' already exists")
        n = next(self._n)
        inst = {
            **body,
            "kind": "compute#instance",
            "id": str(1000 + n),
            "status": "PROVISIONING",
            "labelFingerprint": f"fp{n}",
            "selfLink": f"https://compute.googleapis.com/compute/v1/projects/{project}/zones/{zone}/instances/{name}",
            "networkInterfaces": [
                {
                    "networkIP": f"10.128.0.{n % 250 + 2}",
                    "accessConfigs": [{"natIP": f"34.1.0.{n % 250 + 2}"}],
                }
            ],
        }
        self.instances[key] = inst

        def running() -> None:
            inst["status"] = "RUNNING"

        return 200, self._op(project, zone, "insert", inst, then=running)

    def _list(self, project: str, zone: str, query: str) -> dict[str, Any]:
        m = _FILTER.match(query) if query else None
        items = [
            i
            for (p, z, _), i in sorted(self.instances.items())
            if p == project
            and z == zone
            and (m is None or i.get("labels", {}).get(m.group(1)) == m.group(2))
        ]
        return {"kind": "compute#instanceList", "items": items}
