"""Which attempt a submit for an orchestrator identity goes to (issue 14, item 2), over
real HTTP against the test server.

The attempt number used to be the number of jobs found and "newest" their order by
``creationTimestamp`` (one-second resolution, ties by name). Two repros:

* attempt 0 fails within the second in which its retry creates attempt 1, and
  attempt 0's name sorts after attempt 1's: a second retry took attempt 0 for the
  newest, saw it failed and created attempt 2 while attempt 1 was running;
* attempts 0 and 1 failed and attempt 0 was deleted: the retry counted one job,
  adopted the failed attempt 1 and ran nothing.
"""

from __future__ import annotations

import time

from test_client_sync import spec

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.manifest.builder import ATTEMPT_ANNOTATION, build_trainjob
from kf_trainer_core.programs.submit import attempt_of, choose_attempt
from kf_trainer_core.testing.scenarios import Scenario
from kf_trainer_core.testing.server import KubeTestServer


def _names(identity: str) -> tuple[str, str, str]:
    s = spec(None)
    return tuple(  # type: ignore[return-value]
        build_trainjob(s, namespace="default", identity=identity, attempt=a).name for a in range(3)
    )


def _identity_sorting_backwards(prefix: str) -> str:
    """An identity whose attempt-0 name sorts after its attempt-1 name."""
    for i in range(1000):
        identity = f"{prefix}/run-{i}"
        a0, a1, _ = _names(identity)
        if a0 > a1:
            return identity
    raise AssertionError("no identity found")


def _created(client: TrainerClient, name: str) -> str:
    return str(client.get_job(name).creation_timestamp)


def test_a_second_retry_adopts_the_running_attempt_whatever_the_clock(
    client: TrainerClient, server: KubeTestServer
) -> None:
    controller = server.controller
    for tries in range(5):
        identity = _identity_sorting_backwards(f"dag/train/{tries}")
        a0, a1, a2 = _names(identity)
        controller.script(a0, Scenario.preset("fail"))
        controller.script(a1, Scenario.preset("never-finish"))
        # Start early in a second, so that attempt 0 fails and attempt 1 is created
        # within it: their creation times are then equal.
        while time.time() % 1 > 0.3:
            time.sleep(0.02)
        first = client.submit(spec(None), identity=identity)
        assert first.job.name == a0
        client.wait_for_job_status(a0, "Failed", timeout=30)
        retry = client.submit(spec(None), identity=identity)
        assert (retry.job.name, retry.created) == (a1, True)
        if _created(client, a0) == _created(client, a1):
            break
    assert _created(client, a0) == _created(client, a1)  # the tie that misled the old code

    again = client.submit(spec(None), identity=identity)
    assert (again.job.name, again.created) == (a1, False)  # adopted, not a third attempt
    assert a2 not in {j.name for j in client.list_jobs()}
    live = [j for j in client.list_jobs() if j.identity == identity and not j.status.terminal]
    assert [j.name for j in live] == [a1]


def test_a_retry_after_failures_runs_a_fresh_attempt_when_old_ones_were_deleted(
    client: TrainerClient, server: KubeTestServer
) -> None:
    identity = "dag/train/deleted-attempts"
    a0, a1, a2 = _names(identity)
    server.controller.script(a0, Scenario.preset("fail"))
    server.controller.script(a1, Scenario.preset("fail"))
    assert client.submit(spec(None), identity=identity).job.name == a0
    client.wait_for_job_status(a0, "Failed", timeout=30)
    assert client.submit(spec(None), identity=identity).job.name == a1
    client.wait_for_job_status(a1, "Failed", timeout=30)
    assert client.delete_job(a0)
    # Attempt 0's name is the identity's lock (a fresh submit creates it first, in one
    # request): with it deleted, the retry starts the identity over under that name —
    # a fresh job that trains, never the failed attempt 1 adopted.
    server.controller.script(a0, Scenario.preset("success"))
    retry = client.submit(spec(None), identity=identity)
    assert (retry.job.name, retry.created) == (a0, True)  # not the failed attempt 1
    job, _ = client.wait(a0, timeout=30)
    assert job.status is JobState.COMPLETE
    # Complete: a later retry adopts it and its result, although the failed attempt 1
    # carries a higher number.
    again = client.submit(spec(None), identity=identity)
    assert (again.job.name, again.created) == (a0, False)
    assert a2 not in {j.name for j in client.list_jobs()}


