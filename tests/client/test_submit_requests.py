"""A submit with an orchestrator identity costs one request when the identity is fresh
(issue 27, section 2): attempt 0 is created under the name the identity determines, and
only a refused create (409) lists the identity's attempts. Every guarantee of the
list-first submit holds: one live job per identity under concurrent submitters, a
changed spec refused, a failed attempt replaced, a finished one reused."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from test_client_sync import spec

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.errors import SpecConflictError
from kf_trainer_core.manifest.builder import build_trainjob
from kf_trainer_core.manifest.selectors import SUITE_SELECTOR
from kf_trainer_core.programs.submit import Submitted
from kf_trainer_core.testing.scenarios import Scenario
from kf_trainer_core.testing.server import KubeTestServer


def _names(identity: str) -> tuple[str, str]:
    s = spec(None)
    a0, a1 = (
        build_trainjob(s, namespace="default", identity=identity, attempt=a).name for a in (0, 1)
    )
    return a0, a1


def _requests(server: KubeTestServer, do: Callable[[], Submitted]) -> tuple[Submitted, list[str]]:
    """What ``do`` returned and the verbs of the TrainJob requests it made."""
    before = len(server.requests.records)
    out = do()
    # The client's shared watch lists the suite's jobs when it (re)connects, at any
    # moment: those lists are the watch's, not the submit's.
    verbs = [
        r.verb
        for r in server.requests.records[before:]
        if r.resource == "trainjobs"
        and r.verb != "watch"
        and not (r.verb == "list" and r.query.get("labelSelector") == SUITE_SELECTOR)
    ]
    return out, verbs


def test_a_fresh_identity_costs_one_request_and_a_rerun_two(
    client: TrainerClient, server: KubeTestServer
) -> None:
    client.submit(spec(None), identity="warm/the/runtime/cache")
    identity = "dag/train/one-request"
    a0, a1 = _names(identity)
    # It fails after a few seconds: the rerun below must find it still alive, however
    # busy the machine.
    server.controller.script(a0, Scenario.from_dict({"preset": "fail", "duration": 5.0}))

    fresh, verbs = _requests(server, lambda: client.submit(spec(None), identity=identity))
    assert (fresh.job.name, fresh.created) == (a0, True)
    assert verbs == ["create"]

    # A rerun while it lives: the create is refused, the listing settles it (adopted).
    again, verbs = _requests(server, lambda: client.submit(spec(None), identity=identity))
    assert (again.job.name, again.created) == (a0, False)
    assert verbs == ["create", "list"]

    # Failed: the next attempt is created after the listing.
    client.wait_for_job_status(a0, "Failed", timeout=60)
    retry, verbs = _requests(server, lambda: client.submit(spec(None), identity=identity))
    assert (retry.job.name, retry.created) == (a1, True)
    # The rerun claims attempt 1 on attempt 0 (the identity's lock) before creating it.
    assert verbs == ["create", "list", "patch", "create"]


def test_a_changed_spec_for_an_identity_is_still_refused(client: TrainerClient) -> None:
    identity = "dag/train/changed-spec"
    client.submit(spec(None), identity=identity)
    with pytest.raises(SpecConflictError, match="different spec"):
        client.submit(spec(None, nodes=2), identity=identity)


def test_concurrent_submitters_of_a_fresh_identity_make_one_job(
    k8s_config: KubernetesConfig, server: KubeTestServer
) -> None:
    identity = "dag/train/concurrent-fresh"
    a0, _ = _names(identity)
    server.controller.script(a0, Scenario.preset("never-finish"))
    results: list[Submitted] = []
    errors: list[BaseException] = []
    start = threading.Barrier(12)

    def one() -> None:
        # A client per submitter, as separate task processes would have.
        with TrainerClient(k8s_config) as c:
            c.get_runtime("torch-distributed")
            start.wait()
            try:
                results.append(c.submit(spec(None), identity=identity))
            except BaseException as exc:  # reported below
                errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(results) == 12
    assert {r.job.name for r in results} == {a0}
    assert sum(r.created for r in results) == 1


async def test_concurrent_retries_after_a_failure_make_one_fresh_attempt(
    aclient: AsyncTrainerClient, server: KubeTestServer
) -> None:
    identity = "dag/train/concurrent-retry"
    a0, a1 = _names(identity)
    # It fails after a few seconds: the rerun below must find it still alive, however
    # busy the machine.
    server.controller.script(a0, Scenario.from_dict({"preset": "fail", "duration": 5.0}))
    server.controller.script(a1, Scenario.preset("never-finish"))
    assert (await aclient.submit(spec(None), identity=identity)).created
    await aclient.wait_for_job_status(a0, "Failed", timeout=30)

    retries = await asyncio.gather(
        *(aclient.submit(spec(None), identity=identity) for _ in range(10))
    )
    assert {r.job.name for r in retries} == {a1}
    assert sum(r.created for r in retries) == 1
    live = [
        j for j in await aclient.list_jobs() if j.identity == identity and not j.status.terminal
    ]
    assert [j.name for j in live] == [a1]
