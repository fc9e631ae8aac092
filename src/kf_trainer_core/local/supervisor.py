"""The local stand-in for the Trainer, JobSet and Job controllers and the kubelet:
one detached process per running TrainJob.

``python -m kf_trainer_core.local.supervisor <state_dir> <namespace> <name> <uid>``

It holds the job's lock while it runs (so anyone can tell it is alive), runs the
initializer steps, then the training nodes as local processes, and writes what a
cluster would: pods with container states, exit codes and termination messages, the
TrainJob's ``jobsStatus`` and ``Complete``/``Failed``/``Suspended`` conditions with the
Trainer's reasons, Events, and each container's log. It watches its job (a version
check every tick) and acts on deletion, suspension and ``activeDeadlineSeconds``.

It imports only the standard library and this package's standard-library modules: its
start-up time is part of every job's latency.
"""

from __future__ import annotations

import base64
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kf_trainer_core.local import checkpoints as local_checkpoints
from kf_trainer_core.local import launch
from kf_trainer_core.local._common import (
    ANCESTOR_LABEL,
    COMPLETION_INDEX_LABEL,
    INITIALIZERS,
    JOB_GLOBAL_INDEX_LABEL,
    JOB_INDEX_LABEL,
    JOB_NAME_LABEL,
    JOB_UID_ENV,
    JOBSET_API,
    JOBSET_NAME_LABEL,
    LAUNCHER,
    NAME_CHARS,
    NODE,
    ORIGINAL_PYTHONPATH_ENV,
    POD_ENV,
    REPLICATED_JOB_LABEL,
    REPLICATED_JOB_REPLICAS_LABEL,
    RESTART_ATTEMPT_LABEL,
    TERMINATION_LOG_ENV,
    TERMINATION_MESSAGE_LIMIT,
    TRAINER_API,
    WORKSPACE_ENV,
    Paths,
    micro_now,
    now_iso,
)
from kf_trainer_core.local.initializer import DEST_ENV, KIND_ENV
from kf_trainer_core.local.liveness import die_with_parent, mark_supervising, unmark_supervising
from kf_trainer_core.local.logs import LogWriter
from kf_trainer_core.local.procs import JobLock, kill_tree, signal_all
from kf_trainer_core.local.store import EVENTS, PODS, SECRETS, TRAINJOBS, Selector, Store, Tx
from kf_trainer_core.report import MARKER, parse_line

if TYPE_CHECKING:
    from kf_trainer_core.container.runner import PodRunner

JSON = dict[str, Any]

# The reasons and messages of the real controllers (kubeflow/trainer trainjob_types.go,
# jobset constants, the Job controller), as kf_trainer_core.testing.controller uses them.
R_SUSPENDED, M_SUSPENDED = "Suspended", "TrainJob is suspended"
R_RESUMED, M_RESUMED = "Resumed", "TrainJob is resumed"
R_DEADLINE, M_DEADLINE = "DeadlineExceeded", "TrainJob exceeded its active deadline"
JS_COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
JS_FAILED = ("FailedJobs", "jobset failed due to one or more job failures")
JS_SUSPENDED = ("SuspendedJobs", "jobset is suspended")
JS_RESUMED = ("ResumeJobs", "jobset is resumed")
JOB_BACKOFF = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")

#: Seconds between looks at the job's row (a version check: one indexed SELECT).
TICK = 0.02
#: How long log readers get to drain after a container's processes ended.
DRAIN_SECONDS = 2.0
#: A pod whose Secret is missing retries this often (as the kubelet does).
SECRET_RETRY_SECONDS = 1.0

_CRASHED = (
    "the local supervisor of this job stopped while the pod ran (killed, or the machine restarted)"
)
_STOPPED = (
    "the local supervisor of this job was stopped (SIGTERM, SIGINT: a shutdown) while the "
    "pod ran; its processes were stopped"
)


def _rand5() -> str:
    return "".join(random.choices(NAME_CHARS, k=5))


