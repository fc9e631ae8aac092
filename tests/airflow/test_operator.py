"""TrainJobOperator on its own: arguments checked when the DAG is parsed, templates that
leave the function alone, dry runs, and — against the test server — kill, finish
actions, fixed names and suspended jobs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kf_trainer_airflow._args import DEFAULT_RESUME_GRACE
from kf_trainer_airflow._spec import Verbatim
from kf_trainer_airflow.operators.trainjob import TrainJobFailedException, TrainJobOperator
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.errors import SpecError
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.spec import (
    ActiveDeadlineSeconds,
    Annotations,
    CustomTrainer,
    CustomTrainerContainer,
    HuggingFaceDatasetInitializer,
    Initializer,
    Labels,
    Name,
    TrainJobSpec,
)
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer

ROOT = Path(__file__).resolve().parents[2]


def train(lr: float = 0.1) -> dict[str, float]:
    return {"lr": lr}


def jinja_looking(day: str = "") -> str:
    return "{{ not a template }} {% neither %} {# nor this #}"


def scenario(name: str) -> Annotations:
    return Annotations({SCENARIO_ANNOTATION: name})


@dataclass
class FakeTI:
    """The parts of a task instance the operator uses (for tests without a DAG run)."""

    dag_id: str = "dag"
    task_id: str = "train"
    run_id: str = "run-1"
    map_index: int = -1
    try_number: int = 1
    stats_tags: dict[str, str] = field(default_factory=dict)
    xcoms: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


def context(ti: FakeTI | None = None) -> dict[str, Any]:
    return {"ti": ti or FakeTI(), "task_state_store": None}


def op(**kwargs: Any) -> TrainJobOperator:
    kwargs.setdefault("task_id", "train")
    kwargs.setdefault("kubeflow_trainer_conn_id", "kf_test")
    kwargs.setdefault("deferrable", False)
    return TrainJobOperator(**kwargs)


# ----------------------------------------------------------------- parse time


def test_bad_spec_fails_when_the_dag_is_parsed() -> None:
    with pytest.raises(SpecError, match=r"trainer\.num_node: unknown field.*num_nodes"):
        op(trainer={"func": train, "num_node": 2})


def test_spec_and_parts_are_alternatives() -> None:
    with pytest.raises(SpecError, match="runtime: is given together with `spec`"):
        op(spec=TrainJobSpec(trainer=CustomTrainer(train)), runtime="torch-distributed")


def test_func_args_need_a_custom_trainer() -> None:
    with pytest.raises(SpecError, match="func_args: applies to a CustomTrainer only"):
        op(trainer=CustomTrainerContainer("python:3.11"), func_args={"lr": 1})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_kill_action": "stop"}, "on_kill_action: 'stop' is not an action. Fix: use 'delete'"),
        (
            {"on_finish_action": "drop"},
            "on_finish_action: 'drop' is not an action. Fix: use one of",
        ),
        ({"startup_timeout": -1}, "startup_timeout: -1 seconds is not a duration. Fix"),
        ({"log_tail": -5}, "log_tail=-5. Fix"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        op(trainer=CustomTrainer(train), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        # Durations are numbers of seconds or timedeltas, never text.
        (
            {"job_timeout": "1h"},
            r"job_timeout: a str is not a number of seconds \(got '1h'\)\. Fix: .*job_timeout=600",
        ),
        (
            {"startup_timeout": "5m"},
            r"startup_timeout: a str is not a number of seconds \(got '5m'\)\. Fix",
        ),
        (
            {"wait_timeout": True},
            r"wait_timeout: a bool is not a number of seconds \(got True\)\. Fix",
        ),
        (
            {"job_timeout": -3},
            r"job_timeout: -3 seconds is not a duration\. Fix: give a number greater than 0",
        ),
        (
            {"resume_grace": "soon"},
            r"resume_grace: a str is not a number of seconds \(got 'soon'\)\. Fix",
        ),
        (
            {"resume_grace": -1},
            r"resume_grace: -1 seconds is not a duration\. Fix: give 0 or more seconds",
        ),
        # A name the API server would refuse.
        (
            {"job_name": "My_Job"},
            r"job_name: 'My_Job' is not a valid TrainJob name.*Fix: use e\.g\. 'my-job'",
        ),
        ({"job_name": 7}, r"job_name=7 is not a string\. Fix"),
        # One option instead of a list of them.
        (
            {"options": Labels({"team": "ml"})},
            r"options is Labels, not a list of options\. Fix: .*options=\[Labels",
        ),
        ({"options": {"type": "Labels"}}, r"options is a mapping, not a list of options"),
        # A step that does not exist.
        (
            {"log_step": "worker"},
            r"log_step='worker': unknown step 'worker'\. Fix: use dataset-initializer",
        ),
        ({"log_tail": True}, r"log_tail=True\. Fix"),
    ],
)
def test_bad_arguments_fail_when_the_dag_is_parsed(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        op(trainer=CustomTrainer(train), **kwargs)


@pytest.mark.parametrize(
    ("name", "field", "limit"),
    [
        ("a" * 49, "job_name", 48),  # node pods: 63 - "-node-0-0-xxxxx"
        ("a" * 64, "job_name", 63),
    ],
)
def test_too_long_job_name_fails_when_the_dag_is_parsed(name: str, field: str, limit: int) -> None:
    with pytest.raises(
        ValueError, match=rf"{field}: '{name}' has {len(name)} characters.*at most {limit}"
    ):
        op(trainer=CustomTrainer(train), job_name=name)


def test_too_long_name_option_fails_when_the_dag_is_parsed() -> None:
    # With a dataset initializer the pods of the job's longest step set the limit.
    with pytest.raises(SpecError, match=r"options\.Name: 'a{34}' has 34 characters.*at most 33"):
        op(
            runtime="torch-distributed-with-cache",
            trainer=CustomTrainer(train),
            initializer=Initializer(dataset=HuggingFaceDatasetInitializer(storage_uri="hf://x/y")),
            options=[Name("a" * 34)],
        )


def test_misspelled_argument_suggests_the_right_one() -> None:
    with pytest.raises(
        SpecError, match=r"job_timout: unknown argument\. Fix: .*Did you mean `job_timeout`\?"
    ):
        op(trainer=CustomTrainer(train), job_timout=60)
    with pytest.raises(SpecError, match=r"retrys.*Did you mean `retries`"):
        op(trainer=CustomTrainer(train), retrys=2)  # BaseOperator's arguments count too


def test_good_durations_and_templates_pass() -> None:
    task = op(
        trainer=CustomTrainer(train),
        job_timeout=timedelta(hours=1),
        startup_timeout=30,
        resume_grace=0,
        job_name="{{ dag_run.conf['name'] }}",
        log_step="dataset-initializer",
    )
    assert (task.startup_timeout, task.resume_grace) == (30.0, 0.0)
    assert op(trainer=CustomTrainer(train), options="{{ params.options }}").options


def test_closures_fail_at_parse_time() -> None:
    factor = 2

    def closure() -> int:
        return factor

    with pytest.raises(SpecError, match="uses variables of an enclosing function"):
        op(trainer=CustomTrainer(closure))


def test_templated_arguments_are_checked_at_run_time() -> None:
    task = op(trainer=CustomTrainer(train), func_args={"lr": "{{ params.lr }}"})
    assert task.func_args == {"lr": "{{ params.lr }}"}
    bad = op(trainer={"func": train, "num_nodes": "{{ params.n }}"})
    with pytest.raises(SpecError, match="num_nodes"):
        bad.build_spec()


def test_whole_spec_as_yaml_text() -> None:
    text = (ROOT / "examples" / "specs" / "quickstart.yaml").read_text()
    spec = op(spec=text, job_name="quick", job_timeout=timedelta(minutes=5)).build_spec()
    assert spec.trainer is not None
    assert spec.trainer.num_nodes == 2
    deadline = spec.option(ActiveDeadlineSeconds)
    assert deadline is not None
    assert deadline.seconds == 300  # job_timeout replaces the file's 3600
    assert spec.option(Labels).labels == {"team": "ml"}


def test_a_spec_text_is_read_as_the_client_reads_it() -> None:
    """The operator's spec text is refused where the client's would be, with the same
    message, naming the ``spec`` argument: text that is no YAML, and YAML that holds no
    mapping."""
    with pytest.raises(SpecError, match=r"spec: cannot be read: .*Fix: pass a dict"):
        op(spec="runtime: [unclosed", job_name="quick")
    with pytest.raises(SpecError, match=r"spec: the spec text holds a list, not a mapping"):
        op(spec="- runtime: torch-distributed", job_name="quick")


def test_rendering_leaves_the_function_source_alone() -> None:
    task = op(
        trainer=CustomTrainer(jinja_looking),
        func_args={"day": "{{ ds }}"},
        # Models check their values when built: templated ones go in the JSON form.
        options=[{"type": "Labels", "labels": {"day": "{{ ds_nodash }}"}}],
    )
    assert isinstance(task.trainer["func"], Verbatim)
    task.render_template_fields({"ds": "2026-01-02", "ds_nodash": "20260102"})
    assert task.func_args == {"day": "2026-01-02"}
    assert task.options[0]["labels"] == {"day": "20260102"}
    spec = task.build_spec()
    assert spec.trainer is not None
    assert "{{ not a template }} {% neither %} {# nor this #}" in (spec.trainer.func.source or "")
    assert spec.trainer.func_args == {"day": "2026-01-02"}


def test_dry_run_renders_the_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    task = op(
        trainer=CustomTrainer(train, num_nodes=2),
        namespace="team-a",
        job_timeout=90,
        options=[Labels({"team": "ml"})],
    )
    task.dry_run()
    text = capsys.readouterr().out
    assert "kind: TrainJob" in text
    assert "namespace: team-a" in text
    assert "activeDeadlineSeconds: 90" in text
    assert "numNodes: 2" in text
    assert "team: ml" in text


# ------------------------------------------------------------ against a cluster


@pytest.fixture
def client(kf_conn: Path) -> Iterator[TrainerClient]:
    with TrainerClient(KubernetesConfig(kubeconfig=str(kf_conn))) as c:
        yield c


def live(kube: KubeTestServer, name: str) -> dict[str, Any] | None:
    obj = kube.store.try_get(TRAINJOBS, "default", name)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None
    return obj


def wait_for(check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_kill_while_waiting_in_the_worker_deletes_the_job(
    client: TrainerClient, kube: KubeTestServer
) -> None:
    task = op(trainer=CustomTrainer(train), options=[scenario("never-finish")])
    ti = FakeTI()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            task.execute(context(ti))
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    wait_for(lambda: "job_name" in ti.xcoms)
    name = ti.xcoms["job_name"]
    wait_for(lambda: client.get_job(name).status.value == "Running")
    task.on_kill()
    worker.join(30)
    assert not worker.is_alive()
    assert live(kube, name) is None
    assert isinstance(errors[0], TrainJobFailedException)
    assert "was deleted" in str(errors[0]) or "not found" in str(errors[0])


def test_on_kill_suspend_and_keep(client: TrainerClient, kube: KubeTestServer) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(train), options=[scenario("never-finish")])
    name = client.submit(spec, identity="kill/suspend").job.name
    task = op(trainer=CustomTrainer(train), on_kill_action="suspend")
    task._job_name = name
    task.on_kill()
    assert kube.store.get(TRAINJOBS, "default", name)["spec"]["suspend"] is True
    keep = op(trainer=CustomTrainer(train), on_kill_action="keep")
    keep._job_name = name
    keep.on_kill()
    assert live(kube, name) is not None
    nothing = op(trainer=CustomTrainer(train))
    nothing.on_kill()  # killed before it had a job: nothing to do


def test_retry_resumes_a_job_suspended_by_a_kill(
    client: TrainerClient, kube: KubeTestServer
) -> None:
    task = op(trainer=CustomTrainer(train), options=[scenario("success")])
    spec = task.build_spec()
    ti = FakeTI()
    name = client.submit(spec, identity=task.identity_of(context(ti))).job.name
    client.suspend_job(name)
    out = task.execute(context(ti))
    assert out["name"] == name
    assert out["status"] == "Complete"


@pytest.mark.parametrize(
    ("action", "scenario_name", "kept"),
    [
        ("delete-succeeded", "success", False),
        ("delete-succeeded", "fail", True),
        ("delete", "fail", False),
        ("keep", "success", True),
    ],
)
def test_on_finish_action(
    client: TrainerClient, kube: KubeTestServer, action: str, scenario_name: str, kept: bool
) -> None:
    task = op(
        trainer=CustomTrainer(train),
        options=[scenario(scenario_name)],
        on_finish_action=action,
    )
    ti = FakeTI(run_id=f"finish-{action}-{scenario_name}")
    if scenario_name == "fail":
        with pytest.raises(TrainJobFailedException) as info:
            task.execute(context(ti))
        assert info.value.failure is not None
        assert info.value.failure["exit_code"] == 1
    else:
        assert task.execute(context(ti))["status"] == "Complete"
    assert (live(kube, ti.xcoms["job_name"]) is not None) is kept


def test_delete_succeeded_keeps_a_complete_job_whose_result_cannot_be_read(
    client: TrainerClient, kube: KubeTestServer
) -> None:
    """``delete-succeeded`` deletes a job that completed and whose result was read: one
    whose result cannot be read stays, so that a retry reads it again — the rule every
    adapter shares (docs/retention.md); the operator deleted it as a success."""
    deep = "[" * 300 + "]" * 300  # a result too deep to read back
    task = op(
        trainer=CustomTrainer(train),
        options=[scenario(json.dumps({"termination_message": deep}))],
        on_finish_action="delete-succeeded",
    )
    ti = FakeTI(run_id="finish-unreadable")
    out = task.execute(context(ti))
    assert out["status"] == "Complete"
    assert out["result_missing"]["cause"] == "unusable"
    assert live(kube, ti.xcoms["job_name"]) is not None
    client.delete_job(ti.xcoms["job_name"])


def test_on_finish_action_never_deletes_a_job_that_has_not_finished(
    client: TrainerClient, kube: KubeTestServer
) -> None:
    """``wait_timeout`` stops waiting and "the job keeps running" (airflow.md): the
    task's failure must not make ``on_finish_action="delete"`` delete it."""
    task = op(
        trainer=CustomTrainer(train),
        options=[scenario("never-finish")],
        on_finish_action="delete",
        wait_timeout=timedelta(seconds=1),
    )
    ti = FakeTI(run_id="finish-unfinished")
    with pytest.raises(Exception, match="did not reach Complete within 1s"):
        task.execute(context(ti))
    name = ti.xcoms["job_name"]
    assert live(kube, name) is not None
    assert client.get_job(name).status.value != "Complete"
    client.delete_job(name)


