"""Every state-changing operation, in every state a job can be in, as every kind of user,
on both servers (issue 33): the cells of ``matrix_support.EXPECTED``, and beyond each
cell that no pod of the job started after the call and no condition it had was lost.

All jobs of one server are brought into their states together (one namespace, one job a
cell, each with an identity of its own), then every operation runs at once, each from
its user's client: ``admin``; ``runner``, a ServiceAccount bound to exactly the Role
``kf-trainer rbac`` prints; ``no-delete``, that Role without ``delete`` on trainjobs
(a refused delete must leave the job as it was: it used to leave it suspended, with no
pods); ``viewer``, the read-only profile. The real server enforces RBAC itself; the test
bed plays it from the same rules (``KubeTestServer.bind``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

from conformance_support import FAST, Cluster
from kubernetes import client as k8s
from kueue_support import GPU, Queues, gpu_job
from matrix_support import (
    ADMITTED_QUEUE,
    EXPECTED,
    KUEUE_STATES,
    MATRIX_QUEUE,
    STATES,
    SUBMITS,
    USER_OPS,
    Cell,
    PodWatch,
    bring,
    markdown,
    run_op,
    specs,
    state_after,
    timed,
)

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s import rbac

#: How long pods are watched for after the last operation: the real Trainer restarted a
#: pruned Failed job's pods every 2-3 s.
SETTLE = {"real": 8.0, "testbed": 1.5}
#: A job still being retried when it is suspended or deleted: the Job controller may
#: create the retry it had scheduled before it sees the suspension travel down from the
#: TrainJob (Trainer -> JobSet -> Job); the pod is removed at once. Seconds of that.
PROPAGATION = 5.0


def _rules(user: str) -> tuple[rbac.Rule, ...]:
    if user == "viewer":
        return rbac.VIEWER_RULES
    if user == "runner":
        return rbac.RUNNER_RULES
    # no-delete: the runner's Role with every verb but delete on trainjobs
    return tuple(
        (groups, resources, tuple(v for v in verbs if v != "delete"))
        if resources == ("trainjobs",)
        else (groups, resources, verbs)
        for groups, resources, verbs in rbac.RUNNER_RULES
    )


def user_config(cluster: Cluster, user: str, tmp: Path) -> KubernetesConfig:
    """A backend configuration that authenticates as ``user`` (bound to its rules)."""
    if user == "admin":
        return cluster.config()
    rules = _rules(user)
    path = tmp / f"kubeconfig-{user}"
    if cluster.cp is not None:
        cluster.cp.user_kubeconfig(
            cluster.namespace,
            rbac.rules_json(rules),
            path,
            cluster_rules=rbac.rules_json(rbac.CLUSTER_RULES),
            name=f"kf-{user}",
        )
    else:
        assert cluster.kube is not None
        token = uuid.uuid4().hex
        cluster.kube.bind(
            token,
            cluster.namespace,
            rules,
            cluster_rules=rbac.CLUSTER_RULES,
            user=f"system:serviceaccount:{cluster.namespace}:kf-{user}",
        )
        cluster.kube.kubeconfig(path, namespace=cluster.namespace, token=token)
    return KubernetesConfig(kubeconfig=str(path), watch_timeout=30, poll_interval=0.1)


def _release(cluster: Cluster, cells: list[Cell]) -> None:
    """Let the jobs held in deletion go (their finalizer removed)."""
    custom = k8s.CustomObjectsApi(cluster.api())
    for cell in cells:
        with contextlib.suppress(k8s.ApiException):
            custom.patch_namespaced_custom_object(
                "trainer.kubeflow.org",
                "v1alpha1",
                cluster.namespace,
                "trainjobs",
                cell.name,
                {"metadata": {"finalizers": None}},
            )


def test_every_operation_in_every_state_as_every_user(controllers: Cluster, tmp_path: Path) -> None:
    """Every state but Kueue's, on a cluster without Kueue."""
    cluster = controllers
    runtime = cluster.fast_fail_runtime()
    states = [s for s in STATES if s not in KUEUE_STATES]
    cells = _cells(cluster, states, runtime)
    assert len(cells) == len([k for k in EXPECTED if k[2] in states]) >= 120
    _run_matrix(cluster, cells, tmp_path)


