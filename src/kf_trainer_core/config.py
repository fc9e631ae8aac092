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
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, SecretStr, field_validator, model_validator

from kf_trainer_core._model import SpecModel, fix

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
        data = yaml.safe_load(self.kubeconfig_content.get_secret_value())
        if not isinstance(data, dict):
            raise ValueError(
                fix("kubeconfig_content is not a kubeconfig.", "paste the whole YAML file.")
            )
        return data

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


def _context_namespace(cfg: KubernetesConfig) -> str | None:
    data = cfg.kubeconfig_dict()
    if data is None:
        path = cfg.kubeconfig or os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]
        file = Path(path).expanduser()
        if not file.exists():
            return None
        loaded = yaml.safe_load(file.read_text())
        if not isinstance(loaded, dict):
            return None
        data = loaded
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

    def resolve_namespace(self) -> str:
        return self.namespace


BackendConfig = Annotated[KubernetesConfig | LocalConfig, Field(discriminator="backend")]