def test_fixed_name_is_replaced_after_a_failure(
    client: TrainerClient, kube: KubeTestServer
) -> None:
    ti = FakeTI(run_id="fixed")
    failing = op(trainer=CustomTrainer(train), options=[scenario("fail")], job_name="my-job")
    with pytest.raises(TrainJobFailedException):
        failing.execute(context(ti))
    ti.try_number = 2
    passing = op(trainer=CustomTrainer(train), options=[scenario("success")], job_name="my-job")
    out = passing.execute(context(ti))
    assert (out["name"], out["status"]) == ("my-job", "Complete")


def test_submit_without_waiting(client: TrainerClient, kube: KubeTestServer) -> None:
    task = op(
        trainer=CustomTrainer(train),
        options=[scenario("never-finish")],
        wait_for_completion=False,
        dashboard_url="https://ui/{namespace}/{name}",
    )
    ti = FakeTI()
    out = task.execute(context(ti))
    assert out == {"job_name": ti.xcoms["job_name"], "namespace": "default"}
    assert ti.xcoms["trainjob_url"] == f"https://ui/default/{out['job_name']}"
    assert client.get_job(out["job_name"]).status.value in ("Created", "Running")


def test_a_bad_dashboard_url_fails_before_anything_is_submitted(
    client: TrainerClient, kube: KubeTestServer
) -> None:
    # Checked once rendered (a template field), as the connection's and Prefect's are;
    # it used to be logged as "no link" after the job had been submitted.
    task = op(
        trainer=CustomTrainer(train),
        options=[scenario("never-finish")],
        wait_for_completion=False,
        job_name="dash-job",
        dashboard_url="https://ui/{namespace}/{job}",
    )
    with pytest.raises(
        ValueError, match=r"unknown placeholders \['job'\].*operator's dashboard_url"
    ):
        task.execute(context(FakeTI()))
    assert not [j for j in client.list_jobs() if j.name == "dash-job"]


def test_deferral_hands_the_trigger_a_connection_id(
    client: TrainerClient, kube: KubeTestServer
) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    task = op(
        trainer=CustomTrainer(train),
        options=[scenario("never-finish")],
        deferrable=True,
        startup_timeout=30,
        wait_timeout=timedelta(hours=1),
        on_kill_action="suspend",
    )
    with pytest.raises(TaskDeferred) as info:
        task.execute(context())
    path, kwargs = info.value.trigger.serialize()
    assert path.endswith("TrainJobTrigger")
    assert kwargs["kubeflow_trainer_conn_id"] == "kf_test"
    assert (kwargs["startup_timeout"], kwargs["timeout"]) == (30.0, 3600.0)
    assert kwargs["on_kill_action"] == "suspend"
    assert kwargs["namespace"] == "default"
    assert info.value.method_name == "execute_complete"
    # The trigger holds an early ending until resume_grace after this deferral.
    assert kwargs["resume_grace"] == DEFAULT_RESUME_GRACE > 0
    assert abs(kwargs["deferred_at"] - time.time()) < 60
