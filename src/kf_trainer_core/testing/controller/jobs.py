"""The JobSet and Job controllers: startup order, ``batch/v1`` Jobs and their pods,
back-off and retries, and the JobSet's outcome (success policy, first failed Job)."""

from __future__ import annotations

import logging
import time
from functools import partial

from kf_trainer_core.emulation.jobs import job_name, pod_for_index
from kf_trainer_core.k8s.objects import generate_suffix, owner_reference, set_condition
from kf_trainer_core.k8s.trainjob import (
    COMPLETE,
    FAILED,
    JOB_BACKOFF,
    JOB_COMPLETE,
    JOB_COMPLETED_EVENT,
    JOB_SUSPENDED,
    JOBSET_API,
    JS_COMPLETED,
    JS_FAILED,
    SUSPENDED,
    jobset_failed_message,
)
from kf_trainer_core.testing.controller.parts import ClusterParts
from kf_trainer_core.testing.controller.state import JobSim, PodSim, RJob, Sim, safe
from kf_trainer_core.testing.controller.vocab import JOBS, JSON
from kf_trainer_core.testing.scenarios import LOGS_ANNOTATION, UNSERVED_LOGS
from kf_trainer_core.testing.store import PODS, StoreError, format_timestamp, json_copy

_log = logging.getLogger(__name__)


