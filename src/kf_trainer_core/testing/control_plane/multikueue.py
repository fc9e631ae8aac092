"""MultiKueue across two real control planes, for tests: a manager (the session's
control plane with Kueue) and a worker (a second one), wired as
``shared/control-plane/verify-multikueue.sh`` wires them, from Python with server-side
apply (idempotent):

- worker: ResourceFlavor, ClusterQueue :attr:`MultiKueuePair.worker_queue`, and in each
  test namespace a LocalQueue :attr:`MultiKueuePair.queue`;
- manager: the worker's kubeconfig in Secret :attr:`MultiKueuePair.secret` of
  ``kueue-system``, MultiKueueCluster :attr:`MultiKueuePair.cluster`, a MultiKueueConfig,
  AdmissionCheck ``kf-multikueue`` (controller ``kueue.x-k8s.io/multikueue``),
  ClusterQueue :attr:`MultiKueuePair.manager_queue` with that check, and the LocalQueue
  in each test namespace.

Its own flavor and queue names: the session's other Kueue tests share the manager.
A TrainJob created on the manager with ``spec.managedBy: kueue.x-k8s.io/multikueue``
in queue :attr:`MultiKueuePair.queue` runs on the worker. Its pod sets must ask for a
covered resource: a Workload whose pods ask for none gets no flavor, and then no
admission check — Kueue admits it on the manager, whose Trainer leaves it alone.
"""

from __future__ import annotations

import base64
import contextlib
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kf_trainer_core.k8s.trainjob import condition_true
from kf_trainer_core.testing.control_plane.running import ControlPlane

__all__ = ["MultiKueuePair", "Sightings", "apply"]

_KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
_TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{}/trainjobs"
_JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{}/jobsets"
_PODS = "/api/v1/namespaces/{}/pods"
#: The label JobSet puts on its pods: the JobSet's (so the TrainJob's) name.
_JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
_FLAVOR = "kf-mk-flavor"
_QUOTA = [
    {"name": "cpu", "nominalQuota": 64},
    {"name": "memory", "nominalQuota": "256Gi"},
    {"name": "nvidia.com/gpu", "nominalQuota": 8},
]


def apply(cp: ControlPlane, path: str, body: dict[str, Any]) -> Any:
    """Server-side apply ``body`` at ``path`` (the object's URL) as the tests' manager."""
    return cp._request(
        "PATCH",
        f"{path}?fieldManager=kf-trainer-tests&force=true",
        body,
        content_type="application/apply-patch+yaml",
    )


def _get(cp: ControlPlane, path: str) -> Any:
    try:
        return cp._request("GET", path)
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


def _until_active(cp: ControlPlane, paths: list[str], what: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not all(condition_true(_get(cp, p) or {}, "Active") for p in paths):
        if time.monotonic() > end:
            states = {p: ((_get(cp, p) or {}).get("status") or {}) for p in paths}
            raise RuntimeError(f"{what} not Active after {timeout:g}s: {states}")
        time.sleep(0.2)


def _queue(name: str, check: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [{"name": _FLAVOR, "resources": _QUOTA}],
            }
        ],
    }
    if check:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def _names(cp: ControlPlane, path: str, kind: str, name: str | None = None) -> list[str]:
    """``kind/name`` of each object listed at ``path`` (only ``name``'s, if given)."""
    listed = _get(cp, path) or {}
    found = [str((o.get("metadata") or {}).get("name")) for o in listed.get("items") or []]
    return [f"{kind}/{n}" for n in found if name is None or n == name]


@dataclass
class Sightings:
    """What a :meth:`MultiKueuePair.watching` thread saw of a namespace's jobs, each as
    ``kind/name``: on the worker (TrainJobs and their pods), and the JobSets on the
    manager (whose Trainer must never build one for a job MultiKueue dispatches)."""

    worker: set[str] = field(default_factory=set)
    manager_jobsets: set[str] = field(default_factory=set)
    #: A read that failed (the watch goes on; the last one is kept, to say why).
    error: str | None = None
    #: Set once the worker has had anything of a job: a test may wait for it.
    on_worker: threading.Event = field(default_factory=threading.Event)