def _sub_uid(uid: str, what: str) -> str:
    # Stable uids for the JobSet and Jobs that exist only as event subjects here.
    return str(uuid.uuid5(uuid.UUID(uid), what)) if len(uid) == 36 else uid


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _oom_kills() -> int | None:
    """The OOM-kill count of this process's memory cgroup (v2 or v1), if readable:
    a SIGKILL while it grew was the kernel's OOM killer, which Kubernetes reports
    as ``OOMKilled``."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidates.append(Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events")
        elif "memory" in controllers.split(","):
            candidates.append(
                Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.oom_control"
            )
    for file in candidates:
        try:
            for entry in file.read_text().splitlines():
                key, _, value = entry.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


def container_status(
    name: str,
    image: str,
    *,
    waiting: JSON | None = None,
    running_since: str | None = None,
    terminated: JSON | None = None,
    container_id: str = "",
) -> JSON:
    status: JSON = {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": running_since is not None,
        "restartCount": 0,
        "started": running_since is not None,
    }
    if container_id:
        status["containerID"] = container_id
    if waiting is not None:
        status["state"] = {"waiting": waiting}
    elif terminated is not None:
        status["state"] = {"terminated": terminated}
    else:
        status["state"] = {"running": {"startedAt": running_since}}
    return status


def pod_conditions(now: str, *, ready: bool, reason: str | None = None) -> list[JSON]:
    def cond(kind: str, ok: bool) -> JSON:
        c: JSON = {
            "type": kind,
            "status": "True" if ok else "False",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        if not ok and reason:
            c["reason"] = reason
        return c

    done = reason in ("PodCompleted", "PodFailed")
    return [
        cond("PodReadyToStartContainers", ready or done),
        cond("Initialized", True),
        cond("Ready", ready),
        cond("ContainersReady", ready),
        cond("PodScheduled", True),
    ]


@dataclass
class PodRun:
    """One pod of the job and what runs in it."""

    name: str
    rjob: str
    index: int
    container: str
    image: str
    obj: JSON
    launches: list[launch.Launch] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = "."
    term_file: Path | None = None
    log: LogWriter | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=80))
    first_lines: list[str] = field(default_factory=list)
    started_at: str | None = None
    waiting_since: float | None = None  # pending on a missing Secret
    finished: bool = False
    exit_code: int | None = None
    oom_before: int | None = None
    #: Set when the pod could not start (bad command): (reason, message).
    start_error: tuple[str, str] | None = None
    shape: launch.NodeShape | None = None
    #: The latest trainer status its function printed (report's marker lines), and how
    #: many it printed: the supervisor writes it into the TrainJob's status.
    progress: JSON | None = None
    progress_seq: int = 0
    #: The container's id (``docker://…``) when a pod runner runs it, else "".
    runtime_id: str = ""

    def take_line(self, line: str, prefix: str = "") -> None:
        """One line of the pod's output, from a process or a container alike: kept for
        failure messages, a progress report (report's marker) noted for the job's
        status, and written to the pod's log."""
        self.tail.append(line)
        if MARKER in line:
            status = parse_line(line)
            if status is not None and "lastUpdatedTime" in status:
                self.progress = status
                self.progress_seq += 1
        if self.log is not None:
            self.log.write(prefix + line if prefix else line)

    @property
    def pgids(self) -> list[int]:
        return [p.pid for p in self.procs]

    @property
    def running(self) -> bool:
        return (bool(self.procs) or bool(self.runtime_id)) and not self.finished


class Supervisor:
    """Runs one TrainJob to its end (or until it is suspended or deleted)."""

    def __init__(self, paths: Paths, namespace: str, name: str, uid: str) -> None:
        self.paths = paths
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.store = Store(paths.db)
        self.job: JSON = {}
        self.job_rv: int | None = None
        self.plan: JSON = {}
        self.pods: dict[str, PodRun] = {}
        #: Per pod: how many of its progress reports are in the job's status.
        self.progress_published: dict[str, int] = {}
        self.stop = threading.Event()
        self.deadline: float | None = None
        self.workspace = paths.workspace(namespace, name, uid)
        self.run_dir = paths.run_dir(uid)
        self.host = socket.gethostname()
        self.rjobs: list[str] = []
        #: Pods each replicated job runs (its Job's completions).
        self.expected: dict[str, int] = {}
        self._event_seq = 0
        self._python = sys.executable
        self._policy = "torch"
        self._runner: PodRunner | None = None

    @property
    def runner(self) -> PodRunner | None:
        """What runs the pods when they are not this machine's processes (containers:
        :mod:`kf_trainer_core.container.runner`), decided by the job's plan; made on
        first use, so that whoever loads the plan — a run, or a repair after this
        job's supervisor died — stops and removes the same pods."""
        if self._runner is None and self.plan.get("container"):
            from kf_trainer_core.container.runner import ContainerRunner

            self._runner = ContainerRunner(
                dict(self.plan["container"]),
                namespace=self.namespace,
                name=self.name,
                uid=self.uid,
                workspace=self.workspace,
                run_dir=self.run_dir,
                cwd=self._cwd(),
            )
        return self._runner

    # ------------------------------------------------------------------ reading

    @property
    def spec(self) -> JSON:
        return dict(self.job.get("spec") or {})

    def _load(self) -> bool:
        rv = self.store.get_rv(TRAINJOBS, self.namespace, self.name)
        if rv is None:
            self.job, self.job_rv = {}, None
            return False
        if rv != self.job_rv:
            obj = self.store.get(TRAINJOBS, self.namespace, self.name)
            if obj is None:
                self.job, self.job_rv = {}, None
                return False
            self.job, self.job_rv = obj, rv
        return (self.job.get("metadata") or {}).get("uid") == self.uid

    def control(self) -> str | None:
        """What happened since the last look: ``gone`` (the job or its uid), ``delete``,
        ``suspend``, ``deadline``, or ``stopped`` (this process got SIGTERM with no
        reason in the job: a shutdown). ``None``: carry on."""
        if not self._load():
            return "gone"
        if (self.job.get("metadata") or {}).get("deletionTimestamp"):
            return "delete"
        if self.spec.get("suspend"):
            return "suspend"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "deadline"
        if self.stop.is_set():
            return "stopped"
        return None

    def _conditions(self) -> list[JSON]:
        return list((self.job.get("status") or {}).get("conditions") or [])

    def _terminal(self) -> bool:
        return any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in self._conditions()
        )

    def _suspended_condition(self) -> bool:
        return any(
            c.get("type") == "Suspended" and c.get("status") == "True" for c in self._conditions()
        )

    def _existing_pods(self) -> list[JSON]:
        with self.store.read() as tx:
            return [
                p
                for p in tx.select(PODS, Selector(self.namespace), f"{self.name}-")
                if ((p.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME_LABEL)
                == self.name
            ]

    # ------------------------------------------------------------------ writing

    def _event(
        self,
        tx: Tx,
        kind: str,
        name: str,
        type_: str,
        reason: str,
        message: str,
        component: str,
        *,
        uid: str = "",
        field_path: str | None = None,
    ) -> None:
        api = {"TrainJob": TRAINER_API, "JobSet": JOBSET_API, "Job": "batch/v1"}.get(kind, "v1")
        uid = uid or {
            "TrainJob": self.uid,
            "JobSet": _sub_uid(self.uid, "jobset"),
            "Job": _sub_uid(self.uid, name),
        }.get(kind, "")
        involved: JSON = {
            "apiVersion": api,
            "kind": kind,
            "name": name,
            "namespace": self.namespace,
            "uid": uid,
        }
        if field_path:
            involved["fieldPath"] = field_path
        self._event_seq += 1
        now = now_iso()
        source: JSON = {"component": component}
        if component == "kubelet":
            source["host"] = self.host
        tx.create(
            EVENTS,
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{name}.{time.time_ns() + self._event_seq:x}",
                    "namespace": self.namespace,
                },
                "involvedObject": involved,
                "reason": reason,
                "message": message,
                "type": type_,
                "count": 1,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "eventTime": micro_now(),
                "source": source,
                "reportingComponent": component,
                "reportingInstance": self.host if component == "kubelet" else component,
            },
        )

    def _job_event(self, tx: Tx, rjob: str, type_: str, reason: str, message: str) -> None:
        self._event(tx, "Job", f"{self.name}-{rjob}-0", type_, reason, message, "job-controller")

    def _jobset_event(self, tx: Tx, type_: str, reason: str, message: str) -> None:
        self._event(tx, "JobSet", self.name, type_, reason, message, "jobset")

    def _pod_event(self, tx: Tx, pod: PodRun, type_: str, reason: str, message: str) -> None:
        self._event(
            tx,
            "Pod",
            pod.name,
            type_,
            reason,
            message,
            "kubelet",
            uid=str((pod.obj.get("metadata") or {}).get("uid", "")),
            field_path=f"spec.containers{{{pod.container}}}",
        )

    def _update_job(self, tx: Tx, fn: Any) -> None:
        """Change the job's status in ``tx`` (if it is still this job)."""
        obj = tx.get(TRAINJOBS, self.namespace, self.name)
        if obj is None or (obj.get("metadata") or {}).get("uid") != self.uid:
            return
        status = dict(obj.get("status") or {})
        fn(status)
        obj["status"] = status
        tx.put(TRAINJOBS, obj)
        self.job = obj
        self.job_rv = tx.rv

    @staticmethod
    def _set_condition(status: JSON, kind: str, value: str, reason: str, message: str) -> None:
        conditions = list(status.get("conditions") or [])
        now = now_iso()
        for cond in conditions:
            if cond.get("type") == kind:
                if cond.get("status") != value:
                    cond["status"] = value
                    cond["lastTransitionTime"] = now
                cond["reason"], cond["message"] = reason, message
                break
        else:
            conditions.append(
                {
                    "type": kind,
                    "status": value,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now,
                }
            )
        status["conditions"] = conditions

    def _jobs_status(self, suspended: bool = False) -> list[JSON]:
        """``status.jobsStatus``: per replicated job, counts of its (one) Job."""
        out = []
        for rjob in self.rjobs:
            pods = [p for p in self.pods.values() if p.rjob == rjob]
            expected = self.expected.get(rjob, 0)
            counts = {
                "name": rjob,
                "active": 0,
                "ready": 0,
                "succeeded": 0,
                "failed": 0,
                "suspended": 0,
            }
            if suspended and not (pods and all(p.exit_code == 0 for p in pods)):
                counts["suspended"] = 1
            elif any(p.finished and p.exit_code != 0 for p in pods):
                counts["failed"] = 1
            elif pods and len(pods) >= expected and all(p.finished for p in pods):
                counts["succeeded"] = 1
            elif pods:
                counts["active"] = 1 if any(not p.finished for p in pods) else 0
                started = [p for p in pods if p.running or (p.finished and p.exit_code == 0)]
                counts["ready"] = 1 if len(started) >= expected else 0
            out.append(counts)
        return out

    def _write_jobs_status(self, tx: Tx, suspended: bool = False) -> None:
        jobs = self._jobs_status(suspended)

        def fn(status: JSON) -> None:
            status["jobsStatus"] = jobs

        self._update_job(tx, fn)

    # ------------------------------------------------------------------ the run

    def run(self) -> None:
        if not self._load():
            return
        self.plan = self.store.get_plan(self.uid) or {}
        runtime = self.plan.get("runtime") or {}
        self.rjobs = list(runtime.get("replicated_jobs") or [NODE])
        if (self.job.get("metadata") or {}).get("deletionTimestamp"):
            self.purge()
            return
        if self._terminal() or self.plan.get("runtime_error"):
            return
        stale = [
            p
            for p in self._existing_pods()
            if (p.get("status") or {}).get("phase") in ("Pending", "Running", None)
        ]
        if stale:
            self.recover(stale)
            return
        while True:
            if self.spec.get("suspend"):
                self.ensure_suspended()
                return
            outcome = self.execute()
            if outcome != "suspend":
                return
            # Suspended: if it was resumed meanwhile, run again (this process holds
            # the lock, so a supervisor spawned by the resume waits for us).
            if not self._load() or self.spec.get("suspend"):
                return

    def execute(self) -> str:
        """Run the job's steps; return how it ended."""
        spec = self.spec
        trainer = dict(spec.get("trainer") or {})
        runtime = dict(self.plan.get("runtime") or {})
        policy = str(runtime.get("policy") or "torch")
        nnodes = int(trainer.get("numNodes") or runtime.get("num_nodes") or 1)
        mpi = policy == "mpi"
        init = dict(spec.get("initializer") or {})
        kept = {
            str((p.get("metadata") or {}).get("labels", {}).get(REPLICATED_JOB_LABEL)): p
            for p in self._existing_pods()
            if (p.get("status") or {}).get("phase") == "Succeeded"
        }
        # The initializers the job asks for (the builder checked the runtime has them).
        init_steps = [r for r in INITIALIZERS if init.get(r.split("-")[0])]
        if mpi:
            # The launcher is node 0 (runLauncherAsNode), the node pods the others.
            trainer_pods = [(LAUNCHER, 0, 0)] + [(NODE, i, i + 1) for i in range(nnodes - 1)]
        else:
            trainer_pods = [(NODE, i, i) for i in range(nnodes)]
        self.rjobs = list(init_steps)
        for rjob in (LAUNCHER, NODE):
            if any(p[0] == rjob for p in trainer_pods):
                self.rjobs.append(rjob)
        self.expected = dict.fromkeys(init_steps, 1)
        for rjob, _, _ in trainer_pods:
            self.expected[rjob] = self.expected.get(rjob, 0) + 1
        # Initializer pods that succeeded before a suspension are kept and not re-run.
        for rjob, pod in kept.items():
            if rjob in INITIALIZERS:
                self.pods[pod["metadata"]["name"]] = PodRun(
                    pod["metadata"]["name"], rjob, 0, rjob, "", pod, finished=True, exit_code=0
                )

        ads = spec.get("activeDeadlineSeconds")
        if isinstance(ads, (int, float)) and ads > 0:
            self.deadline = time.monotonic() + float(ads)
        self.workspace.mkdir(parents=True, exist_ok=True)
        (self.workspace / "dataset").mkdir(exist_ok=True)
        (self.workspace / "model").mkdir(exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)

        with self.store.write() as tx:
            if self._suspended_condition():

                def resumed(status: JSON) -> None:
                    self._set_condition(status, "Suspended", "False", R_RESUMED, M_RESUMED)

                self._update_job(tx, resumed)
                self._jobset_event(tx, "Normal", *JS_RESUMED)
            self._write_jobs_status(tx)

        todo = [r for r in init_steps if r not in kept]
        if todo:
            pods = [self.initializer_pod(r, init[r.split("-")[0]]) for r in todo]
            outcome = self.run_pods(pods)
            if outcome is not None:
                return self.finish(outcome)

        program = launch.parse_trainer(
            list(trainer.get("command") or runtime.get("command") or []),
            list(trainer.get("args") or runtime.get("args") or []),
        )
        pods = self.trainer_pods(trainer, runtime, program, trainer_pods, nnodes)
        outcome = self.run_pods(pods, prepare=program)
        return self.finish(outcome or "complete")

    # ------------------------------------------------------------------ pods

    def _pod_object(
        self,
        rjob: str,
        index: int,
        container: JSON,
    ) -> JSON:
        job_name = f"{self.name}-{rjob}-0"
        labels = {
            JOBSET_NAME_LABEL: self.name,
            REPLICATED_JOB_LABEL: rjob,
            REPLICATED_JOB_REPLICAS_LABEL: "1",
            JOB_INDEX_LABEL: "0",
            JOB_GLOBAL_INDEX_LABEL: str(self.rjobs.index(rjob) if rjob in self.rjobs else 0),
            RESTART_ATTEMPT_LABEL: "0",
            JOB_NAME_LABEL: job_name,
            "job-name": job_name,
            COMPLETION_INDEX_LABEL: str(index),
        }
        trainer_step = LAUNCHER if LAUNCHER in self.rjobs else NODE
        if rjob in INITIALIZERS:
            labels[ANCESTOR_LABEL] = rjob
        elif rjob == trainer_step:
            labels[ANCESTOR_LABEL] = "trainer"
        now = now_iso()
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job_name}-{index}-{_rand5()}",
                "namespace": self.namespace,
                "labels": labels,
                "annotations": {COMPLETION_INDEX_LABEL: str(index)},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job_name,
                        "uid": _sub_uid(self.uid, job_name),
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "containers": [container],
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 5,
                "hostname": f"{job_name}-{index}",
                "subdomain": self.name,
                "nodeName": self.host,
            },
            "status": {
                "phase": "Pending",
                "hostIP": "127.0.0.1",
                "startTime": now,
                "qosClass": "BestEffort",
                "conditions": pod_conditions(now, ready=False, reason="ContainersNotReady"),
                "containerStatuses": [
                    container_status(
                        str(container["name"]),
                        str(container.get("image", "")),
                        waiting={"reason": "ContainerCreating"},
                    )
                ],
            },
        }

    def _base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        original = env.pop(ORIGINAL_PYTHONPATH_ENV, None)
        if original is not None:
            if original:
                env["PYTHONPATH"] = original
            else:
                env.pop("PYTHONPATH", None)
        for key in list(env):
            if key.startswith("PET_") or key in launch.RANK_VARIABLES:
                del env[key]
        env["PYTHONUNBUFFERED"] = "1"
        env[WORKSPACE_ENV] = str(self.workspace)
        env[JOB_UID_ENV] = self.uid
        return env

    def _cwd(self) -> str:
        cwd = str(self.plan.get("cwd") or "")
        return cwd if cwd and os.path.isdir(cwd) else str(self.workspace)

    def initializer_pod(self, rjob: str, entry: JSON) -> PodRun:
        kind = rjob.split("-")[0]
        env_list = [{"name": "STORAGE_URI", "value": str(entry.get("storageUri", ""))}]
        env_list += list(entry.get("env") or [])
        container: JSON = {
            "name": rjob,
            "image": "local/kf-trainer-initializer",
            "command": [sys.executable, "-m", "kf_trainer_core.local.initializer"],
            "env": env_list,
        }
        secret = (entry.get("secretRef") or {}).get("name")
        if secret:
            container["envFrom"] = [{"secretRef": {"name": secret}}]
        obj = self._pod_object(rjob, 0, container)
        pod = PodRun(obj["metadata"]["name"], rjob, 0, rjob, container["image"], obj)
        env = dict(os.environ)  # the supervisor's: PYTHONPATH finds this package
        env.pop(ORIGINAL_PYTHONPATH_ENV, None)
        env.update({WORKSPACE_ENV: str(self.workspace), JOB_UID_ENV: self.uid})
        env.update(
            {
                KIND_ENV: kind,
                DEST_ENV: str(self.workspace / kind),
                "PYTHONUNBUFFERED": "1",
            }
        )
        pod.env = env
        pod.cwd = self._cwd()
        pod.launches = [launch.Launch(list(container["command"]))]
        return pod

    def trainer_pods(
        self,
        trainer: JSON,
        runtime: JSON,
        program: launch.TrainerProgram,
        layout: list[tuple[str, int, int]],
        nnodes: int,
    ) -> list[PodRun]:
        policy = str(runtime.get("policy") or "torch")
        nproc = launch.procs_per_node(
            trainer.get("numProcPerNode"), runtime.get("num_proc_per_node")
        )
        python = str(self.plan.get("python") or sys.executable)
        image = str(trainer.get("image") or runtime.get("image") or "local/python")
        port = launch.free_port()
        base = self._base_env()
        pods = []
        for rjob, index, node_rank in layout:
            shape = launch.NodeShape(
                node_rank=node_rank,
                nnodes=nnodes,
                nproc=nproc,
                master_port=port,
                completion_index=index,
                mpi=policy == "mpi",
            )
            shown_env = list(trainer.get("env") or [])
            shown_env += [{"name": k, "value": v} for k, v in launch.node_env(shape).items()]
            container: JSON = {
                "name": NODE,
                "image": image,
                "command": list(trainer.get("command") or runtime.get("command") or []),
                "env": shown_env,
            }
            if trainer.get("args"):
                container["args"] = list(trainer["args"])
            if trainer.get("resourcesPerNode"):
                container["resources"] = trainer["resourcesPerNode"]
            obj = self._pod_object(rjob, index, container)
            pod = PodRun(obj["metadata"]["name"], rjob, index, NODE, image, obj)
            pod.env = {**base, **launch.node_env(shape), POD_ENV: pod.name}
            pod.cwd = self._cwd()
            pod.launches = []  # decided once the program is prepared
            pod.first_lines = [
                f"kf-trainer-local: warning: {w}" for w in self.plan.get("warnings") or []
            ]
            pod.shape = shape
            pods.append(pod)
        self._python = python
        self._policy = policy
        return pods

    def _prepare_trainer(self, pods: list[PodRun], program: launch.TrainerProgram) -> None:
        """Write the program, choose interpreter and launcher, fill each pod's
        processes. Failures become the pods' failures."""
        python = self._python
        lead = pods[0]
        program_file: str | None = None
        if program.kind == "function":
            if program.packages:
                if self.plan.get("use_venv"):
                    from kf_trainer_core.local.venv import ensure_venv

                    assert lead.log is not None
                    python = ensure_venv(
                        self.paths.venvs,
                        python,
                        program.packages,
                        program.index_urls,
                        lead.log.write,
                        # Marked with the job: cancelling it stops a long install too.
                        env={**os.environ, JOB_UID_ENV: self.uid},
                    )
                else:
                    missing = _missing_distributions(program.packages)
                    if missing:
                        for pod in pods:
                            assert pod.log is not None
                            pod.log.write(
                                "kf-trainer-local: warning: packages_to_install are not "
                                f"installed here and the local backend does not install them "
                                f"(missing: {', '.join(missing)}); it runs {python}. Fix: "
                                "install them, or LocalConfig(use_venv=True)."
                            )
            text = launch.map_program_args(program.program, str(self.workspace))
            path = self.run_dir / f"kf_trainer_{program.func_name}.py"
            path.write_text(text)
            program_file = str(path)
        use_torchrun = (
            program.kind == "function"
            and self._policy == "torch"
            and launch.torch_importable(python, sys.executable)
        )
        bindir = os.path.dirname(python)
        for pod in pods:
            assert pod.shape is not None
            shape = pod.shape
            pod.env["PATH"] = bindir + os.pathsep + pod.env.get("PATH", os.defpath)
            pod.launches = launch.node_launches(program, program_file, python, shape, use_torchrun)

    # ------------------------------------------------------------------ running pods

    def run_pods(
        self, pods: list[PodRun], prepare: launch.TrainerProgram | None = None
    ) -> str | None:
        """Create, start and watch ``pods``; ``None`` when all succeeded, else the
        outcome (``failed:<pod>``, ``delete``, ``suspend``, ...)."""
        if self.runner is not None:
            for pod in pods:
                self.runner.shape(pod)
        with self.store.write() as tx:
            for pod in pods:
                for _ in range(5):
                    if tx.get(PODS, self.namespace, pod.name) is None:
                        break
                    pod.name = pod.obj["metadata"]["name"] = (
                        pod.name.rsplit("-", 1)[0] + "-" + _rand5()
                    )
                created = tx.create(PODS, pod.obj)
                pod.obj = created
                self.pods[pod.name] = pod
                self._job_event(
                    tx, pod.rjob, "Normal", "SuccessfulCreate", f"Created pod: {pod.name}"
                )
                self._pod_event_scheduled(tx, pod)
            self._write_jobs_status(tx)
        for pod in pods:
            pod.log = LogWriter(
                self.paths.log(self.namespace, pod.name, pod.container),
                self.paths.log_done(self.namespace, pod.name, pod.container),
            )
            for line in pod.first_lines:
                pod.log.write(line)
        if prepare is not None and self.runner is None:
            try:
                self._prepare_trainer(pods, prepare)
            except Exception as exc:  # e.g. a venv that cannot be built: the nodes fail
                for pod in pods:
                    pod.start_error = (
                        "Error",
                        f"kf-trainer-local: preparing the trainer failed: {exc}",
                    )
        for pod in pods:
            self.start_pod(pod)
        while True:
            self._publish_progress(pods)
            outcome = self.control()
            if outcome is not None:
                return outcome
            for pod in pods:
                if pod.waiting_since is not None:
                    if time.monotonic() - pod.waiting_since >= SECRET_RETRY_SECONDS:
                        self.start_pod(pod)
                elif not pod.finished:
                    self.poll_pod(pod)
            failed = [p for p in pods if p.finished and p.exit_code != 0]
            if failed:
                self._publish_progress(pods)
                return f"failed:{failed[0].name}"
            if all(p.finished for p in pods):
                self._publish_progress(pods)  # the last report, before Complete
                return None
            self.stop.wait(TICK)

    def _publish_progress(self, pods: list[PodRun]) -> None:
        """Write the newest trainer status a pod printed as ``status.trainerStatus``,
        as the Trainer's status server would: here the log is the channel."""
        fresh = [p for p in pods if p.progress_seq > self.progress_published.get(p.name, 0)]
        if not fresh:
            return
        for pod in fresh:
            self.progress_published[pod.name] = pod.progress_seq
        status = fresh[0].progress
        if status is None:
            return

        def fn(job_status: JSON) -> None:
            job_status["trainerStatus"] = dict(status)

        with self.store.write() as tx:
            self._update_job(tx, fn)

    def _pod_event_scheduled(self, tx: Tx, pod: PodRun) -> None:
        self._event(
            tx,
            "Pod",
            pod.name,
            "Normal",
            "Scheduled",
            f"Successfully assigned {self.namespace}/{pod.name} to {self.host}",
            "default-scheduler",
            uid=str((pod.obj.get("metadata") or {}).get("uid", "")),
        )

    def _resolve_env(self, pod: PodRun) -> tuple[dict[str, str], str | None]:
        """The container's env with Secrets read from the local store; an error text
        (the kubelet's) when one is missing."""
        container = pod.obj["spec"]["containers"][0]
        out: dict[str, str] = {}
        with self.store.read() as tx:
            for src in container.get("envFrom") or []:
                ref = (src.get("secretRef") or {}).get("name")
                if not ref:
                    continue
                secret = tx.get(SECRETS, self.namespace, str(ref))
                if secret is None:
                    if (src.get("secretRef") or {}).get("optional"):
                        continue
                    return out, f'secret "{ref}" not found'
                out.update(_secret_data(secret))
            for entry in container.get("env") or []:
                name = str(entry.get("name"))
                if "value" in entry:
                    out[name] = str(entry["value"])
                    continue
                ref = (entry.get("valueFrom") or {}).get("secretKeyRef")
                if ref is None:
                    continue
                secret = tx.get(SECRETS, self.namespace, str(ref.get("name")))
                data = _secret_data(secret) if secret is not None else None
                if data is None or str(ref.get("key")) not in data:
                    if ref.get("optional"):
                        continue
                    if data is None:
                        return out, f'secret "{ref.get("name")}" not found'
                    return out, (
                        f"couldn't find key {ref.get('key')} in Secret "
                        f"{self.namespace}/{ref.get('name')}"
                    )
                out[name] = data[str(ref["key"])]
        return out, None

    def start_pod(self, pod: PodRun) -> None:
        """Start the pod's processes (or record why it cannot start)."""
        assert pod.log is not None
        env_values, error = self._resolve_env(pod)
        if error is not None and pod.start_error is None:
            first = pod.waiting_since is None
            pod.waiting_since = time.monotonic()
            if first:
                with self.store.write() as tx:
                    self._set_pod_waiting(
                        tx, pod, {"reason": "CreateContainerConfigError", "message": error}
                    )
                    self._pod_event(tx, pod, "Warning", "Failed", f"Error: {error}")
            return
        pod.waiting_since = None
        if pod.rjob not in INITIALIZERS:  # every attempt of the identity shares it
            env_values.update(
                local_checkpoints.trainer_env(self.paths.root, self.namespace, self.job)
            )
        env = {**pod.env, **env_values}
        term = self.run_dir / f"{pod.name}.termination-log"
        with contextlib.suppress(FileNotFoundError):
            term.unlink()
        pod.term_file = term
        env[TERMINATION_LOG_ENV] = str(term)
        env[POD_ENV] = pod.name
        pod.oom_before = _oom_kills()
        if pod.start_error is None and self.runner is not None:
            self.runner.start(pod, env_values)
        elif pod.start_error is None:
            try:
                for item in pod.launches:
                    proc = subprocess.Popen(
                        item.argv,
                        env={**env, **item.env},
                        cwd=pod.cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        # A session per rank: its process group is the pod's to kill.
                        start_new_session=True,
                        close_fds=True,
                        # ...and, being out of our group, it would outlive a SIGKILLed
                        # supervisor: the kernel kills it with us (see local.liveness).
                        preexec_fn=die_with_parent(),
                    )
                    pod.procs.append(proc)
                    reader = threading.Thread(
                        target=_pump, args=(proc, pod, item.prefix), daemon=True
                    )
                    reader.start()
                    pod.readers.append(reader)
            except OSError as exc:
                # The kubelet's StartError: exit 128, the runtime's message.
                argv0 = pod.launches[0].argv[0] if pod.launches else "?"
                pod.start_error = ("StartError", f'exec: "{argv0}": {exc.strerror or exc}')
                kill_tree(pod.pgids, None, grace=1.0)
        now = now_iso()
        pod.started_at = now
        with self.store.write() as tx:

            def running(obj: JSON) -> None:
                status = obj.setdefault("status", {})
                status.update(
                    {
                        "phase": "Running",
                        "podIP": "127.0.0.1",
                        "conditions": pod_conditions(now, ready=True),
                        "containerStatuses": [
                            container_status(
                                pod.container,
                                pod.image,
                                running_since=now,
                                container_id=pod.runtime_id
                                or f"local://{pod.pgids[0] if pod.pgids else 0}",
                            )
                        ],
                    }
                )

            self._write_pod(tx, pod, running)
            self._pod_event(tx, pod, "Normal", "Created", f"Created container: {pod.container}")
            self._pod_event(tx, pod, "Normal", "Started", f"Started container {pod.container}")
            self._write_jobs_status(tx)
        if pod.start_error is not None:
            pod.log.write(pod.start_error[1])
            self._finish_pod(pod, 128 if pod.start_error[0] == "StartError" else 1)

    def _write_pod(self, tx: Tx, pod: PodRun, fn: Any) -> None:
        obj = tx.get(PODS, self.namespace, pod.name)
        if obj is None:
            return
        fn(obj)
        pod.obj = tx.put(PODS, obj)

    def _set_pod_waiting(self, tx: Tx, pod: PodRun, waiting: JSON) -> None:
        def fn(obj: JSON) -> None:
            obj.setdefault("status", {})["containerStatuses"] = [
                container_status(pod.container, pod.image, waiting=waiting)
            ]

        self._write_pod(tx, pod, fn)

    def poll_pod(self, pod: PodRun) -> None:
        if self.runner is not None:
            code = self.runner.poll(pod)
            if code is not None:
                self._finish_pod(pod, code)
            return
        codes = [p.poll() for p in pod.procs]
        if any(c is None for c in codes):
            if any(c not in (None, 0) for c in codes):
                # A rank failed: the others are stopped, as torchrun stops a node.
                kill_tree(
                    [p.pid for p, c in zip(pod.procs, codes, strict=True) if c is None],
                    None,
                    3.0,
                    reap=self._reap,
                )
                for p in pod.procs:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        p.wait(1.0)
                codes = [p.poll() for p in pod.procs]
                if any(c is None for c in codes):
                    return
            else:
                return
        failing = next((c for c in codes if c not in (0, None)), 0)
        self._finish_pod(pod, failing if failing is not None else 0)

    def _finish_pod(self, pod: PodRun, returncode: int) -> None:
        # A container ends when its main process does: what it left behind goes too.
        signal_all(pod.pgids, [], signal.SIGKILL)
        for reader in pod.readers:
            reader.join(DRAIN_SECONDS)
        assert pod.log is not None
        pod.log.close()
        reason = "Completed"
        message: str | None = None
        code = returncode
        if returncode < 0:
            sig = -returncode
            code = 128 + sig
            reason = "Error"
            message = f"terminated by {_signal_name(sig)}"
            if sig == signal.SIGKILL:
                after = _oom_kills()
                if pod.oom_before is not None and after is not None and after > pod.oom_before:
                    reason, message = "OOMKilled", "the kernel's OOM killer stopped it"
        elif returncode != 0:
            reason = pod.start_error[0] if pod.start_error else "Error"
        if pod.start_error is not None:
            message = pod.start_error[1]
        if pod.term_file is not None and pod.term_file.exists():
            text = pod.term_file.read_bytes()[:TERMINATION_MESSAGE_LIMIT].decode(
                "utf-8", errors="ignore"
            )
            if text:
                message = text
        if message is None and code != 0:
            # Like terminationMessagePolicy FallbackToLogsOnError, but one line: the
            # last thing the process said (usually the exception).
            last = next((line for line in reversed(pod.tail) if line.strip()), "")
            message = last[-1024:] or None
        pod.finished = True
        pod.exit_code = code
        now = now_iso()
        success = code == 0

        def terminated(obj: JSON) -> None:
            term: JSON = {
                "exitCode": code,
                "reason": reason,
                "startedAt": pod.started_at or now,
                "finishedAt": now,
            }
            if message:
                term["message"] = message
            status = obj.setdefault("status", {})
            status.update(
                {
                    "phase": "Succeeded" if success else "Failed",
                    "conditions": pod_conditions(
                        now, ready=False, reason="PodCompleted" if success else "PodFailed"
                    ),
                    "containerStatuses": [
                        container_status(
                            pod.container,
                            pod.image,
                            terminated=term,
                            container_id=pod.runtime_id
                            or f"local://{pod.pgids[0] if pod.pgids else 0}",
                        )
                    ],
                }
            )

        with self.store.write() as tx:
            self._write_pod(tx, pod, terminated)
            self._write_jobs_status(tx)

    # ------------------------------------------------------------------ endings

    def _stop_pods(
        self, tx_events: bool = True, delete: bool = True, finished_nodes: bool = False
    ) -> None:
        """Kill every running pod (Killing events) and, with ``delete``, remove the
        pods that had not succeeded, with their logs — as a JobSet deletes its active
        Jobs. ``finished_nodes`` removes the trainer pods that did succeed too: after a
        suspension every node starts again, or the others would wait for it forever."""
        active = [p for p in self.pods.values() if not p.finished]
        done_nodes = [
            p
            for p in self.pods.values()
            if finished_nodes and p.finished and p.rjob not in INITIALIZERS
        ]
        if self.runner is not None:
            self.runner.stop(active)
        kill_tree([g for p in active for g in p.pgids], self.uid, reap=self._reap)
        for pod in active:
            for reader in pod.readers:
                reader.join(DRAIN_SECONDS)
            if pod.log is not None:
                pod.log.close()
            pod.finished = True
            pod.exit_code = 137
        if not active and not done_nodes:
            return
        with self.store.write() as tx:
            for pod in active:
                if tx_events and (pod.procs or pod.runtime_id):
                    self._pod_event(
                        tx, pod, "Normal", "Killing", f"Stopping container {pod.container}"
                    )
            for pod in [*active, *done_nodes] if delete else []:
                self._job_event(
                    tx, pod.rjob, "Normal", "SuccessfulDelete", f"Deleted pod: {pod.name}"
                )
                tx.delete(PODS, self.namespace, pod.name)
        if delete:
            for pod in [*active, *done_nodes]:
                shutil.rmtree(self.paths.log_dir(self.namespace, pod.name), ignore_errors=True)
                del self.pods[pod.name]

    def _reap(self) -> None:
        for pod in self.pods.values():
            for proc in pod.procs:
                proc.poll()

    def finish(self, outcome: str) -> str:
        if outcome in ("gone", "delete"):
            # Gone: deleted, or replaced by a new job of the same name; either way what
            # this uid owns goes (purge leaves a newer job's objects alone).
            self._stop_pods(delete=False)
            self.purge()
            return outcome
        if outcome == "stopped":
            # A shutdown: the processes go, and the job says so now — waiting for a
            # later client to notice left it "Running" in every waiting process.
            self._stop_pods(delete=False)
            stale = [
                p
                for p in self._existing_pods()
                if (p.get("status") or {}).get("phase") in ("Pending", "Running", None)
            ]
            self.recover(stale, _STOPPED)
            return outcome
        if outcome == "suspend":
            self._stop_pods(finished_nodes=True)
            self.mark_suspended()
            return outcome
        if outcome == "complete":
            with self.store.write() as tx:
                for rjob in self.rjobs:
                    self._job_event(tx, rjob, "Normal", "Completed", "Job completed")
                self._jobset_event(tx, "Normal", *JS_COMPLETED)

                def complete(status: JSON) -> None:
                    self._set_condition(status, "Complete", "True", *JS_COMPLETED)

                self._update_job(tx, complete)
                self._write_jobs_status(tx)
            self._sweep()
            return outcome
        # failed:<pod> or deadline
        self._stop_pods()
        with self.store.write() as tx:
            if outcome == "deadline":
                reason, message = R_DEADLINE, M_DEADLINE
            else:
                pod = self.pods[outcome.split(":", 1)[1]]
                job_name = f"{self.name}-{pod.rjob}-0"
                self._job_event(tx, pod.rjob, "Warning", *JOB_BACKOFF)
                reason, message = JS_FAILED[0], f"{JS_FAILED[1]} (first failed job: {job_name})"
                self._jobset_event(tx, "Warning", reason, message)

            def failed(status: JSON) -> None:
                self._set_condition(status, "Failed", "True", reason, message)

            self._update_job(tx, failed)
            self._write_jobs_status(tx)
        self._sweep()
        return outcome

    def _sweep(self) -> None:
        """Processes a finished job left behind (a daemon that left its group)."""
        kill_tree([], self.uid, grace=1.0, reap=self._reap)
        if self.runner is not None:
            self.runner.sweep(remove=False)

    def mark_suspended(self) -> None:
        with self.store.write() as tx:

            def suspended(status: JSON) -> None:
                self._set_condition(status, "Suspended", "True", R_SUSPENDED, M_SUSPENDED)

            if not self._suspended_condition():
                self._jobset_event(tx, "Normal", *JS_SUSPENDED)
            self._update_job(tx, suspended)
            self._write_jobs_status(tx, suspended=True)

    def ensure_suspended(self) -> None:
        if self.runner is not None:
            # Containers outlive a supervisor that died while suspending: none may run.
            self.runner.sweep(remove=True)
        if not self._suspended_condition():
            self.mark_suspended()

    def recover(self, stale: list[JSON], why: str = _CRASHED) -> None:
        """A supervisor died (or was stopped) with pods running: stop what is left of
        them and fail the job (the pods' nodes were lost); ``why`` goes on the pods."""
        kill_tree([], self.uid, grace=1.0)
        if self.runner is not None:
            self.runner.sweep(remove=True)
        now = now_iso()
        with self.store.write() as tx:
            first: str | None = None
            for pod in stale:
                meta = pod.get("metadata") or {}
                container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
                pod.setdefault("status", {}).update(
                    {
                        "phase": "Failed",
                        "containerStatuses": [
                            container_status(
                                str(container.get("name", NODE)),
                                str(container.get("image", "")),
                                terminated={
                                    "exitCode": 137,
                                    "reason": "Error",
                                    "message": why,
                                    "startedAt": now,
                                    "finishedAt": now,
                                },
                            )
                        ],
                    }
                )
                tx.put(PODS, pod)
                first = first or (meta.get("labels") or {}).get(JOB_NAME_LABEL)
                # The writer died with its supervisor: end the log, or its followers
                # would wait for more forever.
                for c in (pod.get("spec") or {}).get("containers") or []:
                    path = self.paths.log_done(
                        self.namespace, str(meta.get("name")), str(c.get("name"))
                    )
                    with contextlib.suppress(OSError):
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.touch()
            message = f"{JS_FAILED[1]} (first failed job: {first or self.name})"
            self._jobset_event(tx, "Warning", JS_FAILED[0], message)

            def failed(status: JSON) -> None:
                self._set_condition(status, "Failed", "True", JS_FAILED[0], message)

            self._update_job(tx, failed)

    def crashed(self, exc: BaseException) -> None:
        """This supervisor failed (a bug, a full disk): no process of the job may
        outlive it, and the job says why instead of running forever."""
        with contextlib.suppress(Exception):
            kill_tree([g for p in self.pods.values() for g in p.pgids], self.uid, 2.0, self._reap)
        if self.runner is not None:
            with contextlib.suppress(Exception):
                self.runner.sweep(remove=True)
        message = f"the local supervisor failed: {type(exc).__name__}: {exc}"
        with contextlib.suppress(Exception), self.store.write() as tx:

            def failed(status: JSON) -> None:
                self._set_condition(status, "Failed", "True", JS_FAILED[0], message)

            self._update_job(tx, failed)

    def purge(self) -> None:
        """Delete the job and everything it owns (its deletion was asked for)."""
        purge_job(self.store, self.paths, self.namespace, self.name, self.uid, self._reap)


