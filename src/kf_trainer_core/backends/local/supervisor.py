"""The local stand-in for the Trainer, JobSet and Job controllers and the kubelet:
one detached process per running TrainJob.

``python -m kf_trainer_core.backends.local.supervisor <state_dir> <namespace> <name> <uid>``

It holds the job's lock while it runs (so anyone can tell it is alive), runs the
initializer steps, then the training nodes as local processes, and writes what a
cluster would: pods with container states, exit codes and termination messages, the
TrainJob's ``jobsStatus`` and ``Complete``/``Failed``/``Suspended`` conditions with the
Trainer's reasons, Events, and each container's log. It watches its job (a version
check every tick) and acts on deletion, suspension and ``activeDeadlineSeconds``.

The parts: :mod:`~kf_trainer_core.backends.local.jobstatus` (the job's conditions, jobsStatus
and events), :mod:`~kf_trainer_core.backends.local.kubelet` (starting, watching and stopping the
pods), :mod:`~kf_trainer_core.backends.local.jobpods` (the pods a plan makes),
:mod:`~kf_trainer_core.backends.local.pods` (pod objects and states) and
:mod:`~kf_trainer_core.backends.local.purge`; this module runs the job through them.

It imports only the standard library and this package's standard-library modules: its
start-up time is part of every job's latency.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
import time
from collections import Counter
from typing import Any

from kf_trainer_core.backends.local import launch
from kf_trainer_core.backends.local._common import (
    INITIALIZERS,
    JOB_NAME_LABEL,
    LAUNCHER,
    NODE,
    REPLICATED_JOB_LABEL,
    Paths,
    now_iso,
)
from kf_trainer_core.backends.local.jobpods import initializer_pod, prepare_trainer, trainer_pods
from kf_trainer_core.backends.local.jobstatus import JobRecord
from kf_trainer_core.backends.local.kubelet import Kubelet
from kf_trainer_core.backends.local.liveness import (
    forget_run,
    mark_supervising,
    unmark_supervising,
)
from kf_trainer_core.backends.local.pods import JobPlace, PodRun
from kf_trainer_core.backends.local.procs import JobLock, kill_tree
from kf_trainer_core.backends.local.purge import purge_job
from kf_trainer_core.backends.local.store import PODS, Store, Tx
from kf_trainer_core.k8s.objects import container_status
from kf_trainer_core.k8s.trainjob import (
    COMPLETE,
    FAILED,
    JOB_BACKOFF,
    JOB_COMPLETED_EVENT,
    JS_COMPLETED,
    JS_FAILED,
    JS_RESUMED,
    JS_SUSPENDED,
    SUSPENDED,
    TRAINJOB_DEADLINE,
    TRAINJOB_RESUMED,
    TRAINJOB_SUSPENDED,
    jobset_failed_message,
)

JSON = dict[str, Any]

#: Seconds between looks at the job's row (a version check: one indexed SELECT).
TICK = 0.02
#: A pod whose Secret is missing retries this often (as the kubelet does).
SECRET_RETRY_SECONDS = 1.0
#: How long the other training nodes get to end by themselves once one failed, before
#: they are stopped. On a cluster a failed pod fails its Job, whose controller then
#: deletes the Job's other pods (the JobSet, its other Jobs'), and those get a grace
#: period: a moment passes. A node that failed *first* (its worker raised) often ends
#: *after* a peer that only lost the connection to it, as torchrun's agent notices a
#: worker's end at its next check. Stopped and deleted at once, that node's log — the
#: root cause (cluster/root_cause.py) — would be lost. A peer that hangs costs this much.
PEER_SETTLE_SECONDS = 5.0

_CRASHED = (
    "the local supervisor of this job stopped while the pod ran (killed, or the machine restarted)"
)
_STOPPED = (
    "the local supervisor of this job was stopped (SIGTERM, SIGINT: a shutdown) while the "
    "pod ran; its processes were stopped"
)


class JobSupervisor:
    """Runs one TrainJob to its end (or until it is suspended or deleted)."""

    def __init__(self, paths: Paths, namespace: str, name: str, uid: str) -> None:
        self.place = JobPlace(paths, namespace, name, uid, socket.gethostname())
        self.store = Store(paths.db)
        self.record = JobRecord(self.store, self.place)
        self.kubelet = Kubelet(self.record)
        self.stop = threading.Event()
        self.deadline: float | None = None

    def control(self) -> str | None:
        """What happened since the last look: ``gone`` (the job or its uid), ``delete``,
        ``suspend``, ``deadline``, or ``stopped`` (this process got SIGTERM with no
        reason in the job: a shutdown). ``None``: carry on."""
        if not self.record.load():
            return "gone"
        if self.record.deleting:
            return "delete"
        if self.record.spec.get("suspend"):
            return "suspend"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return "deadline"
        if self.stop.is_set():
            return "stopped"
        return None

    # ------------------------------------------------------------------ the run

    def load_plan(self, plan: JSON) -> None:
        """Take the submitter's ``plan`` for the job, and from it the replicated jobs its
        ``jobsStatus`` lists before any pod is made."""
        self.kubelet.plan = plan
        runtime = plan.get("runtime") or {}
        self.record.expected = dict.fromkeys(runtime.get("replicated_jobs") or [NODE], 0)

    def run(self) -> None:
        record = self.record
        if not record.load():
            return
        self.load_plan(self.store.get_plan(self.place.uid) or {})
        if record.deleting:
            self.purge()
            return
        if record.terminal() or self.kubelet.plan.get("runtime_error"):
            return
        if self.complete_if_ended():
            return
        stale = record.unfinished_pods()
        if stale:
            self.recover(stale)
            return
        while True:
            if record.spec.get("suspend"):
                self.ensure_suspended()
                return
            outcome = self.execute()
            if outcome != "suspend":
                return
            # Suspended: if it was resumed meanwhile, run again (this process holds
            # the lock, so a supervisor spawned by the resume waits for us).
            if not record.load() or record.spec.get("suspend"):
                return

    def steps(self) -> tuple[list[str], list[tuple[str, int, int]]]:
        """The job's steps: the initializers it asks for (the builder checked the
        runtime has them), then its training nodes as ``(replicated job, completion
        index, node rank)``."""
        spec = self.record.spec
        trainer = dict(spec.get("trainer") or {})
        runtime = dict(self.kubelet.plan.get("runtime") or {})
        init = dict(spec.get("initializer") or {})
        nnodes = int(trainer.get("numNodes") or runtime.get("num_nodes") or 1)
        init_steps = [r for r in INITIALIZERS if init.get(r.split("-")[0])]
        if str(runtime.get("policy") or "torch") == "mpi":
            # The launcher is node 0 (runLauncherAsNode), the node pods the others.
            return init_steps, [(LAUNCHER, 0, 0)] + [(NODE, i, i + 1) for i in range(nnodes - 1)]
        return init_steps, [(NODE, i, i) for i in range(nnodes)]

    def complete_if_ended(self) -> bool:
        """Complete the job if every pod of its steps is stored ``Succeeded``: its
        supervisor ended (killed, or stopped) after the last pod's end was written and
        before the job's ``Complete`` was — two transactions. Whoever finds it so (a
        new supervisor, the repair of a dead one) completes it: failing it would lose a
        result that is there, and running it again would train twice."""
        init_steps, layout = self.steps()
        expected = Counter([*init_steps, *(rjob for rjob, _, _ in layout)])
        pods = self.record.existing_pods()
        if any((p.get("status") or {}).get("phase") != "Succeeded" for p in pods):
            return False
        if Counter(_rjob(p) for p in pods) != expected:
            return False
        self.record.expected = dict(expected)
        for obj in pods:
            pod = PodRun(_rjob(obj), obj, exit_code=0)
            self.record.pods[pod.name] = pod
        self.finish("complete")
        return True

    def execute(self) -> str:
        """Run the job's steps; return how it ended."""
        record, place = self.record, self.place
        spec = record.spec
        trainer = dict(spec.get("trainer") or {})
        runtime = dict(self.kubelet.plan.get("runtime") or {})
        init = dict(spec.get("initializer") or {})
        kept = {
            _rjob(p): p
            for p in record.existing_pods()
            if (p.get("status") or {}).get("phase") == "Succeeded"
        }
        init_steps, layout = self.steps()
        nnodes = len(layout)
        record.expected = dict(Counter([*init_steps, *(rjob for rjob, _, _ in layout)]))
        # Initializer pods that succeeded before a suspension are kept and not re-run.
        for rjob, pod in kept.items():
            if rjob in INITIALIZERS:
                record.pods[pod["metadata"]["name"]] = PodRun(rjob, pod, exit_code=0)

        ads = spec.get("activeDeadlineSeconds")
        if isinstance(ads, (int, float)) and ads > 0:
            self.deadline = time.monotonic() + float(ads)
        place.workspace.mkdir(parents=True, exist_ok=True)
        (place.workspace / "dataset").mkdir(exist_ok=True)
        (place.workspace / "model").mkdir(exist_ok=True)
        place.run_dir.mkdir(parents=True, exist_ok=True)

        with self.store.write() as tx:
            if record.suspended():
                record.set_condition(tx, SUSPENDED, "False", *TRAINJOB_RESUMED)
                record.jobset_event(tx, "Normal", *JS_RESUMED)
            record.write_jobs_status(tx)

        cwd = self.kubelet.cwd()
        todo = [r for r in init_steps if r not in kept]
        if todo:
            pods = [
                initializer_pod(place, record.rjobs, r, init[r.split("-")[0]], cwd) for r in todo
            ]
            outcome = self.run_pods(pods)
            if outcome is not None:
                return self.finish(outcome)
            with self.store.write() as tx:
                self.jobs_completed(tx, todo)

        program = launch.parse_trainer(
            list(trainer.get("command") or runtime.get("command") or []),
            list(trainer.get("args") or runtime.get("args") or []),
        )
        pods = trainer_pods(place, record.rjobs, self.kubelet.plan, trainer, layout, nnodes, cwd)
        outcome = self.run_pods(pods, prepare=program, settle=PEER_SETTLE_SECONDS)
        return self.finish(outcome or "complete")

    def run_pods(
        self,
        pods: list[PodRun],
        prepare: launch.TrainerProgram | None = None,
        settle: float = 0.0,
    ) -> str | None:
        """Create, start and watch ``pods``; ``None`` when all succeeded, else the
        outcome (``failed:<pod>``: the first that failed, ``delete``, ``suspend``,
        ...). Once one failed, the others that run get up to ``settle`` seconds to end
        by themselves (see :data:`PEER_SETTLE_SECONDS`)."""
        kubelet = self.kubelet
        kubelet.create(pods)
        if prepare is not None and self.kubelet.runner is None:
            try:
                # A delete's nudge or a shutdown (SIGTERM: self.stop) stops a virtualenv
                # build: a delete waited for the whole install, then killed this process.
                prepare_trainer(self.place, self.kubelet.plan, pods, prepare, self.stop)
            except Exception as exc:  # e.g. a venv that cannot be built: the nodes fail
                if self.stop.is_set():
                    return self.control() or "stopped"
                for pod in pods:
                    pod.start_error = (
                        "Error",
                        f"kf-trainer: preparing the trainer failed: {exc}",
                    )
        for pod in pods:
            kubelet.start(pod)
        failed: PodRun | None = None  # the first seen to fail
        failed_at = 0.0
        while True:
            self.record.publish_progress(pods)
            outcome = self.control()
            if outcome is not None and outcome != "stopped":
                return outcome
            # A shutdown stops the pods still running, after this look: one that ended
            # before it keeps its own end (a job that succeeded must not read Failed).
            for pod in pods:
                if pod.waiting_since is not None:
                    if outcome is None and time.monotonic() - pod.waiting_since >= (
                        SECRET_RETRY_SECONDS
                    ):
                        kubelet.start(pod)
                elif not pod.finished:
                    kubelet.poll(pod)
            if failed is None:
                failed = next((p for p in pods if p.finished and p.exit_code != 0), None)
                failed_at = time.monotonic()
            if failed is not None:
                running = [p for p in pods if not p.finished and p.waiting_since is None]
                if not running or time.monotonic() - failed_at >= settle:
                    self.record.publish_progress(pods)
                    return f"failed:{failed.name}"
            elif all(p.finished for p in pods):
                self.record.publish_progress(pods)  # the last report, before Complete
                return None
            if outcome is not None:
                return outcome
            self.stop.wait(TICK)

    # ------------------------------------------------------------------ endings

    def finish(self, outcome: str) -> str:
        """Bring the job to the end ``outcome`` says: purged (``gone``, ``delete``),
        stopped (``stopped``), suspended, Complete or Failed."""
        record, kubelet = self.record, self.kubelet
        if outcome in ("gone", "delete"):
            # Gone: deleted, or replaced by a new job of the same name; either way what
            # this uid owns goes (purge leaves a newer job's objects alone).
            kubelet.stop(delete=False)
            self.purge()
            return outcome
        if outcome == "stopped":
            # A shutdown: the processes go, and the job says so now — waiting for a
            # later client to notice left it "Running" in every waiting process.
            kubelet.stop(delete=False)
            self.recover(record.unfinished_pods(), _STOPPED)
            return outcome
        if outcome == "suspend":
            kubelet.stop(finished_nodes=True)
            self.mark_suspended()
            return outcome
        if outcome == "complete":
            with self.store.write() as tx:
                self.jobs_completed(tx, [r for r in record.rjobs if r not in INITIALIZERS])
                record.jobset_event(tx, "Normal", *JS_COMPLETED)
                record.set_condition(tx, COMPLETE, "True", *JS_COMPLETED)
                record.write_jobs_status(tx)
            kubelet.sweep()
            return outcome
        # failed:<pod> or deadline
        kubelet.stop()
        with self.store.write() as tx:
            if outcome == "deadline":
                reason, message = TRAINJOB_DEADLINE
            else:
                pod = self.record.pods[outcome.split(":", 1)[1]]
                record.job_event(tx, pod.rjob, "Warning", *JOB_BACKOFF)
                reason = JS_FAILED[0]
                message = jobset_failed_message(self.place.job_name(pod.rjob))
                record.jobset_event(tx, "Warning", reason, message)
            record.set_condition(tx, FAILED, "True", reason, message)
            record.write_jobs_status(tx)
        kubelet.sweep()
        return outcome

    def jobs_completed(self, tx: Tx, rjobs: list[str]) -> None:
        """The Jobs of ``rjobs`` completed: the Job controller says so as each one does
        (an initializer's before the trainer's pods are made)."""
        for rjob in rjobs:
            self.record.job_event(tx, rjob, "Normal", *JOB_COMPLETED_EVENT)

    def mark_suspended(self) -> None:
        record = self.record
        with self.store.write() as tx:
            if not record.suspended():
                record.jobset_event(tx, "Normal", *JS_SUSPENDED)
            record.set_condition(tx, SUSPENDED, "True", *TRAINJOB_SUSPENDED)
            record.write_jobs_status(tx, suspended=True)

    def drop_suspended(self, pods: list[JSON]) -> None:
        """Delete, with their logs, the pods of a dead supervisor's job that a
        suspension deletes (:meth:`Kubelet.stop`): all but the initializers that
        succeeded, which are kept and not run again. A resume then starts the rest
        afresh instead of taking a pod left ``Running`` for a crash."""
        stale = []  # (name, replicated job)
        for pod in pods:
            rjob = _rjob(pod)
            if (pod.get("status") or {}).get("phase") != "Succeeded" or rjob not in INITIALIZERS:
                stale.append((str((pod.get("metadata") or {}).get("name")), rjob))
        with self.store.write() as tx:
            for name, rjob in stale:
                self.kubelet.delete_pod(tx, name, rjob)
        for name, _ in stale:
            self.kubelet.remove_log(name)

    def ensure_suspended(self) -> None:
        if self.kubelet.runner is not None:
            # Containers outlive a supervisor that died while suspending: none may run.
            self.kubelet.runner.sweep(remove=True)
        if not self.record.suspended():
            self.mark_suspended()

    def recover(self, stale: list[JSON], why: str = _CRASHED) -> None:
        """A supervisor died (or was stopped) with pods running: stop what is left of
        them and fail the job (the pods' nodes were lost); ``why`` goes on the pods."""
        self.kubelet.sweep(remove=True)
        now = now_iso()
        with self.store.write() as tx:
            first: str | None = None
            for pod in stale:
                meta = pod.get("metadata") or {}
                container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
                terminated = {
                    "exitCode": 137,
                    "reason": "Error",
                    "message": why,
                    "startedAt": now,
                    "finishedAt": now,
                }
                pod.setdefault("status", {}).update(
                    {
                        "phase": "Failed",
                        "containerStatuses": [
                            container_status(
                                str(container.get("name", NODE)),
                                str(container.get("image", "")),
                                terminated=terminated,
                            )
                        ],
                    }
                )
                tx.put(PODS, pod)
                first = first or (meta.get("labels") or {}).get(JOB_NAME_LABEL)
                # The writer died with its supervisor: end the log, or its followers
                # would wait for more forever.
                for c in (pod.get("spec") or {}).get("containers") or []:
                    path = self.place.paths.log_done(
                        self.place.namespace, str(meta.get("name")), str(c.get("name"))
                    )
                    with contextlib.suppress(OSError):
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.touch()
            message = jobset_failed_message(first or self.place.name)
            self.record.jobset_event(tx, "Warning", JS_FAILED[0], message)
            self.record.set_condition(tx, FAILED, "True", JS_FAILED[0], message)

    def crashed(self, exc: BaseException) -> None:
        """This supervisor failed (a bug, a full disk): no process of the job may
        outlive it, and the job says why instead of running forever."""
        with contextlib.suppress(Exception):
            pgids = [g for p in self.record.pods.values() for g in p.live_pgids]
            kill_tree(pgids, self.place.uid, 2.0, self.kubelet.reap)
        if self.kubelet.runner is not None:
            with contextlib.suppress(Exception):
                self.kubelet.runner.sweep(remove=True)
        message = f"the local supervisor failed: {type(exc).__name__}: {exc}"
        with contextlib.suppress(Exception), self.store.write() as tx:
            self.record.set_condition(tx, FAILED, "True", JS_FAILED[0], message)

    def purge(self) -> None:
        """Delete the job and everything it owns (its deletion was asked for)."""
        place = self.place
        purge_job(
            self.store, place.paths, place.namespace, place.name, place.uid, self.kubelet.reap
        )


def _rjob(pod: JSON) -> str:
    """The replicated job a stored pod belongs to (its label; a node's when absent)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return str(labels.get(REPLICATED_JOB_LABEL) or NODE)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print("usage: python -m kf_trainer_core.backends.local.supervisor STATE_DIR NS NAME UID")
        return 2
    paths = Paths(args[0])
    namespace, name, uid = args[1], args[2], args[3]
    supervisor = JobSupervisor(paths, namespace, name, uid)

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
        # Gone: deleted, or replaced by a new job of the same name.
        gone = not supervisor.record.load()
    except Exception as exc:
        import traceback

        traceback.print_exc()
        supervisor.crashed(exc)
        return 1
    finally:
        if gone:
            forget_run(paths, uid)
        unmark_supervising(paths, uid)
        lock.release(remove=gone)
        supervisor.store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
