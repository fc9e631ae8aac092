"""Kueue's queues for a conformance test, on either server (see ``test_kueue_queues.py``, ``test_kueue_jobs.py``).

On the real control plane the real Kueue (``start.sh --kueue``) admits: a test's
ClusterQueues and WorkloadPriorityClasses are cluster-scoped, so they are named after
the test's namespace (and admit only from it); its LocalQueues live in that namespace.
On the test bed the simulated Kueue (:mod:`kf_trainer_core.testing.kueue`) is configured
with the same queues. One ResourceFlavor, ``default-flavor``, serves all of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from conformance_support import Cluster, until
from kubernetes import client as k8s

from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL
from kf_trainer_core.spec import CustomTrainer, Labels, TrainJobSpec
from kf_trainer_core.testing.kueue import PRIORITY_CLASS_LABEL, KueueSimulator

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
GPU = "nvidia.com/gpu"
FLAVOR = "default-flavor"


class Queues:
    """The Kueue objects of one test. ``cluster_queue`` and ``priority_class`` return
    the name the server knows them by (prefixed by the namespace on the real one)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.sim: KueueSimulator | None = None
        self._cluster_scoped: list[tuple[str, str]] = []
        if cluster.real:
            assert cluster.cp is not None
            cluster.cp.require_kueue()
            self.api = k8s.CustomObjectsApi(cluster.api())
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor"}
            self._create_cluster_object("resourceflavors", {**body, "metadata": {"name": FLAVOR}})
        else:
            assert cluster.kube is not None
            self.sim = cluster.kube.install_kueue()

    # -- configuration -------------------------------------------------------------
    def cluster_queue(
        self, name: str, quota: dict[str, int], *, preempt: bool = False, stopped: bool = False
    ) -> str:
        """A ClusterQueue with nominal ``quota`` (one flavor) that admits from the
        test's namespace; ``preempt``: lower-priority workloads of it may be preempted."""
        if self.sim is not None:
            self.sim.add_cluster_queue(name, dict(quota), preempt_lower_priority=preempt)
            if stopped:
                self.sim.stop_queue(name)
            return name
        real = f"{self.cluster.namespace}-{name}"
        spec: dict[str, Any] = {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": self.cluster.namespace}
            },
            "resourceGroups": [
                {
                    "coveredResources": sorted(quota),
                    "flavors": [
                        {
                            "name": FLAVOR,
                            "resources": [
                                {"name": r, "nominalQuota": str(n)}
                                for r, n in sorted(quota.items())
                            ],
                        }
                    ],
                }
            ],
        }
        if preempt:
            spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
        if stopped:
            spec["stopPolicy"] = "Hold"
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue"}
        self._create_cluster_object(
            "clusterqueues", {**body, "metadata": {"name": real}, "spec": spec}
        )
        return real

    def local_queue(self, name: str, cluster_queue: str) -> str:
        """A LocalQueue ``name`` in the test's namespace feeding ``cluster_queue``; on
        the real server, once Kueue has taken it in (Active)."""
        if self.sim is not None:
            self.sim.add_local_queue(self.cluster.namespace, name, cluster_queue)
            return name
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "LocalQueue",
            "metadata": {"name": name},
            "spec": {"clusterQueue": cluster_queue},
        }
        self.api.create_namespaced_custom_object(
            GROUP, VERSION, self.cluster.namespace, "localqueues", body
        )
        until(lambda: self._active("localqueues", name), 30, f"LocalQueue {name} Active")
        return name

    def priority_class(self, name: str, value: int) -> str:
        """A WorkloadPriorityClass; jobs name it with ``kueue.x-k8s.io/priority-class``."""
        if self.sim is not None:
            self.sim.add_priority_class(name, value)
            return name
        real = f"{self.cluster.namespace}-{name}"
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": real},
            "value": value,
        }
        self._create_cluster_object("workloadpriorityclasses", body)
        return real

    def set_quota(self, cluster_queue: str, quota: dict[str, int]) -> None:
        """Change a ClusterQueue's nominal quota."""
        if self.sim is not None:
            self.sim.set_quota(cluster_queue, dict(quota))
            return
        obj = self.api.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue)
        group = obj["spec"]["resourceGroups"][0]
        group["flavors"][0]["resources"] = [
            {"name": r, "nominalQuota": str(n)} for r, n in sorted(quota.items())
        ]
        self.api.replace_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue, obj)

    # -- reading -------------------------------------------------------------------
    def workloads(self) -> list[dict[str, Any]]:
        """The Workloads in the test's namespace, as stored."""
        out = self.api_client().list_namespaced_custom_object(
            GROUP, VERSION, self.cluster.namespace, "workloads"
        )
        return list(out["items"])

    def api_client(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.cluster.api())

    # -- lifecycle -----------------------------------------------------------------
    def close(self) -> None:
        """Delete the cluster-scoped objects of the test (in the background: a
        ClusterQueue goes once its Workloads have, with the namespace)."""
        for plural, name in reversed(self._cluster_scoped):
            with contextlib.suppress(k8s.ApiException):
                self.api.delete_cluster_custom_object(
                    GROUP, VERSION, plural, name, propagation_policy="Background"
                )

    def _create_cluster_object(self, plural: str, body: dict[str, Any]) -> None:
        try:
            self.api.create_cluster_custom_object(GROUP, VERSION, plural, body)
        except k8s.ApiException as err:
            if err.status != 409 or plural != "resourceflavors":
                raise
            return
        if plural != "resourceflavors":
            self._cluster_scoped.append((plural, body["metadata"]["name"]))
        if plural == "clusterqueues":
            name = body["metadata"]["name"]
            until(lambda: self._active(plural, name, cluster=True), 30, f"{name} ready")

    def _active(self, plural: str, name: str, *, cluster: bool = False) -> bool:
        if cluster:
            obj = self.api.get_cluster_custom_object(GROUP, VERSION, plural, name)
        else:
            obj = self.api.get_namespaced_custom_object(
                GROUP, VERSION, self.cluster.namespace, plural, name
            )
        stopped = (obj.get("spec") or {}).get("stopPolicy", "None") != "None"
        conds = (obj.get("status") or {}).get("conditions") or []
        # A stopped ClusterQueue is never Active: Kueue has taken it in when it says so.
        return any(
            c.get("type") == "Active" and (c.get("status") == "True" or stopped) for c in conds
        )


def gpu_job(
    cluster: Cluster,
    queue: str | None,
    *,
    gpus: int = 4,
    nodes: int = 1,
    behaviour: str = "succeed",
    priority: str | None = None,
    runtime: Any = None,
    extra: Sequence[Any] = (),
) -> TrainJobSpec:
    """A job of ``nodes`` x ``gpus`` GPUs in LocalQueue ``queue`` (none: not Kueue's)
    whose pods do ``behaviour`` once admitted; ``priority``: a WorkloadPriorityClass;
    ``extra``: more spec options."""
    labels = {QUEUE_NAME_LABEL: queue} if queue else {}
    if priority:
        labels[PRIORITY_CLASS_LABEL] = priority
    base = cluster.spec(behaviour)
    trainer = CustomTrainer(base.trainer.func, num_nodes=nodes, resources_per_node={"gpu": gpus})
    options = [*base.options, *([Labels(labels)] if labels else []), *extra]
    if runtime is None:
        return TrainJobSpec(trainer=trainer, options=options)
    return TrainJobSpec(runtime=runtime, trainer=trainer, options=options)
