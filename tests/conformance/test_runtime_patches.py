"""The suite's options reach the objects the controllers make: each option is set on a
job, and the pods (or Jobs, or JobSet) the Trainer, JobSet and Job controllers create are
read back. One body on the test bed and the real controllers: a field the test bed's
simulated controller drops or invents is a difference between the two."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conformance_support import Cluster, runtime_patch, until

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.spec import (
    Annotations,
    ContainerPatch,
    CustomTrainer,
    Labels,
    PodSpecPatch,
    RuntimePatch,
    TrainJobSpec,
)

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"


def patch(**levels: Any) -> RuntimePatch:
    """A RuntimePatch of the ``node`` replicated job at every level it can reach."""
    return runtime_patch(**levels, manager="kf-trainer-suite/conformance-options")


def pods_of(cluster: Cluster, name: str, count: int = 1) -> list[dict[str, Any]]:
    """The job's pods, once ``count`` of them exist (sorted by name)."""

    def found() -> list[dict[str, Any]]:
        pods = [
            p
            for p in cluster.owned("pods")
            if p["metadata"].get("labels", {}).get(JOBSET_NAME) == name
        ]
        return sorted(pods, key=lambda p: p["metadata"]["name"]) if len(pods) >= count else []

    return list(until(found, what=f"{count} pod(s) of {name}"))


def node(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod's ``node`` container."""
    return next(c for c in pod["spec"]["containers"] if c["name"] == "node")


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in node(pod).get("env") or []}


def submit(client: TrainerClient, cluster: Cluster, *options: Any, nodes: int = 1) -> str:
    return client.submit(cluster.spec("hold", *options, nodes=nodes)).job.name


