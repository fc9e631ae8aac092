"""Components compile into KFP IR that KFP loads back; bad input fails while the
pipeline is defined, naming the field and the fix; kfp-kubernetes settings apply."""

# No `from __future__ import annotations`: KFP reads pipeline annotations as objects.
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import compiler, dsl, kubernetes
from kfp.components import load_component_from_file
from pipeline_parts import evaluate, prepare_data, train_model

from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.errors import SpecError
from kf_trainer_core.spec import (
    Annotations,
    CustomTrainer,
    Labels,
    TrainJobSpec,
)
from kf_trainer_kfp import (
    ComponentImage,
    step_components,
    trainjob_component,
    trainjob_launcher,
)

PLAIN_SPEC = TrainJobSpec(
    trainer=CustomTrainer("def fit(lr: float = 0.1):\n    return {'lr': lr}\n"),
    options=[Labels({"team": "ml"})],
)


def compile_to(tmp_path: Path, pipeline: Any, name: str = "pipeline.yaml") -> dict[str, Any]:
    path = tmp_path / name
    compiler.Compiler().compile(pipeline, str(path))
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def executor_of(ir: dict[str, Any], component: str) -> dict[str, Any]:
    label = ir["components"][component]["executorLabel"]
    executor: dict[str, Any] = ir["deploymentSpec"]["executors"][label]["container"]
    return executor


def test_function_component_ir(tmp_path: Path) -> None:
    train = trainjob_component(train_model, num_nodes=2, resources_per_node={"cpu": 2})

    @dsl.pipeline
    def pipe(rows: int = 10, lr: float = 0.2) -> str:
        data = prepare_data(rows=rows)
        trained = train(data_uri=data.output, lr=lr)
        return evaluate(
            model=trained.outputs["model"],
            metrics=trained.outputs["metrics"],
            result_json=trained.outputs["result_json"],
        ).output

    ir = compile_to(tmp_path, pipe)
    comp = ir["components"]["comp-train-model"]
    params = comp["inputDefinitions"]["parameters"]
    assert params["data_uri"]["parameterType"] == "STRING"
    assert not params["data_uri"].get("isOptional", False)
    assert params["lr"] == {
        "defaultValue": 0.1,
        "isOptional": True,
        "parameterType": "NUMBER_DOUBLE",
        "description": "Argument `lr` of `train_model`.",
    }
    assert params["epochs"]["parameterType"] == "NUMBER_INTEGER"
    assert params["backend_config"]["parameterType"] == "STRUCT"
    assert params["timeout_seconds"]["defaultValue"] == 0.0
    assert params["admission_timeout_seconds"]["defaultValue"] == 0.0
    assert params["pipeline_run_id"]["defaultValue"] == dsl.PIPELINE_JOB_ID_PLACEHOLDER
    outputs = comp["outputDefinitions"]
    assert {k: v["artifactType"]["schemaTitle"] for k, v in outputs["artifacts"].items()} == {
        "metrics": "system.Metrics",
        "model": "system.Model",
        "summary": "system.Markdown",
    }
    assert set(outputs["parameters"]) == {"job_name", "namespace", "status", "result_json"}
    # The task passes the run's identity as placeholders KFP fills in at run time.
    task = ir["root"]["dag"]["tasks"]["train-model"]["inputs"]["parameters"]
    assert task["pipeline_run_id"]["runtimeValue"]["constant"] == dsl.PIPELINE_JOB_ID_PLACEHOLDER
    assert task["pipeline_task_name"]["runtimeValue"]["constant"] == (
        dsl.PIPELINE_TASK_NAME_PLACEHOLDER
    )
    container = executor_of(ir, "comp-train-model")
    command = "\n".join(container["command"])
    # The training function's source travels inside the component, like KFP's own.
    assert "w += lr * (3.0 - w)" in command
    assert "from kf_trainer_kfp.task import run_component" in command
    # Python replaces the shell, so SIGTERM reaches it and the pod waits for its clean-up.
    assert "exec python3 -m kfp.dsl.executor_main" in command
    # The default image installs the suite, pinned to the compiling version.
    assert container["image"] == "python:3.11"
    assert "kf-trainer-suite==" in command
    assert '&& exec "$0" "$@"' in command


def test_components_load_back(tmp_path: Path) -> None:
    made = [
        trainjob_launcher(),
        trainjob_component(train_model),
        *vars(step_components()).values(),
    ]
    for component in made:
        path = tmp_path / f"{component.name}.yaml"
        compiler.Compiler().compile(component, str(path))
        loaded = load_component_from_file(str(path))
        assert loaded.name == component.name
        assert set(loaded.component_spec.inputs or {}) == set(component.component_spec.inputs or {})
        assert set(loaded.component_spec.outputs or {}) == set(
            component.component_spec.outputs or {}
        )

    # A loaded launcher is an ordinary component: it composes and compiles again (the
    # run's identity placeholders are then passed by the pipeline author).
    launcher = load_component_from_file(str(tmp_path / f"{made[0].name}.yaml"))

    @dsl.pipeline
    def again() -> None:
        launcher(
            spec=PLAIN_SPEC.to_json_dict(),
            pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            pipeline_task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
        )

    ir = compile_to(tmp_path, again, "again.yaml")
    assert "launch-trainjob" in ir["root"]["dag"]["tasks"]


