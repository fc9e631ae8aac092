"""``kf-trainer jobs …``: list, inspect, follow, wait for, stop and prune TrainJobs.

Every job command lives under ``jobs`` (there are no top-level aliases): ``kf-trainer
jobs logs NAME -f``. Reading commands take ``-o table|json|yaml``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from typing_extensions import Unpack

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.timeutil import duration_text
from kf_trainer_core.cli._errors import CliError, Exit, classify, one_line
from kf_trainer_core.cli._output import (
    age,
    device_text,
    dump,
    duration,
    key_values,
    output_option,
    show_list,
    table,
)
from kf_trainer_core.cli._where import check_identity, hint, make_client, where_options
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.fields.retention import PruneOptions, parse_age

_STATES = [s.value for s in JobState]


def _name(name: str) -> str:
    """Refuse an empty or malformed job name before any request (an empty name must
    never reach a URL, where it would address the whole collection)."""
    from kf_trainer_core.fields.names import name_problem

    problem = name_problem(name)
    if problem:
        raise CliError(f"NAME: {problem}")
    return name


NAME = click.argument("name", callback=lambda _c, _p, v: _name(v))


def job_row(job: TrainJob) -> list[str]:
    # Restarting / Pending where the pods say so (the SDK's state is in -o json).
    status = job.display_status + (" (deleting)" if job.deleting else "")
    return [
        job.name,
        job.namespace,
        status,
        job.runtime,
        str(job.num_nodes),
        age(job.creation_timestamp),
        duration(job.creation_timestamp, job.completion_timestamp),
        # The job's own progress report (status.trainerStatus), e.g. 40%.
        "-" if job.percent_done is None else f"{job.percent_done}%",
    ]


JOB_HEADERS = ["NAME", "NAMESPACE", "STATUS", "RUNTIME", "NODES", "AGE", "DURATION", "PROGRESS"]


@click.group("jobs")
def jobs() -> None:
    """List, inspect, follow, wait for and stop TrainJobs."""


@jobs.command("list")
@where_options
@click.option("-l", "--selector", help="Label selector, e.g. team=ml,app!=x.")
@click.option("--identity", help="Only the attempts submitted for this orchestrator identity.")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(_STATES, case_sensitive=False),
    help="Only jobs in this state (repeatable).",
)
@click.option("--runtime", help="Only jobs of this runtime.")
@output_option
@click.pass_context
def list_jobs(
    ctx: click.Context,
    selector: str | None,
    identity: str | None,
    statuses: tuple[str, ...],
    runtime: str | None,
    output: str,
) -> None:
    """Jobs of the namespace, newest first."""
    from kf_trainer_core.manifest.selectors import identity_selector

    check_identity(identity)
    client = make_client(ctx)
    parts = [selector] if selector else []
    if identity is not None:
        parts.append(identity_selector(identity))
    found = client.list_jobs(runtime=runtime, label_selector=",".join(parts) or None)
    wanted = {s.lower() for s in statuses}
    found = [j for j in found if not wanted or j.status.value.lower() in wanted]
    found.sort(key=lambda j: (j.creation_timestamp is None, j.creation_timestamp), reverse=True)
    empty = f"No TrainJobs in namespace {client.namespace}."
    show_list(found, output, JOB_HEADERS, job_row, empty=empty)


def _details(client: Any, name: str) -> dict[str, Any]:
    job = client.get_job(name)
    data: dict[str, Any] = {"job": job.model_dump(mode="json")}
    if job.status is JobState.COMPLETE:
        data["outputs"] = client.get_job_outputs(name).model_dump(mode="json")
    if job.status is JobState.FAILED or (job.failure is not None):
        data["failure"] = client.explain_failure(name).model_dump(mode="json")
    return data


def _job_command(command: str, **settings: Any) -> Callable[[Callable[..., None]], Any]:
    """``jobs COMMAND NAME``: a command about one job, with the options that say where it
    is; the function gets the context, the name and its own options."""

    def make(func: Callable[..., None]) -> Any:
        return jobs.command(command, **settings)(NAME(where_options(click.pass_context(func))))

    return make


@_job_command("get")
@output_option
def get_job(ctx: click.Context, name: str, output: str) -> None:
    """A job's steps, conditions, progress, metrics, result and, if it failed, why."""
    from kf_trainer_core.cluster.outputs import JobOutputs
    from kf_trainer_core.cluster.status import Failure
    from kf_trainer_core.cluster.waiting import fix_for

    client = make_client(ctx)
    data = _details(client, name)
    if output != "table":
        dump(data, output)
        return
    job = TrainJob.model_validate(data["job"])
    outputs = JobOutputs.model_validate(data["outputs"]) if "outputs" in data else None
    lines = [
        ("Name", job.name),
        ("Namespace", job.namespace),
        ("Status", _status_text(job)),
        ("Runtime", f"{job.runtime} ({job.runtime_kind})"),
        ("Nodes", str(job.num_nodes)),
        ("Created", str(job.creation_timestamp or "-")),
        ("Duration", duration(job.creation_timestamp, job.completion_timestamp)),
        ("Identity", job.identity or "-"),
        ("Labels", ", ".join(f"{k}={v}" for k, v in sorted(job.labels.items())) or "-"),
    ]
    if job.waiting is not None:
        # One explanation of a job that restarts or cannot start: its class and fix.
        lines.append(("Class", job.waiting.class_text()))
        fix = job.waiting.fix(job.name, lambda args: hint(ctx, *args, namespace=job.namespace))
        lines.append(("Fix", fix))
    elif "failure" in data:
        # A failed job gets the fix of its class too, said as what to change before
        # submitting it again (the failure itself is explained below the tables).
        failure = Failure.model_validate(data["failure"])
        fix = fix_for(
            failure.failure_class,
            job.name,
            lambda args: hint(ctx, *args, namespace=job.namespace),
            failure.step,
            failed=True,
        )
        lines.append(("Fix", fix))
    if job.progress is not None:
        lines.append(("Progress", "; ".join(job.progress_summary()) or "-"))
    if job.queue is not None:
        lines.append(("Queue", job.queue.line()))
    if job.worker is not None:
        lines.append(("Runs on", job.worker.line()))
    if outputs is not None and outputs.cost_text():
        lines.append(("Cost", outputs.cost_text()))
    key_values(lines)
    if job.steps:
        click.echo("")
        table(
            ["STEP", "STATUS", "POD", "DEVICE", "REASON", "EXIT"],
            [
                [
                    s.name,
                    s.status or "-",
                    s.pod_name,
                    device_text(s.device, s.device_count, s.gpus),
                    s.container_reason or "-",
                    "-" if s.exit_code is None else str(s.exit_code),
                ]
                for s in job.steps
            ],
        )
    if job.conditions:
        click.echo("")
        table(
            ["CONDITION", "STATUS", "REASON", "MESSAGE"],
            [
                [
                    str(c.get("type", "")),
                    str(c.get("status", "")),
                    str(c.get("reason") or "-"),
                    str(c.get("message") or ""),
                ]
                for c in job.conditions
            ],
        )
    if outputs is not None:
        click.echo("")
        if outputs.metrics:
            shown = ", ".join(f"{k}={v}" for k, v in outputs.metrics.items())
            click.echo("Metrics: " + untrusted.line(shown))
        import json

        if outputs.result_missing is not None:
            click.echo(f"Result:  unavailable: {untrusted.line(outputs.result_missing.message)}")
        else:
            click.echo(f"Result:  {untrusted.line(json.dumps(outputs.result, default=str))}")
    if "failure" in data:
        click.echo("")
        click.echo("Failure: " + Failure.model_validate(data["failure"]).describe())


