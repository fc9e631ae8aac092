"""Failure classes: what kind of trouble ended a job, decided from what the cluster says.

An orchestrator's retry is worth it for some failures and wasted on others. Each failure
is put in one class, from its Failed condition, the failing pod and container, the pods'
disruption conditions, Kueue's Workload and the log tail:

* ``infrastructure`` — the platform let the job down; a retry may well succeed: a pod
  evicted, preempted or lost with its node, a Kueue eviction, an image pull that failed
  for a registry's transient trouble, a container or a worker killed from outside, a
  GPU's hardware fault, NCCL or the rendezvous losing a peer, the API server failing
  (5xx, no answer).
* ``capacity`` — the job does not fit what it was given: out of memory (host or GPU),
  past its deadline, unschedulable, never admitted by Kueue.
* ``configuration`` — the job as written cannot run: an image that does not exist, a
  bad runtime or spec, a missing secret, an admission rejection, the Trainer failing to
  build its JobSet (``TrainJobResourcesCreationFailed``), two workers on one GPU.
* ``user-code`` — the training code failed: a Python traceback in the log, or another
  non-zero exit of the program.

A distributed job's log is read for its root cause (:mod:`kf_trainer_core.cluster.distributed`):
torchrun's failure summary and the failed worker's own error, not torchrun's traceback
nor the peers that failed because of it.
* ``unknown`` — nothing said enough.

The error types raised for each class derive from :class:`InfrastructureFailure`,
:class:`CapacityFailure`, :class:`ConfigurationFailure` and :class:`UserCodeFailure`, so
that exception-matching retry rules (Airflow's ``ExceptionRetryPolicy``) can tell them
apart; :func:`failure_class_of` answers for any exception (also API errors and spec
errors); :func:`should_retry` is the shared retry decision of the adapters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kf_trainer_core.base.errors import (
    ClassifiedFailure,
    FailureClass,
    KFTrainerError,
    SpecConflictError,
    SpecError,
    SubmitError,
    TrainJobNotFoundError,
)
from kf_trainer_core.cluster import distributed

#: Process exit codes per class (``sysexits.h`` where one fits), for runners that only
#: see an exit status (a KFP component): an exit handler or a retry policy can tell
#: them apart. Unknown failures exit 1, as any Python error does.
EXIT_CODES: dict[FailureClass, int] = {
    FailureClass.INFRASTRUCTURE: 75,  # EX_TEMPFAIL: try again later
    FailureClass.CAPACITY: 69,  # EX_UNAVAILABLE
    FailureClass.CONFIGURATION: 78,  # EX_CONFIG
    FailureClass.USER_CODE: 70,  # EX_SOFTWARE
    FailureClass.UNKNOWN: 1,
}

#: Classes a ready-made retry policy retries.
DEFAULT_RETRY_ON: frozenset[FailureClass] = frozenset({FailureClass.INFRASTRUCTURE})


#: Pod ``status.reason`` values that mean the platform removed the pod.
DISRUPTED_POD_REASONS = frozenset(
    {"Evicted", "NodeLost", "Shutdown", "NodeShutdown", "Terminated", "UnexpectedAdmissionError"}
)
#: Kueue eviction reasons that are the platform's doing.
INFRA_EVICTION_REASONS = frozenset(
    {"Preempted", "PodsReadyTimeout", "NodeFailures", "AdmissionCheck", "InactiveWorkload"}
)
_IMAGE_PULL = frozenset({"ErrImagePull", "ImagePullBackOff"})
_BAD_CONTAINER = frozenset(
    {"InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
)
# What registries and container runtimes say when an image is missing or not allowed
# (a retry will not help), as opposed to timeouts, 5xx and rate limits.
_IMAGE_MISSING = re.compile(
    r"not found|manifest unknown|repository does not exist|pull access denied|"
    r"unauthorized|insufficient_scope|denied|invalid reference format",
    re.IGNORECASE,
)
#: The Job controller's Warning when the API server refuses a pod it creates (a missing
#: service account, an exceeded ResourceQuota, a Pod Security or LimitRange violation).
POD_CREATE_REFUSED_REASON = "FailedCreate"


def _text(value: Any) -> str:
    return str(value or "")


def _disruption(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """Evidence that the platform removed one of the pods, if any."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        name = _text(meta.get("name"))
        if status.get("reason") in DISRUPTED_POD_REASONS:
            detail = _text(status.get("message"))
            return f"pod {name} {status['reason']}" + (f": {detail}" if detail else "")
        for cond in status.get("conditions") or []:
            if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
                detail = _text(cond.get("message"))
                return f"pod {name} disrupted ({cond.get('reason')})" + (
                    f": {detail}" if detail else ""
                )
    return None


