"""Reading a request as the apiserver does: query parameters (booleans, integers,
``dryRun``, ``fieldValidation``, delete options), bodies and their content
types, the checks of an object sent for a route, and the verb a request means."""

from __future__ import annotations

import json
from typing import Any

import yaml
from aiohttp import web

from kf_trainer_core.k8s.status import StatusError as StoreError
from kf_trainer_core.testing.server.routing import Route

JSON = dict[str, Any]

PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}


def method_not_allowed() -> StoreError:
    """``405`` for a method the path does not serve."""
    return StoreError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        {},
    )


def truthy(value: str | None) -> bool:
    """A boolean query parameter (``true``/``1``)."""
    return value is not None and value.lower() in ("true", "1")


def int_param(query: Any, key: str) -> int | None:
    """An integer query parameter (None when absent); 400 when not an integer."""
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise StoreError.bad_request(f'{key}: Invalid value: "{raw}": must be an integer') from None


def verb_of(method: str, route: Route, query: Any) -> str:
    """The RBAC verb a request means (``list`` vs ``get``, ``watch``, ``deletecollection``)."""
    if method == "GET":
        if route.watch_path or truthy(query.get("watch")):
            return "watch"
        if route.name is None:
            return "list"
        return "get"
    if method == "POST":
        if route.name is not None:
            raise method_not_allowed()
        return "create"
    if method in ("PUT", "PATCH") and route.name is None:
        raise method_not_allowed()
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if route.name is not None else "deletecollection"
    raise method_not_allowed()


def validation_mode(query: Any) -> str:
    """``fieldValidation``: Strict, Warn (the default) or Ignore."""
    mode = query.get("fieldValidation") or "Warn"
    if mode not in ("Strict", "Warn", "Ignore"):
        raise StoreError.bad_request(
            f'fieldValidation: Unsupported value: "{mode}": supported values: "Ignore", '
            '"Warn", "Strict"'
        )
    return str(mode)


def dry_run_of(query: Any, body: Any = None) -> bool:
    """Whether ``dryRun=All`` was asked for: in the query, or for a delete with a
    DeleteOptions body in that body alone (the API server decodes a delete's options
    from its body when there is one, and its query only when there is none)."""
    if isinstance(body, dict):
        values = list(body["dryRun"]) if isinstance(body.get("dryRun"), list) else []
    else:
        values = list(query.getall("dryRun", []))
    for value in values:
        if value != "All":
            raise StoreError.bad_request(
                f'dryRun: Unsupported value: "{value}": supported values: "All"'
            )
    return bool(values)


async def delete_options(request: web.BaseRequest) -> tuple[str, JSON | None, bool]:
    """The propagation policy, preconditions and ``dryRun`` of a delete: from its
    DeleteOptions body when it has one (the query is ignored then, as by the API
    server), else from its query; 400 when the body does not decode."""
    raw = await request.read()
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        raise StoreError.bad_request("the DeleteOptions could not be decoded") from None
    options = body if isinstance(body, dict) else {}
    query = {} if isinstance(body, dict) else request.query
    policy = options.get("propagationPolicy") or query.get("propagationPolicy")
    orphan = options.get("orphanDependents") or query.get("orphanDependents")
    if policy is None and orphan is not None:
        policy = "Orphan" if truthy(str(orphan)) else "Background"
    preconditions = (
        options.get("preconditions") if isinstance(options.get("preconditions"), dict) else None
    )
    return str(policy or "Background"), preconditions, dry_run_of(request.query, body)


async def read_body(request: web.BaseRequest, yaml_ok: bool = False) -> Any:
    """The decoded body (YAML for apply patches); 400 when empty or malformed."""
    raw = await request.read()
    if not raw:
        raise StoreError.bad_request("the body of the request was empty")
    try:
        if yaml_ok:
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as exc:
        raise StoreError.bad_request(
            f"couldn't get version/kind; json parse error: {exc}"
        ) from None


def check_body(body: Any, route: Route, *, for_create: bool) -> JSON:
    """The object sent for ``route``, checked against it (apiVersion, kind, namespace
    and name), as the apiserver's decoding does."""
    res = route.res
    assert res is not None
    if not isinstance(body, dict):
        raise StoreError.bad_request("the body of the request must be a JSON object")
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if api_version not in (None, "", res.api_version):
        raise StoreError.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({res.api_version})"
        )
    if kind not in (None, "", res.kind):
        raise StoreError.bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({res.kind})"
        )
    meta = body.get("metadata")
    if meta is None:
        meta = body["metadata"] = {}
    if not isinstance(meta, dict):
        raise StoreError.bad_request("metadata must be an object")
    if route.namespace is not None and meta.get("namespace") not in (None, "", route.namespace):
        raise StoreError.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    if not for_create and meta.get("name") not in (None, "", route.name):
        raise StoreError.bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL "
            f"({route.name})"
        )
    return body
