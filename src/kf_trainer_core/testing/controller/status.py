"""Statuses flowing up: Job status, the JobSet's ``replicatedJobsStatus`` and
conditions, the TrainJob's ``conditions`` and ``jobsStatus``.

Changes mark a TrainJob (and Jobs) dirty; the worker writes each dirty TrainJob's
statuses once at the end of a batch, and only what changed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial

from kf_trainer_core.emulation.jobs import replicated_job_status, trainjob_jobs_status
from kf_trainer_core.k8s.trainjob import COMPLETE
from kf_trainer_core.testing.controller.state import JobSim, Sim, safe
from kf_trainer_core.testing.controller.vocab import JOBS, JSON
from kf_trainer_core.testing.controller.worker import guarded
from kf_trainer_core.testing.store import JOBSETS, TRAINJOBS, Resource, Store, json_copy


class StatusWriter:
    """Collects dirty TrainJobs/Jobs and writes their status subresources."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._dirty: set[Sim] = set()

    def mark(self, sim: Sim, job: JobSim | None = None) -> None:
        """The status of ``sim`` (and ``job``) changed: write it at the end of the batch."""
        if sim.state == "gone":
            return
        self._dirty.add(sim)
        if job is not None and job.alive:
            sim.dirty_jobs.add(job)

    def forget(self, sim: Sim | None = None) -> None:
        """Drop ``sim`` (or everything) from the pending writes."""
        if sim is None:
            self._dirty.clear()
        else:
            self._dirty.discard(sim)

    def flush_dirty(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for sim in dirty:
            if sim.state != "gone":
                guarded(partial(self.flush, sim))

    def flush(self, sim: Sim) -> None:
        for job in list(sim.dirty_jobs):
            if job.alive:
                self._write_job_status(job)
        sim.dirty_jobs.clear()
        if sim.jobset_uid and not sim.jobset_gone:
            rj_status = [
                replicated_job_status(r.name, (j.counts() for j in r.live_jobs()))
                for r in sim.rjobs
            ]
            self._write_jobset_status(sim, rj_status)
            sim.jobs_status = trainjob_jobs_status(rj_status)
        tj_status: JSON = {"conditions": json_copy(sim.tj_conditions)}
        if sim.jobs_status is not None:
            tj_status["jobsStatus"] = json_copy(sim.jobs_status)
        if tj_status == sim.last_tj_status:
            return

        def set_tj(obj: JSON, status: JSON = tj_status) -> None:
            st = obj.setdefault("status", {})
            if status["conditions"]:
                st["conditions"] = json_copy(status["conditions"])
            else:
                st.pop("conditions", None)
            if "jobsStatus" in status:
                st["jobsStatus"] = json_copy(status["jobsStatus"])
            if not st:
                obj.pop("status", None)

        if self._write_status(TRAINJOBS, sim, set_tj):
            sim.last_tj_status = tj_status

    def _write_jobset_status(self, sim: Sim, rj_status: list[JSON]) -> None:
        js_status: JSON = {"replicatedJobsStatus": rj_status}
        if sim.js_conditions:
            js_status["conditions"] = json_copy(sim.js_conditions)
        if sim.terminal:
            js_status["terminalState"] = "Completed" if sim.terminal == COMPLETE else "Failed"
        if js_status == sim.last_js_status:
            return

        def set_js(obj: JSON, status: JSON = js_status) -> None:
            obj["status"] = json_copy(status)

        if self._write_status(JOBSETS, sim, set_js):
            sim.last_js_status = js_status

    def _write_status(self, res: Resource, sim: Sim, fn: Callable[[JSON], None]) -> bool:
        written = safe(self.store.mutate, res, sim.namespace, sim.name, fn, subresource="status")
        return written is not None

    def _write_job_status(self, job: JobSim) -> None:
        # Counts and times appear only once they are non-zero / set, as the Job
        # controller writes them.
        optional = {
            "active": job.active_count,
            "succeeded": len(job.succeeded),
            "completedIndexes": index_ranges(job.succeeded) if job.succeeded else None,
            "failed": job.failed,
            "startTime": job.start_time,
            "completionTime": job.completion_time,
            "conditions": json_copy(job.conditions) if job.conditions else None,
        }
        status: JSON = {
            "ready": job.ready_count,
            "terminating": 0,
            "uncountedTerminatedPods": {},
            **{key: value for key, value in optional.items() if value},
        }

        def fn(obj: JSON) -> None:
            obj["status"] = status
            obj.setdefault("spec", {})["suspend"] = job.suspended

        safe(self.store.mutate, JOBS, job.sim.namespace, job.name, fn, subresource="*")


def index_ranges(indexes: set[int]) -> str:
    """``completedIndexes`` notation: ``0-2,5``."""
    out: list[str] = []
    # Consecutive indexes share their distance from their position in the sorted list.
    for _, pairs in itertools.groupby(enumerate(sorted(indexes)), lambda pair: pair[1] - pair[0]):
        run = [i for _, i in pairs]
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)
