"""``kf-trainer render|check|run SPEC``: spec files (YAML or JSON, ``-`` for stdin)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from kf_trainer_core.base.documents import MAX_SPEC_BYTES, DocumentError, load_document
from kf_trainer_core.cli._errors import CliError, Exit, classify, one_line
from kf_trainer_core.cli._follow import interrupted
from kf_trainer_core.cli._where import check_identity, check_namespace, make_client, where_options


def load_spec(path: str) -> Any:
    """Read and validate a spec file; a missing file or bad YAML/JSON is one line."""
    from kf_trainer_core.spec import TrainJobSpec

    # Read one byte past the cap at most: a huge file is refused, not held in memory.
    if path == "-":
        text: str | bytes = sys.stdin.read(MAX_SPEC_BYTES + 1)
    else:
        file = Path(path)
        if not file.is_file():
            raise CliError(
                f"{path}: no such spec file. Fix: check the path (YAML or JSON, '-' for stdin)."
            )
        with file.open("rb") as fh:
            text = fh.read(MAX_SPEC_BYTES + 1)
    try:
        data = load_document(text, path)
    except DocumentError as exc:
        raise CliError(str(exc)) from None
    if not isinstance(data, dict):
        raise CliError(
            f"{path}: a spec is a mapping (runtime, trainer, ...), not "
            f"{type(data).__name__}. Fix: see examples/specs/quickstart.yaml."
        )
    _importable_beside(path)
    return TrainJobSpec.parse(data)


def _importable_beside(path: str) -> None:
    """Let a ``"module:function"`` reference name a module beside the spec file, or in
    the current folder, as ``python train.py`` would find it: a console script's own
    ``sys.path`` holds neither, so ``func: train:train`` beside the spec failed with
    "No module named 'train'"."""
    folders = [Path.cwd()] if path == "-" else [Path(path).resolve().parent, Path.cwd()]
    for folder in reversed(folders):
        entry = str(folder)
        if entry not in sys.path:
            sys.path.insert(0, entry)


SPEC = click.argument("spec", metavar="SPEC")


@click.command("render")
@SPEC
@click.option("-n", "--namespace", help="The manifest's namespace.")
@click.option("--name", help="The job's name (default: generated).")
@click.option("--identity", help="Orchestrator identity, e.g. dag/task/run.")
@click.pass_context
def render(
    ctx: click.Context, spec: str, namespace: str | None, name: str | None, identity: str | None
) -> None:
    """Print the TrainJob YAML the cluster would receive for SPEC."""
    from kf_trainer_core.manifest.builder import build_trainjob

    if namespace is None:  # `kf-trainer -n team-a render …` means the same
        namespace = ctx.find_root().meta.get("kf_where", {}).get("namespace")
    if namespace is not None:
        check_namespace(namespace)
    check_identity(identity)
    built = build_trainjob(load_spec(spec), namespace=namespace, name=name, identity=identity)
    for warning in built.warnings:
        click.echo(f"# warning: {warning}", err=True)
    click.echo(built.yaml(), nl=False)


@click.command("check")
@SPEC
@where_options
@click.option("--name", help="Check with this job name.")
@click.option(
    "--offline",
    is_flag=True,
    help="Check the spec alone: do not look its runtime up on the backend.",
)
@click.pass_context
def check(ctx: click.Context, spec: str, name: str | None, offline: bool) -> None:
    """Validate SPEC, and its runtime against the backend when it can be reached (the
    runtime `run` would use: a misspelt name is caught here, with the nearest one);
    exit 2 with the problems, 3 for a runtime the backend does not have."""
    from kf_trainer_core.manifest.builder import build_trainjob

    parsed = load_spec(spec)
    built = build_trainjob(parsed, name=name)  # the spec alone first: no request for it
    where = "not looked up (--offline)" if offline else _checked_on_backend(ctx, parsed, name)
    click.echo(
        f"ok: {built.name} ({built.runtime.name}, spec hash {built.spec_hash[:12]}; "
        f"runtime {where})"
    )


#: How long `check` waits for a backend (it is a quick validation, not a job).
_CHECK_TIMEOUT = 5.0


def _checked_on_backend(ctx: click.Context, parsed: Any, name: str | None) -> str:
    """Build the manifest against the runtime as the backend has it, as `run` does;
    what was checked, for the ``ok`` line. A runtime the backend lacks is an error
    (exit 3, with the nearest name); a backend that cannot be reached or read leaves the
    runtime unchecked, said on stderr with the reason."""
    from kf_trainer_core.cli._where import backend_config
    from kf_trainer_core.client import TrainerClient
    from kf_trainer_core.errors import SpecError
    from kf_trainer_core.k8s.errors import ApiError
    from kf_trainer_core.k8s.retry import RetryPolicy

    config = backend_config(ctx)
    try:
        if "request_timeout" in type(config).model_fields:
            config = config.model_copy(update={"request_timeout": _CHECK_TIMEOUT})
        client = TrainerClient(config, retry=RetryPolicy(attempts=2, base=0.2, cap=1.0))
    except SpecError as exc:  # no kubeconfig, a context it lacks: no cluster to ask
        return _unchecked(one_line(str(exc)))
    ctx.call_on_close(client.close)
    try:
        client.build(parsed, name=name)
    except ApiError as exc:
        if exc.not_found:
            raise
        return _unchecked(one_line(classify(exc)[1]))
    if config.backend == "kubernetes":
        return "found on the cluster"
    return f"found on the {config.backend} backend"


def _unchecked(reason: str) -> str:
    click.echo(f"[kf-trainer] the runtime was not looked up on the backend: {reason}", err=True)
    return "not looked up (see stderr)"


@click.command("run")
@SPEC
@where_options
@click.option("--name", help="The job's name (default: generated from the spec).")
@click.option(
    "--identity",
    help="Submit idempotently under this identity: a rerun reattaches to its job.",
)
@click.option("--step", default="node-0", show_default=True, help="Which step's log to follow.")
@click.option("--detach", is_flag=True, help="Submit and print the name; do not follow.")
@click.option("--quiet", "-q", is_flag=True, help="Do not print the log.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Give up after this many seconds (exit 5; the job keeps running).",
)
@click.pass_context
def run(
    ctx: click.Context,
    spec: str,
    name: str | None,
    identity: str | None,
    step: str,
    detach: bool,
    quiet: bool,
    timeout: float | None,
) -> None:
    """Submit SPEC and follow it to its end, as the client's run() does: the log on
    stdout, state changes on stderr; exit 0 when it completes, 1 when it fails."""
    from kf_trainer_core.cli._follow import finished
    from kf_trainer_core.cluster.status import TrainJob

    check_identity(identity)
    parsed = load_spec(spec)
    client = make_client(ctx, creates=True)
    if detach:
        submitted = client.submit(parsed, name=name, identity=identity)
        verb = "created" if submitted.created else "exists"
        click.echo(f"{submitted.job.namespace}/{submitted.job.name}: {verb}")
        return
    seen: dict[str, str] = {}
    started: dict[str, str] = {}  # the submitted job's name and namespace

    def on_update(job: TrainJob) -> None:
        parts = [job.waiting.line() if job.waiting else job.status.value, *job.progress_summary()]
        text = ", ".join(parts)
        if seen.get(job.name) != text:
            seen[job.name] = text
            click.echo(f"[kf-trainer] {job.namespace}/{job.name}: {text}", err=True)

    def on_submitted(submitted: Any) -> None:
        job = submitted.job
        started["name"], started["namespace"] = job.name, job.namespace
        verb = "submitted" if submitted.created else "reattached to"
        click.echo(f"[kf-trainer] {verb} {job.namespace}/{job.name}", err=True)

    try:
        out = client.run(
            parsed,
            name=name,
            identity=identity,
            timeout=timeout,
            on_log=None if quiet else click.echo,
            log_step=step,
            on_update=on_update,
            on_submitted=on_submitted,
        )
    except KeyboardInterrupt:
        if "name" not in started:
            raise CliError("interrupted before the job was submitted.", Exit.INTERRUPTED) from None
        raise interrupted(ctx, started["name"], started["namespace"]) from None
    job = client.get_job(out.name)
    finished(job, out.result, out.result_missing)
