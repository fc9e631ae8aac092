"""``KubeflowTrainerHook``: an Airflow connection turned into a Trainer client.

A connection of type ``kubeflow_trainer`` says where jobs run — a cluster (kubeconfig
file or inline kubeconfig, a context, the in-cluster service account, or an API server
URL with a bearer token) or this machine (the local backend) — and in which namespace.
A ``kubernetes`` connection of the cncf-kubernetes provider is read as well, so that an
existing one can be reused.

The hook only translates: clients come from :mod:`kf_trainer_core.client`, imported when
a client is asked for (importing this module does not import the Kubernetes clients).
Credentials stay ``SecretStr`` inside the core's config and are registered with Airflow's
secrets masker, so they do not reach task logs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kf_trainer_airflow._compat import AirflowNotFoundException, BaseHook
from kf_trainer_airflow._secrets import KUBECONFIG_SECRETS, credential_values, raw_secrets, scrub
from kf_trainer_airflow.provider_info import (
    CONN_FIELDS,
    CONN_TYPE,
    DEFAULT_CONN_ID,
    UI_FIELD_BEHAVIOUR,
)
from kf_trainer_core.config import KubernetesConfig, LocalConfig, parse_backend
from kf_trainer_core.tasks import load_json, shown
from kf_trainer_core.tasks.backend_fields import (
    CONTAINER_FIELDS,
    check_dashboard_url,
    check_known_fields,
    config_from_fields,
)

if TYPE_CHECKING:
    from kf_trainer_airflow._compat import Connection
    from kf_trainer_core.client import AsyncTrainerClient, TrainerClient

BackendConfig = KubernetesConfig | LocalConfig

#: The cncf-kubernetes provider's connection type, read for reuse.
KUBERNETES_CONN_TYPE = "kubernetes"

# Extra keys beyond the form's fields (tuning that rarely needs a widget).
_TUNING = {
    "watch_timeout",
    "poll_interval",
    "request_timeout",
    "list_page_size",
    "use_venv",
    "on_missing_resources",
    "retention",
    # MultiKueue (docs/kueue.md): {"<MultiKueueCluster>": {"context": ...}} as JSON.
    "multikueue_workers",
    "kueue_namespace",
}
# The cncf-kubernetes names, accepted in our connections too: people copy them over.
_ALIASES = {
    "kube_config_path": "kubeconfig_path",
    "kube_config": "kubeconfig",
    "cluster_context": "context",
}
# The container backend's settings (Extra keys; the connection's Host is the engine's).
_CONTAINER_KEYS = set(CONTAINER_FIELDS) - {"host"}
# What a cncf-kubernetes connection says (the rest of its extra is its own business).
_KUBERNETES_KEYS = {"namespace", "in_cluster", "disable_verify_ssl", *_ALIASES}
# The core's fields under the names a connection gives them, for errors.
_NAMES = {
    "kubeconfig": "kubeconfig_path",
    "kubeconfig_content": "kubeconfig",
    "token": "password (bearer token)",
}
_KUBERNETES_NAMES = {"kubeconfig": "kube_config_path", "kubeconfig_content": "kube_config"}


class ConnectionConfigError(ValueError):
    """A connection that cannot become a backend config; the message names the
    connection, the field and the fix."""


@dataclass(frozen=True)
class TrainerConnection:
    """What a connection says: the backend config and the dashboard link template."""

    # The dataclass's repr shows the config's, which hides its secrets.
    config: BackendConfig
    dashboard_url: str | None = None


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _as_bool(value: Any, field: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConnectionConfigError(
        f"{where}: extra `{field}` is {shown(value)}, not a boolean. Fix: set it to true or false."
    )


def _unprefixed(extra: Mapping[str, Any], conn_type: str) -> dict[str, Any]:
    """Extra keys without Airflow's legacy ``extra__<type>__`` prefix, blanks dropped."""
    prefix = f"extra__{conn_type}__"
    out: dict[str, Any] = {}
    for key, value in extra.items():
        name = key[len(prefix) :] if key.startswith(prefix) else key
        if not _blank(value):
            out[name] = value
    return out