def purge_job(
    store: Store,
    paths: Paths,
    namespace: str,
    name: str,
    uid: str,
    reap: Any = None,
) -> None:
    """Kill the job's processes, then remove its pods, logs, events, workspace, run
    files and the TrainJob itself. The caller holds the job's lock. Only what belongs
    to this job (by uid) goes: a new job of the same name is left alone."""
    kill_tree([], uid, reap=reap)
    plan = store.get_plan(uid) or {}
    if plan.get("container"):
        from kf_trainer_core.container.runner import purge_containers

        purge_containers(dict(plan["container"]), uid)
    with store.write() as tx:
        pods = []
        for pod in tx.select(PODS, Selector(namespace), f"{name}-"):
            meta = pod.get("metadata") or {}
            owner = (meta.get("ownerReferences") or [{}])[0]
            if (meta.get("labels") or {}).get(JOBSET_NAME_LABEL) == name and owner.get(
                "uid"
            ) == _sub_uid(uid, str(owner.get("name", ""))):
                pods.append(pod)
                tx.delete(PODS, namespace, str(meta["name"]))
        pod_uids = {str(p["metadata"].get("uid")) for p in pods}
        owned = {uid, _sub_uid(uid, "jobset"), *pod_uids}
        # Events are named "<involved object>.<suffix>": the job's start with its name.
        for event in tx.select(EVENTS, Selector(namespace), name):
            inv = event.get("involvedObject") or {}
            meta = event.get("metadata") or {}
            inv_uid = str(inv.get("uid", ""))
            if inv_uid in owned or (
                inv.get("kind") == "Job" and inv_uid == _sub_uid(uid, str(inv.get("name")))
            ):
                tx.delete(EVENTS, namespace, str(meta["name"]))
        job = tx.get(TRAINJOBS, namespace, name)
        if job is not None and (job.get("metadata") or {}).get("uid") == uid:
            tx.delete(TRAINJOBS, namespace, name)
        tx.delete_plan(uid)
    for pod in pods:
        shutil.rmtree(paths.log_dir(namespace, str(pod["metadata"]["name"])), ignore_errors=True)
    shutil.rmtree(paths.workspace(namespace, name, uid), ignore_errors=True)
    shutil.rmtree(paths.run_dir(uid), ignore_errors=True)


