"""MultiKueue on two real control planes (the ``multikueue`` fixture: a manager and a
worker, both with the real Kueue): a TrainJob submitted to the manager is followed to
the worker that runs it — its view names the worker, its steps, events, logs and
result come from there — and is cancelled, suspended and deleted on the manager, the
worker's copy going with it; a worker the suite cannot reach is said once, with the
fix, while the manager's copied status is still shown (issue 37, item 3)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.errors import WorkerUnreachableError
from kf_trainer_core.k8s.calls import Delete
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.spec import (
    MANAGED_BY_MULTIKUEUE,
    CustomTrainer,
    ManagedBy,
    QueueName,
    TrainJobSpec,
)
from kf_trainer_core.testing import kwok
from kf_trainer_core.testing.control_plane.multikueue import MultiKueuePair

pytestmark = pytest.mark.control_plane

RESULT = {"loss": 0.125, "where": "worker"}
#: What the API server answers for a kwok node's log: proof the log was asked of a
#: cluster that has the pod (the manager has none: it would say no pod runs the step).
KUBELET_LOG = ":10250/containerLogs/"


def mk_spec(queue: str, *, seconds: int = 4, result: Any = RESULT, nodes: int = 2) -> TrainJobSpec:
    """A MultiKueue job: its pods ask for cpu (a pod set without a covered resource
    gets no flavor, hence no admission check: Kueue would admit it on the manager)."""
    pods = {kwok.DURATION: f"{seconds}s"}
    if result is not None:
        pods[kwok.TERMINATION_MESSAGE] = json.dumps(result)
    return TrainJobSpec(
        runtime="torch-distributed",
        trainer=CustomTrainer(train_linear, num_nodes=nodes, resources_per_node={"cpu": "1"}),
        options=[QueueName(queue), ManagedBy(MANAGED_BY_MULTIKUEUE), kwok.node_annotations(pods)],
    )


@pytest.fixture
def manager_config(multikueue: MultiKueuePair, multikueue_namespace: str) -> KubernetesConfig:
    """The manager's admin kubeconfig: the worker is reached through its Secret."""
    return KubernetesConfig(
        kubeconfig=str(multikueue.manager.kubeconfig), namespace=multikueue_namespace
    )


@pytest.fixture
def client(manager_config: KubernetesConfig) -> Iterator[TrainerClient]:
    with TrainerClient(manager_config) as c:
        yield c


def _until(check: Any, timeout: float = 60, every: float = 0.2) -> Any:
    end = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > end:
            return got
        time.sleep(every)


def test_a_job_is_followed_to_its_worker(
    client: TrainerClient, multikueue: MultiKueuePair, multikueue_namespace: str
) -> None:
    ns = multikueue_namespace
    t0 = time.monotonic()
    name = client.submit(mk_spec(multikueue.queue, seconds=6)).job.name
    running = _until(lambda: (j := client.get_job(name)).status is JobState.RUNNING and j)
    assert running, client.get_job(name)
    # Where it runs, and its steps: the worker's pods (the manager has none).
    assert running.worker is not None
    assert running.worker.name == multikueue.cluster
    assert running.worker.reachable
    assert [s.name for s in running.steps] == ["node-0", "node-1"]
    assert all(s.pod_name.startswith(name) for s in running.steps)
    assert multikueue.worker_has(ns, name)
    # Events of its pods exist only on the worker (the scheduler's there).
    events = client.get_job_events(name)
    reasons = {e.reason for e in events}
    assert "Scheduled" in reasons, reasons
    # ... with the manager's (Kueue made its Workload there), oldest first.
    assert "CreatedWorkload" in reasons, reasons
    stamps = [e.event_time for e in events if e.event_time is not None]
    assert stamps == sorted(stamps)
    # Its log is asked of the worker's kubelet (kwok serves none: the API server says so).
    with pytest.raises(Exception) as caught:
        list(client.get_job_logs(name))
    assert KUBELET_LOG in str(caught.value)
    # The wait follows it there and reads the result before MultiKueue removes the copy.
    job, result = client.wait(name, timeout=120)
    took = time.monotonic() - t0
    assert job.status is JobState.COMPLETE
    assert result == RESULT
    assert job.worker is not None
    assert job.worker.name == multikueue.cluster
    # Its queue status as it is at the end (admitted), not as at the handoff to the
    # worker (Kueue names the worker before the Workload reads Admitted).
    assert job.queue is not None
    assert not job.queue.waiting, job.queue
    print(f"\nMultiKueue: submit -> Complete with result via the manager in {took:.1f}s")
    # MultiKueue removes the worker's copy; the manager keeps the job, and says why a
    # result read now cannot be had.
    assert _until(lambda: not multikueue.worker_has(ns, name), 30)
    later = client.get_job_outputs(name)
    assert later.status is JobState.COMPLETE
    assert later.worker is not None
    assert later.worker.name == multikueue.cluster
    assert later.result_missing is not None
    assert "MultiKueue removed the job's copy" in later.result_missing.message
    assert "Runs on" in _summary_of(later)


