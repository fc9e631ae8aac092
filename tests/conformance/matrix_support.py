"""The state x operation x permission matrix (issue 33): what every state-changing
operation of the suite does to a job in every state, as each kind of user, on both
servers (see ``test_state_matrix.py``).

:data:`EXPECTED` is the one statement of it: the test asserts each cell, and
``docs/safety.md`` shows the same table (:func:`markdown`; a test keeps the two equal).
Each cell reads ``outcome -> state``: what the call returned (or raised), then what
became of the job. ``task retry`` is the core's task lifecycle (:meth:`TaskJob.attach
<kf_trainer_core.tasks.lifecycle.TaskJob.attach>` through a ``SyncTaskJob``), as the
retry of every adapter's task calls it — an Airflow try, a Prefect task run, a KFP
component — with the task's identity; ``task retry named`` the same with a fixed name
(a ``Name`` option, as Airflow's ``job_name`` makes one) besides. Each adapter's own
tests hold it to the lifecycle (``tests/airflow/test_operator.py``,
``tests/prefect/test_prefect_retry_lifecycle.py``, ``tests/kfp/test_kfp_local_runs.py``).
Beyond its cell, every cell asserts that no pod of the job started
after the call (except where the cell says pods start, and where the Job controller's
own retries go on: a ``Restarting`` job left running), and that no condition the job
had was lost while it is kept.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance_support import Cluster
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kueue_support import gpu_job

from kf_trainer_core.base.marks import ATTEMPT_ANNOTATION
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL
from kf_trainer_core.cluster.status import JobState, job_state
from kf_trainer_core.errors import DeleteRefusedError, SpecConflictError
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.spec import CustomTrainer, Labels, Name, Retention, TrainJobSpec
from kf_trainer_core.tasks import SyncTaskJob, TaskJob

STATES = (
    "Created",
    "Running",
    "Suspended",
    "Complete",
    "Failed",
    "Restarting",
    "Deleting",
    "Queued",
    "Admitted",
)

#: The operations, each as a user calls it on a job of the cell's identity.
OPS = (
    "delete_job",
    "cancel delete",
    "cancel suspend",
    "cancel keep",
    "suspend_job",
    "resume_job",
    "stop_unfinished",
    "prune older_than",
    "prune keep_last",
    "prune retention",
    "submit fresh",
    "submit adopt",
    "task retry",
    "task retry named",
)
#: The operations that submit: one for a job held in deletion waits for it to go.
SUBMITS = ("submit fresh", "submit adopt", "task retry", "task retry named")

#: Users: ``admin`` (system:masters), ``runner`` (the Role ``kf-trainer rbac`` prints),
#: ``no-delete`` (that Role without ``delete`` on trainjobs), ``viewer`` (the viewer
#: profile: reads only).
USERS = ("admin", "runner", "no-delete", "viewer")

#: Which operations each user is tried with (admin and runner: all of them).
USER_OPS = {
    "admin": OPS,
    "runner": OPS,
    "no-delete": (
        "delete_job",
        "cancel delete",
        "cancel suspend",
        "suspend_job",
        "stop_unfinished",
        "prune older_than",
        "prune retention",
    ),
    "viewer": ("delete_job", "suspend_job", "prune older_than", "submit fresh"),
}

_UNFINISHED = ("Created", "Running", "Restarting", "Admitted")
#: The LocalQueue of the ``Queued`` jobs (on a server with Kueue).
MATRIX_QUEUE = "matrix"
#: The LocalQueue of the ``Admitted`` jobs: their ClusterQueue admits every one.
ADMITTED_QUEUE = "matrix-admitted"
#: The states that need Kueue (the others run on a cluster without it).
KUEUE_STATES = ("Queued", "Admitted")
_HELD = ("Suspended", "Queued")

#: What each operation does, by state, for a user who may do it (admin and runner).
_ALLOWED: dict[str, dict[str, str]] = {
    "delete_job": dict.fromkeys(STATES, "True -> gone")
    | {"Deleting": "True -> deleting, suspended"},
    "cancel delete": dict.fromkeys(STATES, "True -> gone")
    | {"Deleting": "True -> deleting, suspended"},
    "cancel suspend": dict.fromkeys(STATES, "True -> as before")
    | dict.fromkeys(_UNFINISHED, "True -> Suspended")
    | {"Deleting": "True -> deleting, suspended"},
    "cancel keep": dict.fromkeys(STATES, "False -> as before"),
    "suspend_job": dict.fromkeys(STATES, "job -> as before")
    | dict.fromkeys(_UNFINISHED, "job -> Suspended")
    | {"Deleting": "job -> deleting, suspended"},
    # A job Kueue holds is Kueue's to start (resume_job leaves it; Kueue would suspend
    # it again at once).
    "resume_job": dict.fromkeys(STATES, "job -> as before")
    | {"Suspended": "job -> runs (pods start)"},
    "stop_unfinished": dict.fromkeys((*_UNFINISHED, *_HELD), "[job] -> gone")
    | dict.fromkeys(("Complete", "Failed", "Deleting"), "[] -> as before"),
    "prune older_than": dict.fromkeys(STATES, "0 deleted -> as before")
    | dict.fromkeys(("Complete", "Failed"), "1 deleted -> gone"),
    "prune keep_last": dict.fromkeys(STATES, "0 deleted -> as before")
    | dict.fromkeys(("Complete", "Failed"), "1 deleted -> gone"),
    "prune retention": dict.fromkeys(STATES, "0 deleted -> as before")
    | dict.fromkeys(("Complete", "Failed"), "1 deleted -> gone"),
    "submit fresh": dict.fromkeys(STATES, "adopted -> as before")
    | {"Failed": "attempt 1 -> as before", "Deleting": "created again -> gone"},
    "submit adopt": dict.fromkeys(STATES, "adopted -> as before")
    | {"Deleting": "created again -> gone"},
    # A retry reattaches; resumes an attempt a killed try suspended (not a job Kueue
    # holds: resume_job leaves it to Kueue); submits a fresh attempt after a failure.
    "task retry": dict.fromkeys(STATES, "reattached -> as before")
    | {
        "Suspended": "resumed -> runs (pods start)",
        "Failed": "attempt 1 -> as before",
        "Deleting": "created again -> gone",
    },
    # A fixed name takes no attempt suffix: the failed job is deleted (the safe delete)
    # and the task's job made again under the name.
    "task retry named": dict.fromkeys(STATES, "reattached -> as before")
    | {
        "Suspended": "resumed -> runs (pods start)",
        "Failed": "replaced (pods start) -> gone",
        "Deleting": "created again -> gone",
    },
}

#: What a delete refused by RBAC leaves: nothing changed.
_REFUSED = "refused -> as before"
#: What another refused change leaves (the API server's 403, nothing changed).
_FORBIDDEN = "403 -> as before"


def expected(user: str, op: str, state: str) -> str:
    """The cell of :data:`EXPECTED`."""
    allowed = _ALLOWED[op][state]
    if user in ("admin", "runner"):
        return allowed
    deletes = op in ("delete_job", "cancel delete") or (
        op == "stop_unfinished" and state in (*_UNFINISHED, *_HELD)
    )
    prunes = op.startswith("prune") and state in ("Complete", "Failed")
    if user == "no-delete":
        return _REFUSED if deletes or prunes else allowed
    # viewer: reads only
    if deletes or prunes:
        return _REFUSED
    if op.startswith("prune"):
        return allowed  # nothing picked: nothing asked of the server but reads
    return _FORBIDDEN


EXPECTED: dict[tuple[str, str, str], str] = {
    (user, op, state): expected(user, op, state)
    for user in USERS
    for op in USER_OPS[user]
    for state in STATES
}


def markdown() -> str:
    """The admin/runner table of docs/safety.md: a row per operation, a column per state."""
    head = "| operation | " + " | ".join(STATES) + " |"
    rule = "| --- |" + " --- |" * len(STATES)
    rows = [
        f"| `{op}` | " + " | ".join(EXPECTED["runner", op, s] for s in STATES) + " |" for op in OPS
    ]
    return "\n".join([head, rule, *rows])


# ----------------------------------------------------------------------------- cells


@dataclass
class Cell:
    """One job of the matrix and what happened to it."""

    user: str
    op: str
    state: str
    identity: str
    spec: TrainJobSpec
    name: str = ""
    uid: str = ""
    conditions: set[str] = field(default_factory=set)
    started: float = 0.0
    ended: float = 0.0
    outcome: str = ""
    after: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.user, self.op, self.state)

    @property
    def pods_may_start(self) -> bool:
        """Whether pods of this job may start after the call: a resumed job runs, and
        the Job controller goes on retrying a failing job the call left running."""
        if "pods start" in EXPECTED[self.key] or "created again" in EXPECTED[self.key]:
            return True  # resumed, or another job under the name
        stopped = EXPECTED[self.key].endswith(("gone", "Suspended", "suspended"))
        return self.state == "Restarting" and not stopped


def specs(cluster: Cluster, state: str, runtime: Any, name: str | None = None) -> TrainJobSpec:
    """The spec of a job that will be in ``state``; every job carries a retention of 0 s
    (``prune retention`` finds finished ones due at once); ``name``: a fixed name."""
    spec = _spec_of(cluster, state, runtime)
    return spec if name is None else spec.with_options(Name(name))


def _spec_of(cluster: Cluster, state: str, runtime: Any) -> TrainJobSpec:
    retain = Retention(after_finished_seconds=0)
    if state == "Created":  # more GPUs than any node has: Pending for good
        trainer = CustomTrainer(cluster.spec().trainer.func, resources_per_node={"gpu": 9})
        return TrainJobSpec(trainer=trainer, options=[retain])
    if state == "Complete":
        return cluster.spec("succeed", retain)
    if state == "Failed":
        return cluster.spec("fail", retain, runtime=runtime)
    if state == "Restarting":  # the upstream runtime: the Job controller retries 6 times
        return cluster.spec("restart", retain, seconds=4)
    if state == "Queued":  # created running: Kueue's webhook holds it, quota never frees
        return gpu_job(cluster, MATRIX_QUEUE, gpus=1, behaviour="hold", extra=[retain])
    if state == "Admitted":  # Kueue's, admitted and running (it unsuspends it)
        return cluster.spec("hold", retain, Labels({QUEUE_NAME_LABEL: ADMITTED_QUEUE}))
    return cluster.spec("hold", retain)


HOLD_FINALIZER = "kf-trainer-suite.test/hold"


def bring(cluster: Cluster, admin: TrainerClient, cells: list[Cell], pool: Any) -> None:
    """Bring every cell's job into its state, as the admin: submit them all, then look
    at the whole namespace twice a second (two lists), acting on a job once it is
    Running where its state asks for it (suspend it; hold it in deletion)."""
    for cell, sub in zip(
        cells, pool.map(lambda c: admin.submit(c.spec, identity=c.identity), cells), strict=True
    ):
        cell.name, cell.uid = sub.job.name, sub.job.uid or ""
    api = cluster.api()
    custom = k8s.CustomObjectsApi(api)
    core = k8s.CoreV1Api(api)
    group = ("trainer.kubeflow.org", "v1alpha1", cluster.namespace, "trainjobs")

    def hold_in_deletion(name: str) -> None:
        custom.patch_namespaced_custom_object(
            *group, name, {"metadata": {"finalizers": [HOLD_FINALIZER]}}
        )
        custom.delete_namespaced_custom_object(
            *group, name, body={"propagationPolicy": "Background"}
        )

    pending = {c.name: c for c in cells}
    acted: set[str] = set()
    end = time.monotonic() + 240
    while pending:
        assert time.monotonic() < end, f"not reached: {sorted(c.key for c in pending.values())}"
        jobs = {
            o["metadata"]["name"]: o for o in custom.list_namespaced_custom_object(*group)["items"]
        }
        pods: dict[str, list[str]] = {}
        for pod in core.list_namespaced_pod(cluster.namespace).items:
            job = (pod.metadata.labels or {}).get("jobset.sigs.k8s.io/jobset-name", "")
            pods.setdefault(job, []).append(str(pod.status.phase))
        for name, cell in list(pending.items()):
            obj = jobs.get(name)
            if obj is None:
                continue
            status = job_state(obj)
            if cell.state in ("Suspended", "Deleting") and name not in acted:
                if status is JobState.RUNNING:
                    acted.add(name)
                    if cell.state == "Suspended":
                        pool.submit(admin.suspend_job, name)
                    else:
                        pool.submit(hold_in_deletion, name)
                continue
            reached = {
                "Created": status is JobState.CREATED and bool(pods.get(name)),
                "Running": status is JobState.RUNNING,
                "Admitted": status is JobState.RUNNING,
                "Suspended": status is JobState.SUSPENDED,
                "Queued": status is JobState.SUSPENDED,
                "Complete": status is JobState.COMPLETE,
                "Failed": status is JobState.FAILED,
                "Restarting": "Failed" in pods.get(name, []) and not status.terminal,
                "Deleting": bool(obj["metadata"].get("deletionTimestamp")),
            }[cell.state]
            if reached:
                cell.conditions = _true_conditions(obj)
                del pending[name]
        time.sleep(0.5)


def raw(custom: k8s.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any] | None:
    """The TrainJob as stored (``None`` when there is none)."""
    try:
        obj: dict[str, Any] = custom.get_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", name
        )
    except k8s.ApiException as err:
        if err.status == 404:
            return None
        raise
    return obj


def _true_conditions(obj: dict[str, Any]) -> set[str]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return {c["type"] for c in conditions if c.get("status") == "True"} - {"Suspended"}


def run_op(client: TrainerClient, cell: Cell, cluster: Cluster) -> str:
    """Perform the cell's operation as its user; the outcome as the table words it."""
    op, name = cell.op, cell.name
    try:
        if op == "delete_job":
            return str(client.delete_job(name))
        if op.startswith("cancel "):
            return str(client.cancel_job(name, op.split()[1]))  # type: ignore[arg-type]
        if op in ("suspend_job", "resume_job"):
            getattr(client, op)(name)
            return "job"
        if op == "stop_unfinished":
            done = client.stop_unfinished(identity=cell.identity, action="delete")
            return "[job]" if done == [name] else str(done)
        if op.startswith("prune "):
            rule = op.split()[1]
            options: dict[str, Any] = {"identity_prefix": cell.identity}
            if rule == "older_than":
                options["older_than"] = 0
            elif rule == "keep_last":
                options["keep_last"] = 0
            report = client.prune_jobs(**options)
            return f"{len(report.deleted)} deleted"
        if op.startswith("task retry"):
            return _retry(client, cell, cluster)
        fresh = op == "submit fresh"
        sub = client.submit(cell.spec, identity=cell.identity, fresh_after_failure=fresh)
        if sub.job.name == name and sub.job.uid == cell.uid:
            return "adopted"
        if sub.job.name == name:
            return "created again"
        annotations = (sub.obj.get("metadata") or {}).get("annotations") or {}
        return f"attempt {annotations.get(ATTEMPT_ANNOTATION)}" if sub.created else "other"
    except DeleteRefusedError:
        return "refused"
    except SpecConflictError:  # another job under the name: left alone
        return "conflict"
    except ApiError as err:
        return str(err.code)


