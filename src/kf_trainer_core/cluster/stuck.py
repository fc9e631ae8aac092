"""Reading a :class:`~kf_trainer_core.cluster.waiting.Waiting` from a job's pods: a step
whose Job is retrying failed pods (``Restarting``, with the attempt count), or a step
that cannot start (``Pending``: unschedulable, a container that cannot be created, pods
the API server refuses).

Pure functions of the TrainJob, its pods, its JobSet's ``backoffLimit`` per replicated
job (:func:`backoff_limits`) and a refusal read from its events; the programs read those
and the client, the CLI and the adapters show the result.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

from kf_trainer_core.base import untrusted
from kf_trainer_core.cluster.failures import classify, unschedulable
from kf_trainer_core.cluster.status import (
    STUCK_WAITING_REASONS,
    Failure,
    JobState,
    TrainJob,
    _is_mpi,
    job_state,
    newest_by_step,
    pod_recency,
    step_name,
    step_order,
    terminated,
)
from kf_trainer_core.cluster.waiting import Waiting
from kf_trainer_core.fields import names
from kf_trainer_core.k8s.trainjob import (
    CONTROLLER_UID_LABEL,
    JOB_DEFAULT_BACKOFF_LIMIT,
    JOB_INDEX_LABEL,
    JOB_NAME_LABEL,
    REPLICATED_JOB_LABEL,
    RESTART_ATTEMPT_LABEL,
)

__all__ = ["backoff_limits", "restarting_steps", "waiting_of", "with_waiting"]

Pod = Mapping[str, Any]


def backoff_limits(jobset: Mapping[str, Any] | None) -> dict[str, int]:
    """Each replicated job's ``backoffLimit`` as its Jobs get it: the JobSet's template,
    else Kubernetes' default for a Job (6). Empty for no JobSet."""
    if not jobset:
        return {}
    limits: dict[str, int] = {}
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        spec = ((rjob.get("template") or {}).get("spec")) or {}
        raw = spec.get("backoffLimit")
        limit = JOB_DEFAULT_BACKOFF_LIMIT if raw is None else untrusted.whole_number(raw, -(2**63))
        if limit is not None:
            limits[str(rjob.get("name"))] = max(0, limit)
    return limits


def _labels(pod: Pod) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _phase(pod: Pod) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _job_key(pod: Pod) -> tuple[str, ...]:
    """Which Job made the pod: its uid, else its name in its JobSet restart."""
    labels = _labels(pod)
    uid = labels.get(CONTROLLER_UID_LABEL)
    if uid:
        return (uid,)
    name = labels.get(JOB_NAME_LABEL) or (
        f"{labels.get(REPLICATED_JOB_LABEL)}-{labels.get(JOB_INDEX_LABEL)}"
    )
    return (name, str(labels.get(RESTART_ATTEMPT_LABEL, "0")))


def _ended_with(pod: Pod, step: str) -> tuple[str | None, int | None, str]:
    """How a failed pod ended: (container reason, exit code, message)."""
    status = pod.get("status") or {}
    main = names.NODE if step.startswith(f"{names.NODE}-") else step
    term = terminated(pod, main)
    if not term:
        for cs in status.get("containerStatuses") or []:
            term = ((cs.get("state") or {}).get("terminated")) or {}
            if term and term.get("exitCode", 0) != 0:
                break
    if term:
        return term.get("reason") or "Error", term.get("exitCode"), str(term.get("message") or "")
    return status.get("reason") or "Failed", None, str(status.get("message") or "")


def restarting_steps(pods: Iterable[Pod]) -> list[tuple[str, str, Pod, int]]:
    """The steps whose Job has failed pods and is not done with them, in step order:
    ``(step, replicated job, newest failed pod, failed pods)``. Only the newest JobSet
    restart counts (older ones' pods are another incarnation)."""
    pods = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    mpi = _is_mpi(pods)
    newest_restart = max((pod_recency(p)[0] for p in pods), default=0)
    jobs: dict[tuple[str, ...], list[Pod]] = {}
    for pod in pods:
        if pod_recency(pod)[0] == newest_restart and step_name(pod, mpi) is not None:
            jobs.setdefault(_job_key(pod), []).append(pod)
    found = []
    for members in jobs.values():
        failed = [p for p in members if _phase(p) == "Failed"]
        if not failed:
            continue
        # A Job whose every index has succeeded since is done with its failures.
        if all(_phase(p) == "Succeeded" for p in newest_by_step(members).values()):
            continue
        last = max(failed, key=pod_recency)
        step = str(step_name(last, mpi))
        found.append((step, str(_labels(last).get(REPLICATED_JOB_LABEL, "")), last, len(failed)))
    return sorted(found, key=lambda f: step_order(f[0]))


def _restarting(pods: list[Pod], limits: Mapping[str, int]) -> Waiting | None:
    found = restarting_steps(pods)
    if not found:
        return None
    step, rjob, pod, failed = found[0]
    reason, code, message = _ended_with(pod, step)
    klass, evidence = classify(
        reason=reason or "", message=message, container_reason=reason, exit_code=code, pods=pods
    )
    limit = limits.get(rjob)
    attempts = None if limit is None else limit + 1
    ended = f"exit code {code}" if code is not None else (reason or "failed")
    if attempts is not None and failed >= attempts:
        text = f"step {step} failed all {attempts} attempts ({ended}); the job is failing"
    else:
        of = f" of {attempts}" if attempts is not None else ""
        text = f"step {step} is failing and being retried (attempt {failed + 1}{of}, {ended})"
    return Waiting(
        state="Restarting",
        reason=text,
        step=step,
        pod=str((pod.get("metadata") or {}).get("name") or ""),
        attempt=min(failed + 1, attempts) if attempts is not None else failed + 1,
        attempts=attempts,
        exit_code=code,
        failure_class=klass,
        classified_by=evidence,
    )


