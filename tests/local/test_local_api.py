"""The local backend's API surface, call by call: Status errors shaped like the
apiserver's, watches (ADDED/MODIFIED/DELETED, bookmarks, 410), logs, selectors, and
the pieces the supervisor is made of."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from local_jobs import trivial

from kf_trainer_core.backends.local import _common, launch, machine, watch
from kf_trainer_core.backends.local.logs import LogFollower, LogWriter, read_log
from kf_trainer_core.backends.local.store import LabelSelector, Store
from kf_trainer_core.backends.local.transport import LocalTransport
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.emulation.logs import parse_stamp
from kf_trainer_core.errors import TrainJobTimeoutError
from kf_trainer_core.k8s.calls import (
    Create,
    Delete,
    Get,
    ListObjects,
    OpenLogStream,
    OpenWatch,
    Patch,
    ReadLog,
)
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import EVENTS, PODS, SECRETS, TRAINJOBS
from kf_trainer_core.manifest.builder import build_trainjob
from kf_trainer_core.spec import CustomTrainer, SecretKeyRef, TrainJobSpec, function


@pytest.fixture
def transport(config: LocalConfig) -> Any:
    # A state directory a job was submitted with (reads of one never made are refused).
    Store(Path(str(config.state_dir)) / "state.db").close()
    t = LocalTransport(config)
    yield t
    t.close()


def manifest(name: str, **trainer: Any) -> dict[str, Any]:
    spec = TrainJobSpec(trainer=CustomTrainer(trivial, **trainer))
    return build_trainjob(spec, namespace="local", name=name).manifest


def lines(transport: Any, stream: Any, n: int) -> list[dict[str, Any]]:
    out = []
    while len(out) < n:
        raw = transport.read_line(stream)
        assert raw is not None, f"stream ended after {out}"
        out.append(json.loads(raw))
    return out


# ---------------------------------------------------------------------------- errors


def test_errors_are_apiserver_status_bodies(transport: Any) -> None:
    with pytest.raises(ApiError) as info:
        transport.perform(Get(TRAINJOBS, "local", "missing"))
    err = info.value
    assert (err.code, err.reason) == (404, "NotFound")
    assert err.status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'trainjobs.trainer.kubeflow.org "missing" not found',
        "reason": "NotFound",
        "details": {"name": "missing", "group": "trainer.kubeflow.org", "kind": "trainjobs"},
        "code": 404,
    }
    body = manifest("twice")
    body["spec"]["suspend"] = True  # no processes needed for this test
    created = transport.perform(Create(TRAINJOBS, "local", body))
    meta = created["metadata"]
    assert meta["uid"]
    assert meta["generation"] == 1
    assert int(meta["resourceVersion"]) > 0
    assert meta["creationTimestamp"].endswith("Z")
    with pytest.raises(ApiError) as info:
        transport.perform(Create(TRAINJOBS, "local", body))
    assert info.value.already_exists
    assert info.value.message == 'trainjobs.trainer.kubeflow.org "twice" already exists'

    bad = manifest("twice")
    bad["metadata"]["name"] = "Not_Valid"
    with pytest.raises(ApiError) as info:
        transport.perform(Create(TRAINJOBS, "local", bad))
    assert info.value.invalid
    assert info.value.causes()[0].startswith("metadata.name: Invalid value")

    unknown = manifest("unknown-field")
    unknown["spec"]["bogus"] = 1
    with pytest.raises(ApiError) as info:
        transport.perform(Create(TRAINJOBS, "local", unknown))
    assert info.value.code == 400
    assert 'unknown field "spec.bogus"' in info.value.message

    deleted = transport.perform(Delete(TRAINJOBS, "local", "twice"))
    assert deleted["status"] == "Success"
    with pytest.raises(ApiError) as info:
        transport.perform(Delete(TRAINJOBS, "local", "twice"))
    assert info.value.not_found


# ---------------------------------------------------------------------------- watches


def test_watch_delivers_changes_in_order(transport: Any) -> None:
    listing = transport.perform(ListObjects(TRAINJOBS, "local"))
    stream = transport.open_stream(
        OpenWatch(TRAINJOBS, "local", listing["metadata"]["resourceVersion"])
    )
    body = manifest("watched")
    body["spec"]["suspend"] = True
    transport.perform(Create(TRAINJOBS, "local", body))
    transport.perform(Patch(TRAINJOBS, "local", "watched", {"metadata": {"labels": {"a": "b"}}}))
    transport.perform(Delete(TRAINJOBS, "local", "watched"))
    events = [e for e in lines(transport, stream, 5) if e["object"]["metadata"].get("name")]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "ADDED"
    assert kinds[-1] == "DELETED"
    assert "MODIFIED" in kinds
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions)
    stream.close()


def test_watch_from_zero_lists_first_and_sends_bookmarks(
    transport: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "BOOKMARK_SECONDS", 0.1)
    body = manifest("existing")
    body["spec"]["suspend"] = True
    transport.perform(Create(TRAINJOBS, "local", body))
    stream = transport.open_stream(OpenWatch(TRAINJOBS, "local", "0"))
    first = lines(transport, stream, 1)[0]
    assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "existing")
    later = lines(transport, stream, 2)
    assert any(e["type"] == "BOOKMARK" for e in later)
    bookmark = next(e for e in later if e["type"] == "BOOKMARK")
    assert int(bookmark["object"]["metadata"]["resourceVersion"]) >= int(
        first["object"]["metadata"]["resourceVersion"]
    )
    stream.close()


def test_watch_from_a_pruned_version_gets_410(transport: Any, state_dir: Path) -> None:
    body = manifest("old")
    body["spec"]["suspend"] = True
    created = transport.perform(Create(TRAINJOBS, "local", body))
    old = int(created["metadata"]["resourceVersion"]) - 1
    store = Store(state_dir / "state.db")
    store.compact()
    store.close()
    stream = transport.open_stream(OpenWatch(TRAINJOBS, "local", str(old)))
    event = json.loads(transport.read_line(stream))
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired"
    assert transport.read_line(stream) is None
    # The informer's answer: a fresh list, whose version watches fine.
    listing = transport.perform(ListObjects(TRAINJOBS, "local"))
    fresh = transport.open_stream(
        OpenWatch(
            TRAINJOBS,
            "local",
            listing["metadata"]["resourceVersion"],
            timeout_seconds=1,
            bookmarks=False,
        )
    )
    assert transport.read_line(fresh) is None  # no error: ends at its timeout
    fresh.close()


def test_watch_ends_after_its_timeout(transport: Any) -> None:
    stream = transport.open_stream(
        OpenWatch(TRAINJOBS, "local", "1", timeout_seconds=1, bookmarks=False)
    )
    start = time.monotonic()
    assert transport.read_line(stream) is None
    assert 0.8 < time.monotonic() - start < 3


def test_selectors() -> None:
    sel = LabelSelector.parse("a=b,c!=d,e in (f, g),h notin (i),j,!k")
    assert sel.matches({"a": "b", "e": "f", "h": "x", "j": ""})
    assert not sel.matches({"a": "b", "e": "f", "j": "", "k": "1"})
    assert not sel.matches({"a": "b", "c": "d", "e": "f", "j": ""})
    assert not sel.matches({"a": "b", "e": "z", "j": ""})
    assert LabelSelector.parse("").matches({})


# ---------------------------------------------------------------------------- logs


def test_log_files_and_followers(tmp_path: Path) -> None:
    log, done = tmp_path / "node.log", tmp_path / "node.done"
    writer = LogWriter(log, done)
    writer.write("one")
    writer.write("two\nthree")
    text = read_log(log, timestamps=True)
    stamps = [line.split(" ", 1)[0] for line in text.splitlines()]
    # Go's RFC3339Nano, as the kubelet shows them: the fraction without trailing zeros.
    assert all(not s.endswith("0Z") and not s.endswith(".Z") for s in stamps)
    times = [parse_stamp(s) for s in stamps]
    assert times == sorted(times)
    assert len(set(times)) == 3
    assert read_log(log) == "one\ntwo\nthree\n"
    assert read_log(log, tail_lines=1) == "three\n"
    assert read_log(log, since_time=stamps[1]) == "two\nthree\n"
    assert read_log(log, limit_bytes=6) == "one\ntw"
    kept = tmp_path / "kept.log"
    kept.write_text(
        "2026-01-02T03:04:05.120000000Z at twelve\n2026-01-02T03:04:06.000000000Z six\n"
    )
    shown = "2026-01-02T03:04:05.12Z at twelve\n2026-01-02T03:04:06Z six\n"
    assert read_log(kept, timestamps=True) == shown

    follower = LogFollower(log, done, tail_lines=2, timestamps=False)
    assert follower.poll() == b"two"
    assert follower.poll() == b"three"
    assert follower.poll() is not None  # PENDING: the container still runs
    writer.write("four")
    assert follower.poll() == b"four"
    writer.close()
    assert follower.poll() is None
    follower.close()


def test_read_log_errors(client: TrainerClient, transport: Any) -> None:
    with pytest.raises(ApiError) as info:
        transport.perform(ReadLog("local", "no-such-pod", "node"))
    assert info.value.not_found
    name = client.train(trainer=CustomTrainer(trivial))
    client.wait(name, timeout=30)
    pod = client.get_job(name).steps[0].pod_name
    with pytest.raises(ApiError) as info:
        transport.perform(ReadLog("local", pod, "sidecar"))
    assert info.value.code == 400
    stream = transport.open_stream(OpenLogStream("local", pod, "node", tail_lines=1))
    last = transport.read_line(stream)
    assert last is not None
    assert b"##kf-trainer-result##" in last
    assert transport.read_line(stream) is None


# ---------------------------------------------------------------------------- secrets


def test_secrets_reach_the_trainer_and_a_missing_one_blocks_the_pod(
    client: TrainerClient, transport: Any
) -> None:
    transport.perform(
        Create(
            SECRETS,
            "local",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "creds"},
                "data": {"token": base64.b64encode(b"s3cr3t").decode()},
            },
        )
    )
    env = {"TOKEN": SecretKeyRef(name="creds", key="token")}
    name = client.train(trainer=CustomTrainer(read_token, env=env))
    _, result = client.wait(name, timeout=30)
    assert result == "s3cr3t"

    missing = {"TOKEN": SecretKeyRef(name="absent", key="token")}
    name = client.train(trainer=CustomTrainer(read_token, env=missing))
    with pytest.raises(TrainJobTimeoutError) as info:
        client.wait(name, timeout=30, startup_timeout=1.0)
    failure = info.value.failure
    assert failure is not None
    assert failure.container_reason == "CreateContainerConfigError"
    assert 'secret "absent" not found' in failure.message
    # The kubelet retries: once the Secret exists, the pod starts.
    transport.perform(
        Create(
            SECRETS,
            "local",
            {"metadata": {"name": "absent"}, "stringData": {"token": "late"}},
        )
    )
    _, result = client.wait(name, timeout=30)
    assert result == "late"
    events = transport.perform(ListObjects(EVENTS, "local", field_selector="reason=Failed"))
    assert any("absent" in e["message"] for e in events["items"])


def test_env_values_expand_earlier_variables_as_the_kubelet_does(client: TrainerClient) -> None:
    # $(VAR) names a variable defined before it; $$ escapes; an unknown one stays.
    env = {"WHO": "world", "GREETING": "hello $(WHO) $$(WHO) $(NOPE)"}
    name = client.train(trainer=CustomTrainer(read_greeting, env=env))
    _, result = client.wait(name, timeout=30)
    assert result == "hello world $(WHO) $(NOPE)"


def read_greeting() -> str:
    import os

    return os.environ["GREETING"]


def read_token() -> str:
    import os

    return os.environ["TOKEN"]


def test_a_list_of_every_namespace_pages_by_namespace_and_name(transport: Any) -> None:
    # Objects of one name in several namespaces: a page resumes after the last
    # (namespace, name), as the apiserver's do, and none is skipped.
    for namespace in ("b", "a", "c"):
        body = {"metadata": {"name": "same"}, "stringData": {"k": namespace}}
        transport.perform(Create(SECRETS, namespace, body))
    seen, token = [], None
    while True:
        page = transport.perform(ListObjects(SECRETS, None, limit=1, continue_token=token))
        seen += [o["metadata"]["namespace"] for o in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
        assert page["metadata"]["remainingItemCount"] == 3 - len(seen)
    assert seen == ["a", "b", "c"]
    with pytest.raises(ApiError) as info:
        transport.perform(ListObjects(SECRETS, None, limit=1, continue_token="not-a-token"))
    assert info.value.code == 400


def test_pods_are_listed_by_job_label(client: TrainerClient, transport: Any) -> None:
    name = client.train(trainer=CustomTrainer(trivial, num_nodes=2))
    client.wait(name, timeout=30)
    pods = transport.perform(
        ListObjects(PODS, "local", label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
    )["items"]
    assert len(pods) == 2
    assert transport.perform(ListObjects(PODS, "other"))["items"] == []


# ---------------------------------------------------------------------------- pieces


def test_constants_match_the_generated_program() -> None:
    assert _common.TERMINATION_LOG_ENV == function.TERMINATION_LOG_ENV
    assert _common.TERMINATION_MESSAGE_LIMIT == function.TERMINATION_MESSAGE_LIMIT
    assert _common.RESULT_MARKER == function.RESULT_MARKER


def test_pending_pod_has_the_kubelets_conditions(tmp_path: Path) -> None:
    """The local pod is written with the shapes the test server's kubelet uses: the
    not-ready reason sits on Ready/ContainersReady only (it used to sit on
    PodReadyToStartContainers too), and the name ends in the apiserver's alphabet."""
    from kf_trainer_core.backends.local.pods import JobPlace, pod_object
    from kf_trainer_core.k8s.objects import GENERATE_NAME_CHARS

    place = JobPlace(
        _common.Paths(tmp_path), "ns", "job", "0" * 8 + "-0000-4000-8000-" + "0" * 12, "h"
    )
    obj = pod_object(place, ["node"], "node", 0, {"name": "node", "image": "img"})
    conditions = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conditions["Ready"]["reason"] == "ContainersNotReady"
    assert conditions["ContainersReady"]["reason"] == "ContainersNotReady"
    assert "reason" not in conditions["PodReadyToStartContainers"]
    assert obj["metadata"]["name"].startswith("job-node-0-0-")
    assert set(obj["metadata"]["name"][-5:]) <= set(GENERATE_NAME_CHARS)


