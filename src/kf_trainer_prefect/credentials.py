"""The Prefect block that says where TrainJobs run: a Kubernetes cluster with Kubeflow
Trainer, or this machine (the local backend). Switching between them is a change of
block, never of flow code.

>>> KubeflowTrainerCredentials(kubeconfig="~/.kube/config", namespace="team-a").save("prod")
>>> run_trainjob(spec, credentials="prod")        # a block name, the block, or nothing

prefect-kubernetes' ``KubernetesCredentials`` (and ``KubernetesClusterConfig``) are
accepted wherever this block is, without prefect-kubernetes being a dependency.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from prefect.blocks.core import Block
from pydantic import ConfigDict, Field, SecretStr, field_validator, model_validator

from kf_trainer_core.config import KubernetesConfig, LocalConfig
from kf_trainer_core.tasks import shown
from kf_trainer_core.tasks.backend_fields import (
    BackendConfig,
    check_dashboard_url,
    check_known_fields,
    config_from_fields,
    flat_fields,
)

if TYPE_CHECKING:
    from kf_trainer_core.client import AsyncTrainerClient, TrainerClient


class KubeflowTrainerCredentials(Block):
    """Access to Kubeflow Trainer: a cluster (kubeconfig, in-cluster service account, or
    host and token) or the local backend, plus an optional dashboard link per job.

    With no cluster field set, the usual discovery applies: ``$KUBECONFIG`` or
    ``~/.kube/config``, else the in-cluster service account. Tokens, inline kubeconfigs
    and CA data are secrets: Prefect stores them encrypted and shows them masked.
    """

    # Validation errors would otherwise quote the input, secrets included.
    model_config = ConfigDict(hide_input_in_errors=True)

    _block_type_name: ClassVar[str | None] = "Kubeflow Trainer Credentials"
    _block_type_slug: ClassVar[str | None] = "kubeflow-trainer-credentials"
    _description: ClassVar[str | None] = (
        "Where Kubeflow Trainer TrainJobs run: a Kubernetes cluster (kubeconfig, "
        "in-cluster service account, or host and token) or this machine (local backend)."
    )
    _code_example: ClassVar[str | None] = """
