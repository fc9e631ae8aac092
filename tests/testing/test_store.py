"""The in-process store: apiserver registry semantics without HTTP."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kf_trainer_core.testing.store import (
    CONFIGMAPS,
    EVENTS,
    JOBSETS,
    NAMESPACES,
    PODS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    LabelSelector,
    PodLogs,
    Store,
    StoreError,
    WatchEvent,
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
)


@pytest.fixture
def store() -> Store:
    s = Store()
    s.create(NAMESPACES, {"metadata": {"name": "default"}})
    return s


def tj(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"trainer": {"numNodes": 1}}}


def owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
    }


def test_create_sets_system_metadata(store: Store) -> None:
    obj = store.create(TRAINJOBS, tj("a"), namespace="default")
    meta = obj["metadata"]
    assert obj["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert obj["kind"] == "TrainJob"
    assert meta["namespace"] == "default"
    assert meta["generation"] == 1
    assert int(meta["resourceVersion"]) == int(store.current_resource_version)
    assert len(meta["uid"]) == 36
    assert meta["creationTimestamp"].endswith("Z")
    # Returned objects are copies: mutating them does not touch the store.
    obj["spec"]["trainer"]["numNodes"] = 99
    assert store.get(TRAINJOBS, "default", "a")["spec"]["trainer"]["numNodes"] == 1


def test_generate_name_and_errors(store: Store) -> None:
    made = store.create(PODS, {"metadata": {"generateName": "job-node-"}}, namespace="default")
    assert made["metadata"]["name"].startswith("job-node-")
    assert len(made["metadata"]["name"]) == len("job-node-") + 5

    store.create(TRAINJOBS, tj("a"), namespace="default")
    with pytest.raises(StoreError) as exc:
        store.create(TRAINJOBS, tj("a"), namespace="default")
    assert exc.value.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'trainjobs.trainer.kubeflow.org "a" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "a", "group": "trainer.kubeflow.org", "kind": "trainjobs"},
        "code": 409,
    }
    with pytest.raises(StoreError) as exc:
        store.create(TRAINJOBS, tj("Bad_Name"), namespace="default")
    assert exc.value.code == 422
    assert exc.value.details is not None
    assert exc.value.details["causes"][0]["field"] == "metadata.name"
    with pytest.raises(StoreError) as exc:
        store.get(PODS, "default", "missing")
    assert (exc.value.code, exc.value.message) == (404, 'pods "missing" not found')
    assert store.try_get(PODS, "default", "missing") is None


def test_update_conflict_status_split_and_generation(store: Store) -> None:
    obj = store.create(TRAINJOBS, tj("a"), namespace="default")
    stale = dict(obj)

    obj["spec"]["trainer"]["numNodes"] = 2
    obj["status"] = {"conditions": [{"type": "Complete"}]}
    updated = store.update(TRAINJOBS, obj)
    assert updated["metadata"]["generation"] == 2
    assert "status" not in updated  # the main resource ignores status

    with pytest.raises(StoreError) as exc:
        store.update(TRAINJOBS, stale)
    assert exc.value.reason == "Conflict"
    assert "the object has been modified" in exc.value.message

    updated["status"] = {"conditions": [{"type": "Complete"}]}
    updated["spec"]["trainer"]["numNodes"] = 5  # ignored on /status
    with_status = store.update(TRAINJOBS, updated, subresource="status")
    assert with_status["status"] == {"conditions": [{"type": "Complete"}]}
    assert with_status["spec"]["trainer"]["numNodes"] == 2
    assert with_status["metadata"]["generation"] == 2

    # Labels change metadata only: no generation bump. A no-op write: no new version.
    with_status["metadata"]["labels"] = {"x": "y"}
    relabelled = store.update(TRAINJOBS, with_status)
    assert relabelled["metadata"]["generation"] == 2
    again = store.update(TRAINJOBS, relabelled)
    assert again["metadata"]["resourceVersion"] == relabelled["metadata"]["resourceVersion"]

    # Without a status subresource (runtimes) everything is written.
    rt = store.create(
        TRAINING_RUNTIMES, {"metadata": {"name": "r"}, "spec": {}}, namespace="default"
    )
    rt["status"] = {"x": 1}
    assert store.update(TRAINING_RUNTIMES, rt)["status"] == {"x": 1}


def test_patch_types_and_preconditions(store: Store) -> None:
    store.create(
        PODS,
        {
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "a", "image": "1", "env": [{"name": "X", "value": "1"}]},
                    {"name": "b", "image": "1"},
                ]
            },
        },
        namespace="default",
    )
    merged = store.patch(PODS, "default", "p", {"metadata": {"labels": {"k": "v"}}})
    assert merged["metadata"]["labels"] == {"k": "v"}
    strategic = store.patch(
        PODS,
        "default",
        "p",
        {"spec": {"containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]}]}},
        patch_type="strategic",
    )
    containers = strategic["spec"]["containers"]
    assert [c["name"] for c in containers] == ["a", "b"]
    assert containers[0]["image"] == "1"
    assert containers[0]["env"] == [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]
    jp = store.patch(
        PODS,
        "default",
        "p",
        [
            {"op": "replace", "path": "/spec/containers/1/image", "value": "2"},
            {"op": "add", "path": "/metadata/labels/z", "value": "w"},
        ],
        patch_type="json",
    )
    assert jp["spec"]["containers"][1]["image"] == "2"
    with pytest.raises(StoreError) as exc:
        store.patch(
            PODS,
            "default",
            "p",
            [{"op": "test", "path": "/metadata/name", "value": "q"}],
            patch_type="json",
        )
    assert exc.value.code == 422
    with pytest.raises(StoreError) as exc:
        store.patch(PODS, "default", "p", {"metadata": {"resourceVersion": "1"}})
    assert exc.value.reason == "Conflict"
    status = store.patch(
        PODS, "default", "p", {"status": {"phase": "Running"}}, subresource="status"
    )
    assert status["status"]["phase"] == "Running"
    applied = store.patch(CONFIGMAPS, "default", "cm", {"data": {"a": "1"}}, patch_type="apply")
    assert applied["data"] == {"a": "1"}


def test_mutate_and_star_subresource(store: Store) -> None:
    store.create(TRAINJOBS, tj("a"), namespace="default")

    def complete(obj: dict[str, Any]) -> None:
        obj["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}

    assert store.mutate(TRAINJOBS, "default", "a", complete, subresource="status")["status"]
    both = store.mutate(
        TRAINJOBS,
        "default",
        "a",
        lambda o: o.update(spec={"suspend": True}, status={}),
        subresource="*",
    )
    assert both["spec"] == {"suspend": True}
    assert both["status"] == {}


def test_delete_cascades_in_order(store: Store) -> None:
    events: list[tuple[str, str, str]] = []
    store.subscribe(
        lambda e: events.append((e.type, e.resource.plural, e.object["metadata"]["name"]))
    )
    job = store.create(TRAINJOBS, tj("a"), namespace="default")
    js = store.create(
        JOBSETS,
        {"metadata": {"name": "a", "ownerReferences": [owner_ref(job)]}},
        namespace="default",
    )
    store.create(
        PODS,
        {"metadata": {"name": "a-node-0", "ownerReferences": [owner_ref(js)]}},
        namespace="default",
    )
    events.clear()
    gone = store.delete(TRAINJOBS, "default", "a", propagation="Foreground")
    assert gone["metadata"]["deletionTimestamp"]
    assert events == [
        ("MODIFIED", "trainjobs", "a"),  # deletionTimestamp + foregroundDeletion finalizer
        ("MODIFIED", "jobsets", "a"),
        ("DELETED", "pods", "a-node-0"),
        ("DELETED", "jobsets", "a"),
        ("DELETED", "trainjobs", "a"),
    ]
    assert store.count(PODS) == 0

    job = store.create(TRAINJOBS, tj("b"), namespace="default")
    store.create(
        PODS,
        {"metadata": {"name": "b-0", "ownerReferences": [owner_ref(job)]}},
        namespace="default",
    )
    store.delete(TRAINJOBS, "default", "b", propagation="Orphan")
    orphan = store.get(PODS, "default", "b-0")
    assert "ownerReferences" not in orphan["metadata"]

    with pytest.raises(StoreError) as exc:
        store.delete(PODS, "default", "b-0", preconditions={"uid": "nope"})
    assert exc.value.code == 409


def test_background_delete_collects_dependents_in_a_later_pass(store: Store) -> None:
    # As the real collector: the owner goes at once, its dependents a moment later;
    # one taken over by a new owner meanwhile stays.
    store.background_gc_delays[TRAINJOBS] = 0.05
    job = store.create(TRAINJOBS, tj("a"), namespace="default")
    store.create(
        JOBSETS,
        {"metadata": {"name": "a", "ownerReferences": [owner_ref(job)]}},
        namespace="default",
    )
    store.create(
        JOBSETS,
        {"metadata": {"name": "kept", "ownerReferences": [owner_ref(job)]}},
        namespace="default",
    )
    store.delete(TRAINJOBS, "default", "a")
    assert store.try_get(TRAINJOBS, "default", "a") is None
    assert store.count(JOBSETS) == 2  # not yet collected
    other = store.create(TRAINJOBS, tj("b"), namespace="default")

    def adopt(obj: dict[str, Any]) -> None:
        obj["metadata"]["ownerReferences"] = [owner_ref(other)]

    store.mutate(JOBSETS, "default", "kept", adopt)
    deadline = time.monotonic() + 10
    while store.try_get(JOBSETS, "default", "a") is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.try_get(JOBSETS, "default", "a") is None
    assert (
        store.get(JOBSETS, "default", "kept")["metadata"]["ownerReferences"][0]["uid"]
        == (other["metadata"]["uid"])
    )


def test_finalizers_hold_deletion_until_removed(store: Store) -> None:
    store.create(
        TRAINJOBS,
        {**tj("a"), "metadata": {"name": "a", "finalizers": ["x/y"]}},
        namespace="default",
    )
    pending = store.delete(TRAINJOBS, "default", "a")
    assert pending["metadata"]["deletionTimestamp"]
    assert store.try_get(TRAINJOBS, "default", "a") is not None
    store.patch(TRAINJOBS, "default", "a", {"metadata": {"finalizers": None}})
    assert store.try_get(TRAINJOBS, "default", "a") is None


def test_namespace_delete_removes_contents(store: Store) -> None:
    store.create(NAMESPACES, {"metadata": {"name": "team"}})
    store.create(PODS, {"metadata": {"name": "p"}}, namespace="team")
    store.create(PODS, {"metadata": {"name": "p"}}, namespace="default")
    store.delete(NAMESPACES, None, "team")
    assert [p["metadata"]["namespace"] for p in store.list(PODS)[0]] == ["default"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=a", ["p1", "p2"]),
        ("app==a,tier=web", ["p1"]),
        ("app!=a", ["p3", "p4"]),
        ("app in (a, b)", ["p1", "p2", "p3"]),
        ("app notin (a)", ["p3", "p4"]),
        ("tier", ["p1", "p3"]),
        ("!tier", ["p2", "p4"]),
        ("app in (a,b),!tier", ["p2"]),
        ("", ["p1", "p2", "p3", "p4"]),
    ],
)
def test_label_selectors(store: Store, selector: str, expected: list[str]) -> None:
    for name, labels in [
        ("p1", {"app": "a", "tier": "web"}),
        ("p2", {"app": "a"}),
        ("p3", {"app": "b", "tier": "db"}),
        ("p4", {}),
    ]:
        store.create(PODS, {"metadata": {"name": name, "labels": labels}}, namespace="default")
    items, _ = store.list(PODS, "default", label_selector=selector)
    assert [i["metadata"]["name"] for i in items] == expected


def test_field_selectors_and_errors(store: Store) -> None:
    store.create(
        PODS, {"metadata": {"name": "p1"}, "status": {"phase": "Running"}}, namespace="default"
    )
    store.create(
        PODS, {"metadata": {"name": "p2"}, "status": {"phase": "Pending"}}, namespace="default"
    )
    store.create(
        EVENTS,
        {
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "TrainJob", "name": "job"},
            "type": "Warning",
            "reason": "Failed",
        },
        namespace="default",
    )
    names = [
        p["metadata"]["name"]
        for p in store.list(PODS, None, field_selector="status.phase!=Pending")[0]
    ]
    assert names == ["p1"]
    assert store.list(PODS, field_selector="metadata.name=p2,metadata.namespace=default")[0]
    assert store.list(EVENTS, "default", field_selector="involvedObject.name=job,type=Warning")[0]
    with pytest.raises(StoreError) as exc:
        store.list(PODS, field_selector="spec.foo=x")
    assert (exc.value.code, exc.value.message) == (400, "field label not supported: spec.foo")
    with pytest.raises(StoreError) as exc:
        store.list(TRAINJOBS, field_selector="spec.foo=x")
    assert "is not a known field selector" in exc.value.message
    with pytest.raises(StoreError) as exc:
        store.list(PODS, label_selector="a in (b")
    assert exc.value.code == 400


def test_subscribers_see_commit_order_even_when_they_write(store: Store) -> None:
    seen: list[tuple[str, str]] = []

    def controller(e: WatchEvent) -> None:
        seen.append((e.type, e.object["metadata"]["name"]))
        if e.type == "ADDED" and e.resource == TRAINJOBS:
            # Writing from inside a callback queues the event behind the current one.
            store.create(
                PODS,
                {"metadata": {"name": e.object["metadata"]["name"] + "-0"}},
                namespace="default",
            )

    unsubscribe = store.subscribe(controller)
    later: list[str] = []
    store.subscribe(lambda e: later.append(e.object["metadata"]["name"]))
    store.create(TRAINJOBS, tj("a"), namespace="default")
    assert seen == [("ADDED", "a"), ("ADDED", "a-0")]
    assert later == ["a", "a-0"]
    unsubscribe()
    store.create(TRAINJOBS, tj("b"), namespace="default")
    assert len(seen) == 2


def test_concurrent_writers_get_unique_ordered_versions(store: Store) -> None:
    versions: list[int] = []
    store.subscribe(lambda e: versions.append(int(e.object["metadata"]["resourceVersion"])))

    def writer(k: int) -> None:
        for i in range(50):
            store.create(CONFIGMAPS, {"metadata": {"name": f"c{k}-{i}"}}, namespace="default")

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(versions) == 200
    assert versions == sorted(versions)
    assert len(set(versions)) == 200


def test_history_replay_compaction_and_a_list_at_a_version(store: Store) -> None:
    start = store.current_resource_version
    store.create(TRAINJOBS, tj("a"), namespace="default")
    mid = store.current_resource_version
    store.patch(TRAINJOBS, "default", "a", {"spec": {"suspend": True}})
    store.delete(TRAINJOBS, "default", "a")
    assert [e.type for e, _ in store.replay(TRAINJOBS, None, start)[0]] == [
        "ADDED",
        "MODIFIED",
        "DELETED",
    ]
    assert store.replay(TRAINJOBS, "other", mid)[0] == []
    old_items, rv, _ = store.page(TRAINJOBS, "default", resource_version=mid)
    assert rv == mid
    assert [i["metadata"]["name"] for i in old_items] == ["a"]
    assert "suspend" not in old_items[0]["spec"]
    store.compact()
    with pytest.raises(StoreError) as exc:
        store.replay(TRAINJOBS, None, mid)
    assert exc.value.code == 410
    assert (
        exc.value.message == f"too old resource version: {mid} ({store.current_resource_version})"
    )
    assert store.replay(TRAINJOBS, None, store.current_resource_version)[0] == []
    later = str(int(store.current_resource_version) + 5)
    with pytest.raises(StoreError) as exc:
        store.page(TRAINJOBS, "default", resource_version=later)
    assert exc.value.code == 504


def test_reset_keeps_versions_monotonic(store: Store) -> None:
    store.create(TRAINJOBS, tj("a"), namespace="default")
    before = int(store.current_resource_version)
    store.reset()
    assert store.count(TRAINJOBS) == 0
    made = store.create(NAMESPACES, {"metadata": {"name": "default"}})
    assert int(made["metadata"]["resourceVersion"]) > before


def test_pod_logs() -> None:
    logs = PodLogs()
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
    logs.append("ns", "p", "c", "one\ntwo\n", timestamp=t0)
    logs.append("ns", "p", "c", "three", timestamp=t0 + timedelta(seconds=10))
    assert [line for _, line in logs.lines("ns", "p", "c")] == ["one", "two", "three"]
    assert [line for _, line in logs.lines("ns", "p", "c", tail=2)] == ["two", "three"]
    assert [line for _, line in logs.lines("ns", "p", "c", since=t0 + timedelta(seconds=5))] == [
        "three"
    ]
    woken: list[int] = []
    stop = logs.listen("ns", "p", "c", lambda: woken.append(1))
    logs.close("ns", "p", "c")
    assert logs.read_from("ns", "p", "c", 3) == ([], True)
    assert woken == [1]
    stop()
    logs.append("ns", "p", "c", "restarted")  # a new container instance
    assert logs.has_previous("ns", "p", "c")
    assert [line for _, line in logs.lines("ns", "p", "c", previous=True)] == [
        "one",
        "two",
        "three",
    ]
    assert [line for _, line in logs.lines("ns", "p", "c")] == ["restarted"]


def test_patch_helpers() -> None:
    assert apply_merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {
        "a": {"c": 2, "d": 3}
    }
    assert apply_json_patch({"a": [1, 2]}, [{"op": "move", "from": "/a/0", "path": "/b"}]) == {
        "a": [2],
        "b": 1,
    }
    assert apply_strategic_merge_patch(
        {"c": [{"name": "x", "v": 1}, {"name": "y"}]},
        {"c": [{"name": "y", "$patch": "delete"}, {"name": "z"}]},
    ) == {"c": [{"name": "x", "v": 1}, {"name": "z"}]}
    with pytest.raises(ValueError, match="out of bounds"):
        apply_json_patch([], [{"op": "add", "path": "/5", "value": 1}])


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=10,
)


@given(
    target=st.dictionaries(st.text(max_size=3), _json, max_size=4),
    patch=st.dictionaries(st.text(max_size=3), _json, max_size=4),
)
def test_merge_patch_properties(target: dict[str, Any], patch: dict[str, Any]) -> None:
    result = apply_merge_patch(target, patch)
    for key, value in patch.items():
        if value is None:
            assert key not in result
        elif not isinstance(value, dict):
            assert result[key] == value
    # Applying the same patch twice changes nothing more (RFC 7386 is idempotent).
    assert apply_merge_patch(result, patch) == result


@given(
    st.dictionaries(
        st.from_regex(r"[a-z]{1,5}", fullmatch=True),
        st.from_regex(r"[a-z0-9]{0,5}", fullmatch=True),
        max_size=4,
    )
)
def test_label_selector_equality_matches_itself(labels: dict[str, str]) -> None:
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    assert LabelSelector.parse(selector).matches(labels)
    for k, v in labels.items():
        assert not LabelSelector.parse(f"{k}!={v}").matches(labels)
