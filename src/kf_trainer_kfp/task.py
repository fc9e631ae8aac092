"""What runs in a component's pod: the bodies of the generated component functions call
:func:`run_component`, which turns the task's inputs into the core's task lifecycle
(:class:`~kf_trainer_core.tasks.TaskJob`) and the job's outcome into KFP outputs.

Every component's work runs on the task's event loop while the main thread watches for
SIGTERM (KFP terminates the pod when a run is cancelled, a task times out or the node
drains): the signal cancels the work, whose clean-up — the core's — stops the job the
task started (``on_cancel``: ``delete``, ``suspend`` or ``keep``), and the process exits
with ``128 + signal``. A job that already finished is left alone, so that a retried
task collects its result instead of training again; a retry resumes a job a terminated
try suspended.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from kf_trainer_core.errors import (
    EXIT_CODES,
    FailureClass,
    SpecConflictError,
    SpecError,
    StepFailedError,
    TrainJobFailedError,
    TrainJobNotAdmissibleError,
    TrainJobResultUnavailableError,
    TrainJobTimeoutError,
    failure_class_of,
)
from kf_trainer_core.spec import TrainJobSpec
from kf_trainer_core.tasks import (
    Attached,
    Failure,
    JobOutputs,
    SyncTaskJob,
    TaskJob,
    TrainJob,
    check_finish_action,
    decided_by,
    identity_text,
    job_summary,
    outputs_summary,
    require_job_name,
    shown,
)
from kf_trainer_core.tasks import helpers as task_helpers
from kf_trainer_core.tasks.interruptions import CancelAction, check_action
from kf_trainer_core.tasks.jobs import ProgressLines
from kf_trainer_kfp import inputs as inp
from kf_trainer_kfp import summary

if TYPE_CHECKING:
    from kf_trainer_core.client import AsyncTrainerClient, TrainerClient

T = TypeVar("T")

#: How this package speaks in the task's log (the job's own lines are copied as they are).
PREFIX = "[kf-trainer]"


def say(message: str) -> None:
    """A line of ours in the task's log."""
    print(f"{PREFIX} {message}", flush=True)


def _log_line(line: str) -> None:
    print(line, flush=True)


class _Said:
    """The core lifecycle's lines (submitted, reattached, resumed, deleted), said in the
    task's log as ours are."""

    def info(self, msg: str, /, *args: Any) -> None:
        say(msg % args if args else msg)

    warning = error = info


