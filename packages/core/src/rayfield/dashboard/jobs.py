"""The dashboard's job submission API (``/api/job-submission/...``), over ``JobManager``.

Routes (JSON bodies and replies; errors are ``{"error": message}`` with 400 for a bad
request, 404 for an unknown job or package, 502 when the cluster does not answer):

- ``POST /api/job-submission/jobs``: ``{"entrypoint", "submission_id"?, "runtime_env"?,
  "metadata"?, "entrypoint_num_cpus"?, "entrypoint_num_gpus"?, "entrypoint_memory"?,
  "entrypoint_resources"?}`` -> ``{"submission_id"}``
- ``GET /api/job-submission/jobs`` -> a list of job records
- ``GET /api/job-submission/jobs/{id}`` -> the record
- ``POST /api/job-submission/jobs/{id}/stop`` -> ``{"stopped": bool}``
- ``DELETE /api/job-submission/jobs/{id}`` -> ``{"deleted": bool}``
- ``GET /api/job-submission/jobs/{id}/logs?offset=N`` -> ``{"data", "next_offset",
  "status", ...}``
- ``GET|PUT /api/job-submission/packages/{name}``: whether a ``working_dir`` package is
  there (200/404); upload one (the body, up to 100 MiB).

They sit behind the dashboard's checks like the rest of the API (Host, Origin on POST,
PUT and DELETE, the token or a session).
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from rayfield.dashboard import query
from rayfield.job_submission.manager import JobError, JobManager, JobNotFoundError
from rayfield.job_submission.package import MAX_PACKAGE_BYTES
from rayfield.util.state import GcsError, NodeCallError, StateError

__all__ = ["JobApi"]

T = TypeVar("T")
PREFIX = "/api/job-submission"
_FIELDS = (
    "submission_id",
    "runtime_env",
    "metadata",
    "entrypoint_num_cpus",
    "entrypoint_resources",
    "entrypoint_num_gpus",
    "entrypoint_memory",
)


def _error(cls: type[web.HTTPException], message: str) -> web.HTTPException:
    return cls(text=json.dumps({"error": message}), content_type="application/json")


class JobApi:
    """The job routes of one dashboard; the manager's calls run on one thread of their
    own (they create actors as a driver)."""

    def __init__(self, manager: JobManager) -> None:
        self.manager = manager
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rf-jobs")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _run(self, fn: Any, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, fn, *args)
        except JobNotFoundError as exc:
            raise _error(web.HTTPNotFound, str(exc)) from None
        except (JobError, StateError, ValueError) as exc:
            raise _error(web.HTTPBadRequest, str(exc)) from None
        except (GcsError, NodeCallError) as exc:
            raise _error(web.HTTPBadGateway, f"the cluster did not answer: {exc}") from None

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post(f"{PREFIX}/jobs", self.submit),
            web.get(f"{PREFIX}/jobs", self.list_jobs),
            web.get(f"{PREFIX}/jobs/{{id}}", self.get_job),
            web.post(f"{PREFIX}/jobs/{{id}}/stop", self.stop),
            web.delete(f"{PREFIX}/jobs/{{id}}", self.delete),
            web.get(f"{PREFIX}/jobs/{{id}}/logs", self.logs),
            web.get(f"{PREFIX}/packages/{{name}}", self.has_package),
            web.put(f"{PREFIX}/packages/{{name}}", self.put_package),
        ]

    async def submit(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise _error(web.HTTPBadRequest, "the body must be a JSON object") from None
        if not isinstance(body, dict) or "entrypoint" not in body:
            raise _error(web.HTTPBadRequest, "the body must be a JSON object with 'entrypoint'")
        unknown = set(body) - {"entrypoint", *_FIELDS}
        if unknown:
            raise _error(web.HTTPBadRequest, f"unknown fields: {', '.join(sorted(unknown))}")
        kwargs = {k: body.get(k) for k in _FIELDS}
        sid = await self._run(lambda: self.manager.submit(body["entrypoint"], **kwargs))
        return web.json_response({"submission_id": sid})

    async def list_jobs(self, request: web.Request) -> web.Response:
        jobs = await self._run(self.manager.list)
        return web.json_response([j.to_dict() for j in jobs])

    async def get_job(self, request: web.Request) -> web.Response:
        job = await self._run(self.manager.get, request.match_info["id"])
        return web.json_response(job.to_dict())

    async def stop(self, request: web.Request) -> web.Response:
        stopped = await self._run(self.manager.stop, request.match_info["id"])
        return web.json_response({"stopped": stopped})

    async def delete(self, request: web.Request) -> web.Response:
        deleted = await self._run(self.manager.delete, request.match_info["id"])
        return web.json_response({"deleted": deleted})

    async def logs(self, request: web.Request) -> web.Response:
        try:
            offset = query.integer(request.query, "offset", 0)
        except query.QueryError as exc:
            raise _error(web.HTTPBadRequest, str(exc)) from None
        reply = await self._run(self.manager.logs, request.match_info["id"], max(0, offset))
        return web.json_response(reply)

    async def has_package(self, request: web.Request) -> web.Response:
        if not await self._run(self.manager.has_package, request.match_info["name"]):
            raise _error(web.HTTPNotFound, "no such package")
        return web.json_response({"found": True})

    async def put_package(self, request: web.Request) -> web.Response:
        chunks, size = [], 0
        async for chunk in request.content.iter_chunked(1 << 16):
            size += len(chunk)
            if size > MAX_PACKAGE_BYTES:
                raise _error(
                    web.HTTPRequestEntityTooLarge,
                    f"a working_dir package may hold at most {MAX_PACKAGE_BYTES >> 20} MiB",
                )
            chunks.append(chunk)
        await self._run(self.manager.put_package, request.match_info["name"], b"".join(chunks))
        return web.json_response({"stored": True})
