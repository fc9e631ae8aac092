"""What runs in a component's pod: the bodies of the generated component functions call
:func:`run_component`, which turns the task's inputs into core calls and the job's
outcome into KFP outputs.

Every component waits in a worker thread while the main thread watches for SIGTERM
(KFP terminates the pod when a run is cancelled, a task times out or the node drains):
then the job the task started is deleted (``on_cancel``: ``delete``, ``suspend`` or
``keep``) and the process exits with ``128 + signal``. A job that already finished is
left alone, so that a retried task collects its result instead of training again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import Failure, TrainJob
from kf_trainer_core.errors import (
    SpecConflictError,
    StepFailedError,
    TrainJobFailedError,
    TrainJobNotAdmissibleError,
    TrainJobResultUnavailableError,
    TrainJobTimeoutError,
)
from kf_trainer_core.fields.names import require_job_name
from kf_trainer_core.manifest.builder import identity_text
from kf_trainer_core.spec import TrainJobSpec
from kf_trainer_core.tasks import helpers as task_helpers
from kf_trainer_kfp import inputs as inp
from kf_trainer_kfp import summary

if TYPE_CHECKING:
    from kf_trainer_core.client import TrainerClient
    from kf_trainer_core.cluster.waiting import Waiting

T = TypeVar("T")

#: How this package speaks in the task's log (the job's own lines are copied as they are).
PREFIX = "[kf-trainer]"


def say(message: str) -> None:
    """A line of ours in the task's log."""
    print(f"{PREFIX} {message}", flush=True)


def _log_line(line: str) -> None:
    print(line, flush=True)


