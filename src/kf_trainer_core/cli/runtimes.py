"""``kf-trainer runtimes list|get``: the (Cluster)TrainingRuntimes jobs can use."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from kf_trainer_core.cli._output import (
    device_text,
    dump,
    key_values,
    output_option,
    show_list,
)
from kf_trainer_core.cli._where import make_client, where_options


def _data(info: Any) -> dict[str, Any]:
    data = dataclasses.asdict(info)
    data["replicated_jobs"] = list(info.replicated_jobs)
    data["launcher"] = info.launcher
    return data


def _row(info: Any) -> list[str]:
    device = device_text(info.device, info.device_count)
    return [info.name, info.kind, info.framework, str(info.num_nodes), device, info.image or "-"]


@click.group("runtimes")
def runtimes() -> None:
    """The runtimes jobs can name."""


KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")


@runtimes.command("list")
@where_options
@click.option("--kind", type=click.Choice(KINDS), help="Only runtimes of this kind.")
@output_option
@click.pass_context
def list_runtimes(ctx: click.Context, kind: str | None, output: str) -> None:
    """Cluster-wide and namespaced runtimes."""
    found = make_client(ctx, creates=True).list_runtimes()  # built-in ones need no job
    found = [info for info in found if kind is None or info.kind == kind]
    headers = ["NAME", "KIND", "FRAMEWORK", "NODES", "DEVICE", "IMAGE"]
    show_list(found, output, headers, _row, data=_data)


@runtimes.command("get")
@click.argument("name")
@where_options
@click.option(
    "--kind",
    type=click.Choice(KINDS),
    help="Which kind (default: the ClusterTrainingRuntime of that name, else the "
    "namespace's TrainingRuntime).",
)
@output_option
@click.pass_context
def get_runtime(ctx: click.Context, name: str, kind: str | None, output: str) -> None:
    """One runtime: framework, steps, nodes, devices, image."""
    from kf_trainer_core.errors import RuntimeNotFoundError

    client = make_client(ctx, creates=True)
    try:
        info = client.get_runtime(name, kind or KINDS[0])
    except RuntimeNotFoundError as missing:
        if kind is not None:
            raise
        # What `runtimes list` shows, `runtimes get` finds: a namespaced runtime too.
        try:
            info = client.get_runtime(name, KINDS[1])
        except RuntimeNotFoundError:
            raise missing from None
    data = _data(info)
    if output != "table":
        dump(data, output)
        return
    key_values((key, _text(value)) for key, value in data.items())


def _text(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
    return value
