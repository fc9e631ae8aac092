"""The resource handlers: list (selectors, paging, resourceVersion semantics),
create, update and the status subresource, patches, delete and deletecollection, with
CRD admission (pruning, defaulting, OpenAPI and CEL validation) of custom resources."""

from __future__ import annotations

import asyncio
import concurrent.futures
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web

from kf_trainer_core.emulation.paging import continue_expired, list_meta, list_request
from kf_trainer_core.emulation.strategy import deleted_status
from kf_trainer_core.testing import crd
from kf_trainer_core.testing.server.base import ServerBase
from kf_trainer_core.testing.server.request import (
    PATCH_TYPES,
    check_body,
    delete_options,
    dry_run_of,
    int_param,
    method_not_allowed,
    read_body,
    validation_mode,
)
from kf_trainer_core.testing.server.routing import (
    EVENTS_V1,
    Ctx,
    Route,
    events_v1_field_selector,
)
from kf_trainer_core.testing.store import (
    NAMESPACES,
    PODS,
    RESOURCES,
    Admission,
    Resource,
    StoreError,
    has_status_subresource,
)

JSON = dict[str, Any]
_T = TypeVar("_T")

# Registries that answer DELETE with the deleted object rather than a Status Success.
_RETURNS_DELETED_OBJECT = frozenset({PODS, NAMESPACES})


