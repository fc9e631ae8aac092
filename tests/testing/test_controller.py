"""Store-level tests of the simulated Trainer controller (no HTTP)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kf_trainer_core.testing.controller import (
    JOBS,
    TrainerController,
    find_upstream,
    install_runtimes,
)
from kf_trainer_core.testing.scenarios import (
    SCENARIO_ANNOTATION,
    PodContext,
    PodResult,
    Scenario,
    Step,
)
from kf_trainer_core.testing.store import (
    CLUSTER_TRAINING_RUNTIMES,
    CONFIGMAPS,
    EVENTS,
    JOBSETS,
    PODS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    PodLogs,
    Store,
    WatchEvent,
)

NS = "default"

pytestmark = pytest.mark.skipif(
    find_upstream() is None, reason="the shared upstream folder (default runtimes) is missing"
)


# ------------------------------------------------------------------------- fixtures


class Cluster:
    """A store with the default runtimes and a started controller."""

    def __init__(self, clock_scale: float = 1.0) -> None:
        self.store = Store()
        self.logs = PodLogs()
        install_runtimes(self.store)
        self.ctl = TrainerController(self.store, self.logs, clock_scale=clock_scale)
        self.ctl.default_preset = "success"  # every run simulated, as the suite's ini says
        self.ctl.start()

    def create(
        self,
        name: str,
        runtime: str = "torch-distributed",
        *,
        scenario: str | dict[str, Any] | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": NS}
        if scenario is not None:
            value = scenario if isinstance(scenario, str) else json.dumps(scenario)
            meta["annotations"] = {SCENARIO_ANNOTATION: value}
        body = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": meta,
            "spec": {"runtimeRef": {"name": runtime}, **spec},
        }
        return self.store.create(TRAINJOBS, body)

    def tj(self, name: str) -> dict[str, Any]:
        return self.store.get(TRAINJOBS, NS, name)

    def conditions(self, name: str) -> dict[str, dict[str, Any]]:
        status = self.tj(name).get("status") or {}
        return {c["type"]: c for c in status.get("conditions") or []}

    def pods(self, job: str, rjob: str | None = None) -> list[dict[str, Any]]:
        selector = f"jobset.sigs.k8s.io/jobset-name={job}"
        if rjob:
            selector += f",jobset.sigs.k8s.io/replicatedjob-name={rjob}"
        items, _ = self.store.list(PODS, NS, label_selector=selector)
        return items

    def events(self, name: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        items, _ = self.store.list(EVENTS, NS)
        return [
            e
            for e in items
            if (name is None or e["involvedObject"]["name"] == name)
            and (kind is None or e["involvedObject"]["kind"] == kind)
        ]

    def log_lines(self, pod: dict[str, Any], container: str = "node") -> list[str]:
        return [line for _, line in self.logs.lines(NS, pod["metadata"]["name"], container)]

    def wait(self, predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached in time")
            time.sleep(0.005)

    def wait_condition(self, name: str, type_: str, status: str = "True") -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            cond = self.conditions(name).get(type_)
            return cond if cond and cond["status"] == status else None

        result: dict[str, Any] = self.wait(check)
        return result

    def stop(self) -> None:
        self.ctl.stop()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.stop()


def env_of(pod: dict[str, Any], container: str = "node") -> dict[str, Any]:
    for c in pod["spec"]["containers"]:
        if c["name"] == container:
            return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env") or []}
    raise AssertionError(f"no container {container}")


def state_of(pod: dict[str, Any], container: str = "node") -> dict[str, Any]:
    for cs in pod["status"].get("containerStatuses") or []:
        if cs["name"] == container:
            state: dict[str, Any] = cs["state"]
            return state
    raise AssertionError(f"no status for {container}")


def waiting_reason(pod: dict[str, Any], container: str = "node") -> str | None:
    """The container's waiting reason; None also before the kubelet has reported it (a
    pod is created without container statuses, as on a real cluster)."""
    for cs in pod["status"].get("containerStatuses") or []:
        if cs["name"] == container:
            return cs["state"].get("waiting", {}).get("reason")
    return None


# ------------------------------------------------------------------------- success


def test_success_run_of_torch_distributed(cluster: Cluster) -> None:
    cluster.create("ok", trainer={"image": "python:3.11", "command": ["python", "train.py"]})
    complete = cluster.wait_condition("ok", "Complete")
    assert complete["reason"] == "AllJobsCompleted"
    assert complete["message"] == "jobset completed successfully"
    assert set(cluster.conditions("ok")) == {"Complete"}  # no Created/Running conditions
    status = cluster.tj("ok")["status"]
    assert status["jobsStatus"] == [
        {"name": "node", "active": 0, "ready": 0, "succeeded": 1, "failed": 0, "suspended": 0}
    ]

    jobset = cluster.store.get(JOBSETS, NS, "ok")
    owner = jobset["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["controller"], owner["blockOwnerDeletion"]) == (
        "TrainJob",
        True,
        True,
    )
    assert owner["uid"] == cluster.tj("ok")["metadata"]["uid"]
    assert jobset["status"]["terminalState"] == "Completed"
    job = cluster.store.get(JOBS, NS, "ok-node-0")
    assert job["status"]["succeeded"] == 1

    (pod,) = cluster.pods("ok")
    assert pod["metadata"]["name"].startswith("ok-node-0-0-")
    assert len(pod["metadata"]["name"]) == len("ok-node-0-0-") + 5
    labels = pod["metadata"]["labels"]
    assert labels["jobset.sigs.k8s.io/jobset-name"] == "ok"
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
    assert labels["jobset.sigs.k8s.io/job-index"] == "0"
    assert labels["batch.kubernetes.io/job-completion-index"] == "0"
    assert labels["batch.kubernetes.io/job-name"] == "ok-node-0"
    # The Trainer's step label stays on the Job: a real cluster's pods lack it
    # (tests/conformance/test_steps.py).
    assert "trainer.kubeflow.org/trainjob-ancestor-step" not in labels
    assert job["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert pod["status"]["phase"] == "Succeeded"
    term = state_of(pod)["terminated"]
    assert (term["exitCode"], term["reason"]) == (0, "Completed")
    assert json.loads(term["message"]) == {"epochs": 3, "loss": 0.1289}
    assert pod["spec"]["containers"][0]["image"] == "python:3.11"
    assert pod["spec"]["containers"][0]["command"] == ["python", "train.py"]
    assert "JOB_COMPLETION_INDEX" in env_of(pod)

    lines = cluster.log_lines(pod)
    assert any(line.startswith("Epoch 3/3") for line in lines)
    assert cluster.logs.is_closed(NS, pod["metadata"]["name"], "node")

    reasons = {e["reason"] for e in cluster.events(pod["metadata"]["name"], "Pod")}
    assert {"Scheduled", "Pulling", "Pulled", "Created", "Started"} <= reasons
    assert {e["reason"] for e in cluster.events("ok-node-0", "Job")} == {
        "SuccessfulCreate",
        "Completed",
    }
    (js_event,) = cluster.events("ok", "JobSet")
    assert (js_event["reason"], js_event["type"]) == ("AllJobsCompleted", "Normal")
    by_reason = {e["reason"]: e for e in cluster.events(pod["metadata"]["name"])}
    assert by_reason["Scheduled"]["involvedObject"]["uid"] == pod["metadata"]["uid"]
    # The scheduler records through events.k8s.io/v1, the kubelet through core/v1.
    scheduled, started = by_reason["Scheduled"], by_reason["Started"]
    assert (scheduled["action"], scheduled["source"], "count" in scheduled) == (
        "Binding",
        {},
        False,
    )
    assert scheduled["eventTime"]
    assert (started["count"], started["eventTime"]) == (1, None)
    assert started["firstTimestamp"]
    assert cluster.ctl.wait_idle(5)


def test_three_nodes_get_ranks_0_to_2(cluster: Cluster) -> None:
    cluster.create("three", trainer={"numNodes": 3, "numProcPerNode": 2})
    cluster.wait_condition("three", "Complete")
    pods = sorted(
        cluster.pods("three"),
        key=lambda p: p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"],
    )
    assert len(pods) == 3
    for rank, pod in enumerate(pods):
        env = env_of(pod)
        assert env["PET_NNODES"] == "3"
        assert env["PET_NPROC_PER_NODE"] == "2"
        assert env["PET_MASTER_ADDR"] == "three-node-0-0.three"
        assert env["PET_MASTER_PORT"] == "29500"
        # PET_NODE_RANK comes from the completion index the Job controller assigns.
        path = env["PET_NODE_RANK"]["fieldRef"]["fieldPath"]
        key = path.split("['")[1].rstrip("']")
        assert pod["metadata"]["annotations"][key] == str(rank)
        assert pod["spec"]["hostname"] == f"three-node-0-{rank}"
        assert pod["spec"]["subdomain"] == "three"
    job = cluster.store.get(JOBS, NS, "three-node-0")
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 3
    assert job["status"]["completedIndexes"] == "0-2"


def test_torchtune_runs_initializers_first(cluster: Cluster) -> None:
    order: list[str] = []

    def record(ev: WatchEvent) -> None:
        if ev.resource != PODS:
            return
        rjob = ev.object["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
        if ev.type == "ADDED":
            order.append(f"create:{rjob}")
        elif ev.object.get("status", {}).get("phase") == "Succeeded":
            order.append(f"done:{rjob}")

    unsubscribe = cluster.store.subscribe(record)
    cluster.create(
        "tune",
        "torchtune-llama3.2-1b",
        initializer={
            "dataset": {"storageUri": "hf://tatsu-lab/alpaca", "secretRef": {"name": "hf"}},
            "model": {
                "storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct",
                "env": [{"name": "ACCESS_TOKEN", "value": "x"}],
            },
        },
    )
    cluster.wait_condition("tune", "Complete")
    unsubscribe()
    first_node = order.index("create:node")
    assert order.index("done:dataset-initializer") < first_node
    assert order.index("done:model-initializer") < first_node
    (ds,) = cluster.pods("tune", "dataset-initializer")
    assert env_of(ds, "dataset-initializer")["STORAGE_URI"] == "hf://tatsu-lab/alpaca"
    ds_container = ds["spec"]["containers"][0]
    assert ds_container["envFrom"] == [{"secretRef": {"name": "hf"}}]
    (model,) = cluster.pods("tune", "model-initializer")
    assert env_of(model, "model-initializer")["ACCESS_TOKEN"] == "x"
    assert cluster.log_lines(ds, "dataset-initializer")[1].endswith("hf://tatsu-lab/alpaca")
    names = [s["name"] for s in cluster.tj("tune")["status"]["jobsStatus"]]
    assert names == ["dataset-initializer", "model-initializer", "node"]


def test_mpi_runtime_has_launcher_after_nodes(cluster: Cluster) -> None:
    order: list[str] = []

    def record(ev: WatchEvent) -> None:
        if ev.resource == PODS and ev.type == "MODIFIED":
            rjob = ev.object["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
            if ev.object.get("status", {}).get("phase") == "Running":
                order.append(f"running:{rjob}")
        elif ev.resource == PODS and ev.type == "ADDED":
            order.append(
                "create:" + ev.object["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
            )

    unsubscribe = cluster.store.subscribe(record)
    cluster.create("ds", "deepspeed-distributed", trainer={"numNodes": 3, "command": ["mpirun"]})
    cluster.wait_condition("ds", "Complete")
    unsubscribe()
    assert order.count("create:node") == 2  # numNodes - 1: the launcher is a node too
    assert order.count("create:launcher") == 1
    assert order.index("create:launcher") > max(
        i for i, o in enumerate(order) if o == "running:node"
    )
    (launcher,) = cluster.pods("ds", "launcher")
    env = env_of(launcher)
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert launcher["spec"]["containers"][0]["command"] == ["mpirun"]
    assert launcher["status"]["phase"] == "Succeeded"
    hostfile = cluster.store.get(CONFIGMAPS, NS, "ds-mpi-hostfile")["data"]["hostfile"]
    assert hostfile.splitlines() == [
        "ds-node-0-0.ds slots=1",
        "ds-node-0-1.ds slots=1",
        "ds-launcher-0-0.ds slots=1",
    ]
    # The finished JobSet deletes the still-active worker Jobs (their sshd pods).
    assert cluster.pods("ds", "node") == []
    assert any(e["reason"] == "Killing" for e in cluster.events(kind="Pod"))
    status = {s["name"]: s for s in cluster.tj("ds")["status"]["jobsStatus"]}
    assert status["launcher"]["succeeded"] == 1


# ------------------------------------------------------------------------- failures


def test_fail_preset(cluster: Cluster) -> None:
    cluster.create("bad", scenario="fail", trainer={"numNodes": 2})
    failed = cluster.wait_condition("bad", "Failed")
    assert failed["reason"] == "FailedJobs"
    assert failed["message"] == (
        "jobset failed due to one or more job failures (first failed job: bad-node-0)"
    )
    assert "Complete" not in cluster.conditions("bad")
    pods = cluster.pods("bad")
    assert len(pods) == 1  # rank 0 failed; the Job controller deleted rank 1
    (pod,) = pods
    assert pod["status"]["phase"] == "Failed"
    term = state_of(pod)["terminated"]
    assert (term["exitCode"], term["reason"]) == (1, "Error")
    assert "RuntimeError: simulated training failure" in cluster.log_lines(pod)
    job = cluster.store.get(JOBS, NS, "bad-node-0")
    (failed_cond,) = [c for c in job["status"]["conditions"] if c["type"] == "Failed"]
    assert failed_cond["reason"] == "BackoffLimitExceeded"
    assert any(
        e["reason"] == "FailedJobs" and e["type"] == "Warning" for e in cluster.events("bad")
    )
    assert cluster.tj("bad")["status"]["jobsStatus"][0]["failed"] == 1


def test_oom_preset_from_json(cluster: Cluster) -> None:
    cluster.create("oom", scenario={"preset": "oom"})
    cluster.wait_condition("oom", "Failed")
    (pod,) = cluster.pods("oom")
    term = state_of(pod)["terminated"]
    assert (term["exitCode"], term["reason"]) == (137, "OOMKilled")


def test_fail_with_backoff_limit_retries_pods(cluster: Cluster) -> None:
    cluster.create("retry", scenario={"preset": "fail", "exit_code": 3, "backoff_limit": 1})
    cluster.wait_condition("retry", "Failed")
    pods = cluster.pods("retry")
    assert len(pods) == 2  # the first failure was retried once
    assert all(state_of(p)["terminated"]["exitCode"] == 3 for p in pods)
    assert cluster.store.get(JOBS, NS, "retry-node-0")["status"]["failed"] == 2


@pytest.mark.parametrize(("scenario", "limit"), [("fail", 0), ({"backoff_limit": 6}, None)])
def test_the_jobset_says_the_backoff_limit_its_jobs_use(
    cluster: Cluster, scenario: Any, limit: int | None
) -> None:
    # The test bed's Jobs give up at once unless told (a real Job retries six times):
    # its JobSet says so, as a runtime that set the limit would, so that a reader of the
    # JobSet (the attempt count of a restarting job) agrees with the Jobs.
    cluster.create("limits", scenario=scenario)
    cluster.wait_condition("limits", "Failed" if scenario == "fail" else "Complete")
    (rjob,) = cluster.store.get(JOBSETS, NS, "limits")["spec"]["replicatedJobs"]
    assert rjob["template"]["spec"].get("backoffLimit") == limit
    job = cluster.store.get(JOBS, NS, "limits-node-0")
    assert job["spec"]["backoffLimit"] == (6 if limit is None else limit)


def test_image_pull_error_stays_pending(cluster: Cluster) -> None:
    cluster.create("pull", scenario="image-pull", trainer={"image": "ghcr.io/no/such:1"})
    pod = cluster.wait(
        lambda: next(
            (p for p in cluster.pods("pull") if waiting_reason(p) == "ImagePullBackOff"),
            None,
        )
    )
    assert cluster.ctl.wait_idle(5)
    pod = cluster.pods("pull")[0]
    assert pod["status"]["phase"] == "Pending"
    waiting = state_of(pod)["waiting"]
    assert waiting["message"].startswith('Back-off pulling image "ghcr.io/no/such:1"')
    reasons = [e["reason"] for e in cluster.events(pod["metadata"]["name"])]
    assert {"BackOff", "Failed"} <= set(reasons)
    assert "Started" not in reasons
    assert cluster.conditions("pull") == {}
    assert cluster.tj("pull")["status"]["jobsStatus"][0]["active"] == 1


def test_image_pull_can_fail_after_a_while(cluster: Cluster) -> None:
    cluster.create("pull2", scenario={"preset": "image-pull", "image_pull_fail_after": 0.05})
    failed = cluster.wait_condition("pull2", "Failed")
    assert failed["reason"] == "FailedJobs"
    (pod,) = cluster.pods("pull2")
    assert pod["status"]["phase"] == "Failed"


def test_missing_runtime_is_a_creation_failure(cluster: Cluster) -> None:
    cluster.create("orphan", "no-such-runtime")
    events = cluster.wait(lambda: cluster.events("orphan", "TrainJob"))
    assert cluster.ctl.wait_idle(5)
    (event,) = events
    assert event["type"] == "Warning"
    assert event["reason"] == "TrainJobResourcesCreationFailed"
    assert event["message"] == (
        "TrainJob resources reconciliation failed: not found ClusterTrainingRuntime specified "
        'in TrainJob: ClusterTrainingRuntime.trainer.kubeflow.org "no-such-runtime" not found'
    )
    # Requeued at once by the Trainer: repeated, as a series (events.k8s.io recorder).
    assert event["series"]["count"] == 2
    assert "status" not in cluster.tj("orphan") or not cluster.tj("orphan")["status"].get(
        "conditions"
    )
    assert cluster.store.try_get(JOBSETS, NS, "orphan") is None

    # The real controller retries; here a runtime appearing is what retries it.
    runtime = cluster.store.get(CLUSTER_TRAINING_RUNTIMES, None, "torch-distributed")
    runtime["metadata"] = {"name": "no-such-runtime"}
    cluster.store.create(CLUSTER_TRAINING_RUNTIMES, runtime)
    cluster.wait_condition("orphan", "Complete")


def test_namespaced_training_runtime(cluster: Cluster) -> None:
    cluster.create("local", runtimeRef={"name": "mine", "kind": "TrainingRuntime"})
    (event,) = cluster.wait(lambda: cluster.events("local", "TrainJob"))
    assert event["message"].endswith(
        "TrainingRuntime specified in TrainJob is not found: "
        'TrainingRuntime.trainer.kubeflow.org "mine" not found'
    )
    runtime = cluster.store.get(CLUSTER_TRAINING_RUNTIMES, None, "torch-distributed")
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": "mine", "namespace": NS}
    cluster.store.create(TRAINING_RUNTIMES, runtime)
    cluster.wait_condition("local", "Complete")


def test_creation_failure_preset_and_bad_runtime_patch(cluster: Cluster) -> None:
    cluster.create("cf", scenario="creation-failure")
    patch = {
        "manager": "tests",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "containers": [
                                                {
                                                    "name": "sidecar",
                                                    "env": [{"name": "A", "value": "1"}],
                                                }
                                            ],
                                        }
                                    }
                                }
                            },
                        },
                    ]
                }
            }
        },
    }
    cluster.create("badpatch", runtimePatches=[patch])
    assert cluster.ctl.wait_idle(5)
    (cf,) = cluster.events("cf", "TrainJob")
    assert cf["reason"] == "TrainJobResourcesCreationFailed"
    assert "simulated JobSet build failure" in cf["message"]
    (bp,) = cluster.events("badpatch", "TrainJob")
    assert bp["reason"] == "TrainJobResourcesCreationFailed"
    assert '"sidecar"' in bp["message"]
    assert 'replicated job "node"' in bp["message"]
    assert cluster.conditions("cf") == {}
    assert cluster.conditions("badpatch") == {}


def test_runtime_patches_reach_jobset_and_pods(cluster: Cluster) -> None:
    patch = {
        "manager": "kueue.x-k8s.io/manager",
        "trainingRuntimeSpec": {
            "template": {
                "metadata": {"labels": {"team": "ml"}, "annotations": {"note": "x"}},
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {"labels": {"job-label": "1"}},
                                "spec": {
                                    "template": {
                                        "metadata": {"labels": {"pod-label": "yes"}},
                                        "spec": {
                                            "nodeSelector": {"gpu": "a100"},
                                            "tolerations": [{"key": "gpu", "operator": "Exists"}],
                                            "serviceAccountName": "trainer",
                                            "volumes": [{"name": "data", "emptyDir": {}}],
                                            "containers": [
                                                {
                                                    "name": "node",
                                                    "volumeMounts": [
                                                        {"name": "data", "mountPath": "/data"}
                                                    ],
                                                }
                                            ],
                                        },
                                    }
                                },
                            },
                        }
                    ]
                },
            }
        },
    }
    cluster.create("patched", runtimePatches=[patch])
    cluster.wait_condition("patched", "Complete")
    jobset = cluster.store.get(JOBSETS, NS, "patched")
    assert jobset["metadata"]["labels"]["team"] == "ml"
    assert jobset["metadata"]["annotations"]["note"] == "x"
    (pod,) = cluster.pods("patched")
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"gpu": "a100"}
    assert spec["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert spec["serviceAccountName"] == "trainer"
    assert spec["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert pod["metadata"]["labels"]["pod-label"] == "yes"
    assert cluster.store.get(JOBS, NS, "patched-node-0")["metadata"]["labels"]["job-label"] == "1"


def test_unsupported_runtime_kind_fails(cluster: Cluster) -> None:
    cluster.create("weird", runtimeRef={"name": "x", "kind": "Other", "apiGroup": "example.com"})
    failed = cluster.wait_condition("weird", "Failed")
    assert failed["reason"] == "TrainingRuntimeNotSupported"
    assert failed["message"] == "unsupported runtime: Other.example.com"


# ------------------------------------------------------------------------- suspend


def test_suspend_at_create_resume_and_suspend_again(cluster: Cluster) -> None:
    cluster.create("sus", scenario="never-finish", suspend=True)
    cluster.wait_condition("sus", "Suspended")
    assert cluster.ctl.wait_idle(5)
    cond = cluster.conditions("sus")["Suspended"]
    assert (cond["reason"], cond["message"]) == ("Suspended", "TrainJob is suspended")
    assert cluster.store.get(JOBSETS, NS, "sus")["spec"]["suspend"] is True
    assert cluster.pods("sus") == []
    assert cluster.tj("sus")["status"]["jobsStatus"] == [
        {"name": "node", "active": 0, "ready": 0, "succeeded": 0, "failed": 0, "suspended": 1}
    ]

    cluster.store.patch(TRAINJOBS, NS, "sus", {"spec": {"suspend": False}})
    resumed = cluster.wait_condition("sus", "Suspended", "False")
    assert (resumed["reason"], resumed["message"]) == ("Resumed", "TrainJob is resumed")
    cluster.wait(lambda: [p for p in cluster.pods("sus") if p["status"]["phase"] == "Running"])
    assert cluster.store.get(JOBSETS, NS, "sus")["spec"]["suspend"] is False

    # Suspending a running job (Kueue preemption) deletes its pods.
    cluster.store.patch(TRAINJOBS, NS, "sus", {"spec": {"suspend": True}})
    cluster.wait_condition("sus", "Suspended")
    cluster.wait(lambda: cluster.pods("sus") == [])
    assert cluster.ctl.wait_idle(5)
    assert any(e["reason"] == "Killing" for e in cluster.events(kind="Pod"))
    status = cluster.tj("sus")["status"]["jobsStatus"][0]
    assert (status["suspended"], status["active"]) == (1, 0)
    assert set(cluster.conditions("sus")) == {"Suspended"}


def test_resumed_job_completes_and_keeps_resumed_condition(cluster: Cluster) -> None:
    cluster.create("later", suspend=True)
    cluster.wait_condition("later", "Suspended")
    cluster.store.patch(TRAINJOBS, NS, "later", {"spec": {"suspend": False}})
    cluster.wait_condition("later", "Complete")
    conds = cluster.conditions("later")
    assert (conds["Suspended"]["status"], conds["Suspended"]["reason"]) == ("False", "Resumed")


def test_preempted_preset_suspends_and_resumes(cluster: Cluster) -> None:
    seen: list[str] = []

    def record(ev: WatchEvent) -> None:
        if ev.resource == TRAINJOBS:
            for c in ev.object.get("status", {}).get("conditions", []):
                if c["type"] == "Suspended":
                    seen.append(c["status"])

    unsubscribe = cluster.store.subscribe(record)
    cluster.create("pre", scenario="preempted")
    cluster.wait_condition("pre", "Complete")
    unsubscribe()
    assert "True" in seen
    assert seen[-1] == "False"


# ------------------------------------------------------------------------- deadline


def test_deadline_preset(cluster: Cluster) -> None:
    cluster.create("late", scenario="deadline")
    failed = cluster.wait_condition("late", "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    assert failed["message"] == "TrainJob exceeded its active deadline"
    assert cluster.store.try_get(JOBSETS, NS, "late") is None
    assert cluster.pods("late") == []
    assert any(e["reason"] == "Killing" for e in cluster.events(kind="Pod"))
    assert cluster.ctl.wait_idle(5)


def test_active_deadline_seconds_is_scaled() -> None:
    c = Cluster(clock_scale=0.1)  # 1 s deadline -> 0.1 s
    try:
        c.create("ads", scenario="never-finish", activeDeadlineSeconds=1)
        assert c.wait_condition("ads", "Failed")["reason"] == "DeadlineExceeded"
    finally:
        c.stop()


# ------------------------------------------------------------------------- progress


def test_progress_updates_trainer_status(cluster: Cluster) -> None:
    seen: list[int] = []

    def record(ev: WatchEvent) -> None:
        ts = ev.object.get("status", {}).get("trainerStatus") if ev.resource == TRAINJOBS else None
        if ts and (not seen or seen[-1] != ts.get("progressPercentage")):
            seen.append(ts.get("progressPercentage"))

    unsubscribe = cluster.store.subscribe(record)
    cluster.create("prog", scenario="progress")
    cluster.wait_condition("prog", "Complete")
    unsubscribe()
    assert seen == [10, 40, 75, 100]
    ts = cluster.tj("prog")["status"]["trainerStatus"]
    assert ts["estimatedRemainingSeconds"] == 0
    assert {"name": "loss", "value": "0.1289"} in ts["metrics"]
    assert ts["lastUpdatedTime"].endswith("Z")


# ------------------------------------------------------------------------- deletion


def test_delete_mid_run_stops_everything(cluster: Cluster) -> None:
    cluster.create("gone", scenario="never-finish", trainer={"numNodes": 2})
    pods = cluster.wait(
        lambda: [p for p in cluster.pods("gone") if p["status"]["phase"] == "Running"] or None
    )
    names = [p["metadata"]["name"] for p in cluster.pods("gone")]
    cluster.store.delete(TRAINJOBS, NS, "gone")
    assert cluster.ctl.wait_idle(5)
    assert cluster.pods("gone") == []
    assert cluster.store.try_get(JOBSETS, NS, "gone") is None
    assert cluster.store.list(JOBS, NS)[0] == []
    killing = [e for e in cluster.events(kind="Pod") if e["reason"] == "Killing"]
    assert {e["involvedObject"]["name"] for e in killing} >= {p["metadata"]["name"] for p in pods}
    assert all(cluster.logs.is_closed(NS, n, "node") for n in names)
    rv = cluster.store.current_resource_version
    time.sleep(0.2)
    assert cluster.store.current_resource_version == rv  # nothing drives it any more


def test_deleted_pod_is_replaced(cluster: Cluster) -> None:
    cluster.create("rep", scenario="never-finish")
    (pod,) = cluster.wait(lambda: cluster.pods("rep") or None)
    cluster.store.delete(PODS, NS, pod["metadata"]["name"])
    new = cluster.wait(
        lambda: [p for p in cluster.pods("rep") if p["metadata"]["uid"] != pod["metadata"]["uid"]]
    )
    assert new[0]["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "0"


def test_multikueue_jobs_are_ignored(cluster: Cluster) -> None:
    cluster.create("remote", managedBy="kueue.x-k8s.io/multikueue")
    assert cluster.ctl.wait_idle(5)
    time.sleep(0.05)
    assert cluster.store.try_get(JOBSETS, NS, "remote") is None
    assert "status" not in cluster.tj("remote")


# ------------------------------------------------------------------------- selection


def test_script_and_default_scenario(cluster: Cluster) -> None:
    cluster.ctl.script("named", Scenario.preset("fail"))
    cluster.ctl.script(
        lambda tj: tj["metadata"]["name"].startswith("pred-"), Scenario.preset("oom")
    )
    cluster.ctl.default_scenario = Scenario(duration=0.01)
    cluster.create("named")
    cluster.create("pred-x")
    cluster.create("plain")
    cluster.create("annotated", scenario="success")
    cluster.wait_condition("named", "Failed")
    cluster.wait_condition("pred-x", "Failed")
    cluster.wait_condition("plain", "Complete")
    cluster.wait_condition("annotated", "Complete")
    assert state_of(cluster.pods("pred-x")[0])["terminated"]["reason"] == "OOMKilled"


def test_invalid_annotation_falls_back_with_a_warning(cluster: Cluster) -> None:
    cluster.create("typo", scenario={"outcom": "fail"})
    cluster.wait_condition("typo", "Complete")
    (event,) = cluster.events("typo", "TrainJob")
    assert event["reason"] == "InvalidTestScenario"
    assert "outcom" in event["message"]


def test_per_step_overrides(cluster: Cluster) -> None:
    cluster.create(
        "stepfail",
        "torch-distributed-with-cache",
        scenario={"steps": {"dataset-initializer": {"outcome": "fail", "exit_code": 2}}},
    )
    failed = cluster.wait_condition("stepfail", "Failed")
    assert "stepfail-dataset-initializer-0" in failed["message"]
    assert cluster.pods("stepfail", "node") == []  # the trainer never started


def test_scenario_parsing() -> None:
    assert Scenario.from_annotation("oom").outcome == "oom"
    sc = Scenario.from_annotation(
        '{"preset": "fail", "exit_code": 4, "progress": [[5, 9, {"a": 1}]]}'
    )
    assert (sc.name, sc.outcome, sc.exit_code, sc.progress) == (
        "fail",
        "fail",
        4,
        [(5, 9, {"a": "1"})],
    )
    with pytest.raises(ValueError, match="unknown scenario preset"):
        Scenario.preset("nope")
    with pytest.raises(ValueError, match="unknown scenario field"):
        Scenario.from_dict({"bogus": 1})
    with pytest.raises(ValueError, match="not valid JSON"):
        Scenario.from_annotation("{nope")
    with pytest.raises(ValueError, match=r"1\.\.64"):
        Scenario(progress=[(1, 1, {"m": "x" * 65})])
    with pytest.raises(ValueError, match="unknown outcome"):
        Scenario(steps={"node": Step(outcome="explode")})
    step = Scenario(steps={"trainer": Step(duration=1.0), "node": Step(outcome="oom")}).step_for(
        "node", "trainer", "trainer"
    )
    assert (step.duration, step.outcome, step.exit_code) == (1.0, "oom", 137)


# ------------------------------------------------------------------------- exec mode

_SCRIPT = """
import os, sys, time
print("rank", os.environ["PET_NODE_RANK"], "of", os.environ["PET_NNODES"], flush=True)
print("launcher", os.environ["KF_TRAINER_LAUNCHER"], "index", os.environ["JOB_COMPLETION_INDEX"])
print("to stderr", file=sys.stderr)
if os.environ["PET_NODE_RANK"] == "0":
    with open(os.environ["KF_TRAINER_TERMINATION_LOG"], "w") as fh:
        fh.write('{"answer": 42}')