class _Terminated(BaseException):
    """SIGTERM/SIGINT reached the task (a BaseException: no ``except Exception`` on the
    way may swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


#: What an interruption means for the job: a signal (KFP's cancel, timeout or drain), a
#: timeout, a job that can never start give up on it; the job's failure and other errors
#: leave it (a retry of the task reattaches).
_DECIDE = decided_by(signals=(_Terminated,))


def guarded(task: SyncTaskJob, work: Callable[[AsyncTrainerClient], Awaitable[T]]) -> T:
    """Run ``work`` on the task's loop, holding its job: when SIGTERM or SIGINT arrives,
    the work is cancelled, its clean-up (the core's) applies ``on_cancel``, and the
    process exits with ``128 + signal``.

    The main thread only waits, so the signal never interrupts a request half-way."""

    async def held(client: AsyncTrainerClient) -> T:
        async with task.job.holding(client, _DECIDE):
            return await work(client)

    if threading.current_thread() is not threading.main_thread():
        return task.call(held)  # signals reach only the main thread: nothing to watch for
    terminating = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        if terminating.is_set():
            return  # a second signal must not cut the clean-up short
        terminating.set()
        say(f"{signal.Signals(signum).name} received: stopping the TrainJob this task started.")
        raise _Terminated(signum)

    watched = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.getsignal(sig) for sig in watched}
    try:
        for sig in watched:
            signal.signal(sig, handler)
        return task.call(held)
    except _Terminated as term:
        _said_stop(task)
        raise SystemExit(128 + term.signum) from None
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _said_stop(task: SyncTaskJob) -> None:
    """What the clean-up did to the job, in the task's log."""
    job, what = task.job, task.job.interruption
    action = job.on_kill
    if what is not None and what.acted:
        say(f"{action}: {', '.join(what.acted)}")
    elif job.known_name is not None:
        say(f"TrainJob {job.known_name} left as it is ({action}, finished or gone)")
    else:
        say(f"no unfinished TrainJob of {identity_text(job.identity)} to {action}")


# ---------------------------------------------------------------------- plumbing


def _config(inputs: Mapping[str, Any]) -> Any:
    return inp.backend_config(inputs.get("backend_config"), namespace=inputs.get("namespace", ""))


def _client(inputs: Mapping[str, Any]) -> TrainerClient:
    # Imported here: building the client loads a Kubernetes library.
    from kf_trainer_core.client import TrainerClient

    return TrainerClient(_config(inputs))


def _spec(inputs: Mapping[str, Any], embedded: Mapping[str, Any]) -> TrainJobSpec:
    if "spec" in embedded:
        # A component made from a function: the spec was fixed when it was made, the
        # function's arguments are this task's inputs.
        args = {name: inputs[name] for name in embedded.get("func_params", [])}
        return inp.assemble_spec(embedded["spec"], func_args=args)
    return inp.spec_of_inputs(inputs)


@dataclass(frozen=True)
class _Waits:
    """How long a task waits (``None``: no limit) and what stopping it does to the job."""

    timeout: float | None
    startup: float | None
    admission: float | None
    action: CancelAction
    finish: str = "keep"

    def task(self, spec: TrainJobSpec | None = None, **given: Any) -> TaskJob:
        """The task's hold on its job, with these actions."""
        return TaskJob(spec, on_kill=self.action, on_finish=self.finish, logger=_Said(), **given)


def _waits(inputs: Mapping[str, Any]) -> _Waits:
    return _Waits(
        timeout=inp.seconds(inputs.get("timeout_seconds"), "timeout_seconds"),
        startup=inp.seconds(inputs.get("startup_timeout_seconds"), "startup_timeout_seconds"),
        admission=inp.seconds(inputs.get("admission_timeout_seconds"), "admission_timeout_seconds"),
        action=check_action(str(inputs.get("on_cancel", "delete"))),
        finish=check_finish_action(str(inputs.get("on_finish", "keep"))),
    )


def _identity(inputs: Mapping[str, Any]) -> tuple[str, ...]:
    return inp.identity(
        str(inputs.get(inp.RUN_ID_INPUT, "")),
        str(inputs.get(inp.TASK_NAME_INPUT, "")),
        str(inputs.get("job_key", "")),
    )


def _conflict(err: SpecConflictError) -> SpecConflictError:
    return SpecConflictError(
        f"{err} In a loop (dsl.ParallelFor) the task's name is the same for every item: "
        "give each its own job_key (e.g. job_key=item)."
    )


def _write_summary(artifacts: Mapping[str, Any], text: str) -> None:
    art = artifacts.get("summary")
    if art is None:
        return
    os.makedirs(os.path.dirname(art.path) or ".", exist_ok=True)
    with open(art.path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _report(artifacts: Mapping[str, Any], out: JobOutputs) -> tuple[str, str, str, str]:
    """Fill the result artifacts; the output parameters."""
    metrics = artifacts.get("metrics")
    if metrics is not None:
        for name, value in summary.metric_values(out).items():
            metrics.log_metric(name, value)
    model = artifacts.get("model")
    if model is not None:
        uri = summary.model_uri(out.result)
        if uri:
            model.uri = uri
        model.metadata.update(summary.model_metadata(out))
    _write_summary(artifacts, outputs_summary(out, model=summary.model_uri(out.result)))
    if out.result_missing is not None:
        # The job succeeded, but `result_json` would be a silent null for downstream
        # steps: the component fails with the reason and its class's exit code (a
        # retry finds the finished job by its identity and only reads again).
        _classified(out.require_result)
    result_json = json.dumps(out.result, sort_keys=True, default=str)
    shown = result_json if len(result_json) <= 500 else result_json[:500] + "..."
    say(f"TrainJob {out.namespace}/{out.name}: {out.status.value}; result {shown}")
    return out.name, out.namespace, out.status.value, result_json


def _report_failure(
    artifacts: Mapping[str, Any],
    job: TrainJob | None,
    failure: Failure | None,
    fix: str | None = None,
) -> None:
    """The summary of a job that did not end well, the core's as every adapter writes
    it: what holds an unfinished job up (with its ``fix``), else ``failure``."""
    if job is not None:
        _write_summary(artifacts, job_summary(job, failure=failure, fix=fix))


def _finish_or_explain(
    artifacts: Mapping[str, Any],
    task: SyncTaskJob,
    work: Callable[[AsyncTrainerClient], Awaitable[T]],
    *,
    finish_failed: bool = True,
) -> T:
    """Run ``work`` guarded; on failure write the report (then ``on_finish`` for the
    failed job, unless ``finish_failed`` is off); a timeout — or a job Kueue can never
    admit — also stops the job (the core's clean-up, ``on_cancel``); a classified
    failure exits with its class's code (:func:`_classified`)."""

    def said_stopped(why: str) -> None:
        what = task.job.interruption
        if what is not None and what.acted:
            # Not left behind: the task stopped it (on_cancel), and the error says so.
            say(f"{why}: stopped {', '.join(what.acted)}")

    def explained() -> T:
        try:
            return guarded(task, work)
        except TrainJobTimeoutError as err:
            said_stopped("timed out")
            # A step restarting, a pod that cannot start: said as the error says it.
            _report_failure(artifacts, err.job, err.failure or Failure(reason="Timeout"), err.fix)
            raise
        except TrainJobNotAdmissibleError as err:
            # Queued forever otherwise: given up on as a timed-out job is (on_cancel);
            # not finished (on_finish): it never ran.
            said_stopped("Kueue can never admit it")
            _report_failure(artifacts, err.job, err.failure)
            raise
        except TrainJobFailedError as err:
            _report_failure(artifacts, err.job, err.failure)
            if finish_failed and err.job is not None:
                # After the failure is written.
                task.finish(succeeded=False, status=err.job.status.value)
            raise
        except StepFailedError as err:
            _report_failure(artifacts, err.job, err.failure or Failure(reason="StepFailed"))
            raise
        except SpecConflictError as err:
            raise _conflict(err) from None

    return _classified(explained)


#: The errors about a job's outcome, said under the kind a reader looks for.
_JOB_ERRORS = (
    TrainJobFailedError,
    TrainJobTimeoutError,
    StepFailedError,
    TrainJobResultUnavailableError,
)


def _classified(run: Callable[[], T]) -> T:
    """Run ``run``; a failure of a known class is said in the log (class, evidence,
    exit code) and ends the process with that class's exit code
    (:data:`~kf_trainer_core.errors.EXIT_CODES`), so a pipeline's exit handler or
    retry policy can tell infrastructure from configuration or user code: a TrainJob's
    failure, and an error before any job exists (a submit refused for its
    configuration, an API server out of reach: :func:`failure_class_of`)."""
    try:
        return run()
    except Exception as err:
        klass = failure_class_of(err)
        if klass is None or klass is FailureClass.UNKNOWN:
            raise
        code = EXIT_CODES[klass]
        if isinstance(err, _JOB_ERRORS):
            named = (TrainJobTimeoutError, TrainJobResultUnavailableError)
            kind = next((k.__name__ for k in named if isinstance(err, k)), "TrainJobFailedError")
            say(f"{kind} ({type(err).__name__}): {err}")
        else:  # no job (yet): the error as it is
            say(f"{type(err).__name__}: {err}")
        say(f"failure class: {klass.value}; exiting with code {code}")
        raise SystemExit(code) from None


# ---------------------------------------------------------------------- components


def _launch(
    inputs: Mapping[str, Any], artifacts: Mapping[str, Any], embedded: Mapping[str, Any]
) -> tuple[Any, ...]:
    spec = _spec(inputs, embedded)
    ident = _identity(inputs)
    waits = _waits(inputs)
    job = waits.task(spec, identity=ident)

    async def work(client: AsyncTrainerClient) -> JobOutputs:
        await job.attach(client)
        return await job.wait(
            client,
            timeout=waits.timeout,
            startup_timeout=waits.startup,
            admission_timeout=waits.admission,
            on_log=_log_line if inputs.get("stream_logs", True) else None,
            callbacks=[ProgressLines(say)],
        )

    with SyncTaskJob(job, _config(inputs)) as task:
        say(f"identity {identity_text(ident)}, namespace {task.namespace}")
        out = _finish_or_explain(artifacts, task, work)
        return _reported(task, artifacts, out)


def _reported(task: SyncTaskJob, artifacts: Mapping[str, Any], out: JobOutputs) -> tuple[Any, ...]:
    """:func:`_report`, then ``on_finish``: the job is deleted only once its outputs are
    written (a result that cannot be read fails the report first, and the job stays for
    a retry to read)."""
    reported = _report(artifacts, out)
    task.finish_outputs(out)
    return reported


def _job_outputs(job: TrainJob, news: str) -> tuple[str, str, str]:
    """Say ``news`` (where ``job`` stands now) and return the job's outputs of a
    component that hands it on (``JOB_OUTPUTS``: name, namespace, status)."""
    say(news)
    return job.name, job.namespace, job.status.value


def _submit(
    inputs: Mapping[str, Any], artifacts: Mapping[str, Any], embedded: Mapping[str, Any]
) -> tuple[Any, ...]:
    spec = _spec(inputs, embedded)
    ident = _identity(inputs)
    job = _waits(inputs).task(spec, identity=ident)

    def attach() -> Attached:
        try:
            return guarded(task, job.attach)
        except SpecConflictError as err:
            raise _conflict(err) from None

    with SyncTaskJob(job, _config(inputs)) as task:
        attached = _classified(attach)
    done = attached.job
    verb = "created" if attached.created else "found (submitted before by this task)"
    return _job_outputs(
        done, f"TrainJob {done.namespace}/{done.name} {verb}, identity {identity_text(ident)}"
    )


def _wait_step(
    inputs: Mapping[str, Any], artifacts: Mapping[str, Any], embedded: Mapping[str, Any]
) -> tuple[Any, ...]:
    name = require_job_name(str(inputs["job_name"]), "job_name")
    step = task_helpers.parse_step(str(inputs.get("step", "trainer")))
    waits = _waits(inputs)
    job = waits.task()
    job.knows(name)

    async def work(client: AsyncTrainerClient) -> TrainJob:
        sink = _log_line if inputs.get("stream_logs", True) else None
        async with job.follow_log(client, task_helpers.LOG_STEP[step], sink):
            done, _ = await task_helpers.await_steps(
                client,
                name,
                step,
                timeout=waits.timeout,
                startup_timeout=waits.startup,
                admission_timeout=waits.admission,
                callbacks=[ProgressLines(say)],
            )
        return done

    with SyncTaskJob(job, _config(inputs)) as task:
        say(f"waiting for the {step} step of TrainJob {task.namespace}/{name}")
        done = _finish_or_explain(artifacts, task, work, finish_failed=False)
    return _job_outputs(
        done,
        f"the {step} step of TrainJob {done.namespace}/{done.name} is done ({done.status.value})",
    )


def _outputs(
    inputs: Mapping[str, Any], artifacts: Mapping[str, Any], embedded: Mapping[str, Any]
) -> tuple[Any, ...]:
    name = require_job_name(str(inputs["job_name"]), "job_name")
    waits = _waits(inputs)
    job = waits.task()
    job.knows(name)
    with SyncTaskJob(job, _config(inputs)) as task:
        out = _finish_or_explain(
            artifacts, task, lambda client: job.wait(client, timeout=waits.timeout)
        )
        return _reported(task, artifacts, out)


def _cancel(
    inputs: Mapping[str, Any], artifacts: Mapping[str, Any], embedded: Mapping[str, Any]
) -> tuple[Any, ...]:
    action = check_action(str(inputs.get("action", "delete")), "action")
    name = str(inputs.get("job_name") or "")
    task = str(inputs.get("task_name") or "")
    if bool(name) == bool(task):
        raise SpecError.single(
            "job_name",
            "give the job to cancel by its name or by the task that started it.",
            "set exactly one of job_name and task_name.",
        )
    with _client(inputs) as client:
        if name:
            require_job_name(name, "job_name")
            # Unfinished jobs only: a finished one keeps its result for a retried task.
            cancelled = client.stop_unfinished(name, action=action)
        else:
            ident = inp.identity(
                str(inputs.get(inp.RUN_ID_INPUT, "")), task, str(inputs.get("job_key", ""))
            )
            cancelled = client.stop_unfinished(identity=ident, action=action)
    say(f"{action}: {', '.join(cancelled) or 'nothing unfinished'}")
    return (cancelled,)


def _prune(
    inputs: Mapping[str, Any], artifacts: Mapping[str, Any], embedded: Mapping[str, Any]
) -> tuple[Any, ...]:
    """Prune finished TrainJobs (``TrainerClient.prune_jobs``): an empty text, ``-1`` or
    ``0`` input means the rule is not given (``keep_last``: -1; ``limit``: 0)."""
    with _client(inputs) as client:
        report = client.prune_jobs(**inp.prune_options(inputs))
    for line in report.lines():
        say(line)
    _write_summary(artifacts, summary.prune_markdown(report))
    return list(report.deleted), json.dumps(report.to_dict(), sort_keys=True)


_HANDLERS: dict[
    str,
    Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]], tuple[Any, ...]],
] = {
    "launch": _launch,
    "submit": _submit,
    "wait_step": _wait_step,
    "outputs": _outputs,
    "cancel": _cancel,
    "prune": _prune,
}


def run_component(
    kind: str,
    inputs: Mapping[str, Any],
    artifacts: Mapping[str, Any],
    embedded: str = "",
) -> tuple[Any, ...]:
    """Run component ``kind`` with the task's ``inputs`` and output ``artifacts``;
    return its output parameters in the order of the component's outputs."""
    handler = _HANDLERS.get(kind)
    if handler is None:
        raise ValueError(
            f"unknown kf-trainer component kind {shown(kind)}: the component was made by another "
            "version of kf-trainer-suite. Fix: install the version that compiled the pipeline."
        )
    return handler(inputs, artifacts, json.loads(embedded) if embedded else {})