def test_a_trainer_pod_is_the_runtimes_container_with_the_trainer_over_it(
    tmp_path: Path,
) -> None:
    """The trainer's container is made as the Trainer makes it (emulation/jobs.py, as
    on the test bed): the runtime's args stay unless the trainer sets its own, and a
    variable the trainer sets that the torch policy sets too appears once, the policy's."""
    from kf_trainer_core.backends.local.jobpods import trainer_pods
    from kf_trainer_core.backends.local.pods import JobPlace

    place = JobPlace(
        _common.Paths(tmp_path), "ns", "job", "0" * 8 + "-0000-4000-8000-" + "0" * 12, "h"
    )
    runtime = {"policy": "torch", "image": "rt:1", "command": ["python"], "args": ["--lr=1"]}
    trainer = {"env": [{"name": "PET_NNODES", "value": "9"}, {"name": "TEAM", "value": "ml"}]}
    (pod,) = trainer_pods(place, ["node"], {"runtime": runtime}, trainer, [("node", 0, 0)], 1, ".")
    container = pod.obj["spec"]["containers"][0]
    assert (container["image"], container["command"], container["args"]) == (
        "rt:1",
        ["python"],
        ["--lr=1"],
    )
    names = [e["name"] for e in container["env"]]
    assert names.count("PET_NNODES") == 1
    assert {e["name"]: e.get("value") for e in container["env"]}["PET_NNODES"] == "1"
    assert "TEAM" in names


