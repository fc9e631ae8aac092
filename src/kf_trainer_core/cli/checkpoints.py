"""``kf-trainer jobs checkpoints …``: where an identity's checkpoints are, and the one
way to remove them (never done implicitly; see docs/checkpoints.md)."""

from __future__ import annotations

from typing import Any

import click

from kf_trainer_core.cli._errors import CliError, Exit
from kf_trainer_core.cli._output import dump, output_option
from kf_trainer_core.cli._where import check_identity, make_client, where_options

IDENTITY = click.argument("identity", callback=lambda _c, _p, v: check_identity(v))


def _storage_options(func: Any) -> Any:
    func = click.option("--pvc", help="The claim the jobs mounted (default: read from the jobs).")(
        func
    )
    func = click.option("--uri", help="The storage URI the jobs used (default: from the jobs).")(
        func
    )
    return click.option("--mount-path", help="Where the jobs mounted the claim.")(func)


def _option(pvc: str | None, uri: str | None, mount_path: str | None) -> Any:
    if pvc is None and uri is None:
        return None
    from kf_trainer_core.spec.checkpoint_storage import Checkpoints

    extra = {"mount_path": mount_path} if mount_path else {}
    return Checkpoints(pvc=pvc, uri=uri, **extra)


def _data(loc: Any) -> dict[str, Any]:
    return {
        "namespace": loc.namespace,
        "identity": loc.identity,
        "key": loc.key,
        "path": str(loc.local_path) if loc.local_path is not None else loc.path,
        "pvc": loc.pvc,
        "uri": loc.uri,
    }


@click.group("checkpoints")
def checkpoints() -> None:
    """Where an identity's checkpoints are; remove them."""


@checkpoints.command("where")
@IDENTITY
@where_options
@_storage_options
@output_option
@click.pass_context
def where(
    ctx: click.Context,
    identity: str,
    pvc: str | None,
    uri: str | None,
    mount_path: str | None,
    output: str,
) -> None:
    """The checkpoint location every attempt of IDENTITY shares."""
    # Where they would be needs no job of the identity, but a state directory that
    # exists: a mistyped --state-dir is an error (exit 3), never created.
    client = make_client(ctx)
    loc = client.checkpoint_location(identity, checkpoints=_option(pvc, uri, mount_path))
    if output != "table":
        dump(_data(loc), output)
        return
    gone = loc.local_path is not None and not loc.local_path.exists()
    # A local location that is not there (never written, or removed by `clean`) says so.
    note = " (nothing there: no checkpoint yet, or removed by `clean`)" if gone else ""
    click.echo(f"{loc.namespace} {identity}: {loc.describe()}{note}")


@checkpoints.command("clean")
@IDENTITY
@where_options
@_storage_options
@click.option("--force", is_flag=True, help="Even while an attempt has not finished.")
@click.pass_context
def clean(
    ctx: click.Context,
    identity: str,
    pvc: str | None,
    uri: str | None,
    mount_path: str | None,
    force: bool,
) -> None:
    """Remove the checkpoints of IDENTITY (every attempt's), and nothing else."""
    from kf_trainer_core.spec import checkpoint_storage as cs

    client = make_client(ctx)
    try:
        loc = client.clean_checkpoints(
            identity, checkpoints=_option(pvc, uri, mount_path), force=force
        )
    except (cs.CheckpointsInUseError, cs.CheckpointsNotRemovedError) as exc:
        raise CliError(str(exc), Exit.CONFLICT) from None
    except cs.CheckpointsNotFoundError as exc:
        raise CliError(str(exc), Exit.NOT_FOUND) from None
    except cs.CheckpointsUnreachableError as exc:
        raise CliError(str(exc), Exit.UNREACHABLE) from None
    click.echo(f"{loc.namespace} {identity}: removed {loc.describe()}")