def _status_text(job: TrainJob) -> str:
    """``Restarting: step node-0 is failing and being retried (attempt 2 of 7, exit code
    3)``, ``Pending: …`` or the job's state, and whether it is being deleted."""
    text = job.waiting.line() if job.waiting is not None else job.status.value
    return text + (" (deleting)" if job.deleting else "")


@_job_command("logs")
@click.option("--step", default="node-0", show_default=True, help="Which step's log.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing lines as they are written.")
@click.option("--tail", type=click.IntRange(min=0), help="Only the last N lines.")
@click.option(
    "--raw",
    is_flag=True,
    help="Every line as the log holds it: the suite's progress and result lines, "
    "control characters and escapes, whole lines.",
)
def logs(
    ctx: click.Context, name: str, step: str, follow: bool, tail: int | None, raw: bool
) -> None:
    """One step's log (node-0 by default); with -f, until the step ends. Without
    --raw, the suite's own progress and result lines are hidden, control characters
    and terminal escapes neutralised, and lines longer than 4,096 characters cut."""
    from kf_trainer_core.cli._follow import interrupted

    client = make_client(ctx)
    try:
        for line in client.get_job_logs(name, step=step, follow=follow, tail=tail, raw=raw):
            click.echo(line)
    except KeyboardInterrupt:
        raise interrupted(ctx, name, client.namespace) from None


