"""One request from arrival to answer: routing, the checks before any handler runs
(injected latency and failures, bearer tokens, RBAC denials), the handler the verb
selects, and the request log entry."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiohttp import web

from kf_trainer_core.cluster.kueue import VISIBILITY_LOCAL_QUEUES
from kf_trainer_core.testing.server.handlers import HandlerMixin
from kf_trainer_core.testing.server.logs import PodLogMixin
from kf_trainer_core.testing.server.request import method_not_allowed, truthy, verb_of
from kf_trainer_core.testing.server.routing import EVENTS_V1, Ctx, Route, resolve
from kf_trainer_core.testing.server.watch import WatchMixin
from kf_trainer_core.testing.store import StoreError, has_status_subresource

JSON = dict[str, Any]
_log = logging.getLogger("kf_trainer_core.testing.server")


class Dispatcher(HandlerMixin, WatchMixin, PodLogMixin):
    """Serves each request with the handler its path and verb select."""

    # ------------------------------------------------------------- HTTP

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        ctx = Ctx(start=time.monotonic())
        status = 500
        try:
            response = await self._serve(request, ctx)
            status = response.status
            # Streams are written by now; a plain response is about to be.
            body = getattr(response, "body", None)
            self.bytes_sent += len(body) if isinstance(body, bytes) else response.body_length
            return response
        except StoreError as err:
            response = self._error_response(err)
            status = response.status
            return response
        except asyncio.CancelledError:
            status = 499  # the client went away (nginx's code for it)
            raise
        except Exception as exc:
            _log.exception("test server failed on %s %s", request.method, request.path_qs)
            internal = StoreError(
                500,
                "InternalError",
                f"Internal error occurred: {exc}",
                {"causes": [{"message": str(exc)}]},
            )
            return self._error_response(internal)
        finally:
            if not ctx.recorded:
                self._record(request, ctx, status)

    async def _serve(self, request: web.BaseRequest, ctx: Ctx) -> web.StreamResponse:
        route = self._route(request.path)
        ctx.route = route
        query = request.query
        method = request.method
        if route.res is None:
            ctx.verb = "get"
            await self._pre_checks(request, ctx)
            if method != "GET":
                raise method_not_allowed()
            if route.text is not None:
                return web.Response(text=route.text, content_type="text/plain")
            if route.discovery is None:
                raise StoreError.path_not_found()
            return self._json(route.discovery)
        ctx.verb = verb_of(method, route, query)
        await self._pre_checks(request, ctx)
        res = route.res
        if route.view is EVENTS_V1 and ctx.verb not in ("get", "list", "watch"):
            raise method_not_allowed()
        if route.subresource == "log":
            if method != "GET":
                raise method_not_allowed()
            return await self._pod_log(request, ctx)
        if route.view is VISIBILITY_LOCAL_QUEUES:
            if route.subresource != "pendingworkloads" or ctx.verb != "get":
                raise StoreError.path_not_found()
            summary = self.kueue.pending_workloads(route.namespace or "", route.name or "")
            return self._json(summary)
        if route.subresource is not None and route.subresource != "status":
            raise StoreError.path_not_found()
        if route.subresource == "status" and not has_status_subresource(res):
            raise StoreError.path_not_found()
        pretty = truthy(query.get("pretty"))
        if ctx.verb == "get":
            obj = self.store.get(res, route.namespace, route.name or "")
            return self._json(self._present(obj, route), pretty=pretty)
        if ctx.verb == "list":
            return self._json(self._list(route, query), pretty=pretty)
        if ctx.verb == "watch":
            return await self._watch(request, ctx)
        if ctx.verb == "create":
            return await self._create(request, ctx)
        if ctx.verb in ("update", "patch"):
            return await self._write(request, ctx)
        if ctx.verb == "delete":
            return await self._delete(request, ctx)
        if ctx.verb == "deletecollection":
            return await self._delete_collection(request, ctx)
        raise method_not_allowed()

    async def _pre_checks(self, request: web.BaseRequest, ctx: Ctx) -> None:
        """Injected latency, authentication, injected failures, RBAC denials."""
        route = ctx.route
        plural = route.res.plural if route.res else ""
        delay = self.faults.delay_for(ctx.verb, plural, route.subresource)
        if delay > 0:
            await asyncio.sleep(delay)
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header[:7].lower() == "bearer " else ""
        check = self._token_check
        if check is not None and (not token or not check(token)):
            raise StoreError(401, "Unauthorized", "Unauthorized")
        failure = self.faults.take_failure(ctx.verb, plural, route.subresource)
        if failure is not None:
            raise failure
        if route.res is not None and self.faults.forbidden(
            ctx.verb, plural, route.subresource, route.namespace
        ):
            raise self._forbidden(ctx)
        binding = self.bindings.get(token) if token else None
        view = route.view or route.res
        if binding is not None and view is not None:
            resource = view.plural + (f"/{route.subresource}" if route.subresource else "")
            if not binding.allows(view.group, resource, ctx.verb, route.namespace):
                raise self._forbidden(ctx, binding.user)

    def _forbidden(self, ctx: Ctx, user: str | None = None) -> StoreError:
        route = ctx.route
        view = route.view or route.res
        assert view is not None
        resource = view.plural + (f"/{route.subresource}" if route.subresource else "")
        subject = f'{view.qualified} "{route.name}"' if route.name else view.qualified
        scope = (
            f'in the namespace "{route.namespace}"' if route.namespace else "at the cluster scope"
        )
        message = (
            f'{subject} is forbidden: User "{user or self.user}" cannot {ctx.verb} resource '
            f'"{resource}" in API group "{view.group}" {scope}'
        )
        details: JSON = {}
        if route.name:
            details["name"] = route.name
        if view.group:
            details["group"] = view.group
        details["kind"] = view.plural
        return StoreError(403, "Forbidden", message, details)

    def _route(self, path: str) -> Route:
        return resolve(
            path, address=f"{self.host}:{self._port}", kueue_installed=self.kueue is not None
        )