class _Terminated(BaseException):
    """SIGTERM/SIGINT reached the task (a BaseException: no ``except Exception`` on the
    way may swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def guarded(work: Callable[[], T], on_terminate: Callable[[], None]) -> T:
    """Run ``work`` in a worker thread; when SIGTERM or SIGINT arrives, run
    ``on_terminate`` and exit with ``128 + signal``.

    The wait runs in a worker so that the signal never interrupts a request half-way:
    the main thread only waits, and cleans up with its own client."""
    if threading.current_thread() is not threading.main_thread():
        return work()  # signals reach only the main thread: nothing to watch for
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the main thread as it is
            box["error"] = exc
        finally:
            done.set()

    terminating = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        if terminating.is_set():
            return  # a second signal must not cut the clean-up short
        terminating.set()
        raise _Terminated(signum)

    watched = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.getsignal(sig) for sig in watched}
    worker = threading.Thread(target=target, name="kf-trainer-task", daemon=True)
    try:
        for sig in watched:
            signal.signal(sig, handler)
        worker.start()
        while not done.wait(1.0):
            pass
    except _Terminated as term:
        name = signal.Signals(term.signum).name
        say(f"{name} received: stopping the TrainJob this task started.")
        try:
            on_terminate()
        except Exception as exc:  # report, and still exit as terminated
            say(f"could not stop the TrainJob: {exc}")
        raise SystemExit(128 + term.signum) from None
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


class _Reporter:
    """Tells the task's log when the job's state or progress changes."""

    def __init__(self) -> None:
        self.name: str | None = None
        self._last: tuple[Any, ...] = ()

    def update(self, job: TrainJob) -> None:
        if self.name is None:
            self.name = job.name
            say(f"TrainJob {job.namespace}/{job.name} (runtime {job.runtime})")
        progress = job.progress
        queue = job.queue if job.queue is not None and job.queue.waiting else None
        state = (
            job.status,
            progress.percentage if progress else None,
            tuple(sorted((progress.metrics if progress else {}).items())),
            (queue.position, queue.pending_message, len(queue.evictions)) if queue else None,
        )
        if state == self._last:
            return
        self._last = state
        text = f"TrainJob {job.namespace}/{job.name}: {job.status.value}"
        if job.queue is not None and job.queue.waiting:
            # Queued by Kueue: where and why it waits.
            text += f" ({job.queue.line()})"
        if progress and job.percent_done is not None:
            text += f", {job.percent_done}%"
            if progress.estimated_remaining_seconds is not None and job.percent_done < 100:
                text += f" ({progress.estimated_remaining_seconds}s left)"
        if progress and progress.metrics:
            text += " " + " ".join(f"{k}={v}" for k, v in sorted(progress.metrics.items()))
        say(text)


# ---------------------------------------------------------------------- plumbing


def _client(inputs: Mapping[str, Any]) -> TrainerClient:
    # Imported here: building the client loads a Kubernetes library.
    from kf_trainer_core.client import TrainerClient

    config = inp.backend_config(inputs.get("backend_config"), namespace=inputs.get("namespace", ""))
    return TrainerClient(config)


def _cleanup_client(
    inputs: Mapping[str, Any], warm: Callable[[TrainerClient], object]
) -> TrainerClient:
    """A second client for stopping the job on SIGTERM, with its connection opened now:
    in a KFP pod the launcher around us exits on SIGTERM at once, and the pod with it,
    so the DELETE must leave without a handshake first."""
    client = _client(inputs)
    # Only a warm-up: the task's own calls report real trouble.
    with contextlib.suppress(Exception):
        warm(client)
    return client


def _warm_runtime(client: TrainerClient, spec: TrainJobSpec) -> object:
    return client.get_runtime(spec.runtime.name, spec.runtime.kind.value)


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
    action: inp.CancelAction
    finish: str = "keep"


def _waits(inputs: Mapping[str, Any]) -> _Waits:
    return _Waits(
        timeout=inp.seconds(inputs.get("timeout_seconds"), "timeout_seconds"),
        startup=inp.seconds(inputs.get("startup_timeout_seconds"), "startup_timeout_seconds"),
        admission=inp.seconds(inputs.get("admission_timeout_seconds"), "admission_timeout_seconds"),
        action=inp.cancel_action(str(inputs.get("on_cancel", "delete"))),
        finish=inp.finish_action(str(inputs.get("on_finish", "keep"))),
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
    _write_summary(artifacts, summary.markdown(out))
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
    *,
    waiting: Waiting | None = None,
    fix: str | None = None,
) -> None:
    if job is None:
        return
    from kf_trainer_core.cluster.outputs import outputs

    text = summary.markdown(outputs(job, None), failure, waiting=waiting, fix=fix)
    _write_summary(artifacts, text)


def _finish_or_explain(
    artifacts: Mapping[str, Any],
    work: Callable[[], T],
    on_terminate: Callable[[], None],
    on_timeout: Callable[[], list[str]],
    on_failed: Callable[[TrainJob], None] | None = None,
) -> T:
    """Run ``work`` guarded; on failure write the report (then ``on_failed`` the failed
    job), on timeout — or when Kueue can never admit the job — also stop the job
    (``on_timeout``); a classified failure exits with its class's code
    (:func:`_exit_classified`)."""

    def stop(why: str) -> list[str]:
        try:
            stopped = on_timeout()
        except Exception as exc:  # the wait's error is the one to report
            say(f"{why}, and could not stop the TrainJob: {exc}")
            stopped = []
        if stopped:
            say(f"{why}: stopped {', '.join(stopped)}")
        return stopped

    def explained() -> T:
        try:
            return guarded(work, on_terminate)
        except TrainJobTimeoutError as err:
            stopped = stop("timed out")
            if err.job is not None and err.waiting is not None:
                # A step restarting, a pod that cannot start: said as the error says it.
                _report_failure(artifacts, err.job, None, waiting=err.waiting, fix=err.fix)
            elif err.job is not None:
                _report_failure(artifacts, err.job, err.failure or Failure(reason="Timeout"))
            if stopped:
                # Not left behind: the task stopped it (on_cancel).
                raise err.settled(
                    f"cleaned up: TrainJob {', '.join(stopped)} stopped by the task (on_cancel)"
                ) from None
            raise
        except TrainJobNotAdmissibleError as err:
            # Queued forever otherwise: given up on as a timed-out job is (on_cancel).
            stop("Kueue can never admit it")
            _report_failure(artifacts, err.job, err.failure)
            raise
        except TrainJobFailedError as err:
            _report_failure(artifacts, err.job, err.failure)
            if on_failed is not None and err.job is not None:
                on_failed(err.job)  # after the failure is written
            raise
        except StepFailedError as err:
            if err.job is not None:
                _report_failure(artifacts, err.job, err.failure or Failure(reason="StepFailed"))
            raise

    try:
        return _classified(explained)
    except SpecConflictError as err:
        raise _conflict(err) from None


def _classified(run: Callable[[], T]) -> T:
    """Run ``run``; a TrainJob failure of a known class is said in the log (class,
    evidence, exit code) and ends the process with that class's exit code
    (:data:`~kf_trainer_core.cluster.failures.EXIT_CODES`), so a pipeline's exit handler or
    retry policy can tell infrastructure from configuration or user code."""
    from kf_trainer_core.cluster.failures import EXIT_CODES, failure_class_of
    from kf_trainer_core.errors import FailureClass

    try:
        return run()
    except (
        TrainJobFailedError,
        TrainJobTimeoutError,
        StepFailedError,
        TrainJobResultUnavailableError,
    ) as err:
        klass = failure_class_of(err)
        if klass is None or klass is FailureClass.UNKNOWN:
            raise
        code = EXIT_CODES[klass]
        kind = (
            "TrainJobTimeoutError"
            if isinstance(err, TrainJobTimeoutError)
            else "TrainJobResultUnavailableError"
            if isinstance(err, TrainJobResultUnavailableError)
            else "TrainJobFailedError"
        )
        say(f"{kind} ({type(err).__name__}): {err}")
        say(f"failure class: {klass.value}; exiting with code {code}")
        raise SystemExit(code) from None


# ---------------------------------------------------------------------- components


def _launch(
    inputs: Mapping[str, Any], artifacts: Mapping[str, Any], embedded: Mapping[str, Any]
) -> tuple[Any, ...]:
    spec = _spec(inputs, embedded)
    ident = _identity(inputs)
    waits = _waits(inputs)
    client = _client(inputs)
    cleanup = _cleanup_client(inputs, lambda c: _warm_runtime(c, spec))
    reporter = _Reporter()
    say(f"identity {identity_text(ident)}, namespace {client.namespace}")

    def work() -> JobOutputs:
        out: JobOutputs = client.run(
            spec,
            identity=ident,
            timeout=waits.timeout,
            startup_timeout=waits.startup,
            admission_timeout=waits.admission,
            on_log=_log_line if inputs.get("stream_logs", True) else None,
            on_update=reporter.update,
        )
        return out

    out = _finish_or_explain(
        artifacts,
        work,
        lambda: _stop_identity(cleanup, ident, waits.action),
        lambda: task_helpers.cancel_identity(cleanup, ident, waits.action),
        lambda job: _finished(client, job.name, job.status.value, waits.finish, succeeded=False),
    )
    return _reported(client, artifacts, out, waits.finish)


def _reported(
    client: TrainerClient, artifacts: Mapping[str, Any], out: JobOutputs, action: str
) -> tuple[Any, ...]:
    """:func:`_report`, then ``on_finish``: the job is deleted only once its outputs are
    written (a result that cannot be read fails the report first, and the job stays for
    a retry to read)."""
    reported = _report(artifacts, out)
    _finished(client, out.name, out.status.value, action, succeeded=True)
    return reported


def _finished(
    client: TrainerClient, name: str, status: str, action: str, *, succeeded: bool
) -> None:
    """``on_finish``: delete the finished job, or keep it. A failed delete is said, never
    raised: the task's outcome is decided."""
    from kf_trainer_core.fields.retention import finish_deletes

    if not finish_deletes(action, status, succeeded=succeeded):
        return
    try:
        if client.delete_job(name):
            say(f"deleted TrainJob {client.namespace}/{name} (on_finish={action})")
    except Exception as exc:
        say(f"could not delete TrainJob {client.namespace}/{name} (on_finish={action}): {exc}")