def _retry(client: TrainerClient, cell: Cell, cluster: Cluster) -> str:
    """A task's retry as every adapter makes it: the lifecycle's submit-or-reattach,
    with the task's identity (and the fixed name its spec carries)."""
    task = TaskJob(cell.spec, identity=cell.identity)
    with SyncTaskJob(task, client.config, namespace=client.namespace) as held:
        got = held.attach()
    job = got.job
    if got.replaced:
        return "replaced (pods start)"
    if got.resumed:
        return "resumed"
    if not got.created:
        return "reattached" if job.uid == cell.uid else "other"
    if job.name == cell.name:
        return "created again"
    obj = raw(k8s.CustomObjectsApi(cluster.api()), cluster.namespace, job.name) or {}
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return f"attempt {annotations.get(ATTEMPT_ANNOTATION)}"


def state_after(cluster: Cluster, cell: Cell) -> str:
    """What became of the cell's job, as the table words it (read as stored)."""
    obj = raw(k8s.CustomObjectsApi(cluster.api()), cluster.namespace, cell.name)
    if obj is None or obj["metadata"].get("uid") != cell.uid:
        return "gone"
    suspended = bool((obj.get("spec") or {}).get("suspend"))
    if obj["metadata"].get("deletionTimestamp"):
        if suspended:
            return "deleting, suspended"
        return "as before" if cell.state == "Deleting" else "deleting"
    lost = cell.conditions - _true_conditions(obj)
    if lost:
        return f"lost {sorted(lost)}"
    status = job_state(obj)
    if status.terminal:
        return "as before" if status.value == cell.state else status.value
    if suspended or status is JobState.SUSPENDED:
        return "as before" if cell.state in _HELD else "Suspended"
    if cell.state in _HELD:
        return "runs (pods start)"
    return "as before" if cell.state in _UNFINISHED else status.value


