"""The parts under the components: input handling, signatures, the report, the
core's task operations (against the test server), and cheap imports."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.job_summary import outputs_summary
from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import JobState, Step
from kf_trainer_core.config import KubernetesConfig, LocalConfig
from kf_trainer_core.errors import SpecError
from kf_trainer_core.spec import (
    Annotations,
    BuiltinTrainer,
    CustomTrainer,
    HuggingFaceDatasetInitializer,
    Initializer,
    Labels,
    QueueName,
    TorchTuneConfig,
    TrainJobSpec,
)
from kf_trainer_core.tasks import helpers as task_helpers
from kf_trainer_core.tasks.interruptions import check_action
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_kfp import inputs as inp
from kf_trainer_kfp import summary
from kf_trainer_kfp._source import REQUIRED, function_params, parameter_type

FIT = "def fit(lr: float = 0.1):\n    return {'lr': lr}\n"


# ------------------------------------------------------------------------ inputs


def test_assemble_spec_merges_inputs() -> None:
    fit = "def fit(lr: float = 0.1, epochs: int = 1):\n    return {'lr': lr}\n"
    base = TrainJobSpec(
        trainer=CustomTrainer(fit, func_args={"lr": 0.2}), options=[QueueName("a")]
    ).to_json_dict()
    spec = inp.assemble_spec(
        base,
        runtime="deepspeed-distributed",
        options=[QueueName("b"), Labels({"team": "ml"})],
        func_args={"epochs": 3},
        num_nodes=4,
    )
    assert spec.runtime.name == "deepspeed-distributed"
    assert isinstance(spec.trainer, CustomTrainer)
    assert spec.trainer.func_args == {"lr": 0.2, "epochs": 3}
    assert spec.trainer.num_nodes == 4
    assert [o.type for o in spec.options] == ["QueueName", "Labels"]
    assert spec.option(QueueName).queue == "b"  # a single-valued option is replaced


def test_assemble_spec_reads_hand_written_trainers() -> None:
    spec = inp.assemble_spec(trainer={"func": FIT}, num_nodes=2)
    assert isinstance(spec.trainer, CustomTrainer)
    builtin = inp.assemble_spec(
        runtime="torchtune-llama3.2-1b", trainer={"config": {"epochs": 1}}, num_nodes=2
    )
    assert isinstance(builtin.trainer, BuiltinTrainer)
    assert builtin.trainer.config.num_nodes == 2
    container = inp.assemble_spec(trainer={"image": "reg/train:1"})
    assert container.trainer is not None
    assert container.trainer.type == "CustomTrainerContainer"


def test_assemble_spec_errors_name_the_field() -> None:
    with pytest.raises(SpecError) as err:
        inp.assemble_spec(trainer={"image": "reg/train:1"}, func_args={"lr": 1}, num_nodes=-1)
    assert err.value.fields == ["func_args", "num_nodes"]
    with pytest.raises(SpecError) as err:
        inp.assemble_spec(trainer={"func": FIT, "num_node": 2})
    assert err.value.fields == ["trainer.num_node"]
    assert "Did you mean `num_nodes`?" in str(err.value)
    with pytest.raises(SpecError, match=r"initializer\.dataset"):
        inp.assemble_spec(
            trainer={"func": FIT},
            initializer={"dataset": {"type": "HuggingFaceDatasetInitializer", "storage_uri": 3}},
        )


def test_backend_config_reads_credentials_from_the_environment() -> None:
    environ = {inp.TOKEN_ENV: "tok-secret", inp.CA_CERT_DATA_ENV: "PEM"}
    config = inp.backend_config({"host": "https://k8s:6443"}, namespace="team", environ=environ)
    assert isinstance(config, KubernetesConfig)
    assert config.namespace == "team"
    assert config.token is not None
    assert config.token.get_secret_value() == "tok-secret"
    assert "tok-secret" not in repr(config)
    assert "tok-secret" not in json.dumps(config.model_dump(mode="json"))
    assert isinstance(inp.backend_config({}), KubernetesConfig)
    local = inp.backend_config({"backend": "local", "state_dir": "/tmp/kf"}, environ=environ)
    assert isinstance(local, LocalConfig)
    with pytest.raises(SpecError) as err:
        inp.backend_config({"host": "h", "token": "tok-secret"})
    assert err.value.fields == ["backend_config.token"]
    assert "tok-secret" not in str(err.value)


def test_timeouts_actions_and_identity() -> None:
    assert inp.seconds(0, "timeout_seconds") is None
    assert inp.seconds(90, "timeout_seconds") == 90.0
    with pytest.raises(SpecError, match=r"timeout_seconds: -1 seconds"):
        inp.seconds(-1, "timeout_seconds")
    # The core's check, as every adapter's (its field named as the input is).
    assert check_action("suspend") == "suspend"
    with pytest.raises(SpecError, match=r"on_cancel: 'drop'"):
        check_action("drop")
    assert inp.identity("uuid-1", "train") == ("kfp", "uuid-1", "train")
    assert inp.identity("uuid-1", "train", "seed-3") == ("kfp", "uuid-1", "train", "seed-3")
    with pytest.raises(SpecError) as err:
        inp.identity(inp.RUN_ID_PLACEHOLDER, "")
    assert err.value.fields == ["pipeline_run_id", "pipeline_task_name"]
    assert "dsl.PIPELINE_JOB_ID_PLACEHOLDER" in str(err.value)


def test_jsonable_turns_models_into_json() -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(FIT), options=[Labels({"a": "b"})])
    data = inp.jsonable({"spec": spec, "options": (Labels({"x": "y"}),), "n": 1})
    assert data["spec"]["trainer"]["type"] == "CustomTrainer"
    assert data["options"] == [{"type": "Labels", "labels": {"x": "y"}}]
    assert TrainJobSpec.parse(data["spec"]) == spec


# -------------------------------------------------------------------- signatures


@pytest.mark.parametrize(
    ("annotation", "default", "kind"),
    [
        ("str", REQUIRED, "str"),
        ("int", 3, "int"),
        ("float", 0.1, "float"),
        ("bool", True, "bool"),
        ("list[int]", [], "list"),
        ("typing.List[str]", None, "list"),
        ("Dict[str, float]", None, "dict"),
        ("Optional[int]", None, "int"),
        ("str | None", None, "str"),
        ("Union[float, None]", None, "float"),
        ("'float'", 1.0, "float"),
        (None, 2, "int"),
        (None, 0.5, "float"),
        (None, False, "bool"),
        (None, {"a": 1}, "dict"),
        (None, (1, 2), "list"),
    ],
)
def test_parameter_types(annotation: str | None, default: Any, kind: str) -> None:
    assert parameter_type(annotation, default, "func.x") == kind


def test_function_params_read_the_source() -> None:
    source = (
        "def train(data: str, lr: float = 0.1, *, tags: list = ('a',), seed: int | None = None):\n"
        "    return 1\n"
    )
    params = function_params(source, "train", ["namespace"])
    assert [(p.name, p.annotation, p.default) for p in params] == [
        ("data", "str", REQUIRED),
        ("lr", "float", 0.1),
        ("tags", "list", ["a"]),
        ("seed", "int", None),
    ]
    with pytest.raises(SpecError) as err:
        function_params("def f(x: str = str(1), /, y=None):\n    pass\n", "f", [])
    assert err.value.fields == ["func", "func.x", "func.y"]


# ------------------------------------------------------------------------ report


def _outputs(result: Any, **extra: Any) -> JobOutputs:
    return JobOutputs(
        name="train-1",
        namespace="team",
        status=JobState.COMPLETE,
        runtime="torch-distributed",
        steps=[Step(name="node-0", status="Succeeded", pod_name="train-1-node-0-0-x", exit_code=0)],
        metrics={"loss": "0.25", "phase": "warmup", "epoch": "3"},
        result=result,
        duration_seconds=12.5,
        **extra,
    )


def test_metrics_and_model_from_the_result() -> None:
    out = _outputs({"model_uri": " s3://m/1 ", "loss": 0.125, "ok": True, "metrics": {"f1": 0.9}})
    # What the job cost comes first (here only its wall time is known).
    assert summary.metric_values(out) == {
        "wall_seconds": 12.5,
        "loss": 0.125,
        "epoch": 3.0,
        "f1": 0.9,
    }
    assert summary.model_uri(out.result) == "s3://m/1"
    assert summary.model_metadata(out)["trainjob"] == "train-1"
    assert summary.metric_values(_outputs(0.5))["result"] == 0.5
    assert summary.model_uri([1, 2]) is None
    assert summary.model_uri({"model_uri": ""}) is None


def test_a_number_past_a_float_is_no_metric() -> None:
    # JSON gives Python ints of any size: float() of one past a float's range raised
    # OverflowError, failing a component whose job had succeeded.
    huge = json.loads("1" + "0" * 400)
    out = _outputs({"loss": huge, "metrics": {"f1": -huge, "ok": 0.5}})
    # The job's reported loss stays: the returned one is no number a metric can hold.
    assert summary.metric_values(out) == {
        "wall_seconds": 12.5,
        "loss": 0.25,
        "epoch": 3.0,
        "ok": 0.5,
    }
    assert "result" not in summary.metric_values(_outputs(huge))


def test_the_summary_is_the_cores_with_the_model() -> None:
    # KFP writes the summary every adapter writes, plus where the job wrote its model.
    out = _outputs({"model_uri": "s3://m/1", "loss": 0.1})
    text = outputs_summary(out, model=summary.model_uri(out.result))
    assert text.startswith("## TrainJob `train-1`: Complete\n")
    assert "- **Steps:** node-0 (Succeeded)" in text
    assert "- **Model:** `s3://m/1`" in text
    assert "**Model:**" not in outputs_summary(out)


# ----------------------------------------------------------- core task operations


def _job(client: TrainerClient, scenario: str, identity: str, **spec: Any) -> str:
    spec.setdefault("trainer", CustomTrainer(FIT))
    built = TrainJobSpec(options=[Annotations({SCENARIO_ANNOTATION: scenario})], **spec)
    return client.submit(built, identity=identity).job.name


def _await_steps(client: TrainerClient, name: str, step: str, **waits: Any) -> Any:
    """``await_steps`` (the step components' wait) from this sync test."""

    async def waiting() -> Any:
        async with AsyncTrainerClient(client.config, namespace=client.namespace) as aclient:
            return await task_helpers.await_steps(aclient, name, step, **waits)

    return asyncio.run(waiting())


def test_parse_step() -> None:
    assert task_helpers.parse_step("Training") == "trainer"
    assert task_helpers.parse_step("node-0") == "trainer"
    assert task_helpers.parse_step("init") == "initializer"
    assert task_helpers.parse_step("dataset-initializer") == "dataset-initializer"
    with pytest.raises(ValueError, match="Fix: use 'initializer'"):
        task_helpers.parse_step("evaluation")


def test_wait_for_initializers_while_training_runs(client: TrainerClient) -> None:
    name = _job(
        client,
        json.dumps({"preset": "never-finish", "initializer_duration": 0.2}),
        "steps/init",
        runtime="torch-distributed-with-cache",
        initializer=Initializer(
            dataset=HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca")
        ),
    )
    seen: list[JobState] = []
    job, result = _await_steps(
        client, name, "initializer", timeout=60, callbacks=[lambda j: seen.append(j.status)]
    )
    assert job.status is not JobState.COMPLETE
    step = job.step("dataset-initializer")
    assert step is not None
    assert step.status == "Succeeded"
    assert result is None
    with pytest.raises(ValueError, match=r"no model-initializer step.*Fix:"):
        _await_steps(client, name, "model-initializer")
    client.delete_job(name)


def test_wait_for_initializer_without_one_returns(client: TrainerClient) -> None:
    name = _job(client, "never-finish", "steps/none")
    job, _ = _await_steps(client, name, "initializer", timeout=30)
    assert job.name == name
    client.delete_job(name)


def test_wait_for_the_trainer_step_is_the_job(client: TrainerClient) -> None:
    name = _job(client, "success", "steps/trainer")
    job, result = _await_steps(client, name, "trainer", timeout=30)
    assert job.status is JobState.COMPLETE
    assert result == {"epochs": 3, "loss": 0.1289}


def test_stop_unfinished_leaves_finished_jobs(client: TrainerClient) -> None:
    done = _job(client, "success", "kfp/run/train")
    client.wait(done, timeout=30)
    running = _job(client, "never-finish", "kfp/run/other")
    assert client.stop_unfinished(identity="kfp/run/train") == []
    assert client.stop_unfinished(identity="kfp/run/other", action="keep") == []
    assert client.stop_unfinished(identity="kfp/run/other") == [running]
    assert client.stop_unfinished(done) == []
    assert client.get_job(done).status is JobState.COMPLETE
    assert client.stop_unfinished("no-such-job") == []


# ------------------------------------------------------------------------ imports


def test_importing_the_adapter_is_cheap() -> None:
    """KFP imports component modules while compiling: ours load neither ``kfp`` (whose
    client imports ``kubernetes``) nor a Kubernetes library until a component is made
    or run."""
    code = (
        "import sys, json\n"
        "import kf_trainer_kfp, kf_trainer_kfp.components, kf_trainer_kfp.inputs\n"
        "import kf_trainer_kfp.image, kf_trainer_kfp.summary, kf_trainer_kfp.task\n"
        "import kf_trainer_kfp._source\n"
        "kf_trainer_kfp.trainjob_component, kf_trainer_kfp.ComponentImage\n"
        "heavy = ('kubernetes', 'kubernetes_asyncio', 'kfp')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(proc.stdout) == []


def test_components_module_loads_no_pydantic_model_after_kfp() -> None:
    """A pipeline file imports ``kfp.dsl`` and then the components: ours add no pydantic
    (``kfp.dsl`` loads none) and none of the core's spec models; defining a component
    loads them."""
    code = (
        "import sys, json\n"
        "import kfp.dsl\n"
        "before = set(sys.modules)\n"
        "import kf_trainer_kfp.components as c\n"
        "deferred = ('pydantic', 'kf_trainer_core.spec', 'kf_trainer_core.manifest.builder',\n"
        "            'kf_trainer_core.config', 'kf_trainer_core.fields._model', 'kubernetes_asyncio')\n"
        "print(json.dumps(sorted(m for m in set(sys.modules) - before\n"
        "      if any(m == d or m.startswith(d + '.') for d in deferred))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_components_default_runtime_is_the_specs() -> None:
    from kf_trainer_core.spec.common import DEFAULT_RUNTIME
    from kf_trainer_kfp import components

    assert components.DEFAULT_RUNTIME == DEFAULT_RUNTIME


def test_components_module_has_no_kfp_name_at_import() -> None:
    import kf_trainer_kfp

    assert "launch_trainjob" in dir(kf_trainer_kfp)
    with pytest.raises(AttributeError):
        _ = kf_trainer_kfp.no_such_component  # type: ignore[attr-defined]
    assert TorchTuneConfig  # the spec vocabulary is what components take
