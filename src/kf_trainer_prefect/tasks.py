"""Prefect tasks for TrainJobs: one that does everything (:func:`run_trainjob`) and the
steps it is made of, for flows that want them apart. Each has an async twin with an
``a`` prefix, as Prefect's own integrations do; both are ordinary Prefect tasks, so
``.submit()``, ``.map()`` and ``.with_options()`` work on either. Each is written once,
async; the sync task runs the same coroutine (:mod:`kf_trainer_prefect._sync_face`).

>>> @flow
... def nightly():
...     outputs = run_trainjob(spec, credentials="prod")     # submit, logs, wait, outputs
...     return outputs.result                                 # the function's return value

Every task takes ``credentials``: a :class:`~kf_trainer_prefect.KubeflowTrainerCredentials`
block or the name it was saved under, prefect-kubernetes' ``KubernetesCredentials``, or
``None`` for the default cluster discovery.

Submitting is idempotent: the job's identity is the flow run, the task's name and the
spec, so a retried task (or a re-run of a crashed flow run) reattaches to its job, and
one retried after the job *failed* submits a fresh attempt. (Two calls of one task
with the same spec in one flow run therefore share a job: pass ``identity=`` to train
twice.) A task timeout
(``timeout_seconds``), a flow run cancellation or Ctrl-C deletes the job
(``on_cancel="delete"``; or ``"suspend"``, or ``"keep"``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from typing_extensions import ParamSpec

from kf_trainer_core.spec import TrainJobSpec
from kf_trainer_core.status import JobOutputs, TrainJob
from kf_trainer_prefect import _engine
from kf_trainer_prefect._engine import CancelAction, Identity, JobRef, RunOptions, WaitOptions
from kf_trainer_prefect._sync_face import sync_face
from kf_trainer_prefect.credentials import CredentialsLike

__all__ = [
    "acancel_trainjob",
    "aget_trainjob_outputs",
    "arun_trainjob",
    "astream_trainjob_logs",
    "asubmit_trainjob",
    "await_trainjob",
    "cancel_trainjob",
    "get_trainjob_outputs",
    "run_trainjob",
    "stream_trainjob_logs",
    "submit_trainjob",
    "wait_trainjob",
]

SpecLike = TrainJobSpec | Mapping[str, Any] | str
P = ParamSpec("P")
R = TypeVar("R")


# Jobs are side effects made idempotent by their identity, not by Prefect's cache: a
# cached result would skip the job without checking it, and credentials do not hash.
_TASK_DEFAULTS: dict[str, Any] = {"cache_policy": NO_CACHE}


def _faces(
    fn: Callable[P, Coroutine[Any, Any, R]], name: str, sync_name: str
) -> tuple[Task[P, R], Task[P, Coroutine[Any, Any, R]]]:
    """The sync task and its async twin, both Prefect tasks called ``name``, from one
    coroutine function."""
    fn.__name__ = fn.__qualname__ = f"a{sync_name}"
    return (
        task(name=name, **_TASK_DEFAULTS)(sync_face(fn, sync_name)),
        task(name=name, **_TASK_DEFAULTS)(fn),
    )


async def _run(
    spec: SpecLike,
    credentials: CredentialsLike | None = None,
    *,
    namespace: str | None = None,
    name: str | None = None,
    identity: Identity | None = None,
    timeout: float | None = None,
    startup_timeout: float | None = None,
    stream_logs: bool = True,
    log_step: str = "node-0",
    log_tail: int = 1000,
    on_cancel: CancelAction = "delete",
    artifacts: bool = True,
    fresh_after_failure: bool = True,
    admission_timeout: float | None = None,
) -> JobOutputs:
    """Run a TrainJob to its end: submit it (or reattach to it), stream its log into
    this task's log, keep a progress artifact current, wait for it, and return its
    outputs (status, steps, metrics, the training function's return value).

    Args:
        spec: a :class:`~kf_trainer_core.spec.TrainJobSpec` or its dict/JSON form.
        credentials: where the job runs (see the module docs).
        namespace: overrides the credentials' namespace.
        name: a fixed job name (otherwise one is derived from the identity).
        identity: overrides the identity derived from the flow run, task and spec.
        timeout: give up after this many seconds (the job is then stopped per
            ``on_cancel``); Prefect's ``timeout_seconds`` does the same.
        startup_timeout: give up when the job has not started after this many
            seconds (e.g. an image that cannot be pulled).
        stream_logs: log ``log_step``'s lines into this task's log.
        on_cancel: what a timeout or cancellation does to the job: ``"delete"``,
            ``"suspend"`` or ``"keep"``.
        artifacts: create the progress, table, summary and link artifacts.
        fresh_after_failure: after a failed job, a retry submits a fresh attempt.
        admission_timeout: give up when Kueue has not admitted the job (labelled
            ``kueue.x-k8s.io/queue-name``) after this many seconds; the error says
            what the queue waited for.

    Raises:
        TrainJobFailedError: with the reason, failing step and pod, exit code and the
            last log lines; ``TrainJobCreationFailedError``, ``TrainJobTimeoutError``.
    """
    options = RunOptions(
        namespace=namespace,
        name=name,
        identity=identity,
        timeout=timeout,
        startup_timeout=startup_timeout,
        stream_logs=stream_logs,
        log_step=log_step,
        log_tail=log_tail,
        on_cancel=on_cancel,
        artifacts=artifacts,
        fresh_after_failure=fresh_after_failure,
        admission_timeout=admission_timeout,
    )
    return await _engine.run(spec, credentials, options)


run_trainjob, arun_trainjob = _faces(_run, "run-trainjob", "run_trainjob")


async def _submit(
    spec: SpecLike,
    credentials: CredentialsLike | None = None,
    *,
    namespace: str | None = None,
    name: str | None = None,
    identity: Identity | None = None,
    fresh_after_failure: bool = True,
    artifacts: bool = True,
) -> TrainJob:
    """Submit a TrainJob idempotently and return it (``.name`` for the other tasks).

    A retried task reattaches to the job it submitted before; after that job failed,
    it submits a fresh attempt (unless ``fresh_after_failure`` is off).
    """
    options = RunOptions(
        namespace=namespace,
        name=name,
        identity=identity,
        fresh_after_failure=fresh_after_failure,
        artifacts=artifacts,
    )
    return await _engine.submit(spec, credentials, options)


submit_trainjob, asubmit_trainjob = _faces(_submit, "submit-trainjob", "submit_trainjob")


async def _wait(
    job: JobRef,
    credentials: CredentialsLike | None = None,
    *,
    namespace: str | None = None,
    status: str | Sequence[str] = ("Complete",),
    timeout: float | None = None,
    startup_timeout: float | None = None,
    on_cancel: CancelAction = "delete",
    artifacts: bool = True,
) -> JobOutputs:
    """Wait for a job (a name or what :func:`submit_trainjob` returned) to reach one of
    ``status``, on the shared watch rather than by polling; keep its progress artifact
    current and return its outputs. Raises as :func:`run_trainjob` does; a timeout or
    cancellation of this task stops the job per ``on_cancel``. The async twin is
    ``await_trainjob`` (``await await_trainjob(job)``)."""
    options = WaitOptions(
        namespace=namespace,
        status=(status,) if isinstance(status, str) else tuple(status),
        timeout=timeout,
        startup_timeout=startup_timeout,
        on_cancel=on_cancel,
        artifacts=artifacts,
    )
    return await _engine.wait(job, credentials, options)


wait_trainjob, await_trainjob = _faces(_wait, "wait-trainjob", "wait_trainjob")


async def _logs(
    job: JobRef,
    credentials: CredentialsLike | None = None,
    *,
    namespace: str | None = None,
    step: str = "node-0",
    follow: bool = True,
    tail: int | None = None,
) -> int:
    """Log one step's lines (``node-0``, ``node-1``, ``dataset-initializer``...) into
    this task's log; with ``follow``, as they are written, until the step ends. Returns
    the number of lines logged."""
    return await _engine.logs(
        job, credentials, namespace=namespace, step=step, follow=follow, tail=tail
    )


stream_trainjob_logs, astream_trainjob_logs = _faces(
    _logs, "stream-trainjob-logs", "stream_trainjob_logs"
)


async def _outputs(
    job: JobRef,
    credentials: CredentialsLike | None = None,
    *,
    namespace: str | None = None,
    artifacts: bool = False,
) -> JobOutputs:
    """A job's outputs now: status, steps, metrics and the training function's return
    value (``None`` until it completes). With ``artifacts``, also its summary and
    table."""
    return await _engine.outputs(job, credentials, namespace=namespace, artifacts=artifacts)


get_trainjob_outputs, aget_trainjob_outputs = _faces(
    _outputs, "get-trainjob-outputs", "get_trainjob_outputs"
)


async def _cancel(
    job: JobRef,
    credentials: CredentialsLike | None = None,
    *,
    namespace: str | None = None,
    action: CancelAction = "delete",
) -> bool:
    """Stop a job: ``"delete"`` it (its pods go with it), ``"suspend"`` it (kept and
    resumable) or ``"keep"`` it. ``True`` if something was done."""
    return await _engine.cancel(job, credentials, namespace=namespace, action=action)


cancel_trainjob, acancel_trainjob = _faces(_cancel, "cancel-trainjob", "cancel_trainjob")
