"""Where a path leads: discovery documents (``/api``, ``/apis``, API groups and
resource lists, ``/version``), the resource, namespace, name and subresource a path
names, and the events.k8s.io/v1 view of core Events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kf_trainer_core.cluster.kueue import LOCAL_QUEUES, VISIBILITY_LOCAL_QUEUES, WORKLOADS
from kf_trainer_core.testing.store import EVENTS, PODS, RESOURCES, Resource, has_status_subresource

__all__ = ["EVENTS_V1", "Ctx", "Route", "core_event_to_v1", "resolve"]

JSON = dict[str, Any]

#: events.k8s.io/v1 events: a second view of the core v1 Event objects.
EVENTS_V1 = Resource("events.k8s.io", "v1", "events", "Event")

_VERBS_ALL = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_SHORT_NAMES = {
    "pods": ["po"],
    "events": ["ev"],
    "configmaps": ["cm"],
    "namespaces": ["ns"],
    "serviceaccounts": ["sa"],
}


def core_event_to_v1(obj: JSON) -> JSON:
    """A core/v1 Event as events.k8s.io/v1 shows it (renamed and deprecated fields)."""
    out: JSON = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": obj["metadata"]}
    renames = {
        "involvedObject": "regarding",
        "related": "related",
        "message": "note",
        "reason": "reason",
        "type": "type",
        "action": "action",
        "series": "series",
        "eventTime": "eventTime",
        "reportingComponent": "reportingController",
        "reportingInstance": "reportingInstance",
        "source": "deprecatedSource",
        "firstTimestamp": "deprecatedFirstTimestamp",
        "lastTimestamp": "deprecatedLastTimestamp",
        "count": "deprecatedCount",
    }
    for old, new in renames.items():
        if old in obj:
            out[new] = obj[old]
    out.setdefault("eventTime", None)
    return out


_V1_EVENT_FIELDS = {
    "regarding.": "involvedObject.",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
}


def events_v1_field_selector(text: str | None) -> str | None:
    """A field selector of events.k8s.io/v1 in the core Event's field names."""
    if not text:
        return text
    for new, old in _V1_EVENT_FIELDS.items():
        text = text.replace(new, old)
    return text


@dataclass
class Route:
    """What a path names (a discovery document, or a resource and its parts)."""

    res: Resource | None = None  # None: a discovery/non-resource path
    view: Resource | None = None  # the type as served (EVENTS_V1 for events.k8s.io)
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    watch_path: bool = False  # the deprecated /watch/ prefix
    discovery: JSON | None = None
    text: str | None = None


@dataclass
class Ctx:
    """What the access log records about one request, filled in as it is understood."""

    start: float
    verb: str = "get"
    route: Route = field(default_factory=Route)
    name: str | None = None
    dry_run: bool = False
    recorded: bool = False


def resolve(path: str, *, address: str, kueue_installed: bool) -> Route:
    """The route of ``path``; ``address`` is the server's ``host:port`` (``/api``
    names it); the Kueue groups exist only while ``kueue_installed``."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return Route(discovery={"paths": ["/api", "/api/v1", "/apis", "/version"]})
    if parts[0] in ("healthz", "readyz", "livez") and len(parts) == 1:
        return Route(text="ok")
    if parts == ["version"]:
        return Route(discovery=_VERSION)
    if parts == ["api"]:
        return Route(
            discovery={
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": address}
                ],
            }
        )
    if parts == ["apis"]:
        return Route(discovery=_group_list())
    if parts[0] == "apis" and len(parts) == 2:
        versions = _groups().get(parts[1])
        return Route(discovery=_api_group(parts[1], versions) if versions else None)
    if parts[0] == "api" and len(parts) >= 2 and parts[1] == "v1":
        group, version, rest = "", "v1", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return Route()
    served = _served(group, version)
    if served is None or (group in _KUEUE_GROUPS and not kueue_installed):
        return Route()
    if not rest:
        return Route(discovery=_resource_list(group, version))
    route = Route()
    if rest[0] == "watch":
        route.watch_path = True
        rest = rest[1:]
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in served:
        route.namespace = rest[1]
        rest = rest[2:]
    view = served.get(rest[0]) if rest else None
    if view is None or len(rest) > 3:
        return Route()
    if view.namespaced != (route.namespace is not None) and not (
        view.namespaced and len(rest) == 1
    ):
        return Route()  # a namespaced type addressed without namespace (or the reverse)
    route.view = view
    route.res = EVENTS if view is EVENTS_V1 else view
    route.name = rest[1] if len(rest) >= 2 else None
    route.subresource = rest[2] if len(rest) == 3 else None
    return route


# --------------------------------------------------------------------------- discovery

_VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0+kf-test",
    "gitCommit": "kf-test",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_SERVED: tuple[Resource, ...] = (
    *RESOURCES,
    EVENTS_V1,
    WORKLOADS,
    LOCAL_QUEUES,
    VISIBILITY_LOCAL_QUEUES,
)
#: Groups served only while the simulated Kueue is installed.
_KUEUE_GROUPS = frozenset({WORKLOADS.group, VISIBILITY_LOCAL_QUEUES.group})


def _served(group: str, version: str) -> dict[str, Resource] | None:
    found = {r.plural: r for r in _SERVED if r.group == group and r.version == version}
    return found or None


def _groups() -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for r in _SERVED:
        if r.group and r.version not in groups.setdefault(r.group, []):
            groups[r.group].append(r.version)
    return groups


def _api_group(name: str, versions: list[str]) -> JSON:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def _group_list() -> JSON:
    groups = [_api_group(n, v) for n, v in _groups().items()]
    for g in groups:
        del g["kind"], g["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _resource_list(group: str, version: str) -> JSON:
    resources: list[JSON] = []
    for r in _SERVED:
        if r.group != group or r.version != version:
            continue
        verbs = ["get", "list", "watch"] if r is EVENTS_V1 else _VERBS_ALL
        entry: JSON = {
            "name": r.plural,
            "singularName": r.kind.lower(),
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs,
        }
        if r.plural in _SHORT_NAMES and not group:
            entry["shortNames"] = _SHORT_NAMES[r.plural]
        resources.append(entry)
        if has_status_subresource(r):
            resources.append(
                {
                    "name": f"{r.plural}/status",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if r is PODS:
            resources.append(
                {
                    "name": "pods/log",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Pod",
                    "verbs": ["get"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
