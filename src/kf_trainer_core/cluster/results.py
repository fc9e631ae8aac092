"""Where a finished job's result is read from, and why it may not be readable.

A training function's return value leaves its pod two ways: rank 0 writes it (JSON, at
most :data:`~kf_trainer_core.spec.function.TERMINATION_MESSAGE_LIMIT` bytes) as node-0's
termination message, which the API server keeps in the pod's status, and prints it as
the last line of node-0's log. The termination message lives as long as the pod object;
the log only as long as the node's kubelet keeps it and can serve it. So a result read
after the job may be unreadable although the job succeeded: the pod has no termination
message (a result over 4 KiB, a virtual kubelet that writes none) and the log cannot be
read (the node was scaled away, the kubelet refuses or times out, the pod was deleted).

Reading the result is never allowed to turn the job's success into an error: a reader
gets the finished job and a :class:`ResultMissing` that says why and what to do; only a
caller that needs the value (an Airflow ``@task.kubeflow_trainer``, a Prefect
``trainjob_task``, a KFP function component) raises it, as
:class:`~kf_trainer_core.errors.TrainJobResultUnavailableError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.errors import FailureClass
from kf_trainer_core.fields import names
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.spec.function import RESULT_MARKER, TERMINATION_MESSAGE_LIMIT

#: Why a result could not be read:
#: ``log-unreadable`` — the log endpoint refused, failed or timed out (the node's kubelet
#: is down or gone; a later read may work: infrastructure);
#: ``pod-gone`` — node-0's pod no longer exists, with its termination message and log;
#: ``not-in-log`` — the log was read but holds no result line (rotated away, or cut).
#: ``unusable`` — it was read, but it is too deep or too large to carry further (an XCom,
#: a trigger's payload, a KFP output): withheld, a placeholder in its place.
ResultCause = Literal["log-unreadable", "pod-gone", "not-in-log", "unusable"]

_WHERE = (
    f"A result reaches the caller through node-0's termination message (JSON of at most "
    f"{TERMINATION_MESSAGE_LIMIT} bytes, kept with the pod) or, when larger, only through "
    "node-0's log, which is lost with the node."
)
_FIX = (
    f"Fix: keep the return value under {TERMINATION_MESSAGE_LIMIT} bytes of JSON (write "
    "models, tables and other large outputs to storage and return their URI), and keep "
    "the pods until the result is read (no pod garbage collection right after the job)."
)


class ResultMissing(BaseModel):
    """Why a finished job's function return value could not be read, and what to do."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cause: ResultCause
    #: What happened and what to do, in words (no secrets: built from status and the
    #: API's error code only).
    message: str
    #: ``infrastructure`` when a later read may work (the job is not run again: a retry
    #: finds the finished job and reads again); ``configuration`` when the result is lost
    #: where it was put.
    failure_class: FailureClass


def _carries_marker(holder: Mapping[str, Any]) -> bool | None:
    words = [*(holder.get("command") or []), *(holder.get("args") or [])]
    if not words:
        return None
    marker = RESULT_MARKER.strip()
    return any(isinstance(w, str) and marker in w for w in words)


#: What a slimmed copy of a TrainJob (an informer's cache holds no programs) keeps of its
#: trainer's program, under ``spec.trainer``: whether it carries the result marker. A
#: wait whose job's pods are gone then need not read the job in full to know.
SLIM_EXPECTS_RESULT = "kf-trainer-suite/expects-result"


def result_expectation(trainer: Mapping[str, Any]) -> dict[str, bool]:
    """What :data:`SLIM_EXPECTS_RESULT` keeps of ``trainer`` (nothing when its command
    and arguments say nothing: the image's own entrypoint)."""
    said = _carries_marker(trainer)
    return {} if said is None else {SLIM_EXPECTS_RESULT: said}