class HandlerMixin(ServerBase):
    """CRUD of :class:`~kf_trainer_core.testing.server.KubeTestServer`."""

    # ------------------------------------------------------------- schemas

    def _load_schemas(self) -> None:
        """The CRD schemas writes are checked against: the upstream CRD files when a
        folder of them is found (full fidelity: CEL rules, enums, defaults), else the
        structural schemas derived from the ``kubeflow-trainer-api`` models (fields and
        types; docs/testing.md says what each level checks)."""
        self.fidelity = "none"
        if self.upstream is not None and not self.upstream.is_dir():
            warnings.warn(
                f"kf_trainer_core.testing: the folder of upstream CRDs {self.upstream} does "
                "not exist; the test server uses its built-in schemas and runtimes. Fix: "
                "name an existing folder (KF_TRAINER_UPSTREAM), or none.",
                RuntimeWarning,
                stacklevel=3,
            )
            self.upstream = None
        if self.upstream is not None:
            try:
                schemas = crd.load_upstream_crds(self.upstream)
            except Exception as exc:  # a broken CRD file must not take the server down
                warnings.warn(
                    f"loading the upstream CRDs failed: {exc!r}", RuntimeWarning, stacklevel=3
                )
                return
            self.fidelity = "upstream"
        else:
            from kf_trainer_core.testing.crd.builtin import builtin_crds, models_available

            if not models_available():
                warnings.warn(
                    "kf_trainer_core.testing: neither the kubeflow-trainer-api models nor a "
                    "folder of upstream CRDs were found; the test server skips CRD schema "
                    "checks. Fix: pip install 'kf-trainer-suite[testing]', or set "
                    "KF_TRAINER_UPSTREAM to a folder of the Trainer CRDs.",
                    RuntimeWarning,
                    stacklevel=3,
                )
                return
            schemas = builtin_crds()
            self.fidelity = "builtin"
        for res in RESOURCES:
            schema = schemas.get(f"{res.plural}.{res.group}") if res.group else None
            if schema is not None:
                self._schemas[res] = schema

    @property
    def validates(self) -> bool:
        """Whether TrainJobs are checked against the upstream CRD schema."""
        return bool(self._schemas)

    def _admission(self, mode: str, warnings_out: list[str], *, patch: bool = False) -> Admission:
        """CRD handling of a custom resource write: unknown fields (Strict: 400, or 422
        for a ``patch``; Warn: warning), pruning, defaulting, then OpenAPI + CEL
        validation (422)."""

        def admit(res: Resource, new: JSON, old: JSON | None, subresource: str | None) -> JSON:
            decoded = new  # what strict decoding saw: before any webhook
            if self.kueue is not None and subresource is None:
                new = self.kueue.mutate(res, new, old)  # Kueue's job webhook
            schema = self._schemas.get(res)
            if schema is None:
                return new
            unknown = list(schema.unknown_fields(new))
            if unknown:
                if mode == "Strict" and patch:
                    body = crd.unknown_fields_in_patch(decoded, unknown)
                    raise StoreError(422, "Invalid", body["message"], body["details"])
                if mode == "Strict":
                    raise StoreError.bad_request(crd.format_unknown_fields(unknown, res))
                if mode == "Warn":
                    warnings_out.extend(f'unknown field "{path}"' for path in unknown)
                new = schema.prune(new)
            new = schema.apply_defaults(new)
            errors = schema.validate(new, old=old, subresource=subresource)
            if errors:
                raise self._invalid(res, new, errors)
            if self.kueue is not None and subresource is None:
                self.kueue.validate(res, new, old)  # Kueue's validating webhook, last
            return dict(new)

        return admit

    def _invalid(self, res: Resource, obj: JSON, errors: list[crd.FieldError]) -> StoreError:
        name = str(obj.get("metadata", {}).get("name") or "")
        body = crd.invalid_status(res.kind, res.group, name, errors)
        return StoreError(422, "Invalid", body["message"], body["details"])

    # ------------------------------------------------------------- list

    def _list(self, route: Route, query: Any) -> JSON:
        res = route.res
        view = route.view
        assert res is not None
        assert view is not None
        label_selector = query.get("labelSelector")
        field_selector = query.get("fieldSelector")
        if view is EVENTS_V1:
            field_selector = events_v1_field_selector(field_selector)
        asked = list_request(
            query.get("resourceVersion"), query.get("resourceVersionMatch"), query.get("continue")
        )
        if asked.after is not None and asked.at is not None:
            oldest = int(self.store.oldest_resource_version)
            if oldest > asked.at or self.faults.take_continue_expiry():
                raise continue_expired()
        if asked.not_older_than is not None:
            self.store.check_not_older_than(asked.not_older_than)
        # Only the page is copied out of the store (10,000 large objects listed 250 at a
        # time would otherwise cost every page the whole namespace).
        items, list_rv, remaining = self.store.page(
            res,
            route.namespace,
            resource_version=None if asked.at is None else str(asked.at),
            label_selector=label_selector,
            field_selector=field_selector,
            after=asked.after,
            limit=int_param(query, "limit"),
        )
        return self._list_body(route, list_meta(int(list_rv), items, remaining), items)

    def _list_body(self, route: Route, meta: JSON, items: list[JSON]) -> JSON:
        """A ``<Kind>List`` of ``items`` as the route's view shows them."""
        view = route.view
        assert view is not None
        return {
            "kind": f"{view.kind}List",
            "apiVersion": view.api_version,
            "metadata": meta,
            "items": [self._present(o, route) for o in items],
        }

    def _check_namespace(self, route: Route) -> None:
        if (
            self.enforce_namespaces
            and route.namespace is not None
            and (not self.store.exists(NAMESPACES, None, route.namespace))
        ):
            raise StoreError.not_found(NAMESPACES, route.namespace)

    async def _run_write(self, res: Resource, fn: Callable[[], _T]) -> _T:
        # CRD validation (CEL) can take milliseconds: keep it off the event loop.
        if res in self._schemas:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    4, thread_name_prefix="kube-test-write"
                )
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, fn)
        return fn()

    async def _create(self, request: web.BaseRequest, ctx: Ctx) -> web.StreamResponse:
        route = ctx.route
        res = route.res
        assert res is not None
        if route.subresource is not None:
            raise method_not_allowed()
        body = check_body(await read_body(request), route, for_create=True)
        ctx.name = body["metadata"].get("name") or None
        mode = validation_mode(request.query)
        dry_run = ctx.dry_run = dry_run_of(request.query)
        self._check_namespace(route)
        if res is PODS:
            # The pod registry's PrepareForCreate: status starts as Pending.
            body["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif res is NAMESPACES:
            body["status"] = {"phase": "Active"}
        elif has_status_subresource(res):
            body.pop("status", None)
        warnings_out: list[str] = []
        admit = self._admission(mode, warnings_out) if res in self._schemas else None
        created = await self._run_write(
            res,
            lambda: self.store.create(
                res, body, namespace=route.namespace, admission=admit, dry_run=dry_run
            ),
        )
        ctx.name = created["metadata"]["name"]
        return self._json(self._present(created, route), 201, warnings_out)

    async def _write(self, request: web.BaseRequest, ctx: Ctx) -> web.StreamResponse:
        route = ctx.route
        res = route.res
        assert res is not None
        assert route.name is not None
        name = route.name
        mode = validation_mode(request.query)
        warnings_out: list[str] = []
        # A patch that strict decoding refuses is 422 (the patched object is invalid),
        # a body sent whole 400 (it cannot be decoded); a server-side apply is neither.
        patch = ctx.verb != "update" and PATCH_TYPES.get(
            request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        ) in ("merge", "json")
        admit = self._admission(mode, warnings_out, patch=patch) if res in self._schemas else None
        status = 200
        if ctx.verb == "update":
            body = check_body(await read_body(request), route, for_create=False)
            dry_run = ctx.dry_run = dry_run_of(request.query)
            body["metadata"]["name"] = name
            if route.namespace is not None:
                body["metadata"]["namespace"] = route.namespace
            result = await self._run_write(
                res,
                lambda: self.store.update(
                    res, body, subresource=route.subresource, admission=admit, dry_run=dry_run
                ),
            )
        else:
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
            patch_type = PATCH_TYPES.get(content_type)
            if patch_type is None or (patch_type == "strategic" and res.group):
                # Custom resources have no strategic-merge schema: the apiserver says 415.
                accepted = (
                    "application/json-patch+json, application/merge-patch+json, "
                    "application/apply-patch+yaml"
                )
                if not res.group:
                    accepted += ", application/strategic-merge-patch+json"
                raise StoreError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted "
                    f"media types include: {accepted}",
                )
            if patch_type == "apply" and not request.query.get("fieldManager"):
                raise StoreError(
                    422,
                    "Invalid",
                    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                    "is required for apply patch",
                )
            patch = await read_body(request, yaml_ok=patch_type == "apply")
            dry_run = ctx.dry_run = dry_run_of(request.query)
            existed = patch_type != "apply" or self.store.exists(res, route.namespace, name)
            if not existed:
                self._check_namespace(route)
            result = await self._run_write(
                res,
                lambda: self.store.patch(
                    res,
                    route.namespace,
                    name,
                    patch,
                    patch_type=patch_type,
                    subresource=route.subresource,
                    admission=admit,
                    dry_run=dry_run,
                ),
            )
            status = 200 if existed else 201
        return self._json(self._present(result, route), status, warnings_out)

    async def _delete(self, request: web.BaseRequest, ctx: Ctx) -> web.StreamResponse:
        route = ctx.route
        res = route.res
        assert res is not None
        assert route.name is not None
        if route.subresource is not None:
            raise method_not_allowed()
        policy, preconditions, dry_run = await delete_options(request)
        ctx.dry_run = dry_run
        grace = int_param(request.query, "gracePeriodSeconds")
        del grace  # deletions complete immediately: no kubelet to wait for
        deleted = self.store.delete(
            res,
            route.namespace,
            route.name,
            propagation=policy,
            preconditions=preconditions,
            dry_run=dry_run,
        )
        still_there = not dry_run and self.store.exists(res, route.namespace, route.name)
        if res in _RETURNS_DELETED_OBJECT or still_there:
            return self._json(self._present(deleted, route), 200)
        return self._json(deleted_status(res, route.name, deleted["metadata"].get("uid")))

    async def _delete_collection(self, request: web.BaseRequest, ctx: Ctx) -> web.StreamResponse:
        route = ctx.route
        res, view = route.res, route.view
        assert res is not None
        assert view is not None
        policy, _, dry_run = await delete_options(request)
        ctx.dry_run = dry_run
        items, _ = self.store.list(
            res,
            route.namespace,
            label_selector=request.query.get("labelSelector"),
            field_selector=request.query.get("fieldSelector"),
        )
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            try:
                deleted.append(
                    self.store.delete(
                        res,
                        meta.get("namespace"),
                        meta["name"],
                        propagation=policy,
                        dry_run=dry_run,
                    )
                )
            except StoreError as err:
                if err.code != 404:
                    raise
        meta = {"resourceVersion": self.store.current_resource_version}
        return self._json(self._list_body(route, meta, deleted))
