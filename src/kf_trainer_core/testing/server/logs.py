"""Pod logs as the kubelet serves them through the apiserver: container choice,
``previous``, ``tailLines``, ``limitBytes``, ``sinceSeconds``/``sinceTime``,
``timestamps`` and ``follow`` streams that end with the container or the pod."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from aiohttp import web

from kf_trainer_core.emulation.logs import (
    check_started,
    log_container,
    render,
    select,
    since_time,
    stamp_of,
)
from kf_trainer_core.testing.scenarios import LOGS_ANNOTATION, UNSERVED_LOGS
from kf_trainer_core.testing.server.base import Follower, ServerBase
from kf_trainer_core.testing.server.request import int_param, truthy
from kf_trainer_core.testing.server.routing import Ctx
from kf_trainer_core.testing.store import PODS, StoreError

JSON = dict[str, Any]


class PodLogMixin(ServerBase):
    """The ``pods/log`` subresource of :class:`~kf_trainer_core.testing.server.KubeTestServer`."""

    def drop_log_streams(self, *, abort: bool = False) -> int:
        """End every open log follow stream (``abort``: reset the connection). Returns
        how many were open."""
        return self._on_loop(lambda: self._end_log_streams(abort)) or 0

    def _end_log_streams(self, abort: bool) -> int:
        # On the loop.
        followers = list(self._followers)
        for f in followers:
            f.close(abort=abort)
        return len(followers)

    async def _pod_log(self, request: web.BaseRequest, ctx: Ctx) -> web.StreamResponse:
        route = ctx.route
        if route.res is not PODS or route.name is None or route.namespace is None:
            raise StoreError.path_not_found()
        ns, name = route.namespace, route.name
        query = request.query
        pod = self.store.get(PODS, ns, name)
        container = log_container(pod, query.get("container"))
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if annotations.get(LOGS_ANNOTATION) == UNSERVED_LOGS:
            kubelet_query = "&".join(f"{k}={v}" for k, v in query.items() if k != "container")
            raise _refused(pod, container, kubelet_query)
        previous = truthy(query.get("previous"))
        follow = truthy(query.get("follow"))
        timestamps = truthy(query.get("timestamps"))
        tail = int_param(query, "tailLines")
        limit = int_param(query, "limitBytes")
        since_seconds = int_param(query, "sinceSeconds")
        since_text = query.get("sinceTime")
        if since_seconds is not None and since_text:
            raise StoreError(
                422,
                "Invalid",
                'PodLogOptions "" is invalid: sinceSeconds: Forbidden: at most one of '
                "`sinceTime` or `sinceSeconds` may be specified",
            )
        for key, value in (
            ("tailLines", tail),
            ("limitBytes", limit),
            ("sinceSeconds", since_seconds),
        ):
            if value is not None and (value < 0 or (key != "tailLines" and value < 1)):
                raise StoreError(
                    422,
                    "Invalid",
                    f'PodLogOptions "" is invalid: {key}: Invalid value: {value}: must be '
                    "greater than 0",
                )
        since: int | None = None
        if since_seconds is not None:
            # The kubelet measures it with its own clock, which stamps the lines too.
            since = stamp_of(self.logs.now()) - since_seconds * 1_000_000_000
        elif since_text:
            since = since_time(since_text)
        if previous:
            if not self.logs.has_previous(ns, name, container):
                raise StoreError.bad_request(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
            follow = False
        else:
            check_started(
                pod, container, lambda: bool(self.logs.read_from(ns, name, container, 0)[0])
            )

        if not follow:
            lines = self.logs.lines(ns, name, container, since=since, tail=tail, previous=previous)
            data = render(lines, timestamps)
            if limit is not None:
                data = data[:limit]
            return web.Response(body=data, content_type="text/plain")

        follower = Follower(ns, name)
        loop = asyncio.get_running_loop()

        def wake() -> None:  # writer's thread
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(follower.wake.set)

        unlisten = self.logs.listen(ns, name, container, wake)
        self._followers.add(follower)
        response = web.StreamResponse(status=200)
        response.content_type = "text/plain"
        response.headers["Cache-Control"] = "no-cache, private"
        try:
            lines, closed = self.logs.read_from(ns, name, container, 0)
            index = len(lines)
            lines = select(lines, since, tail)
            await response.prepare(request)
            self._record(request, ctx, 200)
            budget = limit
            while True:
                data = render(lines, timestamps)
                if budget is not None:
                    data = data[:budget]
                    budget -= len(data)
                if data:
                    await response.write(data)
                if closed or follower.closed or budget == 0:
                    break
                follower.wake.clear()
                lines, closed = self.logs.read_from(ns, name, container, index)
                index += len(lines)
                if lines or closed:
                    continue
                if not self.store.exists(PODS, ns, name):
                    break  # the pod is gone: its log stream ends
                await follower.wake.wait()
                lines, closed = self.logs.read_from(ns, name, container, index)
                index += len(lines)
            if follower.abort and request.transport is not None:
                request.transport.abort()
                return response
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            unlisten()
            self._followers.discard(follower)
        return response


def _refused(pod: JSON, container: str, query: str) -> StoreError:
    """What the API server answers when the pod's kubelet cannot be reached (a kwok
    node, a node gone): a 500 without a reason, quoting the kubelet URL it dialled."""
    meta = pod.get("metadata") or {}
    host = (pod.get("status") or {}).get("hostIP") or "127.0.0.1"
    url = (
        f"https://{host}:10250/containerLogs/{meta.get('namespace')}/{meta.get('name')}/{container}"
    )
    url += f"?{query}" if query else ""
    return StoreError(500, "", f'Get "{url}": dial tcp {host}:10250: connect: connection refused')
