"""Helpers of the conformance tests (see ``conftest.py``): one test body, two servers: the test bed (``kf_trainer_core.testing``) and the real
control plane (kube-apiserver + etcd + the real Trainer, JobSet and Job controllers,
kwok pods). Every test takes ``cluster`` and runs once on each; the real run is marked
``control_plane``. Where the two disagree, one of them has a bug.

How a pod behaves is asked for in one vocabulary (:meth:`Cluster.pods`): the test bed
reads it as a scenario annotation, the real one as kwok's pod annotations (set through a
RuntimePatch). Failing jobs run on a namespaced TrainingRuntime with ``backoffLimit: 0``
(:meth:`Cluster.fast_fail_runtime`): upstream runtimes leave the Job default of 6 and take
~10 minutes to fail on a real cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.retry import RetryPolicy
from kf_trainer_core.spec import (
    Annotations,
    CustomTrainer,
    JobSetSpecPatch,
    JobSetTemplatePatch,
    JobSpecPatch,
    JobTemplatePatch,
    PodSpecPatch,
    PodTemplatePatch,
    ReplicatedJobPatch,
    RuntimePatch,
    TrainingRuntimeSpecPatch,
    TrainJobSpec,
)
from kf_trainer_core.testing.control_plane import ControlPlane
from kf_trainer_core.testing.netfaults import FaultProxy, proxied_kubeconfig
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from train_functions import train_linear

FAST = RetryPolicy(attempts=6, base=0.05, cap=0.5)
FAST_FAIL_RUNTIME = "fast-fail"
KWOK = "kwok.x-k8s.io/"

#: What a job's pods do, in the one vocabulary both servers understand here.
BEHAVIOURS = ("succeed", "hold", "fail", "oom", "slow", "retry", "restart")

#: Pod failures a Job retries where its runtime sets no ``backoffLimit`` (Kubernetes'
#: default, the upstream runtimes'): ``retry`` jobs run seven attempts.
JOB_RETRIES = 6


@dataclass
class Cluster:
    """One server as the tests see it: a fresh namespace and a kubeconfig for it."""

    kind: str  # "testbed" or "real"
    namespace: str
    kubeconfig: Path
    kube: KubeTestServer | None
    cp: ControlPlane | None

    @property
    def real(self) -> bool:
        return self.kind == "real"

    def config(self, **kw: Any) -> KubernetesConfig:
        kw.setdefault("watch_timeout", 30)
        kw.setdefault("poll_interval", 0.1)
        return KubernetesConfig(kubeconfig=str(self.kubeconfig), **kw)

    @property
    def upstream(self) -> tuple[str, int]:
        """The API server's address (where a proxy in front of it forwards)."""
        if self.cp is not None:
            return ("127.0.0.1", self.cp.port_base)
        assert self.kube is not None
        url = urlsplit(self.kube.url)
        return (url.hostname or "127.0.0.1", url.port or 80)

    def through(self, proxy: FaultProxy, path: Path) -> Cluster:
        """This cluster reached through ``proxy`` (a kubeconfig of its own at ``path``)."""
        return dataclasses.replace(
            self, kubeconfig=proxied_kubeconfig(self.kubeconfig, path, proxy)
        )

    def api(self) -> k8s.ApiClient:
        """A plain ``kubernetes`` client for what the suite's client does not do."""
        return k8s_config.new_client_from_config(config_file=str(self.kubeconfig))

    # -- what pods do -------------------------------------------------------------
    def pods(
        self,
        behaviour: str = "succeed",
        *,
        exit_code: int = 3,
        seconds: int = 8,
        message: str | None = None,
    ) -> list[Any]:
        """Spec options that make the job's trainer pods ``behaviour``; a failing pod
        with ``message`` ends with it as its termination message and serves no log (as
        kwok's pods do)."""
        assert behaviour in BEHAVIOURS, behaviour
        if behaviour == "succeed":
            return []
        # The same annotation on both: kwok's and the test bed's pods honour it.
        said = {} if message is None else {KWOK + "termination-message": message}
        if not self.real:
            scenario: dict[str, Any] = {
                "hold": {"preset": "never-finish"},
                "fail": {"preset": "fail", "exit_code": exit_code},
                "oom": {"preset": "oom"},
                "slow": {"duration": seconds},
                # Retried by the Job controller (the test bed's default is no retry,
                # for tests that want the failure at once): the upstream runtimes' 6
                # retries take ~10 minutes on a real cluster (back-off 10 s, 20 s,
                # 40 s, ...); the test bed's back-off is milliseconds, so more retries
                # keep the job retrying as long as a test looks at it.
                "restart": {
                    "preset": "fail",
                    "exit_code": exit_code,
                    "backoff_limit": 100,
                    "duration": seconds,
                },
                # The test bed's Jobs give up at once unless told: retried as a real
                # cluster's default Job retries, each attempt failing after a while
                # (kwok's pods fail 3 s after they start, and the back-off grows).
                "retry": {
                    "preset": "fail",
                    "exit_code": exit_code,
                    "backoff_limit": JOB_RETRIES,
                    "duration": 3,
                },
            }[behaviour]
            if message is not None:
                scenario["serve_logs"] = False
            options: list[Any] = [Annotations({SCENARIO_ANNOTATION: json.dumps(scenario)})]
            return options + ([pod_annotations(said)] if said else [])
        notes = {
            "hold": {KWOK + "hold": "true"},
            "fail": {KWOK + "exit-code": str(exit_code)},
            # On the upstream runtime (no backoffLimit: the Job retries six times).
            "retry": {KWOK + "exit-code": str(exit_code)},
            "oom": {KWOK + "oom": "true"},
            "slow": {KWOK + "duration": f"{seconds}s"},
            "restart": {KWOK + "exit-code": str(exit_code)},  # upstream runtimes retry 6 times
        }[behaviour]
        return [pod_annotations({**notes, **said})]

    def spec(
        self,
        behaviour: str = "succeed",
        *options: Any,
        nodes: int = 1,
        runtime: Any = None,
        **kw: Any,
    ) -> TrainJobSpec:
        """A CustomTrainer job whose pods do ``behaviour``."""
        opts = [*self.pods(behaviour, **kw), *options]
        trainer = CustomTrainer(train_linear, num_nodes=nodes)
        if runtime is None:
            return TrainJobSpec(trainer=trainer, options=opts)
        return TrainJobSpec(runtime=runtime, trainer=trainer, options=opts)

    # -- objects the client does not make ---------------------------------------
    def fast_fail_runtime(self) -> dict[str, Any]:
        """A TrainingRuntime in the namespace: torch-distributed with ``backoffLimit: 0``
        on its Jobs, so one failed pod fails the job."""
        api = k8s.CustomObjectsApi(self.api())
        base = api.get_cluster_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "torch-distributed"
        )
        spec = base["spec"]
        for rj in spec["template"]["spec"]["replicatedJobs"]:
            rj["template"].setdefault("spec", {})["backoffLimit"] = 0
        body = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainingRuntime",
            "metadata": {"name": FAST_FAIL_RUNTIME, "labels": base["metadata"].get("labels", {})},
            "spec": spec,
        }
        with contextlib.suppress(k8s.ApiException):
            api.create_namespaced_custom_object(
                "trainer.kubeflow.org", "v1alpha1", self.namespace, "trainingruntimes", body
            )
        return {"name": FAST_FAIL_RUNTIME, "kind": "TrainingRuntime"}

    def job_on_missing_runtime(
        self, kind: str = "ClusterTrainingRuntime", runtime: str = "no-such-runtime"
    ) -> str:
        """Create TrainJob ``no-runtime`` on a runtime that does not exist (the Trainer
        cannot build its JobSet); its name."""
        body = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "no-runtime"},
            "spec": {
                "runtimeRef": {"name": runtime, "kind": kind, "apiGroup": "trainer.kubeflow.org"},
                "trainer": {"numNodes": 1},
            },
        }
        k8s.CustomObjectsApi(self.api()).create_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", self.namespace, "trainjobs", body
        )
        return "no-runtime"

    def owned(self, plural: str) -> list[dict[str, Any]]:
        """JobSets (``jobsets``), Jobs (``jobs``) or Pods (``pods``) in the namespace."""
        api = self.api()
        if plural == "pods":
            items = k8s.CoreV1Api(api).list_namespaced_pod(self.namespace).items
        elif plural == "jobs":
            items = k8s.BatchV1Api(api).list_namespaced_job(self.namespace).items
        else:
            out = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", self.namespace, "jobsets"
            )
            return list(out["items"])
        return [api.sanitize_for_serialization(i) for i in items]

    def compact(self) -> None:
        """Make the continue tokens (and resourceVersions) issued so far expire: a real
        etcd compaction (after one write, so the compaction passes them) or the test
        bed's fault."""
        if self.cp is not None:
            self.cp.new_namespace("compact")  # a write: the revision moves past the tokens'
            self.cp.compact()
        else:
            assert self.kube is not None
            self.kube.faults.expire_continue_tokens(1)

    def restart_server(self) -> None:
        """Crash and restart the API server with every resourceVersion handed out so
        far expired: real, kube-apiserver killed, etcd compacted, started again (its
        fresh watch cache answers older versions 410); test bed, its history compacted
        and its connections reset for a second."""
        if self.cp is not None:
            if self.cp.source is None:
                pytest.skip("an attached control plane is not ours to restart")
            self.cp.restart_apiserver()
        else:
            assert self.kube is not None
            # A write first, so that the compaction passes the versions handed out.
            k8s.CoreV1Api(self.api()).create_namespaced_config_map(
                self.namespace, {"metadata": {"generateName": "restart-"}}
            )
            self.kube.faults.expire_resource_versions()
            self.kube.faults.restart(downtime=1.0, abort=True)


