"""Which method of the client library serves each call, and how long it may take:
decided here, pure, for the transport (:mod:`.transport`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.k8s.calls import (
    Call,
    Create,
    Delete,
    Get,
    GetPath,
    ListObjects,
    OpenLogStream,
    OpenWatch,
    Patch,
    ReadLog,
)
from kf_trainer_core.k8s.resources import Resource

MERGE_PATCH = "application/merge-patch+json"
# Core resources: the CoreV1Api method stem for each plural.
_CORE = {"pods": "pod", "events": "event", "secrets": "secret", "namespaces": "namespace"}


@dataclass(frozen=True)
class Timeouts:
    """How long a request may take, in seconds (the transport renders it as aiohttp's
    ``ClientTimeout``).

    ``read`` is an *idle* timeout: the longest silence between two reads of the answer
    (aiohttp's ``sock_read``), so a stream that goes silent — a half-open connection, a
    black-holed path — fails after ``read`` seconds, however long it had been alive.
    ``connect`` bounds the TCP connection and the TLS handshake; ``total`` the whole
    request (``None``: no bound, for streams)."""

    connect: float
    read: float
    total: float | None = None


@dataclass(frozen=True)
class Plan:
    """Which API object and method serve a call, with what arguments."""

    api: str  # "custom" | "core"
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    text: bool = False  # the answer is text (logs), not JSON
    #: Forced Content-Type (patches are merge patches; some clients default to JSON
    #: Patch for a dict body).
    content_type: str | None = None
    timeouts: Timeouts = Timeouts(30.0, 30.0, 30.0)


def _opt(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


def plan(call: Call, request_timeout: float, idle_timeout: float) -> Plan:
    """Map a call onto the client library's typed methods.

    A plain request may take ``request_timeout`` seconds; a stream (a watch, a followed
    log) may live as long as it speaks, but a silence of ``idle_timeout`` seconds ends
    it: the program reconnects and resumes where it stopped. (A live watch is never
    that silent: its program asks the server to end it sooner, see
    :func:`~kf_trainer_core.k8s.calls.watch_period`.)"""
    timeouts = Timeouts(request_timeout, request_timeout, request_timeout)
    if isinstance(call, (OpenWatch, OpenLogStream)):
        timeouts = Timeouts(min(request_timeout, idle_timeout), idle_timeout)
    return dataclasses.replace(_route(call), timeouts=timeouts)


#: Every request leaves its answer unread: the transport reads it (JSON, text, lines).
_UNREAD = {"_preload_content": False}


def _route(call: Call) -> Plan:
    if isinstance(call, (ReadLog, OpenLogStream)):
        return _log_plan(call)
    if isinstance(call, GetPath):
        # A path no typed method serves (an aggregated API's view): the ApiClient's
        # generic request, as for logs, with the same authentication.
        return Plan(
            "client",
            "GET",
            (call.path,),
            {
                "path_params": {},
                "query_params": list(call.query),
                "header_params": {"Accept": "application/json"},
                **_UNREAD,
            },
        )
    res: Resource = call.resource
    ns = call.namespace
    # The same verbs on both APIs; they differ in method names, in where the scope
    # goes (custom: group, version, [namespace,] plural before the name; core: the
    # namespace after it) and in a few extras.
    head: tuple[Any, ...]
    create_extra: dict[str, Any] = {}
    verbs = ("list", "create", "patch", "delete")
    if res.is_custom:
        api, name_first = "custom", False
        head = (
            (res.group, res.version, ns, res.plural) if ns else (res.group, res.version, res.plural)
        )
        scope = "namespaced" if ns else "cluster"
        methods = {verb: f"{verb}_{scope}_custom_object" for verb in ("get", *verbs)}
        if isinstance(call, Patch) and call.subresource == "status":
            methods["patch"] += "_status"
        if isinstance(call, Create):
            create_extra = {"field_validation": call.field_validation}
    else:
        api, name_first = "core", True
        where = ("namespaced_" if res.namespaced else "") + _CORE[res.plural]
        head = (ns,) if res.namespaced else ()
        methods = {verb: f"{verb}_{where}" for verb in verbs}
        methods["get"] = f"read_{where}"

    if isinstance(call, (OpenWatch, ListObjects)):
        # A watch is a list with watch=true: the same method, the same selectors.
        extra = (
            {
                "resource_version": call.resource_version,
                "timeout_seconds": call.timeout_seconds,
                "allow_watch_bookmarks": call.bookmarks or None,
                "watch": True,
            }
            if isinstance(call, OpenWatch)
            else {
                "limit": call.limit,
                "_continue": call.continue_token,
                "resource_version": None if call.continue_token else call.resource_version,
            }
        )
        selectors = _opt(label_selector=call.label_selector, field_selector=call.field_selector)
        if api == "core" and res.namespaced and not ns:
            methods["list"], head = f"list_{_CORE[res.plural]}_for_all_namespaces", ()
        return Plan(api, methods["list"], head, {**selectors, **_opt(**extra), **_UNREAD})

    def at(name: str, *rest: Any) -> tuple[Any, ...]:
        return (name, *head, *rest) if name_first else (*head, name, *rest)

    if isinstance(call, Get):
        return Plan(api, methods["get"], at(call.name), {**_UNREAD})
    if isinstance(call, Create):
        return Plan(api, methods["create"], (*head, call.body), {**create_extra, **_UNREAD})
    if isinstance(call, Patch):
        body = at(call.name, call.body)
        return Plan(api, methods["patch"], body, {**_UNREAD}, content_type=MERGE_PATCH)
    if isinstance(call, Delete):
        # DeleteOptions in the body, all of them (see Delete.options): the library
        # also sends query parameters, which the server ignores beside a body.
        kwargs = {"body": call.options(), **_UNREAD}
        return Plan(api, methods["delete"], at(call.name), kwargs)
    raise TypeError(f"no plan for {shown(call)}")


def _log_plan(call: ReadLog | OpenLogStream) -> Plan:
    """A pod log read, through the client library's own ``ApiClient``.

    The typed ``read_namespaced_pod_log`` offers ``sinceSeconds`` but not the API's
    ``sinceTime``, and a resume point expressed in seconds before *now* is measured by
    the kubelet against its own clock: with the node's clock ahead of ours, a resume
    asked for from our clock starts after lines we never received (a 120 s skew lost
    half of a log). ``sinceTime`` carries the last line's own timestamp (the node's
    clock wrote it), so no clock is compared. The request is the same one the typed
    method makes (path, Accept, BearerToken auth), with the query built here, sent by
    the transport's ``_araw_get``."""
    follow = isinstance(call, OpenLogStream)
    query: list[tuple[str, Any]] = [("container", call.container)]
    if follow:
        query.append(("follow", "true"))
    if call.since_time is not None:
        query.append(("sinceTime", call.since_time))
    if call.tail_lines is not None:
        query.append(("tailLines", call.tail_lines))
    if call.timestamps:
        query.append(("timestamps", "true"))
    limit = getattr(call, "limit_bytes", None)
    if limit is not None:
        query.append(("limitBytes", limit))
    return Plan(
        "client",
        "GET",
        ("/api/v1/namespaces/{namespace}/pods/{name}/log",),
        {
            "path_params": {"namespace": call.namespace, "name": call.pod},
            "query_params": query,
            "header_params": {"Accept": "text/plain, application/json"},
            **_UNREAD,
        },
        True,
    )
