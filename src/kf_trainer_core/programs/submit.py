"""Submitting a TrainJob idempotently, as programs: adopt the same job, refuse a
different one under its name, and number an orchestrator identity's attempts."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.errors import RESOURCES_BUSY_REASON
from kf_trainer_core.base.marks import CLAIM_ANNOTATION
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cluster.status import JobState, TrainJob, job_state, to_trainjob
from kf_trainer_core.errors import (
    BackendConfigRejectedError,
    ResourcesBusyError,
    SpecConflictError,
    SubmitError,
)
from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.calls import Create, Get, Patch
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.paging import list_all
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.manifest.builder import (
    ATTEMPT_ANNOTATION,
    IDENTITY_ANNOTATION,
    SPEC_HASH_ANNOTATION,
    BuiltTrainJob,
)
from kf_trainer_core.manifest.selectors import identity_selector
from kf_trainer_core.programs.reads import about_namespace, missing_namespace_error


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
        from kf_trainer_core.base.hints import command
        from kf_trainer_core.config import KubernetesConfig

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


#: How many one-second rounds a submit waits for a job of the same name that is being
#: deleted. The suite's own deletes are background ones (the TrainJob goes at once);
#: what is still being deleted is held by a foreground delete or another finalizer, and
#: Trainer v2.3 can keep a foreground delete of an unfinished job going for minutes
#: (docs/safety.md): a minute, then a clear error rather than a task hung for longer.
DELETION_WAIT_ROUNDS = 60


async def submit(api: Api, namespace: str, built: BuiltTrainJob) -> Submitted:
    """Create the TrainJob once.

    A 409 for a job carrying the same spec hash is adoption (a retried task finds the
    job its crashed predecessor created); the same name with another spec is a
    :class:`SpecConflictError`; a job being deleted is waited out, then created anew.
    """
    for _ in range(DELETION_WAIT_ROUNDS):
        created = await _create(api, namespace, built)
        if created is not None:
            return created
        try:
            existing = await api(Get(TRAINJOBS, namespace, built.name))
        except ApiError as err:
            if err.not_found:
                continue  # deleted in between: create again
            raise
        settled = _settle(namespace, built, existing)
        if settled is not None:
            return settled
        await api.sleep(1.0)  # being deleted: create again once it is gone
    raise SubmitError(
        f"TrainJob {namespace}/{built.name} is still being deleted after "
        f"{DELETION_WAIT_ROUNDS} s (a foreground delete or a finalizer holds it), or kept "
        "being deleted and created again. Fix: delete it again (delete_job, or kf-trainer jobs "
        "delete: a background delete ends a foreground one), then submit again."
    )


async def _create(api: Api, namespace: str, built: BuiltTrainJob) -> Submitted | None:
    """Create the job; ``None`` when a job of that name exists (409)."""
    try:
        obj = await api(Create(TRAINJOBS, namespace, built.manifest))
    except ApiError as err:
        if about_namespace(err, namespace):
            raise missing_namespace_error(
                namespace, f"TrainJob {built.name} cannot be created"
            ) from None
        if err.invalid or err.code == 400:
            causes = "; ".join(err.causes()) or err.message
            if _all_busy(err):
                raise ResourcesBusyError(
                    f"the backend cannot run TrainJob {shown(built.name)} now: {causes}"
                ) from None
            if any(c.startswith("backend.") for c in err.causes()):
                raise BackendConfigRejectedError(
                    f"the backend cannot run TrainJob {shown(built.name)} as it is configured: "
                    f"{causes}"
                ) from None
            raise SubmitError(
                f"the API server rejected TrainJob {shown(built.name)}: {causes}"
            ) from None
        if not err.conflict:
            raise
        return None
    return Submitted(to_trainjob(obj), True, obj)


def _all_busy(err: ApiError) -> bool:
    """Whether a 422 refuses the job only for what other jobs hold now (capacity)."""
    found = (err.status.get("details") or {}).get("causes") or []
    return bool(found) and all(
        isinstance(c, Mapping) and c.get("reason") == RESOURCES_BUSY_REASON for c in found
    )


def _settle(namespace: str, built: BuiltTrainJob, existing: Mapping[str, Any]) -> Submitted | None:
    """What a submit of ``built`` makes of the job already under its name: adoption
    (same spec hash), a :class:`SpecConflictError`, or ``None`` while it is being
    deleted (create again once it is gone)."""
    meta = existing.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    theirs = (meta.get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
    if theirs != built.spec_hash:
        raise SpecConflictError(
            f"TrainJob {namespace}/{built.name} already exists with a different spec "
            f"(spec hash {str(theirs)[:12]}, ours {built.spec_hash[:12]}). Fix: choose another "
            "name, or delete the old job if it may be replaced."
        )
    obj = dict(existing)
    return Submitted(to_trainjob(obj), False, obj)


async def submit_identity(
    api: Api,
    namespace: str,
    identity: str,
    build: Callable[[int], BuiltTrainJob],
    fresh_after_failure: bool,
) -> Submitted:
    """Submit for an orchestrator identity (``build(attempt)`` makes the job of an
    attempt): reattach to its job or, when the last attempt failed and
    ``fresh_after_failure``, submit the next attempt.

    The common case is a fresh identity, and it costs one request: attempt 0 is created
    under the name the identity determines. That name is the identity's lock — every
    later attempt is made only after a create of attempt 0 was refused with a 409 — so
    only a refused create looks further: the identity's jobs are listed (one request)
    and :func:`choose_attempt` decides, as before. Concurrent submitters of a fresh
    identity race on that one name: one creates it, the others adopt it.

    When attempt 0 is deleted while later attempts remain (by hand: the suite's prune
    keeps the first attempt while it keeps later ones), the identity's lock is gone: the
    next submit creates attempt 0 again, as a fresh start of the identity, and later
    submits adopt whichever attempt completed (:func:`choose_attempt`)."""
    first = build(0)
    for _ in range(DELETION_WAIT_ROUNDS):
        created = await _create(api, namespace, first)
        if created is not None:
            return created
        jobs = await jobs_for_identity(api, namespace, identity)
        attempt = choose_attempt(jobs, fresh_after_failure)
        built = first if attempt == 0 else build(attempt)
        # The job under the chosen name was just listed: settle with it rather than
        # asking the server twice more (a create refused again, then a read).
        listed = next(
            (o for o in jobs if (o.get("metadata") or {}).get("name") == built.name), None
        )
        if listed is not None:
            settled = _settle(namespace, built, listed)
            if settled is not None:
                return settled
        if attempt > 0 and listed is None and not (await _claim(api, namespace, first, attempt)):
            continue  # attempt 0 went meanwhile: the identity starts over
        return await submit(api, namespace, built)
    raise SubmitError(
        f"the jobs of identity {shown(identity)} kept changing while a submit "
        "chose among them. Fix: submit again."
    )


async def _claim(api: Api, namespace: str, first: BuiltTrainJob, attempt: int) -> bool:
    """Mark attempt 0 (the identity's lock) before creating ``attempt``; ``False`` when
    attempt 0 is gone. A prune racing this rerun keeps attempt 0 while the claimed
    attempt is not yet to be seen (the patch also moves attempt 0's resourceVersion, so
    a delete already under way with the old one is refused). Where the patch is refused
    (no ``patch`` right) the submit goes ahead unmarked, as before there were claims."""
    stamp = f"{attempt} {int(time.time())}"
    try:
        await api(
            Patch(
                TRAINJOBS,
                namespace,
                first.name,
                {"metadata": {"annotations": {CLAIM_ANNOTATION: stamp}}},
            )
        )
    except ApiError as err:
        if err.not_found:
            return False
        if not 400 <= err.code < 500:
            raise
    return True


def claim_of(obj: Mapping[str, Any]) -> tuple[int, float] | None:
    """The later attempt a rerun claimed on this attempt 0, and when (unix seconds);
    ``None`` without a readable claim (cluster data: anything else is ignored)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(CLAIM_ANNOTATION)
    if not isinstance(raw, str):
        return None
    attempt, _, when = raw.partition(" ")
    number, seconds = untrusted.whole_number(attempt, 1), untrusted.whole_number(when)
    return None if number is None or seconds is None else (number, float(seconds))


def attempt_of(obj: Mapping[str, Any]) -> int:
    """The attempt number the builder wrote on a job (``0`` for the first attempt,
    which carries no annotation)."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(ATTEMPT_ANNOTATION)
    return untrusted.whole_number(value) or 0


async def jobs_for_identity(api: Api, namespace: str, identity: str) -> list[dict[str, Any]]:
    """All TrainJobs submitted for an orchestrator identity, by attempt number.

    The label holds a digest of the identity; the annotation the identity itself, which
    is checked so that another identity's jobs are never taken for ours."""
    listing = await list_all(api, TRAINJOBS, namespace, label_selector=identity_selector(identity))
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
    * otherwise a complete attempt is adopted, its result kept (the highest one);
    * otherwise the highest attempt decides: failed (and ``fresh_after_failure``)
      means a fresh attempt numbered one higher; complete (or failed without
      ``fresh_after_failure``) is adopted, its result kept; one being deleted is
      submitted again under its number once it is gone.
    """
    if not existing:
        return 0
    standing = [o for o in existing if not (o.get("metadata") or {}).get("deletionTimestamp")]
    live = [o for o in standing if not job_state(o).terminal]
    if live:
        return max(attempt_of(o) for o in live)
    complete = [o for o in standing if job_state(o) is JobState.COMPLETE]
    if complete:
        # Whatever failed after it (only when attempt 0 was deleted and made again: see
        # submit_identity), a complete attempt's result is the identity's.
        return max(attempt_of(o) for o in complete)
    newest = max(existing, key=attempt_of)
    if fresh_after_failure and job_state(newest) is JobState.FAILED:
        return attempt_of(newest) + 1
    return attempt_of(newest)