_FIRST_SENTENCE = re.compile(r"(.*?)\.(?:\s|\Z)")
_NONE_AVAILABLE = re.compile(r"0/(\d+) nodes are available: (.+)")
_INSUFFICIENT = re.compile(r"(\d+) Insufficient (\S+)")


def _asked(pod: Pod, resource: str) -> str | None:
    """What the pod asks of ``resource`` (its containers' requests, else limits), as
    written when one container asks, summed when they are whole numbers."""
    asks = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
        if value is not None:
            asks.append(str(value))
    if len(asks) == 1:
        return asks[0]
    # Read as whole numbers by the rule for cluster data (int() takes other scripts'
    # digits, and raises on a superscript two, which passes str.isdigit).
    counts = [untrusted.whole_number(a) for a in asks]
    if counts and None not in counts:
        return str(sum(c for c in counts if c is not None))
    return None


def scheduler_reason(message: str, pod: Pod) -> str:
    """The scheduler's reason, once: its first sentence (the rest repeats it for
    preemption), and where every node lacks one resource, how much the pod asks:
    ``0/4 nodes can give it 16 nvidia.com/gpu (each has fewer in all or fewer unused)``."""
    text = " ".join(message.split())
    found = _FIRST_SENTENCE.match(text)
    first = found.group(1) if found else text
    counted = _NONE_AVAILABLE.fullmatch(first)
    if counted:
        short = _INSUFFICIENT.fullmatch(counted.group(2).strip())
        if short and short.group(1) == counted.group(1):
            asked = _asked(pod, short.group(2))
            if asked is not None:
                return (
                    f"0/{counted.group(1)} nodes can give it {asked} {short.group(2)}"
                    " (each has fewer in all or fewer unused)"
                )
    return first


def _pending(pods: list[Pod]) -> Waiting | None:
    """The first step (in step order) whose newest pod cannot start."""
    newest = newest_by_step(pods)
    for step in sorted(newest, key=step_order):
        pod = newest[step]
        status = pod.get("status") or {}
        if _phase(pod) not in ("Pending", ""):
            continue
        pod_name = str((pod.get("metadata") or {}).get("name") or "")
        pending = partial(Waiting, state="Pending", step=step, pod=pod_name)
        cond = unschedulable(pod)
        if cond is not None:
            message = str(cond.get("message") or "")
            klass, _ = classify(reason="Unschedulable", message=message, pods=[pod])
            return pending(
                reason=f"step {step} cannot be scheduled: {scheduler_reason(message, pod)}",
                failure_class=klass,
            )
        for cs in [
            *(status.get("initContainerStatuses") or []),
            *(status.get("containerStatuses") or []),
        ]:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            why = waiting.get("reason")
            if why in STUCK_WAITING_REASONS:
                message = str(waiting.get("message") or "")
                klass, evidence = classify(
                    reason=str(why), message=message, container_reason=str(why), pods=[pod]
                )
                # The whole message decides the class; a long one is shown cut.
                detail = f" ({untrusted.line(message, 300)})" if message else ""
                return pending(
                    reason=f"step {step} cannot start: {why}{detail}",
                    failure_class=klass,
                    classified_by=evidence,
                )
    return None


def _refused(refused: Failure) -> Waiting:
    return Waiting(
        state="Pending",
        reason=f"the API server refuses the pods of step {refused.step or 'node'}: "
        f"{refused.message}",
        step=refused.step,
        failure_class=refused.failure_class,
    )


def waiting_of(
    obj: Mapping[str, Any],
    pods: Iterable[Pod],
    *,
    limits: Mapping[str, int] | None = None,
    refused: Failure | None = None,
) -> Waiting | None:
    """What holds up the unfinished TrainJob ``obj`` (``None``: nothing, or it has
    finished, is suspended or is being deleted): a restarting step first (whatever
    the job's flickering state), then, while nothing runs, a step that cannot start, or
    ``refused`` (the API server's refusal of its pods, read from its events).
    ``limits``: each replicated job's ``backoffLimit`` (:func:`backoff_limits`); without
    it the attempt count has no total."""
    state = job_state(obj)
    if state not in (JobState.CREATED, JobState.RUNNING):
        return None
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return None
    pods = list(pods)
    found = _restarting(pods, limits or {})
    if found is not None or state is not JobState.CREATED:
        return found
    found = _pending(pods)
    if found is None and refused is not None:
        found = _refused(refused)
    return found


def with_waiting(
    job: TrainJob,
    obj: Mapping[str, Any],
    pods: Iterable[Pod],
    *,
    limits: Mapping[str, int] | None = None,
    refused: Failure | None = None,
) -> TrainJob:
    """``job`` with :attr:`TrainJob.waiting` read from ``obj`` and its pods."""
    waiting = waiting_of(obj, pods, limits=limits, refused=refused)
    return job if waiting == job.waiting else job.model_copy(update={"waiting": waiting})
