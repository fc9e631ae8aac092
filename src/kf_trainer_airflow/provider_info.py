"""What Airflow's providers manager reads about this provider (the
``apache_airflow_provider`` entry point).

Airflow calls :func:`get_provider_info` while it is still initialising its own
configuration, so this module imports nothing from Airflow, the core or Kubernetes:
the connection form below is declared as data (``conn-fields``, Airflow >= 3.2), and the
hook repeats it as widgets only for older versions.
"""

from __future__ import annotations

from typing import Any

#: The connection hooks, operators and triggers use when none is named.
DEFAULT_CONN_ID = "kubeflow_trainer_default"

PACKAGE_NAME = "kf-trainer-suite"
INTEGRATION = "Kubeflow Trainer"
CONN_TYPE = "kubeflow_trainer"


def _field(
    label: str,
    *,
    description: str | None = None,
    kind: str = "string",
    fmt: str | None = None,
    default: Any = None,
) -> dict[str, Any]:
    """One optional field of the connection form (``conn-fields`` schema)."""
    schema: dict[str, Any] = {"type": [kind, "null"]}
    if fmt is not None:
        schema["format"] = fmt
    if default is not None:
        schema["default"] = default
    field: dict[str, Any] = {"label": label}
    if description is not None:
        field["description"] = description
    field["schema"] = schema
    return field


#: Connection fields stored in ``Connection.extra`` (also used by the hook to refuse
#: misspelt keys). ``format: password`` makes Airflow mask the value in the form.
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "backend": {
        "label": "Backend",
        "description": "Where jobs run: a Kubernetes cluster with Kubeflow Trainer, "
        "processes on the worker (local, for development and tests), or containers of the "
        "worker's Docker/Podman engine (container; Host: the engine's API address, "
        "container settings such as image and pull_policy in Extra).",
        "schema": {
            "type": "string",
            "enum": ["kubernetes", "local", "container"],
            "default": "kubernetes",
        },
    },
    "namespace": _field(
        "Namespace",
        description="Namespace of the TrainJobs (default: the kubeconfig context's, the service "
        "account's, else 'default').",
    ),
    "kubeconfig_path": _field(
        "Kubeconfig path", description="Path of a kubeconfig file on the workers and triggerers."
    ),
    "kubeconfig": _field(
        "Kubeconfig (inline)",
        description="A whole kubeconfig document (YAML or JSON). It holds credentials: it is "
        "stored encrypted and masked in logs.",
        fmt="password",
    ),
    "context": _field(
        "Kubeconfig context",
        description="Context of the kubeconfig to use (default: its current context).",
    ),
    "in_cluster": _field(
        "In-cluster service account",
        description="Use the pod's service account (Airflow running in the cluster).",
        kind="boolean",
    ),
    "ca_cert": _field(
        "CA certificate path",
        description="With Host and Token: path of the API server's CA bundle.",
    ),
    "ca_cert_data": _field(
        "CA certificate (PEM)",
        description="With Host and Token: the API server's CA certificate itself.",
        fmt="password",
    ),
    "verify_ssl": _field(
        "Verify TLS",
        description="Check the API server's certificate (leave on outside tests).",
        kind="boolean",
        default=True,
    ),
    "state_dir": _field(
        "Local state directory",
        description="Local backend only: where jobs keep their state and logs, shared by "
        "workers and triggerers on the same machine.",
    ),
    "dashboard_url": _field(
        "Dashboard URL template",
        description="Link shown on tasks, with {namespace} and {name}, e.g. "
        "https://kubeflow.example.com/trainer/{namespace}/{name}",
        fmt="url",
    ),
}

#: The standard connection fields this type uses, relabelled; the rest are hidden.
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "login", "port"],
    "relabeling": {"host": "API server URL", "password": "Bearer token"},
    "placeholders": {
        "host": "https://my-cluster.example.com:6443 (leave empty to use a kubeconfig)",
        "password": "service-account token (with Host)",
        "extra": '{"backend": "kubernetes", "namespace": "team-a"}',
    },
}


def _version() -> str:
    try:
        from importlib.metadata import version

        return version(PACKAGE_NAME)
    except Exception:  # not installed as a distribution (e.g. a source checkout on sys.path)
        return "0.0.0"


def _modules(module: str) -> list[dict[str, Any]]:
    return [{"integration-name": INTEGRATION, "python-modules": [module]}]


def get_provider_info() -> dict[str, Any]:
    """The provider's metadata, in the shape of Airflow's ``provider_info`` schema."""
    return {
        "package-name": PACKAGE_NAME,
        "name": INTEGRATION,
        "description": "Run `Kubeflow Trainer <https://www.kubeflow.org/docs/components/"
        "trainer/>`__ v2 TrainJobs as Airflow tasks: idempotent submission, deferrable "
        "waits on a shared watch, step sensors, log streaming and failure reports.\n",
        "versions": [_version()],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://www.kubeflow.org/docs/components/trainer/",
                "tags": ["software"],
            }
        ],
        "operators": [
            *_modules("kf_trainer_airflow.operators.trainjob"),
            *_modules("kf_trainer_airflow.operators.prune"),
        ],
        "sensors": _modules("kf_trainer_airflow.sensors.trainjob"),
        "hooks": _modules("kf_trainer_airflow.hooks.trainer"),
        "triggers": _modules("kf_trainer_airflow.triggers.trainjob"),
        "connection-types": [
            {
                "hook-class-name": "kf_trainer_airflow.hooks.trainer.KubeflowTrainerHook",
                "connection-type": CONN_TYPE,
                "hook-name": INTEGRATION,
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
                "conn-fields": CONN_FIELDS,
            }
        ],
        "extra-links": ["kf_trainer_airflow.links.trainjob.TrainJobLink"],
        "task-decorators": [
            {
                "class-name": "kf_trainer_airflow.decorators.trainer.kubeflow_trainer_task",
                "name": "kubeflow_trainer",
            }
        ],
    }
