"""The local job's kubelet: it creates the job's pods (as the Job controller and the
scheduler would), hands each to its :class:`PodRunner` — this machine's processes
(:class:`ProcessRunner`) or containers — with its environment resolved (the kubelet's
rules: :mod:`kf_trainer_core.emulation.kubelet`), watches them end, writes their
container states, and stops them.

Standard library only, like the supervisor that imports it (the container runner,
which needs the Docker SDK, is imported only for container jobs).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from kf_trainer_core.backends.local import checkpoints as local_checkpoints
from kf_trainer_core.backends.local import gpus, launch, machine
from kf_trainer_core.backends.local._common import (
    INITIALIZERS,
    POD_ENV,
    TERMINATION_LOG_ENV,
    now_iso,
)
from kf_trainer_core.backends.local.jobstatus import JobRecord
from kf_trainer_core.backends.local.liveness import die_with_parent
from kf_trainer_core.backends.local.logs import LogWriter
from kf_trainer_core.backends.local.pods import PodRun, oom_kills, termination
from kf_trainer_core.backends.local.procs import kill_tree, signal_all
from kf_trainer_core.backends.local.store import EVENTS, PODS, SECRETS, Selector, Tx
from kf_trainer_core.emulation.kubelet import (
    SECRET,
    START_ERROR_EXIT,
    read_lines,
    resolve_env,
    spawn,
    start_error,
)
from kf_trainer_core.k8s.objects import (
    POD_COMPLETED,
    POD_FAILED,
    container_status,
    generate_suffix,
    pod_conditions,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

JSON = dict[str, Any]

#: How long log readers get to drain after a container's processes ended.
DRAIN_SECONDS = 2.0


class PodRunner(Protocol):
    """Runs the pods of one job for its kubelet: :class:`ProcessRunner`, or a
    container engine's (:mod:`kf_trainer_core.backends.local.container.runner`)."""

    def shape(self, pod: Any) -> None:
        """Adjust the pod's object (image, command, mounts) before it is stored."""

    def start(self, pod: Any, env: dict[str, str]) -> None:
        """Start the pod with its resolved env; on failure set ``pod.start_error`` to
        ``(reason, message)`` (the kubelet then fails the pod)."""

    def poll(self, pod: Any) -> int | None:
        """The pod's exit code once it ended (its log drained), else ``None``."""

    def stop(self, pods: Iterable[Any]) -> None:
        """Stop these pods now (SIGTERM, grace, SIGKILL)."""

    def sweep(self, remove: bool) -> None:
        """Stop whatever of this job still runs; with ``remove``, remove it all."""


class ProcessRunner:
    """The pods as processes of this machine: each rank a session of its own, its
    output into its pod's log; a failed rank stops its node's others, as torchrun
    does. Every process of the job carries its uid (see
    :func:`~kf_trainer_core.backends.local.procs.kill_tree`): a sweep finds them all."""

    def __init__(self, pods: dict[str, PodRun], uid: str) -> None:
        self.pods = pods
        self.uid = uid

    def shape(self, pod: PodRun) -> None:
        """Nothing to adjust: a process runs the pod as it is stored."""

    def start(self, pod: PodRun, env: dict[str, str]) -> None:
        env = {**pod.env, **env, TERMINATION_LOG_ENV: str(pod.term_file), POD_ENV: pod.name}
        try:
            for item in pod.launches:
                # A session per rank: its process group is the pod's to kill; being out
                # of our group, it would outlive a SIGKILLed supervisor: the kernel
                # kills it with us (see local.liveness).
                proc = spawn(item.argv, {**env, **item.env}, pod.cwd, die_with_parent())
                pod.procs.append(proc)
                line = partial(pod.take_line, prefix=item.prefix)
                reader = threading.Thread(target=read_lines, args=(proc, line), daemon=True)
                reader.start()
                pod.readers.append(reader)
        except OSError as exc:
            # The kubelet's StartError: exit 128, the runtime's message.
            pod.start_error = ("StartError", start_error(pod.launches[0].argv, exc))
            kill_tree(pod.live_pgids, None, grace=1.0)

    def poll(self, pod: PodRun) -> int | None:
        unreaped = {p.pid for p in pod.procs if p.returncode is None}
        codes = [p.poll() for p in pod.procs]
        pod.just_reaped = {
            p.pid for p in pod.procs if p.pid in unreaped and p.returncode is not None
        }
        if any(c is None for c in codes):
            if all(c in (None, 0) for c in codes):
                return None
            # A rank failed: the others are stopped, as torchrun stops a node.
            running = [p.pid for p, c in zip(pod.procs, codes, strict=True) if c is None]
            kill_tree(running, None, 3.0, reap=self.reap)
            for p in pod.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(1.0)
            codes = [p.poll() for p in pod.procs]
            if any(c is None for c in codes):
                return None
        return next((c for c in codes if c not in (0, None)), 0)

    def stop(self, pods: Iterable[PodRun]) -> None:
        """Stop their process groups and every process of the job (a container job's
        strays too), then let their log readers drain."""
        pods = list(pods)
        kill_tree([g for p in pods for g in p.live_pgids], self.uid, reap=self.reap)
        for pod in pods:
            for reader in pod.readers:
                reader.join(DRAIN_SECONDS)

    def sweep(self, remove: bool) -> None:
        """Stop every process of the job still left (a daemon that left its group)."""
        kill_tree([], self.uid, grace=1.0, reap=self.reap)

    def reap(self) -> None:
        """Collect this process's exited children (zombies still answer signals)."""
        for pod in self.pods.values():
            for proc in pod.procs:
                proc.poll()