def _summary_of(outputs: Any) -> str:
    from kf_trainer_core.cluster.job_summary import outputs_summary

    return outputs_summary(outputs)


def test_run_streams_the_log_of_the_worker(
    client: TrainerClient, multikueue: MultiKueuePair
) -> None:
    lines: list[str] = []
    out = client.run(mk_spec(multikueue.queue, seconds=3), timeout=120, on_log=lines.append)
    assert out.status is JobState.COMPLETE
    assert out.result == RESULT
    assert out.worker is not None
    assert out.worker.name == multikueue.cluster
    # The follower waited for the dispatch and asked the worker's kubelet (-f).
    assert any(KUBELET_LOG in line for line in lines), lines


def slow_deletes(call: Any) -> None:
    """A client slow before each delete (a loaded machine, a far API server): Kueue
    had the time to undo the suspend a delete used to set first on the manager, and
    the delete lost every round to it (``cancel_job`` returned False, the job ran on)."""
    if isinstance(call, Delete) and call.resource == TRAINJOBS and not call.dry_run:
        time.sleep(0.5)


def test_cancel_suspend_resume_and_delete_act_on_the_manager(
    manager_config: KubernetesConfig, multikueue: MultiKueuePair, multikueue_namespace: str
) -> None:
    with TrainerClient(manager_config, request_hook=slow_deletes) as client:
        _cancel_suspend_resume_and_delete(client, multikueue, multikueue_namespace)


def _cancel_suspend_resume_and_delete(
    client: TrainerClient, multikueue: MultiKueuePair, ns: str
) -> None:
    first = client.submit(mk_spec(multikueue.queue, seconds=300, nodes=1)).job.name
    assert _until(lambda: len(multikueue.worker_has(ns, first)) == 2)
    # The default cancel: the safe delete on the manager; MultiKueue removes the copy.
    assert client.cancel_job(first)
    assert _until(lambda: not multikueue.worker_has(ns, first), 30)
    assert not client.cancel_job(first)  # idempotent

    second = client.submit(mk_spec(multikueue.queue, seconds=300, nodes=1, result=1)).job.name
    assert _until(lambda: len(multikueue.worker_has(ns, second)) == 2)
    # Suspend: Kueue would undo spec.suspend on the manager; the Workload is deactivated.
    assert client.cancel_job(second, "suspend")
    # (Kueue may dispatch the copy once more while it evicts the Workload: the admission
    # check is reset before the quota is released; then it goes.)
    assert _until(lambda: client.get_job(second).status is JobState.SUSPENDED, 30)
    # Gone from the worker and staying gone: absent for 3 s in a row within 30 s (once,
    # the copy came back a second after it went: Kueue v0.19.2 re-dispatching the
    # deactivated Workload during its eviction, as above).
    seen: list[tuple[float, list[str]]] = []
    off_since: float | None = None
    while time.monotonic() - (seen[0][0] if seen else time.monotonic()) < 30:
        now, found = time.monotonic(), multikueue.worker_has(ns, second)
        seen.append((now, found))
        off_since = None if found else (off_since or now)
        if off_since is not None and now - off_since >= 3:
            break
        time.sleep(0.25)
    assert off_since is not None, seen
    assert seen[-1][0] - off_since >= 3, seen
    assert client.get_job(second).status is JobState.SUSPENDED  # the Workload stays off
    client.resume_job(second)
    assert _until(lambda: len(multikueue.worker_has(ns, second)) == 2, 30)
    assert client.delete_job(second)
    assert _until(lambda: not multikueue.worker_has(ns, second), 30)
    # The manager's Trainer never built a JobSet for either.
    jobsets = multikueue.manager._request(
        "GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets"
    )
    assert jobsets["items"] == []