def takes_paths(out: str, keep: str, n: list[str]) -> None:
    pass


def test_function_command_is_recognised_and_workspace_paths_mapped() -> None:
    spec = TrainJobSpec(
        trainer=CustomTrainer(
            takes_paths,
            func_args={"out": "/workspace/ranks", "keep": "/workspaces/x", "n": ["/workspace"]},
            packages_to_install=["numpy>=1", "tqdm"],
        )
    )
    command = build_trainjob(spec).manifest["spec"]["trainer"]["command"]
    program = launch.parse_trainer(command, [])
    assert program.kind == "function"
    assert program.func_name == "takes_paths"
    assert program.packages == ("numpy>=1", "tqdm")
    assert program.index_urls == ("https://pypi.org/simple",)
    mapped = launch.map_program_args(program.program, "/tmp/ws")
    assert '"out":"/tmp/ws/ranks"' in mapped
    assert '"keep":"/workspaces/x"' in mapped
    assert '"n":["/tmp/ws"]' in mapped
    # Only the arguments changed.
    assert mapped.replace("/tmp/ws", "/workspace") == program.program
    assert launch.parse_trainer(["python", "train.py"], ["--lr", "1"]).argv == (
        "python",
        "train.py",
        "--lr",
        "1",
    )


def test_resource_checks() -> None:
    assert machine.quantity("500m") == 0.5
    assert machine.quantity("2Gi") == 2 * 2**30
    assert machine.quantity("1e3") == 1000
    assert machine.missing_resources({"limits": {"cpu": "1"}}, 1) == []
    problems = machine.missing_resources({"limits": {"nvidia.com/gpu": 9999}}, 2)
    assert problems
    assert "nvidia.com/gpu 9999 per node x 2 node(s)" in problems[0]
    assert machine.missing_resources({"limits": {"example.com/fpga": 1}}, 1)


def test_launchers() -> None:
    shape = launch.NodeShape(node_rank=1, nnodes=2, nproc=2, master_port=1234, completion_index=1)
    program = launch.TrainerProgram("function", program="pass", func_name="f")
    torchrun = launch.node_launches(program, "/p/f.py", "/py", shape, use_torchrun=True)
    assert [x.argv for x in torchrun] == [["/py", "-m", "torch.distributed.run", "/p/f.py"]]
    assert torchrun[0].env["KF_TRAINER_LAUNCHER"] == "torchrun"
    assert "RANK" not in torchrun[0].env  # torchrun sets it for its workers
    plain = launch.node_launches(program, "/p/f.py", "/py", shape, use_torchrun=False)
    assert [(x.env["RANK"], x.env["LOCAL_RANK"], x.prefix) for x in plain] == [
        ("2", "0", ""),
        ("3", "1", "[default1]:"),
    ]
    assert launch.node_env(shape)["PET_NODE_RANK"] == "1"
    command = launch.TrainerProgram("command", argv=("python", "train.py"))
    assert [x.argv for x in launch.node_launches(command, None, "/py", shape, True)] == [
        ["python", "train.py"]
    ]
