"""Backend settings given as flat fields (an orchestrator's block or connection form):
which field belongs to which backend, and the :mod:`kf_trainer_core.config` model they
build.

One rule for every adapter: ``kubernetes`` takes the cluster fields
(:data:`KUBERNETES_FIELDS`) and the API tuning; ``local`` takes :data:`LOCAL_FIELDS`;
``container`` takes those plus the container engine's own settings
(:data:`CONTAINER_FIELDS`). A field given to a backend that does not use it is an
error naming it and the fix, never silently dropped.
"""

from __future__ import annotations

import difflib
import json
import string
from collections.abc import Iterable, Mapping
from typing import Any

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.config import ContainerConfig, KubernetesConfig, LocalConfig
from kf_trainer_core.errors import SpecError

__all__ = [
    "BACKENDS",
    "CONTAINER_FIELDS",
    "KUBERNETES_FIELDS",
    "LOCAL_FIELDS",
    "BackendConfig",
    "check_dashboard_url",
    "check_known_fields",
    "config_from_fields",
    "fields_of_config",
    "flat_fields",
    "parse_config",
    "problems_text",
    "retention_field",
]

BackendConfig = KubernetesConfig | LocalConfig

BACKENDS = ("kubernetes", "local", "container")
#: Fields that only mean something for a cluster.
KUBERNETES_FIELDS = (
    "kubeconfig",
    "kubeconfig_content",
    "context",
    "in_cluster",
    "host",
    "token",
    "ca_cert",
    "ca_cert_data",
    # MultiKueue: how the suite reaches the worker clusters (docs/kueue.md).
    "multikueue_workers",
    "kueue_namespace",
)
#: How the client talks to a cluster (each has a default).
KUBERNETES_TUNING = ("verify_ssl", "watch_timeout", "poll_interval", "request_timeout")
#: The local backend's fields (the container backend's too).
LOCAL_FIELDS = ("state_dir", "python", "use_venv", "on_missing_resources")
#: The container backend's own settings, beyond the local backend's.
CONTAINER_FIELDS = frozenset(ContainerConfig.model_fields) - frozenset(LocalConfig.model_fields)

_DASHBOARD_PLACEHOLDERS = frozenset({"namespace", "name"})
#: Every backend's field: the ``Retention`` stamped on each job it submits.
RETENTION_FIELD = "retention"


def retention_field(value: Any) -> Any:
    """The ``retention`` field as a form or a connection's extra gives it: a mapping
    (``{"keep_last": 3}``), its JSON text, or a ``Retention``; blank text is unset. The
    config model checks the values."""
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(
                f"retention {shown(value)} is not JSON. Fix: write an object, e.g. "
                '{"after_finished_seconds": 86400} or {"keep_last": 3}.'
            ) from None
    return value


def problems_text(err: SpecError, names: Mapping[str, str] | None = None) -> str:
    """A config's validation problems as ``field: problem Fix: fix; …``, each field
    under the name the user gave it (``names`` maps the config's names to those)."""
    names = names or {}
    return "; ".join(
        (f"{names.get(p.field, p.field)}: " if p.field else "")
        + p.problem
        + (f" Fix: {p.fix}" if p.fix else "")
        for p in err.problems
    )


def parse_config(
    model: type[KubernetesConfig] | type[LocalConfig],
    data: Mapping[str, Any],
    names: Mapping[str, str] | None = None,
) -> BackendConfig:
    """``model`` from flat fields named as its own; ``ValueError`` (without the model's
    name, each field under its name in ``names``) when they are wrong."""
    try:
        parsed: BackendConfig = model.parse(dict(data))
        return parsed
    except SpecError as exc:
        raise ValueError(problems_text(exc, names)) from None


def _stray(backend: str, names: list[str], owner: str) -> ValueError:
    one = len(names) == 1
    return ValueError(
        f"{', '.join(names)} {'applies' if one else 'apply'} only to backend {owner!r}, but "
        f"backend is {backend!r}. Fix: clear {'it' if one else 'them'}, or set backend to "
        f"{owner!r}."
    )


def _changed(given: Mapping[str, Any], fields: Iterable[str], model: type[Any]) -> list[str]:
    # A form sends every field, the defaults included: only a changed one is given.
    return [f for f in fields if f in given and given[f] != model.model_fields[f].default]