@_job_command("events")
@output_option
def events(ctx: click.Context, name: str, output: str) -> None:
    """Events of the job, its JobSet, Jobs and pods, oldest first."""
    client = make_client(ctx)
    found = client.get_job_events(name)
    show_list(
        found,
        output,
        ["AGE", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        lambda e: [
            age(e.event_time),
            e.type,
            e.reason,
            f"{e.involved_object_kind}/{e.involved_object_name}",
            e.message,
        ],
        empty=f"No events for {client.namespace}/{name}.",
    )


@_job_command("wait")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Give up after this many seconds (exit 5). Default: wait as long as it takes.",
)
@click.option(
    "--for",
    "goal",
    type=click.Choice(["Complete", "Running", "Suspended"]),
    default="Complete",
    show_default=True,
    help="The state to wait for.",
)
def wait(ctx: click.Context, name: str, timeout: float | None, goal: str) -> None:
    """Wait for the job to finish, with its progress; exit 0 if it completed, 1 if it
    failed (the failure is explained)."""
    from kf_trainer_core.cli._follow import Tracker, finished, interrupted

    client = make_client(ctx)
    try:
        with Tracker(name) as tracker:
            tracker.update(client.get_job(name))
            # A person watches: the log is read for progress every 2 s (a wait in a
            # task reads it every 10 s).
            out = client.wait_outputs(
                name, goal, timeout=timeout, callbacks=[tracker.update], log_progress_interval=2.0
            )
            job = client.get_job(name)
            tracker.update(job)
    except KeyboardInterrupt:
        raise interrupted(ctx, name, client.namespace) from None
    finished(job, out.result, out.result_missing)


def _act(ctx: click.Context, name: str, verb: str, action: Any) -> None:
    client = make_client(ctx)
    done = action(client)
    if not done:
        client.get_job(name)  # a job that is not there is an error (exit 3), not a no-op
    click.echo(f"{client.namespace}/{name}: {verb if done else 'nothing to do'}")


@jobs.command("delete")
@click.argument("names", nargs=-1, required=True)
@where_options
@click.pass_context
def delete(ctx: click.Context, names: tuple[str, ...]) -> None:
    """Delete jobs (their pods and JobSet go with them). Every job that can be deleted
    is; each one that could not be is reported, and the exit code is that of the first
    named."""
    from kf_trainer_core.errors import DeleteConflictError, DeleteRefusedError

    for name in names:
        _name(name)
    client = make_client(ctx)
    missing = []
    failures: list[str] = []
    first: Exit | None = None  # the exit code of the first job, in the order named
    for name in names:
        try:
            deleted = client.delete_job(name)
        except (DeleteConflictError, DeleteRefusedError) as exc:
            # Said of this job alone (nothing of it was changed): the others still go.
            code, message = classify(exc)
            failures.append(message)
            first = first or code
            continue
        if deleted:
            click.echo(f"{client.namespace}/{name}: deleted")
        else:
            missing.append(name)
            first = first or Exit.NOT_FOUND
    if missing:
        failures.append(f"not found in namespace {client.namespace}: {', '.join(missing)}")
    if first is not None:
        for message in failures[:-1]:
            click.echo(f"kf-trainer: error: {one_line(message)}", err=True)
        raise CliError(failures[-1], first)