def test_the_mapping_reaches_the_worker(
    multikueue: MultiKueuePair, multikueue_namespace: str, tmp_path: Path
) -> None:
    # The worker by a context of one kubeconfig holding both clusters (no Secret read).
    import yaml

    both = yaml.safe_load(multikueue.manager.kubeconfig.read_text())
    other = yaml.safe_load(multikueue.worker.kubeconfig.read_text())
    for key in ("clusters", "users", "contexts"):
        for item in other[key]:
            item["name"] = "w-" + item["name"]
            if key == "contexts":
                item["context"]["cluster"] = "w-" + item["context"]["cluster"]
                item["context"]["user"] = "w-" + item["context"]["user"]
            both[key].append(item)
    path = tmp_path / "both.kubeconfig"
    path.write_text(yaml.safe_dump(both))
    worker_context = other["contexts"][0]["name"]
    cfg = KubernetesConfig(
        kubeconfig=str(path),
        namespace=multikueue_namespace,
        # The Secret path is closed off: a namespace with no such Secret.
        kueue_namespace="default",
        multikueue_workers={multikueue.cluster: {"context": worker_context}},
    )
    with TrainerClient(cfg) as c:
        job, result = c.wait(c.submit(mk_spec(multikueue.queue, seconds=2)).job.name, timeout=120)
    assert job.worker is not None
    assert job.worker.reachable
    assert result == RESULT


def test_a_worker_out_of_reach_says_so_with_the_fix(
    multikueue: MultiKueuePair, multikueue_namespace: str, tmp_path: Path
) -> None:
    ns = multikueue_namespace
    # A tenant of the manager who may not read Kueue's Secrets.
    user = multikueue.manager.user_kubeconfig(
        ns,
        [
            {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["*"]},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods", "pods/log", "events"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]},
        ],
        tmp_path / "tenant.kubeconfig",
        cluster_rules=[
            {"apiGroups": ["trainer.kubeflow.org"],
             "resources": ["clustertrainingruntimes"], "verbs": ["get", "list"]},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["multikueueclusters"],
             "verbs": ["get"]},
        ],
    )  # fmt: skip
    secret_text = multikueue.worker.kubeconfig.read_text()
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("kf_trainer_core.backends.kubernetes.workers")
    logger.addHandler(handler)
    with TrainerClient(KubernetesConfig(kubeconfig=str(user))) as c:
        name = c.submit(mk_spec(multikueue.queue, seconds=2)).job.name
        job, _result = c.wait(name, timeout=120)  # on the manager's copied status
        assert job.status is JobState.COMPLETE
        assert job.worker is not None
        assert not job.worker.reachable
        problem = job.worker.problem or ""
        assert f"kueue-system/{multikueue.secret}" in problem
        assert "Fix:" in problem
        assert "multikueue_workers" in problem
        assert "get" in problem
        assert "secret" in problem
        got = c.get_job(name)
        assert got.status is JobState.COMPLETE
        assert got.worker == job.worker
        with pytest.raises(WorkerUnreachableError) as caught:
            list(c.get_job_logs(name))
        assert str(caught.value) == problem
    # Said once (a warning per client and worker), never with the worker's keys.
    logger.removeHandler(handler)
    told = [m for m in said if multikueue.cluster in m]
    assert len(told) == 1
    for text in (problem, repr(job), str(caught.value), told[0]):
        for line in secret_text.splitlines():
            if "data:" in line:
                assert line.split(":", 1)[1].strip()[:40] not in text

    # A mapped worker whose API server does not answer: the same, with that fix.
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(secret_text.replace(multikueue.worker.server, "https://127.0.0.1:9"))
    cfg = KubernetesConfig(
        kubeconfig=str(multikueue.manager.kubeconfig),
        namespace=ns,
        multikueue_workers={multikueue.cluster: {"kubeconfig": str(dead)}},
    )
    with TrainerClient(cfg) as c:
        seen = c.get_job(name)
    assert seen.status is JobState.COMPLETE
    assert seen.worker is not None
    assert not seen.worker.reachable
    assert "reaches the worker's API server" in (seen.worker.problem or "")