def _extra_fields(where: str, extra: Mapping[str, Any], conn_type: str) -> dict[str, Any]:
    """The extra's fields under this provider's names: the cncf-kubernetes ones renamed,
    ``disable_verify_ssl`` turned round; an unknown one of ours is refused."""
    fields = _unprefixed(extra, conn_type)
    if conn_type == KUBERNETES_CONN_TYPE:
        fields = {k: v for k, v in fields.items() if k in _KUBERNETES_KEYS}
    for alias, name in _ALIASES.items():
        if alias in fields:
            fields.setdefault(name, fields.pop(alias))
    if "disable_verify_ssl" in fields:
        disabled = _as_bool(fields.pop("disable_verify_ssl"), "disable_verify_ssl", where)
        fields.setdefault("verify_ssl", not disabled)
    known = set(CONN_FIELDS) | _TUNING | _CONTAINER_KEYS
    try:
        check_known_fields(set(fields) - known, known, "the extra's")
    except ValueError as err:
        raise ConnectionConfigError(f"{where}: {err}") from None
    if "kubeconfig_path" in fields and "kubeconfig" in fields:
        names = _KUBERNETES_NAMES if conn_type == KUBERNETES_CONN_TYPE else _NAMES
        raise ConnectionConfigError(
            f"{where}: both `{names['kubeconfig']}` and `{names['kubeconfig_content']}` are "
            "set. Fix: keep one."
        )
    return fields


def parse_connection(
    conn_type: str | None,
    *,
    host: str | None = None,
    password: str | None = None,
    extra: Mapping[str, Any] | None = None,
    conn_id: str = "<connection>",
    namespace: str | None = None,
) -> TrainerConnection:
    """Turn a connection's fields into a :class:`TrainerConnection`: they are translated
    into the core's flat backend fields, which the core parses and checks
    (:func:`~kf_trainer_core.tasks.backend_fields.config_from_fields`).

    ``conn_type`` ``kubeflow_trainer`` reads the fields of this provider's form;
    ``kubernetes`` reads the cncf-kubernetes provider's (``in_cluster``,
    ``kube_config_path``, ``kube_config``, ``cluster_context``, ``namespace``,
    ``disable_verify_ssl``). ``namespace`` overrides the connection's.
    Raises :class:`ConnectionConfigError` naming the field and the fix.
    """
    where = f"connection {conn_id!r}"
    if conn_type not in (CONN_TYPE, KUBERNETES_CONN_TYPE, None, ""):
        raise ConnectionConfigError(
            f"{where} has type {shown(conn_type)}. Fix: use a {shown(CONN_TYPE)} connection (or a "
            f"{shown(KUBERNETES_CONN_TYPE)} one from the cncf-kubernetes provider)."
        )
    kind = conn_type or CONN_TYPE
    fields = _extra_fields(where, extra or {}, kind)
    try:  # a bad template fails here, as Prefect's block does, not as a missing link later
        dashboard = check_dashboard_url(fields.pop("dashboard_url", None))
    except ValueError as exc:
        raise ConnectionConfigError(f"{where}: {exc}") from None
    backend = str(fields.pop("backend", "kubernetes")).strip().lower()
    values: dict[str, Any] = {**fields, "backend": backend}
    if namespace:
        values["namespace"] = namespace
    if "kubeconfig" in values:  # text, or a JSON object inside the extra
        values["kubeconfig_content"] = values.pop("kubeconfig")
    if "kubeconfig_path" in values:
        values["kubeconfig"] = str(values.pop("kubeconfig_path"))
    if kind == KUBERNETES_CONN_TYPE:  # its Host and Password are not read (its form hides them)
        host = password = None
    url = (host or "").strip()
    if url and backend == "container":  # the container engine's address
        values["container"] = {"host": url}
    elif url:  # the form's Host holds "my-cluster:6443" as often as a URL: assume TLS then
        values["host"] = url if "://" in url else f"https://{url}"
    if not _blank(password):
        if not url and backend == "kubernetes":
            raise ConnectionConfigError(
                f"{where}: a bearer token (password) needs the API server URL. Fix: set "
                "Host to the cluster's URL, or clear the password to use a kubeconfig."
            )
        values["token"] = password
    names = _KUBERNETES_NAMES if kind == KUBERNETES_CONN_TYPE else _NAMES
    try:
        return TrainerConnection(config_from_fields(values, names), dashboard)
    except ValueError as err:
        raise ConnectionConfigError(f"{where}: {err}") from None


