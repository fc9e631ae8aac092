"""An empty or invalid job name is refused before any request (issue 14, item 1).

An empty name used to reach the API as the collection URL: ``cancel_job("")`` and
``stop_unfinished("")`` sent ``DELETE …/trainjobs/`` (every TrainJob of the namespace
gone, finished ones included), ``get_job("")`` read the list as if it were a job and
``wait("")`` waited for it. Every method taking a name, on both clients, must refuse
it with an error naming the argument and the fix, and send nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from test_client_sync import spec

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.errors import InvalidNameError
from kf_trainer_core.fields.names import require_job_name
from kf_trainer_core.k8s.calls import Delete, Get, OpenLogStream, Patch, ReadLog
from kf_trainer_core.k8s.resources import PODS, TRAINJOBS
from kf_trainer_core.testing.server import KubeTestServer

BAD_NAMES = ["", " ", "My_Job", "a/b", "x" * 64, "-job"]

SyncCall = Callable[[TrainerClient, str], Any]
SYNC_METHODS: dict[str, SyncCall] = {
    "get_job": lambda c, n: c.get_job(n),
    "get_job_logs": lambda c, n: list(c.get_job_logs(n)),
    "get_job_logs(follow)": lambda c, n: c.get_job_logs(n, follow=True),
    "get_job_events": lambda c, n: c.get_job_events(n),
    "get_job_outputs": lambda c, n: c.get_job_outputs(n),
    "explain_failure": lambda c, n: c.explain_failure(n),
    "wait": lambda c, n: c.wait(n, timeout=5),
    "wait_for_job_status": lambda c, n: c.wait_for_job_status(n, timeout=5),
    "cancel_job": lambda c, n: c.cancel_job(n),
    "cancel_job(suspend)": lambda c, n: c.cancel_job(n, "suspend"),
    "cancel_job(keep)": lambda c, n: c.cancel_job(n, "keep"),
    "stop_unfinished": lambda c, n: c.stop_unfinished(n),
    "delete_job": lambda c, n: c.delete_job(n),
    "suspend_job": lambda c, n: c.suspend_job(n),
    "resume_job": lambda c, n: c.resume_job(n),
}

AsyncCall = Callable[[AsyncTrainerClient, str], Awaitable[Any]]


async def _alogs(c: AsyncTrainerClient, n: str, follow: bool) -> list[str]:
    return [line async for line in c.get_job_logs(n, follow=follow)]


ASYNC_METHODS: dict[str, AsyncCall] = {
    "get_job": lambda c, n: c.get_job(n),
    "get_job_logs": lambda c, n: _alogs(c, n, False),
    "get_job_logs(follow)": lambda c, n: _alogs(c, n, True),
    "get_job_events": lambda c, n: c.get_job_events(n),
    "get_job_outputs": lambda c, n: c.get_job_outputs(n),
    "explain_failure": lambda c, n: c.explain_failure(n),
    "wait": lambda c, n: c.wait(n, timeout=5),
    "cancel_job": lambda c, n: c.cancel_job(n),
    "cancel_job(keep)": lambda c, n: c.cancel_job(n, "keep"),
    "stop_unfinished": lambda c, n: c.stop_unfinished(n),
    "delete_job": lambda c, n: c.delete_job(n),
    "suspend_job": lambda c, n: c.suspend_job(n),
    "resume_job": lambda c, n: c.resume_job(n),
}


def _requests(server: KubeTestServer) -> int:
    """Requests other than lists and watches (other tests' lingering informers may
    still list and watch; nothing else runs in the background)."""
    return sum(1 for r in server.requests.records if r.verb not in ("list", "watch"))


@pytest.mark.parametrize("method", sorted(SYNC_METHODS))
def test_sync_methods_refuse_bad_names_before_any_request(
    client: TrainerClient, server: KubeTestServer, calls: list[Any], method: str
) -> None:
    keeper = client.submit(spec("success")).job.name
    client.wait(keeper, timeout=30)
    for bad in BAD_NAMES:
        calls.clear()
        before = _requests(server)
        with pytest.raises(InvalidNameError, match=r"name=.*Fix: ") as info:
            SYNC_METHODS[method](client, bad)
        assert isinstance(info.value, ValueError)
        assert calls == [], (method, bad)
        assert _requests(server) == before, (method, bad)
    # The finished job someone else kept is still there.
    assert client.get_job(keeper).name == keeper
    assert not server.requests.filter(verb="deletecollection")


@pytest.mark.parametrize("method", sorted(ASYNC_METHODS))
async def test_async_methods_refuse_bad_names_before_any_request(
    aclient: AsyncTrainerClient, server: KubeTestServer, calls: list[Any], method: str
) -> None:
    keeper = (await aclient.submit(spec("success"))).job.name
    await aclient.wait(keeper, timeout=30)
    for bad in BAD_NAMES:
        calls.clear()
        before = _requests(server)
        with pytest.raises(InvalidNameError, match=r"name=.*Fix: "):
            await ASYNC_METHODS[method](aclient, bad)
        assert calls == [], (method, bad)
        assert _requests(server) == before, (method, bad)
    assert (await aclient.get_job(keeper)).name == keeper
    assert not server.requests.filter(verb="deletecollection")


def test_stop_unfinished_refuses_whatever_would_pick_every_job(
    client: TrainerClient, server: KubeTestServer, calls: list[Any]
) -> None:
    running = client.submit(spec("never-finish")).job.name
    for kwargs in (
        {"label_selector": ""},
        {"label_selector": "  "},
        {"identity": ""},
        {"identity": ()},
        {"identity": "/"},
    ):
        with pytest.raises(ValueError, match="Fix: "):
            client.stop_unfinished(**kwargs)  # type: ignore[arg-type]
    assert not [c for c in calls if isinstance(c, Delete)]
    assert client.get_job(running).status.value != "Failed"
    assert client.stop_unfinished(running) == [running]


def test_the_error_names_the_argument_and_the_fix() -> None:
    with pytest.raises(InvalidNameError) as info:
        require_job_name("", "job_name")
    text = str(info.value)
    assert text.startswith("job_name='' is empty")
    assert "every TrainJob" in text
    assert "Fix: " in text
    with pytest.raises(InvalidNameError, match=r"job=None is a NoneType"):
        require_job_name(None, "job")
    assert require_job_name("my-job-1") == "my-job-1"


@pytest.mark.parametrize("name", ["", None, "a/b", ".."])
def test_no_call_naming_one_object_can_name_the_collection(name: Any) -> None:
    # The floor under every program, for both transports and the local backend: the
    # calls themselves refuse to exist without a name.
    for make in (
        lambda: Get(TRAINJOBS, "default", name),
        lambda: Delete(TRAINJOBS, "default", name),
        lambda: Patch(TRAINJOBS, "default", name, {}),
        lambda: ReadLog("default", name, "node"),
        lambda: OpenLogStream("default", name, "node"),
        lambda: Get(PODS, "default", name),
    ):
        with pytest.raises(ValueError, match="names no single object"):
            make()


def test_no_call_can_turn_an_empty_namespace_into_every_namespace() -> None:
    from kf_trainer_core.k8s.calls import Create, ListObjects, OpenWatch

    for make in (
        lambda: ListObjects(TRAINJOBS, ""),
        lambda: OpenWatch(TRAINJOBS, "", None),
        lambda: Create(TRAINJOBS, "", {}),
        lambda: Get(TRAINJOBS, "", "job"),
        lambda: Delete(TRAINJOBS, " ", "job"),
        lambda: ReadLog("", "pod", "node"),
    ):
        with pytest.raises(ValueError, match="every namespace"):
            make()
    assert ListObjects(TRAINJOBS, None).namespace is None  # None: all namespaces, on purpose