def test_launcher_takes_spec_models_and_json(tmp_path: Path) -> None:
    launch = trainjob_launcher(
        timeout_seconds=3600, on_cancel="suspend", admission_timeout_seconds=600
    )

    @dsl.pipeline
    def pipe2(runtime: str = "torch-distributed") -> None:
        launch(spec=PLAIN_SPEC, runtime=runtime, num_nodes=2, func_args={"lr": 0.5})

    ir = compile_to(tmp_path, pipe2)
    task = ir["root"]["dag"]["tasks"]["launch-trainjob"]["inputs"]["parameters"]
    spec = task["spec"]["runtimeValue"]["constant"]
    assert spec["trainer"]["type"] == "CustomTrainer"
    assert "def fit" in spec["trainer"]["func"]["source"]
    assert task["runtime"]["componentInputParameter"] == "runtime"
    params = ir["components"]["comp-launch-trainjob"]["inputDefinitions"]["parameters"]
    assert params["timeout_seconds"]["defaultValue"] == 3600.0
    assert params["admission_timeout_seconds"]["defaultValue"] == 600.0
    assert params["on_cancel"]["defaultValue"] == "suspend"


def test_bad_spec_fails_while_defining_the_pipeline() -> None:
    launch = trainjob_launcher()
    bad = PLAIN_SPEC.to_json_dict()
    bad["trainer"]["num_node"] = 2

    with pytest.raises(SpecError) as err:

        @dsl.pipeline
        def pipe() -> None:
            launch(spec=bad)

    assert err.value.fields == ["trainer.num_node"]
    assert "num_nodes" in str(err.value)
    assert "Fix:" in str(err.value)

    with pytest.raises(SpecError, match=r"func_args.*no CustomTrainer"):

        @dsl.pipeline
        def pipe2() -> None:
            launch(trainer={"image": "ghcr.io/org/train:1"}, func_args={"lr": 1})

    with pytest.raises(SpecError, match=r"on_cancel.*'explode'.*Fix: use 'delete'"):

        @dsl.pipeline
        def pipe3() -> None:
            launch(spec=PLAIN_SPEC, on_cancel="explode")

    steps = step_components()
    with pytest.raises(SpecError, match=r"step.*'warmup'.*Fix: use 'initializer'"):

        @dsl.pipeline
        def pipe4() -> None:
            steps.wait_for_step(job_name="j", step="warmup")


def test_credentials_are_refused_as_parameters() -> None:
    launch = trainjob_launcher()
    with pytest.raises(SpecError) as err:

        @dsl.pipeline
        def pipe() -> None:
            launch(spec=PLAIN_SPEC, backend_config={"host": "https://k8s", "token": "s3cr3t"})

    assert err.value.fields == ["backend_config.token"]
    assert "use_secret_as_env" in str(err.value)
    assert "KF_TRAINER_TOKEN" in str(err.value)
    assert "s3cr3t" not in str(err.value)

    config = KubernetesConfig(host="https://k8s", token="s3cr3t")
    with pytest.raises(SpecError, match=r"backend_config\.token"):
        trainjob_launcher(backend_config=config)
    with pytest.raises(SpecError, match=r"backend_config\.kubeconfig_content"):
        trainjob_component(train_model, backend_config={"kubeconfig_content": "apiVersion: v1"})


def test_function_component_refusals() -> None:
    def clash(namespace: str, lr: float = 0.1) -> None:
        return None

    def untyped(data, lr=0.1) -> None:  # type: ignore[no-untyped-def]
        return None

    def variadic(*args: int, **kwargs: int) -> None:
        return None

    def a_set(tags: set[str], when: float = 1.0) -> None:
        return None

    with pytest.raises(SpecError) as err:
        trainjob_component(clash)
    assert err.value.fields == ["func.namespace"]
    assert "rename the parameter" in str(err.value)
    with pytest.raises(SpecError, match=r"func.data: .*neither an annotation nor a default"):
        trainjob_component(untyped)
    with pytest.raises(SpecError, match=r"\*args or \*\*kwargs"):
        trainjob_component(variadic)
    with pytest.raises(SpecError, match=r"func.tags: the annotation 'set\[str\]'"):
        trainjob_component(a_set)
    # The trainer settings are the CustomTrainer's, checked by the core.
    with pytest.raises(SpecError, match=r"resources_per_node.*gpus"):
        trainjob_component(train_model, resources_per_node={"gpus": 1})
    with pytest.raises(SpecError, match=r"PET_NNODES is reserved"):
        trainjob_component(train_model, env={"PET_NNODES": "2"})


