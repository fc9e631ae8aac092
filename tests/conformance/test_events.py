"""Events the controllers record about a job, as ``get_job_events`` reads them: the Job
controller's ``Completed`` and ``BackoffLimitExceeded``, the scheduler's
``FailedScheduling``, the Trainer's ``TrainJobResourcesCreationFailed``. The same
reasons, types, objects and fields (each component's recorder's) on the test bed and
the real controllers."""

from __future__ import annotations

from typing import Any

import pytest
from conformance_support import Cluster, until
from kubernetes import client as k8s

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import Event, JobState
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec


def events_with(client: TrainerClient, name: str, kind: str, reason: str) -> list[Event]:
    """The job's events, once one of ``kind`` with ``reason`` is among them."""
    return list(
        until(
            lambda: (
                (ev := client.get_job_events(name))
                and any(e.involved_object_kind == kind and e.reason == reason for e in ev)
                and ev
            ),
            what=f"a {kind} event {reason}",
        )
    )


def test_a_completed_job_has_the_job_controller_s_completed_event(
    client: TrainerClient, controllers: Cluster
) -> None:
    name = client.submit(controllers.spec("succeed")).job.name
    until(lambda: client.get_job(name).status is JobState.COMPLETE, what="Complete")
    events = events_with(client, name, "Job", "Completed")
    done = [e for e in events if e.reason == "Completed" and e.involved_object_kind == "Job"]
    assert all(e.type == "Normal" for e in done)
    assert all(e.involved_object_name.startswith(name) for e in events)


def test_a_failed_job_has_backoff_limit_exceeded(
    client: TrainerClient, controllers: Cluster
) -> None:
    runtime = controllers.fast_fail_runtime()
    name = client.submit(controllers.spec("fail", runtime=runtime)).job.name
    events = events_with(client, name, "Job", "BackoffLimitExceeded")
    (ev,) = [e for e in events if e.reason == "BackoffLimitExceeded"]
    assert ev.type == "Warning"
    assert "backoff limit" in ev.message


def test_an_unschedulable_pod_has_failed_scheduling(
    client: TrainerClient, controllers: Cluster
) -> None:
    trainer = CustomTrainer(controllers.spec().trainer.func, resources_per_node={"gpu": 9})
    name = client.submit(TrainJobSpec(trainer=trainer)).job.name
    events = events_with(client, name, "Pod", "FailedScheduling")
    ev = next(e for e in events if e.reason == "FailedScheduling")
    assert ev.type == "Warning"
    assert "Insufficient nvidia.com/gpu" in ev.message


def test_a_jobset_that_cannot_be_built_is_an_event_on_the_trainjob(
    client: TrainerClient, controllers: Cluster
) -> None:
    controllers.job_on_missing_runtime()
    events = events_with(client, "no-runtime", "TrainJob", "TrainJobResourcesCreationFailed")
    ev = next(e for e in events if e.reason == "TrainJobResourcesCreationFailed")
    assert ev.type == "Warning"
    assert ev.involved_object_name == "no-runtime"
    assert controllers.owned("jobsets") == []
    assert client.get_job("no-runtime").status is JobState.CREATED


