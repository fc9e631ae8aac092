"""The pods of a local job: where the job lives (:class:`JobPlace`), one pod and what
runs in it (:class:`PodRun`), the pod objects the JobSet and Job controllers would
create, and how a container's end reads in its terminated state (exit code, reason,
message; the kubelet's rules for both emulations: :mod:`kf_trainer_core.emulation.kubelet`).

Standard library only, like the supervisor that imports it.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kf_trainer_core.backends.local import launch
from kf_trainer_core.backends.local._common import (
    Paths,
    now_iso,
)
from kf_trainer_core.backends.local.logs import LogWriter
from kf_trainer_core.base import untrusted
from kf_trainer_core.cluster import distributed
from kf_trainer_core.emulation.jobs import JobRef, job_name, pod_for_index
from kf_trainer_core.emulation.kubelet import exit_status, read_termination_log
from kf_trainer_core.k8s.objects import (
    CONTAINER_CREATING,
    CONTAINERS_NOT_READY,
    container_status,
    pod_conditions,
)
from kf_trainer_core.report import MARKER, parse_line

JSON = dict[str, Any]


def sub_uid(uid: str, what: str) -> str:
    """A stable uid for the JobSet and Jobs of job ``uid``: they exist here only as
    owners of pods and subjects of events."""
    return str(uuid.uuid5(uuid.UUID(uid), what)) if len(uid) == 36 else uid


@dataclass(frozen=True)
class JobPlace:
    """Which job this is and where it lives on this machine."""

    paths: Paths
    namespace: str
    name: str
    uid: str
    #: The node name its pods are scheduled to (the kubelet's host in events).
    host: str

    @property
    def workspace(self) -> Path:
        return self.paths.workspace(self.namespace, self.name, self.uid)

    @property
    def run_dir(self) -> Path:
        return self.paths.run_dir(self.uid)

    def job_name(self, rjob: str) -> str:
        """The name of the (one) Job of replicated job ``rjob``."""
        return job_name(self.name, rjob, 0)


@dataclass
class PodRun:
    """One pod of the job and what runs in it. Its object (``obj``, as last stored)
    says its name, its container's name and its image."""

    rjob: str
    obj: JSON
    launches: list[launch.Launch] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = "."
    term_file: Path | None = None
    log: LogWriter | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)
    #: The output's end, for the termination message: torchrun's summary and its
    #: traceback take ~45 lines after the workers' errors.
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=200))
    first_lines: list[str] = field(default_factory=list)
    started_at: str | None = None
    waiting_since: float | None = None  # pending on a missing Secret
    #: Set when the pod ended (see :attr:`finished`).
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
    #: The GPUs the node was given (:mod:`~kf_trainer_core.backends.local.gpus`); None:
    #: not shared out (an initializer, or a machine without GPUs).
    gpus: list[str] | None = None
    #: ``numProcPerNode: auto``: one process per GPU the node is given.
    auto_procs: bool = False
    #: The ranks whose end the last poll collected (see :attr:`live_pgids`).
    just_reaped: set[int] = field(default_factory=set)

    def take_line(self, line: str, prefix: str = "") -> None:
        """One line of the pod's output, from a process or a container alike: kept for
        failure messages, a progress report (report's marker) noted for the job's
        status, and written to the pod's log."""
        # Kept for a failure message: bounded, whatever the process printed.
        self.tail.append(line if len(line) <= untrusted.LINE_LIMIT else untrusted.line(line))
        if MARKER in line:
            # The job's own words: only a valid report reaches the TrainJob's status,
            # and only its valid fields (a malformed one must not break its readers).
            status = untrusted.trainer_status(parse_line(line), f"pod {self.name}")
            if status is not None and "lastUpdatedTime" in status:
                self.progress = status
                self.progress_seq += 1
        if self.log is not None:
            self.log.write(prefix + line if prefix else line)

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def container(self) -> str:
        return str(self.obj["spec"]["containers"][0]["name"])

    @property
    def image(self) -> str:
        return str(self.obj["spec"]["containers"][0].get("image", ""))

    @property
    def finished(self) -> bool:
        return self.exit_code is not None

    @property
    def pgids(self) -> list[int]:
        return [p.pid for p in self.procs]

    @property
    def live_pgids(self) -> list[int]:
        """The process groups that are still the pod's to signal: a rank's not yet
        reaped (ended, it keeps its id until then) or reaped by the last poll. Once a
        rank is reaped the kernel may give its id to any new process — another job's
        rank, a user's shell — so the group of a rank reaped earlier is never signalled
        again (what it left behind carries the job's uid: a stop's sweep finds it)."""
        return [p.pid for p in self.procs if p.returncode is None or p.pid in self.just_reaped]

    @property
    def running(self) -> bool:
        return (bool(self.procs) or bool(self.runtime_id)) and not self.finished

    @property
    def container_id(self) -> str:
        """``docker://…`` from a pod runner, else ``local://<first process group>``."""
        return self.runtime_id or f"local://{self.pgids[0] if self.pgids else 0}"

    @property
    def uid(self) -> str:
        return str((self.obj.get("metadata") or {}).get("uid", ""))


