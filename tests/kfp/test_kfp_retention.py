"""Retention in real KFP runs (``kfp.local``, each task a subprocess talking HTTP to the
Kubernetes-API test server; issue 27): ``on_finish`` deletes a task's finished job only
once the task's outputs are written, a failed one only when asked; the maintenance
component prunes finished jobs and never a running one."""

# No `from __future__ import annotations`: KFP reads pipeline annotations as objects.
import json
from pathlib import Path
from typing import Any

import pytest
from kfp import dsl
from kfp_support import scenario

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import SpecError
from kf_trainer_core.spec import Annotations, CustomTrainer, Retention, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer
from kf_trainer_kfp import ComponentImage, prune_component, step_components, trainjob_launcher

HERE = ComponentImage.current_environment()
SPEC = TrainJobSpec(trainer=CustomTrainer("def fit():\n    return {'loss': 0.5}\n"))
FAILING = SPEC.with_options(Annotations({SCENARIO_ANNOTATION: scenario("fail")}))


def test_on_finish_deletes_the_job_after_the_outputs_are_written(
    local_kfp: Path, backend: dict[str, Any], client: TrainerClient, server: KubeTestServer
) -> None:
    launch = trainjob_launcher(
        backend_config=backend, component_image=HERE, on_finish="delete-succeeded"
    )
    task = launch(spec=SPEC, pipeline_run_id="run-1", pipeline_task_name="train")
    assert task.outputs["status"] == "Complete"
    assert json.loads(task.outputs["result_json"]) == {"epochs": 3, "loss": 0.1289}
    assert client.list_jobs() == []
    # One delete, after the dry run that asks whether the user may delete at all.
    deletes = server.requests.filter(verb="delete", resource="trainjobs", status=200)
    assert [r.dry_run for r in deletes] == [True, False]
    summary = next(local_kfp.rglob("launch-trainjob/summary")).read_text()
    assert f"## TrainJob `{task.outputs['job_name']}`: Complete" in summary

    # The step components' outputs node does the same; the default keeps the job.
    steps = step_components(backend_config=backend, component_image=HERE)
    submitted = steps.submit(spec=SPEC, pipeline_run_id="run-1", pipeline_task_name="steps")
    name = submitted.outputs["job_name"]
    steps.outputs(job_name=name)
    assert [j.name for j in client.list_jobs()] == [name]
    steps.outputs(job_name=name, on_finish="delete")
    assert client.list_jobs() == []


def test_on_finish_keeps_a_failed_job_unless_asked(
    local_kfp: Path, backend: dict[str, Any], client: TrainerClient
) -> None:
    launch = trainjob_launcher(backend_config=backend, component_image=HERE)
    with pytest.raises(RuntimeError):
        launch(spec=FAILING, pipeline_task_name="a", on_finish="delete-succeeded")
    [kept] = client.list_jobs()
    assert kept.status is JobState.FAILED
    with pytest.raises(RuntimeError):
        launch(spec=FAILING, pipeline_task_name="b", on_finish="delete")
    assert [j.name for j in client.list_jobs()] == [kept.name]  # b's went, after failing
    summary = next(local_kfp.rglob("launch-trainjob/summary")).read_text()
    assert "### Failure" in summary  # the failure was written before the delete
    with pytest.raises(SpecError, match="on_finish"):
        launch(spec=SPEC, on_finish="remove")  # refused while the pipeline is defined


def test_the_maintenance_component_prunes_finished_jobs_only(
    local_kfp: Path, backend: dict[str, Any], client: TrainerClient
) -> None:
    done = client.run(SPEC.with_options(Retention(after_finished_seconds=0)), identity=("a",))
    old = client.run(SPEC, identity=("b",))
    never = SPEC.with_options(Annotations({SCENARIO_ANNOTATION: scenario("never-finish")}))
    running = client.submit(never.with_options(Retention(after_finished_seconds=0))).job.name
    prune = prune_component(backend_config=backend, component_image=HERE)

    @dsl.pipeline
    def maintenance(dry_run: bool = False) -> list:
        return prune(dry_run=dry_run).outputs["deleted"]

    assert maintenance(dry_run=True).output == []  # a plan: nothing deleted
    assert len(client.list_jobs()) == 3
    # Without rules, the retention each job was submitted with decides.
    task = prune()
    assert task.outputs["deleted"] == [done.name]
    report = json.loads(task.outputs["report_json"])
    assert report["unfinished"] == 1
    assert report["kept"] == 1
    summary = next(local_kfp.rglob("prune-trainjobs/summary")).read_text()
    assert done.name in summary
    assert "its retention" in summary
    assert prune(older_than="0").outputs["deleted"] == [old.name]
    assert [j.name for j in client.list_jobs()] == [running]


def test_prune_component_refuses_rules_that_pick_nothing() -> None:
    with pytest.raises(SpecError, match="no rule"):
        prune_component(honour_retention=False)
    with pytest.raises(SpecError, match="older_than"):
        prune_component(older_than="soon")
    with pytest.raises(SpecError, match="statuses"):
        prune_component().__call__(statuses=["Running"])


def test_inputs_left_at_their_not_given_value_take_prune_jobs_defaults() -> None:
    from kf_trainer_kfp import inputs as inp

    not_given = {
        "older_than": "",
        "keep_last": -1,
        "statuses": [],
        "label_selector": "",
        "identity_prefix": "",
        "limit": 0,
    }
    assert inp.prune_options(not_given) == {}
    given = {
        "older_than": "7d",
        "keep_last": 0,
        "statuses": ["Failed"],
        "label_selector": "team=a",
        "identity_prefix": "kfp",
        "limit": 5,
        "include_foreign": True,
        "honour_retention": False,
        "dry_run": True,
    }
    assert inp.prune_options(given) == {**given, "statuses": ("Failed",)}
    assert inp.prune_options({"statuses": "Complete"}) == {"statuses": "Complete"}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("keep_last", True),
        ("keep_last", 2.5),
        ("keep_last", "3"),
        ("limit", True),
        ("limit", 2.5),
        ("statuses", ["Foo"]),
        ("statuses", ["complete"]),
    ],
)
def test_prune_component_names_the_input_of_a_bad_rule(field: str, value: Any) -> None:
    # Refused when the pipeline is defined, as a SpecError naming the input (not coerced).
    with pytest.raises(SpecError, match=f"{field}: {field}="):
        prune_component(**{field: value})