# ----------------------------------------------------------------------------- pods


class PodWatch:
    """Every pod ADDED to the namespace from now on (job name, pod uid, when seen), and
    when each batch Job was halted (seen suspended or deleted)."""

    def __init__(self, cluster: Cluster) -> None:
        self.api = cluster.api()
        core = k8s.CoreV1Api(self.api)
        listing = core.list_namespaced_pod(cluster.namespace)
        self.before = {p.metadata.uid for p in listing.items}
        self.added: list[tuple[str, str, float, str, int]] = []
        #: A Job's uid -> the resourceVersion at which it was first seen halted.
        self.halted: dict[str, int] = {}
        self._stop = threading.Event()
        batch = k8s.BatchV1Api(self.api)
        jobs = batch.list_namespaced_job(cluster.namespace)
        for job in jobs.items:
            self._job_event("ADDED", job)
        self._threads = [
            threading.Thread(target=self._run, args=watched, daemon=True)
            for watched in (
                (core.list_namespaced_pod, cluster.namespace, listing, self._pod_event),
                (batch.list_namespaced_job, cluster.namespace, jobs, self._job_event),
            )
        ]
        for thread in self._threads:
            thread.start()

    def _run(
        self, lister: Callable[..., Any], namespace: str, listing: Any, on: Callable[..., None]
    ) -> None:
        rv = str(listing.metadata.resource_version)
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                stream = k8s_watch.Watch().stream(
                    lister,
                    namespace,
                    resource_version=rv,
                    timeout_seconds=1,
                    allow_watch_bookmarks=True,
                )
                for event in stream:
                    obj = event["object"]
                    rv = str(obj.metadata.resource_version or rv)
                    on(event["type"], obj)

    def _pod_event(self, kind: str, pod: Any) -> None:
        if kind != "ADDED" or pod.metadata.uid in self.before:
            return
        labels = pod.metadata.labels or {}
        job = labels.get("jobset.sigs.k8s.io/jobset-name", "")
        owner = next((o.uid for o in pod.metadata.owner_references or [] if o.kind == "Job"), "")
        created = int(pod.metadata.resource_version or 0)
        self.added.append((job, pod.metadata.uid, time.monotonic(), owner, created))
        self.before.add(pod.metadata.uid)

    def _job_event(self, kind: str, job: Any) -> None:
        halted = kind == "DELETED" or job.metadata.deletion_timestamp or job.spec.suspend
        if halted and job.metadata.uid not in self.halted:
            self.halted[job.metadata.uid] = int(job.metadata.resource_version or 0)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)

    def started_after(self, job: str, when: float) -> int:
        """The pods of ``job`` seen after ``when`` and created while their Job ran: a
        pod its Job controller created before it saw its Job suspended or deleted (the
        suspension travels down from the TrainJob: Trainer, JobSet, Job, seconds on a
        loaded machine) is the controllers' latency, not a restart. (A resourceVersion
        is opaque to clients; on one etcd it orders writes, which is all this asks.)"""
        return sum(
            1
            for name, _, seen, owner, created in self.added
            if name == job
            and seen > when
            and (owner not in self.halted or created > self.halted[owner])
        )


def timed(fn: Callable[[], str], cell: Cell) -> None:
    cell.started = time.monotonic()
    try:
        cell.outcome = fn()
    finally:
        cell.ended = time.monotonic()