def _secret_data(secret: JSON) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[str(key)] = base64.b64decode(str(value)).decode("utf-8", errors="replace")
        except ValueError:
            out[str(key)] = str(value)
    for key, value in (secret.get("stringData") or {}).items():
        out[str(key)] = str(value)
    return out


def _missing_distributions(requirements: tuple[str, ...]) -> list[str]:
    import re
    from importlib import metadata

    missing = []
    for req in requirements:
        name = re.split(r"[<>=!~;\[ @]", req.strip(), maxsplit=1)[0]
        if not name or "/" in name:
            continue
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(req)
    return missing


def _pump(proc: subprocess.Popen[bytes], pod: PodRun, prefix: str) -> None:
    """Copy one process's output into its pod's log."""
    assert proc.stdout is not None
    assert pod.log is not None
    with proc.stdout:
        for raw in iter(proc.stdout.readline, b""):
            pod.take_line(raw.decode("utf-8", errors="replace").rstrip("\n").rstrip("\r"), prefix)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print("usage: python -m kf_trainer_core.local.supervisor STATE_DIR NS NAME UID")
        return 2
    paths = Paths(args[0])
    namespace, name, uid = args[1], args[2], args[3]
    supervisor = Supervisor(paths, namespace, name, uid)

    def on_term(signum: int, frame: Any) -> None:
        supervisor.stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    lock = JobLock(paths, uid)
    lock.acquire(blocking=True)
    gone = False
    try:
        lock.write_pid()
        # Held with the lock: a marker left without a lock holder means this process
        # was killed, which waiting clients then repair (see local.liveness).
        mark_supervising(paths, uid)
        supervisor.run()
        gone = supervisor.store.get(TRAINJOBS, namespace, name) is None
    except Exception as exc:
        import traceback

        traceback.print_exc()
        supervisor.crashed(exc)
        return 1
    finally:
        unmark_supervising(paths, uid)
        lock.release(remove=gone)
        supervisor.store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