class Kubelet:
    """Runs the pods of one job (:attr:`JobRecord.pods`) on this machine."""

    def __init__(self, record: JobRecord) -> None:
        self.record = record
        self.store = record.store
        self.place = record.place
        #: The job's run plan (the local API's admission wrote it).
        self.plan: JSON = {}
        self._runner: PodRunner | None = None
        #: The job's processes: its pods' unless they run in containers, and a job's
        #: strays whatever runs its pods.
        self.processes = ProcessRunner(record.pods, self.place.uid)
        self.reap = self.processes.reap

    @property
    def pods(self) -> dict[str, PodRun]:
        return self.record.pods

    @property
    def runner(self) -> PodRunner | None:
        """What runs the pods when they are not this machine's processes (containers:
        :mod:`kf_trainer_core.backends.local.container.runner`), decided by the job's plan; made on
        first use, so that whoever loads the plan — a run, or a repair after this
        job's supervisor died — stops and removes the same pods."""
        if self._runner is None and self.plan.get("container"):
            from kf_trainer_core.backends.local.container.runner import ContainerRunner

            place = self.place
            where = {"namespace": place.namespace, "name": place.name, "uid": place.uid}
            self._runner = ContainerRunner(
                dict(self.plan["container"]),
                **where,
                workspace=place.workspace,
                run_dir=place.run_dir,
                cwd=self.cwd(),
            )
        return self._runner

    @property
    def runtime(self) -> PodRunner:
        """What runs the pods: the containers, else this machine's processes."""
        return self.runner or self.processes

    def cwd(self) -> str:
        """Where the pods' processes start: the submitter's directory, else the
        workspace."""
        cwd = str(self.plan.get("cwd") or "")
        return cwd if cwd and os.path.isdir(cwd) else str(self.place.workspace)

    # ------------------------------------------------------------------ creating

    def create(self, pods: list[PodRun]) -> None:
        """Store the pods (a fresh name for one that clashes), with the Job's and the
        scheduler's events, and open their logs."""
        record, namespace = self.record, self.place.namespace
        for pod in pods:
            self.runtime.shape(pod)
        with self.store.write() as tx:
            # In the transaction that stores the pods: two jobs starting at once see
            # each other's GPUs taken.
            self.share_gpus(tx, [p for p in pods if p.shape is not None])
            for pod in pods:
                for _ in range(5):
                    if not tx.taken(PODS, namespace, pod.name):
                        break
                    pod.obj["metadata"]["name"] = (
                        pod.name.rsplit("-", 1)[0] + "-" + generate_suffix()
                    )
                pod.obj = tx.create(PODS, pod.obj)
                self.pods[pod.name] = pod
                message = f"Created pod: {pod.name}"
                record.job_event(tx, pod.rjob, "Normal", "SuccessfulCreate", message)
                record.pod_scheduled(tx, pod)
            record.write_jobs_status(tx)
        paths = self.place.paths
        for pod in pods:
            pod.log = LogWriter(
                paths.log(namespace, pod.name, pod.container),
                paths.log_done(namespace, pod.name, pod.container),
            )
            for line in pod.first_lines:
                pod.log.write(line)

    def share_gpus(self, tx: Tx, nodes: list[PodRun]) -> None:
        """Give each training node its GPUs (see :mod:`~kf_trainer_core.backends.local.gpus`):
        its processes' ``CUDA_VISIBLE_DEVICES`` or its container's device request, one
        process per GPU with ``numProcPerNode: auto``, and the pod's annotation."""
        devices = machine.gpu_devices()
        if not nodes or not devices:
            return
        place = self.place
        taken = gpus.held(gpus.pods_with_gpus(tx.conn), place.namespace, place.name)
        per_node = gpus.requested(nodes[0].obj["spec"]["containers"][0].get("resources"))
        given, warning = gpus.assign(
            devices, taken, len(nodes), per_node, unrequested=self.runner is None
        )
        for pod, mine in zip(nodes, given, strict=True):
            pod.gpus = mine
            if warning:
                pod.first_lines.append(f"kf-trainer: warning: {warning}")
            if not mine:
                continue
            gpus.annotate(pod.obj, mine)
            pod.env.update(gpus.node_env(mine))
            if pod.auto_procs and pod.shape is not None:
                pod.shape = replace(pod.shape, nproc=len(mine))
                shown = launch.node_env(pod.shape)
                pod.env.update(shown)
                container = pod.obj["spec"]["containers"][0]
                env = [e for e in container.get("env") or [] if e.get("name") not in shown]
                container["env"] = env + [{"name": k, "value": v} for k, v in shown.items()]

    # ------------------------------------------------------------------ starting

    def start(self, pod: PodRun) -> None:
        """Start the pod's processes (or record why it cannot start)."""
        assert pod.log is not None
        record = self.record
        namespace = self.place.namespace
        with self.store.read() as rtx:
            # This store keeps no ConfigMaps: a reference to one is left out.
            env_values, error = resolve_env(
                pod.obj["spec"]["containers"][0],
                namespace,
                {SECRET: lambda name: rtx.get(SECRETS, namespace, name)},
                pod.obj,
            )
        if error is not None and pod.start_error is None:
            first = pod.waiting_since is None
            pod.waiting_since = time.monotonic()
            if first:
                with self.store.write() as tx:
                    waiting = {"reason": "CreateContainerConfigError", "message": error}
                    self.write_status(tx, pod, {}, waiting=waiting)
                    record.pod_event(tx, pod, "Warning", "Failed", f"Error: {error}")
            return
        pod.waiting_since = None
        if pod.rjob not in INITIALIZERS:  # every attempt of the identity shares it
            place = self.place
            env_values.update(
                local_checkpoints.trainer_env(place.paths.root, place.namespace, record.job)
            )
        term = self.place.run_dir / f"{pod.name}.termination-log"
        with contextlib.suppress(FileNotFoundError):
            term.unlink()
        pod.term_file = term
        pod.oom_before = oom_kills()
        if pod.start_error is None:
            self.runtime.start(pod, env_values)
        now = now_iso()
        pod.started_at = now

        running = {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": pod_conditions(now, ready=True),
        }
        with self.store.write() as tx:
            self.write_status(tx, pod, running, running_since=now)
            record.pod_event(tx, pod, "Normal", "Created", f"Created container: {pod.container}")
            record.pod_event(tx, pod, "Normal", "Started", f"Started container {pod.container}")
            record.write_jobs_status(tx)
        if pod.start_error is not None:
            pod.log.write(pod.start_error[1])
            self.finish(pod, START_ERROR_EXIT if pod.start_error[0] == "StartError" else 1)

    def write_status(self, tx: Tx, pod: PodRun, status: JSON, **state: Any) -> None:
        """Update the stored pod's ``status`` (phase, conditions...) with its container's
        state: ``waiting=`` why, ``running_since=`` a time, or ``terminated=`` how it
        ended."""
        obj = tx.get(PODS, self.place.namespace, pod.name)
        if obj is None:
            return
        if "waiting" not in state:  # a container not created yet has no id
            state["container_id"] = pod.container_id
        container = container_status(pod.container, pod.image, **state)
        obj.setdefault("status", {}).update({**status, "containerStatuses": [container]})
        pod.obj = tx.put(PODS, obj)

    # ------------------------------------------------------------------ ending

    def poll(self, pod: PodRun) -> None:
        """Finish the pod if its container ended (a failed rank stops the others)."""
        code = self.runtime.poll(pod)
        if code is not None:
            self.finish(pod, code)

    def finish(self, pod: PodRun, returncode: int) -> None:
        """Record the container's end: its terminated state, the pod's phase."""
        # A container ends when its main process does: what it left behind goes too.
        signal_all(pod.live_pgids, [], signal.SIGKILL)
        pod.just_reaped.clear()  # from now on its ranks' ids may be anyone's
        for reader in pod.readers:
            reader.join(DRAIN_SECONDS)
        assert pod.log is not None
        pod.log.close()
        code, reason, message = termination(pod, returncode)
        pod.exit_code = code
        now = now_iso()
        success = code == 0

        term: JSON = {
            "exitCode": code,
            "reason": reason,
            "startedAt": pod.started_at or now,
            "finishedAt": now,
        }
        if message:
            term["message"] = message
        status = {
            "phase": "Succeeded" if success else "Failed",
            "conditions": pod_conditions(
                now, ready=False, reason=POD_COMPLETED if success else POD_FAILED
            ),
        }
        with self.store.write() as tx:
            self.write_status(tx, pod, status, terminated=term)
            self.record.write_jobs_status(tx)

    def stop(self, delete: bool = True, finished_nodes: bool = False) -> None:
        """Kill every running pod (Killing events) and, with ``delete``, remove the
        pods that had not succeeded, with their logs — as a JobSet deletes its active
        Jobs. ``finished_nodes`` removes the trainer pods that did succeed too: after a
        suspension every node starts again, or the others would wait for it forever."""
        record = self.record
        active = [p for p in self.pods.values() if not p.finished]
        done_nodes = [
            p
            for p in self.pods.values()
            if finished_nodes and p.finished and p.rjob not in INITIALIZERS
        ]
        if self.runner is not None:
            self.runner.stop(active)
        self.processes.stop(active)
        for pod in active:
            if pod.log is not None:
                pod.log.close()
            pod.exit_code = 137
        if not active and not done_nodes:
            return
        with self.store.write() as tx:
            for pod in active:
                if pod.procs or pod.runtime_id:
                    message = f"Stopping container {pod.container}"
                    record.pod_event(tx, pod, "Normal", "Killing", message)
            for pod in [*active, *done_nodes] if delete else []:
                self.delete_pod(tx, pod.name, pod.rjob)
        if delete:
            for pod in [*active, *done_nodes]:
                self.remove_log(pod.name)
                del self.pods[pod.name]

    def delete_pod(self, tx: Tx, name: str, rjob: str) -> None:
        """Delete pod ``name`` of replicated job ``rjob`` as its Job's controller does
        (a ``SuccessfulDelete`` event); its log goes after the write (:meth:`remove_log`).

        Its own events go with it: a job's events are read by its pods (a pod's by its
        name among the job's pods), so once the pod is gone no reader shows them, and
        the purge of the job, which finds the events of the pods it still has, never
        found them — this store has no events TTL, and each suspension left them."""
        namespace = self.place.namespace
        self.record.job_event(tx, rjob, "Normal", "SuccessfulDelete", f"Deleted pod: {name}")
        pod = tx.delete(PODS, namespace, name)
        uid = str(((pod or {}).get("metadata") or {}).get("uid") or "")
        for event in tx.select(EVENTS, Selector(namespace), f"{name}."):
            involved = event.get("involvedObject") or {}
            if involved.get("kind") == "Pod" and uid and involved.get("uid") == uid:
                tx.delete(EVENTS, namespace, str(event["metadata"]["name"]))

    def remove_log(self, name: str) -> None:
        """Remove the log of a deleted pod."""
        shutil.rmtree(self.place.paths.log_dir(self.place.namespace, name), ignore_errors=True)

    def sweep(self, remove: bool = False) -> None:
        """Stop whatever processes (and, with ``remove``, containers) of the job are
        left: a daemon that left its group, a container of a supervisor that died."""
        self.processes.sweep(remove)
        if self.runner is not None:
            self.runner.sweep(remove=remove)
