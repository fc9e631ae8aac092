"""Where the client runs its jobs: a Kubernetes cluster (kubeconfig, in-cluster service
account, or explicit host and token) or this machine (the local backend: processes, or
containers with :class:`ContainerConfig`).

These are plain, JSON-serialisable settings — what an Airflow connection, a Prefect
block or a KFP component argument holds — so that switching from a laptop to a cluster
is a configuration change, never a code change. Secrets are ``SecretStr``: they do not
appear in reprs, logs or dumps.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator

from kf_trainer_core.base.errors import ClusterConfigError, FieldProblem, SpecError
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.fields import checks
from kf_trainer_core.fields._model import SpecModel, did_you_mean, fix
from kf_trainer_core.fields.retention import Retention

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: Where the local and container backends keep their jobs unless ``state_dir`` says.
STATE_DIR_ENV = "KF_TRAINER_STATE_DIR"
DEFAULT_STATE_DIR = "~/.kf-trainer/local"


class MultiKueueWorker(SpecModel):
    """How the suite reaches one MultiKueue worker cluster (a value of
    :attr:`KubernetesConfig.multikueue_workers`): a context of the manager's own
    kubeconfig (its file, or its inline ``kubeconfig_content``), or a kubeconfig file of
    its own. Nothing secret is held here: the credentials stay in the kubeconfig."""

    _error_title: ClassVar[str] = "Invalid backend configuration"

    #: A kubeconfig file for the worker (default: the manager's kubeconfig).
    kubeconfig: str | None = None
    #: The context to use (default: that kubeconfig's current context).
    context: str | None = None

    @model_validator(mode="after")
    def _something(self) -> MultiKueueWorker:
        if not self.kubeconfig and not self.context:
            raise ValueError(
                fix(
                    "a worker entry names neither a kubeconfig file nor a context.",
                    'give {"context": "<the worker\'s context>"} (of the same kubeconfig) '
                    'or {"kubeconfig": "<path>"}.',
                )
            )
        return self


class KubernetesConfig(SpecModel):
    """Access to a cluster running Kubeflow Trainer.

    With no field set, the usual discovery applies: ``$KUBECONFIG`` or
    ``~/.kube/config``, else the in-cluster service account.
    """

    _error_title: ClassVar[str] = "Invalid backend configuration"

    backend: Literal["kubernetes"] = "kubernetes"
    kubeconfig: str | None = None
    #: A whole kubeconfig document (YAML or JSON text, or a mapping): it can hold keys.
    kubeconfig_content: SecretStr | None = Field(default=None, repr=False)
    context: str | None = None
    in_cluster: bool | None = None
    host: str | None = None
    token: SecretStr | None = Field(default=None, repr=False)
    ca_cert: str | None = None
    #: Inline PEM of the CA, for connections stored in an orchestrator.
    ca_cert_data: SecretStr | None = Field(default=None, repr=False)
    verify_ssl: bool = True
    namespace: str | None = None
    #: Idle timeout of streams (seconds): a watch or a followed log that stays silent
    #: this long is taken for a dead connection (a half-open socket, a black-holed
    #: path), closed and reopened where it stopped — a watch from its last
    #: resourceVersion, a log after its last line. Each watch asks the server to end it
    #: after three quarters of this, so a live one always speaks in time; a quiet log is
    #: simply reopened. A lost connection is noticed this long after it went silent at
    #: the latest (docs/troubleshooting.md, "When the network goes silent").
    watch_timeout: int = Field(default=60, ge=2, le=3600)
    #: Where watching is forbidden (RBAC without `watch`), list this often instead.
    poll_interval: float = Field(default=2.0, gt=0)
    #: Seconds to connect (TCP and TLS) and, for a plain request, to wait for each part
    #: of its answer; a read that hears nothing this long fails and is retried.
    request_timeout: float = Field(default=30.0, gt=0)
    #: Objects per request when listing (``limit``/``continue``): each page is reduced
    #: to what is needed before the next is read, so memory stays near one page.
    list_page_size: int = Field(default=250, ge=1, le=5000)
    #: The retention stamped on every job this backend submits whose spec has no
    #: ``Retention`` option of its own (``docs/retention.md``); ``None``: none.
    retention: Retention | None = None
    #: MultiKueue: how the suite reaches each worker cluster, by the name of its
    #: ``MultiKueueCluster`` on this (the manager) cluster. A worker not named here is
    #: reached through the kubeconfig Secret its MultiKueueCluster names, where these
    #: credentials may read it (docs/kueue.md, "MultiKueue").
    multikueue_workers: dict[str, MultiKueueWorker] = Field(default_factory=dict)
    #: The namespace of Kueue's own objects on the manager (the kubeconfig Secrets of
    #: its MultiKueueClusters).
    kueue_namespace: str = "kueue-system"

    @field_validator("kubeconfig_content", mode="before")
    @classmethod
    def _content(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return json.dumps(v)
        return v

    @field_validator("kubeconfig_content")
    @classmethod
    def _content_parses(cls, v: SecretStr | None) -> SecretStr | None:
        # Settle it here, where the config is made (a connection or block is saved),
        # with an error that cannot quote the document's keys.
        if v is not None:
            _kubeconfig_mapping(v.get_secret_value(), "")
        return v

    @field_validator("multikueue_workers", mode="before")
    @classmethod
    def _workers(cls, v: Any) -> Any:
        # A form or a connection's extra gives JSON text; a context alone is a string.
        if isinstance(v, str):
            if not v.strip():
                return {}
            try:
                v = json.loads(v)
            except ValueError:
                raise ValueError(
                    fix(
                        f"{shown(v)} is not JSON.",
                        'write an object, e.g. {"worker1": {"context": "worker1"}}.',
                    )
                ) from None
        if isinstance(v, dict):
            return {k: {"context": w} if isinstance(w, str) else w for k, w in v.items()}
        return v

    @field_validator("multikueue_workers")
    @classmethod
    def _worker_names(cls, v: dict[str, MultiKueueWorker]) -> dict[str, MultiKueueWorker]:
        for name in v:
            if not (len(name) <= 253 and checks.DNS_SUBDOMAIN.match(name)):
                raise ValueError(
                    fix(
                        f"{shown(name)} is not a MultiKueueCluster name.",
                        "use the names `kubectl get multikueueclusters` shows on the manager.",
                    )
                )
        return v

    def worker_config(
        self, cluster: str, kubeconfig_content: str | None = None
    ) -> KubernetesConfig:
        """The configuration that reaches MultiKueue worker ``cluster``: its entry of
        :attr:`multikueue_workers`, else ``kubeconfig_content`` (the document of its
        MultiKueueCluster's Secret). The timeouts and namespace are this config's."""
        tuning = {
            k: getattr(self, k)
            for k in (
                "namespace",
                "verify_ssl",
                "watch_timeout",
                "poll_interval",
                "request_timeout",
                "list_page_size",
            )
        }
        entry = self.multikueue_workers.get(cluster)
        if entry is not None:
            if entry.kubeconfig:
                access: dict[str, Any] = {"kubeconfig": entry.kubeconfig}
            elif self.kubeconfig_content is not None:
                access = {"kubeconfig_content": self.kubeconfig_content}
            else:
                access = {"kubeconfig": self.kubeconfig} if self.kubeconfig else {}
            return KubernetesConfig(**tuning, **access, context=entry.context)
        if kubeconfig_content is None:
            raise ValueError(f"no way to reach MultiKueue worker {shown(cluster)}")
        return KubernetesConfig(**tuning, kubeconfig_content=SecretStr(kubeconfig_content))

    @field_validator("namespace", "kueue_namespace", "host")
    @classmethod
    def _namespace_or_host(cls, v: str | None, info: ValidationInfo) -> str | None:
        check = _host_problem if info.field_name == "host" else checks.namespace_problem
        return checks.refuse_problem(v, check)

    @model_validator(mode="after")
    def _consistent(self) -> KubernetesConfig:
        if self.token is not None and not self.host:
            raise ValueError(fix("a token needs a host.", "set `host` to the API server URL."))
        if self.in_cluster and (self.kubeconfig or self.kubeconfig_content or self.host):
            raise ValueError(
                fix(
                    "in_cluster=True cannot be combined with a kubeconfig or a host.",
                    "choose one way to reach the cluster.",
                )
            )
        return self

    def kubeconfig_dict(self) -> dict[str, Any] | None:
        """The kubeconfig as a document when it is not one file the client library
        reads itself: the inline one, or several files of ``$KUBECONFIG`` merged as
        kubectl merges them (see :func:`merge_kubeconfigs`). ``None``: one file."""
        if self.kubeconfig_content is not None:
            return _kubeconfig_mapping(
                self.kubeconfig_content.get_secret_value(), "kubeconfig_content"
            )
        files = [p for p in self.kubeconfig_files() if p.is_file()]
        if len(files) < 2:
            return None
        field = _ENV_FIELD
        return merge_kubeconfigs((p, _kubeconfig_mapping(_read(p, field), field)) for p in files)

    def kubeconfig_files(self) -> list[Path]:
        """The kubeconfig files in effect, in order: ``kubeconfig``, else every file
        listed in ``$KUBECONFIG`` (kubectl reads them all), else ``~/.kube/config``."""
        if self.kubeconfig:
            return [Path(self.kubeconfig).expanduser()]
        listed = os.environ.get("KUBECONFIG", "").split(os.pathsep)
        return [Path(p).expanduser() for p in listed if p] or [Path("~/.kube/config").expanduser()]

    def kubeconfig_path(self) -> Path:
        """The first kubeconfig file in effect that exists (else the first listed)."""
        files = self.kubeconfig_files()
        return next((p for p in files if p.is_file()), files[0])

    def check_usable(self) -> None:
        """Refuse, naming the field, what cannot reach a cluster before any request:
        a kubeconfig file that does not exist or does not parse, a context it does not
        hold."""
        if self.mode() != "kubeconfig":
            return
        if self.kubeconfig_content is None:
            self._check_files()
        self._check_context()

    def _check_files(self) -> None:
        field = "kubeconfig" if self.kubeconfig else _ENV_FIELD
        paths = self.kubeconfig_files()
        existing = [p for p in paths if p.is_file()]
        if not existing:
            shown = ", ".join(repr(str(p)) for p in paths)
            raise SpecError.single(
                field,
                f"the kubeconfig file {shown} does not exist.",
                "give the path of an existing kubeconfig file, its content as "
                "kubeconfig_content, host and token, or in_cluster=True inside a pod.",
                title="Invalid cluster configuration",
            )
        for path in existing:
            _kubeconfig_mapping(_read(path, field), field)

    def _check_context(self) -> None:
        # Both clients refuse a context the kubeconfig lacks when they are made, as the
        # client library would at the first request (its message is not shown: the
        # library's may quote the document).
        data = _kubeconfig_document(self)
        if data is None or not self.context:
            return
        names = sorted(_contexts(data))
        if self.context in names:
            return
        field = "kubeconfig_content" if self.kubeconfig_content is not None else "kubeconfig"
        held = ", ".join(shown(n) for n in names) or "none"
        raise SpecError.single(
            field,
            f"the kubeconfig has no context {shown(self.context)} (it has: {held}).",
            "set `context` to one of its contexts, or leave it out for its current-context.",
            title="Invalid cluster configuration",
        )

    def mode(self) -> Literal["explicit", "kubeconfig", "in-cluster"]:
        """How the cluster is reached, after discovery."""
        if self.host:
            return "explicit"
        if self.in_cluster:
            return "in-cluster"
        if self.kubeconfig or self.kubeconfig_content:
            return "kubeconfig"
        if (
            self.in_cluster is None
            and not any(p.exists() for p in self.kubeconfig_files())
            and (SERVICE_ACCOUNT_DIR / "token").exists()
        ):
            return "in-cluster"
        return "kubeconfig"

    def resolve_namespace(self) -> str:
        """The namespace to use: this config's, else the kubeconfig context's, else the
        service account's, else ``default``."""
        if self.namespace:
            return self.namespace
        if self.mode() == "kubeconfig":
            ns = _context_namespace(self)
            if ns:
                return ns
        sa_ns = SERVICE_ACCOUNT_DIR / "namespace"
        if sa_ns.exists():
            text = sa_ns.read_text().strip()
            if text:
                return text
        return "default"

    def cache_key(self) -> str:
        """Identifies the cluster and credentials source, so that clients sharing a
        config share one watch per namespace. Secrets enter only as a digest."""
        payload = self.model_dump(mode="json")
        for secret in ("token", "kubeconfig_content", "ca_cert_data"):
            value = getattr(self, secret)
            payload[secret] = (
                hashlib.sha256(value.get_secret_value().encode()).hexdigest() if value else None
            )
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


@contextmanager
def loading_errors(cfg: KubernetesConfig) -> Iterator[None]:
    """Around the client library's credential loading: its errors become a
    :class:`SpecError` naming the field, with every secret of the configuration (the
    token, CA data, each value of the kubeconfig's ``users``) cut out of the text."""
    try:
        yield
    except SpecError:
        raise
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        for secret in sorted(_secrets_of(cfg), key=len, reverse=True):
            text = text.replace(secret, "***")
        field = "kubeconfig_content" if cfg.kubeconfig_content is not None else "kubeconfig"
        if cfg.mode() != "kubeconfig":
            field = "in_cluster" if cfg.mode() == "in-cluster" else "host"
        raise ClusterConfigError(
            FieldProblem(
                field,
                f"cannot load the cluster credentials ({text}).",
                "check the kubeconfig's current context, cluster and user (with kubectl: "
                "`kubectl config view`), or give host and token.",
            ),
            title="Invalid cluster configuration",
        ) from None


def _secrets_of(cfg: KubernetesConfig) -> list[str]:
    found = [
        s.get_secret_value() for s in (cfg.token, cfg.ca_cert_data, cfg.kubeconfig_content) if s
    ]
    data: Any = None
    try:
        data = _kubeconfig_document(cfg) if cfg.mode() == "kubeconfig" else cfg.kubeconfig_dict()
    except (SpecError, OSError):
        data = None
    stack = [data.get("users")] if isinstance(data, dict) else []
    while stack:
        item = stack.pop()
        if isinstance(item, str) and len(item) >= 4:
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _read(path: Path, field: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError.single(
            field,
            f"cannot read {shown(str(path))} ({type(exc).__name__}).",
            "check the path and its permissions.",
            title="Invalid cluster configuration",
        ) from None


def _kubeconfig_mapping(text: str, field: str) -> dict[str, Any]:
    """Parse a kubeconfig document. A YAML error quotes the offending line, which may
    hold a token: only its position is reported."""
    from kf_trainer_core.base.documents import MAX_CONFIG_BYTES, DocumentError, load_document

    try:
        data = load_document(text, "the kubeconfig", limit=MAX_CONFIG_BYTES)
    except DocumentError as exc:
        # The reason and position only: the text may hold credentials.
        raise SpecError.single(
            field,
            f"{exc} (its text is not shown: it may hold credentials).",
            "paste the whole kubeconfig file as it is, or check it (with kubectl: "
            "`kubectl config view --kubeconfig <file>`).",
            title="Invalid cluster configuration",
        ) from None
    if not isinstance(data, dict):
        raise SpecError.single(
            field,
            f"the kubeconfig is a {type(data).__name__}, not a mapping.",
            "paste the whole kubeconfig file (apiVersion, clusters, users, contexts).",
            title="Invalid cluster configuration",
        )
    return data


def _host_problem(host: str) -> str | None:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(host)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        _ = parts.port  # a malformed port raises
        password = parts.password is not None
    except ValueError:
        ok = password = False
    if ok and password:
        return fix(
            f"host {shown(host)} carries a password in its user info.",
            "drop it from the URL and authenticate with token= (or a kubeconfig).",
        )
    if ok:
        return None
    # Quoted masked: a malformed host may still hold user:password@.
    example = host if "://" in host else f"https://{host}"
    return fix(
        f"host {shown(host)} is not an http(s) URL of an API server.",
        f"write the URL with its scheme, e.g. {shown(example)}.",
    )


_ENV_FIELD = "kubeconfig ($KUBECONFIG or ~/.kube/config)"
#: Fields of a kubeconfig that name files, relative to the kubeconfig that holds them.
_FILE_FIELDS = {
    "clusters": ("cluster", ("certificate-authority",)),
    "users": ("user", ("client-certificate", "client-key", "tokenFile")),
}


def merge_kubeconfigs(documents: Iterable[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """Merge kubeconfig files as kubectl does for a multi-path ``$KUBECONFIG``: the
    first file to set a value wins — a cluster, context or user of a given name, the
    ``current-context``, any other top-level key. Relative file paths are resolved
    against the directory of the file that holds them (as kubectl does), since the
    merged document has no directory of its own."""
    merged: dict[str, Any] = {"clusters": [], "contexts": [], "users": []}
    for path, doc in documents:
        for key, value in doc.items():
            if key in ("clusters", "contexts", "users"):
                seen = {item.get("name") for item in merged[key]}
                for item in value or []:
                    if isinstance(item, dict) and item.get("name") not in seen:
                        seen.add(item.get("name"))
                        merged[key].append(_absolute(key, item, path.parent))
            elif key not in merged and value not in (None, ""):
                merged[key] = value
    return merged


def _absolute(kind: str, item: dict[str, Any], base: Path) -> dict[str, Any]:
    inner_key, fields = _FILE_FIELDS.get(kind, ("", ()))
    inner = item.get(inner_key)
    if not isinstance(inner, dict):
        return item
    fixed = dict(inner)
    for name in fields:
        value = fixed.get(name)
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            fixed[name] = str(base / value)
    exec_ = fixed.get("exec")
    command = exec_.get("command") if isinstance(exec_, dict) else None
    if isinstance(command, str) and "/" in command and not Path(command).is_absolute():
        fixed["exec"] = {**exec_, "command": str(base / command)}  # type: ignore[dict-item]
    return {**item, inner_key: fixed}


def _kubeconfig_document(cfg: KubernetesConfig) -> dict[str, Any] | None:
    data = cfg.kubeconfig_dict()
    if data is None:
        file = cfg.kubeconfig_path()
        if not file.is_file():
            return None
        data = _kubeconfig_mapping(_read(file, "kubeconfig"), "kubeconfig")
    return data


def _contexts(data: dict[str, Any]) -> dict[str, Any]:
    found = data.get("contexts")
    entries = found if isinstance(found, list) else []
    return {str(c.get("name")): c.get("context") for c in entries if isinstance(c, dict)}


def _context_namespace(cfg: KubernetesConfig) -> str | None:
    data = _kubeconfig_document(cfg)
    if data is None:
        return None
    context = _contexts(data).get(cfg.context or str(data.get("current-context")))
    ns = context.get("namespace") if isinstance(context, dict) else None
    return str(ns) if ns else None


class LocalConfig(SpecModel):
    """Run jobs as processes on this machine (no cluster). Jobs persist under
    ``state_dir`` so that another process can watch, read logs or cancel them."""

    _error_title: ClassVar[str] = "Invalid backend configuration"

    backend: Literal["local"] = "local"
    #: Where jobs, logs and workspaces persist; default ``$KF_TRAINER_STATE_DIR``,
    #: else ``~/.kf-trainer/local``.
    state_dir: str | None = None
    #: The interpreter that runs CustomTrainer functions (default: the submitting
    #: process's ``sys.executable``).
    python: str | None = None
    #: Run CustomTrainer functions in a fresh virtualenv with packages_to_install.
    use_venv: bool = False
    #: What to do when a job asks for resources this machine lacks (e.g. gpu: 4).
    on_missing_resources: Literal["warn", "fail"] = "warn"
    namespace: str = "local"
    #: As :attr:`KubernetesConfig.retention`.
    retention: Retention | None = None

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        # The namespace becomes a directory under state_dir: "../x" would escape it.
        checks.refuse_problem(v, checks.namespace_problem)
        return v

    def resolve_namespace(self) -> str:
        return self.namespace

    def state_path(self) -> Path:
        """The configured state directory, else ``$KF_TRAINER_STATE_DIR``, else
        ``~/.kf-trainer/local``."""
        return Path(
            self.state_dir or os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR
        ).expanduser()


class ContainerConfig(LocalConfig):
    """Run jobs in containers on this machine (Docker or Podman): one container per
    pod, the runtime's image, initializers as containers sharing the job's workspace
    (mounted at ``/workspace``) with the nodes. Job state, logs and supervisors are the
    local backend's (a subclass of :class:`LocalConfig`: everything that takes a local
    config takes this one), so another process can watch, read logs or cancel.

    Containers use the host network and rendezvous on 127.0.0.1 (a port per job);
    they are labelled with the job's uid and removed by label when it ends or is
    deleted. See ``docs/backends.md``.
    """

    backend: Literal["container"] = "container"  # type: ignore[assignment]
    #: ``docker`` or ``podman``; ``auto`` takes whichever engine answers (``host``,
    #: ``$DOCKER_HOST``, the rootful then rootless sockets of Docker, then Podman's).
    engine: Literal["auto", "docker", "podman"] = "auto"
    #: The engine's API address, e.g. ``unix:///run/user/1000/podman/podman.sock``.
    host: str | None = None
    #: The image of every trainer container (default: the TrainJob's or the runtime's
    #: image; one of them must name one).
    image: str | None = None
    #: The image the dataset/model initializer containers run (default: ``image``,
    #: else the trainer's image). It needs ``python3``; the suite's initializer code is
    #: mounted read-only.
    initializer_image: str | None = None
    #: ``IfNotPresent`` pulls a missing image, ``Always`` before every job, ``Never``
    #: fails the pod (``ErrImageNeverPull``) when the image is absent.
    pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    #: Remove each container as soon as its log and exit code are collected. ``False``
    #: keeps finished containers for ``docker inspect`` until the job is deleted.
    auto_remove: bool = True
    #: Extra bind mounts for every container: ``"/host/path:/container/path[:ro]"``.
    mounts: list[str] = Field(default_factory=list)
    #: Extra environment of every container (the TrainJob's env wins). Kept out of the
    #: repr; still, credentials belong in the job's Secrets, not in a stored config.
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    #: Map ``resources_per_node`` to engine limits (cpu → CPU quota, memory → memory
    #: limit, gpu → device requests).
    apply_resource_limits: bool = True

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, value: list[str]) -> list[str]:
        for item in value:
            parts = item.split(":")
            if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
                raise ValueError(
                    fix(
                        f"mount {shown(item)} is not HOST:CONTAINER[:ro|rw].",
                        "write e.g. '/data:/data:ro' (an absolute path inside the container).",
                    )
                )
            if len(parts) == 3 and parts[2] not in ("ro", "rw"):
                raise ValueError(
                    fix(f"mount {shown(item)}: mode {shown(parts[2])}.", "use ro or rw.")
                )
        return value

    @model_validator(mode="after")
    def _no_venv(self) -> ContainerConfig:
        if self.use_venv:
            raise ValueError(
                fix(
                    "use_venv applies to the local backend only.",
                    "put the packages in the image, or use packages_to_install (pip runs "
                    "inside the container, as on a cluster).",
                )
            )
        return self


BackendConfig = Annotated[
    KubernetesConfig | ContainerConfig | LocalConfig, Field(discriminator="backend")
]

BACKENDS: dict[str, type[KubernetesConfig] | type[LocalConfig]] = {
    "kubernetes": KubernetesConfig,
    "local": LocalConfig,
    "container": ContainerConfig,
}


def unknown_backend_fix(name: str) -> str:
    """The fix for a backend name that is none of :data:`BACKENDS` (with a suggestion
    for a misspelt one)."""
    return "use one of " + ", ".join(repr(k) for k in BACKENDS) + "." + did_you_mean(name, BACKENDS)


def parse_backend(data: Any) -> KubernetesConfig | LocalConfig:
    """A backend configuration from a mapping or JSON text (what ``KF_TRAINER_BACKEND``,
    an Airflow connection's extra or a KFP ``backend_config`` holds), chosen by its
    ``backend`` key: ``kubernetes`` (the default), ``local`` or ``container``. A
    :class:`ContainerConfig` is a :class:`LocalConfig`."""
    if isinstance(data, (KubernetesConfig, LocalConfig)):
        return data
    if isinstance(data, (str, bytes)):
        from kf_trainer_core.base.documents import load_json

        data = load_json(data, "the backend configuration") if data.strip() else {}
    mapping = dict(data or {})
    kind = str(mapping.get("backend") or "kubernetes")
    model = BACKENDS.get(kind)
    if model is None:
        raise SpecError.single(
            "backend",
            f"backend {shown(kind)} is unknown.",
            unknown_backend_fix(kind),
            title="Invalid backend configuration",
        )
    return model.parse(mapping)