def test_every_operation_on_jobs_kueue_holds_as_every_user(
    kueue_cluster: Cluster, tmp_path: Path
) -> None:
    """The jobs Kueue holds — the real Kueue on the real control plane, the simulated
    one on the test bed. ``Queued``: in a ClusterQueue whose GPUs a running job holds,
    so that no job of the column is admitted whatever the operations free.
    ``Admitted``: in one that admits every job of its column (Kueue undoes a
    ``spec.suspend`` set on such a job: the suite suspends it through its Workload)."""
    cluster = kueue_cluster
    queues = Queues(cluster)
    try:
        cq = queues.cluster_queue("matrix", {GPU: 4})
        queues.local_queue(MATRIX_QUEUE, cq)
        queues.local_queue(ADMITTED_QUEUE, queues.cluster_queue("matrix-admitted", {"cpu": 1000}))
        with TrainerClient(cluster.config(), retry=FAST) as admin:
            blocker = admin.submit(gpu_job(cluster, MATRIX_QUEUE, behaviour="hold")).job.name
            admin.wait(blocker, "Running", timeout=120)
        cells = _cells(cluster, list(KUEUE_STATES), None)
        assert len(cells) == len([k for k in EXPECTED if k[2] in KUEUE_STATES]) >= 60
        _run_matrix(cluster, cells, tmp_path)
    finally:
        queues.close()


def _cells(cluster: Cluster, states: list[str], runtime: Any) -> list[Cell]:
    return [
        Cell(
            user,
            op,
            state,
            identity=f"matrix/{user}/{op.replace(' ', '-')}/{state}",
            spec=specs(cluster, state, runtime, name=_fixed_name(user, op, state)),
        )
        for user, ops in USER_OPS.items()
        for op in ops
        for state in states
    ]


def _run_matrix(cluster: Cluster, cells: list[Cell], tmp_path: Path) -> None:
    clients = {
        user: TrainerClient(user_config(cluster, user, tmp_path), retry=FAST) for user in USER_OPS
    }
    admin = clients["admin"]
    deleting = [c for c in cells if c.state == "Deleting"]
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        try:
            bring(cluster, admin, cells, pool)
            watch = PodWatch(cluster)
            # A submit of an identity whose job is held in deletion waits for it to go.
            waiting = [c for c in deleting if c.op in SUBMITS and c.user in ("admin", "runner")]
            quick = [c for c in cells if c not in waiting]
            runs = {
                c.key: pool.submit(timed, partial(run_op, clients[c.user], c, cluster), c)
                for c in cells
            }
            concurrent.futures.wait([runs[c.key] for c in quick], timeout=240)
            for cell in quick:
                runs[cell.key].result(timeout=1)
                cell.after = state_after(cluster, cell)
            _release(cluster, deleting)
            concurrent.futures.wait([runs[c.key] for c in waiting], timeout=240)
            for cell in waiting:
                runs[cell.key].result(timeout=1)
                cell.after = state_after(cluster, cell)
            time.sleep(SETTLE[cluster.kind])
            watch.stop()
        finally:
            _release(cluster, deleting)
            for client in clients.values():
                client.close()
    wrong = [
        f"{c.user} / {c.op} / {c.state}: {c.outcome} -> {c.after} (expected {EXPECTED[c.key]})"
        for c in cells
        if f"{c.outcome} -> {c.after}" != EXPECTED[c.key]
    ]
    restarted = [
        f"{c.user} / {c.op} / {c.state}: {n} pod(s) of {c.name} started after the call"
        for c in cells
        if not c.pods_may_start and (n := watch.started_after(c.name, _since(c)))
    ]
    assert not wrong + restarted, f"{len(wrong + restarted)} of {len(cells)} cells:\n" + "\n".join(
        wrong + restarted
    )


def _fixed_name(user: str, op: str, state: str) -> str | None:
    """The fixed name of a cell whose task names its job (``task retry named``)."""
    return f"mx-{user}-{state.lower()}" if op == "task retry named" else None


def _since(cell: Cell) -> float:
    """From when no pod of the cell's job may start."""
    return cell.ended + PROPAGATION if cell.state == "Restarting" else cell.started


def test_docs_show_the_matrix() -> None:
    """docs/safety.md shows exactly the table the test asserts."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "safety.md"
    assert markdown() in docs.read_text(), "docs/safety.md: paste matrix_support.markdown()"