def make_cluster(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> Iterator[Cluster]:
    """A fresh namespace on the test bed (``kind == "testbed"``), the real control
    plane (``"real"``) or the real one with Kueue (``"kueue"``: a :class:`Cluster` of
    kind ``real`` on ``kueue_control_plane``), for fixtures that choose among them."""
    if kind == "testbed":
        kube: KubeTestServer = request.getfixturevalue("kube")
        namespace = "conformance"
        k8s.CoreV1Api(
            k8s_config.new_client_from_config(
                config_file=str(kube.kubeconfig(tmp_path / "admin", namespace="default"))
            )
        ).create_namespace({"metadata": {"name": namespace}})
        path = kube.kubeconfig(tmp_path / "kubeconfig", namespace=namespace)
        yield Cluster("testbed", namespace, path, kube, None)
        return
    cp: ControlPlane = request.getfixturevalue(
        "kueue_control_plane" if kind == "kueue" else "control_plane"
    )
    namespace = cp.new_namespace("conf")
    try:
        yield Cluster("real", namespace, cp.kubeconfig_for(namespace, tmp_path / "kc"), None, cp)
    finally:
        cp.delete_namespace(namespace)


def runtime_patch(
    *,
    pod_meta: dict[str, Any] | None = None,
    pod_spec: PodSpecPatch | None = None,
    job_meta: dict[str, Any] | None = None,
    jobset_meta: dict[str, Any] | None = None,
    rjob: str = "node",
    manager: str = "kf-trainer-suite/conformance",
) -> RuntimePatch:
    """A RuntimePatch of one replicated job (``node``), at every level it can reach."""
    pod = PodTemplatePatch(metadata=pod_meta, spec=pod_spec)
    replicated = ReplicatedJobPatch(
        name=rjob, template=JobTemplatePatch(metadata=job_meta, spec=JobSpecPatch(template=pod))
    )
    return RuntimePatch(
        TrainingRuntimeSpecPatch(
            template=JobSetTemplatePatch(
                metadata=jobset_meta, spec=JobSetSpecPatch(replicated_jobs=[replicated])
            )
        ),
        manager=manager,
    )


def pod_annotations(notes: dict[str, str], rjob: str = "node") -> RuntimePatch:
    """A RuntimePatch that sets annotations on the pods of one replicated job."""
    return runtime_patch(pod_meta={"annotations": notes}, rjob=rjob)


def until(check: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"{what} not reached in {timeout} s")
        time.sleep(0.2)


GC_TIMEOUT = 180.0
"""How long a test gives the garbage collector to remove the dependents of a deleted
TrainJob (the suite deletes in the background: the TrainJob goes at once, its JobSet
within a second, its Jobs and pods a moment later; generous for a CI run's load)."""


async def until_collected(aclient: Any, name: str) -> None:
    """Wait (asynchronously) until the TrainJob ``name`` is gone; fail after
    :data:`GC_TIMEOUT` naming it. The sync face is ``until(..., timeout=GC_TIMEOUT)``."""
    from kf_trainer_core.errors import TrainJobNotFoundError

    end = time.monotonic() + GC_TIMEOUT
    while time.monotonic() < end:
        try:
            await aclient.get_job(name)
        except TrainJobNotFoundError:
            return
        await asyncio.sleep(0.2)
    pytest.fail(f"TrainJob {name} not collected in {GC_TIMEOUT} s")


async def wait_on(face: str, client: Any, aclient: Any, name: str, **kw: Any) -> Any:
    """``wait`` through the sync client (``face == "sync"``) or the async one."""
    if face == "sync":
        return client.wait(name, **kw)
    return await aclient.wait(name, **kw)
