"""The rights the suite needs on a cluster, once: the Role a platform team grants the
identity the client runs as (a user, or the service account of an Airflow worker, a
Prefect worker or a KFP step), and the ClusterRole that reads ClusterTrainingRuntimes.

``kf-trainer rbac`` prints them as YAML to apply; ``docs/troubleshooting.md`` explains
each rule; the state x operation x permission tests (``tests/conformance``) run every
state-changing operation as a user bound to exactly these rules, on the test bed and on a
real control plane.

Three profiles:

``runner``
    Everything the suite does: submit, follow, suspend, resume, delete and prune jobs.
``worker``
    What the suite reads on a MultiKueue worker cluster (a Role only; docs/kueue.md).
``viewer``
    Reading only: ``jobs list/get/logs/events/wait`` and the sensors. Every state-changing
    operation is refused by the API server before it changes anything (a delete asks
    first, with a dry run: :func:`kf_trainer_core.programs.cancel.remove`).
"""

from __future__ import annotations

from typing import Any, Final

from kf_trainer_core.base.quoting import shown

#: A Role's rules: (API groups, resources, verbs) each.
Rule = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]

TRAINER: Final = "trainer.kubeflow.org"
READ: Final = ("get", "list", "watch")

#: What a runner needs in each namespace that runs jobs.
RUNNER_RULES: Final[tuple[Rule, ...]] = (
    # Submit (create), follow (get/list/watch), suspend, resume and the rerun's claim on
    # attempt 0 (patch), delete and prune (delete; a delete asks first with a dry run,
    # which needs the same verb).
    ((TRAINER,), ("trainjobs",), (*READ, "create", "patch", "delete")),
    # A job names its runtime; the builder reads it (namespaced TrainingRuntimes).
    ((TRAINER,), ("trainingruntimes",), ("get", "list")),
    # Steps, failures and logs.
    (("",), ("pods", "events"), READ),
    (("",), ("pods/log",), ("get",)),
    # A delete returns once the deleted job's JobSet is gone (without it: a fixed pause).
    (("jobset.x-k8s.io",), ("jobsets",), ("get",)),
    # Queue insight where Kueue runs (harmless where it does not); suspend and resume of
    # a job Kueue holds set its Workload's spec.active (Kueue undoes spec.suspend).
    (("kueue.x-k8s.io",), ("workloads",), ("get", "list", "patch")),
    (("kueue.x-k8s.io",), ("localqueues",), ("get", "list")),
    (("visibility.kueue.x-k8s.io",), ("localqueues/pendingworkloads",), ("get",)),
)

#: What the suite reads on a MultiKueue worker cluster, in the namespace of the jobs it
#: follows there (it writes nothing on a worker: Kueue copies the job there and back).
WORKER_RULES: Final[tuple[Rule, ...]] = (
    ((TRAINER,), ("trainjobs",), READ),
    (("",), ("pods", "events"), READ),
    (("",), ("pods/log",), ("get",)),
    (("jobset.x-k8s.io",), ("jobsets",), ("get",)),
)

#: What a viewer needs: the runner's reads, nothing that changes a job.
VIEWER_RULES: Final[tuple[Rule, ...]] = (
    ((TRAINER,), ("trainjobs",), READ),
    ((TRAINER,), ("trainingruntimes",), ("get", "list")),
    (("",), ("pods", "events"), READ),
    (("",), ("pods/log",), ("get",)),
    (("kueue.x-k8s.io",), ("workloads", "localqueues"), ("get", "list")),
    (("visibility.kueue.x-k8s.io",), ("localqueues/pendingworkloads",), ("get",)),
)

#: Cluster-scoped reads (a ClusterRole): the ClusterTrainingRuntimes every job may name,
#: and Kueue's ClusterQueues and pending-workload positions where Kueue runs.
CLUSTER_RULES: Final[tuple[Rule, ...]] = (
    ((TRAINER,), ("clustertrainingruntimes",), ("get", "list")),
    (("kueue.x-k8s.io",), ("clusterqueues",), ("get",)),
    (("visibility.kueue.x-k8s.io",), ("clusterqueues/pendingworkloads",), ("get",)),
)

PROFILES: Final = {"runner": RUNNER_RULES, "viewer": VIEWER_RULES, "worker": WORKER_RULES}


def rules_json(rules: tuple[Rule, ...]) -> list[dict[str, Any]]:
    """Rules as a Role's ``rules`` field."""
    return [
        {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}
        for groups, resources, verbs in rules
    ]


def manifests(
    namespace: str, profile: str = "runner", name: str = "kf-trainer-suite"
) -> list[dict[str, Any]]:
    """The Role (in ``namespace``) and the ClusterRole of ``profile``, to bind to the
    identity the client runs as (a RoleBinding in each namespace that runs jobs, a
    ClusterRoleBinding for the ClusterRole)."""
    if profile not in PROFILES:
        raise ValueError(
            f"unknown profile {shown(profile)}. Fix: use one of {', '.join(PROFILES)}."
        )
    rbac = "rbac.authorization.k8s.io/v1"
    suffix = "" if profile == "runner" else f"-{profile}"
    role = {
        "apiVersion": rbac,
        "kind": "Role",
        "metadata": {"name": f"{name}{suffix}", "namespace": namespace},
        "rules": rules_json(PROFILES[profile]),
    }
    if profile == "worker":
        return [role]  # nothing cluster-scoped is read on a worker
    cluster_role = {
        "apiVersion": rbac,
        "kind": "ClusterRole",
        "metadata": {"name": f"{name}-cluster-reads"},
        "rules": rules_json(CLUSTER_RULES),
    }
    return [role, cluster_role]


def allows(rules: tuple[Rule, ...], group: str, resource: str, verb: str) -> bool:
    """Whether ``rules`` grant ``verb`` on ``resource`` (``plural`` or
    ``plural/subresource``) of API ``group``, as RBAC decides (``*`` matches all)."""
    return any(
        (group in groups or "*" in groups)
        and (resource in resources or "*" in resources)
        and (verb in verbs or "*" in verbs)
        for groups, resources, verbs in rules
    )