def unschedulable(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's ``PodScheduled=False`` condition of reason ``Unschedulable``, if the
    scheduler found no node for it (more GPUs than any node has, taints...): the pod is
    stuck Pending with no container status, only this condition says why."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return dict(cond)
    return None


def _unschedulable(pods: Iterable[Mapping[str, Any]]) -> str | None:
    for pod in pods:
        cond = unschedulable(pod)
        if cond is not None:
            name = _text((pod.get("metadata") or {}).get("name"))
            return f"pod {name} unschedulable: {_text(cond.get('message'))}".rstrip(": ")
    return None


def classify(
    *,
    reason: str = "",
    message: str = "",
    container_reason: str | None = None,
    exit_code: int | None = None,
    log_tail: Sequence[str] = (),
    pods: Iterable[Mapping[str, Any]] = (),
    evictions: Sequence[tuple[str, str]] = (),
    step: str | None = None,
    pod_message: str = "",
    still_running: bool = False,
) -> tuple[FailureClass, str]:
    """The class of a failure and the evidence for it (one line), from the job's
    Failed condition (``reason``, ``message``: with the pod's own, ``pod_message``,
    in it), its failing container (of ``step``), all its pods, Kueue evictions
    (``(reason, message)``) and the failing step's log tail — read as a distributed
    job's output (:mod:`kf_trainer_core.cluster.distributed`: torchrun's failure
    summary, the workers' own errors, CUDA's and NCCL's texts). ``still_running``: the
    step is the root cause its output names, but its container has not ended yet
    (:mod:`kf_trainer_core.cluster.root_cause`): its output counts without an exit code."""
    from kf_trainer_core.k8s.trainjob import CREATION_FAILED_REASON

    pods = list(pods)
    if reason == CREATION_FAILED_REASON:
        return FailureClass.CONFIGURATION, f"the Trainer could not build the JobSet: {message}"
    if reason == POD_CREATE_REFUSED_REASON:
        # The Job controller keeps retrying; a quota may free up, a missing service
        # account or a policy violation will not go away by itself.
        if "exceeded quota" in message:
            return FailureClass.CAPACITY, "a ResourceQuota refuses the pods (exceeded quota)"
        return FailureClass.CONFIGURATION, "the API server refuses to create the pods"
    if container_reason in _IMAGE_PULL:
        if _IMAGE_MISSING.search(message):
            return FailureClass.CONFIGURATION, f"the image cannot be pulled ({container_reason})"
        return FailureClass.INFRASTRUCTURE, f"pulling the image failed ({container_reason})"
    if container_reason in _BAD_CONTAINER:
        return FailureClass.CONFIGURATION, f"the container cannot be created ({container_reason})"
    disrupted = _disruption(pods)
    if disrupted is not None:
        return FailureClass.INFRASTRUCTURE, disrupted
    if container_reason == "OOMKilled":
        killed = _distributed_cause(log_tail, pod_message or message, step, oom_killed=True)
        if killed is not None and killed.failure_class is FailureClass.CAPACITY:
            return FailureClass.CAPACITY, f"{killed.evidence()} (OOMKilled)"
        return FailureClass.CAPACITY, "a container ran out of memory (OOMKilled)"
    if "DeadlineExceeded" in (reason, container_reason) or "DeadlineExceeded" in message:
        return FailureClass.CAPACITY, "the job ran past its deadline (DeadlineExceeded)"
    unschedulable = _unschedulable(pods)
    if unschedulable is not None and exit_code is None:
        return FailureClass.CAPACITY, unschedulable
    for ev_reason, ev_message in reversed(evictions):
        if ev_reason in INFRA_EVICTION_REASONS and exit_code is None:
            return FailureClass.INFRASTRUCTURE, f"evicted by Kueue ({ev_reason}: {ev_message})"
    cause = _distributed_cause(log_tail, pod_message or message, step)
    if cause is not None and (exit_code not in (None, 0) or still_running):
        return cause.failure_class, cause.evidence()
    if container_reason == "CrashLoopBackOff":
        return FailureClass.USER_CODE, "the container keeps crashing (CrashLoopBackOff)"
    if exit_code in (137, 143):
        return FailureClass.INFRASTRUCTURE, f"the container was killed (exit code {exit_code})"
    if exit_code not in (None, 0):
        return FailureClass.USER_CODE, f"the training program exited with code {exit_code}"
    return FailureClass.UNKNOWN, ""


def _distributed_cause(
    log_tail: Sequence[str], message: str, step: str | None, *, oom_killed: bool = False
) -> distributed.Cause | None:
    """What the failing step's output says: its log tail first, its termination
    message (the kubelet's fallback to the log, or what a launcher wrote) when the log
    says nothing."""
    return distributed.diagnose(log_tail, node=step, oom_killed=oom_killed) or distributed.diagnose(
        message.splitlines(), node=step, oom_killed=oom_killed
    )


def failure_class_of(exc: BaseException) -> FailureClass | None:
    """The class of any exception the suite raises (``None`` for others): marker
    types, timeouts by what holds the job up, errors carrying a classified ``failure``,
    API errors (5xx and no answer are infrastructure, 4xx refusals configuration) and
    spec errors (configuration)."""
    from kf_trainer_core.k8s.errors import ApiError

    if isinstance(exc, ClassifiedFailure):
        return type(exc).failure_class
    # A timeout's class is that of what holds the job up (a restarting step, a pod that
    # cannot start: cluster/waiting.py), which a step wait carries without a failure.
    held = getattr(getattr(exc, "waiting", None), "failure_class", None)
    if isinstance(held, FailureClass):
        return held
    failure = getattr(exc, "failure", None)
    klass = getattr(failure, "failure_class", None)
    if klass is None and isinstance(failure, Mapping):
        klass = failure.get("failure_class")
    if klass:
        try:
            return FailureClass(klass)
        except ValueError:
            return FailureClass.UNKNOWN
    if isinstance(exc, ApiError):
        if exc.retryable:
            return FailureClass.INFRASTRUCTURE
        if exc.code in (400, 403, 404, 409, 422):
            return FailureClass.CONFIGURATION
        return FailureClass.UNKNOWN
    if isinstance(exc, (SpecError, SubmitError, SpecConflictError, TrainJobNotFoundError)):
        return FailureClass.CONFIGURATION
    if isinstance(exc, KFTrainerError):
        return FailureClass.UNKNOWN
    return None


def should_retry(
    exc: BaseException, retry_on: Iterable[FailureClass | str] = DEFAULT_RETRY_ON
) -> bool:
    """Whether a failure of these classes deserves a retry: by default only
    infrastructure failures. Exceptions that are not the suite's are left to the
    orchestrator (``True``)."""
    klass = failure_class_of(exc)
    if klass is None:
        return True
    return klass in {FailureClass(c) for c in retry_on}