sys.exit(int(os.environ.get("EXIT", "0")))
"""


def test_exec_mode_runs_the_command(cluster: Cluster) -> None:
    cluster.create(
        "real",
        scenario="exec",
        trainer={"numNodes": 2, "command": [sys.executable, "-c", _SCRIPT]},
    )
    cluster.wait_condition("real", "Complete")
    pods = sorted(
        cluster.pods("real"),
        key=lambda p: p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"],
    )
    lines0 = cluster.log_lines(pods[0])
    assert lines0[0] == "rank 0 of 2"
    # The launcher is the interpreter running the tests (its packages are the job's).
    assert f"launcher {sys.executable} index 0" in lines0
    assert "to stderr" in lines0
    assert cluster.log_lines(pods[1])[0] == "rank 1 of 2"
    assert state_of(pods[0])["terminated"]["message"] == '{"answer": 42}'
    assert "message" not in state_of(pods[1])["terminated"]


def test_exec_mode_failure_exit_code(cluster: Cluster) -> None:
    cluster.create(
        "realfail",
        scenario="exec",
        trainer={
            "command": [sys.executable, "-c", _SCRIPT],
            "env": [{"name": "EXIT", "value": "3"}],
        },
    )
    cluster.wait_condition("realfail", "Failed")
    term = state_of(cluster.pods("realfail")[0])["terminated"]
    assert (term["exitCode"], term["reason"]) == (3, "Error")


def test_exec_mode_a_command_that_cannot_start_is_a_start_error(cluster: Cluster) -> None:
    cluster.create("nostart", scenario="exec", trainer={"command": ["/no/such/binary"]})
    cluster.wait_condition("nostart", "Failed")
    pod = cluster.pods("nostart")[0]
    term = state_of(pod)["terminated"]
    said = 'exec: "/no/such/binary": No such file or directory'
    assert (term["exitCode"], term["reason"], term["message"]) == (128, "StartError", said)
    assert cluster.log_lines(pod) == [said]


def test_exec_mode_resolves_the_env_as_the_kubelet_does(cluster: Cluster) -> None:
    script = "import os; print(os.environ['GREETING'], os.environ['MY_POD'], flush=True)"
    cluster.create(
        "envs",
        scenario="exec",
        trainer={
            "command": [sys.executable, "-c", script],
            "env": [
                {"name": "WHO", "value": "world"},
                {"name": "GREETING", "value": "hello $(WHO) $$(WHO)"},
                {"name": "MY_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ],
        },
    )
    cluster.wait_condition("envs", "Complete")
    pod = cluster.pods("envs")[0]
    assert cluster.log_lines(pod) == [f"hello world $(WHO) {pod['metadata']['name']}"]


def test_exec_mode_kills_the_process_on_delete(cluster: Cluster, tmp_path: Any) -> None:
    pid_file = tmp_path / "pid"
    script = (
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "print('started', flush=True)\ntime.sleep(60)\n"
    )
    cluster.create("sleepy", scenario="exec", trainer={"command": [sys.executable, "-c", script]})
    cluster.wait(lambda: pid_file.exists() and pid_file.read_text())
    pid = int(pid_file.read_text())
    cluster.store.delete(TRAINJOBS, NS, "sleepy")
    assert cluster.ctl.wait_idle(5)

    def dead() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # A killed child may linger as a zombie until the reader thread reaps it.
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] == "Z"

    cluster.wait(dead, timeout=5)


def test_custom_executor(cluster: Cluster) -> None:
    calls: list[str] = []
    lock = threading.Lock()

    def run(ctx: PodContext) -> PodResult:
        with lock:
            calls.append(f"{ctx.kind}:{ctx.replicated_job}:{ctx.completion_index}")
        ctx.log(f"hello from {ctx.pod}")
        return PodResult(termination_message=f"done {ctx.step}")

    cluster.ctl.script("custom", Scenario(executor=run))
    cluster.create(
        "custom", "torchtune-llama3.2-1b", initializer={"dataset": {"storageUri": "hf://x/y"}}
    )
    cluster.wait_condition("custom", "Complete")
    assert sorted(calls) == [
        "initializer:dataset-initializer:0",
        "initializer:model-initializer:0",
        "trainer:node:0",
    ]
    (node,) = cluster.pods("custom", "node")
    assert cluster.log_lines(node)[0] == f"hello from {node['metadata']['name']}"
    assert state_of(node)["terminated"]["message"] == "done trainer"


# ------------------------------------------------------------------------- scale


def test_200_concurrent_jobs_complete_quickly(cluster: Cluster) -> None:
    threads_before = threading.active_count()
    start = time.monotonic()
    for i in range(200):
        cluster.create(f"bulk-{i}")
    created = time.monotonic() - start

    def all_done() -> bool:
        items, _ = cluster.store.list(TRAINJOBS, NS)
        return (
            sum(
                1
                for tj in items
                if any(c["type"] == "Complete" for c in tj.get("status", {}).get("conditions", []))
            )
            == 200
        )

    cluster.wait(all_done, timeout=30)
    elapsed = time.monotonic() - start
    assert cluster.ctl.wait_idle(10)
    print(
        f"\n200 concurrent TrainJobs: created in {created:.2f}s, all Complete after {elapsed:.2f}s"
    )
    assert elapsed < 20
    assert threading.active_count() - threads_before < 3  # no thread per job


# ------------------------------------------------------------------------- over HTTP


def test_http_trainjob_watched_to_complete(tmp_path: Any) -> None:
    """The real ``kubernetes`` client against the test server with the controller."""
    kubernetes = pytest.importorskip("kubernetes")
    from kf_trainer_core.testing.server import KubeTestServer

    server = KubeTestServer(default_scenario="success")  # as the suite's ini says
    server.start(controller=True)
    try:
        config = server.kubeconfig(tmp_path / "kubeconfig")
        api = kubernetes.config.new_client_from_config(config_file=str(config))
        custom = kubernetes.client.CustomObjectsApi(api)
        core = kubernetes.client.CoreV1Api(api)
        group, version = "trainer.kubeflow.org", "v1alpha1"
        body = {
            "apiVersion": f"{group}/{version}",
            "kind": "TrainJob",
            "metadata": {"name": "http-job", "annotations": {SCENARIO_ANNOTATION: "progress"}},
            "spec": {
                "runtimeRef": {"name": "torch-distributed"},
                "trainer": {"numNodes": 2, "image": "python:3.11"},
            },
        }
        custom.create_namespaced_custom_object(group, version, NS, "trainjobs", body)
        watch = kubernetes.watch.Watch()
        final: dict[str, Any] | None = None
        for event in watch.stream(
            custom.list_namespaced_custom_object,
            group,
            version,
            NS,
            "trainjobs",
            field_selector="metadata.name=http-job",
            timeout_seconds=20,
        ):
            conditions = event["object"].get("status", {}).get("conditions", [])
            if any(c["type"] == "Complete" and c["status"] == "True" for c in conditions):
                final = event["object"]
                watch.stop()
        assert final is not None, "the TrainJob did not complete"
        assert final["status"]["trainerStatus"]["progressPercentage"] == 100
        assert final["status"]["jobsStatus"][0]["succeeded"] == 1

        pods = core.list_namespaced_pod(
            NS, label_selector="jobset.sigs.k8s.io/jobset-name=http-job"
        ).items
        assert sorted(p.status.phase for p in pods) == ["Succeeded", "Succeeded"]
        rank0 = next(
            p for p in pods if p.metadata.labels["batch.kubernetes.io/job-completion-index"] == "0"
        )
        assert rank0.status.container_statuses[0].state.terminated.exit_code == 0
        log = core.read_namespaced_pod_log(rank0.metadata.name, NS, container="node")
        assert "Epoch 3/3" in log
        events = core.list_namespaced_event(
            NS, field_selector=f"involvedObject.name={rank0.metadata.name}"
        ).items
        assert {"Scheduled", "Started"} <= {e.reason for e in events}
        api.close()
    finally:
        server.stop()


def test_written_objects_are_valid_against_the_crds(cluster: Cluster) -> None:
    crd = pytest.importorskip("kf_trainer_core.testing.crd")
    schemas = crd.load_upstream_crds()
    cluster.create("v-ok", trainer={"numNodes": 2})
    cluster.create("v-fail", scenario="fail")
    cluster.create("v-prog", scenario="progress")
    cluster.create("v-sus", suspend=True)
    cluster.create("v-mpi", "deepspeed-distributed", trainer={"numNodes": 3})
    cluster.create(
        "v-tune", "torchtune-llama3.2-1b", initializer={"model": {"storageUri": "hf://a/b"}}
    )
    cluster.create("v-late", scenario="deadline")
    for name, cond in [
        ("v-ok", "Complete"),
        ("v-fail", "Failed"),
        ("v-prog", "Complete"),
        ("v-sus", "Suspended"),
        ("v-mpi", "Complete"),
        ("v-tune", "Complete"),
        ("v-late", "Failed"),
    ]:
        cluster.wait_condition(name, cond)
    assert cluster.ctl.wait_idle(5)
    trainjobs = schemas["trainjobs.trainer.kubeflow.org"]
    jobsets = schemas["jobsets.jobset.x-k8s.io"]
    for obj in cluster.store.list(TRAINJOBS, NS)[0]:
        assert trainjobs.validate(obj, subresource="status") == [], obj["metadata"]["name"]
    for obj in cluster.store.list(JOBSETS, NS)[0]:
        assert jobsets.unknown_fields(obj) == [], obj["metadata"]["name"]
        assert jobsets.validate(jobsets.apply_defaults(obj)) == [], obj["metadata"]["name"]
        assert jobsets.validate(obj, subresource="status") == [], obj["metadata"]["name"]


def test_restart_leaves_finished_jobs_alone_and_reset_forgets(cluster: Cluster) -> None:
    cluster.create("done")
    cluster.wait_condition("done", "Complete")
    assert cluster.ctl.wait_idle(5)
    rv = cluster.tj("done")["metadata"]["resourceVersion"]
    cluster.ctl.stop()
    cluster.ctl = TrainerController(cluster.store, cluster.logs)
    cluster.ctl.default_preset = "success"
    cluster.ctl.start()
    assert cluster.ctl.wait_idle(5)
    assert cluster.tj("done")["metadata"]["resourceVersion"] == rv
    (pod,) = cluster.pods("done")
    assert pod["status"]["phase"] == "Succeeded"

    cluster.ctl.default_scenario = Scenario.preset("never-finish")
    cluster.ctl.script("x", Scenario.preset("fail"))
    cluster.ctl.reset()
    assert cluster.ctl.default_scenario.name == "success"
    cluster.create("x")
    cluster.wait_condition("x", "Complete")