def expects_result(obj: Mapping[str, Any], pod: Mapping[str, Any] | None) -> bool | None:
    """Whether the job runs a training function whose return value is its result (the
    generated program carries the result marker); container and built-in trainers
    return nothing, so nothing is missing when their log cannot be read. Read from
    node-0's pod, else from the TrainJob's trainer (or what a slimmed copy kept of it);
    ``None`` when neither says (the pod is gone and ``obj`` is a copy without the
    trainer's program)."""
    if pod is not None:
        for container in (pod.get("spec") or {}).get("containers") or []:
            if container.get("name") == names.NODE:
                # No command: the image's own entrypoint, not a generated program.
                return bool(_carries_marker(container))
    trainer = (obj.get("spec") or {}).get("trainer") or {}
    said = _carries_marker(trainer)
    if said is None and SLIM_EXPECTS_RESULT in trainer:
        return bool(trainer[SLIM_EXPECTS_RESULT])
    return said


def unusable(job: str, problem: str) -> ResultMissing:
    """The result was read but cannot be carried further as it is (see
    :func:`kf_trainer_core.base.untrusted.json_shape_problem`): a retry returns the
    same, so it is the configuration's to fix."""
    return ResultMissing(
        cause="unusable",
        message=(
            f"TrainJob {job} completed, but its function's return value is withheld: "
            f"{problem}. Fix: return a small, flat value (at most "
            f"{untrusted.RESULT_DEPTH_LIMIT} levels of nesting); write large outputs to "
            "storage and return their URI."
        ),
        failure_class=FailureClass.CONFIGURATION,
    )


def carried(job: str, value: Any) -> tuple[Any, ResultMissing | None]:
    """A result as the suite carries it: ``value`` itself, or — when it is too deep or
    too large for the serialisers it passes through (pydantic, XComs, trigger payloads,
    KFP outputs) — a placeholder that says so, with :func:`unusable` saying why."""
    problem = untrusted.json_shape_problem(value)
    if problem is None:
        return value, None
    return f"[kf-trainer: result withheld: {problem}]", unusable(job, problem)


def declined_in_log(lines: list[str]) -> bool:
    """Whether the function's program said it reports no result (a return value that is
    not JSON, with ``KF_TRAINER_RESULT_NOT_JSON=ignore``): nothing is missing then."""
    return any("is not JSON-serialisable" in line and "not reported" in line for line in lines)


def _code_text(err: ApiError) -> str:
    # The API's own text may quote internal addresses; the code and a short excerpt
    # are enough to say what happened. Control characters are dropped: it is the
    # server's text, shown in task logs.
    raw = " ".join(str(err).split())
    cleaned = "".join(ch for ch in raw if ch.isprintable())
    return cleaned[:300] + ("…" if len(cleaned) > 300 else "")


def _unread(
    job: str, cause: ResultCause, why: str, klass: FailureClass = FailureClass.CONFIGURATION
) -> ResultMissing:
    """A succeeded job's result that cannot be read: ``why``, where a result goes and
    the fix."""
    return ResultMissing(
        cause=cause,
        message=f"TrainJob {job} succeeded, but its result cannot be read: {why}. {_WHERE} {_FIX}",
        failure_class=klass,
    )


def unreadable_log(job: str, pod: str, err: ApiError) -> ResultMissing:
    """node-0's log could not be read (refused, 5xx, timeout, no answer)."""
    if err.not_found:
        return gone_pod(job, pod)
    why = (
        f"pod {pod} has no termination message and its log cannot be read "
        f"({_code_text(err)}); its node may be gone or serve no logs"
    )
    return _unread(job, "log-unreadable", why, FailureClass.INFRASTRUCTURE)


def gone_pod(job: str, pod: str | None) -> ResultMissing:
    """node-0's pod no longer exists: neither its termination message nor its log."""
    which = f"pod {pod}" if pod else "node-0's pod"
    why = f"{which} no longer exists (deleted with its node, or by pod garbage collection)"
    return _unread(job, "pod-gone", why)


def not_in_log(job: str, pod: str) -> ResultMissing:
    """The log was read but holds no result line."""
    why = (
        f"pod {pod} has no termination message and the end of its log holds no result line "
        "(rotated away, or written by something else)"
    )
    return _unread(job, "not-in-log", why)