@_job_command("cancel")
@click.option(
    "--action",
    type=click.Choice(["delete", "suspend", "keep"]),
    default="delete",
    show_default=True,
    help="delete the job, suspend it (resumable), or keep it running.",
)
def cancel(ctx: click.Context, name: str, action: str) -> None:
    """Stop a job as an orchestrator's cancel would."""
    _act(ctx, name, f"cancelled ({action})", lambda c: c.cancel_job(name, action))


def _switch(command: str, verb: str, operation: Callable[[Any, str], Any], doc: str) -> None:
    """Add ``jobs COMMAND NAME``: ``operation(client, name)``, said with ``verb``. Suspend
    and resume are one command each way, alike but for the operation."""

    @_job_command(command, help=doc)
    def switch(ctx: click.Context, name: str) -> None:
        _act(ctx, name, verb, lambda c: operation(c, name))


_switch(
    "suspend",
    "suspended",
    lambda c, name: c.suspend_job(name),
    "Suspend a job: its pods go, the job stays and can be resumed.",
)
_switch("resume", "resumed", lambda c, name: c.resume_job(name), "Resume a suspended job.")


@jobs.command("prune")
@where_options
@click.option(
    "--older-than",
    metavar="AGE",
    help="Only jobs that finished longer ago than AGE (7d, 12h, 30m, 90s).",
)
@click.option(
    "--keep-last",
    type=click.IntRange(min=0),
    metavar="N",
    help="Keep the newest N attempts of each identity; the older ones are pruned.",
)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(["Complete", "Failed"], case_sensitive=False),
    help="Only jobs in this finished state (repeatable; default both).",
)
@click.option("-l", "--selector", "label_selector", help="Only jobs matching this label selector.")
@click.option("--identity-prefix", help="Only jobs whose identity starts with this text.")
@click.option("--all", "include_foreign", is_flag=True, help="Also jobs this suite did not create.")
@click.option(
    "--ignore-retention",
    is_flag=True,
    help="Ignore the retention the jobs were submitted with (only the flags decide).",
)
@click.option("--limit", type=click.IntRange(min=1), help="Delete at most N jobs this run.")
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; delete nothing.")
@output_option
@click.pass_context
def prune(
    ctx: click.Context, output: str, ignore_retention: bool, **options: Unpack[PruneOptions]
) -> None:
    """Delete finished jobs (their JobSets and pods go with them); never an unfinished
    one, never checkpoints. Without --older-than/--keep-last, the retention each job
    was submitted with decides."""
    # The flags arrive under PruneOptions' names and pass through; the age is read here
    # only so that its error names the flag. --ignore-retention is a plain flag turned
    # round here: a flag_value=False flag with default=True reads False when left out on
    # Click 8.3.0-8.3.2 (pallets/click#3111).
    options["honour_retention"] = not ignore_retention
    older_than = options.get("older_than")
    try:
        if older_than is not None:
            options["older_than"] = parse_age(older_than, "--older-than")
    except ValueError as exc:
        raise CliError(str(exc)) from None
    statuses = tuple(options.pop("statuses", ()))  # none given: the core's default
    if statuses:
        options["statuses"] = tuple(s.capitalize() for s in statuses)
    client = make_client(ctx)
    try:
        report = client.prune_jobs(**options)
    except ValueError as exc:
        raise CliError(str(exc).replace("older_than", "--older-than")) from None
    if output != "table":
        dump(report.to_dict(), output)
        return
    done = set(report.deleted)
    skipped = dict(report.skipped)
    rows = [
        [
            e.name,
            e.identity or "-",
            e.status,
            duration_text(e.age_seconds).replace(" ", ""),
            ("would delete" if report.dry_run else "deleted" if e.name in done else "kept")
            + (f" ({skipped[e.name]})" if e.name in skipped else ""),
            e.why,
        ]
        for e in report.selected
    ]
    if rows:
        table(["NAME", "IDENTITY", "STATUS", "FINISHED", "ACTION", "WHY"], rows)
    click.echo(report.summary())