def _stop_identity(client: TrainerClient, ident: tuple[str, ...], action: inp.CancelAction) -> None:
    stopped = task_helpers.cancel_identity(client, ident, action)
    if stopped:
        say(f"{action}: {', '.join(stopped)}")
    else:
        say(f"no unfinished TrainJob of {identity_text(ident)} to {action}")


def _stop_name(client: TrainerClient, name: str, action: inp.CancelAction) -> None:
    if task_helpers.cancel_if_unfinished(client, name, action):
        say(f"{action}: {name}")
    else:
        say(f"TrainJob {name} left as it is ({action}, finished or gone)")


def _waiting_on(
    inputs: Mapping[str, Any], name: str
) -> tuple[_Waits, TrainerClient, TrainerClient]:
    """For a task that waits on job ``name``: its limits, its client and the clean-up
    client."""
    waits = _waits(inputs)
    client = _client(inputs)
    return waits, client, _cleanup_client(inputs, lambda c: c.get_job(name))


def _finish_named(
    artifacts: Mapping[str, Any],
    work: Callable[[], T],
    cleanup: TrainerClient,
    name: str,
    action: inp.CancelAction,
    on_failed: Callable[[TrainJob], None] | None = None,
) -> T:
    """:func:`_finish_or_explain` for a task that waits on a job by name."""
    return _finish_or_explain(
        artifacts,
        work,
        lambda: _stop_name(cleanup, name, action),
        lambda: [name] if task_helpers.cancel_if_unfinished(cleanup, name, action) else [],
        on_failed,
    )


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
    action = inp.cancel_action(str(inputs.get("on_cancel", "delete")))
    client = _client(inputs)
    cleanup = _cleanup_client(inputs, lambda c: _warm_runtime(c, spec))

    def work() -> Any:
        return client.submit(spec, identity=ident)

    try:
        submitted = guarded(work, lambda: _stop_identity(cleanup, ident, action))
    except SpecConflictError as err:
        raise _conflict(err) from None
    job = submitted.job
    verb = "created" if submitted.created else "found (submitted before by this task)"
    return _job_outputs(
        job, f"TrainJob {job.namespace}/{job.name} {verb}, identity {identity_text(ident)}"
    )


