"""Where the client runs its jobs: a Kubernetes cluster (kubeconfig, in-cluster service
account, or explicit host and token) or this machine (the local backend).

These are plain, JSON-serialisable settings — what an Airflow connection, a Prefect
block or a KFP component argument holds — so that switching from a laptop to a cluster
is a configuration change, never a code change. Secrets are ``SecretStr``: they do not
appear in reprs, logs or dumps.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, SecretStr, field_validator, model_validator

from kf_trainer_core import checks
from kf_trainer_core._model import SpecModel, fix
from kf_trainer_core.errors import ClusterConfigError, FieldProblem, SpecError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubernetesConfig(SpecModel):
    """Access to a cluster running Kubeflow Trainer.

    With no field set, the usual discovery applies: ``$KUBECONFIG`` or
    ``~/.kube/config``, else the in-cluster service account.
    """

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
    #: Waits and log follows reconnect when a stream idles this long (seconds).
    watch_timeout: int = Field(default=240, ge=5, le=3600)
    #: Where watching is forbidden (RBAC without `watch`), list this often instead.
    poll_interval: float = Field(default=2.0, gt=0)
    request_timeout: float = Field(default=30.0, gt=0)
    #: Objects per request when listing (``limit``/``continue``): each page is reduced
    #: to what is needed before the next is read, so memory stays near one page.
    list_page_size: int = Field(default=250, ge=1, le=5000)

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

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str | None) -> str | None:
        problem = checks.namespace_problem(v) if v is not None else None
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("host")
    @classmethod
    def _host(cls, v: str | None) -> str | None:
        problem = _host_problem(v) if v is not None else None
        if problem:
            raise ValueError(problem)
        return v

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
        """The inline kubeconfig parsed, if one is set."""
        if self.kubeconfig_content is None:
            return None
        return _kubeconfig_mapping(self.kubeconfig_content.get_secret_value(), "kubeconfig_content")

    def kubeconfig_path(self) -> Path:
        """The kubeconfig file used when no inline one is set: ``kubeconfig``, else
        the first file of ``$KUBECONFIG``, else ``~/.kube/config``."""
        path = (
            self.kubeconfig or os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]
        )
        return Path(path or "~/.kube/config").expanduser()

    def check_usable(self) -> None:
        """Refuse, naming the field, what cannot reach a cluster before any request:
        a kubeconfig file that does not exist or does not parse."""
        if self.mode() != "kubeconfig" or self.kubeconfig_content is not None:
            return
        if self.kubeconfig:
            field, paths = "kubeconfig", [self.kubeconfig_path()]
        else:
            # $KUBECONFIG may list several files; the client library merges those that exist.
            field = "kubeconfig ($KUBECONFIG or ~/.kube/config)"
            listed = os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)
            paths = [Path(p).expanduser() for p in listed if p] or [self.kubeconfig_path()]
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

    def mode(self) -> Literal["explicit", "kubeconfig", "in-cluster"]:
        """How the cluster is reached, after discovery."""
        if self.host:
            return "explicit"
        if self.in_cluster:
            return "in-cluster"
        if self.kubeconfig or self.kubeconfig_content:
            return "kubeconfig"
        default = Path(
            os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]
        ).expanduser()
        if (
            self.in_cluster is None
            and not default.exists()
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
        text = _scrub(f"{type(exc).__name__}: {exc}", _secrets_of(cfg))
        field = "kubeconfig_content" if cfg.kubeconfig_content is not None else "kubeconfig"
        if cfg.mode() != "kubeconfig":
            field = "in_cluster" if cfg.mode() == "in-cluster" else "host"
        raise ClusterConfigError(
            FieldProblem(
                field,
                f"cannot load the cluster credentials ({text}).",
                "check the kubeconfig's current context, cluster and user (`kubectl config "
                "view`), or give host and token.",
            ),
            title="Invalid cluster configuration",
        ) from None


def _secrets_of(cfg: KubernetesConfig) -> list[str]:
    found = [
        s.get_secret_value() for s in (cfg.token, cfg.ca_cert_data, cfg.kubeconfig_content) if s
    ]
    data: Any = None
    try:
        data = cfg.kubeconfig_dict()
        if data is None and cfg.mode() == "kubeconfig" and cfg.kubeconfig_path().is_file():
            data = yaml.safe_load(cfg.kubeconfig_path().read_text())
    except (SpecError, OSError, yaml.YAMLError, UnicodeDecodeError):
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


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _read(path: Path, field: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError.single(
            field,
            f"cannot read {str(path)!r} ({type(exc).__name__}).",
            "check the path and its permissions.",
            title="Invalid cluster configuration",
        ) from None


def _kubeconfig_mapping(text: str, field: str) -> dict[str, Any]:
    """Parse a kubeconfig document. A YAML error quotes the offending line, which may
    hold a token: only its position is reported."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError.single(
            field,
            f"the kubeconfig is not valid YAML or JSON{where} (its text is not shown: it "
            "may hold credentials).",
            "paste the whole kubeconfig file as it is, or check it with "
            "`kubectl config view --kubeconfig <file>`.",
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
    except ValueError:
        ok = False
    if ok:
        return None
    example = host if "://" in host else f"https://{host}"
    return fix(
        f"host {host!r} is not an http(s) URL of an API server.",
        f"write the URL with its scheme, e.g. {example!r}.",
    )


def _context_namespace(cfg: KubernetesConfig) -> str | None:
    data = cfg.kubeconfig_dict()
    if data is None:
        file = cfg.kubeconfig_path()
        if not file.is_file():
            return None
        data = _kubeconfig_mapping(_read(file, "kubeconfig"), "kubeconfig")
    current = cfg.context or data.get("current-context")
    for ctx in data.get("contexts") or []:
        if ctx.get("name") == current:
            ns = (ctx.get("context") or {}).get("namespace")
            return str(ns) if ns else None
    return None


class LocalConfig(SpecModel):
    """Run jobs as processes on this machine (no cluster). Jobs persist under
    ``state_dir`` so that another process can watch, read logs or cancel them."""

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

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        # The namespace becomes a directory under state_dir: "../x" would escape it.
        problem = checks.namespace_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    def resolve_namespace(self) -> str:
        return self.namespace


BackendConfig = Annotated[KubernetesConfig | LocalConfig, Field(discriminator="backend")]
