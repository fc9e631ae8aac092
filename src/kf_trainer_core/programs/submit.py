"""Submitting a TrainJob idempotently, as programs: adopt the same job, refuse a
different one under its name, and number an orchestrator identity's attempts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kf_trainer_core.builder import (
    ATTEMPT_ANNOTATION,
    IDENTITY_ANNOTATION,
    SPEC_HASH_ANNOTATION,
    BuiltTrainJob,
)
from kf_trainer_core.errors import BackendConfigRejectedError, SpecConflictError, SubmitError
from kf_trainer_core.k8s.calls import Create, Get, Program, Sleep
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.paging import list_all
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.selectors import identity_selector
from kf_trainer_core.status import JobState, TrainJob, job_state, to_trainjob


@dataclass(frozen=True)
class Submitted:
    """The outcome of an idempotent submit."""

    job: TrainJob
    created: bool
    #: The raw object as the API returned it.
    obj: dict[str, Any]

    def reuse_notice(self, config: Any = None) -> str | None:
        """What to tell the user when the submit found a job that has already finished
        (a rerun under the same identity or name): its result is reused and nothing
        trains again, so its log is not replayed as if it did. ``None`` otherwise.
        ``config`` (the client's backend configuration) makes the command it prints
        reach the job, as printed (``--backend local --state-dir …`` for local jobs)."""
        if self.created or not self.job.status.terminal:
            return None
        from kf_trainer_core.config import KubernetesConfig
        from kf_trainer_core.hints import command

        job = self.job
        look = command(
            config if config is not None else KubernetesConfig(),
            ["jobs", "logs", job.name],
            namespace=job.namespace,
        )
        return (
            f"[kf-trainer] reusing the finished job {job.namespace}/{job.name} "
            f"({job.status.value}); nothing trains again and its log is not replayed "
            f"(read it with: {look})"
        )


def submit(namespace: str, built: BuiltTrainJob) -> Program[Submitted]:
    """Create the TrainJob once.

    A 409 for a job carrying the same spec hash is adoption (a retried task finds the
    job its crashed predecessor created); the same name with another spec is a
    :class:`SpecConflictError`; a job being deleted is waited out, then created anew.
    """
    manifest = built.manifest
    for _ in range(60):
        try:
            obj = yield Create(TRAINJOBS, namespace, manifest)
            return Submitted(to_trainjob(obj), True, obj)
        except ApiError as err:
            if err.invalid or err.code == 400:
                causes = "; ".join(err.causes()) or err.message
                if any(c.startswith("backend.") for c in err.causes()):
                    raise BackendConfigRejectedError(
                        f"the backend cannot run TrainJob {built.name!r} as it is "
                        f"configured: {causes}"
                    ) from None
                raise SubmitError(
                    f"the API server rejected TrainJob {built.name!r}: {causes}"
                ) from None
            if not err.conflict:
                raise
        try:
            existing = yield Get(TRAINJOBS, namespace, built.name)
        except ApiError as err:
            if err.not_found:
                continue  # deleted in between: create again
            raise
        meta = existing.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            yield Sleep(1.0)
            continue
        theirs = (meta.get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
        if theirs != built.spec_hash:
            raise SpecConflictError(
                f"TrainJob {namespace}/{built.name} already exists with a different spec "
                f"(spec hash {str(theirs)[:12]}, ours {built.spec_hash[:12]}). Fix: choose another "
                "name, or delete the old job if it may be replaced."
            )
        return Submitted(to_trainjob(existing), False, existing)
    raise SubmitError(f"TrainJob {namespace}/{built.name} kept being deleted and recreated")


def attempt_of(obj: Mapping[str, Any]) -> int:
    """The attempt number the builder wrote on a job (``0`` for the first attempt,
    which carries no annotation)."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(ATTEMPT_ANNOTATION)
    try:
        return max(0, int(str(value))) if value is not None else 0
    except ValueError:
        return 0


def jobs_for_identity(namespace: str, identity: str) -> Program[list[dict[str, Any]]]:
    """All TrainJobs submitted for an orchestrator identity, by attempt number.

    The label holds a digest of the identity; the annotation the identity itself, which
    is checked so that another identity's jobs are never taken for ours."""
    listing = yield from list_all(TRAINJOBS, namespace, label_selector=identity_selector(identity))
    items: list[dict[str, Any]] = [
        o
        for o in listing["items"]
        if ((o.get("metadata") or {}).get("annotations") or {}).get(IDENTITY_ANNOTATION)
        in (None, identity)
    ]
    return sorted(items, key=lambda o: (attempt_of(o), str(o["metadata"].get("name"))))


def choose_attempt(existing: list[dict[str, Any]], fresh_after_failure: bool) -> int:
    """The attempt a submit for an identity goes to, given the identity's jobs.

    The attempt annotation is the truth, not creation times (one-second resolution: an
    attempt that failed within a second of its successor's creation could pass for
    the newest) nor the number of jobs (a deleted old attempt made a retry adopt a
    failed one). So:

    * a live attempt (not finished, not being deleted) is adopted — there is exactly
      one live job per identity, however many retries run;
    * otherwise the highest attempt decides: failed (and ``fresh_after_failure``)
      means a fresh attempt numbered one higher; complete (or failed without
      ``fresh_after_failure``) is adopted, its result kept; one being deleted is
      submitted again under its number once it is gone.
    """
    if not existing:
        return 0
    live = [
        o
        for o in existing
        if not job_state(o).terminal and not (o.get("metadata") or {}).get("deletionTimestamp")
    ]
    if live:
        return max(attempt_of(o) for o in live)
    newest = max(existing, key=attempt_of)
    if fresh_after_failure and job_state(newest) is JobState.FAILED:
        return attempt_of(newest) + 1
    return attempt_of(newest)