def config_from_fields(
    values: Mapping[str, Any], names: Mapping[str, str] | None = None
) -> BackendConfig:
    """The backend config of flat fields: ``backend``, ``namespace``, the fields above
    (``None`` for unset ones, ``use_venv`` ``False``), ``list_page_size``,
    ``retention`` (every backend's: a mapping or its JSON text) and ``container`` (a
    mapping of the container backend's settings; but for ``host``, the cluster's field,
    they may be given flat too).

    Raises ``ValueError`` naming the fields at fault (under their names in ``names``,
    an adapter's own names of them) and the fix.
    """
    names = names or {}
    backend = values.get("backend", "kubernetes")
    if backend not in BACKENDS:
        raise ValueError(
            f"backend is {shown(backend)}. Fix: use 'kubernetes', 'local' or 'container'."
        )
    given = {k: v for k, v in values.items() if v is not None}
    if RETENTION_FIELD in given:
        given[RETENTION_FIELD] = retention_field(given[RETENTION_FIELD])
    if "container" in given and backend != "container":
        raise ValueError(
            f"container applies only to backend 'container', but backend is "
            f"{shown(backend)}. Fix: clear it, or set backend to 'container'."
        )
    # The container backend's own settings, flat (a connection's extra has them so).
    flat = sorted(CONTAINER_FIELDS - {"host"})
    stray = _changed(given, flat, ContainerConfig) if backend != "container" else []
    if stray:
        raise _stray(backend, [names.get(f, f) for f in stray], "container")
    if backend in ("local", "container"):
        stray = [f for f in KUBERNETES_FIELDS if f in given]
        stray += _changed(given, (*KUBERNETES_TUNING, "list_page_size"), KubernetesConfig)
        if stray:
            raise _stray(backend, [names.get(f, f) for f in stray], "kubernetes")
        local = {k: given[k] for k in (*LOCAL_FIELDS, "namespace", RETENTION_FIELD) if k in given}
        if backend == "container":
            settings = {**{k: given[k] for k in flat if k in given}, **given.get("container", {})}
            return parse_config(ContainerConfig, {**local, **settings}, names)
        return parse_config(LocalConfig, local, names)
    stray = _changed(given, LOCAL_FIELDS, LocalConfig)
    if stray:
        raise _stray(backend, [names.get(f, f) for f in stray], "local")
    cluster = {
        k: given[k]
        for k in (
            *KUBERNETES_FIELDS,
            "namespace",
            *KUBERNETES_TUNING,
            "list_page_size",
            RETENTION_FIELD,
        )
        if k in given
    }
    return parse_config(KubernetesConfig, cluster, names)


def fields_of_config(config: BackendConfig) -> dict[str, Any]:
    """The flat fields of a config (the inverse of :func:`config_from_fields`): the
    container backend's own settings under ``container``, unset ones left out."""
    data = {k: getattr(config, k) for k in type(config).model_fields}
    if isinstance(config, ContainerConfig):
        data["container"] = {
            k: data.pop(k) for k in sorted(CONTAINER_FIELDS) if data[k] is not None
        }
    return {k: v for k, v in data.items() if v is not None}


def flat_fields(value: object) -> dict[str, Any] | None:
    """The flat fields of a backend config or of its dict form (a container config's
    flat form puts its own settings under ``container``); ``None`` for anything else."""
    if isinstance(value, (KubernetesConfig, LocalConfig)):
        return fields_of_config(value)
    if isinstance(value, Mapping):
        data = dict(value)
        if data.get("backend") == "container" and "container" not in data:
            return fields_of_config(parse_config(ContainerConfig, data))
        if "backend" not in data or data["backend"] in BACKENDS:
            return data
    return None


def check_dashboard_url(value: str | None) -> str | None:
    """A dashboard link template: an http(s) URL whose placeholders are ``{namespace}``
    and ``{name}``; ``ValueError`` naming the fix otherwise."""
    if value is None:
        return None
    if not value.startswith(("http://", "https://")):
        raise ValueError(
            f"dashboard_url {shown(value)} is not an http(s) URL. Fix: give a URL such as "
            "https://kubeflow.example.com/trainjobs/{namespace}/{name}."
        )
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(value) if f is not None}
    except ValueError as exc:
        raise ValueError(
            f"dashboard_url has a malformed placeholder ({exc}). Fix: use {{namespace}} "
            "and {name}; write other braces as {{ and }}."
        ) from None
    unknown = sorted(fields - _DASHBOARD_PLACEHOLDERS)
    if unknown:
        raise ValueError(
            f"dashboard_url uses unknown placeholders {unknown}. Fix: use only "
            "{namespace} and {name}."
        )
    return value


def check_known_fields(
    given: Iterable[str], known: Iterable[str], whose: str = "the block's"
) -> None:
    """Refuse fields that are not ``known`` (a misspelt setting must not be dropped
    silently), suggesting the closest known name; the fix lists ``whose`` fields (a
    Prefect block's, an Airflow connection extra's)."""
    unknown = sorted(given)
    if not unknown:
        return
    names = sorted(known)
    hints = [
        f"{u} (did you mean {close[0]}?)" if close else u
        for u in unknown
        for close in [difflib.get_close_matches(u, names, n=1, cutoff=0.6)]
    ]
    raise ValueError(
        f"unknown field(s) {', '.join(hints)}. Fix: use {whose} fields: {', '.join(names)}."
    )
