"""Prefect tasks for TrainJobs: one that does everything (:func:`run_trainjob`) and the
steps it is made of, for flows that want them apart. Each has an async twin with an
``a`` prefix, as Prefect's own integrations do; both are ordinary Prefect tasks, so
``.submit()``, ``.map()`` and ``.with_options()`` work on either. Each is written once,
async; the sync task runs the same coroutine (:func:`kf_trainer_core.tasks.sync_runner.sync_face`).

>>> @flow
... def nightly():
...     outputs = run_trainjob(spec, credentials="prod")     # submit, logs, wait, outputs
...     return outputs.result                                 # the function's return value

Every task takes ``credentials``: a :class:`~kf_trainer_prefect.KubeflowTrainerCredentials`
block or the name it was saved under, prefect-kubernetes' ``KubernetesCredentials``, or
``None`` for the default cluster discovery. Submitting is idempotent, and a timeout or
cancellation stops the job per ``on_cancel``: see docs/prefect.md, which describes
every argument.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from typing_extensions import ParamSpec

from kf_trainer_core.tasks.sync_runner import sync_face

# A flow file or worker that imports the tasks pays only for Prefect's own task machinery:
# the spec models, the status types, the engine and the credentials block (pydantic models
# and the core's builder, most of a second) load when a task first runs. Prefect reads a
# task's signature, not its annotations' values, so these stay strings at run time.
if TYPE_CHECKING:
    from collections.abc import Mapping

    from kf_trainer_core.spec import TrainJobSpec
    from kf_trainer_core.tasks import JobOutputs, TrainJob
    from kf_trainer_core.tasks.interruptions import CancelAction, Identity
    from kf_trainer_prefect._engine import JobRef
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


SpecLike: TypeAlias = "TrainJobSpec | Mapping[str, Any] | str"
P = ParamSpec("P")
R = TypeVar("R")


# Jobs are side effects made idempotent by their identity, not by Prefect's cache: a
# cached result would skip the job without checking it, and credentials do not hash.
_TASK_DEFAULTS: dict[str, Any] = {"cache_policy": NO_CACHE}


async def _in_engine(operation: str, arguments: dict[str, Any]) -> Any:
    """What a task returns: the engine's ``operation`` (``_engine.TASK_BODIES``) run with
    the task's arguments (its ``locals()`` on entry): the spec or job, the credentials,
    and the other arguments as its options.

    The engine (and with it the spec models and the core's builder, a tenth of a second
    and more) is imported in a worker thread the first time: the flow's loop, shared
    with its other tasks, must not stop for it."""
    from kf_trainer_core.tasks import imported

    engine = await imported("kf_trainer_prefect._engine")
    target = arguments["spec"] if "spec" in arguments else arguments["job"]
    options = {k: v for k, v in arguments.items() if k not in ("spec", "job", "credentials")}
    return await engine.TASK_BODIES[operation](target, arguments["credentials"], options)


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
    on_finish: str = "keep",
) -> JobOutputs:
    """Run a TrainJob to its end: submit it (or reattach to it), stream its log into
    this task's log, keep a progress artifact current, wait for it, and return its
    outputs (status, steps, metrics, the training function's return value).

    ``spec`` is a :class:`~kf_trainer_core.spec.TrainJobSpec` or its dict/JSON form;
    ``credentials`` says where the job runs (see the module docs); every other
    argument is described in docs/prefect.md (``run_trainjob``). A timeout
    (``timeout``, or Prefect's ``timeout_seconds``) or cancellation stops the job per
    ``on_cancel``: ``"delete"``, ``"suspend"`` or ``"keep"``. ``on_finish`` says what
    happens to the job once it has finished and its outputs are in Prefect (artifacts
    published, outputs about to be returned): ``"keep"`` (default; see
    docs/retention.md), ``"delete-succeeded"`` or ``"delete"`` (also a failed job, once
    its failure is reported).

    Raises:
        TrainJobFailedError: with the reason, failing step and pod, exit code and the
            last log lines; ``TrainJobCreationFailedError``, ``TrainJobNotAdmissibleError``
            (Kueue can never admit it: ``on_cancel`` applies), ``TrainJobTimeoutError``.
    """
    return cast("JobOutputs", await _in_engine("run", locals()))


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
    return cast("TrainJob", await _in_engine("submit", locals()))


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
    on_finish: str = "keep",
) -> JobOutputs:
    """Wait for a job (a name or what :func:`submit_trainjob` returned) to reach one of
    ``status``, on the shared watch rather than by polling; keep its progress artifact
    current and return its outputs. Raises as :func:`run_trainjob` does; a timeout or
    cancellation of this task stops the job per ``on_cancel``; a finished job is
    deleted per ``on_finish`` as in :func:`run_trainjob`. The async twin is
    ``await_trainjob`` (``await await_trainjob(job)``)."""
    return cast("JobOutputs", await _in_engine("wait", locals()))


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
    return cast("int", await _in_engine("logs", locals()))


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
    return cast("JobOutputs", await _in_engine("outputs", locals()))


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
    return cast("bool", await _in_engine("cancel", locals()))


cancel_trainjob, acancel_trainjob = _faces(_cancel, "cancel-trainjob", "cancel_trainjob")