async def test_async_client_chooses_the_same_attempts(
    aclient: AsyncTrainerClient, server: KubeTestServer
) -> None:
    identity = "dag/train/async-attempts"
    a0, a1, a2 = _names(identity)
    server.controller.script(a0, Scenario.preset("fail"))
    server.controller.script(a1, Scenario.preset("fail"))
    assert (await aclient.submit(spec(None), identity=identity)).job.name == a0
    await aclient.wait_for_job_status(a0, "Failed", timeout=30)
    assert (await aclient.submit(spec(None), identity=identity)).job.name == a1
    await aclient.wait_for_job_status(a1, "Failed", timeout=30)
    third = await aclient.submit(spec(None), identity=identity)
    assert (third.job.name, third.created) == (a2, True)
    assert (await aclient.submit(spec(None), identity=identity)).created is False


def _job(attempt: int, state: str | None, deleting: bool = False) -> dict[str, object]:
    meta: dict[str, object] = {"name": f"j{attempt}", "annotations": {}}
    if attempt:
        meta["annotations"] = {ATTEMPT_ANNOTATION: str(attempt)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    conditions = [{"type": state, "status": "True"}] if state else []
    return {"metadata": meta, "status": {"conditions": conditions}}


def test_choose_attempt_table() -> None:
    assert choose_attempt([], True) == 0
    assert choose_attempt([_job(0, None)], True) == 0  # running: adopt
    assert choose_attempt([_job(0, "Failed")], True) == 1
    assert choose_attempt([_job(0, "Failed")], False) == 0
    assert choose_attempt([_job(0, "Complete")], True) == 0
    assert choose_attempt([_job(1, "Failed"), _job(0, None)], True) == 0  # the live one
    assert choose_attempt([_job(1, None), _job(0, "Failed")], True) == 1
    assert choose_attempt([_job(1, "Failed")], True) == 2  # attempt 0 deleted
    # A complete attempt is reused whatever failed after it (attempt 0 made again).
    assert choose_attempt([_job(0, "Complete"), _job(1, "Failed")], True) == 0
    assert choose_attempt([_job(3, "Failed", deleting=True), _job(0, "Failed")], True) == 4
    assert choose_attempt([_job(2, None, deleting=True)], True) == 2  # recreated once gone
    assert attempt_of({"metadata": {"annotations": {ATTEMPT_ANNOTATION: "x"}}}) == 0


def _pod(name: str, restart: int, phase: str) -> dict[str, object]:
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": "2026-01-01T00:00:01Z",  # the same second
            "labels": {
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "jobset.sigs.k8s.io/job-index": "0",
                "batch.kubernetes.io/job-completion-index": "0",
                "jobset.sigs.k8s.io/restart-attempt": str(restart),
            },
        },
        "spec": {"containers": [{"name": "node"}]},
        "status": {"phase": phase},
    }


def test_every_newest_pod_choice_agrees_on_creation_time_ties() -> None:
    # The same mistake as attempts, one level down: "newest pod of a step" came from
    # creationTimestamp alone, and the step view, the log reader and the result reader
    # broke its ties differently (the last in the list, the first, the first).
    from kf_trainer_core.cluster.status import steps_from_pods, trainer_pod
    from kf_trainer_core.programs.logs import _pod_for_step

    old = _pod("job-node-0-0-zzzzz", 0, "Failed")
    new = _pod("job-node-0-0-aaaaa", 1, "Running")
    replaced = _pod("job-node-0-0-yyyyy", 1, "Failed")
    for pods in ([old, new, replaced], [replaced, new, old], [new, old, replaced]):
        assert trainer_pod(pods) is new
        assert _pod_for_step(pods, "node-0") is new
        [step] = steps_from_pods(pods)
        assert (step.pod_name, step.status) == ("job-node-0-0-aaaaa", "Running")