# Each case: the option, and a check of one pod of the job that must hold.
CASES: dict[str, tuple[Any, Callable[[dict[str, Any]], bool]]] = {
    "node-selector": (
        patch(pod_spec=PodSpecPatch(node_selector={"kf-conformance/pool": "a"})),
        lambda p: p["spec"].get("nodeSelector", {}).get("kf-conformance/pool") == "a",
    ),
    "tolerations": (
        patch(
            pod_spec=PodSpecPatch(
                tolerations=[
                    {
                        "key": "kf-conformance/dedicated",
                        "operator": "Equal",
                        "value": "train",
                        "effect": "NoSchedule",
                    }
                ]
            )
        ),
        lambda p: any(
            t.get("key") == "kf-conformance/dedicated" and t.get("value") == "train"
            for t in p["spec"].get("tolerations") or []
        ),
    ),
    "pod-labels": (
        patch(pod_meta={"labels": {"team": "vision"}}),
        lambda p: p["metadata"].get("labels", {}).get("team") == "vision",
    ),
    "pod-annotations": (
        patch(pod_meta={"annotations": {"kf-conformance/note": "hello world"}}),
        lambda p: p["metadata"].get("annotations", {}).get("kf-conformance/note") == "hello world",
    ),
    "volume-and-mount": (
        patch(
            pod_spec=PodSpecPatch(
                volumes=[{"name": "scratch", "emptyDir": {}}],
                containers=[
                    ContainerPatch(
                        name="node", volume_mounts=[{"name": "scratch", "mountPath": "/scratch"}]
                    )
                ],
            )
        ),
        lambda p: (
            any(v["name"] == "scratch" and "emptyDir" in v for v in p["spec"]["volumes"])
            and any(
                m["name"] == "scratch" and m["mountPath"] == "/scratch"
                for m in node(p).get("volumeMounts") or []
            )
        ),
    ),
    "grace-period": (
        patch(pod_spec=PodSpecPatch(termination_grace_period_seconds=7)),
        lambda p: p["spec"].get("terminationGracePeriodSeconds") == 7,
    ),
    "pod-security-context": (
        patch(pod_spec=PodSpecPatch(security_context={"runAsUser": 1234, "runAsNonRoot": True})),
        lambda p: p["spec"].get("securityContext", {}).get("runAsUser") == 1234,
    ),
    "container-security-context": (
        patch(
            pod_spec=PodSpecPatch(
                containers=[
                    ContainerPatch(name="node", security_context={"readOnlyRootFilesystem": True})
                ]
            )
        ),
        lambda p: node(p).get("securityContext", {}).get("readOnlyRootFilesystem") is True,
    ),
    "affinity": (
        patch(
            pod_spec=PodSpecPatch(
                affinity={
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 10,
                                "preference": {
                                    "matchExpressions": [
                                        {
                                            "key": "kf-conformance/zone",
                                            "operator": "In",
                                            "values": ["z1"],
                                        }
                                    ]
                                },
                            }
                        ]
                    }
                }
            )
        ),
        lambda p: "nodeAffinity" in (p["spec"].get("affinity") or {}),
    ),
    "service-account": (
        patch(pod_spec=PodSpecPatch(service_account_name="default")),
        lambda p: p["spec"].get("serviceAccountName") == "default",
    ),
    "image-pull-secrets": (
        patch(pod_spec=PodSpecPatch(image_pull_secrets=[{"name": "registry-cred"}])),
        lambda p: {"name": "registry-cred"} in (p["spec"].get("imagePullSecrets") or []),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_option_reaches_the_pods(client: TrainerClient, controllers: Cluster, case: str) -> None:
    option, check = CASES[case]
    name = submit(client, controllers, option, nodes=2)
    pods = pods_of(controllers, name, 2)
    assert all(check(p) for p in pods), [p["spec"] for p in pods]


def test_trainer_env_and_resources_reach_the_node_container(
    client: TrainerClient, controllers: Cluster
) -> None:
    trainer = CustomTrainer(
        controllers.spec().trainer.func,
        num_nodes=1,
        env={"LEARNING_RATE": "0.1"},
        resources_per_node={"cpu": "2", "memory": "3Gi", "gpu": 1},
    )
    name = client.submit(TrainJobSpec(trainer=trainer, options=controllers.pods("hold"))).job.name
    (pod,) = pods_of(controllers, name)
    assert env_of(pod)["LEARNING_RATE"] == "0.1"
    res = node(pod)["resources"]
    assert res["limits"]["nvidia.com/gpu"] == "1"
    assert res["limits"]["cpu"] == "2"
    assert res["limits"]["memory"] == "3Gi"


def test_trainjob_labels_and_annotations_stay_on_the_trainjob(
    client: TrainerClient, controllers: Cluster
) -> None:
    name = submit(
        client, controllers, Labels({"owner": "ml"}), Annotations({"kf-conformance/a": "b"})
    )
    (pod,) = pods_of(controllers, name)
    assert "owner" not in pod["metadata"].get("labels", {})
    assert "kf-conformance/a" not in (pod["metadata"].get("annotations") or {})
    assert client.get_job(name).labels["owner"] == "ml"


def test_job_and_jobset_metadata_reach_their_objects(
    client: TrainerClient, controllers: Cluster
) -> None:
    name = submit(
        client,
        controllers,
        patch(job_meta={"labels": {"tier": "job"}}, jobset_meta={"labels": {"tier-set": "js"}}),
    )
    pods_of(controllers, name)
    (jobset,) = [j for j in controllers.owned("jobsets") if j["metadata"]["name"] == name]
    assert jobset["metadata"]["labels"]["tier-set"] == "js"
    jobs = [
        j for j in controllers.owned("jobs") if j["metadata"].get("labels", {}).get(JOBSET_NAME)
    ]
    assert jobs
    assert all(j["metadata"]["labels"].get("tier") == "job" for j in jobs)


def test_pods_carry_the_trainjob_s_identity_labels(
    client: TrainerClient, controllers: Cluster
) -> None:
    name = submit(client, controllers, nodes=2)
    pods = pods_of(controllers, name, 2)
    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert labels[JOBSET_NAME] == name
        assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
    assert sorted(
        p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in pods
    ) == [
        "0",
        "1",
    ]


def test_scheduling_gate_keeps_the_pods_unscheduled(
    client: TrainerClient, controllers: Cluster
) -> None:
    gate = patch(pod_spec=PodSpecPatch(scheduling_gates=[{"name": "kf-conformance/hold"}]))
    name = submit(client, controllers, gate)
    (pod,) = pods_of(controllers, name)
    assert pod["spec"]["schedulingGates"] == [{"name": "kf-conformance/hold"}]
    pod = until(
        lambda: next(
            (
                p
                for p in pods_of(controllers, name)
                if any(
                    c["type"] == "PodScheduled" and c.get("reason") == "SchedulingGated"
                    for c in (p.get("status") or {}).get("conditions") or []
                )
            ),
            None,
        ),
        what="PodScheduled=False, SchedulingGated",
    )
    assert not pod["spec"].get("nodeName")
    job = client.get_job(name)
    assert [s.status for s in job.steps] == ["Pending"]