def secrets_of(config: BackendConfig) -> list[str]:
    """Every credential a config holds, for Airflow's secrets masker: the token, the CA
    data, the inline kubeconfig and each credential inside it."""
    if not isinstance(config, KubernetesConfig):
        return []
    found: list[str] = []
    for secret in (config.token, config.kubeconfig_content, config.ca_cert_data):
        if secret is not None:
            found.append(secret.get_secret_value())
    try:
        document = config.kubeconfig_dict()
    except Exception:  # malformed YAML raises YAMLError, not ValueError: any type here
        document = None
        if config.kubeconfig_content is not None:
            found.extend(credential_values(config.kubeconfig_content.get_secret_value()))

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in KUBECONFIG_SECRETS and isinstance(value, str) and value:
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(document)
    return found


def _readable(config: BackendConfig) -> None:
    """Parse an inline kubeconfig now, where a failure is reported without its text
    (later, the client's loader would raise the parser's error, which quotes it)."""
    if isinstance(config, KubernetesConfig) and config.kubeconfig_content is not None:
        config.kubeconfig_dict()


def _describe(err: BaseException) -> str:
    """An error's text without quotations of the input: a YAML error says where and
    what, never the (possibly cut, so unmaskable) line it found."""
    import yaml

    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        return f"the inline kubeconfig is not valid YAML or JSON ({at}{err.problem})"
    if isinstance(err, yaml.YAMLError):
        return "the inline kubeconfig is not valid YAML or JSON"
    return f"{type(err).__name__}: {err}"


def _mask(values: list[str]) -> None:
    from kf_trainer_airflow._compat import _first

    mask_secret = _first("mask_secret", "airflow.sdk.log", "airflow.providers.common.compat.sdk")
    for value in values:
        mask_secret(value)


async def _amask(values: list[str]) -> None:
    try:
        from airflow.sdk.log import amask_secret
    except ImportError:  # Airflow < 3.3: the sync masker is what there is
        _mask(values)
        return
    for value in values:
        await amask_secret(value)


