"""Watches over real HTTP: resume, bookmarks, timeouts, 410, selectors, drops, restart,
fan-out, with ``kubernetes.watch`` and ``kubernetes_asyncio.watch``."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_asyncio
import pytest
from kubernetes.client import ApiException

from kf_trainer_core.testing.server import KubeTestServer
from kf_trainer_core.testing.store import CONFIGMAPS

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


def custom(api: Any) -> Any:
    return kubernetes.client.CustomObjectsApi(api)


def collect(stream: Any, n: int | None = None) -> list[tuple[str, str]]:
    """(type, name-or-rv) of each event until the stream ends or ``n`` were seen."""
    out: list[tuple[str, str]] = []
    for event in stream:
        meta = event["raw_object"]["metadata"]
        out.append((event["type"], meta.get("name") or meta["resourceVersion"]))
        if n is not None and len(out) >= n:
            break
    return out


def test_watch_initial_state_and_resume_gets_exactly_missed_events(
    api: Any, make_trainjob: Callable[..., Any]
) -> None:
    co = custom(api)
    co.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", make_trainjob("j1"))
    initial = collect(
        kubernetes.watch.Watch().stream(
            co.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            "trainjobs",
            timeout_seconds=1,
        ),
        n=1,
    )
    assert initial == [("ADDED", "j1")]

    rv = co.list_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs")["metadata"][
        "resourceVersion"
    ]
    co.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", make_trainjob("j2"))
    co.patch_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", "j1", {"metadata": {"labels": {"x": "y"}}}
    )
    co.delete_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "j2")
    co.create_namespaced_custom_object(GROUP, VERSION, "kf-test", "trainjobs", make_trainjob("j3"))
    watch = kubernetes.watch.Watch()
    missed = collect(
        watch.stream(
            co.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            "trainjobs",
            resource_version=rv,
            timeout_seconds=5,
        ),
        n=3,
    )
    assert missed == [("ADDED", "j2"), ("MODIFIED", "j1"), ("DELETED", "j2")]


def test_watch_sees_live_events_in_order(api: Any, bare_kube: KubeTestServer) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    rv = v1.list_namespaced_config_map("default").metadata.resource_version

    def writer() -> None:
        time.sleep(0.05)
        for i in range(20):
            v1.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})

    thread = threading.Thread(target=writer)
    thread.start()
    got = collect(
        kubernetes.watch.Watch().stream(
            v1.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=5
        ),
        n=20,
    )
    thread.join()
    assert got == [("ADDED", f"c{i}") for i in range(20)]


def test_commit_hook_runs_before_watches_hear(api: Any, bare_kube: KubeTestServer) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    rv = v1.list_namespaced_config_map("default").metadata.resource_version
    hooked: dict[str, float] = {}
    remove = bare_kube.add_commit_hook(
        lambda event: hooked.setdefault(event.object["metadata"]["name"], time.monotonic())
    )
    thread = threading.Thread(
        target=lambda: (
            time.sleep(0.05),
            v1.create_namespaced_config_map("default", {"metadata": {"name": "hooked"}}),
        )
    )
    thread.start()
    seen = {}
    for event in kubernetes.watch.Watch().stream(
        v1.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=5
    ):
        seen[event["raw_object"]["metadata"]["name"]] = time.monotonic()
        break
    thread.join()
    assert hooked["hooked"] <= seen["hooked"]
    remove()
    v1.create_namespaced_config_map("default", {"metadata": {"name": "after"}})
    assert "after" not in hooked


def test_bookmarks_arrive_and_timeout_closes(api: Any, bare_kube: KubeTestServer) -> None:
    bare_kube.bookmark_interval = 0.2
    v1 = kubernetes.client.CoreV1Api(api)
    v1.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    started = time.monotonic()
    events = collect(
        kubernetes.watch.Watch().stream(
            v1.list_namespaced_config_map, "default", allow_watch_bookmarks=True, timeout_seconds=1
        )
    )
    elapsed = time.monotonic() - started
    assert 0.9 < elapsed < 2.5  # timeoutSeconds ends the stream cleanly
    assert events[0] == ("ADDED", "c")
    bookmarks = [rv for kind, rv in events if kind == "BOOKMARK"]
    assert 3 <= len(bookmarks) <= 6
    assert int(bookmarks[-1]) >= int(
        v1.read_namespaced_config_map("c", "default").metadata.resource_version
    )


def test_bookmark_is_ordered_after_events(api: Any, bare_kube: KubeTestServer) -> None:
    # A client that resumes from a bookmark must never miss an event before it.
    bare_kube.bookmark_interval = 0.01
    v1 = kubernetes.client.CoreV1Api(api)
    rv = v1.list_namespaced_config_map("default").metadata.resource_version

    def writer() -> None:
        for i in range(100):
            v1.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})

    thread = threading.Thread(target=writer)
    thread.start()
    last_event_rv = 0
    seen = 0
    for event in kubernetes.watch.Watch().stream(
        v1.list_namespaced_config_map,
        "default",
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
    ):
        event_rv = int(event["raw_object"]["metadata"]["resourceVersion"])
        if event["type"] == "BOOKMARK":
            assert event_rv >= last_event_rv
        else:
            assert event_rv > last_event_rv
            last_event_rv = event_rv
            seen += 1
            if seen == 100:
                break
    thread.join()


def test_expired_resource_version_is_410(
    api: Any, bare_kube: KubeTestServer, make_trainjob: Callable[..., Any]
) -> None:
    co = custom(api)
    co.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", make_trainjob("j"))
    old_rv = co.list_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs")["metadata"][
        "resourceVersion"
    ]
    co.patch_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", "j", {"metadata": {"labels": {"a": "b"}}}
    )
    bare_kube.faults.expire_resource_versions()
    current = bare_kube.store.current_resource_version

    # On the wire: HTTP 200, then one ERROR event, then the end of the stream.
    raw = co.list_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        "trainjobs",
        watch=True,
        resource_version=old_rv,
        _preload_content=False,
    )
    assert raw.status == 200
    lines = raw.data.decode().splitlines()
    assert [json.loads(line) for line in lines] == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {old_rv} ({current})",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]

    with pytest.raises(ApiException) as exc:
        collect(
            kubernetes.watch.Watch().stream(
                co.list_namespaced_custom_object,
                GROUP,
                VERSION,
                "default",
                "trainjobs",
                resource_version=old_rv,
                timeout_seconds=2,
            )
        )
    assert exc.value.status == 410
    assert exc.value.reason == f"Expired: too old resource version: {old_rv} ({current})"
    # A list from an expired version with Exact is 410 too; the current one still works.
    with pytest.raises(ApiException) as exc:
        co.list_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            "trainjobs",
            resource_version=old_rv,
            resource_version_match="Exact",
        )
    assert exc.value.status == 410
    co.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", make_trainjob("k"))
    fresh = collect(
        kubernetes.watch.Watch().stream(
            co.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            "trainjobs",
            resource_version=current,
            timeout_seconds=5,
        ),
        n=1,
    )
    assert fresh == [("ADDED", "k")]


def test_selector_watch_reports_objects_entering_and_leaving(
    api: Any, make_pod: Callable[..., Any]
) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    v1.create_namespaced_pod("default", make_pod("p", labels={"job": "a"}))
    v1.create_namespaced_pod("default", make_pod("q", labels={"job": "b"}))
    v1.patch_namespaced_pod("q", "default", {"metadata": {"labels": {"job": "a"}}})
    v1.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"job": "c"}}})
    v1.patch_namespaced_pod_status("q", "default", {"status": {"phase": "Running"}})
    got = collect(
        kubernetes.watch.Watch().stream(
            v1.list_namespaced_pod,
            "default",
            label_selector="job=a",
            resource_version=rv,
            timeout_seconds=2,
        ),
        n=4,
    )
    assert got == [("ADDED", "p"), ("ADDED", "q"), ("DELETED", "p"), ("MODIFIED", "q")]
    running = collect(
        kubernetes.watch.Watch().stream(
            v1.list_namespaced_pod,
            "default",
            field_selector="status.phase=Running",
            timeout_seconds=5,
        ),
        n=1,
    )
    assert running == [("ADDED", "q")]


def test_send_initial_events_ends_with_marked_bookmark(
    api: Any, make_pod: Callable[..., Any]
) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    v1.create_namespaced_pod("default", make_pod("p"))
    events = []
    for event in kubernetes.watch.Watch().stream(
        v1.list_namespaced_pod,
        "default",
        send_initial_events=True,
        allow_watch_bookmarks=True,
        resource_version_match="NotOlderThan",
        timeout_seconds=5,
    ):
        events.append(event)
        if len(events) == 2:
            break
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["raw_object"]["metadata"]["annotations"] == {
        "k8s.io/initial-events-end": "true"
    }


def _watch_in_thread(api: Any, result: list[Any], **kwargs: Any) -> threading.Thread:
    def run() -> None:
        started = time.monotonic()
        try:
            events = collect(
                kubernetes.watch.Watch().stream(
                    kubernetes.client.CoreV1Api(api).list_namespaced_config_map,
                    "default",
                    timeout_seconds=30,
                    **kwargs,
                )
            )
            result.append((events, time.monotonic() - started))
        except Exception as exc:
            result.append((exc, time.monotonic() - started))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_drop_watches_ends_open_streams(
    api: Any, bare_kube: KubeTestServer, wait_until: Callable[..., None]
) -> None:
    result: list[Any] = []
    thread = _watch_in_thread(api, result)
    wait_until(lambda: bare_kube.open_watches == 1)
    assert bare_kube.faults.drop_watches() == 1
    thread.join(5)
    events, elapsed = result[0]
    assert events == []
    assert elapsed < 5
    wait_until(lambda: bare_kube.open_watches == 0)

    thread = _watch_in_thread(api, result)
    wait_until(lambda: bare_kube.open_watches == 1)
    bare_kube.faults.drop_watches(abort=True)  # a reset connection: the client sees an error
    thread.join(5)
    assert isinstance(result[1][0], Exception)


def test_drop_watches_after_n_events(api: Any, bare_kube: KubeTestServer) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    for i in range(5):
        v1.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
    bare_kube.faults.drop_watches_after(2)
    first = collect(
        kubernetes.watch.Watch().stream(
            v1.list_namespaced_config_map, "default", timeout_seconds=10
        )
    )
    assert first == [("ADDED", "c0"), ("ADDED", "c1")]
    bare_kube.faults.drop_watches_after(None)
    assert (
        len(
            collect(
                kubernetes.watch.Watch().stream(
                    v1.list_namespaced_config_map, "default", timeout_seconds=5
                ),
                n=5,
            )
        )
        == 5
    )


def test_restart_keeps_data_and_drops_connections(
    api: Any, bare_kube: KubeTestServer, wait_until: Callable[..., None]
) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    v1.create_namespaced_config_map("default", {"metadata": {"name": "kept"}})
    port = bare_kube.port
    result: list[Any] = []
    thread = _watch_in_thread(api, result)
    wait_until(lambda: bare_kube.open_watches == 1)
    bare_kube.restart()
    thread.join(5)
    events, elapsed = result[0]
    assert events == [("ADDED", "kept")]
    assert elapsed < 5
    assert bare_kube.port == port
    assert [c.metadata.name for c in v1.list_namespaced_config_map("default").items] == ["kept"]


# ----------------------------------------------------------------------------- asyncio


async def test_async_watch_events_bookmarks_and_410(
    aapi: Any, bare_kube: KubeTestServer, make_trainjob: Callable[..., Any]
) -> None:
    bare_kube.bookmark_interval = 0.1
    co = kubernetes_asyncio.client.CustomObjectsApi(aapi)
    await co.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", make_trainjob("a1")
    )
    listed = await co.list_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs")
    rv = listed["metadata"]["resourceVersion"]

    async def later() -> None:
        await asyncio.sleep(0.05)
        await co.create_namespaced_custom_object(
            GROUP, VERSION, "default", "trainjobs", make_trainjob("a2")
        )

    task = asyncio.create_task(later())
    seen: list[str] = []
    watch = kubernetes_asyncio.watch.Watch()
    async with watch.stream(
        co.list_namespaced_custom_object,
        GROUP,
        VERSION,
        "default",
        "trainjobs",
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
    ) as stream:
        async for event in stream:
            seen.append(event["type"])
    await task
    assert seen[0] == "BOOKMARK" or seen[0] == "ADDED"
    assert seen.count("ADDED") == 1
    assert seen.count("BOOKMARK") >= 3
    assert watch.resource_version == bare_kube.store.current_resource_version

    bare_kube.faults.expire_resource_versions()

    async def drain() -> None:
        async with kubernetes_asyncio.watch.Watch().stream(
            co.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            "trainjobs",
            resource_version=rv,
            timeout_seconds=1,
        ) as stream:
            async for _ in stream:
                pass

    with pytest.raises(kubernetes_asyncio.client.ApiException) as exc:
        await drain()
    assert exc.value.status == 410


async def test_async_fan_out_to_many_watchers(bare_kube: KubeTestServer, bare_config: Path) -> None:
    # Each kubernetes_asyncio Watch() builds its own ApiClient (and SSL context, ~40 ms):
    # the client, not the server, limits how many a fast test can open.
    watchers, events = 40, 20
    cfg = kubernetes_asyncio.client.Configuration()
    await kubernetes_asyncio.config.load_kube_config(
        config_file=str(bare_config), client_configuration=cfg
    )
    cfg.connection_pool_maxsize = watchers + 10
    async with kubernetes_asyncio.client.ApiClient(cfg) as client:
        v1 = kubernetes_asyncio.client.CoreV1Api(client)
        rv = (await v1.list_namespaced_config_map("default")).metadata.resource_version

        async def watch_one() -> int:
            n = 0
            async with kubernetes_asyncio.watch.Watch().stream(
                v1.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=10
            ) as stream:
                async for _ in stream:
                    n += 1
                    if n == events:
                        break
            return n

        tasks = [asyncio.create_task(watch_one()) for _ in range(watchers)]
        while bare_kube.open_watches < watchers:
            await asyncio.sleep(0.01)
        for i in range(events):
            bare_kube.store.create(CONFIGMAPS, {"metadata": {"name": f"c{i}"}}, namespace="default")
        assert await asyncio.wait_for(asyncio.gather(*tasks), 10) == [events] * watchers
    assert bare_kube.requests.count(verb="watch", resource="configmaps") == watchers


def test_events_v1_watch_shows_core_events(api: Any) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    rv = v1.list_namespaced_event("default").metadata.resource_version
    v1.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "TrainJob", "name": "j", "namespace": "default"},
            "message": "hi",
            "type": "Normal",
            "reason": "Created",
        },
    )
    raw = api.call_api(
        "/apis/events.k8s.io/v1/namespaces/default/events",
        "GET",
        query_params=[("watch", "true"), ("resourceVersion", rv), ("timeoutSeconds", "5")],
        _preload_content=False,
        _return_http_data_only=True,
    )
    line = next(raw.stream())
    raw.release_conn()
    event = json.loads(line.splitlines()[0])
    assert event["type"] == "ADDED"
    assert event["object"]["apiVersion"] == "events.k8s.io/v1"
    assert (event["object"]["note"], event["object"]["regarding"]["name"]) == ("hi", "j")