def test_the_cli_shows_the_worker(
    multikueue: MultiKueuePair,
    multikueue_namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kf_trainer_core.cli import main

    where = ["--kubeconfig", str(multikueue.manager.kubeconfig), "-n", multikueue_namespace]
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(
        json.dumps(mk_spec(multikueue.queue, seconds=3).model_dump(mode="json", exclude_none=True))
    )

    def cli(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([*args, *where])
        got = capsys.readouterr()
        return code, got.out, got.err

    code, out, err = cli("run", str(spec_file))
    assert code == 0, err
    assert "Complete in" in out
    assert f"result: {json.dumps(RESULT)}" in out
    # Its log was asked of the worker's kubelet (kwok serves none: the API server says so).
    assert any(
        line.startswith("[kf-trainer] log stream ended:") and KUBELET_LOG in line
        for line in out.splitlines()
    ), out
    (closing,) = [line for line in out.splitlines() if " in " in line and ": Complete" in line]
    name = closing.split(":", 1)[0].rsplit("/", 1)[-1]
    code, out, err = cli("jobs", "get", name)
    assert code == 0, err
    assert "Runs on" in out
    assert multikueue.cluster in out
    code, out, err = cli("jobs", "events", name)
    assert code == 0, err
    assert "Scheduled" in out  # the worker's scheduler placed its pods


def test_the_cli_cancels_a_multikueue_job_cleanly(
    multikueue: MultiKueuePair,
    multikueue_namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kf_trainer_core.cli import main

    ns = multikueue_namespace
    where = ["--kubeconfig", str(multikueue.manager.kubeconfig), "-n", ns]
    spec_file = tmp_path / "long.json"
    long_job = mk_spec(multikueue.queue, seconds=300, nodes=1, result=None)
    spec_file.write_text(json.dumps(long_job.model_dump(mode="json", exclude_none=True)))
    with multikueue.watching(ns) as seen:
        capsys.readouterr()
        assert main(["run", str(spec_file), "--detach", *where]) == 0
        name = capsys.readouterr().out.split(":", 1)[0].rsplit("/", 1)[-1]
        assert seen.on_worker.wait(60), seen
        assert main(["jobs", "cancel", name, *where]) == 0
        assert "cancelled (delete)" in capsys.readouterr().out
        # The manager's job goes with the cancel; MultiKueue removes the worker's copy.
        assert not any(n.startswith("trainjob/") for n in multikueue.manager_has(ns))
        assert multikueue.left_over(ns) == []
    assert f"trainjob/{name}" in seen.worker
    assert not seen.manager_jobsets  # the manager never ran it


def test_the_roles_kf_trainer_rbac_prints_are_enough_on_both_clusters(
    multikueue: MultiKueuePair, multikueue_namespace: str, tmp_path: Path
) -> None:
    # The manager's runner Role and ClusterRole, the worker's `--profile worker` Role,
    # exactly as printed: submit, follow on the worker, suspend (the Workload's
    # spec.active: `patch` on workloads), resume, delete.
    import yaml

    from kf_trainer_core.k8s import rbac

    ns = multikueue_namespace
    manager = multikueue.manager.user_kubeconfig(
        ns,
        rbac.rules_json(rbac.RUNNER_RULES),
        tmp_path / "runner.kubeconfig",
        cluster_rules=rbac.rules_json(rbac.CLUSTER_RULES),
        name="kf-runner",
    )
    (worker_role,) = rbac.manifests(ns, "worker")
    worker = multikueue.worker.user_kubeconfig(
        ns, worker_role["rules"], tmp_path / "reader.kubeconfig", name="kf-reader"
    )
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in worker_role["rules"])
    cfg = KubernetesConfig(
        kubeconfig=str(manager),
        namespace=ns,
        multikueue_workers={multikueue.cluster: {"kubeconfig": str(worker)}},
    )
    assert yaml.safe_load(worker.read_text())["users"]  # a token user of its own
    with TrainerClient(cfg) as c:
        job, result = c.wait(c.submit(mk_spec(multikueue.queue, seconds=2)).job.name, timeout=120)
        assert job.status is JobState.COMPLETE
        assert result == RESULT
        assert job.worker is not None
        assert job.worker.reachable, job.worker.problem

        held = c.submit(mk_spec(multikueue.queue, seconds=300, nodes=1, result=1)).job.name
        assert _until(lambda: len(multikueue.worker_has(ns, held)) == 2)
        assert [s.name for s in c.get_job(held).steps] == ["node-0"]  # read as the reader
        assert c.cancel_job(held, "suspend")
        assert _until(lambda: c.get_job(held).status is JobState.SUSPENDED, 30)
        assert _until(lambda: not multikueue.worker_has(ns, held), 30)
        c.resume_job(held)
        assert _until(lambda: len(multikueue.worker_has(ns, held)) == 2, 30)
        assert c.delete_job(held)
        assert _until(lambda: not multikueue.worker_has(ns, held), 30)