class KubeflowTrainerHook(BaseHook):
    """Clients for the backend a ``kubeflow_trainer`` (or ``kubernetes``) connection
    describes.

    :param kubeflow_trainer_conn_id: the connection; when it is the default one and does
        not exist, the usual discovery applies (``$KUBECONFIG``, ``~/.kube/config``,
        then the in-cluster service account).
    :param namespace: namespace of the jobs, overriding the connection's.
    :param config: a ready backend config (or its dict form) instead of a connection.
    """

    conn_name_attr = "kubeflow_trainer_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Kubeflow Trainer"

    def __init__(
        self,
        kubeflow_trainer_conn_id: str | None = default_conn_name,
        *,
        namespace: str | None = None,
        config: BackendConfig | Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.kubeflow_trainer_conn_id = kubeflow_trainer_conn_id
        self.namespace = namespace
        self._given = config

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(conn_id={self.kubeflow_trainer_conn_id!r}, "
            f"namespace={self.namespace!r})"
        )

    # -- settings -------------------------------------------------------------------
    def _from_given(self) -> TrainerConnection | None:
        if self._given is None:
            return None
        given = self._given
        if isinstance(given, Mapping):
            given = parse_backend(dict(given))
        if self.namespace:
            given = given.model_copy(update={"namespace": self.namespace})
        return TrainerConnection(given)

    def _from_connection(self, conn: Connection | None) -> TrainerConnection:
        """The connection parsed; its raw secrets never reach an error's text, whatever
        goes wrong (register them with the masker first: see :meth:`_guarded`)."""
        if conn is None:
            return TrainerConnection(
                KubernetesConfig(namespace=self.namespace) if self.namespace else KubernetesConfig()
            )
        extra: dict[str, Any] = {}
        if conn.extra:
            try:
                loaded = load_json(conn.extra, "extra")
            except ValueError as exc:
                raise ConnectionConfigError(
                    f"connection {shown(conn.conn_id)}: {exc} Fix: write it as a JSON object, "
                    'e.g. {"namespace": "team-a"}.'
                ) from None
            if not isinstance(loaded, dict):
                raise ConnectionConfigError(
                    f"connection {shown(conn.conn_id)}: extra is not a JSON object. Fix: write "
                    'it as {"field": value, ...}.'
                )
            extra = loaded
        return parse_connection(
            conn.conn_type,
            host=conn.host,
            password=conn.password,
            extra=extra,
            conn_id=conn.conn_id,
            namespace=self.namespace,
        )

    @contextlib.contextmanager
    def _missing_ok(self) -> Iterator[None]:
        """The default connection may be absent: the usual discovery applies then."""
        try:
            yield
        except AirflowNotFoundException:
            if self.kubeflow_trainer_conn_id not in (None, self.default_conn_name):
                raise

    def _parsed(
        self, conn: Connection | None, secrets: list[str]
    ) -> tuple[TrainerConnection, list[str]]:
        """The connection parsed, once its raw ``secrets`` are with the masker, and the
        credentials found inside it (for the masker too)."""
        with self._guarded(conn, secrets):
            found = self._from_connection(conn)
            parsed = secrets_of(found.config)
            _readable(found.config)
        return found, parsed

    @cached_property
    def settings(self) -> TrainerConnection:
        """The connection's backend config and dashboard link (read once)."""
        found = self._from_given()
        if found is None:
            conn = None
            with self._missing_ok():
                if self.kubeflow_trainer_conn_id:
                    conn = self.get_connection(self.kubeflow_trainer_conn_id)
            secrets = self._raw_secrets(conn)
            _mask(secrets)
            found, parsed = self._parsed(conn, secrets)
            _mask(parsed)
        return found

    async def asettings(self) -> TrainerConnection:
        """:attr:`settings` for event loops (triggers): reads the connection without
        blocking the loop."""
        found = self.__dict__.get("settings") or self._from_given()
        if found is None:
            conn = None
            with self._missing_ok():
                if self.kubeflow_trainer_conn_id:
                    conn = await self._aconnection(self.kubeflow_trainer_conn_id)
            secrets = self._raw_secrets(conn)
            await _amask(secrets)
            found, parsed = self._parsed(conn, secrets)
            await _amask(parsed)
        self.__dict__["settings"] = found
        return found

    @staticmethod
    def _raw_secrets(conn: Connection | None) -> list[str]:
        if conn is None:
            return []
        try:
            extra = load_json(conn.extra, "extra") if conn.extra else {}
        except ValueError:
            extra = {}
        return raw_secrets(conn.password, extra if isinstance(extra, dict) else {})

    @contextlib.contextmanager
    def _guarded(self, conn: Connection | None, secrets: list[str]) -> Iterator[None]:
        """Errors while reading the connection, of any type, leave with their
        credentials replaced by ``***`` (and without the original as their cause, whose
        text would still hold them)."""
        try:
            yield
        except ConnectionConfigError as err:
            if any(s in str(err) for s in secrets):
                raise ConnectionConfigError(scrub(str(err), secrets)) from None
            raise
        except Exception as err:
            where = f"connection {conn.conn_id!r}" if conn is not None else "the connection"
            text = scrub(_describe(err), secrets)
            raise ConnectionConfigError(
                f"{where} cannot be read ({text}). Fix: check its fields (an inline "
                "kubeconfig must be a whole, valid YAML or JSON kubeconfig)."
            ) from None

    async def _aconnection(self, conn_id: str) -> Connection:
        reader = getattr(self, "aget_connection", None)
        if reader is not None:
            conn: Connection = await reader(conn_id)
            return conn
        # Airflow < 3.1 has no async lookup: keep the event loop free meanwhile.
        import asyncio

        return await asyncio.to_thread(self.get_connection, conn_id)

    def get_backend_config(self) -> BackendConfig:
        """The backend config the connection describes."""
        return self.settings.config

    # -- clients --------------------------------------------------------------------
    def get_client(self) -> TrainerClient:
        """A :class:`~kf_trainer_core.client.TrainerClient` for the connection's backend
        (close it, or use it in a ``with`` block)."""
        from kf_trainer_core.client import TrainerClient

        return TrainerClient(self.get_backend_config())

    def get_conn(self) -> TrainerClient:
        """Same as :meth:`get_client` (Airflow's hook protocol)."""
        return self.get_client()

    async def aget_client(self) -> AsyncTrainerClient:
        """An :class:`~kf_trainer_core.client.AsyncTrainerClient`, made in the running
        event loop (where it must be used)."""
        from kf_trainer_core.client import AsyncTrainerClient

        settings = await self.asettings()
        return AsyncTrainerClient(settings.config)

    def dashboard_url(self, name: str, namespace: str, template: str | None = None) -> str | None:
        """The job's page on a dashboard, from ``template`` or the connection's
        ``dashboard_url``, with ``{name}`` and ``{namespace}`` filled in."""
        chosen = template or self.settings.dashboard_url
        if not chosen:
            return None
        try:
            return chosen.format(name=name, namespace=namespace, job_name=name)
        except (KeyError, IndexError, ValueError) as exc:
            self.log.warning("dashboard_url %r cannot be filled in (%s): no link", chosen, exc)
            return None

    def test_connection(self) -> tuple[bool, str]:
        """List the runtimes the backend offers (the UI's *Test* button)."""
        try:
            with self.get_client() as client:
                runtimes = client.list_runtimes()
        except Exception as exc:
            # Shown in the UI, where the masker does not reach: take credentials out here.
            secrets = self._connection_secrets()
            return False, scrub(_describe(exc), secrets)
        names = ", ".join(sorted(r.name for r in runtimes)) or "none"
        return True, f"Connected; runtimes: {names}"

    def _connection_secrets(self) -> list[str]:
        found = list(secrets_of(self.settings.config)) if "settings" in self.__dict__ else []
        if self.kubeflow_trainer_conn_id and self._given is None:
            with contextlib.suppress(Exception):  # no connection: nothing of it to hide
                found += self._raw_secrets(self.get_connection(self.kubeflow_trainer_conn_id))
        return sorted(set(found), key=len, reverse=True)

    # -- forms for Airflow < 3.2 (3.2+ reads provider_info's conn-fields) ----------
    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The extra fields as WTForms widgets, for Airflow versions that still build the
        connection form from hooks."""
        import importlib

        # Only Airflow < 3.2 calls this, and only where Flask-AppBuilder is installed.
        fab = importlib.import_module("flask_appbuilder.fieldwidgets")
        wtforms = importlib.import_module("wtforms")
        widgets: dict[str, Any] = {}
        for name, spec in CONN_FIELDS.items():
            schema = spec["schema"]
            kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            label = spec["label"]
            if "boolean" in kinds:
                widgets[name] = wtforms.BooleanField(label, description=spec.get("description"))
            elif schema.get("format") == "password":
                widgets[name] = wtforms.PasswordField(label, widget=fab.BS3PasswordFieldWidget())
            else:
                widgets[name] = wtforms.StringField(label, widget=fab.BS3TextFieldWidget())
        return widgets

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Hidden and relabelled standard fields, for Airflow < 3.2."""
        return {
            "hidden_fields": list(UI_FIELD_BEHAVIOUR["hidden-fields"]),
            "relabeling": dict(UI_FIELD_BEHAVIOUR["relabeling"]),
            "placeholders": dict(UI_FIELD_BEHAVIOUR["placeholders"]),
        }
