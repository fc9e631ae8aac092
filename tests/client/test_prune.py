"""``prune_jobs`` and ``kf-trainer jobs prune`` over real HTTP against the test server
(issue 27, section 1): finished jobs go with their JobSets and pods, unfinished and
foreign ones stay, a job that changed after it was listed is not deleted, and the
retention a job was submitted with is honoured by a later prune with no rules."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from test_client_sync import spec

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.fields.retention import Retention
from kf_trainer_core.k8s.calls import Delete
from kf_trainer_core.k8s.resources import JOBSETS, PODS, TRAINJOBS
from kf_trainer_core.manifest.builder import build_trainjob
from kf_trainer_core.testing.scenarios import Scenario
from kf_trainer_core.testing.server import KubeTestServer

NS = "default"


def _stamp(ago: timedelta) -> str:
    return (datetime.now(timezone.utc) - ago).strftime("%Y-%m-%dT%H:%M:%SZ")


def put_finished(
    server: KubeTestServer,
    identity: str,
    attempt: int = 0,
    *,
    ago: timedelta = timedelta(days=10),
    state: str = "Complete",
    retention: Retention | None = None,
    foreign: bool = False,
) -> str:
    """A finished job as the suite built it, stored as the API server holds it after
    its run (its Complete/Failed condition ``ago`` in the past)."""
    built = build_trainjob(
        spec(None), namespace=NS, identity=identity, attempt=attempt, retention=retention
    )
    obj: dict[str, Any] = dict(built.manifest)
    if foreign:
        obj["metadata"] = {**obj["metadata"], "labels": {}}
    obj["status"] = {
        "conditions": [
            {
                "type": state,
                "status": "True",
                "reason": "AllJobsCompleted",
                "message": "done",
                "lastTransitionTime": _stamp(ago),
            }
        ]
    }
    server.store.create(TRAINJOBS, obj, namespace=NS)
    return built.name


def names(client: TrainerClient) -> set[str]:
    return {j.name for j in client.list_jobs()}


def test_prune_deletes_old_finished_jobs_and_never_unfinished_or_foreign_ones(
    client: TrainerClient, server: KubeTestServer
) -> None:
    old = put_finished(server, "dag/old/run")
    failed = put_finished(server, "dag/failed/run", state="Failed")
    young = put_finished(server, "dag/young/run", ago=timedelta(hours=1))
    theirs = put_finished(server, "theirs/x/y", foreign=True)
    running = client.submit(spec("never-finish"), identity="dag/running/run").job.name
    client.wait_for_job_status(running, "Running", timeout=30)
    suspended = client.submit(spec("never-finish"), identity="dag/suspended/run").job.name
    client.suspend_job(suspended)

    plan = client.prune_jobs(older_than="7d", dry_run=True)
    assert {e.name for e in plan.selected} == {old, failed}
    assert names(client) >= {old, failed, young, theirs, running, suspended}  # dry run

    # Even the widest rules never reach an unfinished job.
    report = client.prune_jobs(older_than=0, keep_last=0, include_foreign=False)
    assert set(report.deleted) == {old, failed, young}
    assert report.unfinished == 2
    assert names(client) >= {theirs, running, suspended}
    assert not names(client) & {old, failed, young}
    assert client.get_job(running).status.value == "Running"

    report = client.prune_jobs(older_than=0, include_foreign=True)
    assert report.deleted == [theirs]


def test_a_finished_job_goes_with_its_jobset_and_pods(
    client: TrainerClient, server: KubeTestServer
) -> None:
    first = client.submit(spec(None), identity="dag/gc/run").job.name
    client.wait_for_job_status(first, "Complete", timeout=30)
    assert owned(server, first) == {"jobsets", "pods", "trainjobs"}
    report = client.prune_jobs(older_than=0)
    assert report.deleted == [first]
    deadline = time.monotonic() + 20  # Foreground: the owner goes after its dependents
    while owned(server, first) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert owned(server, first) == set()


def owned(server: KubeTestServer, job: str) -> set[str]:
    """Which kinds still hold an object of ``job`` (by name: the JobSet shares it, pods
    start with it)."""
    return {
        res.plural
        for res in (TRAINJOBS, JOBSETS, PODS)
        for o in server.store.list(res, NS)[0]
        if o["metadata"]["name"].startswith(job)
    }


def test_keep_last_keeps_the_newest_attempts_of_each_identity(
    client: TrainerClient, server: KubeTestServer
) -> None:
    attempts = [put_finished(server, "dag/t/run", a, state="Failed") for a in range(3)]
    other = put_finished(server, "dag/u/run")
    report = client.prune_jobs(keep_last=1)
    # Attempt 0 holds the identity's name while attempt 2 stays (submit creates attempt
    # 0 first): only attempt 1 goes.
    assert report.deleted == [attempts[1]]
    assert names(client) >= {attempts[0], attempts[2], other}
    # What a resubmit of the identity now does: the newest (failed) attempt decides.
    retry = client.submit(spec(None), identity="dag/t/run")
    assert retry.created
    assert retry.job.name != attempts[2]


def test_a_job_that_changed_after_it_was_listed_is_not_deleted(
    k8s_config: KubernetesConfig, server: KubeTestServer
) -> None:
    """Between the list and the delete, the job is restarted (its Complete condition
    cleared): the precondition on the listed resourceVersion stops the delete, and the
    re-read shows a job that is no longer finished."""
    name = put_finished(server, "dag/changing/run")
    server.controller.script(name, Scenario.preset("never-finish"))

    done: list[str] = []

    def meddle(call: Any) -> None:
        if isinstance(call, Delete) and call.name == name and not done:
            done.append(name)

            def unfinish(obj: dict[str, Any]) -> None:
                obj["status"] = {}

            server.store.mutate(TRAINJOBS, NS, name, unfinish, subresource="status")

    with TrainerClient(k8s_config, request_hook=meddle) as client:
        report = client.prune_jobs(older_than=0)
        assert report.deleted == []
        assert report.skipped == [(name, "changed since it was listed (now Created)")]
        assert name in names(client)


def test_a_job_replaced_under_its_name_is_not_deleted(
    k8s_config: KubernetesConfig, server: KubeTestServer
) -> None:
    name = put_finished(server, "dag/replaced/run")

    done: list[str] = []

    def replace(call: Any) -> None:
        if isinstance(call, Delete) and call.name == name and not done:
            done.append(name)
            server.store.delete(TRAINJOBS, NS, name)
            put_finished(server, "dag/replaced/run")  # same name, new uid, finished

    with TrainerClient(k8s_config, request_hook=replace) as client:
        report = client.prune_jobs(older_than=0)
        assert report.skipped == [
            (name, "replaced by another job of that name since it was listed")
        ]
        assert name in names(client)


def test_stamped_retention_is_honoured_by_a_prune_without_rules(
    k8s_config: KubernetesConfig, server: KubeTestServer
) -> None:
    hour = Retention(after_finished_seconds=3600)
    due = put_finished(server, "dag/a/run", ago=timedelta(hours=2), retention=hour)
    fresh = put_finished(server, "dag/b/run", ago=timedelta(minutes=5), retention=hour)
    plain = put_finished(server, "dag/c/run", ago=timedelta(days=300))
    # The backend's default reaches the manifest of what this client submits.
    backend = k8s_config.model_copy(update={"retention": Retention(keep_last=1)})
    with TrainerClient(backend) as client:
        built = client.build(spec(None), identity="dag/d/run")
        annotations = built.manifest["metadata"]["annotations"]
        assert annotations["kf-trainer-suite/retention-keep-last"] == "1"
        report = client.prune_jobs()
        assert report.deleted == [due]
        assert names(client) >= {fresh, plain}


def test_the_async_client_prunes_the_same_way(
    k8s_config: KubernetesConfig, server: KubeTestServer
) -> None:
    old = put_finished(server, "dag/async/run")
    keep = put_finished(server, "dag/async2/run", ago=timedelta(hours=1))

    async def main() -> tuple[Any, Any]:
        async with AsyncTrainerClient(k8s_config) as client:
            plan = await client.prune_jobs(older_than="1d", dry_run=True)
            done = await client.prune_jobs(older_than="1d")
            return plan, done

    plan, done = asyncio.run(main())
    assert [e.name for e in plan.selected] == [old] == done.deleted
    with TrainerClient(k8s_config) as client:
        assert keep in names(client)
        assert old not in names(client)


def test_bad_rules_fail_before_any_request(client: TrainerClient, calls: list[Any]) -> None:
    for bad in (
        {"older_than": "a week"},
        {"statuses": ("Running",)},
        {"honour_retention": False},
        {"keep_last": -1},
        {"label_selector": ""},
    ):
        with pytest.raises(ValueError, match="Fix"):
            client.prune_jobs(**bad)
    assert calls == []