def test_another_job_whose_name_starts_with_ours_keeps_its_events(
    client: TrainerClient, controllers: Cluster
) -> None:
    """Issue 33, finding 8: events of Jobs and pods were matched by ``<job>-`` name
    prefix, so TrainJob ``pfx``'s events, failure explanation, Airflow log and Prefect
    artifact showed the Warning of TrainJob ``pfx-b``'s pod. Ownership decides now."""
    from kf_trainer_core.spec import Name

    ours = client.submit(controllers.spec("succeed", Name("pfx"))).job.name
    trainer = CustomTrainer(controllers.spec().trainer.func, resources_per_node={"gpu": 9})
    theirs = client.submit(TrainJobSpec(trainer=trainer, options=[Name("pfx-b")])).job.name
    events_with(client, theirs, "Pod", "FailedScheduling")
    until(lambda: client.get_job(ours).status is JobState.COMPLETE, what="Complete")
    mine = events_with(client, ours, "Job", "Completed")
    strays = [e for e in mine if e.involved_object_name.startswith(f"{theirs}-")]
    assert strays == [], [
        (e.involved_object_kind, e.involved_object_name, e.reason) for e in strays
    ]
    assert all(e.reason != "FailedScheduling" for e in mine)
    assert all(
        e.involved_object_name.startswith(f"{ours}-node-") or e.involved_object_name == ours
        for e in mine
    )


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("ClusterTrainingRuntime", "not found ClusterTrainingRuntime specified in TrainJob"),
        ("TrainingRuntime", "TrainingRuntime specified in TrainJob is not found"),
    ],
)
def test_a_missing_runtime_is_named_by_its_kind_and_the_warning_repeats(
    client: TrainerClient, controllers: Cluster, kind: str, words: str
) -> None:
    # The Trainer reads runtimes through its cache, whose NotFound names the kind (the
    # test server named the resource: "clustertrainingruntimes.trainer.kubeflow.org"),
    # and retries at once: its events.k8s.io recorder writes the repeat as a series of
    # 2 (later repeats wait for its 6-minute heartbeat).
    controllers.job_on_missing_runtime(kind, "missing")
    (event,) = until(
        lambda: [
            e
            for e in client.get_job_events("no-runtime")
            if e.reason == "TrainJobResourcesCreationFailed" and e.count == 2
        ],
        what="the repeated TrainJobResourcesCreationFailed",
    )
    assert event.message == (
        f"TrainJob resources reconciliation failed: {words}: "
        f'{kind}.trainer.kubeflow.org "missing" not found'
    )
    assert (event.type, event.involved_object_kind) == ("Warning", "TrainJob")


UNSCHEDULABLE = (
    "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. no new claims to deallocate, "
    "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
)


def test_each_component_s_events_have_its_recorder_s_fields(
    client: TrainerClient, controllers: Cluster
) -> None:
    # The scheduler and JobSet (as the Trainer) record through the events.k8s.io/v1 API:
    # read from core/v1 such an event has an action, no source, count nor first/last
    # timestamps. The Job controller records through core/v1: a source and a count, no
    # eventTime, no reporting instance. A test that picks events by source.component
    # finds the Job controller's on a cluster, never the scheduler's.
    done = client.submit(controllers.spec("succeed")).job.name
    trainer = CustomTrainer(controllers.spec().trainer.func, resources_per_node={"gpu": 9})
    client.submit(TrainJobSpec(trainer=trainer))
    until(lambda: client.get_job(done).status is JobState.COMPLETE, what="Complete")
    api = controllers.api()

    def first(kind: str, reason: str) -> dict[str, Any] | None:
        items = k8s.CoreV1Api(api).list_namespaced_event(controllers.namespace).items
        return next(
            (
                api.sanitize_for_serialization(e)
                for e in items
                if (e.involved_object.kind, e.reason) == (kind, reason)
            ),
            None,
        )

    for kind, reason, component, action in [
        ("Pod", "Scheduled", "default-scheduler", "Binding"),
        ("Pod", "FailedScheduling", "default-scheduler", "Scheduling"),
        ("JobSet", "AllJobsCompleted", "jobset", "Reconciling"),
    ]:
        event = until(lambda k=kind, r=reason: first(k, r), what=f"{kind} {reason}")
        assert (event["reportingComponent"], event["action"]) == (component, action), event
        assert not (event.get("source") or {}).get("component"), event
        assert event["eventTime"], event
        assert [event.get(k) for k in ("count", "firstTimestamp", "lastTimestamp")] == [None] * 3
    assert until(lambda: first("Pod", "FailedScheduling"))["message"] == UNSCHEDULABLE
    for reason in ("SuccessfulCreate", "Completed"):
        event = until(lambda r=reason: first("Job", r), what=f"Job {reason}")
        assert event["source"] == {"component": "job-controller"}, event
        assert (event["reportingComponent"], event["reportingInstance"]) == ("job-controller", "")
        assert (event["count"], event.get("eventTime"), event.get("action")) == (1, None, None)
        assert event["firstTimestamp"]
        assert event["lastTimestamp"]
