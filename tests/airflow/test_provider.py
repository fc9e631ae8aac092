"""The provider as Airflow sees it (entry point, providers manager, ``@task``), and what
importing its modules costs: DAG parsing pays for every import, so the user-facing
modules must not load the Kubernetes clients."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from kf_trainer_airflow.provider_info import get_provider_info


def _python(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter (this session's Airflow home) and return the
    JSON it prints last."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ),
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_user_modules_do_not_import_kubernetes_clients() -> None:
    found = _python(
        """
        import json, sys
        import kf_trainer_airflow
        import kf_trainer_airflow.provider_info
        bare = "airflow" in sys.modules
        import kf_trainer_airflow.operators.trainjob
        import kf_trainer_airflow.sensors.trainjob
        import kf_trainer_airflow.decorators.trainer
        import kf_trainer_airflow.hooks.trainer
        import kf_trainer_airflow.triggers.trainjob
        import kf_trainer_airflow.links.trainjob
        from airflow.sdk import task
        task.kubeflow_trainer  # the decorator, through the providers manager
        heavy = sorted(
            m for m in sys.modules
            if m.split(".")[0] in ("kubernetes", "kubernetes_asyncio")
        )
        print(json.dumps({"heavy": heavy, "airflow_on_package_import": bare}))
        """
    )
    assert found["heavy"] == []
    # Airflow imports provider_info while it configures itself: the package must not
    # import Airflow back.
    assert found["airflow_on_package_import"] is False


#: What a DAG file must not pay for when it imports a user-facing module: the Kubernetes
#: clients, and the core's pydantic spec / configuration models, builder and status
#: (hundreds of milliseconds; they load when a task is built or runs).
_DEFERRED = (
    "kubernetes",
    "kubernetes_asyncio",
    "kf_trainer_core.spec",
    "kf_trainer_core.manifest.builder",
    "kf_trainer_core.cluster.status",
    "kf_trainer_core.config",
    "kf_trainer_core.tasks.backend_fields",
    "kf_trainer_core.client",
    "kf_trainer_airflow.hooks.trainer",
)


@pytest.mark.parametrize(
    ("base", "module"),
    [
        ("BaseOperator", "kf_trainer_airflow.operators.trainjob"),
        ("BaseSensorOperator", "kf_trainer_airflow.sensors.trainjob"),
        ("BaseOperator", "kf_trainer_airflow.decorators.trainer"),
    ],
)
def test_user_module_defers_the_spec_models_and_clients(base: str, module: str) -> None:
    found = _python(
        f"""
        import importlib, json, sys
        import airflow.sdk
        getattr(airflow.sdk, {base!r})
        before = set(sys.modules)
        importlib.import_module({module!r})
        deferred = {_DEFERRED!r}
        print(json.dumps(sorted(
            m for m in set(sys.modules) - before
            if any(m == d or m.startswith(d + ".") for d in deferred)
        )))
        """
    )
    assert found == []


def test_trigger_module_defers_the_kubernetes_clients() -> None:
    found = _python(
        """
        import json, sys
        from airflow.triggers.base import BaseTrigger
        before = set(sys.modules)
        import kf_trainer_airflow.triggers.trainjob
        print(json.dumps(sorted(
            m for m in set(sys.modules) - before
            if m.split(".")[0] in ("kubernetes", "kubernetes_asyncio")
        )))
        """
    )
    assert found == []


def test_provider_info_matches_the_schema() -> None:
    import jsonschema
    from airflow import providers_manager

    schema_path = os.path.join(
        os.path.dirname(providers_manager.__file__), "provider_info.schema.json"
    )
    with open(schema_path) as fh:
        schema = json.load(fh)
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "kf-trainer-suite"
    assert info["versions"]


@pytest.fixture(scope="module")
def manager() -> object:
    from airflow.providers_manager import ProvidersManager

    return ProvidersManager()


def test_providers_manager_sees_everything(manager: object) -> None:
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    pm: object = manager
    assert "kf-trainer-suite" in pm.providers  # type: ignore[attr-defined]
    links = pm.extra_links_class_names  # type: ignore[attr-defined]
    assert "kf_trainer_airflow.links.trainjob.TrainJobLink" in links
    triggers = [t.package_name for t in pm.trigger]  # type: ignore[attr-defined]
    assert "kf-trainer-suite" in triggers
    runtime = ProvidersManagerTaskRuntime()  # what workers use
    hook = runtime.hooks["kubeflow_trainer"]
    assert hook is not None
    assert hook.hook_class_name == "kf_trainer_airflow.hooks.trainer.KubeflowTrainerHook"
    assert hook.connection_id_attribute_name == "kubeflow_trainer_conn_id"
    assert "kubeflow_trainer" in runtime.taskflow_decorators


def test_connection_form(manager: object) -> None:
    widgets = manager.connection_form_widgets  # type: ignore[attr-defined]
    inline = widgets["extra__kubeflow_trainer__kubeconfig"]
    assert inline.is_sensitive
    assert widgets["extra__kubeflow_trainer__ca_cert_data"].is_sensitive
    assert not widgets["extra__kubeflow_trainer__namespace"].is_sensitive
    backend = widgets["extra__kubeflow_trainer__backend"].field
    assert backend["schema"]["enum"] == ["kubernetes", "local", "container"]
    behaviour = manager.field_behaviours["kubeflow_trainer"]  # type: ignore[attr-defined]
    assert "login" in behaviour["hidden_fields"]
    assert behaviour["relabeling"]["host"] == "API server URL"


def test_task_decorator_is_ours() -> None:
    from airflow.sdk import task

    from kf_trainer_airflow.decorators.trainer import kubeflow_trainer_task

    assert task.kubeflow_trainer is kubeflow_trainer_task