class JobController:
    """Creates a JobSet's Jobs in startup order, their pods, and decides outcomes."""

    def __init__(self, cx: ClusterParts) -> None:
        self.cx = cx

    # ------------------------------------------------------------------ startup order

    def _dep_satisfied(self, sim: Sim, name: str, status: str) -> bool:
        dep = sim.rjob(name)
        if dep is None or not dep.started:
            return False
        jobs = dep.live_jobs()
        if len(jobs) < dep.replicas:
            return False
        if status == "Complete":
            return all(j.finished == "Complete" for j in jobs)
        return all(
            j.finished == "Complete"
            or (not j.finished and len(j.succeeded) + j.ready_count >= j.pod_count)
            for j in jobs
        )

    def check_startup(self, sim: Sim) -> None:
        """Start the replicated jobs whose ``dependsOn`` are now satisfied."""
        if sim.suspended or sim.terminal or sim.state != "active":
            return
        for rjob in sim.rjobs:
            if rjob.started:
                continue
            if all(self._dep_satisfied(sim, n, s) for n, s in rjob.depends_on):
                self.start_rjob(sim, rjob, suspended=False)

    def start_rjob(self, sim: Sim, rjob: RJob, *, suspended: bool) -> None:
        rjob.started = True
        for i in range(rjob.replicas):
            self.create_job(sim, rjob, i, suspended=suspended)

    # ------------------------------------------------------------------ Jobs

    def create_job(self, sim: Sim, rjob: RJob, index: int, *, suspended: bool) -> None:
        cx = self.cx
        job = JobSim(
            sim=sim,
            rjob=rjob,
            index=index,
            name=job_name(sim.name, rjob.name, index),
            suspended=suspended,
        )
        jt = rjob.template
        jobset_labels = job.ref.jobset_labels()
        jmeta = jt.get("metadata") or {}
        labels = {**(jmeta.get("labels") or {}), **jobset_labels}
        annotations = {**(jmeta.get("annotations") or {}), **jobset_labels}
        pod_template = json_copy(jt["spec"]["template"])
        ptm = pod_template.setdefault("metadata", {})
        ptm["labels"] = {**(ptm.get("labels") or {}), **jobset_labels}
        ptm["annotations"] = {**(ptm.get("annotations") or {}), **jobset_labels}
        jspec = {k: json_copy(v) for k, v in jt["spec"].items() if k != "template"}
        jspec.update(
            {
                "parallelism": rjob.parallelism,
                "completions": rjob.completions,
                "completionMode": "Indexed",
                "backoffLimit": rjob.backoff_limit,
                "suspend": suspended,
                "template": pod_template,
            }
        )
        obj = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job.name,
                "namespace": sim.namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    owner_reference(JOBSET_API, "JobSet", sim.name, sim.jobset_uid)
                ],
            },
            "spec": jspec,
        }
        created = safe(cx.store.create, JOBS, obj)
        if created is None:
            old = cx.store.try_get(JOBS, sim.namespace, job.name)
            if old is not None:
                safe(cx.store.delete, JOBS, sim.namespace, job.name)
            created = safe(cx.store.create, JOBS, obj)
            if created is None:
                return
        job.uid = str(created["metadata"]["uid"])
        rjob.jobs.append(job)
        cx.jobs[(sim.namespace, job.name)] = job
        if suspended:
            set_condition(job.conditions, SUSPENDED, "True", *JOB_SUSPENDED, probe=True)
        else:
            job.start_time = format_timestamp()
            self.fill_job(job)
        cx.status.mark(sim, job)

    def fill_job(self, job: JobSim) -> None:
        """Create pods for the indexes that have none, up to the Job's parallelism."""
        if not job.alive or job.finished or job.suspended or job.sim.terminal:
            return
        refused = job.sim.scenario.pods_refused
        if refused and job.rjob.kind == "trainer":
            # The real Job controller retries for ever, one FailedCreate Event after another.
            pod = f"{job.name}-0-sim"
            for key, value in (
                ("namespace", job.sim.namespace),
                ("job", job.sim.name),
                ("pod", pod),
            ):
                refused = refused.replace(f"{{{key}}}", value)
            self.cx.events.job(job, "Warning", "FailedCreate", refused)
            return
        for idx in range(job.rjob.completions):
            if job.active_count >= job.rjob.parallelism:
                break
            if idx in job.succeeded or idx in job.pods:
                continue
            self._create_pod(job, idx)

    def pod_done(self, pod: PodSim, success: bool) -> None:
        """A pod of the Job ended: count it, finish the Job or replace the pod."""
        job = pod.job
        sim = job.sim
        if job.pods.get(pod.index) is pod:
            del job.pods[pod.index]
        if not job.alive or job.finished:
            return
        if success:
            job.succeeded.add(pod.index)
            if len(job.succeeded) >= job.rjob.completions:
                self._job_finish(job, "Complete")
                return
            self.fill_job(job)
        else:
            job.failed += 1
            if job.failed > job.rjob.backoff_limit:
                self._job_finish(job, "Failed")
                return
            # The Job controller recreates the pod after an exponential back-off.
            delay = 0.02 * (2 ** min(job.failed - 1, 6))
            self.cx.worker.after(delay, sim.token, partial(self._retry_pod, job))
        self.cx.status.mark(sim, job)
        self.check_startup(sim)

    def _retry_pod(self, job: JobSim) -> None:
        self.fill_job(job)
        self.cx.status.mark(job.sim, job)

    def _job_finish(self, job: JobSim, outcome: str) -> None:
        cx = self.cx
        sim = job.sim
        job.finished = outcome
        now = format_timestamp()
        if outcome == "Complete":
            job.completion_time = now
            set_condition(job.conditions, "SuccessCriteriaMet", "True", *JOB_COMPLETE, probe=True)
            set_condition(job.conditions, "Complete", "True", *JOB_COMPLETE, probe=True)
            cx.events.job(job, "Normal", *JOB_COMPLETED_EVENT)
        else:
            job.failed_at = time.monotonic()
            set_condition(job.conditions, "FailureTarget", "True", *JOB_BACKOFF, probe=True)
            set_condition(job.conditions, "Failed", "True", *JOB_BACKOFF, probe=True)
            cx.events.job(job, "Warning", *JOB_BACKOFF)
            # The Job controller terminates the Job's other pods.
            for other in list(job.pods.values()):
                cx.kubelet.kill(other, delete=True)
        cx.status.mark(sim, job)
        self._evaluate_jobset(sim)

    def drop_job(self, job: JobSim, *, delete: bool) -> None:
        """Stop tracking a Job (deleted, or being deleted by a cascade)."""
        cx = self.cx
        job.alive = False
        for pod in list(job.pods.values()):
            cx.kubelet.kill(pod, delete=False)
        for key, tracked in list(cx.pods.items()):
            if tracked.job is job:
                tracked.alive = False
                del cx.pods[key]
        if cx.jobs.get((job.sim.namespace, job.name)) is job:
            del cx.jobs[(job.sim.namespace, job.name)]
        job.sim.dirty_jobs.discard(job)
        if delete:
            safe(cx.store.delete, JOBS, job.sim.namespace, job.name, propagation="Background")

    def drop_all(self, sim: Sim) -> None:
        """Stop tracking every Job of ``sim`` (its JobSet is going)."""
        for job in sim.live_jobs():
            self.drop_job(job, delete=False)

    def on_job_deleted(self, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        job = self.cx.jobs.get((str(meta.get("namespace")), str(meta.get("name"))))
        if job is None or job.uid != meta.get("uid") or not job.alive:
            return
        sim = job.sim
        self.drop_job(job, delete=False)
        if sim.state == "active" and not sim.terminal:
            # The JobSet controller recreates a missing Job.
            rjob = job.rjob
            rjob.jobs = [j for j in rjob.jobs if j is not job]
            self.create_job(sim, rjob, job.index, suspended=sim.suspended)
            self.cx.status.mark(sim)

    def on_pod_deleted(self, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        pod = self.cx.pods.get((str(meta.get("namespace")), str(meta.get("name"))))
        if pod is None or pod.uid != meta.get("uid") or not pod.alive:
            return  # ours, or already forgotten
        was_active = pod.active
        self.cx.kubelet.kill(pod, delete=False)
        job = pod.job
        # The Job controller replaces a deleted pod (a real cluster's default
        # backoffLimit of 6 tolerates it), unless the Job is done or suspended.
        if was_active and job.alive and not job.finished and not job.suspended:
            self.fill_job(job)
            self.cx.status.mark(job.sim, job)

    # ------------------------------------------------------------------ JobSet outcome

    def _evaluate_jobset(self, sim: Sim) -> None:
        if sim.terminal or sim.state != "active":
            return
        failed = [j for j in sim.live_jobs() if j.finished == "Failed"]
        if failed:
            first = min(failed, key=lambda j: j.failed_at)
            self._finish_jobset(sim, "Failed", JS_FAILED[0], jobset_failed_message(first.name))
            return
        targets = [r for r in sim.rjobs if not sim.success_targets or r.name in sim.success_targets]
        if sim.success_operator == "Any":
            done = any(j.finished == "Complete" for r in targets for j in r.live_jobs())
        else:
            done = bool(targets) and all(
                r.started
                and len(r.live_jobs()) >= r.replicas
                and all(j.finished == "Complete" for j in r.live_jobs())
                for r in targets
            )
        if done:
            self._finish_jobset(sim, "Completed", *JS_COMPLETED)
            return
        self.check_startup(sim)

    def _finish_jobset(self, sim: Sim, outcome: str, reason: str, message: str) -> None:
        cx = self.cx
        sim.terminal = COMPLETE if outcome == "Completed" else FAILED
        sim.state = "finished"
        sim.end()
        set_condition(sim.js_conditions, outcome, "True", reason, message)
        cx.events.jobset(sim, "Normal" if outcome == "Completed" else "Warning", reason, message)
        # The TrainJob copies the JobSet's condition, renaming its type.
        cond = next(c for c in sim.js_conditions if c["type"] == outcome)
        copied = {**cond, "type": sim.terminal}
        sim.tj_conditions = [c for c in sim.tj_conditions if c["type"] != sim.terminal] + [copied]
        # A finished JobSet deletes its still-active Jobs (e.g. MPI worker nodes).
        for job in sim.live_jobs():
            if not job.finished:
                for pod in list(job.pods.values()):
                    cx.kubelet.kill(pod, delete=False)
                self.drop_job(job, delete=True)
        cx.status.mark(sim)

    # ------------------------------------------------------------------ Pods

    def _create_pod(self, job: JobSim, index: int) -> None:
        cx = self.cx
        sim, rjob = job.sim, job.rjob
        subdomain = ((sim.jobset.get("spec") or {}).get("network") or {}).get("subdomain")
        obj = pod_for_index(
            job.ref,
            rjob.template["spec"]["template"],
            index,
            subdomain=str(subdomain or sim.name),
        )
        meta, pspec = obj["metadata"], obj["spec"]
        labels, annotations = meta["labels"], meta["annotations"]
        if not sim.scenario.serve_logs:
            annotations[LOGS_ANNOTATION] = UNSERVED_LOGS
        created: JSON | None = None
        for attempt in range(5):
            if attempt:
                meta["name"] = f"{job.name}-{index}-{generate_suffix()}"
            try:
                created = cx.store.create(PODS, obj)
                break
            except StoreError as exc:
                if exc.reason != "AlreadyExists":
                    _log.debug("pod create failed: %s", exc)
                    return
        if created is None:
            return
        pod = PodSim(
            job=job,
            index=index,
            name=str(created["metadata"]["name"]),
            uid=str(created["metadata"]["uid"]),
            spec=pspec,
            labels=labels,
            annotations=annotations,
            main=rjob.main,
        )
        job.pods[index] = pod
        cx.pods[(sim.namespace, pod.name)] = pod
        cx.events.job(job, "Normal", "SuccessfulCreate", f"Created pod: {pod.name}")
        cx.kubelet.admit(pod)