def pod_object(place: JobPlace, rjobs: list[str], rjob: str, index: int, container: JSON) -> JSON:
    """The pod the Job of ``rjob`` creates for completion ``index`` (the one model of
    it, :func:`~kf_trainer_core.emulation.jobs.pod_for_index`), scheduled to this
    machine, its container being created."""
    name = place.job_name(rjob)
    job = JobRef(
        namespace=place.namespace,
        jobset=place.name,
        jobset_uid=sub_uid(place.uid, "jobset"),
        rjobs=tuple((r, 1, "default") for r in rjobs),
        rjob=rjob,
        index=0,
        uid=sub_uid(place.uid, name),
    )
    # Processes here get a short grace: the supervisor's stop waits for them.
    template = {"spec": {"containers": [container], "terminationGracePeriodSeconds": 5}}
    obj = pod_for_index(job, template, index, subdomain=place.name)
    obj["spec"]["nodeName"] = place.host
    now = now_iso()
    obj["status"].update(
        {
            "hostIP": "127.0.0.1",
            "startTime": now,
            "conditions": pod_conditions(now, ready=False, reason=CONTAINERS_NOT_READY),
            "containerStatuses": [
                container_status(
                    str(container["name"]),
                    str(container.get("image", "")),
                    waiting={"reason": CONTAINER_CREATING},
                )
            ],
        }
    )
    return obj


# ---------------------------------------------------------------------- endings


def oom_kills() -> int | None:
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


def termination(pod: PodRun, returncode: int) -> tuple[int, str, str | None]:
    """How the pod's container ended, as the kubelet reports it: ``(exitCode, reason,
    message)`` from its return code (negative: the signal), a start error, its
    termination log, or else — on failure — the last line it printed."""
    reason = "Completed"
    message: str | None = None
    code, killed_by = exit_status(returncode)
    # What the pod's output says of its failure (torchrun's summary, a worker's error).
    cause = distributed.diagnose(pod.tail) if returncode != 0 else None
    if killed_by is not None:
        reason = "Error"
        message = f"terminated by {killed_by}"
    elif returncode != 0:
        reason = pod.start_error[0] if pod.start_error else "Error"
    # A SIGKILL of the container's process, or of a worker under torchrun, while the
    # memory cgroup counted an OOM kill: the kernel's OOM killer (the kubelet's
    # OOMKilled; on a cluster a worker's OOM kill ends its container as one).
    killed = returncode == -signal.SIGKILL or (
        cause is not None and cause.signal == "SIGKILL" and pod.start_error is None
    )
    if killed:
        after = oom_kills()
        if pod.oom_before is not None and after is not None and after > pod.oom_before:
            reason, message = "OOMKilled", "the kernel's OOM killer stopped it"
    if pod.start_error is not None:
        message = pod.start_error[1]
    message = read_termination_log(pod.term_file) or message
    if message is None and code != 0:
        # Like terminationMessagePolicy FallbackToLogsOnError, but one line: the
        # failure the output shows (under torchrun its last lines are a banner and a
        # summary), else the last thing the process said (usually the exception).
        if cause is not None:
            message = cause.summary()[:1024]
        else:
            said = (line for line in reversed(pod.tail) if not untrusted.is_internal(line))
            last = next((line for line in said if line.strip()), "")
            message = last[-1024:] or None
    return code, reason, message