def _wait_step(
    inputs: Mapping[str, Any], artifacts: Mapping[str, Any], embedded: Mapping[str, Any]
) -> tuple[Any, ...]:
    name = require_job_name(str(inputs["job_name"]), "job_name")
    step = task_helpers.parse_step(str(inputs.get("step", "trainer")))
    waits, client, cleanup = _waiting_on(inputs, name)
    reporter = _Reporter()
    say(f"waiting for the {step} step of TrainJob {client.namespace}/{name}")

    def work() -> TrainJob:
        follow = (
            task_helpers.follow_logs_in_background(
                client, name, task_helpers.LOG_STEP[step], _log_line
            )
            if inputs.get("stream_logs", True)
            else contextlib.nullcontext()
        )
        with follow:
            job, _ = task_helpers.wait_for_step(
                client,
                name,
                step,
                timeout=waits.timeout,
                startup_timeout=waits.startup,
                admission_timeout=waits.admission,
                callbacks=[reporter.update],
            )
        return job

    job = _finish_named(artifacts, work, cleanup, name, waits.action)
    return _job_outputs(
        job, f"the {step} step of TrainJob {job.namespace}/{job.name} is done ({job.status.value})"
    )


def _outputs(
    inputs: Mapping[str, Any], artifacts: Mapping[str, Any], embedded: Mapping[str, Any]
) -> tuple[Any, ...]:
    name = require_job_name(str(inputs["job_name"]), "job_name")
    waits, client, cleanup = _waiting_on(inputs, name)

    def work() -> JobOutputs:
        out: JobOutputs = client.wait_outputs(name, timeout=waits.timeout)
        return out

    out = _finish_named(
        artifacts,
        work,
        cleanup,
        name,
        waits.action,
        lambda job: _finished(client, job.name, job.status.value, waits.finish, succeeded=False),
    )
    return _reported(client, artifacts, out, waits.finish)


def _cancel(
    inputs: Mapping[str, Any], artifacts: Mapping[str, Any], embedded: Mapping[str, Any]
) -> tuple[Any, ...]:
    action = inp.cancel_action(str(inputs.get("action", "delete")))
    client = _client(inputs)
    name = str(inputs.get("job_name") or "")
    task = str(inputs.get("task_name") or "")
    if bool(name) == bool(task):
        from kf_trainer_core.errors import SpecError

        raise SpecError.single(
            "job_name",
            "give the job to cancel by its name or by the task that started it.",
            "set exactly one of job_name and task_name.",
        )
    if name:
        require_job_name(name, "job_name")
        cancelled = [name] if task_helpers.cancel_if_unfinished(client, name, action) else []
    else:
        ident = inp.identity(
            str(inputs.get(inp.RUN_ID_INPUT, "")), task, str(inputs.get("job_key", ""))
        )
        cancelled = task_helpers.cancel_identity(client, ident, action)
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