def test_kfp_kubernetes_settings_apply(tmp_path: Path) -> None:
    """The components are ordinary tasks: kfp-kubernetes configures the launcher pod."""
    train = trainjob_component(train_model, component_image=ComponentImage.prebuilt("reg/kf:1"))
    steps = step_components()

    @dsl.pipeline
    def pipe() -> None:
        task = train(data_uri="s3://bucket/datasets/x")
        kubernetes.use_secret_as_env(
            task, secret_name="trainer-api", secret_key_to_env={"token": "KF_TRAINER_TOKEN"}
        )
        kubernetes.use_secret_as_volume(task, secret_name="ca", mount_path="/etc/kf-trainer")
        kubernetes.add_node_selector(task, label_key="pool", label_value="control")
        kubernetes.add_toleration(task, key="dedicated", operator="Equal", value="ml")
        kubernetes.mount_pvc(task, pvc_name="models", mount_path="/models")
        kubernetes.add_pod_label(task, label_key="team", label_value="ml")
        task.set_retry(num_retries=2)
        task.set_caching_options(enable_caching=False)
        submitted = steps.submit(spec=PLAIN_SPEC)
        kubernetes.use_secret_as_env(
            submitted,
            secret_name="kubeconfig",
            secret_key_to_env={"config": "KF_TRAINER_KUBECONFIG_CONTENT"},
        )

    path = tmp_path / "k8s.yaml"
    compiler.Compiler().compile(pipe, str(path))
    documents = list(yaml.safe_load_all(path.read_text()))
    ir, platform = documents[0], documents[1]
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    cfg = executors[ir["components"]["comp-train-model"]["executorLabel"]]
    assert cfg["secretAsEnv"][0]["keyToEnv"] == [
        {"envVar": "KF_TRAINER_TOKEN", "secretKey": "token"}
    ]
    assert cfg["secretAsVolume"][0]["mountPath"] == "/etc/kf-trainer"
    assert cfg["nodeSelector"]["labels"] == {"pool": "control"}
    assert cfg["tolerations"][0]["key"] == "dedicated"
    assert cfg["pvcMount"][0]["mountPath"] == "/models"
    assert cfg["podMetadata"]["labels"] == {"team": "ml"}
    assert ir["root"]["dag"]["tasks"]["train-model"]["retryPolicy"]["maxRetryCount"] == 2
    submit_cfg = executors[ir["components"]["comp-submit-trainjob"]["executorLabel"]]
    assert submit_cfg["secretAsEnv"][0]["keyToEnv"][0]["envVar"] == "KF_TRAINER_KUBECONFIG_CONTENT"
    # A prebuilt image installs nothing at start.
    container = executor_of(ir, "comp-train-model")
    assert container["image"] == "reg/kf:1"
    assert "pip install" not in json.dumps(container["command"])


def test_exit_handler_cancels_by_task(tmp_path: Path) -> None:
    steps = step_components()

    @dsl.pipeline
    def pipe() -> None:
        cleanup = steps.cancel(task_name="submit-trainjob")
        with dsl.ExitHandler(cleanup):
            job = steps.submit(spec=PLAIN_SPEC.with_options(Annotations({"note": "x"})))
            steps.outputs(job_name=job.outputs["job_name"])

    ir = compile_to(tmp_path, pipe)
    tasks = ir["root"]["dag"]["tasks"]
    cancel = tasks["cancel-trainjob"]
    assert cancel["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    assert cancel["inputs"]["parameters"]["pipeline_run_id"]["runtimeValue"]["constant"] == (
        dsl.PIPELINE_JOB_ID_PLACEHOLDER
    )
    assert "pipeline_task_name" not in cancel["inputs"]["parameters"]


def test_loops_need_a_job_key(tmp_path: Path) -> None:
    train = trainjob_component(train_model)

    with pytest.raises(SpecError, match=r"job_key: every iteration of a dsl.ParallelFor"):

        @dsl.pipeline
        def forgot() -> None:
            with dsl.ParallelFor([0.1, 0.2]) as lr:
                train(data_uri="s3://d", lr=lr)

    @dsl.pipeline
    def sweep(lrs: list = [0.1, 0.2]) -> None:  # noqa: B006 (a KFP pipeline parameter)
        with dsl.ParallelFor(lrs) as lr:
            train(data_uri="s3://d", lr=lr, job_key=lr)  # a float item: made a string

    ir = compile_to(tmp_path, sweep)
    loop = next(c for c in ir["components"].values() if "dag" in c)["dag"]["tasks"]["train-model"]
    key = loop["inputs"]["parameters"]["job_key"]["runtimeValue"]["constant"]
    assert key == "{{$.inputs.parameters['pipelinechannel--lrs-loop-item']}}"