@dataclass
class MultiKueuePair:
    """A manager and a worker control plane wired for MultiKueue (see the module)."""

    manager: ControlPlane
    worker: ControlPlane
    #: The MultiKueueCluster's name on the manager (what ``status.clusterName`` says).
    cluster: str = "kf-worker1"
    #: The manager's Secret (in ``kueue-system``) holding the worker's kubeconfig.
    secret: str = "kf-worker1-kubeconfig"
    #: The LocalQueue of each test namespace (same name on both clusters).
    queue: str = "multikueue"
    manager_queue: str = "kf-mk-manager-cq"
    worker_queue: str = "kf-mk-worker-cq"
    check: str = "kf-multikueue"

    def wire(self) -> None:
        """Apply the MultiKueue objects on both clusters and wait until Kueue says they
        are Active (the worker connected)."""
        flavor = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": _FLAVOR},
        }
        for cp in (self.worker, self.manager):
            apply(cp, f"{_KUEUE}/resourceflavors/{_FLAVOR}", flavor)
        apply(self.worker, f"{_KUEUE}/clusterqueues/{self.worker_queue}", _queue(self.worker_queue))
        document = base64.b64encode(self.worker.kubeconfig.read_bytes()).decode()
        apply(
            self.manager,
            f"/api/v1/namespaces/kueue-system/secrets/{self.secret}",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": self.secret, "namespace": "kueue-system"},
                "data": {"kubeconfig": document},
            },
        )
        objects = [
            (
                f"multikueueclusters/{self.cluster}",
                {
                    "kind": "MultiKueueCluster",
                    "spec": {
                        "clusterSource": {
                            "kubeConfig": {"locationType": "Secret", "location": self.secret}
                        }
                    },
                },
            ),
            (
                "multikueueconfigs/kf-multikueue-config",
                {"kind": "MultiKueueConfig", "spec": {"clusters": [self.cluster]}},
            ),
            (
                f"admissionchecks/{self.check}",
                {
                    "kind": "AdmissionCheck",
                    "spec": {
                        "controllerName": "kueue.x-k8s.io/multikueue",
                        "parameters": {
                            "apiGroup": "kueue.x-k8s.io",
                            "kind": "MultiKueueConfig",
                            "name": "kf-multikueue-config",
                        },
                    },
                },
            ),
        ]
        for path, body in objects:
            name = path.split("/")[1]
            full = {"apiVersion": "kueue.x-k8s.io/v1beta2", "metadata": {"name": name}, **body}
            apply(self.manager, f"{_KUEUE}/{path}", full)
        apply(
            self.manager,
            f"{_KUEUE}/clusterqueues/{self.manager_queue}",
            _queue(self.manager_queue, self.check),
        )
        _until_active(
            self.manager,
            [
                f"{_KUEUE}/multikueueclusters/{self.cluster}",
                f"{_KUEUE}/admissionchecks/{self.check}",
                f"{_KUEUE}/clusterqueues/{self.manager_queue}",
            ],
            "the manager's MultiKueue objects",
        )
        _until_active(self.worker, [f"{_KUEUE}/clusterqueues/{self.worker_queue}"], "worker")

    def new_namespace(self) -> str:
        """A fresh namespace of the same name on both clusters, with the LocalQueue
        :attr:`queue` in each (Active on both before it is returned)."""
        name = self.manager.new_namespace("mk")
        self.worker._request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        path = f"{_KUEUE}/namespaces/{name}/localqueues/{self.queue}"
        for cp, cq in ((self.worker, self.worker_queue), (self.manager, self.manager_queue)):
            apply(
                cp,
                path,
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "LocalQueue",
                    "metadata": {"name": self.queue, "namespace": name},
                    "spec": {"clusterQueue": cq},
                },
            )
        for cp in (self.worker, self.manager):
            _until_active(cp, [path], f"LocalQueue {name}/{self.queue}")
        return name

    def delete_namespace(self, name: str) -> None:
        """Delete the namespace on both clusters (in the background)."""
        self.manager.delete_namespace(name)
        self.worker.delete_namespace(name)

    # -- what a test checks of a job on both clusters ---------------------------------
    def worker_has(self, namespace: str, name: str | None = None) -> list[str]:
        """What of job ``name`` (every job, if ``None``) is on the worker: its TrainJob
        and pods, as ``trainjob/NAME`` and ``pod/NAME``."""
        found = _names(self.worker, _TRAINJOBS.format(namespace), "trainjob", name)
        pods = _PODS.format(namespace)
        if name is not None:
            pods += f"?labelSelector={_JOBSET_NAME}%3D{name}"
        return found + _names(self.worker, pods, "pod")

    def manager_has(self, namespace: str) -> list[str]:
        """The manager's TrainJobs and JobSets of ``namespace``, as ``kind/NAME``."""
        return _names(self.manager, _TRAINJOBS.format(namespace), "trainjob") + _names(
            self.manager, _JOBSETS.format(namespace), "jobset"
        )

    @contextlib.contextmanager
    def watching(self, namespace: str, every: float = 0.1) -> Iterator[Sightings]:
        """Record, in a thread and until the block ends, everything of ``namespace``'s
        jobs seen on the worker and every JobSet seen on the manager: proof that a job
        reached its worker before an adapter cancelled it, and that the manager never
        ran it, whoever submitted it (an orchestrator names its jobs itself)."""
        seen = Sightings()
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                try:
                    found = self.worker_has(namespace)
                    seen.worker.update(found)
                    if found:
                        seen.on_worker.set()
                    seen.manager_jobsets.update(
                        n for n in _names(self.manager, _JOBSETS.format(namespace), "jobset")
                    )
                except Exception as exc:  # a slow read: the next one tells
                    seen.error = f"{type(exc).__name__}: {exc}"
                stop.wait(every)

        thread = threading.Thread(target=watch, name=f"kf-mk-watch-{namespace}", daemon=True)
        thread.start()
        try:
            yield seen
        finally:
            stop.set()
            thread.join(30)

    def left_over(self, namespace: str, timeout: float = 30.0) -> list[str]:
        """What is left of ``namespace``'s jobs on either cluster (``worker:kind/NAME``,
        ``manager:kind/NAME``) once that is nothing, or after ``timeout`` seconds: a
        job cancelled cleanly leaves ``[]`` — the manager's TrainJob deleted, MultiKueue
        having removed the worker's copy and its pods."""
        end = time.monotonic() + timeout
        while True:
            left = [f"worker:{n}" for n in self.worker_has(namespace)]
            left += [f"manager:{n}" for n in self.manager_has(namespace)]
            if not left or time.monotonic() > end:
                return left
            time.sleep(0.2)