```python
from kf_trainer_prefect import KubeflowTrainerCredentials, run_trainjob

credentials = KubeflowTrainerCredentials.load("BLOCK_NAME")
outputs = run_trainjob(spec, credentials=credentials)
```
"""

    backend: Literal["kubernetes", "local", "container"] = Field(
        default="kubernetes",
        description="`kubernetes`: a cluster with Kubeflow Trainer; `local`: processes on "
        "the machine that runs the flow; `container`: containers of that machine's Docker "
        "or Podman engine.",
    )
    namespace: str | None = Field(
        default=None,
        description="Namespace of the TrainJobs (default: the kubeconfig context's, the "
        "service account's, or `default`).",
    )
    kubeconfig: str | None = Field(default=None, description="Path to a kubeconfig file.")
    kubeconfig_content: SecretStr | None = Field(
        default=None, description="A whole kubeconfig document (YAML or JSON)."
    )
    context: str | None = Field(default=None, description="The kubeconfig context to use.")
    in_cluster: bool | None = Field(
        default=None, description="Use the pod's service account (flows running in-cluster)."
    )
    host: str | None = Field(default=None, description="API server URL, used with `token`.")
    token: SecretStr | None = Field(default=None, description="Bearer token for `host`.")
    ca_cert: str | None = Field(default=None, description="Path to the API server's CA.")
    ca_cert_data: SecretStr | None = Field(default=None, description="PEM of the API server's CA.")
    verify_ssl: bool = Field(default=True, description="Verify the API server's certificate.")
    watch_timeout: int = Field(
        default=60,
        ge=2,
        le=3600,
        description="Seconds of silence after which a watch or a followed log is taken for "
        "a dead connection and reopened where it stopped.",
    )
    poll_interval: float = Field(
        default=2.0, gt=0, description="Seconds between lists where watching is forbidden."
    )
    request_timeout: float = Field(default=30.0, gt=0, description="Seconds per API request.")
    list_page_size: int = Field(
        default=250, ge=1, le=5000, description="Objects per request when listing."
    )
    state_dir: str | None = Field(
        default=None, description="Local backend: where jobs keep their state and logs."
    )
    python: str | None = Field(
        default=None,
        description="Local backend: the interpreter that runs training functions (default: "
        "the one running the flow).",
    )
    use_venv: bool = Field(
        default=False,
        description="Local backend: run functions in a fresh virtualenv with their packages.",
    )
    on_missing_resources: Literal["warn", "fail"] = Field(
        default="warn",
        description="Local backend: what to do when a job asks for resources (GPUs) this "
        "machine lacks.",
    )
    container: dict[str, Any] | None = Field(
        default=None,
        description="Container backend: ContainerConfig settings, e.g. "
        '{"image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime", "pull_policy": "Never"} '
        "(engine, host, image, initializer_image, pull_policy, auto_remove, mounts, env, "
        "apply_resource_limits).",
    )
    retention: dict[str, Any] | None = Field(
        default=None,
        description="How long finished jobs stay, stamped on every job these credentials "
        'submit (a spec\'s own Retention wins), e.g. {"after_finished_seconds": 86400} or '
        '{"keep_last": 3}; prune deletes them then (docs/retention.md).',
    )
    multikueue_workers: dict[str, Any] | None = Field(
        default=None,
        description="MultiKueue: how to reach each worker cluster, by its MultiKueueCluster "
        'name on the manager, e.g. {"worker1": {"context": "worker1"}} (a context of this '
        'kubeconfig) or {"worker1": {"kubeconfig": "/path"}}; a worker not named here is '
        "reached through its MultiKueueCluster's kubeconfig Secret (docs/kueue.md).",
    )
    kueue_namespace: str | None = Field(
        default=None,
        description="MultiKueue: the manager's Kueue namespace, where its MultiKueueClusters' "
        "kubeconfig Secrets are (default: kueue-system).",
    )
    dashboard_url: str | None = Field(
        default=None,
        description="Link to a job in a dashboard, with `{namespace}` and `{name}` "
        "placeholders, e.g. https://kubeflow.example.com/trainjobs/{namespace}/{name}.",
    )

    @field_validator("backend", mode="before")
    @classmethod
    def _backend(cls, value: Any) -> Any:
        # The core's sentence, with a suggestion, instead of pydantic's literal_error.
        from kf_trainer_core.config import BACKENDS, unknown_backend_fix

        if isinstance(value, str) and value not in BACKENDS:
            raise ValueError(
                f"backend {shown(value)} is unknown. Fix: {unknown_backend_fix(value)}"
            )
        return value

    @field_validator("dashboard_url")
    @classmethod
    def _dashboard(cls, value: str | None) -> str | None:
        return check_dashboard_url(value)

    @model_validator(mode="after")
    def _consistent(self) -> KubeflowTrainerCredentials:
        # Blocks accept unknown fields (Prefect's choice, for stored documents): not ours.
        extra = set(self.model_extra or {}) - {"block_type_slug"}
        check_known_fields(extra, type(self).model_fields)
        # Settle every cross-field question where the block is saved, not in a flow run.
        self.backend_config()
        return self

    def backend_config(self) -> BackendConfig:
        """The core's backend configuration for these credentials
        (:func:`~kf_trainer_core.tasks.backend_fields.config_from_fields`).

        Raises ``ValueError`` naming the fields at fault and the fix.
        """
        return config_from_fields({name: getattr(self, name) for name in type(self).model_fields})

    def dashboard_link(self, namespace: str, name: str) -> str | None:
        """The dashboard URL of one job, if a dashboard is configured."""
        if self.dashboard_url is None:
            return None
        return self.dashboard_url.format(namespace=namespace, name=name)

    def get_client(self, namespace: str | None = None) -> TrainerClient:
        """A synchronous :class:`~kf_trainer_core.client.TrainerClient` for these
        credentials (close it, or use it as a context manager)."""
        from kf_trainer_core.client import TrainerClient

        return TrainerClient(self.backend_config(), namespace=namespace)

    def get_async_client(self, namespace: str | None = None) -> AsyncTrainerClient:
        """An :class:`~kf_trainer_core.client.AsyncTrainerClient`; create it inside
        the event loop that uses it."""
        from kf_trainer_core.client import AsyncTrainerClient

        return AsyncTrainerClient(self.backend_config(), namespace=namespace)

    @classmethod
    def from_kubernetes_credentials(cls, credentials: Any) -> KubeflowTrainerCredentials:
        """Credentials from prefect-kubernetes' ``KubernetesCredentials`` (or its
        ``KubernetesClusterConfig``): the stored kubeconfig and context, or the usual
        discovery when it holds no cluster config."""
        cluster = getattr(credentials, "cluster_config", credentials)
        if cluster is None:
            return cls()
        config = getattr(cluster, "config", None)
        if not isinstance(config, Mapping):
            raise ValueError(
                f"{type(credentials).__name__} has no kubeconfig in cluster_config.config. "
                "Fix: save the cluster config from a kubeconfig file "
                "(KubernetesClusterConfig.from_file())."
            )
        return cls(
            kubeconfig_content=SecretStr(json.dumps(dict(config), default=str)),
            context=getattr(cluster, "context_name", None) or None,
        )


def is_kubernetes_credentials(value: Any) -> bool:
    """Whether ``value`` looks like prefect-kubernetes' ``KubernetesCredentials`` or
    ``KubernetesClusterConfig`` (duck typing: prefect-kubernetes is optional)."""
    if isinstance(value, KubeflowTrainerCredentials) or not isinstance(value, Block):
        return False
    if hasattr(value, "cluster_config"):
        return True
    return hasattr(value, "config") and hasattr(value, "context_name")


CredentialsLike = (
    KubeflowTrainerCredentials | KubernetesConfig | LocalConfig | Mapping[str, Any] | Block | str
)
"""What the tasks accept as ``credentials``: this block (or the name it was saved
under), prefect-kubernetes' ``KubernetesCredentials``, a core backend config or its
dict form, or ``None`` for the default cluster discovery."""


def credentials_from(value: CredentialsLike | None) -> KubeflowTrainerCredentials:
    """Normalise whatever a task was given into :class:`KubeflowTrainerCredentials`
    (block names must already be loaded: see :func:`load_credentials`)."""
    if value is None:
        return KubeflowTrainerCredentials()
    if isinstance(value, KubeflowTrainerCredentials):
        return value
    if is_kubernetes_credentials(value):
        return KubeflowTrainerCredentials.from_kubernetes_credentials(value)
    if (fields := flat_fields(value)) is not None:
        return KubeflowTrainerCredentials(**fields)
    raise TypeError(
        f"credentials of type {type(value).__name__} are not understood. Fix: pass a "
        "KubeflowTrainerCredentials block or its saved name, prefect-kubernetes' "
        "KubernetesCredentials, a KubernetesConfig/LocalConfig, or None."
    )


def load_credentials(value: CredentialsLike | None) -> KubeflowTrainerCredentials:
    """:func:`credentials_from`, loading a saved block when given its name."""
    if isinstance(value, str):
        loaded = KubeflowTrainerCredentials.load(value, _sync=True)  # type: ignore[call-arg]
        return _checked_block(loaded, value)
    return credentials_from(value)


async def aload_credentials(value: CredentialsLike | None) -> KubeflowTrainerCredentials:
    """The async twin of :func:`load_credentials`."""
    if isinstance(value, str):
        loaded = await KubeflowTrainerCredentials.aload(value)
        return _checked_block(loaded, value)
    return credentials_from(value)


def _checked_block(loaded: Any, name: str) -> KubeflowTrainerCredentials:
    if not isinstance(loaded, KubeflowTrainerCredentials):
        raise TypeError(f"block {shown(name)} is not a KubeflowTrainerCredentials block")
    return loaded
