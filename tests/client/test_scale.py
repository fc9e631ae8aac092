"""A wait costs what it needs, not what the namespace holds: paginated lists (with
expired continue tokens), a shared informer that sees only the suite's jobs, foreign
jobs waited on by name, a bounded cache of finished jobs. Over HTTP against the test
server; no timing is asserted."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.results import SLIM_EXPECTS_RESULT
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.calls import Get, ListObjects, OpenWatch
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.k8s.retry import RetryPolicy
from kf_trainer_core.manifest.builder import MANAGED_BY_LABEL
from kf_trainer_core.manifest.selectors import SUITE_SELECTOR
from kf_trainer_core.programs import informer as informer_mod
from kf_trainer_core.spec import Annotations, CustomTrainer, Name, TrainJobSpec
from kf_trainer_core.testing.population import finished_trainjob, populate
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer

FAST = RetryPolicy(attempts=6, base=0.02, cap=0.2)


def _train() -> int:
    return 1


def _spec(name: str, scenario: str = "success") -> TrainJobSpec:
    return TrainJobSpec(
        trainer=CustomTrainer(_train),
        options=[Name(name), Annotations({SCENARIO_ANNOTATION: scenario})],
    )


def _foreign(
    server: KubeTestServer, name: str, scenario: str = "success", *, suspend: bool = False
) -> None:
    """A running TrainJob made without this suite (as the Kubeflow SDK makes them): no
    managed-by label; the simulated controller runs it."""
    obj = finished_trainjob(name)
    obj["metadata"]["annotations"] = {SCENARIO_ANNOTATION: scenario}
    obj["spec"]["suspend"] = suspend
    del obj["status"]
    server.store.create(TRAINJOBS, obj, namespace="default")


def _resume_once_watched_by_name(server: KubeTestServer, name: str) -> threading.Thread:
    """Resume a suspended job as soon as a watch on its name is open: the wait then sees
    it run and finish through that watch (synchronised on the request, not on time)."""

    def run() -> None:
        wanted = f"metadata.name={name}"
        seen = 0
        for _ in range(1200):
            records = server.requests.records
            if any(
                r.verb == "watch" and r.query.get("fieldSelector") == wanted for r in records[seen:]
            ):
                server.store.patch(TRAINJOBS, "default", name, {"spec": {"suspend": False}})
                return
            seen = len(records)
            time.sleep(0.1)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _shared_state(client: TrainerClient | AsyncTrainerClient) -> informer_mod.InformerState:
    # The sync client's informers run on its portal's loop, the async one's on the
    # caller's: whichever registry holds the key.
    ops = client._async if isinstance(client, TrainerClient) else client
    key = ops._informer_key("trainjobs")
    for registry in list(informer_mod._registries.values()):
        if key in registry:
            return registry[key].state
    raise AssertionError(f"no informer for {key}")


def _trainjob_lists(calls: list[Any]) -> list[ListObjects]:
    return [c for c in calls if isinstance(c, ListObjects) and c.resource == TRAINJOBS]


@pytest.fixture
def small_pages(k8s_config: KubernetesConfig) -> KubernetesConfig:
    return k8s_config.model_copy(update={"list_page_size": 4})


def test_list_jobs_reads_small_pages(
    kube: KubeTestServer, small_pages: KubernetesConfig, calls: list[Any]
) -> None:
    populate(kube.store, "default", 10, suite=True, program_bytes=512)
    with TrainerClient(small_pages, retry=FAST, request_hook=calls.append) as client:
        jobs = client.list_jobs()
        assert sorted(j.name for j in jobs) == sorted(f"others-{i}" for i in range(10))
        assert all(j.status is JobState.COMPLETE for j in jobs)
        lists = _trainjob_lists(calls)
        assert [c.limit for c in lists] == [4, 4, 4]
        assert [c.continue_token is None for c in lists] == [True, False, False]
        # A page size per call overrides the config's.
        calls.clear()
        assert len(client.list_jobs(page_size=6)) == 10
        assert [c.limit for c in _trainjob_lists(calls)] == [6, 6]
        # The listed jobs carry no program: pages are slimmed as they arrive.
        assert "command" not in json.dumps([j.model_dump(mode="json") for j in jobs])


def test_expired_continue_token_restarts_the_list(
    kube: KubeTestServer, small_pages: KubernetesConfig, calls: list[Any]
) -> None:
    populate(kube.store, "default", 10, suite=True, program_bytes=512)
    kube.faults.expire_continue_tokens(1)
    with TrainerClient(small_pages, retry=FAST, request_hook=calls.append) as client:
        jobs = client.list_jobs()
    # Nothing lost, nothing twice: the pages before the 410 were thrown away.
    assert sorted(j.name for j in jobs) == sorted(f"others-{i}" for i in range(10))
    tokens = [c.continue_token is None for c in _trainjob_lists(calls)]
    assert tokens == [True, False, True, False, False]
    gone = [r for r in kube.requests.records if r.status == 410]
    assert len(gone) == 1
    assert gone[0].verb == "list"


def test_informer_survives_expired_continue_tokens(
    kube: KubeTestServer, small_pages: KubernetesConfig, calls: list[Any]
) -> None:
    populate(kube.store, "default", 9, suite=True, program_bytes=512)
    kube.faults.expire_continue_tokens(2)
    with TrainerClient(small_pages, retry=FAST, request_hook=calls.append) as client:
        name = client.submit(_spec("paged-wait")).job.name
        job, _ = client.wait(name, timeout=60)
        assert job.status is JobState.COMPLETE
        state = _shared_state(client)
        assert set(state.cache) == {f"others-{i}" for i in range(9)} | {name}
    # The informer listed in pages, met the expired tokens and started over.
    shared = [c for c in _trainjob_lists(calls) if c.label_selector == SUITE_SELECTOR]
    assert {c.limit for c in shared} == {4}
    assert any(c.continue_token for c in shared)
    gone = [r for r in kube.requests.records if r.status == 410 and r.verb == "list"]
    assert len(gone) == 2


def test_wait_amid_many_foreign_jobs_lists_only_the_suites(
    kube: KubeTestServer, k8s_config: KubernetesConfig, calls: list[Any]
) -> None:
    others = populate(kube.store, "default", 1200)
    ours = populate(kube.store, "default", 5, prefix="ours-old", suite=True)
    with TrainerClient(k8s_config, retry=FAST, request_hook=calls.append) as client:
        name = client.submit(_spec("amid-others")).job.name
        job, result = client.wait(name, timeout=60)
        assert job.status is JobState.COMPLETE
        assert result is not None
        state = _shared_state(client)
        # The shared informer holds the suite's jobs only, none of the 1,200 others.
        assert set(state.cache) == set(ours) | {name}
        assert not set(state.cache) & set(others)
        shared_lists = [c for c in _trainjob_lists(calls) if c.label_selector == SUITE_SELECTOR]
        assert shared_lists, "the shared informer lists by the suite's label"
        watches = [c for c in calls if isinstance(c, OpenWatch) and c.resource == TRAINJOBS]
        assert {w.label_selector for w in watches} == {SUITE_SELECTOR}
        # What the server sent for TrainJobs: the suite's jobs, not the namespace.
        listed = [
            r for r in kube.requests.records if r.verb == "list" and r.resource == "trainjobs"
        ]
        assert all(r.query.get("labelSelector") == SUITE_SELECTOR for r in listed)


def test_foreign_job_is_waited_on_by_name(
    kube: KubeTestServer, k8s_config: KubernetesConfig, calls: list[Any]
) -> None:
    populate(kube.store, "default", 50)
    _foreign(kube, "made-by-the-sdk", suspend=True)
    resumer = _resume_once_watched_by_name(kube, "made-by-the-sdk")
    with TrainerClient(k8s_config, retry=FAST, request_hook=calls.append) as client:
        job, _ = client.wait("made-by-the-sdk", timeout=60)
        resumer.join()
        assert job.status is JobState.COMPLETE
        assert "made-by-the-sdk" not in _shared_state(client).cache
    named = [
        c
        for c in calls
        if isinstance(c, (ListObjects, OpenWatch))
        and c.resource == TRAINJOBS
        and c.field_selector == "metadata.name=made-by-the-sdk"
    ]
    # Listed and watched by its name alone.
    assert {type(c) for c in named} == {ListObjects, OpenWatch}
    assert all(c.label_selector is None for c in named)
    # The per-name path lists one job, not the namespace.
    lists = [r for r in kube.requests.records if r.verb == "list" and r.resource == "trainjobs"]
    assert all(r.query.get("labelSelector") or r.query.get("fieldSelector") for r in lists)


def test_foreign_job_failure_and_deletion_are_seen(
    kube: KubeTestServer, k8s_config: KubernetesConfig
) -> None:
    from kf_trainer_core.errors import TrainJobDeletedError, TrainJobFailedError

    _foreign(kube, "sdk-fails", "fail")
    _foreign(kube, "sdk-deleted", "never-finish")
    with TrainerClient(k8s_config, retry=FAST) as client:
        with pytest.raises(TrainJobFailedError):
            client.wait("sdk-fails", timeout=60)

        import threading

        deleting = threading.Timer(1.0, lambda: client.delete_job("sdk-deleted"))
        deleting.start()
        with pytest.raises(TrainJobDeletedError):
            client.wait("sdk-deleted", timeout=60)
        # The wait sees the job go before the delete has seen its JobSet collected:
        # the client stays open until the delete is done.
        deleting.join()


async def test_async_foreign_job_and_many_others(
    kube: KubeTestServer, k8s_config: KubernetesConfig, calls: list[Any]
) -> None:
    others = populate(kube.store, "default", 1000)
    _foreign(kube, "async-foreign", suspend=True)
    _resume_once_watched_by_name(kube, "async-foreign")
    async with AsyncTrainerClient(k8s_config, retry=FAST, request_hook=calls.append) as client:
        name = (await client.submit(_spec("async-ours"))).job.name
        (ours, _), (theirs, _) = await asyncio.gather(
            client.wait(name, timeout=60), client.wait("async-foreign", timeout=60)
        )
        assert ours.status is JobState.COMPLETE
        assert theirs.status is JobState.COMPLETE
        state = _shared_state(client)
        assert name in state.cache
        assert not set(state.cache) & (set(others) | {"async-foreign"})
    assert any(
        isinstance(c, OpenWatch) and c.field_selector == "metadata.name=async-foreign"
        for c in calls
    )


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_wait_begun_before_the_first_list_looks_by_name_once_it_ends(
    kube: KubeTestServer, k8s_config: KubernetesConfig, face: str
) -> None:
    # The shared informer's first list is slow: the wait on a foreign job starts before
    # the cache is authoritative and must be woken when it is, although the list brings
    # only other keys (the suite's own jobs). Found under CI load: it slept to its
    # timeout, the job Suspended.
    populate(kube.store, "default", 3, prefix=f"ours-{face}", suite=True)
    kube.faults.latency(1.0, verb="list", resource="trainjobs")
    _foreign(kube, f"early-{face}", suspend=True)
    _resume_once_watched_by_name(kube, f"early-{face}")
    if face == "sync":
        with TrainerClient(k8s_config, retry=FAST) as client:
            job, _ = await asyncio.to_thread(client.wait, f"early-{face}", timeout=30)
    else:
        async with AsyncTrainerClient(k8s_config, retry=FAST) as aclient:
            job, _ = await aclient.wait(f"early-{face}", timeout=30)
    assert job.status is JobState.COMPLETE


def test_finished_jobs_nobody_waits_for_are_not_kept_in_full(
    kube: KubeTestServer, k8s_config: KubernetesConfig, calls: list[Any]
) -> None:
    old = populate(kube.store, "default", 300, prefix="ours-old", suite=True)
    with TrainerClient(k8s_config, retry=FAST, request_hook=calls.append) as client:
        name = client.submit(_spec("bounded")).job.name
        client.wait(name, timeout=60)
        state = _shared_state(client)
        assert set(old) <= set(state.cache)
        # Finished and unwatched: name and version only.
        stubs = [state.cache[n] for n in old]
        assert all(set(o) == {"metadata"} for o in stubs)
        assert all(set(o["metadata"]) == {"name", "resourceVersion"} for o in stubs)
        # The job just waited for is finished too, and nobody waits on it any more.
        assert set(state.cache[name]) == {"metadata"}
        # A later wait on an old finished job still returns it: read once by name.
        calls.clear()
        job, _ = client.wait(old[7], timeout=30)
        assert job.status is JobState.COMPLETE
        assert job.name == old[7]
        assert [c.name for c in calls if isinstance(c, Get)][:1] == [old[7]]


def test_cache_holds_no_programs_nor_copies_of_the_object(
    kube: KubeTestServer, k8s_config: KubernetesConfig
) -> None:
    # A job of ours re-applied with kubectl: the annotation repeats the whole manifest.
    obj = finished_trainjob("applied", suite=True)
    del obj["status"]
    obj["metadata"]["annotations"] = {
        SCENARIO_ANNOTATION: "never-finish",
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(obj),
    }
    kube.store.create(TRAINJOBS, obj, namespace="default")
    with TrainerClient(k8s_config, retry=FAST) as client:
        client.wait("applied", status="Running", timeout=60)
        cached = _shared_state(client).cache["applied"]
        assert set(cached["spec"]) <= {"suspend", "managedBy", "runtimeRef", "trainer"}
        # Of the trainer's program, only whether it reports a result (this one: a
        # command of finished_trainjob's, without the marker).
        assert cached["spec"]["trainer"] == {"numNodes": 1, SLIM_EXPECTS_RESULT: False}
        assert set(cached["metadata"]["annotations"]) == {SCENARIO_ANNOTATION}
        assert cached["metadata"]["labels"][MANAGED_BY_LABEL] == "kf-trainer-suite"
        assert "python -" not in json.dumps(cached)
        client.delete_job("applied")


def test_slim_metadata_drops_managed_fields() -> None:
    meta = {"name": "x", "managedFields": [{"manager": "kubectl"}], "labels": {"a": "b"}}
    assert informer_mod.slim_metadata(meta) == {"name": "x", "labels": {"a": "b"}}


async def test_idle_per_name_informers_do_not_accumulate() -> None:
    from kf_trainer_core.k8s.retry import DEFAULT_POLICY

    async def no_api() -> Any:
        raise AssertionError("never started")

    def make(name: str) -> informer_mod.Informer:
        state = informer_mod.InformerState(TRAINJOBS, "ns", field_selector=f"metadata.name={name}")
        return informer_mod.Informer(
            state, no_api, watch_timeout=5, poll_interval=1, policy=DEFAULT_POLICY
        )

    keys = [("prune-test", "trainjob", "ns", f"job-{i}") for i in range(200)]
    for key in keys:
        informer_mod.informer(key, lambda key=key: make(key[-1]))
    registry = informer_mod._registries[asyncio.get_running_loop()]
    held = [k for k in registry if k[0] == "prune-test"]
    assert len(held) <= informer_mod._PRUNE_ABOVE + 1
