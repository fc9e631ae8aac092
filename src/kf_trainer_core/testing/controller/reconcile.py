"""The TrainJob reconciler: a TrainJob's JobSet is built from its runtime and created,
suspended and resumed with it, failed at its deadline, rebuilt when deleted, and a
Warning Event says why it cannot be built."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial

from kf_trainer_core.k8s.objects import set_condition
from kf_trainer_core.k8s.trainjob import (
    COMPLETE,
    CREATION_FAILED_PREFIX,
    CREATION_FAILED_REASON,
    FAILED,
    JOB_RESUMED,
    JOB_SUSPENDED,
    JS_RESUMED,
    JS_SUSPENDED,
    RUNTIME_NOT_SUPPORTED_REASON,
    SUSPENDED,
    TRAINER_GROUP,
    TRAINJOB_DEADLINE,
    TRAINJOB_RESUMED,
    TRAINJOB_SUSPENDED,
    runtime_not_found,
)
from kf_trainer_core.testing.controller.jobset import build_jobset
from kf_trainer_core.testing.controller.parts import ClusterParts
from kf_trainer_core.testing.controller.state import BuildError, Built, Sim, create_or_replace, safe
from kf_trainer_core.testing.controller.vocab import JSON, MULTIKUEUE
from kf_trainer_core.testing.scenarios import DEFAULT_PRESET, SCENARIO_ANNOTATION, Scenario
from kf_trainer_core.testing.store import (
    CLUSTER_TRAINING_RUNTIMES,
    JOBSETS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    Resource,
    format_timestamp,
    json_copy,
)

_log = logging.getLogger(__name__)

Match = str | Callable[[JSON], bool]


class TrainJobReconciler:
    """Follows TrainJobs (and their runtimes and JobSets) as Trainer's controller does."""

    def __init__(self, cx: ClusterParts) -> None:
        self.cx = cx

    # ------------------------------------------------------------------ store events

    def on_trainjob(self, kind: str, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        ns, name, uid = (
            str(meta.get("namespace") or ""),
            str(meta.get("name")),
            str(meta.get("uid")),
        )
        sim = self.cx.sims.get((ns, name))
        if kind == "DELETED":
            if sim is not None and sim.uid == uid:
                self.teardown(sim)
            return
        if sim is not None and sim.uid != uid:
            self.teardown(sim)  # deleted and recreated under the same name
            sim = None
        if meta.get("deletionTimestamp"):
            if sim is not None:
                self.teardown(sim)
            return
        spec = obj.get("spec") or {}
        if sim is None:
            if spec.get("managedBy") == MULTIKUEUE:
                return  # the real controller leaves these to Kueue's MultiKueue
            self._create_sim(obj)
            return
        sim.obj = obj
        generation = int(meta.get("generation") or 1)
        if generation == sim.generation:
            return  # a status write (ours, mostly): nothing to do
        sim.generation = generation
        if sim.state == "build-failed":
            self._build(sim)
        elif sim.state == "active":
            want = bool(spec.get("suspend"))
            if want and not sim.suspended:
                self._suspend(sim)
            elif not want and sim.suspended:
                self._resume(sim)

    def on_runtime_changed(self, res: Resource, obj: JSON) -> None:
        # The real controller retries a failed reconcile with backoff; here a runtime
        # appearing (or changing) is what makes a retry worthwhile.
        ns = (obj.get("metadata") or {}).get("namespace")
        for sim in list(self.cx.sims.values()):
            if sim.state != "build-failed":
                continue
            if res == TRAINING_RUNTIMES and sim.namespace != ns:
                continue
            self._build(sim)

    def on_jobset_deleted(self, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        sim = self.cx.sims.get((str(meta.get("namespace")), str(meta.get("name"))))
        if sim is None or sim.jobset_gone or sim.jobset_uid != meta.get("uid"):
            return
        sim.jobset_gone = True
        self.cx.job_ctl.drop_all(sim)
        if sim.state == "active" and not sim.terminal:
            # The Trainer rebuilds the JobSet of an unfinished TrainJob: start over.
            sim.new_run()
            self._build(sim)

    # ------------------------------------------------------------------ building

    def _create_sim(self, obj: JSON) -> None:
        cx = self.cx
        meta = obj["metadata"]
        scenario, error = cx.scenarios.select(obj)
        sim = Sim(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta["name"]),
            uid=str(meta.get("uid")),
            generation=int(meta.get("generation") or 1),
            obj=obj,
            scenario=scenario,
        )
        cx.sims[sim.key] = sim
        finished = [
            c
            for c in (obj.get("status") or {}).get("conditions") or []
            if c.get("type") in (COMPLETE, FAILED) and c.get("status") == "True"
        ]
        if finished:
            # Seen finished (a controller restart): the Trainer never touches it again.
            sim.state, sim.terminal = "finished", str(finished[0]["type"])
            sim.tj_conditions = json_copy((obj.get("status") or {}).get("conditions") or [])
            return
        if error:
            _log.warning("TrainJob %s/%s: %s", sim.namespace, sim.name, error)
            cx.events.trainjob(
                sim, "Warning", "InvalidTestScenario", error, component="kf-trainer-suite-simulator"
            )
        self._build(sim)

    def _build(self, sim: Sim) -> None:
        spec = sim.spec
        ref = spec.get("runtimeRef") or {}
        kind = str(ref.get("kind") or "ClusterTrainingRuntime")
        group = str(ref.get("apiGroup") or TRAINER_GROUP)
        suspended = bool(spec.get("suspend"))
        if group != TRAINER_GROUP or kind not in ("ClusterTrainingRuntime", "TrainingRuntime"):
            # Only the runtime registry lookup fails this way: a Failed condition.
            gk = f"{kind}.{group}" if group else kind
            sim.state, sim.terminal = "finished", FAILED
            set_condition(
                sim.tj_conditions,
                FAILED,
                "True",
                RUNTIME_NOT_SUPPORTED_REASON,
                f"unsupported runtime: {gk}",
            )
            self.cx.status.mark(sim)
            return
        try:
            if sim.scenario.creation_failure:
                raise BuildError(sim.scenario.creation_failure)
            runtime = self._get_runtime(kind, sim.namespace, str(ref.get("name") or ""))
            built = build_jobset(sim, kind, runtime, self.cx.status_server)
        except BuildError as exc:
            sim.state = "build-failed"
            text = str(exc)
            message = f"{CREATION_FAILED_PREFIX}{text[:950]}" + (" ..." if len(text) > 950 else "")
            events = self.cx.events
            # The Trainer returns the error and is requeued at once (a 5 ms back-off):
            # the event twice, which its events.k8s.io recorder writes as one with
            # ``series.count`` 2 (later repeats wait for the recorder's heartbeat).
            for _ in range(2):
                events.trainjob(
                    sim, "Warning", CREATION_FAILED_REASON, message, action="Reconciling"
                )
            if suspended:
                set_condition(sim.tj_conditions, SUSPENDED, "True", *TRAINJOB_SUSPENDED)
            self.cx.status.mark(sim)
            return
        self._launch(sim, built)

    def _get_runtime(self, kind: str, namespace: str, name: str) -> JSON:
        res = TRAINING_RUNTIMES if kind == "TrainingRuntime" else CLUSTER_TRAINING_RUNTIMES
        obj = self.cx.store.try_get(res, namespace if res.namespaced else None, name)
        if obj is None:
            raise BuildError(runtime_not_found(res.kind, name))
        return obj

    def _launch(self, sim: Sim, built: Built) -> None:
        cx = self.cx
        for res, obj in built.extra:
            create_or_replace(cx.store, res, obj)
        jobset = built.jobset
        created = safe(cx.store.create, JOBSETS, jobset)
        if created is None:
            # A JobSet of that name is left over (e.g. from before a controller restart):
            # replace it, as server-side apply with force ownership would.
            safe(cx.store.delete, JOBSETS, sim.namespace, sim.name)
            created = safe(cx.store.create, JOBSETS, jobset)
            if created is None:
                _log.warning("cannot create JobSet %s/%s", sim.namespace, sim.name)
                return
        sim.jobset = created
        sim.jobset_uid = str(created["metadata"]["uid"])
        sim.jobset_gone = False
        sim.rjobs = built.rjobs
        sim.is_mpi, sim.nnodes, sim.nproc = built.is_mpi, built.nnodes, built.nproc
        policy = (jobset.get("spec") or {}).get("successPolicy") or {}
        sim.success_operator = str(policy.get("operator") or "All")
        sim.success_targets = list(policy.get("targetReplicatedJobs") or [])
        sim.state = "active"
        sim.last_js_status = None
        sim.js_conditions = []  # a new JobSet starts without conditions
        sim.suspended = bool(sim.spec.get("suspend"))
        if sim.suspended:
            # A suspended JobSet still gets its (suspended) Jobs, but no pods.
            for rjob in sim.rjobs:
                if not rjob.depends_on:
                    cx.job_ctl.start_rjob(sim, rjob, suspended=True)
            cx.events.jobset(sim, "Normal", *JS_SUSPENDED)
            set_condition(sim.js_conditions, SUSPENDED, "True", *JS_SUSPENDED)
            set_condition(sim.tj_conditions, SUSPENDED, "True", *TRAINJOB_SUSPENDED)
        else:
            cx.job_ctl.check_startup(sim)
            self._arm_run_timers(sim)
        cx.status.mark(sim)

    # ------------------------------------------------------------------ timers

    def _arm_run_timers(self, sim: Sim) -> None:
        sc = sim.scenario
        deadline = sc.deadline
        if deadline is None:
            ads = sim.spec.get("activeDeadlineSeconds")
            deadline = float(ads) if isinstance(ads, (int, float)) and ads > 0 else None
        if deadline is not None:
            self.cx.worker.after(deadline, sim.token, partial(self._deadline_hit, sim))
        if sc.suspend_after is not None and not sim.auto_suspend_done:
            self.cx.worker.after(sc.suspend_after, sim.life, partial(self._auto_suspend, sim))

    def _auto_suspend(self, sim: Sim) -> None:
        if sim.state != "active" or sim.suspended or sim.terminal:
            return
        sim.auto_suspend_done = True
        sim.auto_suspended = True
        # Kueue preempts by patching spec.suspend; the change comes back as an event.
        self._patch_suspend(sim, True)

    def _auto_resume(self, sim: Sim) -> None:
        if sim.state != "active" or not sim.suspended or sim.terminal:
            return
        sim.auto_suspended = False
        self._patch_suspend(sim, False)

    def _patch_suspend(self, sim: Sim, value: bool) -> None:
        patch = {"spec": {"suspend": value}}
        safe(self.cx.store.patch, TRAINJOBS, sim.namespace, sim.name, patch)

    def _deadline_hit(self, sim: Sim) -> None:
        if sim.state != "active" or sim.terminal or sim.suspended:
            return
        sim.terminal, sim.state = FAILED, "finished"
        set_condition(sim.tj_conditions, FAILED, "True", *TRAINJOB_DEADLINE)
        sim.end()
        # The Trainer deletes the JobSet; the cascade takes Jobs and pods with it.
        self.cx.job_ctl.drop_all(sim)
        sim.jobset_gone = True
        safe(self.cx.store.delete, JOBSETS, sim.namespace, sim.name)
        self.cx.status.mark(sim)

    # ------------------------------------------------------------------ suspend / resume

    def _suspend(self, sim: Sim) -> None:
        cx = self.cx
        sim.suspended = True
        sim.new_run()
        for job in sim.live_jobs():
            if job.finished or job.suspended:
                continue
            for pod in list(job.pods.values()):
                if pod.active:
                    cx.events.job(job, "Normal", "SuccessfulDelete", f"Deleted pod: {pod.name}")
                cx.kubelet.kill(pod, delete=True)
            job.suspended = True
            job.start_time = None
            set_condition(job.conditions, SUSPENDED, "True", *JOB_SUSPENDED, probe=True)
            cx.events.job(job, "Normal", "Suspended", "Job suspended")
            cx.status.mark(sim, job)
        self._patch_jobset_suspend(sim, True)
        set_condition(sim.js_conditions, SUSPENDED, "True", *JS_SUSPENDED)
        cx.events.jobset(sim, "Normal", *JS_SUSPENDED)
        set_condition(sim.tj_conditions, SUSPENDED, "True", *TRAINJOB_SUSPENDED)
        if sim.auto_suspended and sim.scenario.resume_after is not None:
            cx.worker.after(sim.scenario.resume_after, sim.life, partial(self._auto_resume, sim))
        cx.status.mark(sim)

    def _resume(self, sim: Sim) -> None:
        cx = self.cx
        sim.suspended = False
        sim.new_run()
        self._patch_jobset_suspend(sim, False)
        set_condition(sim.js_conditions, SUSPENDED, "False", *JS_RESUMED)
        cx.events.jobset(sim, "Normal", *JS_RESUMED)
        now = format_timestamp()
        for job in sim.live_jobs():
            if not job.suspended:
                continue
            job.suspended = False
            job.start_time = now
            set_condition(job.conditions, SUSPENDED, "False", *JOB_RESUMED, probe=True)
            cx.events.job(job, "Normal", "Resumed", "Job resumed")
            cx.job_ctl.fill_job(job)
            cx.status.mark(sim, job)
        # The deadline counts from the resume (the Suspended=False transition time).
        set_condition(sim.tj_conditions, SUSPENDED, "False", *TRAINJOB_RESUMED)
        cx.job_ctl.check_startup(sim)
        self._arm_run_timers(sim)
        cx.status.mark(sim)

    def _patch_jobset_suspend(self, sim: Sim, value: bool) -> None:
        if sim.jobset_gone:
            return

        def fn(obj: JSON) -> None:
            obj.setdefault("spec", {})["suspend"] = value

        safe(self.cx.store.mutate, JOBSETS, sim.namespace, sim.name, fn)

    def teardown(self, sim: Sim) -> None:
        """The TrainJob is gone: stop driving it (the store cascades the objects)."""
        sim.state = "gone"
        sim.end()
        self.cx.job_ctl.drop_all(sim)
        if self.cx.sims.get(sim.key) is sim:
            del self.cx.sims[sim.key]
        self.cx.status.forget(sim)


class ScenarioBook:
    """Which :class:`Scenario` a TrainJob gets: its annotation, else the latest matching
    script, else the default."""

    def __init__(self, preset: str = DEFAULT_PRESET) -> None:
        #: The preset a reset goes back to.
        self.preset = preset
        self.default = Scenario.preset(preset)
        self._scripts: list[tuple[Match, Scenario]] = []
        self._lock = threading.Lock()

    def add(self, match: Match, scenario: Scenario) -> None:
        with self._lock:
            self._scripts.append((match, scenario))

    def reset(self) -> None:
        self.default = Scenario.preset(self.preset)
        with self._lock:
            self._scripts.clear()

    def select(self, obj: JSON) -> tuple[Scenario, str | None]:
        """The scenario for TrainJob ``obj``, and why its annotation was ignored."""
        meta = obj.get("metadata") or {}
        note = (meta.get("annotations") or {}).get(SCENARIO_ANNOTATION)
        error: str | None = None
        if note:
            try:
                return Scenario.from_annotation(str(note)), None
            except ValueError as exc:
                error = f"invalid {SCENARIO_ANNOTATION} annotation ({exc}); using the default"
        with self._lock:
            scripts = list(self._scripts)
        for match, scenario in reversed(scripts):
            try:
                hit = match == meta.get("name") if isinstance(match, str) else bool(match(obj))
            except Exception:
                _log.exception("scenario predicate %r failed", match)
                hit = False
            if hit:
                return scenario, error
        return self.default, error
